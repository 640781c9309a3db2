"""Lowering of ``resize``: per resized axis, the source taps (index, weight) as loop-IR
expressions of the output index, in the coordinate dtype; the result is the sum over the
tensor product of the axes' taps (one load for nearest). The formulas are those of
``braze/ops/resize.py`` (the reference), written with the same operations in the same
order, so nearest indices agree exactly."""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.loop import Compare, Expr, IndexValue
from ..ir.types import DType
from ..ops.resize import antialias_offsets, antialias_weight, coord_dtype
from .core import BOOL, I64, add, cast, const, div, lowering, mul, select, sub, un, vmax, vmin


def _val(x, dt):
    """An IntLike or an int64 Expr as a value of dtype dt."""
    if isinstance(x, int):
        return const(x, dt)
    return cast(x if isinstance(x, Expr) else IndexValue(x), dt)


def _clamp_index(i: Expr, n) -> Expr:
    return vmax(vmin(i, _val(S.add(n, -1), I64)), const(0, I64))


def _is(ctx, a, b) -> bool | None:
    """a == b: True / False when the constraints decide it, else None (decided at run time)."""
    return ctx.module.constraints.equal(a, b) if ctx.module is not None else (
        a == b if isinstance(a, int) and isinstance(b, int) else None)


def _run_time_eq(a, b) -> Expr:
    return Compare("eq", _val(a, I64), _val(b, I64))


def _cubic(t: Expr, a: float, cd) -> list:
    one = const(1, cd)
    ca = const(a, cd)

    def near(x):
        return add(mul(mul(sub(mul(const(a + 2, cd), x), const(a + 3, cd)), x), x), one)

    def far(x):
        return sub(mul(add(mul(sub(mul(ca, x), const(5 * a, cd)), x), const(8 * a, cd)), x), const(4 * a, cd))

    u = sub(one, t)
    return [far(add(t, one)), near(t), near(u), far(add(u, one))]


def _axis_taps(ctx, n, m, d, scale, attrs, cd, roi=None) -> tuple:
    """([(index, weight or None)] for output index d of one axis, the condition that its source lies
    outside the input (tf_crop_and_resize; else None), and what its weighted sum is divided by
    (antialias; else None))."""
    mode, coord, nearest = attrs["mode"], attrs["coord"], attrs["nearest"]
    f = lambda v: const(v, cd)  # noqa: E731
    dv = _val(d, cd)
    if scale is not None:  # 1 / scale in double, rounded once to the coordinate dtype (torch)
        r = f(float(np.float32(1.0 / scale)) if cd is DType.float32 else 1.0 / scale)
    else:
        r = div(_val(n, cd), _val(m, cd))
    # the resized length L: n * scale (a float) with scales, else m; is L == 1?
    if scale is None:
        length, len_is_1, len_eq_1 = _val(m, cd), _is(ctx, m, 1), _run_time_eq(m, 1)
    else:
        fs = np.float32(scale) if cd is DType.float32 else np.float64(scale)
        length = mul(_val(n, cd), f(float(fs)))
        len_is_1 = bool(fs.dtype.type(n) * fs == 1) if isinstance(n, int) else None
        len_eq_1 = Compare("eq", length, f(1))
    half = coord == "half_pixel" or (coord == "pytorch_half_pixel" and len_is_1 is not True)
    v = outside = None
    if coord == "tf_crop_and_resize":
        s, e = f(roi[0]), f(roi[1])
        n1 = _val(S.add(n, -1), cd)
        start = mul(s, n1)
        one = add(div(mul(sub(e, s), n1), f(2)), start)
        src = one if len_is_1 is True else add(div(mul(mul(dv, sub(e, s)), n1), sub(length, f(1))), start)
        if len_is_1 is None:
            src = select(len_eq_1, one, src)
        outside = select(Compare("lt", src, f(0)), const(True, BOOL), Compare("gt", src, n1))
    elif coord == "half_pixel_symmetric":
        src = add(sub(mul(add(dv, f(0.5)), r), f(0.5)), div(sub(_val(n, cd), mul(_val(m, cd), r)), f(2)))
    elif coord == "align_corners":
        src = f(0) if len_is_1 is True else mul(dv, div(_val(S.add(n, -1), cd), sub(length, f(1))))
        if len_is_1 is None:
            src = select(len_eq_1, f(0), src)
    elif half:
        v = mul(add(dv, f(0.5)), r)
        src = sub(v, f(0.5))
    else:
        src = mul(dv, r)
    if coord == "pytorch_half_pixel" and len_is_1 is None:
        src = select(len_eq_1, f(0), src)
        v = None  # the +-0.5 shortcut below would skip the L == 1 case
    hi = S.add(n, -1)
    if attrs.get("antialias") and mode != "nearest":
        taps, total = _antialias_taps(src, n, m, scale, attrs, cd)
        return taps, outside, total
    if mode == "nearest":
        if v is not None and nearest == "round_prefer_ceil":
            i = un("floor", v)
        elif v is not None and nearest == "round_prefer_floor":
            i = sub(un("ceil", v), f(1))
        else:
            i = {"floor": lambda s: un("floor", s), "ceil": lambda s: un("ceil", s),
                 "round_prefer_floor": lambda s: un("ceil", sub(s, f(0.5))),
                 "round_prefer_ceil": lambda s: un("floor", add(s, f(0.5)))}[nearest](src)
        taps = [(_clamp_index(cast(i, I64), n), None)]
    else:
        if mode == "linear":
            src = vmax(src, f(0))
        i0f = vmin(un("floor", src), _val(hi, cd))
        t = vmin(vmax(sub(src, i0f), f(0)), f(1))
        i0 = cast(i0f, I64)
        if mode == "linear":
            taps = [(i0, sub(f(1), t)), (vmin(add(i0, const(1, I64)), _val(hi, I64)), t)]
        else:
            raw = [add(i0, const(j - 1, I64)) for j in range(4)]
            ws = _cubic(t, attrs["cubic_a"], cd)
            if attrs["exclude_outside"]:
                ins = [Compare("ge", i, const(0, I64)) for i in raw]
                ins = [select(c, Compare("le", i, _val(hi, I64)), const(False, BOOL)) for c, i in zip(ins, raw)]
                ws = [select(c, w, f(0)) for c, w in zip(ins, ws)]
                total = add(add(add(ws[0], ws[1]), ws[2]), ws[3])
                ws = [div(w, total) for w in ws]
            taps = [(_clamp_index(i, n), w) for i, w in zip(raw, ws)]
    if attrs["torch_shortcuts"] and scale is not None:
        taps = _shortcuts(ctx, taps, n, m, d, mode, cd)
    return taps, outside, None


