"""braze's IR: symbolic integers and constraints, types, the graph IR, its text form."""

from .constraints import ConstraintStore
from .graph import ConstantRef, Function, Module, Node, SourceLoc, Value
from .sym import IntLike, Sym, SymExpr, smax, smin
from .types import DType, TensorType


def parse(text: str, constants=None) -> Module:
    """Read the text form (``str(module)``) back into a Module."""
    from .parser import parse_module
    return parse_module(text, constants=constants)


def verify(module: Module) -> None:
    """Raise VerifyError if the module breaks an IR invariant."""
    from .verifier import verify_module
    verify_module(module)


__all__ = ["ConstraintStore", "ConstantRef", "DType", "Function", "IntLike", "Module", "Node", "SourceLoc",
           "Sym", "SymExpr", "TensorType", "Value", "parse", "smax", "smin", "verify"]
