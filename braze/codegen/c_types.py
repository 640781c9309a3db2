"""The C types of braze's dtypes in generated kernels."""

from __future__ import annotations

import math

from ..errors import UnsupportedOpError
from ..ir.types import NARROW, DType
from .c_expr import c_int_lit

CTYPE = {DType.float32: "float", DType.float64: "double", DType.int64: "int64_t", DType.int32: "int32_t",
         DType.int8: "int8_t", DType.uint8: "uint8_t", DType.bool: "uint8_t", DType.int16: "int16_t",
         DType.uint16: "uint16_t", DType.uint32: "uint32_t", DType.uint64: "uint64_t",
         DType.bfloat16: "uint16_t", DType.float16: "uint16_t",  # 16-bit floats: their bits (braze_half.h)
         **{d: "uint8_t" for d in NARROW}}  # narrow types: their bits (braze_narrow.h)

# 16-bit float storage: braze_half.h's bz_<sfx>_to_f32, bz_f32_to_<sfx>, bz_ld_<sfx>, bz_st_<sfx>
HALF_SFX = {DType.bfloat16: "bf16", DType.float16: "f16"}

# int32/int64 arithmetic is done in the unsigned type of the same width (defined wrap-around);
# int8/uint8/int16 are promoted to int, which cannot overflow, and converted back; uint16 is promoted
# to int too, where 65535 * 65535 overflows, so it is done in uint32_t
UNSIGNED = {DType.int64: "uint64_t", DType.int32: "uint32_t", DType.uint16: "uint32_t", DType.uint32: "uint32_t",
            DType.uint64: "uint64_t"}

INT_LIMITS = {DType.int64: ("INT64_MIN", "INT64_MAX"), DType.int32: ("INT32_MIN", "INT32_MAX"),
              DType.int8: ("INT8_MIN", "INT8_MAX"), DType.uint8: ("0", "UINT8_MAX"), DType.bool: ("0", "1"),
              DType.int16: ("INT16_MIN", "INT16_MAX"), DType.uint16: ("0", "UINT16_MAX"),
              DType.uint32: ("0", "UINT32_MAX"), DType.uint64: ("0", "UINT64_MAX")}


def ctype(dt: DType) -> str:
    try:
        return CTYPE[dt]
    except KeyError:
        raise UnsupportedOpError(f"generated kernels do not support dtype {dt.name} yet",
                                 hint="cast to float32 around the kernel") from None


def narrow_cast(x: str, src: DType, dt: DType) -> str:
    """C for one of the four narrow casts lowering leaves (lowering/core.py, _narrow_cast)."""
    if src.is_narrow:
        return f"bz_dec_{src.short}({x})"
    if dt.is_minifloat:
        return f"bz_enc_{dt.short}((float)({x}))"
    return f"bz_enc_{dt.short}{'_f' if src.is_float else ''}({x})"


def c_literal(v, dt: DType) -> str:
    """A C literal of value ``v`` in ``dt`` (a float32's with its ``f``)."""
    if dt.is_float:
        v = float(v)
        if math.isnan(v):
            return "NAN" if dt == DType.float32 else "((double)NAN)"
        if math.isinf(v):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
            return s if dt == DType.float32 else f"((double){s})"
        r = repr(v)
        if "e" not in r and "." not in r:
            r += ".0"
        return (r + "f" if dt == DType.float32 else r) if v >= 0 else f"({r}{'f' if dt == DType.float32 else ''})"
    if dt == DType.bool:
        return "1" if v else "0"
    v = int(v)
    return f"(({ctype(dt)}){f'UINT64_C({v})' if v >= 2 ** 63 else c_int_lit(v)})"
