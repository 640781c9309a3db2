"""Batched matmul of two activations (attention's products) in the oneDNN C helper, against
float64 NumPy: transposes, broadcast batch dims, empty results, and the small-M kernels that take
up to 16 rows with no primitive (a new sequence length at decode creates none)."""

from __future__ import annotations

import numpy as np
import pytest

from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

from test_onednn import ERRLEN, _close, _err, _p, _small_m, _stats  # noqa: E402


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (3, 7, 5, 9), (12, 16, 16, 64), (2, 33, 17, 64)])
def test_batch_matmul(lib, ta, tb, shape):
    Bt, M, N, K = shape
    rng = np.random.default_rng(sum(shape) + 2 * ta + tb)
    A = rng.standard_normal((Bt, K, M) if ta else (Bt, M, K), dtype=np.float32)
    Bm = rng.standard_normal((Bt, N, K) if tb else (Bt, K, N), dtype=np.float32)
    out = np.empty((Bt, M, N), np.float32)
    err = _err()
    alpha = 0.125
    rc = lib.braze_batch_matmul(Bt, M, N, K, _p(A), ta, _p(Bm), tb, alpha, _p(out), err, ERRLEN)
    assert rc == 0, err.value
    a = A.transpose(0, 2, 1) if ta else A
    bm = Bm.transpose(0, 2, 1) if tb else Bm
    _close(out, alpha * (a.astype(np.float64) @ bm.astype(np.float64)))


@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("ab,bb", [((2, 1), (1, 3)), ((1, 4), (5, 4)), ((3,), (1,)), ((1,), (1,)),
                                   ((2, 1, 3), (2, 4, 1))])
def test_batch_matmul_broadcasts_batch_dims(lib, ab, bb, tb):
    M, N, K = 5, 3, 7
    rng = np.random.default_rng(len(ab) + sum(ab) + 10 * sum(bb) + tb)
    A = rng.standard_normal((*ab, M, K), dtype=np.float32)
    Bm = rng.standard_normal((*bb, N, K) if tb else (*bb, K, N), dtype=np.float32)
    want = A.astype(np.float64) @ (np.swapaxes(Bm, -1, -2) if tb else Bm).astype(np.float64)
    out = np.empty(want.shape, np.float32)
    err = _err()
    a_b, b_b = np.array(ab, np.int64), np.array(bb, np.int64)
    rc = lib.braze_batch_matmul_bcast(len(ab), _p(a_b), _p(b_b), M, N, K, _p(A), 0, _p(Bm), tb, 1.0, _p(out),
                                      err, ERRLEN)
    assert rc == 0, err.value
    _close(out, want)
    three, two = np.full(len(ab), 3, np.int64), np.full(len(ab), 2, np.int64)  # 3 vs 2 does not broadcast
    assert lib.braze_batch_matmul_bcast(len(ab), _p(three), _p(two), M, N, K, _p(A), 0, _p(Bm), tb, 1.0,
                                        _p(out), err, ERRLEN) != 0
    assert b"each equal or 1 on one side" in err.value


@pytest.mark.parametrize("tb", [0, 1])
def test_small_m_batch_matmul_creates_nothing_at_a_new_length(lib, tb):
    """Attention at decode (q @ K^T: B transposed; p @ V: not), one query row per head, at a new
    length each call, broadcast heads, a scale, a length past SMALLM_LONG_K: the small-M kernels
    take every call, so no primitive is created; oneDNN's per-shape primitive (small-M limit 0)
    gives the same values to float32 rounding."""
    rng = np.random.default_rng(7 + tb)
    err = _err()
    heads = np.array([1, 4], np.int64), np.array([3, 4], np.int64)  # A's batch broadcasts over 3
    for L in (1, 5, 33, 130, 5000):
        M, (N, K) = 1, ((L, 16) if tb else (16, L))
        A = rng.standard_normal((1, 4, M, K), dtype=np.float32)
        Bm = rng.standard_normal((3, 4, N, K) if tb else (3, 4, K, N), dtype=np.float32)
        want = 0.25 * (A.astype(np.float64) @ (np.swapaxes(Bm, -1, -2) if tb else Bm).astype(np.float64))
        out = np.empty(want.shape, np.float32)
        before = _stats(lib)[0]
        rc = lib.braze_batch_matmul_bcast(2, _p(heads[0]), _p(heads[1]), M, N, K, _p(A), 0, _p(Bm), tb, 0.25,
                                          _p(out), err, ERRLEN)
        assert rc == 0, err.value
        assert _stats(lib)[0] == before, f"a primitive was created at L = {L}"
        _close(out, want)
        with _small_m(lib, 0):
            ref = np.empty_like(out)
            assert lib.braze_batch_matmul_bcast(2, _p(heads[0]), _p(heads[1]), M, N, K, _p(A), 0, _p(Bm), tb, 0.25,
                                                _p(ref), err, ERRLEN) == 0, err.value
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * np.sqrt(K))


@pytest.mark.parametrize("ab,bb,M,N,K", [((0,), (0,), 3, 3, 8), ((1, 0), (1, 1), 1, 7, 7), ((1,), (0,), 2, 2, 2),
                                         ((2,), (2,), 0, 4, 3), ((2,), (2,), 4, 0, 3)])
def test_batch_matmul_with_an_empty_result_writes_nothing(lib, ab, bb, M, N, K):
    err = _err()
    a_b, b_b = np.array(ab, np.int64), np.array(bb, np.int64)
    rc = lib.braze_batch_matmul_bcast(len(ab), _p(a_b), _p(b_b), M, N, K, None, 0, None, 0, 1.0, None, err, ERRLEN)
    assert rc == 0, err.value
