"""braze_cuda_lib.cuh (bz_gemm, bz_conv2d, bz_scale_epilogue): run on the CPU through cuda_emu.h against NumPy, and compiled by
NVRTC for sm_80/sm_90 with ptxas's resource report checked (no spills, static shared memory in the default
48 KiB). Without a GPU the emulation is what checks the kernels' results; NVRTC checks they are valid CUDA."""
import ctypes
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

INCLUDE = Path(__file__).resolve().parents[2] / "braze" / "codegen" / "include"
PRELUDE = '#define BZ_VB 0\n#include "braze_vec.h"\n'
AFTER_RESIDUAL = 0x100
pytestmark = pytest.mark.usefixtures("module_cache")  # compile_cuda caches its PTX there
NPARAM = 24

# One driver runs every case of a file: compiling it dominates, so it is built once per session. Record:
# int64 kind (0 gemm, 1 conv, 2 scale epilogue), int64 params[NPARAM], float64 alpha, then 4 arrays (int64
# count, count floats; count -1 for NULL). Gemm params: M N K a_rs a_cs a_bs b_rs b_cs b_bs c_bs batch act
# out_len alias grid; conv: N C H W OC KH KW OH OW sh sw ph pw dh dw groups nhwc act out_len alias grid;
# scale epilogue (arrays: the convolution's result, the scale, bias, res): total OC act.
# The output starts as the residual when alias (res == out), else NaN, so unwritten elements show.
DRIVER = PRELUDE + r"""
#include "cuda_emu.h"
#include "braze_cuda_lib.cuh"
#include <cmath>
#include <cstdio>
#include <vector>

static std::vector<float> arr(FILE *f, bool &null) {
    int64_t n = 0;
    if (fread(&n, 8, 1, f) != 1) abort();
    null = n < 0;
    std::vector<float> v(n < 0 ? 0 : n);
    if (n > 0 && fread(v.data(), 4, n, f) != (size_t)n) abort();
    return v;
}

int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    int64_t kind, p[24];
    double alpha;
    while (fread(&kind, 8, 1, in) == 1) {
        if (fread(p, 8, 24, in) != 24 || fread(&alpha, 8, 1, in) != 1) abort();
        bool null[4];
        std::vector<float> a = arr(in, null[0]), b = arr(in, null[1]), bias = arr(in, null[2]), res = arr(in, null[3]);
        const float *bp = null[2] ? nullptr : bias.data();
        int64_t out_len = kind == 0 ? p[12] : kind == 1 ? p[18] : p[0], alias = kind == 0 ? p[13] : kind == 1 ? p[19] : 0;
        int64_t grid = kind == 0 ? p[14] : kind == 1 ? p[20] : 0;
        std::vector<float> y = alias ? res : std::vector<float>(out_len, NAN);
        const float *rp = null[3] ? nullptr : alias ? y.data() : res.data();
        if (kind == 2) {
            y = a;
            bz_emu_launch(bz_scale_epilogue, dim3((p[0] + 255) / 256), dim3(256), p[0], p[1], y.data(), b.data(), bp, rp,
                          (int)p[2]);
        } else if (kind == 0) {
            dim3 g((p[1] + BZ_GEMM_TILE - 1) / BZ_GEMM_TILE, (p[0] + BZ_GEMM_TILE - 1) / BZ_GEMM_TILE, p[10]);
            bz_emu_launch(bz_gemm, g, dim3(BZ_GEMM_THREADS), p[0], p[1], p[2], a.data(), p[3], p[4], p[5],
                          b.data(), p[6], p[7], p[8], y.data(), p[9], (float)alpha, bp, rp, (int)p[11]);
        } else {
            int64_t total = p[0] * p[4] * p[7] * p[8], blocks = (total + BZ_CONV_THREADS - 1) / BZ_CONV_THREADS;
            if (blocks > BZ_CONV_MAX_BLOCKS) blocks = BZ_CONV_MAX_BLOCKS;
            bz_emu_launch(bz_conv2d, dim3(grid ? grid : blocks), dim3(BZ_CONV_THREADS), p[0], p[1], p[2], p[3],
                          p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], (int)p[16],
                          a.data(), b.data(), bp, rp, (int)p[17], y.data());
        }
        fwrite(y.data(), 4, y.size(), out);
    }
    fclose(out);
    return 0;
}
"""


