"""What the ONNX importer, its converters and the folder share: element types, and the tensor
during import (``TV``) with its known values. The importer imports the converter table; all
of them import this module, so the imports run one way."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Value
from ...ir.types import DType

# ONNX TensorProto data type -> braze DType (the others are unsupported)
_ONNX_DTYPES = {1: DType.float32, 10: DType.float16, 16: DType.bfloat16, 11: DType.float64,
                7: DType.int64, 6: DType.int32, 3: DType.int8, 2: DType.uint8, 9: DType.bool,
                5: DType.int16, 4: DType.uint16, 12: DType.uint32, 13: DType.uint64,
                17: DType.float8_e4m3fn, 18: DType.float8_e4m3fnuz, 19: DType.float8_e5m2, 20: DType.float8_e5m2fnuz,
                21: DType.uint4, 22: DType.int4, 23: DType.float4_e2m1fn, 24: DType.float8_e8m0fnu, 25: DType.uint2,
                26: DType.int2}
_ONNX_DTYPE_NAMES = {0: "undefined", 1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                     7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32",
                     13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn",
                     18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
                     23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2"}
_TO_ONNX = {v: k for k, v in _ONNX_DTYPES.items()}


def onnx_dtype(code: int, where: str = "") -> DType:
    dt = _ONNX_DTYPES.get(int(code))
    if dt is None:
        raise UnsupportedOpError(
            f"ONNX element type {_ONNX_DTYPE_NAMES.get(int(code), code)} has no braze equivalent",
            where=where or None,
            hint=f"braze supports {', '.join(_ONNX_DTYPE_NAMES[k] for k in sorted(_ONNX_DTYPES))}; "
                 "cast the tensor in the exporter")
    return dt


def to_onnx_dtype(dt: DType) -> int:
    return _TO_ONNX[dt]


# ---------------------------------------------------------------------------
# tensors during import
# ---------------------------------------------------------------------------


class TV:
    """An ONNX tensor during import: a graph Value and/or a known value."""

    __slots__ = ("value", "known", "dtype", "shape", "name")

    def __init__(self, value: Value | None = None, known: np.ndarray | None = None, dtype: DType | None = None,
                 name: str | None = None):
        self.value = value
        self.known = known
        self.name = name
        if value is not None:
            self.dtype, self.shape = value.dtype, value.shape
        else:
            assert known is not None and dtype is not None
            self.dtype, self.shape = dtype, tuple(known.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"TV({self.name}: {self.dtype}{list(self.shape)}{' known' if self.known is not None else ''})"


class Seq:
    """An ONNX sequence during import: its tensors, as many as the import knows (a sequence braze
    imports has a length fixed at import: built by its ops, or a graph input of a given length), and
    its element type (an empty sequence still has one)."""

    __slots__ = ("items", "dtype", "name")

    def __init__(self, items: list, dtype: DType, name: str | None = None):
        self.items = list(items)
        self.dtype = dtype
        self.name = name

    def __repr__(self):
        return f"Seq({self.name}: {len(self.items)} x {self.dtype})"


class Opt:
    """An ONNX optional during import: a TV or a Seq, or None (empty)."""

    __slots__ = ("item", "name")

    def __init__(self, item, name: str | None = None):
        self.item = item
        self.name = name

    def __repr__(self):
        return f"Opt({self.name}: {self.item!r})"


def is_symbolic_array(a: np.ndarray) -> bool:
    return a.dtype == object and any(isinstance(x, S.SymExpr) for x in a.flat)


def normalize_known(a, dtype: DType) -> np.ndarray:
    """Object arrays of IntLikes collapse to numeric arrays when nothing is symbolic."""
    a = np.asarray(a) if not isinstance(a, np.ndarray) else a
    if a.dtype == object:
        if dtype.is_float or dtype is DType.bool:
            return a.astype(dtype.numpy)
        out = np.empty(a.shape, dtype=object)
        sym = False
        for i, x in enumerate(a.flat):
            if isinstance(x, S.SymExpr):
                sym = True
                out.flat[i] = x
            else:
                out.flat[i] = int(x)
        return out if sym else np.array(out.tolist() if out.ndim else int(out[()]), dtype=dtype.numpy).reshape(a.shape)
    return a.astype(dtype.numpy, copy=False)


def as_object(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == object else a.astype(object)
