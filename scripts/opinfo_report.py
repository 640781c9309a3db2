"""Run the OpInfo sweep (tests/frontend/opinfo_sweep.py) and print its counts.

    python scripts/opinfo_report.py                      # everything: ~28k samples, an hour or more
    python scripts/opinfo_report.py --limit 2            # the first 2 samples of each op
    python scripts/opinfo_report.py --op add --dtype float32 --sample 3   # one sample, verbose

Prints, per dtype, ops and samples: total, exported, unsupported, claimed, ref pass, native
pass, native unsupported, failures by kind, and the 0-d cases; writes every sample's result
as JSON (--json). Compiled libraries go to a fresh temporary cache unless BRAZE_CACHE_DIR is set.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import fnmatch
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "frontend")]

import opinfo_sweep as sw  # noqa: E402

from braze.options import Options  # noqa: E402


def summarize(results):
    """Counts per dtype: {"ops": {...}, "samples": {...}}."""
    out = {}
    for dtype in sorted({r.dtype for r in results}):
        rs = [r for r in results if r.dtype == dtype]
        by_op = collections.defaultdict(list)
        for r in rs:
            by_op[r.op].append(r)
        real = [r for r in rs if r.index >= 0]
        claimed = [r for r in real if r.stage == "run" or r.failure == "import_error"]
        s = collections.Counter()
        s["total"] = len(real)
        s["exported"] = sum(r.stage in ("import", "run") for r in real)
        s["unsupported"] = sum(r.stage == "import" and r.failure is None for r in real)
        s["claimed"] = len(claimed)
        s["ref pass"] = sum(r.ref == "pass" for r in real)
        s["native pass"] = sum(r.native == "pass" for r in real)
        s["native unsupported"] = sum(r.native == "unsupported" for r in real)
        s["ref pass, native not"] = sum(r.ref == "pass" and r.native != "pass" for r in real)
        s["values not comparable"] = sum(r.stage == "run" and not r.values_compared for r in real)
        for r in real:
            if r.failure:
                s["fail: " + r.failure] += 1
        z = [r for r in claimed if r.zero_d]
        s["0-d claimed"] = len(z)
        s["0-d ref pass"] = sum(r.ref == "pass" for r in z)
        s["0-d native pass"] = sum(r.native == "pass" for r in z)
        o = collections.Counter()
        o["total"] = len(by_op)
        for op, group in by_op.items():
            g = [r for r in group if r.index >= 0]
            cl = [r for r in g if r.stage == "run" or r.failure == "import_error"]
            o["exported"] += any(r.stage in ("import", "run") for r in g)
            o["claimed"] += bool(cl)
            o["ref pass"] += bool(cl) and all(r.ref == "pass" for r in cl)
            nat = [r for r in cl if r.native != "unsupported"]
            o["native pass"] += bool(nat) and all(r.native == "pass" for r in nat)
            o["native unsupported"] += any(r.native == "unsupported" for r in cl)
            o["with failures"] += any(r.failed for r in g)
        out[dtype] = {"ops": dict(o), "samples": dict(s)}
    return out


def write_json(path, results) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps({"summary": summarize(results), "results": [r.as_dict() for r in results]},
                              indent=1))
    tmp.replace(path)


def failure_table(results) -> str:
    """One line per (op, dtype, kind of failure): how many samples, the first one's message and repro."""
    groups = collections.OrderedDict()
    for r in results:
        if r.failed:
            groups.setdefault((r.op, r.dtype, r.failure), []).append(r)
    lines = [f"{len(groups)} (op, dtype, failure) groups"]
    for (op, dtype, kind), rs in groups.items():
        lines.append(f"{op} {dtype} {kind} x{len(rs)}: {rs[0].error[:200]}\n    repro: {rs[0].repro}")
    return "\n".join(lines)


