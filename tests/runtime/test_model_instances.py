"""Each compiled model owns its instance: weights and thread count never leak between models."""

import os
import threading

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor

from rt_kernels import needs_cc

pytestmark = needs_cc


def _linear_model(seed: int):
    b = Builder()
    batch = b.sym("batch", 1, 64)
    x = b.param("x", tensor("f32", batch, 8))
    w = b.constant(np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32), "w")
    b.ret(b.relu(b.op("linear", [x, w])))
    return b.module


def test_same_code_other_weights_share_a_library_not_weights():
    m1, m2 = _linear_model(1), _linear_model(2)
    c1, c2 = braze.compile(m1), braze.compile(m2)
    assert c1.library.path == c2.library.path  # one library: the source does not hold the weights
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(c1(x), braze.reference.run(m1, x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c2(x), braze.reference.run(m2, x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(c1(x), c2(x))


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("threads", [1, 3])
def test_thread_count_belongs_to_the_model_and_holds_on_every_calling_thread(threads):
    """OpenMP's thread count is per calling thread: a model compiled with threads=N must run
    with N threads when called from a thread that did not compile it."""
    b = Builder()
    n = b.sym("n", 1, 1 << 24)
    x = b.param("x", tensor("f32", n))
    b.ret(b.tanh(b.exp(x)))
    m = braze.compile(b.module, threads=threads)
    x = np.ones(1 << 22, np.float32)  # far above the parallel grain
    seen = {}

    def call():
        before = _os_threads()
        m(x)
        seen["new"] = _os_threads() - before  # a worker pool per calling thread (braze_omp.h, as libgomp)

    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert seen["new"] == threads - 1
