"""One compiled model called from many threads at once, at mixed shapes: every result is
bit-identical to a single-threaded call (GEMM and convolution through oneDNN, fused chains, and
the calls into braze_scatter.h, adding and writing, and braze_attention.h)."""

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor
from braze.testing import assert_close_scaled, flatten_outputs, thread_stress

from rt_kernels import needs_cc

pytestmark = needs_cc

THREADS, CALLS = 8, 40


def _w(rng, *shape):
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def _mlp():
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("batch", 1, 64)
    # BERT-sized: oneDNN's kernels for these shapes use a scratchpad (shared between threads
    # with the library-managed one: wrong results under concurrent calls)
    x = b.param("x", tensor("f32", n, 768))
    h = b.gelu(b.op("linear", [x, b.constant(_w(rng, 3072, 768), "w1"), b.constant(_w(rng, 3072), "b1")]))
    y = b.op("linear", [h, b.constant(_w(rng, 768, 3072), "w2"), b.constant(_w(rng, 768), "b2")])
    b.ret(b.add(y, x))  # residual: a oneDNN post-op
    return b.module, [(rng.standard_normal((s, 768)).astype(np.float32),) for s in (1, 2, 7, 26, 64)]


def _convnet():
    rng = np.random.default_rng(1)
    b = Builder()
    n, h, w = b.sym("batch", 1, 4), b.sym("h", 8, 64), b.sym("w", 8, 64)
    x = b.param("x", tensor("f32", n, 32, h, w))
    y = b.relu(b.op("conv2d", [x, b.constant(_w(rng, 64, 32, 3, 3), "k1"), b.constant(_w(rng, 64), "c1")],
                    padding=(1, 1)))
    y = b.op("conv2d", [y, b.constant(_w(rng, 32, 64, 3, 3), "k2")], padding=(1, 1))
    y = b.relu(b.add(y, x))
    b.ret(b.op("reduce_mean", [y], axes=(2, 3), keepdims=False))
    shapes = [(1, 32, 8, 8), (2, 32, 13, 9), (1, 32, 31, 17), (4, 32, 16, 16)]
    return b.module, [(rng.standard_normal(s).astype(np.float32),) for s in shapes]


def _fused_chain():
    rng = np.random.default_rng(2)
    b = Builder()
    n, s = b.sym("batch", 1, 16), b.sym("seq", 1, 128)
    x = b.param("x", tensor("f32", n, s, 48))
    y = b.op("layer_norm", [b.tanh(b.mul(x, x)), b.constant(_w(rng, 48), "g")], axis=-1)
    p = b.softmax(b.add(y, b.exp(x)), axis=1)
    b.ret(p, b.op("reduce_sum", [b.mul(p, y)], axes=(-1,), keepdims=False))
    shapes = [(1, 1, 48), (2, 5, 48), (3, 33, 48), (16, 128, 48)]
    return b.module, [(rng.standard_normal(s).astype(np.float32),) for s in shapes]


def _scatter_and_attention():
    """An embedding's gradient (index_add into zeros), the same rows written (index_put: repeated ids,
    the last write winning) and attention's backward with shared
    key/value heads, a causal and a float mask (each thread its own scratch)."""
    rng = np.random.default_rng(3)
    b = Builder()
    n, s = b.sym("batch", 1, 4), b.sym("seq", 1, 80)
    ids, rows = b.param("ids", tensor("i64", s)), b.param("rows", tensor("f32", s, 16))
    q, k = b.param("q", tensor("f32", n, 4, s, 16)), b.param("k", tensor("f32", n, 2, s, 16))
    do, lse = b.param("do", tensor("f32", n, 4, s, 16)), b.param("lse", tensor("f32", n, 4, s))
    grads = b.attention_backward(q, k, k, q, do, lse, b.param("m", tensor("f32", s, s)), is_causal=True, scale=0.25)
    last = b.index_put(b.full(shape=(50, 16), value=0.0, dtype="f32"), ids, rows, axis=0, reduce="none")
    b.ret(b.index_add(b.full(shape=(50, 16), value=0.0, dtype="f32"), ids, rows), last, *grads)

    def case(bb, ss):
        f = lambda *sh: rng.standard_normal(sh).astype(np.float32)  # noqa: E731
        return (rng.integers(0, 50, ss), f(ss, 16), f(bb, 4, ss, 16), f(bb, 2, ss, 16), f(bb, 4, ss, 16),
                np.abs(f(bb, 4, ss)) + 3, f(ss, ss))
    return b.module, [case(1, 1), case(2, 7), case(3, 65), case(4, 80)]


@pytest.mark.parametrize("make", [_mlp, _convnet, _fused_chain, _scatter_and_attention],
                         ids=["gemm", "conv", "fused", "scatter_attention"])
def test_concurrent_calls_are_bit_identical(make):
    module, cases = make()
    m = braze.compile(module)
    for c in cases:  # the single-threaded answer is right to begin with
        for got, want in zip(flatten_outputs(m(*c)), flatten_outputs(braze.reference.run(module, *c))):
            assert_close_scaled(got, want)
    assert thread_stress(m, cases, THREADS, CALLS) == []
