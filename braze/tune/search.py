"""Measuring a module's missing buckets and choosing each bucket's kernel.

Per site (a product's shape and epilogue) the buckets of M inside its range, up to the mode's
cap, that the database lacks are measured in one child process (measure.py) at each bucket's
lowest and highest M. A kernel replaces the default rule's choice in a bucket only when, at both
ends, the median over rounds of its time over the default's is at most 1 - ``MIN_GAIN`` and below
1 by ``MADS`` standard errors (``_wins``), and a second child process (fresh primitives, fresh
rounds) confirms it. Ties
keep the default. Every measured bucket becomes a database line, its winner "default" where
nothing won (so it is not measured again). Where the child fails, the site it was measuring is
recorded with the failure and keeps the default; the sites after it are left to a later compile.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from .. import log as _logging
from ..options import TUNE_MODES as MODES
from .buckets import buckets, choice_at
from .db import Database, env_key
from .products import CHOICES, DEFAULT, ProductSite

# fast: the kernels that differ most, up to M = 1024; full: every kernel, more rounds, M to 4096
PLANS = {"fast": {"paths": {"gemm": ("smallm", "dnnl"), "conv1x1": ("conv", "smallm", "dnnl")}, "cap": 1024,
                  "rounds": 9},
         "full": {"paths": CHOICES, "cap": 4096, "rounds": 15}}
MIN_GAIN = 0.03
MADS = 3.0
LOAD_WAIT_S = 30.0

_log = _logging.get("tune")


def missing(db: Database, env: str, site: ProductSite, lo: int, hi: int, mode: str) -> list[tuple[int, int]]:
    have = db.buckets(env, site.key)
    return [b for b in buckets(lo, min(hi, PLANS[mode]["cap"] - 1)) if b not in have]


def _points(bucket, lo, hi) -> list[int]:
    return sorted({max(bucket[0], lo), min(bucket[1], hi)})


def _median_mad(xs) -> tuple[float, float]:
    med = statistics.median(xs)
    return med, statistics.median(abs(x - med) for x in xs)


def _wins(t: dict, path: str, base: str, m: int) -> bool:
    """Whether ``path`` beats ``base`` at M=m in these times (ns per call, one sample per round):
    the median over rounds of each round's ratio (a round times both kernels back to back, so a
    slow spell of the machine moves both) at most 1 - MIN_GAIN, and below 1 by MADS standard
    errors of that median (1.858 MAD / sqrt(rounds) for normal noise: 1.2533 sigma / sqrt(n),
    sigma = 1.4826 MAD)."""
    p, b = t.get(path, {}).get(str(m)), t.get(base, {}).get(str(m))
    if not p or not b or len(p) != len(b):
        return False
    ratio, mad = _median_mad([x / y for x, y in zip(p, b)])
    return ratio <= 1 - MIN_GAIN and 1 - ratio >= MADS * 1.858 * mad / len(p) ** 0.5


def winner(times: dict, points: list[int], paths, default: tuple = DEFAULT) -> str:
    """The path that beats the ``default`` rule's choice at every point where it is not that
    choice (and is not it everywhere), the fastest of those by the sum of its medians; "default"
    where none does."""
    best, best_t = "default", None
    for p in paths:
        defaults = [choice_at(default, m) for m in points]
        if p in (times or {}) and any(d != p for d in defaults) and \
                all(d == p or _wins(times, p, d, m) for d, m in zip(defaults, points)):
            t = sum(statistics.median(times[p][str(m)]) for m in points)
            if best_t is None or t < best_t:
                best, best_t = p, t
    return best


def _wait_for_quiet(threads: int, budget_s: float) -> float:
    """Waits (at most LOAD_WAIT_S, and a tenth of the budget) while the 1-minute load average is
    above threads + 0.5: another process's work would be timed with ours. The load at the end."""
    stop = time.time() + min(LOAD_WAIT_S, budget_s / 10)
    load = os.getloadavg()[0]
    while load > threads + 0.5 and time.time() < stop:
        time.sleep(1.0)
        load = os.getloadavg()[0]
    if load > threads + 0.5:
        _log.warning("tuning with a load average of %.1f on %d threads: the figures may be noisy", load, threads)
    return load


def _child(job: dict, threads: int, timeout: float) -> tuple[list[dict], str]:
    """Runs measure.py on ``job``; its result lines and, if it failed, why."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("BRAZE_DUMP", None)
    try:
        r = subprocess.run([sys.executable, "-m", "braze.tune.measure"], input=json.dumps(job), text=True,
                           capture_output=True, env=env, timeout=max(timeout, 30.0))
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = f"timed out after {timeout:.0f} s", -1
    lines = []
    for line in out.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return lines, "" if rc == 0 else (err.strip().splitlines() or [f"exit status {rc}"])[-1][:300]


def _first_winners(todo, results: dict, paths) -> dict:
    """(site index, bucket) -> the kernel that won it in the first process's times."""
    out = {}
    for i, (s, lo, hi, bs) in enumerate(todo):
        r = results.get(i)
        if r and not r["skipped"]:
            for b in bs:
                w = winner(r["times"], _points(b, lo, hi), paths[s.kind], s.default)
                if w != "default":
                    out[(i, b)] = w
    return out


