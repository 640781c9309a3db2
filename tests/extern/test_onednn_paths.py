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
    pb = lib.braze_pack_b_err(w.ctypes.data, n, k, 1, err, len(err))
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
