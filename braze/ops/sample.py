"""``grid_sample``: x [N, C, H, W] read at the points of a grid [N, Ho, Wo, 2] of (x, y) in [-1, 1]
(torch's F.grid_sample, ONNX GridSample), bilinear, nearest or bicubic, with zeros, border or
reflection padding.

The reference computes the coordinates in x's dtype with the same operations in the same order as
the lowering (braze/lowering/sample.py), so nearest and the taps' indices agree exactly; the taps'
weighted sum is in float64. Special values follow torch's CPU kernel: a tap outside the image reads 0,
which is then weighted (a NaN weight, from a NaN or infinite point, gives NaN); border and reflection
clamp a NaN coordinate to 0 and an infinite one to the edge.
"""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .opdef import Attr, defop

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # torch's and ONNX's


def _infer(ctx, x: TensorType, grid: TensorType, *, mode, padding_mode, align_corners):
    if x.rank != 4 or grid.rank != 4 or grid.shape[3] != 2:
        raise ctx.error(f"takes x [N, C, H, W] and a grid [N, Ho, Wo, 2], got {x} and {grid}",
                        hint="braze samples 2-D grids (a 5-D volume is not supported yet)")
    if x.dtype not in (DType.float32, DType.float64) or grid.dtype is not x.dtype:
        raise ctx.error(f"takes float32 or float64 x and a grid of its dtype, got {x.dtype.name} and "
                        f"{grid.dtype.name}", hint="cast both to float32")
    if mode not in MODES or padding_mode not in PADDINGS:
        raise ctx.error(f"mode {mode!r} / padding_mode {padding_mode!r}: expected one of {MODES} / {PADDINGS}")
    for d in x.shape[2:]:  # every point reads a pixel: an empty image is an input error, as in torch
        sym = ctx.constraints.simplify(d)
        if isinstance(d, int) and d < 1:
            raise ctx.error(f"x has an empty image ({x})")
        if isinstance(sym, S.Sym) and sym.lo < 1:
            s = ctx.constraints.symbols.get(sym.name, sym)
            if s.hi is not None and s.hi < 1:
                raise ctx.error(f"x's image dim {sym} in [{s.lo}, {s.hi}] is always empty")
            ctx.constraints.add_range(s, 1, s.hi)
    eq = ctx.equal(x.shape[0], grid.shape[0])
    if eq is False:
        raise ctx.error(f"x has batch {x.shape[0]} but the grid {grid.shape[0]}")
    if eq is None:
        ctx.assume_equal(x.shape[0], grid.shape[0], "grid batch")
    return TensorType(x.dtype, (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]))


# --- the coordinate arithmetic, shared with the lowering through these formulas (in x's dtype) -------


def unnormalize(g, size, align, f):
    """A grid value in [-1, 1] as a pixel coordinate; ``f`` makes constants of the dtype."""
    if align:
        return (g + f(1)) / f(2) * (size - f(1))
    return ((g + f(1)) * size - f(1)) / f(2)


def _reflect(c, lo2: float, hi2: float, f):
    """torch's reflect_coordinates over [lo2 / 2, hi2 / 2]."""
    if lo2 == hi2:
        return np.zeros_like(c)
    mn, span = f(lo2 / 2), f((hi2 - lo2) / 2)
    c = np.abs(c - mn)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(np.fmod(flips, f(2)) == f(0), extra + mn, span - extra + mn)


def _clip(c, size: int, f):
    """Into [0, size - 1], NaN to 0 (compares, as torch's vector clamp: max(NaN, 0) is 0 there)."""
    c = np.where(c > f(0), c, f(0))
    return np.where(c < f(size - 1), c, f(size - 1))


def pad_coordinate(c, size: int, padding: str, align: bool, f):
    if padding == "border":
        return _clip(c, size, f)
    if padding == "reflection":
        c = _reflect(c, 0.0, 2.0 * (size - 1), f) if align else _reflect(c, -1.0, 2.0 * size - 1, f)
        return _clip(c, size, f)
    return c


def cubic_weights(t, f):
    a = f(CUBIC_A)
    one = f(1)

    def near(x):
        return ((a + f(2)) * x - (a + f(3))) * x * x + one

    def far(x):
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    u = one - t
    return [far(t + one), near(t), near(u), far(u + one)]


def grid_sample_numpy(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    dt = x.dtype.type
    f = lambda v: dt(v)  # noqa: E731
    n, c, h, w = x.shape
    gx, gy = grid[..., 0].astype(dt), grid[..., 1].astype(dt)  # [N, Ho, Wo]
    out = np.zeros((n, c) + gx.shape[1:], np.float64)
    b = np.arange(n)[:, None, None]

    def tap(iy, ix, wgt=None):
        """x at integer coordinates (float arrays), 0 outside the image or at NaN, times wgt: [N, C, Ho, Wo]."""
        ok = (ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)
        yi, xi = np.where(ok, iy, 0).astype(np.int64), np.where(ok, ix, 0).astype(np.int64)
        v = np.where(ok[:, None], np.moveaxis(x[b, :, yi, xi].astype(np.float64), -1, 1), 0.0)  # [N, C, Ho, Wo]
        return v if wgt is None else v * wgt.astype(np.float64)[:, None]

    with np.errstate(invalid="ignore", over="ignore"):
        if mode == "bicubic":
            ix, iy = unnormalize(gx, f(w), align_corners, f), unnormalize(gy, f(h), align_corners, f)
            x0, y0 = np.floor(ix), np.floor(iy)
            wx, wy = cubic_weights(ix - x0, f), cubic_weights(iy - y0, f)
            for i in range(4):
                for j in range(4):
                    cx = pad_coordinate(x0 + f(j - 1), w, padding_mode, align_corners, f)
                    cy = pad_coordinate(y0 + f(i - 1), h, padding_mode, align_corners, f)
                    out += tap(cy, cx, wy[i] * wx[j])
            return out.astype(x.dtype)
        ix = pad_coordinate(unnormalize(gx, f(w), align_corners, f), w, padding_mode, align_corners, f)
        iy = pad_coordinate(unnormalize(gy, f(h), align_corners, f), h, padding_mode, align_corners, f)
        if mode == "nearest":
            return tap(np.rint(iy), np.rint(ix)).astype(x.dtype)
        x0, y0 = np.floor(ix), np.floor(iy)
        x1, y1 = x0 + f(1), y0 + f(1)
        for yy, xx, wgt in ((y0, x0, (x1 - ix) * (y1 - iy)), (y0, x1, (ix - x0) * (y1 - iy)),
                            (y1, x0, (x1 - ix) * (iy - y0)), (y1, x1, (ix - x0) * (iy - y0))):
            out += tap(yy, xx, wgt)
    return out.astype(x.dtype)


defop("grid_sample", inputs=("x", "grid"),
      attrs={"mode": Attr("str", "bilinear", "bilinear, nearest (half to even) or bicubic (A = -0.75)"),
             "padding_mode": Attr("str", "zeros", "zeros, border or reflection"),
             "align_corners": Attr("bool", False, "-1 and 1 are the corner pixels' centres (else their outer edges)")},
      infer=_infer, reference=lambda ctx, x, grid, **a: grid_sample_numpy(x, grid, **a), kind="opaque",
      doc="x [N, C, H, W] sampled at a grid [N, Ho, Wo, 2] of (x, y) in [-1, 1] (F.grid_sample, ONNX GridSample)")
