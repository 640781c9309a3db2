"""The machine's limits, measured once per process, for the per-kernel profile.

* memory bandwidth: the best of several copies of a 64 MiB float32 array
  (bytes read plus bytes written, per second), single-threaded through NumPy.
* GEMM throughput: the best of several 1024^3 float32 products through NumPy's
  BLAS and through the oneDNN helper braze's GEMMs run on (where it is installed),
  each at its default thread count; the faster of the two. NumPy's OpenBLAS alone
  measured 230-254 GFLOP/s on an AMD Zen 5 with 2 cores, where ResNet-50's
  convolutions ran at up to 511, and the profile put them at up to 217% of it.

They are what this host measures, not data-sheet peaks: a kernel at 100% of
either runs as fast as the simplest code that does the same work here.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Limits:
    bandwidth_gbs: float  # GB/s, bytes read + written
    gemm_gflops: float  # GFLOP/s, 2 per multiply-add


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.cache
def measured_limits() -> Limits:
    a = np.ones(16 << 20, np.float32)
    b = np.empty_like(a)
    t = _best(lambda: np.copyto(b, a), 5)
    x = np.ones((1024, 1024), np.float32)
    y = np.ones((1024, 1024), np.float32)
    g = _best(lambda: x @ y, 3)
    g = min(g, _onednn_gemm_seconds(x, y) or g)
    return Limits(bandwidth_gbs=2 * a.nbytes / t / 1e9, gemm_gflops=2 * 1024 ** 3 / g / 1e9)


def _onednn_gemm_seconds(x, y) -> float | None:
    """The best of 3 products x @ y^T on the helper's prepacked GEMM (after one that creates its
    primitive), or None where the helper cannot be built or run."""
    import ctypes
    try:
        from ..extern import onednn
        if not onednn.available():
            return None
        lib = onednn.load_standalone()
    except Exception:  # no C compiler or oneDNN: NumPy's figure stands
        return None
    n = x.shape[0]
    c = np.empty_like(x)
    err = ctypes.create_string_buffer(256)
    b = lib.braze_pack_b_err(y.ctypes.data, n, n, 1, err, len(err))
    if not b:
        return None
    try:
        def run():
            if lib.braze_matmul(n, n, n, x.ctypes.data, b, None, None, 0, c.ctypes.data, err, len(err)):
                raise RuntimeError(err.value.decode(errors="replace"))
        run()
        return _best(run, 3)
    except RuntimeError:
        return None
    finally:
        lib.braze_free_packed_b(b)


__all__ = ["Limits", "measured_limits"]
