"""The ONNX frontend on hand-built models: symbolic dims, shape chains, errors, run-time input checks."""

from __future__ import annotations

import logging

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_models import onnx_model as _model  # noqa: E402

import braze  # noqa: E402
from braze import reference  # noqa: E402
from braze.errors import InputError, ModelFormatError, UnsupportedOpError  # noqa: E402
from braze.frontend.onnx import supported_ops  # noqa: E402
from braze.testing import assert_close  # noqa: E402

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _out(name, rank, dtype=F):
    return helper.make_tensor_value_info(name, dtype, [None] * rank)




def _ort(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check_vs_ort(m, feeds_list, **kw):
    mod = braze.import_onnx(m, **kw)
    for feeds in feeds_list:
        want = _ort(m, feeds)
        got = reference.run(mod, *feeds.values())
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert_close(g, w, what=str({k: v.shape for k, v in feeds.items()}))
    return mod


def _ops(mod):
    return [n.op for n in mod.main.nodes]


def _rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------
# symbolic dims and a small MLP
# ---------------------------------------------------------------------------


def test_mlp_symbolic_batch():
    r = _rng()
    w1, b1 = r.standard_normal((16, 32)).astype(np.float32), r.standard_normal(32).astype(np.float32)
    w2 = r.standard_normal((32, 5)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["h2"], name="bias1"),
             helper.make_node("Relu", ["h2"], ["h3"], name="act"),
             helper.make_node("Gemm", ["h3", "w2"], ["y"], name="fc2", alpha=0.5)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 16])],
               [helper.make_tensor_value_info("y", F, ["batch", 5])],
               [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                numpy_helper.from_array(w2, "w2")])
    mod = _check_vs_ort(m, [{"x": r.standard_normal((b, 16)).astype(np.float32)} for b in (1, 3, 8)],
                        dim_ranges={"batch": (1, 64)})
    assert "batch" in mod.symbols and (mod.symbols["batch"].lo, mod.symbols["batch"].hi) == (1, 64)
    assert str(mod.main.params[0].type) == "f32[batch, 16]"
    assert set(mod.constants) >= {"w1", "b1", "w2"}  # initializers keep their names
    locs = {n.loc.name for n in mod.main.nodes if n.op != "constant"}
    assert {"fc1", "bias1", "act", "fc2"} <= locs


