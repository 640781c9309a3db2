"""Reductions: reduce_sum/mean/max/min/prod, argmax/argmin, var, cumsum, cumprod.

Dtype rules follow torch:

* ``reduce_sum``, ``reduce_prod``, ``cumsum`` and ``cumprod`` of ints or bool give int64;
  floats keep their dtype.
* ``reduce_mean`` and ``var`` need a float input (torch raises for ints too);
  a ``ShapeError`` says to cast first.
* ``reduce_max``/``reduce_min`` keep the dtype (bool included); ``argmax`` and
  ``argmin`` give int64, the first occurrence (a NaN counts as the extreme).

Over no elements (a 0-sized dim), ``reduce_max``/``reduce_min`` give -inf/+inf
(ints: the dtype's lowest/highest; bool: False/True), ``reduce_sum`` 0,
``reduce_prod`` 1, ``reduce_mean`` NaN (ONNX's rule; torch raises for max/min);
``argmax``/``argmin`` over a dim of static size 0 are a ``ShapeError``.
A 0-d input is one element: its reductions and its argmax (0) are defined.

``axes=None`` reduces every axis; an empty tuple reduces none (NumPy).
Negative axes count from the end; repeated axes count once.
Float references accumulate in float64 and round once to the output dtype.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import DType, TensorType
from .common import norm_axes, norm_axis
from .opdef import Attr, defop


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _np_axes(axes, ndim):
    if ndim == 0:
        return ()
    return tuple(range(ndim)) if axes is None else tuple(sorted({a % max(ndim, 1) for a in axes}))


def _errstate():
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


# name -> (numpy fn, dtype rule, doc); dtype rule: "keep", "int64" (ints/bool widen), "float" (floats only)
_REDUCE = {
    "reduce_sum": (np.sum, "int64", "sum over axes"),
    "reduce_mean": (np.mean, "float", "mean over axes (float inputs only)"),
    "reduce_max": (np.max, "keep", "max over axes (NaN propagates)"),
    "reduce_min": (np.min, "keep", "min over axes (NaN propagates)"),
    "reduce_prod": (np.prod, "int64", "product over axes"),
}


def _out_dtype(ctx, x: TensorType, rule: str) -> DType:
    if x.dtype.is_float or rule == "keep":
        return x.dtype
    if rule == "int64":
        return DType.int64
    raise ctx.error(f"needs a floating-point input, got {x}", hint="cast the input to float32 first")


def _reduce_infer(rule):
    def infer(ctx, x: TensorType, *, axes, keepdims):
        dt = _out_dtype(ctx, x, rule)
        ax = norm_axes(ctx, axes, x.rank)
        return TensorType(dt, reduced_shape(x.shape, ax, keepdims))

    return infer


def _identity(dt: np.dtype, is_max: bool):
    """The max (or min) of no elements: -inf / +inf, or the dtype's lowest / highest value."""
    if dt.kind == "f":
        return -np.inf if is_max else np.inf
    if dt.kind == "b":
        return not is_max
    info = np.iinfo(dt)
    return info.min if is_max else info.max


def _reduce_ref(fn, rule):
    def reference(ctx, x, *, axes, keepdims):
        dt = DType.from_numpy(x.dtype)
        out = dt if (dt.is_float or rule == "keep") else DType.int64
        if dt.is_float:
            x = x.astype(np.float64, copy=False)
        elif out is DType.int64:
            x = x.astype(np.int64, copy=False)
        kw = {}
        if fn in (np.max, np.min):  # over no elements: the identity (ONNX; what the native code gives)
            kw["initial"] = _identity(x.dtype, fn is np.max)
        with _errstate():
            r = fn(x, axis=_np_axes(axes, x.ndim), keepdims=keepdims, **kw)
        return np.asarray(r).astype(out.numpy, copy=False)

    return reference


_REDUCE_ATTRS = {"axes": Attr("ints", None, "axes to reduce; None = all, () = none"),
                 "keepdims": Attr("bool", False, "keep reduced axes as size 1")}

for _name, (_fn, _rule, _doc) in _REDUCE.items():
    defop(_name, inputs=("x",), attrs=_REDUCE_ATTRS, infer=_reduce_infer(_rule),
          reference=_reduce_ref(_fn, _rule), kind="reduction", doc=_doc)

# ---------------------------------------------------------------------------
# argmax / argmin
# ---------------------------------------------------------------------------


