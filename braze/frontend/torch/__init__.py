"""The torch frontend: a ``torch.export.ExportedProgram`` as a braze Module.

torch's symbolic sizes (sympy expressions over ``s0, s1, ...``) become braze
symbols named after the user's ``torch.export.Dim`` names, with the ranges
torch recorded. Every ATen op maps through the converter table in
``aten.py`` (converters in ``aten_math/aten_shape/aten_nn.py``); SymInt
arithmetic is evaluated at import time.
"""

from .importer import import_torch


def supported_ops() -> list[str]:
    """The ATen op names (``aten.name`` or ``aten.name.overload``) with a converter."""
    from .aten import table
    return sorted(table())


__all__ = ["import_torch", "supported_ops"]
