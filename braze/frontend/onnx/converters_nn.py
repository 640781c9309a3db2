"""ONNX Conv, ConvTranspose and pooling -> braze conv2d / conv_transpose2d / max_pool2d / avg_pool2d (1-D via an
added axis; 3-D pools as 2-D pools over H and W, then D);
GroupNormalization -> group_norm; Resize -> resize."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from ...ops.resize import COORDS as _RESIZE_COORDS
from ..sizes import floor_scaled
from . import fold
from .convert import converter
from .converters_fold import conv_transpose_nd, fold_blocks


def _spatial(ctx, x, dims=(1, 2)) -> int:
    """x's number of spatial dims, one of ``dims`` (convolutions take 1-D and 2-D, pools 3-D too)."""
    n = x.rank - 2
    if n not in dims:
        what = "convolution" if dims == (1, 2) else "pooling"
        raise ctx.unsupported(f"{n}-D {ctx.node.op_type} (input {x.type})",
                              hint=f"braze supports {', '.join(f'{d}-D' for d in dims)} {what}")
    return n


def _geometry(ctx, x, kernel):
    """strides, dilations, explicit pads (begin..., end...) or a symbolic pad list, for 2-D."""
    n = len(kernel)
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * (2 * n)))
        return strides, dil, pads, None
    if auto == "VALID":
        return strides, dil, [0] * (2 * n), None
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad={auto!r}")
    pads_b, pads_e, sym = [], [], False
    for i in range(n):
        d = x.shape[2 + i]
        s, k, dl = strides[i], kernel[i], dil[i]
        eff = (k - 1) * dl + 1
        if s == 1:
            total = eff - 1
        else:
            out = S.floordiv(S.add(d, s - 1), s)
            total = S.smax(S.add(S.add(S.mul(S.add(out, -1), s), eff), S.mul(-1, d)), 0)
        small = S.floordiv(total, 2)
        big = S.add(total, S.mul(-1, small))
        b, e = (small, big) if auto == "SAME_UPPER" else (big, small)
        sym = sym or S.is_symbolic(b) or S.is_symbolic(e)
        pads_b.append(b)
        pads_e.append(e)
    return strides, dil, pads_b + pads_e, sym


def _to2d(ctx, x, w=None):
    x = ctx.op("unsqueeze", x, axes=(2,))
    if w is not None:
        w = ctx.op("unsqueeze", w, axes=(2,))
    return x, w


def _pads4(pads, n):
    """ONNX (b0, b1, e0, e1) -> braze (top, left, bottom, right) for 2-D; 1-D gets a zero H pad."""
    if n == 1:
        return (0, pads[0], 0, pads[1])
    return (pads[0], pads[1], pads[2], pads[3])


def _explicit_pad(ctx, x, pads, n, value=0.0):
    """Pad spatial dims with a pad op (for symbolic SAME padding)."""
    r = x.rank
    begins = [0] * (r - n) + list(pads[:n])
    ends = [0] * (r - n) + list(pads[n:])
    return ctx.op("pad", x, pads=tuple(begins + ends), mode="constant", value=value)


def _conv_operands(ctx):
    """(x, w, bias, spatial rank, kernel) of a Conv or ConvTranspose."""
    x, w, b = ctx.value(0), ctx.value(1), ctx.value(2)
    n = _spatial(ctx, x)
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    if any(S.is_symbolic(k) for k in kernel):
        raise ctx.unsupported("a kernel with symbolic size")
    return x, w, b, n, kernel


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(ctx):
    x, w, b, n, kernel = _conv_operands(ctx)
    strides, dil, pads, sym = _geometry(ctx, x, kernel)
    if sym:
        x = _explicit_pad(ctx, x, pads, n)
        pads = [0] * (2 * n)
    if n == 1:
        x, w = _to2d(ctx, x, w)
        strides, dil = [1] + strides, [1] + dil
    y = ctx.op("conv2d", x, w, b, stride=tuple(strides), padding=_pads4(pads, n), dilation=tuple(dil),
               groups=ctx.attr("group", 1))
    if n == 1:
        y = ctx.op("squeeze", y, axes=(2,))
    return y


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
                                   "pads", "strides"))
