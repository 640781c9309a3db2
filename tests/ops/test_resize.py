"""``resize``: the reference against F.interpolate (every mode, sizes and scale factors,
symbolic H/W at sizes 1, odd and even), and inference. ONNX's Resize semantics are checked
through the ONNX frontend (tests/frontend/test_onnx_more_ops.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import braze.reference as R
from braze.errors import ShapeError
from braze.ir import sym as S
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build

H, W = Sym("H"), Sym("W")

# F.interpolate mode -> resize attributes (what the torch frontend emits)
TORCH_MODES = {
    "nearest": dict(mode="nearest", coord="asymmetric", nearest="floor", torch_shortcuts=True),
    "nearest-exact": dict(mode="nearest", coord="half_pixel", nearest="round_prefer_ceil"),
    "bilinear": dict(mode="linear", coord="half_pixel", torch_shortcuts=True),
    "bilinear-ac": dict(mode="linear", coord="align_corners", torch_shortcuts=True),
    "bicubic": dict(mode="cubic", coord="half_pixel"),
    "bicubic-ac": dict(mode="cubic", coord="align_corners"),
}
HW = [(1, 1), (1, 5), (3, 7), (8, 6), (13, 1)]


def _torch(x, tm, **kw):
    mode = tm.removesuffix("-ac")
    ac = tm.endswith("-ac") if mode in ("bilinear", "bicubic") else None
    return F.interpolate(torch.from_numpy(x), mode=mode, align_corners=ac, **kw).numpy()


def _check(got, want, tm, what):
    if tm.startswith("nearest"):
        np.testing.assert_array_equal(got, want, err_msg=what)  # the same indices, exactly
    else:  # float32 coordinates as torch; sums in float64
        assert_close(got, want, rtol=1e-5, atol=2e-6, what=what)


@pytest.mark.parametrize("tm", list(TORCH_MODES))
@pytest.mark.parametrize("sizes", [(7, 5), (1, 1), (2, 16)])
def test_fixed_size_from_symbolic_input(rng, tm, sizes):
    mod, out = build([tensor("f32", 2, 3, H, W)], lambda b, x: b.resize(x, sizes=sizes, **TORCH_MODES[tm]))
    assert out.type.shape == (2, 3) + sizes
    for h, w in HW:
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        _check(R.run(mod, x), _torch(x, tm, size=sizes), tm, f"{tm} {sizes} from {(h, w)}")


@pytest.mark.parametrize("tm", list(TORCH_MODES))
@pytest.mark.parametrize("scale", [2.0, 3.0, 0.5, 1.5, 1.01, 2.1])
def test_scale_factor_symbolic_sizes(rng, tm, scale):
    """scale_factor: the output size is floor(n * s) (symbolic), and the coordinates use 1/s."""
    from fractions import Fraction
    fr = Fraction(scale).limit_denominator(1000)
    oh = S.floordiv(S.mul(fr.numerator, H), fr.denominator)
    scales = None if tm.endswith("-ac") else (scale, 1.0)  # torch's align_corners ignores the scale
    mod, out = build([tensor("f32", 1, 2, H, W)],
                     lambda b, x: b.resize(x, sizes=(oh, W), scales=scales, **TORCH_MODES[tm]))
    assert out.type.shape[2] == oh
    for h in [1, 2, 5, 9, 10, 19, 20, 33]:
        x = rng.standard_normal((1, 2, h, 3)).astype(np.float32)
        if int(h * scale) < 1:
            continue
        _check(R.run(mod, x), _torch(x, tm, scale_factor=(scale, 1.0)), tm, f"{tm} x{scale} h={h}")


def test_nearest_int_and_float64(rng):
    mod, _ = build([tensor("i64", 1, 1, H, W)],
                   lambda b, x: b.resize(x, sizes=(S.mul(2, H), 3), **TORCH_MODES["nearest"]))
    x = rng.integers(-9, 9, size=(1, 1, 3, 5))
    want = F.interpolate(torch.from_numpy(x).float(), size=(6, 3), mode="nearest").long().numpy()
    np.testing.assert_array_equal(R.run(mod, x), want)
    mod, _ = build([tensor("f64", 1, 1, H, W)],
                   lambda b, x: b.resize(x, sizes=(5, 4), **TORCH_MODES["bicubic"]))
    x = rng.standard_normal((1, 1, 3, 7))
    assert_close(R.run(mod, x), _torch(x, "bicubic", size=(5, 4)), rtol=1e-12, atol=1e-12)


def test_linear_1d_and_3d_trailing_axes(rng):
    """One or three resized axes (F.interpolate's linear and trilinear)."""
    mod, _ = build([tensor("f32", 2, 3, W)], lambda b, x: b.resize(x, sizes=(9,), mode="linear", coord="half_pixel"))
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(R.run(mod, x), F.interpolate(torch.from_numpy(x), size=9, mode="linear").numpy())
    mod, _ = build([tensor("f32", 1, 1, 3, H, W)],
                   lambda b, x: b.resize(x, sizes=(5, 4, 7), mode="linear", coord="align_corners"))
    x = rng.standard_normal((1, 1, 3, 6, 2)).astype(np.float32)
    want = F.interpolate(torch.from_numpy(x), size=(5, 4, 7), mode="trilinear", align_corners=True).numpy()
    assert_close(R.run(mod, x), want)


@pytest.mark.parametrize("attrs,match", [
    (dict(sizes=(3, 3), mode="bilinear"), "mode must be"),
    (dict(sizes=(3, 3), coord="crop"), "coord must be"),
    (dict(sizes=(3, 3), coord="tf_crop_and_resize"), "takes a roi of 4 numbers"),
    (dict(sizes=(3, 3), mode="linear", antialias=True), "antialias needs each axis's scale known"),
    (dict(sizes=(3, 3, 3, 3, 3)), "trailing axes"),
    (dict(sizes=(3, 3), scales=(2.0,)), "positive numbers"),
    (dict(sizes=(0, 3)), ">= 1"),
])
def test_infer_errors(attrs, match):
    with pytest.raises(ShapeError, match=match):
        build([tensor("f32", 1, 1, H, W)], lambda b, x: b.resize(x, **attrs))
    with pytest.raises(ShapeError, match="floating-point"):
        build([tensor("i64", 1, 1, H, W)], lambda b, x: b.resize(x, sizes=(3, 3), mode="linear"))
