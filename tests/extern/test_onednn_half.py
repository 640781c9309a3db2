"""The oneDNN helper with 16-bit operands (BRAZE_TYPES): bfloat16 GEMMs, batched matmuls and
convolutions against float64 NumPy on the same rounded inputs. Products of bfloat16 values are
exact in float32, so a float32 result is off by float32 accumulation only, and a bfloat16 result
by one rounding more. float16 runs where the CPU has float16 GEMMs (AVX512_FP16, AMX-FP16)."""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest

from braze.codegen.isa import host_isa
from braze.extern import onednn
from braze.passes.precision import library_dtypes
from tests.extern.test_onednn import SMALL_M_ACTS, _epilogue

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

ml_dtypes = pytest.importorskip("ml_dtypes")

ERRLEN = 1024
F32, BF16, F16 = 0, 1, 2
NP = {F32: np.float32, BF16: ml_dtypes.bfloat16, F16: np.float16}
EPS = {F32: 2.0 ** -23, BF16: 2.0 ** -8, F16: 2.0 ** -11}  # half an ulp, relative
# the 16-bit dtypes oneDNN runs natively on this CPU (bfloat16: AVX512_BF16 or AMX; float16:
# AVX512_FP16 or AMX-FP16); the precision pass widens the others to float32, so the helper never
# sees them there
NATIVE = library_dtypes(host_isa().host_features)
HALF = [code for code, name in ((BF16, "bfloat16"), (F16, "float16")) if name in NATIVE]
NOT_NATIVE = [code for code, name in ((BF16, "bfloat16"), (F16, "float16")) if name not in NATIVE]
needs_bf16 = pytest.mark.skipif("bfloat16" not in NATIVE, reason="this CPU runs no bfloat16 GEMMs natively "
                                "(AVX512_BF16 or AMX-BF16)")


def types(src, dst, bias=F32):
    return (src << 12) | (dst << 14) | (bias << 16)


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


def _p(a):
    return None if a is None else a.ctypes.data


def _err():
    return C.create_string_buffer(ERRLEN)


def _rounded(rng, shape, dt):
    return rng.standard_normal(shape).astype(NP[dt])


def _check(got, want, dst, k):
    """got (in dst) against the float64 result: float32 accumulation over k terms, then a rounding."""
    scale = max(1.0, float(np.abs(want).max()))
    atol = scale * (2 * EPS[dst] + 4 * k * EPS[F32])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=atol)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("dst", [F32, "src"])
@pytest.mark.parametrize("M", [1, 2, 7, 64, 130])
@pytest.mark.parametrize("act", [0, 3, 0x101])
def test_packed_matmul(lib, src, dst, M, act):
    dst = src if dst == "src" else dst
    N, K = 48, 96
    rng = np.random.default_rng(M * 7 + act)
    W32 = rng.standard_normal((N, K)).astype(np.float32)  # a float32 weight packed in src: rounded once
    A = _rounded(rng, (M, K), src)
    b = rng.standard_normal(N).astype(np.float32)
    r = _rounded(rng, (M, N), dst)
    err = _err()
    pb = lib.braze_pack_b_typed(_p(W32), F32, src, N, K, 1, err, ERRLEN)
    assert pb, err.value
    try:
        out = np.zeros((M, N), NP[dst])
        rc = lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(r), act | types(src, dst), _p(out), err, ERRLEN)
        assert rc == 0, err.value
        y = A.astype(np.float64) @ W32.astype(NP[src]).astype(np.float64).T + b
        if act & 0x100:
            want = np.maximum(y + r.astype(np.float64), 0)
        else:
            want = (_gelu_tanh(y) if act == 3 else y) + r.astype(np.float64)
        _check(out, want, dst, K)
    finally:
        lib.braze_free_packed_b(pb)


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("transposed", [1, 0])
@pytest.mark.parametrize("M", [1, 5, 70])
def test_matmul_with_a_weight_read_at_the_call(lib, src, transposed, M):
    N, K = 40, 72
    rng = np.random.default_rng(M + transposed)
    A = _rounded(rng, (M, K), src)
    W = _rounded(rng, (N, K) if transposed else (K, N), src)
    b = _rounded(rng, N, src)  # a bias in the operands' dtype
    out = np.zeros((M, N), NP[src])
    err = _err()
    rc = lib.braze_matmul_w(M, N, K, _p(A), _p(W), transposed, _p(b), None, types(src, src, src), _p(out), err,
                            ERRLEN)
    assert rc == 0, err.value
    Wkn = W.astype(np.float64).T if transposed else W.astype(np.float64)
    _check(out, A.astype(np.float64) @ Wkn + b.astype(np.float64), src, K)


