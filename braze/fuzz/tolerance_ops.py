"""Error bounds of the structured ops for ``tolerance.py``: scans, scatters, pooling and its
gradient, the norms, resize, topk, products, convolutions, grid samples and attention (forward and
backward), each from a running error analysis on the reference's own values (``tolerance.py``'s
docstring)."""

from __future__ import annotations

import math

import numpy as np

from .tolerance_math import BIG, clean, count, f64, finfo, is_float, mag, move, overflow, rnd, unbounded_if, unit

def _scan(ctx, opdef, ins, es, outs, attrs):
    """cumsum and cumprod: n + 1 roundings of the running value, and the operands' errors carried."""
    x, e, out = ins[0], es[0], outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([opdef.reference(ctx, e, **attrs)], out.shape)
    n = np.shape(x)[attrs["axis"] % np.ndim(x)] if np.ndim(x) else 1
    cx = opdef.reference(ctx, mag(x), **attrs)
    if opdef.name == "cumsum":
        pe = opdef.reference(ctx, f64(e), **attrs)
        return clean(pe, pe) + (n + 1) * unit(out) * cx + overflow(cx, out)
    pe = opdef.reference(ctx, mag(x) + f64(e), **attrs) - cx  # each factor off by its error, at worst
    # a partial product in another order (braze's reversed scan multiplies from the element on) can
    # overflow where the reference's does not: bounded by the product of the factors above 1
    big = opdef.reference(ctx, np.maximum(mag(x), 1.0), **attrs)
    small = opdef.reference(ctx, np.minimum(mag(x), 1.0), **attrs)  # ... or underflow: then all of it may go
    under = np.where(small < finfo(np.asarray(out).dtype).tiny, cx, 0.0) if is_float(np.asarray(out).dtype) else 0.0
    return clean(pe, pe) + (n + 1) * unit(out) * cx + overflow(big, out) + under


