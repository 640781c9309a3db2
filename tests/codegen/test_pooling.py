"""Native pools against the reference at several shapes, with symbolic batch and image size."""

import numpy as np
import pytest

import braze
from braze import reference
from braze.ops import Builder, tensor


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "pool_cache"))


@pytest.mark.parametrize("op,attrs", [
    ("max_pool2d", dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))),
    ("max_pool2d", dict(kernel=(2, 2), stride=(1, 1), dilation=(2, 2))),
    ("avg_pool2d", dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))),
    ("avg_pool2d", dict(kernel=(2, 2), stride=(2, 2), padding=(1, 1, 1, 1), count_include_pad=False)),
    # no padding, floor mode: windows inside the input, read without bounds tests
    ("max_pool2d", dict(kernel=(3, 3), stride=(2, 2))),
    ("avg_pool2d", dict(kernel=(3, 2), stride=(2, 3))),
    ("avg_pool2d", dict(kernel=(2, 2), stride=(2, 2), count_include_pad=False)),
    ("adaptive_avg_pool2d", dict(output_size=(1, 1))),
    ("adaptive_avg_pool2d", dict(output_size=(3, 2))),
])
def test_pool_matches_reference(op, attrs):
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 5), b.sym("w", 5)
    x = b.param("x", tensor("f32", n, 3, h, w))
    b.ret(b.op(op, [x], **attrs))
    m = braze.compile(b.module)
    rng = np.random.default_rng(0)
    for shp in [(1, 3, 5, 5), (2, 3, 9, 12), (1, 3, 33, 33)]:
        a = rng.standard_normal(shp).astype(np.float32)
        np.testing.assert_allclose(m(a), reference.run(b.module, a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["i64", "i32", "u8"])
def test_integer_max_pool_ignores_its_padding(dtype):
    b = Builder()
    n, h = b.sym("n"), b.sym("h", 3)
    x = b.param("x", tensor(dtype, n, 2, h, 7))
    b.ret(b.op("max_pool2d", [x], kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1)))
    m = braze.compile(b.module)
    info = np.iinfo(tensor(dtype, 1).dtype.numpy)
    rng = np.random.default_rng(0)
    for shp in [(1, 2, 3, 7), (2, 2, 8, 7)]:
        a = rng.integers(info.min, info.max, size=shp, endpoint=True, dtype=info.dtype)
        a.flat[::5] = info.min  # the dtype's lowest, where padding must not win or lose
        np.testing.assert_array_equal(m(a), reference.run(b.module, a))
