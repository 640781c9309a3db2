"""Run a CUDA-target model without a GPU: its kernels compiled by g++ over cuda_emu.h, the driver faked.

    env = build_emulated(cm, tmp_path)   # {"BRAZE_LIBCUDA": fake driver .so, "BRAZE_EMU_KERNELS": kernels .so,
                                         #  "BRAZE_LIBCUBLAS": fake cuBLAS .so}
    add_emulated(cm, kernels_dir)        # several models (a torch.compile graph's regions): BRAZE_EMU_KERNELS
                                         # names kernels_dir, where each model's image finds its own kernels

The model's host library (cm.library.path) is the real one: it dlopens BRAZE_LIBCUDA at its first call
and runs everything through the driver API. fake_libcuda.cpp serves that API from host memory, and its
cuModuleGetFunction(name) is the kernels library's `bzemu_<name>`, a trampoline generated here for each
`extern "C" __global__` kernel (bz_gemm, bz_conv2d, the model's) that unpacks cuLaunchKernel's
`void **` arguments with the kernel's own parameter types and runs it through bz_emu_launch, and a
`bzemu_sig_<name>` string ('p' per pointer parameter, 'v' per value) by which the fake driver checks that
every pointer a launch passes is device memory. fake_libcublas.cpp stands in for cuBLAS (a naive sgemm
over the same host memory), so float32 GEMMs go through cuBLAS as on a GPU that has it; set
BRAZE_CUBLAS=0 besides to run them with bz_gemm.
A test helper, not part of the package.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parents[1] / "braze" / "codegen" / "include"
FAKE_SRC = HERE / "fake_libcuda.cpp"
FAKE_CUBLAS_SRC = HERE / "fake_libcublas.cpp"

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{', re.S)

EMU_PRELUDE = ""  # g++-only additions before the model's source (cuda_emu.h has what the kernels use)


def gxx() -> str | None:
    return shutil.which("g++")


def require_emulation() -> None:
    """pytest.skip, saying why, unless g++ (for the kernels) and NVRTC (the CUDA target's compiler) are here."""
    import pytest

    from braze.errors import MissingDependencyError
    if gxx() is None:
        pytest.skip("g++ is needed to emulate the CUDA kernels")
    try:
        from braze.codegen.nvrtc import nvrtc_version
        nvrtc_version()
    except MissingDependencyError as e:
        pytest.skip(f"NVRTC is not installed ({e}); pip install 'braze[cuda]'")


def kernel_params(source: str) -> dict[str, list[str]]:
    """{kernel name: [C type of each parameter]} for every `extern "C" __global__ void` in source"""
    out = {}
    for name, params in _KERNEL.findall(re.sub(r"/\*.*?\*/", "", source, flags=re.S)):
        types = []
        for p in params.split(","):
            p = " ".join(p.split())
            if not p or p == "void":
                continue
            m = re.fullmatch(r"(.*?)\s*\b(\w+)", p)  # the type, then the parameter's name
            assert m and m.group(1), f"cannot parse parameter {p!r} of kernel {name}"
            types.append(re.sub(r"\b(restrict|__restrict__|__restrict)\b", "", m.group(1)).strip())
        out[name] = types
    return out


def trampolines(params: dict[str, list[str]]) -> str:
    lines = []
    for name, types in params.items():
        args = "".join(f", *({t} *)a[{i}]" for i, t in enumerate(types))
        sig = "".join("p" if "*" in t else "v" for t in types)  # fake_libcuda checks each pointer
        lines.append(f'extern "C" __attribute__((visibility("default"))) const char bzemu_sig_{name}[] = "{sig}";')
        lines.append(f'extern "C" __attribute__((visibility("default"))) void bzemu_{name}'
                     f"(unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **a) {{\n"
                     f"    (void)a;\n    bz_emu_launch({name}, dim3{{gx, gy, gz}}, dim3{{bx, 1, 1}}{args});\n}}\n")
    return "\n".join(lines)


def _compile(args: list[str], what: str):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"compiling {what} failed:\n{' '.join(args)}\n{r.stderr[-6000:]}")


