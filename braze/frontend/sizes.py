"""Size arithmetic shared by the frontends."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..ir import sym as S

CHECK_SPAN = 1 << 20  # values of a symbolic size checked by floor_scaled


def floor_scaled(n, s: float):
    """``floor(n * s)`` as the framework computes it (``n`` converted to double, times ``s``),
    for a size ``n`` (an IntLike) and a float scale ``s >= 0``: an int, or the symbolic
    ``floor(p * n / q)`` with ``p / q`` the simplest fraction that gives the same result for
    every value of ``n`` in its range (checked over the first 2**20 values). ``None`` when no
    small fraction does (then the size cannot be kept symbolic)."""
    if not S.is_symbolic(n):
        return int(math.floor(float(n) * s))
    if not (s >= 0 and math.isfinite(s)):
        return None
    lo, hi = S.bounds(n)
    lo = max(int(lo), 0) if math.isfinite(lo) else 0
    top = lo + CHECK_SPAN if not math.isfinite(hi) else min(int(hi), lo + CHECK_SPAN)
    v = np.arange(lo, top + 1, dtype=np.int64)
    want = np.floor(v.astype(np.float64) * s).astype(np.int64)
    for limit in (1 << 10, 1 << 20):
        fr = Fraction(s).limit_denominator(limit)
        p, q = fr.numerator, fr.denominator
        if p * top < 2 ** 62 and np.array_equal((p * v) // q, want):
            return S.floordiv(S.mul(p, n), q) if q != 1 else S.mul(p, n)
    return None
