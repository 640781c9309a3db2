"""Convolution and pooling over NCHW tensors (im2col references on NumPy)."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .common import promote
from .opdef import Attr, defop


# ---------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------


def _pair(ctx, name, v):
    v = tuple(v)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise ctx.error(f"{name} must have 2 values (h, w), got {list(v)}")
    return v


def is_pointwise_conv(n, w_shape) -> bool:
    """Whether conv2d node ``n`` is a product of its NHWC input by its weight (``w_shape``): a 1x1
    kernel, stride 1, no padding, one group (braze/tune may run it as a GEMM)."""
    a = n.attrs
    return (n.op == "conv2d" and a.get("layout") == "nhwc" and a.get("groups") == 1
            and tuple(a.get("stride", ())) == (1, 1) and tuple(a.get("dilation", ())) == (1, 1)
            and all(p == 0 for p in pads4(a.get("padding", (0,)))) and tuple(w_shape[2:]) == (1, 1))


def pads4(v) -> tuple:
    """(top, left, bottom, right) from a padding attr; (p,) and (h, w) are symmetric."""
    v = tuple(v)
    if len(v) == 1:
        return v * 4
    if len(v) == 2:
        return (v[0], v[1], v[0], v[1])
    return v


def _pads(ctx, v):
    v = pads4(v)
    if len(v) != 4:
        raise ctx.error(f"padding must be (top, left, bottom, right), got {list(v)}")
    if any(isinstance(p, int) and p < 0 for p in v):
        raise ctx.error(f"padding must be non-negative, got {list(v)}")
    return v


def _check_pos(ctx, name, v):
    if any(int(x) < 1 for x in v):
        raise ctx.error(f"{name} must be >= 1, got {list(v)}")


def _out_dim(ctx, n, k, s, p0, p1, d, ceil_mode, axis_name):
    """Output size of a sliding window (PyTorch's rule, incl. ceil_mode)."""
    span = d * (k - 1) + 1
    num = S.add(S.add(n, p0 + p1), -span)  # n + p0 + p1 - span
    out = S.add(S.floordiv(num, s), 1)
    if ceil_mode and s > 1:
        out = S.add(S.floordiv(S.add(num, s - 1), s), 1)
        # the last window must start inside the input or the leading padding
        out = S.smin(out, S.add(S.floordiv(S.add(n, p0 - 1), s), 1))
    if isinstance(out, int) and out < 1:
        raise ctx.error(f"output {axis_name} would be {out}: input {axis_name} {n} with padding ({p0}, {p1}) "
                        f"is smaller than the window ({span})",
                        hint="use a larger input or more padding")
    lo, hi = S.bounds(out)
    if hi < 1:
        raise ctx.error(f"output {axis_name} {out} is never >= 1")
    sym = ctx.constraints.simplify(n)
    if lo < 1 and isinstance(sym, S.Sym):
        # an input too small for one window is an input error, checked on every call (the
        # symbol's range starts where the first window fits, as torch.export would guard it)
        need = span - p0 - p1
        if need > sym.lo:
            s = ctx.constraints.symbols.get(sym.name, sym)
            if s.hi is not None and need > s.hi:
                raise ctx.error(f"input {axis_name} {sym} in [{s.lo}, {s.hi}] is never as large as the window ({span})")
            ctx.constraints.add_range(s, max(need, s.lo), s.hi)
            out = ctx.constraints.simplify(out)
    return out


def _windows(xp, kh, kw, sh, sw, dh, dw, oh, ow):
    """View [..., oh, ow, kh, kw] of the windows of xp (padded) over its last two axes."""
    v = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(-2, -1))
    return v[..., ::sh, ::sw, ::dh, ::dw][..., :oh, :ow, :, :]


def _acc_dtype(dt: np.dtype) -> np.dtype:
    if dt == np.float64:
        return dt
    return np.dtype(np.float32)


def _float_in(ctx, t, what="input"):
    if not t.dtype.is_float:
        raise ctx.error(f"needs a floating-point {what}, got {t}", hint="cast it to float32 first")


# ---------------------------------------------------------------------------
# conv2d
# ---------------------------------------------------------------------------


