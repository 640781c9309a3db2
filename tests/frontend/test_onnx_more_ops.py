"""ONNX Resize, TopK, GroupNormalization and Mod(fmod=1) against ONNX Runtime (or onnx's
reference evaluator), and tf2onnx's Shape -> Gather -> ReduceProd -> Concat -> Reshape
folded symbolically (a Keras Dense on a 3-D input)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_models import onnx_model as _model  # noqa: E402

import braze  # noqa: E402
from braze import reference  # noqa: E402
from braze.testing import assert_close  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "onnx_more_cache"))




def _vi(name, dims, dt=F32):
    return helper.make_tensor_value_info(name, dt, dims)


def _expected(m, feeds, evaluator="ort"):
    if evaluator == "ort":
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(m).run(None, feeds)


def _check(m, feeds_list, native=False, evaluator="ort", exact=False, rtol=1e-5, **kw):  # noqa: PLR0913
    mod = braze.import_onnx(m, **kw)
    cm = braze.compile(mod) if native else None
    for feeds in feeds_list:
        want = _expected(m, feeds, evaluator)
        outs = [reference.run(mod, *feeds.values())] + ([cm(*feeds.values())] if cm else [])
        for got in outs:
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want):
                what = str({k: v.shape for k, v in feeds.items()})
                if exact or w.dtype.kind != "f":
                    np.testing.assert_array_equal(g, w, err_msg=what)
                else:
                    assert_close(g, w, rtol=rtol, atol=2e-6, what=what)
    return mod


# ---------------------------------------------------------------------------
# Resize
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode,coord,nearest,extra", [
    ("nearest", "half_pixel", "round_prefer_floor", {}),
    ("nearest", "asymmetric", "floor", {}),
    ("nearest", "align_corners", "round_prefer_ceil", {}),
    ("nearest", "pytorch_half_pixel", "ceil", {}),
    ("linear", "half_pixel", None, {}),
    ("linear", "align_corners", None, {}),
    ("linear", "pytorch_half_pixel", None, {}),
    ("cubic", "half_pixel", None, {}),
    ("cubic", "asymmetric", None, dict(exclude_outside=1, cubic_coeff_a=-0.5)),
])
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize_vs_ort(mode, coord, nearest, extra, by):
    attrs = dict(mode=mode, coordinate_transformation_mode=coord, **extra)
    if nearest:
        attrs["nearest_mode"] = nearest
    if by == "scales":
        inits = [numpy_helper.from_array(np.array([1, 1, 2.0, 1.5], np.float32), "scales")]
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
        sizes = [(1, 1), (3, 4), (5, 7), (8, 2)]
    else:  # sizes from the input's shape: [n, c, 2h - 1, 5]
        inits = [numpy_helper.from_array(np.array([0, 1], np.int64), "nc"),
                 numpy_helper.from_array(np.array([2], np.int64), "hidx"),
                 numpy_helper.from_array(np.array([2], np.int64), "two"),
                 numpy_helper.from_array(np.array([-1], np.int64), "m1"),
                 numpy_helper.from_array(np.array([5], np.int64), "five")]
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
        pre = [helper.make_node("Shape", ["x"], ["shp"]),
               helper.make_node("Gather", ["shp", "nc"], ["nc_v"]),
               helper.make_node("Gather", ["shp", "hidx"], ["h"]),
               helper.make_node("Mul", ["h", "two"], ["h2"]), helper.make_node("Add", ["h2", "m1"], ["oh"]),
               helper.make_node("Concat", ["nc_v", "oh", "five"], ["sizes"], axis=0)]
        node = pre + [node]
        sizes = [(1, 1), (3, 4), (5, 7), (8, 2)]
    nodes = node if isinstance(node, list) else [node]
    m = _model(nodes, [_vi("x", ["n", 2, "h", "w"])], [_vi("y", ["n", 2, None, None])], inits)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 2, h, w)).astype(np.float32)} for h, w in sizes]
    # align_corners with scales: the spec (and onnx.reference) divide by the float length n * scale - 1,
    # ONNX Runtime by the integer output length - 1
    ev = "reference" if coord == "align_corners" and by == "scales" else "ort"
    mod = _check(m, feeds, native=(mode == "cubic"), exact=(mode == "nearest"), evaluator=ev)
    assert [n.op for n in mod.main.nodes if n.op == "resize"] == ["resize"]


@pytest.mark.parametrize("mode,coord,scales,extra", [
    ("linear", "tf_crop_and_resize", [1, 1, 1.5, 0.8], dict(extrapolation_value=7.0)),
    ("nearest", "tf_crop_and_resize", [1, 1, 2.0, 1.0], {}),
    ("cubic", "tf_crop_and_resize", [1, 1, 0.5, 3.0], {}),
    ("linear", "half_pixel_symmetric", [1, 1, 0.625, 1.75], {}),
    ("cubic", "half_pixel_symmetric", [1, 1, 2.25, 0.4375], {}),
    ("linear", "half_pixel", [1, 1, 0.625, 0.375], dict(antialias=1)),
    ("cubic", "half_pixel", [1, 1, 0.5, 1.5], dict(antialias=1)),
    ("cubic", "asymmetric", [1, 1, 0.25, 0.75], dict(antialias=1, exclude_outside=1)),
])
def test_resize_roi_symmetric_and_antialias_vs_ort(mode, coord, scales, extra):
    """One compile serves every image size. ONNX Runtime computes the coordinates in float32 as braze does;
    onnx.reference in float64, and its cubic taps there jump at a source coordinate 1e-9 below a whole
    number (half_pixel_symmetric, 5 rows to 11: it reads row 1 where row 2 is meant). With scales, ONNX
    Runtime's tf_crop_and_resize differs from the spec's formula, which onnx.reference and braze follow."""
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "scales")]
    ins = ["x", "", "scales"]
    if coord == "tf_crop_and_resize":  # the roi crops some of every axis, and reaches past two
        inits.append(numpy_helper.from_array(np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3], np.float32), "roi"))
        ins[1] = "roi"
    m = _model([helper.make_node("Resize", ins, ["y"], mode=mode, coordinate_transformation_mode=coord, **extra)],
               [_vi("x", ["n", 2, "h", "w"])], [_vi("y", ["n", 2, None, None])], inits)
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((2, 2, h, w)).astype(np.float32)} for h, w in [(1, 1), (5, 7), (12, 9)]]
    _check(m, feeds, native=True, exact=(mode == "nearest"), rtol=1e-4,
           evaluator="reference" if coord == "tf_crop_and_resize" else "ort")


def test_resize_roi_fed_at_run_time_is_refused_by_name():
    m = _model([helper.make_node("Resize", ["x", "roi", "s"], ["y"], coordinate_transformation_mode="tf_crop_and_resize")],
               [_vi("x", [1, 1, 4, 4]), _vi("roi", [8])], [_vi("y", [1, 1, 8, 8])],
               [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    with pytest.raises(braze.UnsupportedOpError, match="its roi"):
        braze.import_onnx(m)


# ---------------------------------------------------------------------------
# TopK, GroupNormalization, Mod
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("axis,largest", [(-1, 1), (1, 0)])
def test_topk_vs_ort(axis, largest):
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    m = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
               [_vi("x", ["b", "s", 4])], [_vi("v", ["b", None, None]), _vi("i", ["b", None, None], I64)], [k])
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((b, s, 4)).astype(np.float32)} for b, s in [(1, 4), (2, 7), (3, 33)]]
    _check(m, feeds, native=True, exact=True, dim_ranges={"s": (4, 1024)})


def test_group_normalization():
    c, g, opset = 6, 3, 21
    n_par = c
    inits = [numpy_helper.from_array(np.linspace(0.5, 2, n_par).astype(np.float32), "scale"),
             numpy_helper.from_array(np.linspace(-1, 1, n_par).astype(np.float32), "bias")]
    m = _model([helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=g, epsilon=1e-4)],
               [_vi("x", ["b", c, "t"])], [_vi("y", ["b", c, "t"])], inits, opset=opset)
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((b, c, t)).astype(np.float32) * 2} for b, t in [(1, 1), (2, 5), (3, 17)]]
    _check(m, feeds, native=True, evaluator="reference")


def test_mod_fmod_vs_ort():
    m = _model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1), helper.make_node("Mod", ["i", "j"], ["z"], fmod=1)],
               [_vi("a", ["n"]), _vi("b", ["n"]), _vi("i", ["n"], I64), _vi("j", ["n"], I64)],
               [_vi("y", ["n"]), _vi("z", ["n"], I64)])
    rng = np.random.default_rng(3)
    feeds = []
    for n in (1, 7, 64):
        b = rng.uniform(-3, 3, n).astype(np.float32)
        j = rng.integers(-4, 4, n)
        feeds.append({"a": rng.uniform(-9, 9, n).astype(np.float32), "b": np.where(b == 0, 1, b).astype(np.float32),
                      "i": rng.integers(-9, 9, n), "j": np.where(j == 0, 3, j)})
    feeds[0]["a"][0], feeds[0]["b"][0] = -1e-10, 1.0
    _check(m, feeds, native=True, exact=True)


def test_an_integer_division_by_zero_fails_the_call():
    """ONNX leaves an integer Div or Mod by 0 undefined; braze fails the call, as torch and TF raise
    (a C kernel would give 0, a silent answer)."""
    from braze.errors import InputError
    m = _model([helper.make_node("Div", ["i", "j"], ["q"]), helper.make_node("Mod", ["i", "j"], ["r"])],
               [_vi("i", ["n"], I64), _vi("j", ["n"], I64)], [_vi("q", ["n"], I64), _vi("r", ["n"], I64)])
    cm = braze.compile(m)
    i = np.array([7, -7, 9], np.int64)
    q, r = cm(i, np.array([2, 2, -4], np.int64))
    np.testing.assert_array_equal(q, [3, -3, -2])
    np.testing.assert_array_equal(r, [1, 1, -3])
    with pytest.raises(InputError, match=r"integer division by zero in (div|remainder)"):
        cm(i, np.array([2, 0, -4], np.int64))


# ---------------------------------------------------------------------------
# tf2onnx's Keras Dense on a 3-D input
# ---------------------------------------------------------------------------


def _keras_dense_model(opset):
    """x [batch, seq, 16] -> Reshape([prod(batch, seq), 16]) -> MatMul -> Reshape([batch, seq, 8]),
    the targets computed as tf2onnx does: Shape -> Gather -> ReduceProd -> Concat."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "lead"),
             numpy_helper.from_array(np.array([16], np.int64), "d_in"),
             numpy_helper.from_array(np.array([8], np.int64), "d_out")]
    if opset >= 18:  # ReduceProd takes its axes as an input from opset 18
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax0"))
        rp = helper.make_node("ReduceProd", ["lead_dims", "ax0"], ["rows"], keepdims=1)
    else:
        rp = helper.make_node("ReduceProd", ["lead_dims"], ["rows"], keepdims=1)
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Gather", ["shp", "lead"], ["lead_dims"], axis=0),
             rp,
             helper.make_node("Concat", ["rows", "d_in"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "w"], ["h"]),
             helper.make_node("Concat", ["lead_dims", "d_out"], ["out_shape"], axis=0),
             helper.make_node("Reshape", ["h", "out_shape"], ["y"])]
    return _model(nodes, [_vi("x", ["batch", "seq", 16])], [_vi("y", ["batch", "seq", 8])], inits, opset=opset)


