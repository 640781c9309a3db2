"""Reusing a symbolic library for a graph dynamo specialised.

dynamo specialises sizes 0 and 1, gives equal sizes one symbol (duck sizing), and its
automatic-dynamic mode traces a first graph with every size fixed. Each such graph reaches braze
as a new graph. When a region's IR equals the IR of a region braze compiled before with symbols,
once those symbols are bound to the sizes (or the shared symbol) this graph has, the symbolic
library serves it and no C compiler runs. Both sides are compared in canonical form (after
canonicalize, constant folding, CSE and DCE, which drop what a size of 1 makes trivial, such as an
expand to the same shape or a tile by ones), with value names normalised. Equal IR computes the
same values, so a reuse never changes an answer, with one exception for gradients below.

A graph specialised to a batch of 1 may return fewer values than its general graph: a gradient
summed over the batch (``sum_to_size``) is the gradient itself at a batch of 1, so torch passes it on
and the general region's extra output (the sum) is the same value as another of its outputs. Results
are compared as the distinct values they are, and the instance takes its outputs from the positions
that hold them (``Match.pick``). In a backward graph (``grad_sums``), a sum over dims that are all 1
compares as the value summed. That is exact but for the sign of a zero: the library's sum of one
-0.0 gives +0.0, as torch's ``sum`` does, where the specialised graph passes the -0.0 on. A
gradient's sign of zero changes no optimizer step, and the alternative is a native compile for a
batch of 1 in the middle of training.

What a region bakes in compares by content, never by address (``weight_key``): a tensor the graph
holds by its bytes, a frozen weight (``freeze=True``) as the same tensor object at the same
version. The table holds its libraries weakly (a library no compiled function holds is gone from
it), at most ``MAX_ENTRIES`` of them, and ``torch._dynamo.reset()`` empties it.
"""

from __future__ import annotations

import json
import re
import threading
import weakref

import numpy as np

from .. import log as _logging
from ..ir import sym as S
from ..ir.graph import Module
from ..ir.types import TensorType

_log = _logging.get("plugin")
MAX_ENTRIES = 256
_lock = threading.Lock()
_libraries: dict[tuple, list] = {}  # input dtypes and ranks -> [_Entry], least recently used first
_VALUE_RE = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[\w.]+)')
_CONST_RE = re.compile(r'constant\(\) \{name=("(?:[^"\\]|\\.)*")\}')
_LOC_RE = re.compile(r"  loc\{.*$", re.M)


class Same:
    """A frozen weight's identity: this tensor object, at this version (``_version`` counts its
    in-place writes). Equal only while the tensor lives; never an address."""

    __slots__ = ("ref", "version")

    def __init__(self, t):
        self.ref, self.version = weakref.ref(t), t._version

    def __eq__(self, other):
        t = self.ref()
        return isinstance(other, Same) and t is not None and t is other.ref() and self.version == other.version

    def __hash__(self):
        return hash(self.version)

    def __repr__(self):
        return f"<same tensor, version {self.version}>"


def weight_key(t, frozen: bool):
    """How a tensor a region bakes in compares: a 0-d value by value; a frozen weight by
    identity and version (``Same``); anything else the graph holds by its bytes."""
    if t.dim() == 0:
        return ("value", t.item(), str(t.dtype))
    if frozen:
        return Same(t)
    a = t.detach().cpu().contiguous()
    return ("bytes", str(a.dtype), tuple(a.shape), a.numpy().tobytes())


class Match:
    """A library that serves a region: ``pick`` is, per result of the region, the position of the
    library's output that holds it (None: the same outputs in the same order)."""

    __slots__ = ("model", "pick")

    def __init__(self, model, pick: tuple[int, ...] | None = None):
        self.model, self.pick = model, pick


class _Entry:
    __slots__ = ("module", "weights", "model")

    def __init__(self, module, weights, model):
        self.module, self.weights, self.model = module, weights, weakref.ref(model)


def _signature(m: Module) -> tuple:
    """Input dtypes and ranks, and which input each donated result is made in (by position): a
    library writes into its caller's buffers only for regions that donate the same ones."""
    f = m.main
    given = m.donated.get(f.name, {})
    index = {p.name: i for i, p in enumerate(f.params)}
    return (tuple((p.type.dtype, p.type.rank) for p in f.params),
            tuple(sorted((index.get(name, -1), k) for name, k in given.items())))


def remember(m: Module, weights: dict, model) -> None:
    """Keep a region (as imported) for later graphs; ``weights``: constant -> its ``weight_key``.
    The weights' data is dropped: the library holds its own. Static regions too: a graph
    specialised to a size of 1 holds copies of its general graph's regions whose sizes never
    depended on it."""
    from ..passes.common import copy_module
    kept = copy_module(m)
    for name in weights:
        kept.constants[name] = None
    with _lock:
        _dynamo_reset_check()
        _libraries.setdefault(_signature(m), []).append(_Entry(kept, weights, model))
        _bound()


