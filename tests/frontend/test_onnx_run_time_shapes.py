"""Shape operands fed as ONNX graph inputs: their values become symbols the entry reads at run time
(Importer.value_symbols), so one compile serves every value, and a value the converter cannot take as a
plain size is an InputError naming it."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx_models import onnx_model as _model  # noqa: E402

import braze  # noqa: E402
from braze.errors import InputError, UnsupportedOpError  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64




def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


@pytest.fixture
def reshape_model():
    return _model([helper.make_node("Reshape", ["x", "shape"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                  [_vi("x", F, ["n"]), _vi("shape", I64, [2])], [_vi("z", F, [None, None])])


def test_a_reshape_target_fed_at_run_time_is_one_compile_for_every_value(reshape_model):
    mod = braze.import_onnx(reshape_model)
    assert "values {" in str(mod) and "shape_0" in mod.symbols
    m = braze.compile(mod)
    compiles = braze.stats()["native_compiles"]
    for n, shape in ((12, (3, 4)), (12, (12, 1)), (35, (5, 7)), (1, (1, 1))):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        s = np.array(shape, np.int64)
        want = np.maximum(x.reshape(shape), 0)
        np.testing.assert_array_equal(m(x, s), want)
        np.testing.assert_array_equal(braze.reference.run(mod, x, s), want)
    assert braze.stats()["native_compiles"] == compiles


def test_a_value_that_is_not_a_plain_size_is_an_input_error(reshape_model):
    m = braze.compile(braze.import_onnx(reshape_model))
    x = np.zeros(12, np.float32)
    with pytest.raises(InputError, match=r"shape_1 = -1 is outside its range \[1, inf\]"):
        m(x, np.array([3, -1], np.int64))
    with pytest.raises(InputError, match="must hold"):
        m(x, np.array([5, 2], np.int64))  # 10 elements from 12
    np.testing.assert_array_equal(m(x, np.array([6, 2], np.int64)), np.zeros((6, 2), np.float32))


def test_dim_ranges_bound_a_value_symbol(reshape_model):
    m = braze.compile(braze.import_onnx(reshape_model, dim_ranges={"shape_0": (1, 4)}))
    with pytest.raises(InputError, match=r"shape_0 = 6 is outside its range \[1, 4\]"):
        m(np.zeros(12, np.float32), np.array([6, 2], np.int64))


@pytest.mark.parametrize("op", ["tril", "triu"])
def test_trilu_k_fed_at_run_time(op):
    m = _model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=int(op == "triu"))],
               [_vi("x", F, ["r", 5]), _vi("k", I64, [])], [_vi("y", F, [None, None])])
    cm = braze.compile(braze.import_onnx(m))
    x = np.arange(4 * 5, dtype=np.float32).reshape(4, 5) + 1
    for k in (-7, -1, 0, 2, 9):
        np.testing.assert_array_equal(cm(x, np.array(k, np.int64)), getattr(np, op)(x, k))


def test_constant_of_shape_tile_split_and_pad_fed_at_run_time():
    m = _model([helper.make_node("ConstantOfShape", ["cs"], ["c"], value=helper.make_tensor("v", F, [1], [2.5])),
                helper.make_node("Tile", ["x", "reps"], ["t"]),
                helper.make_node("Split", ["x", "sizes"], ["s0", "s1"], axis=1),
                helper.make_node("Pad", ["x", "pads"], ["p"], mode="edge")],
               [_vi("x", F, [2, 5]), _vi("cs", I64, [2]), _vi("reps", I64, [2]), _vi("sizes", I64, [2]),
                _vi("pads", I64, [4])],
               [_vi(n, F, [None, None]) for n in ("c", "t", "s0", "s1", "p")])
    mod = braze.import_onnx(m)
    cm = braze.compile(mod)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    for cs, reps, sizes, pads in (((3, 2), (1, 2), (1, 4), (0, 1, 2, 0)), ((1, 7), (3, 1), (5, 0), (1, 0, 0, 3))):
        got = cm(x, *(np.array(v, np.int64) for v in (cs, reps, sizes, pads)))
        want = (np.full(cs, 2.5, np.float32), np.tile(x, reps), x[:, :sizes[0]], x[:, sizes[0]:],
                np.pad(x, ((pads[0], pads[2]), (pads[1], pads[3])), mode="edge"))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(InputError, match="pads_1 = -1 is outside its range"):  # no cropping at run time
        cm(x, *(np.array(v, np.int64) for v in ((1, 1), (1, 1), (2, 3), (0, -1, 0, 0))))


def test_a_run_time_value_that_decides_axes_is_still_refused():
    m = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])], [_vi("x", F, [2, 3]), _vi("axes", I64, [1])],
               [_vi("y", F, [None, None])])
    with pytest.raises(UnsupportedOpError, match="axes .* computed from tensor data at run time"):
        braze.import_onnx(m)


def test_the_cuda_target_refuses_sizes_read_from_input_values(reshape_model):
    from braze.codegen.cuda_host import _check_supported

    with pytest.raises(UnsupportedOpError, match="cannot read sizes from input values"):
        _check_supported(braze.import_onnx(reshape_model))


def test_an_input_two_ops_read_holds_to_both_ranges():
    # Pad reads the values as sizes >= 0, Reshape (after) as sizes >= 1 (0 would be a code there): 0 is refused
    m = _model([helper.make_node("Pad", ["x", "v"], ["p"]), helper.make_node("Identity", ["v"], ["v2"]),
                helper.make_node("Reshape", ["y", "v2"], ["r"])],
               [_vi("x", F, [2]), _vi("y", F, [6]), _vi("v", I64, [2])], [_vi("p", F, [None]), _vi("r", F, [None, None])])
    onnx.checker.check_model(m)
    mod = braze.import_onnx(m)
    assert mod.symbols["v_0"].lo == 1 and mod.symbols["v_1"].lo == 1
    cm = braze.compile(mod)
    x, y = np.ones(2, np.float32), np.arange(6, dtype=np.float32)
    got = cm(x, y, np.array([2, 3]))
    np.testing.assert_array_equal(got[0], np.pad(x, (2, 3)))
    np.testing.assert_array_equal(got[1], y.reshape(2, 3))
    with pytest.raises(InputError, match=r"v_0 = 0 is outside its range \[1, inf\]"):
        cm(x, y, np.array([0, 6]))


def test_the_onnx_backend_imports_once_per_value_of_an_axis_deciding_input(monkeypatch):
    # import_onnx refuses the model (above); the onnx.backend API takes it as an interpreter would: one
    # import per distinct value of the inputs that decide axes, found from the import's own errors
    from braze.frontend.onnx import backend

    m = _model([helper.make_node("Unsqueeze", ["x", "uaxes"], ["u"]),
                helper.make_node("ReduceSum", ["u", "raxes"], ["y"], keepdims=0)],
               [_vi("x", F, [2, 3]), _vi("uaxes", I64, [1]), _vi("raxes", I64, [1])], [_vi("y", F, [None, None])])
    imports = []
    real = backend.import_structured
    monkeypatch.setattr(backend, "import_structured", lambda *a, **k: imports.append(1) or real(*a, **k))
    rep = backend.prepare(m)
    assert isinstance(rep, backend.SpecializingRep)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for ua, ra in ((0, 0), (0, 2), (2, 0), (0, 0), (-1, 1)):
        want = np.expand_dims(x, ua).sum(axis=ra)
        got, = rep.run([x, np.array([ua]), np.array([ra])])
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape
    assert rep.bind == ["uaxes", "raxes"]
    n = len(imports)
    got, = rep.run({"x": x + 1, "uaxes": np.array([2]), "raxes": np.array([0])})  # a value seen: no import
    np.testing.assert_array_equal(got, np.expand_dims(x + 1, 2).sum(axis=0))
    assert len(imports) == n
    with pytest.raises(InputError, match="2 inputs given, the model has 3"):
        rep.run([x, np.array([0])])


def test_the_onnx_backend_binds_the_small_inputs_a_computed_operand_may_come_from():
    # the axes are a graph input plus one: import_onnx names the sum; the backend binds every input small
    # enough to be a shape operand (by its declared shape), here a, and leaves x (65 elements) fed
    from braze.frontend.onnx import backend

    m = _model([helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [1], [1])),
                helper.make_node("Add", ["a", "one"], ["ax"]), helper.make_node("ReduceSum", ["x", "ax"], ["y"])],
               [_vi("x", F, [5, 13]), _vi("a", I64, [1])], [_vi("y", F, [None, None])])
    with pytest.raises(UnsupportedOpError, match="computed from tensor data"):
        braze.import_onnx(m)
    rep = backend.prepare(m)
    x = np.arange(65, dtype=np.float32).reshape(5, 13)
    for a in (0, -2):
        np.testing.assert_array_equal(rep.run([x, np.array([a])])[0], x.sum(axis=a + 1, keepdims=True))
    assert rep.bind == ["a"]


def test_the_onnx_backend_keeps_refusing_what_binding_does_not_cure():
    from braze.frontend.onnx import backend

    # the axes are computed from x's data (65 elements: too large to be a shape operand)
    m = _model([helper.make_node("Cast", ["x"], ["a"], to=I64), helper.make_node("Slice", ["a", "s", "e"], ["b"]),
                helper.make_node("ReduceSum", ["x", "b"], ["y"])],
               [_vi("x", F, [65]), _vi("s", I64, [1]), _vi("e", I64, [1])], [_vi("y", F, [None])])
    with pytest.raises(UnsupportedOpError, match="computed from tensor data"):
        backend.prepare(m).run([np.zeros(65, np.float32), np.array([0]), np.array([1])])


def test_the_onnx_backend_takes_a_value_the_compiled_module_refuses(reshape_model):
    # braze.compile refuses Reshape's -1 fed at run time (above); the backend imports the model again
    # with that shape bound, and keeps the one import for every plain value
    from braze.frontend.onnx import backend

    rep = backend.prepare(reshape_model)
    x = np.linspace(-1, 1, 12, dtype=np.float32)
    np.testing.assert_array_equal(rep.run([x, np.array([3, 4])])[0], np.maximum(x.reshape(3, 4), 0))
    assert rep._special is None
    for shape in ((3, -1), (-1, 6), (12, 0 + 1)):
        np.testing.assert_array_equal(rep.run([x, np.array(shape)])[0], np.maximum(x.reshape(shape), 0))
    assert rep._special is not None and rep._special.bind == ["shape"]
