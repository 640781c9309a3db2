"""Native ``resize`` against the reference: every mode and coordinate rule in one compiled
module, symbolic batch and image size, at sizes 1, odd and even; no recompiles."""

import numpy as np
import pytest

import braze
from braze import reference
from braze.ir import sym as S
from braze.ops import Builder, tensor
from braze.testing import assert_close


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "resize_cache"))


def test_resize_modes_match_reference():
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h"), b.sym("w")
    x = b.param("x", tensor("f32", n, 3, h, w))
    i = b.param("i", tensor("i64", n, h, w))
    h32 = S.floordiv(S.mul(3, h), 2)
    outs = {
        "nearest x2": b.resize(x, sizes=(S.mul(2, h), S.mul(2, w)), mode="nearest", coord="asymmetric",
                               scales=(2.0, 2.0), torch_shortcuts=True),
        "nearest x1.5": b.resize(x, sizes=(h32, w), mode="nearest", coord="asymmetric", scales=(1.5, 1.0),
                                 torch_shortcuts=True),
        "nearest-exact 7x5": b.resize(x, sizes=(7, 5), mode="nearest", coord="half_pixel",
                                      nearest="round_prefer_ceil"),
        "nearest rpf": b.resize(x, sizes=(5, 9), mode="nearest", coord="half_pixel", nearest="round_prefer_floor"),
        "nearest int": b.resize(i, sizes=(4, S.add(w, 1)), mode="nearest", coord="align_corners", nearest="ceil"),
        "bilinear": b.resize(x, sizes=(h32, 5), mode="linear", coord="half_pixel", scales=(1.5, 5.0),
                             torch_shortcuts=True),
        "bilinear ac": b.resize(x, sizes=(9, S.add(w, 2)), mode="linear", coord="align_corners"),
        "bilinear phh": b.resize(x, sizes=(1, 6), mode="linear", coord="pytorch_half_pixel"),
        "bicubic": b.resize(x, sizes=(S.mul(2, h), 3), mode="cubic", coord="half_pixel"),
        "bicubic ac": b.resize(x, sizes=(7, S.mul(2, w)), mode="cubic", coord="align_corners"),
        "cubic excl": b.resize(x, sizes=(6, 6), mode="cubic", coord="asymmetric", exclude_outside=True,
                               cubic_a=-0.5),
        "linear 1-d": b.resize(x, sizes=(11,), mode="linear", coord="half_pixel"),
    }
    b.ret(*outs.values())
    before = braze.stats()["native_compiles"] + braze.stats()["cache_hits"]
    m = braze.compile(b.module)
    rng = np.random.default_rng(0)
    for shp in [(1, 1, 1), (2, 5, 3), (1, 8, 13), (3, 17, 2)]:
        xs = rng.standard_normal((shp[0], 3) + shp[1:]).astype(np.float32)
        ins = rng.integers(-50, 50, size=shp)
        got, want = m(xs, ins), reference.run(b.module, xs, ins)
        for name, g, r in zip(outs, got, want):
            what = f"{name} at {shp}"
            if "nearest" in name:
                np.testing.assert_array_equal(g, r, err_msg=what)
            else:
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5, err_msg=what)
    assert braze.stats()["native_compiles"] + braze.stats()["cache_hits"] == before + 1


@pytest.mark.parametrize("tm", ["bicubic", "bicubic-ac", "bilinear"])
def test_float32_overflow_along_the_last_axis_is_torchs_nan(tm):
    """Finite inputs near the float32 maximum: torch sums the last axis's taps first, in float32,
    and a sum that overflows meets the other axis's taps, zero weights included, as 0 * inf =
    NaN. The reference and the native code do the same (fuzz seed 29164 had the reference's
    float64 sums finite there)."""
    import torch
    import torch.nn.functional as F
    mode = tm.removesuffix("-ac")
    attrs = dict(mode="cubic" if mode == "bicubic" else "linear",
                 coord="align_corners" if tm.endswith("-ac") else "half_pixel",
                 torch_shortcuts=mode == "bilinear")
    b = Builder()
    h = b.sym("h")
    x = b.param("x", tensor("f32", 1, 2, h, 7))
    b.ret(b.resize(x, sizes=(h, 14), **attrs))
    lib = braze.compile(b.module)
    for hh in (1, 5, 6):
        a = np.random.default_rng(hh).uniform(-1e-3, 1e-3, (1, 2, hh, 7)).astype(np.float32)
        a[0, 0, hh // 2, 2:5] = 3e38
        a[0, 1, hh - 1, 3] = -3e38
        want = F.interpolate(torch.from_numpy(a), size=(hh, 14), mode=mode,
                             align_corners=tm.endswith("-ac")).numpy()
        if mode == "bicubic":
            assert np.isnan(want).any()  # the case this test is about
        for who, got in (("reference", reference.run(b.module, a)), ("native", lib(a))):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{who} {tm} h={hh}")
            assert_close(got, want, rtol=1e-5, atol=2e-6, what=f"{who} {tm} h={hh}")
