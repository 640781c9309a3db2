"""ATen converters: matmul family, softmax, norms, conv, pooling, embedding, attention."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Value
from ...ir.types import DType
from ...ops.attention import attention_backward, attention_logsumexp, attention_scores, default_scale
from .convert import axis, cast, conv, need_static, op, out_dtype, scalar
from .common import ISSUES_HINT, NotProduced


def pair(v):
    if isinstance(v, (list, tuple)):
        return tuple(v) * 2 if len(v) == 1 else tuple(v)
    return (v, v)


# ---------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------


def _float_only(cx, name, x):
    if not x.dtype.is_float:
        raise UnsupportedOpError(f"{name} on {x.dtype.name} tensors is not supported (floating point only)",
                                 where=str(cx.loc), hint="cast the input to float32 first")


@conv("linear")
def _linear(cx, n, x, w, b=None):
    return op(cx, "linear", [x, w] + ([b] if b is not None else []))


def _linear_weight(a, b):
    """W when ``b`` is ``t(W)`` of a 2-D weight: ``a @ t(W)`` is a linear layer, which AOTAutograd
    (torch.compile) decomposes into ``t`` and ``mm``/``addmm``. As a ``linear`` node the GEMM
    library reads W as it is (a constant prepacked, a run-time weight in its own layout), where
    ``t(W)`` would be a copy at every call. Not when W is itself ``t(V)``: a training backward's
    ``grad @ t(t(V))`` is ``matmul(grad, V)``, which reads V in place as ``[K, N]`` once the two
    permutes cancel, where ``linear`` would read a copy of ``t(V)`` made at every call."""
    p = b.producer
    if a.rank == 2 and p is not None and p.op == "permute" and tuple(p.attrs.get("perm", ())) == (1, 0) \
            and p.inputs[0].rank == 2:
        q = p.inputs[0].producer
        if q is not None and q.op == "permute" and tuple(q.attrs.get("perm", ())) == (1, 0):
            return None
        return p.inputs[0]
    return None


def _linear_2d(cx, n, a, w, bias=None):
    """``linear`` for a 2-D ``a``; when ``a`` flattens the leading dims of ``x`` (the
    ``view(x, [-1, K])`` AOTAutograd puts before ``mm``), on ``x`` itself, so the flattening is not
    a copy, with the 2-D view of the result (which the ``view`` back folds away)."""
    p = a.producer
    if p is not None and p.op == "reshape" and p.inputs[0].rank >= 3:
        x = p.inputs[0]
        lead = tuple(x.shape[:-1])
        if cx.module.constraints.equal(x.shape[-1], a.shape[1]) is True and \
                cx.module.constraints.equal(S.prod(lead), a.shape[0]) is True:
            y = _linear(cx, n, x, w, bias)
            return op(cx, "reshape", [y], shape=(a.shape[0], y.shape[-1]))
    return _linear(cx, n, a, w, bias)


@conv("mm", "bmm", "matmul", "mv", "dot")
def _matmul(cx, n, a, b):
    w = _linear_weight(a, b) if str(n.target).startswith("aten.mm") else None
    if w is not None:
        return _linear_2d(cx, n, a, w)
    return op(cx, "matmul", [a, b])


def _scaled(cx, v, k):
    return v if k == 1 else op(cx, "mul", [v, scalar(cx, k, v.dtype)])


@conv("addmm", "baddbmm", "addmv")
def _addmm(cx, n, bias, a, b, beta=1, alpha=1):
    w = _linear_weight(a, b) if str(n.target).startswith("aten.addmm") and beta == 1 and alpha == 1 else None
    if w is not None and bias.rank == 1:
        return _linear_2d(cx, n, a, w, bias)
    m = _scaled(cx, op(cx, "matmul", [a, b]), alpha)
    if beta == 0:
        return m
    return op(cx, "add", [m, _scaled(cx, bias, beta)])


@conv("t")
def _t(cx, n, x):
    return x if x.rank < 2 else op(cx, "permute", [x], perm=(1, 0))


# ---------------------------------------------------------------------------
# nn
# ---------------------------------------------------------------------------


@conv("softmax", "_softmax")
def _softmax(cx, n, x, dim, dtype=None):
    x = cast(cx, x, out_dtype(cx, n))
    return op(cx, "softmax", [x], axis=axis(cx, dim, x.rank))


@conv("_safe_softmax")
def _safe_softmax(cx, n, x, dim, dtype=None):
    """softmax, but a row that is all -inf gives zeros, not NaN (torch's _safe_softmax, what
    scaled_dot_product_attention uses); a row with a NaN stays NaN. The row's max joins the
    softmax's row kernel."""
    x = cast(cx, x, out_dtype(cx, n))
    a = axis(cx, dim, x.rank)
    p = op(cx, "softmax", [x], axis=a)
    m = op(cx, "reduce_max", [x], axes=(a,), keepdims=True)
    masked = op(cx, "equal", [m, scalar(cx, float("-inf"), x.dtype)])
    return op(cx, "where", [masked, scalar(cx, 0.0, x.dtype), p])


