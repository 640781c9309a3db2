"""CUDA-target models end to end without a GPU: braze.compile(target="cuda:sm_90") builds the real host
library (braze_cuda_rt.h over the driver API) and the NVRTC module; here the driver is fake_libcuda.cpp and
the kernels are the model's .cu compiled by g++ over cuda_emu.h (cuda_emu_build.py), so everything but
the silicon runs: driver loading, constant upload, staging of inputs and outputs, arena, launch sizes and
argument packing, bz_gemm / bz_conv2d and the generated kernels. Results are checked against torch (CPU,
float32) at several values of each dynamic dim. Float32 GEMMs run through cuBLAS (fake_libcublas.cpp, a naive
sgemm that checks its arguments as cuBLAS does) plus bz_epilogue, and again with BRAZE_CUBLAS=0 through
bz_gemm; test_gemm_mapping drives braze_cuda_rt.h's bzc_gemm directly over layouts, degenerate sizes and
every epilogue (the residual apart from or aliasing the output).

The library reads BRAZE_LIBCUDA once per process, at its first call, so each check runs in a child
process (this file run as a script) with the environment set from its start.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGET = "cuda:sm_90"
pytestmark = pytest.mark.usefixtures("module_cache")  # the children inherit BRAZE_CACHE_DIR: one compile each


# -------------------------------------------------------------------------------------------- models --
def _mlp():
    """/tmp/m2.py's: linear -> gelu -> layernorm -> softmax, dynamic batch (the module given to braze)"""
    import torch
    nn = torch.nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.ln = nn.Linear(32, 64), nn.LayerNorm(64)

        def forward(self, x):
            return self.ln(nn.functional.gelu(self.a(x))).softmax(-1)

    m = M().eval()
    with torch.no_grad():
        m.ln.weight.uniform_(0.5, 1.5)
        m.ln.bias.uniform_(-0.5, 0.5)
    ex = (torch.randn(3, 32),)
    ds = {"x": {0: torch.export.Dim("b")}}
    shapes = [(1, 32), (5, 32), (64, 32)]
    return m, ex, ds, shapes, lambda shape: torch.randn(shape), False


def _block():
    """a pre-norm transformer block over token ids: embedding, 2-head attention by plain matmuls, GELU MLP,
    residuals; hidden 32, dynamic batch and sequence (exported by torch.export, then given to braze)"""
    import torch
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, vocab=50, d=32, heads=2):
            super().__init__()
            self.h = heads
            self.emb = nn.Embedding(vocab, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, ids):
            x = self.emb(ids)
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
            a = (q @ k.transpose(-1, -2) / math.sqrt(d // self.h)).softmax(-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    m = Block().eval()
    Dim = torch.export.Dim
    ex = (torch.randint(0, 50, (2, 7)),)
    ds = {"ids": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)}}
    shapes = [(1, 1), (3, 7), (2, 16), (1, 33)]  # batch 1, 2, 3; seq 1, 7, 16, 33
    return m, ex, ds, shapes, lambda shape: torch.randint(0, 50, shape), True


