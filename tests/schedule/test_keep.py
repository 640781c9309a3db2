"""Stage ``keep``: values several passes over a row need, computed once into row buffers.

Loop IR in, loop IR out for the decisions (what is kept, what is recomputed); compiled
kernels against the NumPy reference for the results, at one row, rows of odd lengths
(not multiples of any vector width) and a row far longer than L2.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from braze.ir import loop as L
from braze.ir.loop_parser import parse_kernel
from braze.ops import Builder, tensor
from braze.schedule import keep
from braze.schedule.cost import expr_cost, keep_saves
from braze.ir.types import DType
from tests.codegen.test_kernels import VBS, check, compile_kernel, f32, run_kernel


pytestmark = pytest.mark.usefixtures("module_cache")


def kernel(text: str) -> L.Kernel:
    return parse_kernel(textwrap.dedent(text))


def text(k: L.Kernel) -> str:
    return str(k).strip()


def expect(s: str) -> str:
    return textwrap.dedent(s).strip()


SOFTMAX_GELU = """
    kernel k(in x: f32[rows, n], out y: f32[rows, n]); syms n, rows  [stitch]
      for _i1 in 0..rows:
        let r0: f32 = max(_r2 < n: x[[_i1*n + _r2]])
        let r1: f32 = sum(_r3 < n: exp((x[[_i1*n + _r3]] - r0)))
        let r2: f32 = sum(_r4 < n: gelu((exp((x[[_i1*n + _r4]] - r0)) / r1)))
        for _i5 in 0..n:
          y[[_i1*n + _i5]] = (gelu((exp((x[[_i1*n + _i5]] - r0)) / r1)) / r2)
    """


def test_the_most_profitable_value_is_kept_first_then_what_its_fill_loop_shares():
    # gelu(exp(..)/r1) is in two passes (cost 38): kept first; then its fill loop and r1's
    # sum share exp(x - r0) (cost 12): kept too, so each transcendental runs once per element
    assert text(keep(kernel(SOFTMAX_GELU))) == expect("""
        kernel k(in x: f32[rows, n], out y: f32[rows, n]); syms n, rows  [stitch]
          for _i1 in 0..rows:
            alloc row4: f32[n]
            alloc row3: f32[n]
            let r0: f32 = max(_r2 < n: x[[_i1*n + _r2]])
            for _k7 in 0..n:
              row4[[_k7]] = exp((x[[_i1*n + _k7]] - r0))
            let r1: f32 = sum(_r3 < n: row4[[_r3]])
            for _k6 in 0..n:
              row3[[_k6]] = gelu((row4[[_k6]] / r1))
            let r2: f32 = sum(_r4 < n: row3[[_r4]])
            for _i5 in 0..n:
              y[[_i1*n + _i5]] = (row3[[_i5]] / r2)
        """)


def test_cheap_values_are_recomputed():
    # x * w is in all three passes, but a load and a multiply cost less than a store, a load
    # per pass and one more loop
    k = kernel("""
        kernel k(in x: f32[rows, n], in w: f32[n], out y: f32[rows, n]); syms n, rows  [stitch]
          for _i1 in 0..rows:
            let r0: f32 = sum(_r2 < n: (x[[_i1*n + _r2]] * w[[_r2]]))
            let r1: f32 = max(_r3 < n: (x[[_i1*n + _r3]] * w[[_r3]]))
            for _i4 in 0..n:
              y[[_i1*n + _i4]] = (((x[[_i1*n + _i4]] * w[[_i4]]) - r1) / r0)
        """)
    assert text(keep(k)) == text(k)
    e = L.Binary("mul", L.Load(k.buffers[0], (0, None), True), L.Load(k.buffers[1], (0, None), True),
                 DType.float32)
    assert expr_cost(e) == 3 and keep_saves(3, 3) <= 0 and keep_saves(expr_cost(L.Unary("exp", e, DType.float32)), 2) > 0


def test_a_row_whose_length_depends_on_the_row_is_not_kept():
    # a buffer sized before the loop cannot hold a row whose length changes with the row
    k = kernel("""
        kernel k(in x: f32[rows, n], out y: f32[rows, n]); syms n, rows  [stitch]
          for _i1 in 0..rows:
            let r0: f32 = sum(_r2 < _i1: exp(x[[_i1*n + _r2]]))
            let r1: f32 = max(_r3 < _i1: exp(x[[_i1*n + _r3]]))
            for _i4 in 0..n:
              y[[_i1*n + _i4]] = (r0 + r1)
        """)
    assert text(keep(k)) == text(k)


def test_keep_is_idempotent_and_leaves_pointwise_kernels_alone():
    once = keep(kernel(SOFTMAX_GELU))
    assert text(keep(once)) == text(once)
    k = kernel("""
        kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
          for _i1 in 0..n:
            y[[_i1]] = exp(exp(x[[_i1]]))
        """)
    assert text(keep(k)) == text(k)


# --- compiled, against the reference ------------------------------------------------------


def _chain_ln(b: Builder, rows, n):
    """The benchmark's chain: softmax, gelu * sigmoid, a residual add, layer_norm."""
    x = b.param("x", tensor("f32", rows, n))
    w = b.param("w", tensor("f32", n))
    s = b.mul(b.softmax(x, axis=-1), b.constant(np.float32(64.0)))
    h = b.add(b.mul(b.gelu(s), b.sigmoid(s)), x)
    b.ret(b.layer_norm(h, w, w, axis=-1))


