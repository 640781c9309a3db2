"""The CUDA target on a real GPU, as one prepared run (the `device` tool lends a GPU for minutes).

    python scripts/gpu_check.py [--compile-only] [--models bert,gpt2,llama,resnet50,mlp] [--out DIR]
                                [--inductor bert,gpt2,llama,resnet50] [--plugin bert,gpt2] [--profile bert]
                                [--no-training] [--no-row-kernels] [--artifacts DIR] [--reps 30]

With no options it runs the whole check (3.3 minutes on an H200 with inductor on BERT and GPT-2
only; inductor's compiles are the longest part). On the device tool:
`PYTHONPATH=. python3 scripts/gpu_check.py --artifacts .gpu_artifacts --reps 20`, the artifacts
made here first by `--prepare-artifacts .gpu_artifacts`.

For each zoo model: export it, compile it with braze for this machine's GPU (``target="cuda"``;
with ``--compile-only``, for cuda:sm_90, which needs no GPU), run it at three shapes against
torch CUDA eager in float32 (TF32 off), count braze's native compiles across the shapes (one
compile must serve them all), and time braze, eager and inductor (``torch.compile``) at the
middle shape, all with CUDA tensors in and out (``braze_numpy_ms``: braze called with NumPy
arrays, so its inputs are copied to the GPU and its outputs back).

``--plugin`` models also run through ``torch.compile(backend="braze", dynamic=True)`` on CUDA
tensors: correct at the three shapes, braze's native compiles and PyTorch's fallback warnings
counted, timed at the middle shape. ``--profile`` models get a kernel breakdown (torch.profiler,
whose CUPTI trace sees braze's kernels too: they run in the same primary context): kernels per
call, their GPU time against the call's wall time, and the costliest kernels, for braze and for
inductor.

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


def rel_err(got, ref) -> float:
    """braze.testing.rel_error (max |got - ref| / max |ref|) of NumPy arrays or torch tensors, on the GPU too."""
    from braze.testing import rel_error

    def host(t):
        return t.detach().float().cpu().numpy() if hasattr(t, "detach") else t
    return rel_error(host(got), host(ref))


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
    except Exception as e:  # an older torch may not prove some of the zoo's ranges: let it choose those
        import re
        bad = set(re.findall(r"\w+", (re.search(r"Constraints violated \(([^)]*)\)", str(e)) or [None, ""])[1]))
        report(model=name, event="export_retry", dims_left_to_torch=sorted(bad), error=f"{type(e).__name__}: "
               f"{str(e)[:300]}")
        auto = tuple({i: torch.export.Dim.AUTO if getattr(d, "__name__", None) in bad else d for i, d in x.items()}
                     for x in zm.dynamic_shapes)
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
        err = rel_err(got, ref)
        report(model=name, event="correct", dims=dims, shape=list(ref.shape), max_rel_err=err, ok=err <= 1e-4,
               finite=bool(np.isfinite(got).all()))
    blas = ctypes.CDLL(str(cm.library.path)).braze_cuda_blas
    blas.restype = ctypes.c_char_p
    report(model=name, event="gemm_library", library=blas().decode())
    dims = shapes[1]
    inputs = zm.make_inputs(**dims)
    host = [x.numpy() for x in inputs]
    dev = [x.cuda() for x in inputs]
    with torch.no_grad():  # CUDA tensors in: the outputs are CUDA tensors, nothing crosses the bus
        on_gpu = first(cm(*dev))
        ref = first(gpu(*dev)).float()
    err = rel_err(on_gpu, ref)
    report(model=name, event="correct_cuda_tensors", dims=dims, device=str(on_gpu.device), max_rel_err=err,
           ok=err <= 1e-4 and on_gpu.is_cuda)
    report(model=name, event="recompiles", native_compiles=stats()["native_compiles"] - compiles0,
           shapes=len(shapes))
    sync = torch.cuda.synchronize
    with torch.no_grad():
        t_host = median_ms(lambda: cm(*host), args.reps, sync)
        t_braze = median_ms(lambda: cm(*dev), args.reps, sync)
        t_eager = median_ms(lambda: gpu(*dev), args.reps, sync)
        t_ind = None
        if name in args.inductor:
            ind = torch.compile(gpu)
            t = time.perf_counter()
            ind(*dev)
            sync()
            report(model=name, event="inductor_compiled", seconds=round(time.perf_counter() - t, 1))
            t_ind = median_ms(lambda: ind(*dev), args.reps, sync)
    report(model=name, event="latency", dims=dims, braze_ms=round(t_braze, 3), braze_numpy_ms=round(t_host, 3),
           eager_ms=round(t_eager, 3),
           inductor_ms=None if t_ind is None else round(t_ind, 3),
           braze_over_eager=round(t_braze / t_eager, 2),
           braze_over_inductor=None if t_ind is None else round(t_braze / t_ind, 2))
    if name in args.profile:
        with torch.no_grad():
            report(model=name, event="profile", runner="braze", dims=dims, **kernel_profile(lambda: cm(*dev)))
            if t_ind is not None:
                report(model=name, event="profile", runner="inductor", dims=dims,
                       **kernel_profile(lambda: ind(*dev)))
    if name in args.plugin:
        check_plugin(name, zm, gpu, shapes, args, report)


def kernel_profile(fn, calls: int = 5) -> dict:
    """GPU kernels per call of fn, their summed GPU time against the call's wall time, and the 12
    costliest (torch.profiler: CUPTI sees every kernel of the process's context, braze's included)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / calls
    kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    def us(e):
        return float(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) or 0.0)
    by_name: dict[str, list] = {}
    for e in kernels:
        c = by_name.setdefault(e.name, [0, 0.0])
        c[0] += 1
        c[1] += us(e)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]
    return {"kernels_per_call": round(len(kernels) / calls, 1), "gpu_ms_per_call": round(sum(map(us, kernels)) /
            calls / 1e3, 3), "wall_ms_per_call": round(wall * 1e3, 3),
            "top": [{"kernel": k[:80], "per_call": round(n / calls, 1), "ms_per_call": round(t / calls / 1e3, 4)}
                    for k, (n, t) in top]}


