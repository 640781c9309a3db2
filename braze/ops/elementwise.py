"""Elementwise ops: binary arithmetic, comparisons, logical ops, unary math,
activations, ``where`` and ``cast``.

Dtype rules (see docs/ops-catalog.md):

* binary arithmetic broadcasts and promotes with ``common.promote``; ``div`` is
  true division for floats and truncates toward zero for ints (ONNX);
  ``remainder`` takes the divisor's sign (torch / Python), ``fmod`` the
  dividend's (C ``fmod``; exact, so computing it in float64 changes nothing). An integer
  divisor 0 is an error, as in torch and TF (numpy gives 0): the reference raises
  ``ZeroDivisionError`` and the native call fails (loop IR's ``divisor``).
* comparisons and logical ops return ``bool``; logical ops accept any dtype
  (nonzero is true), like ``torch.logical_and``.
* transcendental unary ops and activations need a float input and raise a
  ``ShapeError`` for ints (cast first) instead of silently producing float32.
  ``neg abs sign relu floor ceil round clamp`` also accept ints (floor, ceil
  and round are then the identity).

References compute float16/bfloat16/float32 in float64 and round once to the
input dtype, so they are correctly rounded (torch is within a few ulp).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import DType, TensorType
from .common import broadcast_shapes, elementwise_infer, promote
from .opdef import Attr, defop

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def _compute_dtype(dt: DType) -> np.dtype:
    """Dtype to compute in: float64 for floats, the dtype itself otherwise."""
    return np.dtype(np.float64) if dt.is_float else dt.numpy


def _out(a, dt: DType) -> np.ndarray:
    return np.asarray(a).astype(dt.numpy, copy=False)


def _errstate():
    return np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore")


def _no_bool(ctx, *types):
    for t in types:
        if t.dtype is DType.bool:
            raise ctx.error(f"does not take bool inputs (got {t})",
                            hint="cast the bool tensor to an int or float dtype first")


# ---------------------------------------------------------------------------
# binary arithmetic
# ---------------------------------------------------------------------------


def _int_div(a, b):
    """Integer division truncating toward zero (the reference raises for a divisor 0 first)."""
    q = np.floor_divide(a, b)
    r = np.remainder(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _div(a, b, dt):
    return _int_div(a, b) if not dt.is_float else a / b


def _remainder(a, b):
    """torch.remainder of floats: fmod, moved into b's sign; a zero keeps a's sign (numpy's mod
    gives b's sign there: remainder(0., -1.) is 0. in torch, -0. in numpy)."""
    r = np.fmod(a, b)
    return np.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def _pow(a, b, dt):
    if dt.is_float:  # IEEE pow (-inf ** 0.5 = inf): numpy takes sqrt for b = 0.5 when the exponent
        # is a scalar, 0-d or broadcast (stride 0); a full 1-d copy keeps it off (fuzz seed 20498)
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        return np.power(np.array(np.broadcast_to(a, shape)).reshape(-1),
                        np.array(np.broadcast_to(b, shape)).reshape(-1)).reshape(shape)
    # ints to negative powers, as torch (and bz_ipow): 1 -> 1, -1 -> +-1 by parity, else 0
    a, b = np.broadcast_arrays(a, b)
    neg = b < 0
    if not neg.any():
        return np.power(a, b)
    pos = np.power(a, np.where(neg, 0, b))
    inv = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(pos.dtype)
    return np.where(neg, inv, pos)


# name -> (fn(a, b, out_dtype) on arrays of the computed dtype, allow_bool, doc)
_BINARY = {
    "add": (lambda a, b, dt: a + b if dt is not DType.bool else a | b, True, "a + b"),
    "sub": (lambda a, b, dt: a - b, False, "a - b"),
    "mul": (lambda a, b, dt: a * b if dt is not DType.bool else a & b, True, "a * b"),
    "div": (_div, False, "a / b: true division for floats, truncation toward zero for ints"),
    "pow": (_pow, False, "a ** b"),
    "maximum": (lambda a, b, dt: np.maximum(a, b), True, "elementwise max (NaN propagates)"),
    "minimum": (lambda a, b, dt: np.minimum(a, b), True, "elementwise min (NaN propagates)"),
    "remainder": (lambda a, b, dt: _remainder(a, b) if dt.is_float else np.mod(a, b), False,
                  "a mod b with the sign of b (torch.remainder)"),
    "fmod": (lambda a, b, dt: np.fmod(a, b), False,
             "a mod b with the sign of a (C fmod, torch.fmod; exact)"),
}


def _binary_infer(allow_bool):
    base = elementwise_infer()

    def infer(ctx, a: TensorType, b: TensorType, **_):
        if not allow_bool:
            _no_bool(ctx, a, b)
        return base(ctx, a, b)

    return infer


# the ops that divide: an integer divisor 0 is an error (the reference raises; loop IR's ``divisor``)
DIVIDING_OPS = ("div", "remainder", "fmod")


def _binary_ref(name, fn):
    divides = name in DIVIDING_OPS

    def reference(ctx, a, b, **_):
        dt = promote(DType.from_numpy(a.dtype), DType.from_numpy(b.dtype))
        if divides and dt.is_int and (b == 0).any() and math.prod(np.broadcast_shapes(a.shape, b.shape)):
            raise ZeroDivisionError(f"{name}: integer division by zero")  # as torch (numpy gives 0)
        cd = _compute_dtype(dt)
        with _errstate():
            return _out(fn(a.astype(cd, copy=False), b.astype(cd, copy=False), dt), dt)

    return reference


for _name, (_fn, _allow_bool, _doc) in _BINARY.items():
    defop(_name, inputs=("a", "b"), infer=_binary_infer(_allow_bool), reference=_binary_ref(_name, _fn),
          kind="elementwise", doc=_doc)

# ---------------------------------------------------------------------------
# comparisons and logical ops -> bool
# ---------------------------------------------------------------------------

_COMPARE = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
}


