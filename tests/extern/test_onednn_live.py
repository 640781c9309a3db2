"""Live weights checked from the kernel's page tables (braze_dnnl_wtrack.c) and GEMM sites that keep
them packed while unwritten (braze_dnnl_live.c): every kind of write is seen, results always equal
NumPy's for the bytes the weight has at the call, and a weight that trains stops being tracked."""

from __future__ import annotations

import ctypes as C
import mmap
import os
import threading

import numpy as np
import pytest

from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

from braze.codegen.isa import host_isa  # noqa: E402
from test_onednn import ERRLEN, _close, _err, _p  # noqa: E402

# GEMM sites keep packed copies in AVX-512 builds only (braze_dnnl_live.c: AVX2 kernels' bits differ)
COPIES = "avx512f" in host_isa().features


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


@pytest.fixture
def tracking(lib):
    """Tracking on, with no ranges from earlier tests (turning it off forgets them); the test is
    about it, so a kernel without it is a skip that names why."""
    lib.braze_dnnl_set_write_tracking(0)
    lib.braze_dnnl_set_write_tracking(1)
    if not lib.braze_dnnl_write_tracking(None, None, None):
        pytest.skip("this kernel cannot track writes (needs Linux >= 6.7 with userfaultfd allowed)")
    yield lib
    lib.braze_dnnl_set_write_tracking(1)


def _gens(lib, *arrays):
    n = len(arrays)
    ptrs = (C.c_void_p * n)(*[a.ctypes.data for a in arrays])
    sizes = (C.c_size_t * n)(*[a.nbytes for a in arrays])
    gens = (C.c_uint64 * n)()
    tracked = lib.braze_live_check(n, ptrs, sizes, gens)
    assert tracked == sum(g != 0 for g in gens)
    return list(gens)


def _armed(lib, W):
    """W's generation once tracked: a range is armed at its second check (the first may be
    memory that is new at every call, and gives WT_PENDING, 1)."""
    assert _gens(lib, W) == [1]
    g = _gens(lib, W)[0]
    assert g != 0
    return g


