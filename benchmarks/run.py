"""Benchmark braze against PyTorch eager, torch.compile, ONNX Runtime, OpenVINO and TVM on the model zoo.

Every (model, backend) pair runs in its own worker process (this module with
--worker), so one backend's threads and allocators never affect another's;
the parent collects each worker's JSON. Per pair it measures:

  cold   a fresh cache dir (BRAZE_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, the
         .onnx, OpenVINO's CACHE_DIR, TVM .so files): prepare time + the
         first call at the first shape = time to first result;
  warm   a second process with the same (now warm) cache dir, for backends
         that cache (not eager);
  per shape: the median latency over N runs after warm-up (N adaptive: at
         least --repeat runs and at least --min-time seconds), the first-call
         time, and max|out - ref| / max|ref| against PyTorch eager;
  recompiles: compilations after the first shape (torch.compile: dynamo's
         unique_graphs; braze: braze.stats()['native_compiles']; braze-plugin,
         i.e. torch.compile(backend='braze'): both).

All workers use --threads threads (torch.set_num_threads, OMP_NUM_THREADS,
ORT intra_op_num_threads, OpenVINO INFERENCE_NUM_THREADS, TVM_NUM_THREADS).

Writes OUT/latest.json and OUT/latest.md (a markdown table with braze/peer
ratios) and prints a table. `python -m benchmarks.update_readme` copies
latest.md into README.md.

Examples:
  python -m benchmarks.run                                  # everything, full shapes (~20 min on 2 cores)
  python -m benchmarks.run --models mlp,bert --shapes quick
  python -m benchmarks.run --models mlp --backends eager,onnxruntime --shapes tiny --repeat 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import backends as B

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# Shapes per model. The zoo's export ranges bound them: batch <= 64, seq <= 512 (BERT) / 1024 (GPT-2),
# 33 <= height, width <= 512 (ResNet-50). Ordered by cost (the harness skips shapes predicted too slow).
SHAPES = {
    "full": {
        "block": [{"rows": 64}, {"rows": 512}, {"rows": 4096}],
        "mlp": [{"batch": 1}, {"batch": 8}, {"batch": 32}, {"batch": 64}],
        "bert": [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 64}, {"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}],
        "gpt2": [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 64}, {"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}],
        "resnet50": [{"batch": 2, "height": 96, "width": 128}, {"batch": 1, "height": 160, "width": 160},
                     {"batch": 1, "height": 224, "width": 224}, {"batch": 4, "height": 224, "width": 224}],
        "vit": [{"batch": 1}, {"batch": 2}, {"batch": 4}],
        "llama": [{"batch": 1, "seq": 16}, {"batch": 4, "seq": 64}, {"batch": 1, "seq": 128}, {"batch": 8, "seq": 128}],
        "chain_ln": [{"rows": 64}, {"rows": 1024}, {"rows": 8192}, {"rows": 32768}],
        "chain_rms": [{"rows": 64}, {"rows": 1024}, {"rows": 8192}, {"rows": 32768}],
        "depthwise": [{"batch": 1, "height": 64, "width": 64}, {"batch": 2, "height": 96, "width": 96},
                      {"batch": 8, "height": 224, "width": 224}],
        "convnet_bn": [{"batch": 8, "height": 32, "width": 32}, {"batch": 16, "height": 48, "width": 48},
                       {"batch": 32, "height": 64, "width": 64}],
    },
    "quick": {
        "block": [{"rows": 64}, {"rows": 4096}],
        "mlp": [{"batch": 1}, {"batch": 16}],
        "bert": [{"batch": 1, "seq": 16}, {"batch": 2, "seq": 48}],
        "gpt2": [{"batch": 1, "seq": 16}, {"batch": 2, "seq": 48}],
        "resnet50": [{"batch": 1, "height": 64, "width": 64}, {"batch": 2, "height": 96, "width": 128}],
        "vit": [{"batch": 1}, {"batch": 2}],
        "llama": [{"batch": 1, "seq": 16}, {"batch": 2, "seq": 48}],
        "chain_ln": [{"rows": 64}, {"rows": 8192}],
        "chain_rms": [{"rows": 64}, {"rows": 8192}],
        "depthwise": [{"batch": 1, "height": 64, "width": 64}, {"batch": 2, "height": 96, "width": 96}],
        "convnet_bn": [{"batch": 8, "height": 32, "width": 32}, {"batch": 16, "height": 48, "width": 48}],
    },
    "tiny": {
        "block": [{"rows": 64}],
        "mlp": [{"batch": 2}],
        "bert": [{"batch": 1, "seq": 8}],
        "gpt2": [{"batch": 1, "seq": 8}],
        "resnet50": [{"batch": 1, "height": 64, "width": 64}],
        "vit": [{"batch": 1}],
        "llama": [{"batch": 1, "seq": 8}],
        "chain_ln": [{"rows": 64}],
        "chain_rms": [{"rows": 64}],
        "depthwise": [{"batch": 1, "height": 32, "width": 32}],
        "convnet_bn": [{"batch": 2, "height": 16, "width": 16}],
    },
}
MODELS = ["mlp", "bert", "gpt2", "resnet50", "vit", "llama", "depthwise", "chain_ln", "chain_rms", "block"]
DEFAULT_MODELS = ["mlp", "bert", "gpt2", "resnet50"]


def shape_str(dims: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


def _cost(dims: dict) -> float:
    c = 1.0
    for v in dims.values():
        c *= v
    return c


# ---------------------------------------------------------------------------
# worker
# ---------------------------------------------------------------------------


def _measure(run, args, repeat: int, min_time: float, max_time: float, first_call_s: float,
             min_warmups: int = 1) -> dict:
    """Warm-up, then timed runs until >= repeat runs and >= min_time s (capped by max_time)."""
    warmups = max(min_warmups, 1 if first_call_s > 2.0 else 2)
    for _ in range(warmups - 1):  # the first call already was one warm-up
        run(args)
    times = []
    t_start = time.perf_counter()
    while True:
        t = time.perf_counter()
        run(args)
        times.append(time.perf_counter() - t)
        spent = time.perf_counter() - t_start
        if len(times) >= repeat and spent >= min_time:
            break
        if spent >= max_time and len(times) >= min(repeat, 3):
            break
        if len(times) >= 10000:
            break
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "mean_ms": statistics.fmean(times) * 1e3, "runs": len(times), "warmups": warmups}


def worker(args) -> int:
    """One (model, backend) pair in this process; writes its JSON to args.result after every step."""
    out_path = Path(args.result)
    res = {"model": args.model, "backend": args.backend, "phase": args.phase, "status": "running",
           "shapes": [], "pid": os.getpid()}

    def save():
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str))
        os.replace(tmp, out_path)

    save()
    backend = B.get(args.backend)
    reason = backend.unavailable_reason()
    if reason:
        res.update(status="unavailable", reason=reason)
        save()
        return 0

    import numpy as np
    import torch

    from braze import zoo
    from braze.testing import rel_error

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    zm = zoo.get(args.model)
    res["model_build_s"] = time.perf_counter() - t
    shapes = json.loads(args.shapes_json)
    ref_dir = Path(args.ref_dir) if args.ref_dir else None

    def reference(i, dims, inputs):
        f = ref_dir / f"{args.model}-{i}.npy" if ref_dir else None
        if f is not None and f.exists():
            return np.load(f)
        with torch.no_grad():
            ref = zoo.first_output(zm.module(*inputs)).numpy()
        if f is not None:
            np.save(f, ref)
        return ref

    try:
        counts_start = backend.compile_counts()
        t = time.perf_counter()
        prep = backend.prepare(zm, Path(args.cache_dir), args.threads)
        res["prepare_s"] = time.perf_counter() - t
        res["info"] = prep.info
    except B.Unavailable as e:
        res.update(status="unavailable", reason=str(e))
        save()
        return 0
    except Exception as e:
        res.update(status="error", reason=f"prepare failed: {type(e).__name__}: {B._short(e)}",
                   traceback=traceback.format_exc()[-4000:])
        save()
        return 0
    save()

    counts0 = {}
    prev = None  # (cost, seconds per call) of the last measured shape
    for i, dims in enumerate(shapes):
        entry = {"dims": dims, "shape": shape_str(dims)}
        res["shapes"].append(entry)
        if prev is not None and args.max_call_s > 0:
            est = prev[1] * _cost(dims) / prev[0]
            if est > args.max_call_s:
                entry.update(status="skipped", reason=f"estimated {est:.0f} s per call (> --max-call-s "
                                                      f"{args.max_call_s:g}) from the previous shape")
                save()
                continue
        try:
            inputs = zm.make_inputs(**dims)
            a = prep.convert(inputs)
            t = time.perf_counter()
            out = prep.run(a)
            first = time.perf_counter() - t
            entry["first_call_ms"] = first * 1e3
            if i == 0:
                res["first_call_s"] = first
                res["time_to_first_result_s"] = res["prepare_s"] + first
                counts0 = backend.compile_counts()
                res["compile_counters"] = {k: {"first_result": v - counts_start[k]} for k, v in counts0.items()}
            if args.phase == "warm":
                entry["status"] = "ok"
                save()
                break
            got = np.asarray(prep.first_output(out))
            ref = reference(i, dims, inputs)
            entry["out_shape"] = list(got.shape)
            if tuple(got.shape) != tuple(ref.shape):
                raise RuntimeError(f"output shape {tuple(got.shape)} != eager's {tuple(ref.shape)}")
            entry["max_rel_err"] = rel_error(got, ref)
            entry.update(_measure(prep.run, a, args.repeat, args.min_time, args.max_time, first,
                                  backend.min_warmups))
            entry["status"] = "ok"
            if zm.bytes_moved is not None:  # memory-bound: the bytes a perfect kernel moves, per second
                entry["gbs"] = zm.bytes_moved(**dims) / (entry["median_ms"] / 1e3) / 1e9
            if zm.flops is not None:  # GEMM-bound: the model's GEMM flops per second
                entry["gflops"] = zm.flops(**dims) / (entry["median_ms"] / 1e3) / 1e9
            entry["compile_counts_after"] = {k: v - counts_start[k] for k, v in backend.compile_counts().items()}
            prev = (_cost(dims), entry["median_ms"] / 1e3)
        except Exception as e:
            entry.update(status="error", reason=f"{type(e).__name__}: {B._short(e)}",
                         traceback=traceback.format_exc()[-3000:])
        save()
    if counts0:
        for k, v in backend.compile_counts().items():
            res["compile_counters"][k]["recompiles"] = v - counts0[k]
        res["recompiles"] = next(iter(res["compile_counters"].values()))["recompiles"]
    ok = [s for s in res["shapes"] if s.get("status") == "ok"]
    res["status"] = "ok" if ok else "error"
    if not ok and "reason" not in res:
        res["reason"] = "; ".join(f"{s['shape']}: {s.get('reason', '')}" for s in res["shapes"])[:800]
    save()
    return 0


# ---------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------


def _versions() -> dict:
    from importlib import metadata
    v = {"python": platform.python_version()}
    for dist, key in [("torch", "torch"), ("onnxruntime", "onnxruntime"), ("onnx", "onnx"),
                      ("openvino", "openvino"), ("apache-tvm", "tvm"), ("braze", "braze"),
                      ("transformers", "transformers"), ("numpy", "numpy")]:
        try:
            v[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            v[key] = None
    return v


def _machine(threads: int) -> dict:
    cpu, flags = None, []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu is None:
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    except OSError:
        cpu = platform.processor() or None
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile",
                       "amx_bf16", "amx_fp16") if f in flags]
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    from braze.runtime.limits import measured_limits
    lim = measured_limits()
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "isa": isa, "platform": platform.platform(),
            "loadavg_at_start": load, "copy_gbs": round(lim.bandwidth_gbs, 1), "gemm_gflops": round(lim.gemm_gflops)}


def _worker_cmd(model, backend, phase, shapes, cache_dir, ref_dir, result, a) -> list[str]:
    return [sys.executable, "-m", "benchmarks.run", "--worker", "--model", model, "--backend", backend,
            "--phase", phase, "--shapes-json", json.dumps(shapes), "--cache-dir", str(cache_dir),
            "--ref-dir", str(ref_dir), "--result", str(result), "--threads", str(a.threads),
            "--repeat", str(a.repeat), "--min-time", str(a.min_time), "--max-time", str(a.max_time),
            "--max-call-s", str(a.max_call_s)]


def _run_worker(cmd, env, timeout, result: Path, log: Path, say) -> dict:
    result.unlink(missing_ok=True)  # never read the previous pair's result
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=fh, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            import signal
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            rc = None
    wall = time.perf_counter() - t0
    try:
        res = json.loads(result.read_text())
    except (OSError, ValueError):
        res = {"status": "error", "shapes": []}
    res["wall_s"] = wall
    if rc is None:
        res["status"] = "timeout" if not any(s.get("status") == "ok" for s in res.get("shapes", [])) else "partial"
        res["reason"] = f"worker killed after --pair-timeout {timeout:g} s" + (
            f" (last step: {res['shapes'][-1]['shape']})" if res.get("shapes") else "")
    elif rc != 0 or res.get("status") == "running":
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        res["status"] = "error"
        res["reason"] = f"worker exited with code {rc}: ...{tail[-600:]}"
    return res


def run_all(a, say=print) -> dict:
    models = a.models
    names = a.backends
    # canonical order, eager first: its outputs are the reference the others load
    names = [n for n in B.BACKENDS if n in names]
    work = Path(tempfile.mkdtemp(prefix="braze-bench-"))
    ref_dir = work / "refs"
    ref_dir.mkdir()
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TVM_NUM_THREADS"):
        env[k] = str(a.threads)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    doc = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "machine": _machine(a.threads), "versions": _versions(),
           "config": {"models": models, "backends": names, "shapes": a.shapes, "repeat": a.repeat,
                      "min_time_s": a.min_time, "max_time_s": a.max_time, "max_call_s": a.max_call_s,
                      "pair_timeout_s": a.pair_timeout, "threads": a.threads,
                      "shape_lists": {m: SHAPES[a.shapes][m] for m in models}},
           "backends": {n: {"label": B.get(n).label, "description": B.get(n).description} for n in names},
           "results": []}
    try:
        for model in models:
            shapes = SHAPES[a.shapes][model]
            for name in names:
                cache = work / "cache" / f"{model}-{name}"
                cache.mkdir(parents=True)
                penv = dict(env, BRAZE_CACHE_DIR=str(cache / "braze"),
                            TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"))
                say(f"  {model:9s} {name:18s} cold ...")
                res = _run_worker(_worker_cmd(model, name, "cold", shapes, cache, ref_dir, work / "r.json", a),
                                  penv, a.pair_timeout, work / "r.json", work / f"{model}-{name}-cold.log", say)
                entry = {"model": model, "backend": name, "status": res.get("status"),
                         "reason": res.get("reason"), "prepare_cold_s": res.get("prepare_s"),
                         "ttfr_cold_s": res.get("time_to_first_result_s"), "recompiles": res.get("recompiles"),
                         "compile_counters": res.get("compile_counters"),
                         "info": res.get("info", {}), "shapes": res.get("shapes", []), "wall_s": res["wall_s"]}
                if B.get(name).warm_cache and res.get("status") in ("ok", "partial"):
                    w = _run_worker(_worker_cmd(model, name, "warm", shapes, cache, ref_dir, work / "w.json", a),
                                    penv, a.pair_timeout, work / "w.json", work / f"{model}-{name}-warm.log", say)
                    entry["prepare_warm_s"] = w.get("prepare_s")
                    entry["ttfr_warm_s"] = w.get("time_to_first_result_s")
                    entry["compile_counters_warm"] = w.get("compile_counters")  # 0 native compiles = cache hit
                    if w.get("status") not in ("ok",):
                        entry["warm_reason"] = w.get("reason")
                    entry["wall_s"] += w["wall_s"]
                for s in entry["shapes"]:
                    s.pop("traceback", None)
                doc["results"].append(entry)
                say("    " + _one_line(entry))
    finally:
        if a.keep_work:
            say(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return doc


def _one_line(e) -> str:
    if e["status"] not in ("ok", "partial"):
        return f"{e['status']}: {e.get('reason')}"
    parts = []
    for s in e["shapes"]:
        if s.get("status") == "ok":
            parts.append(f"{s['shape']}: {s['median_ms']:.2f} ms (err {s['max_rel_err']:.1e})")
        else:
            parts.append(f"{s['shape']}: {s.get('status')}")
    ttfr = e.get("ttfr_cold_s")
    head = f"first result {ttfr:.1f} s cold" if ttfr is not None else ""
    if e.get("ttfr_warm_s") is not None:
        head += f", {e['ttfr_warm_s']:.1f} s warm"
    return head + "; " + "; ".join(parts)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------


def _grid(doc):
    """{(model, shape): {backend: median_ms}} and the ordered row keys."""
    rows, grid = [], {}
    for e in doc["results"]:
        for s in e["shapes"]:
            key = (e["model"], s["shape"])
            if key not in grid:
                grid[key] = {}
                rows.append(key)
            if s.get("status") == "ok":
                grid[key][e["backend"]] = s["median_ms"]
    return rows, grid


def _fmt_ms(v):
    if v is None:
        return "n/a"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _fmt_s(v):
    return "n/a" if v is None else f"{v:.1f}"


def table_rows(doc):
    backends = doc["config"]["backends"]
    peers = [b for b in backends if b in B.PEERS]
    has_braze = "braze" in backends
    # plug-in mode against braze.compile and the two references the issue names
    plugin_refs = [b for b in ("braze", "eager", "inductor-freezing") if b in backends] \
        if "braze-plugin" in backends else []
    headers = ["model", "shape"] + [f"{b} ms" for b in backends]
    # the bf16 policy against braze's float32 and the 16-bit peers
    half_refs = [b for b in ["braze", *B.HALF_PEERS] if b in backends] if "braze-bf16" in backends else []
    if has_braze:
        headers += [f"braze/{p}" for p in peers]
    headers += [f"plugin/{p}" for p in plugin_refs]
    headers += [f"braze-bf16/{p}" for p in half_refs]
    rows, grid = _grid(doc)
    limits = {(e["model"], s["shape"], e["backend"]): _limit_cell(s, doc["machine"]) for e in doc["results"]
              for s in e["shapes"] if "gbs" in s or "gflops" in s}
    if limits:
        headers += ["braze at the machine limit", "best peer at the limit"]
    body = []
    for key in rows:
        g = grid[key]
        r = [key[0], key[1]] + [_fmt_ms(g.get(b)) for b in backends]
        if has_braze:
            for p in peers:
                r.append(f"{g['braze'] / g[p]:.2f}x" if "braze" in g and p in g else "—")
        for p in plugin_refs:  # the headers' order: ratios, plugin ratios, bf16 ratios, then the machine limits
            r.append(f"{g['braze-plugin'] / g[p]:.2f}x" if "braze-plugin" in g and p in g else "—")
        for p in half_refs:
            r.append(f"{g['braze-bf16'] / g[p]:.2f}x" if "braze-bf16" in g and p in g else "—")
        if limits:
            best = min((p for p in peers if p in g), key=lambda p: g[p], default=None)
            r += [limits.get((*key, "braze"), "—"), f"{best}: {limits[(*key, best)]}" if (*key, best) in limits else "—"]
        body.append(r)
    return headers, body


def _limit_cell(shape: dict, machine: dict) -> str:
    """The rate nearer its machine limit: memory GB/s against the measured copy bandwidth, or GEMM
    GFLOP/s against the measured GEMM peak (a roofline: the other resource has slack)."""
    copy, peak = machine.get("copy_gbs"), machine.get("gemm_gflops")
    cells = []
    if "gbs" in shape:
        cells.append((shape["gbs"] / copy if copy else 0.0, f"{shape['gbs']:.1f} GB/s", copy and f"of {copy:g} copy"))
    if "gflops" in shape:
        cells.append((shape["gflops"] / peak if peak else 0.0, f"{shape['gflops']:.0f} GFLOP/s", peak and f"of {peak:g} GEMM"))
    frac, rate, of = max(cells, key=lambda c: c[0])
    return f"{rate} ({100 * frac:.0f}% {of})" if of else rate


def prep_rows(doc):
    headers = ["model", "backend", "status", "first result cold s", "warm s", "recompiles", "max rel err"]
    body = []
    for e in doc["results"]:
        errs = [s["max_rel_err"] for s in e["shapes"] if s.get("status") == "ok"]
        body.append([e["model"], e["backend"], e["status"], _fmt_s(e.get("ttfr_cold_s")), _fmt_s(e.get("ttfr_warm_s")),
                     _recompiles_cell(e), f"{max(errs):.1e}" if errs else "n/a"])
    return headers, body


def _recompiles_cell(e) -> str:
    cc = e.get("compile_counters") or {}
    if len(cc) > 1:  # e.g. braze-plugin: dynamo graphs and braze native compiles
        return ", ".join(f"{k} {v.get('recompiles', 'n/a')}" for k, v in cc.items())
    rc = e.get("recompiles")
    return "n/a" if rc is None else str(rc)


MICRO = ("chain_ln", "chain_rms", "block")  # fusion micro-benchmarks, reported apart from the real models


def best_peer_geomean(doc, models=None, ours="braze", peers=None) -> tuple[float, int] | None:
    """Geometric mean over every point ``ours`` and a peer both ran of (best peer time / our time):
    above 1, braze is faster than the best peer on average; and the number of points. ``models``:
    only these models' points; ``peers``: default the float32 peers."""
    import math
    peers = [b for b in doc["config"]["backends"] if b in (B.PEERS if peers is None else peers)]
    rows, grid = _grid(doc)
    logs = [math.log(min(grid[k][p] for p in peers if p in grid[k]) / grid[k][ours]) for k in rows
            if ours in grid[k] and any(p in grid[k] for p in peers) and (models is None or k[0] in models)]
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def notes(doc) -> list[str]:
    out = list(doc.get("remarks", []))
    ran = {e["model"] for e in doc["results"]}
    parts = [("", None), (" (real models)", ran - set(MICRO)), (" (fusion micro-benchmarks)", ran & set(MICRO))]
    lines = []
    for label, models in parts:
        gm = best_peer_geomean(doc, models)
        if gm and (models is None or 0 < len(models) < len(ran)):
            lines.append(f"geometric mean of best peer time / braze time over {gm[1]} points{label}: {gm[0]:.2f} "
                         "(above 1: braze is faster)")
    half = best_peer_geomean(doc, ran - set(MICRO), "braze-bf16", B.HALF_PEERS)
    if half:
        lines.append(f"geometric mean of best 16-bit peer time / braze-bf16 time over {half[1]} points (real models): "
                     f"{half[0]:.2f} (above 1: braze is faster)")
    out[:0] = lines
    for e in doc["results"]:
        if e["status"] not in ("ok",) and e.get("reason"):
            out.append(f"{e['model']} / {e['backend']}: {e['status']}: {e['reason']}")
        for s in e["shapes"]:
            if s.get("status") not in ("ok", None) and e["status"] in ("ok", "partial"):
                out.append(f"{e['model']} / {e['backend']} / {s['shape']}: {s['status']}: {s.get('reason')}")
    return out


