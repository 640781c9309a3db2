"""GEMM / convolution libraries braze could call, measured at a fixed thread count.

    python benchmarks/gemm_candidates.py [--threads 2] [--quick] [--out benchmarks/results]

Candidates (fp32):
  onednn      braze's helper (braze/extern/csrc/braze_dnnl_matmul.c): prepacked weights,
              post-ops, primitive per shape cached (and, for the comparison,
              one primitive with a run-time M)
  mlas        ONNX Runtime (a MatMul-only model, constant B, intra_op_num_threads)
  numpy       numpy's BLAS (OpenBLAS in the wheels)
  torch       torch.nn.functional.linear / conv2d (MKL / oneDNN inside torch)

Each number is the median GFLOP/s over several timed repeats; each repeat
runs the call enough times to last ~`--rep-seconds`. Writes
<out>/gemm_candidates.json and .md. On a shared machine the numbers are
noisy: compare medians, and see the `load` field (1-minute load average
at the start and the end).
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


# --------------------------------------------------------------------------- helpers

def timeit(fn, flops: float, rep_seconds: float, repeats: int) -> dict:
    fn()  # warm (creates primitives, packs, ...)
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(rep_seconds / one))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    med = statistics.median(times)
    return {"seconds": med, "gflops": flops / med / 1e9, "best_gflops": flops / min(times) / 1e9}


def fma_peak(threads: int) -> dict:
    """Peak = threads x 2 FMA units x 16 fp32 lanes x 2 flop x GHz; GHz measured by an FMA loop."""
    mhz = []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                mhz.append(float(line.split(":")[1]))
    except OSError:
        pass
    src = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
int main(void){
  __m512 m=_mm512_set1_ps(0.9999f), c=_mm512_set1_ps(1e-4f);
  __m512 a0=_mm512_set1_ps(0),a1=_mm512_set1_ps(1),a2=_mm512_set1_ps(2),a3=_mm512_set1_ps(3),a4=_mm512_set1_ps(4),a5=_mm512_set1_ps(5),a6=_mm512_set1_ps(6),a7=_mm512_set1_ps(7),a8=_mm512_set1_ps(8),a9=_mm512_set1_ps(9),a10=_mm512_set1_ps(10),a11=_mm512_set1_ps(11);
  struct timespec t0,t1; long it=400000000L/12;
  clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long k=0;k<it;k++){
#define F(x) x=_mm512_fmadd_ps(x,m,c);
    F(a0)F(a1)F(a2)F(a3)F(a4)F(a5)F(a6)F(a7)F(a8)F(a9)F(a10)F(a11)
    __asm__ volatile("" : "+v"(a0),"+v"(a1),"+v"(a2),"+v"(a3),"+v"(a4),"+v"(a5),"+v"(a6),"+v"(a7),"+v"(a8),"+v"(a9),"+v"(a10),"+v"(a11));
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  __m512 t=a0+a1+a2+a3+a4+a5+a6+a7+a8+a9+a10+a11;
  printf("%f %f\n", it*12.0*16*2/s/1e9, _mm512_reduce_add_ps(t));
  return 0;
}
"""
    out = {"cpuinfo_mhz": statistics.median(mhz) if mhz else None}
    try:
        d = Path(tempfile.mkdtemp())
        (d / "fma.c").write_text(src)
        subprocess.run(["gcc", "-O2", "-mavx512f", "-mfma", str(d / "fma.c"), "-o", str(d / "fma")],
                       check=True, capture_output=True)
        runs = [float(subprocess.run([str(d / "fma")], capture_output=True, text=True).stdout.split()[0])
                for _ in range(3)]
        one_core = max(runs)  # 1 thread; the best run is the least disturbed
        # 2 FMA units x 16 lanes x 2 flop per cycle per core
        ghz = one_core / 64.0
        out.update({"fma_loop_gflops_1thread": one_core, "measured_ghz": ghz,
                    "peak_gflops": threads * 64.0 * ghz,
                    "peak_gflops_cpuinfo_clock": threads * 64.0 * (out["cpuinfo_mhz"] or 0) / 1000})
    except Exception as e:  # no AVX-512 / no gcc: fall back to the nominal clock
        out["error"] = str(e)
        out["peak_gflops"] = threads * 64.0 * (out["cpuinfo_mhz"] or 0) / 1000
    return out


# --------------------------------------------------------------------------- candidates

