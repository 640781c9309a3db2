"""Lowering of ``direct_conv2d``: at each output element [n, oh, ow, oc], the sum over the window
(kh, kw) and the group's input channels of ``x * w``, plus the bias.

The input is NHWC and the weight HWIO ([kh, kw, in/groups, out]), so the output channel, the
innermost loop, reads both contiguously: the schedule vectorizes it like any elementwise op. A
tap in the padding adds 0, whatever the weight (an infinite weight gives no NaN there, as in
torch's convolution); its load is clamped into bounds, as the pools' are.
"""

from __future__ import annotations

from ..ir.loop import Binary, Compare, Const, IndexValue
from ..ir import sym as S
from ..ir.types import DType
from ..ops.conv import pads4
from .core import BOOL, I64, add, lowering, mul, select
from .index_math import iadd, ifloordiv, imul
from .pooling import _tap
from .views import _clamp_index


def _in_bounds(i, d):
    """The condition 0 <= i < d."""
    ie = i if isinstance(i, Binary) else IndexValue(i)
    hi = IndexValue(d) if S.is_symbolic(d) else Const(int(d), I64)
    return Binary("and", Compare("ge", ie, Const(0, I64)), Compare("lt", ie, hi), BOOL)


@lowering("direct_conv2d")
def _lower_direct_conv2d(ctx, x, w, bias=None, *, stride, padding, dilation, groups):
    KH, KW, ICg, OC = w.shape
    OCg = S.floordiv(OC, groups)
    pads = pads4(padding)
    H, W = x.shape[1], x.shape[2]
    f32 = DType.float32
    padded = any(pads)

    def channel(oc, ic):  # the input channel: ic of output channel oc's group
        return ic if groups == 1 else iadd(imul(ifloordiv(oc, OCg), ICg), ic)

    def fn(idx):
        n, oh, ow, oc = idx

        def body(vs):
            kh, kw, ic = vs
            h, wi = _tap(oh, ow, stride, pads, dilation, (kh, kw))
            xv = x((n, _clamp_index(h, H) if padded else h, _clamp_index(wi, W) if padded else wi,
                    channel(oc, ic)))
            t = mul(xv, w((kh, kw, ic, oc)))
            if padded:  # a tap in the padding adds nothing (0, not 0 * w: torch's gives no NaN there)
                t = select(Binary("and", _in_bounds(h, H), _in_bounds(wi, W), BOOL), t, Const(0.0, f32))
            return t

        def build():
            # the taps unrolled (decompose allows at most DIRECT_TERMS), summed in float32 as
            # oneDNN's convolutions do: each tap's offsets are constants, and no accumulator
            # goes through double as a Reduce's sum does
            s = None
            for kh in range(KH):
                for kw in range(KW):
                    for ic in range(ICg):
                        t = body((kh, kw, ic))
                        s = t if s is None else add(s, t)
            return s if bias is None else add(s, bias((oc,)))
        return ctx.memo(tuple(idx), build)
    return fn
