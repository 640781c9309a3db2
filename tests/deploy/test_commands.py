"""``braze compile / run / bench / inspect DIR`` as a user meets them, and named inputs and
outputs (kept from the ONNX graph and the torch program) through braze.compile and braze.load."""

from __future__ import annotations

import json

import numpy as np
import pytest

import braze
from braze.errors import InputError

from braze.testing import one_line_error
from braze.testing import run_cli as braze_cli

onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory):
    """An ONNX model with two named outputs and two inputs: probs = softmax(x @ W + bias),
    shifted = x + y."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    W = rng.standard_normal((16, 4)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Softmax", ["h"], ["probs"], axis=-1),
         helper.make_node("Add", ["x", "y"], ["shifted"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("shifted", TensorProto.FLOAT, ["batch", 16])],
        [numpy_helper.from_array(W, "W")])
    p = tmp_path_factory.mktemp("m") / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(p))
    return p


def test_onnx_output_names_are_kept(two_outputs, tmp_path):
    cm = braze.compile(two_outputs)
    assert [o.name for o in cm.outputs] == ["probs", "shifted"]
    assert [str(i) for i in cm.inputs] == ["x: float32[batch, 16]", "y: float32[batch, 16]"]
    assert cm.inputs[0].ranges == {"batch": (1, None)}
    cm.save(tmp_path / "a")
    m = braze.load(tmp_path / "a")
    assert [o.name for o in m.outputs] == ["probs", "shifted"] and m.inputs == cm.inputs


def test_inputs_by_keyword_and_by_dict(two_outputs, tmp_path):
    cm = braze.compile(two_outputs)
    cm.save(tmp_path / "a")
    m = braze.load(tmp_path / "a")
    x, y = (np.random.default_rng(i).standard_normal((3, 16)).astype(np.float32) for i in (1, 2))
    want = cm(x, y)
    for model in (cm, m):
        for got in (model(x=x, y=y), model(y=y, x=x), model({"x": x, "y": y})):
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
        with pytest.raises(InputError, match="missing: y"):
            model(x=x)
        with pytest.raises(InputError, match="unknown: z"):
            model(x=x, y=y, z=x)
        with pytest.raises(InputError, match="not both"):
            model(x, y=y)


def test_torch_output_names_are_the_program_outputs():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, -1), x.sum(-1)

    cm = braze.compile(Net(), (torch.randn(2, 5),), dynamic_shapes=({0: torch.export.Dim("b", min=1, max=8)},))
    names = [o.name for o in cm.outputs]
    assert names == ["softmax", "sum_1"], names


def test_compile_run_bench_inspect(two_outputs, tmp_path):
    out = tmp_path / "art"
    r = braze_cli("compile", two_outputs, "-o", out, "--dim", "batch=1:32")
    assert r.returncode == 0, r.stderr
    assert "-> (probs: float32[batch, 4], shifted: float32[batch, 16])" in r.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert meta["symbols"] == {"batch": {"min": 1, "max": 32}}

    ins = braze_cli("inspect", out)
    assert ins.returncode == 0, ins.stderr
    for words in ("x: float32[batch, 16]", "probs: float32[batch, 4]", "batch in [1, 32]", "fusion:", "ISA", "dispatch (",
                  "threads: OpenMP's default number of, on braze's own teams"):
        assert words in ins.stdout, (words, ins.stdout)

    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x * 2)
    run = braze_cli("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                    "-o", tmp_path / "o.npz")
    assert run.returncode == 0, run.stderr
    assert "probs: float32[5, 4]" in run.stdout and "shifted: float32[5, 16]" in run.stdout
    got = np.load(tmp_path / "o.npz")
    np.testing.assert_array_equal(got["shifted"], x * 3)
    np.testing.assert_array_equal(got["probs"], braze.load(out)(x, x * 2)[0])

    bench = braze_cli("bench", out, "--shape", "batch=1", "--shape", "batch=32", "--repeat", "5")
    assert bench.returncode == 0, bench.stderr
    lines = bench.stdout.splitlines()
    assert "p50 ms" in lines[0] and "p99 ms" in lines[0]
    assert lines[1].startswith("batch=1 ") and lines[2].startswith("batch=32 ") and lines[2].endswith(" 5")


@pytest.mark.parametrize("args,code,words", [
    (["run", "{art}", "--input", "z={x}"], 2, ["takes inputs x, y", "unknown: z", "missing: x, y"]),
    (["run", "{art}", "--input", "x"], 2, ["expected NAME=file.npy"]),
    (["run", "{tmp}", "--input", "x={x}"], 2, ["not a braze artifact"]),
    (["bench", "{art}", "--shape", "seq=3"], 2, ["--shape must give batch"]),
    (["bench", "{art}", "--shape", "batch=x"], 2, ["expected NAME=VALUE"]),
    (["bench", "{art}"], 2, ["--shape"]),
    (["run", "{art}", "--input", "x={x}", "--input", "y={bad}"], 1, ["rank"]),
    (["compile", "{tmp}/nope.onnx", "-o", "{tmp}/o"], 2, ["nope.onnx"]),
    (["compile", "{onnx}", "-o", "{tmp}"], 2, ["-o:", "not empty", "not a braze artifact"]),
])
def test_command_errors_are_one_line(two_outputs, tmp_path, args, code, words):
    art = tmp_path / "art"
    braze.compile(two_outputs).save(art)
    np.save(tmp_path / "x.npy", np.ones((2, 16), np.float32))
    np.save(tmp_path / "bad.npy", np.ones((2,), np.float32))
    fill = {"art": art, "x": tmp_path / "x.npy", "bad": tmp_path / "bad.npy", "tmp": tmp_path, "onnx": two_outputs}
    one_line_error(braze_cli(*[a.format(**fill) for a in args]), code, *words)


def test_help_explains_the_artifact_commands():
    top = braze_cli("--help").stdout
    for cmd in ("compile", "run", "bench", "inspect"):
        assert f"braze {cmd}" in top
    assert "--dim" in braze_cli("compile", "--help").stdout and "relocatable" in braze_cli("--help").stdout
    assert "percentiles" in braze_cli("bench", "--help").stdout
    assert ".npz" in braze_cli("run", "--help").stdout


def test_compile_a_pt2_with_threads(tmp_path):
    """A .pt2 from torch.export.save; --threads is the artifact's thread count (meta.json, and
    the count its loader gives the model)."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    ep = torch.export.export(Net(), (torch.randn(3, 4),), dynamic_shapes=({0: torch.export.Dim("b", min=1, max=9)},))
    torch.export.save(ep, str(tmp_path / "net.pt2"))
    r = braze_cli("compile", tmp_path / "net.pt2", "-o", tmp_path / "a", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["threads"] == 1
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(braze.load(tmp_path / "a")(x), np.maximum(x, 0) * 2)


def test_bench_feeds_a_16_bit_artifact_its_own_dtype(tmp_path):
    """bench draws bfloat16 / float16 inputs for such a model (it fed float32 to bfloat16 inputs,
    and crashed on the dtype)."""
    from braze.ops import Builder, tensor
    for dt in ("bf16", "f16"):
        b = Builder()
        n = b.sym("n", 1, 64)
        b.ret(b.gelu(b.param("x", tensor(dt, n, 8))))
        braze.compile(b.module).save(tmp_path / dt)
        r = braze_cli("bench", tmp_path / dt, "--shape", "n=3", "--repeat", "3")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[1].startswith("n=3 ")
