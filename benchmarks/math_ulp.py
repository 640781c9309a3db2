"""The float32 math of generated kernels: maximum ulp error and speed, per function.

    python -m benchmarks.math_ulp [--stride 64] [--out benchmarks/results]

For each function, braze's own vector code (braze_vmath.h / braze_vec.h, as the kernels
call it: a vector body and its scalar remainder) and, where glibc's vector math library
(libmvec) has the function, libmvec's, on this host's vector width:

* error: every ``stride``-th float32 bit pattern (all finite inputs at stride 1; 67
  million at the default 64) against float64 (NumPy, SciPy for erf and GELU), in units
  in the last place of the float32 result. Results of magnitude below 1e-30 are left
  out (exp's own: below the smallest normal): there the exp inside flushes what would
  be a denormal to 0, by design (docs/semantics.md). Infinities and NaN must match
  exactly.
* speed: nanoseconds per element of one L1-resident 4096-element block computed again
  and again (the cost of the math itself, as inside a fused kernel's row), median of runs.

Writes ``math.json`` and ``math.md`` to ``--out``. docs/semantics.md quotes the table.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from pathlib import Path

import numpy as np

def _ref() -> dict:
    """name: (float64 reference, libmvec's float32 name or None)."""
    from scipy import special as sp
    return {
        "exp": (np.exp, "expf"),
        "expm1": (np.expm1, "expm1f"),
        "log": (np.log, "logf"),
        "log1p": (np.log1p, "log1pf"),
        "tanh": (np.tanh, "tanhf"),
        "erf": (sp.erf, "erff"),
        "sigmoid": (sp.expit, None),
        "silu": (lambda x: x * sp.expit(x), None),
        "gelu": (lambda x: 0.5 * x * sp.erfc(-x / np.sqrt(2.0)), None),
        "gelu_tanh": (lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))), None),
        "sin": (np.sin, "sinf"),
        "cos": (np.cos, "cosf"),
    }


# braze_vmath.h's own code under another name where kernels call libmvec's (braze_vec.h)
OWN = {"tanh": "tanh_own", "expm1": "expm1_own", "sin": None, "cos": None}


def _loop(prefix: str, vfn: str, sfn: str) -> str:
    return (f"void {prefix}(const float *x, float *y, long n) {{ long i = 0;"
            f" for (; i + BZ_VL <= n; i += BZ_VL) bz_st(&y[i], {vfn}(bz_ld(&x[i])));"
            f" for (; i < n; i++) y[i] = {sfn}(x[i]); }}")


def _source(funcs: dict, mvec: bool) -> str:
    lines = ["#include \"braze_vec.h\"", "#include <math.h>"]
    for name, (_, mname) in funcs.items():
        lines.append(_loop(f"kernel_{name}", f"bz_v{name}", f"bz_s{name}"))
        own = OWN.get(name, name)
        if own:
            lines.append(_loop(f"own_{name}", f"bz_v{own}", f"bz_s{own}"))
        if mvec and mname:
            lines.append(f"bz_vf BZ_MVEC({mname})(bz_vf);")
            lines.append(f"void mvec_{name}(const float *x, float *y, long n) {{ long i = 0;"
                         f" for (; i + BZ_VL <= n; i += BZ_VL) bz_st(&y[i], BZ_MVEC({mname})(bz_ld(&x[i])));"
                         f" for (; i < n; i++) y[i] = {mname}(x[i]); }}")
    lines.append("void bench(void (*f)(const float *, float *, long), const float *x, float *y, long n, long calls)"
                 " { for (long c = 0; c < calls; c++) f(x, y, n); }")
    return "\n".join(lines) + "\n"


def _build(funcs):
    from braze.codegen.c_kernel import c_prelude
    from braze.codegen.isa import host_isa
    from braze.runtime.compiler import compile_shared
    isa = host_isa()
    mvec = bool(isa.ldlibs)
    so = compile_shared(c_prelude(isa) + _source(funcs, mvec), name="math_ulp")
    lib = ctypes.CDLL(str(so))
    lib.bench.restype = None
    lib.bench.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
    fns = {}
    for name in funcs:
        for kind in ("kernel", "own", "mvec"):
            f = getattr(lib, f"{kind}_{name}", None)
            if f is not None:
                f.restype = None
                f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
                fns[(name, kind)] = f
    return isa, lib, fns


def _call(f, x: np.ndarray) -> np.ndarray:
    y = np.empty_like(x)
    f(x.ctypes.data, y.ctypes.data, x.size)
    return y