def _conv_transpose(ctx):
    """1-D and 2-D: braze's conv_transpose2d (oneDNN); 3-D: a product folded back (converters_fold)."""
    x, w, b = ctx.value(0), ctx.value(1), ctx.value(2)
    n = _spatial(ctx, x, (1, 2, 3))
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    if any(S.is_symbolic(k) for k in kernel):
        raise ctx.unsupported("a kernel with symbolic size")
    if x.dtype is not DType.float32 or w.dtype is not DType.float32:
        raise ctx.unsupported(f"{x.dtype.name} operands", hint="braze's transposed convolution is float32")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    opad = list(ctx.attr("output_padding", [0] * n))
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # the pads that give that output: ONNX's rule, the odd pixel at the end for SAME_UPPER
        want = list(out_shape)[-n:] if out_shape is not None else [S.mul(x.shape[2 + i], strides[i]) for i in range(n)]
        pb, pe = [], []
        for i in range(n):
            total = S.add(S.mul(strides[i], S.add(x.shape[2 + i], -1)),
                          S.add(opad[i] + (kernel[i] - 1) * dil[i] + 1, S.mul(-1, want[i])))
            half = S.floordiv(total, 2)
            rest = S.add(total, S.mul(-1, half))
            pb.append(half if auto == "SAME_UPPER" else rest)
            pe.append(rest if auto == "SAME_UPPER" else half)
        for i in range(n):  # a negative end pad adds rows at the end: output_padding's
            if not S.is_symbolic(pe[i]) and pe[i] < 0:
                opad[i], pe[i] = opad[i] - pe[i], 0
        pads = pb + pe
        if any(S.is_symbolic(p) for p in pads) or any(p < 0 for p in pads):
            raise ctx.unsupported(f"output_shape/auto_pad that needs pads {pads} (symbolic or negative)",
                                  hint="export the ConvTranspose with explicit pads and output_padding")
    elif auto in ("NOTSET", "", "VALID"):
        pads = [0] * (2 * n) if auto == "VALID" else list(ctx.attr("pads", [0] * (2 * n)))
    else:
        raise ctx.unsupported(f"auto_pad={auto!r}")
    if n == 3:
        y = conv_transpose_nd(ctx, x, w, strides, dil, pads, opad, ctx.attr("group", 1))
        return y if b is None else ctx.op("add", y, ctx.op("reshape", b, shape=(b.shape[0], 1, 1, 1)))
    if n == 1:
        x, w = _to2d(ctx, x, w)
        strides, dil, opad = [1] + strides, [1] + dil, [0] + opad
    y = ctx.op("conv_transpose2d", x, w, stride=tuple(strides), padding=_pads4(pads, n), dilation=tuple(dil),
               output_padding=tuple(opad), groups=ctx.attr("group", 1))
    if b is not None:
        y = ctx.op("add", y, ctx.op("reshape", b, shape=(b.shape[0], 1, 1)))
    if n == 1:
        y = ctx.op("squeeze", y, axes=(2,))
    return y


def _pool_nd(ctx, op: str, x, kernel, strides, dil, pads, **kw):
    """braze's 2-D ``op`` (max_pool2d or avg_pool2d) over the 1, 2 or 3 spatial dims of ``x`` (ONNX
    pads: begins, then ends). 1-D adds an axis. 3-D pools H and W, then D: a max, and an average
    (whose divisor is the product of each axis's count), over a box are so separable."""
    n = x.rank - 2
    common = dict(ceil_mode=bool(ctx.attr("ceil_mode", 0)), **kw)
    if n == 1:
        y = ctx.op(op, _to2d(ctx, x)[0], kernel=(1, kernel[0]), stride=(1, strides[0]), dilation=(1, dil[0]),
                   padding=_pads4(pads, 1), **common)
        return ctx.op("squeeze", y, axes=(2,))
    if n == 2:
        return ctx.op(op, x, kernel=tuple(kernel), stride=tuple(strides), dilation=tuple(dil),
                      padding=_pads4(pads, 2), **common)
    N, C, D = x.shape[:3]
    hw = ctx.op(op, ctx.op("reshape", x, shape=(N, S.mul(C, D)) + tuple(x.shape[3:])), kernel=tuple(kernel[1:]),
                stride=tuple(strides[1:]), dilation=tuple(dil[1:]), padding=(pads[1], pads[2], pads[4], pads[5]),
                **common)
    OH, OW = hw.shape[2:]
    d = ctx.op(op, ctx.op("reshape", hw, shape=(N, C, D, S.mul(OH, OW))), kernel=(kernel[0], 1),
               stride=(strides[0], 1), dilation=(dil[0], 1), padding=(pads[0], 0, pads[3], 0), **common)
    return ctx.op("reshape", d, shape=(N, C, d.shape[2], OH, OW))


