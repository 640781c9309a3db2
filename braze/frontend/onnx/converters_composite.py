"""ONNX ops braze builds from its own: ArgMax/ArgMin (select_last_index through a reversed view),
Hardmax, OneHot, EyeLike, Shrink, LpNormalization, LRN, ReverseSequence, Det, MaxUnpool (an index_put into
zeros), the preview domain's FlexAttention, and the (Dynamic)QuantizeLinear and DequantizeLinear of 8- and
16-bit integers. Each is what ONNX's
reference computes, op for op; none has a kernel of its own."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from ...ops.shape import BIG
from .common import TV, onnx_dtype
from .convert import converter

I64 = DType.int64


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg(ctx):
    x = ctx.value(0)
    op = "argmax" if ctx.node.op_type == "ArgMax" else "argmin"
    axis, keep = ctx.attr("axis", 0) % max(x.rank, 1), bool(ctx.attr("keepdims", 1))
    if not ctx.attr("select_last_index", 0):
        return ctx.op(op, x, axis=axis, keepdims=keep)
    # the last occurrence: the first in the reversed axis, counted back from its end
    rev = ctx.op("slice", x, axis=axis, start=BIG, end=-BIG, step=-1)
    i = ctx.op(op, rev, axis=axis, keepdims=keep)
    return ctx.op("sub", ctx.int_value(S.add(x.shape[axis], -1)), i)


@converter("Hardmax", attrs=("axis",))
def _hardmax(ctx):
    x = ctx.value(0)
    axis = ctx.attr("axis", -1) % x.rank
    first = ctx.op("argmax", x, axis=axis, keepdims=True)
    return ctx.cast(ctx.op("equal", ctx.iota(x.shape[axis], axis, x.rank), first), x.dtype)


@converter("OneHot", attrs=("axis",))
def _one_hot(ctx):
    idx = ctx.value(0)
    depth = ctx.known_ints(1, "depth", run_time=(1, None))
    if len(depth) != 1:
        raise ctx.unsupported(f"depth must hold one value, got {len(depth)}")
    d = depth[0]
    if not S.is_symbolic(d):
        d = int(d)
    vals = ctx.value(2)
    rank = idx.rank + 1
    axis = ctx.attr("axis", -1) % rank
    i = ctx.cast(idx, I64) if idx.dtype.is_int else ctx.cast(ctx.op("floor", idx), I64)  # ONNX truncates floats
    i = ctx.op("unsqueeze", i, axes=(axis,))
    # a negative index counts from the end; one outside [-depth, depth) matches nothing
    dd = ctx.int_value(d)
    i = ctx.op("where", ctx.op("less", i, ctx.scalar(0, I64)), ctx.op("add", i, dd), i)
    hit = ctx.op("equal", ctx.iota(d, axis, rank), i)
    off = ctx.op("gather", vals, ctx.scalar(0, I64), axis=0)
    on = ctx.op("gather", vals, ctx.scalar(1, I64), axis=0)
    return ctx.op("where", hit, on, off)


@converter("EyeLike", attrs=("dtype", "k"))
def _eye_like(ctx):
    x = ctx.value(0)
    if x.rank != 2:
        raise ctx.unsupported(f"a rank-{x.rank} input", hint="EyeLike takes a 2-D tensor")
    dt = onnx_dtype(ctx.attr("dtype"), ctx.where()) if ctx.has_attr("dtype") else x.dtype
    rows = ctx.op("add", ctx.iota(x.shape[0], 0, 2), ctx.scalar(ctx.attr("k", 0), I64))
    return ctx.cast(ctx.op("equal", rows, ctx.iota(x.shape[1], 1, 2)), dt)


@converter("Shrink", attrs=("bias", "lambd"))
def _shrink(ctx):
    x = ctx.value(0)
    bias, lambd = ctx.scalar(ctx.attr("bias", 0.0), x.dtype), ctx.attr("lambd", 0.5)
    low = ctx.op("less", x, ctx.scalar(-lambd, x.dtype))
    high = ctx.op("greater", x, ctx.scalar(lambd, x.dtype))
    zero = ctx.scalar(0, x.dtype)
    return ctx.op("where", low, ctx.op("add", x, bias), ctx.op("where", high, ctx.op("sub", x, bias), zero))


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_normalization(ctx):
    x = ctx.value(0)
    p, axis = ctx.attr("p", 2), ctx.attr("axis", -1) % x.rank
    if p not in (1, 2):
        raise ctx.unsupported(f"p={p}", hint="ONNX's LpNormalization takes p 1 or 2")
    mag = ctx.op("abs", x) if p == 1 else ctx.op("mul", x, x)
    norm = ctx.op("reduce_sum", mag, axes=(axis,), keepdims=True)
    norm = norm if p == 1 else ctx.op("sqrt", norm)
    zero = ctx.scalar(0, x.dtype)  # a zero norm gives 0, not 0/0 (ONNX's reference)
    return ctx.op("where", ctx.op("equal", norm, zero), zero, ctx.op("div", x, norm))


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(ctx):
    """x / (bias + alpha / size * (the sum of x^2 over size channels around each))^beta: the window
    sum is an average pool over the channel axis, padded (size-1)//2 before and the rest after."""
    x = ctx.value(0)
    if x.rank != 4:
        raise ctx.unsupported(f"a rank-{x.rank} input", hint="braze's LRN takes NCHW")
    size = ctx.attr("size")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    n, c, h, w = x.shape
    sq = ctx.op("reshape", ctx.op("mul", x, x), shape=(n, 1, c, S.mul(h, w)))
    lo = (size - 1) // 2
    avg = ctx.op("avg_pool2d", sq, kernel=(size, 1), stride=(1, 1), padding=(lo, 0, size - 1 - lo, 0),
                 count_include_pad=True)  # the window's mean over size channels, zeros outside
    base = ctx.op("add", ctx.scalar(bias, x.dtype), ctx.op("mul", ctx.scalar(alpha, x.dtype),
                                                           ctx.op("reshape", avg, shape=(n, c, h, w))))
    return ctx.op("div", x, ctx.op("pow", base, ctx.scalar(beta, x.dtype)))


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def _reverse_sequence(ctx):
    x, lens = ctx.value(0), ctx.value(1)
    b_axis, t_axis = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    r = x.rank
    t = ctx.iota(x.shape[t_axis], t_axis, r)
    n = ctx.op("reshape", ctx.cast(lens, I64), shape=tuple(x.shape[b_axis] if i == b_axis else 1 for i in range(r)))
    # time t of batch b reads n[b] - 1 - t for t < n[b], and t itself past it
    src = ctx.op("where", ctx.op("less", t, n), ctx.op("sub", ctx.op("sub", n, ctx.scalar(1, I64)), t), t)
    src = ctx.op("expand", src, shape=tuple(x.shape))
    return ctx.op("gather_elements", x, src, axis=t_axis)


