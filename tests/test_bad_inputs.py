"""Bad input gets a clear BrazeError naming the problem, or works (DESIGN invariant 9, issue 10):
models without their weights, malformed ONNX and IR, wrong inputs at call time, a corrupted
cache entry, concurrent compiles. All through the public entry points, as a user meets them.

What other files already cover is not repeated here: ONNX garbage/empty/missing files, old
opsets and unsupported ops (tests/frontend/test_onnx_frontend.py), IR parse and verify errors
(tests/ir), wrong rank/dtype/dim/range at call time (tests/test_compile.py), the native checks'
wording (tests/codegen/test_host_checks.py), truncated/garbage lib.so and a missing meta.json
(tests/runtime/test_compiler.py), two processes compiling one model (tests/test_compile.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import braze
from braze.errors import BrazeError, InputError, ModelFormatError, VerifyError
from braze.ops import Builder, tensor
from braze.options import Options
from braze.testing import run_threads


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))


def _mlp():
    """batch x 32 -> 64 -> 8 with three weights above the inline limit (printed as hashes)."""
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("batch", 1, 64)
    x = b.param("x", tensor("f32", n, 32))
    w1 = b.constant(rng.standard_normal((64, 32)).astype(np.float32), "fc1.weight")
    b1 = b.constant(rng.standard_normal(64).astype(np.float32), "fc1.bias")
    w2 = b.constant(rng.standard_normal((8, 64)).astype(np.float32), "fc2.weight")
    b2 = b.constant(np.float32([0.5, -0.5]), "tiny")  # inline in the text: its data comes along
    h = b.relu(b.linear(x, w1, b1))
    b.ret(b.add(b.linear(h, w2), b.op("tile", [b2], repeats=(4,))))
    return b.module


# ---------------------------------------------------------------------------------------------
# missing weights (issue 10, item 2): a clear error at compile time, never garbage or a crash
# ---------------------------------------------------------------------------------------------


def test_ir_text_without_its_constants_is_refused_at_compile_time():
    mod = _mlp()
    text = str(mod)
    assert "dense<sha256:" in text  # the big weights are elided
    placeholders = braze.ir.parse(text)
    with pytest.raises(ModelFormatError) as e:
        braze.compile(placeholders)
    msg = str(e.value)
    assert "3 constants" in msg
    for name in ("@fc1.weight (f32[64, 32])", "@fc1.bias (f32[64])", "@fc2.weight (f32[8, 64])"):
        assert name in msg
    assert "@tiny" not in msg  # inline constants have their data
    assert "constants=" in msg and "onnx.load" in msg
    # the reference interpreter refuses too, naming all of them
    x = np.ones((2, 32), np.float32)
    with pytest.raises(ModelFormatError, match="3 constants"):
        braze.reference.run(placeholders, x)
    # given the weights, the same text compiles and runs
    full = braze.ir.parse(text, constants=mod.constants)
    np.testing.assert_allclose(braze.compile(full)(x), braze.reference.run(mod, x), rtol=1e-5, atol=1e-4)


def _onnx_with_external_data(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.data", size_threshold=0)
    assert (tmp_path / "model.data").exists()
    return onnx, path, w, bias


def test_onnx_model_whose_external_data_was_not_loaded(tmp_path, monkeypatch):
    onnx, path, w, bias = _onnx_with_external_data(tmp_path)
    unloaded = onnx.load(str(path), load_external_data=False)
    # from the data's own directory too: the weights must not load by accident of the cwd
    monkeypatch.chdir(tmp_path)
    for model in (unloaded, unloaded.SerializeToString()):
        with pytest.raises(ModelFormatError) as e:
            braze.compile(model)
        msg = str(e.value)
        assert "2 initializers without data: W, B" in msg and "model.data" in msg
        assert "onnx.load(path)" in msg
    # the path with the data file next to it works; so does the model loaded with its data
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    want = x @ w.T + bias
    for model in (str(path), onnx.load(str(path))):
        np.testing.assert_allclose(braze.compile(model)(x), want, rtol=1e-5, atol=1e-5)
    # the .onnx file without its data file: the same error, naming the file it looked for
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.onnx").write_bytes(path.read_bytes())
    with pytest.raises(ModelFormatError, match="2 initializers without data: W, B") as e:
        braze.compile(str(lone / "model.onnx"))
    assert "model.data" in str(e.value)


# ---------------------------------------------------------------------------------------------
# malformed models
# ---------------------------------------------------------------------------------------------


def _onnx_model(nodes, outputs=("y",), opset=17):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["n", 4]) for o in outputs])
    return onnx, helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _node(op, ins, outs, **kw):
    from onnx import helper
    return helper.make_node(op, ins, outs, name=f"{op}_{outs[0]}", **kw)


@pytest.mark.parametrize("case,words", [
    ("truncated bytes", ["not an ONNX model", "truncated"]),
    ("truncated file", ["not an ONNX model", "model.onnx"]),
    ("missing input", ["invalid", "'nope'", "Add_y"]),
    ("cycle", ["invalid", "'b'", "Relu_a"]),
    ("output not produced", ["invalid", "'y'"]),
    ("axis out of range", ["softmax", "axis 5", "Softmax_y"]),
])
def test_malformed_onnx_models(tmp_path, case, words):
    pytest.importorskip("onnx")
    good = _onnx_model([_node("Relu", ["x"], ["y"])])[1].SerializeToString()
    model = {
        "truncated bytes": lambda: good[:len(good) // 2],
        "missing input": lambda: _onnx_model([_node("Add", ["x", "nope"], ["y"])])[1],
        "cycle": lambda: _onnx_model([_node("Relu", ["b"], ["a"]), _node("Relu", ["a"], ["b"]),
                                      _node("Add", ["x", "a"], ["y"])])[1],
        "output not produced": lambda: _onnx_model([_node("Relu", ["x"], ["z"])])[1],
        "axis out of range": lambda: _onnx_model([_node("Softmax", ["x"], ["y"], axis=5)])[1],
    }.get(case)
    if case == "truncated file":
        p = tmp_path / "model.onnx"
        p.write_bytes(good[:len(good) // 2])
        model = str(p)
    else:
        model = model()
    with pytest.raises(BrazeError) as e:
        braze.compile(model)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_ir_that_does_not_verify_is_refused_before_it_runs():
    # relu declared to change the shape: natively this read past the input (garbage out)
    text = textwrap.dedent("""
        module {
          symbols {
            n in [1, 8]
          }
          func @main(%x: f32[n, 4]) -> (f32[n, 5]) {
            %0 = relu(%x) : f32[n, 5]
            return %0
          }
        }""")
    with pytest.raises(VerifyError, match="'relu' gives f32"):
        braze.compile(braze.ir.parse(text))


# ---------------------------------------------------------------------------------------------
# wrong inputs at call time (beyond rank/dtype/dim/range: tests/test_compile.py)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    b = Builder()
    n = b.sym("n", 1, 16)
    x = b.param("x", tensor("f32", n, 4))
    y = b.param("y", tensor("f32", n, 4))
    b.ret(b.add(x, y))
    return braze.compile(b.module, options=Options(cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.mark.parametrize("args,words", [
    (lambda: (np.ones((2, 4), np.float32),), ["takes 2 inputs", "got 1"]),
    (lambda: (np.ones((2, 4), np.float32),) * 3, ["takes 2 inputs", "got 3"]),
    (lambda: ("not an array", np.ones((2, 4), np.float32)), ["input 0 (%x): dtype <U12 is not supported"]),
    (lambda: (np.ones((2, 4), np.float32), np.array(["ab", "c"])), ["input 1 (%y): dtype <U2"]),
    (lambda: (np.ones((0, 4), np.float32), np.ones((0, 4), np.float32)), ["n = 0", "range [1, 16]"]),
    (lambda: (np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)), ["already bound to 2"]),
])
def test_wrong_calls_name_the_problem_and_the_model_keeps_working(two_inputs, args, words):
    with pytest.raises(InputError) as e:
        two_inputs(*args())
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(two_inputs(x, x), 2 * x)


# ---------------------------------------------------------------------------------------------
# a corrupted cache entry, concurrent compiles
# ---------------------------------------------------------------------------------------------

_COMPILE_AND_CHECK = textwrap.dedent("""
    import sys, numpy as np, braze
    from braze.ops import Builder, tensor
    b = Builder()
    n = b.sym("n", 1, 64)
    x = b.param("x", tensor("f32", n, 33))
    b.ret(b.tanh(b.mul(x, x)))
    m = braze.compile(b.module)
    x = np.linspace(-2, 2, 5 * 33, dtype=np.float32).reshape(5, 33)
    assert np.allclose(m(x), np.tanh(x * x), rtol=1e-5, atol=1e-6)
    print(braze.stats()["native_compiles"], m.library.path)