def _conv2d_infer(ctx, x: TensorType, w: TensorType, bias: TensorType | None = None, *, stride, padding,
                  dilation, groups, out_dtype=None):
    _float_in(ctx, x)
    _float_in(ctx, w, "weight")
    if x.rank not in (3, 4):
        raise ctx.error(f"input must be NCHW (rank 4) or CHW (rank 3), got {x}")
    if w.rank != 4:
        raise ctx.error(f"weight must be [out, in/groups, kh, kw], got {w}")
    stride, dilation = _pair(ctx, "stride", stride), _pair(ctx, "dilation", dilation)
    _check_pos(ctx, "stride", stride)
    _check_pos(ctx, "dilation", dilation)
    pt, pl, pb, pr = _pads(ctx, padding)
    if groups < 1:
        raise ctx.error(f"groups must be >= 1, got {groups}")
    c, h, wd = x.shape[-3:]
    o, cg, kh, kw = w.shape
    need = S.mul(cg, groups)
    eq = ctx.equal(c, need)
    if eq is False:
        raise ctx.error(f"input has {c} channels but weight {w} with groups={groups} expects {need}",
                        hint="weight dim 1 times groups must equal the input's channel dim")
    if eq is None:
        ctx.assume_equal(c, need, "input channels")
    if isinstance(o, int) and o % groups:
        raise ctx.error(f"output channels {o} are not divisible by groups={groups}")
    if bias is not None:
        if bias.rank != 1:
            raise ctx.error(f"bias must be 1-D [out], got {bias}")
        beq = ctx.equal(bias.shape[0], o)
        if beq is False:
            raise ctx.error(f"bias has {bias.shape[0]} elements but there are {o} output channels")
        if beq is None:
            ctx.assume_equal(bias.shape[0], o, "bias size")
    oh = _out_dim(ctx, h, kh, stride[0], pt, pb, dilation[0], False, "height")
    ow = _out_dim(ctx, wd, kw, stride[1], pl, pr, dilation[1], False, "width")
    dts = [x.dtype, w.dtype] + ([bias.dtype] if bias is not None else [])
    if out_dtype is not None and not out_dtype.is_float:
        raise ctx.error(f"out_dtype must be a float dtype, got {out_dtype.name}")
    return TensorType(out_dtype or promote(*dts), x.shape[:-3] + (o, oh, ow))


def conv2d_numpy(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, out_dtype=None):
    """conv2d on NumPy arrays via im2col + one (grouped) matmul; the result in out_dtype (a numpy
    dtype; default: the operands' promoted dtype), rounded once from the accumulator."""
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    in_dt = promote(*(DType.from_numpy(a.dtype) for a in (x, w, bias) if a is not None)).numpy
    acc = _acc_dtype(in_dt)
    out_dt = in_dt if out_dtype is None else np.dtype(out_dtype)
    if len(padding) == 2:
        padding = (padding[0], padding[1], padding[0], padding[1])
    pt, pl, pb, pr = padding
    sh, sw = stride
    dh, dw = dilation
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = groups
    og = o // g
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    x = x.astype(acc, copy=False)
    w = w.astype(acc, copy=False)
    if pt or pb or pl or pr:
        x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    if kh == 1 and kw == 1 and dh == 1 and dw == 1:
        cols = x[:, :, ::sh, ::sw][:, :, :oh, :ow]  # [n, c, oh, ow]
        cols = cols.reshape(n, g, cg, oh * ow)
        wm = w.reshape(g, og, cg)
        y = np.matmul(wm[None], cols)  # [n, g, og, oh*ow]
        y = y.reshape(n, o, oh, ow)
    else:
        win = _windows(x, kh, kw, sh, sw, dh, dw, oh, ow)  # [n, c, oh, ow, kh, kw]
        win = win.reshape(n, g, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
        cols = np.ascontiguousarray(win).reshape(g, n * oh * ow, cg * kh * kw)
        wm = w.reshape(g, og, cg * kh * kw).transpose(0, 2, 1)  # [g, K, og]
        y = np.matmul(cols, wm)  # [g, n*oh*ow, og]
        y = y.reshape(g, n, oh, ow, og).transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    if bias is not None:
        y = y + bias.astype(acc, copy=False).reshape(1, o, 1, 1)
    y = np.ascontiguousarray(y.astype(out_dt, copy=False))
    return y[0] if unbatched else y


def _channels_last(infer, ref, acts: tuple[int, ...] = (0,), act_result: bool = True):
    """infer/reference taking a ``layout`` attribute: "nhwc" runs the NCHW rule on permuted views
    of the inputs at positions ``acts`` (the activations; a conv's weight stays OIHW), and of the
    result when it is an activation (``act_result``; a weight's gradient stays OIHW)."""

    def infer2(ctx, *ins, layout="nchw", **attrs):
        if layout == "nchw":
            return infer(ctx, *ins, **attrs)
        if layout != "nhwc" or any(ins[i].rank != 4 for i in acts):
            raise ctx.error(f"layout must be 'nchw' or 'nhwc' (rank 4), got {layout!r} on "
                            f"{[ins[i] for i in acts]}")
        out = infer(ctx, *[t.with_shape(tuple(t.shape[i] for i in (0, 3, 1, 2))) if k in acts else t
                           for k, t in enumerate(ins)], **attrs)
        if not act_result:
            return out
        on, oc, oh, ow = out.shape
        return out.with_shape((on, oh, ow, oc))

    def ref2(ctx, *ins, layout="nchw", **attrs):
        if layout == "nchw":
            return ref(ctx, *ins, **attrs)
        y = ref(ctx, *[np.ascontiguousarray(a.transpose(0, 3, 1, 2)) if k in acts else a
                       for k, a in enumerate(ins)], **attrs)
        return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if act_result else y

    return infer2, ref2


_LAYOUT = Attr("str", "nchw", "activation layout: nchw, or nhwc (channels last; set by the layout pass)")


def _conv2d_ref(ctx, x, w, bias=None, *, stride, padding, dilation, groups, out_dtype=None):
    padding = tuple(padding)
    if len(padding) == 1:
        padding = padding * 4
    return conv2d_numpy(x, w, bias, tuple(stride) * (3 - len(stride)), padding,
                        tuple(dilation) * (3 - len(dilation)), groups, None if out_dtype is None else out_dtype.numpy)


defop("conv2d", inputs=("x", "weight", "bias?"),
      attrs={"stride": Attr("ints", (1, 1), "(sh, sw)"),
             "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right)"),
             "dilation": Attr("ints", (1, 1), "(dh, dw)"),
             "groups": Attr("int", 1, "channel groups"),
             "layout": _LAYOUT,
             "out_dtype": Attr("dtype", None, "the result's dtype (default: the operands' promoted dtype); "
                                              "16-bit inputs accumulate in float32 and round once into it")},
      infer=_channels_last(_conv2d_infer, _conv2d_ref)[0], reference=_channels_last(_conv2d_infer, _conv2d_ref)[1],
      kind="conv", doc="2-D convolution, NCHW (or NHWC) input, weight [out, in/groups, kh, kw].")


