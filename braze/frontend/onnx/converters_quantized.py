"""ONNX's integer arithmetic on quantized tensors: MatMulInteger and ConvInteger (int32 results), and
QLinearMatMul and QLinearConv (requantized to 8 bits), each exact as ONNX's reference computes it.

A product is the integer product of the operands less their zero points. MatMul's runs in int32
(braze's loops for integer products). A convolution's runs as four float32 convolutions of 4-bit
halves: after its zero point a value v lies in [-255, 255], so v = 16 hi + lo with lo in [0, 15]
and hi in [-16, 15]; each half-product is at most 256 in magnitude, so each float32 sum is exact
for fewer than 2^16 terms per output, and the four combine exactly in int32. The requantizing
scale is computed in the scales' dtype and applied in float64, rounding half to even, as ONNX's
reference does."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .convert import converter

I32, F32, F64 = DType.int32, DType.float32, DType.float64
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
MAX_TERMS = 1 << 16  # products per output a float32 sum of 4-bit half-products holds exactly


def _shifted(ctx, i: int, zp_i: int, per_row: bool = False, per_channel_rank: int = 0):
    """Input ``i`` as int32 less its zero point (input ``zp_i``, maybe absent): a scalar, or 1-D per
    row (``per_row``: [M] against [..., M, K]) or per output channel of a rank-``per_channel_rank``
    weight."""
    v = ctx.value(i)
    if v.dtype not in (DType.int8, DType.uint8):
        raise ctx.unsupported(f"{v.dtype.name} input {i} (quantized inputs are int8 or uint8)",
                              hint="quantize the input to 8 bits first (QuantizeLinear)")
    v = ctx.cast(v, I32)
    zp = ctx.value(zp_i) if ctx.tv(zp_i) is not None else None
    if zp is None:
        return v
    zp = ctx.cast(zp, I32)
    if zp.rank == 1 and per_row:
        zp = ctx.op("unsqueeze", zp, axes=(1,))
    elif zp.rank == 1 and per_channel_rank:
        zp = ctx.op("reshape", zp, shape=(zp.shape[0],) + (1,) * (per_channel_rank - 1))
    return ctx.op("sub", v, zp)


def _requantize(ctx, acc, scale, y_zp, out_dtype: DType):
    """round(acc * scale + y_zp) (half to even) clipped to ``out_dtype``, in float64."""
    d = ctx.op("mul", ctx.cast(acc, F64), ctx.cast(scale, F64))
    if y_zp is not None:
        d = ctx.op("add", d, ctx.cast(y_zp, F64))
    info = np.iinfo(out_dtype.numpy)
    d = ctx.op("clamp", ctx.op("round", d), min=float(info.min), max=float(info.max))
    return ctx.cast(d, out_dtype)


def _out_dtype(ctx, zp_i: int, x_i: int) -> DType:
    t = ctx.tv(zp_i)
    return (t.dtype if t.value is None else t.value.dtype) if t is not None else ctx.value(x_i).dtype


@converter("MatMulInteger")
def _matmul_integer(ctx):
    a = _shifted(ctx, 0, 2, per_row=True)
    b = _shifted(ctx, 1, 3)
    return ctx.op("matmul", a, b)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx):
    a = _shifted(ctx, 0, 2, per_row=True)
    b = _shifted(ctx, 3, 5)
    acc = ctx.op("matmul", a, b)
    scale = ctx.op("div", ctx.op("mul", ctx.value(1), ctx.value(4)), ctx.value(6))
    y_zp = ctx.value(7) if ctx.tv(7) is not None else None
    return _requantize(ctx, acc, scale, y_zp, _out_dtype(ctx, 7, 0))


def _conv_f32(ctx, x, w):
    """ONNX Conv with this node's attributes, on float32 ``x`` and ``w`` (Conv's own converter)."""
    return ctx.onnx_op("Conv", x, w, **{a: ctx.attr(a) for a in _CONV_ATTRS if ctx.has_attr(a)})


def _conv_integer(ctx, x, w):
    """The exact int32 convolution of int32 ``x`` and ``w`` (values in [-255, 255]; module docstring)."""
    terms = S.prod(tuple(w.shape[1:]))
    if S.is_symbolic(terms) or terms >= MAX_TERMS:
        raise ctx.unsupported(f"a convolution of {terms} products per output (braze sums fewer than "
                              f"{MAX_TERMS} exactly)", hint="give the weight a static shape")
    sixteen = ctx.scalar(16, I32)

    def halves(v):
        lo = ctx.op("remainder", v, sixteen)
        hi = ctx.op("div", ctx.op("sub", v, lo), sixteen)
        return ctx.cast(hi, F32), ctx.cast(lo, F32)
    (xh, xl), (wh, wl) = halves(x), halves(w)
    part = lambda a, b: ctx.cast(_conv_f32(ctx, a, b), I32)  # noqa: E731
    hh, hl, lh, ll = part(xh, wh), part(xh, wl), part(xl, wh), part(xl, wl)
    mid = ctx.op("add", hl, lh)
    return ctx.op("add", ctx.op("add", ctx.op("mul", hh, ctx.scalar(256, I32)), ctx.op("mul", mid, sixteen)), ll)


@converter("ConvInteger", attrs=_CONV_ATTRS)
def _conv_int(ctx):
    x = _shifted(ctx, 0, 2)
    w = _shifted(ctx, 1, 3, per_channel_rank=ctx.value(1).rank)
    return _conv_integer(ctx, x, w)


@converter("QLinearConv", attrs=_CONV_ATTRS)
def _qlinear_conv(ctx):
    x = _shifted(ctx, 0, 2)
    w = _shifted(ctx, 3, 5, per_channel_rank=ctx.value(3).rank)
    acc = _conv_integer(ctx, x, w)
    rank = acc.rank
    if ctx.tv(8) is not None:
        b = ctx.cast(ctx.value(8), I32)
        acc = ctx.op("add", acc, ctx.op("reshape", b, shape=(b.shape[0],) + (1,) * (rank - 2)))
    w_scale = ctx.value(4)
    if w_scale.rank == 1:
        w_scale = ctx.op("reshape", w_scale, shape=(w_scale.shape[0],) + (1,) * (rank - 2))
    scale = ctx.op("div", ctx.op("mul", ctx.value(1), w_scale), ctx.value(6))
    y_zp = ctx.value(7) if ctx.tv(7) is not None else None
    return _requantize(ctx, acc, scale, y_zp, _out_dtype(ctx, 7, 0))
