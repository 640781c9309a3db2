"""ONNX Det against numpy.linalg.det (LU with partial pivoting, as ONNX's reference), natively at a
dynamic batch: random, singular (a zero row, a zero column, two equal rows), permuted and
ill-ordered matrices, 1 to 3 rows; larger matrices refused by name."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")


def _model(shape):
    g = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_det_is_numpy_s(n):
    cm = braze.compile(_model(["b", n, n]))
    rng = np.random.default_rng(n)
    for b in (1, 9):
        x = rng.standard_normal((b, n, n)).astype(np.float32)
        if b > 1:
            x[1] = 0
            x[2, :, 0] = 0
            x[3, -1] = x[3, 0]
            x[4] = np.eye(n)[::-1]
            x[5] = np.triu(x[5]) * 1e3  # pivots far apart
        want = np.linalg.det(x.astype(np.float64))
        np.testing.assert_allclose(cm(x), want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_det_of_one_matrix_is_a_scalar():
    x = np.array([[2, 1], [5, 3]], np.float32)
    got = braze.compile(_model([2, 2]))(x)
    assert np.shape(got) == () and float(got) == pytest.approx(1.0)


def test_a_large_det_is_refused_by_name():
    with pytest.raises(UnsupportedOpError, match="float matrices of 1 to 3 rows"):
        braze.import_onnx(_model(["b", 4, 4]))
