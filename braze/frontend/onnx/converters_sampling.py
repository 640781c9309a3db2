"""ONNX ops that sample a feature map at points the data gives, built from braze's ops as ONNX's
reference computes them: RoiAlign (each region's bins averaged, or maxed, over a static grid of
bilinear samples) and DeformConv (a convolution whose taps read the map at offset points). A sample's
four corners are gathers from the map viewed as rows of channels, their weights separable in y and x;
the number of regions, the batch and the map's size may be symbolic."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .convert import converter

I64 = DType.int64


def _axis_taps(ctx, c, size, f):
    """One axis of ONNX's bilinear rule for samples c (float): whether each lies within [-1, size], its
    low and high pixel (both the last one from it on) and their weights (1 - l, l)."""
    inside = ctx.op("logical_and", ctx.op("greater_equal", c, f(-1.0)), ctx.op("less_equal", c, f(float(size))))
    c = ctx.op("maximum", c, f(0.0))
    low = ctx.op("floor", c)
    last = f(float(size - 1))
    at_end = ctx.op("greater_equal", low, last)
    low = ctx.op("where", at_end, last, low)
    c = ctx.op("where", at_end, last, c)
    high = ctx.op("where", at_end, last, ctx.op("add", low, f(1.0)))
    lw = ctx.op("sub", c, low)
    return inside, ctx.cast(low, I64), ctx.cast(high, I64), ctx.op("sub", f(1.0), lw), lw


@converter("RoiAlign", attrs=("coordinate_transformation_mode", "mode", "output_height", "output_width",
                              "sampling_ratio", "spatial_scale"))
def _roi_align(ctx):
    """Y [R, C, oh, ow]: region r's bin (i, j) is the average (``mode`` avg) or the max (max: of each
    sample's largest weighted tap, ONNX's rule) of sampling_ratio^2 bilinear samples of X[batch r]; a
    sample outside [-1, size] on an axis counts as 0."""
    x, rois, batch = ctx.value(0), ctx.value(1), ctx.value(2)
    if x.rank != 4 or x.dtype not in (DType.float32, DType.float64):
        raise ctx.unsupported(f"input {x.type}", hint="RoiAlign takes a float32 or float64 X [N, C, H, W]")
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise ctx.unsupported("sampling_ratio 0 (a grid sized by each region)",
                              hint="braze samples a static grid: give sampling_ratio > 0")
    n, ch, h, w = x.shape
    if S.is_symbolic(h) or S.is_symbolic(w):
        raise ctx.unsupported(f"a feature map of symbolic size {h} x {w}", hint="export with a fixed map size")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    half = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.unsupported(f"mode {mode!r}", hint="ONNX defines avg and max")
    dt = x.dtype
    f = lambda v: ctx.scalar(v, dt)  # noqa: E731
    r = rois.shape[0]
    rois = ctx.cast(rois, dt)

    def edge(k):
        v = ctx.op("sub", ctx.op("mul", ctx.op("slice", rois, axis=1, start=k, end=k + 1),
                                 f(float(ctx.attr("spatial_scale", 1.0)))), f(0.5 if half else 0.0))
        return v  # [R, 1]

    def samples(start, end, bins):
        """[R, bins * ratio] sample coordinates along one axis, bin-major, as the reference sums them."""
        size = ctx.op("sub", end, start)
        if not half:  # malformed regions are forced to 1 pixel
            size = ctx.op("maximum", size, f(1.0))
        step = ctx.op("div", size, f(float(bins)))
        k = [(b, (i + 0.5)) for b in range(bins) for i in range(ratio)]
        at = ctx.const([[b for b, _ in k]], dt)
        frac = ctx.const([[i for _, i in k]], dt)
        return ctx.op("add", ctx.op("add", start, ctx.op("mul", at, step)),
                      ctx.op("div", ctx.op("mul", frac, step), f(float(ratio))))

    ys = samples(edge(1), edge(3), oh)  # [R, oh*g]
    xs = samples(edge(0), edge(2), ow)  # [R, ow*g]
    yin, ylo, yhi, wy0, wy1 = _axis_taps(ctx, ys, h, f)
    xin, xlo, xhi, wx0, wx1 = _axis_taps(ctx, xs, w, f)
    ny, nx = oh * ratio, ow * ratio
    ok = ctx.op("logical_and", ctx.op("reshape", yin, shape=(r, ny, 1)), ctx.op("reshape", xin, shape=(r, 1, nx)))
    rows = ctx.op("reshape", ctx.op("permute", x, perm=(0, 2, 3, 1)), shape=(S.mul(n, h * w), ch))  # [N*H*W, C]
    base = ctx.op("mul", ctx.op("reshape", ctx.cast(batch, I64), shape=(r, 1, 1)), ctx.scalar(h * w, I64))
    zero = ctx.scalar(0, I64)
    taps = []
    for yi, wy in ((ylo, wy0), (yhi, wy1)):
        for xi, wx in ((xlo, wx0), (xhi, wx1)):
            pos = ctx.op("add", ctx.op("mul", ctx.op("reshape", yi, shape=(r, ny, 1)), ctx.scalar(w, I64)),
                         ctx.op("reshape", xi, shape=(r, 1, nx)))
            pos = ctx.op("add", base, ctx.op("where", ok, pos, zero))  # outside: pixel 0, weight 0 (as ONNX's)
            wgt = ctx.op("where", ok, ctx.op("mul", ctx.op("reshape", wy, shape=(r, ny, 1)),
                                             ctx.op("reshape", wx, shape=(r, 1, nx))), f(0.0))
            v = ctx.op("reshape", ctx.op("gather", rows, ctx.op("reshape", pos, shape=(S.mul(r, ny * nx),)), axis=0),
                       shape=(r, ny, nx, ch))
            taps.append(ctx.op("mul", ctx.op("reshape", wgt, shape=(r, ny, nx, 1)), v))
    if mode == "avg":
        val = ctx.op("add", ctx.op("add", ctx.op("add", taps[0], taps[1]), taps[2]), taps[3])
    else:
        val = ctx.op("maximum", ctx.op("maximum", ctx.op("maximum", taps[0], taps[1]), taps[2]), taps[3])
    val = ctx.op("reshape", val, shape=(r, oh, ratio, ow, ratio, ch))
    red = "reduce_sum" if mode == "avg" else "reduce_max"
    out = ctx.op(red, val, axes=(2, 4), keepdims=False)  # [R, oh, ow, C]
    if mode == "avg":
        out = ctx.op("div", out, f(float(ratio * ratio)))
    return ctx.op("permute", out, perm=(0, 3, 1, 2))


@converter("DeformConv", attrs=("dilations", "group", "kernel_shape", "offset_group", "pads", "strides"))
def _deform_conv(ctx):
    """A 2-D convolution whose taps read X at offset points: each offset group's channels are sampled
    bilinearly at tap + offset for every output pixel (a corner outside the map reads 0; the corners are
    gathers from the map viewed as rows of the group's channels), scaled by the mask, and multiplied by
    the weight as a grouped matrix product, as ONNX's reference computes it."""
    x, wt, off = ctx.value(0), ctx.value(1), ctx.value(2)
    if x.rank != 4 or wt.rank != 4 or x.dtype not in (DType.float32, DType.float64):
        raise ctx.unsupported(f"input {x.type} and weight {wt.type}",
                              hint="braze's DeformConv is 2-D, float32 or float64")
    n, c, h, w = x.shape
    oc, cg, kh, kw = wt.shape
    if any(S.is_symbolic(d) for d in (c, oc, cg, kh, kw)):
        raise ctx.unsupported(f"a weight {wt.type} or channels {c} of symbolic size",
                              hint="export with fixed channel counts and kernel size")
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    if c != cg * group or oc % group or c % og:
        raise ctx.unsupported(f"{c} channels, a weight {wt.type}, group {group} and offset_group {og} that "
                              "do not divide", hint="channels = weight channels x group, divisible by offset_group")
    sh, sw = ctx.attr("strides", [1, 1])
    dh, dw = ctx.attr("dilations", [1, 1])
    pt, pl = ctx.attr("pads", [0, 0, 0, 0])[:2]
    oh, ow = off.shape[2], off.shape[3]
    dt = x.dtype
    f = lambda v: ctx.scalar(v, dt)  # noqa: E731
    k = kh * kw
    off = ctx.op("reshape", off, shape=(n, og, kh, kw, 2, oh, ow))
    shape = (n, og, kh, kw, oh, ow)

    def corners(axis, kernel, dil, out, stride, pad, size):
        """The two corners on one axis of every sample [N, G, kh, kw, oh, ow]: (index, weight, inside)."""
        o = ctx.op("squeeze", ctx.op("slice", off, axis=4, start=axis, end=axis + 1), axes=(4,))
        tap = ctx.const((np.arange(kernel) * dil).reshape((1, 1) + ((kernel, 1) if axis == 0 else (1, kernel))
                                                          + (1, 1)), dt)
        at = ctx.op("reshape", ctx.op("sub", ctx.op("mul", ctx.cast(ctx.iota(out), dt), f(float(stride))),
                                      f(float(pad))), shape=(1, 1, 1, 1) + ((out, 1) if axis == 0 else (1, out)))
        pix = ctx.op("add", ctx.op("add", o, tap), at)
        lo = ctx.op("floor", pix)
        frac = ctx.op("sub", pix, lo)
        last = ctx.cast(ctx.int_value(S.add(size, -1)), dt)
        out_ = []
        for corner, wgt in ((lo, ctx.op("sub", f(1.0), frac)), (ctx.op("add", lo, f(1.0)), frac)):
            inside = ctx.op("logical_and", ctx.op("greater_equal", corner, f(0.0)), ctx.op("less_equal", corner, last))
            out_.append((ctx.cast(ctx.op("where", inside, corner, f(0.0)), I64), wgt, inside))
        return out_

    ys = corners(0, kh, dh, oh, sh, pt, h)
    xs = corners(1, kw, dw, ow, sw, pl, w)
    cpg = c // og  # channels per offset group
    rows = ctx.op("reshape", ctx.op("permute", ctx.op("reshape", x, shape=(n, og, cpg, h, w)), perm=(0, 1, 3, 4, 2)),
                  shape=(S.mul(S.mul(n, og), S.mul(h, w)), cpg))
    base = ctx.op("mul", ctx.op("reshape", ctx.iota(S.mul(n, og)), shape=(n, og, 1, 1, 1, 1)),
                  ctx.int_value(S.mul(h, w)))
    count = S.mul(S.mul(n, og), S.mul(k, S.mul(oh, ow)))
    s = None
    for yi, wy, yok in ys:
        for xi, wx, xok in xs:
            pos = ctx.op("add", base, ctx.op("add", ctx.op("mul", yi, ctx.int_value(w)), xi))
            v = ctx.op("reshape", ctx.op("gather", rows, ctx.op("reshape", pos, shape=(count,)), axis=0),
                       shape=(*shape, cpg))
            wgt = ctx.op("where", ctx.op("logical_and", yok, xok), ctx.op("mul", wy, wx), f(0.0))
            t = ctx.op("mul", v, ctx.op("unsqueeze", wgt, axes=(6,)))
            s = t if s is None else ctx.op("add", s, t)
    s = ctx.op("permute", s, perm=(0, 1, 6, 2, 3, 4, 5))  # [N, G, C/G, kh, kw, oh, ow]
    s = ctx.op("reshape", s, shape=(n, og, cpg, k, oh, ow))
    if ctx.tv(4) is not None:
        s = ctx.op("mul", s, ctx.op("reshape", ctx.value(4), shape=(n, og, 1, k, oh, ow)))
    s = ctx.op("reshape", s, shape=(n, group, cg * k, S.mul(oh, ow)))
    y = ctx.op("matmul", ctx.op("reshape", wt, shape=(1, group, oc // group, cg * k)), s)
    y = ctx.op("reshape", y, shape=(n, oc, oh, ow))
    if ctx.tv(3) is not None:
        y = ctx.op("add", y, ctx.op("reshape", ctx.value(3), shape=(1, oc, 1, 1)))
    return y