def check_plugin(name: str, zm, gpu, shapes, args, report: Report) -> None:
    """torch.compile(backend="braze") on CUDA tensors: correct at every shape, compiles counted, timed."""
    import warnings

    import torch

    from braze.runtime import stats
    torch._dynamo.reset()
    if "braze" not in torch._dynamo.list_backends():  # braze on PYTHONPATH, not installed: no entry point
        from torch._dynamo.backends.registry import register_backend

        from braze.plugin import backend
        register_backend(name="braze")(backend)
        report(model=name, event="plugin_backend", registered="by gpu_check (braze is not pip-installed here)")
    f = torch.compile(gpu, backend="braze", dynamic=True)
    c0 = stats()["native_compiles"]
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        t = time.perf_counter()
        for i, dims in enumerate(shapes):
            dev = [x.cuda() for x in zm.make_inputs(**dims)]
            got, ref = first(f(*dev)), first(gpu(*dev))
            if i == 0:
                report(model=name, event="plugin_first_call", seconds=round(time.perf_counter() - t, 1))
            err = rel_err(got, ref)
            report(model=name, event="plugin_correct", dims=dims, device=str(got.device), max_rel_err=err,
                   ok=err <= 1e-4 and got.is_cuda)
        report(model=name, event="plugin_recompiles", native_compiles=stats()["native_compiles"] - c0,
               shapes=len(shapes), torch_warnings=sorted({str(w.message)[:200] for w in caught
                                                          if "braze" in str(w.message)}))
        dev = [x.cuda() for x in zm.make_inputs(**shapes[1])]
        t_plugin = median_ms(lambda: f(*dev), args.reps, torch.cuda.synchronize)
    report(model=name, event="plugin_latency", dims=shapes[1], plugin_ms=round(t_plugin, 3))


ROW_KERNELS = {  # row kernels at sizes where memory, not launches, bounds them: name -> (rows, row length)
    "layer_norm": (32768, 768),
    "softmax": (16384, 2048),
    "gelu": (32768, 3072),  # a pointwise kernel, for comparison
    "relu": (32768, 3072),  # one with next to no math: what the loop and its indexing cost
}


