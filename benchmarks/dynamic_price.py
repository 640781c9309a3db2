"""The price of staying dynamic: one dynamic braze compile against a compile specialised
to each shape, and the first call at a shape never seen before.

    python -m benchmarks.dynamic_price [--models llama,bert,resnet50] [--shapes full]
                                       [--threads 2] [--min-time 1.0] [--out benchmarks/results]

Per model, in one process: ``braze.compile`` with the zoo's dynamic dims, called once at
the export example's shape, then at ``WARMUP_SHAPES`` other shapes no row measures (the
first shape's last dim larger by ``FIRST_SHAPES`` and more), so that later shapes are new to it
and what happens once per process is not counted (on the depthwise convnet, an AVX2 VM, the
first new shape in a process took 2.0-2.2x a steady call in two runs; with these calls first,
the median first call at 1x64x64 read 1.87x: ``dynamic_avx2_warm.md``). Then per shape
(benchmarks.run's shape lists):

* first call: the dynamic model's first call at a shape, right after a call at the export
  example's shape (so its threads are awake, as in the steady calls: what is timed is the
  shape's set-up, oneDNN's primitives and the pages of memory no call touched before), over
  / this shape's steady call (the median of ``STEADY_CALLS`` calls at it right after: on this
  2-core VM the same call's time moved by 1.5x within minutes, so a steady time measured later
  made a ratio of two moments). The median of that ratio over this shape and ``FIRST_SHAPES - 1``
  more with its last dim 1, 2, ... larger; beside it the same ratio for a second call at the
  shape right after a call at another shape (the cost of switching shapes, not of a new one);
  and this shape's own first call with its minor page faults (a shape larger than any before
  touches new pages, which the kernel zeroes: braze_arena.h);
* dynamic / static: ``braze.compile`` of the same module with no dynamic dims at this
  shape's inputs, then the two called in turn (interleaved, so machine noise hits both)
  until ``--min-time`` seconds and >= 10 rounds; medians.

Writes ``dynamic.json`` and ``dynamic.md`` to ``--out``.
"""

from __future__ import annotations

import resource
import statistics
import time

from .harness import per_model_main, per_model_markdown, time_once
from .run import shape_str

DEFAULT_MODELS = ["llama", "bert", "resnet50"]
# the shape, then its last dim 1 to 8 larger: single first calls of the depthwise convnet (0.1 ms)
# at new shapes near 1x64x64 read 0.93-1.83x its steady call in repeated runs
FIRST_SHAPES = 9
STEADY_CALLS = 5
WARMUP_SHAPES = 2


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    import braze
    from braze import zoo
    zm = zoo.get(name)
    with torch.no_grad():
        dyn = braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes)
        warm = zm.example_inputs()
        dyn(*warm)
        last = list(shapes[0])[-1]
        for k in range(WARMUP_SHAPES):  # beyond every first-call shape of the smallest row
            dyn(*zm.make_inputs(**dict(shapes[0], **{last: shapes[0][last] + FIRST_SHAPES + k})))
        rows = []
        for dims in shapes:
            last = list(dims)[-1]
            firsts, steadies, ratios, switched, faults = [], [], [], [], None
            for extra in range(FIRST_SHAPES):
                y = zm.make_inputs(**dict(dims, **{last: dims[last] + extra}))
                dyn(*warm)
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                first = time_once(dyn, y)
                if faults is None:  # the shape's own first call
                    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
                dyn(*warm)
                again = time_once(dyn, y)  # seen before, but right after another shape
                steady = statistics.median(time_once(dyn, y) for _ in range(STEADY_CALLS))
                firsts.append(first)
                steadies.append(steady)
                ratios.append(first / steady)
                switched.append(again / steady)
            first, own = statistics.median(firsts), firsts[0]
            x = zm.make_inputs(**dims)
            static = braze.compile(zm.module, example_inputs=x)
            static(*x)
            d, s = [], []
            t0 = time.perf_counter()
            while len(d) < 10 or time.perf_counter() - t0 < min_time:
                d.append(time_once(dyn, x))
                s.append(time_once(static, x))
            dm, sm = statistics.median(d), statistics.median(s)
            ratio, switch = statistics.median(ratios), statistics.median(switched)
            rows.append({"shape": shape_str(dims), "dims": dims, "first_ms": first * 1e3, "own_first_ms": own * 1e3,
                         "first_faults": faults, "dynamic_ms": dm * 1e3, "static_ms": sm * 1e3,
                         "first_over_steady": ratio, "first_ratios": ratios,
                         "adjacent_steady_ms": statistics.median(steadies) * 1e3, "switched_over_steady": switch,
                         "dynamic_over_static": dm / sm, "rounds": len(d)})
            print(f"  {name} {shape_str(dims)}: first {first * 1e3:.2f} ms ({ratio:.2f}x steady, "
                  f"{switch:.2f}x when seen before; this shape's "
                  f"{own * 1e3:.2f} ms, {faults} page faults), "
                  f"dynamic {dm * 1e3:.3f} ms, static {sm * 1e3:.3f} ms ({dm / sm:.2f}x)", flush=True)
    return {"model": name, "shapes": rows, "first_shapes": FIRST_SHAPES, "warmup_shapes": WARMUP_SHAPES}


def to_markdown(doc: dict) -> str:
    r0 = doc["results"][0] if doc["results"] else {}
    first, warmup = r0.get("first_shapes", 3), r0.get("warmup_shapes", 0)  # runs before 2026-12-01: 3, none
    warmed = (f" (after calls at {warmup} other new shapes, so that what happens once per process is not counted)"
              if warmup else "")
    adjacent = "switched_over_steady" in r0.get("shapes", [{}])[0]  # runs before 2026-12-01: steady = dynamic ms
    against = ("the same shape's steady call measured right after it (the median of its ratios)" if adjacent
               else "the dynamic ms")
    return per_model_markdown(
        doc, "dynamic = one compile with symbolic dims, static = a compile for this shape only, called in turn; "
        "medians. First call: the dynamic compile's first call at a shape it had not seen, right after a call at "
        f"the export example's shape, against {against}, over the shape and {first - 1} more with its last dim "
        f"1, 2, ... larger{warmed}; after another shape: a second call at each of them right after a call at "
        "the example's shape, against the same steady call; then the shape's own first call and its minor page "
        "faults (new memory, zeroed by the kernel).",
        ["dynamic ms", "static ms", "dynamic / static", "first call ms", "first / steady",
         "after another shape / steady", "this shape's first call ms", "its page faults"],
        lambda s: [f"{s['dynamic_ms']:.3f}", f"{s['static_ms']:.3f}", f"{s['dynamic_over_static']:.2f}x",
                   f"{s['first_ms']:.2f}", f"{s['first_over_steady']:.2f}x",
                   f"{s['switched_over_steady']:.2f}x" if "switched_over_steady" in s else "-",
                   f"{s['own_first_ms']:.2f}" if "own_first_ms" in s else "-", str(s.get("first_faults", "-"))])


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "dynamic", 1.0)


if __name__ == "__main__":
    raise SystemExit(main())