@conv("log_softmax", "_log_softmax")
def _log_softmax(cx, n, x, dim, dtype=None):
    x = cast(cx, x, out_dtype(cx, n))
    return op(cx, "log_softmax", [x], axis=axis(cx, dim, x.rank))


@conv("layer_norm")
def _layer_norm(cx, n, x, shape, w=None, b=None, eps=1e-5, cudnn_enable=True):
    return op(cx, "layer_norm", [x, w, b], axis=-len(shape), eps=float(eps))


def _moments(cx, x, axes):
    """The mean over ``axes`` (kept as size-1 axes), the deviations from it, their sum of squares
    and the count. Not the ``var`` op: its lowering recomputes the mean for every element it sums
    (quadratic: 100 ms for one [96, 768] row set)."""
    mean = op(cx, "reduce_mean", [x], axes=axes, keepdims=True)
    d = op(cx, "sub", [x, mean])
    ss = op(cx, "reduce_sum", [op(cx, "mul", [d, d])], axes=axes, keepdims=True)
    return mean, d, ss, S.prod([x.shape[a] for a in axes])


def _rstd(cx, ss, n, eps, dt):
    """1 / sqrt(ss / n + eps): the biased variance's reciprocal standard deviation."""
    var = op(cx, "div", [ss, scalar(cx, n, dt)])
    return op(cx, "rsqrt", [op(cx, "add", [var, scalar(cx, float(eps), dt)])])


@conv("native_layer_norm")
def _native_layer_norm(cx, n, x, shape, w, b, eps):
    """The mean and the reciprocal standard deviation over the normalized axes (kept, as size-1
    axes), which a training forward saves for the backward, are computed where they are used."""
    axes = tuple(range(x.rank - len(shape), x.rank))
    dt = out_dtype(cx, n, 1)  # float32 for a 16-bit x, as torch's

    def mean():
        return op(cx, "reduce_mean", [cast(cx, x, dt)], axes=axes, keepdims=True)

    def rstd():
        _, _, ss, count = _moments(cx, cast(cx, x, dt), axes)
        return _rstd(cx, ss, count, eps, dt)
    return (_layer_norm(cx, n, x, shape, w, b, eps), NotProduced("mean output", mean),
            NotProduced("rstd output", rstd))


@conv("rms_norm")
def _rms_norm(cx, n, x, shape, w=None, eps=None):
    if eps is None:
        eps = float(x.dtype.finfo.eps)
    return op(cx, "rms_norm", [x, w], axis=-len(shape), eps=float(eps))


def _bn(cx, x, w, b, mean, var, eps):
    if x.rank < 2:
        raise UnsupportedOpError(f"batch norm of a rank-{x.rank} input (no channel axis) is not supported",
                                 where=str(cx.loc), hint="give the input a batch and a channel axis")
    c = need_static(cx, x.shape[1], "the batch-norm channel count")
    if w is None:
        w = cx.b.constant(np.ones(c, x.dtype.numpy), loc=cx.loc)
    if b is None:
        b = cx.b.constant(np.zeros(c, x.dtype.numpy), loc=cx.loc)
    return op(cx, "batch_norm", [x, w, b, mean, var], eps=float(eps))


def _bn_training(cx):
    return UnsupportedOpError("batch norm in training mode is supported natively only with its running "
                              "statistics returned (as AOTAutograd's functional form), not updated in place",
                              where=str(cx.loc), hint="call model.eval() before torch.export")


