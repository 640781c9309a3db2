"""The operator registry.

Each op is one ``OpDef``: its inputs, its attributes (with kinds and
defaults), symbolic shape/dtype inference, and NumPy reference semantics.

Signatures, so an op file reads as a table:

    infer(ctx: InferCtx, *input_types, **attrs) -> TensorType | tuple[TensorType, ...]
    reference(ctx: RefCtx, *arrays, **attrs) -> np.ndarray | tuple[np.ndarray, ...]

An absent optional input arrives as ``None`` when a later input is given,
and is left out when trailing, so give optional parameters a ``None`` default. Symbolic attributes (``intlike``
kinds) arrive as IntLikes in ``infer`` and as evaluated ints in ``reference``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import ShapeError
from ..ir import sym as S
from ..ir.constraints import ConstraintStore
from ..ir.types import DType

REQUIRED = object()

# attribute kinds: how a value is checked, printed and evaluated
ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "intlike", "intlikes", "any")

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
    lower: Callable | None = None  # loop-IR lowering, set by braze.ops.lowering (@lowering)

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
        return v
    except (TypeError, ValueError) as e:
        raise ShapeError(f"op '{op}' attribute '{name}' must be {kind}, got {v!r} ({e})") from None


_REGISTRY: dict[str, OpDef] = {}


def defop(name: str, *, inputs, infer, reference, attrs=None, kind="opaque", doc="") -> OpDef:
    if name in _REGISTRY:
        raise ValueError(f"op '{name}' is registered twice")
    assert kind in OP_KINDS, kind
    op = OpDef(name, tuple(inputs), infer, reference, dict(attrs or {}), kind, doc)
    _REGISTRY[name] = op
    return op


def get_op(name: str) -> OpDef:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ShapeError(f"unknown op '{name}'",
                         hint="see braze.ops.all_ops() or the op table in README.md") from None


def all_ops() -> dict[str, OpDef]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def _load_all():
    from . import _catalog  # noqa: F401  (imports every op module once)


# ---------------------------------------------------------------------------
# contexts handed to infer and reference
# ---------------------------------------------------------------------------


class InferCtx:
    """What shape inference may consult: the constraint store and where it is."""

    def __init__(self, op: str, constraints: ConstraintStore, loc=None, constants: Mapping | None = None,
                 module=None):
        self.op = op
        self.constraints = constraints
        self.loc = loc
        self.constants = constants or {}
        self.module = module  # the Module being built or checked (the `fused` op reads its callee)

    def error(self, what: str, hint: str | None = None) -> ShapeError:
        return ShapeError(f"{self.op}: {what}", where=str(self.loc) if self.loc else None, hint=hint)

    def equal(self, a, b) -> bool | None:
        return self.constraints.equal(a, b)

    def assume_equal(self, a, b, what: str = "dims") -> None:
        """Record that a == b (checked at run time); error if provably unequal."""
        r = self.constraints.equal(a, b)
        if r is False:
            raise self.error(f"{what} {a} and {b} must be equal but are not")
        if r is None:
            self.constraints.add_equal(a, b)

    def simplify(self, x):
        return self.constraints.simplify(x)


class RefCtx:
    """What a reference implementation may consult: the symbol values."""

    def __init__(self, env: Mapping[str, int], constants: Mapping[str, Any] | None = None, module=None):
        self.env = env
        self.constants = constants or {}
        self.module = module  # the Module being run (the `fused` op runs its callee)

    def eval(self, x):
        return S.evaluate(x, self.env)
