"""conv2d and pools against torch, with symbolic batch and spatial dims."""

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import braze
import braze.reference as R
from braze.errors import InputError, ShapeError
from braze.extern import onednn
from braze.ir import sym as S
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, assert_close_scaled, build, rand

N, H, W, C = Sym("n"), Sym("H"), Sym("W"), Sym("c")
RNG = np.random.default_rng(1)


CONV_CASES = [
    # cin, cout, k, stride, pad(t,l,b,r), dilation, groups, bias
    (3, 8, 3, 1, (1, 1, 1, 1), 1, 1, True),
    (3, 8, 3, 2, (1, 1, 1, 1), 1, 1, False),
    (4, 6, 1, 1, (0, 0, 0, 0), 1, 1, True),
    (4, 6, 1, 2, (0, 0, 0, 0), 1, 2, False),
    (3, 5, 7, 2, (3, 3, 3, 3), 1, 1, True),
    (8, 8, 3, 1, (2, 2, 2, 2), 2, 8, True),  # depthwise, dilated
    (6, 9, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 3, True),  # asymmetric everything
    (2, 4, 5, 3, (0, 0, 0, 0), 1, 1, False),
]


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,groups,bias", CONV_CASES)
def test_conv2d(cin, cout, k, stride, pad, dil, groups, bias):
    kh, kw = _pair(k)
    sh, sw = _pair(stride)
    dh, dw = _pair(dil)
    w = rand(RNG, (cout, cin // groups, kh, kw))
    bv = rand(RNG, (cout,))

    def fn(b, x):
        ins = [x, b.constant(w)] + ([b.constant(bv)] if bias else [])
        return b.conv2d(*ins, stride=(sh, sw), padding=pad, dilation=(dh, dw), groups=groups)

    m, out = build([tensor("f32", N, cin, H, W)], fn)
    pt, pl, pb, pr = pad
    assert out.type.shape == (N, cout, (H + pt + pb - dh * (kh - 1) - 1) // sh + 1,
                              (W + pl + pr - dw * (kw - 1) - 1) // sw + 1)
    for n, h, wd in ((1, 9, 9), (2, 16, 11), (1, 33, 20)):
        x = rand(RNG, (n, cin, h, wd))
        xt = F.pad(torch.from_numpy(x), (pl, pr, pt, pb))
        ref = F.conv2d(xt, torch.from_numpy(w), torch.from_numpy(bv) if bias else None, (sh, sw), 0, (dh, dw),
                       groups)
        assert_close_scaled(R.run(m, x), ref.numpy())


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("cin,cout,k,stride,pad,dil,groups,bias", CONV_CASES)
def test_conv2d_gradients(cin, cout, k, stride, pad, dil, groups, bias, layout):
    """conv2d_backward_input / _weight against torch autograd: the NumPy reference, and the native
    build (oneDNN's backward convolutions) with the batch and the image size symbolic. Layout nhwc
    (the layout pass's): grad, x and the input's gradient channels-last, which oneDNN reads as they
    are (the input gradient reads x for its shape alone)."""
    kh, kw = _pair(k)
    (sh, sw), (dh, dw) = _pair(stride), _pair(dil)
    pt, pl, pb, pr = pad
    if (pt, pl) != (pb, pr):
        pytest.skip("torch's convolution_backward pads symmetrically")
    attrs = {"stride": (sh, sw), "padding": pad, "dilation": (dh, dw), "groups": groups, "layout": layout}
    oh = (H + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (W + pl + pr - dw * (kw - 1) - 1) // sw + 1
    act = (lambda n, c, h, w: (n, h, w, c)) if layout == "nhwc" else (lambda n, c, h, w: (n, c, h, w))
    to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout == "nhwc" else (lambda a: a)
    wt = tensor("f32", cout, cin // groups, kh, kw)
    m, (dx, dw_) = build([tensor("f32", *act(N, cout, oh, ow)), tensor("f32", *act(N, cin, H, W)), wt],
                         lambda b, g, x, w: (b.conv2d_backward_input(g, x, w, **attrs),
                                             b.conv2d_backward_weight(g, x, w, **attrs)))
    assert dx.type.shape == act(N, cin, H, W) and dw_.type.shape == wt.shape
    native = braze.compile(m) if onednn.available() else None
    for n, h, wd in ((1, 9, 9), (2, 16, 11), (3, 13, 20)):
        x = torch.from_numpy(rand(RNG, (n, cin, h, wd))).requires_grad_()
        w = torch.from_numpy(rand(RNG, (cout, cin // groups, kh, kw))).requires_grad_()
        y = F.conv2d(x, w, None, (sh, sw), (pt, pl), (dh, dw), groups)
        g = torch.from_numpy(rand(RNG, tuple(y.shape)))
        y.backward(g)
        args = (to(g.numpy()), to(x.detach().numpy()), w.detach().numpy())
        for got in [R.run(m, *args)] + ([native(*args)] if native else []):
            assert_close_scaled(got[0], to(x.grad.numpy()), what="input gradient")
            assert_close_scaled(got[1], w.grad.numpy(), what="weight gradient")


CONV_T_CASES = [
    # cin, cout, k, stride, pad (symmetric), output_padding, dilation, groups
    (4, 6, 3, 1, 0, 0, 1, 1),
    (4, 6, 3, 2, 1, 1, 1, 1),
    (6, 4, (3, 2), (1, 2), (0, 1), (0, 1), (2, 1), 2),
    (8, 8, 3, 3, 1, (2, 0), (1, 3), 8),  # depthwise; output_padding up to stride - 1
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("cin,cout,k,stride,pad,opad,dil,groups", CONV_T_CASES)
def test_conv_transpose2d(cin, cout, k, stride, pad, opad, dil, groups, layout):
    """conv_transpose2d against torch: the reference, and the native build (oneDNN's backward-data call)
    with the batch and the image size symbolic; sizes where the padding leaves an empty output included."""
    kh, kw = _pair(k)
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = _pair(stride), _pair(pad), _pair(opad), _pair(dil)
    attrs = {"stride": (sh, sw), "padding": (ph, pw, ph, pw), "output_padding": (oph, opw), "dilation": (dh, dw),
             "groups": groups, "layout": layout}
    act = (lambda n, c, h, w: (n, h, w, c)) if layout == "nhwc" else (lambda n, c, h, w: (n, c, h, w))
    to = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))) if layout == "nhwc" else (lambda a: a)
    w = rand(RNG, (cin, cout // groups, kh, kw))
    m, y = build([tensor("f32", *act(N, cin, H, W))], lambda b, x: b.op("conv_transpose2d", [x, b.constant(w)],
                                                                          **attrs))
    assert y.type.shape == act(N, cout, sh * (H - 1) + dh * (kh - 1) + 1 + oph - 2 * ph,
                               sw * (W - 1) + dw * (kw - 1) + 1 + opw - 2 * pw)
    native = braze.compile(m) if onednn.available() else None
    for n, h, wd in ((1, 1, 1), (2, 5, 7), (3, 9, 4)):
        x = rand(RNG, (n, cin, h, wd))
        want = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), None, (sh, sw), (ph, pw), (oph, opw),
                                  groups, (dh, dw)).numpy()
        for got in [R.run(m, to(x))] + ([native(to(x))] if native else []):
            assert got.shape == to(want).shape
            assert_close_scaled(got, to(want), what=f"conv_transpose2d at {n}x{h}x{wd}")


def test_conv_transpose2d_errors():
    with pytest.raises(ShapeError, match="input has 3 channels"):
        build([tensor("f32", N, 3, H, W)], lambda b, x: b.op("conv_transpose2d", [x, b.constant(rand(RNG, (4, 2, 3, 3)))]))
    with pytest.raises(ShapeError, match="output_padding"):
        build([tensor("f32", N, 4, H, W)], lambda b, x: b.op("conv_transpose2d", [x, b.constant(rand(RNG, (4, 2, 3, 3)))],
                                                            stride=(2, 2), output_padding=(2, 0)))
    with pytest.raises(ShapeError, match="float32"):
        build([tensor("f16", N, 4, H, W)], lambda b, x: b.op("conv_transpose2d", [x, b.constant(rand(RNG, (4, 2, 3, 3)))]))
    # padding that eats more than a small input gives: H's range starts where the output is empty, not negative
    m, y = build([tensor("f32", N, 2, H, W)], lambda b, x: b.op("conv_transpose2d", [x, b.constant(rand(RNG, (2, 2, 1, 1)))],
                                                               padding=(1, 0, 1, 0)))
    assert m.symbols["H"].lo == 2
    cm = braze.compile(m)
    assert cm(rand(RNG, (1, 2, 2, 3))).shape == (1, 2, 0, 3)
    with pytest.raises(InputError, match=r"H = 1 is outside its range \[2, inf\]"):
        cm(rand(RNG, (1, 2, 1, 3)))


def test_conv2d_gradient_errors():
    with pytest.raises(ShapeError, match="output shape"):
        build([tensor("f32", N, 4, H, W), tensor("f32", N, 3, H, W), tensor("f32", 8, 3, 3, 3)],
              lambda b, g, x, w: b.conv2d_backward_input(g, x, w, padding=(1, 1, 1, 1)))
    with pytest.raises(ShapeError, match="float32"):
        build([tensor("f16", N, 8, H, W), tensor("f16", N, 3, H, W), tensor("f16", 8, 3, 3, 3)],
              lambda b, g, x, w: b.conv2d_backward_weight(g, x, w, padding=(1, 1, 1, 1)))


def test_conv2d_output_expr():
    w = rand(RNG, (8, 3, 3, 3))
    m, out = build([tensor("f32", N, 3, H, H)],
                   lambda b, x: b.conv2d(x, b.constant(w), stride=(2, 2), padding=(1, 1, 1, 1)))
    assert out.type.shape[2] == (H - 1) // 2 + 1
    assert out.type.shape[2] == S.add(S.floordiv(S.add(H, -1), 2), 1)
    m, out = build([tensor("f32", N, 3, H, H)], lambda b, x: b.conv2d(x, b.constant(w), padding=(1, 1, 1, 1)))
    assert out.type.shape[2:] == (H, H)


def test_conv2d_float64_and_float16():
    w = rand(RNG, (4, 2, 3, 3), "float64")
    m, _ = build([tensor("f64", N, 2, H, W)], lambda b, x: b.conv2d(x, b.constant(w), padding=(1, 1, 1, 1)))
    x = rand(RNG, (2, 2, 7, 5), "float64")
    assert_close_scaled(R.run(m, x), F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy(), "float64")
    w16 = rand(RNG, (4, 2, 3, 3), "float16")
    m, _ = build([tensor("f16", N, 2, H, W)], lambda b, x: b.conv2d(x, b.constant(w16)))
    x = rand(RNG, (2, 2, 7, 5), "float16")
    got = R.run(m, x)
    assert got.dtype == np.float16
    ref = F.conv2d(torch.from_numpy(x).float(), torch.from_numpy(w16).float()).half().numpy()
    assert_close_scaled(got, ref, "float16")


def test_conv2d_symbolic_channels():
    w = rand(RNG, (4, 3, 1, 1))
    m, out = build([tensor("f32", N, C, H, W)], lambda b, x: b.conv2d(x, b.constant(w)))
    assert out.type.shape == (N, 4, H, W)
    x = rand(RNG, (1, 3, 4, 4))
    assert_close_scaled(R.run(m, x), F.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy())
    with pytest.raises(InputError):
        R.run(m, rand(RNG, (1, 5, 4, 4)))


def test_conv2d_errors():
    w = rand(RNG, (8, 3, 3, 3))
    with pytest.raises(ShapeError, match="channels"):
        build([tensor("f32", N, 4, H, W)], lambda b, x: b.conv2d(x, b.constant(w)))
    with pytest.raises(ShapeError, match="output height"):
        build([tensor("f32", N, 3, 2, 8)], lambda b, x: b.conv2d(x, b.constant(w)))
    with pytest.raises(ShapeError, match="divisible by groups"):
        build([tensor("f32", N, 6, H, W)], lambda b, x: b.conv2d(x, b.constant(rand(RNG, (5, 3, 3, 3))), groups=2))
    with pytest.raises(ShapeError, match="NCHW"):
        build([tensor("f32", 3, H)], lambda b, x: b.conv2d(x, b.constant(w)))
    with pytest.raises(ShapeError, match="bias"):
        build([tensor("f32", N, 3, H, W)], lambda b, x: b.conv2d(x, b.constant(w), b.constant(rand(RNG, (7,)))))


def test_conv2d_resnet_stem_speed():
    import time
    w1 = rand(RNG, (64, 3, 7, 7))
    w2 = rand(RNG, (64, 64, 3, 3))

    def fn(b, x):
        y = b.conv2d(x, b.constant(w1), stride=(2, 2), padding=(3, 3, 3, 3))
        y = b.max_pool2d(y, kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))
        for _ in range(4):
            y = b.conv2d(y, b.constant(w2), padding=(1, 1, 1, 1))
        return y

    m, out = build([tensor("f32", N, 3, H, W)], fn)
    x = rand(RNG, (2, 3, 64, 64))
    t = time.perf_counter()
    R.run(m, x)
    assert time.perf_counter() - t < 2.0


POOL_CASES = [
    # kernel, stride, pad, dilation, ceil_mode
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((2, 3), (1, 2), (1, 0, 1, 0), (1, 1), True),
    ((3, 3), (3, 3), (1, 1, 1, 1), (2, 2), True),
    ((1, 1), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((3, 3), (3, 3), (1, 1, 1, 1), (1, 1), True),  # windows that tile both dims, padded, ceil mode
    ((2, 3), (2, 2), (0, 1, 0, 1), (1, 1), False),  # windows that tile the rows only
    # no padding, floor mode: every window inside the input (no bounds tests, no clamps)
    ((3, 3), (2, 2), (0, 0, 0, 0), (2, 2), False),
    ((3, 2), (1, 3), (0, 0, 0, 0), (1, 1), False),
]


@pytest.mark.parametrize("kernel,stride,pad,dil,ceil_mode", POOL_CASES)
def test_max_pool2d(kernel, stride, pad, dil, ceil_mode):
    m, out = build([tensor("f32", N, C, H, W)],
                   lambda b, x: b.max_pool2d(x, kernel=kernel, stride=stride, padding=pad, dilation=dil,
                                             ceil_mode=ceil_mode))
    assert out.type.shape[:2] == (N, C)
    assert H in S.free_syms(out.type.shape[2]) or out.type.shape[2] == H
    for n, c, h, w in ((1, 1, 7, 7), (2, 3, 8, 9), (1, 2, 15, 6), (1, 1, 32, 31)):
        x = rand(RNG, (n, c, h, w))
        ref = F.max_pool2d(torch.from_numpy(x), kernel, stride, (pad[0], pad[1]), dil, ceil_mode)
        assert_close(R.run(m, x), ref.numpy())


def _pool_input(shape, seed):
    """Random numbers with ties (zeros, as after a relu), -inf rows and a NaN: where PyTorch's
    choice of each window's winner matters."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(shape) < 0.3, 0.0, rng.standard_normal(shape)).astype(np.float32)
    x[0, 0, 1, :] = -np.inf
    x[0, -1, 0, :2] = np.nan
    x[-1, 0, -1, -1] = np.nan
    return x


@pytest.mark.parametrize("kernel,stride,pad,dil,ceil_mode", POOL_CASES)
def test_max_pool2d_indices_and_backward(kernel, stride, pad, dil, ceil_mode):
    """The indices PyTorch saves for the backward, and the input's gradient from them, exactly as
    PyTorch's: reference and native, symbolic batch, channels and image."""
    attrs = {"kernel": kernel, "stride": stride, "padding": pad, "dilation": dil, "ceil_mode": ceil_mode}
    m, out = build([tensor("f32", N, C, H, W)], lambda b, x: b.max_pool2d_indices(x, **attrs))
    oh, ow = out.type.shape[2:]
    mb, _ = build([tensor("f32", N, C, oh, ow), tensor("f32", N, C, H, W), tensor("i64", N, C, oh, ow)],
                  lambda b, g, x, i: b.max_pool2d_backward(g, x, i, **attrs))
    native, native_b = braze.compile(m), braze.compile(mb)
    for n, c, h, w in ((1, 1, 7, 7), (2, 3, 8, 9), (1, 2, 15, 6), (3, 1, 32, 31)):
        x = _pool_input((n, c, h, w), h * w)
        _, want = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), kernel, stride, pad[:2], dil, ceil_mode)
        for got in (R.run(m, x), native(x)):
            np.testing.assert_array_equal(got, want.numpy())
        g = torch.from_numpy(rand(RNG, tuple(want.shape)))
        want_g = torch.ops.aten.max_pool2d_with_indices_backward(g, torch.from_numpy(x), kernel, stride, pad[:2], dil,
                                                                ceil_mode, want)
        args = (g.numpy(), x, want.numpy())
        # a number chosen by overlapping windows sums their gradients: in another order (1 ulp)
        for got in (R.run(mb, *args), native_b(*args)):
            assert_close(got, want_g.numpy())


@pytest.mark.parametrize("kernel,stride,pad,dil,ceil_mode", POOL_CASES[:3])
def test_max_pool2d_indices_and_backward_in_nhwc(kernel, stride, pad, dil, ceil_mode):
    """layout nhwc (the layout pass's): the activations channels-last (the backward's x too, whose
    shape alone it reads), the same plane positions."""
    attrs = {"kernel": kernel, "stride": stride, "padding": pad, "dilation": dil, "ceil_mode": ceil_mode,
             "layout": "nhwc"}
    m, out = build([tensor("f32", N, H, W, C)], lambda b, x: b.max_pool2d_indices(x, **attrs))
    oh, ow = out.type.shape[1:3]
    mb, _ = build([tensor("f32", N, oh, ow, C), tensor("f32", N, H, W, C), tensor("i64", N, oh, ow, C)],
                  lambda b, g, x, i: b.max_pool2d_backward(g, x, i, **attrs))
    native, native_b = braze.compile(m), braze.compile(mb)
    nhwc = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1)))
    for n, c, h, w in ((1, 1, 7, 7), (2, 17, 8, 9), (3, 5, 15, 6)):
        x = _pool_input((n, c, h, w), h * w)
        _, want = torch.ops.aten.max_pool2d_with_indices(torch.from_numpy(x), kernel, stride, pad[:2], dil, ceil_mode)
        for got in (R.run(m, nhwc(x)), native(nhwc(x))):
            np.testing.assert_array_equal(got, nhwc(want.numpy()))
        g = torch.from_numpy(rand(RNG, tuple(want.shape)))
        want_g = torch.ops.aten.max_pool2d_with_indices_backward(g, torch.from_numpy(x), kernel, stride, pad[:2], dil,
                                                                ceil_mode, want)
        args = (nhwc(g.numpy()), nhwc(x), nhwc(want.numpy()))
        for got in (R.run(mb, *args), native_b(*args)):
            assert_close(got, nhwc(want_g.numpy()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_max_pool2d_backward_in_16_bits(dtype):
    """A 16-bit gradient sums the windows that chose one element in float32 and rounds once, as
    PyTorch's does."""
    attrs = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "ceil_mode": False}
    code = {"bfloat16": "bf16", "float16": "f16"}[dtype]
    oh, ow = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    mb, _ = build([tensor(code, N, C, oh, ow), tensor(code, N, C, H, W), tensor("i64", N, C, oh, ow)],
                  lambda b, g, x, i: b.max_pool2d_backward(g, x, i, **attrs))
    native = braze.compile(mb)
    tdt = getattr(torch, dtype)
    x = torch.from_numpy(_pool_input((2, 3, 11, 9), 5)).to(tdt)
    _, idx = torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
    g = torch.randn(tuple(idx.shape)).to(tdt)
    want = torch.ops.aten.max_pool2d_with_indices_backward(g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
    low = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    got = native(g.float().numpy().astype(low), x.float().numpy().astype(low), idx.numpy())
    assert_close(np.asarray(got, np.float32), want.float().numpy(), dtype)


def test_max_pool2d_int_and_default_stride():
    m, out = build([tensor("i64", N, C, H, W)], lambda b, x: b.max_pool2d(x, kernel=(2, 2)))
    assert out.type.shape == (N, C, H // 2, W // 2)
    x = RNG.integers(-100, 100, (2, 3, 9, 8))
    ref = F.max_pool2d(torch.from_numpy(x).double(), 2).long().numpy()
    np.testing.assert_array_equal(R.run(m, x), ref)


@pytest.mark.parametrize("kernel,stride,pad,_dil,ceil_mode", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(kernel, stride, pad, _dil, ceil_mode, count_include_pad):
    m, out = build([tensor("f32", N, C, H, W)],
                   lambda b, x: b.avg_pool2d(x, kernel=kernel, stride=stride, padding=pad, ceil_mode=ceil_mode,
                                             count_include_pad=count_include_pad))
    for n, c, h, w in ((1, 1, 7, 7), (2, 3, 8, 9), (1, 2, 15, 6)):
        x = rand(RNG, (n, c, h, w))
        ref = F.avg_pool2d(torch.from_numpy(x), kernel, stride, (pad[0], pad[1]), ceil_mode, count_include_pad)
        assert_close_scaled(R.run(m, x), ref.numpy())


def test_pool_ceil_symbolic_expr_matches_torch_everywhere():
    m, out = build([tensor("f32", 1, 1, H, H)],
                   lambda b, x: b.max_pool2d(x, kernel=(3, 3), stride=(2, 2), ceil_mode=True))
    e = out.type.shape[2]
    for h in range(3, 40):
        want = F.max_pool2d(torch.zeros(1, 1, h, h), 3, 2, ceil_mode=True).shape[2]
        assert S.evaluate(e, {"H": h}) == want


def test_pool_errors():
    with pytest.raises(ShapeError, match="output height"):
        build([tensor("f32", N, C, 2, 8)], lambda b, x: b.max_pool2d(x, kernel=(3, 3)))
    with pytest.raises(ShapeError, match="floating-point"):
        build([tensor("i64", N, C, H, W)], lambda b, x: b.avg_pool2d(x, kernel=(3, 3)))
    with pytest.raises(ShapeError):
        build([tensor("f32", N, C, H, W)], lambda b, x: b.max_pool2d(x, kernel=(3, 3), stride=(0, 1)))


@pytest.mark.parametrize("osize", [(1, 1), (2, 2), (3, 5), (7, 7)])
def test_adaptive_avg_pool2d(osize):
    m, out = build([tensor("f32", N, C, H, W)], lambda b, x: b.adaptive_avg_pool2d(x, output_size=osize))
    assert out.type.shape == (N, C) + osize
    for n, c, h, w in ((1, 1, 7, 7), (2, 3, 8, 9), (1, 2, 15, 6), (2, 4, 1, 1)):
        x = rand(RNG, (n, c, h, w))
        ref = F.adaptive_avg_pool2d(torch.from_numpy(x), osize)
        assert_close_scaled(R.run(m, x), ref.numpy())


def test_adaptive_avg_pool2d_keeps_each_bin_to_itself():
    # the reference summed bins as differences of a cumulative sum: a NaN or inf leaked into
    # every later bin, and small values next to huge ones vanished (found by braze/fuzz)
    m, _ = build([tensor("f32", 1, 1, 6, 6)], lambda b, x: b.adaptive_avg_pool2d(x, output_size=(3, 2)))
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32) * 1e-3
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 2, 4] = 3e38
    x[0, 0, 5, 1] = -np.inf
    ref = F.adaptive_avg_pool2d(torch.from_numpy(x).double(), (3, 2)).float().numpy()
    assert np.isnan(ref[0, 0, 0, 0]) and np.isneginf(ref[0, 0, 2, 0]) and np.isfinite(ref).sum() == 4
    assert_close(R.run(m, x), ref)
