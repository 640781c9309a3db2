"""Smoke test of the benchmark harness: the MLP, eager + ONNX Runtime, one tiny shape, 2 runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is a top-level package of the repository, not installed
    sys.path.insert(0, str(ROOT))

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def _run(args, timeout=150):
    return subprocess.run([sys.executable, "-m", "benchmarks.run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_help_explains_options():
    p = _run(["--help"], timeout=60)
    assert p.returncode == 0, p.stderr
    for opt in ("--models", "--backends", "--shapes", "--repeat", "--out", "openvino", "braze-plugin"):
        assert opt in p.stdout


def test_mlp_eager_onnxruntime(tmp_path):
    p = _run(["--models", "mlp", "--backends", "eager,onnxruntime", "--shapes", "tiny", "--repeat", "2",
              "--min-time", "0", "--threads", "1", "--out", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "latest.json").read_text())
    assert (tmp_path / "latest.md").read_text().startswith("Run ")
    for key in ("date", "machine", "versions", "config", "results"):
        assert key in doc
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["threads"] == 1
    assert doc["versions"]["torch"] and doc["versions"]["onnxruntime"]
    by_backend = {r["backend"]: r for r in doc["results"]}
    assert set(by_backend) == {"eager", "onnxruntime"}
    for name, r in by_backend.items():
        assert r["model"] == "mlp"
        assert r["status"] == "ok", (name, r.get("reason"))
        assert r["ttfr_cold_s"] > 0
        assert len(r["shapes"]) == 1
        s = r["shapes"][0]
        assert s["status"] == "ok"
        assert s["dims"] == {"batch": 2}
        assert s["median_ms"] > 0 and s["min_ms"] > 0 and s["runs"] >= 2
        assert 0 <= s["max_rel_err"] < 1e-4
    assert by_backend["eager"]["shapes"][0]["max_rel_err"] == 0
    assert by_backend["onnxruntime"]["ttfr_warm_s"] > 0  # second process, cached .onnx


def test_update_readme_between_markers(tmp_path):
    from benchmarks.update_readme import BEGIN, END, update
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Benchmarks\n\n{BEGIN}\nold\n{END}\n\ntail\n")
    md = tmp_path / "latest.md"
    md.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    update(md, readme)
    text = readme.read_text()
    assert "old" not in text and "| 1 | 2 |" in text and text.endswith("tail\n")
    update(md, readme)  # idempotent
    assert readme.read_text() == text


def test_report_formats_without_braze():
    from benchmarks import run
    doc = {"date": "d", "machine": {"cpu": "c", "cores": 2, "threads": 2, "isa": [], "loadavg_at_start": None},
           "versions": {"torch": "t"}, "config": {"backends": ["eager", "braze"], "shapes": "tiny", "repeat": 2,
                                                   "min_time_s": 0},
           "backends": {"eager": {"description": "e"}, "braze": {"description": "b"}},
           "results": [{"model": "mlp", "backend": "eager", "status": "ok",
                        "shapes": [{"shape": "batch=2", "status": "ok", "median_ms": 2.0, "max_rel_err": 0.0}]},
                       {"model": "mlp", "backend": "braze", "status": "unavailable",
                        "reason": "braze.compile not built yet", "shapes": []}]}
    md = run.to_markdown(doc)
    assert "braze/eager" in md and "braze.compile not built yet" in md
    doc["results"][1] = {"model": "mlp", "backend": "braze", "status": "ok", "recompiles": 0,
                         "shapes": [{"shape": "batch=2", "status": "ok", "median_ms": 1.0, "max_rel_err": 1e-6}]}
    assert "0.50x" in run.to_markdown(doc)


def test_report_shows_both_plugin_counters():
    from benchmarks import run
    doc = {"date": "d", "machine": {"cpu": "c", "cores": 2, "threads": 2, "isa": [], "loadavg_at_start": None},
           "versions": {"torch": "t"}, "config": {"backends": ["inductor", "braze-plugin"], "shapes": "tiny",
                                                   "repeat": 2, "min_time_s": 0},
           "backends": {"inductor": {"description": "i"}, "braze-plugin": {"description": "p"}},
           "results": [{"model": "mlp", "backend": "inductor", "status": "ok", "recompiles": 0,
                        "compile_counters": {"dynamo_graphs": {"first_result": 1, "recompiles": 0}},
                        "shapes": [{"shape": "batch=2", "status": "ok", "median_ms": 2.0, "max_rel_err": 0.0}]},
                       {"model": "mlp", "backend": "braze-plugin", "status": "ok", "recompiles": 1,
                        "compile_counters": {"dynamo_graphs": {"first_result": 1, "recompiles": 1},
                                             "native_compiles": {"first_result": 1, "recompiles": 2}},
                        "shapes": [{"shape": "batch=2", "status": "ok", "median_ms": 1.0, "max_rel_err": 0.0}]}]}
    rows = {r[1]: r[5] for r in run.prep_rows(doc)[1]}
    assert rows == {"inductor": "0", "braze-plugin": "dynamo_graphs 1, native_compiles 2"}
    assert "dynamo_graphs 1, native_compiles 2" in run.to_markdown(doc)


def _per_model(module: str, stem: str, tmp_path) -> dict:
    """``python -m benchmarks.<module>`` on the MLP at one tiny shape: its one row, after checking
    that the markdown has it and names the machine."""
    p = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--models", "mlp", "--shapes", "tiny",
                        "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / f"{stem}.json").read_text())
    md = (tmp_path / f"{stem}.md").read_text()
    assert "| mlp | batch=2 |" in md and doc["meta"]["machine"]["cpu"] in md
    (row,) = doc["results"][0]["shapes"]
    assert row["dims"] == {"batch": 2}
    return row


def test_dynamic_price_writes_its_table(tmp_path):
    """Dynamic and static compiles called in turn, and the first call at a new shape."""
    row = _per_model("dynamic_price", "dynamic", tmp_path)
    assert row["rounds"] >= 10
    for k in ("first_ms", "dynamic_ms", "static_ms", "first_over_steady", "switched_over_steady"):
        assert row[k] > 0
    assert len(row["first_ratios"]) == 9 and row["first_over_steady"] == sorted(row["first_ratios"])[4]


@pytest.mark.slow  # 7 s on 2 cores; a one-off measurement's tool (issue 25), not a benchmark users run
def test_threads_per_kernel_times_three_libraries_and_their_generated_kernels(tmp_path):
    """The depthwise convnet at 1x32x32 built three ways (threads as the cost model decides, in every
    parallel loop, in none): wall times for each, and its generated kernels' times from the counters,
    the best per kernel no slower than either whole choice."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.threads_per_kernel", "--models", "depthwise", "--shapes",
                        "tiny", "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "threads_per_kernel.json").read_text())
    (row,) = doc["results"][0]["shapes"]
    assert row["rounds"] >= 10 and all(row[f"{k}_ms"] > 0 for k in ("default", "all", "none"))
    assert 0 < row["kernels_best_ms"] <= min(row["kernels_all_ms"], row["kernels_none_ms"]) + 1e-12
    assert "| depthwise | batch=1,height=32,width=32 |" in (tmp_path / "threads_per_kernel.md").read_text()


