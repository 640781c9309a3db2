"""Normalization ops: softmax, log_softmax, layer_norm, rms_norm, batch_norm, group_norm.

All need float inputs and return the input's dtype and shape. References
compute in float64 (softmax subtracts the max first) and round once.

* ``layer_norm`` / ``rms_norm`` normalize over axes ``[axis, rank)``; ``weight``
  and ``bias`` have exactly the normalized shape ``x.shape[axis:]``
  (torch's ``normalized_shape``). Symbolic dims are matched, or assumed equal
  and checked at run time.
* Trailing optional inputs may be left out entirely (the builder then passes
  fewer arguments), so they default to ``None`` here.
* ``batch_norm`` is inference mode: channels on axis 1, every parameter ``[C]``.
* ``group_norm`` normalizes each of ``groups`` channel groups (channels on axis 1) over
  its channels and every later axis, then scales and shifts per channel (torch,
  ONNX opset 21). It has no kernel of its own: ``passes/decompose.py`` rewrites it
  as reshape -> layer_norm -> reshape -> affine.
"""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError
from ..ir.types import TensorType
from .common import norm_axis
from .opdef import Attr, defop


def _need_float(ctx, x: TensorType, what: str = "input"):
    if not x.dtype.is_float:
        raise ctx.error(f"{what} must be a floating-point tensor, got {x}",
                        hint="cast it to a float dtype (e.g. float32) first")


def _f64(a):
    return None if a is None else a.astype(np.float64, copy=False)


# ---------------------------------------------------------------------------
# softmax, log_softmax
# ---------------------------------------------------------------------------


def _softmax_infer(ctx, x: TensorType, *, axis):
    _need_float(ctx, x)
    norm_axis(ctx, axis, x.rank)
    return x


def _softmax(x, axis, log):
    y = _f64(x)
    if y.ndim == 0:
        y = y.reshape(1)
        r = _softmax(y, 0, log)
        return r.reshape(())
    if y.size == 0:  # nothing to normalize (np.max has no identity)
        return y
    with np.errstate(invalid="ignore"):  # a row of -inf gives NaN, as torch.softmax does
        z = y - np.max(y, axis=axis, keepdims=True, initial=-np.inf)  # initial: 0-sized tensors
        if log:
            r = z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
        else:
            e = np.exp(z)
            r = e / np.sum(e, axis=axis, keepdims=True)
    return r


for _name, _log in (("softmax", False), ("log_softmax", True)):
    defop(_name, inputs=("x",), attrs={"axis": Attr("int", -1, "axis to normalize over")},
          infer=_softmax_infer,
          reference=(lambda log: lambda ctx, x, *, axis: _softmax(x, axis, log).astype(x.dtype, copy=False))(_log),
          kind="normalization",
          doc="exp(x) / sum(exp(x)) along axis" + (", in log space" if _log else ""))

# ---------------------------------------------------------------------------
# layer_norm, rms_norm
# ---------------------------------------------------------------------------


def _check_affine(ctx, x: TensorType, a: int, p: TensorType | None, what: str):
    if p is None:
        return
    _need_float(ctx, p, what)
    want = x.shape[a:]
    if p.rank != len(want):
        raise ctx.error(f"{what} {p} must have the normalized shape [{', '.join(map(str, want))}] "
                        f"(x.shape[{a}:] of {x})", hint="reshape it, or pick the axis where normalization starts")
    for d, w in zip(p.shape, want):
        ctx.assume_equal(d, w, f"{what} dim")


def _layer_norm_infer(ctx, x, weight=None, bias=None, *, axis, eps):
    _need_float(ctx, x)
    if x.rank == 0:
        raise ctx.error("needs an input of rank >= 1")
    a = norm_axis(ctx, axis, x.rank)
    _check_affine(ctx, x, a, weight, "weight")
    _check_affine(ctx, x, a, bias, "bias")
    return x


def _layer_norm_ref(ctx, x, weight=None, bias=None, *, axis, eps):
    y = _f64(x)
    ax = tuple(range(axis % x.ndim, x.ndim))
    mean = np.mean(y, axis=ax, keepdims=True)
    c = y - mean
    var = np.mean(c * c, axis=ax, keepdims=True)
    r = c / np.sqrt(var + eps)
    if weight is not None:
        r = r * _f64(weight)
    if bias is not None:
        r = r + _f64(bias)
    return r.astype(x.dtype, copy=False)


defop("layer_norm", inputs=("x", "weight?", "bias?"),
      attrs={"axis": Attr("int", -1, "first normalized axis; normalizes axes [axis, rank)"),
             "eps": Attr("float", 1e-5, "added to the variance")},
      infer=_layer_norm_infer, reference=_layer_norm_ref, kind="normalization",
      doc="(x - mean) / sqrt(var + eps) * weight + bias over the trailing axes (biased var)")


