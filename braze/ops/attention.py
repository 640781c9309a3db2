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


def _masked_scores_numpy(q, k, mask, is_causal, scale, acc):
    """q @ k^T * scale (+ a float mask), -inf where the causal or a bool mask drops a key."""
    sc = (1.0 / math.sqrt(q.shape[-1])) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * acc(sc)  # [..., L, S]
    L, S_ = scores.shape[-2:]
    keep = np.tril(np.ones((L, S_), dtype=bool)) if is_causal else None
    if mask is not None:
        if mask.dtype == np.bool_:
            keep = mask if keep is None else np.logical_and(keep, mask)
        else:
            scores = scores + mask.astype(acc, copy=False)
    return scores if keep is None else np.where(keep, scores, acc(-np.inf))


def sdpa_numpy(q, k, v, mask=None, is_causal=False, scale=None):
    out_dt = q.dtype
    acc = np.float64 if q.dtype == np.float64 else np.float32
    q, k, v = (a.astype(acc, copy=False) for a in (q, k, v))
    scores = _masked_scores_numpy(q, k, mask, is_causal, scale, acc)
    # softmax; a row that is all -inf gives zeros (torch's _safe_softmax), a NaN stays NaN
    m = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
    masked = m == -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(scores - np.where(masked, acc(0), m))
        p = p / np.sum(p, axis=-1, keepdims=True)
    p = np.where(masked, acc(0), p)
    out = np.matmul(p, v)
    return np.ascontiguousarray(out.astype(out_dt, copy=False))


def default_scale(e):
    """torch's default score scale, 1/sqrt(E); None when E is a symbol."""
    return 1.0 / math.sqrt(e) if isinstance(e, int) and e > 0 else None


# The graphs below are written once, against two callbacks, so the decomposition of the op
# (braze.passes.decompose) and the torch frontend's training pieces (logsumexp for the backward,
# the backward itself) emit the same score nodes, which CSE then merges:
#   emit(op, *inputs, name=None, **attrs) -> Value;  const(array, hint) -> Value


