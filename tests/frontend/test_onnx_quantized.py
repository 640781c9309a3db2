"""ONNX's integer ops on quantized tensors (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv)
compiled natively at symbolic sizes, bit for bit against ONNX's reference evaluator: extreme values
whose sums pass 2^24 (a plain float32 product would round them), per-row, per-column and
per-channel zero points and scales, int8 and uint8."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
U8, I8, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT


def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def _check(model, feeds):
    m = braze.compile(model)
    ref = ReferenceEvaluator(model)
    names = [i.name for i in model.graph.input]
    for feed in feeds:
        want = ref.run(None, feed)[0]
        got = m(*[feed[n] for n in names])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def _extreme(rng, shape, dt):
    lo, hi = (0, 255) if dt == np.uint8 else (-128, 127)
    return rng.choice(np.array([lo, hi, lo + 1, hi - 1], dt), shape)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_matmul_integer_sums_past_two_to_the_24th_exactly(dt):
    ot = U8 if dt == np.uint8 else I8
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], "g",
        [_vi("a", ot, ["m", 700]), _vi("b", ot, [700, "n"]), _vi("az", ot, []), _vi("bz", ot, ["n"])],
        [_vi("y", TensorProto.INT32, ["m", "n"])]), opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(0)
    zp = np.array(0 if dt == np.int8 else 255, dt)
    feeds = [{"a": _extreme(rng, (m, 700), dt), "b": _extreme(rng, (700, n), dt), "az": zp,
              "bz": rng.integers(0, 3, n).astype(dt)} for m, n in ((1, 1), (5, 3), (33, 17))]
    _check(model, feeds)


def test_qlinear_matmul_per_column_scale():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])], "g",
        [_vi("a", U8, ["m", 300]), _vi("as", F, []), _vi("az", U8, []), _vi("b", I8, [300, 6]),
         _vi("bs", F, [6]), _vi("bz", I8, [6]), _vi("ys", F, []), _vi("yz", U8, [])],
        [_vi("y", U8, ["m", 6])]), opset_imports=[helper.make_opsetid("", 21)])
    rng = np.random.default_rng(1)
    feeds = [{"a": rng.integers(0, 256, (m, 300)).astype(np.uint8), "as": np.array(0.02, np.float32),
              "az": np.array(128, np.uint8), "b": rng.integers(-128, 128, (300, 6)).astype(np.int8),
              "bs": rng.uniform(0.001, 0.01, 6).astype(np.float32), "bz": np.zeros(6, np.int8),
              "ys": np.array(0.5, np.float32), "yz": np.array(100, np.uint8)} for m in (1, 4, 9)]
    _check(model, feeds)


@pytest.mark.parametrize("qlinear", [False, True])
def test_convolutions_of_many_channels_are_exact(qlinear):
    """64 channels x 3x3 = 576 products of up to 255^2 per output: past float32's exact integers."""
    c, k = 64, 5
    if qlinear:
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                                pads=[1, 1, 1, 1], strides=[2, 1])
        ins = [_vi("x", U8, ["n", c, "h", "w"]), _vi("xs", F, []), _vi("xz", U8, []), _vi("w", I8, [k, c, 3, 3]),
               _vi("ws", F, [k]), _vi("wz", I8, [k]), _vi("ys", F, []), _vi("yz", U8, []),
               _vi("b", TensorProto.INT32, [k])]
        out = _vi("y", U8, ["n", k, None, None])
    else:
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])
        ins = [_vi("x", U8, ["n", c, "h", "w"]), _vi("w", U8, [k, c, 3, 3]), _vi("xz", U8, []), _vi("wz", U8, [k])]
        out = _vi("y", TensorProto.INT32, ["n", k, None, None])
    model = helper.make_model(helper.make_graph([node], "g", ins, [out]),
                              opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(2)
    feeds = []
    for n, h, w in ((1, 1, 1), (2, 5, 7), (1, 9, 4)):
        f = {"x": _extreme(rng, (n, c, h, w), np.uint8), "xz": np.array(3, np.uint8)}
        if qlinear:
            f.update(w=_extreme(rng, (k, c, 3, 3), np.int8), xs=np.array(0.01, np.float32),
                     ws=rng.uniform(1e-4, 1e-3, k).astype(np.float32), wz=np.zeros(k, np.int8),
                     ys=np.array(0.05, np.float32), yz=np.array(128, np.uint8),
                     b=rng.integers(-5000, 5000, k).astype(np.int32))
        else:
            f.update(w=_extreme(rng, (k, c, 3, 3), np.uint8), wz=rng.integers(0, 255, k).astype(np.uint8))
        feeds.append(f)
    _check(model, feeds)
