"""Convolutions that decompose's rule conv2d sends to braze's loops (``direct_conv2d``): against
torch at several shapes per symbolic dim, the special values torch gives, and the ops around them."""

import numpy as np
import pytest
import torch

import braze
from braze import reference
from braze.ops import Builder, tensor

nn = torch.nn


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "direct_conv_cache"))


def _ops(cm) -> list[str]:
    return [n.op for f in cm.module.functions.values() for n in f.nodes]


def _dims(min_side):
    D = torch.export.Dim
    return ({0: D("batch", min=1, max=64), 2: D("height", min=min_side, max=512),
             3: D("width", min=min_side, max=512)},)


CASES = [  # (in, out, kernel, stride, padding, dilation, groups)
    (16, 16, 3, 1, 1, 1, 16),   # depthwise 3x3
    (16, 32, 3, 2, 1, 1, 16),   # depthwise, channel multiplier 2, stride 2
    (8, 8, 5, 1, 2, 1, 8),      # depthwise 5x5
    (24, 24, 3, 1, 2, 2, 24),   # dilated
    (3, 16, 3, 2, 1, 1, 1),     # an RGB stem
    (3, 20, 3, 2, 1, 1, 1),     # its channels jammed (AVX2: two vectors side by side, then a tail)
    (3, 8, 3, 1, 0, 1, 1),      # unpadded
    (8, 8, 3, 1, 1, 1, 4),      # two input channels per group
    (17, 17, (3, 1), 1, (1, 0), 1, 17),  # a 3x1 window, 17 channels (a vector and a tail)
]


@pytest.mark.parametrize("ic,oc,k,s,p,d,g", CASES)
def test_direct_conv_matches_torch(ic, oc, k, s, p, d, g):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(ic, oc, k, stride=s, padding=p, dilation=d, groups=g), nn.ReLU6()).eval()
    cm = braze.compile(m, example_inputs=(torch.randn(2, ic, 11, 13),), dynamic_shapes=_dims(8))
    assert "direct_conv2d" in _ops(cm) and "conv2d" not in _ops(cm)
    for shp in [(1, ic, 8, 8), (3, ic, 17, 9), (2, ic, 32, 33)]:
        x = torch.randn(*shp)
        with torch.no_grad():
            np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("ic,oc,k,s,p,d,g", [CASES[1], CASES[2], CASES[4]])
def test_border_and_interior_at_every_size(ic, oc, k, s, p, d, g):
    """Stage partition runs each row's border pixels apart from its interior: images no larger
    than the window (no interior), odd sizes, and a batch of 8 (whose rows are a loop of their
    own), compiled dynamic and for the one shape."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(ic, oc, k, stride=s, padding=p, dilation=d, groups=g), nn.ReLU6()).eval()
    dyn = braze.compile(m, example_inputs=(torch.randn(2, ic, 11, 13),), dynamic_shapes=_dims(3))
    for shp in [(1, ic, 3, 3), (2, ic, 3, 7), (1, ic, 5, 3), (8, ic, 9, 6)]:
        x = torch.randn(*shp)
        with torch.no_grad():
            want = m(x).numpy()
        for cm in (dyn, braze.compile(m, example_inputs=(x,))):
            np.testing.assert_allclose(cm(x).numpy(), want, rtol=1e-5, atol=2e-6, err_msg=str(shp))


def test_special_values_as_torch():
    """A tap in the padding adds nothing, even with an infinite weight (torch's convolution gives no
    NaN there); a NaN or an infinity of the input reaches only the outputs whose window holds it."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4).eval()
    with torch.no_grad():
        conv.weight[1, 0, 0, 0] = float("inf")
        conv.weight[2, 0, 1, 1] = -float("inf")
    cm = braze.compile(conv, example_inputs=(torch.randn(2, 4, 6, 6),), dynamic_shapes=_dims(3))
    assert "direct_conv2d" in _ops(cm)
    x = torch.randn(2, 4, 7, 5)
    x[0, 0, 3, 2] = float("nan")
    x[1, 3, 0, 0] = float("inf")
    x[1, 3, 6, 4] = -float("inf")
    x[0, 1, 2, 2] = -0.0
    with torch.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), conv(x).numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_the_rule_keeps_what_onednn_does_better():
    """Many channels per group, a large window, or 16 bits: oneDNN's convolution stays."""
    torch.manual_seed(0)
    for m, x in [(nn.Conv2d(16, 16, 3, padding=1), torch.randn(1, 16, 8, 8)),       # 144 products
                 (nn.Conv2d(3, 64, 7, stride=2, padding=3), torch.randn(1, 3, 32, 32)),  # ResNet's stem
                 (nn.Conv2d(8, 8, 9, padding=4, groups=8), torch.randn(1, 8, 12, 12))]:  # 81 taps
        cm = braze.compile(m.eval(), example_inputs=(x,))
        assert "conv2d" in _ops(cm) and "direct_conv2d" not in _ops(cm)
        with torch.no_grad():
            np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-5)


def test_live_weight_change_reaches_the_loops():
    """The plug-in's weights are read at run time: a change through ``.data`` shows in the next call."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU()).eval()
    opt = torch.compile(m, backend="braze", dynamic=True)
    x = torch.randn(2, 8, 9, 9)
    with torch.no_grad():
        np.testing.assert_allclose(opt(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
        m[0].weight.data.mul_(-2.0)
        np.testing.assert_allclose(opt(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)


def test_the_op_matches_its_reference():
    """``direct_conv2d`` built directly (HWIO weight) against its NumPy reference, batch and image
    size symbolic, a batch of 1 and odd sizes included."""
    rng = np.random.default_rng(0)
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 3), b.sym("w", 3)
    x = b.param("x", tensor("f32", n, h, w, 6))
    wt = b.constant(rng.standard_normal((3, 3, 1, 12)).astype(np.float32), "w")
    bias = b.constant(rng.standard_normal(12).astype(np.float32), "b")
    b.ret(b.op("direct_conv2d", [x, wt, bias], stride=(2, 1), padding=(1, 0, 1, 2), dilation=(1, 1), groups=6))
    m = braze.compile(b.module)
    for shp in [(1, 3, 3, 6), (2, 9, 12, 6), (1, 33, 5, 6)]:
        a = rng.standard_normal(shp).astype(np.float32)
        np.testing.assert_allclose(m(a), reference.run(b.module, a), rtol=1e-5, atol=1e-6)


def test_a_window_computes_no_producer_again():
    """The ReLU6 before a depthwise convolution stays a pass of its own: computed at each of the 9
    taps it cost more than the pass (fusion.amplifies); the one after joins the loops."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU6(), nn.Conv2d(16, 16, 3, padding=1, groups=16),
                      nn.ReLU6()).eval()
    cm = braze.compile(m, example_inputs=(torch.randn(1, 8, 10, 10),))
    groups = [f for f in cm.module.functions.values() if any(n.op == "direct_conv2d" for n in f.nodes)]
    assert len(groups) == 1
    ops = [n.op for n in groups[0].nodes if n.op != "constant"]
    assert ops[0] == "direct_conv2d" and ops.count("clamp") == 1  # and the permute back to NCHW