@pytest.mark.parametrize("src", HALF)
def test_a_product_over_no_terms_is_its_epilogue_rounded_once(lib, src):
    M, N = 3, 5
    rng = np.random.default_rng(1)
    b = rng.standard_normal(N).astype(np.float32)
    r = _rounded(rng, (M, N), src)
    err = _err()
    pb = lib.braze_pack_b_typed(None, F32, src, N, 0, 1, err, ERRLEN)
    assert pb, err.value
    try:
        out = np.zeros((M, N), NP[src])
        assert lib.braze_matmul(M, N, 0, None, pb, _p(b), _p(r), types(src, src), _p(out), err, ERRLEN) == 0, \
            err.value
        want = (b + r.astype(np.float32)).astype(NP[src])  # one rounding of the float32 sum
        assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    finally:
        lib.braze_free_packed_b(pb)


@pytest.mark.parametrize("dt", NOT_NATIVE)
def test_a_dtype_onednn_lacks_here_is_a_clear_error(lib, dt):
    """Where oneDNN has no kernel for a 16-bit dtype, packing or running in it returns an error that
    names the call and the dtype (oneDNN says "unimplemented"), or succeeds (oneDNN emulates
    bfloat16 on AVX-512 without AVX512_BF16); never a crash."""
    W = np.ones((4, 8), np.float32)
    err = _err()
    pb = lib.braze_pack_b_typed(_p(W), F32, dt, 4, 8, 1, err, ERRLEN)
    if pb:
        lib.braze_free_packed_b(pb)
    else:
        assert b"braze_pack_b" in err.value and (b"bf16" in err.value or b"f16" in err.value), err.value
    A = np.ones((2, 8), NP[dt])
    Wh = W.astype(NP[dt])
    out = np.zeros((2, 4), NP[dt])
    err = _err()
    rc = lib.braze_matmul_w(2, 4, 8, _p(A), _p(Wh), 1, None, None, types(dt, dt), _p(out), err, ERRLEN)
    if rc == 0:
        assert np.all(out.astype(np.float32) == 8.0)
    else:
        assert b"braze_matmul_w" in err.value, err.value


@needs_bf16
def test_a_weight_packed_in_another_dtype_than_the_input_is_an_error(lib):
    W = np.ones((4, 4), np.float32)
    A = np.ones((2, 4), np.float32)
    err = _err()
    pb = lib.braze_pack_b_typed(_p(W), F32, BF16, 4, 4, 1, err, ERRLEN)
    try:
        out = np.zeros((2, 4), np.float32)
        assert lib.braze_matmul(2, 4, 4, _p(A), pb, None, None, 0, _p(out), err, ERRLEN) != 0
        assert b"in bf16, A in f32" in err.value
        assert lib.braze_matmul(2, 4, 4, _p(A), pb, None, None, 3 << 12, _p(out), err, ERRLEN) != 0
        assert b"unknown activation code" in err.value  # dtype code 3 is no dtype
    finally:
        lib.braze_free_packed_b(pb)


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("dst", [F32, "src"])
@pytest.mark.parametrize("ab, bb, tb", [((3,), (3,), 0), ((2, 1), (1, 3), 1), ((1,), (4,), 0)])
def test_batch_matmul(lib, src, dst, ab, bb, tb):
    dst = src if dst == "src" else dst
    M, N, K = 5, 6, 33
    rng = np.random.default_rng(len(ab) + tb)
    A = _rounded(rng, (*ab, M, K), src)
    B = _rounded(rng, (*bb, N, K) if tb else (*bb, K, N), src)
    Bk = np.swapaxes(B.astype(np.float64), -1, -2) if tb else B.astype(np.float64)
    want = 0.5 * np.matmul(A.astype(np.float64), Bk)
    out = np.zeros(want.shape, NP[dst])
    a_b, b_b = np.array(ab, np.int64), np.array(bb, np.int64)
    err = _err()
    rc = lib.braze_batch_matmul_typed(types(src, dst, 0), len(ab), _p(a_b), _p(b_b), M, N, K, _p(A), 0, _p(B), tb,
                                      0.5, _p(out), err, ERRLEN)
    assert rc == 0, err.value
    _check(out, want, dst, K)