def _attention_backward(ctx, opdef, ins, es, outs, attrs):
    """A running error analysis of the backward's formula (braze_attention.h's doc) on the
    reference's values in float64: the scores, p = exp(s - lse), then each product's sums."""
    q, k, v, o, do, lse = (f64(x) for x in ins[:6])
    mask = ins[6] if len(ins) > 6 else None
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, 1), np.repeat(v, g, 1)
    u, sc, (E, Ev), (L, S) = unit(outs[0]), attrs["scale"], (q.shape[-1], v.shape[-1]), (q.shape[2], k.shape[2])
    t = lambda a: np.swapaxes(a, -1, -2)  # noqa: E731
    s = q @ t(k) * sc
    keep = np.ones(s.shape, bool)
    if attrs.get("is_causal"):
        keep &= np.tril(np.ones((L, S), bool))
    if mask is not None:
        keep &= mask if mask.dtype == np.bool_ else np.isfinite(mask)
        s = s if mask.dtype == np.bool_ else s + np.where(np.isfinite(mask), mask, 0)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.where(keep, np.exp(np.minimum(s - lse[..., None], 700)), 0.0)
    es = (E + 2) * u * (mag(q) @ t(mag(k))) * sc + 2 * u * np.abs(s)
    ep = np.where(keep, p * (es + u * np.abs(s - lse[..., None]) + 8 * u), 0.0)
    dp, d = do @ t(v), np.sum(do * o, -1, keepdims=True)
    e_dpd = (Ev + 2) * u * (mag(do) @ t(mag(v)) + np.sum(mag(do * o), -1, keepdims=True))
    ds = p * (dp - d) * sc
    e_ds = (ep * np.abs(dp - d) + p * e_dpd + 4 * u * np.abs(ds / sc)) * sc
    e_dq = e_ds @ mag(k) + (S + 2) * u * (np.abs(ds) @ mag(k))
    e_dk = t(e_ds) @ mag(q) + (L + 2) * u * (t(np.abs(ds)) @ mag(q))
    e_dv = t(ep) @ mag(do) + (L + 2) * u * (t(p) @ mag(do))
    fold = lambda a: a.reshape(a.shape[0], a.shape[1] // g, g, *a.shape[2:]).sum(2) * (1 + g * u)  # noqa: E731
    if any(e is not None and np.any(np.asarray(e) != 0) for e in es):  # the proposer gives exact operands
        return [np.full(x.shape, np.inf) for x in outs]
    return [np.where(np.isfinite(x), x, np.inf) for x in (e_dq, fold(e_dk), fold(e_dv))]


def _index_add(ctx, opdef, ins, es, outs, attrs):
    """A running sum per row, as cumsum's: each row's errors added up, and a rounding per add
    of at most the row's sum of magnitudes (n the most adds any row takes, plus one)."""
    x, idx, src = ins
    out = outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([es[0], es[2]], out.shape)
    pe = opdef.reference(ctx, f64(es[0]), idx, f64(es[2]), **attrs)
    cx = opdef.reference(ctx, mag(x), idx, mag(src), **attrs)
    n = np.bincount(np.asarray(idx, np.int64) % max(np.shape(x)[attrs["axis"] % np.ndim(x)], 1)).max(initial=0)
    return clean(pe, pe) + (n + 1) * unit(out) * cx + overflow(cx, out)


def _index_put(ctx, opdef, ins, es, outs, attrs):
    """none moves the error with the row written last; max and min keep a value within the larger
    error of the values they compare; a product's errors are not followed (exact operands: a
    rounding per product, n the most products any element takes)."""
    x, idx, src = ins
    out = outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([es[0], es[2]], out.shape)
    if attrs["reduce"] == "none":
        return opdef.reference(ctx, f64(es[0]), idx, f64(es[2]), **attrs)
    if attrs["reduce"] in ("max", "min"):
        return opdef.reference(ctx, f64(es[0]), idx, f64(es[2]), **dict(attrs, reduce="max"))
    n = np.bincount(np.asarray(idx, np.int64) % max(np.shape(x)[attrs["axis"] % np.ndim(x)], 1)).max(initial=0)
    return unbounded_if([es[0], es[2]], out.shape) + rnd(out, n + 1)


def _max_pool_backward(ctx, opdef, ins, es, outs, attrs):
    """grad added at each window's winner: a sum per input position, as index_add's (n the most
    windows one position wins, plus one, roundings of its sum of magnitudes; seed 60658 summed
    +-3e38 with 0.23 in another order); unbounded where the winners may differ."""
    grad, x, idx = ins
    out = outs[0]
    add = lambda g: f64(opdef.reference(ctx, np.asarray(g, np.float64), x, idx, **attrs))  # noqa: E731
    pe = add(np.zeros(np.shape(grad)) if es[0] is None else es[0])
    cx = add(mag(grad))
    n = add(np.ones(np.shape(grad))).max(initial=0)
    return clean(pe, pe) + (n + 1) * unit(out) * cx + overflow(cx, out) + unbounded_if([es[2]], out.shape)


def _softmax(ctx, opdef, ins, es, outs, attrs):
    x, e, out = f64(ins[0]), es[0], outs[0]
    if x.ndim == 0:
        return rnd(out, 8)
    ax = attrs["axis"] % x.ndim
    n = x.shape[ax]
    u = unit(out)
    mx = np.max(np.nan_to_num(x, nan=0.0, posinf=BIG, neginf=-BIG), axis=ax, keepdims=True, initial=-BIG)
    ez = e + u * (mag(x) + mag(mx))  # the error of x - max
    emax = np.max(ez, axis=ax, keepdims=True, initial=0.0)
    if opdef.name == "softmax":
        y = mag(out)
        # a 16-bit softmax computes in float32 and rounds where it is stored (stage widen): cast to
        # a wider type in the same kernel, a value below the 16-bit normal range stays (seed 48064)
        floor = 1e-38 if np.asarray(out).dtype.itemsize >= 4 else float(finfo(out.dtype).tiny)
        return clean(y * np.expm1(2 * (ez + emax)), emax) + 2 * (n + 8) * u * y + floor
    return clean(ez + emax, emax) + (n + 8) * u + rnd(out, 4)


def _layer_norm(ctx, opdef, ins, es, outs, attrs):
    x, out = f64(ins[0]), outs[0]
    e = es[0]
    nd = x.ndim
    ax = tuple(range(attrs["axis"] % nd, nd))
    n = count(x, ax)
    u = unit(out)
    eps = attrs["eps"]
    X = mag(x)
    rms = opdef.name == "rms_norm"
    if rms:
        c = x
        v = np.mean(x * x, axis=ax, keepdims=True)
        ec = e + n * u * X
        dv = 2 * np.mean(X * ec, axis=ax, keepdims=True) + np.mean(ec * ec, axis=ax, keepdims=True)
    else:
        m = np.mean(x, axis=ax, keepdims=True)
        c = x - m
        v = np.mean(c * c, axis=ax, keepdims=True)
        ec = e + np.mean(e, axis=ax, keepdims=True) + 2 * n * u * np.mean(X, axis=ax, keepdims=True)
        dv = 2 * np.mean(mag(c) * ec, axis=ax, keepdims=True) + np.mean(ec * ec, axis=ax, keepdims=True)
    dv = dv + 2 * (n + 2) * u * np.mean(X * X, axis=ax, keepdims=True)
    ovf = overflow(n * np.mean(X * X, axis=ax, keepdims=True), out)
    s_lo = np.sqrt(np.maximum(v - dv, 0.0) + eps)
    s_hi = np.sqrt(v + dv + eps)
    p = ec / s_lo + mag(c) * (1.0 / s_lo - 1.0 / s_hi)
    w = ins[1] if len(ins) > 1 and ins[1] is not None else None
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
    extra = [x_ for x_ in es[1:] if x_ is not None]
    y = mag(c) / np.sqrt(v + eps)
    if w is not None:
        # the normalized value, if denormal, keeps few bits, and |w| (up to 3e38) scales its
        # spacing (fuzz seed 71609: 5.5e-45 times 3e38)
        sub = float(finfo(np.promote_types(out.dtype, np.float32)).smallest_subnormal)
        p = p * mag(w) + 2 * sub * mag(w)
        y = y * mag(w)
        # the scaled value may overflow before the bias brings it back (inf there; torch's fused
        # multiply-add keeps it finite: fuzz seed 65, a weight and a bias of 3e38)
        ovf = ovf + overflow(y, out)
    r = 8 * u * (y + (mag(bias) if bias is not None else 0.0))
    # p holds the rounding of the mean and variance too: not zero even for exact operands
    return clean(p) + unbounded_if(extra, out.shape) + r + rnd(out, 2) + ovf


def _batch_norm(ctx, opdef, ins, es, outs, attrs):
    x, scale, bias, mean, var = (f64(a) for a in ins)
    out = outs[0]
    shape = (1, -1) + (1,) * (x.ndim - 2)
    k = mag(scale).reshape(shape) / np.sqrt(var.reshape(shape) + attrs["eps"])
    y = mag(x - mean.reshape(shape)) * k
    r = 6 * unit(out) * (y + mag(bias).reshape(shape) + mag(x) * k)
    # any evaluation order: (x - mean) * scale / sqrt(var + eps), or x * k + (bias - mean * k)...
    d, sc = mag(x) + mag(mean).reshape(shape), mag(scale).reshape(shape)
    sd = np.sqrt(mag(var).reshape(shape) + attrs["eps"])
    ovf = overflow(np.maximum(np.maximum(d, d * sc), np.maximum(d / sd, np.maximum(sc / sd, d * sc / sd))), out)
    # k = scale / sqrt(var + eps) in the denormal range keeps few bits, and x (up to 3e38) scales
    # its spacing (seed 81497: k = -3e-42, x = 1e30; PyTorch's kernel multiplies by k too)
    sub = 2 * float(finfo(np.promote_types(out.dtype, np.float32)).smallest_subnormal) * d
    return clean(es[0] * k, es[0]) + unbounded_if(es[1:], out.shape) + r + ovf + sub


def _group_norm(ctx, opdef, ins, es, outs, attrs):
    """layer_norm's bound on each (sample, group) row, then the per-channel affine."""
    x, out = ins[0], outs[0]
    n, c, g = x.shape[0], x.shape[1], attrs["groups"]
    row = (c // g) * int(np.prod(x.shape[2:], dtype=np.int64))
    ln = type("LN", (), {"name": "layer_norm"})
    base = _layer_norm(ctx, ln, [np.reshape(x, (n, g, row))], [np.reshape(es[0], (n, g, row))],
                       [np.reshape(out, (n, g, row))], {"axis": -1, "eps": attrs["eps"]})
    p = np.reshape(base, x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    w = ins[1] if len(ins) > 1 else None
    b = ins[2] if len(ins) > 2 else None
    if w is not None:
        p = p * mag(w).reshape(shape)
    r = 4 * unit(out) * (mag(out) + (2 * mag(b).reshape(shape) if b is not None else 0.0))
    return p + r + unbounded_if([e for e in es[1:] if e is not None], out.shape)


def _resize(ctx, opdef, ins, es, outs, attrs):
    """nearest moves the error with the data; linear and cubic are weighted sums of taps whose
    weights both sides compute alike (the same float32 operations): the operands' errors times
    |w|, plus the rounding of a sum of every tap in the tensor product (in any order)."""
    if attrs["mode"] == "nearest":
        return move(ctx, opdef, ins, es, outs, attrs)
    from ..ops.resize import axis_taps, coord_dtype
    from ..ir.types import DType
    x, out = ins[0], outs[0]
    cd = coord_dtype(DType.from_numpy(out.dtype)).numpy
    sizes, scales = attrs["sizes"], attrs["scales"]
    k = len(sizes)
    opts = {a: attrs[a] for a in ("mode", "coord", "nearest", "cubic_a", "exclude_outside", "torch_shortcuts")}
    ew, xw = f64(es[0]), mag(x)
    taps = 1
    for j, m in enumerate(sizes):
        ax = x.ndim - k + j
        roi = None if attrs.get("roi") is None else (attrs["roi"][j], attrs["roi"][k + j])
        idx, w = axis_taps(x.shape[ax], int(m), None if scales is None else scales[j], cd=cd, roi=roi, **opts)
        taps *= len(idx)
        shape = (int(m),) + (1,) * (x.ndim - ax - 1)
        ws = [np.abs(c.astype(np.float64)).reshape(shape) for c in w]
        ew = sum(np.take(ew, i, axis=ax) * c for i, c in zip(idx, ws))
        xw = sum(np.take(xw, i, axis=ax) * c for i, c in zip(idx, ws))
    r = (taps + 2) * unit(out) * xw + overflow(taps * xw, out)
    return clean(ew, ew) + r + rnd(out, 1)


def _topk(ctx, opdef, ins, es, outs, attrs):
    """The j-th largest of perturbed values is within the largest perturbation of its row;
    indices of an inexact operand may differ wherever values are close (unchecked)."""
    x, e = ins[0], f64(es[0])
    vals, idx = outs
    if np.ndim(x) == 0:
        return [e.copy(), unbounded_if([e], idx.shape)]
    ax = attrs["axis"] % np.ndim(x)
    row = np.max(e, axis=ax, keepdims=True, initial=0.0)
    return [clean(np.broadcast_to(row, vals.shape), row), unbounded_if([row], idx.shape)]


def _matmul(ctx, opdef, ins, es, outs, attrs):
    a, b = ins[0], ins[1]
    ea, eb = es[0], es[1]
    out = outs[0]
    A, B = mag(a), mag(b)
    if opdef.name == "linear":
        B, eb = B.T, eb.T
    k = np.shape(a)[-1]
    p = np.matmul(ea, B) + np.matmul(A, eb) + np.matmul(ea, eb)
    # an uncertain term times an inf one: NaN (0 * inf) or +-inf
    b_inf = np.isinf(np.asarray(b, dtype=np.float64))
    b_inf = b_inf.T if opdef.name == "linear" else b_inf
    hits = np.matmul((ea > 0).astype(np.float64), b_inf.astype(np.float64)) + \
        np.matmul(np.isinf(np.asarray(a, dtype=np.float64)).astype(np.float64), (eb > 0).astype(np.float64))
    p = np.where(hits > 0, np.inf, p)
    AB = np.matmul(A, B)
    r = (k + 2) * unit(out) * AB + overflow(AB, out)
    if opdef.name == "linear" and len(ins) > 2 and ins[2] is not None:
        r = r + 2 * unit(out) * (mag(out) + mag(ins[2]))
        p = p + es[2]
    return clean(p, p) + r + rnd(out, 2)


def _conv(ctx, opdef, ins, es, outs, attrs):
    x, w = mag(ins[0]), mag(ins[1])
    out = outs[0]
    ref = opdef.reference
    direct = opdef.name == "direct_conv2d"  # NHWC, weight [kh, kw, in/groups, out]
    if opdef.name == "conv_transpose2d":  # weight [in, out/groups, kh, kw]: in/groups * kh * kw terms
        k = np.shape(w)[0] // attrs.get("groups", 1) * int(np.prod(np.shape(w)[2:]))
    else:
        k = int(np.prod(np.shape(w)[:3] if direct else np.shape(w)[1:]))
    p = ref(ctx, f64(es[0]), w, **attrs) + ref(ctx, x, f64(es[1]), **attrs)
    xw = ref(ctx, x, w, **attrs)
    r = (k + 2) * unit(out) * xw + overflow(xw, out)
    if len(ins) > 2 and ins[2] is not None:
        bshape = (1, -1, 1, 1) if not direct and attrs.get("layout", "nchw") == "nchw" else (1, 1, 1, -1)
        r = r + 2 * unit(out) * mag(ins[2]).reshape(bshape if out.ndim == 4 else bshape[1:])
    return clean(p, p) + r + rnd(out, 2)


def _grid_sample(ctx, opdef, ins, es, outs, attrs):
    """Unbounded where the grid carries error (nearest jumps; the taps move); else the taps' weights
    (at most 1 in sum for bilinear and nearest, about 1.6 for bicubic's) times x's error and the
    roundings of a 4- or 16-term sum and of the coordinates."""
    x, out = mag(ins[0]), outs[0]
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:]))  # not -1: reshape cannot infer it when n * c is 0
    k, wsum = (16, 2.0) if attrs["mode"] == "bicubic" else (4, 1.0)
    big = np.max(x.reshape(n, c, plane), axis=-1, initial=0.0)[:, :, None, None]
    err = np.max(f64(es[0]).reshape(n, c, plane), axis=-1, initial=0.0)[:, :, None, None]
    # a plane near the dtype's largest value: a partial sum of the taps (bicubic's weights reach
    # past 1 and below 0) may overflow in float32 where the reference's float64 does not (seed 14051)
    r = wsum * err + (k + 8) * unit(out) * wsum * big + overflow(wsum * big, out) + np.zeros(out.shape)
    return np.where(unbounded_if([es[1]], out.shape) > 0, np.inf, r) + rnd(out, 2)


