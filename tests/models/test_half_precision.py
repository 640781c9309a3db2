"""bfloat16 and float16 models, and the bf16 policy on float32 ones, as issue 23 accepts them:
small configs of BERT, GPT-2, a LLaMA-style decoder, ViT and a ResNet, under
torch.compile(backend="braze", dynamic=True) at 4 shapes and through braze.compile at 3.

Each shape's error against eager in the same dtype (float32 eager for the policy) is at most
max(2% for bfloat16 / 0.5% for float16, twice eager's own error against float32 at the same
rounded weights, or torch.autocast's for the policy) of the largest output; the argmax agrees
with float32 on 99% of the positions float32 decides by more than that; no op runs in PyTorch
(no warning) and no library is built after the second shape. A few run by default, the whole
matrix with ``python -m pytest -m slow tests/models/test_half_precision.py``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import braze  # noqa: E402
from braze import zoo_archs  # noqa: E402
from braze.codegen.isa import host_isa  # noqa: E402
from braze.passes.precision import policy_pays  # noqa: E402
from braze.testing import rel_error  # noqa: E402

# a policy whose dtype the CPU has no fast GEMMs for compiles float32, with one warning
POLICY_RUNS = {p: policy_pays(p, host_isa().host_features) for p in ("bf16", "fp16")}

pytestmark = pytest.mark.usefixtures("module_cache")

FAMILIES = ("bert", "gpt2", "llama", "vit", "resnet")
MODES = (("bfloat16", None), ("float16", None), (None, "bf16"))
DEFAULT = {("bert", "bfloat16", None), ("resnet", "float16", None), ("gpt2", None, "bf16")}
# ViT's batch-1 graph is another program than its general one (test_transformers_plugin_slow.py)
LATE_LIBRARY = {"vit"}


def _sweep(arch, dtype, precision):
    torch._dynamo.reset()
    try:
        rec = zoo_archs.sweep_one(arch, dtype=dtype, precision=precision)
    finally:
        torch._dynamo.reset()
    assert "error" not in rec, rec["error"]
    if precision and not POLICY_RUNS[precision]:
        assert len(rec["warnings"]) == 1 and "compiling float32" in rec["warnings"][0], rec["warnings"]
        for row in rec["shapes"]:  # float32 compute: float32's tolerance against float32 eager
            assert row["rel_error"] <= 1e-4, f"{arch} at {row['shape']}: {row}"
    else:
        assert not rec["warnings"], rec["warnings"]  # no op in PyTorch, no region refused
    for row in rec["shapes"]:
        assert row["rel_error"] <= row["tol"], f"{arch} at {row['shape']}: {row}"
        assert row["argmax_agree"] >= 0.99, f"{arch} at {row['shape']}: {row}"
    want = "late library" if arch in LATE_LIBRARY else "ok"
    assert zoo_archs.verdict(rec) == want, rec["shapes"]


def _cases(default: bool):
    return [pytest.param(a, d, p, id=f"{a}-{d or 'policy-' + p}") for a in FAMILIES for d, p in MODES
            if ((a, d, p) in DEFAULT) == default]


@pytest.mark.parametrize("arch, dtype, precision", _cases(True))
def test_half_models_under_the_plugin(arch, dtype, precision):
    _sweep(arch, dtype, precision)


@pytest.mark.slow
@pytest.mark.parametrize("arch, dtype, precision", _cases(False))
def test_half_models_under_the_plugin_slow(arch, dtype, precision):
    _sweep(arch, dtype, precision)


@pytest.mark.parametrize("dtype, precision", [(torch.bfloat16, None), (None, "bf16")], ids=["bf16-model", "policy"])
def test_braze_compile_of_a_half_model_and_of_the_policy(dtype, precision):
    """braze.compile (torch.export): one library for 3 sequence lengths, within the same bounds."""
    arch = zoo_archs.build("bert")
    model = arch.module.to(dtype) if dtype else arch.module
    Dim = torch.export.Dim
    ex = arch.make_inputs((2, 9))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm = braze.compile(model, ex, dynamic_shapes=({0: Dim("b", min=1, max=8), 1: Dim("s", min=1, max=64)},),
                           precision=precision)
    fell_back = [str(w.message) for w in caught if "compiling float32" in str(w.message)]
    assert len(fell_back) == (1 if precision and not POLICY_RUNS[precision] else 0), fell_back
    compiles = braze.stats()["native_compiles"]
    for shape in [(1, 1), (3, 23), (2, 64)]:
        args = arch.make_inputs(shape)
        got = zoo_archs.first_tensor(cm(*args)).float()
        with torch.no_grad():
            exact = zoo_archs.first_tensor(model.float()(*args) if dtype else model(*args)).float()
            if dtype:
                model.to(dtype)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision is not None):
                eager = zoo_archs.first_tensor(model(*args)).float()
        tol = max(0.02, 2 * rel_error(eager.numpy(), exact.numpy())) if not fell_back else 1e-4
        want = exact if precision else eager
        assert rel_error(got.numpy(), want.numpy()) <= tol, shape
        assert got.dtype == torch.float32
    assert braze.stats()["native_compiles"] == compiles, "a new shape triggered a recompile"


@pytest.mark.skipif(not POLICY_RUNS["bf16"], reason="this CPU has no bf16 GEMMs: the policy compiles float32 "
                    "(test_half_models_under_the_plugin checks that warning)")
def test_the_bf16_policy_stores_convolutions_in_bf16_and_keeps_nan():
    """conv -> relu -> max_pool -> conv -> relu -> conv: a convolution that feeds another stores its result in bfloat16 (the
    relus and the pool move up behind the rounding, and the call applies the relu), and a NaN
    still reaches the outputs eager's reaches."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(16, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    b, h, w = torch.export.Dim("b", max=8), torch.export.Dim("h", min=8, max=64), torch.export.Dim("w", min=8, max=64)
    cm = braze.compile(m, example_inputs=(torch.randn(2, 3, 12, 10),), dynamic_shapes={"input": {0: b, 2: h, 3: w}},
                       precision="bf16")
    convs = [n for n in cm.module.main.nodes if n.op == "fused" and n.attrs["kind"] == "conv"]
    # the last one's result is the model's output, which stays float32; the helper applies the
    # relus to the rounded results itself
    assert [n.attrs["post_ops"][-2:] for n in convs] == [["cast", "relu"], ["cast", "relu"], []]
    assert [n.outputs[0].dtype.short for n in convs] == ["bf16", "bf16", "f32"]
    for shape in [(1, 3, 8, 8), (3, 3, 13, 9), (2, 3, 32, 17)]:
        x = torch.randn(shape)
        x[0, 1, 2, 3] = float("nan")
        with torch.no_grad():
            want = m(x).numpy()
        got = cm(x.numpy())
        got = np.asarray(got[0] if isinstance(got, (tuple, list)) else got)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert rel_error(got[ok], want[ok]) <= 2e-2, shape


