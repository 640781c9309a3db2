"""Batched matmul of two activations (attention's q @ K^T and p @ V) at small M: braze's small-M
kernels against oneDNN's per-shape primitive, already made (the steady state of a fixed shape).

    python -m benchmarks.small_m_bmm [--rounds 3] [--calls 200] [--threads 2] [--out benchmarks/results]

Per case, alternating in one process: ``--calls`` calls through the kernels, then as many through
the primitive (``braze_dnnl_set_small_bmm(0)``), each path's median call; the point is the median over
``--rounds`` rounds. At a new shape the primitive would first be created (0.15-0.35 ms each at
decode, docs/gemm.md); that cost is not in these figures. The rule ``BMM_SMALL_M``
(``braze_dnnl_matmul.c``, ``braze_dnnl_set_small_bmm``) comes from them.

Writes ``small_m_bmm.json`` and ``small_m_bmm.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes as C
import statistics
import sys
import time

import numpy as np

# (batch, M, N, K, B transposed): attention heads at decode (M = 1) and at short sequences
CASES = [(12, 1, 128, 64, 1), (12, 1, 64, 128, 0), (32, 1, 1024, 128, 1), (32, 1, 128, 1024, 0),
         (12, 8, 128, 64, 1), (12, 16, 16, 64, 1), (12, 16, 64, 16, 0), (4, 16, 128, 64, 1),
         (12, 24, 24, 64, 1), (12, 24, 64, 24, 0), (12, 32, 32, 64, 1), (12, 32, 64, 128, 0),
         (4, 32, 128, 64, 1), (12, 48, 48, 64, 1), (12, 48, 64, 48, 0)]


def _time(lib, case, small: bool, calls: int) -> float:
    bt, m, n, k, tb = case
    rng = np.random.default_rng(0)
    a = rng.standard_normal((bt, m, k), dtype=np.float32)
    b = rng.standard_normal((bt, n, k) if tb else (bt, k, n), dtype=np.float32)
    out = np.empty((bt, m, n), np.float32)
    err = C.create_string_buffer(1024)
    before = lib.braze_dnnl_small_bmm()
    lib.braze_dnnl_set_small_bmm(48 if small else 0)  # the kernels at every M here, or none
    try:
        args = (bt, m, n, k, a.ctypes.data, 0, b.ctypes.data, tb, 1.0, out.ctypes.data, err, 1024)
        times = []
        for i in range(calls + 5):
            t0 = time.perf_counter()
            if lib.braze_batch_matmul(*args):
                raise RuntimeError(err.value.decode())
            if i >= 5:
                times.append(time.perf_counter() - t0)
    finally:
        lib.braze_dnnl_set_small_bmm(before)
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200, help="calls per path and round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    import os
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import braze
    from braze.extern import onednn

    from .run import _machine, write_results
    lib = onednn.load_standalone()
    points = []
    for case in CASES:
        runs = [(_time(lib, case, True, a.calls), _time(lib, case, False, a.calls)) for _ in range(a.rounds)]
        kern, prim = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        points.append({"case": list(case), "kernel_us": round(kern, 2), "primitive_us": round(prim, 2),
                       "ratio": round(kern / prim, 3)})
        print(f"{case}: kernel {kern:.1f} us, primitive {prim:.1f} us, {kern / prim:.2f}", flush=True)
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "braze": braze.__version__,
                    "machine": _machine(a.threads), "rounds": a.rounds, "calls": a.calls}, "results": points}
    print(write_results(a.out, "small_m_bmm", doc, _markdown))
    return 0


def _markdown(doc: dict) -> str:
    m, mc = doc["meta"], doc["meta"]["machine"]
    lines = ["# Batched matmul at small M: braze's kernels against a primitive already made "
             "(benchmarks/small_m_bmm.py)", "",
             f"{m['date']}; {mc['cpu']}, {mc['cores']} cores ({', '.join(mc['isa'])}); {m['threads']} threads; "
             f"braze {m['braze']}. Median µs per call over {m['calls']} calls, median of {m['rounds']} rounds, the "
             "paths alternating in one process. kernel / primitive above 1: the primitive is faster once made.", "",
             "| batch | M | N | K | B | kernel µs | primitive µs | kernel / primitive |", "|---:|---:|---:|---:|---|---:|---:|---:|"]
    for p in doc["results"]:
        bt, mm, n, k, tb = p["case"]
        lines.append(f"| {bt} | {mm} | {n} | {k} | {'[N, K]' if tb else '[K, N]'} | {p['kernel_us']} | "
                     f"{p['primitive_us']} | {p['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
