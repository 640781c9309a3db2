"""Lowering graph sub-functions to loop-IR kernels (define-by-run, as TorchInductor).

Each op registers ``fn(ctx, *inputs, **attrs)`` with ``@lowering("name", ...)``
(which sets ``OpDef.lower``). Every input is a ``TensorFn``: call it with an
index tuple (one ``IntLike`` or integer ``Expr`` per dim) to get the scalar
``Expr`` of that element; the lowering returns an index function for its
output (a ``TensorFn`` or any callable ``idx -> Expr``). Intermediates are
thus inlined into their consumers; a reduction becomes a ``Reduce``
expression, which the schedule hoists out of the loops it does not depend on
(so layer_norm / softmax / rms_norm become one row-parallel "stitch" kernel
that reads the row once per reduction phase).

Entry points:

    lower_function(func, module=None, name=None) -> Kernel   # unscheduled
    build_kernel(func, module=None, name=None) -> Kernel     # lowered + default schedule
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import BrazeError
from ..ir import loop as L
from ..ir import sym as S
from ..ir.graph import ConstantRef, Function, Module
from ..ir.loop import (Binary, Buffer, Cast, Compare, Const, Expr, For, IndexValue, Kernel, Load, Reduce,
                       Select, Store, Unary)
from ..ir.sym import IntLike
from ..ir.types import DType, TensorType
from .builder import sanitize
from .common import promote
from .registry import get_op

I64 = DType.int64
BOOL = DType.bool

# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


def lowering(*names: str):
    """Register ``fn(ctx, *inputs, **attrs)`` as the loop lowering of ops ``names``."""

    def deco(fn):
        for n in names:
            get_op(n).lower = fn
        return fn

    return deco


def lowered_ops() -> list[str]:
    from .registry import all_ops
    return sorted(n for n, op in all_ops().items() if op.lower is not None)


# ---------------------------------------------------------------------------
# tensor index functions and the lowering context
# ---------------------------------------------------------------------------


class TensorFn:
    """An index function ``idx -> Expr`` with the tensor's type. Calls are memoized
    per index, so the same element requested twice is the same Expr object."""

    __slots__ = ("fn", "type", "_memo")

    def __init__(self, fn: Callable, type: TensorType):
        self.fn = fn
        self.type = type
        self._memo: dict = {}

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    def __call__(self, idx) -> Expr:
        idx = tuple(idx)
        if len(idx) != self.rank:
            raise BrazeError(f"lowering bug: index {idx} has {len(idx)} entries for a tensor {self.type}")
        try:
            return self._memo[idx]
        except KeyError:
            pass
        except TypeError:
            return self._call(idx)
        e = self._call(idx)
        self._memo[idx] = e
        return e

    def _call(self, idx):
        e = self.fn(idx)
        if not isinstance(e, Expr):
            raise BrazeError(f"lowering bug: index function returned {type(e).__name__}, expected an Expr")
        return cast(e, self.dtype)


class LowerCtx:
    """What an op's lowering may consult: its node, output types, the module."""

    def __init__(self, node, module: Module | None, state: "_State"):
        self.node = node
        self.module = module
        self._state = state
        self.out_types = [v.type for v in node.outputs]

    @property
    def out_type(self) -> TensorType:
        return self.out_types[0]

    def error(self, what: str, hint: str | None = None) -> BrazeError:
        return BrazeError(f"lowering {self.node.op}: {what}", where=str(self.node.loc) if self.node.loc else None,
                          hint=hint)

    def memo(self, key, build: Callable):
        """Build once per key (per node): keeps shared sub-results (a row's max) one object."""
        d = self._state.memo.setdefault(id(self.node), {})
        if key not in d:
            d[key] = build()
        return d[key]

    def reduce(self, op: str, body: Callable, extents, dtype: DType) -> Reduce:
        """``op`` over fresh loop vars with ``extents``; ``body(vars) -> Expr``."""
        vs = [L.loop_var(e, "r") for e in extents]
        b = body(vs)
        if op not in ("argmax", "argmin"):
            b = cast(b, dtype)
        return Reduce(op, b, tuple(zip(vs, extents)), dtype)


class _State:
    def __init__(self):
        self.memo: dict = {}


# ---------------------------------------------------------------------------
# expression helpers
# ---------------------------------------------------------------------------


def const(v, dt: DType) -> Const:
    if dt.is_float:
        return Const(float(v), dt)
    if dt is BOOL:
        return Const(bool(v), dt)
    return Const(int(v), dt)


