"""The oneDNN C helper (braze/extern/csrc) against numpy / torch, through ctypes.

``onednn.load_standalone()`` is the helper library models link (the same file when the
cache is the same), so in a process that has loaded a model it is the very same instance:
its engine, primitive cache, counters and runtime-M setting are process-wide. Tests here
restore what they change (``braze_dnnl_set_runtime_m``), free every weight they pack,
and read the cache counters as differences.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import math

import numpy as np
import pytest

from braze.errors import MissingDependencyError
from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

ERRLEN = 1024


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


def _err():
    return C.create_string_buffer(ERRLEN)


@contextlib.contextmanager
def _limit(lib, name: str, value: int):
    """The helper's process-wide limit braze_dnnl_<name> set to value, restored after."""
    before = getattr(lib, f"braze_dnnl_{name}")()
    getattr(lib, f"braze_dnnl_set_{name}")(value)
    try:
        yield
    finally:
        getattr(lib, f"braze_dnnl_set_{name}")(before)


def _small_m(lib, max_m: int):
    """braze_matmul's small-M limit set to max_m (0: oneDNN for every M)."""
    return _limit(lib, "small_m", max_m)


@pytest.fixture
def onednn_only(lib):
    """For tests of oneDNN's primitives and their cache: no call takes the small-M kernel."""
    with _small_m(lib, 0):
        yield


def _p(a):
    return None if a is None else a.ctypes.data


_erf = np.vectorize(math.erf, otypes=[np.float64])

ACTS = {
    0: lambda x: x,
    1: lambda x: np.maximum(x, 0),
    2: lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    3: lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    4: lambda x: x / (1 + np.exp(-x)),
    5: lambda x: 1 / (1 + np.exp(-x)),
    6: np.tanh,
}


def _epilogue(x, act, r):
    """act(x) + r, or act(x + r) with the after-residual flag (0x100)."""
    if act & 0x100:
        return ACTS[act & 0xff](x if r is None else x + r)
    x = ACTS[act](x)
    return x if r is None else x + r


