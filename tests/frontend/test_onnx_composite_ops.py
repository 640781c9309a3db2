"""ONNX ops braze builds from its own (converters_composite.py), compiled natively, against ONNX's
reference evaluator at several shapes of a symbolic dim (1 and odd sizes among them)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _check(nodes, inputs, outputs, feeds, rtol=1e-5, atol=1e-6):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    cm = braze.compile(braze.import_onnx(m))
    ref = ReferenceEvaluator(m)
    compiles = braze.stats()["native_compiles"]
    for feed in feeds:
        want = ref.run(None, feed)
        got = cm(*feed.values())
        got = got if isinstance(got, tuple) else (got,)
        for k, (g_, w) in enumerate(zip(got, want)):
            assert g_.dtype == w.dtype and g_.shape == w.shape, (k, g_.shape, w.shape)
            np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    assert braze.stats()["native_compiles"] == compiles  # one compile for every shape


def test_argmax_argmin_last_index_and_hardmax():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("ArgMax", ["x"], ["a"], axis=1, select_last_index=1),
             helper.make_node("ArgMin", ["x"], ["b"], axis=0, keepdims=0, select_last_index=1),
             helper.make_node("Hardmax", ["x"], ["h"], axis=1)]
    feeds = [{"x": rng.integers(0, 3, (n, 5)).astype(np.float32)} for n in (1, 4, 9)]  # ties everywhere
    _check(nodes, [helper.make_tensor_value_info("x", F, ["n", 5])],
           [helper.make_tensor_value_info(o, t, [None] * r) for o, t, r in (("a", I64, 2), ("b", I64, 1), ("h", F, 2))],
           feeds)


def test_one_hot_with_a_run_time_depth_eye_like_and_shrink():
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("OneHot", ["i", "depth", "vals"], ["o"], axis=0),
             helper.make_node("EyeLike", ["x"], ["e"], k=-1),
             helper.make_node("Shrink", ["x"], ["s"], bias=0.25, lambd=0.5)]
    feeds = [{"i": rng.integers(-7, 7, (n,)).astype(np.int64), "depth": np.array(d, np.float32),
              "vals": np.array([-1.0, 3.0], np.float32), "x": rng.standard_normal((n, 4)).astype(np.float32)}
             for n, d in ((1, 3.0), (6, 5.0), (9, 1.0))]
    _check(nodes, [helper.make_tensor_value_info("i", I64, ["n"]), helper.make_tensor_value_info("depth", F, []),
                   helper.make_tensor_value_info("vals", F, [2]), helper.make_tensor_value_info("x", F, ["n", 4])],
           [helper.make_tensor_value_info(o, F, [None, None]) for o in ("o", "e", "s")], feeds)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # ONNX's reference, at the zero norm
def test_lp_normalization_and_reverse_sequence():
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("LpNormalization", ["x"], ["l2"], axis=1, p=2),
             helper.make_node("ReverseSequence", ["x", "lens"], ["q"], batch_axis=0, time_axis=1)]
    feeds = []
    for n in (1, 3, 7):
        x = rng.standard_normal((n, 5, 2, 3)).astype(np.float32)
        x[0, :, 0, 0] = 0  # a zero norm: 0, not 0/0
        feeds.append({"x": x, "lens": rng.integers(1, 6, (n,)).astype(np.int64)})
    _check(nodes, [helper.make_tensor_value_info("x", F, ["n", 5, 2, 3]),
                   helper.make_tensor_value_info("lens", I64, ["n"])],
           [helper.make_tensor_value_info(o, F, [None] * 4) for o in ("l2", "q")], feeds)


def test_l1_normalization_divides_by_the_sum_of_magnitudes():
    # ONNX's reference sums x itself for p=1 (x / x = 1 for a lone negative value); the L1 norm, and ONNX
    # Runtime, take |x|
    g = helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=1)], "g",
                          [helper.make_tensor_value_info("x", F, ["n", 3])],
                          [helper.make_tensor_value_info("y", F, [None, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    cm = braze.compile(braze.import_onnx(m))
    x = np.array([[-2.0, 0.0, 1.0], [1.0, 0.0, 3.0]], np.float32)
    np.testing.assert_allclose(cm(x), [[-2 / 3, 0, 0.25], [1 / 3, 0, 0.75]], rtol=1e-6)
    np.testing.assert_array_equal(cm(x[:1]), [[-1.0, 0.0, 1.0]])


def _lrn(x, size, alpha, beta, bias):
    """ONNX's LRN formula: channel c sums c - floor((size-1)/2) .. c + ceil((size-1)/2)."""
    c1, c2 = (size - 1) // 2, size // 2
    sq = np.zeros(x.shape, np.float64)
    for c in range(x.shape[1]):
        sq[:, c] = np.sum(x[:, max(0, c - c1):c + c2 + 1].astype(np.float64) ** 2, axis=1)
    return (x / (bias + alpha / size * sq) ** beta).astype(np.float32)