def cast(e: Expr, dt: DType) -> Expr:
    if e.dtype == dt:
        return e
    if isinstance(e, Const):
        v = e.value
        if dt is BOOL:
            return Const(bool(v), dt)
        if dt.is_float:
            return Const(float(v), dt)
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return Cast(e, dt)
        return Const(int(v), dt)
    return Cast(e, dt)


def _b(op, a: Expr, b: Expr, dt: DType | None = None) -> Expr:
    dt = dt or a.dtype
    return Binary(op, cast(a, dt), cast(b, dt), dt)


def add(a, b): return _b("add", a, b)
def sub(a, b): return _b("sub", a, b)
def mul(a, b): return _b("mul", a, b)
def div(a, b): return _b("div", a, b)
def vmax(a, b): return _b("max", a, b)
def vmin(a, b): return _b("min", a, b)
def un(fn, x): return Unary(fn, x, x.dtype)
def cmp(op, a, b): return Compare(op, a, cast(b, a.dtype))
def select(c, a, b): return Select(cast(c, BOOL), a, cast(b, a.dtype), a.dtype)


def fconst(v, like: Expr) -> Const:
    return const(v, like.dtype)


def intlike_value(x: IntLike, dt: DType) -> Expr:
    """An IntLike as a value of dtype dt."""
    if isinstance(x, int):
        return const(x, dt)
    return cast(IndexValue(x), dt)


# index arithmetic over IntLike | Expr --------------------------------------


def _ie(x) -> Expr:
    return x if isinstance(x, Expr) else IndexValue(x)


def iadd(a, b):
    if isinstance(a, Expr) or isinstance(b, Expr):
        return Binary("add", cast(_ie(a), I64), cast(_ie(b), I64), I64)
    return S.add(a, b)


def imul(a, b):
    if isinstance(a, Expr) or isinstance(b, Expr):
        return Binary("mul", cast(_ie(a), I64), cast(_ie(b), I64), I64)
    return S.mul(a, b)


def _ub(x):
    """A symbolic upper bound of a non-negative index expression, or None."""
    if isinstance(x, int):
        return x
    if isinstance(x, S.Sym):
        if L.is_loop_var(x):
            e = L.loop_extent(x)
            return S.add(e, -1)
        return x
    if isinstance(x, S.Mod):
        if S.bounds(x.b)[0] > 0:
            return S.add(x.b, -1)
        return None
    if isinstance(x, S.FloorDiv):
        u = _ub(x.a)
        if u is None or S.bounds(x.b)[0] <= 0:
            return None
        return S.floordiv(u, x.b)
    if isinstance(x, S.Poly):
        total = 0
        for mono, c in x.terms:
            if c < 0 and mono:
                return None
            t = c
            for a in mono:
                u = _ub(a)
                if u is None:
                    return None
                t = S.mul(t, u)
            total = S.add(total, t)
        return total
    return None


def _nonneg(x) -> bool:
    return S.bounds(x)[0] >= 0


def _in_range(r, b) -> bool:
    """0 <= r < b provably (loop vars below their extents)."""
    if not _nonneg(r):
        return False
    u = _ub(r)
    if u is None:
        return False
    return S.bounds(S.add(S.add(b, S.mul(-1, u)), -1))[0] >= 0


def _split(a, b):
    """a = q*b + r, moving the terms that b divides exactly into q."""
    pb = S._to_poly(b)
    if len(pb) != 1:
        return 0, a
    q: dict = {}
    r: dict = {}
    for m, c in S._to_poly(a).items():
        e = S._poly_exact_div({m: c}, pb)
        if e is None:
            r[m] = c
        else:
            for mm, cc in e.items():
                q[mm] = q.get(mm, 0) + cc
    return S._from_poly(q), S._from_poly(r)


def ifloordiv(a, b):
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, Expr):
        return Binary("div", cast(a, I64), cast(_ie(b), I64), I64)  # indices are >= 0: trunc == floor
    q, r = _split(a, b)
    if isinstance(r, int) and r == 0:
        return q
    if _in_range(r, b):
        return q
    return S.floordiv(a, b)


def imod(a, b):
    if isinstance(b, int) and b == 1:
        return 0
    if isinstance(a, Expr):
        return Binary("mod", cast(a, I64), cast(_ie(b), I64), I64)
    q, r = _split(a, b)
    if _in_range(r, b):
        return r
    return S.mod(a, b)


def _deq(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int):
        return False
    return a == b