def _close(got, want, rtol=1e-4):
    """float32 tolerance relative to the magnitude of the result."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale * 4)


def test_locate_and_runtime(lib):
    info = onednn.locate()
    assert info.library.exists() and (info.include_dir / "oneapi" / "dnnl" / "dnnl.h").exists()
    err = _err()
    assert lib.braze_dnnl_init(err, ERRLEN) == 0, err.value
    rt = lib.braze_dnnl_runtime().decode()
    assert rt.endswith(info.threading_runtime)


def test_missing_root_is_clear(monkeypatch):
    monkeypatch.setenv(onednn.ENV_ROOT, "/nonexistent/dnnl")
    with pytest.raises(MissingDependencyError) as ei:
        onednn.locate()
    assert "pip install onednn" in str(ei.value)


@pytest.mark.parametrize("M", [1, 3, 17, 128])
@pytest.mark.parametrize("act", list(ACTS) + [0x101, 0x103])
@pytest.mark.parametrize("bias,residual", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(lib, M, act, bias, residual):
    rng = np.random.default_rng(M * 100 + act)
    N, K = 37, 53  # odd
    W = rng.standard_normal((N, K), dtype=np.float32)
    A = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32) if bias else None
    r = rng.standard_normal((M, N), dtype=np.float32) if residual else None
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 1, err, ERRLEN)
    assert pb, err.value
    try:
        out = np.full((M, N), np.nan, np.float32)
        rc = lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(r), act, _p(out), err, ERRLEN)
        assert rc == 0, err.value
        x = A.astype(np.float64) @ W.T.astype(np.float64)
        if b is not None:
            x = x + b
        _close(out, _epilogue(x, act, r))
    finally:
        lib.braze_free_packed_b(pb)


def test_matmul_kn_layout_and_many_m(lib):
    """[K,N] weights; one packed weight reused for many M (primitive cache)."""
    rng = np.random.default_rng(0)
    K, N = 768, 3072
    W = rng.standard_normal((K, N), dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 0, err, ERRLEN)
    assert pb, err.value
    try:
        for M in (1, 8, 1, 77, 8, 512):
            A = rng.standard_normal((M, K), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            assert lib.braze_matmul(M, N, K, _p(A), pb, None, None, 0, _p(out), err, ERRLEN) == 0, err.value
            _close(out, A.astype(np.float64) @ W)
    finally:
        lib.braze_free_packed_b(pb)


def test_matmul_residual_aliases_output(lib):
    rng = np.random.default_rng(1)
    M, N, K = 5, 16, 8
    W = rng.standard_normal((N, K), dtype=np.float32)
    A = rng.standard_normal((M, K), dtype=np.float32)
    r = rng.standard_normal((M, N), dtype=np.float32)
    out = r.copy()
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 1, err, ERRLEN)
    try:
        assert lib.braze_matmul(M, N, K, _p(A), pb, None, _p(out), 0, _p(out), err, ERRLEN) == 0, err.value
        _close(out, A.astype(np.float64) @ W.T + r)
    finally:
        lib.braze_free_packed_b(pb)


def test_matmul_runtime_m_mode(lib, onednn_only):
    rng = np.random.default_rng(2)
    N, K = 64, 48
    W = rng.standard_normal((N, K), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 1, err, ERRLEN)
    before = lib.braze_dnnl_runtime_m()  # process-wide: every model linking this helper sees it
    lib.braze_dnnl_set_runtime_m(1)
    try:
        assert lib.braze_dnnl_runtime_m() == 1
        for M in (1, 9, 130):
            A = rng.standard_normal((M, K), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            assert lib.braze_matmul(M, N, K, _p(A), pb, _p(b), None, 3, _p(out), err, ERRLEN) == 0, err.value
            _close(out, ACTS[3](A.astype(np.float64) @ W.T + b))
    finally:
        lib.braze_dnnl_set_runtime_m(before)
        lib.braze_free_packed_b(pb)


SMALL_M_ACTS = (0, 1, 2, 3, 4, 5, 0x101, 0x102, 0x103, 0x104)  # the activations the small-M kernel fuses


def _small_m_case(lib, rng, N, K, kn_layout):
    W = rng.standard_normal((K, N) if kn_layout else (N, K), dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 0 if kn_layout else 1, err, ERRLEN)
    assert pb, err.value
    return (W if kn_layout else W.T).astype(np.float64), pb


def _require_small_m_layout(lib, pb):
    """Skip where the helper has no small-M kernel (no AVX-512); where it has one, fail unless
    oneDNN packed the weight in the layout the kernel reads (BA16a64b): a oneDNN that picks
    another would silently send every small M back to its primitives."""
    from braze.codegen.isa import host_isa
    if lib.braze_packed_b_small_m_rows(pb):
        return
    if "avx512f" not in host_isa().features:
        pytest.skip("this helper build has no small-M kernel (no AVX-512)")
    pytest.fail("AVX-512 is here, but oneDNN packed the weight in a layout the small-M kernel does not read "
                "(it expects BA16a64b): braze_dnnl_smallm.c's smallm_layout() must learn the new one")


def _check_small_m(lib, Wkn, pb, M, act, rng, alias=False):
    K, N = Wkn.shape
    A = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    r = rng.standard_normal((M, N), dtype=np.float32)
    out = r.copy() if alias else np.full((M, N), np.nan, np.float32)
    want = _epilogue(A.astype(np.float64) @ Wkn + b, act, r)
    err = _err()
    rc = lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(out if alias else r), act, _p(out), err, ERRLEN)
    assert rc == 0, err.value
    _close(out, want)


@pytest.mark.parametrize("N,K,kn_layout", [(37, 53, 0), (130, 70, 1), (768, 768, 0), (64, 3072, 1)])
def test_small_m_kernel(lib, N, K, kn_layout):
    """M up to braze_dnnl_small_m() runs braze_dnnl_smallm.c straight from the packed weight
    (no primitive is created): every fused activation, before and after the residual, at row
    counts around its 6-row tile, K not a multiple of 16 and N not of 64."""
    rng = np.random.default_rng(N + K)
    Wkn, pb = _small_m_case(lib, rng, N, K, kn_layout)
    try:
        _require_small_m_layout(lib, pb)
        assert lib.braze_packed_b_small_m_rows(pb) == -(-K // 16) * 16
        assert lib.braze_dnnl_small_m() >= 7
        c0 = _stats(lib)[0]
        for M in (1, 2, 5, 6, 7, 13, lib.braze_dnnl_small_m()):
            for act in SMALL_M_ACTS:
                _check_small_m(lib, Wkn, pb, M, act, rng)
        assert _stats(lib)[0] == c0
        _check_small_m(lib, Wkn, pb, 5, 0x102, rng, alias=True)  # the residual is the output
        # tanh is oneDNN's: a primitive per M
        _check_small_m(lib, Wkn, pb, 3, 6, rng)
        assert _stats(lib)[0] == c0 + 1
    finally:
        lib.braze_free_packed_b(pb)


def test_small_m_long_sums_stay_near_float64(lib):
    """Over a long K (GPT-2's gradient through its 50257-word LM head) the small-M kernel sums
    each chunk of K from zero and then adds it, so its chains of float32 adds are short: on
    positive terms, whose sums grow, within 4e-6 of float64 (measured 1.2e-6; one chain of 50000
    adds was 1.1e-5 off)."""
    rng = np.random.default_rng(7)
    K, N, M = 50000, 64, 4
    W = rng.random((K, N), dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, K, 0, err, ERRLEN)
    assert pb, err.value
    try:
        _require_small_m_layout(lib, pb)
        A = rng.random((M, K), dtype=np.float32)
        out = np.empty((M, N), np.float32)
        rc = lib.braze_matmul(M, N, K, _p(A), pb, None, None, 0, _p(out), err, ERRLEN)
        assert rc == 0, err.value
        want = A.astype(np.float64) @ W.astype(np.float64)
        assert np.abs(out / want - 1).max() < 4e-6
    finally:
        lib.braze_free_packed_b(pb)


def test_small_m_kernel_special_values_match_onednn(lib):
    """Fused GELU and SiLU give oneDNN's values at infinite products (NaN at +-inf and -inf),
    so a model's special values do not change across the small-M limit; relu keeps NaN."""
    W = np.ones((16, 16), np.float32)
    A = np.ones((4, 16), np.float32)
    A[0, 0], A[1, 0], A[2, 0] = np.nan, np.inf, -np.inf
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), 16, 16, 1, err, ERRLEN)
    try:
        _require_small_m_layout(lib, pb)

        def run(act):
            out = np.empty((4, 16), np.float32)
            assert lib.braze_matmul(4, 16, 16, _p(A), pb, None, None, act, _p(out), err, ERRLEN) == 0, err.value
            return out
        for act in (0, 2, 3, 4):
            small = run(act)
            with _small_m(lib, 0):
                dnn = run(act)
            np.testing.assert_array_equal(np.isnan(small), np.isnan(dnn), err_msg=f"act {act}")
            np.testing.assert_allclose(small, dnn, rtol=1e-6, equal_nan=True)
        np.testing.assert_array_equal(run(1)[:, 0], [np.nan, np.inf, 0.0, 16.0])
    finally:
        lib.braze_free_packed_b(pb)