def _build_fake(src_path: Path, stem: str, out_dir: Path, what: str) -> Path:
    src = src_path.read_bytes()
    so = Path(out_dir) / f"{stem}_{hashlib.sha256(src).hexdigest()[:12]}.so"
    if not so.exists():
        tmp = so.with_suffix(".tmp.so")
        _compile([gxx(), "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(tmp), str(src_path), "-ldl", "-pthread"],
                 what)
        tmp.rename(so)
    return so


def build_fake_driver(out_dir: Path) -> Path:
    """fake_libcuda.so, built once per content in out_dir"""
    return _build_fake(FAKE_SRC, "fake_libcuda", out_dir, "the fake CUDA driver")


def build_fake_cublas(out_dir: Path) -> Path:
    """fake_libcublas.so, built once per content in out_dir"""
    return _build_fake(FAKE_CUBLAS_SRC, "fake_libcublas", out_dir, "the fake cuBLAS")


def emulated_source(cuda_source: str) -> str:
    """the model's .cu plus a trampoline per kernel (bz_gemm and bz_conv2d included)"""
    lib = (INCLUDE / "braze_cuda_lib.cuh").read_text()
    params = {**kernel_params(lib), **kernel_params(cuda_source)}
    assert "bz_gemm" in params and "bz_conv2d" in params, sorted(params)
    return EMU_PRELUDE + cuda_source + "\n\n/* --- trampolines for fake_libcuda's cuLaunchKernel --- */\n" + \
        trampolines(params)


def build_kernels(cuda_source: str, out_dir: Path) -> Path:
    src = emulated_source(cuda_source)
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    so = Path(out_dir) / f"emu_{key}.so"
    if not so.exists():
        cpp = Path(out_dir) / f"emu_{key}.cpp"
        cpp.write_text(src)
        tmp = so.with_suffix(".tmp.so")
        # -ffp-contract=off: like NVRTC's --fmad=false, no multiply-add fused that the source does not write
        _compile([gxx(), "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-pthread",
                  "-include", str(INCLUDE / "cuda_emu.h"), f"-I{INCLUDE}", "-o", str(tmp), str(cpp)],
                 "the model's kernels under cuda_emu.h")
        tmp.rename(so)
    return so


def image_key(image: bytes) -> str:
    """The name fake_libcuda gives a module image's kernels in a BRAZE_EMU_KERNELS directory: FNV-1a 64."""
    h = 1469598103934665603
    for b in image:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def add_emulated(cm, kernels_dir) -> None:
    """cm's kernels, compiled for emulation, under the names its cubin and its PTX load by."""
    out = Path(kernels_dir)
    out.mkdir(parents=True, exist_ok=True)
    so = build_kernels(cm._native.cuda_source, out)
    binary = cm._native.cuda_binary
    for image in (binary.cubin, binary.ptx.rstrip(b"\0")):
        link = out / f"{image_key(image)}.so"
        if not link.exists():
            shutil.copyfile(so, link)


def build_emulated(cm, tmp_path) -> dict[str, str]:
    """env vars that make cm's library run its kernels under emulation (set them before its first call)"""
    if gxx() is None:
        raise RuntimeError("g++ not found")
    cuda_source = cm._native.cuda_source
    assert cuda_source, "not a CUDA-target model"
    out = Path(tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return {"BRAZE_LIBCUDA": str(build_fake_driver(out)), "BRAZE_EMU_KERNELS": str(build_kernels(cuda_source, out)),
            "BRAZE_LIBCUBLAS": str(build_fake_cublas(out))}


__all__ = ["add_emulated", "build_emulated", "build_fake_cublas", "build_fake_driver", "build_kernels",
           "emulated_source", "image_key", "kernel_params", "trampolines"]