@pytest.mark.parametrize("size", [1, 3, 4])  # an even size puts the extra channel after (torch's: before)
def test_lrn(size):
    # not ONNX's reference evaluator: it sums the windows of the first N channels only (it loops over the
    # batch dim), which its own node test, with N == C, does not show
    g = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=2e-3, beta=0.6, bias=1.5)], "g",
                          [helper.make_tensor_value_info("x", F, ["n", 5, "h", 3])],
                          [helper.make_tensor_value_info("y", F, [None] * 4)])
    cm = braze.compile(braze.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])))
    rng = np.random.default_rng(3)
    for n, h in ((1, 1), (2, 4), (3, 7)):
        x = rng.standard_normal((n, 5, h, 3)).astype(np.float32) * 3
        np.testing.assert_allclose(cm(x), _lrn(x, size, 2e-3, 0.6, 1.5), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("p", [2, 3])
def test_lp_pool_natively(p):
    g = helper.make_graph([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[1, 2], p=p,
                                            pads=[1, 0, 0, 1])], "g",
                          [helper.make_tensor_value_info("x", F, ["n", 2, "h", "w"])],
                          [helper.make_tensor_value_info("y", F, [None] * 4)])
    cm = braze.compile(braze.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])))
    rng = np.random.default_rng(4)
    for n, h, w in ((1, 1, 2), (2, 5, 7)):
        x = rng.standard_normal((n, 2, h, w)).astype(np.float32)
        xp = np.pad(np.abs(x).astype(np.float64) ** p, ((0, 0), (0, 0), (1, 0), (0, 1)))
        oh, ow = xp.shape[2] - 1, (xp.shape[3] - 3) // 2 + 1
        want = np.array([[[[xp[b, c, i:i + 2, 2 * j:2 * j + 3].sum() for j in range(ow)] for i in range(oh)]
                          for c in range(2)] for b in range(n)]) ** (1 / p)
        np.testing.assert_allclose(cm(x), want, rtol=3e-6, atol=1e-6)


def test_quantize_dequantize_per_axis_blocked_and_dynamic():
    rng = np.random.default_rng(5)
    init = [helper.make_tensor("s", F, [3], [0.05, 0.1, 0.2]),
            helper.make_tensor("z", TensorProto.INT8, [3], [0, -3, 7]),
            helper.make_tensor("sb", F, [2, 2], [0.1, 0.3, 0.2, 0.05]),
            helper.make_tensor("zb", TensorProto.UINT8, [2, 2], [128, 3, 250, 0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], axis=1),
             helper.make_node("QuantizeLinear", ["xb", "sb", "zb"], ["qb"], axis=1, block_size=2),
             helper.make_node("DynamicQuantizeLinear", ["x"], ["dy", "dys", "dyz"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 3]),
                                       helper.make_tensor_value_info("xb", F, [2, 3])],
                          [helper.make_tensor_value_info(o, t, r) for o, t, r in
                           (("q", TensorProto.INT8, [None, 3]), ("dq", F, [None, 3]),
                            ("qb", TensorProto.UINT8, [2, 3]), ("dy", TensorProto.UINT8, [None, 3]),
                            ("dys", F, []), ("dyz", TensorProto.UINT8, []))], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    cm = braze.compile(braze.import_onnx(m))
    ref = ReferenceEvaluator(m)
    for n in (1, 4, 9):
        x = (rng.standard_normal((n, 3)) * 20).astype(np.float32)
        x[0, 0] = 0.025  # a tie: to even
        feed = {"x": x, "xb": (rng.standard_normal((2, 3)) * 30).astype(np.float32)}
        for k, (got, want) in enumerate(zip(cm(*feed.values()), ref.run(None, feed))):
            assert got.dtype == want.dtype, k
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"output {k} at n={n}")


def test_max_unpool_is_torch_s_at_symbolic_sizes():
    torch = pytest.importorskip("torch")
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"]),
                                       helper.make_tensor_value_info("i", I64, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", F, [None] * 4)])
    cm = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    for n, h, w in ((1, 1, 1), (2, 3, 5)):
        src = torch.randn(n, 3, 2 * h, 2 * w)
        y, i = torch.nn.functional.max_pool2d(src, 2, 2, return_indices=True)
        # ONNX's indices count over the whole tensor, torch's over each plane
        flat = i + torch.arange(n * 3).reshape(n, 3, 1, 1) * (4 * h * w)
        want = torch.nn.functional.max_unpool2d(y, i, 2, 2)
        np.testing.assert_array_equal(cm(y.numpy(), flat.numpy()), want.numpy())


@pytest.mark.parametrize("rank", [1, 2])
def test_col2im_is_torch_fold(rank):
    torch = pytest.importorskip("torch")
    image, block, strides, pads, dil = ([9, 7], [2, 3], [2, 1], [1, 0, 1, 2], [1, 2]) if rank == 2 else \
        ([11], [3], [2], [1, 2], [2])
    nodes = [helper.make_node("Constant", [], ["im"], value=helper.make_tensor("im", I64, [rank], image)),
             helper.make_node("Constant", [], ["bl"], value=helper.make_tensor("bl", I64, [rank], block)),
             helper.make_node("Col2Im", ["x", "im", "bl"], ["y"], strides=strides, pads=pads, dilations=dil)]
    k = int(np.prod(block))
    grid = [(image[i] + pads[i] + pads[rank + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    L = int(np.prod(grid))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 2 * k, L])],
                          [helper.make_tensor_value_info("y", F, ["n", 2] + image)])
    cm = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    for n in (1, 3):
        x = torch.randn(n, 2 * k, L)
        if rank == 2:  # torch pads symmetrically: fold into the larger padded image, then crop
            want = torch.nn.functional.fold(x, [image[0] + 2, image[1] + 2], block, dilation=dil,
                                            stride=strides)[:, :, 1:1 + image[0], 0:image[1]]
        else:
            want = torch.nn.functional.fold(x, [1, image[0] + 3], [1, block[0]], dilation=[1, dil[0]],
                                            stride=[1, strides[0]])[:, :, 0, 1:1 + image[0]]
        np.testing.assert_allclose(cm(x.numpy()), want.numpy(), rtol=1e-6, atol=1e-6)