def _weight(shape=(256, 300), seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def test_a_weight_unwritten_keeps_its_generation(tracking):
    W = _weight()
    g = _armed(tracking, W)
    assert _gens(tracking, W) == [g] and _gens(tracking, W) == [g]
    _ = W.sum()  # reading writes nothing
    assert _gens(tracking, W) == [g]


WRITES = {
    "one element": lambda W: W.reshape(-1).__setitem__(W.size // 2, 3.0),
    "numpy view": lambda W: np.multiply(W, 0.5, out=W),
    "kernel (readinto)": lambda W: _read_into(W),
    "from another thread": lambda W: _in_thread(lambda: W.reshape(-1).__setitem__(W.size // 3, -1.0)),
}


def _read_into(W):
    r, w = os.pipe()
    os.write(w, b"\x01" * 64)
    os.close(w)
    view = memoryview(W.reshape(-1).view(np.uint8))[W.nbytes // 2:W.nbytes // 2 + 64]
    with os.fdopen(r, "rb", buffering=0) as f:
        assert f.readinto(view) == 64


def _in_thread(fn):
    t = threading.Thread(target=fn)
    t.start()
    t.join()


@pytest.mark.parametrize("write", list(WRITES))
def test_every_kind_of_write_moves_the_generation(tracking, write):
    W = _weight()
    g = _armed(tracking, W)
    WRITES[write](W)
    g2 = _gens(tracking, W)[0]
    assert g2 not in (0, g)
    assert _gens(tracking, W) == [g2]


_libc = C.CDLL(None, use_errno=True)
_libc.mmap.restype = C.c_void_p
_libc.mmap.argtypes = [C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_int, C.c_long]
_libc.munmap.argtypes = [C.c_void_p, C.c_size_t]
MAP_FIXED = 0x10


def _mapped(n, at=None):
    """n bytes of fresh private memory as float32 (at: in place of the mapping there)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (MAP_FIXED if at else 0)
    addr = _libc.mmap(at, n, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    assert addr not in (None, C.c_void_p(-1).value), os.strerror(C.get_errno())
    return np.ctypeslib.as_array((C.c_float * (n // 4)).from_address(addr))


def test_a_weight_on_memory_mapped_again_is_armed_again(tracking):
    """Memory unmapped and mapped anew at the same address (a freed weight, a new one there)."""
    n = 1 << 20
    W = _mapped(n)
    W[:] = 1.0
    g = _armed(tracking, W)
    W2 = _mapped(n, at=W.ctypes.data)
    assert W2.ctypes.data == W.ctypes.data
    assert W[0] == 0.0  # new memory, and not a single write to it
    g2 = _gens(tracking, W)[0]
    assert g2 not in (0, g)
    _libc.munmap(W.ctypes.data, n)


def test_overlapping_views_share_one_range(tracking):
    """Two weights that are views of one buffer, overlapping (a fused weight split two ways): one
    range holds both, and a write to either moves both generations."""
    W = _weight((900, 300))
    v1, v2 = W[:600], W[300:]
    assert _gens(tracking, v1, v2) == [1, 1]
    g1, g2 = _gens(tracking, v1, v2)
    assert g1 == g2 != 0 and _gens(tracking, v1, v2) == [g1, g2]
    W[800, 3] = 7.0  # only v2's rows
    h1, h2 = _gens(tracking, v1, v2)
    assert h1 == h2 and h1 not in (0, g1)


def test_shared_memory_is_not_tracked(tracking):
    """Another process could write it: those pages are checked by their bytes, never by tracking."""
    m = mmap.mmap(-1, 1 << 20)
    W = np.frombuffer(m, np.float32)
    W[:] = 2.0
    assert _gens(tracking, W) == [0] and _gens(tracking, W) == [0]  # from the first check on
    del W
    m.close()


def test_small_weights_are_left_to_the_caller(tracking):
    assert _gens(tracking, _weight((64, 64))) == [0]  # 16 KB: hashing it costs less than a scan


def test_a_weight_written_at_every_call_stops_being_tracked(tracking):
    """Training writes every weight at every step: after 3 such checks, no fault per page per step."""
    n = 1 << 20
    W = _mapped(n)  # fresh memory: no range with a history of writes
    W[:] = 1.0
    gens = [_armed(tracking, W)]
    for i in range(4):
        W[n // 8 + i] += 1.0
        gens.append(_gens(tracking, W)[0])
    assert 0 not in gens[:3] and len(set(gens[:3])) == 3 and gens[3:] == [0, 0], gens
    _libc.munmap(W.ctypes.data, n)


def test_a_weight_a_training_step_writes_stops_being_tracked(tracking):
    """A step checks its weights twice (the forward, the backward) and only the first finds the
    optimizer's write: 3 written of the last 8 checks is a weight that trains."""
    n = 1 << 20
    W = _mapped(n)
    W[:] = 1.0
    gens = [_armed(tracking, W)]
    for step in range(4):
        W[n // 8 + step] += 1.0
        gens += [_gens(tracking, W)[0], _gens(tracking, W)[0]]
    assert 0 not in gens[:5] and gens[5:] == [0, 0, 0, 0], gens
    _libc.munmap(W.ctypes.data, n)


def test_a_weight_written_now_and_then_stays_tracked(tracking):
    """An inference server updating its weights every few calls keeps its packed copies."""
    W = _weight()
    g = _armed(tracking, W)
    for i in range(6):
        W[128, i] += 1.0
        for _ in range(4):
            g2 = _gens(tracking, W)[0]
            assert g2 != 0
        assert g2 != g
        g = g2


def test_a_forked_child_tracks_its_own_memory(tracking):
    """The parent's userfaultfd and pagemap file point at the parent: the child opens its own."""
    W = _weight()
    g = _armed(tracking, W)
    pid = os.fork()
    if pid == 0:  # the child: its own generation, then a write it must see
        code = 1
        try:
            _gens(tracking, W)
            g1 = _gens(tracking, W)[0]
            W[7, 7] = 5.0
            g2 = _gens(tracking, W)[0]
            code = 0 if g1 and g2 and g2 != g1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _gens(tracking, W) == [g]  # the child's write was to its own copy


def _site(lib, N, K, transposed):
    L = lib.braze_live_b_new(N, K, transposed, 0, _err(), ERRLEN)
    assert L
    return L


def _lw(lib, L, W, A, transposed, gen=None, act=0):
    M, K = A.shape
    N = W.shape[0] if transposed else W.shape[1]
    gen = _gens(lib, W)[0] if gen is None else gen
    out = np.full((M, N), np.nan, np.float32)
    err = _err()
    assert lib.braze_matmul_lw(L, gen, M, _p(A), _p(W), None, None, act, _p(out), err, ERRLEN) == 0, err.value
    return out


def _want(A, W, transposed):
    return A.astype(np.float64) @ (W.T if transposed else W).astype(np.float64)


def _packs(lib, L) -> int:
    lib.braze_live_b_packs.restype = C.c_int64
    return lib.braze_live_b_packs(L)


@pytest.mark.parametrize("transposed", [1, 0])
@pytest.mark.parametrize("M", [1, 7, 48, 100])
def test_matmul_lw_equals_numpy_across_writes(tracking, transposed, M):
    N, K = 200, 333
    W = _weight((N, K) if transposed else (K, N), seed=M)
    A = _weight((M, K), seed=M + 1)
    L = _site(tracking, N, K, transposed)
    try:
        for step in range(9):
            _close(_lw(tracking, L, W, A, transposed), _want(A, W, transposed))
            if step == 2:
                assert _packs(tracking, L) == COPIES  # armed and packed at the second call
            if step in (3, 6):
                W.reshape(-1)[W.size // 2] = 4.0  # a whole page inside
            if step == 5:
                W.reshape(-1)[0] = -4.0  # the first bytes: a partial page, checked by the site
        assert _packs(tracking, L) == 4 * COPIES  # and again after each of 3 writes
    finally:
        tracking.braze_live_b_free(L)


@pytest.mark.parametrize("transposed", [1, 0])
@pytest.mark.parametrize("N,K", [(200, 333), (768, 768), (130, 1024), (77, 3072), (70, 5000)])
def test_matmul_lw_gives_the_same_bits_before_and_after_its_copy(tracking, transposed, N, K):
    """A call's result never depends on whether an earlier call made a copy, nor on whether the
    weight is tracked now (a range let go and armed again): at every M and epilogue, a site
    computes in the packed kernel's arithmetic in a process that tracks writes."""
    rng = np.random.default_rng(N + K + transposed)
    W = rng.standard_normal((N, K) if transposed else (K, N), dtype=np.float32)
    cases = [(M, act, rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal(N, dtype=np.float32),
              rng.standard_normal((M, N), dtype=np.float32))
             for M in (1, 5, 16, 48, 49, 100) for act in (0, 2, 0x101)]

    def run(L, gen):
        outs = []
        for M, act, A, b, r in cases:
            out = np.empty((M, N), np.float32)
            err = _err()
            assert tracking.braze_matmul_lw(L, gen, M, _p(A), _p(W), _p(b), _p(r), act, _p(out), err, ERRLEN) == 0
            outs.append(out)
        return outs
    L = _site(tracking, N, K, transposed)
    try:
        untracked = run(L, 0)
        assert _gens(tracking, W) == [1]  # WT_PENDING: armed at the next check
        pending = run(L, 1)
        g = _gens(tracking, W)[0]
        assert g > 1
        before = run(L, g)  # the copy is made at its first call
        copied = run(L, g)
        assert _packs(tracking, L) == COPIES
        bad = [(M, act) for (M, act, *_), *outs in zip(cases, untracked, pending, before, copied)
               if not all(np.array_equal(o, outs[-1]) for o in outs)]
        assert bad == [], f"a copy changed the bits at (M, act) = {bad}"
    finally:
        tracking.braze_live_b_free(L)


def test_matmul_lw_serves_several_weights(tracking):
    """Model instances sharing a library: a copy for each, each call on its own weight's."""
    N, K = 128, 256
    Ws = [_weight((N, K), seed=s) for s in range(3)]
    A = _weight((5, K), seed=9)
    L = _site(tracking, N, K, 1)
    try:
        for _ in range(3):
            for W in Ws:
                _close(_lw(tracking, L, W, A, 1), _want(A, W, 1))
        assert _packs(tracking, L) == 3 * COPIES
    finally:
        tracking.braze_live_b_free(L)


def test_matmul_lw_untracked_reads_the_plain_weight(lib):
    """gen 0 (tracking off, or a weight it cannot follow): the weight's bytes at the call."""
    lib.braze_dnnl_set_write_tracking(0)
    try:
        W, A = _weight((96, 700)), _weight((3, 700), seed=1)
        assert _gens(lib, W) == [0]
        L = _site(lib, 96, 700, 1)
        for _ in range(3):
            _close(_lw(lib, L, W, A, 1), _want(A, W, 1))
            W *= -1.0
        assert _packs(lib, L) == 0
        lib.braze_live_b_free(L)
    finally:
        lib.braze_dnnl_set_write_tracking(1)


def test_matmul_lw_from_many_threads_between_writes(tracking):
    """Rounds of 4 threads calling one site at once; the weight changes between rounds."""
    N, K = 256, 512
    W = _weight((N, K))
    A = _weight((6, K), seed=3)
    L = _site(tracking, N, K, 1)
    failures = []
    try:
        for r in range(6):
            want = _want(A, W, 1)
            barrier = threading.Barrier(4)

            def work():
                barrier.wait()
                for _ in range(3):
                    got = _lw(tracking, L, W, A, 1)
                    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                        failures.append(r)
            ts = [threading.Thread(target=work) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            assert not any(t.is_alive() for t in ts)
            W[r * 30 % N, :] += 1.0
        assert failures == []
    finally:
        tracking.braze_live_b_free(L)


@pytest.mark.parametrize("k,s,pad", [(1, 1, 0), (3, 2, 1)], ids=["1x1", "3x3-stride2"])
def test_small_conv_keeps_a_copy_and_its_bits(tracking, k, s, pad):
    """An NHWC conv of few output pixels runs as a GEMM site (braze_dnnl_conv.c, conv_gemm): on a
    tracked weight it keeps a packed copy, with the bits of the calls before the copy, and sees
    every write (ResNet-50's last stage at 5x5 pixels: 1.4x the frozen convolutions without it)."""
    torch = pytest.importorskip("torch")
    from test_onednn import _conv_ref, _epilogue
    from test_onednn_runtime_weights import _geometry
    IC, OC, H = 96, 128, 6  # a weight of 48 KB (1x1) or 432 KB (3x3): untracked, tracked
    case = (1, IC, OC, H, H, k, s, pad, 1, 1)
    rng = np.random.default_rng(k)
    X = rng.standard_normal((1, IC, H, H), dtype=np.float32)
    Xl = np.ascontiguousarray(X.transpose(0, 2, 3, 1))
    Wt = rng.standard_normal((OC, IC, k, k), dtype=np.float32)
    b = rng.standard_normal(OC, dtype=np.float32)
    OH = (H + 2 * pad - k) // s + 1
    P = _geometry(tracking, case, 1)

    def call():
        out = np.empty((1, OH, OH, OC), np.float32)
        err = _err()
        assert tracking.braze_conv2d_w(1, H, H, _p(Xl), P, _p(Wt), _p(b), None, 2, OH, OH, _p(out), err,
                                       ERRLEN) == 0, err.value
        return out
    try:
        assert OH * OH <= tracking.braze_dnnl_conv_gemm_m()
        for _ in range(2):
            first = [call() for _ in range(4)]  # pending, armed + copied, on the copy
            assert all(np.array_equal(o, first[0]) for o in first), "a copy changed the bits"
            want = _epilogue(_conv_ref(torch, X, Wt, b, s, pad, 1, 1), 2, None).transpose(0, 2, 3, 1)
            _close(first[0], want)
            Wt[OC // 2] *= -1.5  # a write: the copy is stale
        assert tracking.braze_conv_live_packs(P) == (2 * COPIES if Wt.nbytes >= 65536 else 0)
    finally:
        tracking.braze_free_packed_conv(P)