def test_small_m_kernel_in_row_blocks(lib):
    """With the limit raised, the kernel takes rows in blocks of 48, and each thread's second
    block prefetches its next panel: 16 panels, rows 47 to 130."""
    rng = np.random.default_rng(21)
    Wkn, pb = _small_m_case(lib, rng, 1000, 70, 0)
    try:
        with _small_m(lib, 1 << 20):
            for M in (47, 48, 49, 97, 130):
                _check_small_m(lib, Wkn, pb, M, 0x102 if M % 2 else 2, rng)
    finally:
        lib.braze_free_packed_b(pb)


def test_small_m_kernel_from_many_threads_is_deterministic(lib):
    """8 threads at once on one weight, mixed M: each result has the bits of a call alone."""
    from braze.testing import run_threads
    rng = np.random.default_rng(22)
    Wkn, pb = _small_m_case(lib, rng, 768, 768, 0)
    Ms = [1, 4, 16, 31, 48]
    As = {M: rng.standard_normal((M, 768), dtype=np.float32) for M in Ms}
    bias = rng.standard_normal(768, dtype=np.float32)

    def call(M):
        out = np.empty((M, 768), np.float32)
        e = _err()
        assert lib.braze_matmul(M, 768, 768, _p(As[M]), pb, _p(bias), None, 2, _p(out), e, ERRLEN) == 0, e.value
        return out

    try:
        alone = {M: call(M) for M in Ms}
        for M in Ms:
            _close(alone[M], ACTS[2](As[M].astype(np.float64) @ Wkn + bias))

        def work(t):
            for M in Ms[t % 5:] + Ms[:t % 5]:
                assert np.array_equal(call(M), alone[M])
        assert run_threads(work, 8) == []
    finally:
        lib.braze_free_packed_b(pb)


