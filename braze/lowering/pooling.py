"""Lowerings of the 2-D pools: a small reduction over the window at each output element.

Window positions outside the input are masked (max: -inf; avg: left out of the
sum), so speculative loads are clamped into bounds.
"""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import DType
from ..ir.loop import Binary, Compare, Const, IndexValue
from .core import BOOL, I64, cast, div, lowering, select, vmax
from .index_math import iadd, imul
from .views import _clamp_index


def _tap(oh, ow, stride, padding, dilation, vs):
    """The input row and column of window offset ``vs`` in output position (oh, ow)."""
    return (iadd(imul(oh, stride[0]), iadd(S.mul(-1, padding[0]), imul(vs[0], dilation[0]))),
            iadd(imul(ow, stride[1]), iadd(S.mul(-1, padding[1]), imul(vs[1], dilation[1]))))


def _inside(padding, ceil_mode) -> bool:
    """Every window lies inside the input: no padding, and floor mode's output size (the last
    window ends at (OH - 1) * stride + (kernel - 1) * dilation <= H - 1)."""
    return not any(padding) and not ceil_mode


def _hw_axes(rank: int, layout: str) -> tuple[int, int]:
    return (1, 2) if layout == "nhwc" else (rank - 2, rank - 1)


def _window(ctx, x, idx, kernel, stride, padding, dilation, vs, layout="nchw", inside=False):
    """(element, in-bounds condition) at window offset ``vs``; spatial dims by ``layout``. With
    ``inside`` (``_inside``) the condition is true and the position needs no clamp."""
    ax = _hw_axes(x.rank, layout)
    H, W = x.shape[ax[0]], x.shape[ax[1]]
    h, w = _tap(idx[ax[0]], idx[ax[1]], stride, padding, dilation, vs)
    if inside:
        src = list(idx)
        src[ax[0]], src[ax[1]] = h, w
        return x(tuple(src)), Const(True, BOOL)
    conds = []
    for i, d in ((h, H), (w, W)):
        ie = IndexValue(i) if not isinstance(i, Binary) else i
        conds += [Compare("ge", ie, Const(0, I64)), Compare("lt", ie, IndexValue(d) if S.is_symbolic(d) else Const(d, I64))]
    c = conds[0]
    for c2 in conds[1:]:
        c = Binary("and", c, c2, BOOL)
    src = list(idx)
    src[ax[0]], src[ax[1]] = _clamp_index(h, H), _clamp_index(w, W)
    return x(tuple(src)), c


@lowering("max_pool2d")
def _lower_max_pool(ctx, x, *, kernel, stride, padding, dilation, ceil_mode, layout="nchw"):
    stride = stride or kernel
    dt = x.dtype
    inside = _inside(padding, ceil_mode)
    # a window always holds an element of the input: its padding never wins
    lowest = float("-inf") if dt.is_float else int(np.iinfo(dt.numpy).min) if dt.is_int else 0

    def fn(idx):
        def body(vs):
            e, c = _window(ctx, x, idx, kernel, stride, padding, dilation, vs, layout, inside)
            return select(c, e, Const(lowest, dt))
        return ctx.memo(tuple(idx), lambda: ctx.reduce("max", body, kernel, dt))
    return fn


@lowering("avg_pool2d")
def _lower_avg_pool(ctx, x, *, kernel, stride, padding, ceil_mode, count_include_pad, dilation=(1, 1)):
    stride = stride or kernel
    dilation = tuple(dilation)
    dt = x.dtype
    H, W = x.shape[-2], x.shape[-1]
    inside = _inside(padding, ceil_mode)

    def fn(idx):
        def total(vs):
            e, c = _window(ctx, x, idx, kernel, stride, padding, dilation, vs, inside=inside)
            return select(c, e, Const(0.0, dt))

        def count(vs):
            *_, oh, ow = idx
            if count_include_pad:  # positions inside the padded input count
                h = iadd(imul(oh, stride[0]), imul(vs[0], dilation[0]))
                w = iadd(imul(ow, stride[1]), imul(vs[1], dilation[1]))
                lim_h, lim_w = S.add(H, padding[0] + padding[2]), S.add(W, padding[1] + padding[3])
                c = Binary("and", Compare("lt", _ie(h), _ie(lim_h)), Compare("lt", _ie(w), _ie(lim_w)), BOOL)
            else:
                _, c = _window(ctx, x, idx, kernel, stride, padding, dilation, vs, inside=inside)
            return select(c, Const(1.0, dt), Const(0.0, dt))

        def build():
            # a window with no input element (only an empty input has one) averages to 0, as the
            # reference does, not 0/0
            n = vmax(ctx.reduce("sum", count, kernel, dt), Const(1.0, dt))
            return div(ctx.reduce("sum", total, kernel, dt), n)
        return ctx.memo(tuple(idx), build)
    return fn


def _ie(i):
    return i if isinstance(i, Binary) else (IndexValue(i) if S.is_symbolic(i) else Const(int(i), I64))


