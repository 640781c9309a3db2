"""One kernel stage's A/B in one process: each model compiled with the default schedule and
without ``--without STAGE``, called in turn, kernel by kernel.

    python -m benchmarks.ab_stage --without jam [--models depthwise] [--shapes full]
                                  [--min-time 2.0] [--out benchmarks/results] [--stem ab_stage]

Both compiles have ``debug=3`` (a time counter around every kernel). Per shape, blocks of calls
alternate between them (the first alternating) until ``--min-time`` seconds and at least 9 blocks;
each block's per-kernel time per call is the difference of the counters around it. ``with /
without`` is the median over blocks of each block's ratio, per kernel and for their sum (below
1.00x: the stage makes it faster). Kernels are named by their fused group (``fused_0``), the same
in both compiles.

Why one process: across two processes the same build's call time moved by up to 1.2x here
(benchmarks/ab_trees.py); two libraries in one process, alternated, see the same machine. To
leave the stage out, this script compiles with ``braze.schedule.KERNEL_STAGES`` swapped for the
list without it, which is what braze reads when it schedules a kernel.
"""

from __future__ import annotations

import argparse
import statistics
import time

from .harness import per_model_main, per_model_markdown
from .run import shape_str

DEFAULT_MODELS = ["depthwise"]
MIN_BLOCKS = 9
BLOCK_S = 0.1  # seconds of calls per block


def _compile(zm, stages):
    import braze
    import braze.schedule as schedule
    default = schedule.KERNEL_STAGES
    schedule.KERNEL_STAGES = stages
    try:
        return braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes,
                             tune="off", options={"debug": 3})
    finally:
        schedule.KERNEL_STAGES = default


def _counters(cm) -> dict:
    return {r.label.rsplit("@", 1)[-1]: r.seconds for r in cm.profile()}


def _block(cm, x, n) -> dict:
    c0 = _counters(cm)
    for _ in range(n):
        cm(*x)
    c1 = _counters(cm)
    per = {k: (v - c0.get(k, 0.0)) / n for k, v in c1.items()}
    per["all kernels"] = sum(per.values())
    return per


def measure_stage(without: str):
    def measure(name: str, shapes: list[dict], min_time: float) -> dict:
        import torch

        import braze.schedule as schedule
        from braze import zoo
        if without not in [s.__name__ for s in schedule.KERNEL_STAGES]:
            raise SystemExit(f"--without {without}: not a kernel stage "
                             f"({', '.join(s.__name__ for s in schedule.KERNEL_STAGES)})")
        zm = zoo.get(name)
        rows = []
        with torch.no_grad():
            cms = [_compile(zm, schedule.KERNEL_STAGES),
                   _compile(zm, tuple(s for s in schedule.KERNEL_STAGES if s.__name__ != without))]
            for dims in shapes:
                x = zm.make_inputs(**dims)
                t0 = time.perf_counter()
                for cm in cms:
                    cm(*x)
                n = max(1, int(BLOCK_S / max(time.perf_counter() - t0, 1e-6) * 2))
                ratios: dict = {}
                times: dict = {}
                blocks, start = 0, time.perf_counter()
                while blocks < MIN_BLOCKS or time.perf_counter() - start < min_time:
                    order = (0, 1) if blocks % 2 == 0 else (1, 0)
                    got = {i: _block(cms[i], x, n) for i in order}
                    for k, t in got[1].items():
                        if t > 0 and k in got[0]:
                            ratios.setdefault(k, []).append(got[0][k] / t)
                            times.setdefault(k, []).append((got[0][k], t))
                    blocks += 1
                kernels = sorted(ratios, key=lambda k: -statistics.median(a for a, _ in times[k]))
                row = {"shape": shape_str(dims), "blocks": blocks, "calls_per_block": n, "kernels": [
                    {"kernel": k, "with_us": statistics.median(a for a, _ in times[k]) * 1e6,
                     "without_us": statistics.median(b for _, b in times[k]) * 1e6,
                     "with_over_without": statistics.median(ratios[k])} for k in kernels]}
                rows.append(row)
                print(f"  {name} {row['shape']}: " + ", ".join(
                    f"{k['kernel']} {k['with_over_without']:.3f}x" for k in row["kernels"][:4]), flush=True)
        return {"model": name, "without": without, "shapes": rows}
    return measure


def to_markdown(doc: dict) -> str:
    without = doc["results"][0]["without"] if doc["results"] else "?"
    return per_model_markdown(
        doc, f"the default schedule (with) and the schedule without stage `{without}`, both debug=3, called in "
        "turn in blocks; per kernel the median time per call and the median of the blocks' ratios (with / "
        "without below 1.00x: the stage makes it faster): all kernels summed, then the four that take longest.",
        ["kernel: with / without (with us, without us)"],
        lambda s: ["; ".join(f"{k['kernel']}: {k['with_over_without']:.3f}x ({k['with_us']:.0f}, "
                             f"{k['without_us']:.0f})" for k in s["kernels"][:5])])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--without", default="jam", help="the kernel stage to leave out (default jam)")
    a, rest = ap.parse_known_args(argv)
    return per_model_main(rest, __doc__, DEFAULT_MODELS, measure_stage(a.without), to_markdown, "ab_stage", 2.0)


if __name__ == "__main__":
    raise SystemExit(main())