def test_unnamed_dim_gets_fresh_symbol_and_names_are_sanitized():
    m = _model([helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", F, ["batch size", None, 3])],
               [_out("y", 3)])
    mod = braze.import_onnx(m)
    d0, d1, d2 = mod.main.params[0].shape
    assert str(d0) == "batch_size" and str(d1) == "x_dim1" and d2 == 3
    x = _rng().standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_array_equal(reference.run(mod, x), np.maximum(x, 0))


# ---------------------------------------------------------------------------
# Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains stay symbolic
# ---------------------------------------------------------------------------


def _split_heads_model(opset):
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(  # noqa: E731
        np.array(v, np.int64), name))
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        c("i0", 0), c("i1", 1), c("heads", [4]), c("hd", [-1]), c("ax0", [0]),
        helper.make_node("Gather", ["shp", "i0"], ["b"]),
        helper.make_node("Gather", ["shp", "i1"], ["s"]),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads", "hd"], ["tgt"], axis=0),
        helper.make_node("Reshape", ["x", "tgt"], ["xr"], name="split_heads"),
        helper.make_node("Transpose", ["xr"], ["xt"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["xt"], ["p"], axis=-1),
        # back: [b, s, 4*hd] computed as Mul of gathered dims
        helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 2, 1, 3]),
        c("zero", [0]), c("m1", [-1]),
        helper.make_node("Concat", ["zero", "zero", "m1"], ["tgt2"], axis=0),
        helper.make_node("Reshape", ["pt", "tgt2"], ["y"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", 24])],
                  [helper.make_tensor_value_info("y", F, ["batch", "seq", 24])], opset=opset)


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_shape_chain_reshape(opset):
    m = _split_heads_model(opset)
    r = _rng(1)
    mod = _check_vs_ort(m, [{"x": r.standard_normal((b, s, 24)).astype(np.float32)}
                            for b, s in ((1, 1), (2, 7), (3, 5))])
    ops = _ops(mod)
    assert "gather" not in ops and "concat" not in ops, ops  # folded at import time
    rs = [n for n in mod.main.nodes if n.op == "reshape"]
    assert [str(d) for d in rs[0].attrs["shape"]] == ["batch", "seq", "4", "6"]
    assert [str(d) for d in mod.main.results[0].shape] == ["batch", "seq", "24"]


def test_slice_range_expand_constantofshape_from_shapes():
    # y = x[:, 1:seq] + arange(seq-1) ; z = ConstantOfShape(shape(x)) ; w = Expand(bias, shape(x))
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(  # noqa: E731
        np.array(v, np.int64), name))
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Shape", ["x"], ["seq1"], start=1, end=2),
        c("one", [1]), c("axis1", [1]), c("zero_s", 0), c("one_s", 1),
        helper.make_node("Slice", ["x", "one", "seq1", "axis1"], ["xs"]),
        helper.make_node("Squeeze", ["seq1"], ["seq"]),
        helper.make_node("Sub", ["seq", "one_s"], ["n"]),
        helper.make_node("Range", ["zero_s", "n", "one_s"], ["ar"]),
        helper.make_node("Cast", ["ar"], ["arf"], to=F),
        helper.make_node("Add", ["xs", "arf"], ["y"]),
        helper.make_node("ConstantOfShape", ["shp"], ["z"],
                         value=numpy_helper.from_array(np.array([2.5], np.float32))),
        helper.make_node("Expand", ["bias", "shp"], ["w"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq"]),
                       helper.make_tensor_value_info("bias", F, [1, "seq"])],
               [_out("y", 2), _out("z", 2), _out("w", 2)])
    r = _rng(2)
    feeds = [{"x": r.standard_normal((b, s)).astype(np.float32), "bias": r.standard_normal((1, s)).astype(np.float32)}
             for b, s in ((1, 1), (3, 4), (2, 9))]
    mod = _check_vs_ort(m, feeds)
    ar = [n for n in mod.main.nodes if n.op == "arange"][0]
    assert str(ar.attrs["end"]) == "seq - 1"


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_and_split_forms(opset):
    if opset < 18:
        red = helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1)
        split = helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1)
        extra = [helper.make_node("Constant", [], ["sizes"], value=numpy_helper.from_array(
            np.array([1, 2], np.int64), "sizes"))]
    else:
        red = helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1)
        split = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
        extra = [helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(
            np.array([-1], np.int64), "axes"))]
    nodes = extra + [red, helper.make_node("Sub", ["x", "m"], ["c"]), split,
                     helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 3, "w"])],
               [_out("c", 3), _out("a", 3), _out("b", 3), _out("s", 0)], opset=opset)
    r = _rng(3)
    _check_vs_ort(m, [{"x": r.standard_normal((b, 3, w)).astype(np.float32)} for b, w in ((1, 1), (2, 5), (4, 3))])


def test_conv_pool_same_padding_symbolic():
    r = _rng(4)
    w = r.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2], name="conv"),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 3, "height", "width"])],
               [_out("y", 4)], [numpy_helper.from_array(w, "w")])
    _check_vs_ort(m, [{"x": r.standard_normal((b, 3, h, wd)).astype(np.float32)}
                      for b, h, wd in ((1, 5, 5), (2, 8, 7), (1, 1, 3))])


def test_layernorm_gelu_where_and_cast():
    r = _rng(5)
    g, b = r.standard_normal(8).astype(np.float32), r.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("Gelu", ["ln"], ["ge"]),
             helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
             helper.make_node("Where", ["mb", "ge", "fill"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", 8]),
                       helper.make_tensor_value_info("mask", I64, ["batch", "seq", 1])],
               [_out("y", 3)],
               [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b"),
                numpy_helper.from_array(np.array(-1e4, np.float32), "fill")], opset=20)
    feeds = [{"x": r.standard_normal((bb, s, 8)).astype(np.float32),
              "mask": r.integers(0, 2, (bb, s, 1)).astype(np.int64)} for bb, s in ((1, 1), (2, 3), (3, 7))]
    _check_vs_ort(m, feeds)


# ---------------------------------------------------------------------------
# malformed models
# ---------------------------------------------------------------------------


