"""ONNX function ops braze has no converter for, expanded into their bodies at import
(braze/frontend/onnx/functions.py), compiled natively at dynamic shapes against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")


def _model(node, inputs, outputs, opset):
    g = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_a_left_out_attribute_takes_the_schemas_default():
    """MeanVarianceNormalization without ``axes`` normalizes over (0, 2, 3), its default: the inliner
    would drop the body's reference to the missing attribute, and the mean would run over every axis."""
    m = _model(helper.make_node("MeanVarianceNormalization", ["x"], ["y"]),
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", 2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", 2])], 13)
    cm = braze.compile(m)
    for shape in ((1, 3, 1, 2), (2, 3, 5, 2)):
        x = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32) * 3 + 1
        mean = x.mean(axis=(0, 2, 3), keepdims=True)
        want = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
        np.testing.assert_allclose(cm(x), want, rtol=1e-5, atol=1e-5)


def test_context_dependent_bodies_at_dynamic_shapes():
    """RMSNormalization (opset 23) and SoftmaxCrossEntropyLoss: bodies ONNX builds for the node's
    attributes and input types, with symbolic dims, compiled once and run at several batch sizes."""
    rms = _model(helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5),
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", 8]),
                  helper.make_tensor_value_info("s", TensorProto.FLOAT, [8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", 8])], 23)
    sce = _model(helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y"], ["loss"], reduction="mean"),
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 5]),
                  helper.make_tensor_value_info("y", TensorProto.INT64, ["b"])],
                 [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], 13)
    cm_rms, cm_sce = braze.compile(rms), braze.compile(sce)
    for b in (1, 3, 17):
        rng = np.random.default_rng(b)
        x = rng.standard_normal((b, 2 * b - 1, 8)).astype(np.float32)
        s = rng.standard_normal(8).astype(np.float32)
        want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * s
        np.testing.assert_allclose(cm_rms(x, s), want, rtol=1e-5, atol=1e-6)
        logits = rng.standard_normal((b, 5)).astype(np.float32)
        labels = rng.integers(0, 5, b).astype(np.int64)
        z = logits.astype(np.float64) - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        np.testing.assert_allclose(cm_sce(logits, labels), -logp[np.arange(b), labels].mean(), rtol=1e-5)


def test_a_body_whose_ops_changed_since_is_not_used():
    """Swish's body is written at opset 24 and uses Constant and CastLike, which have newer versions
    by opset 28: read at 28 it might mean something else, so it is not expanded there (Swish has a
    converter of its own, which SwiGLU's opset-28 body calls)."""
    import onnx

    from braze.frontend.onnx.functions import _at_opset, _body

    schema = onnx.defs.get_schema("Swish", 28, "")
    node = helper.make_node("Swish", ["x"], ["y"], alpha=1.0)
    assert not _at_opset(_body(schema, node, 28, {}), 28)
    assert _at_opset(_body(schema, node, 24, {}), 24)


@pytest.mark.parametrize("opset", [24, 28])
def test_swish_and_swiglu_at_dynamic_shapes(opset):
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "d"])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "d"])
    sw = braze.compile(_model(helper.make_node("Swish", ["x"], ["y"], alpha=0.5), [x_vi], [y_vi], opset))
    b_vi = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", "d"])
    glu = braze.compile(_model(helper.make_node("SwiGLU", ["x", "b"], ["y"], alpha=1.5), [x_vi, b_vi], [y_vi], 28))
    for n, d in ((1, 1), (3, 7), (5, 64)):
        x = np.random.default_rng(n).standard_normal((n, d)).astype(np.float32) * 4
        np.testing.assert_allclose(sw(x), x / (1 + np.exp(-0.5 * x)), rtol=1e-6, atol=1e-6)
        b = x[::-1].copy()
        np.testing.assert_allclose(glu(x, b), x / (1 + np.exp(-1.5 * x)) * b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_and_center_crop_pad_with_constant_sizes(align):
    """AffineGrid's and CenterCropPad's bodies size their outputs from an input's values: constants
    here (an exporter's), folded at import; against torch's affine_grid and NumPy's crop and pad."""
    torch = pytest.importorskip("torch")
    size = helper.make_node("Constant", [], ["size"], value=helper.make_tensor("size", TensorProto.INT64, [4],
                                                                                [2, 3, 5, 4]))
    ag = helper.make_graph([size, helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)],
                           "g", [helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, 2, 3])],
                           [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [2, 5, 4, 2])])
    m = braze.compile(helper.make_model(ag, opset_imports=[helper.make_opsetid("", 20)]))
    theta = np.random.default_rng(align).standard_normal((2, 2, 3)).astype(np.float32)
    want = torch.nn.functional.affine_grid(torch.from_numpy(theta), [2, 3, 5, 4], align_corners=bool(align))
    np.testing.assert_allclose(m(theta), want.numpy(), rtol=1e-5, atol=1e-6)
    shape = helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("shape", TensorProto.INT64, [2],
                                                                                  [3, 8]))
    cc = helper.make_graph([shape, helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1])], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 5])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])])
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    got = braze.compile(helper.make_model(cc, opset_imports=[helper.make_opsetid("", 18)]))(x)
    want = np.zeros((3, 8), np.float32)
    want[:, 1:6] = x[1:4]  # rows cropped from the centre (6 -> 3 starts at 1), columns padded (5 -> 8 starts at 1)
    np.testing.assert_array_equal(got, want)