# ---------------------------------------------------------------------------------------------- reference --
def _act(v, act):
    code = act & 0xFF
    if code == 8:  # eager relu6
        v = np.where(v > 6, 6.0, v)
    if code in (1, 7, 8):
        return np.where(v < 0, 0.0, v)
    if code == 2:
        return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))
    if code == 3:
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))
    if code == 4:
        return v / (1.0 + np.exp(-v))
    if code == 5:
        return 1.0 / (1.0 + np.exp(-v))
    if code == 6:
        return np.tanh(v)
    return v


def _epilogue(v, bias, res, act):
    if bias is not None:
        v = v + bias
    if not act & AFTER_RESIDUAL:
        v = _act(v, act)
    if res is not None:
        v = v + res
    if act & AFTER_RESIDUAL:
        v = _act(v, act)
    return v


def _conv_ref(x, w, bias, res, act, stride, pad, dil, groups, out_hw):
    """float64 NCHW conv2d by shifted slices, then the epilogue"""
    n, c, h, wd = x.shape
    oc, cpg, kh, kw = w.shape
    oh, ow = out_hw
    need_h, need_w = (oh - 1) * stride[0] + (kh - 1) * dil[0] + 1, (ow - 1) * stride[1] + (kw - 1) * dil[1] + 1
    xp = np.zeros((n, c, max(need_h, h + pad[0]), max(need_w, wd + pad[1])))
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    y = np.zeros((n, oc, oh, ow))
    ocpg = oc // groups
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dil[0]:i * dil[0] + (oh - 1) * stride[0] + 1:stride[0],
                     j * dil[1]:j * dil[1] + (ow - 1) * stride[1] + 1:stride[1]]
            for g in range(groups):
                y[:, g * ocpg:(g + 1) * ocpg] += np.einsum(
                    "nchw,oc->nohw", win[:, g * cpg:(g + 1) * cpg], w[g * ocpg:(g + 1) * ocpg, :, i, j])
    return _epilogue(y, None if bias is None else bias[None, :, None, None], res, act)


# ------------------------------------------------------------------------------------------------- cases --
def _gemm_case(rng, M, N, K, batch=1, ta=False, tb=False, a_bcast=False, bias=False, res=False, alias=False,
               act=0, alpha=1.0, c_pad=0):
    a_log = rng.standard_normal((1 if a_bcast else batch, M, K)).astype(np.float32)
    b_log = rng.standard_normal((batch, K, N)).astype(np.float32)
    # stored transposed where asked: the kernel sees the logical matrix through the strides
    a_st = np.ascontiguousarray(a_log.transpose(0, 2, 1)) if ta else a_log
    b_st = np.ascontiguousarray(b_log.transpose(0, 2, 1)) if tb else b_log
    a_rs, a_cs = (1, M) if ta else (K, 1)
    b_rs, b_cs = (1, K) if tb else (N, 1)
    a_bs, b_bs, c_bs = 0 if a_bcast else M * K, K * N, M * N + c_pad
    out_len = batch * c_bs
    bias_v = rng.standard_normal(N).astype(np.float32) if bias else None
    res_buf = rng.standard_normal(out_len).astype(np.float32) if res else None
    ref = np.full(out_len, np.nan)
    prod = np.float32(alpha).astype(np.float64) * (a_log.astype(np.float64) @ b_log.astype(np.float64))
    for b in range(batch):
        sl = slice(b * c_bs, b * c_bs + M * N)
        r = None if res_buf is None else res_buf[sl].reshape(M, N).astype(np.float64)
        ref[sl] = _epilogue(prod[b], bias_v, r, act).ravel()
        if alias and c_pad:  # the gaps between batches of an aliased output keep the residual's values
            ref[b * c_bs + M * N:(b + 1) * c_bs] = res_buf[b * c_bs + M * N:(b + 1) * c_bs]
    params = [M, N, K, a_rs, a_cs, a_bs, b_rs, b_cs, b_bs, c_bs, batch, act, out_len, int(alias), 0]
    name = f"gemm{(M, N, K)}x{batch} ta={ta} tb={tb} bc={a_bcast} bias={bias} res={res} alias={alias} act={act:#x}"
    return name, 0, params, alpha, [a_st, b_st, bias_v, res_buf], ref


