"""Latency on a shared machine: each backend alone in its process, timed quiet, then beside one and
two CPU-bound processes, then quiet again; and the CPU a backend burns after a call.

    python -m benchmarks.contention --models bert,gpt2,resnet50,llama \\
        [--backends braze,onnxruntime-nospin,openvino] [--shapes quick] [--rounds 5] [--round-time 0.5] \\
        [--threads 2] [--out benchmarks/results] [--stem contention]

Servers on a shared host lose cores to other processes. A runtime whose threads share work
dynamically slows by about (runnable threads / cores) when one more process runs; one that splits
every kernel statically and waits at a barrier can lose a whole time slice at each kernel. This
times every backend of a model (each in its own server process, ``benchmarks.interleaved``'s) in
four phases: quiet, with 1 busy process (a Python loop), with 2, and quiet again. In a phase, each
shape runs ``--rounds`` rounds, every backend in turn for about ``--round-time`` seconds of calls.
The slowdown of a phase is its median call over the median of the two quiet phases.

Idle CPU: after one call, the server sleeps a second and reports the CPU time its process took
meanwhile, as a percentage of one core (threads that spin after a call take it from the
neighbours).

Writes ``STEM.json`` and ``STEM.md`` to ``--out``. ONNX Runtime is timed with spinning off
(``onnxruntime-nospin``), as a shared server runs it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from . import backends as B
from .interleaved import PAUSE_S, add_round_args, backend_names, round_meta, run_line, started_servers
from .run import SHAPES, _md_table, shape_str, write_results

PHASES = (("quiet", 0), ("1 busy", 1), ("2 busy", 2), ("quiet again", 0))
DEFAULT_BACKENDS = "braze,onnxruntime-nospin,openvino"
ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")  # what moves OpenMP's threads, recorded


# a CPU-bound loop that ends with its parent: a benchmark killed before its cleanup leaves no spinner
BUSY = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


def _busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]


def measure(model: str, names: list[str], shapes: list[dict], rounds: int, round_time: float,
            threads: int) -> dict:
    ms = {(n, i, p): [] for n in names for i in range(len(shapes)) for p, _ in PHASES}
    counted = {(n, i, p): {} for n in names for i in range(len(shapes)) for p, _ in PHASES}
    with started_servers(model, names, shapes, threads) as servers:
        idle = {s.name: s.idle(0, 1.0)["idle_cpu_pct"] for s in servers}
        for phase, n_busy in PHASES:
            procs = _busy(n_busy)
            try:
                time.sleep(0.5)  # the busy processes on the run queue
                for i in range(len(shapes)):
                    for r in range(rounds):
                        for k in range(len(servers)):
                            s = servers[(r + k) % len(servers)]
                            time.sleep(PAUSE_S)
                            got = s.ask(i, round_time)
                            ms[s.name, i, phase].append(got["ms"])
                            c = counted[s.name, i, phase]
                            for what, v in got.get("counted", {}).items():
                                c[what] = c.get(what, 0) + v
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            print(f"  {model} {phase}: " + "; ".join(
                f"{n} " + ", ".join(f"{statistics.median(ms[n, i, phase]):.2f}" for i in range(len(shapes)))
                + " ms" for n in names), flush=True)
    rows = []
    for i, dims in enumerate(shapes):
        row = {"shape": shape_str(dims), "dims": dims, "backends": {}}
        for s in servers:
            med = {p: statistics.median(ms[s.name, i, p]) for p, _ in PHASES}
            quiet = statistics.median(ms[s.name, i, "quiet"] + ms[s.name, i, "quiet again"])
            row["backends"][s.name] = {"ms": med, "quiet_ms": quiet,
                                       "slowdown": {p: med[p] / quiet for p, n in PHASES if n},
                                       "rel_err": s.ready["rel_err"][i]}
            if any(counted[s.name, i, p] for p, _ in PHASES):  # braze: calls per team, per phase
                row["backends"][s.name]["counted"] = {p: counted[s.name, i, p] for p, _ in PHASES}
        rows.append(row)
    return {"model": model, "shapes": rows, "idle_cpu_pct": idle}


def _team_table(doc: dict) -> list[str]:
    """The share of each adaptive braze backend's calls that ran with fewer threads than asked, per
    phase (braze_team.h), as markdown lines; none where no backend counted a call (a fixed team)."""
    cols = [(n, p) for n in doc["backends"] for p, _ in PHASES
            if any(sum(c.values()) for r in doc["results"] for s in r["shapes"]
                   for c in s["backends"][n].get("counted", {}).values())]
    if not cols:
        return []
    body = []
    for r in doc["results"]:
        for s in r["shapes"]:
            cells = [r["model"], s["shape"]]
            for n, p in cols:
                c = s["backends"][n].get("counted", {}).get(p, {})
                total = sum(c.values())
                cells.append(f"{100 * c.get('fewer threads', 0) / total:.0f}%" if total else "-")
            body.append(cells)
    return ["Share of calls run with fewer threads than asked (braze_team.h; docs/threads.md):", "",
            _md_table(["model", "shape", *(f"{n} {p}" for n, p in cols)], body), ""]


def to_markdown(doc: dict) -> str:
    m, names = doc["meta"], doc["backends"]
    head = (run_line(m) + f" Each backend in its own process, called in turn: {m['rounds']} rounds per shape "
            f"and phase, about {m['round_time_s']:g} s of calls each. Phases: quiet, beside 1 and 2 busy "
            "processes (a Python loop each), quiet again; `x1`/`x2` = the median call beside 1/2 busy processes "
            "over the median of the quiet phases."
            + ("".join(f" Environment: {k}={v}." for k, v in m.get("env", {}).items())))
    headers = ["model", "shape", *(f"{n} quiet ms" for n in names), *(f"{n} x1" for n in names),
               *(f"{n} x2" for n in names)]
    if "braze" in names:  # the slowdowns' ratio, then the calls' (both issue 29's yardstick)
        others = [n for n in names if n != "braze"]
        headers += [f"braze x1 / {n} x1" for n in others] + [f"braze / {n} ms, 1 busy" for n in others]
    body = []
    for r in doc["results"]:
        for s in r["shapes"]:
            b = s["backends"]
            cells = [r["model"], s["shape"], *(f"{b[n]['quiet_ms']:.2f}" for n in names),
                     *(f"{b[n]['slowdown']['1 busy']:.2f}" for n in names),
                     *(f"{b[n]['slowdown']['2 busy']:.2f}" for n in names)]
            if "braze" in names:
                cells += [f"{b['braze']['slowdown']['1 busy'] / b[n]['slowdown']['1 busy']:.2f}" for n in others]
                cells += [f"{b['braze']['ms']['1 busy'] / b[n]['ms']['1 busy']:.2f}" for n in others]
            body.append(cells)
    teams = _team_table(doc)
    idle = ["| model | " + " | ".join(f"{n} idle CPU %" for n in names) + " |",
            "|---|" + "---|" * len(names)]
    idle += [f"| {r['model']} | " + " | ".join(f"{r['idle_cpu_pct'][n]:.2f}" for n in names) + " |"
             for r in doc["results"]]
    return "\n".join([head, "", _md_table(headers, body), "", *teams,
                      "CPU time each process took in the second after a call, as % of one core:", "",
                      *idle]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[2].strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,gpt2,resnet50,llama", help="comma-separated zoo models")
    ap.add_argument("--backends", default=DEFAULT_BACKENDS,
                    help=f"comma-separated backends (default {DEFAULT_BACKENDS}; any of {', '.join(B.BACKENDS)})")
    ap.add_argument("--shapes", choices=list(SHAPES), default="quick",
                    help="benchmarks.run's shape list (default quick: a small and a mid shape)")
    add_round_args(ap, "contention", 5)
    a = ap.parse_args(argv)
    names = backend_names(ap, a.backends)
    results = []
    for model in a.models.split(","):
        if model not in SHAPES[a.shapes]:
            ap.error(f"no {a.shapes} shapes for {model!r}; choose from {', '.join(SHAPES[a.shapes])}")
        print(f"{model}:", flush=True)
        results.append(measure(model, names, SHAPES[a.shapes][model], a.rounds, a.round_time, a.threads))
    meta = dict(round_meta(a, "contention", argv), env={k: os.environ[k] for k in ENV if k in os.environ})
    doc = {"meta": meta, "backends": names, "results": results}
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
