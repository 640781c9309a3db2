"""constant_fold: all-constant nodes become constants (NumPy reference); conv + batch_norm folds."""

from __future__ import annotations

import numpy as np

from braze.ops import Builder, tensor
from braze.passes import constant_fold, copy_module

ENVS = [{"n": 1}, {"n": 5}]


def test_small_chain_folds_and_unused_constants_go(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @a : f32[3] = [1.0, 2.0, 3.0]
    @b : f32[] = [2.0]
  }
  func @main(%x: f32[n, 3]) -> (f32[n, 3]) {
    %a = constant() {name="a"} : f32[3]
    %b = constant() {name="b"} : f32[]
    %0 = mul(%a, %b) : f32[3]
    %1 = exp(%0) : f32[3]
    %2 = add(%x, %1) : f32[n, 3]
    return %2
  }
}
"""
    before, after = P.run_pass(constant_fold, text)
    lines = P.body(after)
    assert len(lines) == 3 and lines[0].endswith(": f32[3]") and "constant()" in lines[0]
    assert lines[1].startswith("%2 = add(%x, ")
    assert set(after.constants) == {lines[0].split('name="')[1].split('"')[0]}  # @a and @b are gone
    (c,) = after.constants.values()
    np.testing.assert_allclose(c, np.exp(np.array([2.0, 4.0, 6.0])).astype(np.float32))
    P.check_equiv(before, after, ENVS)


def test_weight_transpose_folds_whatever_its_size(P):
    b = Builder()
    n = b.sym("n", 1, 64)
    x = b.param("x", tensor("f32", n, 300))
    w = b.constant(np.random.default_rng(0).standard_normal((400, 300)).astype(np.float32), name="w")
    wt = b.permute(w, perm=(1, 0))
    b.ret(b.matmul(x, wt))
    before = b.module
    after = constant_fold(copy_module(before))
    ops = [nd.op for nd in after.main.nodes]
    assert ops == ["constant", "matmul"]
    (c,) = after.constants.values()
    assert c.shape == (300, 400) and c.flags.c_contiguous
    P.check_equiv(before, after, ENVS, rtol=1e-5, atol=1e-4)


def test_large_expansion_is_not_folded(P):
    b = Builder()
    n = b.sym("n", 1, 64)
    x = b.param("x", tensor("f32", n, 1))
    c = b.constant(np.float32(3.0))
    big = b.expand(c, shape=(512, 512))  # 262144 elements from one: would bloat the module
    b.ret(b.add(x, b.reduce_sum(big, axes=(0,), keepdims=False)))
    after = constant_fold(copy_module(b.module))
    assert "expand" in [nd.op for nd in after.main.nodes]


def test_symbolic_nodes_are_not_folded(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n]) -> (f32[n]) {
    %0 = arange() {dtype=#f32, end=n, start=0, step=1} : f32[n]
    %1 = add(%x, %0) : f32[n]
    return %1
  }
}
"""
    before, after = P.run_pass(constant_fold, text)
    assert str(after) == str(before)


def test_conv_batch_norm_folds_into_the_weights(P):
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("n", 1, 8)
    x = b.param("x", tensor("f32", n, 3, 9, 9))
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), name="w")
    bias = b.constant(rng.standard_normal(4).astype(np.float32), name="bias")
    y = b.conv2d(x, w, bias, padding=(1, 1, 1, 1))
    ps = [b.constant(rng.uniform(0.5, 2, 4).astype(np.float32), name=k) for k in ("g", "beta", "mean", "var")]
    z = b.batch_norm(y, *ps, eps=1e-5)
    b.ret(b.relu(z))
    before = b.module
    after = constant_fold(copy_module(before))
    ops = [nd.op for nd in after.main.nodes]
    assert "batch_norm" not in ops and ops.count("conv2d") == 1
    P.check_equiv(before, after, ENVS, rtol=1e-4, atol=1e-4)


def test_0d_results_stay_0d(P):
    """np.ascontiguousarray makes a 0-d array 1-d: folded 0-d values came back as f32[1]."""
    text = """module {
  constants {
    @a : f32[] = [16.0]
  }
  func @main(%x: f32[4]) -> (f32[4], f32[], i64[]) {
    %a = constant() {name="a"} : f32[]
    %0 = full() {dtype=#f32, shape=[], value=3.0} : f32[]
    %1 = mul(%a, %0) : f32[]
    %2 = sqrt(%1) : f32[]
    %3 = div(%x, %2) : f32[4]
    %4 = full() {dtype=#i64, shape=[], value=7.0} : i64[]
    return %3, %2, %4
  }
}
"""
    before, after = P.run_pass(constant_fold, text)
    assert [nd.op for nd in after.main.nodes] == ["constant", "div", "constant"]
    assert all(c.shape == () for c in after.constants.values())
    assert after.main.results[1].type.shape == () and after.main.results[2].type.shape == ()
    P.check_equiv(before, after, [{}])
