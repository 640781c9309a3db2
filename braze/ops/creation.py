"""Creation ops: arange, full, full_like."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..ir import sym as S
from ..ir.types import TensorType
from .common import _fmt
from .opdef import Attr, defop


def _is_float(v):
    return isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and not isinstance(v, S.SymExpr)


def _check_value(ctx, name, v):
    if isinstance(v, S.SymExpr) or isinstance(v, numbers.Real):
        return
    raise ctx.error(f"{name} must be a number or symbolic int, got {v!r}")


def arange_len(start, end, step):
    """Element count of arange(start, end, step) (IntLike when the bounds are symbolic ints)."""
    if any(_is_float(v) for v in (start, end, step)):
        return max(0, math.ceil((float(end) - float(start)) / float(step)))
    start, end, step = (S.as_intlike(v) for v in (start, end, step))
    if step > 0:
        n = S.floordiv(S.add(S.add(end, S.mul(-1, start)), step - 1), step)
    else:
        n = S.floordiv(S.add(S.add(start, S.mul(-1, end)), -step - 1), -step)
    return S.smax(n, 0)


def _arange_infer(ctx, *, start, end, step, dtype):
    for name, v in (("start", start), ("end", end), ("step", step)):
        _check_value(ctx, name, v)
    if isinstance(step, S.SymExpr):
        raise ctx.error(f"step {step} must be a constant", hint="only start and end may be symbolic")
    if step == 0:
        raise ctx.error("step must not be 0")
    if any(_is_float(v) for v in (start, end, step)) and any(isinstance(v, S.SymExpr) for v in (start, end)):
        raise ctx.error(f"cannot mix float and symbolic bounds (start={start}, end={end}, step={step})",
                        hint="use integer bounds when they are symbolic")
    if dtype.name == "bool":
        raise ctx.error("dtype bool is not supported")
    n = arange_len(start, end, step)
    return TensorType(dtype, (ctx.simplify(n),))


def _arange_ref(ctx, *, start, end, step, dtype):
    n = arange_len(start, end, step)
    dt = dtype.numpy
    if any(_is_float(v) for v in (start, end, step)):
        return (float(start) + float(step) * np.arange(n, dtype=np.float64)).astype(dt)
    return (int(start) + int(step) * np.arange(n, dtype=np.int64)).astype(dt)


defop("arange", inputs=(),
      attrs={"start": Attr("any", doc="int, float or symbolic int"),
             "end": Attr("any", doc="int, float or symbolic int (exclusive)"),
             "step": Attr("any", 1, "int or float constant, nonzero"),
             "dtype": Attr("dtype")},
      infer=_arange_infer, reference=_arange_ref, kind="creation",
      doc="start, start+step, ... below end; length ceil((end-start)/step).")


def _full_infer(ctx, *, shape, value, dtype):
    for d in shape:
        if isinstance(d, int) and d < 0:
            raise ctx.error(f"shape {_fmt(shape)} has a negative dim")
    return TensorType(dtype, tuple(ctx.simplify(d) for d in shape))


def _full_ref(ctx, *, shape, value, dtype):
    return np.full(tuple(shape), value, dtype=np.float64).astype(dtype.numpy) if dtype.is_float else \
        np.full(tuple(shape), np.asarray(value).astype(dtype.numpy), dtype=dtype.numpy)


defop("full", inputs=(),
      attrs={"shape": Attr("intlikes"), "value": Attr("float"), "dtype": Attr("dtype")},
      infer=_full_infer, reference=_full_ref, kind="creation",
      doc="A tensor of one value.")


def _full_like_infer(ctx, x, *, value, dtype):
    return TensorType(dtype or x.dtype, x.shape)


def _full_like_ref(ctx, x, *, value, dtype):
    dt = dtype.numpy if dtype is not None else x.dtype
    return np.full(x.shape, np.asarray(value).astype(dt), dtype=dt)


defop("full_like", inputs=("x",),
      attrs={"value": Attr("float"), "dtype": Attr("dtype", None, "default: x's dtype")},
      infer=_full_like_infer, reference=_full_like_ref, kind="creation",
      doc="A tensor of one value with x's shape.")
