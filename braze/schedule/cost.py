"""A static cost model of loop-IR expressions, in rough cycles per element of scalar
code: what the schedule weighs when it decides to keep a value rather than recompute it.

The figures are relative estimates from the instruction counts of braze_vmath.h: a
transcendental costs ten to twenty-five simple ops, a division four. Loads count one:
a value read from a row already in L1 or L2.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir.loop import Binary, Expr, Load, Reduce, Unary

UNARY_COST = {"exp": 10, "expm1": 12, "log": 12, "log1p": 14, "tanh": 14, "erf": 14, "sigmoid": 14,
              "silu": 15, "gelu": 24, "gelu_tanh": 18, "sin": 16, "cos": 16, "sqrt": 4, "rsqrt": 5,
              "reciprocal": 4, **{f: 40 for f in L.LIBM_UNARY}}  # a libm call per lane
BINARY_COST = {"div": 4, "pow": 40, "mod": 6, "fmod": 20}

STORE_COST = 1  # writing a kept value to its row buffer
LOOP_COST = 4  # one more pass over a row: loop control, the tail


def node_cost(e: Expr) -> int:
    if isinstance(e, Unary):
        return UNARY_COST.get(e.fn, 1)
    if isinstance(e, Binary):
        return BINARY_COST.get(e.op, 1)
    if isinstance(e, Load):
        return 1
    if L.is_trivial(e):
        return 0
    return 1


def split_cost(e: Expr) -> tuple[int, list]:
    """(cost of evaluating ``e`` once outside its reductions, the Reduce nodes in it). A
    structurally repeated sub-expression counts once: C code names it once, and a kernel
    read back from its text counts the same."""
    seen: set = set()
    own, reduces, stack = 0, [], [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, Reduce):
            reduces.append(x)
            continue
        own += node_cost(x)
        stack.extend(L.children(x))
    return own, reduces


def expr_cost(e: Expr) -> int:
    """Cost of evaluating ``e`` once; each reduction inside counts its body once."""
    own, reduces = split_cost(e)
    return own + sum(expr_cost(r.body) for r in reduces)


def keep_saves(cost: int, uses: int) -> int:
    """What keeping a value in a row buffer saves against recomputing it in each of ``uses``
    passes: ``uses - 1`` evaluations, less one store, one load per use and one more pass."""
    return (uses - 1) * cost - (STORE_COST + uses + LOOP_COST)


__all__ = ["BINARY_COST", "UNARY_COST", "expr_cost", "keep_saves", "node_cost", "split_cost"]