def _bound() -> None:
    """Drop entries whose library is gone, then the least recently used beyond MAX_ENTRIES."""
    for key in list(_libraries):
        live = [e for e in _libraries[key] if e.model() is not None]
        if live:
            _libraries[key] = live
        else:
            del _libraries[key]
    extra = sum(map(len, _libraries.values())) - MAX_ENTRIES
    while extra > 0:
        key = next(iter(_libraries))  # the oldest signature's oldest entry
        _libraries[key].pop(0)
        if not _libraries[key]:
            del _libraries[key]
        extra -= 1


def size() -> int:
    """Libraries the table holds now."""
    with _lock:
        _dynamo_reset_check()
        _bound()
        return sum(map(len, _libraries.values()))


def clear() -> None:
    with _lock:
        _libraries.clear()


_sentinel = None


def _dynamo_reset_check() -> None:
    """Empty the table when ``torch._dynamo.reset()`` ran since the last look: reset clears
    dynamo's compile callbacks, and a no-op callback of braze's going missing tells (reset has
    no hook of its own). Under _lock."""
    global _sentinel
    try:
        from torch._dynamo.callback import callback_handler
        registered = callback_handler.start_callbacks
    except (ImportError, AttributeError):  # another torch: the weak references still free the table
        return
    if _sentinel is not None and any(cb is _sentinel for cb in registered):
        return
    if _sentinel is not None:
        _libraries.clear()

    def _sentinel_cb(args):  # a new object each time: reset's clear is what it detects
        return None
    _sentinel = _sentinel_cb
    callback_handler.register_start_callback(_sentinel)


def _compiled_with(opts) -> tuple:
    """The options a library's code or calls depend on: one compiled for another target, under
    another precision, thread count or tuning setting (its GEMMs' dispatch tables), or that keeps
    its outputs for reuse where this graph must not, is not this graph's, whatever its IR."""
    return (opts.target, opts.precision, opts.precision_keep, opts.threads, opts.adapt_threads,
            opts.reuse_outputs, opts.tune, opts.tune_db) if opts is not None else None


def find(m: Module, weights: dict, name: str = "region", opts=None, grad_sums: bool = False) -> Match | None:
    """A compiled model whose symbolic IR, with symbols bound, computes ``m``'s results, compiled
    with ``opts``' precision and threads; or None (the reasons go to the log at BRAZE_DEBUG >= 1).
    ``grad_sums``: ``m`` is a backward graph's region (sums over dims of 1 are the value summed)."""
    with _lock:
        _dynamo_reset_check()
        entries = list(_libraries.get(_signature(m), ()))
    mine, why = None, []
    for entry in reversed(entries):  # the most recent first
        model = entry.model()
        if model is None:
            continue
        if len(entry.module.main.results) < len(m.main.results):
            why.append(f"the library has {len(entry.module.main.results)} outputs, this region "
                       f"{len(m.main.results)}")
            continue
        if opts is not None and _compiled_with(getattr(model, "options", None)) != _compiled_with(opts):
            why.append(f"compiled with other options ({_compiled_with(model.options)})")
            continue
        env, reason = bind_params(entry.module, m, explain=True)
        if env is None:
            why.append(reason)
            continue
        if mine is None:
            mine = canonical(m, weights, grad_sums)
        theirs = canonical(specialize(entry.module, env), entry.weights, grad_sums)
        if theirs[:2] == mine[:2] and not (m.donated and theirs[2] != mine[2]):  # donated: outputs in place
            with _lock:  # most recently used last
                group = _libraries.get(_signature(m), [])
                if entry in group:
                    group.remove(entry)
                    group.append(entry)
            return Match(model, _pick(theirs[2], mine[2]))
        why.append(_difference(theirs, mine))
    if not entries:
        why.append("no library with these input dtypes and ranks")
    _log.info("braze plugin: %s is not an instance of a library braze holds: %s", name, "; ".join(why))
    return None


def _pick(theirs: tuple[int, ...], mine: tuple[int, ...]) -> tuple[int, ...] | None:
    """Per result of the region, the library's output position with the same distinct value
    (``canonical``'s third part: each result's distinct-value number); None for the identity."""
    if theirs == mine:
        return None
    first = {}
    for pos, u in enumerate(theirs):
        first.setdefault(u, pos)
    return tuple(first[u] for u in mine)


def _difference(theirs: tuple, mine: tuple) -> str:
    """The first line where two canonical forms differ, or the first constant."""
    a, b = theirs[0].splitlines(), mine[0].splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"the IR differs at line {i + 1}: {x.strip()!r} (general) vs {y.strip()!r} (this graph)"
    if len(a) != len(b):
        return f"the IR has {len(a)} lines (general) vs {len(b)} (this graph)"
    for i, (x, y) in enumerate(zip(theirs[1], mine[1])):
        if x != y:
            return f"constant k{i} differs"
    return "the IR differs"


