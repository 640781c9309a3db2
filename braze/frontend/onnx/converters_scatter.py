"""ONNX's scatters: ScatterElements (and the old Scatter, converted to it), ScatterND and
TensorScatter. Each is one ``index_add`` (reduction add) or ``index_put`` (none, mul, max, min)
along axis 0 of the data viewed as rows: every target position becomes a row number (its
coordinates times the data's strides, computed pointwise), so a slice that moves whole (ScatterND's
trailing dims, TensorScatter's dims after the sequence axis) is one row, and ScatterElements'
single elements are rows of one. Rows are put in index order, so a repeated position takes the
last update (reduction none), as ONNX's reference does.

An index outside the data (after negative ones wrap) becomes a row number past the end, which the
scatter's own check refuses at run time: an InputError, never a write out of bounds."""

from __future__ import annotations

from ...ir import sym as S
from ...ir.types import DType
from .convert import converter

I64 = DType.int64
_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _wrap(ctx, i, n):
    """(i with negative values counted from ``n``, whether it lies in [0, n)), int64."""
    i = ctx.cast(i, I64)
    n_ = ctx.int_value(n)
    w = ctx.op("where", ctx.op("less", i, ctx.scalar(0, I64)), ctx.op("add", i, n_), i)
    ok = ctx.op("logical_and", ctx.op("greater_equal", w, ctx.scalar(0, I64)), ctx.op("less", w, n_))
    return w, ok


def _rows(ctx, coords: list, oks: list, shape) -> object:
    """The row number of each target (coords: one int64 tensor per dim of ``shape``, broadcasting),
    or prod(shape) where any coordinate is out of range."""
    lin = None
    for d, c in enumerate(coords):
        stride = S.prod(tuple(shape[d + 1:]))
        term = c if stride == 1 else ctx.op("mul", c, ctx.int_value(stride))
        lin = term if lin is None else ctx.op("add", lin, term)
    ok = None
    for o in oks:
        ok = o if ok is None else ctx.op("logical_and", ok, o)
    return lin if ok is None else ctx.op("where", ok, lin, ctx.int_value(S.prod(tuple(shape))))


def _put(ctx, data, rows, upd, lead: int, reduction: str):
    """``data`` viewed as [prod(shape[:lead]), *shape[lead:]], ``upd``'s rows put at ``rows``, viewed back."""
    shape = tuple(data.shape)
    inner = shape[lead:]
    count = S.prod(tuple(rows.shape))
    x = ctx.op("reshape", data, shape=(S.prod(shape[:lead]),) + inner)
    rows = ctx.op("reshape", rows, shape=(count,))
    src = ctx.op("reshape", upd, shape=(count,) + inner)
    out = ctx.op("index_add", x, rows, src, axis=0) if reduction == "add" else \
        ctx.op("index_put", x, rows, src, axis=0, reduce=reduction)
    return ctx.op("reshape", out, shape=shape)


def _check(ctx, data, idx, reduction):
    if reduction not in _REDUCTIONS:
        raise ctx.unsupported(f"reduction={reduction!r}", hint=f"one of {', '.join(_REDUCTIONS)}")
    if data.dtype.itemsize == 2 or data.dtype == DType.bool:  # braze_scatter.h's types (codegen/host.py)
        raise ctx.unsupported(f"{data.dtype.name} data (braze's scatters take 32- and 64-bit floats and integers, "
                              "and 8-bit integers)", hint="cast the data to float32 around the scatter")
    if not idx.dtype.is_int or idx.dtype == DType.bool:
        raise ctx.unsupported(f"{idx.dtype.name} indices", hint="indices are int32 or int64")


@converter("ScatterElements", attrs=("axis", "reduction"))
def _scatter_elements(ctx):
    data, idx, upd = ctx.value(0), ctx.value(1), ctx.value(2)
    reduction = ctx.attr("reduction", "none")
    _check(ctx, data, idx, reduction)
    r = data.rank
    axis = ctx.attr("axis", 0) % r
    w, ok = _wrap(ctx, idx, data.shape[axis])
    coords = [w if d == axis else ctx.iota(idx.shape[d], d, r) for d in range(r)]
    rows = _rows(ctx, coords, [ok], tuple(data.shape))
    if tuple(rows.shape) != tuple(idx.shape):
        rows = ctx.op("expand", rows, shape=tuple(idx.shape))
    return _put(ctx, data, rows, ctx.cast(upd, data.dtype), r, reduction)


@converter("ScatterND", attrs=("reduction",))
def _scatter_nd(ctx):
    data, idx, upd = ctx.value(0), ctx.value(1), ctx.value(2)
    reduction = ctx.attr("reduction", "none")
    _check(ctx, data, idx, reduction)
    k = idx.shape[-1] if idx.rank else None
    if not isinstance(k, int) or not 1 <= k <= data.rank:
        raise ctx.unsupported(f"indices {idx.type} whose last dim is not a number from 1 to the data's rank "
                              f"{data.rank}", hint="give the indices a static last dim")
    q = idx.rank - 1
    coords, oks = [], []
    for j in range(k):
        part = ctx.op("slice", idx, axis=q, start=j, end=j + 1, step=1)
        w, ok = _wrap(ctx, ctx.op("squeeze", part, axes=(q,)), data.shape[j])
        coords.append(w)
        oks.append(ok)
    rows = _rows(ctx, coords, oks, tuple(data.shape[:k]))
    return _put(ctx, data, rows, ctx.cast(upd, data.dtype), k, reduction)


@converter("TensorScatter", attrs=("axis", "mode"))
def _tensor_scatter(ctx):
    cache, upd = ctx.value(0), ctx.value(1)
    wi = ctx.value(2) if ctx.n_inputs() > 2 and ctx.node.input[2] else None
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode={mode!r}", hint="linear or circular")
    _check(ctx, cache, wi if wi is not None else ctx.scalar(0, I64), "none")
    r = cache.rank
    axis = ctx.attr("axis", -2) % r
    if axis == 0:
        raise ctx.unsupported("axis 0 (the batch axis) as the sequence axis", hint="the sequence axis comes after the batch")
    smax = cache.shape[axis]
    pos = ctx.iota(upd.shape[axis], axis, axis + 1)
    if wi is not None:
        start = ctx.op("reshape", ctx.cast(wi, I64), shape=(wi.shape[0],) + (1,) * axis)
        pos = ctx.op("add", start, pos)
    if mode == "circular":
        pos = ctx.op("remainder", pos, ctx.int_value(smax))
    ok = ctx.op("logical_and", ctx.op("greater_equal", pos, ctx.scalar(0, I64)), ctx.op("less", pos, ctx.int_value(smax)))
    coords = [ctx.iota(upd.shape[d], d, axis + 1) for d in range(axis)] + [pos]
    rows = _rows(ctx, coords, [ok], tuple(cache.shape[:axis + 1]))
    lead = tuple(upd.shape[:axis + 1])
    if tuple(rows.shape) != lead:
        rows = ctx.op("expand", rows, shape=lead)
    return _put(ctx, cache, rows, ctx.cast(upd, cache.dtype), axis + 1, "none")
