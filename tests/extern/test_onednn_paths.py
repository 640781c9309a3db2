"""braze_matmul's kernel paths (BRAZE_PATH in act: the dispatch tables of braze/tune) and the
tuner's timing loop, against float64 NumPy, at M on both sides of the default rule's switch."""

from __future__ import annotations

import ctypes as C
import math

import numpy as np
import pytest

from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

PATHS = onednn.GEMM_PATHS


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


def _gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


@pytest.mark.parametrize("n, k", [(96, 64), (100, 37)])  # the small-M kernel's layout, and a padded one
@pytest.mark.parametrize("m", [1, 3, 49, 130])
@pytest.mark.parametrize("epilogue", ["bias", "bias+gelu+residual", "residual-in-place"])
def test_every_path_computes_the_product(lib, n, k, m, epilogue):
    rng = np.random.default_rng(m)
    err = C.create_string_buffer(512)
    w = rng.standard_normal((n, k), dtype=np.float32)
    a = rng.standard_normal((m, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    res = rng.standard_normal((m, n), dtype=np.float32)
    ref = a.astype(np.float64) @ w.T.astype(np.float64) + bias
    act = 0
    if epilogue == "bias+gelu+residual":
        act, ref = 2, _gelu(ref) + res
    elif epilogue == "residual-in-place":
        ref = ref + res
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))  # as a model packs its constants
    assert pb, err.value
    try:
        for name, code in PATHS.items():
            c = res.copy() if epilogue == "residual-in-place" else np.full((m, n), np.nan, np.float32)
            r = None if epilogue == "bias" else c.ctypes.data if epilogue == "residual-in-place" else res.ctypes.data
            assert lib.braze_matmul_prepare(m, pb, 1, 0 if r is None else 2 if epilogue == "residual-in-place" else 1,
                                            act | (code << 20)) == 0
            assert lib.braze_matmul(m, n, k, a.ctypes.data, pb, bias.ctypes.data, r, act | (code << 20),
                                    c.ctypes.data, err, len(err)) == 0, err.value
            e = np.abs(c - ref).max() / np.abs(ref).max()
            assert e < 1e-5, f"{name}: {e:.1e}"
    finally:
        lib.braze_free_packed_b(pb)


def test_the_timing_loop_runs_the_calls_and_reports_bad_arguments(lib):
    rng = np.random.default_rng(0)
    err = C.create_string_buffer(512)
    w = rng.standard_normal((64, 32), dtype=np.float32)
    a = rng.standard_normal((5, 32), dtype=np.float32)
    c = np.zeros((5, 64), np.float32)
    pb = lib.braze_pack_b_err(w.ctypes.data, 64, 32, 1, err, len(err))
    try:
        bs = (C.c_void_p * 2)(pb, pb)
        ns = lib.braze_time_matmul(10, 5, 64, 32, a.ctypes.data, bs, 2, None, None, PATHS["smallm"] << 20,
                                   c.ctypes.data, err, len(err))
        assert ns > 0
        np.testing.assert_allclose(c, a @ w.T, rtol=1e-5, atol=1e-5)
        assert lib.braze_time_matmul(1, 5, 64, 32, a.ctypes.data, bs, 0, None, None, 0, c.ctypes.data, err,
                                     len(err)) == -1
        assert b"2 weights" not in err.value and b"0 weights" in err.value
        # a call that fails (K disagrees with the packed weight) stops the loop with its message
        assert lib.braze_time_matmul(3, 5, 64, 31, a.ctypes.data, bs, 2, None, None, 0, c.ctypes.data, err,
                                     len(err)) == -1
        assert b"K=31" in err.value
    finally:
        lib.braze_free_packed_b(pb)


def _created(lib) -> int:
    created, hits = C.c_int64(), C.c_int64()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    return created.value


def _silu(v):
    return v / (1 + np.exp(-v))


def _needs_avx2_helper():
    from braze.codegen.isa import host_isa
    if host_isa().name != "avx2":
        pytest.skip(f"the helper is built for {host_isa().name}: its small-M kernel reads the packed weight")