MIN_RESULT = 1e-30
# exp itself flushes only results below the smallest normal: every normal result counts
MIN_RESULT_OF = {"exp": float(np.finfo(np.float32).tiny)}


def max_ulp(f, ref, stride: int, chunk: int = 1 << 23, tiny: float = MIN_RESULT) -> tuple[float, float, float]:
    """(max ulp error, the input where it is, max absolute error), over every ``stride``-th
    finite float32, leaving out results of magnitude below ``tiny``."""
    worst, where, abs_worst = 0.0, float("nan"), 0.0
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64)
    for lo in range(0, bits.size, chunk):
        x = bits[lo:lo + chunk].astype(np.uint32).view(np.float32)
        x = x[np.isfinite(x)]
        got = _call(f, x).astype(np.float64)
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float64))
        w32 = want.astype(np.float32)
        special = ~np.isfinite(w32) | np.isnan(want)
        bad = special & ~((got == w32) | (np.isnan(got) & np.isnan(w32)))
        if bad.any():
            i = np.flatnonzero(bad)[0]
            return float("inf"), float(x[i]), float("inf")
        ok = ~special & (np.abs(want) >= tiny)
        ulp = np.spacing(np.abs(w32[ok])).astype(np.float64)
        err = np.abs(got[ok] - want[ok]) / ulp
        if err.size and err.max() > worst:
            worst, where = float(err.max()), float(x[ok][err.argmax()])
        fin = ~special
        if fin.any():
            abs_worst = max(abs_worst, float(np.abs(got[fin] - want[fin]).max()))
    return worst, where, abs_worst


def ns_per_element(lib, f, block: int = 4096, calls: int = 2048, repeat: int = 15) -> float:
    rng = np.random.default_rng(0)
    x = rng.uniform(-8, 8, block).astype(np.float32)
    y = np.empty_like(x)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        lib.bench(f, x.ctypes.data, y.ctypes.data, block, calls)  # the loop in C: no ctypes call per block
        times.append(time.perf_counter() - t)
    return float(np.median(times)) / (block * calls) * 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stride", type=int, default=64, help="test every N-th float32 bit pattern (1: all)")
    ap.add_argument("--out", default="benchmarks/results", help="directory for math.json and math.md")
    ap.add_argument("--only", nargs="*", help="these functions only")
    args = ap.parse_args(argv)
    refs = _ref()
    funcs = {k: v for k, v in refs.items() if not args.only or k in args.only}
    isa, lib, fns = _build(funcs)
    rows = []
    for name, (ref, _) in funcs.items():
        row = {"function": name}
        for kind in ("own", "mvec", "kernel"):
            f = fns.get((name, kind))
            if f is None:
                continue
            ulp, at, abs_err = max_ulp(f, ref, args.stride, tiny=MIN_RESULT_OF.get(name, MIN_RESULT))
            row[kind] = {"max_ulp": ulp, "at": at, "max_abs": abs_err,
                         "ns_per_element": ns_per_element(lib, ctypes.cast(f, ctypes.c_void_p))}
        rows.append(row)
        print(name, json.dumps({k: v for k, v in row.items() if k != "function"}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"isa": isa.name, "vector_bytes": getattr(isa, "vector_bytes", None), "stride": args.stride,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "math.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = [f"float32 math on {isa.name}: max error in ulp over every {args.stride}-th float32 bit pattern "
          f"(results below 1e-30 left out; exp: below the smallest normal), and ns per element (a 4096-element L1-resident block, median). braze: "
          f"braze_vmath.h's own code; libmvec: glibc's vector math; kernels: what generated kernels call.", "",
          "| function | braze ulp | braze ns/elem | libmvec ulp | libmvec ns/elem | kernels call | kernels ulp "
          "| kernels worst at x | kernels max abs error |", "|---|---|---|---|---|---|---|---|---|"]

    def cell(d):
        return f"{d['max_ulp']:.2f} | {d['ns_per_element']:.3f}" if d else "n/a | n/a"
    for r in rows:
        o, m, k = r.get("own"), r.get("mvec"), r["kernel"]
        chosen = "libmvec" if m and k["max_ulp"] == m["max_ulp"] and (not o or o["max_ulp"] != m["max_ulp"]) \
            else ("braze" if o else "libm")
        md.append(f"| {r['function']} | {cell(o)} | {cell(m)} | {chosen} | {k['max_ulp']:.2f} | {k['at']:.6g} "
                  f"| {k['max_abs']:.2g} |")
    (out / "math.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
