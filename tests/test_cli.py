"""The command line as a user meets it (``python -m braze ...``): one-line errors, exit codes, help, pipes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from braze.testing import one_line_error, run_cli
from hardware import needs_bf16_products, needs_small_m_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def braze_cli(*args, **kw):
    return run_cli(*args, cwd=ROOT, **kw)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    p = tmp_path_factory.mktemp("m") / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(p))
    return p


def test_version():
    import braze
    r = braze_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"braze {braze.__version__}"


def test_ops_into_a_closed_pipe_is_quiet():
    # the reader is gone before braze writes a line (what `braze ops | head -1` does, deterministically)
    p = subprocess.Popen([sys.executable, "-m", "braze", "ops"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err and err.strip() == ""
    assert p.returncode == 0


def test_ops_into_head():
    r = subprocess.run(f"{sys.executable} -m braze ops | head -2", shell=True, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert len(r.stdout.splitlines()) == 2 and r.stderr == ""


def test_bad_dim_range_is_a_usage_error(onnx_file):
    one_line_error(braze_cli("inspect", onnx_file, "--dim", "batch=64:1"), 2, "batch=64:1", "empty",
                   "batch=1:64")
    one_line_error(braze_cli("inspect", onnx_file, "--dim", "batch"), 2, "NAME=LO:HI")
    r = braze_cli("inspect", onnx_file, "--dim", "batch=1:64")
    assert r.returncode == 0 and "batch in [1, 64]" in r.stdout, r.stderr


def test_dim_range_through_the_api_is_a_clear_error_too(onnx_file):
    import braze
    from braze.errors import ModelFormatError
    with pytest.raises(ModelFormatError, match="empty range"):
        braze.import_onnx(onnx_file, dim_ranges={"batch": (64, 1)})


def test_missing_or_foreign_files(tmp_path):
    one_line_error(braze_cli("inspect", tmp_path / "model.pt"), 2, "no such model file", "model.pt")
    one_line_error(braze_cli("inspect", tmp_path / "model.xyz"), 2, "does not know how to read", ".onnx")
    one_line_error(braze_cli("inspect", tmp_path), 2)
    (tmp_path / "model.pt2").write_bytes(b"")
    one_line_error(braze_cli("inspect", tmp_path / "model.pt"), 2, "did you mean", "model.pt2")


def test_inspect_a_torch_checkpoint_says_what_it_is(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(2)}, str(tmp_path / "ckpt.pt"))
    one_line_error(braze_cli("inspect", tmp_path / "ckpt.pt"), 1, "not a torch.export archive", "torch.export.save")


def test_inspect_a_pt2(tmp_path):
    torch = pytest.importorskip("torch")
    ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2, 4),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=9)},))
    torch.export.save(ep, str(tmp_path / "relu.pt2"))
    r = braze_cli("inspect", tmp_path / "relu.pt2")
    assert r.returncode == 0, r.stderr
    assert "relu(" in r.stdout and "in [1, 9]" in r.stdout and r.stderr == ""


@pytest.mark.parametrize("args,words", [
    ([], ["required", "COMMAND"]),
    (["bogus"], ["invalid choice", "bogus"]),
    (["ops", "--nope"], ["unrecognized arguments", "--nope"]),
    (["ops", "zzz"], ["invalid choice", "zzz"]),
    (["inspect"], ["model"]),
    (["demo", "--model", "nope"], ["invalid choice", "nope"]),
    (["demo", "--repeat", "0"], ["positive integer"]),
    (["tune", "m.onnx", "--budget", "soon"], ["bad --budget", "10m"]),
    (["tune", "m.onnx", "--mode", "slow"], ["invalid choice", "slow"]),
    (["tune", "m.onnx", "--precision", "int8"], ["invalid choice", "int8"]),
    (["tune", "--artifact", "dir", "--precision", "bf16"], ["--artifact", "precision it was compiled with"]),
])
def test_usage_errors_are_one_line_with_status_2(args, words):
    one_line_error(braze_cli(*args), 2, *words)


def test_help_explains_each_command():
    top = braze_cli("--help")
    assert top.returncode == 0
    for cmd in ("demo", "inspect", "ops", "--version"):
        assert cmd in top.stdout
    ins = braze_cli("inspect", "--help").stdout
    assert "torch.export.save" in ins and "--dim" in ins and "dim_param" in ins and "--inline" in ins
    ops = braze_cli("ops", "--help").stdout
    assert "ONNX" in ops and "ATen" in ops and "graph IR" in ops
    demo = braze_cli("demo", "--help").stdout
    assert "--model" in demo and "--frontend" in demo and "export" in demo


def test_ops_lists_ir_onnx_and_aten_ops_from_the_registries():
    from braze.frontend.onnx import supported_ops as onnx_ops
    from braze.frontend.torch import supported_ops as aten_ops
    from braze.ops import all_ops

    r = braze_cli("ops")
    assert r.returncode == 0 and r.stderr == ""
    out = r.stdout
    assert f"Graph IR operators ({len(all_ops())})" in out
    assert f"ONNX operators the ONNX frontend imports ({len(onnx_ops())}" in out
    assert f"ATen operators the torch.export frontend converts ({len(aten_ops())}" in out
    words = set(out.replace(",", " ").split())
    assert set(onnx_ops()) <= words and set(aten_ops()) <= words and set(all_ops()) <= words
    only = braze_cli("ops", "onnx").stdout
    assert "ONNX operators" in only and "ATen" not in only and "Graph IR" not in only


def test_internal_errors_are_one_line_unless_debugging(tmp_path):
    # a bug (here: IR text that makes the parser's caller fail in an unexpected way) is one line,
    # with the traceback under BRAZE_DEBUG=1
    code = ("import sys, braze.cli as c; c.cmd_ops = lambda a: 1/0; "
            "sys.exit(c.main(['ops']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    one_line_error(r, 1, "internal error", "ZeroDivisionError", "BRAZE_DEBUG=1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "BRAZE_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr


def _matmul_onnx(tmp_path):
    """An ONNX MatMul of a [batch, 32] input by a constant 32 x 64 weight."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
    model = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(model))
    return model