CONV_CASES = [
    # N, IC, OC, H, W, k, stride, pad (all sides, or top, left, bottom, right), dil, groups
    (1, 3, 8, 17, 19, 3, 1, 1, 1, 1),
    (2, 8, 16, 15, 15, 3, 2, 1, 1, 1),
    (1, 16, 16, 12, 12, 3, 1, 2, 2, 1),
    (2, 8, 12, 10, 9, 3, 1, 1, 1, 4),     # grouped
    (1, 16, 16, 14, 14, 3, 2, 1, 1, 16),  # depthwise
    (3, 64, 32, 7, 7, 1, 1, 0, 1, 1),     # 1x1
    (1, 3, 64, 32, 32, 7, 2, 3, 1, 1),    # ResNet stem
    (2, 8, 8, 11, 10, 3, 2, (0, 1, 1, 0), 1, 1),  # asymmetric (ONNX SAME_UPPER/LOWER)
    (1, 4, 8, 9, 9, 3, 1, (2, 0, 1, 3), 1, 2),
]


def _conv_ref(torch, X, Wt, b, s, p, d, g):
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    x = torch.nn.functional.pad(torch.from_numpy(X).double(), (pl, pr, pt, pb))
    return torch.nn.functional.conv2d(x, torch.from_numpy(Wt).double(),
                                      None if b is None else torch.from_numpy(b).double(),
                                      stride=s, dilation=d, groups=g).numpy()


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("act,bias,residual", [(0, False, False), (1, True, False), (1, True, True),
                                                (0, True, True), (4, False, True), (0x101, True, True)])