def table(summary) -> str:
    dtypes = list(summary)
    lines = []
    for kind in ("ops", "samples"):
        keys = []
        for d in dtypes:
            keys += [k for k in summary[d][kind] if k not in keys]
        lines.append(f"{kind:28s}" + "".join(f"{d:>10s}" for d in dtypes))
        for k in keys:
            lines.append(f"  {k:26s}" + "".join(f"{summary[d][kind].get(k, 0):>10d}" for d in dtypes))
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=sw.DTYPES, action="append", help="default: every one (%s)" % ", ".join(sw.DTYPES))
    ap.add_argument("--op", action="append", help="op id or glob (e.g. 'add', 'nn.functional.*'); repeatable")
    ap.add_argument("--limit", type=int, default=None, help="first N samples per op (default: all)")
    ap.add_argument("--sample", type=int, default=None, help="only this sample index (with --op)")
    ap.add_argument("--no-native", action="store_true", help="reference only")
    ap.add_argument("--json", default=None, help="write every sample's result here")
    ap.add_argument("--chunk", type=int, default=20, help="ops whose samples compile together (default 20)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every sample")
    ap.add_argument("--failures", action="store_true", help="with --load: list the failures, grouped")
    ap.add_argument("--shard", default="0/1", help="K/N: run every N-th chunk from chunk K (N processes "
                                                   "share a run; merge their JSON with --load)")
    ap.add_argument("--chunks", default=None, help="only these chunks, as dtype:index,... (resuming a run)")
    ap.add_argument("--load", nargs="+", default=None, help="print the table of JSON written earlier (a later file's samples replace "
                         "the same samples of an earlier one); run nothing")
    a = ap.parse_args(argv)
    a.shard = tuple(int(v) for v in a.shard.split("/"))
    a.chunks = None if a.chunks is None else set(a.chunks.split(","))
    if a.load:
        fields = {f.name for f in dataclasses.fields(sw.SampleResult)}
        by_sample = {(d["op"], d["dtype"], d["index"]): sw.SampleResult(**{k: v for k, v in d.items() if k in fields})
                     for path in a.load for d in json.loads(Path(path).read_text())["results"]}
        rs = list(by_sample.values())  # a later file's sample replaces an earlier one's (a re-run)
        print(table(summarize(rs)))
        if a.failures:
            print(failure_table(rs))
        return 0
    cache = os.environ.get("BRAZE_CACHE_DIR") or tempfile.mkdtemp(prefix="braze-opinfo-")
    options = Options.from_env().replace(cache_dir=cache)
    results = []
    t0 = time.perf_counter()
    for dtype in a.dtype or sw.DTYPES:
        ops = sw.ops_for(dtype)
        if a.op:
            ops = [o for o in ops if any(fnmatch.fnmatchcase(sw.op_id(o), p) for p in a.op)]
        for ci, k in enumerate(range(0, len(ops), a.chunk)):
            if ci % a.shard[1] != a.shard[0] or (a.chunks is not None and f"{dtype}:{ci}" not in a.chunks):
                continue
            chunk = ops[k:k + a.chunk]
            got = sw.run_ops([(o, dtype) for o in chunk], options, limit=a.limit, native=not a.no_native,
                             only=a.sample)
            for rs in got.values():
                results += rs
                for r in rs:
                    if a.verbose or r.failed or a.sample is not None:
                        status = r.failure or r.skip or f"ref {r.ref}, native {r.native}"
                        print(f"{r.op} {dtype} #{r.index}: {status}" + (f": {r.error}" if r.failed else ""),
                              file=sys.stderr, flush=True)
            print(f"[{dtype}] {k + len(chunk)}/{len(ops)} ops, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            if a.json:  # after every chunk: a long run that is stopped keeps what it did
                write_json(a.json, results)
    summary = summarize(results)
    print(table(summary))
    print(f"{len(results)} samples in {time.perf_counter() - t0:.0f} s")
    if a.json:
        write_json(a.json, results)
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
