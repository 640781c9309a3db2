"""Shared pieces of shape and dtype inference."""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .context import InferCtx

# numpy-like promotion among braze dtypes (bool < ints < floats)
_ORDER = [DType.bool, DType.uint8, DType.int8, DType.uint16, DType.int16, DType.uint32, DType.int32,
          DType.uint64, DType.int64, DType.bfloat16, DType.float16, DType.float32, DType.float64]


def promote(*dtypes: DType) -> DType:
    ds = [d for d in dtypes if d is not None]
    if not ds:
        raise ValueError("no dtypes to promote")
    if any(d.is_narrow for d in ds):
        if len(set(ds)) > 1:
            raise TypeError(f"no common dtype of {', '.join(sorted({d.name for d in ds}))}: narrow types "
                            "only meet their own type")
        return ds[0]
    if any(d is DType.bfloat16 for d in ds) and any(d is DType.float16 for d in ds):
        return DType.float32
    if all(d.is_int or d is DType.bool for d in ds):
        # numpy's rule, where signed and unsigned meet: int8 and uint8 make int16, int64 and uint64 float64
        return DType.from_numpy(np.result_type(*(d.numpy for d in ds)))
    return max(ds, key=_ORDER.index)


def broadcast_shapes(ctx: InferCtx, *shapes) -> tuple:
    """NumPy broadcasting over symbolic dims.

    Two dims broadcast if either is 1 or they are (provably, or assumed and
    then recorded as a run-time-checked constraint) equal.
    """
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        d = 1
        for x in dims:
            if isinstance(x, int) and x == 1:
                continue
            if isinstance(d, int) and d == 1:
                d = x
                continue
            eq = ctx.equal(d, x)
            if eq is True:
                continue
            if eq is False and not (S.is_symbolic(d) or S.is_symbolic(x)):
                raise ctx.error(f"shapes {', '.join(_fmt(s) for s in shapes)} do not broadcast "
                                f"(dim {i - rank}: {d} vs {x})")
            if eq is False:
                raise ctx.error(f"shapes {', '.join(_fmt(s) for s in shapes)} do not broadcast: "
                                f"{d} and {x} can never be equal")
            # unknown: a symbolic dim against another dim. Assume equal (a
            # dim that is 1 at run time would need a broadcast we did not plan).
            ctx.assume_equal(d, x, "broadcast dims")
            d = ctx.simplify(d)
        out.append(d)
    return tuple(out)


def _fmt(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def norm_axis(ctx: InferCtx, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def norm_axes(ctx: InferCtx, axes, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    out = tuple(sorted({norm_axis(ctx, a, rank) for a in axes}))
    return out


def elementwise_infer(dtype: DType | None = None):
    """Broadcasting infer for n-ary elementwise ops; dtype fixed or promoted."""

    def infer(ctx: InferCtx, *types, **_):
        shape = broadcast_shapes(ctx, *(t.shape for t in types))
        return TensorType(dtype or promote(*(t.dtype for t in types)), shape)

    return infer


def unary_infer(ctx: InferCtx, x: TensorType, **_):
    return x


def float_unary_infer(ctx: InferCtx, x: TensorType, **_):
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating-point input, got {x.dtype.name}",
                        hint="cast the input to float32 first")
    return x