def check_row_kernels(args, report: Report) -> None:
    """Row kernels (one block per row, the block's reductions by warp shuffles) and a pointwise one,
    at large sizes: time per call and bytes moved per second (each input read once, the output
    written once), against torch eager. Whether a stitch kernel should keep its row in shared
    memory rather than read it again from L1/L2 shows here: near the copy rate, it need not."""
    import torch

    import braze
    nn, Dim = torch.nn, torch.export.Dim
    mods = {"layer_norm": nn.LayerNorm(768), "softmax": nn.Softmax(-1), "gelu": nn.GELU(), "relu": nn.ReLU()}
    for name, (rows, n) in ROW_KERNELS.items():
        m = mods[name].eval()
        cm = braze.compile(m, (torch.randn(4, n),), ({0: Dim("rows", min=1, max=1 << 20)},), target="cuda")
        gpu = m.cuda()
        x = torch.randn(rows, n, device="cuda")
        with torch.no_grad():
            err = rel_err(cm(x), gpu(x))
            t_b = median_ms(lambda: cm(x), args.reps, torch.cuda.synchronize)
            t_e = median_ms(lambda: gpu(x), args.reps, torch.cuda.synchronize)
        gb = 2 * x.numel() * 4 / 1e9
        report(model=f"row:{name}", event="row_kernel", shape=[rows, n], max_rel_err=err, braze_ms=round(t_b, 4),
               eager_ms=round(t_e, 4), braze_gb_s=round(gb / t_b * 1e3), eager_gb_s=round(gb / t_e * 1e3))


