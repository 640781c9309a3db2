"""One op's definition: its inputs, its attributes (with kinds and defaults), symbolic
shape/dtype inference and NumPy reference semantics; ``defop`` adds it to the table.

Signatures, so an op file reads as a table:

    infer(ctx: InferCtx, *input_types, **attrs) -> TensorType | tuple[TensorType, ...]
    reference(ctx: RefCtx, *arrays, **attrs) -> np.ndarray | tuple[np.ndarray, ...]

An absent optional input arrives as ``None`` when a later input is given,
and is left out when trailing, so give optional parameters a ``None`` default. Symbolic attributes (``intlike``
kinds) arrive as IntLikes in ``infer`` and as evaluated ints in ``reference``.

Op modules import this, never ``braze.ops.registry``: the registry's lookup imports every op
module (``_catalog``), so op modules sit below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import ShapeError
from ..ir import sym as S
from ..ir.types import DType

REQUIRED = object()

# attribute kinds: how a value is checked, printed and evaluated
# ("size": the symbol of a size the node decides when it runs, a Module.data_symbols entry; infer sees
# the Sym, the reference too, unevaluated)
ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "intlike", "intlikes", "any", "size")

# op kinds, used by later fusion passes
OP_KINDS = ("elementwise", "broadcast", "injective", "reduction", "normalization", "gemm", "conv",
            "pool", "attention", "creation", "opaque")


@dataclass(frozen=True)
class Attr:
    kind: str
    default: Any = REQUIRED
    doc: str = ""

    def __post_init__(self):
        assert self.kind in ATTR_KINDS, self.kind


@dataclass
class OpDef:
    name: str
    inputs: tuple[str, ...]  # "x", optional "bias?", variadic last "xs*"
    infer: Callable
    reference: Callable
    attrs: dict[str, Attr] = field(default_factory=dict)
    kind: str = "opaque"
    doc: str = ""
    narrow: bool = False  # takes narrow dtypes (float8, int4, ...): ops that only move or convert elements

    @property
    def variadic(self) -> bool:
        return bool(self.inputs) and self.inputs[-1].endswith("*")

    def input_names(self) -> list[str]:
        return [n.rstrip("?*") for n in self.inputs]

    def check_arity(self, n: int) -> str | None:
        required = sum(1 for i in self.inputs if not i.endswith(("?", "*")))
        if self.variadic:
            if n < required:
                return f"takes at least {required} inputs, got {n}"
            return None
        if not (required <= n <= len(self.inputs)):
            want = str(required) if required == len(self.inputs) else f"{required} to {len(self.inputs)}"
            return f"takes {want} inputs ({', '.join(self.inputs)}), got {n}"
        return None

    def complete_attrs(self, attrs: Mapping[str, Any]) -> dict:
        """Attributes with defaults filled in; raises on unknown or missing ones."""
        out = {}
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise ShapeError(f"op '{self.name}' got unknown attribute(s) {sorted(unknown)}",
                             hint=f"its attributes are: {', '.join(self.attrs) or 'none'}")
        for k, a in self.attrs.items():
            if k in attrs:
                out[k] = _coerce(self.name, k, a.kind, attrs[k])
            elif a.default is REQUIRED:
                raise ShapeError(f"op '{self.name}' needs attribute '{k}' ({a.kind})")
            else:
                out[k] = a.default
        return out


def _coerce(op, name, kind, v):
    try:
        if v is None:
            return None
        if kind == "int":
            return int(v)
        if kind == "float":
            return float(v)
        if kind == "bool":
            return bool(v)
        if kind == "str":
            return str(v)
        if kind == "dtype":
            return v if isinstance(v, DType) else DType.parse(str(v))
        if kind == "ints":
            return tuple(int(x) for x in v)
        if kind == "floats":
            return tuple(float(x) for x in v)
        if kind == "intlike":
            return S.as_intlike(v)
        if kind == "intlikes":
            return tuple(S.as_intlike(x) for x in v)
        if kind == "size" and not isinstance(v, S.Sym):
            raise TypeError("not a symbol")
        return v
    except (TypeError, ValueError) as e:
        raise ShapeError(f"op '{op}' attribute '{name}' must be {kind}, got {v!r} ({e})") from None


def _no_narrow(infer):
    """``infer``, refusing narrow inputs: their bytes are codes, not numbers, until a cast reads them."""
    def checked(ctx, *types, **attrs):
        for t in types:
            if t is not None and t.dtype.is_narrow:
                raise ctx.error(f"does not take {t.dtype.name} inputs",
                                hint=f"cast the {t.dtype.name} tensor to float32 (or an integer type) first: "
                                     "braze reads narrow types only through cast")
        return infer(ctx, *types, **attrs)
    return checked


# every op defined so far, by name; braze.ops.registry looks ops up here once all op modules are loaded
DEFINED: dict[str, OpDef] = {}


def defop(name: str, *, inputs, infer, reference, attrs=None, kind="opaque", doc="", narrow=False) -> OpDef:
    if name in DEFINED:
        raise ValueError(f"op '{name}' is registered twice")
    assert kind in OP_KINDS, kind
    op = OpDef(name, tuple(inputs), infer if narrow else _no_narrow(infer), reference, dict(attrs or {}), kind, doc,
               narrow)
    DEFINED[name] = op
    return op