def _conv_case(rng, N, C, H, W, OC, k, stride=1, pad=0, dil=1, groups=1, nhwc=False, bias=False, res=False,
               alias=False, act=0, grid=0):
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    dh, dw = (dil, dil) if isinstance(dil, int) else dil
    OH, OW = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((OC, C // groups, kh, kw)).astype(np.float32)
    bias_v = rng.standard_normal(OC).astype(np.float32) if bias else None
    res_v = rng.standard_normal((N, OC, OH, OW)).astype(np.float32) if res else None
    ref = _conv_ref(x.astype(np.float64), w.astype(np.float64), bias_v,
                    None if res_v is None else res_v.astype(np.float64), act, (sh, sw), (ph, pw), (dh, dw), groups,
                    (OH, OW))
    to_layout = (lambda t: np.ascontiguousarray(t.transpose(0, 2, 3, 1))) if nhwc else (lambda t: t)
    res_l = None if res_v is None else to_layout(res_v)
    params = [N, C, H, W, OC, kh, kw, OH, OW, sh, sw, ph, pw, dh, dw, groups, int(nhwc), act, N * OC * OH * OW,
              int(alias), grid]
    name = (f"conv N{N} C{C} {H}x{W} OC{OC} k{(kh, kw)} s{(sh, sw)} p{(ph, pw)} d{(dh, dw)} g{groups} "
            f"nhwc={nhwc} bias={bias} res={res} alias={alias} act={act:#x} grid={grid}")
    return name, 1, params, 1.0, [to_layout(x), w, bias_v, res_l], to_layout(ref).ravel()


def _scale_case(rng, pixels, OC, bias=False, res=False, act=0):
    """bz_scale_epilogue over an NHWC result of ``pixels`` x OC: epilogue(y * scale + bias, res, act)"""
    y = rng.standard_normal((pixels, OC)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, OC).astype(np.float32)
    bias_v = rng.standard_normal(OC).astype(np.float32) if bias else None
    res_v = rng.standard_normal((pixels, OC)).astype(np.float32) if res else None
    ref = _epilogue((y * scale).astype(np.float64), bias_v, res_v, act)
    return (f"scale {pixels}x{OC} bias={bias} res={res} act={act:#x}", 2, [pixels * OC, OC, act], 1.0,
            [y, scale, bias_v, res_v], ref.ravel())


def _cases():
    rng = np.random.default_rng(0)
    cases = []
    shapes = [(1, 1, 1), (5, 7, 3), (65, 70, 17), (130, 64, 33)]
    for i, (M, N, K) in enumerate(shapes):
        cases.append(_gemm_case(rng, M, N, K))
        cases.append(_gemm_case(rng, M, N, K, batch=3, ta=True, bias=True, res=True, act=1 + i, alpha=0.5, c_pad=3))
        cases.append(_gemm_case(rng, M, N, K, batch=3, tb=True, a_bcast=True, res=True, alias=True,
                                act=(5 + i % 2) | AFTER_RESIDUAL, alpha=-1.25, c_pad=2 * i))
        cases.append(_gemm_case(rng, M, N, K, ta=True, tb=True, bias=True, act=(i + 2) % 7))
    for act in range(7):  # every activation, before and after the residual
        cases.append(_gemm_case(rng, 9, 66, 20, bias=True, res=True, act=act, alpha=0.75))
        cases.append(_gemm_case(rng, 9, 66, 20, bias=True, res=True, act=act | AFTER_RESIDUAL))
    cases.append(_gemm_case(rng, 3, 5, 0, batch=2, bias=True, res=True, act=4))  # K == 0: act(bias) + res
    for nhwc in (False, True):
        cases += [
            _conv_case(rng, 2, 3, 7, 9, 5, 3, pad=1, nhwc=nhwc, bias=True, act=1),
            _conv_case(rng, 2, 3, 7, 9, 5, 3, pad=1, nhwc=nhwc, res=True, alias=True, act=1 | AFTER_RESIDUAL),
            _conv_case(rng, 1, 8, 5, 5, 4, 1, nhwc=nhwc),
            _conv_case(rng, 1, 3, 15, 13, 4, 7, stride=2, pad=3, nhwc=nhwc, bias=True, res=True, act=1),
            _conv_case(rng, 2, 6, 9, 7, 6, 3, pad=1, groups=6, nhwc=nhwc, bias=True, act=4),  # depthwise
            _conv_case(rng, 1, 4, 9, 8, 12, 3, stride=2, pad=1, groups=4, nhwc=nhwc, res=True),  # multiplier 3
            _conv_case(rng, 1, 4, 11, 11, 6, 3, pad=2, dil=2, groups=2, nhwc=nhwc, bias=True, res=True, act=2),
            _conv_case(rng, 1, 3, 8, 9, 2, (3, 2), stride=(2, 1), pad=(1, 0), dil=(1, 2), nhwc=nhwc, bias=True),
            _conv_case(rng, 2, 3, 7, 9, 5, 3, pad=1, nhwc=nhwc, bias=True, act=1, grid=1),  # grid-stride loop
        ]
    cases += [_scale_case(rng, 37, 5, bias=True, act=7), _scale_case(rng, 300, 16, bias=True, res=True, act=0x107),
              _scale_case(rng, 9, 3, res=True, act=8)]
    return cases


def _write_record(f, kind, params, alpha, arrays):
    f.write(np.array([kind] + params + [0] * (NPARAM - len(params)), np.int64).tobytes())
    f.write(np.array([alpha], np.float64).tobytes())
    for a in arrays:
        if a is None:
            f.write(np.array([-1], np.int64).tobytes())
        else:
            f.write(np.array([a.size], np.int64).tobytes())
            f.write(np.ascontiguousarray(a, np.float32).tobytes())


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """every case's (name, output, reference), from one run of one driver"""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found: the CUDA emulation tests compile a C++20 driver")
    d = tmp_path_factory.mktemp("cuda_emu")
    (d / "driver.cpp").write_text(DRIVER)
    # AddressSanitizer: a missing bounds check only reads past the operands (the results stay right),
    # which on a GPU is a fault or garbage; exact-size buffers make ASan report it here
    flags = ["-std=c++20", "-O1", "-ffp-contract=off", "-fsanitize=address", f"-I{INCLUDE}", "-pthread"]
    r = subprocess.run([gxx, *flags, "-o", str(d / "driver"), str(d / "driver.cpp")], capture_output=True, text=True)
    if r.returncode and "asan" in r.stderr.lower():  # a g++ without libasan still checks the results
        flags.remove("-fsanitize=address")
        r = subprocess.run([gxx, *flags, "-o", str(d / "driver"), str(d / "driver.cpp")], capture_output=True,
                           text=True)
    assert r.returncode == 0, r.stderr
    cases = _cases()
    with open(d / "in.bin", "wb") as f:
        for _, kind, params, alpha, arrays, _ in cases:
            _write_record(f, kind, params, alpha, arrays)
    r = subprocess.run([str(d / "driver"), str(d / "in.bin"), str(d / "out.bin")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[:3000]
    out = np.fromfile(d / "out.bin", np.float32)
    results, pos = [], 0
    for name, _, _, _, _, ref in cases:
        results.append((name, out[pos:pos + ref.size], ref))
        pos += ref.size
    assert pos == out.size
    return results


def _assert_close(results):
    bad = []
    for name, got, ref in results:
        scale = max(1.0, float(np.nanmax(np.abs(ref)))) if ref.size else 1.0
        if not (np.array_equal(np.isnan(got), np.isnan(ref)) and
                np.allclose(got, ref, rtol=0, atol=2e-5 * scale, equal_nan=True)):
            err = np.nanmax(np.abs(got.astype(np.float64) - ref)) if ref.size else 0.0
            bad.append(f"{name}: max abs err {err:.3g} (scale {scale:.3g})")
    assert not bad, "\n".join(bad)
    assert len(results) == 52  # keeps a refactor of _cases from silently dropping cases


def test_emulated_kernels_match_numpy(emulated):
    _assert_close(emulated)


EMU_SELFTEST = r"""
#include "cuda_emu.h"
#include <cstdio>
/* per block: the sum of x over its threads below n, by a shared-memory tree; threads at or past n
 * return first, which must neither hang the others' __syncthreads nor leak into the next block */
extern "C" __global__ void block_sums(const int *x, int n, int *out) {
    __shared__ int s[64];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = 0;
    __syncthreads();
    if (i >= n) return;
    s[t] = x[i];
    __syncthreads();
    if (t == 0) {
        int sum = 0;
        for (int j = 0; j < 64; ++j) sum += s[j];
        out[blockIdx.x] = sum;
    }
}
int main() {
    int x[150], out[3] = {-1, -1, -1};
    for (int i = 0; i < 150; ++i) x[i] = i + 1;
    bz_emu_launch(block_sums, dim3(3), dim3(64), (const int *)x, 150, out);
    printf("%d %d %d\n", out[0], out[1], out[2]);
}
"""


def test_emulator_shared_memory_and_early_return(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found: the CUDA emulation tests compile a C++20 program")
    (tmp_path / "t.cpp").write_text(EMU_SELFTEST)
    subprocess.run([gxx, "-std=c++20", "-O1", f"-I{INCLUDE}", "-pthread", "-o", str(tmp_path / "t"),
                    str(tmp_path / "t.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == [str(sum(range(1, 65))), str(sum(range(65, 129))), str(sum(range(129, 151)))]


# -------------------------------------------------------------------------------------------------- NVRTC --
def _nvidia_dir():
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for cand in sorted(Path(root).glob("cu*")):
            if (cand / "lib").is_dir() and list((cand / "lib").glob("libnvrtc.so*")):
                return cand
    return None


def _local_compile(source, arch):
    """PTX for compute_<arch> (NUL stripped), through the NVRTC library of the nvidia pip wheel"""
    base = _nvidia_dir()
    if base is None:
        pytest.skip("NVRTC not found (no nvidia/cu*/lib/libnvrtc.so* in the nvidia pip packages)")
    lib = base / "lib"
    for builtins in sorted(lib.glob("libnvrtc-builtins.so*")):  # libnvrtc dlopens it by soname
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    nv = ctypes.CDLL(str(next(p for p in sorted(lib.glob("libnvrtc.so*")) if ".alt." not in p.name)))
    prog = ctypes.c_void_p()
    assert nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"braze.cu", 0, None, None) == 0
    try:
        opts = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}", "-default-device", "--fmad=false",
                "-std=c++17", f"-I{INCLUDE}", f"-I{INCLUDE / 'cuda_std'}"]
        rc = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts]))
        n = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetProgramLog(prog, log)
        assert rc == 0, log.value.decode(errors="replace")
        nv.nvrtcGetPTXSize(prog, ctypes.byref(n))
        ptx = ctypes.create_string_buffer(n.value)
        assert nv.nvrtcGetPTX(prog, ptx) == 0
        return ptx.raw.rstrip(b"\0"), log.value.decode(errors="replace")
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))


