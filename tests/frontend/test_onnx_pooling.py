"""ONNX pooling beyond 2-D NCHW windows, compiled natively at symbolic sizes: 3-D MaxPool, AveragePool
and LpPool (2-D pools over H and W, then D) against torch's 3-D pools; average pools with dilations
against ONNX's reference evaluator; MaxPool's Indices output against torch's, in both storage orders."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F = TensorProto.FLOAT
TF = torch.nn.functional


def _model(op, rank, outs=("y",), **attrs):
    x = helper.make_tensor_value_info("x", F, ["n", 2] + [f"s{i}" for i in range(rank - 2)])
    ys = [helper.make_tensor_value_info(o, F if o == "y" else TensorProto.INT64, [None] * rank) for o in outs]
    g = helper.make_graph([helper.make_node(op, ["x"], list(outs), **attrs)], "g", [x], ys)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


CASES_3D = [  # (ONNX attributes, torch's call)
    ({"kernel_shape": [2, 3, 2]}, lambda x: TF.max_pool3d(x, (2, 3, 2), 1)),  # ONNX strides default to 1
    ({"kernel_shape": [3, 2, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0], "dilations": [1, 2, 1],
      "ceil_mode": 1}, None),  # torch pads symmetrically: checked against ONNX's reference
    ({"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]},
     lambda x: TF.max_pool3d(x, 3, 2, 1)),
]


@pytest.mark.parametrize("attrs, want", CASES_3D)
def test_max_pool_3d(attrs, want):
    model = _model("MaxPool", 5, **attrs)
    m, ref = braze.compile(model), ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    for shape in ((1, 2, 3, 4, 3), (2, 2, 6, 7, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        expect = want(torch.from_numpy(x)).numpy() if want else ref.run(None, {"x": x})[0]
        np.testing.assert_array_equal(m(x), expect)


@pytest.mark.parametrize("cip, ceil", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_average_pool_3d(cip, ceil):
    model = _model("AveragePool", 5, kernel_shape=[2, 3, 3], strides=[2, 2, 1], pads=[1, 1, 0, 1, 1, 0],
                   count_include_pad=cip, ceil_mode=ceil)
    m = braze.compile(model)
    rng = np.random.default_rng(1)
    for shape in ((1, 2, 2, 3, 3), (2, 2, 5, 6, 4)):
        x = rng.standard_normal(shape).astype(np.float32)
        want = TF.avg_pool3d(torch.from_numpy(x), (2, 3, 3), (2, 2, 1), (1, 1, 0), ceil_mode=bool(ceil),
                             count_include_pad=bool(cip)).numpy()
        np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)


def test_lp_pool_3d():
    model = _model("LpPool", 5, kernel_shape=[2, 2, 3], strides=[1, 2, 1], p=2)
    m = braze.compile(model)
    x = np.random.default_rng(2).standard_normal((2, 2, 4, 5, 6)).astype(np.float32)
    want = TF.lp_pool3d(torch.from_numpy(x), 2, (2, 2, 3), (1, 2, 1)).numpy()
    np.testing.assert_allclose(m(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("cip", [0, 1])
def test_average_pool_with_dilations(rank, cip):
    k = [2, 3, 2][-(rank - 2):]
    model = _model("AveragePool", rank, kernel_shape=k, dilations=[2] * (rank - 2), pads=[1] * (2 * (rank - 2)),
                   count_include_pad=cip)
    m, ref = braze.compile(model), ReferenceEvaluator(model)
    rng = np.random.default_rng(3)
    for spatial in ((5, 6, 7), (4, 9, 5)):
        x = rng.standard_normal((2, 2) + spatial[-(rank - 2):]).astype(np.float32)
        np.testing.assert_allclose(m(x), ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("order", [0, 1])
def test_max_pool_indices_are_flat_positions_in_the_tensor(order):
    model = _model("MaxPool", 4, outs=("y", "i"), kernel_shape=[2, 3], strides=[2, 1], pads=[1, 0, 0, 1],
                   storage_order=order)
    m = braze.compile(model)
    rng = np.random.default_rng(4)
    for n, h, w in ((1, 2, 3), (3, 5, 6)):
        x = rng.standard_normal((n, 2, h, w)).astype(np.float32)
        # torch pads symmetrically: pad the input as ONNX does, and shift its plane indices back
        xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 1)), constant_values=-np.inf)
        y, i = TF.max_pool2d(torch.from_numpy(xp), (2, 3), (2, 1), return_indices=True)
        i = i.numpy()
        hh, ww = i // (w + 1) - 1, i % (w + 1)
        plane = hh * w + ww if order == 0 else hh + ww * h
        flat = plane + (np.arange(n * 2).reshape(n, 2, 1, 1) * h * w)
        gy, gi = m(x)
        np.testing.assert_array_equal(gy, y.numpy())
        np.testing.assert_array_equal(gi, flat)
