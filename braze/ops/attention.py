"""Attention: scaled_dot_product_attention (torch.nn.functional semantics)."""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import DType, TensorType
from .common import broadcast_shapes
from .opdef import Attr, defop


def _sdpa_infer(ctx, q, k, v, mask=None, *, is_causal, scale):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.dtype.is_float:
            raise ctx.error(f"{name} must be floating point, got {t}")
        if t.rank < 2:
            raise ctx.error(f"{name} must have rank >= 2 ([..., len, dim]), got {t}")
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        raise ctx.error(f"q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
                        hint="cast them to a common dtype first")
    le, e = q.shape[-2:]
    s, ek = k.shape[-2:]
    sv, ev = v.shape[-2:]
    eq = ctx.equal(e, ek)
    if eq is False:
        raise ctx.error(f"q and k embedding dims {e} and {ek} differ ({q} vs {k})")
    if eq is None:
        ctx.assume_equal(e, ek, "q/k embedding dims")
    eq = ctx.equal(s, sv)
    if eq is False:
        raise ctx.error(f"k and v sequence lengths {s} and {sv} differ ({k} vs {v})")
    if eq is None:
        ctx.assume_equal(s, sv, "k/v sequence lengths")
    batches = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if mask is not None:
        if mask.dtype is not DType.bool and not mask.dtype.is_float:
            raise ctx.error(f"mask must be bool (True = attend) or float (added to the scores), got {mask}")
        if mask.rank < 2:
            broadcast_shapes(ctx, mask.shape, (le, s))
        else:
            broadcast_shapes(ctx, mask.shape[-2:], (le, s))
            batches.append(mask.shape[:-2])
    batch = broadcast_shapes(ctx, *batches)
    return TensorType(q.dtype, tuple(batch) + (ctx.simplify(le), ctx.simplify(ev)))


def sdpa_numpy(q, k, v, mask=None, is_causal=False, scale=None):
    out_dt = q.dtype
    acc = np.float64 if q.dtype == np.float64 else np.float32
    q, k, v = (a.astype(acc, copy=False) for a in (q, k, v))
    e = q.shape[-1]
    sc = (1.0 / math.sqrt(e)) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * acc(sc)  # [..., L, S]
    L, S_ = scores.shape[-2:]
    keep = None
    if is_causal:
        keep = np.tril(np.ones((L, S_), dtype=bool))
    if mask is not None:
        if mask.dtype == np.bool_:
            keep = mask if keep is None else np.logical_and(keep, mask)
        else:
            scores = scores + mask.astype(acc, copy=False)
    if keep is not None:
        scores = np.where(keep, scores, acc(-np.inf))
    # softmax; a row that is all -inf gives zeros (torch's _safe_softmax), a NaN stays NaN
    m = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
    masked = m == -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(scores - np.where(masked, acc(0), m))
        p = p / np.sum(p, axis=-1, keepdims=True)
    p = np.where(masked, acc(0), p)
    out = np.matmul(p, v)
    return np.ascontiguousarray(out.astype(out_dt, copy=False))


def _sdpa_ref(ctx, q, k, v, mask=None, *, is_causal, scale):
    return sdpa_numpy(q, k, v, mask, is_causal, scale)


defop("scaled_dot_product_attention", inputs=("q", "k", "v", "mask?"),
      attrs={"is_causal": Attr("bool", False, "torch's top-left lower-triangular mask"),
             "scale": Attr("float", None, "default 1/sqrt(E)")},
      infer=_sdpa_infer, reference=_sdpa_ref, kind="attention",
      doc="softmax(q @ k^T * scale + mask) @ v over [..., L, E] x [..., S, E] x [..., S, Ev].")