# ---------------------------------------------------------------------------
# direct_conv2d: a convolution braze's generated loops compute (decompose's rule conv2d)
# ---------------------------------------------------------------------------

_HWIO_TO_OIHW = (3, 2, 0, 1)


def _direct_conv2d_infer(ctx, x: TensorType, w: TensorType, bias: TensorType | None = None, *, stride, padding,
                         dilation, groups):
    if x.rank != 4 or w.rank != 4:
        raise ctx.error(f"takes an NHWC input and an HWIO weight [kh, kw, in/groups, out], got {x} and {w}")
    if x.dtype is not DType.float32 or w.dtype is not DType.float32 or (bias is not None and
                                                                          bias.dtype is not DType.float32):
        raise ctx.error("takes float32 operands", hint="other dtypes run as conv2d")
    if not all(isinstance(d, int) for d in w.shape[:3]):
        raise ctx.error(f"needs a static window and group width (its loops are unrolled), got weight {w}",
                        hint="give the weight static dims, or use conv2d")
    infer = _channels_last(_conv2d_infer, None)[0]
    return infer(ctx, x, w.with_shape(tuple(w.shape[i] for i in _HWIO_TO_OIHW)), bias, stride=stride,
                 padding=padding, dilation=dilation, groups=groups, layout="nhwc")


def _direct_conv2d_ref(ctx, x, w, bias=None, *, stride, padding, dilation, groups):
    ref = _channels_last(None, _conv2d_ref)[1]
    return ref(ctx, x, np.ascontiguousarray(w.transpose(_HWIO_TO_OIHW)), bias, stride=stride, padding=padding,
               dilation=dilation, groups=groups, layout="nhwc")


defop("direct_conv2d", inputs=("x", "weight", "bias?"),
      attrs={"stride": Attr("ints", (1, 1), "(sh, sw)"),
             "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right)"),
             "dilation": Attr("ints", (1, 1), "(dh, dw)"),
             "groups": Attr("int", 1, "channel groups")},
      infer=_direct_conv2d_infer, reference=_direct_conv2d_ref, kind="conv",
      doc="2-D convolution as generated loops (a sum over the window at each output element, fused "
          "with the elementwise ops after it): float32, NHWC input, weight [kh, kw, in/groups, out]. "
          "decompose's rule conv2d writes it for depthwise and few-channel convolutions.")


# ---------------------------------------------------------------------------
# conv2d's gradients (training backward): NCHW, float32
# ---------------------------------------------------------------------------