def _compile(source, arch):
    try:
        from braze.codegen.nvrtc import compile_cuda
    except ImportError:
        return _local_compile(source, arch)
    from braze.errors import MissingDependencyError
    try:
        binary = compile_cuda(source, arch)
    except MissingDependencyError as e:
        pytest.skip(f"NVRTC not available: {e}")
    return binary.ptx.rstrip(b"\0"), binary.log


def _ptxas():
    try:
        from braze.codegen.nvrtc import find_ptxas
        path = find_ptxas()
    except ImportError:
        base = _nvidia_dir()
        path = base / "bin" / "ptxas" if base is not None else shutil.which("ptxas")
    if not path or not os.path.exists(path):
        pytest.skip("ptxas not found")
    return str(path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_without_spills(arch, tmp_path):
    ptx, _ = _compile(PRELUDE + '#include "braze_cuda_lib.cuh"\n', arch)
    assert b".entry bz_gemm(" in ptx and b".entry bz_conv2d(" in ptx
    (tmp_path / "lib.ptx").write_bytes(ptx)
    r = subprocess.run([_ptxas(), "-v", "--gpu-name", arch, str(tmp_path / "lib.ptx"), "-o",
                        str(tmp_path / "lib.cubin")], capture_output=True, text=True, check=True)
    report = r.stdout + r.stderr
    # per function: "Function properties for F" / "N bytes stack frame, S bytes spill stores, L bytes spill
    # loads", and per entry "Used R registers, ..., B bytes smem"
    spills = re.findall(r"Function properties for (\S+)\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
                        r"(\d+) bytes spill loads", report)
    assert {name for name, _, _ in spills} >= {"bz_gemm", "bz_conv2d"}, report
    assert all(s == "0" and l == "0" for _, s, l in spills), report
    smem = [int(s) for s in re.findall(r"(\d+) bytes smem", report)]
    assert smem and max(smem) <= 48 * 1024, report


# ---------------------------------------------------------------------------------------------------- GPU --
def _cuda_driver():
    """(libcuda, device ordinal's "sm_XY"), with a current context; skips without a driver or device"""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("no CUDA driver (libcuda.so.1): the kernels run on a GPU only where there is one")
    n, dev, ctx = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
        pytest.skip("no CUDA device")
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    major, minor = ctypes.c_int(), ctypes.c_int()
    cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    cu.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
    cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p,
                                                                            ctypes.POINTER(ctypes.c_void_p),
                                                                            ctypes.c_void_p]
    return cu, f"sm_{major.value}{minor.value}"


