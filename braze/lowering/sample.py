"""Lowering of ``grid_sample``: per output element, the grid point's coordinates (in x's dtype, the
reference's formulas in its order: braze/ops/sample.py), then each tap's load, 0 outside the image,
times its weight.
A tap's index is cast to int64 only where it lies inside the image, so no out-of-range or NaN float
is ever converted (undefined in C)."""

from __future__ import annotations

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
    h, w = x.shape[2], x.shape[3]

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
        c = select(Compare("gt", c, f(0)), c, f(0))  # NaN to 0: compares, not NaN-keeping max/min
        hi = intlike_value(S.add(size, -1), dt)
        return select(Compare("lt", c, hi), c, hi)

    def fn(idx):
        n, c, ho, wo = idx
        gx, gy = grid((n, ho, wo, 0)), grid((n, ho, wo, 1))

        def tap(iy, ix):
            ok = _and(_and(Compare("ge", ix, f(0)), Compare("le", ix, intlike_value(S.add(w, -1), dt))),
                      _and(Compare("ge", iy, f(0)), Compare("le", iy, intlike_value(S.add(h, -1), dt))))
            yi, xi = cast(select(ok, iy, f(0)), I64), cast(select(ok, ix, f(0)), I64)
            return ok, x((n, c, yi, xi))

        def weighted(taps):
            total = None
            for (ok, v), wgt in taps:
                t = mul(select(ok, v, f(0)), wgt)
                total = t if total is None else add(total, t)
            return total

        if mode == "bicubic":
            ix, iy = unnormalize(gx, w), unnormalize(gy, h)
            x0, y0 = un("floor", ix), un("floor", iy)
            wx, wy = _cubic(sub(ix, x0), f), _cubic(sub(iy, y0), f)
            # each axis's four padded coordinates once (16 taps share them: one expression each in the C)
            cxs, cys = [pad(add(x0, f(j - 1)), w) for j in range(4)], [pad(add(y0, f(i - 1)), h) for i in range(4)]
            return weighted([(tap(cys[i], cxs[j]), mul(wy[i], wx[j])) for i in range(4) for j in range(4)])
        ix, iy = pad(unnormalize(gx, w), w), pad(unnormalize(gy, h), h)
        if mode == "nearest":
            ok, v = tap(un("round", iy), un("round", ix))
            return select(ok, v, f(0))
        x0, y0 = un("floor", ix), un("floor", iy)
        x1, y1 = add(x0, f(1)), add(y0, f(1))
        return weighted([(tap(y0, x0), mul(sub(x1, ix), sub(y1, iy))), (tap(y0, x1), mul(sub(ix, x0), sub(y1, iy))),
                         (tap(y1, x0), mul(sub(x1, ix), sub(iy, y0))), (tap(y1, x1), mul(sub(ix, x0), sub(iy, y0)))])
    return fn


def _cubic(t: Expr, f) -> list:
    """braze/ops/sample.cubic_weights, op for op."""
    a, one = f(CUBIC_A), f(1)

    def near(v):
        return add(mul(mul(sub(mul(f(CUBIC_A + 2), v), f(CUBIC_A + 3)), v), v), one)

    def far(v):
        return sub(mul(add(mul(sub(mul(a, v), f(5 * CUBIC_A)), v), f(8 * CUBIC_A)), v), f(4 * CUBIC_A))

    u = sub(one, t)
    return [far(add(t, one)), near(t), near(u), far(add(u, one))]