_Q_TYPES = (DType.uint8, DType.int8, DType.uint16, DType.int16)


def _q_param(ctx, i: int, x, axis: int, block: int):
    """Input i (a scale or zero point) broadcastable to x: a scalar, a vector along ``axis``, or blocks
    of ``block`` along it (each element repeated, the last block cut short); None when absent."""
    p = ctx.value(i)
    if p is None:
        return None
    if p.rank == 0 or (p.rank == 1 and p.shape[0] == 1):
        return ctx.op("reshape", p, shape=())
    if not block:
        if p.rank != 1:
            raise ctx.unsupported(f"a per-axis scale or zero point of rank {p.rank}", hint="give a vector")
        return ctx.op("reshape", p, shape=tuple(p.shape[0] if k == axis else 1 for k in range(x.rank)))
    if p.rank != x.rank:
        raise ctx.unsupported(f"a blocked scale or zero point of rank {p.rank} for a rank-{x.rank} input",
                              hint="a blocked scale has the input's rank (ONNX's block_size rule)")
    idx = ctx.op("div", ctx.iota(x.shape[axis]), ctx.scalar(block, I64))
    return ctx.op("gather", p, idx, axis=axis)


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def _dequantize(ctx):
    """(x - zero point) * scale, in float32 as ONNX's reference, then the scale's dtype (or output_dtype)."""
    x = ctx.value(0)
    axis, block = ctx.attr("axis", 1) % max(x.rank, 1), ctx.attr("block_size", 0)
    if not (x.dtype.is_int or x.dtype.is_narrow):
        raise ctx.unsupported(f"{x.dtype.name} input", hint="braze dequantizes integers and narrow types")
    scale, zp = _q_param(ctx, 1, x, axis, block), _q_param(ctx, 2, x, axis, block)
    dx = ctx.cast(x, DType.float32)
    if zp is not None:
        dx = ctx.op("sub", dx, ctx.cast(zp, DType.float32))
    out = onnx_dtype(ctx.attr("output_dtype"), ctx.where()) if ctx.attr("output_dtype") else scale.dtype
    return ctx.cast(ctx.op("mul", dx, ctx.cast(scale, DType.float32)), out)