def broadcast_to(x: TensorFn, out_shape) -> Callable:
    lead = len(out_shape) - x.rank

    def fn(idx):
        return x(tuple(0 if (isinstance(d, int) and d == 1) else idx[lead + k] for k, d in enumerate(x.shape)))

    return fn


def reshape_index(idx, out_shape, in_shape) -> tuple:
    """Input index of the element at ``idx`` of a row-major reshape."""
    no, ni = len(out_shape), len(in_shape)
    p = 0
    while p < min(no, ni) and _deq(out_shape[p], in_shape[p]):
        p += 1
    s = 0
    while s < min(no, ni) - p and _deq(out_shape[no - 1 - s], in_shape[ni - 1 - s]):
        s += 1
    mid_out = out_shape[p:no - s]
    mid_in = in_shape[p:ni - s]
    flat = 0
    st = 1
    for k in range(len(mid_out) - 1, -1, -1):
        flat = iadd(flat, imul(idx[p + k], st))
        st = S.mul(st, mid_out[k])
    res = []
    for k, d in enumerate(mid_in):
        stride = S.prod(mid_in[k + 1:])
        v = ifloordiv(flat, stride)
        if k > 0:
            v = imod(v, d)
        res.append(v)
    return tuple(idx[:p]) + tuple(res) + tuple(idx[no - s:])


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------

_BIN_IR = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "max",
           "minimum": "min", "remainder": "mod"}


@lowering(*_BIN_IR)
def _lower_binary(ctx, a, b):
    op = ctx.node.op
    out = ctx.out_type
    dt = out.dtype
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    ir = _BIN_IR[op]
    if dt is BOOL:
        ir = {"add": "or", "mul": "and"}.get(ir, ir)
    return lambda idx: Binary(ir, cast(fa(idx), dt), cast(fb(idx), dt), dt)


_CMP_IR = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
           "greater_equal": "ge"}


@lowering(*_CMP_IR)
def _lower_compare(ctx, a, b):
    out = ctx.out_type
    dt = promote(a.dtype, b.dtype)
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    op = _CMP_IR[ctx.node.op]
    return lambda idx: Compare(op, cast(fa(idx), dt), cast(fb(idx), dt))


@lowering("logical_and", "logical_or", "logical_xor")
def _lower_logical(ctx, a, b):
    out = ctx.out_type
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    op = ctx.node.op.split("_")[1]
    return lambda idx: Binary(op, cast(fa(idx), BOOL), cast(fb(idx), BOOL), BOOL)


@lowering("logical_not")
def _lower_not(ctx, x):
    return lambda idx: Unary("not", cast(x(idx), BOOL), BOOL)


_SIMPLE_UNARY = ("exp", "log", "sqrt", "tanh", "erf", "sigmoid", "silu", "sin", "cos", "neg", "abs")


@lowering(*_SIMPLE_UNARY, "rsqrt")
def _lower_unary(ctx, x):
    fn = ctx.node.op
    return lambda idx: un(fn, x(idx))


@lowering("reciprocal")
def _lower_reciprocal(ctx, x):
    return lambda idx: div(fconst(1, x(idx)), x(idx))


@lowering("gelu")
def _lower_gelu(ctx, x, *, approximate):
    fn = "gelu" if approximate == "none" else "gelu_tanh"
    return lambda idx: un(fn, x(idx))


@lowering("relu")
def _lower_relu(ctx, x):
    return lambda idx: vmax(x(idx), fconst(0, x(idx)))


@lowering("floor", "ceil", "round")
def _lower_rounding(ctx, x):
    if not x.dtype.is_float:
        return x
    fn = ctx.node.op
    return lambda idx: un(fn, x(idx))


@lowering("sign")
def _lower_sign(ctx, x):
    def fn(idx):
        v = x(idx)
        z = fconst(0, v)
        return select(cmp("gt", v, z), fconst(1, v), select(cmp("lt", v, z), fconst(-1, v), z))
    return fn


@lowering("hardswish")
def _lower_hardswish(ctx, x):
    def fn(idx):
        v = x(idx)
        t = vmin(vmax(add(v, fconst(3, v)), fconst(0, v)), fconst(6, v))
        return div(mul(v, t), fconst(6, v))
    return fn


@lowering("leaky_relu")
def _lower_leaky(ctx, x, *, alpha):
    def fn(idx):
        v = x(idx)
        return select(cmp("ge", v, fconst(0, v)), v, mul(fconst(alpha, v), v))
    return fn