def _arg_infer(ctx, x: TensorType, *, axis, keepdims):
    a = norm_axis(ctx, axis, x.rank)  # a 0-d input (axis 0 or -1) has one element, at position 0 (torch)
    if x.rank and isinstance(x.shape[a], int) and x.shape[a] == 0:
        raise ctx.error(f"axis {axis} of {x} has size 0: there is no {ctx.op[3:]} position",
                        hint="torch raises here too; reduce over a non-empty dim")
    return TensorType(DType.int64, reduced_shape(x.shape, (a,) if x.rank else (), keepdims))


def _arg_ref(fn):
    def reference(ctx, x, *, axis, keepdims):
        if x.ndim == 0:
            return np.zeros((), np.int64)
        if x.dtype.name == "bfloat16":
            x = x.astype(np.float32)
        return fn(x, axis=axis % x.ndim, keepdims=keepdims).astype(np.int64, copy=False)

    return reference


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    defop(_name, inputs=("x",),
          attrs={"axis": Attr("int", doc="axis to search"), "keepdims": Attr("bool", False, "keep it as size 1")},
          infer=_arg_infer, reference=_arg_ref(_fn), kind="reduction",
          doc=f"index of the first {_name[3:]} along axis, int64")

# ---------------------------------------------------------------------------
# var, cumsum, cumprod
# ---------------------------------------------------------------------------


def _var_infer(ctx, x: TensorType, *, axes, keepdims, correction):
    dt = _out_dtype(ctx, x, "float")  # a negative correction divides by n + |c|, as torch
    return TensorType(dt, reduced_shape(x.shape, norm_axes(ctx, axes, x.rank), keepdims))


def _var_ref(ctx, x, *, axes, keepdims, correction):
    dt = x.dtype
    x = x.astype(np.float64, copy=False)
    ax = _np_axes(axes, x.ndim)
    n = int(np.prod([x.shape[a] for a in ax])) if ax else 1
    mean = np.mean(x, axis=ax, keepdims=True) if ax else x
    ss = np.sum((x - mean) ** 2, axis=ax, keepdims=keepdims)
    with _errstate():
        r = ss / max(n - correction, 0)  # n <= correction: inf or NaN, like torch
    return np.asarray(r).astype(dt, copy=False)


defop("var", inputs=("x",),
      attrs={**_REDUCE_ATTRS, "correction": Attr("int", 1, "divide by n - correction (1 = unbiased)")},
      infer=_var_infer, reference=_var_ref, kind="reduction",
      doc="variance over axes: sum((x - mean)^2) / (n - correction)")


def _cumsum_infer(ctx, x: TensorType, *, axis, exclusive, reverse):
    norm_axis(ctx, axis, x.rank)
    return x.with_dtype(_out_dtype(ctx, x, "int64"))


def _scan_ref(fn, identity):
    return lambda ctx, x, *, axis, exclusive, reverse: _cumulative(fn, identity, x, axis, exclusive, reverse)


def _cumulative(fn, identity, x, axis, exclusive, reverse):
    dt = DType.from_numpy(x.dtype)
    out = dt if dt.is_float else DType.int64
    x = x.astype(np.float64 if dt.is_float else np.int64, copy=False)
    if x.ndim == 0:
        return (np.full_like(x, identity) if exclusive else x).astype(out.numpy)
    axis = axis % x.ndim
    if reverse:
        x = np.flip(x, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        c = fn(x, axis=axis)
    if exclusive:  # shift by one: [identity, x0, x0 op x1, ...]
        e = np.full_like(c, identity)
        pre = (slice(None),) * axis
        e[pre + (slice(1, None),)] = c[pre + (slice(None, -1),)]
        c = e
    if reverse:
        c = np.flip(c, axis)
    return np.ascontiguousarray(c).astype(out.numpy, copy=False)


_SCAN_ATTRS = {"axis": Attr("int", doc="axis to scan"),
               "exclusive": Attr("bool", False, "exclude the element itself (ONNX)"),
               "reverse": Attr("bool", False, "scan from the end")}
defop("cumsum", inputs=("x",), attrs=_SCAN_ATTRS, infer=_cumsum_infer, reference=_scan_ref(np.cumsum, 0),
      kind="reduction", doc="running sum along axis; ints and bool give int64")
defop("cumprod", inputs=("x",), attrs=_SCAN_ATTRS, infer=_cumsum_infer, reference=_scan_ref(np.cumprod, 1),
      kind="reduction", doc="running product along axis; ints and bool give int64 (wrapping)")