def _compare_ref(fn):
    def reference(ctx, a, b, **_):
        dt = promote(DType.from_numpy(a.dtype), DType.from_numpy(b.dtype))
        cd = _compute_dtype(dt)
        return fn(a.astype(cd, copy=False), b.astype(cd, copy=False))

    return reference


for _name, _fn in _COMPARE.items():
    defop(_name, inputs=("a", "b"), infer=elementwise_infer(DType.bool), reference=_compare_ref(_fn),
          kind="elementwise", doc=f"a {_name.replace('_', ' ')} b, broadcast, as bool")

_LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}


def _logical_ref(fn):
    def reference(ctx, a, b, **_):
        return fn(a.astype(bool, copy=False), b.astype(bool, copy=False))

    return reference


for _name, _fn in _LOGICAL.items():
    defop(_name, inputs=("a", "b"), infer=elementwise_infer(DType.bool), reference=_logical_ref(_fn),
          kind="elementwise", doc=f"{_name.replace('_', ' ')} of truth values (nonzero is true), as bool")

defop("logical_not", inputs=("x",), infer=lambda ctx, x, **_: x.with_dtype(DType.bool),
      reference=lambda ctx, x, **_: np.logical_not(x.astype(bool, copy=False)),
      kind="elementwise", doc="not x (nonzero is true), as bool")

# ---------------------------------------------------------------------------
# unary ops
# ---------------------------------------------------------------------------

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_TWO_SQRT_PI = 2.0 / math.sqrt(math.pi)


def erf(x) -> np.ndarray:
    """erf in float64, relative error ~1e-15 (no scipy needed).

    |x| < 3: the all-positive series erf(x) = 2/sqrt(pi) e^{-x^2} sum_n 2^n x^{2n+1} / (2n+1)!!
    (no cancellation); 3 <= |x| < 6: 1 - erfc(x) with erfc's continued fraction;
    |x| >= 6: +-1 (erfc(6) < 2.2e-17).
    """
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    out = np.empty_like(x)
    small = ax < 3.0
    if np.any(small):
        xs = ax[small]
        x2 = xs * xs
        term = xs.copy()
        total = xs.copy()
        for n in range(1, 80):
            term = term * (2.0 * x2 / (2 * n + 1))
            total += term
        out[small] = _TWO_SQRT_PI * np.exp(-x2) * total
    mid = (~small) & (ax < 6.0)
    if np.any(mid):
        xm = ax[mid]
        # erfc(x) = e^{-x^2}/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
        f = xm.copy()
        for k in range(60, 0, -1):
            f = xm + (k / 2.0) / f
        out[mid] = 1.0 - np.exp(-xm * xm) / math.sqrt(math.pi) / f
    out[ax >= 6.0] = 1.0
    out = np.where(np.isnan(x), np.nan, out)
    return np.asarray(np.copysign(out, x))  # an array for a 0-d x too (numpy gives a scalar)


def erfc(x) -> np.ndarray:
    """1 - erf(x) in float64 without the cancellation: the continued fraction for x >= 3
    (relative error ~1e-15 down to the underflow near x = 26.5)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.asarray(1.0 - erf(x))
    big = x >= 3.0
    if np.any(big):
        xb = x[big]
        f = xb.copy()
        with np.errstate(invalid="ignore", over="ignore"):
            for k in range(60, 0, -1):
                f = xb + (k / 2.0) / f
            out[big] = np.where(np.isinf(xb), 0.0, np.exp(-xb * xb) / math.sqrt(math.pi) / f)
    return out


def _finite_below(x):
    """max(x, -largest float64): x * 0 at x = -inf is the limit -0, not NaN (see docs/semantics.md)."""
    return np.maximum(x, -np.finfo(np.float64).max)


def _gelu(x, approximate):
    if approximate == "none":
        return 0.5 * _finite_below(x) * erfc(-x * _SQRT1_2)
    return 0.5 * _finite_below(x) * (1.0 + np.tanh(_SQRT_2_PI * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(x, beta, threshold):
    bx = beta * x
    return np.where(bx > threshold, x, (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta)


# float-only unary ops: name -> (fn(x in float64, **attrs), attrs, doc)
_FLOAT_UNARY = {
    "exp": (lambda x: np.exp(x), {}, "e ** x"),
    "log": (lambda x: np.log(x), {}, "natural log (log 0 = -inf, negative -> NaN)"),
    "log1p": (lambda x: np.log1p(x), {}, "log(1 + x), without the rounding of 1 + x near 0 (-0 -> -0)"),
    "expm1": (lambda x: np.expm1(x), {}, "e ** x - 1, without the cancellation near 0 (-0 -> -0)"),
    "sqrt": (lambda x: np.sqrt(x), {}, "square root"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), {}, "1 / sqrt(x)"),
    "reciprocal": (lambda x: 1.0 / x, {}, "1 / x"),
    "tanh": (lambda x: np.tanh(x), {}, "hyperbolic tangent"),
    "erf": (erf, {}, "error function"),
    "sigmoid": (_sigmoid, {}, "1 / (1 + e^-x)"),
    "silu": (lambda x: _finite_below(x) * _sigmoid(x), {}, "x * sigmoid(x)"),
    "sin": (lambda x: np.sin(x), {}, "sine"),
    "cos": (lambda x: np.cos(x), {}, "cosine"),
    "tan": (lambda x: np.tan(x), {}, "tangent"),
    "asin": (lambda x: np.arcsin(x), {}, "arcsine (|x| > 1 -> NaN)"),
    "acos": (lambda x: np.arccos(x), {}, "arccosine (|x| > 1 -> NaN)"),
    "atan": (lambda x: np.arctan(x), {}, "arctangent"),
    "sinh": (lambda x: np.sinh(x), {}, "hyperbolic sine"),
    "cosh": (lambda x: np.cosh(x), {}, "hyperbolic cosine"),
    "asinh": (lambda x: np.arcsinh(x), {}, "inverse hyperbolic sine"),
    "acosh": (lambda x: np.arccosh(x), {}, "inverse hyperbolic cosine (x < 1 -> NaN)"),
    "atanh": (lambda x: np.arctanh(x), {}, "inverse hyperbolic tangent (|x| = 1 -> +-inf, |x| > 1 -> NaN)"),
    "log2": (lambda x: np.log2(x), {}, "base-2 log (exact at powers of 2)"),
    "log10": (lambda x: np.log10(x), {}, "base-10 log"),
    "exp2": (lambda x: np.exp2(x), {}, "2 ** x (exact at integers)"),
    "erfc": (lambda x: erfc(x), {}, "1 - erf(x), without the cancellation for large x"),
    "hardswish": (lambda x: _finite_below(x) * (np.clip(x + 3.0, 0.0, 6.0) / 6.0), {}, "x * relu6(x + 3) / 6"),
    "gelu": (_gelu,
             {"approximate": Attr("str", "none", '"none" (exact, erf) or "tanh" (torch\'s tanh form)')},
             "Gaussian error linear unit"),
    "leaky_relu": (lambda x, alpha: np.where(x >= 0, x, alpha * x),
                   {"alpha": Attr("float", 0.01, "slope for x < 0")}, "x if x >= 0 else alpha * x"),
    "elu": (lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(np.where(x > 0, 0.0, x))),
            {"alpha": Attr("float", 1.0, "scale of the negative part")}, "x if x > 0 else alpha * (e^x - 1)"),
    "softplus": (_softplus, {"beta": Attr("float", 1.0), "threshold": Attr("float", 20.0, "linear above this beta*x")},
                 "log(1 + e^(beta x)) / beta, linear where beta x > threshold (torch)"),
    "hardsigmoid": (lambda x, alpha, beta: np.clip(alpha * x + beta, 0.0, 1.0),
                    {"alpha": Attr("float", 1.0 / 6.0), "beta": Attr("float", 0.5)},
                    "clip(alpha x + beta, 0, 1)"),
}


def _float_infer(ctx, x: TensorType, **attrs):
    if not x.dtype.is_float:
        raise ctx.error(f"needs a floating-point input, got {x}",
                        hint="cast the input to a float dtype (e.g. float32) first")
    if attrs.get("approximate", "none") not in ("none", "tanh"):
        raise ctx.error(f"approximate must be \"none\" or \"tanh\", got {attrs['approximate']!r}")
    return x


def _float_ref(fn):
    def reference(ctx, x, **attrs):
        with _errstate():
            return _out(fn(x.astype(np.float64, copy=False), **attrs), DType.from_numpy(x.dtype))

    return reference


for _name, (_fn, _attrs, _doc) in _FLOAT_UNARY.items():
    defop(_name, inputs=("x",), attrs=_attrs, infer=_float_infer, reference=_float_ref(_fn),
          kind="elementwise", doc=_doc)


# numeric unary ops (ints and floats, not bool): name -> (fn, doc)
def _int_ident(fn):
    return lambda x: x if not np.issubdtype(x.dtype, np.floating) else fn(x)


_NUMERIC_UNARY = {
    "neg": (np.negative, "-x"),
    "abs": (np.abs, "|x|"),
    "sign": (lambda x: np.where(np.isnan(x), 0, np.sign(x)) if x.dtype.kind == "f" else np.sign(x),
             "-1, 0 or 1 (NaN gives 0, like torch)"),
    "relu": (lambda x: np.where(x < 0, np.zeros((), x.dtype), x), "max(x, 0) (NaN propagates)"),
    "floor": (_int_ident(np.floor), "round down (identity on ints)"),
    "ceil": (_int_ident(np.ceil), "round up (identity on ints)"),
    "round": (_int_ident(np.round), "round half to even (identity on ints)"),
    "trunc": (_int_ident(np.trunc), "round toward zero (identity on ints)"),
}


def _numeric_infer(ctx, x: TensorType, **_):
    _no_bool(ctx, x)
    return x


def _numeric_ref(fn):
    def reference(ctx, x, **_):
        dt = DType.from_numpy(x.dtype)
        with _errstate():
            return _out(fn(x.astype(_compute_dtype(dt), copy=False)), dt)

    return reference


for _name, (_fn, _doc) in _NUMERIC_UNARY.items():
    defop(_name, inputs=("x",), infer=_numeric_infer, reference=_numeric_ref(_fn), kind="elementwise", doc=_doc)


def _clamp_ref(ctx, x, *, min, max):
    dt = DType.from_numpy(x.dtype)
    y = x.astype(_compute_dtype(dt), copy=False)
    lo, hi = min, max
    if not dt.is_float:  # the ints nearest inside [min, max]
        info = np.iinfo(dt.numpy)
        lo = None if lo is None else int(np.clip(math.ceil(lo), info.min, info.max))
        hi = None if hi is None else int(np.clip(math.floor(hi), info.min, info.max))
    # a bound only where x is beyond it, like torch.clamp: NaN propagates and -0 stays -0 (np.maximum
    # gives +0); min > max gives max everywhere, like torch
    if lo is not None:
        y = np.where(y < lo, y.dtype.type(lo), y)
    if hi is not None:
        y = np.where(y > hi, y.dtype.type(hi), y)
    return _out(y, dt)


defop("clamp", inputs=("x",),
      attrs={"min": Attr("float", None, "lower bound or None"), "max": Attr("float", None, "upper bound or None")},
      infer=_numeric_infer, reference=_clamp_ref, kind="elementwise",
      doc="clip x to [min, max]; on ints the bounds round inward; dtype of x")

# ---------------------------------------------------------------------------
# where, cast
# ---------------------------------------------------------------------------


def _where_infer(ctx, cond: TensorType, a: TensorType, b: TensorType, **_):
    if cond.dtype is not DType.bool:
        raise ctx.error(f"condition must be bool, got {cond}", hint="compare it (e.g. not_equal(c, 0)) or cast to bool")
    shape = broadcast_shapes(ctx, cond.shape, a.shape, b.shape)
    return TensorType(promote(a.dtype, b.dtype), shape)


def _where_ref(ctx, cond, a, b, **_):
    dt = promote(DType.from_numpy(a.dtype), DType.from_numpy(b.dtype))
    return _out(np.where(cond, a.astype(dt.numpy, copy=False), b.astype(dt.numpy, copy=False)), dt)


defop("where", inputs=("cond", "a", "b"), infer=_where_infer, reference=_where_ref, kind="elementwise",
      doc="a where cond else b, broadcast over all three")


def _cast_infer(ctx, x, *, dtype):
    src = x.dtype
    if src.is_narrow or dtype.is_narrow:
        if src.is_minifloat or dtype.is_minifloat:
            ok = (src.is_float or dtype.is_float) and dtype is not DType.float8_e8m0fnu
            want = "float types (and e8m0's bits through bitcast from uint8)"
        else:
            ok = not (src.is_narrow and dtype.is_narrow)
            want = "integer, float and bool types"
        if not ok:
            raise ctx.error(f"cannot cast {src.name} to {dtype.name}",
                            hint=f"{src.name if src.is_narrow else dtype.name} casts to and from {want}; "
                                 "cast through float32 or int64")
    return x.with_dtype(dtype)


def _cast_ref(ctx, x, *, dtype):
    if dtype.is_narrow and DType.from_numpy(x.dtype).is_float:
        if dtype.is_minifloat:  # braze_narrow.h rounds float32 (ml_dtypes rounds float64 through it too)
            x = x.astype(np.float32, copy=False)
        else:  # as ml_dtypes: truncated, wrapped, and 0 outside int32
            with _errstate():
                x = np.where(np.abs(x) < 2.0 ** 31, np.trunc(x.astype(np.float64)), 0).astype(np.int64)
    elif (dtype.is_int and np.issubdtype(x.dtype, np.floating)) or x.dtype.name == "bfloat16":
        x = x.astype(np.float64, copy=False)  # truncation toward zero; also avoids bf16 -> int quirks
    with _errstate():
        return x.astype(dtype.numpy)


defop("cast", narrow=True, inputs=("x",), attrs={"dtype": Attr("dtype", doc="target dtype")},
      infer=_cast_infer, reference=_cast_ref, kind="elementwise",
      doc="convert to dtype (floats to ints truncate toward zero; nonzero to bool is True; narrow types: "
          "docs/semantics.md)")