@converter("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "saturate", "precision"))
def _quantize(ctx):
    """round_half_even(x / scale) + zero point, clipped to the integer type's range (the zero point's
    type, else output_dtype, else uint8)."""
    x = ctx.value(0)
    axis, block = ctx.attr("axis", 1) % max(x.rank, 1), ctx.attr("block_size", 0)
    scale, zp = _q_param(ctx, 1, x, axis, block), _q_param(ctx, 2, x, axis, block)
    out = zp.dtype if zp is not None else (onnx_dtype(ctx.attr("output_dtype"), ctx.where())
                                           if ctx.attr("output_dtype") else DType.uint8)
    if out not in _Q_TYPES and not out.is_narrow:
        raise ctx.unsupported(f"quantizing to {out.name}",
                              hint="braze quantizes to 16-, 8-, 4- and 2-bit integers, float8 and float4")
    dt = onnx_dtype(ctx.attr("precision"), ctx.where()) if ctx.attr("precision") else x.dtype
    q = ctx.op("div", ctx.cast(x, dt), ctx.cast(scale, dt))
    if out.is_minifloat:  # float8: the zero point is 0 (ONNX); float4 adds it, and saturates as it casts
        if out is DType.float4_e2m1fn and zp is not None:
            q = ctx.op("add", q, ctx.cast(zp, dt))
        elif out is not DType.float4_e2m1fn and ctx.attr("saturate", 1):
            q = ctx.op("clamp", q, min=-float(out.finfo.max), max=float(out.finfo.max))
        return ctx.cast(q, out)
    q = ctx.op("round", q)
    info = ml_dtypes.iinfo(out.numpy) if out.is_narrow else np.iinfo(out.numpy)
    lo, hi = int(info.min), int(info.max)
    # clipped before the cast, to int32's range: no float outside it is ever converted (undefined in C)
    q = ctx.cast(ctx.op("clamp", q, min=float(-2 ** 31), max=float(2 ** 31 - 128)), DType.int32)
    if zp is not None:
        q = ctx.op("add", q, ctx.cast(zp, DType.int32))
    return ctx.cast(ctx.op("clamp", q, min=float(lo), max=float(hi)), out)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize(ctx):
    """uint8 with a scale and zero point from x's range widened to hold 0: (max - min) / 255, and
    round(-min / scale) clipped; then QuantizeLinear's formula (ONNX's definition)."""
    x = ctx.value(0)
    f = lambda v: ctx.scalar(v, x.dtype)  # noqa: E731
    hi = ctx.op("maximum", ctx.op("reduce_max", x), f(0))
    lo = ctx.op("minimum", ctx.op("reduce_min", x), f(0))
    scale = ctx.op("div", ctx.op("sub", hi, lo), f(255))
    zp = ctx.op("clamp", ctx.op("round", ctx.op("div", ctx.op("sub", f(0), lo), scale)), min=0.0, max=255.0)
    q = ctx.op("clamp", ctx.op("add", ctx.op("round", ctx.op("div", x, scale)), zp), min=0.0, max=255.0)
    return [ctx.cast(q, DType.uint8), scale, ctx.cast(zp, DType.uint8)]


@converter("MaxUnpool", attrs=("kernel_shape", "pads", "strides"))
def _max_unpool(ctx):
    """Zeros of the unpooled shape with each X written at its index I (MaxPool's Indices: a flat
    position in that shape), in order: the last write wins. An ``output_shape`` larger than the
    unpooled shape pads it with zeros at the end of each axis, as ONNX's reference does."""
    x, idx = ctx.value(0), ctx.value(1)
    n = x.rank - 2
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * n))
    pads = list(ctx.attr("pads", [0] * (2 * n)))
    out = list(x.shape[:2]) + [S.add(S.mul(S.add(x.shape[2 + i], -1), strides[i]), kernel[i] - pads[i] - pads[n + i])
                               for i in range(n)]
    total = S.prod(tuple(out))
    zeros = ctx.op("full", shape=(total,), value=0.0, dtype=x.dtype)
    count = S.prod(tuple(x.shape))
    flat = ctx.op("index_put", zeros, ctx.op("reshape", idx, shape=(count,)), ctx.op("reshape", x, shape=(count,)),
                  axis=0, reduce="none")
    y = ctx.op("reshape", flat, shape=tuple(out))
    if ctx.tv(2) is None:
        return y
    want = ctx.known_ints(2, "output_shape")
    more = [S.add(w, S.mul(-1, o)) for w, o in zip(want, out)]
    if len(want) != len(out) or any(S.is_symbolic(m) or m < 0 for m in more):
        raise ctx.unsupported(f"output_shape {want} smaller than the unpooled shape {out}, or not known at import",
                              hint="give output_shape as a constant at least the unpooled shape")
    return y if not any(more) else ctx.op("pad", y, pads=(0,) * len(out) + tuple(more), mode="constant", value=0.0)


