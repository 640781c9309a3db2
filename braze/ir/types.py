"""Element types and tensor types."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from . import sym as S
from .sym import IntLike


class DType(enum.Enum):
    float32 = "f32"
    float16 = "f16"
    bfloat16 = "bf16"
    float64 = "f64"
    int64 = "i64"
    int32 = "i32"
    int8 = "i8"
    uint8 = "u8"
    bool = "bool"
    # appended: a dtype's ABI code is its index here (braze_abi.h)
    int16 = "i16"
    uint16 = "u16"
    uint32 = "u32"
    uint64 = "u64"
    # narrow storage types: one element per byte (as ml_dtypes keeps them), read only through a
    # cast (docs/semantics.md, "Narrow types"); minifloats keep their bits, 4- and 2-bit integers
    # their two's complement bits in the low bits of the byte
    float8_e4m3fn = "f8e4m3fn"
    float8_e4m3fnuz = "f8e4m3fnuz"
    float8_e5m2 = "f8e5m2"
    float8_e5m2fnuz = "f8e5m2fnuz"
    float8_e8m0fnu = "f8e8m0"
    float4_e2m1fn = "f4e2m1"
    int4 = "i4"
    uint4 = "u4"
    int2 = "i2"
    uint2 = "u2"

    @property
    def short(self) -> str:
        return self.value

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16, DType.bfloat16, DType.float64)

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_unsigned(self) -> bool:
        return self in (DType.uint8, DType.uint16, DType.uint32, DType.uint64)

    @property
    def is_narrow(self) -> bool:
        """A storage type of under 16 bits that only a cast reads or writes (float8, float4, int4, int2)."""
        return self in NARROW

    @property
    def is_minifloat(self) -> bool:
        return self in NARROW and self not in NARROW_INTS

    @property
    def numpy(self) -> np.dtype:
        if self in ML_DTYPES:
            import ml_dtypes
            return np.dtype(getattr(ml_dtypes, self.name))
        return np.dtype(_TO_NP[self])

    @property
    def finfo(self):
        """The float type's limits (eps, max, tiny): numpy's finfo, ml_dtypes' for bfloat16 and minifloats."""
        if self in ML_DTYPES:
            import ml_dtypes
            return ml_dtypes.finfo(self.numpy)
        return np.finfo(_TO_NP[self])

    @property
    def itemsize(self) -> int:
        if self in ML_DTYPES:
            return 2 if self is DType.bfloat16 else 1
        return np.dtype(_TO_NP[self]).itemsize

    @staticmethod
    def parse(s: str) -> "DType":
        if s in _BY_SHORT:
            return _BY_SHORT[s]
        try:
            return DType[s]
        except KeyError:
            raise ValueError(f"unknown dtype {s!r}; expected one of {', '.join(d.name for d in DType)}") from None

    @staticmethod
    def from_numpy(dt) -> "DType":
        dt = np.dtype(dt)
        if dt.name in _ML_NAMES:
            return _ML_NAMES[dt.name]
        for k, v in _TO_NP.items():
            if np.dtype(v) == dt:
                return k
        raise TypeError(f"numpy dtype {dt} has no braze equivalent; supported: "
                        f"{', '.join(d.name for d in DType)}")

    def __str__(self):
        return self.value

    def __repr__(self):
        return f"DType.{self.name}"


_TO_NP = {
    DType.float32: "float32", DType.float16: "float16", DType.float64: "float64",
    DType.int64: "int64", DType.int32: "int32", DType.int8: "int8", DType.uint8: "uint8",
    DType.bool: "bool", DType.int16: "int16", DType.uint16: "uint16", DType.uint32: "uint32",
    DType.uint64: "uint64",
}
_INTS = frozenset((DType.int64, DType.int32, DType.int16, DType.int8, DType.uint64, DType.uint32, DType.uint16,
                   DType.uint8))
_BY_SHORT = {d.value: d for d in DType}
NARROW_INTS = frozenset((DType.int4, DType.uint4, DType.int2, DType.uint2))
NARROW = frozenset((DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2, DType.float8_e5m2fnuz,
                    DType.float8_e8m0fnu, DType.float4_e2m1fn)) | NARROW_INTS
ML_DTYPES = NARROW | {DType.bfloat16}  # numpy dtypes from ml_dtypes, named as the DType
_ML_NAMES = {d.name: d for d in ML_DTYPES}


def is_ml_dtype(dt) -> bool:
    """Whether a NumPy dtype is one of ml_dtypes' (bfloat16, float8, int4, ...), which NumPy's own
    functions (comparisons, isnan, safetensors) mostly do not take. Its ``kind`` does not say: float8_e5m2
    reports "f", the others "V"."""
    return np.dtype(dt).name in _ML_NAMES


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[IntLike, ...]

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(S.as_intlike(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> IntLike:
        return S.prod(self.shape)

    def is_static(self) -> bool:
        return not any(S.is_symbolic(d) for d in self.shape)

    def free_syms(self) -> frozenset:
        out = frozenset()
        for d in self.shape:
            out |= S.free_syms(d)
        return out

    def concrete_shape(self, env) -> tuple[int, ...]:
        return tuple(S.evaluate(d, env) for d in self.shape)

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def __str__(self):
        return f"{self.dtype.short}[{', '.join(str(d) for d in self.shape)}]"


class Typed:
    """``shape``, ``dtype`` and ``rank`` read through a ``type`` (a TensorType) attribute:
    graph values and lowering's index functions both answer them."""

    __slots__ = ()

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank
