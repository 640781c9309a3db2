"""``grid_sample``: x [N, C, H, W] read at the points of a grid [N, Ho, Wo, 2] of (x, y) in [-1, 1]
(torch's F.grid_sample, ONNX GridSample), bilinear, nearest or bicubic, with zeros, border or
reflection padding; or a volume x [N, C, D, H, W] at a grid [N, Do, Ho, Wo, 3] of (x, y, z),
trilinear (``bilinear``, torch's name) or nearest.

The reference computes the coordinates in x's dtype with the same operations in the same order as
the lowering (braze/lowering/sample.py), so nearest and the taps' indices agree exactly; the taps'
weighted sum is in float64. Special values follow torch's CPU kernels: in 2-D a tap outside the image
reads 0, which is then weighted (a NaN weight, from a NaN or infinite point, gives NaN); in 3-D a tap
outside adds nothing; border and reflection clamp an infinite coordinate to the edge, and a NaN one to 0
in 2-D and to the last pixel in 3-D.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .opdef import Attr, defop

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # torch's and ONNX's


def _infer(ctx, x: TensorType, grid: TensorType, *, mode, padding_mode, align_corners):
    if x.rank not in (4, 5) or grid.rank != x.rank or grid.shape[-1] != x.rank - 2:
        raise ctx.error(f"takes x [N, C, H, W] and a grid [N, Ho, Wo, 2], or x [N, C, D, H, W] and a grid "
                        f"[N, Do, Ho, Wo, 3], got {x} and {grid}", hint="braze samples 2-D and 3-D grids")
    if x.rank == 5 and mode == "bicubic":
        raise ctx.error("bicubic sampling of a volume", hint="bicubic takes 2-D grids (as torch's); use bilinear")
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
    return TensorType(x.dtype, (x.shape[0], x.shape[1], *grid.shape[1:-1]))


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


def _clip(c, size: int, f, volume: bool):
    """Into [0, size - 1] by compares, as torch's kernels clamp: NaN to 0 in 2-D (its vector max(NaN, 0)
    is 0), to size - 1 in 3-D (its scalar std::max keeps NaN, and std::min(size - 1, NaN) is size - 1)."""
    c = np.where(c < f(0), f(0), c) if volume else np.where(c > f(0), c, f(0))
    return np.where(c < f(size - 1), c, f(size - 1))


def pad_coordinate(c, size: int, padding: str, align: bool, f, volume: bool = False):
    if padding == "border":
        return _clip(c, size, f, volume)
    if padding == "reflection":
        c = _reflect(c, 0.0, 2.0 * (size - 1), f) if align else _reflect(c, -1.0, 2.0 * size - 1, f)
        return _clip(c, size, f, volume)
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
    n, s = x.shape[0], x.ndim - 2
    sizes = x.shape[2:]
    g = [grid[..., s - 1 - a].astype(dt) for a in range(s)]  # x's spatial axis a reads grid component s-1-a
    out = np.zeros(x.shape[:2] + grid.shape[1:-1], np.float64)
    b = np.arange(n).reshape((n,) + (1,) * s)

    def tap(coords, wgt=None):
        """x at integer coordinates (float arrays, one per spatial axis), 0 outside the image or at NaN,
        times wgt: [N, C, *out]."""
        ok = np.ones(coords[0].shape, bool)
        for c, size in zip(coords, sizes):
            ok &= (c >= 0) & (c <= size - 1)
        idx = [np.where(ok, c, 0).astype(np.int64) for c in coords]
        v = np.where(ok[:, None], np.moveaxis(x[(b, slice(None), *idx)].astype(np.float64), -1, 1), 0.0)
        if wgt is None:
            return v
        v = v * wgt.astype(np.float64)[:, None]
        # torch's volume kernel adds only the taps inside, so a NaN weight outside (a NaN or infinite
        # point) adds nothing; its 2-D kernel adds 0 times the weight, NaN there
        return np.where(ok[:, None], v, 0.0) if s == 3 else v

    with np.errstate(invalid="ignore", over="ignore"):
        if mode == "bicubic":
            ix = [unnormalize(c, f(size), align_corners, f) for c, size in zip(g, sizes)]
            i0 = [np.floor(c) for c in ix]
            wts = [cubic_weights(c - c0, f) for c, c0 in zip(ix, i0)]
            for taps in itertools.product(range(4), repeat=s):
                cs = [pad_coordinate(c0 + f(t - 1), size, padding_mode, align_corners, f)
                      for c0, t, size in zip(i0, taps, sizes)]
                out += tap(cs, _product([w[t] for w, t in zip(wts, taps)]))
            return out.astype(x.dtype)
        ix = [pad_coordinate(unnormalize(c, f(size), align_corners, f), size, padding_mode, align_corners, f, s == 3)
              for c, size in zip(g, sizes)]
        if mode == "nearest":
            return tap([np.rint(c) for c in ix]).astype(x.dtype)
        i0 = [np.floor(c) for c in ix]
        i1 = [c0 + f(1) for c0 in i0]
        for taps in itertools.product((0, 1), repeat=s):
            cs = [(c0, c1)[t] for c0, c1, t in zip(i0, i1, taps)]
            out += tap(cs, _product([(c1 - c) if t == 0 else (c - c0) for c, c0, c1, t in zip(ix, i0, i1, taps)]))
    return out.astype(x.dtype)


def _product(weights: list):
    """The tap's weight: the per-axis weights multiplied from the last axis (x) to the first."""
    w = weights[-1]
    for v in weights[-2::-1]:
        w = w * v
    return w


defop("grid_sample", inputs=("x", "grid"),
      attrs={"mode": Attr("str", "bilinear", "bilinear, nearest (half to even) or bicubic (A = -0.75)"),
             "padding_mode": Attr("str", "zeros", "zeros, border or reflection"),
             "align_corners": Attr("bool", False, "-1 and 1 are the corner pixels' centres (else their outer edges)")},
      infer=_infer, reference=lambda ctx, x, grid, **a: grid_sample_numpy(x, grid, **a), kind="opaque",
      doc="x [N, C, H, W] sampled at a grid [N, Ho, Wo, 2] of (x, y) in [-1, 1], or x [N, C, D, H, W] at a grid "
          "[N, Do, Ho, Wo, 3] of (x, y, z) (F.grid_sample, ONNX GridSample)")
