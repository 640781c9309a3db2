"""A .pt2 file (``torch.export.save``) as an ExportedProgram, with a clear error for a file that is
not one (a ``torch.save`` checkpoint, a TorchScript file, another zip)."""

from __future__ import annotations

from ...errors import ModelFileError


def load_exported(path):
    """``torch.export.load(path)``, with a clear error for a file that is not an export archive."""
    from ...errors import require
    require("torch", "torch")
    import torch

    from ..quiet import dropped_logs, quiet_exporters
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


__all__ = ["load_exported"]
