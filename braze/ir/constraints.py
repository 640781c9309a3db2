"""The shape-constraint store: what is known about the relations between symbols.

Facts are equalities (``seq == seq_k``, ``a*b == c*d``), divisibility
(``seq % 8 == 0``) and ranges. Queries answer ``True`` (proved), ``False``
(disproved) or ``None`` (unknown). Fusion and shape inference need the
relations between dims, not their values.
"""

from __future__ import annotations

from typing import Mapping

from . import sym as S
from .sym import IntLike, Sym


class ConstraintStore:
    def __init__(self):
        self._subst: dict[Sym, IntLike] = {}  # sym -> canonical replacement
        self._identities: list[IntLike] = []  # polynomials known to be zero
        self._divisible: dict[Sym, int] = {}  # sym -> known divisor
        self._syms: dict[str, Sym] = {}
        self.facts: list[tuple] = []  # as added, for printing and run-time checks

    # --- building -----------------------------------------------------------
    def add_symbol(self, s: Sym) -> Sym:
        old = self._syms.get(s.name)
        if old is not None and (old.lo, old.hi) != (s.lo, s.hi):
            lo = max(old.lo, s.lo)
            his = [h for h in (old.hi, s.hi) if h is not None]
            s = Sym(s.name, lo, min(his) if his else None)
        self._syms[s.name] = s
        return s

    def add_equal(self, a: IntLike, b: IntLike) -> None:
        a, b = self.simplify(a), self.simplify(b)
        if a == b or (isinstance(a, int) and isinstance(b, int) and a == b):
            return
        if isinstance(a, int) and isinstance(b, int):
            raise ValueError(f"contradictory constraint {a} == {b}")
        self.facts.append(("eq", a, b))
        if not isinstance(a, Sym) and isinstance(b, Sym):
            a, b = b, a
        if isinstance(a, Sym) and isinstance(b, Sym) and b.name > a.name:
            a, b = b, a  # keep the alphabetically first name as representative
        if isinstance(a, Sym) and a not in S.free_syms(b):
            self._subst[a] = b
            self._subst = {k: S.subs(v, {a: b}) for k, v in self._subst.items()}
            self._identities = [S.subs(p, {a: b}) for p in self._identities]
            return
        self._identities.append(S.add(a, S.mul(-1, b)))

    def add_product_equal(self, lhs, rhs) -> None:
        self.add_equal(S.prod(lhs), S.prod(rhs))

    def add_divisible(self, a: IntLike, k: int) -> None:
        a = self.simplify(a)
        self.facts.append(("div", a, k))
        if isinstance(a, Sym):
            old = self._divisible.get(a, 1)
            self._divisible[a] = old * k // _gcd(old, k)

    def add_range(self, s: Sym, lo: int, hi: int | None) -> Sym:
        self.facts.append(("range", s, lo, hi))
        return self.add_symbol(Sym(s.name, lo, hi))

    # --- querying -----------------------------------------------------------
    def symbol(self, name: str) -> Sym | None:
        return self._syms.get(name)

    @property
    def symbols(self) -> dict[str, Sym]:
        return dict(self._syms)

    def simplify(self, x: IntLike) -> IntLike:
        """Canonical form under the known equalities."""
        if not self._subst or not isinstance(x, S.SymExpr):
            return x
        return S.subs(x, self._subst)

    def equal(self, a: IntLike, b: IntLike) -> bool | None:
        d = self.simplify(S.add(a, S.mul(-1, b)))
        if isinstance(d, int):
            return d == 0
        if any(_is_multiple(d, p) for p in self._identities):
            return True
        lo, hi = self.bounds(d)
        if lo > 0 or hi < 0:
            return False
        return None

    def divisible(self, a: IntLike, k: int) -> bool | None:
        a = self.simplify(a)
        if isinstance(a, int):
            return a % k == 0
        # write each sym known divisible by m as m*fresh, then test the coefficients
        repl = {s: S.mul(m, Sym(f"_{s.name}_q")) for s, m in self._divisible.items()}
        e = S.subs(a, repl) if repl else a
        if isinstance(e, int):
            return e % k == 0
        terms = S._to_poly(e)
        if all(c % k == 0 for c in terms.values()):
            return True
        return None

    def bounds(self, x: IntLike) -> tuple:
        """(lowest, highest) value of ``x`` under the symbols' ranges (an int: itself twice;
        -inf / inf where a range is open)."""
        return S.bounds(self._with_ranges(x))

    def _with_ranges(self, x: IntLike) -> IntLike:
        """Re-attach the store's ranges to the symbols in ``x``."""
        repl = {s: self._syms[s.name] for s in S.free_syms(x) if s.name in self._syms}
        return S.subs(x, repl) if repl else x

    # --- run time -----------------------------------------------------------
    def violations(self, env: Mapping[str, int]) -> list[str]:
        """Messages for every fact that ``env`` (symbol name -> value) breaks."""
        out = []
        for s in self._syms.values():
            if s.name not in env:
                continue
            v = env[s.name]
            if v < s.lo or (s.hi is not None and v > s.hi):
                out.append(f"{s.name} = {v} is outside its range {s.range_str()}")
        for f in self.facts:
            try:
                if f[0] == "eq":
                    va, vb = S.evaluate(f[1], env), S.evaluate(f[2], env)
                    if va != vb:
                        out.append(f"{f[1]} == {f[2]} must hold, but {f[1]} = {va} and {f[2]} = {vb}")
                elif f[0] == "div":
                    va = S.evaluate(f[1], env)
                    if va % f[2]:
                        out.append(f"{f[1]} must be divisible by {f[2]}, but it is {va}")
            except KeyError:
                continue
        return out

    def copy(self) -> "ConstraintStore":
        c = ConstraintStore()
        c._subst = dict(self._subst)
        c._identities = list(self._identities)
        c._divisible = dict(self._divisible)
        c._syms = dict(self._syms)
        c.facts = list(self.facts)
        return c

    def __eq__(self, other):
        return isinstance(other, ConstraintStore) and self._syms == other._syms and \
            [(k, v.lo, v.hi) for k, v in sorted(self._syms.items())] == \
            [(k, v.lo, v.hi) for k, v in sorted(other._syms.items())] and \
            _facts_key(self.facts) == _facts_key(other.facts)


def _facts_key(facts):
    return [tuple(S._k(x) if isinstance(x, (int, S.SymExpr)) and not isinstance(x, bool) else x for x in f)
            for f in facts]


def _is_multiple(d: IntLike, p: IntLike) -> bool:
    """Whether d == k*p for some nonzero integer k (term by term)."""
    dp, pp = S._to_poly(d), S._to_poly(p)
    if not pp or set(dp) != set(pp):
        return False
    m = next(iter(pp))
    if dp[m] % pp[m]:
        return False
    k = dp[m] // pp[m]
    return all(dp[t] == k * c for t, c in pp.items())


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a
