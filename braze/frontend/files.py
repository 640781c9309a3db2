"""A model file as a braze Module, by its suffix, through the frontend that reads it
(registry.FRONTENDS): ``.onnx``, ``.pt2`` (torch.export.save), IR text.

``braze.compile(path)`` and ``braze inspect path`` both read files here, so
they accept the same files and fail with the same words.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ModelFileError
from .registry import check_options, for_path, model_kinds, suffixes


def check_model_path(path) -> Path:
    """``path`` as a Path if it names an existing model file or directory of a kind braze reads;
    ModelFileError otherwise."""
    p = Path(os.fspath(path))
    fe = for_path(p)
    if p.is_dir():
        if fe is None:
            raise ModelFileError(f"{p} is a directory braze does not read as a model", hint=f"give {model_kinds()}")
        return p
    if fe is None:
        raise ModelFileError(f"braze does not know how to read {str(p)!r} (suffix {p.suffix or 'none'!r})",
                             hint=f"give {model_kinds()}")
    if not p.exists():
        near = _similar(p)
        raise ModelFileError(f"no such model file: {p}",
                             hint=f"did you mean {near}?" if near else "check the path")
    return p


def _similar(p: Path) -> str | None:
    """An existing file next to ``p`` with the same stem and a model suffix (``m.pt`` -> ``m.pt2``)."""
    parent = p.parent if str(p.parent) else Path(".")
    try:
        for cand in sorted(parent.iterdir()):
            if cand != p and cand.is_file() and cand.suffix.lower() in suffixes() and \
                    (cand.stem == p.stem or cand.name.startswith(p.name)):
                return str(cand)
    except OSError:
        pass
    return None


def load_model_file(path, **options):
    """The model in ``path`` as a braze Module, read by the frontend of its suffix.

    ``options``: naming options, each for the frontends that take it (registry.Frontend.options):
    ``dim_ranges`` ({name: (lo, hi)}) ranges an ONNX model's dim_params; ``dynamic_shapes``
    (torch.export's format) names a .pt2 program's dims, whose names torch.export.save does not keep.
    """
    p = check_model_path(path)
    fe = for_path(p)
    return fe.read_file(p, **check_options(fe, str(p), **options))


__all__ = ["ModelFileError", "check_model_path", "load_model_file"]