def _confirmed(todo, sites: list[dict], first: dict, job: dict, threads: int, deadline: float) -> tuple[dict, int]:
    """The winners of ``first`` that a fresh process, timing each against the default alone at
    the bucket's ends, confirms; and its measurement count."""
    csites = []
    for i, (s, lo, hi, bs) in enumerate(todo):
        won = [b for b in bs if (i, b) in first]
        if won:
            pts = sorted({m for b in won for m in _points(b, lo, hi)})
            paths = {first[(i, b)] for b in won} | {choice_at(s.default, m) for m in pts}
            csites.append(dict(sites[i], points=pts, paths=sorted(paths, key=list(s.choices).index)))
    again, _ = _child(dict(job, sites=csites), threads, deadline - time.time() + 60)
    out = {}
    for r in again:
        s, lo, hi, bs = todo[r["id"]]
        for b in bs:
            w = first.get((r["id"], b))
            if w is not None and winner(r["times"], _points(b, lo, hi), [w], s.default) == w:
                out[(r["id"], b)] = w
    return out, _count(again)


def _count(results) -> int:
    return sum(len(ts) for r in results for ts in r["times"].values())


def measure(db: Database, env: dict, todo: list[tuple[ProductSite, int, int, list]], mode: str, budget_s: float,
            cache_dir=None) -> int:
    """Measures ``todo`` (site, M's lowest, M's highest, missing buckets) and appends the database
    lines. The number of measurements made (a kernel timed at one M)."""
    plan = PLANS[mode]
    threads = env["threads"]
    t0 = time.time()
    deadline = t0 + budget_s
    load = _wait_for_quiet(threads, budget_s)
    sites = [{"id": i, "site": {"n": s.n, "k": s.k, "transposed": s.transposed, "bias": s.bias,
                                "residual": s.residual, "act": s.act, "kind": s.kind, "dtype": s.dtype,
                                "out_dtype": s.out_dtype, "bias_dtype": s.bias_dtype},
              "points": sorted({m for b in bs for m in _points(b, lo, hi)}), "paths": list(plan["paths"][s.kind])}
             for i, (s, lo, hi, bs) in enumerate(todo)]
    job = {"rounds": plan["rounds"], "warmup": 3, "deadline": deadline, "cache_dir": cache_dir, "sites": sites}
    _log.info("tune: measuring %d product site(s), %d bucket(s) of M (budget %.0f s)", len(todo),
              sum(len(t[3]) for t in todo), budget_s)
    lines, failure = _child(job, threads, deadline - time.time() + 60)
    results = {r["id"]: r for r in lines}
    count = _count(lines)
    first = _first_winners(todo, results, plan["paths"])
    confirmed = {}
    if first and time.time() < deadline:
        confirmed, n = _confirmed(todo, sites, first, job, threads, deadline)
        count += n
    # a failed process: the site it was on is recorded with the failure (never measured again);
    # the sites after it are left to a later compile
    culprit = next((i for i in range(len(todo)) if i not in results), None) if failure else None
    records = []
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for i, (s, lo, hi, bs) in enumerate(todo):
        r = results.get(i)
        if (r is None and i != culprit) or (r is not None and r["skipped"]):
            continue
        for b in bs:
            rec = {"v": 1, "env": env_key(env), "env_info": env, "site": s.key, "bucket": list(b), "mode": mode,
                   "points": _points(b, lo, hi), "winner": confirmed.get((i, b), "default"), "at": now,
                   "load": round(load, 2)}
            if r is None:
                rec["error"] = f"the measuring process failed: {failure}"
            else:
                pts = {str(m) for m in rec["points"]}
                rec["times_us"] = {p: {m: [round(x / 1e3, 3) for x in _median_mad(v)] for m, v in ts.items()
                                       if m in pts} for p, ts in r["times"].items()}
                if r["rejected"]:
                    rec["rejected"] = r["rejected"]
                pruned = {p: ms for p, at in r.get("pruned", {}).items() if (ms := [m for m in rec["points"] if m in at])}
                if pruned:  # not timed there: it would have run another kernel's code (measure.py)
                    rec["pruned"] = pruned
                if (i, b) in first and (i, b) not in confirmed:
                    rec["unconfirmed"] = first[(i, b)]
            records.append(rec)
        won = sorted({confirmed[(i, b)] for b in bs if (i, b) in confirmed})
        _log.info("tune: %s: %d bucket(s) measured, %s", s.describe(), len(bs),
                  f"won by {', '.join(won)} in some" if won else "the default rule everywhere")
    db.append(records)
    if failure:
        _log.warning("tune: the measuring process failed (%s); its site keeps the default rule", failure)
    _log.info("tune: %d measurement(s) in %.1f s", count, time.time() - t0)
    return count
