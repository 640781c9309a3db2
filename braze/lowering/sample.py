"""Lowering of ``grid_sample`` (2-D and 3-D): per output element, the grid point's coordinates (in x's dtype, the
reference's formulas in its order: braze/ops/sample.py), then each tap's load, 0 outside the image,
times its weight.
A tap's index is cast to int64 only where it lies inside the image, so no out-of-range or NaN float
is ever converted (undefined in C)."""

from __future__ import annotations

import itertools

from ..ir import sym as S
from ..ir.loop import Binary, Compare, Expr
from ..ops.sample import CUBIC_A
from .core import BOOL, I64, add, cast, const, div, intlike_value, lowering, mul, select, sub, un


def _and(a: Expr, b: Expr) -> Expr:
    return Binary("and", a, b, BOOL)


@lowering("grid_sample")
def _lower_grid_sample(ctx, x, grid, *, mode, padding_mode, align_corners):
    dt = x.dtype
    f = lambda v: const(v, dt)  # noqa: E731

    def unnormalize(g, size):
        if align_corners:
            return mul(div(add(g, f(1)), f(2)), sub(intlike_value(size, dt), f(1)))
        return div(sub(mul(add(g, f(1)), intlike_value(size, dt)), f(1)), f(2))

    def reflect(c, size):
        mn = f(0.0 if align_corners else -0.5)
        span = intlike_value(S.add(size, -1) if align_corners else size, dt)
        c = un("abs", sub(c, mn))
        extra = Binary("fmod", c, span, dt)
        flips = un("floor", div(c, span))
        even = Compare("eq", Binary("fmod", flips, f(2), dt), f(0))
        r = select(even, add(extra, mn), add(sub(span, extra), mn))
        return select(Compare("eq", span, f(0)), f(0), r)  # a one-pixel axis with align_corners

    def pad(c, size):
        if padding_mode == "zeros":
            return c
        if padding_mode == "reflection":
            c = reflect(c, size)
        # by compares, as torch clamps: NaN to 0 in 2-D, to the last pixel in 3-D (braze/ops/sample._clip)
        c = select(Compare("lt", c, f(0)), f(0), c) if len(x.shape) == 5 else select(Compare("gt", c, f(0)), c, f(0))
        hi = intlike_value(S.add(size, -1), dt)
        return select(Compare("lt", c, hi), c, hi)

    sizes = x.shape[2:]
    s = len(sizes)

    def fn(idx):
        n, c, out = idx[0], idx[1], tuple(idx[2:])
        g = [grid((n, *out, s - 1 - a)) for a in range(s)]  # x's spatial axis a reads grid component s-1-a

        def tap(coords):
            ok = None
            for co, size in zip(coords, sizes):
                inside = _and(Compare("ge", co, f(0)), Compare("le", co, intlike_value(S.add(size, -1), dt)))
                ok = inside if ok is None else _and(ok, inside)
            return ok, x((n, c, *(cast(select(ok, co, f(0)), I64) for co in coords)))

        def weighted(taps):
            total = None
            for (ok, v), wgt in taps:
                t = mul(select(ok, v, f(0)), wgt)
                if s == 3:  # torch's volume kernel adds only the taps inside (braze/ops/sample.py)
                    t = select(ok, t, f(0))
                total = t if total is None else add(total, t)
            return total

        if mode == "bicubic":
            ix = [unnormalize(co, size) for co, size in zip(g, sizes)]
            i0 = [un("floor", co) for co in ix]
            wts = [_cubic(sub(co, c0), f) for co, c0 in zip(ix, i0)]
            # each axis's four padded coordinates once (the taps share them: one expression each in the C)
            cs = [[pad(add(c0, f(t - 1)), size) for t in range(4)] for c0, size in zip(i0, sizes)]
            return weighted([(tap([cs[a][t] for a, t in enumerate(taps)]), _product([w[t] for w, t in zip(wts, taps)]))
                             for taps in itertools.product(range(4), repeat=s)])
        ix = [pad(unnormalize(co, size), size) for co, size in zip(g, sizes)]
        if mode == "nearest":
            ok, v = tap([un("round", co) for co in ix])
            return select(ok, v, f(0))
        i0 = [un("floor", co) for co in ix]
        i1 = [add(c0, f(1)) for c0 in i0]
        return weighted([(tap([(c0, c1)[t] for c0, c1, t in zip(i0, i1, taps)]),
                          _product([sub(c1, co) if t == 0 else sub(co, c0) for co, c0, c1, t in zip(ix, i0, i1, taps)]))
                         for taps in itertools.product((0, 1), repeat=s)])
    return fn


def _product(weights: list) -> Expr:
    """braze/ops/sample._product: from the last axis (x) to the first."""
    w = weights[-1]
    for v in weights[-2::-1]:
        w = mul(w, v)
    return w


def _cubic(t: Expr, f) -> list:
    """braze/ops/sample.cubic_weights, op for op."""
    a, one = f(CUBIC_A), f(1)

    def near(v):
        return add(mul(mul(sub(mul(f(CUBIC_A + 2), v), f(CUBIC_A + 3)), v), v), one)

    def far(v):
        return sub(mul(add(mul(sub(mul(a, v), f(5 * CUBIC_A)), v), f(8 * CUBIC_A)), v), f(4 * CUBIC_A))

    u = sub(one, t)
    return [far(add(t, one)), near(t), near(u), far(add(u, one))]
