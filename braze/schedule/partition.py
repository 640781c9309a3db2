"""Stage ``partition``: an innermost serial loop (one with no serial loop inside: a row's
pixels, around the vector loop over channels) whose body tests or clamps an index affine in
its variable (a window's taps at the image border) runs as three loops: the iterations before
the first where every such test holds, the interior where all hold, and the rest. The
interior's copy of the body has those tests replaced by true and those clamps by their
argument, then folded, so a convolution's inner pixels load without clamps and sum without
selects. Border copies keep the body as it was.

A test is an index comparison ``a*v + b OP X`` (``OP`` one of <, <=, >, >=) and a clamp an
index ``min(a*v + b, X)`` or ``max(a*v + b, X)``, with ``a`` a positive constant, ``X`` free of
``v`` and of every loop inside (it may use the loops outside), and ``b`` free of ``v`` and
affine in any loop inside it uses (a pool's window taps): the test must hold at every tap.
The interior is ``[lo, hi)``: ``lo`` the largest first iteration any test or clamp allows,
``hi`` the smallest end, both clamped into the loop; each of the three loops may be empty.
Tests the rule does not recognise stay in the interior too: it only drops what holds there by
construction.

Outer loops are not split: the rows' tests are Lets computed once per row, outside the pixel
loop, and a batch's rows are mostly one parallel loop (``_rows_joined``), indexed by remainder,
where they are not affine. Splitting the rows too where they are a serial loop of their own
(nine copies of the body) took 0.99x the time on the depthwise convnet at 2x96x96 and 0.95x at
8x224x224 (one interleaved run, AMD Zen 5, where runs differ by 5-10%): not worth three times
the code.

Runs after ``parallelize``, so every stage before it sees the nest whole.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Binary, Compare, Const, For, IndexValue, Kernel, Select, Store, Var
from ..ir.types import DType
from .nest import coeff, next_loop_index, subs_stmts, with_body

# the loops this stage makes are named _e<n> (a border) and _p<n> (the interior), and it leaves
# loops so named alone: a second run changes nothing, and a dump reads back as it was
EDGE, INTERIOR = "e", "p"
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_TRUE = Const(True, DType.bool)


def _loop_vars(x) -> frozenset:
    return frozenset(s for s in S.free_syms(x) if L.is_loop_var(s))


class _Strip:
    """Rewrites a body for the interior of loop ``v``, recording each test and clamp it drops
    as ``(a, b, op, X)``: ``a*v + b op X``, op "ge" or "le"."""

    def __init__(self, v, outer: frozenset):
        self.v, self.outer = v, outer
        self.found: list = []

    def _affine(self, e, x, op) -> bool:
        """Record ``e op x`` if ``e`` is a*v + b (a > 0 constant), x uses only outer loops, and b
        only outer loops and inner ones it is affine in (a window's taps): the test must then
        hold at b's least value over the inner loops (op >=) or its largest (op <=)."""
        a = coeff(e, self.v)
        if not isinstance(a, int) or a <= 0 or not _loop_vars(x) <= self.outer:
            return False
        if op in ("lt", "gt"):
            x, op = S.add(x, -1 if op == "lt" else 1), "le" if op == "lt" else "ge"
        b = S.add(e, S.mul(-a, self.v))
        for u in _loop_vars(b) - self.outer:
            c, n = coeff(b, u), L.loop_extent(u)
            if not (isinstance(c, int) and isinstance(n, int) and n >= 1):
                return False
            b = S.add(b, S.add(S.mul(-c, u), (min if op == "ge" else max)(0, c * (n - 1))))
        self.found.append((a, b, op, x))
        return True

    def index(self, x):
        """An index with the clamps of ``v`` dropped (bottom-up, so max(0, min(e, d)) goes whole)."""
        if isinstance(x, (int, S.Sym)):
            return x
        if isinstance(x, S.Poly):
            total = 0
            for mono, c in x.terms:
                t = c
                for atom in mono:
                    t = S.mul(t, self.index(atom))
                total = S.add(total, t)
            return total
        if isinstance(x, S.FloorDiv):
            return S.floordiv(self.index(x.a), self.index(x.b))
        if isinstance(x, S.Mod):
            return S.mod(self.index(x.a), self.index(x.b))
        args = [self.index(a) for a in x.args]
        mine = [a for a in args if self.v in S.free_syms(a)]
        rest = [a for a in args if self.v not in S.free_syms(a)]
        is_min = isinstance(x, S.Min)
        if len(mine) == 1 and rest:
            bound = S.smin(*rest) if is_min else S.smax(*rest)
            if self._affine(mine[0], bound, "le" if is_min else "ge"):
                return mine[0]
        return S.smin(*args) if is_min else S.smax(*args)

    def expr(self, e):
        def fn(y):
            if (isinstance(y, Compare) and y.op in _FLIP
                    and all(isinstance(z, IndexValue) or (isinstance(z, Const) and isinstance(z.value, int)
                                                          and not isinstance(z.value, bool)) for z in (y.a, y.b))):
                ea, eb = y.a.value, y.b.value
                va, vb = self.v in S.free_syms(ea), self.v in S.free_syms(eb)
                if ((va and not vb and self._affine(ea, eb, y.op))
                        or (vb and not va and self._affine(eb, ea, _FLIP[y.op]))):
                    return _TRUE
            return y
        return L.map_expr(e, fn, self.index)

    def stmts(self, stmts):
        out = []
        for s in stmts:
            if isinstance(s, For):
                out.append(replace(s, extent=self.index(s.extent), body=self.stmts(s.body)))
            elif isinstance(s, Store):
                poly, extra = s.index
                out.append(Store(s.buffer, (self.index(poly), None if extra is None else self.expr(extra)),
                                 self.expr(s.value), s.flat))
            else:
                out.append(replace(s, value=self.expr(s.value)))
        return out


def _fold(stmts, known: dict) -> list:
    """``stmts`` with true/false tests folded: ``x & true`` is x, a select on a constant its
    branch, and a Let that folds to a constant or another Let goes (its uses read that)."""
    def fn(y):
        if isinstance(y, Var) and y.name in known:
            return known[y.name]
        if isinstance(y, Binary) and y.op == "and" and y.dtype == DType.bool:
            for p, q in ((y.a, y.b), (y.b, y.a)):
                if isinstance(p, Const):
                    return q if p.value else p
        if isinstance(y, Select) and isinstance(y.cond, Const):
            return y.a if y.cond.value else y.b
        return y

    out = []
    known = dict(known)
    for s in stmts:
        if isinstance(s, For):
            out.append(replace(s, body=_fold(s.body, known)))
        elif isinstance(s, Store):
            poly, extra = s.index
            out.append(Store(s.buffer, (poly, None if extra is None else L.map_expr(extra, fn)),
                             L.map_expr(s.value, fn), s.flat))
        else:
            value = L.map_expr(s.value, fn)
            if isinstance(value, (Const, Var)):
                known[s.var.name] = value
            else:
                out.append(replace(s, value=value))
    return out


def _range(found, n):
    """``(lo, hi)``, 0 <= lo <= hi <= n: the iterations where every ``a*v + b op x`` holds."""
    lo, hi = 0, n
    for a, b, op, x in found:
        d = S.add(x, S.mul(-1, b))
        if op == "ge":  # v >= ceil(d / a)
            lo = S.smax(lo, S.floordiv(S.add(d, a - 1), a))
        else:  # v <= floor(d / a)
            hi = S.smin(hi, S.add(S.floordiv(d, a), 1))
    lo = S.smin(lo, n)
    return lo, S.smax(hi, lo)


def _split(f: For, outer: frozenset) -> list:
    strip = _Strip(f.var, outer)
    inner = _fold(strip.stmts(f.body), {})
    if not strip.found:
        return [f]
    lo, hi = _range(strip.found, f.extent)
    if S.provably_le(hi, lo):  # no interior
        return [f]

    def part(start, extent, body, prefix):
        if isinstance(extent, int) and extent <= 0:
            return []
        v = L.loop_var(extent, prefix)
        return [For(v, extent, subs_stmts(body, {f.var: S.add(v, start)}), f.kind)]

    return (part(0, lo, f.body, EDGE) + part(lo, S.add(hi, S.mul(-1, lo)), inner, INTERIOR)
            + part(hi, S.add(f.extent, S.mul(-1, hi)), f.body, EDGE))


def _stmts(stmts, outer: frozenset) -> list:
    out = []
    for s in stmts:
        if not isinstance(s, For):
            out.append(s)
            continue
        inner = [t for t in L.walk_stmts(s.body) if isinstance(t, (For, L.Alloc, Store))]
        if any(isinstance(t, L.Alloc) or (isinstance(t, For) and t.kind == "serial")
               or (isinstance(t, Store) and not t.flat) for t in inner):  # flatten left out: as it is
            out.append(replace(s, body=_stmts(s.body, outer | {s.var})))
        elif s.kind == "serial" and not s.var.name.startswith(("_" + EDGE, "_" + INTERIOR)):
            out.extend(_split(s, outer))
        else:
            out.append(s)
    return out


def partition(kernel: Kernel) -> Kernel:
    """Every innermost serial loop with border tests split into border, interior and border loops."""
    with L.kernel_names(next_loop_index(kernel)):
        return with_body(kernel, _stmts(kernel.body, frozenset()))


__all__ = ["partition"]
