"""ONNX's float8_e8m0 encodings, built from braze ops: the scale type of MX formats is a float32's
exponent byte, rounded by Cast's ``round_mode`` (ONNX's ``to_float8e8m0``). braze's cast only decodes
e8m0 (braze_narrow.h), since its rounding is a choice of the exporter, not of the type."""

from __future__ import annotations

from ...ir.types import DType

I64 = DType.int64


def to_e8m0(ctx, v, saturate: bool, round_mode: str):
    """The float8_e8m0 code of each float: its float32 exponent (the sign dropped; 0xff for NaN and
    infinities), plus one where ``round_mode`` rounds the fraction up ("up": any fraction; "nearest":
    the guard bit, with any lower bit or a nonzero exponent, ONNX's rule); with ``saturate``, exponent
    254 is never rounded up into 255 (NaN)."""
    if round_mode not in ("up", "down", "nearest"):
        raise ctx.unsupported(f"round_mode={round_mode!r}", hint="ONNX defines up, down and nearest")
    bits = ctx.cast(ctx.op("bitcast", ctx.cast(v, DType.float32), dtype=DType.uint32), I64)
    k = lambda n: ctx.scalar(n, I64)  # noqa: E731
    has = lambda mask: ctx.op("not_equal", ctx.op("bitwise_and", bits, k(mask)), k(0))  # noqa: E731
    exp = ctx.op("bitwise_and", ctx.op("bitshift_right", bits, k(23)), k(255))
    if round_mode != "down":
        if round_mode == "up":
            inc = has(0x7FFFFF)
        else:  # guard bit, and then any lower bit, or an odd (nonzero) exponent
            inc = ctx.op("logical_and", has(0x400000),
                         ctx.op("logical_or", has(0x3FFFFF), ctx.op("greater", exp, k(0))))
        inc = ctx.op("logical_and", inc, ctx.op("less", exp, k(254 if saturate else 255)))
        exp = ctx.op("add", exp, ctx.cast(inc, I64))
    return ctx.op("bitcast", ctx.cast(exp, DType.uint8), dtype=DType.float8_e8m0fnu)
