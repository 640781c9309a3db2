"""0-d tensors and 0-sized dims in generated code: braze IR modules compiled with
braze.compile (lowering, schedule, vectorization, host code, memory plan) against the
reference interpreter, shapes and dtypes compared exactly."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor
from braze.testing import assert_close


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


def _check(module, inputs_list):
    native = braze.compile(module)
    for xs in inputs_list:
        want = braze.reference.run(module, *xs)
        got = native(*xs)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for i, (g, w) in enumerate(zip(got, want)):
            what = f"output {i} (%{module.main.results[i].name}) at {[x.shape for x in xs]}"
            assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype, w.dtype)
            assert_close(g, w, what=what)


def test_every_reduction_of_a_0d_input():
    """A reduction over no loops is its one element (the schedule indexed loops[-1] of an empty tuple)."""
    b = Builder()
    x = b.param("x", tensor("f32"))
    i = b.param("i", tensor("i32"))
    res = [b.reduce_sum(x), b.reduce_mean(x, axes=(0,)), b.reduce_max(x, keepdims=True), b.reduce_min(x, axes=(-1,)),
           b.reduce_prod(x), b.argmax(x, axis=0), b.argmin(x, axis=-1, keepdims=True), b.var(x),
           b.var(x, correction=0), b.cumsum(x, axis=0), b.cumsum(x, axis=0, exclusive=True, reverse=True),
           b.reduce_sum(i), b.reduce_max(i), b.cumsum(i, axis=-1), b.softmax(x, axis=0), b.log_softmax(x, axis=0),
           b.add(b.mul(x, b.reduce_sum(x)), b.exp(x))]
    b.ret(*res)
    _check(b.module, [[np.array(v, np.float32), np.array(k, np.int32)] for v, k in ((1.5, 3), (-2.0, -7), (0.0, 0))])


def test_0d_values_inside_kernels_over_symbolic_dims():
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n, 4))
    t = b.param("t", tensor("f32"))
    s = b.reduce_sum(x)  # 0-d, used by the next kernels
    b.ret(b.div(x, s), b.add(s, t), b.mul(t, t), b.layer_norm(b.mul(x, t), axis=-1, eps=1e-5),
          b.full(shape=(), value=2.5, dtype="f32"), b.reshape(t, shape=(1, 1)))
    rng = np.random.default_rng(0)
    _check(b.module, [[rng.uniform(1, 2, (k, 4)).astype(np.float32), np.array(0.5, np.float32)] for k in (1, 5, 37)])


def test_dims_that_are_0_at_run_time():
    """A symbol whose range includes 0: empty loops, reductions over nothing, empty library calls."""
    b = Builder()
    n = b.sym("n", 0, 64)
    x = b.param("x", tensor("f32", n, 3))
    y = b.param("y", tensor("f32", 3, n))
    w = b.param("w", tensor("f32", n, 4))
    i = b.param("i", tensor("i32", n, 3))
    b.ret(b.mul(b.exp(x), b.add(x, x)), b.reduce_sum(x, axes=(0,)), b.reduce_max(x, axes=(0,)), b.reduce_mean(x),
          b.reduce_prod(x, axes=(0,)), b.reduce_max(i, axes=(0,)), b.reduce_min(i, axes=(0,)),
          b.softmax(x, axis=0), b.softmax(y, axis=-1), b.layer_norm(y, axis=-1, eps=1e-5),
          b.cumsum(x, axis=0), b.var(x, axes=(0,)), b.argmax(x, axis=1), b.matmul(y, w),
          b.linear(x, b.constant(np.ones((5, 3), np.float32), name="lw")))
    rng = np.random.default_rng(0)

    def ins(k):
        return [rng.standard_normal((k, 3)).astype(np.float32), rng.standard_normal((3, k)).astype(np.float32),
                rng.standard_normal((k, 4)).astype(np.float32), rng.integers(-9, 9, (k, 3)).astype(np.int32)]
    _check(b.module, [ins(0), ins(1), ins(19)])
