"""A generator of random, well-typed graph functions over the ops braze claims.

``generate(seed)`` builds one graph function (``@g<seed>``) as braze IR with
``braze.ops.Builder``; ``generate(seed, module=m)`` builds it into a shared module
(several graphs, one compile). The same seed gives the same function text whatever
module it is built into: symbols (``s<seed>_<i>``) and constants (``k<seed>_<i>``)
are named by the seed.

How a graph is grown (NNSmith-style): pick an op kind, then an op of that kind
from the registry (``braze.ops.all_ops()``), then let the op's proposer pick
operands from the values built so far (or new parameters and constants) and
attributes. The candidate node is checked with the op's own shape inference on
a copy of the constraint store, and skipped when inference rejects it or would
record a new constraint (the runs must stay free to pick any symbol values).
Its output shapes are evaluated at the run shapes (chosen first, per symbol)
and the candidate is skipped when a dim would be negative or the tensor too big.
Ops without a proposer of their own get one by kind and arity, so a new op in
the registry is generated without touching this file.

Each value carries what the tolerance model needs: ``exact`` (native and
reference must agree bit for bit: no rounding happened, or only in ops that
round the same way everywhere), ``special`` (may hold inf/nan/huge values) and
``ibound`` (a bound on |value| for integers, to keep clear of overflow).
Discontinuous ops (floor, round, sign, comparisons, argmax, casts to int, the
condition of ``where``, gather indices) only take exact operands: a last-bit
difference upstream would otherwise flip them and report a false mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import BrazeError
from ..ir import sym as S
from ..ir.graph import Module, Value
from ..ir.sym import Sym
from ..ir.types import TensorType
from ..ops import Builder, all_ops
from ..ops.registry import InferCtx
from .common import BOOL, F32, STATIC_DIMS, GVal, New, Reject
from .operands import INT_LIMIT, choose_op, props
from .proposers import PROPOSERS, UNFUZZED, propose_generic

MAX_NUMEL = 6000  # elements of any value at any run shape (keeps the reference fast)
RUN_VALUES = (0, 1, 2, 3, 5, 7, 8, 13, 17, 33)  # symbol values the runs draw from


@dataclass
class Config:
    """Knobs of the generator; the defaults are what the tests and scripts/fuzz.py use."""

    min_nodes: int = 3
    max_nodes: int = 14
    p_special: float = 0.2       # share of graphs whose float inputs hold inf/nan/+-0/huge values
    p_zero_d: float = 0.03       # chance that a new parameter is 0-d
    p_zero_size: float = 0.15    # share of graphs whose symbols may be 0 (0-sized dims)
    n_runs: int = 2              # run shapes per graph (each symbol takes a new value)
    ops: tuple[str, ...] | None = None  # restrict to these ops (None: every claimed op)


@dataclass
class ParamSpec:
    """How to draw a parameter's data at a run shape."""

    value: Value
    special: bool
    index_dim: object = None
    low: float | None = None
    high: float | None = None
    scale: float = 1.0


@dataclass
class RandomGraph:
    seed: int
    module: Module
    func: str
    params: list[ParamSpec]
    envs: list[dict[str, int]]
    op_counts: dict[str, int]
    special: bool
    syms: list = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def function(self):
        return self.module.functions[self.func]

    def inputs(self, run: int) -> list[np.ndarray]:
        """The arrays for run ``run`` (drawn from the seed, so a re-run sees the same data)."""
        rng = np.random.default_rng([self.seed, 7, run])
        env = self.envs[run]
        return [_draw(rng, p, env) for p in self.params]

    def alone(self) -> Module:
        """A module with this graph only: its function, symbols and constants."""
        from ..passes.common import copy_module
        m = copy_module(self.module)
        one = Module()
        one.functions[self.func] = m.functions[self.func]
        used = {n.attrs["name"] for n in one.functions[self.func].nodes if n.op == "constant"}
        one.constants = {k: v for k, v in m.constants.items() if k in used}
        for s in self.syms:
            one.constraints.add_symbol(s)
        return one

    def text(self) -> str:
        """The IR text of this graph alone."""
        return self.alone().to_text()


SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0e38, -3.0e38, 1.0e30, 1.0e-40, -1.0e-40, 65504.0])


def _draw(rng, p: ParamSpec, env) -> np.ndarray:
    t = p.value.type
    shape = t.concrete_shape(env)
    dt = t.dtype
    if p.index_dim is not None:
        d = S.evaluate(p.index_dim, env)
        return rng.integers(-d, d, size=shape).astype(dt.numpy) if d > 0 else np.zeros(shape, dt.numpy)
    if dt is BOOL:
        return rng.random(shape) < 0.5
    if dt.is_int:
        lo = -5 if p.low is None else int(p.low)
        hi = 6 if p.high is None else int(p.high)
        return rng.integers(lo, hi, size=shape).astype(dt.numpy)
    if p.low is not None and p.low >= 0:
        x = rng.uniform(0.1, 2.0, size=shape) * p.scale
    else:
        x = rng.standard_normal(shape) * p.scale
    if p.special and x.size:
        mask = rng.random(shape) < 0.25
        x = np.where(mask, rng.choice(SPECIALS, size=shape), x)
    return x.astype(dt.numpy)


# ---------------------------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------------------------


class Generator:
    def __init__(self, seed: int, module: Module | None = None, config: Config | None = None):
        self.seed = seed
        self.cfg = config or Config()
        self.rng = np.random.default_rng(seed)
        self.module = module if module is not None else Module()
        self.func = f"g{seed}"
        self.b = Builder(self.module, func_name=self.func)
        self.pool: list[GVal] = []
        self.params: list[ParamSpec] = []
        self.op_counts: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.special = bool(self.rng.random() < self.cfg.p_special)
        self._nconst = 0
        self._make_symbols()

    # --- symbols and run shapes ------------------------------------------------------------
    def _make_symbols(self):
        rng = self.rng
        zero_ok = rng.random() < self.cfg.p_zero_size
        self.syms: list[Sym] = []
        for i in range(int(rng.integers(1, 4))):
            lo = 0 if zero_ok and rng.random() < 0.7 else 1
            hi = [None, 8, 17, 40][int(rng.integers(0, 4))]
            self.syms.append(self.b.sym(f"s{self.seed}_{i}", lo, hi))
        self.envs = []
        for _ in range(max(2, self.cfg.n_runs)):
            env = {}
            for s in self.syms:
                choices = [v for v in RUN_VALUES if v >= s.lo and (s.hi is None or v <= s.hi)]
                prev = [e[s.name] for e in self.envs]
                fresh = [v for v in choices if v not in prev] or choices
                env[s.name] = int(rng.choice(fresh))
            self.envs.append(env)

    def dim(self, allow_zero: bool = False):
        """A dim for a new tensor: a symbol or a small static size."""
        r = self.rng.random()
        if r < 0.45:
            return self.syms[int(self.rng.integers(0, len(self.syms)))]
        if allow_zero and r > 0.985:
            return 0
        return int(self.rng.choice(STATIC_DIMS))

    def shape(self, rank: int | None = None):
        if rank is None:
            rank = 0 if self.rng.random() < self.cfg.p_zero_d else int(self.rng.choice([1, 2, 2, 3, 3, 4]))
        return tuple(self.dim(allow_zero=True) for _ in range(rank))

    def evals(self, d) -> list[int]:
        return [S.evaluate(d, e) for e in self.envs]

    def min_val(self, d) -> int:
        """The smallest value of ``d`` at the run shapes."""
        return min(self.evals(d))

    def always_pos(self, d) -> bool:
        return self.min_val(d) >= 1

    # --- picking operands ------------------------------------------------------------------
    def choice(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def pick(self, pred=lambda g: True, fresh_ok: bool = True, fresh_type=None) -> GVal | New | None:
        """A value of the pool that satisfies ``pred``, else a new one. Recent values and values
        nothing reads yet are more likely: chains, not wide graphs, so that fusion, the memory
        plan and the schedules get long groups to work on (and the graph few results)."""
        cands = [g for g in self.pool if pred(g)]
        if cands and (not fresh_ok or self.rng.random() < 0.85):
            w = np.array([(1.0 + i) ** 2 * (6.0 if g.uses == 0 else 1.0) for i, g in enumerate(cands)])
            return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]
        if not fresh_ok:
            return None
        return self.new(fresh_type or TensorType(F32, self.shape()))

    def new(self, t: TensorType, const: bool | None = None, **kw) -> New:
        if const is None:
            const = self.rng.random() < 0.25 and t.is_static()
        n = New(t, const=const and t.is_static(), **kw)
        if n.index_dim is not None and not isinstance(n.index_dim, int):
            n.const = False  # its range depends on the run's symbols
        if n.const:
            n.data = self._const_data(n)
        return n

    def _const_data(self, n: New) -> np.ndarray:
        shape = tuple(int(d) for d in n.type.shape)
        dt = n.type.dtype
        rng = self.rng
        if n.index_dim is not None:
            d = int(n.index_dim)
            return rng.integers(-d, d, size=shape).astype(dt.numpy) if d else np.zeros(shape, dt.numpy)
        if dt is BOOL:
            return rng.random(shape) < 0.5
        if dt.is_int:
            return rng.integers(-5 if n.low is None else int(n.low), 6 if n.high is None else int(n.high),
                                size=shape).astype(dt.numpy)
        if n.low is not None and n.low >= 0:
            return rng.uniform(0.1, 2.0, size=shape).astype(dt.numpy)
        return (rng.standard_normal(shape) * (1.0 if n.high is None else n.high)).astype(dt.numpy)

    def like(self, shape, dtype=F32, const=None, **kw) -> New:
        """A new operand broadcast-compatible with ``shape``: some dims 1, some leading dims dropped."""
        dims = list(shape)
        if dims and self.rng.random() < 0.3:
            dims = dims[int(self.rng.integers(0, len(dims) + 1)):]
        dims = [1 if self.rng.random() < 0.3 else d for d in dims]
        return self.new(TensorType(dtype, tuple(dims)), const=const, **kw)

    def fval(self, pred=lambda g: True, **kw):
        """A float operand (float32 mostly)."""
        return self.pick(lambda g: g.dtype.is_float and pred(g), **kw)

    # --- emitting -----------------------------------------------------------------------------
    def _type(self, x) -> TensorType | None:
        return None if x is None else (x.type if isinstance(x, New) else x.t)

    def check(self, op: str, inputs, attrs) -> list[TensorType]:
        """The candidate's output types by the op's shape inference on a copy of the store;
        Reject when inference refuses, records a constraint, or a dim is negative or too big."""
        opdef = all_ops()[op]
        err = opdef.check_arity(len(inputs))
        if err:
            raise Reject(err)
        store = self.module.constraints.copy()
        nfacts = len(store.facts)
        ctx = InferCtx(op, store, None, self.module.constants, module=self.module)
        try:
            full = opdef.complete_attrs(attrs)
            out = opdef.infer(ctx, *[self._type(x) for x in inputs], **full)
        except BrazeError as e:
            raise Reject(f"inference: {e.what}") from None
        if len(store.facts) != nfacts:
            raise Reject("would record a constraint")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for t in outs:
            for env in self.envs:
                shp = t.concrete_shape(env)
                if any(d < 0 for d in shp) or int(np.prod(shp)) > MAX_NUMEL:
                    raise Reject(f"shape {shp} at {env}")
        return outs

    def materialize(self, x) -> GVal | None:
        if x is None or isinstance(x, GVal):
            return x
        if x.const:
            name = f"k{self.seed}_{self._nconst}"
            self._nconst += 1
            v = self.b.constant(x.data, name=name)
            g = GVal(v, exact=True, special=False, ibound=float(np.abs(x.data).max(initial=0)))
        else:
            v = self.b.param(f"x{len(self.params)}", x.type)
            spec = ParamSpec(v, special=self.special and x.type.dtype.is_float and x.index_dim is None,
                             index_dim=x.index_dim, low=x.low, high=x.high,
                             scale=float(self.choice([1.0, 1.0, 1.0, 1e-3, 1e3])) if x.type.dtype.is_float else 1.0)
            self.params.append(spec)
            ib = float(max(abs(x.low or 5), abs(x.high or 6)))
            if x.index_dim is not None:
                ib = float(max(self.evals(x.index_dim)))
            g = GVal(v, exact=True, special=spec.special, ibound=1.0 if x.type.dtype is BOOL else ib)
        self.pool.append(g)
        return g

    def emit(self, op: str, inputs, attrs, exact=None, ibound=None) -> list[GVal]:
        """Check the candidate, create its new operands, add the node; the outputs' GVals.
        ``exact``/``ibound``: the outputs' (default: all operands exact / the largest bound)."""
        outs = self.check(op, inputs, attrs)
        pr = [props(self, x) for x in inputs if x is not None]
        ex = all(p[0] for p in pr) if exact is None else exact
        sp = any(p[1] for p in pr)
        ib = max([p[2] for p in pr], default=1.0) if ibound is None else ibound
        if any(t.dtype.is_int for t in outs) and ib > INT_LIMIT:
            raise Reject("integer bound")
        gins = [self.materialize(x) for x in inputs]
        for g in gins:
            if g is not None:
                g.uses += 1
        vals = self.b.op(op, [None if g is None else g.v for g in gins], **attrs)
        vals = list(vals) if isinstance(vals, tuple) else [vals]
        res = [GVal(v, exact=ex, special=sp, ibound=1.0 if v.type.dtype is BOOL else ib) for v in vals]
        self.pool.extend(res)
        self.op_counts[op] = self.op_counts.get(op, 0) + 1
        return res

    # --- the main loop ----------------------------------------------------------------------------
    def run(self) -> RandomGraph:
        n_nodes = int(self.rng.integers(self.cfg.min_nodes, self.cfg.max_nodes + 1))
        ops = [o for o in all_ops() if o not in ("constant", "fused") and o not in UNFUZZED]
        if self.cfg.ops is not None:
            ops = [o for o in ops if o in self.cfg.ops]
        built, tries = 0, 0
        while built < n_nodes and tries < 20 * n_nodes:
            tries += 1
            op = choose_op(self, ops)
            try:
                PROPOSERS.get(op, propose_generic)(self, op)
                built += 1
            except Reject as e:
                key = f"{op}: {str(e).split(':')[0]}"
                self.skipped[key] = self.skipped.get(key, 0) + 1
        return self.finish()

    def finish(self) -> RandomGraph:
        used = set()
        f = self.b.func
        for n in f.nodes:
            used.update(id(v) for v in n.inputs if v is not None)
        sinks = [g.v for g in self.pool if id(g.v) not in used and g.v.producer is not None
                 and g.v.producer.op != "constant"]
        if not sinks:  # nothing was built: return a param (the identity graph)
            g = self.pool[-1] if self.pool else self.materialize(self.new(TensorType(F32, self.shape())))
            sinks = [g.v]
        # every symbol must be bound by a plain dim of some parameter
        bound = {d.name for p in f.params for d in p.type.shape if isinstance(d, Sym)}
        for s in self.syms:
            free = any(s in t.free_syms() for t in [p.type for p in f.params] + [v.type for n in f.nodes
                                                                                for v in n.outputs])
            if free and s.name not in bound:
                self.materialize(New(TensorType(F32, (s,))))
        self.b.ret(*sinks)
        return RandomGraph(self.seed, self.module, self.func, self.params, self.envs, self.op_counts,
                           self.special, list(self.syms), self.skipped)


def generate(seed: int, module: Module | None = None, config: Config | None = None) -> RandomGraph:
    """One random graph function ``@g<seed>`` (built into ``module`` when given)."""
    return Generator(seed, module, config).run()


def generate_batch(seeds, config: Config | None = None) -> tuple[Module, list[RandomGraph]]:
    """Several random graphs in one module: one function each, one compile for all."""
    m = Module()
    return m, [generate(s, m, config) for s in seeds]
