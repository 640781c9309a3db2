"""scripts/gpu_check.py's tables: every committed H200 run renders, and each kind of result lands in its
own table (the script itself runs only where a GPU is)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


def _table(rows):
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check
    return gpu_check.table(rows)


def test_each_result_kind_has_its_table():
    rows = [{"event": "env", "gpu": "G", "driver": "13.0", "nvrtc": "13.0", "torch": "t"},
            {"model": "bert", "event": "correct", "max_rel_err": 1e-6, "ok": True},
            {"model": "bert", "event": "recompiles", "native_compiles": 0},
            {"model": "bert", "event": "latency", "braze_ms": 2.0, "eager_ms": 4.0, "inductor_ms": 3.0,
             "braze_over_eager": 0.5, "braze_over_inductor": 0.67},
            {"model": "bert", "event": "plugin_correct", "max_rel_err": 2e-6, "ok": True},
            {"model": "bert", "event": "plugin_recompiles", "native_compiles": 1, "torch_warnings": []},
            {"model": "bert", "event": "plugin_latency", "plugin_ms": 3.0},
            {"model": "train:mlp", "event": "train_step", "batch": 16, "loss_rel_err": 0.0, "max_grad_rel_err": 2e-7,
             "ok": True},
            {"model": "train:mlp", "event": "train_compiles", "native_compiles": 4, "torch_warnings": []},
            {"model": "row:gelu", "event": "row_kernel", "shape": [8, 4], "max_rel_err": 0.0, "braze_ms": 1.0,
             "braze_gb_s": 10, "eager_ms": 0.5, "eager_gb_s": 20},
            {"model": "bert", "event": "profile", "runner": "braze", "kernels_per_call": 3.0, "gpu_ms_per_call": 1.0,
             "wall_ms_per_call": 2.0, "top": [{"kernel": "k_fused_1", "per_call": 1.0, "ms_per_call": 0.5}]}]
    md = _table(rows)
    main = md.split("\n\n")[1]
    assert "| bert | 1/1 (1.0e-06) | 0 | 2.0 | 4.0 | 3.0 | 0.5 | 0.67 |" in main
    assert "train:mlp" not in main and "row:gelu" not in main  # they have tables of their own
    assert "| bert | 1/1 (2.0e-06) | 1 | 0 | 3.0 | 1.5 | 1.0 |" in md  # the plug-in against braze.compile, inductor
    assert "| 16 | 0.0e+00 | 2.0e-07 | True |" in md
    assert "| gelu | 8 x 4 | 0.0e+00 | 1.0 | 10 | 0.5 | 20 |" in md
    assert "| bert | braze | 3.0 | 1.0 | 2.0 | k_fused_1 0.5 |" in md


def test_committed_h200_runs_render():
    files = sorted(RESULTS.glob("gpu_check_h200*.jsonl"))
    assert len(files) >= 8
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--table", *map(str, files)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    newest = [json.loads(x) for x in (RESULTS / "gpu_check_h200.jsonl").read_text().splitlines() if x]
    correct = [x for x in newest if x.get("event") == "correct"]
    assert correct and all(x["ok"] for x in correct)  # the README's claim: every shape of every model
    for name in ("bert", "gpt2", "llama", "resnet50"):
        assert sum(x.get("model") == name for x in correct) >= 3, name
    assert "### gpu_check_h200_row_kernels.jsonl" in r.stdout
