"""ONNX's ops whose output size the data decides: NonZero, Compress, Unique and NonMaxSuppression.

Each becomes one of braze's ``select`` ops (ops/select.py) with a new size symbol (``u0``, ...)
bounded by its input's size, and the values it picks are a ``gather`` after it. What is known at
import (a constant condition) folds to constant indices instead."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from ...ops.sort import k_may_exceed
from .convert import converter

I64 = DType.int64


def _indices(ctx, cond, known):
    """The positions where the 1-D ``cond`` (``known`` at import, or None) is true: [count] int64."""
    if known is not None and known.dtype != object:
        return ctx.const(np.flatnonzero(known.reshape(-1)).astype(np.int64))
    u = ctx.b.size_sym(cond.shape[0])
    return ctx.op("reshape", ctx.op("nonzero", cond, size=u), shape=(u,))


@converter("NonZero")
def _nonzero(ctx):
    x = ctx.value(0)
    if x.rank == 0:
        raise ctx.unsupported(f"a 0-d input ({x.type})", hint="reshape it to [1] first")
    known = ctx.known(0)
    if known is not None and known.dtype != object:
        return ctx.const(np.array(np.nonzero(known), dtype=np.int64).reshape(known.ndim, -1))
    return ctx.op("nonzero", x, size=ctx.b.size_sym(x.type.numel()))


@converter("Compress", attrs=("axis",))
def _compress(ctx):
    x, cond = ctx.value(0), ctx.value(1)
    if cond.rank != 1:
        raise ctx.unsupported(f"a condition of rank {cond.rank}", hint="the condition is 1-D")
    axis = ctx.attr("axis")
    if axis is None:
        x = ctx.op("reshape", x, shape=(x.type.numel(),))
        axis = 0
    elif not -x.rank <= axis < x.rank:
        raise ctx.unsupported(f"axis={axis} for an input of rank {x.rank}")
    axis %= x.rank
    n, d = cond.shape[0], x.shape[axis]
    # a shorter condition selects among the first slices only; a longer one is an error
    if k_may_exceed(ctx.b.module.constraints, n, d) != "never":
        raise ctx.unsupported(f"a condition of length {n}, which may be longer than the {d} slices of axis {axis}",
                              hint="the condition must not be longer than the axis")
    idx = _indices(ctx, ctx.cast(cond, DType.bool), ctx.known(1))
    return ctx.op("gather", x, idx, axis=axis)


@converter("Unique", attrs=("axis", "sorted"))
def _unique(ctx):
    x = ctx.value(0)
    axis = ctx.attr("axis")
    if axis is None:
        x = ctx.op("reshape", x, shape=(x.type.numel(),))
        axis = 0
    elif x.rank == 0 or not -x.rank <= axis < x.rank:
        raise ctx.unsupported(f"axis={axis} for an input of rank {x.rank}")
    axis %= x.rank
    # bool and 16-bit floats compare the same as these, and keep their values in the gather below
    keys = ctx.cast(x, DType.uint8 if x.dtype == DType.bool else
                    DType.float32 if x.dtype.is_float and x.dtype.itemsize == 2 else x.dtype)
    u = ctx.b.size_sym(x.shape[axis])
    first, inverse, counts = ctx.op("unique", keys, axis=axis, sorted=bool(ctx.attr("sorted", 1)), size=u)
    return ctx.op("gather", x, first, axis=axis), first, inverse, counts


@converter("NonMaxSuppression", attrs=("center_point_box",))
def _nms(ctx):
    boxes, scores = ctx.value(0), ctx.value(1)
    if boxes.rank != 3 or scores.rank != 3:
        raise ctx.unsupported(f"boxes {boxes.type} and scores {scores.type}",
                              hint="boxes are [batch, boxes, 4] and scores [batch, classes, boxes]")
    dt = boxes.dtype
    opt = [ctx.value(i) if ctx.tv(i) is not None else None for i in (2, 3, 4)]
    opt = [None if v is None else ctx.cast(v, I64 if i == 0 else dt) for i, v in enumerate(opt)]
    while opt and opt[-1] is None:
        opt.pop()
    bound = S.prod((boxes.shape[0], scores.shape[1], boxes.shape[1]))
    return ctx.op("non_max_suppression", boxes, ctx.cast(scores, dt), *opt,
                  center_point_box=int(ctx.attr("center_point_box", 0)), size=ctx.b.size_sym(bound))