@pytest.mark.slow  # 12 s on 2 cores: two compiles of the depthwise convnet
def test_ab_stage_times_a_model_with_and_without_a_stage(tmp_path):
    """The depthwise convnet at 1x32x32 with and without stage jam, in one process: every kernel's
    ratio and their sum; a name that is no stage is refused with the list."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.ab_stage", "--without", "jam", "--models", "depthwise",
                        "--shapes", "tiny", "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "ab_stage.json").read_text())
    (row,) = doc["results"][0]["shapes"]
    kernels = {k["kernel"]: k for k in row["kernels"]}
    assert row["blocks"] >= 9 and {"all kernels", "fused_0"} <= set(kernels)
    assert all(k["with_over_without"] > 0 and k["with_us"] > 0 for k in kernels.values())
    assert "without stage `jam`" in (tmp_path / "ab_stage.md").read_text()
    bad = subprocess.run([sys.executable, "-m", "benchmarks.ab_stage", "--without", "nosuch", "--models", "depthwise",
                          "--shapes", "tiny", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0 and "partition" in bad.stdout + bad.stderr


@pytest.mark.slow  # 16 s on 2 cores; a one-off measurement's tool (issue 25), not a benchmark users run
def test_conv_layers_matches_each_convolution_to_openvinos(tmp_path):
    """The depthwise convnet at 1x32x32: its four convolutions by signature on both sides, each
    counted once, and the counters covering most of each call."""
    pytest.importorskip("openvino")
    p = subprocess.run([sys.executable, "-m", "benchmarks.conv_layers", "--models", "depthwise", "--shapes", "tiny",
                        "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "conv_layers.json").read_text())
    (row,) = doc["results"][0]["shapes"]
    convs = {r["layer"]: r for r in row["layers"] if not r["layer"].startswith("other")}
    assert set(convs) == {"3x3/s2 3->16 g1 @16x16", "1x1/s1 16->64 g1 @16x16", "3x3/s1 64->64 g64 @16x16",
                          "1x1/s1 64->16 g1 @16x16"}
    for r in convs.values():
        assert r["count"] == [1, 1] and r["braze_ms"] > 0 and r["openvino_ms"] > 0
    assert row["counted"]["braze"] > 0.5
    assert "| 3x3/s1 64->64 g64 @16x16 | 1, 1 |" in (tmp_path / "conv_layers.md").read_text()


def test_live_weights_writes_its_table(tmp_path):
    """Live and frozen plug-in compiles called in turn, both within tolerance of eager."""
    row = _per_model("live_weights", "live_weights", tmp_path)
    assert row["rounds"] >= 8
    assert row["live_ms"] > 0 and row["frozen_ms"] > 0
    assert row["rel_error_live"] < 1e-4 and row["rel_error_frozen"] < 1e-4


def test_channels_last_writes_its_table(tmp_path):
    """A channels-last model against its NCHW twin and eager, within tolerance of eager."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.channels_last", "--models", "depthwise", "--shapes", "tiny",
                        "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (row,) = json.loads((tmp_path / "channels_last.json").read_text())["results"][0]["shapes"]
    assert row["rounds"] >= 8 and row["channels_last_ms"] > 0 and row["nchw_ms"] > 0
    assert row["rel_error_cl"] < 1e-4
    assert "| depthwise | batch=1,height=32,width=32 |" in (tmp_path / "channels_last.md").read_text()