def _conv_ref(X, Wt, b, stride, pad):
    torch = pytest.importorskip("torch")
    y = torch.nn.functional.conv2d(torch.from_numpy(X.astype(np.float64)), torch.from_numpy(Wt.astype(np.float64)),
                                   torch.from_numpy(b.astype(np.float64)), stride=stride, padding=pad)
    return y.numpy()


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("N, H", [(1, 9), (2, 16)])
def test_conv2d(lib, src, layout, live, N, H):
    IC, OC, k, s, p = 8, 16, 3, 1, 1
    rng = np.random.default_rng(N * H + layout)
    X = _rounded(rng, (N, IC, H, H), src)
    W32 = rng.standard_normal((OC, IC, k, k)).astype(np.float32)
    Wt = W32.astype(NP[src])  # what the packed weight holds, and what a live call passes
    b = rng.standard_normal(OC).astype(np.float32)
    want = _conv_ref(X, Wt, b, s, p)
    r = rng.standard_normal(want.shape).astype(NP[src])
    want = np.maximum(want + r.astype(np.float64), 0)  # relu(conv + bias + residual)
    to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout else (lambda a: a)
    Xl, rl = to(X), to(r)
    err = _err()
    geometry = (OC, IC, k, k, 1, s, s, p, p, p, p, 1, 1, layout, err, ERRLEN)
    pc = (lib.braze_conv_geometry_typed(src, *geometry) if live else
          lib.braze_pack_conv_typed(_p(W32), F32, src, *geometry))
    assert pc, err.value
    try:
        for _ in range(2):  # a live weight's second call reuses its checked copy
            out = np.zeros(to(want).shape, NP[src])
            args = (N, H, H, _p(Xl), pc) + ((_p(Wt),) if live else ()) + \
                (_p(b), _p(rl), 0x101 | types(src, src), H, H, _p(out), err, ERRLEN)
            rc = (lib.braze_conv2d_w if live else lib.braze_conv2d)(*args)
            assert rc == 0, err.value
            _check(out, to(want), src, IC * k * k)
    finally:
        lib.braze_free_packed_conv(pc)


@needs_bf16
def test_a_conv_input_in_another_dtype_than_its_weights_is_an_error(lib):
    err = _err()
    W = np.ones((4, 2, 1, 1), np.float32)
    pc = lib.braze_pack_conv_typed(_p(W), F32, BF16, 4, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, err, ERRLEN)
    assert pc, err.value
    try:
        X = np.ones((1, 3, 3, 2), np.float32)
        out = np.zeros((1, 3, 3, 4), np.float32)
        assert lib.braze_conv2d(1, 3, 3, _p(X), pc, None, None, 0, 3, 3, _p(out), err, ERRLEN) != 0
        assert b"the input is f32 but the weights are bf16" in err.value
    finally:
        lib.braze_free_packed_conv(pc)


def _created(lib):
    created, hits = C.c_int64(), C.c_int64()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    return created.value


