"""The local GPU, asked through the driver with ctypes (no CUDA toolkit, no CUDA torch)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..errors import BrazeError


def local_arch() -> str:
    """``sm_XY`` of GPU 0 (``target="cuda"``); a BrazeError naming what is missing otherwise."""
    name = os.environ.get("BRAZE_LIBCUDA") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise BrazeError(f"target 'cuda' means this machine's GPU, but the CUDA driver ({name}) could not be loaded: "
                         f"{e}", hint="name the GPU's arch to cross-compile without one, e.g. target='cuda:sm_90'") \
            from None
    n, major, minor, dev = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.cuInit(0) or lib.cuDeviceGetCount(ctypes.byref(n)) or n.value == 0:
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise BrazeError("target 'cuda' means this machine's GPU, but no CUDA GPU is visible"
                         + ("; CUDA_VISIBLE_DEVICES is set and empty" if vis == "" else ""),
                         hint="name the GPU's arch to cross-compile without one, e.g. target='cuda:sm_90'")
    lib.cuDeviceGet(ctypes.byref(dev), 0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # compute capability major, minor
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    return f"sm_{major.value}{minor.value}"


def preload_cublas() -> None:
    """Load the nvidia-cublas wheel's libcublas (as torch's CUDA build brings it) globally, so a
    CUDA model's dlopen("libcublas.so.13") finds it without LD_LIBRARY_PATH. Nothing when absent:
    the model then runs its own GEMM kernel."""
    try:
        import nvidia
    except ImportError:
        return
    for root in nvidia.__path__:
        for lib in [*Path(root).glob("cu13/lib/libcublas.so.13"), *Path(root).glob("cublas/lib/libcublas.so.1[23]")]:
            try:
                ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


__all__ = ["local_arch", "preload_cublas"]
