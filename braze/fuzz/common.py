"""What the generator, its proposers and their operand helpers share: the graph's values with
what the tolerance model needs (``GVal``), operands to create (``New``), ``Reject``, and the
dtypes and dims they draw from. The generator imports the proposers; all import this module."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Value
from ..ir.types import DType, TensorType

F32, F64, I64, I32, BOOL = DType.float32, DType.float64, DType.int64, DType.int32, DType.bool
BF16, F16 = DType.bfloat16, DType.float16
STATIC_DIMS = (1, 1, 2, 3, 4, 5, 7, 8, 16)
ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")  # what the gemm/conv epilogues fuse


@dataclass
class GVal:
    v: Value
    exact: bool = True
    special: bool = False
    ibound: float = 1.0
    uses: int = 0  # nodes that read it so far

    @property
    def t(self) -> TensorType:
        return self.v.type

    @property
    def dtype(self) -> DType:
        return self.v.type.dtype

    @property
    def shape(self):
        return self.v.type.shape


@dataclass
class New:
    """An operand to create if the candidate is accepted: a parameter or a constant."""

    type: TensorType
    const: bool = False
    index_dim: object = None  # for index tensors: values drawn in [-dim, dim)
    low: float | None = None  # ints: value range; floats: positive values when low >= 0
    high: float | None = None
    data: np.ndarray | None = None  # constants: the data (drawn now, from the seed)


class Reject(Exception):
    """This candidate does not fit; try another."""