@pytest.mark.parametrize("opset", [13, 18])
def test_keras_dense_reduceprod_reshape_is_folded_symbolically(opset):
    m = _keras_dense_model(opset)
    mod = braze.import_onnx(m)
    reshapes = [n for n in mod.main.nodes if n.op == "reshape"]
    assert [str(r.attrs["shape"][0]) for r in reshapes][:1] == ["batch*seq"], str(mod)
    assert not any(n.op == "reduce_prod" for n in mod.main.nodes)
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.standard_normal((b, s, 16)).astype(np.float32)} for b, s in [(1, 1), (2, 7), (3, 12)]]
    before = braze.stats()["native_compiles"] + braze.stats()["cache_hits"]
    _check(m, feeds, native=True)
    assert braze.stats()["native_compiles"] + braze.stats()["cache_hits"] == before + 1


def test_reduce_folds_known_and_symbolic_shape_values():
    """ReduceSum/Max/Min/Prod over shape values fold too; keepdims=0 and axes both ways."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "ax0")]
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("ReduceSum", ["shp", "ax0"], ["s"], keepdims=0),
             helper.make_node("ReduceMax", ["shp"], ["mx"], keepdims=1),
             helper.make_node("ReduceMin", ["shp"], ["mn"], keepdims=0),
             helper.make_node("ReduceProd", ["shp"], ["p"], keepdims=1),
             helper.make_node("Reshape", ["x", "p"], ["y"])]
    m = _model(nodes, [_vi("x", ["n", 3, 2])], [_vi("s", [], I64), _vi("mx", [1], I64), _vi("mn", [], I64),
                                               _vi("y", [None])], inits)
    feeds = [{"x": np.arange(6 * n, dtype=np.float32).reshape(n, 3, 2)} for n in (1, 2, 5)]
    mod = _check(m, feeds)
    assert not any(n.op.startswith("reduce") for n in mod.main.nodes)