def write_results(out: str | Path, stem: str, doc: dict, to_markdown) -> str:
    """``doc`` as ``out/stem.json`` and its markdown as ``out/stem.md``; returns the markdown."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    md = to_markdown(doc)
    (out / f"{stem}.md").write_text(md)
    return md


def _md_table(headers, body) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(lines)


def to_markdown(doc) -> str:
    m, v = doc["machine"], doc["versions"]
    load = m.get("loadavg_at_start")
    head = (f"Run {doc['date']} on {m['cpu']} ({m['cores']} cores, {m['threads']} threads per backend"
            f"{', ISA ' + ' '.join(m['isa']) if m.get('isa') else ''}"
            f"{f', load average {load[0]:.1f} at start' if load else ''}); "
            f"torch {v.get('torch')}, onnxruntime {v.get('onnxruntime')}, "
            f"openvino {v.get('openvino') or 'not installed'}, tvm {v.get('tvm') or 'not installed'}, "
            f"braze {v.get('braze')}. Shapes: `{doc['config']['shapes']}`; median of >= {doc['config']['repeat']} "
            f"runs and >= {doc['config']['min_time_s']:g} s after warm-up.")
    parts = [head, "", "Median latency (ms; lower is better). `braze/X` = braze time / X time "
             "(below 1.00x: braze is faster); `plugin/X` the same for braze-plugin.", "", _md_table(*table_rows(doc)), "",
             "Time to first result (prepare + first call, s) with a fresh cache (cold) and in a second process "
             "with that cache (warm); recompiles after the first shape; max |err| / max |ref| vs eager over "
             "all shapes.", "", _md_table(*prep_rows(doc))]
    n = notes(doc)
    if n:
        parts += ["", "Notes:", ""] + [f"- {x}" for x in n]
    parts += ["", "Backends: " + "; ".join(f"**{k}**: {d['description']}" for k, d in doc["backends"].items()) + "."]
    return "\n".join(parts) + "\n"


def print_tables(doc, console=None):
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(to_markdown(doc))
        return
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    for title, (headers, body) in [("median latency, ms (braze/X: below 1 = braze faster)", table_rows(doc)),
                                   ("preparation, recompiles, accuracy", prep_rows(doc))]:
        t = Table(*headers, title=title)
        for r in body:
            t.add_row(*r)
        console.print(t)
    for n in notes(doc):
        console.print("note: " + n, markup=False, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _list(kind, valid):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in valid]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {kind} {', '.join(bad)}; choose from {', '.join(valid)}")
        return items
    return parse


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=_list("model", MODELS), default=list(DEFAULT_MODELS),
                    help=f"comma-separated zoo models from {','.join(MODELS)} (default: {','.join(DEFAULT_MODELS)})")
    ap.add_argument("--backends", type=_list("backend", list(B.BACKENDS)), default=list(B.DEFAULT_BACKENDS),
                    help="comma-separated backends (default: %s). " % ",".join(B.DEFAULT_BACKENDS)
                    + " ".join(f"{n}: {b.description}." for n, b in B.BACKENDS.items()))
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16 adds the 16-bit rows (%s): braze's bf16 policy and bf16 model against eager and "
                         "inductor on the bf16 model and OpenVINO at its default precision. They run bf16 only where "
                         "the CPU has AVX512_BF16 or AMX; the machine line names the CPU's features"
                         % ",".join(B.HALF_BACKENDS))
    ap.add_argument("--shapes", choices=list(SHAPES), default="full",
                    help="shape set: full (4 per model, ~20 min for everything on 2 cores), quick (2 small "
                         "ones per model), tiny (1 small one per model, for smoke tests)")
    ap.add_argument("--repeat", type=int, default=5, help="minimum timed runs per shape after warm-up (default 5)")
    ap.add_argument("--min-time", type=float, default=1.0,
                    help="minimum seconds of timed runs per shape (default 1.0)")
    ap.add_argument("--max-time", type=float, default=30.0,
                    help="stop timing a shape after this many seconds, if >= min(repeat, 3) runs are done "
                         "(default 30)")
    ap.add_argument("--max-call-s", type=float, default=15.0,
                    help="skip a shape whose per-call time, extrapolated from the previous shape, exceeds this "
                         "(0 = never skip; default 15)")
    ap.add_argument("--pair-timeout", type=float, default=900.0,
                    help="kill a (model, backend) worker after this many seconds (default 900)")
    ap.add_argument("--threads", type=int, default=2, help="threads per backend (default 2)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help=f"directory for latest.json and latest.md (default {DEFAULT_OUT.relative_to(ROOT)})")
    ap.add_argument("--update-readme", action="store_true", help="copy latest.md into README.md afterwards")
    ap.add_argument("--keep-work", action="store_true", help="keep the temp dir with caches and worker logs")
    w = ap.add_argument_group("worker (internal)")
    w.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    w.add_argument("--model", help=argparse.SUPPRESS)
    w.add_argument("--backend", help=argparse.SUPPRESS)
    w.add_argument("--phase", choices=["cold", "warm"], default="cold", help=argparse.SUPPRESS)
    w.add_argument("--shapes-json", help=argparse.SUPPRESS)
    w.add_argument("--cache-dir", help=argparse.SUPPRESS)
    w.add_argument("--ref-dir", help=argparse.SUPPRESS)
    w.add_argument("--result", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.worker:
        return worker(a)
    if a.precision == "bf16":
        a.backends += [b for b in B.HALF_BACKENDS if b not in a.backends]
    say = lambda m: print(m, flush=True)  # noqa: E731
    say(f"braze benchmarks: models {','.join(a.models)}; backends {','.join(a.backends)}; shapes {a.shapes}; "
        f"{a.threads} threads")
    doc = run_all(a, say)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "latest.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (a.out / "latest.md").write_text(to_markdown(doc))
    print_tables(doc)
    say(f"wrote {a.out / 'latest.json'} and {a.out / 'latest.md'}")
    if a.update_readme:
        from .update_readme import update
        update(a.out / "latest.md")
        say("updated README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