def test_garbage_file(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x00\xffthis is not a protobuf at all\x13\x37" * 3)
    with pytest.raises(ModelFormatError) as e:
        braze.import_onnx(str(p))
    assert "bad.onnx" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ModelFormatError, match="cannot read"):
        braze.import_onnx(str(tmp_path / "nope.onnx"))


def test_empty_bytes_and_wrong_type():
    with pytest.raises(ModelFormatError, match="empty"):
        braze.import_onnx(b"")
    with pytest.raises(ModelFormatError, match="path, bytes or onnx.ModelProto"):
        braze.import_onnx(42)


def test_checker_failure():
    g = helper.make_graph([helper.make_node("Relu", ["nope"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ModelFormatError, match="invalid"):
        braze.import_onnx(m.SerializeToString())


def test_missing_input_shape(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, None)], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    p = tmp_path / "m.onnx"
    onnx.save(m, str(p))
    with pytest.raises(ModelFormatError, match="shape") as e:
        braze.import_onnx(p)
    assert "m.onnx" in str(e.value) and "hint" in str(e.value)


def test_a_model_of_another_domain_only_names_it():
    g = helper.make_graph([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml")], "g",
                          [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    with pytest.raises(UnsupportedOpError, match="domain ai.onnx.ml, which braze does not support"):
        braze.import_onnx(m)


def test_a_ragged_list_for_a_tensor_input_is_an_input_error_not_a_value_error():
    from braze.frontend.onnx.backend import prepare

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", F, ["n"])],
                          [helper.make_tensor_value_info("y", F, ["n"])])
    rep = prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    with pytest.raises(InputError, match="input 'x' is a tensor, given a list of 2 arrays"):
        rep.run([[np.zeros(2), np.zeros(3)]])  # ragged: numpy itself would raise ValueError


def test_old_opset_is_converted(caplog):
    # opset 11's Clip takes min/max as inputs, opset 6's as attributes: both reach braze as opset 13
    for opset, node in ((11, helper.make_node("Relu", ["x"], ["y"])),
                        (6, helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25))):
        m = _model([node], [helper.make_tensor_value_info("x", F, ["n"])],
                   [helper.make_tensor_value_info("y", F, ["n"])], opset=opset)
        with caplog.at_level(logging.INFO, logger="braze.frontend"):
            mod = braze.import_onnx(m)
        assert f"converted from ONNX opset {opset} to 13" in caplog.text
        x = np.array([-1.0, -0.25, 0.1, 0.5, 2.0], np.float32)
        want = np.maximum(x, 0) if opset == 11 else np.clip(x, -0.5, 0.25)
        np.testing.assert_array_equal(braze.compile(mod)(x), want)


def test_old_opset_that_does_not_convert(monkeypatch):
    # every valid model tried converts (the checker stops invalid ones first), so make the converter fail as its
    # C++ assertions do; the error keeps what failed and drops the assertion's source location
    from onnx import version_converter

    def fail(model, version):
        raise RuntimeError("/project/onnx/common/ir.h:283: find: Assertion `!required` failed: required undefined "
                           "attribute 'scales'")

    monkeypatch.setattr(version_converter, "convert_version", fail)
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [2])],
               [helper.make_tensor_value_info("y", F, [2])], opset=7)
    with pytest.raises(UnsupportedOpError, match="opset 7.*could not bring it to opset 13: required undefined "
                                                 "attribute 'scales'") as e:
        braze.import_onnx(m)
    assert "Assertion" not in str(e.value) and "re-export" in str(e.value)


# ---------------------------------------------------------------------------
# unsupported ops
# ---------------------------------------------------------------------------


def test_unsupported_op_names_op_node_and_opset(tmp_path):
    m = _model([helper.make_node("MaxRoiPool", ["x", "r"], ["y"], name="my_roi_pool", pooled_shape=[1, 1])],
               [helper.make_tensor_value_info("x", F, ["n", 2, 5, 5]), helper.make_tensor_value_info("r", F, ["k", 4]),
                helper.make_tensor_value_info("b", I64, ["k"])], [_out("y", 4, F)])
    p = tmp_path / "nz.onnx"
    onnx.save(m, str(p))
    with pytest.raises(UnsupportedOpError) as e:
        braze.import_onnx(str(p))
    msg = str(e.value)
    assert "MaxRoiPool" in msg and "my_roi_pool" in msg and "opset 18" in msg and "nz.onnx" in msg
    assert "`braze ops`" in msg and "docs/" not in msg