def _antialias_taps(src: Expr, n, m, scale, attrs, cd) -> list:
    """The taps of an antialiased linear or cubic axis (braze/ops/resize.py), as the reference makes them."""
    mode = attrs["mode"]
    f = lambda v: const(v, cd)  # noqa: E731
    s, ks = antialias_offsets(n, m, scale, mode)
    i0f = un("floor", src)
    t = sub(src, i0f)
    whole = Compare("eq", t, f(0))
    i0, t = cast(select(whole, sub(i0f, f(1)), i0f), I64), select(whole, f(1), t)
    a = attrs["cubic_a"]

    def near(x):
        return add(mul(mul(sub(mul(add(f(a), f(2)), x), add(f(a), f(3))), x), x), f(1))

    def far(x):
        return sub(mul(add(mul(sub(mul(f(a), x), mul(f(5), f(a))), x), mul(f(8), f(a))), x), mul(f(4), f(a)))

    ops = (lambda x, y: Compare("le", x, y), lambda x, y: Compare("lt", x, y), select, sub)
    ws = [antialias_weight(un("abs", mul(sub(f(k), t), f(s))), mode, near, far, ops, (f(0), f(1), f(2))) for k in ks]
    raw = [add(i0, const(k, I64)) for k in ks]
    if attrs["exclude_outside"]:
        hi = _val(S.add(n, -1), I64)
        ws = [select(select(Compare("ge", i, const(0, I64)), Compare("le", i, hi), const(False, BOOL)), w, f(0))
              for i, w in zip(raw, ws)]
    total = ws[0]
    for w in ws[1:]:
        total = add(total, w)
    return [(_clamp_index(i, n), w) for i, w in zip(raw, ws)], total


def _shortcuts(ctx, taps, n, m, d, mode, cd):
    """torch's exact cases: m == n copies; nearest with m == 2n reads d // 2."""
    di = _val(d, I64)
    same = _is(ctx, m, n)
    if same is True:
        return [(di, None if mode == "nearest" else const(1, cd))]
    if same is None:
        c = _run_time_eq(m, n)
        taps = [(select(c, di, i), w if w is None else select(c, const(1 if k == 0 else 0, cd), w))
                for k, (i, w) in enumerate(taps)]
    if mode == "nearest":
        twice = _is(ctx, m, S.mul(2, n))
        half = cast(div(di, const(2, I64)), I64)  # d >= 0: truncation is floor
        if twice is True:
            return [(half, None)]
        if twice is None:
            taps = [(select(_run_time_eq(m, S.mul(2, n)), half, taps[0][0]), None)]
    return taps


@lowering("resize")
def _lower_resize(ctx, x, **attrs):
    sizes, scales = attrs["sizes"], attrs["scales"]
    k = len(sizes)
    lead = x.rank - k
    cd = coord_dtype(x.dtype)
    out_dt = ctx.out_type.dtype

    roi = attrs.get("roi")

    def fn(idx):
        taps, totals, outside = [], [], None
        for j in range(k):
            t, out, total = _axis_taps(ctx, x.shape[lead + j], sizes[j], idx[lead + j],
                                       None if scales is None else scales[j], attrs, cd,
                                       None if roi is None else (roi[j], roi[k + j]))
            taps.append(t)
            totals.append(total)
            if out is not None:
                outside = out if outside is None else select(outside, const(True, BOOL), out)

        def combine(j, prefix):
            if j == k:
                v = x(tuple(idx[:lead]) + tuple(prefix))
                return v if attrs["mode"] == "nearest" else cast(v, cd)
            acc = None
            for i, w in taps[j]:
                inner = combine(j + 1, prefix + [i])
                term = inner if w is None else mul(w, inner)
                acc = term if acc is None else add(acc, term)
            return acc if totals[j] is None else div(acc, totals[j])

        y = cast(combine(0, []), out_dt)
        return y if outside is None else select(outside, const(attrs["extrapolation"], out_dt), y)
    return fn