def test_conv2d(lib, case, layout, act, bias, residual):
    torch = pytest.importorskip("torch")
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(H * W + OC + act)
    X = rng.standard_normal((N, IC, H, W), dtype=np.float32)
    Wt = rng.standard_normal((OC, IC // g, k, k), dtype=np.float32)
    b = rng.standard_normal(OC, dtype=np.float32) if bias else None
    ref = _conv_ref(torch, X, Wt, b, s, p, d, g)
    r = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    ref = _epilogue(ref, act, r)
    OH, OW = ref.shape[2:]
    err = _err()
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    pc = lib.braze_pack_conv_weights(_p(Wt), OC, IC, k, k, g, s, s, pt, pl, pb, pr, d, d, layout, err, ERRLEN)
    assert pc, err.value
    try:
        to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout else (lambda a: a)
        Xl = to(X)
        rl = None if r is None else to(r)
        out = np.full(to(ref).shape, np.nan, np.float32)
        rc = lib.braze_conv2d(N, H, W, _p(Xl), pc, _p(b), _p(rl), act, OH, OW, _p(out), err, ERRLEN)
        assert rc == 0, err.value
        _close(out, to(ref))
        # same weights, another spatial size and batch (dynamic shapes)
        H2, W2 = H + 3, W + 1
        X2 = rng.standard_normal((N + 1, IC, H2, W2), dtype=np.float32)
        ref2 = _conv_ref(torch, X2, Wt, b, s, p, d, g)
        r2 = rng.standard_normal(ref2.shape).astype(np.float32) if residual else None
        ref2 = _epilogue(ref2, act, r2)
        out2 = np.empty(to(ref2).shape, np.float32)
        X2l = to(X2)  # keep the converted arrays alive across the call
        r2l = None if r2 is None else to(r2)
        rc = lib.braze_conv2d(N + 1, H2, W2, _p(X2l), pc, _p(b), _p(r2l), act,
                              ref2.shape[2], ref2.shape[3], _p(out2), err, ERRLEN)
        assert rc == 0, err.value
        _close(out2, to(ref2))
    finally:
        lib.braze_free_packed_conv(pc)


def test_conv_weight_layouts_shared_across_shapes(lib):
    """A shape whose primitive wants another weight layout gets it re-laid out from the
    plain weights (kept alive by the caller), once, and shared by later shapes."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    OC, IC = 256, 64  # 1x1 NHWC: oneDNN 3.2 asks for other layouts at small images
    Wt = rng.standard_normal((OC, IC, 1, 1), dtype=np.float32)
    err = _err()
    pc = lib.braze_pack_conv_weights(_p(Wt), OC, IC, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, err, ERRLEN)
    assert pc, err.value
    layouts = []
    try:
        for hw in (7, 56, 1, 3, 1, 7):
            X = rng.standard_normal((1, IC, hw, hw), dtype=np.float32)
            ref = torch.nn.functional.conv2d(torch.from_numpy(X).double(), torch.from_numpy(Wt).double())
            Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
            out = np.empty((1, hw, hw, OC), np.float32)
            assert lib.braze_conv2d(1, hw, hw, _p(Xl), pc, None, None, 0, hw, hw, _p(out), err, ERRLEN) == 0, \
                err.value
            _close(out, ref.numpy().transpose(0, 2, 3, 1))
            layouts.append(lib.braze_packed_conv_layouts(pc))
    finally:
        lib.braze_free_packed_conv(pc)
    assert layouts[-1] > 1, layouts  # the re-laid-out path ran
    assert layouts[-2:] == layouts[2:4], layouts  # repeated shapes add no layout


def _stats(lib):
    created, hits = C.c_int64(), C.c_int64()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    return created.value, hits.value


def _packed_linear_and_conv(lib, rng, nk, oihw, pad):
    """A random [N, K] linear weight and OIHW conv weight (stride 1, NHWC), both packed."""
    err = _err()
    W = rng.standard_normal(nk, dtype=np.float32)
    Wc = rng.standard_normal(oihw, dtype=np.float32)
    pb = lib.braze_pack_b_err(_p(W), *nk, 1, err, ERRLEN)
    pc = lib.braze_pack_conv_weights(_p(Wc), *oihw, 1, 1, 1, pad, pad, pad, pad, 1, 1, 1, err, ERRLEN)
    assert pb and pc, err.value
    return W, pb, Wc, pc


def test_prepare_creates_what_the_call_then_runs(lib, onednn_only):
    """braze_matmul_prepare / braze_conv2d_prepare create the primitive of the call with the
    same shape and epilogue and run nothing: the call then hits the cache. A second prepare
    creates nothing; bad arguments return 1 (the call reports them), never crash."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    err = _err()
    W, pb, Wc, pc = _packed_linear_and_conv(lib, rng, (24, 16), (8, 4, 3, 3), pad=1)
    try:
        for M, act in ((7, 0), (33, 2)):
            assert lib.braze_matmul_prepare(M, pb, 1, 1, act) == 0
            c0 = _stats(lib)[0]
            assert lib.braze_matmul_prepare(M, pb, 1, 1, act) == 0 and _stats(lib)[0] == c0
            A = rng.standard_normal((M, 16), dtype=np.float32)
            bias = rng.standard_normal(24, dtype=np.float32)
            res = rng.standard_normal((M, 24), dtype=np.float32)
            out = np.empty((M, 24), np.float32)
            assert lib.braze_matmul(M, 24, 16, _p(A), pb, _p(bias), _p(res), act, _p(out), err, ERRLEN) == 0
            assert _stats(lib)[0] == c0  # the prepared primitive ran
            _close(out, _epilogue(A.astype(np.float64) @ W.T.astype(np.float64) + bias, act, res))
        assert lib.braze_conv2d_prepare(2, 9, 11, pc, 0, 0, 1) == 0
        c0 = _stats(lib)[0]
        X = rng.standard_normal((2, 4, 9, 11), dtype=np.float32)
        out = np.empty((2, 9, 11, 8), np.float32)
        Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
        assert lib.braze_conv2d(2, 9, 11, _p(Xl), pc, None, None, 1, 9, 11, _p(out), err, ERRLEN) == 0, err.value
        assert _stats(lib)[0] == c0
        ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(X).double(), torch.from_numpy(Wc).double(),
                                                    padding=1))
        _close(out, ref.numpy().transpose(0, 2, 3, 1))
        for bad in ((0, pb, 0, 0, 0), (3, None, 0, 0, 0), (3, pb, 0, 0, 99)):
            assert lib.braze_matmul_prepare(*bad) == 1
        for bad in ((0, 9, 11, pc, 0, 0, 0), (1, 9, 11, None, 0, 0, 0), (1, -2, 11, pc, 0, 0, 0)):
            assert lib.braze_conv2d_prepare(*bad) == 1
    finally:
        lib.braze_free_packed_b(pb)
        lib.braze_free_packed_conv(pc)


