"""Ops compiled through their decompositions (topk, group_norm) against the reference,
natively, with symbolic dims at sizes 1, odd and even, one compile per module. A topk row longer
than the decomposition takes runs braze_select.h's BZ_TOPK, and a long cumsum or cumprod is summed
in blocks (passes/decompose.py)."""

import ml_dtypes
import numpy as np
import pytest

import braze
from braze import reference
from braze.errors import InputError
from braze.ops import Builder, tensor


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "decomposed_cache"))


def _compile_once(module):
    before = braze.stats()["native_compiles"] + braze.stats()["cache_hits"]
    m = braze.compile(module)
    assert braze.stats()["native_compiles"] + braze.stats()["cache_hits"] == before + 1
    return m


def test_topk_native_matches_reference_exactly():
    b = Builder()
    n, s = b.sym("n"), b.sym("s", 4, 512)
    x = b.param("x", tensor("f32", n, s, 3))
    i = b.param("i", tensor("i64", n, s))
    outs = [*b.topk(x, k=4, axis=1), *b.topk(x, k=2, axis=-1, largest=False), *b.topk(i, k=s, axis=1),
            *b.topk(i, k=1, axis=0, largest=False)]
    b.ret(*outs)
    m = _compile_once(b.module)
    rng = np.random.default_rng(0)
    for shp in [(1, 4), (2, 7), (3, 64), (1, 301)]:
        xs = rng.standard_normal(shp + (3,)).astype(np.float32)
        xs[rng.random(xs.shape) < 0.1] = np.nan
        xs[rng.random(xs.shape) < 0.2] = 1.0  # ties
        ins = rng.integers(-3, 3, size=shp)
        for k, (g, w) in enumerate(zip(m(xs, ins), reference.run(b.module, xs, ins))):
            np.testing.assert_array_equal(g, w, err_msg=f"output {k} at {shp}")
    with pytest.raises(InputError, match="range"):  # s < k: rejected, as torch raises
        m(np.zeros((1, 3, 3), np.float32), np.zeros((1, 3), np.int64))


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "f16", "i32", "i8"])
def test_a_long_topk_row_runs_braze_select_and_matches_the_reference_exactly(dtype):
    """Both of BZ_TOPK's ways (a heap of the k best, a sort for k above a quarter of the row), rows
    across the axis (inner > 1), the threads' split of many rows, one output read alone, k = 0."""
    b = Builder()
    n, s = b.sym("n"), b.sym("s", 1, 70000)
    x = b.param("x", tensor(dtype, n, s, 2))
    v1, i1 = b.topk(x, k=1, axis=1)
    v5, _ = b.topk(x, k=5, axis=1, largest=False)
    _, i17 = b.topk(x, k=17, axis=1)
    vs, is_ = b.topk(x, k=s, axis=1, largest=False)
    v0, i0 = b.topk(x, k=0, axis=1)
    b.ret(v1, i1, v5, i17, vs, is_, v0, i0)
    m = _compile_once(b.module)
    assert [f.attrs["kind"] for f in m.module.main.nodes if f.op == "fused"].count("select") == 5
    rng = np.random.default_rng(3)
    np_dt = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "i32": np.int32,
             "i8": np.int8}[dtype]
    for shp in [(1, 68), (3, 101), (2, 1000), (1, 40000)]:
        if not dtype.startswith("i"):
            xs = rng.standard_normal(shp + (2,)).astype(np_dt)
            for val, p in ((np.nan, 0.05), (1.0, 0.2), (-0.0, 0.05), (0.0, 0.05), (np.inf, 0.02), (-np.inf, 0.02)):
                xs[rng.random(xs.shape) < p] = val  # NaNs, ties, -0 against 0, infinities
        else:
            xs = rng.integers(-100, 100, size=shp + (2,)).astype(np_dt)
        for k, (g, w) in enumerate(zip(m(xs), reference.run(b.module, xs))):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, shp)
            np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8),
                                          err_msg=f"output {k} at {shp}")  # bits: -0 and NaN too


