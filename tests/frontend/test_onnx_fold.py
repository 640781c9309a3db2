"""ONNX's 3-D ConvTranspose and Col2Im (converters_fold.py: a product, then one index_add of block
rows into the image), compiled natively once for several batch sizes: ConvTranspose against torch's
conv_transpose3d with strides, pads, dilations, output_padding, groups and a bias; Col2Im against
ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_models import onnx_model  # noqa: E402

import braze  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F = TensorProto.FLOAT


@pytest.mark.parametrize("attrs, group", [(dict(), 1),
                                          (dict(strides=[2, 1, 2], pads=[0, 0, 1, 1, 1, 1], dilations=[1, 2, 1],
                                                output_padding=[1, 0, 0]), 2)])
def test_conv_transpose_3d_is_torch_s(attrs, group, rng):
    torch = pytest.importorskip("torch")
    cin, cout_g, kernel, spatial = 4, 3, (2, 3, 2), (3, 4, 5)
    w = rng.standard_normal((cin, cout_g, *kernel)).astype(np.float32)
    b = rng.standard_normal(cout_g * group).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, **attrs)
    m = onnx_model([node], [helper.make_tensor_value_info("x", F, ["n", cin, *spatial])],
                   [helper.make_tensor_value_info("y", F, ["n", cout_g * group, None, None, None])],
                   [helper.make_tensor("w", F, w.shape, w.ravel()), helper.make_tensor("b", F, b.shape, b)])
    cm = braze.compile(m)
    p = attrs.get("pads", [0] * 6)  # torch pads both ends by the begin pads: the extra end pads are cut below
    for n in (1, 3):
        x = rng.standard_normal((n, cin, *spatial)).astype(np.float32)
        want = torch.nn.functional.conv_transpose3d(
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=attrs.get("strides", 1),
            padding=tuple(p[:3]), output_padding=tuple(attrs.get("output_padding", [0] * 3)),
            groups=group, dilation=attrs.get("dilations", 1)).numpy()
        end = [p[3 + i] - p[i] for i in range(3)]  # the extra end pads of ONNX's asymmetric pads
        want = want[:, :, :want.shape[2] - end[0] or None, :want.shape[3] - end[1] or None,
                    :want.shape[4] - end[2] or None]
        np.testing.assert_allclose(cm(x), want, rtol=1e-5, atol=1e-5)


def test_col2im_of_a_volume_is_onnx_s(rng):
    image, block = [4, 5, 3], [2, 2, 2]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[1, 2, 1], pads=[0, 1, 0, 1, 0, 1],
                            dilations=[2, 1, 1])
    inits = [helper.make_tensor("image", TensorProto.INT64, [3], image),
             helper.make_tensor("block", TensorProto.INT64, [3], block)]
    grid = [(4 + 0 + 1 - 2 * 1 - 1) // 1 + 1, (5 + 1 + 0 - 1 - 1) // 2 + 1, (3 + 0 + 1 - 1 - 1) // 1 + 1]
    m = onnx_model([node], [helper.make_tensor_value_info("x", F, ["n", 3 * 8, int(np.prod(grid))])],
                   [helper.make_tensor_value_info("y", F, ["n", 3, *image])], inits)
    cm, ref = braze.compile(m), ReferenceEvaluator(m)
    for n in (1, 2):
        x = rng.standard_normal((n, 24, int(np.prod(grid)))).astype(np.float32)
        np.testing.assert_allclose(cm(x), ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
