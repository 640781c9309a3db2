"""Every zoo model through torch.export -> braze matches eager PyTorch at its test shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze import zoo  # noqa: E402
from braze.testing import MODEL_REL_TOL, flatten_outputs, rel_error  # noqa: E402

MODELS = list(zoo.MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_import_keeps_dim_names(zoo_cache, name):
    zm = zoo_cache.model(name)
    mod = zoo_cache.torch_imported(name)
    assert set(mod.symbols) == set(zm.dims)
    for d, (lo, hi) in zm.dims.items():
        s = mod.symbols[d]
        assert (s.lo, s.hi) == (lo, hi), (d, s.range_str())
    text = str(mod)
    for d in zm.dims:
        assert d in text
    params = mod.main.params
    assert [p.name for p in params] == zm.input_names
    assert all(p.type.free_syms() for p in params)  # every input has a symbolic dim


@pytest.mark.parametrize("name", MODELS)
def test_matches_eager(zoo_cache, name):
    zm = zoo_cache.model(name)
    mod = zoo_cache.torch_imported(name)
    assert len(zm.test_shapes) >= 4
    for dims in zm.test_shapes:
        inputs = zm.make_inputs(**dims)
        with torch.no_grad():
            ref = [r.numpy() for r in flatten_outputs(zm.module(*inputs))]
        out = braze.reference.run(mod, *inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            assert o.shape == r.shape, (dims, o.shape, r.shape)
            err = rel_error(o, r)
            assert err <= MODEL_REL_TOL, f"{name} at {dims}: rel error {err:.2e}"


@pytest.mark.parametrize("name", MODELS)
def test_ir_round_trips(zoo_cache, name):
    from braze.testing import assert_ir_round_trips
    assert_ir_round_trips(zoo_cache.torch_imported(name))
