"""Ops that every graph needs: constants."""

from __future__ import annotations

from ..ir.graph import ConstantRef
from ..ir.types import DType, TensorType
from .registry import Attr, defop


def _constant_infer(ctx, *, name):
    c = ctx.constants.get(name)
    if c is None:
        raise ctx.error(f"constant '@{name}' is not in the module")
    if isinstance(c, ConstantRef):
        return c.type
    return TensorType(DType.from_numpy(c.dtype), c.shape)


def _constant_ref(ctx, *, name):
    c = ctx.constants[name]
    if isinstance(c, ConstantRef):
        from ..errors import BrazeError
        raise BrazeError(f"constant '@{name}' has no data: the module was parsed from text "
                         "that elided it", hint="pass constants= to braze.ir.parse")
    return c


defop("constant", inputs=(), attrs={"name": Attr("str", doc="key in Module.constants")},
      infer=_constant_infer, reference=_constant_ref, kind="creation",
      doc="A weight or literal from the module's constants.")
