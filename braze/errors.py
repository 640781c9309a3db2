"""braze's errors. Each says what is wrong, where, and what to do."""

from __future__ import annotations


class BrazeError(Exception):
    """Base of every error braze raises on purpose."""

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None):
        self.what = what
        self.where = where
        self.hint = hint
        msg = what
        if where:
            msg += f"\n  where: {where}"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)


class ModelFormatError(BrazeError):
    """The model file or object is malformed or unreadable."""


class ModelFileError(ModelFormatError):
    """The model file is missing, unreadable, or of a kind braze does not read."""


class UnsupportedOpError(BrazeError):
    """The model uses an operator (or a form of one) braze does not support."""


class ShapeError(BrazeError):
    """Shape or dtype inference failed: the op's inputs do not fit together."""


class InputError(BrazeError):
    """Run-time inputs break the function's signature: rank, dtype, dims, ranges."""


class IRParseError(BrazeError):
    """The IR text does not parse."""


class VerifyError(BrazeError):
    """The IR breaks an invariant (SSA, types, dangling values)."""


class MissingDependencyError(BrazeError):
    """An optional dependency (torch, onnx) is needed but not installed."""


class BrazeWarning(UserWarning):
    """Something braze worked around that the user should fix (e.g. a compile cache it cannot write)."""


def require(module: str, extra: str):
    """Import an optional dependency or raise a clear error naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"this feature needs the '{module}' package, which is not installed ({e})",
            hint=f"pip install 'braze[{extra}]'",
        ) from None
