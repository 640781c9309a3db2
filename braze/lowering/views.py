"""Lowerings of view-like ops: pure index remapping (reshape, permute, expand,
squeeze, slice, split, concat, pad, tile) and indexed reads (gather, tril/triu)."""

from __future__ import annotations

from ..ir import sym as S
from ..ir.loop import Binary, Compare, Const, Expr, IndexValue, Select
from ..ir.sym import IntLike
from ..ir.types import DType
from .core import BOOL, I64, cast, fconst, lowering
from .index_math import _ie, _in_range, broadcast_to, iadd, imod, imul, reshape_index


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
    from ..ops.shape import _norm_bound
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
    """i clamped into [0, d-1] (keeps speculative loads in bounds), and never below 0: for a d
    that may be 0 the upper clamp alone gave -1, a read before the buffer."""
    if isinstance(i, Expr):
        hi = IndexValue(S.add(d, -1))
        return Binary("max", Binary("min", cast(i, I64), hi, I64), Const(0, I64), I64)
    lo, hi = S.bounds(i)
    r = i
    if not _in_range(i, d):
        r = S.smin(r, S.add(d, -1))
        lo = min(lo, S.bounds(S.add(d, -1))[0])
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
    # a piece of static size 0 holds nothing to read (its clamped index was -1: a read before its
    # buffer, hoisted out of the select and run at every call)
    kept = [k for k, x in enumerate(xs) if not (isinstance(x.shape[ax], int) and x.shape[ax] == 0)] or [0]
    xs, offs = [xs[k] for k in kept], [offs[k] for k in kept]

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


def _checked_index(v: Expr, n: IntLike, wrap: bool) -> Expr:
    """A negative index counts from the end (``wrap``) or is out of range; one out of range fails
    the call, as eager raises (``axis_index``), and its read is clamped into the axis, never memory
    outside x (docs/semantics.md)."""
    v = cast(v, I64)
    if not wrap:
        v = Select(Compare("lt", v, Const(0, I64)), _ie(n), v, I64)
    return Binary("axis_index", v, _ie(n), I64)


@lowering("gather")
def _lower_gather(ctx, x, indices, *, axis, wrap):
    ax = axis % x.rank
    ri = indices.rank

    def fn(idx):
        v = _checked_index(indices(tuple(idx[ax:ax + ri])), x.shape[ax], wrap)
        return x(tuple(idx[:ax]) + (v,) + tuple(idx[ax + ri:]))
    return fn


@lowering("gather_elements")
def _lower_gather_elements(ctx, x, indices, *, axis, wrap):
    ax = axis % x.rank

    def fn(idx):
        v = _checked_index(indices(idx), x.shape[ax], wrap)
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