@lowering("elu")
def _lower_elu(ctx, x, *, alpha):
    def fn(idx):
        v = x(idx)
        neg = mul(fconst(alpha, v), sub(un("exp", vmin(v, fconst(0, v))), fconst(1, v)))
        return select(cmp("gt", v, fconst(0, v)), v, neg)
    return fn


@lowering("softplus")
def _lower_softplus(ctx, x, *, beta, threshold):
    def fn(idx):
        v = x(idx)
        bx = mul(fconst(beta, v), v)
        soft = div(add(vmax(bx, fconst(0, v)), un("log1p", un("exp", un("neg", un("abs", bx))))), fconst(beta, v))
        return select(cmp("gt", bx, fconst(threshold, v)), v, soft)
    return fn


@lowering("hardsigmoid")
def _lower_hardsigmoid(ctx, x, *, alpha, beta):
    def fn(idx):
        v = x(idx)
        return vmin(vmax(add(mul(fconst(alpha, v), v), fconst(beta, v)), fconst(0, v)), fconst(1, v))
    return fn


@lowering("clamp")
def _lower_clamp(ctx, x, *, min, max):
    dt = x.dtype
    lo, hi = min, max
    if not dt.is_float:
        info = np.iinfo(dt.numpy)
        lo = None if lo is None else int(np.clip(math.ceil(lo), info.min, info.max))
        hi = None if hi is None else int(np.clip(math.floor(hi), info.min, info.max))

    def fn(idx):
        v = x(idx)
        if lo is not None:
            v = vmax(v, const(lo, dt))
        if hi is not None:
            v = vmin(v, const(hi, dt))
        return v
    return fn


@lowering("where")
def _lower_where(ctx, c, a, b):
    out = ctx.out_type
    fc, fa, fb = (broadcast_to(t, out.shape) for t in (c, a, b))
    dt = out.dtype
    return lambda idx: Select(cast(fc(idx), BOOL), cast(fa(idx), dt), cast(fb(idx), dt), dt)


@lowering("cast")
def _lower_cast(ctx, x, *, dtype):
    return lambda idx: cast(x(idx), dtype)


# ---------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------


@lowering("arange")
def _lower_arange(ctx, *, start, end, step, dtype):
    from .creation import _is_float
    if any(_is_float(v) for v in (start, end, step)):
        def fn(idx):
            f = add(const(float(start), DType.float64),
                    mul(const(float(step), DType.float64), cast(IndexValue(idx[0]), DType.float64)))
            return cast(f, dtype)
        return fn
    def ifn(idx):
        i = idx[0]
        if isinstance(i, Expr):
            return cast(iadd(S.as_intlike(start), imul(i, int(step))), dtype)
        return intlike_value(S.add(S.as_intlike(start), S.mul(int(step), i)), dtype)
    return ifn


@lowering("full")
def _lower_full(ctx, *, shape, value, dtype):
    c = cast(Const(float(value), DType.float64), dtype)
    return lambda idx: c


@lowering("full_like")
def _lower_full_like(ctx, x, *, value, dtype):
    c = cast(Const(float(value), DType.float64), ctx.out_type.dtype)
    return lambda idx: c


# ---------------------------------------------------------------------------
# shape (views)
# ---------------------------------------------------------------------------


@lowering("reshape")
def _lower_reshape(ctx, x, *, shape):
    out = ctx.out_type.shape
    return lambda idx: x(reshape_index(idx, out, x.shape))


@lowering("flatten")
def _lower_flatten(ctx, x, *, start_axis, end_axis):
    out = ctx.out_type.shape
    return lambda idx: x(reshape_index(idx, out, x.shape))


@lowering("permute")
def _lower_permute(ctx, x, *, perm):
    r = x.rank
    p = [a % r for a in perm]

    def fn(idx):
        src = [None] * r
        for k, a in enumerate(p):
            src[a] = idx[k]
        return x(tuple(src))
    return fn


@lowering("expand")
def _lower_expand(ctx, x, *, shape):
    return broadcast_to(x, ctx.out_type.shape)


@lowering("unsqueeze")
def _lower_unsqueeze(ctx, x, *, axes):
    r = ctx.out_type.rank
    ax = {a % r for a in axes}
    return lambda idx: x(tuple(i for k, i in enumerate(idx) if k not in ax))


