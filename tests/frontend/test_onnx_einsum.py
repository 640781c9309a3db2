"""ONNX Einsum against numpy.einsum, natively compiled at dynamic shapes: contractions, an ellipsis
(explicit and implicit outputs), diagonals and traces, sizes of 1 and odd sizes; and the equations
braze refuses by name."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")


def _model(eq, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    rank = np.einsum(eq, *[np.zeros([2] * len(s)) for s in shapes]).ndim
    g = helper.make_graph([helper.make_node("Einsum", names, ["y"], equation=eq)], "g",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"o{i}" for i in range(rank)])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("eq, shapes, sizes", [
    ("ii->i", [["n", "n"]], [{"n": 1}, {"n": 5}]),
    ("ii", [["n", "n"]], [{"n": 1}, {"n": 7}]),
    ("bii->bi", [["b", "n", "n"]], [{"b": 2, "n": 3}, {"b": 1, "n": 1}]),
    ("...ii->...i", [["a", "b", "n", "n"]], [{"a": 2, "b": 3, "n": 4}, {"a": 1, "b": 1, "n": 1}]),
    ("...ij,...jk->...ik", [["b", "m", "k"], ["b", "k", "n"]], [{"b": 2, "m": 3, "k": 5, "n": 7}]),
    ("...ij,...jk", [["b", "m", "k"], ["b", "k", "n"]], [{"b": 3, "m": 1, "k": 4, "n": 2}]),
    ("i...->...", [["n", "a", "b"]], [{"n": 4, "a": 3, "b": 5}]),
    ("iij,jk->ik", [["n", "n", "k"], ["k", "m"]], [{"n": 3, "k": 4, "m": 5}]),
])
def test_einsum_is_numpy_s(eq, shapes, sizes):
    cm = braze.compile(_model(eq, shapes))
    rng = np.random.default_rng(len(eq))
    for env in sizes:
        xs = [rng.standard_normal([env[d] for d in s]).astype(np.float32) for s in shapes]
        np.testing.assert_allclose(cm(*xs), np.einsum(eq, *xs), rtol=1e-5, atol=1e-5)


def test_ellipses_that_would_broadcast_are_refused_by_name():
    with pytest.raises(UnsupportedOpError, match="would broadcast"):
        braze.import_onnx(_model("...ij,...jk->...ik", [[2, 3, 4], [1, 4, 5]]))