def _swap_last(emit, x, name=None):
    perm = list(range(x.type.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return emit("permute", x, perm=tuple(perm), name=name)


def attention_scores(emit, const, q, k, mask, is_causal: bool, scale: float, acc: DType):
    """s = q @ k^T * scale (+ a float mask), -inf where the causal or a bool mask drops a key;
    q, k (and a float mask) in ``acc``."""
    s = emit("matmul", q, _swap_last(emit, k, "k_t"), name="scores")
    s = emit("mul", s, const(np.array(scale, dtype=acc.numpy), "sdpa_scale"), name="scores")
    keep = None
    if is_causal:
        L, S_ = q.type.shape[-2], k.type.shape[-2]
        i = emit("unsqueeze", emit("arange", start=0, end=L, step=1, dtype=DType.int64, name="row"), axes=(1,))
        j = emit("unsqueeze", emit("arange", start=0, end=S_, step=1, dtype=DType.int64, name="col"), axes=(0,))
        keep = emit("less_equal", j, i, name="causal")
    if mask is not None:
        if mask.type.dtype is DType.bool:
            keep = mask if keep is None else emit("logical_and", keep, mask, name="keep")
        else:
            mk = mask if mask.type.dtype is acc else emit("cast", mask, dtype=acc)
            s = emit("add", s, mk, name="scores")
    if keep is not None:
        s = emit("where", keep, s, const(np.array(-np.inf, dtype=acc.numpy), "neg_inf"), name="scores")
    return s


def attention_row_masked(emit, const, s, acc: DType):
    """(the rows' max [..., L, 1], True where a row's scores are all -inf)"""
    row_max = emit("reduce_max", s, axes=(-1,), keepdims=True)
    masked = emit("equal", row_max, const(np.array(-np.inf, dtype=acc.numpy), "neg_inf"), name="row_masked")
    return row_max, masked


def attention_logsumexp(emit, const, s, acc: DType):
    """logsumexp(s) over the keys, [..., L]: what torch's CPU flash attention saves for its
    backward, with its value 0 for a row that attends to nothing (so exp(s - lse) is 0 there)."""
    zero = const(np.array(0, dtype=acc.numpy), "zero")
    row_max, masked = attention_row_masked(emit, const, s, acc)
    m = emit("where", masked, zero, row_max, name="row_max")
    z = emit("reduce_sum", emit("exp", emit("sub", s, m)), axes=(-1,), keepdims=True, name="row_sum")
    lse = emit("where", masked, zero, emit("add", m, emit("log", z)), name="logsumexp")
    return emit("squeeze", lse, axes=(-1,), name="logsumexp")


def attention_backward(emit, const, q, k, v, out, dout, lse, mask, is_causal: bool, scale: float, acc: DType):
    """(dq, dk, dv) of out = softmax(s) @ v, from the saved logsumexp: p = exp(s - lse) again,
    dv = p^T @ dout, ds = p * (dout @ v^T - rowsum(dout * out)), dq = ds @ k * scale,
    dk = ds^T @ q * scale. Every input in ``acc``; q, k, v with the same batch dims."""
    s = attention_scores(emit, const, q, k, mask, is_causal, scale, acc)
    p = emit("exp", emit("sub", s, emit("unsqueeze", lse, axes=(-1,))), name="probs")
    dv = emit("matmul", _swap_last(emit, p), dout, name="grad_v")
    dp = emit("matmul", dout, _swap_last(emit, v), name="grad_probs")
    d = emit("reduce_sum", emit("mul", dout, out), axes=(-1,), keepdims=True, name="row_dot")
    ds = emit("mul", p, emit("sub", dp, d), name="grad_scores")
    sc = const(np.array(scale, dtype=acc.numpy), "sdpa_scale")
    dq = emit("mul", emit("matmul", ds, k), sc, name="grad_q")
    dk = emit("mul", emit("matmul", _swap_last(emit, ds), q), sc, name="grad_k")
    return dq, dk, dv


def sdpa_backward_numpy(q, k, v, out, dout, lse, mask=None, is_causal=False, scale=None):
    """NumPy float64 reference of attention_backward (the tests' oracle)."""
    q, k, v, out, dout, lse = (np.asarray(a, np.float64) for a in (q, k, v, out, dout, lse))
    sc = default_scale(q.shape[-1]) if scale is None else scale
    s = _masked_scores_numpy(q, k, None if mask is None else np.asarray(mask), is_causal, sc, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(s - lse[..., None])  # 0 where a key is dropped (-inf)
    dv = np.matmul(np.swapaxes(p, -1, -2), dout)
    ds = p * (np.matmul(dout, np.swapaxes(v, -1, -2)) - np.sum(dout * out, -1, keepdims=True))
    return np.matmul(ds, k) * sc, np.matmul(np.swapaxes(ds, -1, -2), q) * sc, dv


def _attention_backward_infer(ctx, q, k, v, out, dout, lse, mask=None, *, is_causal, scale):
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)):
        if t.dtype is not DType.float32:
            raise ctx.error(f"{name} must be float32, got {t}")
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise ctx.error(f"q, k, v must be [batch, heads, len, dim], got {q}, {k}, {v}")
    hq, hk = q.shape[1], k.shape[1]
    if not isinstance(hq, int) or not isinstance(hk, int) or hk < 1 or hq % hk:
        raise ctx.error(f"the query heads {hq} must be a static multiple of the key heads {hk}")
    want = [(k, (q.shape[0], hk, k.shape[2], q.shape[3])), (v, (q.shape[0], hk, k.shape[2], v.shape[3])),
            (out, tuple(q.shape[:3]) + (v.shape[3],)), (dout, tuple(q.shape[:3]) + (v.shape[3],)),
            (lse, tuple(q.shape[:3]))]
    for t, shape in want:
        if t.rank != len(shape):
            raise ctx.error(f"{t} should be {list(shape)}")
        for a, b in zip(t.shape, shape):
            eq = ctx.equal(a, b)
            if eq is False:
                raise ctx.error(f"{t} should be {list(shape)}")
            if eq is None:
                ctx.assume_equal(a, b, "attention_backward dims")
    if mask is not None:
        if mask.dtype not in (DType.bool, DType.float32) or mask.rank > 4:
            raise ctx.error(f"mask must be bool or float32 of rank <= 4, got {mask}")
        broadcast_shapes(ctx, mask.shape, tuple(q.shape[:3]) + (k.shape[2],))
    return q, k, v


def attention_backward_numpy(q, k, v, out, dout, lse, mask=None, is_causal=False, scale=None):
    """(dq, dk, dv) of ``attention_backward``: key/value heads shared by groups of query heads
    get their group's gradients summed."""
    g = q.shape[1] // k.shape[1]
    kr, vr = (np.repeat(t, g, axis=1) for t in (k, v))
    dq, dk, dv = sdpa_backward_numpy(q, kr, vr, out, dout, lse, mask, is_causal, scale)
    fold = lambda d: d.reshape(d.shape[0], d.shape[1] // g, g, *d.shape[2:]).sum(2)  # noqa: E731
    return tuple(np.ascontiguousarray(a, dtype=np.float32) for a in (dq, fold(dk), fold(dv)))


def _attention_backward_ref(ctx, q, k, v, out, dout, lse, mask=None, *, is_causal, scale):
    return attention_backward_numpy(q, k, v, out, dout, lse, mask, is_causal, scale)


defop("attention_backward", inputs=("q", "k", "v", "out", "dout", "lse", "mask?"),
      attrs={"is_causal": Attr("bool", False, "torch's top-left lower-triangular mask"),
             "scale": Attr("float", doc="the scores' scale")},
      infer=_attention_backward_infer, reference=_attention_backward_ref, kind="opaque",
      doc="(dq, dk, dv) of out = softmax(q @ k^T * scale + mask) @ v from the saved logsumexp lse "
          "[B, H, L]; k, v may have fewer heads, each shared by a group of query heads (GQA).")


def _sdpa_ref(ctx, q, k, v, mask=None, *, is_causal, scale):
    return sdpa_numpy(q, k, v, mask, is_causal, scale)


defop("scaled_dot_product_attention", inputs=("q", "k", "v", "mask?"),
      attrs={"is_causal": Attr("bool", False, "torch's top-left lower-triangular mask"),
             "scale": Attr("float", None, "default 1/sqrt(E)")},
      infer=_sdpa_infer, reference=_sdpa_ref, kind="attention",
      doc="softmax(q @ k^T * scale + mask) @ v over [..., L, E] x [..., S, E] x [..., S, Ev].")
