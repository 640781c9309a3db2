"""Every zoo model compiles ONCE with braze.compile and then runs at every test shape natively."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze import zoo  # noqa: E402
from braze.testing import MODEL_REL_TOL, flatten_outputs, rel_error  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


@pytest.mark.parametrize("name", [*zoo.MODELS, "depthwise"])  # depthwise: small, and in no other test
def test_compile_once_run_every_shape(zoo_cache, name):
    zm = zoo_cache.model(name)
    before = braze.stats()["native_compiles"]
    m = braze.compile(zoo_cache.exported(name))
    compiles = braze.stats()["native_compiles"] - before
    assert compiles <= 1  # 0 when an earlier test left it in the cache
    for shape in zm.test_shapes:
        ins = zm.make_inputs(**shape)
        with torch.no_grad():
            want = list(flatten_outputs(zm.module(*ins)))
        got = m(*ins)
        got = list(got) if isinstance(got, tuple) else [got]
        assert isinstance(got[0], torch.Tensor)  # torch in, torch out
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert tuple(g.shape) == tuple(w.shape), (shape, g.shape, w.shape)
            err = rel_error(g.numpy(), w.numpy())
            assert err <= MODEL_REL_TOL, f"{name} at {shape}: rel error {err:.3g}"
    assert braze.stats()["native_compiles"] - before == compiles, "a new shape triggered a recompile"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "resnet50"])
def test_eight_threads_two_hundred_calls_bit_identical(zoo_cache, name):
    """The issue's acceptance: 8 threads x 200 calls at mixed shapes on one compiled model."""
    from braze.testing import thread_stress
    zm = zoo_cache.model(name)
    m = braze.compile(zoo_cache.exported(name))
    cases = [zm.make_inputs(**s) for s in zm.test_shapes]
    assert thread_stress(m, cases, threads=8, calls=200) == []
