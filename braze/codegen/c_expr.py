"""Symbolic integers (braze.ir.sym) as C int64 expressions."""

from __future__ import annotations

from typing import Callable

from ..ir import sym as S

# floor division and modulo with Python semantics (C's / and % truncate)
C_INT_HELPERS = """
static inline int64_t braze_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t braze_mod(int64_t a, int64_t b) {
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t braze_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t braze_max64(int64_t a, int64_t b) { return a > b ? a : b; }
"""


def c_sym_name(s: S.Sym) -> str:
    return f"sym_{s.name}"


def int_expr(x, name: Callable[[S.Sym], str] = c_sym_name) -> str:
    """C source for an IntLike; symbols are printed with ``name``."""
    if isinstance(x, int):
        return f"INT64_C({x})" if abs(x) > 2**31 - 1 else str(x)
    if isinstance(x, S.Sym):
        return name(x)
    if isinstance(x, S.FloorDiv):
        return f"braze_floordiv({int_expr(x.a, name)}, {int_expr(x.b, name)})"
    if isinstance(x, S.Mod):
        return f"braze_mod({int_expr(x.a, name)}, {int_expr(x.b, name)})"
    if isinstance(x, (S.Min, S.Max)):
        fn = "braze_min64" if isinstance(x, S.Min) else "braze_max64"
        out = int_expr(x.args[0], name)
        for a in x.args[1:]:
            out = f"{fn}({out}, {int_expr(a, name)})"
        return out
    if isinstance(x, S.Poly):
        terms = []
        for mono, c in x.terms:
            factors = [int_expr(a, name) for a in mono]
            if c != 1 or not factors:
                factors.insert(0, f"INT64_C({c})" if abs(c) > 2**31 - 1 else f"(int64_t){c}")
            terms.append("*".join(factors))
        return "(" + " + ".join(terms) + ")"
    raise TypeError(f"not a symbolic integer: {x!r}")