def _rms_norm_infer(ctx, x, weight=None, *, axis, eps):
    return _layer_norm_infer(ctx, x, weight, None, axis=axis, eps=eps)


def _rms_norm_ref(ctx, x, weight=None, *, axis, eps):
    y = _f64(x)
    ax = tuple(range(axis % x.ndim, x.ndim))
    r = y / np.sqrt(np.mean(y * y, axis=ax, keepdims=True) + eps)
    if weight is not None:
        r = r * _f64(weight)
    return r.astype(x.dtype, copy=False)


defop("rms_norm", inputs=("x", "weight?"),
      attrs={"axis": Attr("int", -1, "first normalized axis; normalizes axes [axis, rank)"),
             "eps": Attr("float", 1e-6, "added to the mean square")},
      infer=_rms_norm_infer, reference=_rms_norm_ref, kind="normalization",
      doc="x / sqrt(mean(x^2) + eps) * weight over the trailing axes")

# ---------------------------------------------------------------------------
# batch_norm (inference)
# ---------------------------------------------------------------------------


def _batch_norm_infer(ctx, x, scale, bias, mean, var, *, eps):
    _need_float(ctx, x)
    if x.rank < 2:
        raise ctx.error(f"needs an input of rank >= 2 with channels on axis 1, got {x}",
                        hint="unsqueeze a batch axis first")
    for p, what in ((scale, "scale"), (bias, "bias"), (mean, "mean"), (var, "var")):
        _need_float(ctx, p, what)
        if p.rank != 1:
            raise ctx.error(f"{what} must be 1-D [C] with C = {x.shape[1]}, got {p}")
        ctx.assume_equal(p.shape[0], x.shape[1], f"{what} length and channel dim")
    return x


def _batch_norm_ref(ctx, x, scale, bias, mean, var, *, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    p = [_f64(a).reshape(shape) for a in (scale, bias, mean, var)]
    r = (_f64(x) - p[2]) / np.sqrt(p[3] + eps) * p[0] + p[1]
    return r.astype(x.dtype, copy=False)


defop("batch_norm", inputs=("x", "scale", "bias", "mean", "var"),
      attrs={"eps": Attr("float", 1e-5, "added to the variance")},
      infer=_batch_norm_infer, reference=_batch_norm_ref, kind="normalization",
      doc="inference batch norm, channels on axis 1: (x - mean) / sqrt(var + eps) * scale + bias")

# ---------------------------------------------------------------------------
# group_norm
# ---------------------------------------------------------------------------


def _group_norm_infer(ctx, x, weight=None, bias=None, *, groups, eps):
    _need_float(ctx, x)
    if x.rank < 2:
        raise ctx.error(f"needs an input of rank >= 2 with channels on axis 1, got {x}")
    if groups < 1:
        raise ctx.error(f"groups must be >= 1, got {groups}")
    c = x.shape[1]
    if isinstance(c, int) and c % groups:
        raise ctx.error(f"the channel count {c} is not divisible by groups={groups}")
    for p, what in ((weight, "weight"), (bias, "bias")):
        if p is None:
            continue
        _need_float(ctx, p, what)
        if p.rank != 1:
            raise ctx.error(f"{what} must be 1-D [C] with C = {c}, got {p}")
        ctx.assume_equal(p.shape[0], c, f"{what} length and channel dim")
    return x


def _group_norm_ref(ctx, x, weight=None, bias=None, *, groups, eps):
    n, c = x.shape[0], x.shape[1]
    if c % groups:
        raise BrazeError(f"group_norm: the channel count {c} is not divisible by groups={groups}")
    y = _f64(x).reshape(n, groups, (c // groups) * int(np.prod(x.shape[2:], dtype=np.int64)))  # no -1: N may be 0
    mean = y.mean(axis=-1, keepdims=True)
    d = y - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    r = (d / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        r = r * _f64(weight).reshape(shape)
    if bias is not None:
        r = r + _f64(bias).reshape(shape)
    return r.astype(x.dtype, copy=False)


defop("group_norm", inputs=("x", "weight?", "bias?"),
      attrs={"groups": Attr("int", doc="number of channel groups; divides the channel count"),
             "eps": Attr("float", 1e-5, "added to the variance")},
      infer=_group_norm_infer, reference=_group_norm_ref, kind="normalization",
      doc="per sample and group of channels (axis 1): (x - mean) / sqrt(var + eps) over the group's channels "
          "and all later axes (biased var), then * weight[c] + bias[c]")
