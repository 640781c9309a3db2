"""Index arithmetic over ``IntLike | Expr``: symbolic floordiv/mod that simplify
when the remainder is provably in range, broadcasting and row-major reshape."""

from __future__ import annotations

from typing import Callable

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Binary, Expr, IndexValue
from .core import I64, TensorFn, cast


def _ie(x) -> Expr:
    return x if isinstance(x, Expr) else IndexValue(x)


def iadd(a, b):
    if isinstance(a, Expr) or isinstance(b, Expr):
        return Binary("add", cast(_ie(a), I64), cast(_ie(b), I64), I64)
    return S.add(a, b)


def imul(a, b):
    if isinstance(a, Expr) or isinstance(b, Expr):
        return Binary("mul", cast(_ie(a), I64), cast(_ie(b), I64), I64)
    return S.mul(a, b)


def _ub(x):
    """A symbolic upper bound of a non-negative index expression, or None."""
    if isinstance(x, int):
        return x
    if isinstance(x, S.Sym):
        if L.is_loop_var(x):
            e = L.loop_extent(x)
            return S.add(e, -1)
        return x
    if isinstance(x, S.Mod):
        if S.bounds(x.b)[0] > 0:
            return S.add(x.b, -1)
        return None
    if isinstance(x, S.FloorDiv):
        u = _ub(x.a)
        if u is None or S.bounds(x.b)[0] <= 0:
            return None
        return S.floordiv(u, x.b)
    if isinstance(x, S.Poly):
        total = 0
        for mono, c in x.terms:
            if c < 0 and mono:
                return None
            t = c
            for a in mono:
                u = _ub(a)
                if u is None:
                    return None
                t = S.mul(t, u)
            total = S.add(total, t)
        return total
    return None


def _nonneg(x) -> bool:
    return S.bounds(x)[0] >= 0


def _in_range(r, b) -> bool:
    """0 <= r < b provably (loop vars below their extents)."""
    if not _nonneg(r):
        return False
    u = _ub(r)
    if u is None:
        return False
    return S.bounds(S.add(S.add(b, S.mul(-1, u)), -1))[0] >= 0


def _split(a, b):
    """a = q*b + r, moving the terms that b divides exactly into q."""
    pb = S._to_poly(b)
    if len(pb) != 1:
        return 0, a
    q: dict = {}
    r: dict = {}
    for m, c in S._to_poly(a).items():
        e = S._poly_exact_div({m: c}, pb)
        if e is None:
            r[m] = c
        else:
            for mm, cc in e.items():
                q[mm] = q.get(mm, 0) + cc
    return S._from_poly(q), S._from_poly(r)


def ifloordiv(a, b):
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(b, int) and b == 0:  # by an empty dim: the tensor has no element to index
        return 0
    if isinstance(a, Expr):
        return Binary("div", cast(a, I64), cast(_ie(b), I64), I64)  # indices are >= 0: trunc == floor
    q, r = _split(a, b)
    if isinstance(r, int) and r == 0:
        return q
    if _in_range(r, b):
        return q
    return S.floordiv(a, b)


def imod(a, b):
    if isinstance(b, int) and b in (0, 1):  # 0: an empty dim (no element to index, see ifloordiv)
        return 0
    if isinstance(a, Expr):
        return Binary("mod", cast(a, I64), cast(_ie(b), I64), I64)
    q, r = _split(a, b)
    if _in_range(r, b):
        return r
    return S.mod(a, b)


def _deq(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int) or isinstance(b, int):
        return False
    return a == b


def broadcast_to(x: TensorFn, out_shape) -> Callable:
    lead = len(out_shape) - x.rank

    def fn(idx):
        return x(tuple(0 if (isinstance(d, int) and d == 1) else idx[lead + k] for k, d in enumerate(x.shape)))

    return fn


def reshape_index(idx, out_shape, in_shape) -> tuple:
    """Input index of the element at ``idx`` of a row-major reshape."""
    no, ni = len(out_shape), len(in_shape)
    p = 0
    while p < min(no, ni) and _deq(out_shape[p], in_shape[p]):
        p += 1
    s = 0
    while s < min(no, ni) - p and _deq(out_shape[no - 1 - s], in_shape[ni - 1 - s]):
        s += 1
    mid_out = out_shape[p:no - s]
    mid_in = in_shape[p:ni - s]
    if any(isinstance(d, int) and d == 0 for d in (*mid_out, *mid_in)):
        # no elements: the index is never evaluated (and the strides would divide by 0)
        return tuple(idx[:p]) + (0,) * len(mid_in) + tuple(idx[no - s:])
    flat = 0
    st = 1
    for k in range(len(mid_out) - 1, -1, -1):
        flat = iadd(flat, imul(idx[p + k], st))
        st = S.mul(st, mid_out[k])
    res = []
    for k, d in enumerate(mid_in):
        stride = S.prod(mid_in[k + 1:])
        v = ifloordiv(flat, stride)
        if k > 0:
            v = imod(v, d)
        res.append(v)
    return tuple(idx[:p]) + tuple(res) + tuple(idx[no - s:])
