"""The harness the single-purpose benchmarks share (``python -m benchmarks.<name>``; ``run.py`` is
the suite): a per-model command line that measures each zoo model in this process
(``per_model_main``) and its markdown, rounds of one process per backend and case
(``process_rounds``), runs made apart merged into medians (``merge_runs``), and one timed call."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .run import SHAPES, _machine, _md_table, write_results


def time_once(fn, inputs) -> float:
    """Seconds one call ``fn(*inputs)`` takes."""
    t = time.perf_counter()
    fn(*inputs)
    return time.perf_counter() - t


def merge_runs(docs: list[dict], *ratios: str) -> dict:
    """Runs of the same models and shapes (each its own process: this machine's speed moves by a few
    percent between processes) as one: per point the median of the runs' times and ratios, and each
    of the ``ratios`` keys' values in the runs as they were (``runs_<key>``). The rest of a model's
    record (first steps, memory) is the first run's."""
    first = docs[0]
    results = []
    for k, r in enumerate(first["results"]):
        shapes = []
        for j, s in enumerate(r["shapes"]):
            runs = [d["results"][k]["shapes"][j] for d in docs]
            if any(x["shape"] != s["shape"] for x in runs) or any(d["results"][k]["model"] != r["model"] for d in docs):
                raise SystemExit("--merge: the runs measured different models or shapes")
            row = {key: statistics.median(x[key] for x in runs) if isinstance(s[key], float) else s[key]
                   for key in s}
            row.update({f"runs_{key}": [x[key] for x in runs] for key in ratios})
            shapes.append(row)
        results.append({**r, "shapes": shapes})
    meta = {**first["meta"], "runs": len(docs), "run_dates": [d["meta"]["date"] for d in docs]}
    return {"meta": meta, "results": results}


def runs_sentence(doc: dict) -> str:
    """How a merged document (``merge_runs``) was made, for its markdown; "" for a single run."""
    runs = doc["meta"].get("runs")
    if not runs:
        return ""
    return (f" Each figure is the median of {runs} runs, each its own process "
            f"({', '.join(doc['meta'].get('run_dates', []))}); the last column has each run's ratio.")


def per_model_main(argv, doc: str, default_models: list[str], measure, to_markdown, stem: str,
                   default_min_time: float, merge=None) -> int:
    """The command line of a benchmark that measures each model in this process (dynamic_price,
    live_weights): ``measure(name, shapes, min_time)`` per model, then ``stem``.json and .md.
    With ``merge(docs) -> doc``, ``--merge A.json B.json ...`` writes earlier runs as one instead."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(default_models), help="comma-separated zoo models")
    ap.add_argument("--shapes", choices=list(SHAPES), default="full", help="benchmarks.run's shape list")
    ap.add_argument("--threads", type=int, default=2, help="torch and braze threads")
    ap.add_argument("--min-time", type=float, default=default_min_time, help="seconds of interleaved calls per shape")
    ap.add_argument("--out", default="benchmarks/results", help=f"directory for {stem}.json and {stem}.md")
    ap.add_argument("--stem", default=stem, help=f"the results' file name, less .json / .md (default {stem}; "
                                                 f"another keeps a run of other models apart)")
    if merge is not None:
        ap.add_argument("--merge", nargs="+", metavar="JSON",
                        help="write these runs (each its own process) as one, per point their median; measure nothing")
    a = ap.parse_args(argv)
    stem = a.stem
    if getattr(a, "merge", None):
        print(write_results(a.out, stem, merge([json.loads(Path(f).read_text()) for f in a.merge]), to_markdown))
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch

    import braze
    torch.set_num_threads(a.threads)
    results = []
    for name in a.models.split(","):
        print(f"{name}:", flush=True)
        results.append(measure(name, SHAPES[a.shapes][name.partition("+")[0]], a.min_time))  # bert+dropout: bert's
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "braze": braze.__version__,
            "torch": torch.__version__, "machine": _machine(a.threads)}
    if os.environ.get("THP_MEM_ALLOC_ENABLE"):  # torch's allocator puts large tensors on huge pages
        meta["thp"] = os.environ["THP_MEM_ALLOC_ENABLE"]
    result = {"meta": meta, "results": results}
    md = write_results(a.out, stem, result, to_markdown)
    print(md)
    return 0


def add_round_options(ap, stem: str, case: str, backends: list[str]) -> None:
    """The options of a ``process_rounds`` benchmark besides its own: ``--threads``, ``--backends``
    (eager first), ``--out``, and the hidden ``--one BACKEND CASE`` that a round's process runs."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backends", default=",".join(backends), help="comma-separated, eager first")
    ap.add_argument("--out", default="benchmarks/results", help=f"directory for {stem}.json and .md")
    ap.add_argument("--one", nargs=2, metavar=("BACKEND", case), help=argparse.SUPPRESS)


def chosen_backends(ap, a, backends: list[str]) -> list[str]:
    """``--backends`` as a list; a usage error unless eager comes first and each is one of ``backends``."""
    chosen = a.backends.split(",")
    if chosen[0] != "eager" or not set(chosen) <= set(backends):
        ap.error(f"--backends: eager first, then any of {', '.join(backends[1:])}")
    return chosen


def process_rounds(module: str, cases: list[str], backends: list[str], rounds: int, args: list[str]) -> dict:
    """``python -m MODULE --one BACKEND CASE ARGS...`` for every case and backend, ``rounds`` times,
    each in a process of its own (a backend's threads then disturb no other's calls); its last line
    is a JSON record. Returns "case/backend" -> the records, in round order."""
    runs: dict = {}
    for r in range(rounds):
        for case in cases:
            for backend in backends:
                out = subprocess.run([sys.executable, "-m", module, "--one", backend, case, *args],
                                     capture_output=True, text=True, check=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                runs.setdefault(f"{case}/{backend}", []).append(res)
                print(f"round {r + 1} {case:10s} {backend:9s} {res['us']:8.1f} us", flush=True)
    return runs


def per_model_markdown(doc: dict, how: str, headers: list[str], cells) -> str:
    """A per-model benchmark's markdown (dynamic_price, live_weights): the machine and versions,
    ``how`` it measured, and one row of ``cells(model, shape_row)`` per shape."""
    m, mach = doc["meta"], doc["meta"].get("machine")  # runs before 2026-11-27 did not record it
    where = (f" on {mach['cpu']} ({mach['cores']} cores, ISA {' '.join(mach['isa'])})" if mach
             else " (machine not recorded)")
    head = (f"Run {m['date']}{where}, {m['threads']} threads, braze {m['braze']}, torch {m.get('torch', '?')}. "
            f"One process per model; {how}")
    body = [[r["model"], s["shape"], *cells(s)] for r in doc["results"] for s in r["shapes"]]
    return "\n".join([head, "", _md_table(["model", "shape", *headers], body)]) + "\n"
