"""``python -m braze.fuzz``: random graphs against the reference, in worker processes.

    python -m braze.fuzz --graphs 10000 --jobs 2 --seed 0   # seeds 0..9999
    python -m braze.fuzz --seed 123                          # one graph: IR, outcome
    python -m braze.fuzz --seeds 8,9,10                      # these graphs, compiled together

Each worker process compiles ``--batch`` graphs at once (one C compile) and
checks them; a process is replaced after ``--per-worker`` graphs (loaded
libraries pile up otherwise). A worker that dies (a segfault) has its batch
re-run one graph per process, so the crash is pinned on one seed. The run
prints its size, op mix, time and every failure with its seed, a one-line
re-run command and the graph's IR. Exit status: 0 when every graph passed.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

from .generator import Config
from .runner import STATUSES, GraphResult, check_batch, report_failure, summarize, timed_batches


def _config(args) -> Config:
    c = Config()
    if args.no_special:
        c.p_special = 0.0
    if args.no_zero_d:
        c.p_zero_d = 0.0
    if args.ops:
        c.ops = tuple(args.ops.split(","))
    return c


def _flags(args) -> list[str]:
    out = []
    if args.no_special:
        out.append("--no-special")
    if args.no_zero_d:
        out.append("--no-zero-d")
    if args.ops:
        out += ["--ops", args.ops]
    return out


def worker(args) -> int:
    """Check the given seeds batch by batch; one JSON line per graph on stdout."""
    import braze
    seeds = [int(s) for s in args.seeds.split(",")]
    for chunk in timed_batches(seeds, args.batch):
        print("BATCH " + ",".join(map(str, chunk)), flush=True)
        c0 = braze.stats()["native_compiles"]
        for r in check_batch(chunk, _config(args), os.environ.get("BRAZE_CACHE_DIR")):
            print("RESULT " + json.dumps(r.to_json()), flush=True)
        print(f"COMPILES {braze.stats()['native_compiles'] - c0}", flush=True)
    return 0


def _spawn(seeds, args, env, compiles: list) -> tuple[list[GraphResult], list[int] | None, list[int], str]:
    """Run a worker on ``seeds``: (results, the batch it died in or None, seeds not reached, how it ended);
    the C compiles it ran are appended to ``compiles``."""
    cmd = [sys.executable, "-m", "braze.fuzz", "--worker", "--seeds", ",".join(map(str, seeds)),
           "--batch", str(args.batch), *_flags(args)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    results, batch = [], None
    err_lines: list[str] = []
    t = threading.Thread(target=lambda: err_lines.extend(p.stderr), daemon=True)
    t.start()
    done: set[int] = set()
    for line in p.stdout:
        if line.startswith("BATCH "):
            batch = [int(s) for s in line[6:].split(",")]
        elif line.startswith("COMPILES "):
            compiles.append(int(line.split()[1]))
        elif line.startswith("RESULT "):
            r = GraphResult(**json.loads(line[7:]))
            results.append(r)
            done.add(r.seed)
    rc = p.wait()
    t.join(timeout=5)
    if rc == 0:
        return results, None, [], ""
    died = [s for s in (batch or []) if s not in done]
    rest = [s for s in seeds if s not in done and s not in died]
    how = f"worker exited with status {rc}" if rc > 0 else f"worker killed by signal {-rc}"
    tail = "".join(err_lines[-5:]).strip()
    return results, died, rest, how + (f": {tail[-400:]}" if tail else "")


def parent(args) -> int:
    if args.seeds:
        seeds = [int(s) for s in args.seeds.split(",")]
    elif args.graphs is None:
        seeds = [args.seed]
    else:
        seeds = list(range(args.seed, args.seed + args.graphs))
    config = _config(args)
    env = dict(os.environ)
    tmp = None
    if not env.get("BRAZE_CACHE_DIR") or args.fresh_cache:
        tmp = tempfile.TemporaryDirectory(prefix="braze-fuzz-")
        env["BRAZE_CACHE_DIR"] = tmp.name
    if args.jobs > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.jobs))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)  # this braze
    work: queue.Queue = queue.Queue()
    for i in range(0, len(seeds), args.per_worker):
        work.put(seeds[i:i + args.per_worker])
    results: list[GraphResult] = []
    compiles: list[int] = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    last = [t0]

    def progress():
        with lock:
            n = len(results)
            if time.perf_counter() - last[0] > args.progress or n == len(seeds):
                last[0] = time.perf_counter()
                bad = sum(r.status != "ok" for r in results)
                print(f"[{time.perf_counter() - t0:7.0f} s] {n}/{len(seeds)} graphs, {bad} not ok", flush=True)

    def run_worker():
        while True:
            try:
                chunk = work.get_nowait()
            except queue.Empty:
                return
            res, died, rest, how = _spawn(chunk, args, env, compiles)
            if died:
                if len(died) == 1:
                    res.append(GraphResult(died[0], "crash", how))
                else:  # pin the crash on one seed: each graph of the batch alone
                    for s in died:
                        work.put([s])
            if rest:
                work.put(rest)
            with lock:
                results.extend(res)
            progress()

    threads = [threading.Thread(target=run_worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    results.sort(key=lambda r: r.seed)
    failures = [r for r in results if r.status != "ok"]
    for r in failures:
        print(report_failure(r, config) if not args.brief else
              f"seed {r.seed}: {r.status}: {r.message[:300]}", flush=True)
    print(summarize(results, secs, sum(compiles)))
    if args.out:
        with open(args.out, "w") as fh:
            for r in results:
                fh.write(json.dumps(r.to_json()) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m braze.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, help="how many graphs (seeds seed..seed+graphs-1)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (alone: just this graph)")
    ap.add_argument("--seeds", help="comma-separated seeds, compiled together")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    ap.add_argument("--batch", type=int, default=8, help="graphs per compile")
    ap.add_argument("--per-worker", type=int, default=96, help="graphs per worker process")
    ap.add_argument("--no-special", action="store_true", help="no inf/nan/huge inputs")
    ap.add_argument("--no-zero-d", action="store_true", help="no 0-d parameters")
    ap.add_argument("--ops", help="only these ops (comma-separated)")
    ap.add_argument("--out", help="write one JSON line per graph here")
    ap.add_argument("--brief", action="store_true", help="failures in one line each, without their IR")
    ap.add_argument("--fresh-cache", action="store_true", help="a private compile cache even if BRAZE_CACHE_DIR is set")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--localize", action="store_true", help="with --seed: find the first node that differs")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.graphs is None and not args.seeds:
        return show_one(args)
    return parent(args)


def show_one(args) -> int:
    """One seed in this process: its IR, run shapes and outcome."""
    from .generator import generate
    config = _config(args)
    g = generate(args.seed, config=config)
    print(g.text())
    print("run shapes:", g.envs, "special inputs:" if g.special else "", "yes" if g.special else "")
    (r,) = check_batch([args.seed], config)
    print(f"seed {r.seed}: {r.status}" + (f": {r.message}" if r.message else ""))
    if args.localize and r.status == "mismatch":
        from .triage import localize
        print(localize(args.seed, config))
    return 0 if r.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "STATUSES"]
