"""ONNX's scatters (ScatterElements, ScatterND, TensorScatter) compiled natively at dynamic shapes,
against NumPy loops written from the ONNX spec's pseudocode: every reduction, negative and repeated
indices (the last write wins), sizes of 1 and odd sizes, and an index out of range refused."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import InputError, UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F, I64 = TensorProto.FLOAT, TensorProto.INT64
_FN = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _model(node, inputs, out_shape, opset=18):
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _scatter_elements_ref(data, idx, upd, axis, reduction):
    out = data.copy()
    for p in np.ndindex(idx.shape):
        q = list(p)
        q[axis] = idx[p] % data.shape[axis]
        out[tuple(q)] = _FN[reduction](out[tuple(q)], upd[p])
    return out


def _scatter_nd_ref(data, idx, upd, reduction):
    out = data.copy()
    for p in np.ndindex(idx.shape[:-1]):
        q = tuple(int(i) % n for i, n in zip(idx[p], data.shape))
        out[q] = _FN[reduction](out[q], upd[p])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction)
    m = braze.compile(_model(node, [helper.make_tensor_value_info("x", F, ["a", "b", 3]),
                                    helper.make_tensor_value_info("i", I64, ["c", "d", 2]),
                                    helper.make_tensor_value_info("u", F, ["c", "d", 2])], ["a", "b", 3]))
    rng = np.random.default_rng(axis + 7)
    for a, b, c, d in ((1, 1, 1, 1), (5, 7, 3, 2), (9, 4, 9, 4)):
        x = rng.standard_normal((a, b, 3)).astype(np.float32)
        ax = axis % 3
        n = x.shape[ax]
        i = rng.integers(-n, n, (min(c, a) if ax != 0 else c, min(d, b) if ax != 1 else d, 2))
        u = rng.standard_normal(i.shape).astype(np.float32)
        np.testing.assert_array_equal(m(x, i, u), _scatter_elements_ref(x, i, u, ax, reduction))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_scatter_nd(reduction, k):
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    u_shape = ["q"] + [["a", "b", "c"][j] for j in range(k, 3)]
    m = braze.compile(_model(node, [helper.make_tensor_value_info("x", F, ["a", "b", "c"]),
                                    helper.make_tensor_value_info("i", I64, ["q", k]),
                                    helper.make_tensor_value_info("u", F, u_shape)], ["a", "b", "c"]))
    rng = np.random.default_rng(k)
    for shape, q in (((1, 1, 1), 1), ((4, 3, 5), 7), ((2, 9, 3), 30)):
        x = rng.standard_normal(shape).astype(np.float32)
        i = np.stack([rng.integers(-shape[j], shape[j], q) for j in range(k)], -1)
        u = rng.standard_normal((q,) + shape[k:]).astype(np.float32)
        np.testing.assert_array_equal(m(x, i, u), _scatter_nd_ref(x, i, u, reduction))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_is_a_kv_cache_update(mode):
    node = helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", F, ["b", 2, "s", 4]),
                                       helper.make_tensor_value_info("u", F, ["b", 2, "t", 4]),
                                       helper.make_tensor_value_info("w", I64, ["b"])],
                          [helper.make_tensor_value_info("y", F, ["b", 2, "s", 4])])
    m = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)]))
    rng = np.random.default_rng(3)
    for b, s, t in ((1, 1, 1), (3, 8, 1), (2, 9, 5)):
        c = rng.standard_normal((b, 2, s, 4)).astype(np.float32)
        u = rng.standard_normal((b, 2, t, 4)).astype(np.float32)
        w = rng.integers(0, s - t + 1 if mode == "linear" else 2 * s, b)
        want = c.copy()
        for bi in range(b):
            for j in range(t):
                p = w[bi] + j
                want[bi, :, p % s if mode == "circular" else p] = u[bi, :, j]
        np.testing.assert_array_equal(m(c, u, w), want)


def test_an_index_out_of_range_is_an_input_error():
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1)
    m = braze.compile(_model(node, [helper.make_tensor_value_info("x", F, [2, 3]),
                                    helper.make_tensor_value_info("i", I64, [2, 1]),
                                    helper.make_tensor_value_info("u", F, [2, 1])], [2, 3]))
    x, u = np.zeros((2, 3), np.float32), np.ones((2, 1), np.float32)
    np.testing.assert_array_equal(m(x, np.array([[2], [-3]]), u), [[0, 0, 1], [1, 0, 0]])
    for bad in ([[3], [0]], [[0], [-4]]):
        with pytest.raises(InputError, match="index_put"):
            m(x, np.array(bad), u)


def test_sixteen_bit_float_data_is_refused_by_name():
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4]),
                                       helper.make_tensor_value_info("i", I64, [1, 1]),
                                       helper.make_tensor_value_info("u", TensorProto.FLOAT16, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])])
    with pytest.raises(UnsupportedOpError, match="ScatterND: float16 data"):
        braze.import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
