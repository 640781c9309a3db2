"""The oneDNN helper with weights read at each call (plug-in mode's live weights): braze_matmul_w
(the plain weight as it is, its own small-M kernel), braze_conv2d_w (a re-laid-out copy checked by
a fingerprint of the weight's bytes at every call) and braze_fingerprint, against numpy / torch."""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest

from braze.codegen.isa import host_isa
from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

from test_onednn import (CONV_CASES, ERRLEN, SMALL_M_ACTS, _close, _conv_ref, _epilogue, _err, _limit,  # noqa: E402
                         _p, _small_m, _stats)


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


def _matmul_w(lib, A, W, transposed, b=None, r=None, act=0, out=None):
    M, K = A.shape
    N = W.shape[0] if transposed else W.shape[1]
    out = np.full((M, N), np.nan, np.float32) if out is None else out
    err = _err()
    rc = lib.braze_matmul_w(M, N, K, _p(A), _p(W), transposed, _p(b), _p(r), act, _p(out), err, ERRLEN)
    assert rc == 0, err.value
    return out


def _want(A, W, transposed, b, r, act):
    x = A.astype(np.float64) @ (W.T if transposed else W).astype(np.float64)
    return _epilogue(x if b is None else x + b, act, r)


@pytest.mark.parametrize("transposed", [1, 0])
@pytest.mark.parametrize("N,K", [(37, 53), (768, 768), (5, 3), (130, 70), (4, 16), (200, 200)])
def test_matmul_w(lib, N, K, transposed):
    """Every M from the small-M kernel's row tiles to oneDNN's primitives, every fused epilogue."""
    rng = np.random.default_rng(N * K + transposed)
    W = rng.standard_normal((N, K) if transposed else (K, N), dtype=np.float32)
    for M in (1, 2, 5, 6, 7, 13, 48, 49, 100):
        for act in (0, 1, 2, 4, 0x101, 0x102) if M in (7, 49) else (0, 0x102):
            A = rng.standard_normal((M, K), dtype=np.float32)
            b = rng.standard_normal(N, dtype=np.float32)
            r = rng.standard_normal((M, N), dtype=np.float32)
            _close(_matmul_w(lib, A, W, transposed, b, r, act), _want(A, W, transposed, b, r, act))
    A = rng.standard_normal((3, K), dtype=np.float32)
    _close(_matmul_w(lib, A, W, transposed), _want(A, W, transposed, None, None, 0))


def test_matmul_w_reads_the_weight_at_every_call(lib):
    rng = np.random.default_rng(1)
    W = rng.standard_normal((64, 32), dtype=np.float32)
    for M in (3, 200):
        A = rng.standard_normal((M, 32), dtype=np.float32)
        before = _matmul_w(lib, A, W, 1)
        W *= -2  # in place, at the same address
        _close(_matmul_w(lib, A, W, 1), -2 * before)
        W /= -2


@pytest.mark.parametrize("transposed", [1, 0])
def test_matmul_w_residual_aliases_output(lib, transposed):
    rng = np.random.default_rng(2)
    W = rng.standard_normal((40, 24) if transposed else (24, 40), dtype=np.float32)
    for M in (5, 90):
        A = rng.standard_normal((M, 24), dtype=np.float32)
        r = rng.standard_normal((M, 40), dtype=np.float32)
        want = _want(A, W, transposed, None, r, 2)
        out = r.copy()
        _close(_matmul_w(lib, A, W, transposed, r=out, act=2, out=out), want)


