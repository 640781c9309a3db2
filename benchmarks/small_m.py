"""braze's small-M kernel against oneDNN's own, on BERT-base's encoder weights, per M and dtype.

    python -m benchmarks.small_m [--dtypes f32,bf16] [--ms 1,2,4,8,16,24,32,48,64] [--rounds 11]
                                 [--threads 2] [--out benchmarks/results] [--stem small_m]

At small M a linear layer is one pass over its weight (docs/gemm.md). This packs the 72 weights
of BERT-base's 12 encoder layers (random, [N, K] as torch's linear holds them; 340 MB in float32,
170 MB in bfloat16, so they do not fit in the caches) with the helper (``braze_pack_b_const``, as a model
does: an AVX2 build's kernels read the kept float32 constant up to M = 12 and their own 16-column
panels of it up to 127, docs/gemm.md),
then per M runs all 72 products (bias, GELU on the FFN's first) once through braze's kernel and
once through oneDNN's (``braze_dnnl_set_small_m(0)``), alternating, ``--rounds`` times. It reports
the median time of each path, the ratio (the median over rounds of each round's oneDNN / kernel:
above 1, the kernel is faster) and the kernel's weight bandwidth. bfloat16 runs where the CPU has
AVX512_BF16 or AMX-BF16 (the operands bfloat16, the result float32).

Writes ``STEM.json`` and ``STEM.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes as C
import os
import statistics
import sys
import time

import numpy as np

DT = {"f32": 0, "bf16": 1}
# BERT-base's encoder GEMMs per layer: (N, K, activation code): q, k, v, attention output, FFN up
# (GELU, erf: code 2), FFN down
LAYER = [(768, 768, 0), (768, 768, 0), (768, 768, 0), (768, 768, 0), (3072, 768, 2), (768, 3072, 0)]
LAYERS = 12


def measure(lib, dtype: str, ms: list[int], rounds: int) -> list[dict]:
    import ml_dtypes
    code = DT[dtype]
    np_dt = np.float32 if dtype == "f32" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    err = C.create_string_buffer(1024)
    packed, biases, kept = [], [], []
    for _ in range(LAYERS):
        for n, k, act in LAYER:
            w = rng.standard_normal((n, k), dtype=np.float32)
            pb = lib.braze_pack_b_const(w.ctypes.data, 0, code, n, k, 1, err, 1024)
            if not pb:
                raise RuntimeError(err.value.decode())
            packed.append((pb, n, k, act))
            kept.append(w)  # the constant the packed weight may read: alive while packed
            biases.append(rng.standard_normal(n, dtype=np.float32))
    types = (code << 12) | (0 << 14) | (0 << 16)  # operands in dtype, float32 result and bias
    weight_bytes = sum(n * k for _, n, k, _ in packed) * (4 if dtype == "f32" else 2)
    small_m = lib.braze_dnnl_small_m()
    rows = []
    try:
        for m in ms:
            xs = {k: rng.standard_normal((m, k), dtype=np.float32).astype(np_dt) for k in (768, 3072)}
            outs = {n: np.empty((m, n), np.float32) for n in (768, 3072)}

            def run():
                t = time.perf_counter()
                for (pb, n, k, act), b in zip(packed, biases):
                    if lib.braze_matmul(m, n, k, xs[k].ctypes.data, pb, b.ctypes.data, None, act | types,
                                        outs[n].ctypes.data, err, 1024):
                        raise RuntimeError(err.value.decode())
                return time.perf_counter() - t

            tk, to = [], []
            # the kernel forced at this M (above braze_dnnl_small_m too: where the cutover should be)
            for limit, ts in ((m, tk), (0, to)):  # warm both: primitives made, weights touched
                lib.braze_dnnl_set_small_m(limit)
                run()
            for r in range(rounds):
                for limit, ts in (((m, tk), (0, to)) if r % 2 == 0 else ((0, to), (m, tk))):
                    lib.braze_dnnl_set_small_m(limit)
                    ts.append(run())
            row = {"m": m, "kernel_ms": statistics.median(tk) * 1e3, "onednn_ms": statistics.median(to) * 1e3,
                   "onednn_over_kernel": statistics.median(o / k for o, k in zip(to, tk)),
                   "kernel_gbs": weight_bytes / statistics.median(tk) / 1e9, "models_take_it": m <= small_m}
            rows.append(row)
            print(f"  {dtype} M={m}: kernel {row['kernel_ms']:.2f} ms, oneDNN {row['onednn_ms']:.2f} ms "
                  f"(oneDNN / kernel {row['onednn_over_kernel']:.3f}x), {row['kernel_gbs']:.1f} GB/s", flush=True)
    finally:
        lib.braze_dnnl_set_small_m(small_m)
        for pb, *_ in packed:
            lib.braze_free_packed_b(pb)
    return rows


def to_markdown(doc: dict) -> str:
    m = doc["meta"]
    mach = m["machine"]
    lines = [f"Run {m['date']} on {mach['cpu']} ({mach['cores']} cores, ISA {' '.join(mach['isa'])}), "
             f"{m['threads']} threads, braze {m['braze']}. BERT-base's 72 encoder GEMMs (bias; GELU on the FFN's "
             f"first), all of them per call, braze's small-M kernel and oneDNN's alternating in one process, "
             f"{m['rounds']} rounds; `oneDNN / kernel` is the median over rounds of each round's ratio (above "
             f"1.00x the kernel is faster), the kernel forced at every M; models take it at M <= {m['small_m']} "
             f"(`braze_dnnl_small_m`)."
             + ("" if "avx512f" in mach["isa"] else " Without AVX-512 the kernel takes a packed weight up to M = 127 "
                "(braze_dnnl_smallm_avx2.c: dot products on the kept constant to 12, its 16-column panels from 13): "
                "above, both columns are oneDNN's."), ""]
    lines += ["| dtype | M | kernel ms | oneDNN ms | oneDNN / kernel | kernel weight GB/s |",
              "|---|---:|---:|---:|---:|---:|"]
    for dt, rows in doc["results"].items():
        for r in rows:
            lines.append(f"| {dt} | {r['m']} | {r['kernel_ms']:.2f} | {r['onednn_ms']:.2f} | "
                         f"{r['onednn_over_kernel']:.3f}x | {r['kernel_gbs']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default="f32,bf16", help="comma-separated: f32, bf16 (bf16 where the CPU runs it)")
    ap.add_argument("--ms", default="1,2,4,8,16,24,32,48,64", help="row counts")
    ap.add_argument("--rounds", type=int, default=11, help="alternating rounds per M (default 11)")
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads (default 2)")
    ap.add_argument("--out", default="benchmarks/results", help="directory for STEM.json and STEM.md")
    ap.add_argument("--stem", default="small_m", help="the results' file name, less .json / .md")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)

    import braze
    from braze.codegen.isa import host_isa
    from braze.extern import onednn
    from braze.passes.precision import library_dtypes

    from .run import _machine, write_results
    lib = onednn.load_standalone()
    dtypes = a.dtypes.split(",")
    for d in dtypes:
        if d not in DT:
            ap.error(f"unknown dtype {d!r}; choose from {', '.join(DT)}")
    if "bf16" in dtypes and "bfloat16" not in library_dtypes(host_isa().host_features):
        print("this CPU runs no bfloat16 GEMMs natively (AVX512_BF16 or AMX-BF16): bf16 left out", file=sys.stderr)
        dtypes.remove("bf16")
    ms = [int(x) for x in a.ms.split(",")]
    results = {d: measure(lib, d, ms, a.rounds) for d in dtypes}
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "rounds": a.rounds,
                    "small_m": lib.braze_dnnl_small_m(), "braze": braze.__version__, "machine": _machine(a.threads)},
           "results": results}
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