@needs_small_m_kernel
def test_tune_measures_a_model_once_and_prints_its_tables(tmp_path):
    model = _matmul_onnx(tmp_path)
    env = dict(os.environ, BRAZE_TUNE_DB=str(tmp_path / "db.jsonl"))
    first = braze_cli("tune", model, "--dim", "batch=1:40", "--budget", "20s", env=env)
    assert first.returncode == 0, first.stderr
    count = lambda r: int(re.search(r"s: (\d+) measurement", r.stdout).group(1))  # noqa: E731
    assert count(first) > 0
    assert re.search(r"64x32: .*(smallm|dnnl)", first.stdout), first.stdout  # the product and its table
    assert "tune: 64x32" in first.stderr  # progress
    again = braze_cli("tune", model, "--dim", "batch=1:40", "--budget", "20s", env=env)
    assert count(again) == 0
    assert again.stdout.splitlines()[1:] == first.stdout.splitlines()[1:]


@needs_bf16_products
def test_tune_measures_the_products_in_the_precision_they_will_run_in(tmp_path):
    """Under --precision bf16 the product is measured with bfloat16 operands: a site of its own, which
    a float32 tuning of the same model neither measured nor reads."""
    model = _matmul_onnx(tmp_path)
    env = dict(os.environ, BRAZE_TUNE_DB=str(tmp_path / "db.jsonl"))
    f32 = braze_cli("tune", model, "--dim", "batch=1:40", "--budget", "20s", env=env)
    bf16 = braze_cli("tune", model, "--dim", "batch=1:40", "--budget", "20s", "--precision", "bf16", env=env)
    assert f32.returncode == 0 and bf16.returncode == 0, f32.stderr + bf16.stderr
    assert "64x32 bfloat16 -> float32" in bf16.stderr  # progress names the site's dtypes
    assert int(re.search(r"s: (\d+) measurement", bf16.stdout).group(1)) > 0
    sites = {json.loads(line)["site"] for line in (tmp_path / "db.jsonl").read_text().splitlines()}
    assert {s.split(" ", 7)[-1] for s in sites} == {"float32", "bfloat16 out=float32"}
