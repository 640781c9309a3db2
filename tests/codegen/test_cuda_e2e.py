"""CUDA-target models end to end without a GPU: braze.compile(target="cuda:sm_90") builds the real host
library (braze_cuda_rt.h over the driver API) and the NVRTC module; here the driver is fake_libcuda.cpp and
the kernels are the model's .cu compiled by g++ over cuda_emu.h (cuda_emu_build.py), so everything but
the silicon runs: driver loading, constant upload, staging of inputs and outputs, arena, launch sizes and
argument packing, bz_gemm / bz_conv2d and the generated kernels. Results are checked against torch (CPU,
float32) at several values of each dynamic dim.

The library reads BRAZE_LIBCUDA once per process, at its first call, so each check runs in a child
process (this file run as a script) with the environment set from its start.
"""
from __future__ import annotations

import json
import math
import os
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


MODELS = {"mlp": _mlp, "block": _block, "convnet": _convnet}
# kernels each model must launch (beyond at least one generated k_*): its GEMMs and convolutions
LIB_LAUNCHES = {"mlp": {"bz_gemm"}, "block": {"bz_gemm"}, "convnet": {"bz_conv2d"}}


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
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_torch(name, toolchain, emu_dir, tmp_path):
    import hashlib

    from cuda_emu_build import build_emulated
    _, cm, shapes, _ = _compiled(name)
    emu = build_emulated(cm, emu_dir)
    log = tmp_path / "launches.txt"
    env = {**os.environ, **emu, "BRAZE_FAKE_CUDA_LOG": str(log)}
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
    launched = {ln.split()[1] for ln in log.read_text().splitlines()}
    assert LIB_LAUNCHES[name] <= launched, f"{name} launched only {sorted(launched)}"
    assert any(k.startswith("k_") for k in launched), f"{name} launched no generated kernel: {sorted(launched)}"


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
