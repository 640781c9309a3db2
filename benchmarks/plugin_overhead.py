"""The plug-in's cost per call on small models: torch.compile(backend="braze") against the same
model through braze.compile, in one process. Not inductor here: its libgomp threads spin for
milliseconds after each call, on the cores the next block of braze's calls needs
(benchmarks/run.py compares the peers, each in its own process).

    python -m benchmarks.plugin_overhead [--models chain_rms,block] [--shapes quick] [--threads 2]
                                         [--min-time 2.0] [--out benchmarks/results] [--stem plugin_overhead]

Per shape, blocks of back-to-back calls of each (as many as take the direct call ``BLOCK_S``
seconds; the two in turn, the first alternating) until ``--min-time`` seconds and at least 9 blocks; a backend's time is the median over blocks
of its time per call, and ``plugin / direct`` the median of each block's ratio. Back to back, a direct call starts a few microseconds after the last one ended,
and a plug-in call after dynamo's guards and AOT's wrappers (tens of microseconds): how long
braze's threads spin before they sleep decides whether that call finds them awake
(docs/threads.md).
"""

from __future__ import annotations

import statistics
import sys
import time

from .harness import per_model_main, per_model_markdown
from .run import shape_str

DEFAULT_MODELS = ["chain_rms", "block"]
BLOCK_S = 0.01
MIN_BLOCKS = 9


def _block(fn, x, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*x)
    return (time.perf_counter() - t0) / n


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    import braze
    from braze import zoo
    from braze.testing import rel_error
    zm = zoo.get(name)
    fns = {"direct": braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes),
           "plugin": torch.compile(zm.module, backend="braze", dynamic=True)}
    order = list(fns)
    rows = []
    with torch.no_grad():
        for dims in shapes:  # every graph compiled before any timing
            x = zm.make_inputs(**dims)
            for fn in fns.values():
                for _ in range(3):
                    fn(*x)
        for dims in shapes:
            x = zm.make_inputs(**dims)
            want = zoo.first_output(zm.module(*x)).numpy()
            errs = {k: rel_error(zoo.first_output(fn(*x)).numpy(), want) for k, fn in fns.items()}
            times = {k: [] for k in fns}
            n = max(3, round(BLOCK_S / _block(fns["direct"], x, 3)))
            t0 = time.perf_counter()
            i = 0
            while i < MIN_BLOCKS or time.perf_counter() - t0 < min_time:
                for k in order[i % 2:] + order[:i % 2]:
                    times[k].append(_block(fns[k], x, n))
                i += 1
            med = {k: statistics.median(v) for k, v in times.items()}
            ratio = {"plugin_over_direct": statistics.median(p / q for p, q in zip(times["plugin"], times["direct"]))}
            rows.append({"shape": shape_str(dims), "dims": dims, "blocks": i, "calls_per_block": n,
                         **{f"{k}_us": v * 1e6 for k, v in med.items()}, **ratio,
                         **{f"rel_error_{k}": e for k, e in errs.items()}})
            print(f"  {name} {shape_str(dims)}: " + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in med.items())
                  + f"; plugin / direct {ratio['plugin_over_direct']:.3f}x", flush=True)
    return {"model": name, "shapes": rows}


def to_markdown(doc: dict) -> str:
    return per_model_markdown(
        doc, f"blocks of back-to-back calls (as many as take the direct call {BLOCK_S * 1e3:g} ms) of braze.compile "
             "(direct) and torch.compile(backend='braze') (plugin), in turn; us per call are medians over blocks, "
             "the ratio the median of each block's ratio (below 1.00x: the plug-in is faster).",
        ["direct us", "plugin us", "plugin / direct"],
        lambda s: [f"{s['direct_us']:.1f}", f"{s['plugin_us']:.1f}", f"{s['plugin_over_direct']:.3f}x"])


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "plugin_overhead", 2.0)


if __name__ == "__main__":
    sys.exit(main())
