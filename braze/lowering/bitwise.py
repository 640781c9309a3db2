"""Bitwise lowerings (braze.ops.bitwise): and/or/xor/not, the shifts, bitcast."""

from __future__ import annotations

from ..ir.loop import Binary, Unary
from .core import BOOL, cast, lowering
from .index_math import broadcast_to

_BINARY = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor", "bitshift_left": "shl",
           "bitshift_right": "shr"}


@lowering(*_BINARY)
def _lower_binary(ctx, a, b):
    out = ctx.out_type
    dt, op = out.dtype, _BINARY[ctx.node.op]
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    return lambda idx: Binary(op, cast(fa(idx), dt), cast(fb(idx), dt), dt)


@lowering("bitwise_not")
def _lower_not(ctx, x):
    fn = "not" if x.dtype is BOOL else "bitnot"
    return lambda idx: Unary(fn, x(idx), x.dtype)


@lowering("bitcast")
def _lower_bitcast(ctx, x, *, dtype):
    if dtype == x.dtype:
        return x
    return lambda idx: Unary("bitcast", x(idx), dtype)
