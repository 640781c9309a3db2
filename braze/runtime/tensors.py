"""Tensor specs and dtype codes shared by the Python runtime and the native ABI.

A dtype's code is its index in ``braze.ir.types.DType`` (the ``BRAZE_<DTYPE>``
defines in braze_abi.h). torch is imported only when a torch tensor or dtype is
handled; a torch tensor can only exist if torch is already in ``sys.modules``.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..ir.types import ML_DTYPES, NARROW, DType

DTYPES: tuple[DType, ...] = tuple(DType)
DTYPE_CODE: dict[DType, int] = {d: i for i, d in enumerate(DTYPES)}

ALIGN = 64  # bytes; alignment of outputs the runtime allocates

_NP_CODE: dict[np.dtype, int] = {}
_CODE_NP: list = [None] * len(DTYPES)
for _d, _i in DTYPE_CODE.items():
    if _d not in ML_DTYPES:  # ml_dtypes is imported only when one comes
        _NP_CODE[np.dtype(_d.numpy)] = _i
        _CODE_NP[_i] = np.dtype(_d.numpy)
_ml_loaded = False

_TORCH_CODE: dict | None = None
_CODE_TORCH: list | None = None


@dataclass(frozen=True)
class TensorSpec:
    """What a native entry takes or returns: dtype and rank (None: not checked here)."""

    dtype: DType | None
    rank: int | None
    name: str | None = None


def as_spec(s) -> TensorSpec:
    """A TensorSpec from a TensorSpec, a TensorType, a (dtype, rank[, name]) tuple or a dtype."""
    if isinstance(s, TensorSpec):
        return s
    if hasattr(s, "dtype") and hasattr(s, "rank"):  # braze.ir.types.TensorType
        return TensorSpec(_as_dtype(s.dtype), int(s.rank))
    if isinstance(s, tuple) and 1 <= len(s) <= 3:
        dt = _as_dtype(s[0])
        rank = None if len(s) < 2 or s[1] is None else int(s[1])
        return TensorSpec(dt, rank, s[2] if len(s) > 2 else None)
    return TensorSpec(_as_dtype(s), None)


def _as_dtype(d) -> DType | None:
    if d is None or isinstance(d, DType):
        return d
    if isinstance(d, str):
        return DType.parse(d)
    return DType.from_numpy(d)


def _load_ml_dtypes() -> None:
    global _ml_loaded
    if not _ml_loaded:
        _ml_loaded = True
        for d in ML_DTYPES:
            _NP_CODE[d.numpy] = DTYPE_CODE[d]  # imports ml_dtypes
            _CODE_NP[DTYPE_CODE[d]] = d.numpy


def np_dtype_code(dt: np.dtype) -> int:
    """The ABI code of a numpy dtype; InputError when braze has no such dtype."""
    code = _NP_CODE.get(dt)
    if code is None and not _ml_loaded:
        _load_ml_dtypes()
        code = _NP_CODE.get(dt)
    if code is None:
        raise InputError(f"dtype {dt} is not supported by braze",
                         hint=f"supported: {', '.join(d.name for d in DTYPES)}")
    return code


def code_np_dtype(code: int) -> np.dtype:
    """The numpy dtype of an ABI dtype code."""
    if not 0 <= code < len(DTYPES):
        raise ValueError(f"invalid dtype code {code}")
    dt = _CODE_NP[code]
    if dt is None:
        _load_ml_dtypes()
        dt = _CODE_NP[code]
    return dt


def _torch_tables():
    global _TORCH_CODE, _CODE_TORCH
    if _TORCH_CODE is None:
        import torch
        pairs = {DType.float32: torch.float32, DType.float16: torch.float16,
                 DType.bfloat16: torch.bfloat16, DType.float64: torch.float64,
                 DType.int64: torch.int64, DType.int32: torch.int32, DType.int8: torch.int8,
                 DType.uint8: torch.uint8, DType.bool: torch.bool, DType.int16: torch.int16,
                 DType.uint16: torch.uint16, DType.uint32: torch.uint32, DType.uint64: torch.uint64}
        for d in NARROW:  # torch's float8 types; its sub-byte types are packed, so not these
            if d.is_minifloat and hasattr(torch, d.name):
                pairs[d] = getattr(torch, d.name)
        _CODE_TORCH = [pairs.get(d) for d in DTYPES]
        _TORCH_CODE = {t: DTYPE_CODE[d] for d, t in pairs.items()}
    return _TORCH_CODE, _CODE_TORCH


def torch_dtype_code(dt) -> int:
    code = _torch_tables()[0].get(dt)
    if code is None:
        raise InputError(f"torch dtype {dt} is not supported by braze",
                         hint=f"supported: {', '.join(d.name for d in DTYPES)}")
    return code


def code_torch_dtype(code: int):
    t = _torch_tables()[1][code]
    if t is None:
        raise InputError(f"torch has no dtype for braze's {DTYPES[code].name}",
                         hint="call the model with NumPy arrays (ml_dtypes' types)")
    return t


def is_torch_tensor(x) -> bool:
    """True for a torch.Tensor, without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


POOLED = 1 << 20  # bytes: outputs this large come from a BlockPool


class BlockPool:
    """Large output blocks, used again once the caller has dropped every view of them.

    A fresh block of several MiB costs the kernel a page fault and a zeroed page per 4 KiB
    (or 2 MiB huge page): 13% of chain_ln's call at 8192 rows. A block is free again when
    the pool's list holds its only reference, so nothing the caller still sees is ever
    handed out twice. At most ``keep`` blocks are held; thread safe.
    """

    def __init__(self, keep: int):
        import threading
        self.keep = keep
        self._blocks: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 block of at least ``nbytes`` (and at most twice that), reused if one is free."""
        blocks = self._blocks
        with self._lock:
            free = [i for i in range(len(blocks)) if sys.getrefcount(blocks[i]) == 2]  # the list + the call's argument
            for i in free:
                if nbytes <= blocks[i].size <= 2 * nbytes:
                    return blocks[i]
            raw = np.empty(nbytes, np.uint8)
            if len(blocks) >= self.keep and free:
                del blocks[free[0]]  # the oldest free block makes room
            if len(blocks) < self.keep:
                blocks.append(raw)
            return raw


def aligned_empty(shape: tuple, dtype: np.dtype, align: int = ALIGN, pool: BlockPool | None = None) -> np.ndarray:
    """An uninitialised C-contiguous array; ``align``-byte aligned when 4 KiB or larger,
    from ``pool`` when ``POOLED`` bytes or larger.

    (numpy's own allocations are only 16-byte aligned; unaligned 64-byte vector
    stores split cache lines. Small arrays skip the ~1 us the alignment costs.)
    """
    n = 1
    for s in shape:
        n *= s
    nbytes = n * dtype.itemsize
    if nbytes < 4096:
        return np.empty(shape, dtype)
    raw = pool.take(nbytes + align) if pool is not None and nbytes >= POOLED else np.empty(nbytes + align, np.uint8)
    off = (-ctypes.addressof(ctypes.c_char.from_buffer(raw))) % align
    return np.ndarray(shape, dtype, raw, off)
