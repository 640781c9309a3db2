"""ONNX RoiAlign (converters_sampling.py), compiled natively once and run for several region counts
(1 and odd) against ONNX's reference evaluator: average and max, both coordinate modes, a spatial
scale, regions reaching outside the map and malformed ones, two images, float32 and float64; and the
refusal of sampling_ratio 0 (a grid sized by each region's data)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")


def _roi_model(dt, **attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dt, [2, 3, 9, 7]),
                                        helper.make_tensor_value_info("rois", dt, ["r", 4]),
                                        helper.make_tensor_value_info("idx", TensorProto.INT64, ["r"])],
                          [helper.make_tensor_value_info("y", dt, ["r", 3, None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_roi_align_is_onnx_s(mode, ctm, dt, rng):
    m = _roi_model(dt, mode=mode, coordinate_transformation_mode=ctm, output_height=3, output_width=4,
                   sampling_ratio=2, spatial_scale=0.5)
    npdt = np.float32 if dt == TensorProto.FLOAT else np.float64
    cm, ref = braze.compile(m), ReferenceEvaluator(m)
    x = rng.standard_normal((2, 3, 9, 7)).astype(npdt)
    for r in (1, 4, 7):
        a = rng.uniform(-4, 16, (r, 2))
        rois = np.concatenate([a, a + rng.uniform(-1, 9, (r, 2))], axis=1).astype(npdt)  # some malformed
        idx = rng.integers(0, 2, r)
        want = ref.run(None, {"x": x, "rois": rois, "idx": idx})[0]
        np.testing.assert_allclose(cm(x, rois, idx), want, rtol=1e-5 if npdt is np.float32 else 1e-12, atol=1e-6)


def test_a_sampling_grid_sized_by_the_data_is_refused():
    with pytest.raises(UnsupportedOpError, match="sampling_ratio > 0"):
        braze.import_onnx(_roi_model(TensorProto.FLOAT, sampling_ratio=0))


def _deform_model(c, oc, group, og, kernel, mask, **attrs):
    F = TensorProto.FLOAT
    names = ["x", "w", "off", "b"] + (["mask"] if mask else [])
    k = kernel[0] * kernel[1]
    ins = [helper.make_tensor_value_info("x", F, ["n", c, "h", "w"]),
           helper.make_tensor_value_info("w", F, [oc, c // group, *kernel]),
           helper.make_tensor_value_info("off", F, ["n", 2 * og * k, "oh", "ow"]),
           helper.make_tensor_value_info("b", F, [oc])]
    if mask:
        ins.append(helper.make_tensor_value_info("mask", F, ["n", og * k, "oh", "ow"]))
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=list(kernel), group=group, offset_group=og,
                            **attrs)
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", F, ["n", oc, "oh", "ow"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("c, oc, group, og, kernel, mask, attrs", [
    (2, 3, 1, 1, (3, 3), False, dict(pads=[1, 1, 1, 1])),
    (4, 4, 2, 2, (2, 3), True, dict(strides=[2, 1], dilations=[1, 2], pads=[0, 1, 1, 0])),
])
def test_deform_conv_is_onnx_s(c, oc, group, og, kernel, mask, attrs, rng):
    """One compile for several batch and map sizes (a 1-pixel row, where ONNX's reference divides by
    size - 1 = 0, against a NumPy loop of the same rule); offsets up to two pixels, so corners fall
    outside the map."""
    m = _deform_model(c, oc, group, og, kernel, mask, **attrs)
    cm, ref = braze.compile(m), ReferenceEvaluator(m)
    st = attrs.get("strides", [1, 1])
    d = attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    k = kernel[0] * kernel[1]
    for n, h, w in ((1, 3, 4), (2, 5, 6), (1, 1, 5)):
        oh = (h + p[0] + p[2] - (kernel[0] - 1) * d[0] - 1) // st[0] + 1
        ow = (w + p[1] + p[3] - (kernel[1] - 1) * d[1] - 1) // st[1] + 1
        if oh < 1 or ow < 1:
            continue
        feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32),
                 "w": rng.standard_normal((oc, c // group, *kernel)).astype(np.float32),
                 "off": rng.uniform(-2, 2, (n, 2 * og * k, oh, ow)).astype(np.float32),
                 "b": rng.standard_normal(oc).astype(np.float32)}
        if mask:
            feeds["mask"] = rng.uniform(0, 1, (n, og * k, oh, ow)).astype(np.float32)
        got = cm(*feeds.values())
        want = _deform_numpy(*feeds.values(), group=group, og=og, kernel=kernel, st=st, d=d, p=p)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        if h > 1:
            np.testing.assert_allclose(got, ref.run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def _deform_numpy(x, w, off, b, mask=None, *, group, og, kernel, st, d, p):
    """Deformable convolution by loops: tap (i, j) of output (y, x) reads X bilinearly at
    (y*st - p + i*d + offset), each corner outside the map reading 0."""
    n, c, h, wd = x.shape
    oc, cg = w.shape[:2]
    kh, kw = kernel
    _, _, oh, ow = off.shape
    off = off.reshape(n, og, kh, kw, 2, oh, ow)
    mask = np.ones((n, og, kh, kw, oh, ow)) if mask is None else mask.reshape(n, og, kh, kw, oh, ow)
    out = np.zeros((n, oc, oh, ow)) + b.reshape(1, -1, 1, 1)

    def at(img, yy, xx):
        val = 0.0
        y0, x0 = np.floor(yy), np.floor(xx)
        for cy, wy in ((y0, 1 - (yy - y0)), (y0 + 1, yy - y0)):
            for cx, wx in ((x0, 1 - (xx - x0)), (x0 + 1, xx - x0)):
                if 0 <= cy < h and 0 <= cx < wd:
                    val += wy * wx * img[int(cy), int(cx)]
        return val

    for bi in range(n):
        for o in range(oc):
            g = o // (oc // group)
            for ci in range(cg):
                ch = g * cg + ci
                q = ch // (c // og)
                for y in range(oh):
                    for xo in range(ow):
                        for i in range(kh):
                            for j in range(kw):
                                yy = y * st[0] - p[0] + i * d[0] + off[bi, q, i, j, 0, y, xo]
                                xx = xo * st[1] - p[1] + j * d[1] + off[bi, q, i, j, 1, y, xo]
                                out[bi, o, y, xo] += (w[o, ci, i, j] * mask[bi, q, i, j, y, xo]
                                                      * at(x[bi, ch], float(yy), float(xx)))
    return out