def _max_pool_indices(ctx, x, kernel, strides, dil, pads, sym):
    """MaxPool's Indices: each window's winner as a flat position in the whole tensor, row-major in its
    plane (or column-major: storage_order 1); braze's max_pool2d_indices gives it row-major in the
    plane (a NaN wins, its last)."""
    n = x.rank - 2
    if n == 3 or sym:
        raise ctx.unsupported("the Indices output of a 3-D pool, or of symbolic padding",
                              hint="braze gives 1-D and 2-D pools' indices")
    idx = _pool_nd(ctx, "max_pool2d_indices", x, kernel, strides, dil, pads)
    if n == 2 and ctx.attr("storage_order", 0):  # column-major in the plane: h + w * H
        H, W = (ctx.int_value(d) for d in x.shape[2:])
        h = ctx.op("div", idx, W)
        idx = ctx.op("add", h, ctx.op("mul", ctx.op("sub", idx, ctx.op("mul", h, W)), H))
    N, C = x.shape[:2]
    plane = S.prod(tuple(x.shape[2:]))
    rows = ctx.op("reshape", ctx.iota(S.mul(N, C)), shape=(N, C) + (1,) * n)
    return ctx.op("add", idx, ctx.op("mul", rows, ctx.int_value(plane)))


@converter("MaxPool", "AveragePool",
           attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides", "storage_order",
                  "count_include_pad"))
def _pool(ctx):
    t = ctx.node.op_type
    x = ctx.value(0)
    n = _spatial(ctx, x, (1, 2, 3))
    kernel = list(ctx.attr("kernel_shape"))
    strides, dil, pads, sym = _geometry(ctx, x, kernel)
    if ctx.node.output[1:] and any(ctx.node.output[1:]):
        return [_pool_nd(ctx, "max_pool2d", x, kernel, strides, dil, pads), _max_pool_indices(ctx, x, kernel, strides,
                                                                                             dil, pads, sym)]
    cip = bool(ctx.attr("count_include_pad", 0))
    counts = None
    if sym:
        if t == "AveragePool" and not cip:
            # how many of each window's pixels are the input's: the same pool over ones, padded the same
            ones = ctx.op("full", shape=(1, 1, *x.shape[2:]), value=1.0, dtype=x.dtype)
            counts = _explicit_pad(ctx, ones, pads, n)
        x = _explicit_pad(ctx, x, pads, n, value=float("-inf") if t == "MaxPool" else 0.0)
        pads = [0] * (2 * n)
    if t == "MaxPool":
        return _pool_nd(ctx, "max_pool2d", x, kernel, strides, dil, pads)
    if counts is not None:  # the padded sum's mean over the window, divided by the input's share of it
        return ctx.op("div", _pool_nd(ctx, "avg_pool2d", x, kernel, strides, dil, pads, count_include_pad=True),
                      _pool_nd(ctx, "avg_pool2d", counts, kernel, strides, dil, pads, count_include_pad=True))
    return _pool_nd(ctx, "avg_pool2d", x, kernel, strides, dil, pads, count_include_pad=cip)


@converter("LpPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"))
def _lp_pool(ctx):
    """(the window's sum of |x|^p)^(1/p): an average pool of |x|^p over the window, padding counted
    (zeros add nothing), times the window's size."""
    x = ctx.value(0)
    n = _spatial(ctx, x, (1, 2, 3))
    kernel = list(ctx.attr("kernel_shape"))
    strides, dil, pads, sym = _geometry(ctx, x, kernel)
    p = float(ctx.attr("p", 2))
    a = ctx.op("abs", x)
    xp = ctx.op("mul", a, a) if p == 2.0 else ctx.op("pow", a, ctx.scalar(p, x.dtype))
    if sym:
        xp = _explicit_pad(ctx, xp, pads, n)
        pads = [0] * (2 * n)
    y = _pool_nd(ctx, "avg_pool2d", xp, kernel, strides, dil, pads, count_include_pad=True)
    y = ctx.op("mul", y, ctx.scalar(float(np.prod(kernel)), x.dtype))
    return ctx.op("sqrt", y) if p == 2.0 else ctx.op("pow", y, ctx.scalar(1.0 / p, x.dtype))


