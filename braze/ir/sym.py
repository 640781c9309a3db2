"""Symbolic integers for dynamic shapes.

An ``IntLike`` is a plain ``int`` or a ``SymExpr``. Every arithmetic result is
put in canonical form at construction, so structurally equal expressions
compare and hash equal (``2*(s+1) - 2 == 2*s``, ``(b*s)//s == b``). A result
that is constant collapses to ``int``; a lone symbol collapses to its ``Sym``.

Canonical form: a polynomial with integer coefficients over *atoms*. Atoms are
symbols and the non-polynomial nodes ``FloorDiv``, ``Mod``, ``Min`` and
``Max``, whose operands are themselves canonical. No computer-algebra system
is involved: simplification is a handful of exact rules plus interval bounds.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Union

IntLike = Union[int, "SymExpr"]

_INF = math.inf


class SymExpr:
    """Base of all symbolic integer expressions (immutable, hashable)."""

    __slots__ = ("_hash", "_str", "_kc", "_bc")

    def _made(self, slot: str, value):
        """``value`` kept in ``slot`` (an expression never changes, so what it makes once holds):
        the fast path of key, hash, str and bounds reads the slot itself."""
        object.__setattr__(self, slot, value)
        return value

    # --- identity -----------------------------------------------------------
    def _key(self) -> tuple:
        raise NotImplementedError

    def key(self) -> tuple:
        """The structural identity (equal keys: the same expression), made once: simplifying a
        min or max compares its arguments' keys again and again (partition's substitutions)."""
        try:
            return self._kc
        except AttributeError:
            return self._made("_kc", self._key())

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            return self._made("_hash", hash(self.key()))

    def __eq__(self, other) -> bool:
        if isinstance(other, SymExpr):
            return self is other or self.key() == other.key()
        return False

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    def __str__(self) -> str:
        # printed once: the ordering of a polynomial's terms prints its atoms again and again
        try:
            return self._str
        except AttributeError:
            return self._made("_str", self._text())

    def _text(self) -> str:
        raise NotImplementedError

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of symbolic expression '{self}' is unknown; "
                        "compare with braze.ir.sym.ConstraintStore or evaluate it first")

    def __int__(self) -> int:
        raise TypeError(f"symbolic expression '{self}' has no integer value until its symbols are bound")

    # --- arithmetic ---------------------------------------------------------
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return add(self, mul(-1, o))
    def __rsub__(self, o): return add(o, mul(-1, self))
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __neg__(self): return mul(-1, self)
    def __pos__(self): return self
    def __floordiv__(self, o): return floordiv(self, o)
    def __rfloordiv__(self, o): return floordiv(o, self)
    def __mod__(self, o): return mod(self, o)
    def __rmod__(self, o): return mod(o, self)

    # --- queries ------------------------------------------------------------
    def free_syms(self) -> frozenset["Sym"]:
        raise NotImplementedError

    def evaluate(self, env: Mapping) -> int:
        """Value under ``env`` (symbol name or Sym -> int)."""
        raise NotImplementedError

    def subs(self, mapping: Mapping) -> IntLike:
        """Replace symbols (by name or Sym) with IntLikes, re-canonicalizing."""
        raise NotImplementedError

    def bounds(self) -> tuple[float, float]:
        """Interval containing every value, from symbol ranges (may be +-inf); made once (an
        expression and its symbols never change), as simplifying a min or max asks it often."""
        try:
            return self._bc
        except AttributeError:
            return self._made("_bc", self._bounds())

    def _bounds(self) -> tuple[float, float]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self)


# ---------------------------------------------------------------------------
# atoms
# ---------------------------------------------------------------------------


class Sym(SymExpr):
    """A named dimension. Equality is by name; the range is metadata."""

    __slots__ = ("name", "lo", "hi")

    def __init__(self, name: str, lo: int = 1, hi: int | None = None):
        if not name or not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
            raise ValueError(f"invalid symbol name {name!r}: use letters, digits and '_'")
        if hi is not None and hi < lo:
            raise ValueError(f"symbol {name}: empty range [{lo}, {hi}]")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "lo", int(lo))
        object.__setattr__(self, "hi", None if hi is None else int(hi))

    def __setattr__(self, k, v):
        raise AttributeError("Sym is immutable")

    def _key(self):
        return ("s", self.name)

    def free_syms(self):
        return frozenset((self,))

    def evaluate(self, env):
        if self in env:
            return int(env[self])
        if self.name in env:
            return int(env[self.name])
        raise KeyError(f"symbol '{self.name}' is not bound")

    def subs(self, mapping):
        if self in mapping:
            return mapping[self]
        if self.name in mapping:
            return mapping[self.name]
        return self

    def _bounds(self):
        return (self.lo, _INF if self.hi is None else self.hi)

    def range_str(self) -> str:
        return f"[{self.lo}, {'inf' if self.hi is None else self.hi}]"

    def _text(self):
        return self.name


class FloorDiv(SymExpr):
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)

    def _key(self):
        return ("fd", _k(self.a), _k(self.b))

    def free_syms(self):
        return _fs(self.a) | _fs(self.b)

    def evaluate(self, env):
        return evaluate(self.a, env) // evaluate(self.b, env)

    def subs(self, m):
        return floordiv(subs(self.a, m), subs(self.b, m))

    def _bounds(self):
        alo, ahi = bounds(self.a)
        blo, bhi = bounds(self.b)
        if blo <= 0:
            return (-_INF, _INF)
        cands = [_fdiv(x, y) for x in (alo, ahi) for y in (blo, bhi)]
        return (min(cands), max(cands))

    def _text(self):
        return f"({_paren(self.a)} // {_paren(self.b)})"


class Mod(SymExpr):
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)

    def _key(self):
        return ("md", _k(self.a), _k(self.b))

    def free_syms(self):
        return _fs(self.a) | _fs(self.b)

    def evaluate(self, env):
        return evaluate(self.a, env) % evaluate(self.b, env)

    def subs(self, m):
        return mod(subs(self.a, m), subs(self.b, m))

    def _bounds(self):
        blo, bhi = bounds(self.b)
        if blo <= 0:
            return (-_INF, _INF)
        alo, ahi = bounds(self.a)
        lo = 0
        hi = bhi - 1
        if alo >= 0:
            hi = min(hi, ahi)
        return (lo, hi)

    def _text(self):
        return f"({_paren(self.a)} % {_paren(self.b)})"


class _MinMax(SymExpr):
    __slots__ = ("args",)
    _tag = ""
    _fn = None

    def __init__(self, args: tuple):
        object.__setattr__(self, "args", args)

    def _key(self):
        return (self._tag,) + tuple(_k(a) for a in self.args)

    def free_syms(self):
        out = frozenset()
        for a in self.args:
            out |= _fs(a)
        return out

    def evaluate(self, env):
        return type(self)._fn(evaluate(a, env) for a in self.args)

    def subs(self, m):
        ctor = smin if self._tag == "min" else smax
        return ctor(*(subs(a, m) for a in self.args))

    def _bounds(self):
        bs = [bounds(a) for a in self.args]
        f = type(self)._fn
        return (f(b[0] for b in bs), f(b[1] for b in bs))

    def _text(self):
        return f"{self._tag}({', '.join(str(a) for a in self.args)})"


class Min(_MinMax):
    __slots__ = ()
    _tag = "min"
    _fn = min


class Max(_MinMax):
    __slots__ = ()
    _tag = "max"
    _fn = max


# ---------------------------------------------------------------------------
# polynomials over atoms
# ---------------------------------------------------------------------------

# A monomial is a sorted tuple of atoms (repeats are powers); () is the constant.
# A polynomial is a dict {monomial: nonzero coefficient}.


def _atom_sort_key(a) -> str:
    return str(a)


class Poly(SymExpr):
    """Sum of coefficient * monomial terms; at least two terms or a scaled atom."""

    __slots__ = ("terms",)

    def __init__(self, terms: tuple):
        object.__setattr__(self, "terms", terms)

    def _key(self):
        return ("p",) + tuple((tuple(_k(a) for a in mono), c) for mono, c in self.terms)

    def free_syms(self):
        out = frozenset()
        for mono, _ in self.terms:
            for a in mono:
                out |= a.free_syms()
        return out

    def evaluate(self, env):
        total = 0
        for mono, c in self.terms:
            v = c
            for a in mono:
                v *= a.evaluate(env)
            total += v
        return total

    def subs(self, m):
        total = 0
        for mono, c in self.terms:
            v = c
            for a in mono:
                v = mul(v, a.subs(m))
            total = add(total, v)
        return total

    def _bounds(self):
        lo = hi = 0.0
        for mono, c in self.terms:
            tlo, thi = float(c), float(c)
            for a in mono:
                tlo, thi = _imul((tlo, thi), a.bounds())
            lo += tlo
            hi += thi
        rlo, rhi = self._floordiv_bounds()
        return (max(lo, rlo), min(hi, rhi))

    def _floordiv_bounds(self) -> tuple[float, float]:
        """Bounds with each term c * (a // k) (k a positive int) read as c * (a - r) / k, r in
        [0, k - 1]: interval bounds treat a and a // k as unrelated, so alone they cannot see
        that n - n // 2 >= 0 (the slice bounds TF code computes from shapes)."""
        divs = [a.b for mono, _ in self.terms if len(mono) == 1 for a in mono
                if isinstance(a, FloorDiv) and isinstance(a.b, int) and a.b > 0]
        if not divs:
            return (-_INF, _INF)
        scale = math.lcm(*divs)
        exact: IntLike = 0
        rlo = rhi = 0.0
        for mono, c in self.terms:
            a = mono[0] if len(mono) == 1 else None
            if isinstance(a, FloorDiv) and isinstance(a.b, int) and a.b > 0:
                w = c * (scale // a.b)  # scale * c * (a // k) = w * a - w * r
                exact = add(exact, mul(w, a.a))
                lo_r, hi_r = -w * (a.b - 1), 0
                rlo, rhi = rlo + min(lo_r, hi_r), rhi + max(lo_r, hi_r)
            else:
                term: IntLike = c * scale
                for x in mono:
                    term = mul(term, x)
                exact = add(exact, term)
        elo, ehi = bounds(exact)
        lo, hi = (elo + rlo) / scale, (ehi + rhi) / scale
        # the sum takes integer values only
        return (math.ceil(lo) if lo > -_INF else lo, math.floor(hi) if hi < _INF else hi)

    def _text(self):
        parts = []
        # constant last, higher-degree first, for readable output
        for mono, c in sorted(self.terms, key=lambda t: (len(t[0]) == 0, -len(t[0]), [_atom_sort_key(a) for a in t[0]])):
            body = "*".join(_paren(a) for a in mono)
            if not mono:
                s = str(abs(c))
            elif abs(c) == 1:
                s = body
            else:
                s = f"{abs(c)}*{body}"
            if not parts:
                parts.append(s if c > 0 else f"-{s}")
            else:
                parts.append(("+ " if c > 0 else "- ") + s)
        return " ".join(parts)


def _paren(x) -> str:
    s = str(x)
    if isinstance(x, Poly) or (isinstance(x, int) and x < 0):
        return f"({s})"
    return s


def _imul(a, b):
    prods = []
    for x in a:
        for y in b:
            if x == 0 or y == 0:
                prods.append(0.0)
            else:
                prods.append(x * y)
    return (min(prods), max(prods))


def _fdiv(x, y):
    if math.isinf(x):
        return x if y > 0 else -x
    if math.isinf(y):
        return 0 if x >= 0 else -1
    return x // y


def _k(x):
    return x.key() if isinstance(x, SymExpr) else ("i", x)


def _fs(x):
    return x.free_syms() if isinstance(x, SymExpr) else frozenset()


def _to_poly(x) -> dict:
    if isinstance(x, Poly):
        return {m: c for m, c in x.terms}
    if isinstance(x, SymExpr):
        return {(x,): 1}
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            import numbers
            if isinstance(x, numbers.Integral):
                x = int(x)
            else:
                raise TypeError
        except TypeError:
            raise TypeError(f"expected an int or symbolic expression, got {type(x).__name__}: {x!r}") from None
    return {(): x} if x else {}


def _from_poly(d: dict) -> IntLike:
    d = {m: c for m, c in d.items() if c}
    if not d:
        return 0
    if len(d) == 1:
        (m, c), = d.items()
        if not m:
            return c
        if c == 1 and len(m) == 1:
            return m[0]
    terms = tuple(sorted(d.items(), key=lambda t: (len(t[0]), [_atom_sort_key(a) for a in t[0]])))
    return Poly(terms)


def _mono_mul(m1, m2):
    return tuple(sorted(m1 + m2, key=_atom_sort_key))


def add(a, b) -> IntLike:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a + b
    d = _to_poly(a)
    for m, c in _to_poly(b).items():
        d[m] = d.get(m, 0) + c
    return _from_poly(d)


def mul(a, b) -> IntLike:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a * b
    pa, pb = _to_poly(a), _to_poly(b)
    out: dict = {}
    for m1, c1 in pa.items():
        for m2, c2 in pb.items():
            m = _mono_mul(m1, m2)
            out[m] = out.get(m, 0) + c1 * c2
    return _from_poly(out)


def _poly_exact_div(pa: dict, pb: dict):
    """pa / pb when pb is one term c*m and divides every term of pa; else None."""
    if len(pb) != 1:
        return None
    (mb, cb), = pb.items()
    out = {}
    for m, c in pa.items():
        if c % cb:
            return None
        rest = list(m)
        for atom in mb:
            if atom in rest:
                rest.remove(atom)
            else:
                return None
        out[tuple(rest)] = c // cb
    return out


def floordiv(a, b) -> IntLike:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("symbolic floordiv by zero")
        return a // b
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError(f"floordiv of '{a}' by zero")
    if isinstance(b, int) and b == 1:
        return a
    if _k(a) == _k(b) and bounds(b)[0] > 0:
        return 1
    pa, pb = _to_poly(a), _to_poly(b)
    if isinstance(b, int):
        # (q*b + r) // b == q + r // b exactly, for any integers q, r
        q = {m: c // b for m, c in pa.items() if c % b == 0}
        r = {m: c for m, c in pa.items() if c % b != 0}
        if not r:
            return _from_poly(q)
        rexpr = _from_poly(r)
        if isinstance(rexpr, int):
            return add(_from_poly(q), rexpr // b)
        lo, hi = bounds(rexpr)
        if b > 0 and lo >= 0 and hi < b:
            return _from_poly(q)
        if b > 0 and isinstance(rexpr, FloorDiv) and isinstance(rexpr.b, int) and rexpr.b > 0:
            # (x // m) // b == x // (m*b) for positive m, b
            return add(_from_poly(q), floordiv(rexpr.a, rexpr.b * b))
        return add(_from_poly(q), FloorDiv(rexpr, b))
    if isinstance(a, FloorDiv) and not isinstance(b, int) and bounds(a.b)[0] >= 0 and bounds(b)[0] >= 0:
        # (x // m) // b == x // (m*b) for positive m, b (torch writes either form); a divisor that
        # cannot be negative is positive wherever the expression is defined
        return floordiv(a.a, mul(a.b, b))
    if bounds(b)[0] > 0:
        exact = _poly_exact_div(pa, pb)
        if exact is not None:
            return _from_poly(exact)
        # split off the terms that b divides exactly
        if len(pb) == 1:
            q, r = {}, {}
            for m, c in pa.items():
                e = _poly_exact_div({m: c}, pb)
                if e is None:
                    r[m] = c
                else:
                    for mm, cc in e.items():
                        q[mm] = q.get(mm, 0) + cc
            if q:
                return add(_from_poly(q), floordiv(_from_poly(r), b))
            rexpr = _from_poly(r)
            lo, hi = bounds(rexpr)
            blo, _ = bounds(b)
            if lo >= 0 and hi < blo:
                return 0
    return FloorDiv(a, b)


def mod(a, b) -> IntLike:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("symbolic mod by zero")
        return a % b
    if isinstance(b, int) and b == 0:
        raise ZeroDivisionError(f"mod of '{a}' by zero")
    if isinstance(b, int) and abs(b) == 1:
        return 0
    pa, pb = _to_poly(a), _to_poly(b)
    if isinstance(b, int):
        r = {m: c % b for m, c in pa.items() if c % b}
        rexpr = _from_poly(r)
        if isinstance(rexpr, int):
            return rexpr % b
        lo, hi = bounds(rexpr)
        if b > 0 and lo >= 0 and hi < b:
            return rexpr
        if isinstance(rexpr, Mod) and isinstance(rexpr.b, int) and rexpr.b % b == 0:
            return mod(rexpr.a, b)
        return Mod(rexpr, b)
    if bounds(b)[0] > 0 and len(pb) == 1:
        r = {m: c for m, c in pa.items() if _poly_exact_div({m: c}, pb) is None}
        rexpr = _from_poly(r)
        if isinstance(rexpr, int) and rexpr == 0:
            return 0
        lo, hi = bounds(rexpr)
        if lo >= 0 and hi < bounds(b)[0]:
            return rexpr
        return Mod(rexpr, b)
    return Mod(a, b)


def _minmax(ctor, pick, args) -> IntLike:
    flat = []
    for a in args:
        if isinstance(a, ctor):
            flat.extend(a.args)
        else:
            _to_poly(a)  # type check
            flat.append(a)
    consts = [a for a in flat if isinstance(a, int)]
    cands: dict = {}
    for a in flat:
        if not isinstance(a, int):
            cands.setdefault(_k(a), a)
    # Visit the candidates in a canonical order (constant first, then by text),
    # so that the result does not depend on the order of the arguments: when two
    # arguments are provably equal in value, the first in this order is kept.
    items = ([pick(consts)] if consts else []) + sorted(cands.values(), key=_canon_sort_key)
    keep: list = []
    for a in items:
        # a is redundant if some kept b is provably never beaten by a
        if any(provably_le(b, a) if pick is min else provably_le(a, b) for b in keep):
            continue
        keep = [b for b in keep if not (provably_le(a, b) if pick is min else provably_le(b, a))]
        keep.append(a)
    if len(keep) == 1:
        return keep[0]
    return ctor(tuple(sorted(keep, key=_canon_sort_key)))


def _canon_sort_key(x):
    return (str(x), repr(_k(x)))


def provably_le(a, b) -> bool:
    """True when a <= b for every value of the symbols (by interval bounds)."""
    return bounds(add(b, mul(-1, a)))[0] >= 0



def smin(*args) -> IntLike:
    if all(isinstance(a, int) for a in args):
        return min(args)
    return _minmax(Min, min, args)


def smax(*args) -> IntLike:
    if all(isinstance(a, int) for a in args):
        return max(args)
    return _minmax(Max, max, args)


# ---------------------------------------------------------------------------
# helpers that accept plain ints too
# ---------------------------------------------------------------------------


def is_symbolic(x) -> bool:
    return isinstance(x, SymExpr)


def evaluate(x: IntLike, env: Mapping) -> int:
    return x.evaluate(env) if isinstance(x, SymExpr) else int(x)


def subs(x: IntLike, mapping: Mapping) -> IntLike:
    return x.subs(mapping) if isinstance(x, SymExpr) else x


def bounds(x: IntLike) -> tuple[float, float]:
    return x.bounds() if isinstance(x, SymExpr) else (x, x)


def free_syms(x: IntLike) -> frozenset:
    return x.free_syms() if isinstance(x, SymExpr) else frozenset()


def prod(xs: Iterable[IntLike]) -> IntLike:
    out: IntLike = 1
    for x in xs:
        out = mul(out, x)
    return out


def as_intlike(x) -> IntLike:
    """Coerce numpy ints and similar to int; keep SymExpr as is."""
    if isinstance(x, SymExpr):
        return x
    _to_poly(x)
    return int(x)