def _product_alone(lib, w, a, path="smallm"):
    """A @ w.T through braze_matmul on w packed as a model's constant, no epilogue: (its error
    against float64 over the largest value, whether a oneDNN primitive was made)."""
    err = C.create_string_buffer(512)
    (n, k), m = w.shape, a.shape[0]
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))
    assert pb, err.value
    try:
        c = np.empty((m, n), np.float32)
        before = _created(lib)
        assert lib.braze_matmul(m, n, k, a.ctypes.data, pb, None, None, PATHS[path] << 20, c.ctypes.data, err,
                                len(err)) == 0, err.value
        made = _created(lib) > before
    finally:
        lib.braze_free_packed_b(pb)
    want = a.astype(np.float64) @ w.T.astype(np.float64)
    return np.abs(c - want).max() / np.abs(want).max(), made


def test_avx2_small_m_kernels_read_the_kept_constant_and_its_panels(lib):
    """An AVX2 build's small-M kernels take a weight braze_pack_b_const packed from float32 [N, K]:
    up to M = 12 the dot products on the kept constant, from 13 to 127 braze's 16-column panels of
    it, with no oneDNN primitive; from M = 128, for a weight packed without keeping it, and for one
    whose K is over the long-K limit (4096: no panels), oneDNN runs. Each against float64 NumPy,
    every activation the kernels fuse, the residual in place among them."""
    _needs_avx2_helper()
    rng = np.random.default_rng(5)
    err = C.create_string_buffer(512)
    n, k = 75, 41  # N not a multiple of the 4-row blocks nor of the 16-column panels, K not of 8 lanes
    w = rng.standard_normal((n, k), dtype=np.float32)
    kept = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))
    plain = lib.braze_pack_b_err(w.ctypes.data, n, k, 1, err, len(err))
    kn = lib.braze_pack_b_const(np.ascontiguousarray(w.T).ctypes.data, 0, 0, n, k, 0, err, len(err))
    assert kept and plain and kn, err.value
    try:
        assert lib.braze_packed_b_small_m_rows(kept) == k
        assert lib.braze_packed_b_small_m_rows(plain) == 0 and lib.braze_packed_b_small_m_rows(kn) == 0
        bias = rng.standard_normal(n, dtype=np.float32)
        for m in (1, 2, 5, 12, 13, 17, 48, 96, 127, 128):
            a = rng.standard_normal((m, k), dtype=np.float32)
            res = rng.standard_normal((m, n), dtype=np.float32)
            base = a.astype(np.float64) @ w.T.astype(np.float64) + bias
            cases = ((0, None, base), (1, None, np.maximum(base, 0)), (2, None, _gelu(base)), (4, None, _silu(base)),
                     (5, None, 1 / (1 + np.exp(-base))), (0x102, "in place", _gelu(base + res)),
                     (4, "apart", _silu(base) + res))  # 0x100: the activation after the residual
            for act, residual, want in cases:
                c = res.copy() if residual == "in place" else np.full((m, n), np.nan, np.float32)
                r = c.ctypes.data if residual == "in place" else res.ctypes.data if residual else None
                before = _created(lib)
                assert lib.braze_matmul(m, n, k, a.ctypes.data, kept, bias.ctypes.data, r, act | PATHS["smallm"] << 20,
                                        c.ctypes.data, err, len(err)) == 0, err.value
                assert np.abs(c - want).max() / np.abs(want).max() < 1e-5, (m, act, residual)
                if m <= 127:
                    assert _created(lib) == before, f"M={m}: a oneDNN primitive was made"
            c = np.empty((m, n), np.float32)
            assert lib.braze_matmul(m, n, k, a.ctypes.data, kept, None, None, 0, c.ctypes.data, err, len(err)) == 0
            assert np.abs(c - (base - bias)).max() / np.abs(base - bias).max() < 1e-5
    finally:
        for pb in (kept, plain, kn):
            lib.braze_free_packed_b(pb)
    n, k, m = 20, 4097, 13  # over the long-K limit: oneDNN's, correct all the same
    e, made = _product_alone(lib, rng.standard_normal((n, k), dtype=np.float32),
                             rng.standard_normal((m, k), dtype=np.float32))
    assert made and e < 1e-5


