"""Lowerings of reductions (sum/mean/max/min/prod, argmax/argmin, var, cumsum)
and of the row-wise normalizations (softmax, layer/rms/batch norm) that the
schedule turns into one "stitch" kernel."""

from __future__ import annotations

from ..ir import sym as S
from .core import I64, TensorFn, add, cast, cmp, const, div, fconst, intlike_value, lowering, mul, select, sub, un


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------

_RED_IR = {"reduce_sum": "sum", "reduce_mean": "sum", "reduce_max": "max", "reduce_min": "min",
           "reduce_prod": "prod"}


def _norm_axes(axes, rank):
    if axes is None:
        return tuple(range(rank))
    return tuple(sorted({a % max(rank, 1) for a in axes})) if rank else ()


def _reduce_over(ctx, x: TensorFn, axes, keepdims, op, dt, idx, body_fn=None, extents=None):
    """Reduce(op) over ``axes`` of x at output index ``idx``; ``body_fn(x_elem, full_idx)``;
    ``extents``: how far along each axis (default: all of it)."""
    rank = x.rank
    ext = list(extents) if extents is not None else [x.shape[a] for a in axes]

    def body(vs):
        full = []
        it = iter(vs)
        k = 0
        for d in range(rank):
            if d in axes:
                full.append(next(it))
                if keepdims:
                    k += 1
            else:
                full.append(idx[k])
                k += 1
        e = x(tuple(full))
        return body_fn(e, tuple(full)) if body_fn else e

    return ctx.reduce(op, body, ext, dt)


@lowering(*_RED_IR)
def _lower_reduce(ctx, x, *, axes, keepdims):
    op = ctx.node.op
    ax = _norm_axes(axes, x.rank)
    dt = ctx.out_type.dtype
    n = S.prod([x.shape[a] for a in ax])

    def fn(idx):
        def build():
            if op == "reduce_mean" and dt.is_float:
                return _mean(ctx, x, ax, keepdims, dt, idx, n)
            r = _reduce_over(ctx, x, ax, keepdims, _RED_IR[op], dt, idx, lambda e, _: cast(e, dt))
            if op == "reduce_mean":
                r = div(r, intlike_value(n, dt))
            return r
        return ctx.memo(tuple(idx), build)
    return fn


@lowering("argmax", "argmin")
def _lower_arg(ctx, x, *, axis, keepdims):
    ax = _norm_axes((axis,), x.rank)  # () for a 0-d input
    op = ctx.node.op
    return lambda idx: ctx.memo(tuple(idx), lambda: _reduce_over(ctx, x, ax, keepdims, op, I64, idx))


def _mean(ctx, x, axes, keepdims, dt, idx, n):
    """The float mean over ``axes``: the row's first element (0 where it is not finite) plus the
    sum of x/n - first/n. A constant row's mean is exactly its value whatever order a float32
    sum takes (``x - mean(x)`` and layer_norm of a constant row are exactly 0, as in PyTorch; the
    C never contracts the product into an FMA). Each term is scaled before the sum, so neither a difference (up to
    twice the largest float) nor a partial sum overflows where the mean is finite: with the
    differences summed first, values near +-3e38 gave inf (fuzz seed 70827). The first element
    is read directly when every reduced extent is at least 1, else it is a sum over
    min(extent, 1) elements, so an empty row reads nothing."""
    ones = [S.smin(x.shape[a], 1) for a in axes]
    if all(isinstance(o, int) and o == 1 for o in ones):
        at, it = [], iter(idx)
        for d in range(x.rank):
            at.append(0 if d in axes else next(it))
            if d in axes and keepdims:
                next(it)
        first = cast(x(tuple(at)), dt)
    else:
        first = _reduce_over(ctx, x, axes, keepdims, "sum", dt, idx, lambda e, _: cast(e, dt), extents=ones)
    # an infinite or NaN first element shifts by 0 instead: inf - inf made a row led by inf NaN
    first = select(cmp("lt", un("abs", first), const(float("inf"), dt)), first, const(0, dt))
    inv_n = div(const(1, dt), intlike_value(n, dt))
    first_n = mul(first, inv_n)
    diff = _reduce_over(ctx, x, axes, keepdims, "sum", dt, idx, lambda e, _: sub(mul(cast(e, dt), inv_n), first_n))
    mean = add(first, diff)
    if S.bounds(n)[0] < 1:  # an empty row's mean is NaN, as PyTorch's (its sum is 0, and 0/0)
        mean = select(cmp("eq", intlike_value(n, I64), const(0, I64)), const(float("nan"), dt), mean)
    return mean


def _mean_and_squares(ctx, x, axes, keepdims, dt, idx, n):
    """The mean over ``axes`` and the sum of squared deviations from it (two passes: accurate)."""
    mean = _mean(ctx, x, axes, keepdims, dt, idx, n)

    def sq(e, _):
        c = sub(e, mean)
        return mul(c, c)
    return mean, _reduce_over(ctx, x, axes, keepdims, "sum", dt, idx, sq)