@pytest.mark.parametrize("transposed", [1, 0])
def test_matmul_w_small_m_kernel_creates_no_primitive(lib, transposed):
    """M up to the limit runs braze's plain-weight kernels, with every activation they fuse and no
    oneDNN primitive: both layouts up to M = 48 on AVX-512 builds, the [N,K] one up to M = 20 on
    AVX2 builds (braze_dnnl_smallm_avx2.c)."""
    from braze.codegen.isa import host_isa
    features = host_isa().features
    rng = np.random.default_rng(3)
    W = rng.standard_normal((96, 80) if transposed else (80, 130), dtype=np.float32)
    for M in (1, 6, 17, 20, 21, 48):
        c0 = sum(_stats(lib))  # primitives made or found in the cache
        for act in SMALL_M_ACTS:
            A = rng.standard_normal((M, 80), dtype=np.float32)
            r = rng.standard_normal((M, W.shape[0] if transposed else 130), dtype=np.float32)
            _close(_matmul_w(lib, A, W, transposed, r=r, act=act), _want(A, W, transposed, None, r, act))
        made = sum(_stats(lib)) - c0
        if "avx512f" in features:
            own = True
        elif "avx2" in features and "fma" in features:
            own = bool(transposed) and M <= 20
        else:
            own = False
        assert (made == 0) == own, f"M={M}: {made} primitives (the small-M kernel should {'' if own else 'not '}run)"


def test_matmul_w_special_values_match_onednn(lib):
    """NaN and infinities give the same values below and above the small-M limit (relu, which
    offload never fuses, keeps NaN where oneDNN's gives 0)."""
    W = np.ones((16, 16), np.float32)
    A = np.ones((4, 16), np.float32)
    A[0, 0], A[1, 0], A[2, 0] = np.nan, np.inf, -np.inf
    # the small-M kernel (AVX-512 builds) keeps relu's NaN; oneDNN's relu, which runs elsewhere, gives 0
    relu_nan = np.nan if "avx512f" in host_isa().features else 0.0
    np.testing.assert_array_equal(_matmul_w(lib, A, W, 1, act=1)[:, 0], [relu_nan, np.inf, 0.0, 16.0])
    for act, transposed in ((0, 1), (2, 1), (3, 1), (4, 1), (3, 0), (2, 0)):
        small = _matmul_w(lib, A, W, transposed, act=act)
        with _small_m(lib, 0):
            dnn = _matmul_w(lib, A, W, transposed, act=act)
        np.testing.assert_array_equal(np.isnan(small), np.isnan(dnn), err_msg=f"act {act}")
        np.testing.assert_allclose(small, dnn, rtol=1e-6, equal_nan=True)


def test_matmul_w_from_many_threads_is_deterministic(lib):
    from braze.testing import run_threads
    rng = np.random.default_rng(4)
    Ws = [rng.standard_normal((256, 128), dtype=np.float32) for _ in range(2)]
    As = {M: rng.standard_normal((M, 128), dtype=np.float32) for M in (1, 16, 47, 130)}
    alone = {(w, M): _matmul_w(lib, A, Ws[w], 1, act=2) for w in range(2) for M, A in As.items()}

    def work(t):
        for i, (w, M) in enumerate(list(alone) * 2):
            if (i + t) % 3:
                assert np.array_equal(_matmul_w(lib, As[M], Ws[w], 1, act=2), alone[(w, M)])
    assert run_threads(work, 6) == []


def _geometry(lib, case, layout):
    N, IC, OC, H, W, k, s, p, d, g = case
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    err = _err()
    P = lib.braze_conv_geometry(OC, IC, k, k, g, s, s, pt, pl, pb, pr, d, d, layout, err, ERRLEN)
    assert P, err.value
    return P


def _conv_w(lib, P, case, layout, X, Wt, b=None, act=0):
    torch = pytest.importorskip("torch")
    N, IC, OC, H, W, k, s, p, d, g = case
    ref = _epilogue(_conv_ref(torch, X, Wt, b, s, p, d, g), act, None)
    to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout else (lambda a: a)
    Xl = to(X)
    out = np.full(to(ref).shape, np.nan, np.float32)
    err = _err()
    rc = lib.braze_conv2d_w(X.shape[0], X.shape[2], X.shape[3], _p(Xl), P, _p(Wt), _p(b), None, act,
                            ref.shape[2], ref.shape[3], _p(out), err, ERRLEN)
    assert rc == 0, err.value
    return out, to(ref)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: "x".join(map(str, c[:6])))