@lowering("adaptive_avg_pool2d")
def _lower_adaptive_avg_pool(ctx, x, *, output_size):
    dt = x.dtype
    H, W = x.shape[-2], x.shape[-1]
    OH, OW = output_size

    def fn(idx):
        *lead, oh, ow = idx
        # window [floor(o*H/OH), ceil((o+1)*H/OH)); at most ceil(H/OH) + 1 long
        hs, he = S.floordiv(S.mul(oh, H), OH), S.floordiv(S.add(S.mul(S.add(oh, 1), H), OH - 1), OH)
        ws, we = S.floordiv(S.mul(ow, W), OW), S.floordiv(S.add(S.mul(S.add(ow, 1), W), OW - 1), OW)
        kh = H if OH == 1 else S.add(S.floordiv(S.add(H, OH - 1), OH), 1)
        kw = W if OW == 1 else S.add(S.floordiv(S.add(W, OW - 1), OW), 1)

        def body(vs):
            h, w = S.add(hs, vs[0]), S.add(ws, vs[1])
            e = x((*lead, h if OH == 1 else _clamp_index(h, H), w if OW == 1 else _clamp_index(w, W)))
            if OH == 1 and OW == 1:
                return e
            c = Binary("and", Compare("lt", _ie(h), _ie(he)), Compare("lt", _ie(w), _ie(we)), BOOL)
            return select(c, e, Const(0.0, dt))

        def build():
            n = S.mul(S.add(he, S.mul(-1, hs)), S.add(we, S.mul(-1, ws)))
            return div(ctx.reduce("sum", body, (kh, kw), dt), cast(IndexValue(n) if S.is_symbolic(n) else
                                                                  Const(int(n), I64), dt))
        return ctx.memo(tuple(idx), build)
    return fn





def _pool_hw(kernel, stride):
    return tuple(kernel), tuple(stride or kernel)


def _plane_position(h, w, W):
    """h * W + w as an int64 expression."""
    return _ie(iadd(imul(h, W), w))


@lowering("max_pool2d_indices")
def _lower_max_pool_indices(ctx, x, *, kernel, stride, padding, dilation, ceil_mode, layout="nchw"):
    """PyTorch's winner of each window (max_pool2d_indices_numpy): the smallest position holding
    the maximum of the window's numbers, unless the window holds a NaN: then its largest NaN
    position. Positions grow in window order, so smallest is first and largest is last."""
    kernel, stride = _pool_hw(kernel, stride)
    dt = x.dtype
    ah, aw = _hw_axes(x.rank, layout)
    W = x.shape[aw]
    none, never = Const(-1, I64), Const(np.iinfo(np.int64).max, I64)
    inside = _inside(padding, ceil_mode)

    def at(idx, vs):
        e, c = _window(ctx, x, idx, kernel, stride, padding, dilation, vs, layout, inside)
        return e, c, _plane_position(*_tap(idx[ah], idx[aw], stride, padding, dilation, vs), W)

    def isnan(e):
        return Compare("ne", e, e)

    def fn(idx):
        def build():
            def top_body(vs):
                e, c, _ = at(idx, vs)
                return select(Binary("and", c, Compare("eq", e, e), BOOL), e, Const(float("-inf"), dt))
            top = ctx.reduce("max", top_body, kernel, dt)

            def first_body(vs):
                e, c, p = at(idx, vs)
                return select(Binary("and", c, Compare("eq", e, top), BOOL), p, never)

            def nan_body(vs):
                e, c, p = at(idx, vs)
                return select(Binary("and", c, isnan(e), BOOL), p, none)
            last_nan = ctx.reduce("max", nan_body, kernel, I64)
            return select(Compare("ge", last_nan, Const(0, I64)), last_nan, ctx.reduce("min", first_body, kernel, I64))
        return ctx.memo(tuple(idx), build)
    return fn


@lowering("max_pool2d_backward")
def _lower_max_pool_backward(ctx, grad, x, indices, *, kernel, stride, padding, dilation, ceil_mode, layout="nchw"):
    """Each input element gathers the gradients of the windows that chose it: over the kernel's
    taps, the output position whose window puts that tap on this element (when the stride lands
    on it), where the window's winner is this element. Along a dim whose windows tile it (the
    stride is the kernel, no dilation: a 2x2 pool of stride 2) one window holds the element, so
    that dim has no taps to sum over."""
    kernel, stride = _pool_hw(kernel, stride)
    dt = grad.dtype
    acc = DType.float32 if dt.itemsize == 2 else dt  # a 16-bit gradient sums in float32, as torch's does
    ah, aw = _hw_axes(grad.rank, layout)
    W = x.shape[aw]  # x: only its shape
    OH, OW = grad.shape[ah], grad.shape[aw]
    tiles = [s == k and d == 1 for k, s, d in zip(kernel, stride, dilation)]
    taps = tuple(1 if t else k for t, k in zip(tiles, kernel))

    def fn(idx):
        h, w = idx[ah], idx[aw]
        here = _plane_position(h, w, W)

        def body(vs):
            conds, at = [], []
            for i, pad, s, d, n, tile in ((h, padding[0], stride[0], dilation[0], OH, tiles[0]),
                                          (w, padding[1], stride[1], dilation[1], OW, tiles[1])):
                if tile:  # the window (i + pad) // s, from 0 on as pad >= 0
                    o = S.floordiv(S.add(i, pad), s)
                    conds.append(Compare("lt", _ie(o), _ie(n)))
                else:
                    num = S.add(S.add(i, pad), S.mul(-1, S.mul(vs[len(at)], d)))  # i + pad - tap * dilation
                    o = S.floordiv(num, s)
                    conds += [Compare("ge", _ie(num), Const(0, I64)), Compare("lt", _ie(o), _ie(n))]
                    if s > 1:
                        conds.append(Compare("eq", _ie(S.mod(num, s)), Const(0, I64)))
                at.append(_clamp_index(o, n))
            c = conds[0]
            for c2 in conds[1:]:
                c = Binary("and", c, c2, BOOL)
            src = list(idx)
            src[ah], src[aw] = at
            src = tuple(src)
            chosen = Binary("and", c, Compare("eq", indices(src), here), BOOL)
            return select(chosen, cast(grad(src), acc), Const(0.0, acc))
        if all(tiles):
            return ctx.memo(tuple(idx), lambda: cast(body((0, 0)), dt))
        return ctx.memo(tuple(idx), lambda: cast(ctx.reduce("sum", body, taps, acc), dt))
    return fn