def _convnet():
    """conv3x3 + BN (eval) + ReLU, a stride-2 conv, a 1x1 conv with a residual add, global average pool,
    linear; dynamic batch, H and W (H, W >= 3: torch.export specializes a stride-2 output of size 1)"""
    import torch
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.c3 = nn.Conv2d(16, 16, 1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            y = F.relu(self.bn(self.c1(x)))
            y = F.relu(self.c2(y))
            y = F.relu(self.c3(y) + y)
            return self.fc(y.mean((2, 3)))

    m = Net().eval()
    with torch.no_grad():  # BN statistics that are not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.3, 0.3)
    Dim = torch.export.Dim
    ex = (torch.randn(2, 3, 8, 8),)
    ds = {"x": {0: Dim("batch", min=1, max=64), 2: Dim("h", min=3, max=256), 3: Dim("w", min=3, max=256)}}
    shapes = [(1, 3, 3, 3), (3, 3, 9, 7), (2, 3, 16, 16), (1, 3, 5, 12)]  # batch 1,2,3; H 3,5,9,16; W 3,7,12,16
    return m, ex, ds, shapes, lambda shape: torch.randn(shape), True


def _attention():
    """softmax(x @ x^T / 4) @ x over [batch, heads, seq, 16]: the first product reads its right operand
    transposed in place (braze_batch_matmul's tb = 1); dynamic batch and sequence (seq 1: M = N = 1)"""
    import torch

    class Attn(torch.nn.Module):
        def forward(self, x):
            return (x @ x.transpose(-1, -2) / 4).softmax(-1) @ x

    Dim = torch.export.Dim
    ex = (torch.randn(2, 2, 5, 16),)
    ds = {"x": {0: Dim("batch", min=1, max=64), 2: Dim("seq", min=1, max=128)}}
    shapes = [(1, 2, 1, 16), (3, 2, 7, 16), (2, 2, 33, 16)]
    return Attn().eval(), ex, ds, shapes, lambda shape: torch.randn(shape), True


MODELS = {"mlp": _mlp, "block": _block, "convnet": _convnet, "attention": _attention}
# what each model must launch (beyond at least one generated k_*): its GEMMs and convolutions, with cuBLAS
# ("cublas": a fake cuBLAS sgemm) and without (BRAZE_CUBLAS=0); bz_epilogue: mlp's bias + GELU, block's
# biases and residuals
LIB_LAUNCHES = {
    "cublas": {"mlp": {"cublas", "bz_epilogue"}, "block": {"cublas", "bz_epilogue"},
               "convnet": {"bz_im2col", "cublas", "bz_epilogue"}, "attention": {"cublas"}},
    "bz_gemm": {"mlp": {"bz_gemm"}, "block": {"bz_gemm"}, "convnet": {"bz_im2col", "bz_gemm"},
                "attention": {"bz_gemm"}},
}


def _compiled(name):
    """(torch module, compiled model, input shapes, input maker); the same weights in every process"""
    import torch

    import braze
    torch.manual_seed(0)
    m, ex, ds, shapes, make, export = MODELS[name]()
    if export:
        ep = torch.export.export(m, ex, dynamic_shapes=ds, strict=False)
        cm = braze.compile(ep, target=TARGET)
    else:
        cm = braze.compile(m, ex, dynamic_shapes=ds, target=TARGET)
    return m, cm, shapes, make


def _child(name, source_digest):
    """in the child process (BRAZE_LIBCUDA and BRAZE_EMU_KERNELS set): each shape's error vs torch, as JSON"""
    import hashlib

    import torch
    m, cm, shapes, make = _compiled(name)
    digest = hashlib.sha256(cm._native.cuda_source.encode()).hexdigest()
    assert digest == source_digest, "the child compiled other kernels than the emulated ones"
    torch.manual_seed(1)
    out = []
    for shape in shapes:
        x = make(shape)
        with torch.no_grad():
            ref = m(x).numpy().astype(np.float64)
        y = cm(x.numpy())
        y = y[0] if isinstance(y, (list, tuple)) else y
        y = np.asarray(y)
        err = float(np.abs(y.astype(np.float64) - ref).max()) if y.shape == ref.shape else float("inf")
        out.append({"shape": list(shape), "out_shape": list(y.shape), "ref_shape": list(ref.shape),
                    "max_err": err, "max_ref": float(np.abs(ref).max()), "nan": bool(np.isnan(y).any())})
    print("RESULT " + json.dumps(out))


def _run_child(args, env, timeout=120):
    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}]\n"
            f"import test_cuda_e2e as t\n{args}\n")
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=str(REPO), capture_output=True, text=True,
                          timeout=timeout)


# ------------------------------------------------------------------------------------------- fixtures --
@pytest.fixture(scope="module")
def toolchain():
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: the emulated kernels and the fake CUDA driver are compiled with it")
    from braze.errors import MissingDependencyError
    try:
        from braze.codegen.nvrtc import nvrtc_version
        nvrtc_version()
    except (ImportError, MissingDependencyError) as e:
        pytest.skip(f"NVRTC not available, so nothing compiles for {TARGET}: {e}")
    pytest.importorskip("torch")


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda_emu")