def test_threads_creating_the_same_new_primitives_at_once_agree(lib, onednn_only):
    """Primitives are created outside the cache's lock: 8 threads asking at once for the same
    new shapes (and for the same conv weight's other layouts) each get a working primitive,
    and the cache keeps one entry per shape."""
    from braze.testing import run_threads
    rng = np.random.default_rng(13)
    W, pb, Wc, pc = _packed_linear_and_conv(lib, rng, (32, 24), (256, 64, 1, 1), pad=0)
    Ms = [3, 5, 9, 17, 40]
    HWs = [1, 3, 7]
    As = {M: rng.standard_normal((M, 24), dtype=np.float32) for M in Ms}
    Xs = {hw: rng.standard_normal((1, hw, hw, 64), dtype=np.float32) for hw in HWs}

    def work(t):
        e = _err()
        for M in Ms[t % 2:] + Ms[:t % 2]:
            out = np.empty((M, 32), np.float32)
            assert lib.braze_matmul(M, 32, 24, _p(As[M]), pb, None, None, 0, _p(out), e, ERRLEN) == 0, e.value
            _close(out, As[M].astype(np.float64) @ W.T.astype(np.float64))
        for hw in HWs:
            out = np.empty((1, hw, hw, 256), np.float32)
            assert lib.braze_conv2d(1, hw, hw, _p(Xs[hw]), pc, None, None, 0, hw, hw, _p(out), e, ERRLEN) == 0, \
                e.value
            ref = np.einsum("nhwc,oc->nhwo", Xs[hw].astype(np.float64), Wc[:, :, 0, 0].astype(np.float64))
            _close(out, ref)
    try:
        assert run_threads(work, 8) == []
        c0 = _stats(lib)[0]
        # every shape is in the cache now, for a thread with the same OpenMP thread count (the
        # cache keeps a primitive per count: oneDNN fixes it at creation). The main thread's may
        # differ (torch.set_num_threads in an earlier test), so a fresh thread asks again.
        assert run_threads(work, 1) == []
        assert _stats(lib)[0] == c0
    finally:
        lib.braze_free_packed_b(pb)
        lib.braze_free_packed_conv(pc)


def test_a_primitive_is_kept_per_thread_count(lib, onednn_only):
    """oneDNN fixes a primitive's thread count when it creates it, and a call's team shrinks while
    the cores are shared (braze_team.h): a thread asking with another OpenMP count gets its own
    primitive, created once, with the same result."""
    from braze.testing import run_threads
    from braze.runtime.loader import OmpOps
    lib.braze_dnnl_omp_ops.restype = C.c_void_p
    teams = OmpOps.at(lib.braze_dnnl_omp_ops())  # the helper's OpenMP runtime (braze_omp.h)
    rng = np.random.default_rng(29)
    W, pb, Wc, pc = _packed_linear_and_conv(lib, rng, (48, 40), (16, 8, 1, 1), pad=0)
    A = rng.standard_normal((40, 40), dtype=np.float32)
    outs = []

    def call(n):
        def work(t):
            teams.set_num_threads(n)
            out = np.empty((40, 48), np.float32)
            e = _err()
            assert lib.braze_matmul(40, 48, 40, _p(A), pb, None, None, 0, _p(out), e, ERRLEN) == 0, e.value
            outs.append(out)
        assert run_threads(work, 1) == []
        return _stats(lib)[0]
    try:
        c2 = call(2)
        assert call(2) == c2
        c1 = call(1)
        assert c1 == c2 + 1 and call(1) == c1 and call(2) == c1
        _close(outs[0], A.astype(np.float64) @ W.T.astype(np.float64))
        for o in outs[1:]:
            assert np.array_equal(o, outs[0])
    finally:
        lib.braze_free_packed_b(pb)
        lib.braze_free_packed_conv(pc)