@pytest.mark.parametrize("layout", [0, 1], ids=["nchw", "nhwc"])
def test_conv2d_w_reads_every_change_of_the_weight(lib, case, layout):
    """The re-laid-out copy serves while the weight's bytes are the same, and never after."""
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(H * W + OC + layout)
    X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
    Wt = rng.standard_normal((OC, IC // g, k, k), dtype=np.float32)
    b = rng.standard_normal(OC, dtype=np.float32)
    P = _geometry(lib, case, layout)
    try:
        for _ in range(2):
            _close(*_conv_w(lib, P, case, layout, X, Wt, b, act=2))
        Wt *= -0.5  # the whole weight, in place
        _close(*_conv_w(lib, P, case, layout, X, Wt, b, act=2))
        Wt.reshape(-1)[Wt.size // 2] += 3.0  # one element
        _close(*_conv_w(lib, P, case, layout, X, Wt, b, act=2))
        X2 = rng.standard_normal((N + 1, IC, H + 2, W + 1), dtype=np.float32)  # another shape
        _close(*_conv_w(lib, P, case, layout, X2, Wt, b))
    finally:
        lib.braze_free_packed_conv(P)


# NHWC convs of few output pixels (N x OH x OW <= 48 by default) that run as GEMMs
SMALL_CONVS = [(1, 24, 40, 5, 3, 1, 2, 0, 1, 1), (1, 8, 24, 6, 6, 3, 1, 2, 2, 1), (2, 16, 8, 3, 4, 1, 1, 0, 1, 1),
               (1, 5, 7, 4, 4, 3, 1, (0, 1, 1, 0), 1, 1)]


@pytest.mark.parametrize("limit", [None, 1 << 20], ids=["default", "every-conv"])
def test_convs_as_gemms_on_the_plain_weight(lib, limit):
    """An NHWC conv with few output pixels reads its weight in place, as a GEMM over gathered
    columns (no copy to check by fingerprint), with every epilogue, the residual aliasing the
    output included. With the limit raised, every ungrouped case of CONV_CASES runs so (oneDNN's
    plain matmul beyond 48 rows); at the default limit, on AVX-512, the small convs create no
    primitive at all (braze's small-M kernel)."""
    torch = pytest.importorskip("torch")
    from braze.codegen.isa import host_isa
    rng = np.random.default_rng(8)
    cases = SMALL_CONVS + ([c for c in CONV_CASES if c[9] == 1] if limit else [])
    created = 0
    with _limit(lib, "conv_gemm_m", limit or lib.braze_dnnl_conv_gemm_m()):
        for case in cases:
            N, IC, OC, H, W, k, s, p, d, g = case
            X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
            Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
            Wt = rng.standard_normal((OC, IC, k, k), dtype=np.float32)
            b = rng.standard_normal(OC, dtype=np.float32)
            P = _geometry(lib, case, 1)
            try:
                for act in (0, 2, 0x102):
                    ref = _conv_ref(torch, X, Wt, b, s, p, d, g).transpose(0, 2, 3, 1)
                    assert case not in SMALL_CONVS or ref.shape[0] * ref.shape[1] * ref.shape[2] <= 48
                    r = rng.standard_normal(ref.shape, dtype=np.float32)
                    out = r.copy()  # the residual is the output
                    err = _err()
                    c0 = _stats(lib)[0]
                    rc = lib.braze_conv2d_w(N, H, W, _p(Xl), P, _p(Wt), _p(b), _p(out), act, ref.shape[1],
                                            ref.shape[2], _p(out), err, ERRLEN)
                    assert rc == 0, err.value
                    created += _stats(lib)[0] - c0
                    _close(out, _epilogue(ref, act, r))
            finally:
                lib.braze_free_packed_conv(P)
    if not limit and "avx512f" in host_isa().features:
        assert created == 0, f"{created} primitives for convs of at most 48 pixels"


@pytest.mark.parametrize("case", [CONV_CASES[0], SMALL_CONVS[1]], ids=["cached-copy", "gemm"])
def test_conv2d_w_many_weight_sets_and_threads(lib, case):
    """Six weights through one geometry (more than it keeps copies of), alternating, from 4
    threads at once: each result has the bits of a call alone."""
    from braze.testing import run_threads
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
    Ws = [rng.standard_normal((OC, IC, k, k), dtype=np.float32) for _ in range(6)]
    P = _geometry(lib, case, 1)
    try:
        alone = []
        for Wt in Ws:
            out, ref = _conv_w(lib, P, case, 1, X, Wt)
            _close(out, ref)
            alone.append(out)

        def work(t):
            for i in range(18):
                j = (t * 7 + i) % len(Ws)
                assert np.array_equal(_conv_w(lib, P, case, 1, X, Ws[j])[0], alone[j]), (t, i, j)
        assert run_threads(work, 4) == []
    finally:
        lib.braze_free_packed_conv(P)


def test_conv2d_w_and_packed_conv_refuse_each_other(lib):
    case = CONV_CASES[0]
    N, IC, OC, H, W, k, s, p, d, g = case
    Wt = np.ones((OC, IC, k, k), np.float32)
    X = np.ones((N, IC, H, W), np.float32)
    out = np.empty((N, OC, H, W), np.float32)
    err = _err()
    P = _geometry(lib, case, 0)
    packed = lib.braze_pack_conv_weights(_p(Wt), OC, IC, k, k, g, s, s, p, p, p, p, d, d, 0, err, ERRLEN)
    try:
        assert lib.braze_conv2d(N, H, W, _p(X), P, None, None, 0, H, W, _p(out), err, ERRLEN) != 0
        assert b"takes run-time weights (call braze_conv2d_w)" in err.value
        assert lib.braze_conv2d_w(N, H, W, _p(X), packed, _p(Wt), None, None, 0, H, W, _p(out), err, ERRLEN) != 0
        assert b"packed with constant weights" in err.value
        assert lib.braze_conv2d_w(N, H, W, _p(X), P, None, None, None, 0, H, W, _p(out), err, ERRLEN) != 0
        assert b"the weight is NULL" in err.value
    finally:
        lib.braze_free_packed_conv(P)
        lib.braze_free_packed_conv(packed)


def test_fingerprint(lib):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1 << 20) + 3, dtype=np.float32)  # several chunks and a ragged tail
    f = lib.braze_fingerprint(_p(a), a.nbytes)
    assert f == lib.braze_fingerprint(_p(a), a.nbytes)
    shifted = np.empty(a.size + 1, np.float32)[1:]  # the same bytes at another alignment
    shifted[:] = a
    assert lib.braze_fingerprint(_p(shifted), a.nbytes) == f
    for change in (lambda b: b.__setitem__(123457, np.nextafter(b[123457], np.inf)),  # one ulp
                   lambda b: b.__setitem__(slice(None), b[::-1].copy()),  # the same values, reversed
                   lambda b: b.__setitem__([10, 20], b[[20, 10]]),  # two swapped
                   lambda b: b.__setitem__(-1, -b[-1])):  # the tail
        b = a.copy()
        change(b)
        assert lib.braze_fingerprint(_p(b), b.nbytes) != f
    assert lib.braze_fingerprint(_p(a), a.nbytes - 4) != f  # the length counts
    assert lib.braze_fingerprint(None, 0) == lib.braze_fingerprint(_p(a), 0)


@pytest.mark.parametrize("transposed", [1, 0])
def test_live_weights_with_rows_a_multiple_of_4_kb(lib, transposed):
    """A live weight with rows 4 KB apart runs from a padded copy from M = 48 on AVX2 builds (and
    as it is elsewhere): the same results below and above that M, with the residual in C, and the
    weight changed between calls is read again."""
    rng = np.random.default_rng(7 + transposed)
    N, K = (96, 1024) if transposed else (1024, 96)
    W = rng.standard_normal((N, K) if transposed else (K, N), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    for M in (1, 47, 48, 130):
        A = rng.standard_normal((M, K), dtype=np.float32)
        r = rng.standard_normal((M, N), dtype=np.float32)
        out = r.copy()
        _matmul_w(lib, A, W, transposed, b=b, r=out, act=0x101, out=out)  # relu(A W + b + C)
        _close(out, _want(A, W, transposed, b, r, 0x101))
        W *= -1  # the next call sees the new values


def _fingerprint_ref(data: bytes) -> int:
    """braze_fingerprint in NumPy (uint64 arithmetic wraps as C's does): the SIMD paths must give
    the portable scheme's value, whatever the ISA."""
    M64 = (1 << 64) - 1

    def mix(h):
        h ^= h >> 30
        h = (h * 0xBF58476D1CE4E5B9) & M64
        h ^= h >> 27
        h = (h * 0x94D049BB133111EB) & M64
        return h ^ (h >> 31)

    s, keys = 0x243F6A8885A308D3, []
    for _ in range(17 * 8):
        s = (s + 0x9E3779B185EBCA87) & M64
        keys.append(mix(s))
    keys = np.array(keys, np.uint64).reshape(17, 8)
    lo32, prime = np.uint64(0xFFFFFFFF), np.uint64(0x9E3779B1)

    def chunk(b):
        n = len(b)
        acc = np.arange(1, 9, dtype=np.uint64)
        padded = np.frombuffer(b + bytes(-n % 64), np.uint64).reshape(-1, 8)
        with np.errstate(over="ignore"):
            for start in range(0, len(padded), 16):
                for i, x in enumerate(padded[start:start + 16]):
                    dk = x ^ keys[i]
                    acc = acc + (dk & lo32) * (dk >> np.uint64(32)) + np.roll(x, 4)
                a = acc ^ (acc >> np.uint64(47)) ^ keys[16]
                acc = (a & lo32) * prime + (((a >> np.uint64(32)) * prime) << np.uint64(32))
        h = mix(n)
        for v in acc.tolist():
            h = mix(h ^ v)
        return h

    size = 256 * 1024
    if len(data) <= size:
        return mix(chunk(data) ^ 0x9E3779B185EBCA87)
    h = 0x9E3779B185EBCA87
    for c in range(0, len(data), size):
        h = mix(h ^ chunk(data[c:c + size]))
    return h


@pytest.mark.parametrize("nbytes", [0, 5, 64, 1000, 1024 + 7, 256 * 1024, 256 * 1024 * 2 + 68])
def test_fingerprint_matches_reference(lib, nbytes):
    a = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    assert lib.braze_fingerprint(_p(a), nbytes) == _fingerprint_ref(a.tobytes())


@pytest.mark.parametrize("M", [3, 200])  # the small-M kernel's rows and oneDNN's
def test_an_eager_relu_before_a_residual_is_refused_with_what_to_do(lib, M):
    """BRAZE_ACT_RELU_EAGER / RELU6_EAGER run after the product (braze_dnnl.h), so before a
    residual add they are an error that says so; after it (BRAZE_ACT_AFTER_RESIDUAL) they run."""
    rng = np.random.default_rng(0)
    A, W = rng.standard_normal((M, 16), dtype=np.float32), rng.standard_normal((8, 16), dtype=np.float32)
    r, out = rng.standard_normal((M, 8), dtype=np.float32), np.empty((M, 8), np.float32)
    err = _err()
    for act in (7, 8):
        assert lib.braze_matmul_w(M, 8, 16, _p(A), _p(W), 1, None, _p(r), act, _p(out), err, ERRLEN) != 0
        assert b"cannot come before a residual add" in err.value and b"BRAZE_ACT_AFTER_RESIDUAL" in err.value
        assert lib.braze_matmul_w(M, 8, 16, _p(A), _p(W), 1, None, _p(r), act | 0x100, _p(out), err,
                                  ERRLEN) == 0, err.value
        want = np.maximum(A @ W.T + r, 0)
        np.testing.assert_allclose(out, np.minimum(want, 6) if act == 8 else want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [c for c in CONV_CASES if c[-1] == 1], ids=lambda c: "x".join(map(str, c[:6])))
@pytest.mark.parametrize("bias, residual, act", [(True, False, 0), (True, True, 0x107), (False, True, 0x107),
                                                 (True, False, 8), (True, True, 0)],
                         ids=["bias", "residual-relu", "no-bias", "relu6", "residual"])
def test_conv2d_ws_applies_a_per_channel_scale_then_the_rest(lib, case, bias, residual, act):
    """A batch norm on live weights (passes/layout.py): act(conv * scale + bias + residual) (the
    helper refuses an eager relu before a residual, as offload never asks for one), in oneDNN's epilogue or (the stem's 7x7 over 3 channels, whose
    primitive with these post-ops is oneDNN's reference kernel) in the helper's own pass; the
    residual in its own memory and in the output's. NaN from the input stays NaN through relu."""
    torch = pytest.importorskip("torch")
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(OC * H + act)
    X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
    X[0, 0, 1, 1] = np.nan
    Wt = rng.standard_normal((OC, IC, k, k), dtype=np.float32)
    scale, b = rng.uniform(0.5, 2, OC).astype(np.float32), rng.standard_normal(OC, dtype=np.float32)
    P = _geometry(lib, case, 1)
    try:
        conv = _conv_ref(torch, X, Wt, None, s, p, d, g).transpose(0, 2, 3, 1)  # NHWC
        Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
        r = rng.standard_normal(conv.shape).astype(np.float32) if residual else None
        y = conv * scale + (b if bias else 0)
        y = y + r if residual and act & 0x100 else y
        if act & 0xff:  # eager's relu or relu6: NaN kept
            y = np.where(y < 0, 0, np.where(y > 6, 6, y) if act & 0xff == 8 else y)
        want = y + r if residual and not act & 0x100 else y
        for in_place in (False, True) if residual else (False,):
            out = r.copy() if in_place else np.full(conv.shape, np.nan, np.float32)
            err = _err()
            rc = lib.braze_conv2d_ws(N, H, W, _p(Xl), P, _p(Wt),
                                     _p(scale), _p(b) if bias else None, _p(out if in_place else r), act,
                                     conv.shape[1], conv.shape[2], _p(out), err, ERRLEN)
            assert rc == 0, err.value
            assert np.array_equal(np.isnan(out), np.isnan(want)) and np.isnan(out).any()
            ok = ~np.isnan(want)
            _close(out[ok], want[ok])
    finally:
        lib.braze_free_packed_conv(P)


def test_conv2d_ws_refuses_what_it_cannot_apply(lib):
    case = CONV_CASES[0]
    P = _geometry(lib, case, 0)  # NCHW
    try:
        X, Wt = np.zeros((1, 3, 17, 19), np.float32), np.zeros((8, 3, 3, 3), np.float32)
        out, scale = np.zeros((1, 8, 17, 19), np.float32), np.ones(8, np.float32)
        err = _err()
        assert lib.braze_conv2d_ws(1, 17, 19, _p(X), P, _p(Wt), _p(scale), None, None, 0, 17, 19, _p(out), err,
                                   ERRLEN) == 1
        assert "float32 NHWC" in err.value.decode()
    finally:
        lib.braze_free_packed_conv(P)


@pytest.mark.parametrize("case", [c for c in CONV_CASES if c[-1] == 1], ids=lambda c: "x".join(map(str, c[:6])))
def test_conv2d_w_reads_an_ohwi_weight_where_it_lies(lib, case):
    """Layout 3 (NHWC, the weight [OC, KH, KW, IC] in memory: a channels-last OIHW tensor's), also
    after the weight changes in place; a grouped one is refused."""
    torch = pytest.importorskip("torch")
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(OC * W)
    X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
    Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
    Wt = rng.standard_normal((OC, IC, k, k), dtype=np.float32)
    Wo = np.ascontiguousarray(Wt.transpose(0, 2, 3, 1))  # OHWI
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    err = _err()
    P = lib.braze_conv_geometry(OC, IC, k, k, 1, s, s, pt, pl, pb, pr, d, d, 3, err, ERRLEN)
    assert P, err.value
    try:
        for scale in (1.0, -2.0):
            Wo *= scale
            ref = _conv_ref(torch, X, Wo.transpose(0, 3, 1, 2).copy(), None, s, p, d, g).transpose(0, 2, 3, 1)
            out = np.full(ref.shape, np.nan, np.float32)
            rc = lib.braze_conv2d_w(N, H, W, _p(Xl), P, _p(Wo), None, None, 0, ref.shape[1], ref.shape[2], _p(out),
                                    err, ERRLEN)
            assert rc == 0, err.value
            _close(out, ref)
    finally:
        lib.braze_free_packed_conv(P)
    assert not lib.braze_conv_geometry(8, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3, err, ERRLEN)
    assert "invalid conv arguments" in err.value.decode()
