"""Creation ops: arange, full, full_like, and uniform (counter-based random numbers)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
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


# Counter-based random numbers: element i of stream s under a seed is SplitMix64's output number
# STREAM_SPAN * s + i + 1 from the state ``seed``, its top 24 bits as a float32 in [0, 1). A pure
# function of (seed, stream, i), so a kernel computes any element alone, in any order, on any
# thread, and a tensor recomputed (fusion, rematerialisation) has the same bits. SplitMix64 passes
# BigCrush; the generated C (braze_vec.h's bz_uniform) computes the same bits as ``uniform_numpy``.
SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
STREAM_SPAN = 1 << 40  # elements per stream: streams of one seed never overlap below this size


def uniform_numpy(seed: int, count: int, stream: int = 0) -> np.ndarray:
    """float32[count]: elements 0 .. count-1 of ``stream`` under ``seed`` (any int64)."""
    m64 = (1 << 64) - 1
    with np.errstate(over="ignore"):
        i = np.arange(count, dtype=np.uint64) + np.uint64(stream * STREAM_SPAN + 1)
        z = np.uint64(seed & m64) + i * np.uint64(SPLITMIX_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)).astype(np.float32)


def _uniform_infer(ctx, seed, *, shape, stream):
    if seed.dtype.name != "int64" or seed.rank != 0:
        raise ctx.error(f"seed must be a 0-d int64 tensor, got {seed}")
    if not isinstance(stream, int) or not 0 <= stream < (1 << 22):
        raise ctx.error(f"stream must be an int in [0, 2**22), got {stream!r}")
    return _full_infer(ctx, shape=shape, value=0.0, dtype=DType.float32)


def _uniform_ref(ctx, seed, *, shape, stream):
    shape = tuple(int(d) for d in shape)
    return uniform_numpy(int(np.asarray(seed).reshape(())), int(np.prod(shape, dtype=np.int64)), stream).reshape(shape)


defop("uniform", inputs=("seed",),
      attrs={"shape": Attr("intlikes"), "stream": Attr("int", 0, "which of the seed's streams (0 <= stream < 2**22)")},
      infer=_uniform_infer, reference=_uniform_ref, kind="creation",
      doc="float32 random numbers in [0, 1) from a 0-d int64 seed: a pure function of (seed, stream, "
          "row-major position), SplitMix64's outputs, 24 bits each.")