def test_errors_are_reported_not_fatal(lib):
    err = _err()
    W = np.ones((4, 4), np.float32)
    assert not lib.braze_pack_b_err(_p(W), -1, 4, 1, err, ERRLEN)
    assert b"braze_pack_b" in err.value and b"N=-1" in err.value
    pb = lib.braze_pack_b_err(_p(W), 4, 4, 1, err, ERRLEN)
    A = np.ones((2, 4), np.float32)
    out = np.empty((2, 4), np.float32)
    try:
        assert lib.braze_matmul(2, 5, 4, _p(A), pb, None, None, 0, _p(out), err, ERRLEN) != 0
        assert b"braze_matmul M=2 N=5 K=4" in err.value
        assert lib.braze_matmul(2, 4, 4, _p(A), pb, None, None, 99, _p(out), err, ERRLEN) != 0
        assert b"activation" in err.value
        assert lib.braze_matmul(2, 4, 4, _p(A), None, None, None, 0, _p(out), err, ERRLEN) != 0
        # a short error buffer is truncated, not overrun
        small = C.create_string_buffer(8)
        assert lib.braze_matmul(2, 5, 4, _p(A), pb, None, None, 0, _p(out), small, 8) != 0
        assert len(small.value) == 7
    finally:
        lib.braze_free_packed_b(pb)
    assert lib.braze_batch_matmul(-1, 2, 2, 2, _p(A), 0, _p(A), 0, 1.0, _p(out), err, ERRLEN) != 0
    assert b"braze_batch_matmul M=2" in err.value and b"A=[-1]" in err.value
    Wc = np.ones((8, 3, 3, 3), np.float32)
    assert not lib.braze_pack_conv_weights(_p(Wc), 8, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, err, ERRLEN)
    assert b"groups=2" in err.value
    pc = lib.braze_pack_conv_weights(_p(Wc), 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, err, ERRLEN)
    X = np.ones((1, 3, 5, 5), np.float32)
    Y = np.empty((1, 8, 5, 5), np.float32)
    try:
        assert lib.braze_conv2d(1, 5, 5, _p(X), pc, None, None, 0, 4, 5, _p(Y), err, ERRLEN) != 0
        assert b"expected OH=5 OW=5" in err.value
        assert lib.braze_conv2d(1, 5, 5, _p(X), pc, None, None, 0, 5, 5, _p(Y), err, ERRLEN) == 0, err.value
        np.testing.assert_allclose(Y[0, :, 2, 2], 27.0)
    finally:
        lib.braze_free_packed_conv(pc)


def test_primitive_cache_counts(lib, onednn_only):
    created0 = C.c_int64()
    hits0 = C.c_int64()
    lib.braze_dnnl_stats(C.byref(created0), C.byref(hits0))
    rng = np.random.default_rng(3)
    W = rng.standard_normal((8, 8), dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), 8, 8, 1, err, ERRLEN)
    try:
        for M in (4, 4, 4, 5):
            A = np.ones((M, 8), np.float32)
            out = np.empty((M, 8), np.float32)
            assert lib.braze_matmul(M, 8, 8, _p(A), pb, None, None, 0, _p(out), err, ERRLEN) == 0
    finally:
        lib.braze_free_packed_b(pb)
    created = C.c_int64()
    hits = C.c_int64()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    assert created.value - created0.value == 2
    assert hits.value - hits0.value == 2