def test_a_long_cumsum_and_cumprod_sum_in_blocks_and_match_the_reference():
    """Rows of 1 to 40000 (the blocks' pad, a partial last block, rows across the axis), NaN and
    infinities where they fall, int32 to int64 exactly; within float32's error of a sum of |x|
    (the blocks change the order of the adds, as the loops' partial sums did)."""
    b = Builder()
    n, s = b.sym("n", 1, 4), b.sym("s", 1, 70000)
    x, i = b.param("x", tensor("f32", n, s, 2)), b.param("i", tensor("i32", n, s))
    b.ret(b.cumsum(x, axis=1), b.cumprod(x, axis=1), b.cumsum(i, axis=1), b.cumprod(i, axis=-1))
    m = _compile_once(b.module)
    ops = [node.op for fn in m.module.functions.values() for node in fn.nodes]
    assert "reduce_prod" in ops and ops.count("pad") >= 4, "not summed in blocks"
    rng = np.random.default_rng(4)
    eps = np.finfo(np.float32).eps
    for shp in [(1, 1), (2, 257), (3, 1000), (1, 40000)]:
        xs = rng.standard_normal(shp + (2,)).astype(np.float32)
        xp = (1 + 0.001 * xs).astype(np.float32)  # products that stay finite over 40000 terms
        if shp[1] > 300:
            xs[0, 250, 0], xs[0, 260, 1], xs[-1, 280, 1] = np.nan, np.inf, -np.inf
            xp[0, 100, 0], xp[0, 500, 1], xp[-1, 600, 0] = 0.0, np.inf, np.nan
        ii = rng.integers(-5, 6, size=shp).astype(np.int32)
        got = m(np.ascontiguousarray(np.concatenate([xs[..., :1], xp[..., 1:]], -1)), ii)
        want = reference.run(b.module, np.ascontiguousarray(np.concatenate([xs[..., :1], xp[..., 1:]], -1)), ii)
        xin = np.concatenate([xs[..., :1], xp[..., 1:]], -1).astype(np.float64)
        for k, bound in ((0, 64 * eps * np.cumsum(np.abs(np.nan_to_num(xin)), axis=1)),
                         (1, 64 * eps * np.abs(np.nan_to_num(want[1].astype(np.float64), posinf=0, neginf=0))
                          * np.arange(1, shp[1] + 1)[None, :, None])):
            g, w = got[k].astype(np.float64), want[k].astype(np.float64)
            assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(np.isinf(g), np.isinf(w)), (k, shp)
            fin = np.isfinite(w)
            assert np.all(np.abs(g - w)[fin] <= bound[fin] + 1e-30), (k, shp, np.max(np.abs(g - w)[fin]))
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_array_equal(got[3], want[3])


def test_group_norm_native_matches_reference():
    b = Builder()
    n, t = b.sym("n"), b.sym("t")
    x = b.param("x", tensor("f32", n, 8, t))
    w = b.constant(np.linspace(0.5, 2, 8).astype(np.float32))
    bias = b.constant(np.linspace(-1, 1, 8).astype(np.float32))
    b.ret(b.group_norm(x, w, bias, groups=4, eps=1e-5), b.group_norm(b.reshape(x, shape=(n, 8, 1, t)), groups=8))
    m = _compile_once(b.module)
    rng = np.random.default_rng(1)
    for shp in [(1, 1), (2, 5), (3, 64), (1, 1001)]:
        xs = (rng.standard_normal((shp[0], 8, shp[1])) * 3 + 1).astype(np.float32)
        for g, r in zip(m(xs), reference.run(b.module, xs)):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_group_norm_with_a_symbolic_channel_count_runs_natively():
    """C a symbol (found by the fuzzer: it reached code generation undecomposed); a C that
    groups does not divide is an input error, as torch raises."""
    b = Builder()
    n, c = b.sym("n", 0, None), b.sym("c")
    x = b.param("x", tensor("f32", n, c, 3))
    b.ret(b.group_norm(x, groups=1), b.group_norm(x, groups=2, eps=1e-3))
    m = _compile_once(b.module)
    rng = np.random.default_rng(2)
    for shp in [(1, 2), (3, 6), (0, 4), (2, 10)]:
        xs = rng.standard_normal(shp + (3,)).astype(np.float32)
        for g, r in zip(m(xs), reference.run(b.module, xs)):
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="c // 2"):
        m(np.zeros((2, 3, 3), np.float32))