@lowering("squeeze")
def _lower_squeeze(ctx, x, *, axes):
    out = ctx.out_type.shape
    if axes is None:
        return lambda idx: x(reshape_index(idx, out, x.shape))
    ax = {a % x.rank for a in axes}

    def fn(idx):
        it = iter(idx)
        return x(tuple(0 if k in ax else next(it) for k in range(x.rank)))
    return fn


def _slice_start(ctx, d, start, step):
    """The first read index of x[start::step] along a dim of size d."""
    from .shape import _norm_bound
    if step > 0 and isinstance(start, int) and start == 0:
        return 0
    return _norm_bound(ctx, start, d, step, "start")


@lowering("slice")
def _lower_slice(ctx, x, *, axis, start, end, step):
    ax = axis % x.rank
    s0 = _slice_start(ctx, x.shape[ax], start, step)

    def fn(idx):
        idx = list(idx)
        idx[ax] = iadd(s0, imul(idx[ax], step))
        return x(tuple(idx))
    return fn


@lowering("split")
def _lower_split(ctx, x, *, axis, sizes):
    ax = axis % x.rank
    outs = []
    off: IntLike = 0
    for s in sizes:
        def fn(idx, off=off):
            idx = list(idx)
            idx[ax] = iadd(idx[ax], off)
            return x(tuple(idx))
        outs.append(fn)
        off = S.add(off, s)
    return tuple(outs)


def _clamp_index(i, d):
    """i clamped into [0, d-1] (keeps speculative loads in bounds)."""
    if isinstance(i, Expr):
        hi = IndexValue(S.add(d, -1))
        return Binary("max", Binary("min", cast(i, I64), hi, I64), Const(0, I64), I64)
    lo, hi = S.bounds(i)
    r = i
    if not _in_range(i, d):
        r = S.smin(r, S.add(d, -1))
    if lo < 0:
        r = S.smax(r, 0)
    return r


@lowering("concat")
def _lower_concat(ctx, *xs, axis):
    out = ctx.out_type
    ax = axis % out.rank
    dt = out.dtype
    offs = []
    o: IntLike = 0
    for x in xs:
        offs.append(o)
        o = S.add(o, x.shape[ax])

    def fn(idx):
        i = idx[ax]
        res = None
        for k in range(len(xs) - 1, -1, -1):
            x = xs[k]
            j = _clamp_index(iadd(i, S.mul(-1, offs[k])), x.shape[ax]) if len(xs) > 1 else i
            sub_idx = list(idx)
            sub_idx[ax] = j
            v = cast(x(tuple(sub_idx)), dt)
            if res is None:
                res = v
            else:
                c = Compare("lt", _ie(i), _ie(S.add(offs[k], x.shape[ax])))
                res = Select(c, v, res, dt)
        return res
    return fn


@lowering("pad")
def _lower_pad(ctx, x, *, pads, mode, value):
    r = x.rank
    begins, ends = pads[:r], pads[r:]
    dt = x.dtype

    def fn(idx):
        src = []
        conds = []
        for k in range(r):
            d = x.shape[k]
            j = iadd(idx[k], S.mul(-1, begins[k]))
            if mode == "constant":
                if not (isinstance(begins[k], int) and begins[k] <= 0):
                    conds.append(Compare("ge", _ie(j), Const(0, I64)))
                if not (isinstance(ends[k], int) and ends[k] <= 0):
                    conds.append(Compare("lt", _ie(j), _ie(d)))
                src.append(_clamp_index(j, d) if conds else j)
            elif mode == "edge":
                src.append(_clamp_index(j, d))
            else:  # reflect
                dm1 = S.add(d, -1)
                if isinstance(j, Expr):
                    aj = Binary("max", j, Binary("sub", Const(0, I64), j, I64), I64)
                    t = Binary("sub", IndexValue(dm1), aj, I64)
                    at = Binary("max", t, Binary("sub", Const(0, I64), t, I64), I64)
                    src.append(Binary("sub", IndexValue(dm1), at, I64))
                else:
                    aj = S.smax(j, S.mul(-1, j))
                    t = S.add(dm1, S.mul(-1, aj))
                    src.append(S.add(dm1, S.mul(-1, S.smax(t, S.mul(-1, t)))))
        v = x(tuple(src))
        if conds:
            c = conds[0]
            for c2 in conds[1:]:
                c = Binary("and", c, c2, BOOL)
            v = Select(c, v, cast(Const(float(value), DType.float64), dt), dt)
        return v
    return fn


