"""What tuning costs and what it chooses, per zoo model (docs/tuning.md).

    python -m benchmarks.tuning [--models mlp,bert,gpt2,llama,block,resnet50,depthwise] [--threads 2]
                                [--precision fp32|bf16|fp16] [--out benchmarks/results] [--stem tuning]

Per model, in one process: ``braze.compile(..., tune="fast")`` twice from two empty tuning
databases (two independent tunings: their time, their measurements, and how many of their
buckets chose the same kernel), then once more on the first database (a warm compile: it must
measure nothing; its time against a ``tune="off"`` compile of the same module is what a warm
database adds). Also each GEMM's dispatch table.

Writes ``STEM.json`` and ``STEM.md`` to ``--out``. Time nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from .run import DEFAULT_OUT, _machine, _md_table, _versions, write_results

MODELS = ["mlp", "bert", "gpt2", "llama", "block", "resnet50", "depthwise"]


def _compile(zm, tune: str, db: str, threads: int, precision: str):
    import braze
    t = time.perf_counter()
    cm = braze.compile(zm.module, zm.example_inputs(), zm.dynamic_shapes, threads=threads, tune=tune,
                       precision=precision, options={"tune_db": db})
    return cm, time.perf_counter() - t


def _winners(db: str) -> dict:
    out = {}
    for line in Path(db).read_text().splitlines():
        r = json.loads(line)
        out[(r["site"], tuple(r["bucket"]))] = r["winner"]
    return out


def measure(name: str, threads: int, precision: str = "fp32") -> dict:
    from braze import zoo
    from braze.tune.buckets import summary
    zm = zoo.get(name)
    _compile(zm, "off", "/nonexistent", threads, precision)  # the export, the helper and the C library: cached from here
    with tempfile.TemporaryDirectory() as tmp:
        a, b = str(Path(tmp) / "a.jsonl"), str(Path(tmp) / "b.jsonl")
        cm_a, t_a = _compile(zm, "fast", a, threads, precision)
        cm_b, t_b = _compile(zm, "fast", b, threads, precision)
        warm, t_warm = _compile(zm, "fast", a, threads, precision)
        off, t_off = _compile(zm, "off", a, threads, precision)
        wa, wb = _winners(a), _winners(b)
        both = set(wa) & set(wb)
        return {"model": name, "sites": len({s for s, _ in wa}), "buckets": len(wa),
                "measurements": [cm_a.tune_measurements, cm_b.tune_measurements],
                "tune_s": [round(t_a - t_off, 2), round(t_b - t_off, 2)],
                "warm_measurements": warm.tune_measurements, "warm_added_s": round(t_warm - t_off, 3),
                "same_winner": sum(wa[k] == wb[k] for k in both), "compared": len(both),
                "non_default": [sum(w != "default" for w in wa.values()), sum(w != "default" for w in wb.values())],
                "same_c_as_untuned": cm_a._native.source == off._native.source,
                "tables": summary(cm_a.dispatch_tables())}


def to_markdown(doc: dict) -> str:
    m = doc["machine"]
    head = (f"Run {doc['started']} on {m.get('cpu')} ({m.get('cores')} cores, ISA {' '.join(m.get('isa', []))}), "
            f"{doc['threads']} threads, braze {doc['versions'].get('braze')}, precision {doc.get('precision', 'fp32')}. "
            "Per model: two `tune=\"fast\"` "
            "compiles from empty databases (A, B), then a warm one on A. `tuning s` is a fast compile's time less a "
            "`tune=\"off\"` compile's (export, C library cached); `warm adds s` the same for the warm compile; "
            "`same` counts buckets where A and B chose the same kernel (\"default\" included); `C = untuned C`: "
            "A's C is byte for byte a `tune=\"off\"` compile's.")
    rows = [[r["model"], r["sites"], r["buckets"], " / ".join(map(str, r["measurements"])),
             " / ".join(f"{t:.1f}" for t in r["tune_s"]), r["warm_measurements"], f"{r['warm_added_s']:.3f}",
             f"{r['same_winner']} of {r['compared']}", " / ".join(map(str, r["non_default"])),
             "yes" if r.get("same_c_as_untuned") else "no"] for r in doc["rows"]]
    table = _md_table(["model", "product sites", "buckets", "measurements A / B", "tuning s A / B",
                       "warm measurements", "warm adds s", "same", "non-default A / B", "C = untuned C"], rows)
    tables = "\n".join(f"- {r['model']}: " + "; ".join(r["tables"]) for r in doc["rows"])
    return f"{head}\n\n{table}\n\nDispatch tables (A):\n\n{tables}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--stem", default="tuning")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="the compiles' precision= (the products are measured in its dtypes)")
    a = ap.parse_args(argv)
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": _machine(a.threads), "threads": a.threads,
           "precision": a.precision, "versions": _versions(), "rows": []}
    for name in a.models.split(","):
        row = measure(name, a.threads, a.precision)
        print(json.dumps(row), flush=True)
        doc["rows"].append(row)
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