@converter("ai.onnx.preview::FlexAttention", attrs=("prob_mod", "score_mod", "softmax_precision", "scale"))
def _flex_attention(ctx):
    """softmax(score_mod(Q K^T scale)) then prob_mod, times V, as ONNX's reference: Q and K each scaled
    by sqrt(scale) in their dtype, the scores then cast to the softmax precision (float32 for 16-bit
    inputs), K and V heads repeated for grouped queries."""
    q, k, v = ctx.value(0), ctx.value(1), ctx.value(2)
    if not (q.rank == k.rank == v.rank == 4):
        raise ctx.unsupported(f"inputs {q.type}, {k.type}, {v.type} (FlexAttention takes rank-4 Q, K, V)")
    hq, hkv, e = q.shape[1], k.shape[1], q.shape[3]
    scale = ctx.attr("scale")
    if scale is None:
        if S.is_symbolic(e):
            raise ctx.unsupported(f"a symbolic head size {e} with no scale attribute")
        scale = 1.0 / float(np.sqrt(e))
    if hq != hkv:
        if S.is_symbolic(hq) or S.is_symbolic(hkv) or hq % hkv:
            raise ctx.unsupported(f"{hq} query heads over {hkv} key/value heads (a static multiple)")
        g = hq // hkv

        def repeat(t):
            b, h, n, d = t.shape
            t = ctx.op("expand", ctx.op("unsqueeze", t, axes=(2,)), shape=(b, h, g, n, d))
            return ctx.op("reshape", t, shape=(b, S.mul(h, g), n, d))
        k, v = repeat(k), repeat(v)
    prec = ctx.attr("softmax_precision")
    cd = onnx_dtype(prec, "softmax_precision") if prec is not None else \
        (q.dtype if q.dtype.itemsize >= 4 else DType.float32)
    root = ctx.scalar(np.sqrt(np.float32(scale)), q.dtype)
    scores = ctx.op("matmul", ctx.op("mul", q, root), ctx.op("permute", ctx.op("mul", k, root), perm=(0, 1, 3, 2)))
    scores = ctx.cast(scores, cd)

    def mod(name, t):
        graph = ctx.attr(name)
        if graph is None:
            return t
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise ctx.unsupported(f"a {name} of {len(graph.input)} inputs and {len(graph.output)} outputs (1 and 1)")
        return ctx.cast(ctx.imp.materialize(ctx.imp.run_subgraph(graph, [TV(value=t)])[0]), cd)
    probs = mod("prob_mod", ctx.op("softmax", mod("score_mod", scores), axis=-1))
    return ctx.cast(ctx.op("matmul", probs, ctx.cast(v, cd)), v.dtype)


