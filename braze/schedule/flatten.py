"""Stage ``flatten``: loads and stores address one flat element offset ``(poly, extra)``.

Per-dim indices become ``sum(index[d] * stride[d])``: an ``IntLike`` polynomial in the
loop variables, plus an integer ``Expr`` for gathered (data-dependent) dims. The later
stages reason about contiguity on that polynomial.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir.loop import Expr, Kernel, Load, Store
from .nest import build_nest, flat_offset, map_nests


def flatten_expr(e: Expr) -> Expr:
    def fn(y):
        if isinstance(y, Load) and not y.flat:
            return Load(y.buffer, flat_offset(y.buffer, y.index), True)
        return y
    return L.map_expr(e, fn)


def flatten_store(s: Store) -> Store:
    if s.flat:
        return s
    idx = tuple(flatten_expr(i) if isinstance(i, Expr) else i for i in s.index)
    return Store(s.buffer, flat_offset(s.buffer, idx), flatten_expr(s.value), True)


def flatten_nest(vars_, exts, stores) -> list:
    return build_nest(vars_, exts, [flatten_store(s) for s in stores])


def flatten(kernel: Kernel) -> Kernel:
    """Every perfect nest's loads and stores, flat."""
    return map_nests(kernel, flatten_nest)