@converter("GridSample", attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample(ctx):
    x = ctx.value(0)
    if x.rank not in (4, 5):
        raise ctx.unsupported(f"{x.rank - 2}-D GridSample (input {x.type})", hint="braze samples 2-D and 3-D grids")
    if x.dtype not in (DType.float32, DType.float64) or ctx.value(1).dtype is not x.dtype:
        raise ctx.unsupported(f"{x.dtype.name} operands", hint="braze's GridSample is float32 or float64")
    mode = ctx.attr("mode", "bilinear" if ctx.version < 20 else "linear")
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)  # opset 20's names
    if x.rank == 5 and mode == "bicubic":
        raise ctx.unsupported("cubic sampling of a volume", hint="braze samples volumes linear or nearest")
    return ctx.op("grid_sample", x, ctx.value(1), mode=mode, padding_mode=ctx.attr("padding_mode", "zeros"),
                  align_corners=bool(ctx.attr("align_corners", 0)))


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx):
    x = ctx.value(0)
    op = "reduce_mean" if ctx.node.op_type == "GlobalAveragePool" else "reduce_max"
    return ctx.op(op, x, axes=tuple(range(2, x.rank)), keepdims=True)


# ---------------------------------------------------------------------------
# GroupNormalization, Resize
# ---------------------------------------------------------------------------


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_norm(ctx):
    x, scale, bias = ctx.value(0), ctx.value(1), ctx.value(2)
    g = int(ctx.attr("num_groups"))  # opset 21: scale and bias per channel (opset 18's per-group form is
    # deprecated, and onnx.checker rejects it)
    return ctx.op("group_norm", x, scale, bias, groups=g, eps=float(ctx.attr("epsilon", 1e-5)))




@converter("Resize", attrs=("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
                            "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy", "mode",
                            "nearest_mode"))
def _resize(ctx):
    x = ctx.value(0)
    r = x.rank
    coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in _RESIZE_COORDS:
        raise ctx.unsupported(f"coordinate_transformation_mode={coord!r}",
                              hint=f"braze supports {', '.join(_RESIZE_COORDS)}")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    axes = [a % r for a in ctx.attr("axes", list(range(r)))]
    scales_t, sizes_t = ctx.tv(2), ctx.tv(3)
    scales = sizes = None
    if sizes_t is not None and sizes_t.shape and sizes_t.shape[0] != 0:
        # fed at run time only where each size is the output's (policy stretch) and no kernel width
        # depends on it (antialias)
        sizes = ctx.known_ints(3, "sizes", run_time=(1, None) if policy == "stretch" and not ctx.attr("antialias", 0)
                               else None)
    elif scales_t is not None and scales_t.shape and scales_t.shape[0] != 0:
        k = ctx.known(2)
        if k is None or fold.is_symbolic_array(k):
            raise ctx._needs_known(2, "scales")
        scales = [float(v) for v in np.asarray(k, dtype=np.float64).reshape(-1)]
    else:
        raise ctx.unsupported("needs scales or sizes")
    if sizes is not None and policy != "stretch":  # one scale for every axis, the sizes rounded half up
        if any(S.is_symbolic(v) for v in sizes) or any(S.is_symbolic(x.shape[a]) for a in axes):
            raise ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} with symbolic sizes")
        ratios = [sizes[j] / x.shape[a] for j, a in enumerate(axes)]
        sc = min(ratios) if policy == "not_larger" else max(ratios)
        scales, sizes = [sc] * len(axes), None
        rounded = {a: int(sc * x.shape[a] + 0.5) for a in axes}
    else:
        rounded = {}
    full_scale = [1.0] * r
    full_size = list(x.shape)
    for j, a in enumerate(axes):
        if sizes is not None:
            full_size[a] = sizes[j]
        else:
            full_scale[a] = scales[j]
            full_size[a] = rounded[a] if a in rounded else floor_scaled(x.shape[a], scales[j])
            if full_size[a] is None:
                raise ctx.unsupported(f"the output size floor({x.shape[a]} * {scales[j]}) cannot be kept symbolic",
                                      hint="export with sizes instead of scales")
    full_roi = [(0.0, 1.0)] * r
    if coord == "tf_crop_and_resize":
        k = ctx.known(1)
        if k is None or fold.is_symbolic_array(k):
            raise ctx._needs_known(1, "roi")
        k = [float(v) for v in np.asarray(k, dtype=np.float64).reshape(-1)]
        if len(k) != 2 * len(axes):
            raise ctx.unsupported(f"a roi of {len(k)} numbers for {len(axes)} axes", hint="give a start and an end "
                                  "per axis")
        for j, a in enumerate(axes):
            full_roi[a] = (k[j], k[len(axes) + j])
    eq = ctx.imp.module.constraints.equal
    changed = [a for a in range(r) if (sizes is not None and eq(full_size[a], x.shape[a]) is not True)
               or (sizes is None and full_scale[a] != 1.0) or full_roi[a] != (0.0, 1.0)]
    if not changed:
        return ctx.op("mul", x, ctx.scalar(1, x.dtype)) if x.dtype.is_float else ctx.tv(0)
    first = min(changed)  # resize the trailing axes from the first changed one (the others map to themselves)
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.unsupported(f"mode={mode!r}")
    roi = None if coord != "tf_crop_and_resize" else \
        tuple(s for s, _ in full_roi[first:]) + tuple(e for _, e in full_roi[first:])
    return ctx.op("resize", x, sizes=tuple(full_size[first:]), mode=mode, coord=coord,
                  nearest=ctx.attr("nearest_mode", "round_prefer_floor"),
                  scales=None if sizes is not None else tuple(full_scale[first:]),
                  cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)), exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                  roi=roi, extrapolation=float(ctx.attr("extrapolation_value", 0.0)),
                  antialias=bool(ctx.attr("antialias", 0)) and mode != "nearest")