def test_plugin_overhead_writes_its_table(tmp_path):
    """The plug-in and braze.compile called in turn, both within tolerance of eager."""
    row = _per_model("plugin_overhead", "plugin_overhead", tmp_path)
    assert row["blocks"] >= 9 and row["calls_per_block"] >= 3
    assert row["direct_us"] > 0 and row["plugin_us"] > 0 and row["plugin_over_direct"] > 0
    assert row["rel_error_direct"] < 1e-4 and row["rel_error_plugin"] < 1e-4


@pytest.mark.slow  # 27 s on 2 cores (six processes): the suite's budget; tests/plugin/test_buffer_writes.py checks the decoding
def test_kv_cache_decode_writes_its_table(tmp_path):
    """Eager and the plug-in on each cache (two buffer writes, a growing cache), each run in its own
    process; the plug-in's answers are eager's."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.kv_cache_decode", "--rounds", "1", "--steps", "24",
                        "--backends", "eager,braze", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "kv_cache_decode.json").read_text())
    assert set(doc["results"]) == {f"{v}/{b}" for v in ("slice", "index_copy", "cat") for b in ("eager", "braze")}
    for k, r in doc["results"].items():
        assert r["us"] > 0 and len(r["runs_us"]) == 1
        assert r["max_abs_err"] < 1e-4, (k, r)
    md = (tmp_path / "kv_cache_decode.md").read_text()
    assert "| slice |" in md and "braze / eager" in md


@pytest.mark.slow  # 20 s of transformers: the suite's budget (the cache written in place: tests/plugin)
def test_hf_decode_writes_its_table(tmp_path):
    """Eager and the plug-in decode LLaMA with its StaticCache (GPT-2's growing cache is
    kv_cache_decode's cat), each in its own process; the plug-in's tokens are eager's (the
    benchmark exits 1 otherwise)."""
    pytest.importorskip("transformers")
    p = subprocess.run([sys.executable, "-m", "benchmarks.hf_decode", "--models", "llama", "--rounds", "1",
                        "--tokens", "12", "--backends", "eager,braze", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-2000:]
    doc = json.loads((tmp_path / "hf_decode.json").read_text())
    assert set(doc["results"]) == {"llama/eager", "llama/braze"}
    assert all(r["same_tokens"] and r["us"] > 0 for r in doc["results"].values())
    assert "| llama |" in (tmp_path / "hf_decode.md").read_text()


def test_small_m_bmm_writes_its_table(tmp_path):
    """Both paths at every case, alternating; the table has a row per case."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.small_m_bmm", "--rounds", "1", "--calls", "3",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "small_m_bmm.json").read_text())
    assert len(doc["results"]) >= 10 and all(r["kernel_us"] > 0 and r["primitive_us"] > 0 for r in doc["results"])
    assert (tmp_path / "small_m_bmm.md").read_text().count("\n| ") == len(doc["results"]) + 1