class OneDNN:
    def __init__(self):
        from braze.extern import onednn
        self.info = onednn.describe()
        self.lib = onednn.load_standalone()
        self.err = C.create_string_buffer(1024)
        t0 = time.perf_counter()
        if self.lib.braze_dnnl_init(self.err, 1024):
            raise RuntimeError(self.err.value.decode())
        self.init_seconds = time.perf_counter() - t0
        self.runtime = self.lib.braze_dnnl_runtime().decode()

    def linear(self, W: np.ndarray, runtime_m: bool = False):
        """W [N,K] -> (fn(A, out), pack seconds)."""
        N, K = W.shape
        t0 = time.perf_counter()
        pb = self.lib.braze_pack_b_err(W.ctypes.data, N, K, 1, self.err, 1024)
        pack = time.perf_counter() - t0
        if not pb:
            raise RuntimeError(self.err.value.decode())
        lib, err = self.lib, self.err

        def run(A, out, bias=None, act=0):
            lib.braze_dnnl_set_runtime_m(1 if runtime_m else 0)
            if lib.braze_matmul(A.shape[0], N, K, A.ctypes.data, pb, None if bias is None else bias.ctypes.data,
                                None, act, out.ctypes.data, err, 1024):
                raise RuntimeError(err.value.decode())
        run.packed = pb
        return run, pack

    def conv(self, Wt, stride, pad, layout):
        OC, ICg, KH, KW = Wt.shape
        pc = self.lib.braze_pack_conv_weights(Wt.ctypes.data, OC, ICg, KH, KW, 1, stride, stride, pad, pad,
                                              1, 1, layout, self.err, 1024)
        if not pc:
            raise RuntimeError(self.err.value.decode())
        lib, err = self.lib, self.err

        def run(X, Y, N, H, W, OH, OW, bias=None, act=0):
            if lib.braze_conv2d(N, H, W, X.ctypes.data, pc, None if bias is None else bias.ctypes.data, None,
                                act, OH, OW, Y.ctypes.data, err, 1024):
                raise RuntimeError(err.value.decode())
        return run