@pytest.mark.parametrize("n, k", [(64, 16), (16, 64), (75, 13)])  # whole panels; one; a partial one
def test_avx2_panels_take_a_tiny_weight_at_every_m(lib, n, k):
    """A weight of at most 1024 elements (SP2_TINY_W) runs on the panels at every M, each thread a
    range of rows, with no oneDNN primitive: against float64 NumPy, the residual in place and apart,
    M not a multiple of the 6-row tiles."""
    _needs_avx2_helper()
    rng = np.random.default_rng(n + k)
    err = C.create_string_buffer(512)
    w = rng.standard_normal((n, k), dtype=np.float32)
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))
    assert pb, err.value
    bias = rng.standard_normal(n, dtype=np.float32)
    try:
        for m in (128, 1001, 4099):
            a = rng.standard_normal((m, k), dtype=np.float32)
            res = rng.standard_normal((m, n), dtype=np.float32)
            base = a.astype(np.float64) @ w.T.astype(np.float64) + bias
            for act, residual, want in ((0, None, base), (2, "in place", _gelu(base) + res),
                                        (0x104, "apart", _silu(base + res))):
                c = res.copy() if residual == "in place" else np.full((m, n), np.nan, np.float32)
                r = c.ctypes.data if residual == "in place" else res.ctypes.data if residual else None
                before = _created(lib)
                assert lib.braze_matmul(m, n, k, a.ctypes.data, pb, bias.ctypes.data, r, act | PATHS["smallm"] << 20,
                                        c.ctypes.data, err, len(err)) == 0, err.value
                assert _created(lib) == before, f"M={m}: a oneDNN primitive was made"
                assert np.abs(c - want).max() / np.abs(want).max() < 1e-5, (m, act, residual)
    finally:
        lib.braze_free_packed_b(pb)


def test_avx2_tiny_weight_limit_is_the_dispatch_rules(lib):
    """The helper's tiny-weight limit (SP2_TINY_W) and the AVX2 default rule's (products.py) are one
    number: a weight of that many elements runs the panels at the rule's last row, one with more
    falls to oneDNN above 127 rows (and not at 127)."""
    from braze.tune.products import AVX2_SMALL_M_MAX, AVX2_TINY_MAX_M, AVX2_TINY_WEIGHT
    _needs_avx2_helper()
    rng = np.random.default_rng(8)
    k = 16
    err = C.create_string_buffer(512)
    for n, m, made in ((AVX2_TINY_WEIGHT // k, AVX2_TINY_MAX_M, False), (AVX2_TINY_WEIGHT // k + 1, 128, True),
                       (AVX2_TINY_WEIGHT // k + 1, AVX2_SMALL_M_MAX, False)):
        w = rng.standard_normal((n, k), dtype=np.float32)
        e, got = _product_alone(lib, w, rng.standard_normal((m, k), dtype=np.float32))
        assert got == made and e < 1e-5, (n, m, got, e)
        # what the tuner asks before it times the kernel (measure.py): the same answer
        pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))
        assert pb, err.value
        try:
            assert lib.braze_packed_b_small_m_takes(pb, m, 0) == (not made), (n, m)
            assert lib.braze_packed_b_small_m_takes(pb, m, 6) == 0  # tanh: not in the panels' epilogue
        finally:
            lib.braze_free_packed_b(pb)


def test_the_small_m_kernels_activations_are_the_dispatch_rules(lib):
    """products.SMALLM_ACTS, the activations whose products the default rule gives the small-M
    kernels, are the ones the helper's kernels take (a default table never names a kernel that
    would run oneDNN's primitive instead)."""
    from braze.codegen.host_library import ACTIVATION_CODES
    from braze.tune.products import SMALLM_ACTS
    err = C.create_string_buffer(512)
    w = np.ones((64, 32), np.float32)
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, 64, 32, 1, err, len(err))
    assert pb, err.value
    try:
        if not lib.braze_packed_b_small_m_rows(pb):
            pytest.skip("this helper has no small-M kernel (AVX-512 or AVX2 with FMA)")
        for code in (0, *ACTIVATION_CODES.values()):
            assert bool(lib.braze_packed_b_small_m_takes(pb, 8, code)) == (code in SMALLM_ACTS), code
    finally:
        lib.braze_free_packed_b(pb)


