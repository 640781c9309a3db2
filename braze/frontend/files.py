"""A model file as a braze Module, by its suffix: ``.onnx``, ``.pt2`` (torch.export.save), IR text.

``braze.compile(path)`` and ``braze inspect path`` both read files here, so
they accept the same files and fail with the same words.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BrazeError, ModelFormatError

ONNX_SUFFIXES = (".onnx",)
TORCH_SUFFIXES = (".pt2", ".pt")  # what torch.export.save writes (.pt2 is torch's own convention)
IR_SUFFIXES = (".braze", ".ir", ".txt")
SUFFIXES = ONNX_SUFFIXES + TORCH_SUFFIXES + IR_SUFFIXES

KINDS = ".onnx (ONNX), .pt2 (torch.export.save) or .braze (braze IR text)"


class ModelFileError(ModelFormatError):
    """The model file is missing, unreadable, or of a kind braze does not read."""


def check_model_path(path) -> Path:
    """``path`` as a Path if it names an existing file of a kind braze reads; ModelFileError otherwise."""
    p = Path(os.fspath(path))
    if p.suffix.lower() not in SUFFIXES:
        raise ModelFileError(f"braze does not know how to read {str(p)!r} (suffix {p.suffix or 'none'!r})",
                             hint=f"give a model file ending in {KINDS}")
    if not p.exists():
        near = _similar(p)
        raise ModelFileError(f"no such model file: {p}",
                             hint=f"did you mean {near}?" if near else "check the path")
    if p.is_dir():
        raise ModelFileError(f"{p} is a directory, not a model file", hint=f"give a file ending in {KINDS}")
    return p


def _similar(p: Path) -> str | None:
    """An existing file next to ``p`` with the same stem and a model suffix (``m.pt`` -> ``m.pt2``)."""
    parent = p.parent if str(p.parent) else Path(".")
    try:
        for cand in sorted(parent.iterdir()):
            if cand != p and cand.is_file() and cand.suffix.lower() in SUFFIXES and \
                    (cand.stem == p.stem or cand.name.startswith(p.name)):
                return str(cand)
    except OSError:
        pass
    return None


def load_exported(path):
    """``torch.export.load(path)``, with a clear error for a file that is not an export archive."""
    from ..errors import require
    require("torch", "torch")
    import torch

    from .quiet import dropped_logs, quiet_exporters
    hint = ("save a model with torch.export.save(torch.export.export(model, args), 'model.pt2'); "
            "a torch.save checkpoint or a TorchScript file holds no graph braze can read")
    why = _not_an_export_archive(path)
    if why:
        raise ModelFileError(f"{path} is not a torch.export archive ({why})", hint=hint)
    try:
        # torch logs the failure with a traceback before raising: braze says it in one line
        with quiet_exporters(), dropped_logs("torch.export", "torch.export.pt2_archive._package"):
            return torch.export.load(str(path))
    except Exception as e:  # torch raises zipfile / RuntimeError / KeyError for a foreign file
        first = str(e).strip().splitlines()[0] if str(e).strip() else "unreadable"
        raise ModelFileError(f"{path} is not a torch.export archive ({type(e).__name__}: {first})",
                             hint=hint) from None


def _not_an_export_archive(path) -> str | None:
    """Why the file is surely not a torch.export archive (a zip holding ``archive_format``), or None."""
    import zipfile
    try:
        if not zipfile.is_zipfile(path):
            return "not a zip archive"
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile) as e:
        return f"unreadable: {e}"
    if not any(n == "archive_format" or n.endswith("/archive_format") for n in names):
        kind = "a torch.save checkpoint" if any(n.endswith("data.pkl") for n in names) else "another zip archive"
        return f"it looks like {kind}"
    return None


def load_model_file(path, *, dim_ranges=None, dynamic_shapes=None):
    """The model in ``path`` as a braze Module.

    ``dim_ranges`` ({name: (lo, hi)}) ranges an ONNX model's dim_params;
    ``dynamic_shapes`` (torch.export's format) names a .pt2 program's dims,
    whose names torch.export.save does not keep.
    """
    p = check_model_path(path)
    suffix = p.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        if dynamic_shapes is not None:
            raise BrazeError("dynamic_shapes applies to torch programs; an ONNX model's dims are its dim_params",
                             hint="range them with braze.import_onnx(path, dim_ranges={'batch': (1, 64)})")
        from .onnx import import_onnx
        return import_onnx(p, dim_ranges=dim_ranges)
    if dim_ranges:
        raise BrazeError("dim_ranges applies to ONNX models; a torch program carries its dims' ranges",
                         hint="set them with torch.export.Dim(name, min=..., max=...) at export")
    if suffix in TORCH_SUFFIXES:
        from .torch import import_torch
        return import_torch(load_exported(p), dynamic_shapes=dynamic_shapes)
    from ..ir import parse
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelFileError(f"cannot read {p}: {e}") from None
    return parse(text)


__all__ = ["load_model_file", "load_exported", "check_model_path", "ModelFileError", "SUFFIXES"]