def test_gpu_kernels_match_numpy():
    """the emulation's cases on a real GPU, launched per the contracts through the driver API"""
    cu, arch = _cuda_driver()
    source = PRELUDE + '#include "braze_cuda_lib.cuh"\n'
    try:
        from braze.codegen.nvrtc import compile_cuda
    except ImportError:
        image = _local_compile(source, arch)[0] + b"\0"  # PTX, which the driver JIT-compiles
    else:
        from braze.errors import MissingDependencyError
        try:
            image = compile_cuda(source, arch).cubin
        except MissingDependencyError as e:
            pytest.skip(f"NVRTC not available: {e}")
    module, fns = ctypes.c_void_p(), {}
    assert cu.cuModuleLoadData(ctypes.byref(module), image) == 0
    for name in ("bz_gemm", "bz_conv2d"):
        fns[name] = ctypes.c_void_p()
        assert cu.cuModuleGetFunction(ctypes.byref(fns[name]), module, name.encode()) == 0
    allocs = []

    def upload(a):
        ptr = ctypes.c_uint64()
        a = np.ascontiguousarray(a, np.float32)
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), max(a.nbytes, 4)) == 0
        allocs.append(ptr.value)
        assert a.nbytes == 0 or cu.cuMemcpyHtoD_v2(ptr.value, a.ctypes.data, a.nbytes) == 0
        return ptr.value

    results = []
    try:
        for name, kind, p, alpha, arrays, ref in _cases():
            out_len, alias, grid = (p[12], p[13], p[14]) if kind == 0 else (p[18], p[19], p[20])
            y0 = arrays[3] if alias else np.full(out_len, np.nan, np.float32)
            y = upload(y0)
            ptrs = [0 if a is None else upload(a) for a in arrays]
            res = y if alias else ptrs[3]
            i64, f32, i32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_int32, ctypes.c_uint64
            if kind == 0:
                args = [i64(v) for v in p[:3]] + [ptr(ptrs[0])] + [i64(v) for v in p[3:6]] + [ptr(ptrs[1])] + \
                       [i64(v) for v in p[6:9]] + [ptr(y), i64(p[9]), f32(alpha), ptr(ptrs[2]), ptr(res), i32(p[11])]
                dims = (-(-p[1] // 64), -(-p[0] // 64), p[10])
                fn = fns["bz_gemm"]
            else:
                total = p[0] * p[4] * p[7] * p[8]
                args = [i64(v) for v in p[:16]] + [i32(p[16])] + [ptr(v) for v in ptrs[:3]] + [ptr(res), i32(p[17]),
                                                                                              ptr(y)]
                dims = (grid or min(-(-total // 256), 65535 * 8), 1, 1)
                fn = fns["bz_conv2d"]
            params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
            assert cu.cuLaunchKernel(fn, *dims, 256, 1, 1, 0, None, params, None) == 0, name
            assert cu.cuCtxSynchronize() == 0, name
            got = np.empty(out_len, np.float32)
            assert cu.cuMemcpyDtoH_v2(got.ctypes.data, y, got.nbytes) == 0
            results.append((name, got, ref))
    finally:
        for a in allocs:
            cu.cuMemFree_v2(a)
        cu.cuModuleUnload(module)
    _assert_close(results)
