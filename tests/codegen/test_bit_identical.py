"""A value that a kernel computes more than once has the same bits every time.

A stitch kernel (layer_norm, softmax, x - max(x)) recomputes its row's producers in
each pass. With the C compiler free to contract a*b+c into an FMA, it fused one
evaluation and not another, and x*y - mean(x*y) was +-7.5e-5 on a constant row.
Kernels are now compiled with -ffp-contract=off, fused multiply-adds are explicit
in braze_vec.h, and the scalar math is the exact twin of the vector math.

The checks are exact: no tolerance hides a disagreement between two evaluations.
"""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor
from braze.testing import assert_close


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


def _rows(rng, n, h):
    """n rows, each one value repeated h times (float32, inexact products)."""
    return np.repeat(rng.uniform(-3, 3, (n, 1)), h, axis=1).astype(np.float32)


def test_layer_norm_of_a_product_is_exactly_zero():
    """The issue's case: each row of x * y is constant, so layer_norm gives exactly 0.
    h is a power of two: then h * v is exact and the mean of the row is v itself."""
    b = Builder()
    n, h = b.sym("n"), b.sym("h")
    x = b.param("x", tensor("f32", n, h))
    y = b.param("y", tensor("f32", n, h))
    b.ret(b.layer_norm(b.mul(x, y), axis=-1, eps=1e-5), b.sub(b.mul(x, y), b.reduce_mean(b.mul(x, y), axes=(-1,),
                                                                                           keepdims=True)))
    m = braze.compile(b.module)
    rng = np.random.default_rng(0)
    for hh in (1, 4, 8, 16, 64, 256, 1024):  # scalar remainder only, vector body only, both
        xs, ys = _rows(rng, 9, hh), _rows(rng, 9, hh)
        assert np.all((xs * ys).astype(np.float64) != xs.astype(np.float64) * ys), "products must round"
        ln, centered = m(xs, ys)
        assert np.array_equal(ln, np.zeros_like(ln)), f"h={hh}: layer_norm max |y| = {np.abs(ln).max()}"
        assert np.array_equal(centered, np.zeros_like(centered)), f"h={hh}"


_UNARY = ("exp", "tanh", "sigmoid", "erf", "gelu", "silu", "neg", "abs", "relu")
_BINARY = ("add", "sub", "mul", "maximum", "minimum")


def _random_chain(b, rng, leaves, depth):
    """A random expression over ``leaves`` (float32 values of one shape)."""
    vals = list(leaves)
    for _ in range(depth):
        if rng.random() < 0.5:
            op = _UNARY[rng.integers(len(_UNARY))]
            v = vals[rng.integers(len(vals))]
            if op == "exp":  # keep it finite
                v = b.tanh(v)
            vals.append(b.op(op, [v]))
        else:
            op = _BINARY[rng.integers(len(_BINARY))]
            vals.append(b.op(op, [vals[rng.integers(len(vals))], vals[rng.integers(len(vals))]]))
    return vals[-1]


@pytest.mark.parametrize("seed", range(6))
def test_a_subexpression_shared_by_two_reductions(seed):
    """s (a product of random chains, transcendental functions included) feeds a max, a
    min and a mean over each row, and is recomputed in each pass (in vectors, in the
    scalar remainder, or in a scalar loop). At the row's max, s - max(s) is exactly 0
    and nowhere positive, whatever the row length; on constant rows of power-of-two
    length, s - mean(s) is 0."""
    rng = np.random.default_rng(seed)
    b = Builder()
    n, h = b.sym("n"), b.sym("h")
    x = b.param("x", tensor("f32", n, h))
    y = b.param("y", tensor("f32", n, h))
    leaves = [x, y, b.mul(x, y), b.add(b.mul(x, b.constant(np.float32(0.7))), y)]
    s = b.mul(_random_chain(b, rng, leaves, 4), _random_chain(b, rng, leaves, 4))  # s - mean(s) could contract
    hi = b.sub(s, b.reduce_max(s, axes=(-1,), keepdims=True))
    lo = b.sub(b.reduce_min(s, axes=(-1,), keepdims=True), s)
    mid = b.sub(s, b.reduce_mean(s, axes=(-1,), keepdims=True))
    # a float64 output is stored by a scalar loop while the max over the row runs in vectors
    b.ret(hi, b.cast(lo, dtype="f64"), mid, b.softmax(s, axis=-1))
    m = braze.compile(b.module)
    for hh in (1, 7, 16, 37, 64, 100):
        xs = rng.uniform(-2, 2, (5, hh)).astype(np.float32)
        ys = rng.uniform(-2, 2, (5, hh)).astype(np.float32)
        got = m(xs, ys)
        want = braze.reference.run(b.module, xs, ys)
        for g, w in zip(got, want):
            assert_close(g, w, rtol=3e-5, atol=3e-5, what=f"seed {seed}, h={hh}")
        for d in got[:2]:
            assert np.array_equal(d.max(axis=-1), np.zeros(5, np.float32)), f"seed {seed}, h={hh}: {d.max(axis=-1)}"
        if hh in (1, 16, 64):
            cx, cy = _rows(rng, 5, hh), _rows(rng, 5, hh)
            mid_c = m(cx, cy)[2]
            assert np.array_equal(mid_c, np.zeros_like(mid_c)), f"seed {seed}, h={hh}: {np.abs(mid_c).max()}"


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float32 units in the last place (ordered bit patterns; both finite)."""
    ia, ib = (v.view(np.int32).astype(np.int64) for v in (a, b))
    ia, ib = (np.where(i < 0, np.int64(-2**31) - i, i) for i in (ia, ib))
    return np.abs(ia - ib)


def test_pow_has_the_same_bits_in_vectors_and_in_the_remainder():
    """float32 pow runs libmvec's vector powf where the toolchain links it, and its scalar form
    is one lane of that call: an element gives the same bits whether it lands in a vector or in
    the remainder. Against float64 pow rounded to float32 it is within 2 ulp, and it gives IEEE
    pow's infinities, zeros (with their signs) and NaNs."""
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n))
    y = b.param("y", tensor("f32", n))
    b.ret(b.pow(x, y))
    m = braze.compile(b.module)
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5,
                        1e-45, 3.4e38, -3.4e38, 16777217.0], np.float32)
    sx, sy = (a.ravel() for a in np.meshgrid(special, special))
    rx = np.concatenate([rng.uniform(0, 100, 3000), rng.uniform(-4, 4, 3000)]).astype(np.float32)
    ry = np.concatenate([rng.uniform(-10, 10, 3000), rng.integers(-10, 11, 3000)]).astype(np.float32)
    xs, ys = np.concatenate([sx, rx]), np.concatenate([sy, ry])
    full = m(xs, ys)
    with np.errstate(all="ignore"):
        want = np.power(xs.astype(np.float64), ys.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want) & np.isfinite(full) & (want != 0)
    assert _ulps(full[finite], want[finite]).max() <= 2
    rest = ~finite
    assert np.array_equal(full[rest], want[rest], equal_nan=True)
    assert np.array_equal(np.signbit(full[rest]), np.signbit(want[rest]))
    for k in (1, 3, 5, 15, 17, 37):  # each element again, now in a remainder of k elements
        starts = range(0, len(xs) - k, 97)
        parts = np.concatenate([m(xs[s:s + k], ys[s:s + k]) for s in starts])
        whole = np.concatenate([full[s:s + k] for s in starts])
        assert np.array_equal(parts.view(np.int32), whole.view(np.int32)), f"remainder of {k}"