@converter("Col2Im", attrs=("dilations", "pads", "strides"))
def _col2im(ctx):
    """Blocks summed back into an image (torch's fold): a transposed convolution, one group per channel,
    whose weight puts each block row at its tap (a one-hot); output_padding adds what the block grid
    leaves uncovered at the end."""
    x = ctx.value(0)
    image = [int(v) for v in ctx.known_ints(1, "image_shape")]
    block = [int(v) for v in ctx.known_ints(2, "block_shape")]
    n = len(image)
    if n not in (1, 2, 3) or len(block) != n:
        raise ctx.unsupported(f"a {n}-D image", hint="braze folds 1-D, 2-D and 3-D images")
    if x.dtype is not DType.float32:
        raise ctx.unsupported(f"{x.dtype.name} input", hint="braze's transposed convolution is float32")
    strides = list(ctx.attr("strides", [1] * n))
    dil = list(ctx.attr("dilations", [1] * n))
    pads = list(ctx.attr("pads", [0] * (2 * n)))
    k = int(np.prod(block))
    N, CK, L = x.shape
    if S.is_symbolic(CK) or CK % k:
        raise ctx.unsupported(f"{CK} block rows, not a multiple of the block's {k} elements")
    C = CK // k
    grid, extra = [], []
    for i in range(n):
        span = image[i] + pads[i] + pads[n + i] - dil[i] * (block[i] - 1) - 1
        if span < 0:
            raise ctx.unsupported(f"a block of {block[i]} (dilation {dil[i]}) larger than the padded image")
        grid.append(span // strides[i] + 1)
        extra.append(span % strides[i])
    if n == 3:
        return fold_blocks(ctx, x, N, C, image, block, grid, strides, dil, pads)
    if n == 1:
        image, block, strides, dil, pads = [1] + image, [1] + block, [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]]
        grid, extra = [1] + grid, [0] + extra
    else:
        pads = [pads[0], pads[1], pads[2], pads[3]]
    y = ctx.op("reshape", x, shape=(N, CK, grid[0], grid[1]))
    w = np.zeros((C * k, 1, block[0], block[1]), np.float32)
    for c in range(C):
        for j in range(k):
            w[c * k + j, 0, j // block[1], j % block[1]] = 1.0
    y = ctx.op("conv_transpose2d", y, ctx.const(w), stride=tuple(strides), padding=tuple(pads), dilation=tuple(dil),
               output_padding=tuple(extra), groups=C)
    return ctx.op("squeeze", y, axes=(2,)) if n == 1 else y