def _pool(ctx, opdef, ins, es, outs, attrs):
    x, e, out = ins[0], f64(es[0]), outs[0]
    if opdef.name == "max_pool2d":
        pm = opdef.reference(ctx, e, **attrs)
        return clean(pm, pm)
    if opdef.name == "avg_pool2d":
        k = int(np.prod(attrs["kernel"])) if len(attrs["kernel"]) == 2 else attrs["kernel"][0] ** 2
    else:
        k = int(np.prod(np.shape(x)[-2:]))
    p = opdef.reference(ctx, e, **attrs)
    sx = opdef.reference(ctx, mag(x), **attrs)
    return clean(p, p) + (k + 2) * unit(out) * sx + overflow(k * sx, out)


def _sdpa(ctx, opdef, ins, es, outs, attrs):
    q, k, v = (f64(a) for a in ins[:3])
    out = outs[0]
    u = unit(out)
    E = q.shape[-1]
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(E)
    kt = np.swapaxes(k, -1, -2)
    s = np.matmul(q, kt) * scale
    QK = np.matmul(mag(q), mag(kt))
    es_ = (np.matmul(es[0], mag(kt)) + np.matmul(mag(q), np.swapaxes(es[1], -1, -2))
           + (E + 2) * u * QK + overflow(QK, out)) * abs(scale)
    L, S_ = s.shape[-2], s.shape[-1]
    mask = np.ones((L, S_), dtype=bool)
    if attrs["is_causal"]:
        mask = np.tril(mask)
    elif len(ins) > 3 and ins[3] is not None:
        m = ins[3]
        if m.dtype == np.bool_:
            mask = mask & m
        else:
            s = s + f64(m)
    s = np.where(mask, s, -np.inf)
    with np.errstate(all="ignore"):
        mx = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
        pz = np.exp(s - mx)
        p = pz / np.sum(pz, axis=-1, keepdims=True)
    p = np.nan_to_num(p)
    ez = np.where(mask, es_ + u * (mag(s) + mag(mx)), 0.0)
    emax = np.max(ez, axis=-1, keepdims=True, initial=0.0)
    ep = p * np.expm1(2 * (ez + emax)) + 2 * (S_ + 8) * u * p
    V = mag(v)
    r = np.matmul(ep, V) + np.matmul(p, es[2]) + (S_ + 2) * u * np.matmul(p, V)
    ovf = overflow(np.max(V, axis=-2, keepdims=True, initial=0.0), out)
    return clean(r, r) + (S_ + 2) * u * np.matmul(p, V) + rnd(out, 4) + ovf




OP_RULES = {
    "cumsum": _scan, "cumprod": _scan, "index_add": _index_add, "index_put": _index_put, "attention_backward": _attention_backward,
    "max_pool2d_backward": _max_pool_backward,
    "softmax": _softmax, "log_softmax": _softmax,
    "layer_norm": _layer_norm, "rms_norm": _layer_norm, "batch_norm": _batch_norm, "group_norm": _group_norm,
    "resize": _resize, "topk": _topk,
    "matmul": _matmul, "linear": _matmul, "conv2d": _conv, "direct_conv2d": _conv, "conv_transpose2d": _conv,
    "grid_sample": _grid_sample, "max_pool2d": _pool, "avg_pool2d": _pool, "adaptive_avg_pool2d": _pool,
    "scaled_dot_product_attention": _sdpa,
}