@conv("batch_norm")
def _batch_norm(cx, n, x, w, b, mean, var, training, momentum, eps, cudnn_enabled=True):
    if training or mean is None:
        raise _bn_training(cx)
    return _bn(cx, x, w, b, mean, var, eps)


@conv("_native_batch_norm_legit_no_training")
def _bn_no_training(cx, n, x, w, b, mean, var, momentum, eps):
    return (_bn(cx, x, w, b, mean, var, eps), NotProduced("saved mean"), NotProduced("saved rstd"))


@conv("_native_batch_norm_legit", "native_batch_norm", "_native_batch_norm_legit_functional")
def _bn_legit(cx, n, x, w, b, *rest):
    if len(rest) == 3:  # the no_stats overload (instance norm, no running stats): batch statistics
        stats: dict = {}
        y = _bn_batch_stats(cx, x, w, b, rest[2], stats)
        return (y, stats["mean"], stats["rstd"])
    mean, var, training, momentum, eps = rest
    if training and mean is not None and "functional" in str(n.target):  # the updated stats are outputs
        return _bn_train(cx, n, x, w, b, mean, var, momentum, eps)
    if training or mean is None:
        raise _bn_training(cx)
    return (_bn(cx, x, w, b, mean, var, eps), NotProduced("saved mean"), NotProduced("saved rstd"))


def _bn_batch_stats(cx, x, w, b, eps, stats: dict | None = None):
    """(x - mean) / sqrt(var + eps) * w + b with the biased mean and var over every axis but 1.
    With ``stats``, also leaves there the per-channel mean and rstd (the saved statistics) and
    the unbiased variance, for a training forward."""
    _float_only(cx, "batch norm", x)
    if x.rank < 2:
        raise UnsupportedOpError(f"batch norm of a rank-{x.rank} input (no channel axis) is not supported",
                                 where=str(cx.loc), hint="give the input a batch and a channel axis")
    ax = tuple(a for a in range(x.rank) if a != 1)
    per_channel = (x.shape[1],) + (1,) * (x.rank - 2)
    mean, d, ss, n = _moments(cx, x, ax)
    inv = _rstd(cx, ss, n, eps, x.dtype)
    if stats is not None:
        flat = lambda v: op(cx, "reshape", [v], shape=(x.shape[1],))  # noqa: E731
        stats.update(mean=flat(mean), rstd=flat(inv),
                     var1=flat(op(cx, "div", [ss, scalar(cx, S.add(n, -1), x.dtype)])))
    y = op(cx, "mul", [d, inv])
    if w is not None:
        y = op(cx, "mul", [y, op(cx, "reshape", [w], shape=per_channel)])
    if b is not None:
        y = op(cx, "add", [y, op(cx, "reshape", [b], shape=per_channel)])
    return y