def test_unsupported_attribute_value():
    m = _model([helper.make_node("LpNormalization", ["x"], ["y"], name="am", p=3)],
               [helper.make_tensor_value_info("x", F, [2, 3])], [_out("y", 2)])
    with pytest.raises(UnsupportedOpError, match="p=3") as e:
        braze.import_onnx(m)
    assert "am" in str(e.value)


def test_data_dependent_reshape_is_unsupported():
    # a target computed from data (a fed target of static length is read at run time:
    # test_onnx_run_time_shapes.py), or one whose length, the result's rank, is only known at run time
    m = _model([helper.make_node("Abs", ["s"], ["a"]), helper.make_node("Reshape", ["x", "a"], ["y"], name="rs")],
               [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("s", I64, [2])],
               [_out("y", 2)])
    with pytest.raises(UnsupportedOpError, match="known at import time"):
        braze.import_onnx(m)
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
               [helper.make_tensor_value_info("x", F, [6]), helper.make_tensor_value_info("s", I64, ["k"])],
               [_out("y", 2)])
    with pytest.raises(UnsupportedOpError, match="known at import time"):
        braze.import_onnx(m)


def test_supported_ops_list():
    import re
    from pathlib import Path

    ops = supported_ops()
    for op in ("Add", "MatMul", "Gemm", "Conv", "Reshape", "Slice", "LayerNormalization", "Softmax", "Einsum"):
        assert op in ops
    assert ops == sorted(ops)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "onnx-conformance.md").read_text()
    listed = doc.split(f"## Supported ONNX ops ({len(ops)})")[1].split("\n\n")[2]  # the heading says how many
    assert re.findall(r"`([\w.:]+)`", listed) == ops


# ---------------------------------------------------------------------------
# run-time input checks
# ---------------------------------------------------------------------------


def _two_input_model():
    return _model([helper.make_node("Add", ["a", "b"], ["y"])],
                  [helper.make_tensor_value_info("a", F, ["batch", "seq"]),
                   helper.make_tensor_value_info("b", F, ["batch", "seq"])],
                  [_out("y", 2)])


def test_input_wrong_rank():
    mod = braze.import_onnx(_two_input_model())
    with pytest.raises(InputError, match="rank"):
        reference.run(mod, np.zeros((2, 3, 1), np.float32), np.zeros((2, 3), np.float32))


def test_input_out_of_range():
    mod = braze.import_onnx(_two_input_model(), dim_ranges={"batch": (1, 4)})
    with pytest.raises(InputError, match="batch"):
        reference.run(mod, np.zeros((5, 3), np.float32), np.zeros((5, 3), np.float32))
    reference.run(mod, np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32))


def test_input_shared_dim_param_mismatch():
    mod = braze.import_onnx(_two_input_model())
    with pytest.raises(InputError, match="seq"):
        reference.run(mod, np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32))


def test_dim_ranges_unknown_name():
    with pytest.raises(ModelFormatError, match="nope"):
        braze.import_onnx(_two_input_model(), dim_ranges={"nope": (1, 2)})


# ---------------------------------------------------------------------------
# 0-d and 0-sized tensors, in the reference and natively
# ---------------------------------------------------------------------------


