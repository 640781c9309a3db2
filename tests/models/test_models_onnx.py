"""Zoo models exported to ONNX (torch.onnx.export, dynamo, dynamic dims) through braze's ONNX frontend.

Exports are cached per session in a temp dir (no .onnx files in the repo).
torch 2.13: ``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)`` names
each dim_param after its ``torch.export.Dim`` (batch, seq, height, width).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import braze  # noqa: E402
from braze import reference, zoo  # noqa: E402
from braze.testing import MODEL_REL_TOL, rel_error  # noqa: E402

MODELS = ["mlp", "bert", "gpt2", "resnet50"]


def _outs(x):
    if isinstance(x, (tuple, list)):
        return [np.asarray(t.detach().numpy() if hasattr(t, "detach") else t) for t in x]
    if hasattr(x, "detach"):
        return [x.detach().numpy()]
    return [np.asarray(x)]


# GPT-2 (20 s on 2 cores) under -m slow: BERT covers the same transformer path in the default suite
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "gpt2" else n for n in MODELS])
def test_model_matches_torch(name, onnx_exports):
    zm, path, mod = onnx_exports(name)
    text = str(mod)
    for dim in zm.dims:
        assert dim in text, f"dim {dim!r} missing from the imported IR"
    for shape in zm.test_shapes:
        ins = zm.make_inputs(**shape)
        with torch.no_grad():
            want = _outs(zm.module(*ins))
        got = _outs(reference.run(mod, *ins))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (shape, g.shape, w.shape)
            err = rel_error(g, w)
            assert err <= MODEL_REL_TOL, f"{name} at {shape}: rel error {err:.3g}"


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_both_frontends_agree(name, onnx_exports):
    try:
        from braze.frontend.torch import import_torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"braze.import_torch is not available yet ({e})")
    zm, _, mod_onnx = onnx_exports(name)
    with torch.no_grad():
        mod_torch = braze.import_torch(zoo.export(zm))
    shape = zm.test_shapes[-1]
    ins = zm.make_inputs(**shape)
    a = _outs(reference.run(mod_onnx, *ins))
    b = _outs(reference.run(mod_torch, *ins))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape
        assert rel_error(x, y) <= MODEL_REL_TOL
    assert set(mod_onnx.symbols) == set(mod_torch.symbols) == set(zm.dims)


# GPT-2's export (21 s on 2 cores) only for -m slow, as above
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "gpt2" else n for n in MODELS])
def test_ir_round_trips(onnx_exports, name):
    from braze.testing import assert_ir_round_trips
    assert_ir_round_trips(onnx_exports(name)[2])