def bind_params(general: Module, special: Module, explain: bool = False):
    """symbol -> size, binding the general inputs' symbolic dims to the special inputs' dims; None
    when they do not bind. Plain symbols bind first, from every input; then each dim that is an
    expression of them must equal its counterpart. With ``explain``: (that, why not)."""
    env: dict = {}
    store = general.constraints

    def no(why):
        return (None, why) if explain else None
    pairs = list(zip(general.main.params, special.main.params))
    for i, (p, q) in enumerate(pairs):
        where = f"input {i} (%{q.name})"
        if p.type.dtype != q.type.dtype or p.type.rank != q.type.rank:
            return no(f"{where} is {q.type}, the library's {p.type}")
        for j, (a, b) in enumerate(zip(p.type.shape, q.type.shape)):
            if not isinstance(a, S.Sym):
                continue
            sym = _declared(store, a)
            if isinstance(b, S.Sym):  # the special range must lie inside
                sb = _declared(special.constraints, b)
                if sb.lo < max(1, sym.lo) or (sym.hi is not None and (sb.hi is None or sb.hi > sym.hi)):
                    return no(f"{where} dim {j}: the range of {b} is not inside that of {a}")
            if a in env and S.as_intlike(env[a]) != S.as_intlike(b):
                return no(f"{where} dim {j}: {a} would be both {env[a]} and {b}")
            if isinstance(b, int) and (b < max(1, sym.lo) or (sym.hi is not None and b > sym.hi)):
                return no(f"{where} dim {j}: {b} is outside the range of {a}")
            env[a] = b
    for i, (p, q) in enumerate(pairs):
        where = f"input {i} (%{q.name})"
        for j, (a, b) in enumerate(zip(p.type.shape, q.type.shape)):
            if isinstance(a, S.Sym):
                continue
            if S.is_symbolic(a):
                if not S.free_syms(a) <= env.keys() or S.as_intlike(S.subs(a, env)) != S.as_intlike(b):
                    return no(f"{where} dim {j}: {a} does not bind to {b}")
            elif S.is_symbolic(b) or a != b:
                return no(f"{where} dim {j} is {b}, the library's {a}")
    return (env, "") if explain else env


def _declared(store, s: S.Sym) -> S.Sym:
    """The symbol with the range its module declares."""
    d = store.symbol(s.name)
    return s if d is None else d


def _subs(x, env):
    if isinstance(x, S.SymExpr):
        return S.subs(x, env)
    if isinstance(x, list):
        return [_subs(v, env) for v in x]
    if isinstance(x, tuple):
        return tuple(_subs(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _subs(v, env) for k, v in x.items()}
    return x


def specialize(m: Module, env: dict) -> Module:
    """A copy of ``m`` with the symbols in ``env`` replaced by their values, in every type and attribute."""
    from ..passes.common import copy_module
    out = copy_module(m)
    for f in out.functions.values():
        for v in [*f.params, *(o for n in f.nodes for o in n.outputs)]:
            v.type = TensorType(v.type.dtype, tuple(S.subs(d, env) for d in v.type.shape))
        for n in f.nodes:
            n.attrs = _subs(n.attrs, env)
    return out


def canonical(m: Module, weights: dict, grad_sums: bool = False) -> tuple:
    """The main function's text after canonicalize, constant folding (weights left alone), CSE and
    DCE, with names numbered in order of appearance and each distinct result returned once; each
    constant it uses as a weight fingerprint or its bytes; and per result, the number of its
    distinct value. ``grad_sums``: a ``reduce_sum`` over dims that are all 1 is first the value it
    sums (module docstring)."""
    from ..ir.printer import print_function
    from ..passes import canonicalize, constant_fold, cse, dce
    from ..passes.common import copy_module
    c = copy_module(m)
    for name in weights:  # opaque: folding never copies a weight, and weights compare by fingerprint
        c.constants[name] = None
    if grad_sums:
        for n in c.main.nodes:
            shape = n.inputs[0].type.shape if n.inputs else ()
            axes = n.attrs.get("axes")
            if n.op == "reduce_sum" and all(shape[a] == 1 for a in (range(len(shape)) if axes is None else axes)):
                n.op, n.attrs = "reshape", {"shape": list(n.outputs[0].type.shape)}
    for p in (canonicalize, constant_fold, cse, dce):
        c = p(c) or c
    distinct: dict[int, int] = {}
    numbers = tuple(distinct.setdefault(id(r), len(distinct)) for r in c.main.results)
    seen = set()
    c.main.results = [r for r in c.main.results if id(r) not in seen and not seen.add(id(r))]
    text = _LOC_RE.sub("", print_function(c, c.main))
    consts: list = []
    cids: dict[str, str] = {}

    def const(mt):
        name = json.loads(mt.group(1))
        if name not in cids:
            cids[name] = f"k{len(cids)}"
            if name in weights:
                consts.append(weights[name])
            else:
                arr = np.asarray(c.constants[name])
                consts.append((str(arr.dtype), arr.shape, arr.tobytes()))
        return f"constant() {{{cids[name]}}}"

    ids: dict[str, str] = {}

    def value(mt):
        return ids.setdefault(mt.group(0), f"%{len(ids)}")

    text = _CONST_RE.sub(const, text)
    return _VALUE_RE.sub(value, text), tuple(consts), numbers