# unrolled elimination in one pointwise kernel, whose C repeats each row's expression wherever it is read:
# 3 rows compile in 1 s, 4 took 53 s
DET_MAX = 3


@converter("Det")
def _det(ctx):
    """Gaussian elimination with partial pivoting (as LAPACK's LU, which numpy.linalg.det and ONNX's
    reference use), unrolled over the static n: the matrix as n row tensors [..., n]; at step k the row
    with the largest |x[i, k]| (the first of equals) swaps in, flipping the sign, and the rows below lose
    their multiple of it. A zero pivot column gives 0, not NaN."""
    x = ctx.value(0)
    n = x.shape[-1] if x.rank >= 2 else None
    if x.rank < 2 or not isinstance(n, int) or ctx.imp.module.constraints.equal(n, x.shape[-2]) is not True:
        raise ctx.unsupported(f"input {x.type}", hint="Det takes [..., n, n] with n static")
    if not 1 <= n <= DET_MAX or not x.dtype.is_float:
        raise ctx.unsupported(f"a {n} x {n} {x.dtype.name} matrix",
                              hint=f"braze's Det is unrolled: float matrices of 1 to {DET_MAX} rows")
    r = x.rank
    rows = [ctx.op("squeeze", ctx.op("slice", x, axis=r - 2, start=i, end=i + 1, step=1), axes=(r - 2,))
            for i in range(n)]

    def col(v, k):
        return ctx.op("slice", v, axis=r - 2, start=k, end=k + 1, step=1)  # [..., 1]

    zero, one = ctx.scalar(0, x.dtype), ctx.scalar(1, x.dtype)
    det = None
    for k in range(n):
        best, piv = ctx.op("abs", col(rows[k], k)), ctx.scalar(k, I64)
        for i in range(k + 1, n):
            a = ctx.op("abs", col(rows[i], k))
            take = ctx.op("greater", a, best)
            best, piv = ctx.op("where", take, a, best), ctx.op("where", take, ctx.scalar(i, I64), piv)
        pivot_row = rows[k]
        for i in range(k + 1, n):
            here = ctx.op("equal", piv, ctx.scalar(i, I64))
            pivot_row, rows[i] = ctx.op("where", here, rows[i], pivot_row), ctx.op("where", here, rows[k], rows[i])
        rows[k] = pivot_row
        p = col(pivot_row, k)
        sign = ctx.op("where", ctx.op("equal", piv, ctx.scalar(k, I64)), one, ctx.op("neg", one))
        term = ctx.op("mul", p, sign)
        det = term if det is None else ctx.op("mul", det, term)
        nonzero = ctx.op("not_equal", p, zero)
        for i in range(k + 1, n):
            f = ctx.op("where", nonzero, ctx.op("div", col(rows[i], k), p), zero)
            rows[i] = ctx.op("sub", rows[i], ctx.op("mul", f, pivot_row))
    return ctx.op("squeeze", det, axes=(r - 2,))