def test_topk_over_a_dim_expression_runs_natively_and_checks_k():
    """k <= n // 2 cannot be a symbol's range: it is checked as a constraint on every call
    (found by the fuzzer: the topk stayed undecomposed and crashed code generation)."""
    b = Builder()
    n = b.sym("n", 1, 100)
    x = b.param("x", tensor("f32", 2, n))
    b.ret(*b.topk(b.slice(x, axis=1, start=1, end=2 ** 62, step=2), k=3, largest=False))
    m = _compile_once(b.module)
    rng = np.random.default_rng(3)
    for k in (6, 7, 31):
        xs = rng.integers(-2, 3, size=(2, k)).astype(np.float32)  # ties
        for g, w in zip(m(xs), reference.run(b.module, xs)):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(InputError, match=r"min\(\(n // 2\), 3\) == 3"):
        m(np.zeros((2, 5), np.float32))


def test_integer_and_float64_matmul_run_natively_and_exactly():
    b = Builder()
    n, k = b.sym("n"), b.sym("k")
    a = b.param("a", tensor("i64", n, k))
    c = b.param("c", tensor("i32", 2, k, 3))
    x = b.param("x", tensor("f64", n, k))
    w = b.constant(np.arange(4 * 7, dtype=np.float64).reshape(4, 7) - 9)
    b.ret(b.matmul(a, b.cast(c, dtype="i64")), b.matmul(b.cast(a, dtype="i32"), c),
          b.add(b.matmul(x, b.permute(x, perm=(1, 0))), b.constant(np.float64(1))),
          b.linear(b.param("z", tensor("f64", n, 7)), w))
    m = _compile_once(b.module)
    rng = np.random.default_rng(2)
    for nv, kv in [(1, 1), (3, 5), (17, 33)]:
        ins = [rng.integers(-100, 100, (nv, kv)), rng.integers(-100, 100, (2, kv, 3)).astype(np.int32),
               rng.integers(-9, 9, (nv, kv)).astype(np.float64), rng.integers(-9, 9, (nv, 7)).astype(np.float64)]
        for g, r in zip(m(*ins), reference.run(b.module, *ins)):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_array_equal(g, r)


def test_topk_of_a_sum_computed_in_the_same_kernel():
    """topk compares a value with itself: the stitch kernel computed the mean once per lane
    (float accumulator) and once per row (double), ties broke, and the index summed to 78 for a
    row of 13 (fuzz seed 2622). A vector loop's scalar remainder now computes a reduction that
    varies along it as the vector lanes do (in double), so ties break by position; the values
    are the reference's within float32 rounding (the mean is taken from the row's first element)."""
    b = Builder()
    s = b.sym("s", 1, 64)
    x = b.param("x", tensor("f32", 16, 2, s, 4))
    b.ret(*b.topk(b.reduce_mean(x, axes=(-1,), keepdims=False), k=2, axis=2))
    m = _compile_once(b.module)
    rng = np.random.default_rng(0)
    for rows in (2, 13, 40):
        xs = (rng.standard_normal((16, 2, 1, 4)) * 300).astype(np.float32).repeat(rows, axis=2)  # all ties
        (values, idx), (ref_values, ref_idx) = m(xs), reference.run(b.module, xs)
        np.testing.assert_array_equal(idx, ref_idx)
        # a float32 mean of 4 values: error within a few ulp of the largest |x| (cancellation)
        np.testing.assert_allclose(values, ref_values, rtol=0, atol=4 * 2.0**-24 * np.abs(xs).max())
        assert np.array_equal(values[..., 0], values[..., 1])  # the tie: one value, computed twice
