"""The demo and braze's own calls into the exporters: quiet, and honest about where the time went."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("torch")


def test_exports_braze_makes_are_quiet_but_the_users_own_warnings_show(tmp_path):
    # a fresh process: torch.onnx logs its torchvision notices once per process, and the
    # FutureWarning comes from torch's pytree code the first time the exporter uses it
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    script = textwrap.dedent(f"""
        import warnings
        import torch
        from braze import zoo

        class Net(torch.nn.Module):
            def forward(self, x):
                warnings.warn("the user's own warning", UserWarning)
                return torch.relu(x) + 1.0

        batch = torch.export.Dim("batch", min=1, max=8)
        zm = zoo.ZooModel(name="tiny", module=Net().eval(), make_inputs=lambda batch=2: (torch.randn(batch, 4),),
                          dims={{"batch": (1, 8)}}, test_shapes=[{{"batch": 3}}],
                          dynamic_shapes=({{0: batch}},), input_names=["x"])
        zoo.export_onnx(zm, {str(tmp_path / 'tiny.onnx')!r})
        zoo.export(zm)
        print("done")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"
    assert "torchvision is not installed" not in r.stderr
    assert "FutureWarning" not in r.stderr and "DeprecationWarning" not in r.stderr
    assert "will not be used, since it shares the same shape constraints" not in r.stderr
    assert "the user's own warning" in r.stderr  # narrow: the model's own warnings are not braze's to hide


def test_quiet_exporters_leaves_the_filters_as_they_were():
    import warnings

    from braze.frontend.quiet import quiet_exporters
    before = list(warnings.filters)
    with quiet_exporters():
        assert warnings.filters != before
    assert warnings.filters == before


def test_demo_reports_export_and_compile_apart(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    import braze
    from braze import demo, zoo

    # the mlp zoo model, smaller: one shape, one timed run
    small = zoo.mlp()
    import torch
    small.module = torch.nn.Sequential(torch.nn.Linear(1024, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()
    small.test_shapes = [{"batch": 3}]
    monkeypatch.setattr(zoo, "get", lambda name: small)
    rows = demo.run_demo("mlp", repeat=1)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("[2/3]"))
    import re
    m = re.search(r"ready in ([\d.]+) s: exported in ([\d.]+) s \(torch\.export\), compiled in ([\d.]+) s", line)
    assert m, line
    total, export, comp = map(float, m.groups())
    assert abs(total - export - comp) <= 0.016 and export > 0  # each printed to 0.01 s
    assert rows[0]["rel_err"] < 1e-4 and braze.stats()["native_compiles"] >= 1


def test_demo_plugin_frontend_counts_graphs_and_compiles(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    import torch

    from braze import demo, zoo
    small = zoo.mlp()
    small.module = torch.nn.Sequential(torch.nn.Linear(1024, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()
    small.test_shapes = [{"batch": 1}, {"batch": 3}, {"batch": 5}]
    monkeypatch.setattr(zoo, "get", lambda name: small)
    torch._dynamo.reset()
    rows = demo.run_demo("mlp", frontend="plugin", repeat=1)
    torch._dynamo.reset()
    out = capsys.readouterr().out
    assert "backend='braze'" in out and "dynamo graphs / braze native compiles after each shape" in out
    assert all(r["rel_err"] < 1e-4 for r in rows)