def test_pad_wrap_is_numpy_s():
    nodes = [helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", I64, [4], [1, 2, 0, 3])),
             helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")]
    for w in (3, 7):  # pads up to the axis's size: a static one (a symbolic one may be smaller)
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", w])],
                              [helper.make_tensor_value_info("y", F, [None, w + 5])])
        cm = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
        for n in (1, 4):
            x = np.arange(n * w, dtype=np.float32).reshape(n, w)
            np.testing.assert_array_equal(cm(x), np.pad(x, ((1, 0), (2, 3)), mode="wrap"))


def test_flex_attention_with_a_score_mod_at_symbolic_sizes():
    """The preview domain's FlexAttention (grouped queries, a soft-cap score_mod) natively against
    ONNX's reference evaluator, at several batch and sequence lengths."""
    cap = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", F, [], [5.0])),
         helper.make_node("Div", ["s", "c"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
         helper.make_node("Mul", ["t", "c"], ["o"])], "cap",
        [helper.make_tensor_value_info("s", F, None)], [helper.make_tensor_value_info("o", F, None)])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=cap)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("q", F, ["b", 4, "l", 8]),
                                       helper.make_tensor_value_info("k", F, ["b", 2, "s", 8]),
                                       helper.make_tensor_value_info("v", F, ["b", 2, "s", 6])],
                          [helper.make_tensor_value_info("y", F, ["b", 4, "l", 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    cm, ref = braze.compile(m), ReferenceEvaluator(m)
    rng = np.random.default_rng(0)
    for b, ll, s in ((1, 1, 1), (2, 5, 3)):
        feed = {"q": rng.standard_normal((b, 4, ll, 8)).astype(np.float32) * 3,
                "k": rng.standard_normal((b, 2, s, 8)).astype(np.float32) * 3,
                "v": rng.standard_normal((b, 2, s, 6)).astype(np.float32)}
        np.testing.assert_allclose(cm(*feed.values()), ref.run(None, feed)[0], rtol=1e-5, atol=1e-6)


def test_batch_norm_in_training_mode_and_dropout_of_ratio_zero():
    """BatchNormalization with training_mode=1: the batch's statistics normalize, the running ones move
    by 1 - momentum (against ONNX's reference); Dropout in training mode with ratio 0 is the identity."""
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                              momentum=0.8, epsilon=1e-3)]
    vi = helper.make_tensor_value_info
    ins = [vi("x", F, ["n", 3, "h"])] + [vi(k, F, [3]) for k in "sbmv"]
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((n, 3, h)).astype(np.float32) * 2 + 1,
              **{k: rng.uniform(0.5, 2, 3).astype(np.float32) for k in "sbmv"}} for n, h in ((1, 2), (4, 5))]
    _check(nodes, ins, [vi("y", F, ["n", 3, "h"]), vi("rm", F, [3]), vi("rv", F, [3])], feeds, rtol=1e-5, atol=1e-5)
    drop = [helper.make_node("Constant", [], ["r"], value=helper.make_tensor("r", F, [], [0.0])),
            helper.make_node("Constant", [], ["t"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
            helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])]
    _check(drop, [vi("x", F, ["n"])], [vi("y", F, ["n"]), vi("mask", TensorProto.BOOL, ["n"])],
           [{"x": np.arange(n, dtype=np.float32)} for n in (1, 6)])


@pytest.mark.parametrize("k", [1, 2])
def test_gather_nd_with_batch_dims(k):
    vi = helper.make_tensor_value_info
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)
    rng = np.random.default_rng(k)
    feeds = []
    for b, q in ((1, 1), (3, 4)):
        x = rng.standard_normal((b, 5, 4, 2)).astype(np.float32)
        i = np.stack([rng.integers(-5, 5, (b, q)), rng.integers(-4, 4, (b, q))][:k], -1).astype(np.int64)
        feeds.append({"x": x, "i": i})
    _check([node], [vi("x", F, ["b", 5, 4, 2]), vi("i", I64, ["b", "q", k])], [vi("y", F, [None] * (5 - k))], feeds)
