"""The price of live weights in plug-in mode: ``torch.compile(backend="braze")`` with weights read at
every call (the default) against ``options={"freeze": True}`` (weights baked in, as inductor's
freezing), and what a call pays for passing the weights.

    python -m benchmarks.live_weights [--models bert,gpt2,resnet50] [--shapes full]
                                      [--threads 2] [--min-time 2.0] [--out benchmarks/results]

Per model, in one process: both compiles of the same module (dynamic=True, under no_grad), each
warmed up at every shape (so both hold every library and oneDNN primitive), then per shape the
two called in turn (interleaved, so machine noise hits both) until ``--min-time`` seconds and >= 8
rounds; medians, and each output against eager.

Where the time goes (README, "Inside PyTorch"; docs/gemm.md): each call asks the kernel's page tables
which weights were written (``BRAZE_WRITE_TRACKING``; about 2 ns per 4 KB page of weights), GEMMs run on
packed copies of the unwritten ones, a convolution on its kept re-laid-out copy, and every weight is one
more argument of the native call. Run it with ``BRAZE_WRITE_TRACKING=0`` for the fallback (GEMMs read
the plain weight, convolutions hash theirs) and ``--stem`` to keep that run apart.

Writes ``live_weights.json`` and ``live_weights.md`` to ``--out``. ``--merge A.json B.json ...``
(with ``--out``, ``--stem``) writes runs made apart as one: per point the median of the runs.
"""

from __future__ import annotations

import statistics
import time

from .harness import merge_runs, per_model_main, per_model_markdown, runs_sentence, time_once
from .run import shape_str

DEFAULT_MODELS = ["bert", "gpt2", "resnet50"]


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    from braze import zoo
    from braze.testing import rel_error
    zm = zoo.get(name)
    live = torch.compile(zm.module, backend="braze", dynamic=True)
    frozen = torch.compile(zm.module, backend="braze", dynamic=True, options={"freeze": True})
    rows = []
    with torch.no_grad():
        for dims in shapes:  # every graph dynamo makes, compiled before any timing
            x = zm.make_inputs(**dims)
            for fn in (live, frozen):
                for _ in range(3):
                    fn(*x)
        for dims in shapes:
            x = zm.make_inputs(**dims)
            want = zoo.first_output(zm.module(*x)).numpy()
            errs = [rel_error(zoo.first_output(fn(*x)).numpy(), want) for fn in (live, frozen)]
            tl, tf = [], []
            t0 = time.perf_counter()
            while len(tl) < 8 or time.perf_counter() - t0 < min_time:
                if len(tl) % 2:
                    tf.append(time_once(frozen, x))
                    tl.append(time_once(live, x))
                else:
                    tl.append(time_once(live, x))
                    tf.append(time_once(frozen, x))
            ml, mf = statistics.median(tl), statistics.median(tf)
            # the median of each round's ratio: a slow spell of the machine hits both calls of a round
            ratio = statistics.median(a / b for a, b in zip(tl, tf))
            rows.append({"shape": shape_str(dims), "dims": dims, "live_ms": ml * 1e3, "frozen_ms": mf * 1e3,
                         "live_over_frozen": ratio, "rounds": len(tl), "rel_error_live": errs[0],
                         "rel_error_frozen": errs[1]})
            print(f"  {name} {shape_str(dims)}: live {ml * 1e3:.2f} ms, frozen {mf * 1e3:.2f} ms "
                  f"({ratio:.3f}x), rel error {errs[0]:.1e} / {errs[1]:.1e}", flush=True)
    from braze.extern import onednn
    return {"model": name, "shapes": rows, "write_tracking": onednn.write_tracking()}


def to_markdown(doc: dict) -> str:
    tracked = {r["model"]: r.get("write_tracking", {}).get("on") for r in doc["results"]}  # older runs: None
    how = ("live weights checked by write tracking (docs/gemm.md): "
           + ", ".join(f"{m} {'on' if on else 'off' if on is False else 'not recorded'}" for m, on in tracked.items())
           + (f"; THP_MEM_ALLOC_ENABLE={doc['meta']['thp']}" if doc["meta"].get("thp") else ""))
    runs = doc["meta"].get("runs")
    return per_model_markdown(
        doc, "`torch.compile(model, backend='braze', dynamic=True)` with live weights (the default) and with "
        "`options={'freeze': True}`, called in turn; median times, and the median over rounds of each round's "
        f"live / frozen ratio; {how}.{runs_sentence(doc)}",
        ["live ms", "frozen ms", "live / frozen", "rel err live", "rel err frozen"] + (["runs"] if runs else []),
        lambda s: [f"{s['live_ms']:.2f}", f"{s['frozen_ms']:.2f}", f"{s['live_over_frozen']:.3f}x",
                   f"{s['rel_error_live']:.1e}", f"{s['rel_error_frozen']:.1e}"]
        + ([" ".join(f"{x:.3f}" for x in s["runs_live_over_frozen"])] if runs else []))


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "live_weights", 2.0,
                          merge=lambda docs: merge_runs(docs, "live_over_frozen"))


if __name__ == "__main__":
    raise SystemExit(main())
