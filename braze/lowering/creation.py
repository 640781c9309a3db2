"""Lowerings of tensor-creation ops (arange, full, full_like, uniform)."""

from __future__ import annotations

from ..ir import sym as S
from ..ir.loop import Binary, Const, Expr, IndexValue
from ..ir.types import DType
from .core import add, cast, const, intlike_value, lowering, mul
from .index_math import iadd, imul


@lowering("arange")
def _lower_arange(ctx, *, start, end, step, dtype):
    from ..ops.creation import _is_float
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


@lowering("uniform")
def _lower_uniform(ctx, seed, *, shape, stream):
    from ..ops.creation import STREAM_SPAN
    out = ctx.out_type.shape
    key = seed(())

    def fn(idx):
        counter = stream * STREAM_SPAN
        st = 1
        for i, d in zip(reversed(idx), reversed(out)):  # the row-major position
            counter = iadd(counter, imul(i, st))
            st = S.mul(st, d)
        return Binary("uniform", key, cast(counter if isinstance(counter, Expr) else IndexValue(counter),
                                           DType.int64), DType.float32)
    return fn