def _merged(module: str, doc: dict, runs: list[dict], tmp_path) -> tuple[dict, str]:
    """``--merge`` of ``doc`` with its first point's record replaced by each of ``runs``: the merged
    first point and the markdown."""
    paths = []
    for k, row in enumerate(runs):
        doc["results"][0]["shapes"][0] = row
        paths.append(tmp_path / f"run{k}.json")
        paths[-1].write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--merge", *map(str, paths),
                        "--out", str(tmp_path), "--stem", "merged"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    merged = json.loads((tmp_path / "merged.json").read_text())
    return merged["results"][0]["shapes"][0], (tmp_path / "merged.md").read_text()


def test_live_weights_merges_runs_into_medians(tmp_path):
    """``--merge``: runs made apart become one table of per-point medians, each run's ratio kept
    (the committed run's file, with other ratios: test_live_weights_writes_its_table runs it)."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "live_weights_avx2.json").read_text())
    row = doc["results"][0]["shapes"][0]
    m, md = _merged("live_weights", doc, [{**row, "live_over_frozen": ratio, "live_ms": 10.0 + k}
                                          for k, ratio in enumerate((1.2, 0.9, 1.0))], tmp_path)
    assert (m["live_over_frozen"], m["live_ms"], m["runs_live_over_frozen"]) == (1.0, 11.0, [1.2, 0.9, 1.0])
    assert "median of 3 runs" in md


def test_training_merges_runs_into_medians(tmp_path):
    """``--merge`` of training runs (the committed convnet file's, with other ratios): per point the
    median, each run's inductor / braze ratio in a column of its own."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "training_convnet_bn_zen5.json").read_text())
    row = doc["results"][0]["shapes"][0]
    m, md = _merged("training", doc, [{**row, "inductor_over_braze": r} for r in (1.2, 0.9, 1.0)], tmp_path)
    assert (m["inductor_over_braze"], m["runs_inductor_over_braze"]) == (1.0, [1.2, 0.9, 1.0])
    assert "median of 3 runs" in md and "| 1.20 0.90 1.00 |" in md


@pytest.mark.slow  # 12 s on 2 cores; a one-off measurement's tool (tests/plugin: what the plug-in leaves)
def test_torch_ops_counts_what_torch_still_runs(tmp_path):
    """The MLP's training step: eager's ATen ops counted in both graphs, none left to PyTorch."""
    row = _per_model("torch_ops", "torch_ops", tmp_path)
    for part in ("forward", "backward"):
        assert row[part]["eager_ops"] >= 3 and row[part]["braze_torch_ops"] == 0, row


def test_interleaved_times_backends_in_turn_and_reports_ratios(tmp_path):
    """Two backends, each in its own server process, called in turn: per-round ratios to the first,
    and each within tolerance of eager."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.interleaved", "--models", "mlp", "--backends", "braze,eager",
                        "--shapes", "tiny", "--rounds", "3", "--round-time", "0", "--threads", "1",
                        "--out", str(tmp_path), "--stem", "t"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "t.json").read_text())
    (row,) = doc["results"][0]["shapes"]
    assert row["rounds"] == 3 and set(row["backends"]) == {"braze", "eager"}
    assert row["backends"]["braze"]["over_first"] == 1.0 and row["backends"]["eager"]["over_first"] > 0
    assert all(b["rel_err"] < 1e-4 for b in row["backends"].values())
    assert "eager / braze" in (tmp_path / "t.md").read_text()


@pytest.mark.slow  # 19 s on 2 cores; test_interleaved_times_backends_in_turn_and_reports_ratios covers the runner
def test_interleaved_spreads_rounds_over_sets_of_processes(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.interleaved", "--models", "mlp", "--backends", "braze,eager",
                        "--shapes", "tiny", "--rounds", "3", "--round-time", "0", "--threads", "1", "--processes", "2",
                        "--out", str(tmp_path), "--stem", "t"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count("braze: preparing") == 2  # a second set of servers, started after the first
    (row,) = json.loads((tmp_path / "t.json").read_text())["results"][0]["shapes"]
    assert row["processes"] == 2 and row["backends"]["eager"]["over_first"] > 0
    assert "spread over 2 sets of processes" in (tmp_path / "t.md").read_text()


@pytest.mark.slow  # 11 s on 2 cores; test_interleaved covers the busy processes' runner
def test_contention_times_each_phase_and_the_idle_cpu(tmp_path):
    """Two backends in turn, quiet, beside 1 and 2 busy processes, quiet again: a slowdown per busy
    phase, the idle CPU after a call, and the busy processes gone afterwards."""
    p = subprocess.run([sys.executable, "-m", "benchmarks.contention", "--models", "mlp", "--backends",
                        "braze,eager", "--shapes", "tiny", "--rounds", "1", "--round-time", "0", "--threads", "1",
                        "--out", str(tmp_path), "--stem", "c"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (r,) = json.loads((tmp_path / "c.json").read_text())["results"]
    (row,) = r["shapes"]
    b = row["backends"]["braze"]
    assert set(b["ms"]) == {"quiet", "1 busy", "2 busy", "quiet again"} and set(b["slowdown"]) == {"1 busy", "2 busy"}
    assert all(v > 0 for v in b["slowdown"].values()) and b["rel_err"] < 1e-4
    assert set(b["counted"]) == set(b["ms"]) and "counted" not in row["backends"]["eager"]  # braze's teams
    assert set(r["idle_cpu_pct"]) == {"braze", "eager"} and all(v >= 0 for v in r["idle_cpu_pct"].values())
    md = (tmp_path / "c.md").read_text()
    assert "braze x1 / eager x1" in md and "braze / eager ms, 1 busy" in md
    assert "Share of calls run with fewer threads" not in md  # a fixed team: nothing to share out
    assert "os.getppid() == parent" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_contention_shares_out_an_adaptive_teams_calls():
    from benchmarks.contention import PHASES, _team_table
    counted = {p: {"full team": 3, "fewer threads": 1} for p, _ in PHASES}
    doc = {"backends": ["braze", "braze-adapt-threads"], "results": [{"model": "mlp", "shapes": [
        {"shape": "batch=1", "backends": {"braze": {"counted": {p: {"full team": 0, "fewer threads": 0}
                                                               for p, _ in PHASES}},  # fixed: uncounted
                                          "braze-adapt-threads": {"counted": counted}}}]}]}
    text = "\n".join(_team_table(doc))
    assert "braze-adapt-threads 1 busy" in text and "25%" in text and "| braze quiet" not in text


def test_interleaved_names_an_unknown_backend():
    p = subprocess.run([sys.executable, "-m", "benchmarks.interleaved", "--backends", "braze,nope"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "nope" in p.stderr and "openvino" in p.stderr


def test_small_m_compares_the_kernel_with_onednn(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.small_m", "--dtypes", "f32,bf16", "--ms", "3",
                        "--rounds", "1", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "small_m.json").read_text())
    assert [r["m"] for r in doc["results"]["f32"]] == [3]  # bf16 too where the CPU runs it
    assert all(r["kernel_ms"] > 0 and r["onednn_ms"] > 0 for rows in doc["results"].values() for r in rows)


@pytest.mark.slow  # 27 s on 2 cores; the default suite's other smoke tests cover the runner and its table
def test_bf16_rows_run_and_are_compared_among_themselves(tmp_path):
    """--precision bf16 adds the 16-bit rows; each runs (bf16 where the CPU has it, else braze
    warns and compiles float32); braze-bf16 is compared with braze and the 16-bit peers."""
    from benchmarks import backends as B
    from benchmarks import run
    backends = "eager,braze-bf16,braze-bf16-model,eager-bf16"
    p = _run(["--models", "mlp", "--backends", backends, "--shapes", "tiny", "--repeat", "2", "--min-time", "0",
              "--threads", "1", "--out", str(tmp_path)], timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((tmp_path / "latest.json").read_text())
    by_backend = {r["backend"]: r for r in doc["results"]}
    for name in backends.split(","):
        r = by_backend[name]
        assert r["status"] == "ok", (name, r.get("reason"))
        assert r["shapes"][0]["max_rel_err"] < (0.05 if B.BACKENDS[name].precision != "fp32" else 1e-4), name
    headers, body = run.table_rows(doc)
    assert "braze-bf16/eager-bf16" in headers and "braze/eager-bf16" not in headers
    assert all(c.endswith("x") for c in body[0][headers.index("braze-bf16/eager-bf16"):][:1])


@pytest.mark.slow  # 20 s on 2 cores; tests/plugin's training tests check the steps themselves
def test_training_reports_steps_recompiles_memory_and_warm_compiles(tmp_path):
    """Eager, braze and inductor training steps in turn; after the warm-up no compile; each
    backend alone in a fresh process: a warm first step and its peak memory."""
    row = _per_model("training", "training", tmp_path)
    assert row["braze_ms"] > 0 and row["loss_rel_error_braze"] < 1e-4
    (result,) = json.loads((tmp_path / "training.json").read_text())["results"]
    assert result["after_warm_up"] == {"braze_native_compiles": 0, "dynamo_graphs": 0}
    assert result["alone"]["braze"]["libraries_after_two_shapes"] == 0
    for b in ("eager", "braze", "inductor"):
        a = result["alone"][b]
        assert a["peak_rss_mb"] > 100 and a["first_step_warm_s"] > 0
        assert 100 < a["step_peak_rss_mb"] <= a["peak_rss_mb"] + 50, a  # steps alone: no compile in them
    assert "| mlp | " in (tmp_path / "training.md").read_text().split("step peak MB")[-1]


@pytest.mark.slow  # 16 s on 2 cores; tests/frontend/test_tf_frontend.py checks the models themselves
def test_tf_models_times_braze_against_tf(tmp_path):
    """The CNN with one depthwise block: braze's import and compile timed, and at each shape its
    answer within float32 tolerance of TF's and a median per call for braze and both TF modes."""
    pytest.importorskip("tensorflow")
    p = subprocess.run([sys.executable, "-m", "benchmarks.tf_models", "--models", "cnn", "--layers", "1",
                        "--min-time", "0", "--threads", "1", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (r,) = json.loads((tmp_path / "tf_models.json").read_text())["results"]
    assert r["import_s"] > 0 and r["compile_s"] > 0 and len(r["shapes"]) == 3
    for s in r["shapes"]:
        assert s["max_rel_err"] < 1e-4 and all(s[f"{k}_ms"] > 0 for k in ("braze", "eager", "tf.function"))
    assert "| 1x64x64 |" in (tmp_path / "tf_models.md").read_text()


def test_conv_layouts_lists_resnet50s_convolutions_and_times_both_layouts(tmp_path):
    from benchmarks.conv_layouts import resnet50_convs
    convs = resnet50_convs(224, 224)
    assert sum(c[-1] for c in convs) == 53  # the stem, 16 blocks of three, 4 shortcuts
    assert (3, 64, 224, 224, 7, 2, 1) in convs and (512, 512, 7, 7, 3, 1, 2) in convs
    p = subprocess.run([sys.executable, "-m", "benchmarks.conv_layouts", "--shape", "1x32x32", "--rounds", "1",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "conv_layouts.json").read_text())
    assert len(doc["rows"]) == len(resnet50_convs(32, 32))
    assert all(r["nhwc_ms"] > 0 and r["blocked_ms"] > 0 and r["nhwc_impl"] and r["blocked_impl"] for r in doc["rows"])
    assert "faster of the two per layer" in (tmp_path / "conv_layouts.md").read_text()


@pytest.mark.slow  # 12 s on 2 cores: it tunes the model; a one-off A/B's tool (issue 25)
def test_tuning_ab_times_the_tuned_and_untuned_compiles_in_turn(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.tuning_ab", "--models", "block", "--rounds", "2",
                        "--round-time", "0.01", "--out", str(tmp_path), "--stem", "t"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (row,) = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert row["measurements"] > 0 and row["tables"] >= 1
    assert [x["shape"] for x in row["rows"]] == ["rows=63", "rows=511", "rows=4095"]  # the last dim one smaller
    assert all(x["ratio"] > 0 and x["diff"] == 0.0 for x in row["rows"])  # the same choices here: the same bits
    assert "tuned / untuned" in (tmp_path / "t.md").read_text()