@lowering("tile")
def _lower_tile(ctx, x, *, repeats):
    out = ctx.out_type
    lead = out.rank - x.rank
    return lambda idx: x(tuple(imod(idx[lead + k], d) for k, d in enumerate(x.shape)))


# ---------------------------------------------------------------------------
# index
# ---------------------------------------------------------------------------


def _wrap_index(v: Expr, n: IntLike) -> Expr:
    v = cast(v, I64)
    return Select(Compare("lt", v, Const(0, I64)), Binary("add", v, _ie(n), I64), v, I64)


@lowering("gather")
def _lower_gather(ctx, x, indices, *, axis):
    ax = axis % x.rank
    ri = indices.rank

    def fn(idx):
        v = _wrap_index(indices(tuple(idx[ax:ax + ri])), x.shape[ax])
        return x(tuple(idx[:ax]) + (v,) + tuple(idx[ax + ri:]))
    return fn


@lowering("gather_elements")
def _lower_gather_elements(ctx, x, indices, *, axis):
    ax = axis % x.rank

    def fn(idx):
        v = _wrap_index(indices(idx), x.shape[ax])
        src = list(idx)
        src[ax] = v
        return x(tuple(src))
    return fn


@lowering("tril", "triu")
def _lower_tri(ctx, x, *, k):
    lower = ctx.node.op == "tril"

    def fn(idx):
        i, j = idx[-2], idx[-1]
        d = iadd(j, imul(i, -1))
        c = Compare("le" if lower else "ge", _ie(d), _ie(k))
        v = x(idx)
        return Select(c, v, fconst(0, v), v.dtype)
    return fn


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------

_RED_IR = {"reduce_sum": "sum", "reduce_mean": "sum", "reduce_max": "max", "reduce_min": "min",
           "reduce_prod": "prod"}


def _norm_axes(axes, rank):
    if axes is None:
        return tuple(range(rank))
    return tuple(sorted({a % max(rank, 1) for a in axes})) if rank else ()


def _reduce_over(ctx, x: TensorFn, axes, keepdims, op, dt, idx, body_fn=None):
    """Reduce(op) over ``axes`` of x at output index ``idx``; ``body_fn(x_elem, full_idx)``."""
    rank = x.rank
    ext = [x.shape[a] for a in axes]

    def body(vs):
        full = []
        it = iter(vs)
        k = 0
        for d in range(rank):
            if d in axes:
                full.append(next(it))
                if keepdims:
                    k += 1
            else:
                full.append(idx[k])
                k += 1
        e = x(tuple(full))
        return body_fn(e, tuple(full)) if body_fn else e

    return ctx.reduce(op, body, ext, dt)


@lowering(*_RED_IR)
def _lower_reduce(ctx, x, *, axes, keepdims):
    op = ctx.node.op
    ax = _norm_axes(axes, x.rank)
    dt = ctx.out_type.dtype
    n = S.prod([x.shape[a] for a in ax])

    def fn(idx):
        def build():
            r = _reduce_over(ctx, x, ax, keepdims, _RED_IR[op], dt, idx, lambda e, _: cast(e, dt))
            if op == "reduce_mean":
                r = div(r, intlike_value(n, dt))
            return r
        return ctx.memo(tuple(idx), build)
    return fn


@lowering("argmax", "argmin")
def _lower_arg(ctx, x, *, axis, keepdims):
    ax = axis % x.rank
    op = ctx.node.op
    return lambda idx: ctx.memo(tuple(idx), lambda: _reduce_over(ctx, x, (ax,), keepdims, op, I64, idx))


@lowering("var")
def _lower_var(ctx, x, *, axes, keepdims, correction):
    ax = _norm_axes(axes, x.rank)
    dt = ctx.out_type.dtype
    n = S.prod([x.shape[a] for a in ax])

    def fn(idx):
        def build():
            mean = div(_reduce_over(ctx, x, ax, keepdims, "sum", dt, idx), intlike_value(n, dt))

            def sq(e, _):
                c = sub(e, mean)
                return mul(c, c)
            ss = _reduce_over(ctx, x, ax, keepdims, "sum", dt, idx, sq)
            return div(ss, intlike_value(S.smax(S.add(n, -correction), 0), dt))
        return ctx.memo(tuple(idx), build)
    return fn