@needs_bf16
@pytest.mark.parametrize("N,K", [(37, 53), (130, 70), (768, 768), (64, 3072)])
@pytest.mark.parametrize("dst,bias", [(F32, F32), (BF16, BF16), (BF16, F32)])
def test_bf16_small_m_kernel_against_onednn(lib, N, K, dst, bias):
    """M up to braze_dnnl_small_m() runs braze_dnnl_smallm.c on the bfloat16 weight oneDNN packed
    (no primitive is made): every fused activation, before and after the residual, row counts
    around its 6-row tile, K odd, K not a multiple of 32 and N not of 64. Against float64 on the
    same rounded operands, and against oneDNN's own kernel (the same VDPBF16PS sums in another
    order), with a bfloat16 or float32 result and bias."""
    rng = np.random.default_rng(N * K)
    W32 = rng.standard_normal((N, K)).astype(np.float32)
    err = _err()
    pb = lib.braze_pack_b_typed(_p(W32), F32, BF16, N, K, 1, err, ERRLEN)
    assert pb, err.value
    small_m = lib.braze_dnnl_small_m()
    try:
        # the layout the kernel reads (BA16a64b2a, K padded to 32): a oneDNN that packs another
        # would silently send every small M back to its primitives
        assert lib.braze_packed_b_small_m_rows(pb) == -(-K // 32) * 32
        Wr = W32.astype(ml_dtypes.bfloat16).astype(np.float64)
        for M in (1, 2, 5, 6, 7, 13, small_m):
            A = _rounded(rng, (M, K), BF16)
            b = rng.standard_normal(N).astype(NP[bias])
            r = _rounded(rng, (M, N), dst)
            for act in SMALL_M_ACTS:
                c0 = _created(lib)
                out = np.zeros((M, N), NP[dst])
                rc = lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(r), act | types(BF16, dst, bias), _p(out), err,
                                      ERRLEN)
                assert rc == 0, err.value
                assert _created(lib) == c0, "a small M made a primitive: the small-M kernel did not run"
                y = A.astype(np.float64) @ Wr.T + b.astype(np.float64)
                want = _epilogue(y, act, r.astype(np.float64))
                _check(out, want, dst, K)
                lib.braze_dnnl_set_small_m(0)  # the same call through oneDNN's kernel
                try:
                    ref = np.zeros((M, N), NP[dst])
                    assert lib.braze_matmul(M, N, K, _p(A), pb, _p(b), _p(r), act | types(BF16, dst, bias), _p(ref),
                                            err, ERRLEN) == 0, err.value
                finally:
                    lib.braze_dnnl_set_small_m(small_m)
                _check(out, ref.astype(np.float64), dst, K)
    finally:
        lib.braze_free_packed_b(pb)


@needs_bf16
def test_bf16_small_m_kernel_special_values_match_onednn(lib):
    """NaN and infinities in A reach the columns oneDNN's kernel gives them, fused GELU and SiLU
    give its values, relu keeps NaN (oneDNN's maps it to 0; braze never hands oneDNN a relu), and an
    odd K's padding never turns an inf into a NaN."""
    N, K = 16, 17
    W = np.ones((N, K), np.float32)
    A = np.ones((4, K), ml_dtypes.bfloat16)
    A[0, 0], A[1, K - 1], A[2, 0] = np.nan, np.inf, -np.inf
    err = _err()
    pb = lib.braze_pack_b_typed(_p(W), F32, BF16, N, K, 1, err, ERRLEN)
    assert pb, err.value
    small_m = lib.braze_dnnl_small_m()
    try:
        for act in (0, 1, 2, 4):
            got, ref = np.zeros((4, N), np.float32), np.zeros((4, N), np.float32)
            assert lib.braze_matmul(4, N, K, _p(A), pb, None, None, act | types(BF16, F32), _p(got), err,
                                    ERRLEN) == 0, err.value
            lib.braze_dnnl_set_small_m(0)
            try:
                assert lib.braze_matmul(4, N, K, _p(A), pb, None, None, act | types(BF16, F32), _p(ref), err,
                                        ERRLEN) == 0, err.value
            finally:
                lib.braze_dnnl_set_small_m(small_m)
            if act == 1:
                assert np.isnan(got[0]).all() and (ref[0] == 0).all()
                got[0] = ref[0] = 0
            # NaN and inf where oneDNN has them; braze's GELU and SiLU differ from its in the last bit
            np.testing.assert_allclose(got, ref, rtol=1e-6)
            if act == 0:  # the inf in an odd K's last pair stays inf
                assert np.isnan(got[0]).all() and np.isposinf(got[1]).all() and np.isneginf(got[2]).all()
    finally:
        lib.braze_free_packed_b(pb)


RELU, RELU6 = 7, 8  # braze_dnnl.h's eager relu and relu6: NaN and -0 kept
# float32 results around what a 16-bit relu must tell apart: NaN of either sign, infinities,
# a negative that rounds to -0 (kept), -0 and +0 sums, and numbers either side of 6 (1e6 is inf in
# float16)
SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, -1e-45, 1e-45, -3.0, -0.0, 0.0, 5.5, 6.0, 7.0, 1e6, -1e6,
                     0.25, -0.25], np.float32)