@lowering("var")
def _lower_var(ctx, x, *, axes, keepdims, correction):
    ax = _norm_axes(axes, x.rank)
    dt = ctx.out_type.dtype
    n = S.prod([x.shape[a] for a in ax])

    def fn(idx):
        def build():
            _, ss = _mean_and_squares(ctx, x, ax, keepdims, dt, idx, n)
            return div(ss, intlike_value(S.smax(S.add(n, -correction), 0), dt))
        return ctx.memo(tuple(idx), build)
    return fn


@lowering("cumsum", "cumprod")
def _lower_cumsum(ctx, x, *, axis, exclusive, reverse):
    dt = ctx.out_type.dtype
    op, identity = ("sum", 0) if ctx.node.op == "cumsum" else ("prod", 1)
    if x.rank == 0:  # one element: itself, or nothing before it
        return lambda idx: const(identity, dt) if exclusive else cast(x(idx), dt)
    ax = axis % x.rank
    n = x.shape[ax]

    def fn(idx):
        i = idx[ax]
        if not reverse:
            ext = i if exclusive else S.add(i, 1)
            start = 0
        else:
            start = S.add(i, 1) if exclusive else i
            ext = S.add(n, S.mul(-1, start))

        def body(vs):
            full = list(idx)
            full[ax] = S.add(start, vs[0])
            return cast(x(tuple(full)), dt)
        return ctx.reduce(op, body, [ext], dt)
    return fn


# ---------------------------------------------------------------------------
# normalization (stitch)
# ---------------------------------------------------------------------------


def _row_key(idx, axes):
    return tuple(0 if k in axes else i for k, i in enumerate(idx))


@lowering("softmax", "log_softmax")
def _lower_softmax(ctx, x, *, axis):
    if x.rank == 0:
        return lambda idx: fconst(0.0 if ctx.node.op == "log_softmax" else 1.0, x(idx))
    ax = axis % x.rank
    log = ctx.node.op == "log_softmax"
    dt = x.dtype

    def stats(idx):
        def build():
            m = _reduce_over(ctx, x, (ax,), True, "max", dt, idx)
            s = _reduce_over(ctx, x, (ax,), True, "sum", dt, idx, lambda e, _: un("exp", sub(e, m)))
            # one division per row, a multiply per element (as PyTorch's softmax kernel)
            return m, (un("log", s) if log else div(fconst(1.0, s), s))
        return ctx.memo(_row_key(idx, (ax,)), build)

    def fn(idx):
        m, t = stats(_row_key(idx, (ax,)))
        z = sub(x(idx), m)
        return sub(z, t) if log else mul(un("exp", z), t)
    return fn


def _trailing(x, axis):
    """(first normalized axis, the trailing axes from it, their element count)."""
    a = axis % x.rank
    return a, tuple(range(a, x.rank)), S.prod(x.shape[a:])


def _wide(dt, *params):
    """The widest float dtype of ``dt`` and the params: a norm's float32 weights and statistics
    of a 16-bit input are used as they are, as the reference does, not rounded to 16 bits first
    (a weight of 3e38 would become inf in float16, and 0 * inf NaN; a variance of 1e5 inf)."""
    for p in params:
        if p is not None and p.dtype.is_float and p.dtype.itemsize > dt.itemsize:
            dt = p.dtype
    return dt


def _affine(v, w, b, idx, a):
    """``v * w + b``, in the widest of their dtypes (``_wide``)."""
    dt = v.dtype
    wide = _wide(dt, w, b)
    v = cast(v, wide)
    if w is not None:
        v = mul(v, cast(w(tuple(idx[a:])), wide))
    if b is not None:
        v = add(v, cast(b(tuple(idx[a:])), wide))
    return cast(v, dt)


@lowering("layer_norm")
def _lower_layer_norm(ctx, x, weight=None, bias=None, *, axis, eps):
    a, axes, n = _trailing(x, axis)
    dt = x.dtype

    def stats(key):
        def build():
            mean, ss = _mean_and_squares(ctx, x, axes, True, dt, key, n)
            var = div(ss, intlike_value(n, dt))
            rstd = un("rsqrt", add(var, const(eps, dt)))
            return mean, rstd
        return ctx.memo(key, build)

    def fn(idx):
        mean, rstd = stats(_row_key(idx, axes))
        return _affine(mul(sub(x(idx), mean), rstd), weight, bias, idx, a)
    return fn


@lowering("rms_norm")
def _lower_rms_norm(ctx, x, weight=None, *, axis, eps):
    a, axes, n = _trailing(x, axis)
    dt = x.dtype

    def stats(key):
        def build():
            ms = div(_reduce_over(ctx, x, axes, True, "sum", dt, key, lambda e, _: mul(e, e)), intlike_value(n, dt))
            return un("rsqrt", add(ms, const(eps, dt)))
        return ctx.memo(key, build)

    def fn(idx):
        return _affine(mul(x(idx), stats(_row_key(idx, axes))), weight, None, idx, a)
    return fn


@lowering("batch_norm")
def _lower_batch_norm(ctx, x, scale, bias, mean, var, *, eps):
    dt = x.dtype
    wide = _wide(dt, scale, bias, mean, var)

    def fn(idx):
        c = (idx[1],)
        inv = mul(un("rsqrt", add(cast(var(c), wide), const(eps, wide))), cast(scale(c), wide))
        return cast(add(mul(sub(cast(x(idx), wide), cast(mean(c), wide)), inv), cast(bias(c), wide)), dt)
    return fn
