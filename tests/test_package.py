"""Packaging promises: cheap import, stable entry points, fresh op tables, CLI."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_is_cheap_and_lazy():
    code = ("import time, sys; t = time.perf_counter(); import braze; dt = time.perf_counter() - t; "
            "print(dt, 'torch' in sys.modules, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"], "importing braze must not import torch or onnx"
    assert float(out[0]) < 1.0


def test_public_entry_points():
    import braze
    for name in ("import_onnx", "import_torch"):
        assert callable(getattr(braze, name))
    assert callable(braze.reference.run)
    assert callable(braze.ir.parse)


def test_readme_op_tables_are_fresh():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_op_tables.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("args", [["--help"], ["ops"], ["demo", "--help"], ["inspect", "--help"]])
def test_cli_runs(args):
    r = subprocess.run([sys.executable, "-m", "braze", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_cli_inspect_bad_path_is_a_clear_error(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(b"this is not a protobuf")
    r = subprocess.run([sys.executable, "-m", "braze", "inspect", str(p)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "error" in r.stderr and "model.onnx" in r.stderr
    assert "Traceback" not in r.stderr
