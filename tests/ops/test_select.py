"""The references of the ops whose output size their data decides (ops/select.py) against NumPy and
ONNX's own reference: ``nonzero`` as ``numpy.nonzero``, ``unique`` as ``numpy.unique`` (sorted, then
by first appearance; along an axis; NaN and -0), ``non_max_suppression`` as onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

import braze.reference
from braze.ir import sym as S
from braze.ir.types import DType, TensorType
from braze.ops import Builder
from braze.ops.select import nms_numpy, unique_numpy


def _nonzero_module(dt, rank):
    b = Builder()
    dims = tuple(b.sym(f"d{i}") for i in range(rank))
    x = b.param("x", TensorType(DType[dt], dims))
    b.ret(b.nonzero(x, size=b.size_sym(S.prod(dims))))
    return b.module


@pytest.mark.parametrize("dt", ["float32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 1, 4)])
def test_nonzero_is_numpy_s_and_binds_its_size(dt, shape, rng):
    m = _nonzero_module(dt, len(shape))
    x = ((rng.standard_normal(shape) > 0.2) * 3).astype(dt)
    got = braze.reference.run(m, x)
    np.testing.assert_array_equal(got, np.array(np.nonzero(x)).reshape(len(shape), -1))
    assert got.dtype == np.int64


def test_nonzero_counts_nan_and_not_negative_zero():
    m = _nonzero_module("float32", 1)
    x = np.array([0.0, -0.0, np.nan, np.inf, 1e-45], np.float32)
    np.testing.assert_array_equal(braze.reference.run(m, x), [[2, 3, 4]])


@pytest.mark.parametrize("dt", ["float32", "int32", "float64"])
def test_unique_sorted_is_numpy_s(dt, rng):
    for n in (1, 2, 9, 100):
        x = rng.integers(-3, 4, n).astype(dt)
        first, inverse, counts = unique_numpy(x, 0, True)
        y, i, v, c = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
        np.testing.assert_array_equal(x[first], y)
        np.testing.assert_array_equal(first, i)
        np.testing.assert_array_equal(inverse, v.reshape(-1))
        np.testing.assert_array_equal(counts, c)


def test_unique_unsorted_keeps_the_order_of_first_appearance():
    x = np.array([2, 1, 1, 3, 4, 3, 2], np.int64)
    first, inverse, counts = unique_numpy(x, 0, False)
    np.testing.assert_array_equal(x[first], [2, 1, 3, 4])
    np.testing.assert_array_equal(first, [0, 1, 3, 4])
    np.testing.assert_array_equal(x[first][inverse], x)
    np.testing.assert_array_equal(counts, [2, 2, 2, 1])


def test_unique_nan_is_one_value_above_all_and_negative_zero_is_zero():
    x = np.array([np.nan, -0.0, 1.0, 0.0, np.nan, -np.inf], np.float32)
    first, inverse, counts = unique_numpy(x, 0, True)
    np.testing.assert_array_equal(first, [5, 1, 2, 0])  # -inf, the first zero (-0), 1, the first NaN
    np.testing.assert_array_equal(counts, [1, 2, 1, 2])
    np.testing.assert_array_equal(inverse, [3, 1, 2, 1, 3, 0])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unique_along_an_axis_is_numpy_s(axis, rng):
    x = rng.integers(0, 2, (4, 5, 3)).astype(np.float32)
    x = np.concatenate([x, x], axis=axis)  # every slice repeats
    first, inverse, counts = unique_numpy(x, axis % 3, True)
    y, i, v, c = np.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(np.take(x, first, axis=axis), y)
    np.testing.assert_array_equal(first, i)
    np.testing.assert_array_equal(inverse, v.reshape(-1))
    np.testing.assert_array_equal(counts, c)


def _onnx_nms(boxes, scores, max_out, iou, score, center):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    names = ["boxes", "scores", "max_out", "iou", "score"]
    node = helper.make_node("NonMaxSuppression", names, ["out"], center_point_box=center)
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "max_out" else TensorProto.FLOAT, None)
           for n in names]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("out", TensorProto.INT64, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, (boxes, scores, max_out, iou, score))))[0]


@pytest.mark.parametrize("center", [0, 1])
def test_nms_is_onnx_s_reference(center, rng):
    for b, c, n in ((1, 1, 1), (2, 3, 7), (1, 2, 30)):
        boxes = rng.uniform(0, 4, (b, n, 4)).astype(np.float32)
        scores = rng.choice(np.float32([0.1, 0.5, 0.5, 0.9]), (b, c, n))  # ties: lower index first
        args = (np.array([5], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32))
        np.testing.assert_array_equal(nms_numpy(boxes, scores, *args, center), _onnx_nms(boxes, scores, *args, center))


def test_nms_keeps_no_box_without_a_limit():
    boxes = np.zeros((1, 2, 4), np.float32)
    assert nms_numpy(boxes, np.ones((1, 1, 2), np.float32)).shape == (0, 3)