def test_freeing_weights_keeps_the_other_weights_primitives(lib, onednn_only):
    """The primitive cache is one table for every model in the process: freeing one weight
    drops its entries only, and emptying the tombstones it leaves keeps every other
    weight's entry reachable (a hit, not a second primitive)."""
    rng = np.random.default_rng(4)
    err = _err()
    n = 400  # enough entries that some probe chains run through freed slots
    Ws = [rng.standard_normal((8, 8), dtype=np.float32) for _ in range(n)]
    A = rng.standard_normal((3, 8), dtype=np.float32)
    out = np.empty((3, 8), np.float32)
    created, hits = C.c_int64(), C.c_int64()

    def run(i, pb):
        assert lib.braze_matmul(3, 8, 8, _p(A), pb, None, None, 0, _p(out), err, ERRLEN) == 0, err.value
        _close(out, A.astype(np.float64) @ Ws[i].T.astype(np.float64))

    pbs = [lib.braze_pack_b_err(_p(W), 8, 8, 1, err, ERRLEN) for W in Ws]
    try:
        for i, pb in enumerate(pbs):
            run(i, pb)
        for i in range(0, n, 2):
            lib.braze_free_packed_b(pbs[i])
            pbs[i] = None
        lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
        c0, h0 = created.value, hits.value
        for i in range(1, n, 2):
            run(i, pbs[i])
        lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
        assert (created.value - c0, hits.value - h0) == (0, n // 2)
    finally:
        for pb in pbs:
            if pb:
                lib.braze_free_packed_b(pb)


# ---------------------------------------------------------------------------------------------
# zero-sized operands (found by the random-graph fuzzer, braze/fuzz): an empty tensor's data
# pointer may be NULL, oneDNN takes no zero dims, and a product over K = 0 terms is all zeros
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("act", list(ACTS) + [0x101, 0x103])
@pytest.mark.parametrize("bias,residual", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_over_zero_k_is_the_epilogue_of_zeros(lib, act, bias, residual):
    M, N = 3, 5
    rng = np.random.default_rng(act)
    W = np.zeros((N, 0), np.float32)
    b = rng.standard_normal(N, dtype=np.float32) if bias else None
    r = rng.standard_normal((M, N), dtype=np.float32) if residual else None
    err = _err()
    pb = lib.braze_pack_b_err(_p(W), N, 0, 1, err, ERRLEN)
    assert pb, err.value
    try:
        out = np.full((M, N), np.nan, np.float32)
        A = np.zeros((M, 0), np.float32)
        assert lib.braze_matmul(M, N, 0, _p(A), pb, _p(b), _p(r), act, _p(out), err, ERRLEN) == 0, err.value
        x = np.zeros((M, N)) + (0 if b is None else b.astype(np.float64))
        _close(out, _epilogue(x, act, r))
    finally:
        lib.braze_free_packed_b(pb)


def test_matmul_with_no_rows_or_columns_takes_null_pointers(lib):
    err = _err()
    W = np.ones((4, 3), np.float32)
    pb = lib.braze_pack_b_err(_p(W), 4, 3, 1, err, ERRLEN)
    empty = lib.braze_pack_b_err(None, 0, 3, 1, err, ERRLEN)
    assert pb and empty, err.value
    try:
        assert lib.braze_matmul(0, 4, 3, None, pb, None, None, 1, None, err, ERRLEN) == 0, err.value
        A = np.ones((2, 3), np.float32)
        assert lib.braze_matmul(2, 0, 3, _p(A), empty, None, None, 0, None, err, ERRLEN) == 0, err.value
        # a nonempty product still needs its pointers
        assert lib.braze_matmul(2, 4, 3, None, pb, None, None, 0, None, err, ERRLEN) != 0
        assert b"invalid arguments" in err.value
    finally:
        lib.braze_free_packed_b(pb)
        lib.braze_free_packed_b(empty)


def test_conv_of_an_empty_batch_and_of_an_empty_image(lib):
    err = _err()
    Wc = np.ones((2, 3, 1, 1), np.float32)
    pc = lib.braze_pack_conv_weights(_p(Wc), 2, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, err, ERRLEN)
    assert pc, err.value
    try:
        assert lib.braze_conv2d(0, 4, 4, None, pc, None, None, 0, 4, 4, None, err, ERRLEN) == 0, err.value
        # zero width with a batch: refused with a message (torch refuses it too), not a crash
        X = np.ones((1, 3, 4, 1), np.float32)
        Y = np.empty((1, 2, 4, 1), np.float32)
        assert lib.braze_conv2d(1, 4, 0, _p(X), pc, None, None, 0, 4, 0, _p(Y), err, ERRLEN) != 0
        assert b"invalid arguments" in err.value or b"zero height or width" in err.value
    finally:
        lib.braze_free_packed_conv(pc)


@pytest.mark.parametrize("N, K", [(1024, 96), (96, 1024), (2048, 64)])
@pytest.mark.parametrize("transposed", [1, 0])
def test_weights_with_rows_a_multiple_of_4_kb(lib, N, K, transposed):
    """Where oneDNN takes the packed weight plain (AVX2), a row stride of a multiple of 4 KB is
    padded by a line (BERT's 3072-wide FFN ran at half speed): the results are the same, with a
    bias, a residual and an activation, at several M."""
    rng = np.random.default_rng(N + K + transposed)
    W = rng.standard_normal((N, K), dtype=np.float32)
    Wl = W if transposed else np.ascontiguousarray(W.T)
    b = rng.standard_normal(N, dtype=np.float32)
    err = _err()
    pb = lib.braze_pack_b_err(_p(Wl), N, K, transposed, err, ERRLEN)
    assert pb, err.value
    try:
        for M in (1, 7, 64, 130):
            A = rng.standard_normal((M, K), dtype=np.float32)
            r = rng.standard_normal((M, N), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            assert lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(r), 1, _p(out), err, ERRLEN) == 0, err.value
            _close(out, np.maximum(A.astype(np.float64) @ W.T + b, 0) + r)
    finally:
        lib.braze_free_packed_b(pb)
