"""braze_dnnl_conv_bwd.c: a convolution's input and weight gradients (oneDNN's backward
primitives, reordered into and out of the layouts they pick), against torch autograd in float64,
in both activation layouts, at several batch and image sizes, an empty batch, and from threads."""

from __future__ import annotations

import numpy as np
import pytest

from braze.extern import onednn

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)

torch = pytest.importorskip("torch")

from test_onednn import CONV_CASES, ERRLEN, _close, _err, _p  # noqa: E402
from test_onednn_runtime_weights import _geometry  # noqa: E402


@pytest.fixture(scope="module")
def lib():
    return onednn.load_standalone()


def _want(case, X, Wt, dY):
    """(dX, dW) by torch autograd in float64, the padding applied as the conv's (asymmetric too)."""
    *_, s, p, d, g = case
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    x = torch.from_numpy(X).double().requires_grad_()
    w = torch.from_numpy(Wt).double().requires_grad_()
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (pl, pr, pt, pb)), w, stride=s, dilation=d, groups=g)
    y.backward(torch.from_numpy(dY).double())
    return x.grad.numpy(), w.grad.numpy()


def _out_shape(case, N, H, W):
    _, _, OC, _, _, k, s, p, d, _ = case
    pt, pl, pb, pr = (p,) * 4 if isinstance(p, int) else p
    return N, OC, (H + pt + pb - d * (k - 1) - 1) // s + 1, (W + pl + pr - d * (k - 1) - 1) // s + 1


def _grads(lib, P, layout, X, Wt, dY):
    to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout else (lambda a: a)
    back = (lambda a: a.transpose(0, 3, 1, 2)) if layout else (lambda a: a)
    N, _, H, W = X.shape
    OH, OW = dY.shape[2:]
    Xl, dYl = to(X), to(dY)
    dX = np.full(Xl.shape, np.nan, np.float32)
    dW = np.full(Wt.shape, np.nan, np.float32)
    err = _err()
    assert lib.braze_conv2d_bwd_data(N, H, W, _p(dYl), P, _p(Wt), OH, OW, _p(dX), err, ERRLEN) == 0, err.value
    assert lib.braze_conv2d_bwd_weights(N, H, W, _p(Xl), _p(dYl), P, OH, OW, _p(dW), err, ERRLEN) == 0, err.value
    return back(dX), dW


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_gradients(lib, case, layout):
    N, IC, OC, H, W, k, s, p, d, g = case
    rng = np.random.default_rng(H * W + OC)
    Wt = rng.standard_normal((OC, IC // g, k, k), dtype=np.float32)
    P = _geometry(lib, case, layout)
    try:
        for n, h, w in ((N, H, W), (N + 2, H + 3, W + 1), (1, H + 1, W), (N, H, W)):  # the last: a cached primitive
            X = rng.standard_normal((n, IC, h, w), dtype=np.float32)
            dY = rng.standard_normal(_out_shape(case, n, h, w), dtype=np.float32)
            dX, dW = _grads(lib, P, layout, X, Wt, dY)
            want_x, want_w = _want(case, X, Wt, dY)
            _close(dX, want_x)
            _close(dW, want_w)
        # an empty batch: nothing to write for the input, a zero weight gradient
        dW = np.full(Wt.shape, np.nan, np.float32)
        OH, OW = _out_shape(case, 0, H, W)[2:]
        err = _err()
        assert lib.braze_conv2d_bwd_weights(0, H, W, None, None, P, OH, OW, _p(dW), err, ERRLEN) == 0, err.value
        assert np.array_equal(dW, np.zeros_like(dW))
        assert lib.braze_conv2d_bwd_data(0, H, W, None, P, _p(Wt), OH, OW, None, err, ERRLEN) == 0, err.value
    finally:
        lib.braze_free_packed_conv(P)


def test_conv_gradients_from_many_threads(lib):
    """Concurrent calls at different shapes share the cached primitives and give each call's own
    answer (per-thread buffers for the re-laid-out operands)."""
    from braze.testing import run_threads
    case = (2, 16, 24, 12, 12, 3, 1, 1, 1, 1)
    rng = np.random.default_rng(3)
    Wt = rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
    P = _geometry(lib, case, 0)
    inputs = []
    for t in range(8):
        n, h = 1 + t % 3, 8 + t % 4
        X = rng.standard_normal((n, 16, h, h), dtype=np.float32)
        dY = rng.standard_normal(_out_shape(case, n, h, h), dtype=np.float32)
        inputs.append((X, dY, _want(case, X, Wt, dY)))
    try:
        def work(t):
            X, dY, (want_x, want_w) = inputs[t]
            for _ in range(5):
                dX, dW = _grads(lib, P, 0, X, Wt, dY)
                _close(dX, want_x)
                _close(dW, want_w)
        assert not run_threads(work, 8)
    finally:
        lib.braze_free_packed_conv(P)


def test_conv_gradient_errors_name_the_call(lib):
    case = (1, 4, 8, 9, 9, 3, 1, 1, 1, 1)
    Wt = np.ones((8, 4, 3, 3), np.float32)
    err = _err()
    packed = lib.braze_pack_conv_weights(_p(Wt), 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, err, ERRLEN)
    assert packed, err.value
    P = _geometry(lib, case, 0)
    X = np.ones((1, 4, 9, 9), np.float32)
    dY = np.ones((1, 8, 9, 9), np.float32)
    dX = np.empty_like(X)
    try:
        assert lib.braze_conv2d_bwd_data(1, 9, 9, _p(dY), packed, _p(Wt), 9, 9, _p(dX), err, ERRLEN) != 0
        assert b"braze_conv2d_bwd_data" in err.value and b"braze_conv_geometry" in err.value
        assert lib.braze_conv2d_bwd_data(1, 9, 9, _p(dY), P, _p(Wt), 8, 9, _p(dX), err, ERRLEN) != 0
        assert b"expected OH=9" in err.value
    finally:
        lib.braze_free_packed_conv(packed)
        lib.braze_free_packed_conv(P)


@pytest.mark.parametrize("layout", [0, 1])
def test_the_gradients_of_an_empty_convolution_output_are_zeros(lib, layout):
    """A dilated kernel wider than the padded input: the forward output has no columns, so both
    gradients are zeros (oneDNN takes no zero-sized dims; fuzz seed 5532 raised here)."""
    case = (4, 3, 4, 5, 2, 3, 1, 1, 2, 1)
    P = _geometry(lib, case, layout)
    try:
        assert _out_shape(case, 4, 5, 2)[2:] == (3, 0)
        dX = np.full((4, 5, 2, 3) if layout else (4, 3, 5, 2), np.nan, np.float32)
        dW = np.full((4, 3, 3, 3), np.nan, np.float32)
        X, dY, Wt = np.ones(dX.shape, np.float32), np.ones((1,), np.float32), np.ones(dW.shape, np.float32)
        err = _err()
        assert lib.braze_conv2d_bwd_data(4, 5, 2, _p(dY), P, _p(Wt), 3, 0, _p(dX), err, ERRLEN) == 0, err.value
        assert lib.braze_conv2d_bwd_weights(4, 5, 2, _p(X), _p(dY), P, 3, 0, _p(dW), err, ERRLEN) == 0, err.value
        assert not dX.any() and not dW.any()
        assert lib.braze_conv2d_bwd_data(4, 5, 2, _p(dY), P, _p(Wt), 3, 1, _p(dX), err, ERRLEN) != 0  # 1 is not 0
    finally:
        lib.braze_free_packed_conv(P)
