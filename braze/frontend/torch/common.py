"""What the torch importer and its ATen converters share: dtypes, weights as NumPy arrays,
source locations, and the marker for an output braze does not compute. The importer imports
the converters; both import this module, so the imports run one way."""

from __future__ import annotations

import re

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.graph import SourceLoc
from ...ir.types import DType

ISSUES_HINT = "if your model needs it, file an issue with the op name and a small module that uses it"

_TORCH_DTYPES: dict | None = None


def torch_dtype_map() -> dict:
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch
        _TORCH_DTYPES = {
            torch.float32: DType.float32, torch.float16: DType.float16, torch.bfloat16: DType.bfloat16,
            torch.float64: DType.float64, torch.int64: DType.int64, torch.int32: DType.int32,
            torch.int8: DType.int8, torch.uint8: DType.uint8, torch.bool: DType.bool,
            torch.int16: DType.int16, torch.uint16: DType.uint16, torch.uint32: DType.uint32,
            torch.uint64: DType.uint64,
        }
    return _TORCH_DTYPES


def to_braze_dtype(dt, where: str | None = None) -> DType:
    m = torch_dtype_map()
    if dt in m:
        return m[dt]
    raise UnsupportedOpError(f"torch dtype {dt} is not supported by braze", where=where,
                             hint=f"supported dtypes: {', '.join(str(k).replace('torch.', '') for k in m)}; "
                                  "cast the tensor (e.g. .float()) before export")


def tensor_to_numpy(t, name: str) -> np.ndarray:
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    to_braze_dtype(t.dtype, where=f"constant '{name}'")
    return t.contiguous().numpy().copy()


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*(?:\n(?!\s*File ")\s*([^\n]*))?')


_TORCH_DIR: list = []


def _torch_dir() -> str | None:
    if not _TORCH_DIR:
        import os
        try:
            import torch
            _TORCH_DIR.append(os.path.dirname(torch.__file__) + os.sep)
        except Exception:
            _TORCH_DIR.append(None)
    return _TORCH_DIR[0]


def source_loc(node) -> SourceLoc:
    st = node.meta.get("stack_trace") or ""
    frames = _FRAME_RE.findall(st)
    file = line = code = None
    if frames:
        # the innermost frame outside torch itself (torch.nn's forward bodies say little)
        tdir = _torch_dir()
        user = [f for f in frames if not (tdir and f[0].startswith(tdir))]
        file, line, code = (user or frames)[-1]
        line = int(line)
        code = code.strip() or None
    name = None
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            name = path
    return SourceLoc(file=file, line=line, name=name or node.name, code=code)


class NotProduced:
    """An output of a multi-output ATen op that braze does not compute, or (with ``make``, which
    builds it) computes only where the graph uses it: a training forward's saved statistics."""

    def __init__(self, what: str, make=None):
        self.what = what
        self.make = make