def _conv_grad_infer(result):
    def infer(ctx, grad: TensorType, x: TensorType, w: TensorType, *, stride, padding, dilation, groups):
        if x.rank != 4 or grad.rank != 4:
            raise ctx.error(f"the input and the gradient must be NCHW (rank 4), got {x} and {grad}")
        if {t.dtype for t in (grad, x, w)} != {DType.float32}:
            raise ctx.error(f"takes float32 operands, got {grad.dtype.name}, {x.dtype.name} and {w.dtype.name}",
                            hint="a 16-bit convolution's backward runs in the framework")
        y = _conv2d_infer(ctx, x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
        for axis, (a, b) in enumerate(zip(grad.shape, y.shape)):
            eq = ctx.equal(a, b)
            if eq is False:
                raise ctx.error(f"the gradient {grad} does not have the convolution's output shape {list(y.shape)} "
                                f"(dim {axis})")
            if eq is None:
                ctx.assume_equal(a, b, "gradient dims")
        return x if result == "input" else w

    return infer


def _conv_grad_geometry(x, w, stride, padding, dilation):
    pt, pl, pb, pr = pads4(padding)
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw) = tuple(stride) * (3 - len(stride)), tuple(dilation) * (3 - len(dilation))
    xp_shape = (x.shape[0], x.shape[1], x.shape[2] + pt + pb, x.shape[3] + pl + pr)
    return (pt, pl), (sh, sw), (dh, dw), kh, kw, xp_shape