""")


def _compile_in_a_new_process(cache):
    env = {**os.environ, "BRAZE_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", _COMPILE_AND_CHECK], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    compiles, path = r.stdout.split()
    return int(compiles), path


@pytest.mark.parametrize("damage", ["truncated lib.so", "garbage meta.json", "empty meta.json"])
def test_a_corrupted_cache_entry_is_rebuilt(tmp_path, damage):
    cache = tmp_path / "shared"
    compiles, so = _compile_in_a_new_process(cache)
    assert compiles == 1
    so = os.path.realpath(so)
    meta = os.path.join(os.path.dirname(so), "meta.json")
    if damage == "truncated lib.so":
        data = open(so, "rb").read()
        open(so, "wb").write(data[:len(data) // 3])
    elif damage == "garbage meta.json":
        open(meta, "w").write("{not json")
    else:
        open(meta, "w").write(json.dumps([]))
    compiles, so2 = _compile_in_a_new_process(cache)
    assert compiles == 1 and os.path.realpath(so2) == so  # rebuilt in place, and it runs
    assert _compile_in_a_new_process(cache)[0] == 0  # and is a good entry again


def test_threads_compiling_one_model_at_once_all_work(tmp_path):
    mod = _mlp()
    before = braze.stats()
    results = {}

    def work(i):
        m = braze.compile(mod)
        x = np.full((i + 1, 32), 0.25, np.float32)
        results[i] = (m(x), braze.reference.run(mod, x))

    errors = run_threads(work, 4)
    assert not errors, errors
    for got, want in results.values():
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    after = braze.stats()
    # one C compile; the other threads waited on the entry's lock and found it built
    assert after["native_compiles"] - before["native_compiles"] == 1
    assert after["cache_hits"] - before["cache_hits"] == 3


def test_an_image_smaller_than_the_conv_window_is_an_input_error():
    """A symbolic spatial dim too small for one window (declared range [1, 64]) is refused by
    the entry's range check, natively and in the reference (it was 'braze_dnnl: invalid arguments')."""
    b = Builder()
    n, h = b.sym("n", 1, 8), b.sym("h", 1, 64)
    x = b.param("x", tensor("f32", n, 2, h, h))
    w = b.constant(np.ones((3, 2, 3, 3), np.float32), "w")
    b.ret(b.relu(b.op("conv2d", [x, w])))
    m = braze.compile(b.module)
    assert m(np.ones((1, 2, 3, 3), np.float32)).shape == (1, 3, 1, 1)
    small = np.ones((1, 2, 2, 2), np.float32)
    for run in (m, lambda a: braze.reference.run(b.module, a)):
        with pytest.raises(InputError, match=r"h = 2 is outside its range \[3, 64\]"):
            run(small)
