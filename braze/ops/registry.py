"""The operator registry: every op by name (``get_op``, ``all_ops``).

An op is defined once, with ``defop`` (``braze.ops.opdef``), in the module of its family; the first
lookup imports all of them (``_catalog``). The definitions and contexts are re-exported here,
the names passes, lowering and tools import.
"""

from __future__ import annotations

from ..errors import ShapeError
from .context import InferCtx, RefCtx
from .opdef import DEFINED, REQUIRED, Attr, OpDef, defop


def get_op(name: str) -> OpDef:
    _load_all()
    try:
        return DEFINED[name]
    except KeyError:
        raise ShapeError(f"unknown op '{name}'",
                         hint="see braze.ops.all_ops() or the op table in README.md") from None


def all_ops() -> dict[str, OpDef]:
    _load_all()
    return dict(sorted(DEFINED.items()))


def _load_all():
    from . import _catalog  # noqa: F401  (imports every op module once)


__all__ = ["REQUIRED", "Attr", "InferCtx", "OpDef", "RefCtx", "all_ops", "defop", "get_op"]
