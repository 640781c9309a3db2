"""Linear algebra: matmul (numpy.matmul semantics) and linear (x @ weight.T + bias)."""

from __future__ import annotations

import numpy as np

from ..ir.types import DType, TensorType
from .common import _fmt, broadcast_shapes, promote
from .opdef import Attr, defop


def _check_contracted(ctx, ka, kb, a_shape, b_shape):
    eq = ctx.equal(ka, kb)
    if eq is False:
        raise ctx.error(f"contracted dims {ka} and {kb} differ (shapes {_fmt(a_shape)} and {_fmt(b_shape)})",
                        hint="the last dim of the first operand must equal the "
                             "second-to-last dim of the second")
    if eq is None:
        ctx.assume_equal(ka, kb, "contracted dims")


def _numeric(ctx, *types):
    for t in types:
        if t.dtype.name == "bool":
            raise ctx.error(f"does not take bool operands, got {t}", hint="cast to a numeric dtype first")


OUT_DTYPE = Attr("dtype", None, "the result's dtype (default: the operands' promoted dtype); 16-bit "
                 "products accumulate in float32 and round once into it")


def _result_dtype(ctx, out_dtype, *dtypes):
    """The operands' promoted dtype, or ``out_dtype`` (a float result of float operands)."""
    dt = promote(*dtypes)
    if out_dtype is None:
        return dt
    if not (out_dtype.is_float and dt.is_float):
        raise ctx.error(f"out_dtype={out_dtype.name} needs float operands and a float result, got {dt.name}")
    return out_dtype


def _matmul_infer(ctx, a: TensorType, b: TensorType, *, out_dtype=None):
    _numeric(ctx, a, b)
    if a.rank == 0 or b.rank == 0:
        raise ctx.error(f"operands must have rank >= 1, got {a} and {b}")
    ash = a.shape if a.rank >= 2 else (1,) + a.shape
    bsh = b.shape if b.rank >= 2 else b.shape + (1,)
    _check_contracted(ctx, ash[-1], bsh[-2], a.shape, b.shape)
    batch = broadcast_shapes(ctx, ash[:-2], bsh[:-2])
    out = list(batch)
    if a.rank >= 2:
        out.append(ash[-2])
    if b.rank >= 2:
        out.append(ctx.simplify(bsh[-1]))
    return TensorType(_result_dtype(ctx, out_dtype, a.dtype, b.dtype), tuple(out))


def _acc(dt):
    """Compute dtype for a product: float16/bfloat16 accumulate in float32."""
    if dt.kind == "f" and dt.itemsize >= 4:
        return dt
    if dt.kind in "iub":
        return dt
    return np.dtype(np.float32)


def _out_dtype(*arrays, out_dtype=None):
    if out_dtype is not None:
        return out_dtype.numpy
    return promote(*(DType.from_numpy(a.dtype) for a in arrays if a is not None)).numpy


def _matmul_ref(ctx, a, b, *, out_dtype=None):
    dt = _out_dtype(a, b, out_dtype=out_dtype)
    acc = _acc(promote(DType.from_numpy(a.dtype), DType.from_numpy(b.dtype)).numpy)
    return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False)).astype(dt, copy=False)


defop("matmul", inputs=("a", "b"), attrs={"out_dtype": OUT_DTYPE}, infer=_matmul_infer, reference=_matmul_ref,
      kind="gemm",
      doc="numpy.matmul: 1-D operands and broadcasting batch dims.")


def _linear_infer(ctx, x: TensorType, w: TensorType, bias: TensorType | None = None, *, out_dtype=None):
    _numeric(ctx, x, w)
    if w.rank != 2:
        raise ctx.error(f"weight must be 2-D [out, in], got {w}")
    if x.rank < 1:
        raise ctx.error(f"input must have rank >= 1, got {x}")
    _check_contracted(ctx, x.shape[-1], w.shape[1], x.shape, w.shape)
    out = x.shape[:-1] + (w.shape[0],)
    dtypes = [x.dtype, w.dtype]
    if bias is not None:
        if bias.rank > 1:
            raise ctx.error(f"bias must be 1-D [out] (or a scalar), got {bias}")
        if bias.rank == 1:
            broadcast_shapes(ctx, (w.shape[0],), bias.shape)
        dtypes.append(bias.dtype)
    return TensorType(_result_dtype(ctx, out_dtype, *dtypes), out)


def _linear_ref(ctx, x, w, bias=None, *, out_dtype=None):
    dt = _out_dtype(x, w, bias, out_dtype=out_dtype)
    acc = _acc(_out_dtype(x, w, bias))
    y = np.matmul(x.astype(acc, copy=False), w.astype(acc, copy=False).T)
    if bias is not None:
        y = y + bias.astype(acc, copy=False)
    return y.astype(dt, copy=False)


defop("linear", inputs=("x", "weight", "bias?"), attrs={"out_dtype": OUT_DTYPE}, infer=_linear_infer,
      reference=_linear_ref, kind="gemm",
      doc="x @ weight.T + bias with weight [out, in].")