def _eager_relu(y, act):
    """eager's relu or relu6 of a 16-bit array, in float32 and back: exact"""
    f = y.astype(np.float32)
    if act == RELU6:
        f = np.where(f > 6, np.float32(6), f)
    return np.where(f < 0, np.float32(0), f).astype(y.dtype)


def _same_bits(got, want):
    """equal bit for bit, but a NaN is any NaN (its payload is the rounding's)"""
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(got.view(np.uint16)[ok], want.view(np.uint16)[ok])


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("act", [RELU, RELU6])
@pytest.mark.parametrize("way", ["small_m", "onednn", "no_terms"])
def test_an_eager_relu_after_a_16_bit_store_runs_on_the_rounded_result(lib, src, act, way):
    """passes/offload.py hands the helper ``post_ops=["cast", "relu"]``: relu(round(x)), in every
    way a product runs. The float32 results are 0 + the bias (A is 0), so the rounding is exact to
    predict: -1e-45 rounds to -0 and stays -0, NaN stays NaN, -inf becomes 0."""
    M, N, K = 3, SPECIALS.size, 0 if way == "no_terms" else 8
    small_m = lib.braze_dnnl_small_m()
    err = _err()
    pb = lib.braze_pack_b_typed(_p(np.ones((N, K), np.float32)), F32, src, N, K, 1, err, ERRLEN)
    assert pb, err.value
    if way == "small_m" and not lib.braze_packed_b_small_m_takes(pb, M, act | types(src, src)):
        lib.braze_free_packed_b(pb)
        pytest.skip("the small-M kernel takes no such product on this CPU (bfloat16 with AVX512_BF16 only)")
    lib.braze_dnnl_set_small_m(small_m if way == "small_m" else 0)
    try:
        c0 = _created(lib)
        out = np.zeros((M, N), NP[src])
        A = np.zeros((M, K), NP[src])
        assert lib.braze_matmul(M, N, K, _p(A), pb, _p(SPECIALS), None, act | types(src, src), _p(out), err,
                                ERRLEN) == 0, err.value
        assert (_created(lib) == c0) == (way != "onednn"), "the call did not run the way the test names"
        y = np.float32(0) + SPECIALS  # the float32 sum: a -0 bias gives +0
        with np.errstate(over="ignore"):  # 1e6 is inf in float16
            want = np.broadcast_to(y.astype(NP[src]), (M, N))
        _same_bits(out, _eager_relu(want, act))
    finally:
        lib.braze_dnnl_set_small_m(small_m)
        lib.braze_free_packed_b(pb)


@pytest.mark.parametrize("src", HALF)
@pytest.mark.parametrize("act", [RELU, RELU6])
@pytest.mark.parametrize("N, H", [(1, 5), (2, 48)])  # 2x48x48x64: the helper's pass runs in the team
def test_a_16_bit_convolution_with_an_eager_relu_is_the_relu_of_its_rounded_result(lib, src, act, N, H):
    """The same call with and without the relu, then NumPy's relu on the bits: equal bit for bit,
    with random numbers, then with the special values in the bias of a zero input."""
    IC, OC = 16, 64
    rng = np.random.default_rng(H + act)
    W32 = rng.standard_normal((OC, IC, 3, 3)).astype(np.float32)
    err = _err()
    pc = lib.braze_pack_conv_typed(_p(W32), F32, src, OC, IC, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, err, ERRLEN)
    assert pc, err.value
    try:
        for X, b in ((_rounded(rng, (N, H, H, IC), src) * 4, rng.standard_normal(OC).astype(np.float32)),
                     (np.zeros((N, H, H, IC), NP[src]), np.resize(SPECIALS, OC))):
            plain, got = np.zeros((N, H, H, OC), NP[src]), np.zeros((N, H, H, OC), NP[src])
            for a, out in ((0, plain), (act, got)):
                assert lib.braze_conv2d(N, H, H, _p(X), pc, _p(b), None, a | types(src, src), H, H, _p(out), err,
                                        ERRLEN) == 0, err.value
            assert (plain < 0).any() and (got.view(np.uint16) == 0).any()
            _same_bits(got, _eager_relu(plain, act))
    finally:
        lib.braze_free_packed_conv(pc)