def conv2d_backward_input_numpy(grad, x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The input's gradient: each output position's gradient spread back over its window
    (float32 accumulation), the padding cut off."""
    (pt, pl), (sh, sw), (dh, dw), kh, kw, xp_shape = _conv_grad_geometry(x, w, stride, padding, dilation)
    n, _, oh, ow = grad.shape
    g = groups
    gy = grad.astype(np.float32).reshape(n, g, grad.shape[1] // g, oh, ow)  # not -1: n may be 0
    wg = w.astype(np.float32).reshape(g, -1, w.shape[1], kh, kw)  # [g, og, cg, kh, kw]
    dxp = np.zeros(xp_shape, np.float32).reshape(n, g, w.shape[1], *xp_shape[2:])
    for i in range(kh):
        for j in range(kw):
            part = np.einsum("ngoyx,goc->ngcyx", gy, wg[:, :, :, i, j])
            dxp[:, :, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += part
    dxp = dxp.reshape(xp_shape)
    return np.ascontiguousarray(dxp[:, :, pt:pt + x.shape[2], pl:pl + x.shape[3]].astype(x.dtype))


def conv2d_backward_weight_numpy(grad, x, w, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """The weight's gradient: each tap's input window against the output gradient, summed over
    the batch and the output positions (float32 accumulation)."""
    (pt, pl), (sh, sw), (dh, dw), kh, kw, xp_shape = _conv_grad_geometry(x, w, stride, padding, dilation)
    pb, pr = pads4(padding)[2:]
    n, _, oh, ow = grad.shape
    g = groups
    xp = np.pad(x.astype(np.float32), ((0, 0), (0, 0), (pt, pb), (pl, pr))).reshape(n, g, w.shape[1], *xp_shape[2:])
    gy = grad.astype(np.float32).reshape(n, g, grad.shape[1] // g, oh, ow)  # not -1: n may be 0
    dw_ = np.zeros((g, w.shape[0] // g, w.shape[1], kh, kw), np.float32)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            dw_[:, :, :, i, j] = np.einsum("ngoyx,ngcyx->goc", gy, win)
    return dw_.reshape(w.shape).astype(w.dtype)


_CONV_ATTRS = {"stride": Attr("ints", (1, 1), "(sh, sw)"),
               "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right)"),
               "dilation": Attr("ints", (1, 1), "(dh, dw)"),
               "groups": Attr("int", 1, "channel groups")}

_CONV_GRAD_DOC = ("The {}'s gradient of conv2d(x, weight) {{stride, padding, dilation, groups}}, from grad, the "
                  "gradient of its output (float32; the bias's gradient is grad's sum over N, H, W). NCHW, or with "
                  "layout nhwc {}.")
_BWD_INPUT = _channels_last(_conv_grad_infer("input"),
                            lambda ctx, grad, x, w, **a: conv2d_backward_input_numpy(grad, x, w, **a), acts=(0, 1))
_BWD_WEIGHT = _channels_last(_conv_grad_infer("weight"),
                             lambda ctx, grad, x, w, **a: conv2d_backward_weight_numpy(grad, x, w, **a), acts=(0, 1),
                             act_result=False)
defop("conv2d_backward_input", inputs=("grad", "x", "weight"), attrs={**_CONV_ATTRS, "layout": _LAYOUT},
      infer=_BWD_INPUT[0], reference=_BWD_INPUT[1], kind="conv",
      doc=_CONV_GRAD_DOC.format("input", "grad, x (read for its shape only) and the result NHWC"))
defop("conv2d_backward_weight", inputs=("grad", "x", "weight"), attrs={**_CONV_ATTRS, "layout": _LAYOUT},
      infer=_BWD_WEIGHT[0], reference=_BWD_WEIGHT[1], kind="conv",
      doc=_CONV_GRAD_DOC.format("weight", "grad and x NHWC (the weight and its gradient stay OIHW)"))

# ---------------------------------------------------------------------------
# conv_transpose2d: the input gradient's computation, on an activation (oneDNN's backward-data call)
# ---------------------------------------------------------------------------


def _conv_transpose_infer(ctx, x: TensorType, w: TensorType, *, stride, padding, output_padding, dilation, groups):
    if x.rank != 4 or w.rank != 4:
        raise ctx.error(f"takes an NCHW input and a weight [in, out/groups, kh, kw], got {x} and {w}")
    if x.dtype is not DType.float32 or w.dtype is not DType.float32:
        raise ctx.error(f"takes float32 operands, got {x.dtype.name} and {w.dtype.name}",
                        hint="cast the input and the weight to float32")
    stride, dilation = _pair(ctx, "stride", stride), _pair(ctx, "dilation", dilation)
    _check_pos(ctx, "stride", stride)
    _check_pos(ctx, "dilation", dilation)
    pt, pl, pb, pr = _pads(ctx, padding)
    opad = _pair(ctx, "output_padding", output_padding)
    if any(not 0 <= p < s for p, s in zip(opad, stride)):  # torch allows up to the dilation; oneDNN does not
        raise ctx.error(f"output_padding {list(opad)} must be below the stride {list(stride)}",
                        hint="output padding past the stride needs a transposed convolution braze does not run yet")
    if groups < 1 or not isinstance(w.shape[1], int):
        raise ctx.error(f"groups must be >= 1 and the weight's dim 1 static, got groups={groups}, weight {w}")
    c, ci = x.shape[1], w.shape[0]
    eq = ctx.equal(c, ci)
    if eq is False:
        raise ctx.error(f"input has {c} channels but weight {w} expects {ci}", hint="weight dim 0 is the input's "
                                                                                    "channels")
    if eq is None:
        ctx.assume_equal(c, ci, "input channels")
    if isinstance(ci, int) and ci % groups:
        raise ctx.error(f"input channels {ci} are not divisible by groups={groups}")
    kh, kw = w.shape[2:]
    for n, k, st, d, p, op in ((x.shape[2], kh, stride[0], dilation[0], pt + pb, opad[0]),
                               (x.shape[3], kw, stride[1], dilation[1], pl + pr, opad[1])):
        c = d * (k - 1) + 1 + op - p  # size = st * (n - 1) + c, which must not be negative (torch's rule)
        sym = ctx.constraints.simplify(n)
        if c < 0 and isinstance(sym, S.Sym):  # an input too small for the padding: an input error, every call
            s = ctx.constraints.symbols.get(sym.name, sym)
            need = 1 + (-c + st - 1) // st
            if s.hi is not None and need > s.hi:
                raise ctx.error(f"input {sym} in [{s.lo}, {s.hi}] is never large enough for the padding {p}")
            if need > s.lo:
                ctx.constraints.add_range(s, need, s.hi)
    sizes = [ctx.simplify(size) for size in _transposed_hw(x.shape, (kh, kw), stride, dilation, (pt, pl, pb, pr),
                                                          opad)]
    if any(isinstance(size, int) and size < 0 for size in sizes):
        raise ctx.error(f"the output would have {min(sizes)} rows or columns", hint="use less padding")
    return TensorType(DType.float32, (x.shape[0], S.mul(w.shape[1], groups), *sizes))


def _transposed_hw(x_shape, k, stride, dilation, pads, output_padding) -> list:
    """The output's height and width: stride * (in - 1) + dilation * (k - 1) + 1 + output_padding - pads."""
    pt, pl, pb, pr = pads
    return [S.add(S.mul(s, S.add(n, -1)), d * (kk - 1) + 1 + op - p0 - p1)
            for n, kk, s, d, p0, p1, op in zip(x_shape[2:], k, stride, dilation, (pt, pl), (pb, pr), output_padding)]


def _conv_transpose_ref(ctx, x, w, *, stride, padding, output_padding, dilation, groups):
    pads = tuple(pads4(padding))
    stride, dilation = tuple(stride) * (3 - len(stride)), tuple(dilation) * (3 - len(dilation))
    hw = _transposed_hw(x.shape, w.shape[2:], stride, dilation, pads, tuple(output_padding) * (3 - len(output_padding)))
    out = np.empty((x.shape[0], w.shape[1] * groups, *hw), np.float32)  # read for its shape only
    return conv2d_backward_input_numpy(x, out, w, stride=stride, padding=pads, dilation=dilation, groups=groups)


_CONV_T = _channels_last(_conv_transpose_infer, _conv_transpose_ref)
defop("conv_transpose2d", inputs=("x", "weight"),
      attrs={**_CONV_ATTRS, "output_padding": Attr("ints", (0, 0), "(oh, ow): rows and columns added at the end"),
             "layout": _LAYOUT},
      infer=_CONV_T[0], reference=_CONV_T[1], kind="conv",
      doc="2-D transposed convolution (the input gradient of conv2d with this weight), NCHW (or NHWC) input, "
          "weight [in, out/groups, kh, kw], float32; out = stride * (in - 1) + dilation * (k - 1) + 1 + "
          "output_padding - padding (output_padding below the stride). A bias is a separate add.")


# ---------------------------------------------------------------------------
# pools
# ---------------------------------------------------------------------------


def _pool_infer_common(ctx, x, kernel, stride, padding, dilation, ceil_mode):
    if x.rank not in (3, 4):
        raise ctx.error(f"input must be NCHW (rank 4) or CHW (rank 3), got {x}")
    kernel = _pair(ctx, "kernel", kernel)
    stride = kernel if stride is None or len(stride) == 0 else _pair(ctx, "stride", stride)
    dilation = _pair(ctx, "dilation", dilation)
    _check_pos(ctx, "kernel", kernel)
    _check_pos(ctx, "stride", stride)
    _check_pos(ctx, "dilation", dilation)
    pt, pl, pb, pr = _pads(ctx, padding)
    h, w = x.shape[-2:]
    oh = _out_dim(ctx, h, kernel[0], stride[0], pt, pb, dilation[0], ceil_mode, "height")
    ow = _out_dim(ctx, w, kernel[1], stride[1], pl, pr, dilation[1], ceil_mode, "width")
    return x.shape[:-2] + (oh, ow)


def _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode):
    kernel = tuple(kernel) * (3 - len(kernel))
    stride = kernel if not stride else tuple(stride) * (3 - len(stride))
    dilation = tuple(dilation) * (3 - len(dilation))
    padding = tuple(padding)
    if len(padding) == 1:
        padding = padding * 4
    elif len(padding) == 2:
        padding = (padding[0], padding[1], padding[0], padding[1])
    pt, pl, pb, pr = padding
    h, w = x.shape[-2:]
    outs, extra = [], []
    for n, k, s, p0, p1, d in ((h, kernel[0], stride[0], pt, pb, dilation[0]),
                               (w, kernel[1], stride[1], pl, pr, dilation[1])):
        out = S.evaluate(_out_dim_int(n, k, s, p0, p1, d, ceil_mode), {})
        need = (out - 1) * s + d * (k - 1) + 1
        outs.append(out)
        extra.append(max(0, need - (n + p0 + p1)))
    return kernel, stride, dilation, (pt, pl, pb, pr), outs, extra