def test_0d_and_empty_tensors_natively(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    c = numpy_helper.from_array
    nodes = [helper.make_node("ReduceSum", ["s"], ["s_sum"], keepdims=0),  # a reduction of a 0-d input
             helper.make_node("ReduceMax", ["s"], ["s_max"], keepdims=0),
             helper.make_node("Mul", ["c16", "c3"], ["t"]), helper.make_node("Sqrt", ["t"], ["r"]),
             helper.make_node("Div", ["x", "r"], ["y"]),  # a 0-d constant expression, folded
             helper.make_node("Add", ["s", "r"], ["s_r"]),
             helper.make_node("ReduceMax", ["e", "ax0"], ["e_max"], keepdims=0),  # over no elements
             helper.make_node("ReduceSum", ["e", "ax0"], ["e_sum"], keepdims=0),
             helper.make_node("Relu", ["e"], ["e_relu"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["n"]), helper.make_tensor_value_info("s", F, []),
                       helper.make_tensor_value_info("e", F, [0, 3])],
               [helper.make_tensor_value_info(v, F, shape) for v, shape in (
                   ("s_sum", []), ("s_max", []), ("y", ["n"]), ("s_r", []), ("e_max", [3]), ("e_sum", [3]),
                   ("e_relu", [0, 3]))],
               [c(np.array(16.0, np.float32), "c16"), c(np.array(3.0, np.float32), "c3"),
                c(np.array([0], np.int64), "ax0")])
    mod = braze.import_onnx(m)
    native = braze.compile(m)
    for n in (1, 6):
        feeds = {"x": _rng(n).standard_normal(n).astype(np.float32), "s": np.array(-2.5, np.float32),
                 "e": np.zeros((0, 3), np.float32)}
        want = _ort(m, feeds)
        for kind, got in (("reference", reference.run(mod, *feeds.values())), ("native", native(*feeds.values()))):
            for i, (g, w) in enumerate(zip(got, want)):
                assert g.shape == w.shape, (kind, i, g.shape, w.shape)
                assert_close(g, w, what=f"{kind} output {i}")


def test_pow_by_a_constant_follows_onnxruntime(tmp_path, monkeypatch):
    """ONNX's Pow is IEEE pow: by 0.5 it gives +inf at -inf and +0 at -0, which a plain sqrt does
    not (braze's converter once made it one), in the reference and natively, at 1, 5 (a 4-lane
    loop, where GCC once turned powf(x, 0.5f) into a square root) and 37 elements."""
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    exps = [0.5, -0.5, 1.5, 2.0, 3.0]
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, -2.5, 4.0, 1e-30, 3e38], np.float32)
    m = _model([helper.make_node("Pow", ["x", f"e{i}"], [f"y{i}"]) for i in range(len(exps))],
               [helper.make_tensor_value_info("x", F, ["n"])],
               [helper.make_tensor_value_info(f"y{i}", F, ["n"]) for i in range(len(exps))],
               [numpy_helper.from_array(np.array(e, np.float32), f"e{i}") for i, e in enumerate(exps)])
    want = _ort(m, {"x": x})
    ref = reference.run(braze.import_onnx(m), x)
    native = braze.compile(m)
    for n in (1, 5, 37):
        for e, r, got, w in zip(exps, ref, native(np.repeat(x, n)), want):
            for kind, a, b in (("reference", r, w), ("native", got, np.repeat(w, n))):
                assert_close(a, b, rtol=2e-6, atol=0, what=f"Pow {e} {kind} at {n}")
                zero = (a == 0) & (b == 0)
                np.testing.assert_array_equal(np.signbit(a[zero]), np.signbit(b[zero]), err_msg=f"Pow {e} {kind}")


def test_unary_special_values_follow_onnxruntime(tmp_path, monkeypatch):
    """ONNX semantics at +-inf, NaN, +-0, denormals and the largest values, in the reference
    and natively, against onnxruntime; except where onnxruntime is wrong (docs/semantics.md:
    HardSwish and Gelu at -inf give NaN there, the limit is -0). ONNX's Sign(NaN) is NaN."""
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    ops = ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Softplus", "Elu", "HardSwish", "HardSigmoid",
           "LeakyRelu", "Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Gelu", "Sin", "Cos"]
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, -2.5, 3.0, 3.4e38, -3.4e38, 1.1754944e-38, 1e-40,
                  -1e-40, 20, -20, -104.5], np.float32)
    nodes = [helper.make_node(op, ["x"], [op]) for op in ops]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["n"])],
               [helper.make_tensor_value_info(op, F, ["n"]) for op in ops], opset=20)
    want = _ort(m, {"x": x})
    ref = reference.run(braze.import_onnx(m), x)
    native = braze.compile(m)
    for n in (1, 37):  # the scalar path, and the vector path with a remainder
        xs = np.repeat(x, n)
        for op, r, g, w in zip(ops, ref, native(xs), want):
            w = w.copy()
            if op in ("HardSwish", "Gelu"):
                assert np.isnan(w[x == -np.inf]).all()
                w[x == -np.inf] = -0.0
            for kind, got, exp in (("reference", r, w), ("native", g, np.repeat(w, n))):
                assert_close(got, exp, rtol=2e-6, atol=1e-6, what=f"{op} {kind}")
                zero = (got == 0) & (exp == 0)
                np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(exp[zero]), err_msg=f"{op} {kind}")
