"""braze.testing: the helpers tests rely on must fail when what they check fails."""

from __future__ import annotations

import threading
import time

import numpy as np

import braze
from braze.testing import NativeCalls, run_threads


def test_run_threads_returns_what_the_threads_raised():
    def work(t):
        if t == 1:
            raise ValueError("thread 1")
    errors = run_threads(work, 3)
    assert len(errors) == 1 and str(errors[0]) == "thread 1"


def test_run_threads_fails_a_thread_still_running_after_the_timeout():
    release = threading.Event()
    t0 = time.monotonic()
    errors = run_threads(lambda t: release.wait(30) if t == 0 else None, 3, timeout=0.5)
    release.set()
    assert time.monotonic() - t0 < 10
    assert len(errors) == 1 and isinstance(errors[0], TimeoutError)
    assert "1 of 3 threads still running" in str(errors[0])


def test_native_calls_counts_library_calls_only(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    b = braze.ops.Builder()
    x = b.param("x", braze.ir.types.TensorType(braze.ir.types.DType.float32, (3,)))
    b.ret(b.op("exp", [x]))
    m = braze.compile(b.module)
    with NativeCalls() as n:
        m(np.ones(3, np.float32))
        m(np.ones(3, np.float32))
        np.exp(np.ones(3))  # not braze
    assert n.count == 2
    m(np.ones(3, np.float32))
    assert n.count == 2  # counted while active only