def check_training(report: Report) -> None:
    """A training step through torch.compile(backend="braze") on CUDA tensors: the loss and every
    gradient against eager's, at three batch sizes (forward and backward graphs compile for the GPU)."""
    import copy
    import warnings

    import torch

    from braze.runtime import stats
    torch.manual_seed(0)
    nn = torch.nn
    eager = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 10)).cuda()
    model = copy.deepcopy(eager)
    torch._dynamo.reset()
    step = torch.compile(lambda m, x, y: nn.functional.cross_entropy(m(x), y), backend="braze", dynamic=True)
    c0 = stats()["native_compiles"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in (1, 16, 37):
            x, y = torch.randn(b, 64, device="cuda"), torch.randint(0, 10, (b,), device="cuda")
            for m in (eager, model):
                m.zero_grad()
            ref = nn.functional.cross_entropy(eager(x), y)
            ref.backward()
            loss = step(model, x, y)
            loss.backward()
            err = max(rel_err(p.grad, q.grad) for p, q in zip(model.parameters(), eager.parameters()))
            lerr = rel_err(loss, ref)
            report(model="train:mlp", event="train_step", batch=b, loss_rel_err=lerr, max_grad_rel_err=err,
                   ok=max(err, lerr) <= 1e-4)
    report(model="train:mlp", event="train_compiles", native_compiles=stats()["native_compiles"] - c0,
           torch_warnings=sorted({str(w.message)[:200] for w in caught if "braze" in str(w.message)}))


def _small_models():
    """A small transformer block and a small conv net (random weights, seeded), with dims."""
    import torch
    nn, F, Dim = torch.nn, torch.nn.functional, torch.export.Dim
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c=64, heads=4):
            super().__init__()
            self.heads, self.emb, self.ln1, self.ln2 = heads, nn.Embedding(100, c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, ids):
            x = self.emb(ids)
            b, s, c = x.shape
            q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, -1))
            att = torch.softmax((q @ k.transpose(-1, -2)) * (c // self.heads) ** -0.5, -1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, c))
            return x + self.mlp(self.ln2(x))

    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.c2, self.c3 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.Conv2d(32, 32, 1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            y = F.relu(self.c2(F.relu(self.b1(self.c1(x)))))
            return self.fc((y + self.c3(y)).mean((2, 3)))

    b = Dim("batch", min=1, max=64)
    return {"block": (Block().eval(), (torch.randint(0, 100, (2, 16)),), ({0: b, 1: Dim("seq", min=1, max=512)},),
                      [(1, 1), (2, 16), (3, 37)], lambda n, s: (torch.randint(0, 100, (n, s)),)),
            "conv": (Conv().eval(), (torch.randn(2, 3, 32, 32),), ({0: b, 2: Dim("h", min=8, max=256),
                                                                    3: Dim("w", min=8, max=256)},),
                     [(1, 9, 9), (2, 32, 32), (3, 45, 23)], lambda n, h, w: (torch.randn(n, 3, h, w),))}


def prepare_artifacts(out: Path) -> None:
    """Cross-compile the small models for cuda:sm_90 here (no GPU) into artifacts, each with the
    inputs and torch CPU's outputs at three shapes (check.npz), for --artifacts on the GPU machine."""
    import numpy as np
    import torch

    import braze
    for name, (m, ex, dyn, shapes, make) in _small_models().items():
        cm = braze.compile(m, ex, dyn, target="cuda:sm_90")
        d = out / name
        cm.save(d)
        arrays = {}
        for i, dims in enumerate(shapes):
            x = make(*dims)
            with torch.no_grad():
                arrays[f"in{i}"], arrays[f"out{i}"] = x[0].numpy(), m(*x).numpy()
        np.savez(d / "check.npz", **arrays)
        print(f"wrote {d}")


def check_artifacts(root: Path, report: Report) -> None:
    """Load each artifact of --prepare-artifacts with braze.load and compare it with torch CPU's outputs."""
    import numpy as np

    import braze
    for d in sorted(p for p in root.iterdir() if (p / "check.npz").is_file()):
        try:
            model = braze.load(d)
            data = np.load(d / "check.npz")
            for i in range(len(data.files) // 2):
                got, ref = np.asarray(model(data[f"in{i}"])), data[f"out{i}"]
                err = rel_err(got, ref)
                report(model=f"artifact:{d.name}", event="correct", dims=list(data[f"in{i}"].shape),
                       max_rel_err=err, ok=err <= 1e-4)
        except Exception as e:
            report(model=f"artifact:{d.name}", event="error", error=f"{type(e).__name__}: {e}")


def table(rows: list[dict]) -> str:
    env = next((r for r in rows if r.get("event") == "env"), {})
    lines = [f"{env.get('gpu')}, driver CUDA {env.get('driver')}, NVRTC {env.get('nvrtc')}, torch {env.get('torch')}; "
             "medians of the timed calls, one run; torch eager and inductor in float32 with TF32 off", "",
             "| model | shapes correct (max rel err) | recompiles | braze ms | eager ms | inductor ms | "
             "braze/eager | braze/inductor |", "|---|---|---|---|---|---|---|---|"]
    main = ("compiled", "correct", "latency", "error")  # the other events have tables of their own, below
    for m in dict.fromkeys(r["model"] for r in rows if "model" in r and r.get("event") in main):
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
    plug = [m for m in dict.fromkeys(r["model"] for r in rows if r.get("event") == "plugin_correct")]
    if plug:
        lines += ["", "torch.compile(backend=\"braze\", dynamic=True) on CUDA tensors:", "",
                  "| model | shapes correct (max rel err) | braze compiles | PyTorch fallback warnings | ms | "
                  "/ braze.compile | / inductor |", "|---|---|---|---|---|---|---|"]
        for m in plug:
            mine = [r for r in rows if r.get("model") == m]
            corr = [r for r in mine if r["event"] == "plugin_correct"]
            rec = next((r for r in mine if r["event"] == "plugin_recompiles"), {})
            ms = next((r["plugin_ms"] for r in mine if r["event"] == "plugin_latency"), None)
            lat = next((r for r in mine if r["event"] == "latency"), {})
            ratio = lambda k: round(ms / lat[k], 2) if ms and lat.get(k) else "-"  # noqa: E731
            errs = ", ".join(f"{r['max_rel_err']:.1e}" for r in corr)
            lines.append(f"| {m} | {sum(r['ok'] for r in corr)}/{len(corr)} ({errs}) | "
                         f"{rec.get('native_compiles', '-')} | {len(rec.get('torch_warnings', []))} | {ms or '-'} | "
                         f"{ratio('braze_ms')} | {ratio('inductor_ms')} |")
    tr = [r for r in rows if r.get("event") == "train_step"]
    if tr:
        comp = next((r for r in rows if r.get("event") == "train_compiles"), {})
        lines += ["", "A training step (torch.compile(backend=\"braze\"), CUDA tensors) against eager, "
                  f"{comp.get('native_compiles', '-')} braze compiles, "
                  f"{len(comp.get('torch_warnings', []))} PyTorch fallback warnings:", "",
                  "| batch | loss rel err | max grad rel err | ok |", "|---|---|---|---|"]
        lines += [f"| {r['batch']} | {r['loss_rel_err']:.1e} | {r['max_grad_rel_err']:.1e} | {r['ok']} |" for r in tr]
    rk = [r for r in rows if r.get("event") == "row_kernel"]
    if rk:
        lines += ["", "Row and pointwise kernels at large sizes (input read once, output written once):", "",
                  "| kernel | shape | max rel err | braze ms | braze GB/s | eager ms | eager GB/s |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model'][4:]} | {r['shape'][0]} x {r['shape'][1]} | {r['max_rel_err']:.1e} | "
                  f"{r['braze_ms']} | {r['braze_gb_s']} | {r['eager_ms']} | {r['eager_gb_s']} |" for r in rk]
    prof = [r for r in rows if r.get("event") == "profile"]
    if prof:
        lines += ["", "Kernels per call (torch.profiler), GPU time summed against the call's wall time:", "",
                  "| model | runner | kernels per call | GPU ms | wall ms | costliest kernels (ms per call) |",
                  "|---|---|---|---|---|---|"]
        for r in prof:
            top = "; ".join(f"{t['kernel'][:40]} {t['ms_per_call']}" for t in r["top"][:4])
            lines.append(f"| {r['model']} | {r['runner']} | {r['kernels_per_call']} | {r['gpu_ms_per_call']} | "
                         f"{r['wall_ms_per_call']} | {top} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile-only", action="store_true", help="compile for cuda:sm_90; no GPU needed")
    p.add_argument("--models", default="bert,gpt2,llama,resnet50,mlp")
    p.add_argument("--inductor", default="bert,gpt2,llama,resnet50",
                   help="models also timed with torch.compile (inductor)")
    p.add_argument("--plugin", default="bert,gpt2",
                   help="models also run through torch.compile(backend='braze') on CUDA tensors")
    p.add_argument("--profile", default="bert", help="models whose kernels are profiled (braze and inductor)")
    p.add_argument("--training", action=argparse.BooleanOptionalAction, default=True,
                   help="check a training step through torch.compile(backend='braze') on CUDA tensors against eager")
    p.add_argument("--row-kernels", action=argparse.BooleanOptionalAction, default=True,
                   help="time row kernels (layer norm, softmax) and pointwise ones at large sizes, in GB/s against "
                        "torch eager")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", default=os.environ.get("OUT") or ".")
    p.add_argument("--prepare-artifacts", metavar="DIR", help="cross-compile small models for cuda:sm_90 into "
                   "artifacts under DIR, with their inputs and torch CPU's outputs, and stop (no GPU needed)")
    p.add_argument("--artifacts", metavar="DIR", help="also load and check the artifacts of --prepare-artifacts")
    p.add_argument("--table", metavar="JSONL", nargs="+", help="print the markdown table of earlier runs' "
                   "gpu_check.jsonl files, and stop")
    args = p.parse_args(argv)
    if args.table:
        for f in args.table:
            print(f"### {Path(f).name}\n\n" + table([json.loads(x) for x in Path(f).read_text().splitlines() if x]))
        return 0
    if args.prepare_artifacts:
        prepare_artifacts(Path(args.prepare_artifacts))
        return 0
    for key in ("inductor", "plugin", "profile"):
        setattr(args, key, set(filter(None, getattr(args, key).split(","))))
    report = Report(Path(args.out))
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, for the reference too
    torch.backends.cudnn.allow_tf32 = False
    from braze.codegen.nvrtc import nvrtc_version
    report(event="env", driver=driver_version(), nvrtc="%d.%d" % nvrtc_version(), torch=torch.__version__,
           gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, python=sys.version.split()[0])
    if args.artifacts:
        check_artifacts(Path(args.artifacts), report)
    if args.training and not args.compile_only:
        try:
            check_training(report)
        except Exception as e:
            report(model="train:mlp", event="error", error=f"{type(e).__name__}: {e}",
                   trace=traceback.format_exc()[-3000:])
    if args.row_kernels and not args.compile_only:
        try:
            check_row_kernels(args, report)
        except Exception as e:
            report(model="row", event="error", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-3000:])
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