def _bn_train(cx, n, x, w, b, rm, rv, momentum, eps):
    """Batch norm in a training forward (``_native_batch_norm_legit_functional``): batch
    statistics, the saved mean and rstd, and the running statistics updated as torch does
    (``(1 - momentum) * running + momentum * batch``, the variance unbiased)."""
    if not isinstance(momentum, (int, float)):
        raise UnsupportedOpError(f"batch norm with momentum {momentum!r} is not supported natively",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    stats: dict = {}
    y = _bn_batch_stats(cx, x, w, b, eps, stats)
    m = float(momentum)

    def update(running, batch):
        batch = cast(cx, batch, running.dtype)
        return op(cx, "add", [op(cx, "mul", [running, scalar(cx, 1.0 - m, running.dtype)]),
                              op(cx, "mul", [batch, scalar(cx, m, running.dtype)])])
    return (y, stats["mean"], stats["rstd"], update(rm, stats["mean"]), update(rv, stats["var1"]))


def _conv2d_impl(cx, x, w, b, stride, padding, dilation, groups):
    _float_only(cx, "convolution", x)
    stride, dilation = pair(stride), pair(dilation)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            kh, kw = need_static(cx, w.shape[2], "kernel"), need_static(cx, w.shape[3], "kernel")
            th, tw = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
            return op(cx, "conv2d", [x, w, b], stride=stride, dilation=dilation, groups=int(groups),
                      padding=(th // 2, tw // 2, th - th // 2, tw - tw // 2))
        else:
            raise UnsupportedOpError(f"conv padding '{padding}' is not supported", where=str(cx.loc))
    ph, pw = pair(padding)
    return op(cx, "conv2d", [x, w, b], stride=stride, padding=(ph, pw, ph, pw), dilation=dilation,
              groups=int(groups))


def _conv1d_impl(cx, x, w, b, stride, padding, dilation, groups):
    one = lambda v: (v[0] if isinstance(v, (list, tuple)) else v)  # noqa: E731
    x4 = op(cx, "unsqueeze", [x], axes=(2,))
    w4 = op(cx, "unsqueeze", [w], axes=(2,))
    if isinstance(padding, str):
        pad = padding
    else:
        pad = (0, one(padding))
    y = _conv2d_impl(cx, x4, w4, b, (1, one(stride)), pad, (1, one(dilation)), groups)
    return op(cx, "squeeze", [y], axes=(2,))


def _require_batched(cx, name, x, rank):
    if x.rank != rank:
        raise UnsupportedOpError(f"{name} on a rank-{x.rank} input (unbatched) is not supported",
                                 where=str(cx.loc), hint="add a batch dim")


@conv("conv2d")
def _conv2d(cx, n, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    _require_batched(cx, "conv2d", x, 4)
    return _conv2d_impl(cx, x, w, b, stride, padding, dilation, groups)


@conv("conv1d")
def _conv1d(cx, n, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    _require_batched(cx, "conv1d", x, 3)
    return _conv1d_impl(cx, x, w, b, stride, padding, dilation, groups)


def _conv_transpose_impl(cx, x, w, b, stride, padding, output_padding, groups, dilation):
    """conv_transpose1d/2d (1-D through an added axis): conv_transpose2d, then the bias as an add."""
    _float_only(cx, "transposed convolution", x)
    if x.dtype is not DType.float32 or w.dtype is not DType.float32:
        raise UnsupportedOpError(f"a transposed convolution in {x.dtype.name} (braze runs it in float32 only)",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    if x.rank not in (3, 4):
        raise UnsupportedOpError(f"a transposed convolution on a rank-{x.rank} input (only batched 1-d and 2-d)",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    if isinstance(padding, str):
        raise UnsupportedOpError(f"transposed convolution padding '{padding}'", where=str(cx.loc), hint=ISSUES_HINT)
    one = x.rank == 3  # the added H axis: stride 1, no padding, dilation 1
    stride, padding, output_padding, dilation = ((h, v[0] if isinstance(v, (list, tuple)) else v) if one else pair(v)
                                                 for h, v in ((1, stride), (0, padding), (0, output_padding),
                                                              (1, dilation)))
    if one:
        x, w = op(cx, "unsqueeze", [x], axes=(2,)), op(cx, "unsqueeze", [w], axes=(2,))
    (ph, pw) = padding
    y = op(cx, "conv_transpose2d", [x, w], stride=stride, padding=(ph, pw, ph, pw), output_padding=output_padding,
           dilation=dilation, groups=int(groups))
    if b is not None:
        y = op(cx, "add", [y, op(cx, "reshape", [b], shape=(b.shape[0], 1, 1))])
    return op(cx, "squeeze", [y], axes=(2,)) if one else y


@conv("conv_transpose2d", "conv_transpose1d")
def _conv_transpose(cx, n, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose_impl(cx, x, w, b, stride, padding, output_padding, groups, dilation)


@conv("convolution", "_convolution")
def _convolution(cx, n, x, w, b, stride, padding, dilation, transposed, output_padding, groups, *rest):
    if transposed:
        return _conv_transpose_impl(cx, x, w, b, stride, padding, output_padding, groups, dilation)
    if x.rank == 4:
        return _conv2d_impl(cx, x, w, b, stride, padding, dilation, groups)
    if x.rank == 3:
        return _conv1d_impl(cx, x, w, b, stride, padding, dilation, groups)
    raise UnsupportedOpError(f"{x.rank - 2}-d convolution is not supported (only 1-d and 2-d)",
                             where=str(cx.loc), hint=ISSUES_HINT)


@conv("convolution_backward")
def _convolution_backward(cx, n, grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    """A 2-d convolution's gradients: input and weight by oneDNN's backward convolutions, the
    bias's as grad's sum over the batch and the image. A 1-d one's are the 2-d one's over an
    image of height 1, as its forward (``_conv1d_impl``)."""
    if transposed:
        raise UnsupportedOpError("a transposed convolution's backward is not supported", where=str(cx.loc),
                                 hint=ISSUES_HINT)
    if x.rank == 3:
        one = lambda v: (v[0] if isinstance(v, (list, tuple)) else v)  # noqa: E731
        flat = [op(cx, "unsqueeze", [t], axes=(2,)) for t in (grad, x, w)]
        pad = padding if isinstance(padding, str) else (0, one(padding))
        grads = _convolution_backward(cx, n, *flat, bias_sizes, (1, one(stride)), pad,
                                      (1, one(dilation)), transposed, output_padding, groups, output_mask)
        return tuple(op(cx, "squeeze", [g], axes=(2,)) if isinstance(g, Value) and g.rank == 4 else g for g in grads)
    if x.rank != 4:
        raise UnsupportedOpError(f"the backward of a {x.rank - 2}-d convolution is not supported (only 1-d and "
                                 "2-d)", where=str(cx.loc), hint=ISSUES_HINT)
    if not x.dtype == w.dtype == grad.dtype == DType.float32:
        raise UnsupportedOpError(f"a convolution's backward on {x.dtype.name} is not supported (float32 only)",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    if isinstance(padding, str):
        raise UnsupportedOpError(f"a convolution's backward with padding '{padding}' is not supported",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    ph, pw = pair(padding)
    attrs = {"stride": pair(stride), "padding": (ph, pw, ph, pw), "dilation": pair(dilation), "groups": int(groups)}
    want_x, want_w, want_b = output_mask
    return (op(cx, "conv2d_backward_input", [grad, x, w], **attrs) if want_x else NotProduced("input gradient"),
            op(cx, "conv2d_backward_weight", [grad, x, w], **attrs) if want_w else NotProduced("weight gradient"),
            op(cx, "reduce_sum", [grad], axes=(0, 2, 3), keepdims=False) if want_b else NotProduced("bias gradient"))


def _pool_args(kernel, stride, padding):
    k = pair(kernel)
    s = pair(stride) if stride not in (None, [], ()) else k
    ph, pw = pair(padding)
    return k, s, (ph, pw, ph, pw)


def _max_pool_attrs(kernel, stride, padding, dilation, ceil_mode) -> dict:
    k, s, p = _pool_args(kernel, stride, padding)
    return {"kernel": k, "stride": s, "padding": p, "dilation": pair(dilation), "ceil_mode": bool(ceil_mode)}


@conv("max_pool2d")
def _max_pool2d(cx, n, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    return op(cx, "max_pool2d", [x], **_max_pool_attrs(kernel, stride, padding, dilation, ceil_mode))


@conv("max_pool2d_with_indices")
def _max_pool2d_idx(cx, n, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """The indices (a training forward saves them for the backward) are built where used."""
    attrs = _max_pool_attrs(kernel, stride, padding, dilation, ceil_mode)
    indices = (lambda: op(cx, "max_pool2d_indices", [x], **attrs)) if x.dtype.is_float else None
    return op(cx, "max_pool2d", [x], **attrs), NotProduced("indices output", indices)


@conv("max_pool2d_with_indices_backward")
def _max_pool2d_backward(cx, n, grad, x, kernel, stride, padding, dilation, ceil_mode, indices):
    _require_batched(cx, "max_pool2d_with_indices_backward", x, 4)
    return op(cx, "max_pool2d_backward", [grad, x, indices], **_max_pool_attrs(kernel, stride, padding, dilation,
                                                                              ceil_mode))


@conv("avg_pool2d")
def _avg_pool2d(cx, n, x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    if divisor_override is not None:
        raise UnsupportedOpError("avg_pool2d(divisor_override=...) is not supported", where=str(cx.loc))
    _float_only(cx, "avg_pool2d", x)
    k, s, p = _pool_args(kernel, stride, padding)
    return op(cx, "avg_pool2d", [x], kernel=k, stride=s, padding=p, ceil_mode=bool(ceil_mode),
              count_include_pad=bool(count_include_pad))


@conv("adaptive_avg_pool2d", "_adaptive_avg_pool2d")
def _adaptive_avg_pool2d(cx, n, x, output_size):
    _float_only(cx, "adaptive_avg_pool2d", x)
    return op(cx, "adaptive_avg_pool2d", [x], output_size=pair(output_size))


@conv("embedding")
def _embedding(cx, n, w, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return op(cx, "gather", [w, idx], axis=0, wrap=False)


def _repeat_kv(cx, k, hq):
    hk = k.shape[-3]
    if cx.module.constraints.equal(hk, hq) is True:
        return k
    g = need_static(cx, hq, "query heads") // need_static(cx, hk, "key heads")
    shp = tuple(k.shape)
    y = op(cx, "unsqueeze", [k], axes=(len(shp) - 2,))
    y = op(cx, "expand", [y], shape=shp[:-2] + (g,) + shp[-2:])
    return op(cx, "reshape", [y], shape=shp[:-3] + (hq,) + shp[-2:])


def _grouped(q, k, enable_gqa=False) -> bool:
    """Whether k and v have fewer heads than q, shared by groups of query heads (GQA)."""
    hq, hk = (q.shape[-3], k.shape[-3]) if q.rank >= 3 and k.rank >= 3 else (None, None)
    # the CPU flash kernel takes grouped key/value heads with no flag (torch dispatches enable_gqa there)
    return enable_gqa or (isinstance(hq, int) and isinstance(hk, int) and hq != hk)


def _no_dropout(cx, dropout_p):
    if dropout_p:
        raise UnsupportedOpError("attention dropout is not supported", where=str(cx.loc),
                                 hint="call model.eval() before torch.export")


def _sdpa(cx, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa=False):
    _no_dropout(cx, dropout_p)
    if _grouped(q, k, enable_gqa):
        k, v = _repeat_kv(cx, k, q.shape[-3]), _repeat_kv(cx, v, q.shape[-3])
    ins = [q, k, v] + ([mask] if mask is not None else [])
    return op(cx, "scaled_dot_product_attention", ins, is_causal=bool(is_causal),
              scale=None if scale is None else float(scale))


class _Emit:
    """braze.ops.attention's emit/const callbacks over the frontend's builder."""

    def __init__(self, cx):
        self.cx = cx

    def __call__(self, op_name, *inputs, name=None, **attrs):
        return self.cx.b.op(op_name, list(inputs), loc=self.cx.loc, name=name, **attrs)

    def const(self, array, hint):
        return self.cx.b.constant(array, loc=self.cx.loc)


def _attention_training_form(cx, what, q, scale):
    """(emit, the scale, the accumulation dtype) for attention's training pieces (float32 only:
    a 16-bit training graph leaves them to torch)."""
    if q.dtype is not DType.float32:
        raise UnsupportedOpError(f"braze computes attention's {what} in float32 only, got {q.dtype}",
                                 where=str(cx.loc))
    sc = default_scale(q.shape[-1]) if scale is None else float(scale)
    if sc is None:
        raise UnsupportedOpError(f"attention's {what} needs a static head size or a scale, got {q.shape[-1]}",
                                 where=str(cx.loc))
    return _Emit(cx), sc, DType.float32


def _sdpa_logsumexp(cx, q, k, mask, is_causal, scale):
    """The logsumexp torch's CPU flash attention saves, [..., L] (the scores' nodes are the ones
    the attention's decomposition makes: CSE computes them once)."""
    emit, sc, acc = _attention_training_form(cx, "logsumexp", q, scale)
    if _grouped(q, k):
        k = _repeat_kv(cx, k, q.shape[-3])
    s = attention_scores(emit, emit.const, q, k, mask, bool(is_causal), sc, acc)
    return attention_logsumexp(emit, emit.const, s, acc)


@conv("scaled_dot_product_attention")
def _sdpa_conv(cx, n, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _sdpa(cx, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@conv("_scaled_dot_product_flash_attention_for_cpu")
def _sdpa_flash_cpu(cx, n, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    return (_sdpa(cx, q, k, v, attn_mask, dropout_p, is_causal, scale),
            NotProduced("logsumexp output", lambda: _sdpa_logsumexp(cx, q, k, attn_mask, is_causal, scale)))


@conv("_scaled_dot_product_flash_attention_for_cpu_backward")
def _sdpa_flash_cpu_backward(cx, n, dout, q, k, v, out, lse, dropout_p, is_causal, attn_mask=None, scale=None):
    """(dq, dk, dv), recomputing the probabilities from the saved logsumexp: [B, H, L, E] heads
    (GQA too) by ``attention_backward``, tile by tile (no L x S matrix); other ranks through the
    scores' graph, which materializes L x S as eager's math path does."""
    _no_dropout(cx, dropout_p)
    emit, sc, acc = _attention_training_form(cx, "backward", q, scale)
    hk = k.shape[-3] if k.rank >= 3 else None
    if q.rank == 4 and k.rank == 4 and v.rank == 4 and isinstance(q.shape[1], int) and isinstance(hk, int) and \
            q.shape[1] % hk == 0 and (attn_mask is None or (attn_mask.rank <= 4 and (
                attn_mask.dtype is DType.bool or attn_mask.dtype.is_float))):
        mask = [] if attn_mask is None else [attn_mask if attn_mask.dtype in (DType.bool, DType.float32)
                                             else cast(cx, attn_mask, DType.float32)]
        res = op(cx, "attention_backward", [q, k, v, out, dout, lse] + mask, is_causal=bool(is_causal), scale=sc)
        return tuple(res)
    grouped = _grouped(q, k)
    if grouped:
        k, v = _repeat_kv(cx, k, q.shape[-3]), _repeat_kv(cx, v, q.shape[-3])
    if not all(cx.module.constraints.equal(a, b) is True for t in (k, v) for a, b in zip(q.shape[:-2], t.shape[:-2])):
        raise UnsupportedOpError(f"attention's backward with broadcast batch dims ({q.shape}, {k.shape}, {v.shape})",
                                 where=str(cx.loc))
    dq, dk, dv = attention_backward(emit, emit.const, q, k, v, out, dout, lse, attn_mask, bool(is_causal), sc, acc)
    if grouped:  # each key/value head's gradient sums over its group of query heads
        g = need_static(cx, q.shape[-3], "query heads") // need_static(cx, hk, "key heads")
        def fold(d):
            shp = tuple(d.shape)
            y = op(cx, "reshape", [d], shape=shp[:-3] + (hk, g) + shp[-2:])
            return op(cx, "reduce_sum", [y], axes=(len(shp) - 2,), keepdims=False)
        dk, dv = fold(dk), fold(dv)
    return dq, dk, dv


@conv("_scaled_dot_product_flash_attention")
def _sdpa_flash(cx, n, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None):
    out = _sdpa(cx, q, k, v, None, dropout_p, is_causal, scale)
    return (out,) + tuple(NotProduced(f"output {i}") for i in range(1, len(n.meta["val"])))


@conv("_scaled_dot_product_efficient_attention")
def _sdpa_eff(cx, n, q, k, v, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False,
              scale=None):
    out = _sdpa(cx, q, k, v, attn_bias, dropout_p, is_causal, scale)
    return (out,) + tuple(NotProduced(f"output {i}") for i in range(1, len(n.meta["val"])))


@conv("_scaled_dot_product_attention_math")
def _sdpa_math(cx, n, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, scale=None,
               enable_gqa=False):
    return (_sdpa(cx, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa),
            NotProduced("attention weights output"))


# ---------------------------------------------------------------------------
# normalization: group norm, weight norm
# ---------------------------------------------------------------------------


@conv("group_norm")
def _group_norm(cx, n, x, num_groups, w=None, b=None, eps=1e-5, cudnn_enabled=True):
    return op(cx, "group_norm", [x, w, b], groups=int(need_static(cx, num_groups, "num_groups")), eps=float(eps))


@conv("native_group_norm")
def _native_group_norm(cx, n, x, w, b, N, C, HxW, group, eps):
    return (_group_norm(cx, n, x, group, w, b, eps), NotProduced("mean output"), NotProduced("rstd output"))


def norm_except_dim(cx, v, dim):
    """The 2-norm of v over every dim but ``dim`` (kept as size 1); over all dims for dim -1."""
    sq = op(cx, "mul", [v, v])
    if dim == -1:
        return op(cx, "sqrt", [op(cx, "reduce_sum", [sq], axes=None, keepdims=False)])
    d = axis(cx, dim, v.rank)
    others = tuple(a for a in range(v.rank) if a != d)
    return op(cx, "sqrt", [op(cx, "reduce_sum", [sq], axes=others, keepdims=True)]) if others else \
        op(cx, "abs", [v])


@conv("_weight_norm_interface")
def _weight_norm_interface(cx, n, v, g, dim=0):
    norm = norm_except_dim(cx, v, dim)
    w = op(cx, "mul", [v, op(cx, "div", [g, norm])])
    if norm.rank != g.rank:
        norm = op(cx, "reshape", [norm], shape=tuple(g.shape))
    return (w, norm)


@conv("_weight_norm")
def _weight_norm(cx, n, v, g, dim=0):
    return _weight_norm_interface(cx, n, v, g, dim)[0]


# ---------------------------------------------------------------------------
# interpolation (F.interpolate): every upsample_* overload -> resize
# ---------------------------------------------------------------------------

# aten name -> (number of resized dims, resize attrs; "ac": takes align_corners)
_NEAREST = dict(mode="nearest", coord="asymmetric", nearest="floor", torch_shortcuts=True)
_NEAREST_EXACT = dict(mode="nearest", coord="half_pixel", nearest="round_prefer_ceil")
_UPSAMPLE = {
    "upsample_nearest1d": (1, _NEAREST), "upsample_nearest2d": (2, _NEAREST), "upsample_nearest3d": (3, _NEAREST),
    "_upsample_nearest_exact1d": (1, _NEAREST_EXACT), "_upsample_nearest_exact2d": (2, _NEAREST_EXACT),
    "_upsample_nearest_exact3d": (3, _NEAREST_EXACT),
    "upsample_linear1d": (1, "linear"), "upsample_bilinear2d": (2, "linear"), "upsample_trilinear3d": (3, "linear"),
    "upsample_bicubic2d": (2, "cubic"),
}
_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


def _upsample(name, k, attrs):
    def f(cx, n, x, output_size=None, *rest, **kw):
        rest = list(rest)
        if isinstance(attrs, str):  # linear / cubic: align_corners comes next
            ac = rest.pop(0) if rest else kw.get("align_corners", False)
            a = dict(mode=attrs, coord="align_corners" if ac else "half_pixel", torch_shortcuts=attrs == "linear")
        else:
            a = dict(attrs)
        if getattr(n.target, "_overloadname", "") == "vec":
            sf = rest[0] if rest else kw.get("scale_factors")
            scales = list(sf) if sf else None
        else:
            vals = rest + [kw.get(s) for s in _SCALE_NAMES[k][len(rest):]]
            scales = vals if any(v is not None for v in vals) else None
        if scales is not None and not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scales):
            raise UnsupportedOpError(f"{name}: scale factors {scales} are not all plain numbers", where=str(cx.loc),
                                     hint="pass the output size (F.interpolate(size=...)) instead")
        if x.rank != k + 2:
            raise UnsupportedOpError(f"{name} needs a rank-{k + 2} input, got {x.type}", where=str(cx.loc))
        sizes = tuple(cx.shape_of(n.meta["val"]))[-k:]
        if a["coord"] == "align_corners":
            scales = None  # torch's align_corners maps (n - 1) to (m - 1), whatever the scale factor
        return op(cx, "resize", [x], sizes=sizes, scales=None if scales is None else tuple(float(s) for s in scales),
                  **a)
    return f


for _name, (_k, _attrs) in _UPSAMPLE.items():
    conv(_name)(_upsample(_name, _k, _attrs))


@conv("grid_sampler", "grid_sampler_2d", "grid_sampler_3d")
def _grid_sampler(cx, n, x, grid, interpolation_mode, padding_mode, align_corners, *rest):
    """F.grid_sample's ATen form: modes as integers (0 bilinear, 1 nearest, 2 bicubic; 0 zeros,
    1 border, 2 reflection); a volume (5-D) bilinear or nearest, as torch's."""
    if x.rank not in (4, 5) or x.dtype not in (DType.float32, DType.float64) or grid.dtype is not x.dtype \
            or (x.rank == 5 and interpolation_mode == 2):
        raise UnsupportedOpError(f"grid_sample of a rank-{x.rank} {x.dtype.name} input (braze samples 4-D and 5-D "
                                 "float32 and float64, 5-D bilinear or nearest)", where=str(cx.loc), hint=ISSUES_HINT)
    return op(cx, "grid_sample", [x, grid], mode=("bilinear", "nearest", "bicubic")[interpolation_mode],
              padding_mode=("zeros", "border", "reflection")[padding_mode], align_corners=bool(align_corners))
