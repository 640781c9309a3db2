"""The contexts handed to an op's ``infer`` (the constraint store) and ``reference`` (the symbol values)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import ShapeError
from ..ir import sym as S
from ..ir.constraints import ConstraintStore


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
    """What a reference implementation may consult: the symbol values, and the interpreter that runs it."""

    def __init__(self, env: Mapping[str, int], constants: Mapping[str, Any] | None = None, module=None,
                 run: Callable | None = None):
        self.env = env
        self.constants = constants or {}
        self.module = module  # the Module being run (the `fused` op runs its callee)
        # run(func, arrays) -> results: the caller's interpreter, so an op that calls a function (`fused`)
        # needs no import of braze.reference, which sits above the ops
        self.run = run

    def eval(self, x):
        return S.evaluate(x, self.env)
