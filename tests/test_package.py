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
    for name in ("import_onnx", "import_torch", "load", "compile"):
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


def test_readme_documents_every_environment_variable_in_one_table():
    import re
    names = set()
    for p in (ROOT / "braze").rglob("*.py"):
        for line in p.read_text().splitlines():
            if re.search(r"environ|getenv|env\.get|_int_env|ENV_\w+ =", line):
                names |= set(re.findall(r"[\"'](BRAZE_[A-Z0-9_]+)[\"']", line))
    for p in (ROOT / "braze").rglob("*.c"):
        names |= set(re.findall(r'getenv\("(BRAZE_[A-Z0-9_]+)"\)', p.read_text()))
    assert {"BRAZE_DEBUG", "BRAZE_DUMP", "BRAZE_CACHE_DIR", "BRAZE_THREADS", "BRAZE_ISA",
            "BRAZE_DNNL_ROOT", "BRAZE_DNNL_RUNTIME_M"} <= names
    readme = (ROOT / "README.md").read_text()
    table = [ln for ln in readme.splitlines() if ln.startswith("| `BRAZE_") or ln.startswith("| `CC`")]
    documented = {re.match(r"\| `(\w+)`", ln).group(1) for ln in table}
    assert names <= documented, f"undocumented: {sorted(names - documented)}"
    debug = next(ln for ln in table if ln.startswith("| `BRAZE_DEBUG`"))
    assert all(w in debug for w in ("`1`", "`2`", "`3`", "profile_report"))


def test_braze_never_changes_the_environment():
    # settings travel in Options; a process-wide variable changed during a compile leaks into
    # every other thread's compile
    import re
    bad = re.compile(r"environ\s*\[[^]]*\]\s*=|environ\.(update|pop|setdefault|clear)\(|putenv|unsetenv")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "braze").rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits, hits