@pytest.mark.skipif(not POLICY_RUNS["bf16"], reason="this CPU has no bf16 GEMMs: the policy compiles float32 "
                    "(test_half_models_under_the_plugin checks that warning)")
def test_the_bf16_policy_rounds_a_residual_blocks_relu_in_the_same_kernel():
    """relu(conv(x) + x), read again as the next block's residual (float32) and as its convolution's
    operand (bfloat16): one kernel writes both, the float32 one over the convolution's result, and
    a NaN still reaches the outputs eager's reaches."""
    torch.manual_seed(0)

    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)
            self.c3 = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            y = torch.relu(self.c1(x) + x)
            return self.c3(torch.relu(self.c2(y) + y))

    m = Blocks().eval()
    b, h = torch.export.Dim("b", max=8), torch.export.Dim("h", min=4, max=64)
    cm = braze.compile(m, example_inputs=(torch.randn(2, 8, 12, 10),), dynamic_shapes={"x": {0: b, 2: h}},
                       precision="bf16")
    joined = [[v.dtype.short for v in n.outputs] for n in cm.module.main.nodes if n.op == "fused"
              and [q.op for q in cm.module.functions[n.attrs["callee"]].nodes] == ["relu", "cast"]]
    assert joined == [["f32", "bf16"]], joined  # (the second block's relu is read once: cast, then relu)
    for shape in [(1, 8, 4, 10), (3, 8, 13, 10), (2, 8, 33, 10)]:
        x = torch.randn(shape)
        x[0, 1, 2, 3] = float("nan")
        with torch.no_grad():
            want = m(x).numpy()
        got = np.asarray(cm(x.numpy()))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert rel_error(got[ok], want[ok]) <= 2e-2, shape