def mlas_linear(W: np.ndarray, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    N, K = W.shape
    g = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])], "mm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", N])],
        [numpy_helper.from_array(np.ascontiguousarray(W.T), "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()

    def run(A, out):
        binding.bind_cpu_input("A", A)
        binding.bind_output("Y", "cpu", element_type=np.float32, shape=out.shape, buffer_ptr=out.ctypes.data)
        sess.run_with_iobinding(binding)
    return run


def numpy_linear(W):
    Wt = np.ascontiguousarray(W.T)

    def run(A, out):
        np.matmul(A, Wt, out=out)
    return run


def torch_linear(W):
    import torch
    Wt = torch.from_numpy(W)

    def run(A, out):
        torch.matmul(torch.from_numpy(A), Wt.T, out=torch.from_numpy(out))
    return run


# --------------------------------------------------------------------------- shapes

def gemm_shapes(quick: bool):
    shapes = [("square 2048^3", 2048, 2048, 2048)]
    ms = [1, 8, 128, 512] if not quick else [1, 128]
    for name, n, k in (("bert/gpt2 qkv-out 768x768", 768, 768), ("bert/gpt2 ffn-up 3072x768", 3072, 768),
                       ("bert/gpt2 ffn-down 768x3072", 768, 3072), ("gpt2 qkv 2304x768", 2304, 768)):
        for m in ms:
            if name.startswith("gpt2 qkv") and m not in (1, 128):
                continue
            shapes.append((f"{name} M={m}", m, n, k))
    for b in ([1, 8, 64] if not quick else [1, 64]):
        shapes.append((f"mlp 1024->4096 B={b}", b, 4096, 1024))
        shapes.append((f"mlp 4096->4096 B={b}", b, 4096, 4096))
        shapes.append((f"mlp 4096->1000 B={b}", b, 1000, 4096))
    return shapes


# ResNet-50 convolutions (batch 1, 224x224): name, IC, OC, H, k, stride, pad
RESNET_CONVS = [
    ("stem 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3),
    ("1x1 64->64 @56", 64, 64, 56, 1, 1, 0),
    ("3x3 64->64 @56", 64, 64, 56, 3, 1, 1),
    ("1x1 64->256 @56", 64, 256, 56, 1, 1, 0),
    ("1x1 256->128 @56", 256, 128, 56, 1, 1, 0),
    ("3x3/2 128->128 @56", 128, 128, 56, 3, 2, 1),
    ("3x3 128->128 @28", 128, 128, 28, 3, 1, 1),
    ("1x1 512->256 @28", 512, 256, 28, 1, 1, 0),
    ("3x3 256->256 @14", 256, 256, 14, 3, 1, 1),
    ("1x1 1024->256 @14", 1024, 256, 14, 1, 1, 0),
    ("3x3 512->512 @7", 512, 512, 7, 3, 1, 1),
    ("1x1 2048->512 @7", 2048, 512, 7, 1, 1, 0),
]


# --------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rep-seconds", type=float, default=0.15)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--skip-conv", action="store_true")
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    from braze.codegen.isa import cpu_model
    load0 = os.getloadavg()[0]
    res = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                       "numpy": np.__version__, "torch": torch.__version__},
           "threads": args.threads, "gemm": [], "conv": [], "dynamic_m": []}
    res["peak"] = fma_peak(args.threads)
    dn = OneDNN()
    res["onednn"] = {"describe": dn.info, "runtime": dn.runtime, "engine_init_seconds": dn.init_seconds}
    try:
        import onnxruntime
        res["machine"]["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    print(f"# {res['machine']['cpu']}, {args.threads} threads; FMA peak ~{res['peak']['peak_gflops']:.0f} GFLOP/s")
    print(f"# {dn.info}; helper runtime {dn.runtime}; engine init {dn.init_seconds*1e3:.0f} ms")

    rng = np.random.default_rng(0)
    cands = ["onednn", "mlas", "numpy", "torch"]
    print(f"{'shape':40s}" + "".join(f"{c:>10s}" for c in cands))
    for name, M, N, K in gemm_shapes(args.quick):
        W = rng.standard_normal((N, K), dtype=np.float32)
        A = rng.standard_normal((M, K), dtype=np.float32)
        out = np.empty((M, N), np.float32)
        flops = 2.0 * M * N * K
        row = {"shape": name, "M": M, "N": N, "K": K}
        dnl, _ = dn.linear(W)
        fns = {"onednn": lambda: dnl(A, out), "mlas": (lambda f: lambda: f(A, out))(mlas_linear(W, args.threads)),
               "numpy": (lambda f: lambda: f(A, out))(numpy_linear(W)),
               "torch": (lambda f: lambda: f(A, out))(torch_linear(W))}
        for c in cands:
            row[c] = round(timeit(fns[c], flops, args.rep_seconds, args.repeats)["gflops"], 1)
        dn.lib.braze_free_packed_b(dnl.packed)
        res["gemm"].append(row)
        print(f"{name:40s}" + "".join(f"{row[c]:10.1f}" for c in cands), flush=True)

    # dynamic M: cached primitive per shape vs one primitive with DNNL_RUNTIME_DIM_VAL
    print("\n# oneDNN dynamic M: primitive per shape (cached) vs runtime-dim M; GFLOP/s, first-call ms")
    for N, K in ((768, 768), (3072, 768), (768, 3072)):
        W = rng.standard_normal((N, K), dtype=np.float32)
        for mode in ("cached", "runtime_m"):
            fn, pack_s = dn.linear(W, runtime_m=(mode == "runtime_m"))
            for M in (1, 8, 128, 512):
                A = rng.standard_normal((M, K), dtype=np.float32)
                out = np.empty((M, N), np.float32)
                t0 = time.perf_counter()
                fn(A, out)
                first = time.perf_counter() - t0
                t0 = time.perf_counter()
                fn(A, out)
                second = time.perf_counter() - t0
                r = timeit(lambda: fn(A, out), 2.0 * M * N * K, args.rep_seconds, args.repeats)
                row = {"N": N, "K": K, "M": M, "mode": mode, "pack_ms": round(pack_s * 1e3, 2),
                       "first_call_ms": round(first * 1e3, 3), "second_call_ms": round(second * 1e3, 3),
                       "steady_us": round(r["seconds"] * 1e6, 1), "gflops": round(r["gflops"], 1)}
                res["dynamic_m"].append(row)
                print(f"N={N:5d} K={K:5d} M={M:4d} {mode:10s} first {row['first_call_ms']:8.3f} ms  "
                      f"steady {row['steady_us']:9.1f} us {row['gflops']:7.1f} GFLOP/s", flush=True)
            dn.lib.braze_free_packed_b(fn.packed)
    dn.lib.braze_dnnl_set_runtime_m(0)

    if not args.skip_conv:
        print("\n# ResNet-50 convolutions, batch 1 (+bias+relu): GFLOP/s")
        print(f"{'conv':28s}{'dnnl nchw':>11s}{'dnnl nhwc':>11s}{'torch nchw':>11s}{'torch cl':>11s}")
        tF = torch.nn.functional
        convs = RESNET_CONVS if not args.quick else RESNET_CONVS[:4]
        for name, IC, OC, H, k, s, p in convs:
            OH = (H + 2 * p - k) // s + 1
            flops = 2.0 * OC * OH * OH * IC * k * k
            X = rng.standard_normal((1, IC, H, H), dtype=np.float32)
            Xh = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
            Wt = rng.standard_normal((OC, IC, k, k), dtype=np.float32) * 0.05
            b = rng.standard_normal(OC, dtype=np.float32)
            Y = np.empty((1, OC, OH, OH), np.float32)
            Yh = np.empty((1, OH, OH, OC), np.float32)
            row = {"conv": name}
            f0 = dn.conv(Wt, s, p, 0)
            f1 = dn.conv(Wt, s, p, 1)
            row["onednn_nchw"] = timeit(lambda: f0(X, Y, 1, H, H, OH, OH, b, 1), flops, args.rep_seconds, args.repeats)["gflops"]
            row["onednn_nhwc"] = timeit(lambda: f1(Xh, Yh, 1, H, H, OH, OH, b, 1), flops, args.rep_seconds, args.repeats)["gflops"]
            tx, tw, tb = torch.from_numpy(X), torch.from_numpy(Wt), torch.from_numpy(b)
            txc = tx.contiguous(memory_format=torch.channels_last)
            twc = tw.contiguous(memory_format=torch.channels_last)
            with torch.no_grad():
                row["torch_nchw"] = timeit(lambda: torch.relu_(tF.conv2d(tx, tw, tb, s, p)), flops, args.rep_seconds, args.repeats)["gflops"]
                row["torch_channels_last"] = timeit(lambda: torch.relu_(tF.conv2d(txc, twc, tb, s, p)), flops, args.rep_seconds, args.repeats)["gflops"]
            for kk in list(row):
                if kk != "conv":
                    row[kk] = round(row[kk], 1)
            res["conv"].append(row)
            print(f"{name:28s}{row['onednn_nchw']:11.1f}{row['onednn_nhwc']:11.1f}{row['torch_nchw']:11.1f}"
                  f"{row['torch_channels_last']:11.1f}", flush=True)

    res["load"] = {"start": load0, "end": os.getloadavg()[0]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm_candidates.json").write_text(json.dumps(res, indent=1))
    (out / "gemm_candidates.md").write_text(to_markdown(res))
    print(f"\nwrote {out / 'gemm_candidates.json'} and .md; load average {load0:.2f} -> {res['load']['end']:.2f}")


def to_markdown(res) -> str:
    pk = res["peak"]
    lines = [f"# GEMM candidates ({res['machine']['cpu']}, {res['threads']} threads, fp32)", "",
             f"FMA peak estimate: {pk.get('peak_gflops', 0):.0f} GFLOP/s "
             f"({res['threads']} cores x 2 FMA x 16 lanes x 2 flop x {pk.get('measured_ghz', 0):.2f} GHz measured; "
             f"/proc/cpuinfo says {pk.get('cpuinfo_mhz')} MHz)  ",
             f"oneDNN: {res['onednn']['describe']}; helper runtime `{res['onednn']['runtime']}`  ",
             f"Load average during the run: {res['load']['start']:.2f} -> {res['load']['end']:.2f} "
             "(a shared 2-core machine: noisy numbers, medians of repeats)", "",
             "## GEMM GFLOP/s (C = A[M,K] @ W[N,K]^T)", "",
             "| shape | M | N | K | oneDNN (braze helper) | ORT MLAS | numpy (OpenBLAS) | torch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["gemm"]:
        best = max(r[c] for c in ("onednn", "mlas", "numpy", "torch"))
        cells = [f"**{r[c]}**" if r[c] == best else str(r[c]) for c in ("onednn", "mlas", "numpy", "torch")]
        lines.append(f"| {r['shape']} | {r['M']} | {r['N']} | {r['K']} | " + " | ".join(cells) + " |")
    lines += ["", "## oneDNN with dynamic M: primitive per shape (cached) vs one runtime-M primitive", "",
              "| N | K | M | mode | first call ms | steady us | GFLOP/s |", "|---:|---:|---:|---|---:|---:|---:|"]
    for r in res["dynamic_m"]:
        lines.append(f"| {r['N']} | {r['K']} | {r['M']} | {r['mode']} | {r['first_call_ms']} | {r['steady_us']} | {r['gflops']} |")
    if res["conv"]:
        lines += ["", "## ResNet-50 convolutions, batch 1, + bias + relu (GFLOP/s)", "",
                  "| conv | oneDNN NCHW | oneDNN NHWC | torch NCHW | torch channels_last |", "|---|---:|---:|---:|---:|"]
        for r in res["conv"]:
            lines.append(f"| {r['conv']} | {r['onednn_nchw']} | {r['onednn_nhwc']} | {r['torch_nchw']} | {r['torch_channels_last']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