@lowering("cumsum")
def _lower_cumsum(ctx, x, *, axis, exclusive, reverse):
    ax = axis % x.rank
    dt = ctx.out_type.dtype
    n = x.shape[ax]

    def fn(idx):
        i = idx[ax]
        if not reverse:
            ext = i if exclusive else S.add(i, 1)
            start = 0
        else:
            start = S.add(i, 1) if exclusive else i
            ext = S.add(n, S.mul(-1, start))

        def body(vs):
            full = list(idx)
            full[ax] = S.add(start, vs[0])
            return cast(x(tuple(full)), dt)
        return ctx.reduce("sum", body, [ext], dt)
    return fn


# ---------------------------------------------------------------------------
# normalization (stitch)
# ---------------------------------------------------------------------------


def _row_key(idx, axes):
    return tuple(0 if k in axes else i for k, i in enumerate(idx))


@lowering("softmax", "log_softmax")
def _lower_softmax(ctx, x, *, axis):
    if x.rank == 0:
        return lambda idx: fconst(0.0 if ctx.node.op == "log_softmax" else 1.0, x(idx))
    ax = axis % x.rank
    log = ctx.node.op == "log_softmax"
    dt = x.dtype

    def stats(idx):
        def build():
            m = _reduce_over(ctx, x, (ax,), True, "max", dt, idx)
            s = _reduce_over(ctx, x, (ax,), True, "sum", dt, idx, lambda e, _: un("exp", sub(e, m)))
            return m, s
        return ctx.memo(_row_key(idx, (ax,)), build)

    def fn(idx):
        m, s = stats(_row_key(idx, (ax,)))
        z = sub(x(idx), m)
        if log:
            return sub(z, un("log", s))
        return div(un("exp", z), s)
    return fn


def _affine(v, w, b, idx, a):
    if w is not None:
        v = mul(v, cast(w(tuple(idx[a:])), v.dtype))
    if b is not None:
        v = add(v, cast(b(tuple(idx[a:])), v.dtype))
    return v


@lowering("layer_norm")
def _lower_layer_norm(ctx, x, weight=None, bias=None, *, axis, eps):
    a = axis % x.rank
    axes = tuple(range(a, x.rank))
    dt = x.dtype
    n = S.prod(x.shape[a:])

    def stats(key):
        def build():
            mean = div(_reduce_over(ctx, x, axes, True, "sum", dt, key), intlike_value(n, dt))

            def sq(e, _):
                c = sub(e, mean)
                return mul(c, c)
            var = div(_reduce_over(ctx, x, axes, True, "sum", dt, key, sq), intlike_value(n, dt))
            rstd = un("rsqrt", add(var, const(eps, dt)))
            return mean, rstd
        return ctx.memo(key, build)

    def fn(idx):
        mean, rstd = stats(_row_key(idx, axes))
        return _affine(mul(sub(x(idx), mean), rstd), weight, bias, idx, a)
    return fn


@lowering("rms_norm")
def _lower_rms_norm(ctx, x, weight=None, *, axis, eps):
    a = axis % x.rank
    axes = tuple(range(a, x.rank))
    dt = x.dtype
    n = S.prod(x.shape[a:])

    def stats(key):
        def build():
            ms = div(_reduce_over(ctx, x, axes, True, "sum", dt, key, lambda e, _: mul(e, e)), intlike_value(n, dt))
            return un("rsqrt", add(ms, const(eps, dt)))
        return ctx.memo(key, build)

    def fn(idx):
        return _affine(mul(x(idx), stats(_row_key(idx, axes))), weight, None, idx, a)
    return fn


@lowering("batch_norm")
def _lower_batch_norm(ctx, x, scale, bias, mean, var, *, eps):
    dt = x.dtype

    def fn(idx):
        c = (idx[1],)
        inv = mul(un("rsqrt", add(cast(var(c), dt), const(eps, dt))), cast(scale(c), dt))
        return add(mul(sub(x(idx), cast(mean(c), dt)), inv), cast(bias(c), dt))
    return fn


# ---------------------------------------------------------------------------
# functions -> kernels
# ---------------------------------------------------------------------------


def _unique(name: str, used: set) -> str:
    base = sanitize(name)
    n, i = base, 1
    while n in used:
        n = f"{base}_{i}"
        i += 1
    used.add(n)
    return n


def _const_fn(module, node, bufs, used):
    cname = node.attrs["name"]
    t = node.outputs[0].type
    c = module.constants.get(cname) if module is not None else None
    if c is not None and not isinstance(c, ConstantRef) and np.asarray(c).size == 1:
        v = np.asarray(c).reshape(()).item()
        e = const(v, t.dtype)
        return lambda idx: e
    buf = Buffer(_unique("c_" + cname, used), t.dtype, t.shape, "in", const_name=cname)
    bufs.append(buf)
    return lambda idx: Load(buf, tuple(idx))


