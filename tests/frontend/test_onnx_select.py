"""ONNX's ops whose output size the data decides (NonZero, Compress, Unique, NonMaxSuppression),
compiled natively once and run at several dynamic shapes against ONNX's reference evaluator: sizes
of 1, odd sizes, nothing selected and everything selected; a constant condition folded at import; a
condition longer than its axis refused."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx_models import onnx_model as _model  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402
from braze.frontend.onnx import import_onnx  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL




def _agree(model, feeds_list):
    cm = braze.compile(model)
    ref = ReferenceEvaluator(model)
    names = [i.name for i in model.graph.input]
    for feeds in feeds_list:
        want = ref.run(None, dict(zip(names, feeds)))
        got = cm(*feeds)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), w)


def test_nonzero_then_a_gather_of_what_it_found(rng):
    """x[x > 0] as exported: NonZero of a mask, its transpose, GatherND."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["a", "b"])],
               [helper.make_tensor_value_info("nz", I64, [2, "n"]), helper.make_tensor_value_info("y", F, ["n"])],
               [helper.make_tensor("zero", F, [], [0.0])])
    feeds = [[rng.standard_normal(s).astype(np.float32)] for s in ((1, 1), (3, 7), (17, 33))]
    _agree(m, feeds + [[-np.ones((4, 5), np.float32)], [np.ones((2, 3), np.float32)]])


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis, rng):
    kw = {} if axis is None else {"axis": axis}
    # the condition is as long as the axis (or the flattened input)
    shape_c = ["n"] if axis is None else [{0: "a", 1: "b", -1: "b"}[axis]]
    x_shape = ["a", "b"] if axis is not None else [1, "n"]
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], **kw)],
               [helper.make_tensor_value_info("x", F, x_shape), helper.make_tensor_value_info("c", B, shape_c)],
               [helper.make_tensor_value_info("y", F, ["o", "p"])])
    feeds = []
    for a, b in ((1, 1), (3, 7), (6, 40)):
        x = rng.standard_normal((a, b) if axis is not None else (1, a * b)).astype(np.float32)
        n = {None: a * b, 0: a, 1: b, -1: b}[axis]
        feeds += [[x, rng.random(n) > 0.5], [x, np.zeros(n, bool)]]
    _agree(m, feeds)


def test_a_constant_condition_folds_to_constant_indices():
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=1)],
               [helper.make_tensor_value_info("x", F, ["a", 4])], [helper.make_tensor_value_info("y", F, ["o", "p"])],
               [helper.make_tensor("c", B, [3], [True, False, True])])
    mod = import_onnx(m)
    assert not mod.data_symbols and "nonzero" not in mod.to_text()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(braze.compile(m)(x), x[:, [0, 2]])


def test_a_condition_longer_than_its_axis_is_refused():
    m = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)],
               [helper.make_tensor_value_info("x", F, [3, 2]), helper.make_tensor_value_info("c", B, [5])],
               [helper.make_tensor_value_info("y", F, ["o", "p"])])
    with pytest.raises(UnsupportedOpError, match="may be longer than the 3 slices of axis 0"):
        import_onnx(m)


# (ONNX's reference takes the unsorted values along axis 0 of the unflattened input: right only there)
@pytest.mark.parametrize("axis, sorted_", [(None, 1), (None, 0), (0, 1), (0, 0), (1, 1)])
def test_unique(axis, sorted_, rng):
    kw = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    m = _model([helper.make_node("Unique", ["x"], ["y", "i", "v", "c"], **kw)],
               [helper.make_tensor_value_info("x", F, ["a", "b"] if axis is not None or sorted_ else ["b"])],
               [helper.make_tensor_value_info(n, F if n == "y" else I64, ["o"]) for n in "yivc"])
    feeds = [[rng.integers(-2, 3, s).astype(np.float32)] for s in (((1, 1), (3, 7), (12, 5)) if axis is not None or sorted_ else ((1,), (9,), (40,)))]
    if axis is None and sorted_:
        feeds.append([np.array([[1.0, -0.0, 0.0]], np.float32)])
    _agree(m, feeds)


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression(center, rng):
    m = _model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "score"], ["sel"],
                                 center_point_box=center)],
               [helper.make_tensor_value_info("boxes", F, ["b", "n", 4]),
                helper.make_tensor_value_info("scores", F, ["b", "c", "n"]),
                helper.make_tensor_value_info("k", I64, [1]), helper.make_tensor_value_info("iou", F, [1]),
                helper.make_tensor_value_info("score", F, [1])],
               [helper.make_tensor_value_info("sel", I64, ["s", 3])])
    feeds = []
    for b, c, n in ((1, 1, 1), (2, 3, 11), (1, 2, 50)):
        boxes = rng.uniform(0, 4, (b, n, 4)).astype(np.float32)
        scores = rng.random((b, c, n)).astype(np.float32)
        for k in (0, 3, 100):
            feeds.append([boxes, scores, np.array([k], np.int64), np.array([0.4], np.float32),
                          np.array([0.2], np.float32)])
    _agree(m, feeds)
