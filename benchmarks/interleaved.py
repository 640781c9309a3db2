"""Backends timed in turn, each in its own process: ratios that hold on a noisy machine.

    python -m benchmarks.interleaved --models bert,resnet50 \\
        --backends braze-bf16,braze,braze-bf16-model,openvino-default [--shapes full] \\
        [--rounds 15] [--round-time 0.5] [--threads 2] [--out benchmarks/results] [--stem interleaved]

``benchmarks.run`` times one backend after another, minutes apart. On a shared virtual machine
the speed moves by up to 2x between minutes, so two of its rows can differ by more than the
backends do. Here every backend of a model is prepared in its own server process (the same
``benchmarks.backends`` code as ``benchmarks.run``), warmed up at every shape, and then, per shape,
driven in rounds: each round runs every backend in turn (the order rotates) for about
``--round-time`` seconds of calls and keeps the median call. A slow spell of the machine hits
every backend of a round, so the median over rounds of each round's ratio to the first backend
(``X / first``) is the figure to quote; the median times are there too.

On calls under about 0.2 ms one long-lived process per backend can be 20% off, the same way in
every round (``benchmarks.ab_trees`` says where that was seen; the cause is not established).
``--processes N`` spreads the rounds over N sets of servers started one after the other (their
compiles cached from the first), so that no one process decides a ratio.

Idle servers wait in a blocking read. A pause between backends lets the last one's threads stop
spinning (OpenMP and TBB spin for a few ms after a parallel region) before the next is timed.

Writes ``STEM.json`` and ``STEM.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import backends as B
from .run import SHAPES, _machine, _md_table, _versions, shape_str, write_results

PAUSE_S = 0.1  # between two backends' turns: longer than OpenMP's and TBB's spin after a region


def serve(model: str, backend: str, shapes: list[dict], cache_dir: str, threads: int) -> int:
    """A server on stdin/stdout: prepares the backend, warms it up at every shape, then answers
    each request line {"shape": i, "time": s} with the median call in ms over >= 3 calls and >= s
    (and what the backend's counters counted meanwhile), and {"shape": i, "idle": s} with the
    process's CPU time over s seconds after one call, in % of a core (threads that spin after a
    call)."""
    import numpy as np
    import torch

    from braze import zoo
    from braze.testing import rel_error
    torch.set_num_threads(threads)
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the backends print must not reach the protocol
    zm = zoo.get(model)
    be = B.get(backend)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    prep = be.prepare(zm, Path(cache_dir), threads)
    args, errs = [], []
    for dims in shapes:
        inputs = zm.make_inputs(**dims)
        a = prep.convert(inputs)
        got = None
        for _ in range(3):
            got = prep.run(a)
        with torch.no_grad():
            want = zoo.first_output(zm.module(*inputs)).numpy()
        errs.append(rel_error(np.asarray(prep.first_output(got)), want))
        args.append(a)
    out.write(json.dumps({"ready": True, "rel_err": errs}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        a, times, t0 = args[req["shape"]], [], time.perf_counter()
        if "idle" in req:
            prep.run(a)
            c0 = time.process_time()  # every thread of the process
            time.sleep(req["idle"])
            out.write(json.dumps({"idle_cpu_pct": 100 * (time.process_time() - c0) / req["idle"]}) + "\n")
            out.flush()
            continue
        before = prep.counters() if prep.counters else {}
        while len(times) < 3 or time.perf_counter() - t0 < req["time"]:
            t = time.perf_counter()
            prep.run(a)
            times.append(time.perf_counter() - t)
        counted = {k: v - before[k] for k, v in prep.counters().items()} if prep.counters else {}
        out.write(json.dumps({"ms": statistics.median(times) * 1e3, "calls": len(times), "counted": counted})
                  + "\n")
        out.flush()
    return 0


class _Server:
    def __init__(self, model, backend, shapes, threads, cache_dir):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), **B.BACKENDS[backend].env)
        self.name = backend
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.interleaved", "--serve", "--model", model, "--backend", backend,
             "--shapes-json", json.dumps(shapes), "--cache-dir", cache_dir, "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} server exited (rc {self.proc.wait()}); its stderr says why")
        return json.loads(line)

    def ask(self, shape: int, seconds: float) -> dict:
        self.proc.stdin.write(json.dumps({"shape": shape, "time": seconds}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def idle(self, shape: int, seconds: float) -> dict:
        self.proc.stdin.write(json.dumps({"shape": shape, "idle": seconds}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@contextlib.contextmanager
def started_servers(model: str, names: list[str], shapes: list[dict], threads: int, cache_root: str | None = None):
    """A ready server per backend (``.ready``: its errors against eager), closed on exit. Servers
    started again with the same ``cache_root`` find their compiles there."""
    servers = []
    with contextlib.ExitStack() as stack:
        tmp = cache_root or stack.enter_context(tempfile.TemporaryDirectory(prefix="braze-rounds-"))
        try:
            for n in names:  # one at a time: a compile must not share the cores with another
                print(f"  {model} {n}: preparing", flush=True)
                servers.append(_Server(model, n, shapes, threads, str(Path(tmp) / n)))
                servers[-1].ready = servers[-1].read()
            yield servers
        finally:
            for s in servers:
                s.close()


def measure(model: str, names: list[str], shapes: list[dict], rounds: int, round_time: float, threads: int,
            processes: int = 1) -> dict:
    """Per shape, ``rounds`` rounds of every backend in turn, spread over ``processes`` sets of
    server processes started one after the other, so that no one process decides a ratio."""
    ms = [{n: [] for n in names} for _ in shapes]
    ready = {}
    with tempfile.TemporaryDirectory(prefix="braze-rounds-") as root:
        for g in range(processes):
            with started_servers(model, names, shapes, threads, root) as servers:
                ready = ready or {s.name: s.ready for s in servers}
                for i in range(len(shapes)):
                    for r in range(g, rounds, processes):
                        for k in range(len(servers)):
                            s = servers[(r + k) % len(servers)]
                            time.sleep(PAUSE_S)
                            ms[i][s.name].append(s.ask(i, round_time)["ms"])
    rows = []
    first = names[0]
    for i, dims in enumerate(shapes):
        row = {"shape": shape_str(dims), "dims": dims, "rounds": rounds, "processes": processes, "backends": {}}
        for n in names:
            t = ms[i][n]
            row["backends"][n] = {
                "median_ms": statistics.median(t), "min_ms": min(t),
                "over_first": statistics.median(a / b for a, b in zip(t, ms[i][first])),
                "rel_err": ready[n]["rel_err"][i]}
        rows.append(row)
        print(f"  {model} {shape_str(dims)}: " + ", ".join(
            f"{n} {v['median_ms']:.2f} ms ({v['over_first']:.3f}x)" for n, v in row["backends"].items()), flush=True)
    return {"model": model, "shapes": rows}


def run_line(m: dict) -> str:
    """A rounds tool's results: the run's date, machine, threads and versions, in one sentence."""
    mach, v = m["machine"], m["versions"]
    return (f"Run {m['date']} on {mach['cpu']} ({mach['cores']} cores, ISA {' '.join(mach['isa'])}), "
            f"{m['threads']} threads per backend, braze {v['braze']}, torch {v['torch']}, "
            f"onnxruntime {v.get('onnxruntime')}, openvino {v.get('openvino')}.")


def to_markdown(doc: dict) -> str:
    m, names = doc["meta"], doc["backends"]
    procs = m.get("processes", 1)
    spread = f", spread over {procs} sets of processes started in turn" if procs > 1 else ""
    head = (run_line(m) + " Each backend in its own process, all of a model's "
            f"prepared at once and called in turn: {m['rounds']} rounds per shape{spread}, about "
            f"{m['round_time_s']:g} s of calls per backend per round. `X / {names[0]}` is the median over rounds of each round's ratio "
            f"(below 1.00x: X is faster than {names[0]}); ms are medians over rounds of each round's median call.")
    headers = ["model", "shape", *(f"{n} ms" for n in names), *(f"{n} / {names[0]}" for n in names[1:]),
               "max rel err"]
    body = []
    for r in doc["results"]:
        for s in r["shapes"]:
            b = s["backends"]
            body.append([r["model"], s["shape"], *(f"{b[n]['median_ms']:.2f}" for n in names),
                         *(f"{b[n]['over_first']:.3f}x" for n in names[1:]),
                         ", ".join(f"{n} {b[n]['rel_err']:.1e}" for n in names)])
    return "\n".join([head, "", _md_table(headers, body)]) + "\n"


def add_round_args(ap, stem: str, rounds: int) -> None:
    """The options of a tool that calls backends in turn in rounds (this one, ``benchmarks.contention``)."""
    ap.add_argument("--rounds", type=int, default=rounds, help=f"rounds per shape (default {rounds})")
    ap.add_argument("--round-time", type=float, default=0.5,
                    help="seconds of calls per backend per round, at least 3 calls (default 0.5)")
    ap.add_argument("--threads", type=int, default=2, help="threads per backend (default 2)")
    ap.add_argument("--out", default="benchmarks/results", help="directory for STEM.json and STEM.md")
    ap.add_argument("--stem", default=stem, help=f"the results' file name, less .json / .md (default {stem})")


def backend_names(ap, text: str) -> list[str]:
    """The comma-separated backends, each known and able to run here (else ``ap.error``)."""
    names = text.split(",")
    for n in names:
        if n not in B.BACKENDS:
            ap.error(f"unknown backend {n!r}; choose from {', '.join(B.BACKENDS)}")
        why = B.get(n).unavailable_reason()
        if why:
            ap.error(f"backend {n} cannot run here: {why}")
    return names


def round_meta(a, tool: str, argv) -> dict:
    """The results' meta of a rounds tool: when, where, with what, and the command."""
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "rounds": a.rounds,
            "round_time_s": a.round_time, "machine": _machine(a.threads), "versions": _versions(),
            "command": f"python -m benchmarks.{tool} " + " ".join(argv if argv is not None else sys.argv[1:])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[2].strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert", help="comma-separated zoo models")
    ap.add_argument("--backends", default="braze,openvino",
                    help=f"comma-separated backends; ratios are to the first ({', '.join(B.BACKENDS)})")
    ap.add_argument("--shapes", choices=list(SHAPES), default="full", help="benchmarks.run's shape list")
    add_round_args(ap, "interleaved", 15)
    ap.add_argument("--processes", type=int, default=1,
                    help="sets of server processes the rounds are spread over, started one after the other "
                         "(default 1; 3 for calls under about 0.2 ms, where a process's start decides its speed)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--shapes-json", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        return serve(a.model, a.backend, json.loads(a.shapes_json), a.cache_dir, a.threads)
    names = backend_names(ap, a.backends)
    results = []
    for model in a.models.split(","):
        print(f"{model}:", flush=True)
        results.append(measure(model, names, SHAPES[a.shapes][model], a.rounds, a.round_time, a.threads,
                               a.processes))
    doc = {"meta": {**round_meta(a, "interleaved", argv), "processes": a.processes}, "backends": names,
           "results": results}
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