def test_the_rows_that_run_onednns_run_time_m_primitive_are_the_dispatch_rules():
    """products.GEMV_ROWS, up to which a table names ``dnnl_rt`` where the small-M kernels cannot
    apply the activation, is the helper's SMALL_M: up to it, ``smallm`` ran that primitive."""
    import re

    from braze.extern.onednn import _CSRC
    from braze.tune.products import GEMV_ROWS
    src = (_CSRC / "braze_dnnl_matmul.c").read_text()
    assert int(re.search(r"#define SMALL_M (\d+)", src).group(1)) == GEMV_ROWS


@pytest.mark.parametrize("n, k, ms", [(768, 768, [1, 4, 12, 13, 31, 127, 128]), (64, 16, [127, 128, 1001])])
def test_avx2_kept_constant_from_many_threads_is_deterministic(lib, n, k, ms):
    """8 threads at once on one kept constant, M on both sides of each kernel's limit (12: the dot
    products, 127: the panels; a tiny weight's panels by rows above): each result has the bits of
    the same call alone."""
    from braze.testing import run_threads
    _needs_avx2_helper()
    rng = np.random.default_rng(6)
    err = C.create_string_buffer(512)
    w = rng.standard_normal((n, k), dtype=np.float32)
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, n, k, 1, err, len(err))
    assert pb, err.value
    bias = rng.standard_normal(n, dtype=np.float32)
    xs = {m: rng.standard_normal((m, k), dtype=np.float32) for m in ms}

    def call(m):
        out = np.empty((m, n), np.float32)
        e = C.create_string_buffer(512)
        assert lib.braze_matmul(m, n, k, xs[m].ctypes.data, pb, bias.ctypes.data, None,
                                2 | (PATHS["smallm"] << 20), out.ctypes.data, e, len(e)) == 0, e.value
        return out

    try:
        alone = {m: call(m) for m in ms}
        for m in ms:
            want = _gelu(xs[m].astype(np.float64) @ w.T.astype(np.float64) + bias)
            assert np.abs(alone[m] - want).max() / np.abs(want).max() < 1e-5, m

        def work(t):
            for i in range(20):
                m = ms[(t + i) % len(ms)]
                np.testing.assert_array_equal(call(m), alone[m])
        assert run_threads(work, 8) == []
    finally:
        lib.braze_free_packed_b(pb)


@pytest.mark.parametrize("m", [4, 16, 200])  # the dot products, the panels, and a tiny weight's rows
def test_avx2_kept_constant_special_values_match_onednn(lib, m):
    """NaN and infinite products give oneDNN's values through either AVX2 kernel, every activation
    (relu(NaN) is 0 in both), so a model's special values do not change across a dispatch limit."""
    _needs_avx2_helper()
    err = C.create_string_buffer(512)
    w = np.ones((16, 16), np.float32)
    a = np.ones((m, 16), np.float32)
    a[0, 0], a[1, 0], a[2, 0] = np.nan, np.inf, -np.inf
    pb = lib.braze_pack_b_const(w.ctypes.data, 0, 0, 16, 16, 1, err, len(err))
    assert pb, err.value

    def run(act, path):
        out = np.empty((m, 16), np.float32)
        assert lib.braze_matmul(m, 16, 16, a.ctypes.data, pb, None, None, act | PATHS[path] << 20, out.ctypes.data,
                                err, len(err)) == 0, err.value
        return out
    try:
        for act in (0, 1, 2, 3, 4, 5):
            small, dnn = run(act, "smallm"), run(act, "dnnl")
            np.testing.assert_array_equal(np.isnan(small), np.isnan(dnn), err_msg=f"act {act}")
            np.testing.assert_allclose(small, dnn, rtol=1e-6, equal_nan=True)
        np.testing.assert_array_equal(run(1, "smallm")[:4, 0], [0.0, np.inf, 0.0, 16.0])
    finally:
        lib.braze_free_packed_b(pb)
