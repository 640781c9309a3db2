"""Whole models at small M with braze's small-M kernel on and off, in one process.

    python -m benchmarks.small_m_models [--models bert,llama] [--shapes 1x1,1x4,1x8,2x6,1x12,1x16]
                                        [--rounds 9] [--calls 5] [--threads 2] [--out benchmarks/results]
                                        [--stem small_m_models]

Each model is compiled once (``tune="off"``: the default dispatch rule, the kernel up to its
limit). Per shape (batch x seq) it is called in blocks of ``--calls`` with the kernel off
(``braze_dnnl_set_small_m(0)``: every product on oneDNN, the rule before the kernel existed on
this ISA) and on, the order alternating each round. It reports each side's median call, the median
over rounds of each round's off / on (above 1, the kernel is faster) and the first outputs' difference
(``braze.testing.rel_error``).

Writes ``STEM.json`` and ``STEM.md`` to ``--out``. Time nothing else on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def measure(name: str, shapes: list[tuple[int, int]], rounds: int, calls: int, threads: int) -> list[dict]:
    import braze
    from braze import zoo
    from braze.extern import onednn
    from braze.testing import flatten_outputs, rel_error
    lib = onednn.load_standalone()
    limit = lib.braze_dnnl_small_m()
    zm = zoo.get(name)
    cm = braze.compile(zm.module, zm.example_inputs(), zm.dynamic_shapes, threads=threads, tune="off")
    rows = []
    try:
        for b, s in shapes:
            ins = zm.make_inputs(batch=b, seq=s)
            outs = {}

            def run(on: bool) -> float:
                lib.braze_dnnl_set_small_m(limit if on else 0)
                t = time.perf_counter()
                for _ in range(calls):
                    outs[on] = cm(*ins)
                return (time.perf_counter() - t) / calls

            run(False), run(True)  # oneDNN's primitives made, weights touched
            off, on = [], []
            for r in range(rounds):
                for flag, ts in ((False, off), (True, on)) if r % 2 == 0 else ((True, on), (False, off)):
                    ts.append(run(flag))
            first = [next(flatten_outputs(outs[flag])) for flag in (False, True)]
            row = {"model": name, "batch": b, "seq": s, "off_ms": statistics.median(off) * 1e3,
                   "on_ms": statistics.median(on) * 1e3, "off_over_on": statistics.median(x / y for x, y in zip(off, on)),
                   "rel_diff": rel_error(first[1], first[0])}
            rows.append(row)
            print(f"  {name} {b}x{s}: off {row['off_ms']:.2f} ms, on {row['on_ms']:.2f} ms, "
                  f"off / on {row['off_over_on']:.3f}x, rel diff {row['rel_diff']:.1e}", flush=True)
    finally:
        lib.braze_dnnl_set_small_m(limit)
    return rows


def to_markdown(doc: dict) -> str:
    from .run import _md_table
    m = doc["meta"]["machine"]
    head = (f"Run {doc['meta']['date']} on {m.get('cpu')} ({m.get('cores')} cores, ISA {' '.join(m.get('isa', []))}), "
            f"{doc['meta']['threads']} threads, braze {doc['meta']['braze']}. One compile per model (`tune=\"off\"`); "
            "per shape, blocks of calls with braze's small-M kernel off (every product on oneDNN) and on, "
            f"alternating over {doc['meta']['rounds']} rounds. `off / on` is the median of each round's ratio "
            "(above 1: the kernel is faster); `rel diff` the outputs' largest difference over the output's largest value.")
    rows = [[r["model"], f"{r['batch']}x{r['seq']}", f"{r['off_ms']:.2f}", f"{r['on_ms']:.2f}",
             f"{r['off_over_on']:.3f}x", f"{r['rel_diff']:.1e}"] for r in doc["rows"]]
    return head + "\n\n" + _md_table(["model", "batch x seq", "kernel off ms", "kernel on ms", "off / on", "rel diff"],
                                      rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,llama", help="zoo models with batch and seq dims (default bert,llama)")
    ap.add_argument("--shapes", default="1x1,1x4,1x8,2x6,1x12,1x16", help="batch x seq points (M = batch * seq)")
    ap.add_argument("--rounds", type=int, default=9, help="alternating rounds per shape (default 9)")
    ap.add_argument("--calls", type=int, default=5, help="calls per block (default 5)")
    ap.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    ap.add_argument("--out", default="benchmarks/results", help="directory for STEM.json and STEM.md")
    ap.add_argument("--stem", default="small_m_models", help="the results' file name, less .json / .md")
    a = ap.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in p.split("x")) for p in a.shapes.split(",")]
        if any(len(p) != 2 or min(p) < 1 for p in shapes):
            raise ValueError
    except ValueError:
        ap.error(f"--shapes takes BATCHxSEQ points, each at least 1, comma-separated: got {a.shapes!r}")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)

    import braze

    from .run import _machine, write_results
    rows = [r for name in a.models.split(",") for r in measure(name, shapes, a.rounds, a.calls, a.threads)]
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "rounds": a.rounds,
                    "calls": a.calls, "braze": braze.__version__, "machine": _machine(a.threads)},
           "rows": rows}
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