def lower_function(func: Function, module: Module | None = None, name: str | None = None) -> Kernel:
    """One loop-IR Kernel computing every result of ``func`` (unscheduled).

    Buffers: one ``in`` per parameter (in order), then one ``in`` per module
    constant that is not a scalar (``const_name`` set), then one ``out`` per
    result (in order). ``kernel.syms``: the symbols the kernel needs, by name.
    """
    from .registry import _load_all
    _load_all()
    used: set = set()
    bufs: list = []
    env: dict = {}
    for p in func.params:
        b = Buffer(_unique(p.name, used), p.dtype, p.shape, "in")
        bufs.append(b)
        env[id(p)] = TensorFn(lambda idx, b=b: Load(b, tuple(idx)), p.type)
    state = _State()
    n_red = 0
    kinds = set()
    for node in func.nodes:
        opdef = get_op(node.op)
        kinds.add(opdef.kind)
        if node.op == "constant":
            env[id(node.outputs[0])] = TensorFn(_const_fn(module, node, bufs, used), node.outputs[0].type)
            continue
        if opdef.lower is None:
            raise BrazeError(f"op '{node.op}' has no loop lowering (kind {opdef.kind})",
                             where=str(node.loc) if node.loc else None,
                             hint="fusion must keep it out of generated kernels (extern call)")
        ins = []
        for v in node.inputs:
            ins.append(None if v is None else env[id(v)])
        while ins and ins[-1] is None:
            ins.pop()
        ctx = LowerCtx(node, module, state)
        out = opdef.lower(ctx, *ins, **node.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(node.outputs):
            raise BrazeError(f"lowering of '{node.op}' gave {len(outs)} results, expected {len(node.outputs)}")
        for v, o in zip(node.outputs, outs):
            f = o.fn if isinstance(o, TensorFn) and o.type != v.type else o
            env[id(v)] = o if isinstance(o, TensorFn) and o.type == v.type else TensorFn(f, v.type)
        if opdef.kind in ("reduction", "normalization"):
            n_red += 1
    # results, grouped by iteration space
    groups: list = []
    for i, r in enumerate(func.results):
        b = Buffer(_unique(r.name if r.name not in {x.name for x in bufs} else f"out_{r.name}", used),
                   r.dtype, r.shape, "out")
        bufs.append(b)
        for g in groups:
            if len(g[0]) == r.rank and all(_deq(a, c) for a, c in zip(g[0], r.shape)):
                g[1].append((b, env[id(r)]))
                break
        else:
            groups.append((r.shape, [(b, env[id(r)])]))
    body = []
    for shape, members in groups:
        vs = [L.loop_var(d, "i") for d in shape]
        stmts = [Store(b, tuple(vs), cast(f(tuple(vs)), b.dtype)) for b, f in members]
        for v, d in reversed(list(zip(vs, shape))):
            stmts = [For(v, d, stmts)]
        body.extend(stmts)
    kind = "pointwise"
    if n_red:
        kind = "stitch" if ("normalization" in kinds or n_red > 1) else "reduction"
    k = Kernel(name or "kernel_" + sanitize(func.name), bufs, [], body, kind)
    k.syms = kernel_syms(k)
    return k


def kernel_syms(k: Kernel) -> list:
    syms: set = set()
    for b in k.buffers:
        for d in b.shape:
            syms |= S.free_syms(d)
    for s in L.walk_stmts(k.body):
        if isinstance(s, For):
            syms |= S.free_syms(s.extent)
            if s.work is not None:
                syms |= S.free_syms(s.work)
        if isinstance(s, (Store, L.Let)):
            for e in L.stmt_exprs(s):
                syms |= L.int_syms(e)
            if isinstance(s, Store):
                for i in s.index:
                    if not isinstance(i, Expr) and i is not None:
                        syms |= S.free_syms(i)
    return sorted((s for s in syms if not L.is_loop_var(s)), key=lambda s: s.name)


def build_kernel(func: Function, module: Module | None = None, name: str | None = None) -> Kernel:
    """``lower_function`` followed by the default schedule."""
    from ..schedule.default import schedule
    return schedule(lower_function(func, module, name))


__all__ = ["LowerCtx", "TensorFn", "build_kernel", "kernel_syms", "lower_function", "lowered_ops", "lowering",
           "reshape_index"]
