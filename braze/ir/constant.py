"""A module constant's identity: its content hash, and the placeholder for one whose data is not at hand."""

from __future__ import annotations

import hashlib

import numpy as np

from .types import TensorType


class ConstantRef:
    """A constant whose data is not at hand (parsed from text that elided it)."""

    def __init__(self, type: TensorType, digest: str):
        self.type = type
        self.digest = digest

    @property
    def shape(self):
        return self.type.shape

    def __repr__(self):
        return f"<ConstantRef {self.type} sha256:{self.digest[:12]}>"


def array_digest(a: np.ndarray) -> str:
    a = np.asarray(a, order="C")  # ascontiguousarray would hash a 0-d array as shape (1,)
    h = hashlib.sha256()
    h.update(f"{a.dtype.name}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()
