"""Tuned against untuned calls, per zoo model, in one process (docs/tuning.md).

    python -m benchmarks.tuning_ab [--models bert,resnet50] [--precision fp32|bf16|fp16] [--rounds 11]
                                   [--round-time 0.25] [--threads 2] [--out benchmarks/results] [--stem tuning_ab]

Per model: a ``tune="off"`` compile and a ``tune="fast"`` compile from an empty tuning database, each
in its own compile cache, then at each shape 3 warm-up calls of both and ``--rounds`` rounds, the two
called in turn (which goes first alternates), each for about ``--round-time`` seconds of calls. A
round's ratio is its fast mean call over its off mean call; the table gives the median ratio, the
range of the rounds' ratios, the medians of the mean calls, and max |off - fast| / max |off| of the
first output. The shapes are ``benchmarks.run``'s full shapes with the last dim one smaller (one
larger where it is 1). Also the tables the tuning changed, with the kernels' times from the database.

Writes ``STEM.json`` and ``STEM.md`` to ``--out``. Time nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from .run import DEFAULT_OUT, SHAPES, _machine, _md_table, _versions, shape_str, write_results


def _shifted(dims: dict) -> dict:
    last = list(dims)[-1]
    return {**dims, last: dims[last] - 1 if dims[last] > 1 else dims[last] + 1}


def _first(y):
    import numpy as np
    y = y[0] if isinstance(y, (list, tuple)) else y
    return np.asarray(y, np.float32)


def _won(db: str) -> list[dict]:
    """The database's buckets won by a kernel other than the default rule's, with their times."""
    out = []
    for line in Path(db).read_text().splitlines():
        r = json.loads(line)
        if r["winner"] != "default":
            out.append({"site": r["site"], "bucket": r["bucket"], "winner": r["winner"],
                        "median_us": {p: {m: v[0] for m, v in t.items()} for p, t in r.get("times_us", {}).items()}})
    return out


def measure(name: str, precision: str, threads: int, rounds: int, round_time: float) -> dict:
    import numpy as np
    import torch

    import braze
    from braze import zoo
    zm = zoo.get(name)
    db = str(Path(tempfile.mkdtemp(prefix="tuning_ab_")) / "db.jsonl")

    def compile_(tune):
        t = time.perf_counter()
        with torch.no_grad():
            cm = braze.compile(zm.module, zm.example_inputs(), zm.dynamic_shapes, threads=threads, tune=tune,
                               precision=precision, options={"cache_dir": tempfile.mkdtemp(), "tune_db": db})
        return cm, time.perf_counter() - t
    off, t_off = compile_("off")
    fast, t_fast = compile_("fast")
    changed = [(a[0], a[2], b[2]) for a, b in zip(off.dispatch_tables(), fast.dispatch_tables()) if a[2] != b[2]]
    rows = []
    for dims in (_shifted(d) for d in SHAPES["full"][name]):
        x = [t.numpy() for t in zm.make_inputs(**dims)]
        ya, yb = _first(off(*x)), _first(fast(*x))
        diff = float(np.max(np.abs(ya - yb)) / max(float(np.max(np.abs(ya))), 1e-30))
        for _ in range(3):
            off(*x)
            fast(*x)
        ratios, t_a, t_b = [], [], []
        for i in range(rounds):
            for m, acc in ((off, t_a), (fast, t_b)) if i % 2 == 0 else ((fast, t_b), (off, t_a)):
                n, t0 = 0, time.perf_counter()
                while n < 3 or time.perf_counter() - t0 < round_time:
                    m(*x)
                    n += 1
                acc.append((time.perf_counter() - t0) / n)
            ratios.append(t_b[-1] / t_a[-1])
        rows.append({"shape": shape_str(dims), "off_ms": statistics.median(t_a) * 1e3,
                     "fast_ms": statistics.median(t_b) * 1e3, "ratio": statistics.median(ratios),
                     "ratio_range": [min(ratios), max(ratios)], "diff": diff})
        print(f"  {name} {shape_str(dims)}: tuned / untuned {rows[-1]['ratio']:.3f}", flush=True)
    return {"model": name, "compile_s": {"off": round(t_off, 2), "fast": round(t_fast, 2)},
            "measurements": fast.tune_measurements, "tables": len(off.dispatch_tables()),
            "changed": [{"call": c, "untuned": list(a), "tuned": list(b)} for c, a, b in changed],
            "won": _won(db) if Path(db).exists() else [], "rows": rows}


def to_markdown(doc: dict) -> str:
    m = doc["machine"]
    head = (f"Run {doc['started']} on {m.get('cpu')} ({m.get('cores')} cores, ISA {' '.join(m.get('isa', []))}), "
            f"{doc['threads']} threads, braze {doc['versions'].get('braze')}, torch {doc['versions'].get('torch')}, "
            f"precision {doc['precision']}, {doc['rounds']} rounds of about {doc['round_time']} s per compile. "
            "`python -m benchmarks.tuning_ab` (its docstring says how it measures); below 1.00x the tuned "
            "compile is faster.")
    body = [[r["model"], x["shape"], f"{x['off_ms']:.3f}", f"{x['fast_ms']:.3f}", f"{x['ratio']:.3f}x",
             f"{x['ratio_range'][0]:.3f}-{x['ratio_range'][1]:.3f}", f"{x['diff']:.1e}"]
            for r in doc["rows"] for x in r["rows"]]
    table = _md_table(["model", "shape", "untuned ms", "tuned ms", "tuned / untuned", "rounds", "max rel diff"],
                      body)
    lines = []
    for r in doc["rows"]:
        lines.append(f"- {r['model']}: {r['measurements']} measurements (compile {r['compile_s']['fast']} s "
                     f"against {r['compile_s']['off']} s untuned), {len(r['changed'])} of {r['tables']} tables changed")
        for w in r["won"]:
            times = "; ".join(f"{p} " + ", ".join(f"M={k}: {v} us" for k, v in t.items())
                              for p, t in w["median_us"].items())
            lines.append(f"  - `{w['site']}` {w['bucket']}: {w['winner']} ({times})")
    return f"{head}\n\n{table}\n\nWhat the tuning changed:\n\n" + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,resnet50", help="comma-separated zoo models")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--round-time", type=float, default=0.25, help="seconds of calls per compile per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--stem", default="tuning_ab")
    a = ap.parse_args(argv)
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": _machine(a.threads), "threads": a.threads,
           "precision": a.precision, "rounds": a.rounds, "round_time": a.round_time, "versions": _versions(),
           "rows": []}
    for name in a.models.split(","):
        doc["rows"].append(measure(name, a.precision, a.threads, a.rounds, a.round_time))
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
