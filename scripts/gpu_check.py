"""The CUDA target on a real GPU, as one prepared run (the `device` tool lends a GPU for minutes).

    python scripts/gpu_check.py [--compile-only] [--models bert,gpt2,resnet50,llama] [--out DIR]
                                [--inductor bert,gpt2] [--reps 30]

For each zoo model: export it, compile it with braze for this machine's GPU (``target="cuda"``;
with ``--compile-only``, for cuda:sm_90, which needs no GPU), run it at three shapes against
torch CUDA eager in float32 (TF32 off), count braze's native compiles across the shapes (one
compile must serve them all), and time braze, eager and inductor (``torch.compile``) at the
middle shape. braze's time includes copying the inputs to the GPU and the outputs back (it is
called with NumPy arrays); eager's and inductor's start and end on the GPU.

Every result is one JSON line in OUT/gpu_check.jsonl, written as it comes, so a run cut short
still reports what it did; OUT/gpu_check.md is the table. OUT defaults to $OUT, else ".".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {  # three shapes per model: 1 and odd sizes included; the middle one is timed
    "bert": [{"batch": 1, "seq": 7}, {"batch": 2, "seq": 64}, {"batch": 3, "seq": 129}],
    "gpt2": [{"batch": 1, "seq": 9}, {"batch": 2, "seq": 64}, {"batch": 1, "seq": 127}],
    "llama": [{"batch": 1, "seq": 5}, {"batch": 2, "seq": 64}, {"batch": 1, "seq": 131}],
    # (h - 1) // 2 odd: torch 2.11's export guards ResNet's sizes so (2.13's does not)
    "resnet50": [{"batch": 1, "height": 67, "width": 67}, {"batch": 2, "height": 128, "width": 128},
                 {"batch": 3, "height": 99, "width": 115}],
    "mlp": [{"batch": 1}, {"batch": 16}, {"batch": 37}],
}


class Report:
    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "gpu_check.jsonl"
        self.path.write_text("")
        self.rows: list[dict] = []

    def __call__(self, **row):
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def driver_version() -> str:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        lib.cuDriverGetVersion(ctypes.byref(v))
        return f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError as e:
        return f"none ({e})"


def median_ms(fn, reps: int, sync) -> float:
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def check_model(name: str, args, report: Report) -> None:
    import copy

    import numpy as np
    import torch

    import braze
    from braze import zoo
    from braze.runtime import stats

    zm = zoo.get(name)
    t0 = time.perf_counter()
    try:
        ep = zoo.export(zm)
    except Exception as e:  # an older torch may not prove the zoo's ranges: let export choose them
        report(model=name, event="export_retry", error=f"{type(e).__name__}: {str(e)[:300]}")
        auto = tuple({i: torch.export.Dim.AUTO for i in d} for d in zm.dynamic_shapes)
        with torch.no_grad():
            ep = torch.export.export(zm.module, zm.example_inputs(), dynamic_shapes=auto, strict=False)
    t1 = time.perf_counter()
    target = "cuda:sm_90" if args.compile_only else "cuda"
    cm = braze.compile(ep, target=target)
    t2 = time.perf_counter()
    report(model=name, event="compiled", target=cm._native.isa, export_s=round(t1 - t0, 2),
           compile_s=round(t2 - t1, 2), kernels=cm._native.cuda_source.count("extern \"C\" __global__"),
           cubin_bytes=len(cm._native.cuda_binary.cubin), ptx_bytes=len(cm._native.cuda_binary.ptx))
    if args.compile_only:
        return
    gpu = copy.deepcopy(zm.module).cuda().eval()
    compiles0 = stats()["native_compiles"]
    shapes = SHAPES[name]
    for dims in shapes:
        inputs = zm.make_inputs(**dims)
        with torch.no_grad():
            ref = first(gpu(*[x.cuda() for x in inputs])).float().cpu().numpy()
        try:
            got = np.asarray(first(cm(*[x.numpy() for x in inputs])))
        except Exception as e:
            report(model=name, event="correct", dims=dims, ok=False, max_rel_err=float("nan"),
                   error=f"{type(e).__name__}: {str(e)[:300]}")
            continue
        err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30)) if ref.size else 0.0
        report(model=name, event="correct", dims=dims, shape=list(ref.shape), max_rel_err=err, ok=err <= 1e-4,
               finite=bool(np.isfinite(got).all()))
    report(model=name, event="recompiles", native_compiles=stats()["native_compiles"] - compiles0,
           shapes=len(shapes))
    dims = shapes[1]
    inputs = zm.make_inputs(**dims)
    host = [x.numpy() for x in inputs]
    dev = [x.cuda() for x in inputs]
    sync = torch.cuda.synchronize
    with torch.no_grad():
        t_braze = median_ms(lambda: cm(*host), args.reps, sync)
        t_eager = median_ms(lambda: gpu(*dev), args.reps, sync)
        t_ind = None
        if name in args.inductor:
            ind = torch.compile(gpu)
            t = time.perf_counter()
            ind(*dev)
            sync()
            report(model=name, event="inductor_compiled", seconds=round(time.perf_counter() - t, 1))
            t_ind = median_ms(lambda: ind(*dev), args.reps, sync)
    report(model=name, event="latency", dims=dims, braze_ms=round(t_braze, 3), eager_ms=round(t_eager, 3),
           inductor_ms=None if t_ind is None else round(t_ind, 3),
           braze_over_eager=round(t_braze / t_eager, 2),
           braze_over_inductor=None if t_ind is None else round(t_braze / t_ind, 2))


def table(rows: list[dict]) -> str:
    lines = ["| model | shapes correct (max rel err) | recompiles | braze ms | eager ms | inductor ms | "
             "braze/eager | braze/inductor |", "|---|---|---|---|---|---|---|---|"]
    for m in dict.fromkeys(r["model"] for r in rows if "model" in r):
        mine = [r for r in rows if r.get("model") == m]
        corr = [r for r in mine if r["event"] == "correct"]
        errs = ", ".join(f"{r['max_rel_err']:.1e}" for r in corr)
        rec = next((r["native_compiles"] for r in mine if r["event"] == "recompiles"), "-")
        lat = next((r for r in mine if r["event"] == "latency"), {})
        fail = next((r["error"].splitlines()[0][:80] for r in mine if r["event"] == "error"), "")
        lines.append(f"| {m} | {sum(r['ok'] for r in corr)}/{len(corr)} ({errs}){' ' + fail if fail else ''} | "
                     f"{rec} | {lat.get('braze_ms', '-')} | {lat.get('eager_ms', '-')} | "
                     f"{lat.get('inductor_ms') or '-'} | {lat.get('braze_over_eager', '-')} | "
                     f"{lat.get('braze_over_inductor') or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile-only", action="store_true", help="compile for cuda:sm_90; no GPU needed")
    p.add_argument("--models", default="bert,gpt2,resnet50,llama")
    p.add_argument("--inductor", default="bert,gpt2", help="models also timed with torch.compile (inductor)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", default=os.environ.get("OUT") or ".")
    args = p.parse_args(argv)
    args.inductor = set(filter(None, args.inductor.split(",")))
    report = Report(Path(args.out))
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, for the reference too
    torch.backends.cudnn.allow_tf32 = False
    from braze.codegen.nvrtc import nvrtc_version
    report(event="env", driver=driver_version(), nvrtc="%d.%d" % nvrtc_version(), torch=torch.__version__,
           gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, python=sys.version.split()[0])
    for name in filter(None, args.models.split(",")):
        try:
            check_model(name, args, report)
        except Exception as e:  # one model's failure must not hide the others' results
            report(model=name, event="error", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-3000:])
    md = table(report.rows)
    (Path(args.out) / "gpu_check.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
