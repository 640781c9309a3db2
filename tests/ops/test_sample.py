"""grid_sample: the reference and the native kernel against torch's F.grid_sample, every mode,
padding and align_corners, with the batch, the image and the grid symbolic (1-pixel images among them)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import braze
from braze.errors import InputError, ShapeError
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build

N, H, W, HO, WO = (Sym(s) for s in ("n", "h", "w", "ho", "wo"))


VARIANTS = list(itertools.product(("zeros", "border", "reflection"), (False, True)))  # padding, align_corners
# bicubic's reflection compiles for seconds (its 16 taps' reflected coordinates, no shared temporaries in
# pointwise kernels yet): the default suite leaves it to the slow test below
CASES = [(m, [v for v in VARIANTS if m != "bicubic" or v[0] != "reflection"])
         for m in ("bilinear", "nearest", "bicubic")]
SLOW = [pytest.param("bicubic", [v for v in VARIANTS if v[0] == "reflection"], marks=pytest.mark.slow)]


def _module(mode, shape_x, shape_g, variants):
    """One module (one compile) with a result per (padding, align_corners)."""
    return build([tensor("f32", *shape_x), tensor("f32", *shape_g)],
                 lambda b, x, g: tuple(b.op("grid_sample", [x, g], mode=mode, padding_mode=p, align_corners=a)
                                       for p, a in variants))


def _torch(x, g, mode, variants):
    return [F.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=mode, padding_mode=p,
                          align_corners=a).numpy() for p, a in variants]


@pytest.mark.parametrize("mode,variants", CASES + SLOW)
def test_grid_sample_vs_torch(mode, variants):
    """Random images and points at 1-pixel and odd sizes, then special values: a NaN or infinite point
    and an infinite pixel, at corners and outside (torch's CPU kernel's results: NaN weights propagate,
    border and reflection clamp a NaN coordinate to 0), all through one compile."""
    rng = np.random.default_rng(0)
    m, ys = _module(mode, (N, 3, H, W), (N, HO, WO, 2), variants)
    assert all(y.type.shape == (N, 3, HO, WO) for y in ys)
    cm = braze.compile(m)
    special_x = np.ones((1, 3, 4, 4), np.float32)
    special_x[0, :, 0, 0] = np.inf
    special_g = np.array([[[[np.nan, 0.0], [np.inf, 0.0], [-np.inf, 0.5], [0.0, 0.0], [-1.0, -1.0], [-1.5, -1.5]]]],
                         np.float32)
    cases = []
    for n, h, w, ho, wo in ((1, 1, 1, 1, 1), (2, 5, 7, 4, 6), (1, 3, 2, 9, 3)):
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        g = rng.uniform(-1.3, 1.3, (n, ho, wo, 2)).astype(np.float32)
        g[0, 0, 0] = (1.0, -1.0)  # a corner exactly
        cases.append((x, g, False))
    cases.append((special_x, special_g, True))
    for x, g, special in cases:
        for (p, a), ref, got, want in zip(variants, braze.reference.run(m, x, g), cm(x, g),
                                          _torch(x, g, mode, variants)):
            what = f"{mode} {p} align={a} at {x.shape}, {g.shape}"
            if special or mode == "nearest":  # the same pixels and specials, not nearby values
                np.testing.assert_array_equal(got, want, err_msg="native " + what)
                np.testing.assert_array_equal(ref, want, err_msg="reference " + what)
            else:
                assert_close(ref, want, rtol=1e-5, atol=3e-6, what="reference " + what)
                assert_close(got, want, rtol=1e-5, atol=3e-6, what="native " + what)


def test_an_empty_image_is_an_input_error_and_a_bad_grid_a_shape_error():
    m, _ = build([tensor("f32", N, 1, H, W), tensor("f32", N, 1, 3, 2)],
                 lambda b, x, g: b.op("grid_sample", [x, g]))
    assert m.symbols["h"].lo == 1 and m.symbols["w"].lo == 1
    cm = braze.compile(m)
    with pytest.raises(InputError, match=r"w = 0 is outside its range \[1, inf\]"):
        cm(np.ones((1, 1, 4, 0), np.float32), np.zeros((1, 1, 3, 2), np.float32))
    with pytest.raises(ShapeError, match="grid \\[N, Ho, Wo, 2\\]"):
        build([tensor("f32", N, 1, H, W), tensor("f32", N, 3, 3)], lambda b, x, g: b.op("grid_sample", [x, g]))


D, DO = Sym("d"), Sym("do")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_volume_grid_sample_vs_torch(mode):
    """x [N, C, D, H, W] at a grid [N, Do, Ho, Wo, 3] of (x, y, z): trilinear (torch's "bilinear") and
    nearest, every padding and align_corners, one compile for 1-voxel and odd sizes, and special points."""
    rng = np.random.default_rng(1)
    m, ys = _module(mode, (N, 2, D, H, W), (N, DO, HO, WO, 3), VARIANTS)
    assert all(y.type.shape == (N, 2, DO, HO, WO) for y in ys)
    cm = braze.compile(m)
    for n, d, h, w, do, ho, wo in ((1, 1, 1, 1, 1, 1, 1), (2, 3, 5, 4, 2, 3, 5), (1, 4, 1, 3, 3, 1, 2)):
        x = rng.standard_normal((n, 2, d, h, w)).astype(np.float32)
        g = rng.uniform(-1.3, 1.3, (n, do, ho, wo, 3)).astype(np.float32)
        g[0, 0, 0, 0] = (1.0, -1.0, 1.0)
        g.reshape(-1, 3)[-1] = (np.nan, 0.0, np.inf)
        for (p, a), ref, got, want in zip(VARIANTS, braze.reference.run(m, x, g), cm(x, g), _torch(x, g, mode, VARIANTS)):
            what = f"{mode} {p} align={a} at {x.shape}, {g.shape}"
            assert_close(ref, want, rtol=1e-5, atol=3e-6, what="reference " + what)
            assert_close(got, want, rtol=1e-5, atol=3e-6, what="native " + what)


def test_bicubic_volume_is_refused():
    with pytest.raises(ShapeError, match="bicubic sampling of a volume"):
        build([tensor("f32", N, 1, D, H, W), tensor("f32", N, 2, 2, 2, 3)],
              lambda b, x, g: b.op("grid_sample", [x, g], mode="bicubic"))
