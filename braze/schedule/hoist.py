"""Stage ``hoist`` (stitch): a ``Reduce``, and any non-trivial sub-expression, that does
not depend on a nest's inner loops becomes a ``Let`` at the outermost loop level it
depends on (before the nest when it depends on none); equal sub-expressions share one
Let. layer_norm's nest becomes ``for row: let mean = sum(..); let var = sum(..); for col:
store``: the row is read once per reduction, not once per element.

Lets are named ``r<n>`` (a reduction) or ``t<n>``, numbered past the kernel's names. An
integer divisor's check (``divisor``) stays in its loop.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir.loop import For, Kernel, Let, Reduce, Store, Var
from .nest import fresh_name, map_nests, used_names


def _shared(exprs) -> set:
    """Sub-expressions with two or more distinct parents (structurally): hoisted even at
    their own level, so a row value two reductions read is computed once."""
    parents: dict = {}
    for e in exprs:
        for x in L.walk(e):
            for ch in L.children(x):
                if not L.is_trivial(ch):
                    parents.setdefault(ch, set()).add(x)
    return {x for x, ps in parents.items() if len(ps) > 1}


class _Hoister:
    def __init__(self, vars_, names, exprs=()):
        self.shared = _shared(exprs)
        self.pos = {v: i for i, v in enumerate(vars_)}
        self.k = len(vars_) - 1
        self.level_of: dict = {}
        self.lets: dict = {lv: [] for lv in range(-1, self.k + 1)}
        self.memo: dict = {}
        self.checked: dict = {}
        self.names = names

    def checks(self, e) -> bool:
        """``e`` holds a ``divisor``."""
        hit = self.checked.get(e)
        if hit is None:
            hit = self.checked[e] = (isinstance(e, L.Unary) and e.fn == "divisor") or \
                any(self.checks(ch) for ch in L.children(e))
        return hit

    def lvl(self, e):
        """The innermost loop level ``e`` depends on (-1: none), None if it uses a loop var
        of its own (a Reduce's) or checks a divisor: hoisted, the check would run where the nest
        divides nothing (an empty tensor divided by a 0-d zero is no error in eager)."""
        if self.checks(e):
            return None
        lv = -1
        for v in L.free_loop_vars(e):
            if v not in self.pos:
                return None
            lv = max(lv, self.pos[v])
        for n in L.vars_used(e):
            lv = max(lv, self.level_of.get(n, -1))
        return lv

    def value(self, e, c):
        # a Reduce's body runs one loop deeper: what it reads at level c is hoisted too (from the
        # innermost loop, only another Reduce: td)
        cc = c + 0.5 if isinstance(e, Reduce) and c <= self.k else c
        return L.with_children(e, [self.td(ch, cc) for ch in L.children(e)])

    def td(self, e, c):
        """``e`` evaluated at loop level ``c``, its parts that depend on less hoisted out."""
        if L.is_trivial(e):
            return e
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        le = self.lvl(e)
        if le == self.k < c and not isinstance(e, Reduce):
            # the innermost loop's body stays Stores (vectorize), but for a reduction that reads
            # another reduction of the same row (a variance from its mean, in a nest of row-shaped
            # results): that one becomes a Let there, or it would run again per element summed
            return self.value(e, c)
        if le is not None and (le < c or ((isinstance(e, Reduce) or e in self.shared) and le <= c and le < self.k)):
            val = self.value(e, le)
            name = fresh_name(self.names, "r" if isinstance(val, Reduce) else "t")
            var = Var(name, e.dtype)
            self.lets[le].append(Let(var, val))
            self.level_of[name] = le
            self.memo[e] = var
            return var
        return self.value(e, c)


def _hoist(vars_, exts, stores, names) -> list:
    k = len(vars_) - 1
    if k < 0:
        return stores  # no loops to hoist out of
    h = _Hoister(vars_, names, [s.value for s in stores])
    stores = [Store(s.buffer, s.index, s.value if L.is_trivial(s.value) else h.value(s.value, k), s.flat)
              for s in stores]
    body = stores
    for lv in range(k, -1, -1):
        body = [For(vars_[lv], exts[lv], h.lets[lv] + body)]
    return h.lets[-1] + body


def hoist(kernel: Kernel) -> Kernel:
    """Loop-invariant reductions and sub-expressions of every perfect nest, as Lets."""
    names = used_names(kernel)
    return map_nests(kernel, lambda v, e, s: _hoist(v, e, s, names))


__all__ = ["hoist"]
