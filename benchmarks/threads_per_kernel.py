"""What a per-kernel "threads or not" knob could win: one model compiled three times, its
generated kernels' parallel loops as the cost model decides (``GRAIN``, the default), all with
threads, or none with threads (oneDNN's products keep their threads in all three).

    python -m benchmarks.threads_per_kernel [--models depthwise,bert,llama] [--shapes full]
                                            [--threads 2] [--min-time 0.5] [--out benchmarks/results]

Per model, in one process, the three libraries built with ``debug=3`` (each kernel's time counted
in C), per shape: every library warmed up, then called in turn, the order alternating each round;
the medians of the wall times per call, and per generated kernel its mean time per call from the
counters. ``best per kernel`` sums each kernel's faster of "all" and "none": what a per-kernel
choice between the two would reach (a per-loop choice could do better, as the default already
makes one per loop). Writes ``threads_per_kernel.json`` and ``.md``.
"""

from __future__ import annotations

import importlib
import statistics
import time

from .harness import per_model_main, per_model_markdown
from .run import shape_str

DEFAULT_MODELS = ["depthwise", "bert", "llama"]
VARIANTS = {"default": None, "all": 1, "none": 1 << 62}  # GRAIN: the default's, threads from 1 unit, never
LIBRARY_KERNELS = ("conv", "gemm", "matmul", "dnnl")  # labels of oneDNN's calls: not generated


def _compile(zm, grain):
    import braze
    par = importlib.import_module("braze.schedule.parallelize")
    default = par.GRAIN
    par.GRAIN = default if grain is None else grain
    try:
        return braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes,
                             options={"debug": 3})
    finally:
        par.GRAIN = default


def _kernel_seconds(cm) -> dict:
    return {r.label: r.seconds for r in cm.profile() if not any(w in r.label for w in LIBRARY_KERNELS)}


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    from braze import zoo
    zm = zoo.get(name)
    libs = {k: _compile(zm, g) for k, g in VARIANTS.items()}
    rows = []
    with torch.no_grad():
        for dims in shapes:
            x = zm.make_inputs(**dims)
            for cm in libs.values():
                for _ in range(5):
                    cm(*x)
            t = time.perf_counter()
            libs["default"](*x)
            calls = max(1, min(200, int(0.02 / max(time.perf_counter() - t, 1e-6))))  # ~20 ms per sample
            before = {k: _kernel_seconds(cm) for k, cm in libs.items()}
            wall = {k: [] for k in libs}
            t0, rounds = time.perf_counter(), 0
            while rounds < 10 or time.perf_counter() - t0 < min_time:
                for k in (list(libs) if rounds % 2 else list(libs)[::-1]):
                    t = time.perf_counter()
                    for _ in range(calls):
                        libs[k](*x)
                    wall[k].append((time.perf_counter() - t) / calls)
                rounds += 1
            n = rounds * calls
            per = {k: {lbl: (s - before[k].get(lbl, 0.0)) / n for lbl, s in _kernel_seconds(cm).items()}
                   for k, cm in libs.items()}
            gen = {k: sum(v.values()) * 1e3 for k, v in per.items()}
            best = sum(min(per["all"][lbl], per["none"][lbl]) for lbl in per["default"]) * 1e3
            row = {"shape": shape_str(dims), "dims": dims, "rounds": rounds,
                   **{f"{k}_ms": statistics.median(v) * 1e3 for k, v in wall.items()},
                   **{f"kernels_{k}_ms": v for k, v in gen.items()}, "kernels_best_ms": best}
            rows.append(row)
            print(f"  {name} {shape_str(dims)}: wall ms default {row['default_ms']:.4f}, all {row['all_ms']:.4f}, "
                  f"none {row['none_ms']:.4f}; generated kernels ms default {gen['default']:.4f}, "
                  f"best per kernel {best:.4f}", flush=True)
    return {"model": name, "shapes": rows}


def to_markdown(doc: dict) -> str:
    return per_model_markdown(
        doc, "the generated kernels' parallel loops as the cost model decides (default), all with threads "
        "(all), none (none); oneDNN's products the same in all three. Wall: medians per call, the three "
        "called in turn. Kernels: the generated kernels' time per call (debug=3 counters); best: each "
        "kernel's faster of all and none.",
        ["default ms", "all / default", "none / default", "kernels default ms", "kernels all ms",
         "kernels none ms", "kernels best ms", "best kernels / wall"],
        lambda s: [f"{s['default_ms']:.4f}", f"{s['all_ms'] / s['default_ms']:.3f}x",
                   f"{s['none_ms'] / s['default_ms']:.3f}x", f"{s['kernels_default_ms']:.4f}",
                   f"{s['kernels_all_ms']:.4f}", f"{s['kernels_none_ms']:.4f}", f"{s['kernels_best_ms']:.4f}",
                   f"{(s['kernels_default_ms'] - s['kernels_best_ms']) / s['default_ms']:+.1%}"])


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "threads_per_kernel", 0.5)


if __name__ == "__main__":
    raise SystemExit(main())