# ---------------------------------------------------------------------------------------------- tests --
def _log(path: Path) -> list[list[str]]:
    """the fake libraries' log, a list of words per line ("launch <kernel> ...", "cublas sgemm m n k batch")"""
    return [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []


def _kinds(lines) -> set[str]:
    return {w[0] if w[0] == "cublas" else w[1] for w in lines if w[0] in ("cublas", "launch")}


# by default: the block (GEMMs at M = 1, batched, with residuals) on cuBLAS and on braze's own GEMM, and
# the convnet (im2col) on braze's; test_gemm_mapping covers cuBLAS's mapping case by case. The others
# are slow (the default suite stays near 15 minutes on 2 cores)
DEFAULT_E2E = {("block", "cublas"), ("block", "bz_gemm"), ("convnet", "bz_gemm")}
E2E_CASES = [pytest.param(name, gemm, id=f"{name}-{gemm}",
                          marks=() if (name, gemm) in DEFAULT_E2E else pytest.mark.slow)
             for name in MODELS for gemm in ("cublas", "bz_gemm")]


@pytest.mark.parametrize("name,gemm", E2E_CASES)
def test_model_matches_torch(name, gemm, toolchain, emu_dir, tmp_path):
    import hashlib

    from cuda_emu_build import build_emulated
    _, cm, shapes, _ = _compiled(name)
    emu = build_emulated(cm, emu_dir)
    log = tmp_path / "launches.txt"
    env = {**os.environ, **emu, "BRAZE_FAKE_CUDA_LOG": str(log), "BRAZE_CUBLAS": "1" if gemm == "cublas" else "0"}
    digest = hashlib.sha256(cm._native.cuda_source.encode()).hexdigest()
    r = _run_child(f"t._child({name!r}, {digest!r})", env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"child failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    results = json.loads(lines[-1][len("RESULT "):])
    assert len(results) == len(shapes)
    bad = [res for res in results
           if res["out_shape"] != res["ref_shape"] or res["nan"] or
           not res["max_err"] <= 1e-4 * max(res["max_ref"], 1e-3)]
    assert not bad, f"{name}: wrong results\n" + "\n".join(map(str, bad))
    entries = _log(log)
    launched = _kinds(entries)
    assert LIB_LAUNCHES[gemm][name] <= launched, f"{name} launched only {sorted(launched)}"
    assert any(k.startswith("k_") for k in launched), f"{name} launched no generated kernel: {sorted(launched)}"
    other = {"cublas": "bz_gemm", "bz_gemm": "cublas"}[gemm]
    assert other not in launched, f"{name} with {gemm}: {other} ran too"
    src = cm._native.source
    if gemm == "cublas":
        sgemms = [tuple(map(int, w[2:])) for w in entries if w[0] == "cublas"]  # (m, n, k, batch): m = N, n = M
        if name in ("mlp", "block"):
            assert any(n == 1 for _, n, _, _ in sgemms), f"{name}: no GEMM with M = 1 ran: {sgemms}"
        if name in ("block", "attention"):
            assert any(b > 1 for *_, b in sgemms), f"{name}: no batched GEMM ran on cuBLAS: {sgemms}"
    if name == "block":  # x + proj(...) and x + fc2(...): residuals fused into the GEMM calls
        assert re.search(r"braze_matmul\(.*M->pb\[\d+\], [^,]+, \(const float \*\)\w+, 0,", src), src
    if name == "mlp":  # linear + bias + GELU in one call (act 2)
        assert re.search(r"braze_matmul\(.*M->pb\[\d+\], [^,]+, NULL, 2,", src), src
    if name == "attention":  # x @ x^T reads its right operand transposed
        assert re.search(r"braze_batch_matmul\(.*, 0, \(const float \*\)\w+, 1, ", src), src


# ------------------------------------------------------------------------------ bzc_gemm, directly --
# braze_cuda_rt.h over the fake driver and cuBLAS: each stdin line is a case, "batch M N K a_rs a_cs a_bs
# b_rs b_cs b_bs alpha bias res act" (res: 0 none, 1 a buffer apart, 2 the output itself, holding the
# residual before the call); it prints "CASE i max_err max_ref" against a float64 reference, or the error.
HARNESS = r"""
#define BZ_VB 0
#include "braze_vec.h"
#include "braze_abi.h"
#include <math.h>
#define BZC_TARGET "cuda:sm_90"
#define BZC_ARCH "sm_90"
#define BZC_NVRTC "none"
#define BZC_N_KERNELS 4
static const char *const bzc_names[4] = {"bz_gemm", "bz_conv2d", "bz_epilogue", "bz_im2col"};
static const unsigned char bzc_cubin[1] = {0};
static const unsigned char bzc_ptx[2] = {'x', 0};
#include "braze_cuda_rt.h"

static uint64_t seed = 1;
static float rnd(void) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((seed >> 33) % 2001) / 1000.0f - 1.0f;
}
static double act_ref(double v, int a) {
    switch (a & 0xff) {
    case 1: return v < 0 ? 0 : v;
    case 2: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case 6: return tanh(v);
    default: return v;
    }
}
static float *dev(const float *h, size_t n) {
    char err[256];
    return (float *)bzc_upload(h, n * sizeof(float), err, sizeof err);
}
int main(void) {
    char err[512];
    long long batch, M, N, K, ars, acs, abs_, brs, bcs, bbs;
    float alpha;
    int has_bias, resmode, act, idx = 0;
    const char *log = getenv("BRAZE_FAKE_CUDA_LOG");
    while (scanf("%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %f %d %d %d", &batch, &M, &N, &K, &ars, &acs,
                 &abs_, &brs, &bcs, &bbs, &alpha, &has_bias, &resmode, &act) == 14) {
        if (bzc_begin(err, sizeof err)) { printf("ERROR %s\n", err); return 1; }
        if (log && *log) { FILE *f = fopen(log, "a"); fprintf(f, "case %d\n", idx); fclose(f); }
        size_t na = (size_t)((batch - 1) * abs_ + (M - 1) * ars + (K - 1) * acs + 1);
        size_t nbm = (size_t)((batch - 1) * bbs + (K - 1) * brs + (N - 1) * bcs + 1);
        if (K == 0) na = nbm = 1;
        size_t nc = (size_t)(batch * M * N);
        float *A = malloc(na * 4), *B = malloc(nbm * 4), *bias = malloc((N + 1) * 4), *res = malloc((nc + 1) * 4),
              *C = malloc((nc + 1) * 4);
        for (size_t i = 0; i < na; i++) A[i] = rnd();
        for (size_t i = 0; i < nbm; i++) B[i] = rnd();
        for (long long i = 0; i < N; i++) bias[i] = rnd();
        for (size_t i = 0; i < nc; i++) res[i] = rnd();
        float *dA = dev(A, na), *dB = dev(B, nbm), *dbias = has_bias ? dev(bias, N + 1) : NULL;
        float *dres = resmode ? dev(res, nc + 1) : NULL, *dres0 = dres;
        float *dC = (float *)bzc_output(0, C, nc * 4);
        if (resmode == 2) { bzc_copy(dC, dres, nc * 4); dres = dC; }
        bzc_gemm(batch, M, N, K, dA, ars, acs, abs_, dB, brs, bcs, bbs, dC, M * N, alpha, dbias, dres, act);
        int failed = bzc_finish(err, sizeof err);
        bzc_free(dA); bzc_free(dB); bzc_free(dbias); bzc_free(dres0);
        if (failed) { printf("CASE %d ERROR %s\n", idx++, err); continue; }
        double maxerr = 0, maxref = 0;
        for (long long b = 0; b < batch; b++)
            for (long long m = 0; m < M; m++)
                for (long long n = 0; n < N; n++) {
                    double acc = 0;
                    for (long long k = 0; k < K; k++)
                        acc += (double)A[b * abs_ + m * ars + k * acs] * B[b * bbs + k * brs + n * bcs];
                    double v = alpha * acc + (has_bias ? bias[n] : 0);
                    size_t o = (size_t)(b * M * N + m * N + n);
                    if (!(act & 0x100)) v = act_ref(v, act);
                    if (resmode) v += res[o];
                    if (act & 0x100) v = act_ref(v, act);
                    double e = fabs(v - C[o]);
                    if (!(e <= maxerr)) maxerr = e; /* a NaN sticks */
                    if (fabs(v) > maxref) maxref = fabs(v);
                }
        printf("CASE %d %.6g %.6g\n", idx++, maxerr, maxref);
        free(A); free(B); free(bias); free(res); free(C);
    }
    return 0;
}
"""


def _case(batch, M, N, K, ta=0, tb=0, *, alpha=1.0, bias=0, res=0, act=0, a=None, b=None, bcast_b=False):
    """a harness line: A [M, K] (ta: its memory is [K, M]), B [K, N] (tb: [N, K]); a / b: explicit
    (rs, cs, bs); bcast_b: one B for every batch"""
    a = a or ((1, M, M * K) if ta else (K, 1, M * K))
    b = b or ((1, K, K * N) if tb else (N, 1, K * N))
    if bcast_b:
        b = (*b[:2], 0)
    return (batch, M, N, K, *a, *b, alpha, bias, res, act)


AFTER = 0x100
# (case, runs on cuBLAS when it is there)
GEMM_CASES = [
    (_case(1, 5, 7, 9), True),                                         # row-major, nothing to apply
    (_case(1, 5, 7, 9, tb=1, bias=1, act=2), True),                    # linear + bias + GELU
    (_case(1, 1, 7, 9, tb=1, bias=1), True),                           # M = 1
    (_case(1, 5, 1, 9, tb=1, bias=1), True),                           # N = 1
    (_case(1, 5, 7, 1, tb=1), True),                                   # K = 1
    (_case(1, 1, 1, 1, ta=1, tb=1), True),                             # all 1
    (_case(1, 1, 7, 9, ta=1, tb=0), True),                             # M = 1 with A "transposed"
    (_case(1, 5, 7, 0, tb=1, bias=1, act=1), False),                   # K = 0: bz_gemm (epilogue(0))
    (_case(1, 5, 7, 9, tb=1, res=1), True),                            # residual apart, alone
    (_case(1, 5, 7, 9, tb=1, bias=1, res=1, act=2), True),             # residual apart, GELU before it
    (_case(1, 5, 7, 9, tb=1, bias=1, res=1, act=AFTER | 6), True),     # residual apart, tanh after it
    (_case(1, 5, 7, 9, tb=1, res=2), True),                            # residual is C: beta 1, no epilogue
    (_case(1, 5, 7, 9, tb=1, bias=1, res=2), True),                    # beta 1, then the bias
    (_case(1, 5, 7, 9, tb=1, bias=1, res=2, act=AFTER | 6), True),     # beta 1, then bias + tanh
    (_case(1, 6, 7, 9, tb=1, bias=1, res=2, act=2), True),             # GELU before a residual in C: scratch
    (_case(1, 6, 7, 9, tb=1, res=2, act=1), True),                     # relu, the same
    (_case(6, 5, 4, 8, ta=1, tb=1, alpha=0.25), True),                 # batched, both transposed
    (_case(6, 5, 4, 8, tb=1, alpha=0.25), True),                       # attention's q @ k^T
    (_case(6, 5, 4, 8, bcast_b=True), True),                           # one B for every batch
    (_case(3, 1, 1, 8, tb=1), True),                                   # batched M = N = 1
    (_case(1, 5, 7, 9, a=(20, 2, 0)), False),                          # A's columns strided: bz_gemm
    (_case(2, 5, 7, 9, b=(14, 2, 200), bias=1), False),                # B's columns strided: bz_gemm
]


def _needs_epilogue(c) -> bool:
    bias, res, act = c[11], c[12], c[13]
    return bool(bias or res == 1 or (act & 0xff) or False)


@pytest.fixture(scope="module")
def harness(toolchain, emu_dir):
    """(harness executable, the fake libraries' env)"""
    from cuda_emu_build import INCLUDE, build_fake_cublas, build_fake_driver, build_kernels

    from braze.codegen.cuda_kernel import PRELUDE
    src = emu_dir / "gemm_harness.c"
    src.write_text(HARNESS)
    exe = emu_dir / "gemm_harness"
    r = subprocess.run(["gcc", "-std=gnu11", "-O1", "-ffp-contract=off", f"-I{INCLUDE}", "-o", str(exe), str(src),
                        "-ldl", "-lm", "-pthread"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    env = {**os.environ, "BRAZE_LIBCUDA": str(build_fake_driver(emu_dir)),
           "BRAZE_EMU_KERNELS": str(build_kernels(PRELUDE, emu_dir)),
           "BRAZE_LIBCUBLAS": str(build_fake_cublas(emu_dir))}
    return exe, env


def _run_harness(harness, cases, log, **env):
    exe, base = harness
    stdin = "".join(" ".join(map(str, c)) + "\n" for c in cases)
    r = subprocess.run([str(exe)], input=stdin, env={**base, "BRAZE_FAKE_CUDA_LOG": str(log), **env},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = [ln.split(maxsplit=2) for ln in r.stdout.splitlines() if ln.startswith("CASE ")]
    assert len(out) == len(cases), r.stdout
    per_case: list[list[list[str]]] = []
    for w in _log(log):
        if w[0] == "case":
            per_case.append([])
        elif per_case:
            per_case[-1].append(w)
    return [o[2] for o in out], per_case


@pytest.mark.parametrize("gemm", ["cublas", "bz_gemm"])
def test_gemm_mapping(gemm, harness, tmp_path):
    """bzc_gemm against a float64 reference over row-major and transposed operands, M/N/K of 1 (and K of 0),
    batches (a broadcast one included), strides cuBLAS cannot take, and each epilogue; which library ran each"""
    cases = [c for c, _ in GEMM_CASES]
    results, per_case = _run_harness(harness, cases, tmp_path / "log.txt",
                                     BRAZE_CUBLAS="1" if gemm == "cublas" else "0")
    assert len(per_case) == len(cases)
    bad = []
    for (c, blas), res, log in zip(GEMM_CASES, results, per_case):
        err, ref = map(float, res.split()) if not res.startswith("ERROR") else (math.inf, 0.0)
        kinds = [w[0] if w[0] == "cublas" else w[1] for w in log]
        on_blas = gemm == "cublas" and blas
        want = (["cublas"] + (["bz_epilogue"] if _needs_epilogue(c) else [])) if on_blas else ["bz_gemm"]
        if not err <= 1e-5 * max(ref, 1.0) or kinds != want:
            bad.append(f"{c}: {res} ran {kinds}, expected {want}")
    assert not bad, "\n".join(bad)


def test_cublas_missing_or_failing(harness, tmp_path):
    """no cuBLAS at BRAZE_LIBCUBLAS: bz_gemm runs, no error; a failing cuBLAS call: the call's error names
    cuBLAS and the status, and the process goes on (the next call fails the same way, nothing aborts)"""
    case = _case(1, 5, 7, 9, tb=1, bias=1, act=2)
    results, per_case = _run_harness(harness, [case], tmp_path / "a.txt",
                                     BRAZE_LIBCUBLAS=str(tmp_path / "no-libcublas.so"))
    err, ref = map(float, results[0].split())
    assert err <= 1e-5 * max(ref, 1.0) and [w[1] for w in per_case[0]] == ["bz_gemm"], (results, per_case)
    results, per_case = _run_harness(harness, [case, case], tmp_path / "b.txt", BRAZE_FAKE_CUBLAS_FAIL="1")
    for res in results:
        assert res.startswith("ERROR") and "cuBLAS" in res and "cublasSgemmStridedBatched" in res and \
            "CUBLAS_STATUS_EXECUTION_FAILED" in res, res
    assert all(not any(w[0] == "launch" for w in log) for log in per_case), per_case  # no epilogue after it


def _missing_driver_child():
    import torch

    import braze
    from braze.errors import BrazeError
    torch.manual_seed(0)
    cm = braze.compile(torch.nn.Linear(4, 3), (torch.randn(2, 4),), target=TARGET)
    try:
        cm(np.ones((2, 4), np.float32))
    except BrazeError as e:
        print("RESULT " + json.dumps({"type": type(e).__name__, "message": str(e)}))
    else:
        print("RESULT " + json.dumps({"type": None, "message": ""}))


def test_missing_driver_raises(toolchain, tmp_path):
    path = str(tmp_path / "no-such-libcuda.so.1")
    env = {**os.environ, "BRAZE_LIBCUDA": path}
    r = _run_child(f"t._missing_driver_child()", env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"child failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    res = json.loads(lines[-1][len("RESULT "):])
    assert res["type"] is not None, "calling a CUDA model without a driver raised no BrazeError"
    assert path in res["message"] and TARGET in res["message"], res["message"]


@pytest.mark.parametrize("knobs,words", [
    ({"FAKE_CUDA_DEVICES": "0"}, ["no CUDA GPU is visible", TARGET]),
    ({"FAKE_CUDA_DEVICES": "0", "CUDA_VISIBLE_DEVICES": ""}, ["no CUDA GPU is visible", "CUDA_VISIBLE_DEVICES"]),
    ({"FAKE_CUDA_CC": "80", "FAKE_CUDA_LOAD_ERROR": "209"}, [TARGET, "sm_80", "CUDA 13.0", "target cuda:sm_80"]),
])
def test_driver_errors_name_the_problem(toolchain, emu_dir, knobs, words):
    """No visible GPU, or a GPU whose arch the cubin is not for and whose driver cannot take the PTX:
    one BrazeError naming it and what to do, never a crash."""
    from cuda_emu_build import build_fake_driver
    env = {**os.environ, "BRAZE_LIBCUDA": str(build_fake_driver(emu_dir)), **knobs}
    r = _run_child("t._missing_driver_child()", env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"child failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    res = json.loads(lines[-1][len("RESULT "):])
    assert res["type"] is not None and all(w in res["message"] for w in words), res


def test_fake_driver_rejects_host_pointers(toolchain, emu_dir, monkeypatch):
    """the fake driver's guard: a kernel given a pointer that is not device memory fails its launch (700),
    as it would fault on a GPU; the same launch with device memory runs"""
    import ctypes

    from cuda_emu_build import build_fake_driver, build_kernels

    from braze.codegen.cuda_kernel import PRELUDE
    fake = ctypes.CDLL(str(build_fake_driver(emu_dir)))
    monkeypatch.setenv("BRAZE_EMU_KERNELS", str(build_kernels(PRELUDE, emu_dir)))  # bz_gemm and bz_conv2d only
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert fake.cuModuleLoadData(ctypes.byref(module), b"image") == 0
    assert fake.cuModuleGetFunction(ctypes.byref(fn), module, b"bz_gemm") == 0
    fake.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    fake.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    fake.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p,
                                                                              ctypes.POINTER(ctypes.c_void_p),
                                                                              ctypes.c_void_p]
    bufs = [ctypes.c_uint64() for _ in range(3)]
    for b in bufs:
        assert fake.cuMemAlloc_v2(ctypes.byref(b), 64) == 0
    host = np.zeros(16, np.float32)
    i64, ptr = ctypes.c_int64, ctypes.c_uint64

    def launch(a_ptr):  # C(2x2) = A(2x2) @ B(2x2)
        args = [i64(2), i64(2), i64(2), ptr(a_ptr), i64(2), i64(1), i64(0), ptr(bufs[1].value), i64(2), i64(1),
                i64(0), ptr(bufs[2].value), i64(0), ctypes.c_float(1.0), ptr(0), ptr(0), ctypes.c_int(0)]
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        return fake.cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, None, params, None)

    try:
        assert launch(bufs[0].value) == 0
        assert launch(host.ctypes.data) == 700
    finally:
        for b in bufs:
            fake.cuMemFree_v2(b.value)