def _out_dim_int(n, k, s, p0, p1, d, ceil_mode):
    num = n + p0 + p1 - d * (k - 1) - 1
    if ceil_mode and s > 1:
        out = -(-num // s) + 1
        if (out - 1) * s >= n + p0:
            out -= 1
        return out
    return num // s + 1


def _max_pool_infer(ctx, x, *, kernel, stride, padding, dilation, ceil_mode):
    if x.dtype is DType.bool:
        raise ctx.error("does not take bool input")
    return TensorType(x.dtype, _pool_infer_common(ctx, x, kernel, stride, padding, dilation, ceil_mode))


def _max_pool_ref(ctx, x, *, kernel, stride, padding, dilation, ceil_mode):
    kernel, stride, dilation, (pt, pl, pb, pr), (oh, ow), (eh, ew) = \
        _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode)
    fill = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    lead = ((0, 0),) * (x.ndim - 2)
    xp = np.pad(x, lead + ((pt, pb + eh), (pl, pr + ew)), constant_values=fill) if (pt or pb or pl or pr or eh or ew) \
        else x
    win = _windows(xp, kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1], oh, ow)
    return np.ascontiguousarray(win.max(axis=(-2, -1)).astype(x.dtype, copy=False))


defop("max_pool2d", inputs=("x",),
      attrs={"kernel": Attr("ints", doc="(kh, kw)"),
             "stride": Attr("ints", None, "(sh, sw); default: the kernel"),
             "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right), padded with -inf"),
             "dilation": Attr("ints", (1, 1), "(dh, dw)"),
             "ceil_mode": Attr("bool", False, "round the output size up (PyTorch rule)"),
             "layout": _LAYOUT},
      infer=_channels_last(_max_pool_infer, _max_pool_ref)[0],
      reference=_channels_last(_max_pool_infer, _max_pool_ref)[1], kind="pool",
      doc="2-D max pooling over the spatial dims (the last two, or the middle two with layout nhwc).")


