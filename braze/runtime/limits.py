"""The machine's limits, measured once per process, for the per-kernel profile.

* memory bandwidth: the best of several copies of a 64 MiB float32 array
  (bytes read plus bytes written, per second), single-threaded through NumPy.
* GEMM throughput: the best of several 1024^3 float32 products through NumPy's
  BLAS, at its default thread count.

They are what this host measures, not data-sheet peaks: a kernel at 100% of
either runs as fast as the simplest code that does the same work here.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass


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
    import numpy as np
    a = np.ones(16 << 20, np.float32)
    b = np.empty_like(a)
    t = _best(lambda: np.copyto(b, a), 5)
    x = np.ones((1024, 1024), np.float32)
    y = np.ones((1024, 1024), np.float32)
    g = _best(lambda: x @ y, 3)
    return Limits(bandwidth_gbs=2 * a.nbytes / t / 1e9, gemm_gflops=2 * 1024 ** 3 / g / 1e9)


__all__ = ["Limits", "measured_limits"]