@pytest.mark.parametrize("vb", VBS)
def test_kept_rows_at_odd_lengths_and_one_row(vb):
    b = Builder()
    _chain_ln(b, b.sym("rows"), b.sym("n"))

    def kc(k):
        assert sum(isinstance(s, L.Alloc) for s in L.walk_stmts(k.body)) == 2, str(k)

    check(b, lambda rng, r, n: [f32(rng, r, n, lo=-4, hi=4), f32(rng, n)],
          [(1, 1), (1, 17), (3, 15), (2, 33), (5, 1000), (1, 4099)], vbs=(vb,), tol="transcendental",
          kernel_check=kc)


def test_a_row_longer_than_l2():
    # 700k floats (2.8 MB) per row: the row buffers are sized from the symbol, so any length fits
    b = Builder()
    _chain_ln(b, b.sym("rows"), b.sym("n"))
    check(b, lambda rng, r, n: [f32(rng, r, n, lo=-4, hi=4), f32(rng, n)], [(2, 700_001)], vbs=(64,),
          tol="transcendental")


# --- float32 reductions: several vector accumulators ------------------------------------


@pytest.mark.parametrize("vb", VBS)
def test_float32_sums_stay_within_their_stated_bound(vb):
    """A row sum in float32 (NACC accumulators of VL lanes, a scalar tail in double, pairwise
    combine) against float64: |err| <= (n/(NACC*VL) + NACC + log2(VL) + 2) * 2^-24 * sum|x|
    (docs/semantics.md), at lengths up to 64k, with cancellation (mixed signs, 6 decades)."""
    from braze.codegen.c_reduce import NACC
    from braze.lowering import build_kernel

    b = Builder()
    x = b.param("x", tensor("f32", b.sym("r"), b.sym("n")))
    b.ret(b.reduce_sum(x, axes=(-1,)))
    k = build_kernel(b.func, b.module)
    fn, _ = compile_kernel(k, vb)
    vl = max(vb // 4, 1)
    rng = np.random.default_rng(1)
    for n in (1, 15, 17, 63, 65, 1000, 4097, 65536):
        xs = (rng.standard_normal((4, n)) * 10.0 ** rng.uniform(-3, 3, (4, n))).astype(np.float32)
        (got,) = run_kernel(fn, k, b.module, b.func, [xs])
        exact = xs.astype(np.float64).sum(axis=-1)
        bound = (n / (NACC * vl) + NACC + np.log2(vl) + 2) * 2.0 ** -24 * np.abs(xs).astype(np.float64).sum(-1)
        err = np.abs(got.astype(np.float64) - exact)
        assert np.all(err <= bound), (n, vb, err / bound)


def test_a_constant_row_has_exactly_its_value_as_mean():
    """The mean is the first element plus the mean of the differences: exact for constant
    rows of any length, in vectors, in the tail, or both."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("r"), b.sym("n")))
    b.ret(b.sub(x, b.reduce_mean(x, axes=(-1,), keepdims=True)), b.layer_norm(x, axis=-1))
    import braze
    m = braze.compile(b.module)
    rng = np.random.default_rng(2)
    for n in (1, 3, 17, 100, 1000, 65537):
        xs = np.repeat(rng.uniform(-3, 3, (3, 1)), n, axis=1).astype(np.float32) * np.float32(1.1)
        centered, ln = m(xs)
        assert not centered.any() and not ln.any(), n