_POOL_ATTRS = {"kernel": Attr("ints", doc="(kh, kw)"),
               "stride": Attr("ints", None, "(sh, sw); default: the kernel"),
               "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right)"),
               "dilation": Attr("ints", (1, 1), "(dh, dw)"),
               "ceil_mode": Attr("bool", False, "round the output size up (PyTorch rule)")}


def _max_pool_indices_infer(ctx, x, **attrs):
    if not x.dtype.is_float:
        raise ctx.error(f"takes a floating-point input, got {x}")
    return TensorType(DType.int64, _pool_infer_common(ctx, x, **attrs))


def max_pool2d_indices_numpy(x, kernel, stride, padding, dilation, ceil_mode):
    """Each window's winner as PyTorch picks it, a flat position h * W + w in the input's plane:
    the first maximum in window order; in a window with a NaN, the last NaN; a window whose
    elements are all -inf, its first element (never a padding position)."""
    kernel, stride, dilation, (pt, pl, pb, pr), (oh, ow), (eh, ew) = \
        _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode)
    h, w = x.shape[-2:]
    lead = ((0, 0),) * (x.ndim - 2)
    pads = lead + ((pt, pb + eh), (pl, pr + ew))
    win = _windows(np.pad(x, pads, constant_values=np.nan), *kernel, *stride, *dilation, oh, ow)
    pos = _windows(np.pad(np.arange(h * w).reshape(h, w), pads[-2:], constant_values=-1), *kernel, *stride,
                   *dilation, oh, ow)  # [oh, ow, kh, kw]: -1 in the padding
    taps = kernel[0] * kernel[1]  # not -1: a reshape cannot infer it when another dim is 0
    win = win.reshape(win.shape[:-2] + (taps,))
    pos = np.broadcast_to(pos.reshape(pos.shape[:-2] + (taps,)), win.shape)
    valid = pos >= 0
    nan = np.isnan(win) & valid
    top = np.where(valid & ~nan, win, -np.inf).max(axis=-1, keepdims=True)
    first_max = np.where(valid & (win == top), pos, np.iinfo(np.int64).max).min(axis=-1)
    last_nan = np.where(nan, pos, -1).max(axis=-1)
    return np.ascontiguousarray(np.where(last_nan >= 0, last_nan, first_max).astype(np.int64))


_INDICES = _channels_last(_max_pool_indices_infer, lambda ctx, x, **a: max_pool2d_indices_numpy(x, **a))
defop("max_pool2d_indices", inputs=("x",), attrs={**_POOL_ATTRS, "layout": _LAYOUT}, infer=_INDICES[0],
      reference=_INDICES[1], kind="pool",
      doc="max_pool2d's indices output (NCHW, as PyTorch's, or NHWC with layout nhwc): each window's winner as a "
          "flat position h * W + w in the input's plane; in a window with a NaN, its last NaN.")


def _max_pool_backward_infer(ctx, grad, x, indices, **attrs):
    if not grad.dtype.is_float or grad.dtype != x.dtype or indices.dtype != DType.int64:
        raise ctx.error(f"takes a float gradient and input of one dtype and int64 indices, got {grad}, {x} and "
                        f"{indices}")
    out = _pool_infer_common(ctx, x, **attrs)
    for t in (grad, indices):
        if len(t.shape) != len(out) or any(ctx.equal(a, b) is False for a, b in zip(t.shape, out)):
            raise ctx.error(f"{t} does not have the pool's output shape {list(out)}")
    return x


def max_pool2d_backward_numpy(grad, x, indices, kernel, stride, padding, dilation, ceil_mode):
    """The input's gradient: each output position's gradient added at its window's winner (a
    window with no element, over an empty plane, has none: max_pool2d_indices_numpy's int64 max)."""
    h, w = x.shape[-2:]
    planes = int(np.prod(x.shape[:-2], dtype=np.int64))
    out = np.zeros((planes, h * w), np.float32)
    rows = np.repeat(np.arange(planes), int(np.prod(grad.shape[-2:], dtype=np.int64)))
    at = indices.reshape(-1)
    some = (at >= 0) & (at < h * w)
    np.add.at(out, (rows[some], at[some]), grad.astype(np.float32).reshape(-1)[some])
    return out.reshape(x.shape).astype(x.dtype)


