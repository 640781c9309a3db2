"""The C types of braze's dtypes in generated kernels."""

from __future__ import annotations

from ..errors import UnsupportedOpError
from ..ir.types import DType

CTYPE = {DType.float32: "float", DType.float64: "double", DType.int64: "int64_t", DType.int32: "int32_t",
         DType.int8: "int8_t", DType.uint8: "uint8_t", DType.bool: "uint8_t",
         DType.bfloat16: "uint16_t", DType.float16: "uint16_t"}  # 16-bit floats: their bits (braze_half.h)

# 16-bit float storage: braze_half.h's bz_<sfx>_to_f32, bz_f32_to_<sfx>, bz_ld_<sfx>, bz_st_<sfx>
HALF_SFX = {DType.bfloat16: "bf16", DType.float16: "f16"}

# int32/int64 arithmetic is done in the unsigned type of the same width (defined wrap-around);
# narrower ints are promoted to int, which cannot overflow, and converted back
UNSIGNED = {DType.int64: "uint64_t", DType.int32: "uint32_t"}

INT_LIMITS = {DType.int64: ("INT64_MIN", "INT64_MAX"), DType.int32: ("INT32_MIN", "INT32_MAX"),
              DType.int8: ("INT8_MIN", "INT8_MAX"), DType.uint8: ("0", "UINT8_MAX"), DType.bool: ("0", "1")}


def ctype(dt: DType) -> str:
    try:
        return CTYPE[dt]
    except KeyError:
        raise UnsupportedOpError(f"generated kernels do not support dtype {dt.name} yet",
                                 hint="cast to float32 around the kernel") from None
