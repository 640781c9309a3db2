"""CUDA C to PTX and cubin with NVRTC, through ctypes: no GPU, no CUDA toolkit, only the pip wheel.

    compile_cuda(source, arch) -> CudaBinary(ptx, cubin, log)   # arch: "sm_90"
    nvrtc_version() -> (major, minor)
    supported_archs() -> ["sm_75", ...]                         # what this NVRTC can target
    find_ptxas() -> path | None                                 # the nvcc wheel's, for tests

The library comes from the ``nvidia-cuda-nvrtc`` wheel (``pip install braze[cuda]``), pinned to
13.0: NVRTC 13.5 writes PTX 9.5, which a 13.0 driver (580) and ptxas 13.0 reject. Its builtins
library must be loaded first and globally, or every compile fails with
BUILTIN_OPERATION_FAILURE. NVRTC has no C standard headers: ``include/cuda_std`` stands in for
the few that braze_vec.h includes. ``--fmad=false``: the GPU, like the CPU kernels, fuses no
multiply-add the source does not write, so both round alike. Results are cached by content
(source, flags, arch, NVRTC version) under the compile cache, as the C libraries are.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import BrazeError, MissingDependencyError

INCLUDE = Path(__file__).parent / "include"
FLAGS = ("-default-device", "--fmad=false", "-std=c++17", f"-I{INCLUDE}", f"-I{INCLUDE / 'cuda_std'}")
_INSTALL = "pip install 'braze[cuda]' (the nvidia-cuda-nvrtc==13.0.* wheel)"


@dataclass(frozen=True)
class CudaBinary:
    ptx: bytes  # without the C string's NUL: ptxas stops at one
    cubin: bytes
    log: str
    arch: str
    nvrtc: str  # "13.0"


def _lib_dirs() -> list[Path]:
    out = []
    try:
        import nvidia  # namespace package of the CUDA wheels
        for root in nvidia.__path__:
            out += [Path(root) / "cu13" / "lib", Path(root) / "cuda_nvrtc" / "lib"]
    except ImportError:
        pass
    return [d for d in out if d.is_dir()]


@functools.lru_cache(maxsize=1)
def _nvrtc() -> ctypes.CDLL:
    for d in _lib_dirs():
        main = sorted(d.glob("libnvrtc.so.*"))
        builtins = sorted(p for p in d.glob("libnvrtc-builtins.so.*") if ".alt." not in p.name)
        if main and builtins:
            ctypes.CDLL(str(builtins[-1]), mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(str(main[0]))
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            return lib
    raise MissingDependencyError("NVRTC (libnvrtc.so.13) is not installed, so braze cannot compile for a CUDA target",
                                 hint=_INSTALL)


def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def supported_archs() -> list[str]:
    lib = _nvrtc()
    n = ctypes.c_int()
    lib.nvrtcGetNumSupportedArchs(ctypes.byref(n))
    arr = (ctypes.c_int * n.value)()
    lib.nvrtcGetSupportedArchs(arr)
    return [f"sm_{a}" for a in arr]


def find_ptxas() -> str | None:
    for d in _lib_dirs():
        p = d.parent / "bin" / "ptxas"
        if p.is_file():
            return str(p)
    return None


def _get(lib, prog, size_fn, get_fn) -> bytes:
    n = ctypes.c_size_t()
    getattr(lib, size_fn)(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    getattr(lib, get_fn)(prog, buf)
    return buf.raw[:n.value]


def _compile(source: str, opts: list[str]) -> tuple[int, str, bytes, bytes]:
    """(status, log, PTX, cubin). Compiled for sm_XX, NVRTC gives both: the PTX is the one it
    would give for compute_XX (checked with NVRTC 13.0), so one compile serves both."""
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"braze_model.cu", 0, None, None)
    if rc:
        raise BrazeError(f"NVRTC could not create a program: {lib.nvrtcGetErrorString(rc).decode()}")
    try:
        arr = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        log = _get(lib, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog").rstrip(b"\0").decode(errors="replace")
        if rc:
            return rc, log, b"", b""
        ptx = _get(lib, prog, "nvrtcGetPTXSize", "nvrtcGetPTX").rstrip(b"\0")
        return 0, log, ptx, _get(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def compile_cuda(source: str, arch: str, cache_dir=None) -> CudaBinary:
    """PTX for ``compute_XX`` (JIT-compiled by a newer GPU's driver) and a cubin for ``arch``."""
    from ..runtime.compiler import _headers_digest, resolve_cache_dir
    version = "%d.%d" % nvrtc_version()
    key = hashlib.sha256("\0".join((source, arch, version, *FLAGS, _headers_digest(INCLUDE))).encode()).hexdigest()
    entry = resolve_cache_dir(cache_dir) / "cuda" / key[:2] / key
    if (entry / "kernels.cubin").is_file() and (entry / "kernels.ptx").is_file():
        return CudaBinary((entry / "kernels.ptx").read_bytes(), (entry / "kernels.cubin").read_bytes(), "",
                          arch, version)
    rc, log, ptx, cubin = _compile(source, [f"--gpu-architecture={arch}", *FLAGS])
    if rc:
        raise BrazeError(f"NVRTC {version} failed to compile the model's CUDA kernels for {arch}:\n{log[:4000]}",
                         hint="this is a braze bug; please report it with BRAZE_DUMP=DIR's files")
    try:
        entry.mkdir(parents=True, exist_ok=True)
        for name, data in (("kernels.ptx", ptx), ("kernels.cubin", cubin)):
            tmp = entry / f".{name}.{os.getpid()}"
            tmp.write_bytes(data)
            os.replace(tmp, entry / name)
    except OSError:
        pass  # an unwritable cache only costs the next compile
    return CudaBinary(ptx, cubin, log, arch, version)


__all__ = ["CudaBinary", "compile_cuda", "find_ptxas", "nvrtc_version", "supported_archs"]