_POOL_BACKWARD = _channels_last(_max_pool_backward_infer, lambda ctx, grad, x, indices, **a:
                                max_pool2d_backward_numpy(grad, x, indices, **a), acts=(0, 1, 2))
defop("max_pool2d_backward", inputs=("grad", "x", "indices"), attrs={**_POOL_ATTRS, "layout": _LAYOUT},
      infer=_POOL_BACKWARD[0], reference=_POOL_BACKWARD[1], kind="pool",
      doc="max_pool2d's input gradient (NCHW; with layout nhwc, grad, x, indices and the result NHWC): grad added "
          "at each window's winner (indices from max_pool2d_indices); x gives the shape (its values are never "
          "read).")


def _avg_pool_infer(ctx, x, *, kernel, stride, padding, ceil_mode, count_include_pad, dilation=(1, 1)):
    _float_in(ctx, x)
    return TensorType(x.dtype, _pool_infer_common(ctx, x, kernel, stride, padding, dilation, ceil_mode))


def _avg_pool_ref(ctx, x, *, kernel, stride, padding, ceil_mode, count_include_pad, dilation=(1, 1)):
    kernel, stride, dilation, (pt, pl, pb, pr), (oh, ow), (eh, ew) = \
        _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode)
    acc = _acc_dtype(x.dtype)
    lead = ((0, 0),) * (x.ndim - 2)
    xp = np.pad(x.astype(acc, copy=False), lead + ((pt, pb + eh), (pl, pr + ew)))
    sums = _windows(xp, kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1], oh, ow).sum(axis=(-2, -1))
    h, w = x.shape[-2:]
    ones = np.zeros((h + pt + pb + eh, w + pl + pr + ew), dtype=acc)
    if count_include_pad:
        ones[: h + pt + pb, : w + pl + pr] = 1
    else:
        ones[pt: pt + h, pl: pl + w] = 1
    counts = _windows(ones, kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1], oh, ow).sum(axis=(-2, -1))
    return np.ascontiguousarray((sums / np.maximum(counts, 1)).astype(x.dtype, copy=False))


defop("avg_pool2d", inputs=("x",),
      attrs={"kernel": Attr("ints", doc="(kh, kw)"),
             "stride": Attr("ints", None, "(sh, sw); default: the kernel"),
             "padding": Attr("ints", (0, 0, 0, 0), "(top, left, bottom, right), zero padding"),
             "ceil_mode": Attr("bool", False, "round the output size up (PyTorch rule)"),
             "count_include_pad": Attr("bool", True, "divide by the window size including padding"),
             "dilation": Attr("ints", (1, 1), "(dh, dw): the window's taps this far apart")},
      infer=_avg_pool_infer, reference=_avg_pool_ref, kind="pool",
      doc="2-D average pooling over the last two dims.")


def _adaptive_infer(ctx, x, *, output_size):
    _float_in(ctx, x)
    if x.rank not in (3, 4):
        raise ctx.error(f"input must be NCHW (rank 4) or CHW (rank 3), got {x}")
    out = _pair(ctx, "output_size", output_size)
    _check_pos(ctx, "output_size", out)
    return TensorType(x.dtype, x.shape[:-2] + tuple(out))


def _adaptive_axis(a, axis, out):
    """Means over PyTorch's bins [floor(i n / out), ceil((i + 1) n / out)) along ``axis``. Each bin
    is summed on its own: differences of a cumulative sum lose small values next to large
    ones and carry a NaN or inf into every later bin."""
    n = a.shape[axis]
    a = a.astype(np.float64, copy=False)
    bins = [np.take(a, np.arange((i * n) // out, -((-(i + 1) * n) // out)), axis=axis)
            for i in range(out)]
    with np.errstate(invalid="ignore"):
        return np.concatenate([np.sum(b, axis=axis, keepdims=True) / b.shape[axis] for b in bins], axis=axis)


def _adaptive_ref(ctx, x, *, output_size):
    oh, ow = tuple(output_size) * (3 - len(output_size))
    if oh == 1 and ow == 1:
        y = x.astype(np.float64).mean(axis=(-2, -1), keepdims=True)
    else:
        y = _adaptive_axis(_adaptive_axis(x, x.ndim - 2, oh), x.ndim - 1, ow)
    return np.ascontiguousarray(y.astype(x.dtype))


defop("adaptive_avg_pool2d", inputs=("x",),
      attrs={"output_size": Attr("ints", doc="(oh, ow)")},
      infer=_adaptive_infer, reference=_adaptive_ref, kind="pool",
      doc="Average pooling to a fixed output size (PyTorch bins).")
