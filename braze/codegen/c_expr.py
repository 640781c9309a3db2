"""Symbolic integers (braze.ir.sym ``IntLike``) as C ``int64_t`` expressions.

The one IntLike -> C printer, shared by generated kernels (``c_kernel``) and
the host entry code (``host``, ``host_checks``). Floor division, modulo, min
and max with Python semantics are the inline helpers ``bz_floordiv``,
``bz_floormod``, ``bz_imin`` and ``bz_imax`` of ``include/braze_vec.h``, which
every translation unit gets through ``c_kernel.c_prelude``.
"""

from __future__ import annotations

from typing import Callable

from ..errors import BrazeError
from ..ir import sym as S


def c_sym_name(s: S.Sym) -> str:
    return f"sym_{s.name}"


def c_int_lit(v: int) -> str:
    """A C integer literal; values outside int32 get ``INT64_C``."""
    if -2 ** 31 < v < 2 ** 31:
        return str(v)
    return f"INT64_C({v})"


def int_expr(x, name: Callable[[S.Sym], str] = c_sym_name, *, trust_bounds: bool = False) -> str:
    """C source for an IntLike; symbols are printed with ``name``.

    With ``trust_bounds``, a floordiv/mod whose dividend is provably >= 0 and
    divisor > 0 (``sym.bounds``) is printed as C's ``/`` / ``%``. Only for code
    where every symbol is known to lie in its declared range (generated kernels;
    not the input checks, which evaluate expressions before the range checks).
    """

    def p(v):
        if isinstance(v, int):
            return c_int_lit(v)
        if isinstance(v, S.Sym):
            return name(v)
        if isinstance(v, S.Poly):
            parts = []
            for mono, c in sorted(v.terms, key=lambda t: (len(t[0]) == 0, str(t))):
                fs = [p(a) for a in mono]
                if not fs:
                    parts.append(c_int_lit(c))
                elif c == 1:
                    parts.append("*".join(fs))
                else:
                    parts.append("*".join([c_int_lit(c)] + fs))
            return "(" + " + ".join(parts) + ")"
        if isinstance(v, (S.FloorDiv, S.Mod)):
            div = isinstance(v, S.FloorDiv)
            if trust_bounds and S.bounds(v.a)[0] >= 0 and S.bounds(v.b)[0] > 0:
                return f"({p(v.a)} {'/' if div else '%'} {p(v.b)})"
            return f"{'bz_floordiv' if div else 'bz_floormod'}({p(v.a)}, {p(v.b)})"
        if isinstance(v, (S.Min, S.Max)):
            fn = "bz_imin" if isinstance(v, S.Min) else "bz_imax"
            out = p(v.args[0])
            for a in v.args[1:]:
                out = f"{fn}({out}, {p(a)})"
            return out
        raise BrazeError(f"cannot emit index expression {v!r} as C")

    return p(x)


def nbytes_c(v) -> str:
    """C for the byte size of value ``v`` (its shape may be symbolic)."""
    return f"(size_t)({int_expr(S.mul(v.type.numel(), v.dtype.itemsize))})"
