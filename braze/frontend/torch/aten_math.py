"""ATen converters: elementwise math, comparisons, logic, activations, casts, reductions."""

from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Value
from ...ir.types import DType
from ...ops.common import promote
from .convert import axes, axis, cast, conv, need_static, op, out_dtype, scalar, tensor
from .common import ISSUES_HINT, NotProduced


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------


def _binary(name):
    def f(cx, n, a, b, alpha=1, **kw):
        dt = out_dtype(cx, n)
        a, b = tensor(cx, a, dt), tensor(cx, b, dt)
        if alpha != 1:
            b = op(cx, "mul", [b, scalar(cx, alpha, dt)])
        return op(cx, name, [a, b])
    return f


for _t, _b in {"add": "add", "sub": "sub", "mul": "mul", "maximum": "maximum", "minimum": "minimum",
               "remainder": "remainder", "fmod": "fmod", "true_divide": "div"}.items():
    conv(_t)(_binary(_b))


def _nan_ignoring(name):
    """fmax / fmin: a NaN operand gives the other one (maximum / minimum propagate it): each NaN is
    replaced by the other operand first, so only two NaNs give NaN."""
    def f(cx, n, a, b):
        dt = out_dtype(cx, n)
        a, b = tensor(cx, a, dt), tensor(cx, b, dt)
        if dt.is_float:
            a, b = (op(cx, "where", [op(cx, "not_equal", [x, x]), y, x]) for x, y in ((a, b), (b, a)))
        return op(cx, name, [b, a])  # equal operands (0 and -0) give the first, as eager's
    return f


conv("fmax")(_nan_ignoring("maximum"))
conv("fmin")(_nan_ignoring("minimum"))
conv("max.other")(_binary("maximum"))
conv("min.other")(_binary("minimum"))


@conv("rsub")
def _rsub(cx, n, a, b, alpha=1):
    return _binary("sub")(cx, n, b, a) if alpha == 1 else _binary("sub")(
        cx, n, b, op(cx, "mul", [tensor(cx, a, out_dtype(cx, n)), scalar(cx, alpha, out_dtype(cx, n))]))


@conv("div")
def _div(cx, n, a, b, rounding_mode=None):
    dt = out_dtype(cx, n)
    if rounding_mode is None:
        return op(cx, "div", [tensor(cx, a, dt), tensor(cx, b, dt)])
    a, b = tensor(cx, a, dt), tensor(cx, b, dt)
    if dt.is_float:
        q = op(cx, "div", [a, b])
        if rounding_mode == "floor":
            return _floor_div_float(cx, a, b, q)
        neg = op(cx, "less", [q, scalar(cx, 0.0, dt)])
        return op(cx, "where", [neg, op(cx, "ceil", [q]), op(cx, "floor", [q])])
    if rounding_mode == "trunc":
        return op(cx, "div", [a, b])
    # floor division of ints: trunc(a / b) - (a mod b - fmod(a, b)) / b. The two remainders differ
    # by 0 or b, so nothing overflows; (a - a mod b) / b did at the dtype's minimum
    q = op(cx, "div", [a, b])
    step = op(cx, "sub", [op(cx, "remainder", [a, b]), op(cx, "fmod", [a, b])])
    return op(cx, "sub", [q, op(cx, "div", [step, b])])


def _floor_div_float(cx, a, b, q):
    """Python's float ``a // b``, as eager computes it (c10's ``div_floor_floating``), not
    ``floor(a / b)``: from the exact ``fmod``, so ``7.5 // 0.1`` is 74 and ``1 // -inf`` is -1;
    a zero quotient takes the sign of ``a / b``, a zero divisor gives ``a / b``."""
    dt = q.dtype
    zero, one = scalar(cx, 0.0, dt), scalar(cx, 1.0, dt)
    mod = op(cx, "fmod", [a, b])
    d = op(cx, "div", [op(cx, "sub", [a, mod]), b])
    wrong_sign = op(cx, "not_equal", [op(cx, "less", [b, zero]), op(cx, "less", [mod, zero])])
    d = op(cx, "where", [op(cx, "logical_and", [op(cx, "not_equal", [mod, zero]), wrong_sign]),
                         op(cx, "sub", [d, one]), d])
    f = op(cx, "floor", [d])
    f = op(cx, "where", [op(cx, "greater", [op(cx, "sub", [d, f]), scalar(cx, 0.5, dt)]), op(cx, "add", [f, one]), f])
    # d == 0 only where |a| < |b|, so a / b is finite and q * 0 is a zero with its sign
    f = op(cx, "where", [op(cx, "not_equal", [d, zero]), f, op(cx, "mul", [q, zero])])
    return op(cx, "where", [op(cx, "equal", [b, zero]), q, f])


@conv("floor_divide")
def _floor_divide(cx, n, a, b):
    return _div(cx, n, a, b, rounding_mode="floor")


@conv("pow")
def _pow(cx, n, a, b):
    dt = out_dtype(cx, n)
    if not isinstance(b, Value) and b == 1:
        return tensor(cx, a, dt)
    if not isinstance(b, Value) and b == 2:
        a = tensor(cx, a, dt)
        return op(cx, "mul", [a, a])
    if isinstance(a, Value) and not isinstance(b, Value) and b in (0.5, -0.5) and dt.is_float:
        # eager takes sqrt / rsqrt for these scalar powers: NaN at -inf and -0 -> -0 (-inf),
        # where IEEE pow (braze's pow, and eager's with a tensor exponent) gives inf and 0 (inf)
        return op(cx, "sqrt" if b > 0 else "rsqrt", [tensor(cx, a, dt)])
    return op(cx, "pow", [tensor(cx, a, dt), tensor(cx, b, dt)])


def _cmp_dtype(xs):
    tens = [x for x in xs if isinstance(x, Value)]
    dt = promote(*[x.dtype for x in tens]) if tens else None
    for x in xs:
        if isinstance(x, Value):
            continue
        if isinstance(x, float) and (dt is None or not dt.is_float):
            dt = DType.float32
        elif isinstance(x, bool):
            dt = dt or DType.bool
        elif (isinstance(x, int) or S.is_symbolic(x)) and (dt is None or dt is DType.bool):
            dt = DType.int64
    return dt


def _compare(name):
    def f(cx, n, a, b):
        dt = _cmp_dtype([a, b])
        return op(cx, name, [tensor(cx, a, dt), tensor(cx, b, dt)])
    return f


for _t, _b in {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
               "ge": "greater_equal"}.items():
    conv(_t)(_compare(_b))


def _logical(name):
    def f(cx, n, *xs):  # nonzero is true, as torch's
        return op(cx, name, [tensor(cx, x, DType.bool) for x in xs])
    return f


for _t, _b in {"logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor"}.items():
    conv(_t)(_logical(_b))


def _bitwise(name):
    """torch's bitwise ops: on bool the logical op; on ints braze.ops.bitwise's (the same results)."""
    def f(cx, n, a, b=None):
        dt = out_dtype(cx, n)
        if dt.is_float:
            raise UnsupportedOpError(f"'{n.target}' on {dt.name} tensors", where=str(cx.loc), hint=ISSUES_HINT)
        xs = [tensor(cx, x, dt) for x in ((a,) if b is None else (a, b))]
        return op(cx, name, xs)
    return f


for _t, _b in {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
               "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
               "bitwise_not": "bitwise_not", "bitwise_left_shift": "bitshift_left",
               "__lshift__": "bitshift_left", "bitwise_right_shift": "bitshift_right",
               "__rshift__": "bitshift_right"}.items():
    conv(_t)(_bitwise(_b))


@conv("logical_not")
def _logical_not(cx, n, x):
    return op(cx, "logical_not", [cast(cx, x, DType.bool)])


def _unary(name):
    def f(cx, n, x, **kw):
        dt = out_dtype(cx, n)
        return op(cx, name, [cast(cx, x, dt)])
    return f


for _t in ("neg abs exp log sqrt rsqrt reciprocal tanh erf sigmoid relu silu sin cos floor ceil sign "
           "hardswish tan asin acos atan sinh cosh asinh acosh atanh log2 log10 exp2 erfc trunc").split():
    conv(_t)(_unary(_t))


@conv("round")
def _round(cx, n, x, decimals=0):
    if not decimals or not x.dtype.is_float:
        return op(cx, "round", [x])
    # torch's own steps in x's dtype (round_decimals): x * 10^d rounded, / 10^d; for d < 0, x / 10^-d, * 10^-d
    p = scalar(cx, 10.0 ** abs(decimals), x.dtype)
    first, then = ("mul", "div") if decimals > 0 else ("div", "mul")
    return op(cx, then, [op(cx, "round", [op(cx, first, [x, p])]), p])


@conv("isnan")
def _isnan(cx, n, x):
    return op(cx, "not_equal", [x, x])  # never true for an integer


@conv("isinf")
def _isinf(cx, n, x):
    if not x.dtype.is_float:
        return op(cx, "not_equal", [x, x])
    return op(cx, "equal", [op(cx, "abs", [x]), scalar(cx, float("inf"), x.dtype)])


def _signbit(cx, x: Value) -> Value:
    """x's sign bit (a NaN's and -0's too): its bits as a signed integer, below 0. A 16-bit float
    widens to float32 first (exactly, sign and NaN kept): braze has no int16 kernels."""
    if not x.dtype.is_float:
        return op(cx, "less", [x, scalar(cx, 0, x.dtype)])
    if x.dtype != DType.float64:
        x = cast(cx, x, DType.float32)
    bits = DType.int64 if x.dtype == DType.float64 else DType.int32
    return op(cx, "less", [op(cx, "bitcast", [x], dtype=bits), scalar(cx, 0, bits)])


@conv("signbit")
def _signbit_conv(cx, n, x):
    return _signbit(cx, x)


@conv("copysign")
def _copysign(cx, n, a, b):
    dt = out_dtype(cx, n)
    a, b = tensor(cx, a, dt), tensor(cx, b, dt)
    m = op(cx, "abs", [a])
    return op(cx, "where", [_signbit(cx, b), op(cx, "neg", [m]), m])


@conv("gelu")
def _gelu(cx, n, x, approximate="none"):
    return op(cx, "gelu", [x], approximate=approximate)


@conv("leaky_relu")
def _leaky_relu(cx, n, x, negative_slope=0.01):
    return op(cx, "leaky_relu", [x], alpha=float(negative_slope))


@conv("elu")
def _elu(cx, n, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if input_scale != 1:
        raise UnsupportedOpError("elu with input_scale is not supported", where=str(cx.loc), hint=ISSUES_HINT)
    y = op(cx, "elu", [x], alpha=float(alpha))
    return y if scale == 1 else op(cx, "mul", [y, scalar(cx, float(scale), y.dtype)])  # selu


@conv("softplus")
def _softplus(cx, n, x, beta=1.0, threshold=20.0):
    return op(cx, "softplus", [x], beta=float(beta), threshold=float(threshold))


@conv("hardsigmoid")
def _hardsigmoid(cx, n, x):
    return op(cx, "hardsigmoid", [x], alpha=1.0 / 6.0, beta=0.5)


@conv("hardtanh")
def _hardtanh(cx, n, x, min_val=-1.0, max_val=1.0):
    return op(cx, "clamp", [x], min=float(min_val), max=float(max_val))


@conv("softshrink")
def _softshrink(cx, n, x, lambd=0.5):
    """Eager's kernel, not torch's decomposition (whose ``x * 0`` gives -0 inside the band): x - l
    above l, x + l below -l, else x - x (+0, and NaN for NaN)."""
    dt = x.dtype
    lo, hi = scalar(cx, -float(lambd), dt), scalar(cx, float(lambd), dt)
    inner = op(cx, "where", [op(cx, "less", [x, lo]), op(cx, "sub", [x, lo]), op(cx, "sub", [x, x])])
    return op(cx, "where", [op(cx, "greater", [x, hi]), op(cx, "sub", [x, hi]), inner])


@conv("special_ndtr")
def _ndtr(cx, n, x):
    """The normal CDF as erfc(-x / sqrt 2) / 2, as eager's kernel takes it for |x| > 1: torch's
    decomposition, (1 + erf) / 2, cancels below about -3 (2e-5 off at -3, 4% at -5)."""
    x = cast(cx, x, out_dtype(cx, n))
    t = op(cx, "mul", [x, scalar(cx, -0.7071067811865476, x.dtype)])
    return op(cx, "mul", [op(cx, "erfc", [t]), scalar(cx, 0.5, x.dtype)])


@conv("relu6")
def _relu6(cx, n, x):
    return op(cx, "clamp", [x], min=0.0, max=6.0)


@conv("clamp")
def _clamp(cx, n, x, min=None, max=None):
    dt = out_dtype(cx, n)
    x = cast(cx, x, dt)
    if any(isinstance(v, Value) or S.is_symbolic(v) for v in (min, max)):  # tensor or size bounds
        if min is not None:
            x = op(cx, "maximum", [x, tensor(cx, min, dt)])
        if max is not None:
            x = op(cx, "minimum", [x, tensor(cx, max, dt)])
        return x
    return op(cx, "clamp", [x], min=None if min is None else float(min), max=None if max is None else float(max))


@conv("clamp_min")
def _clamp_min(cx, n, x, m):
    return _clamp(cx, n, x, min=m)


@conv("clamp_max")
def _clamp_max(cx, n, x, m):
    return _clamp(cx, n, x, max=m)


@conv("log1p", "expm1")
def _log1p_expm1(cx, n, x):
    return op(cx, str(n.target).split(".")[1], [cast(cx, x, out_dtype(cx, n))])  # ints give float32


@conv("where")
def _where(cx, n, c, a=None, b=None):
    if a is None:
        raise UnsupportedOpError("where(cond) with one argument (nonzero) has data-dependent shape",
                                 where=str(cx.loc))
    dt = out_dtype(cx, n)
    return op(cx, "where", [cast(cx, c, DType.bool), tensor(cx, a, dt), tensor(cx, b, dt)])


@conv("masked_fill")
def _masked_fill(cx, n, x, mask, value):
    return op(cx, "where", [cast(cx, mask, DType.bool), tensor(cx, value, x.dtype), x])


# casts and identities


@conv("_to_copy", "to", "type_as", "_to_dim_order_copy", "prims.convert_element_type")
def _to(cx, n, x, *args, **kw):
    return cast(cx, x, out_dtype(cx, n))


@conv("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "lift_fresh", "alias_copy", "detach_copy",
      "feature_dropout", "alpha_dropout", "dropout")
def _identity(cx, n, x, *args, **kw):
    train = kw.get("train", args[1] if len(args) > 1 else False)
    if str(n.target).split(".")[1].endswith("dropout") and train:
        raise _training_dropout(cx)
    return x


@conv("native_dropout")
def _native_dropout(cx, n, x, p, train):
    if train is not False:
        raise _training_dropout(cx)
    return (x, NotProduced("dropout mask"))


def _training_dropout(cx):
    return UnsupportedOpError("a training-mode dropout's mask is drawn by PyTorch here; braze draws its own only "
                              "under torch.compile, with the option rng='braze' (the default)", where=str(cx.loc),
                              hint="call model.eval() before torch.export")


def dropout_scale(p: float) -> float:
    """What a kept element is multiplied by: 1 / (1 - p), and 0 when every element drops (torch's)."""
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)


@conv("braze.dropout")
def _braze_dropout(cx, n, x, p, seed, stream):
    """``plugin.rng``'s dropout: the mask from braze's generator, the output as torch computes it,
    ``x * mask * scale`` (a dropped inf or NaN stays NaN), the scale in float32 for a 16-bit ``x``
    (torch's opmath: the scale is not rounded to 16 bits)."""
    u = op(cx, "uniform", [seed], shape=tuple(x.shape), stream=int(stream))
    keep = op(cx, "less", [u, tensor(cx, 1.0 - float(p), DType.float32)])
    kept = op(cx, "mul", [x, cast(cx, keep, x.dtype)])
    wide = DType.float64 if x.dtype == DType.float64 else DType.float32
    out = op(cx, "mul", [cast(cx, kept, wide), tensor(cx, dropout_scale(float(p)), wide)])
    return cast(cx, out, x.dtype), keep


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------


def _reduce(name):
    def f(cx, n, x, dim=None, keepdim=False, dtype=None, **kw):
        x = cast(cx, x, out_dtype(cx, n))
        return op(cx, name, [x], axes=axes(cx, dim, x.rank), keepdims=bool(keepdim))
    return f


conv("sum")(_reduce("reduce_sum"))
conv("mean")(_reduce("reduce_mean"))
conv("amax")(_reduce("reduce_max"))
conv("amin")(_reduce("reduce_min"))
conv("prod")(_reduce("reduce_prod"))


@conv("max", "min")
def _max(cx, n, x, dim=None, keepdim=False):
    is_max = "max" in str(n.target).split(".")[1]
    if dim is None:
        return op(cx, "reduce_max" if is_max else "reduce_min", [x])
    d = axis(cx, dim, x.rank)
    v = op(cx, "reduce_max" if is_max else "reduce_min", [x], axes=(d,), keepdims=bool(keepdim))
    i = op(cx, "argmax" if is_max else "argmin", [x], axis=d, keepdims=bool(keepdim))
    return (v, i)


def _arg(name):
    def f(cx, n, x, dim=None, keepdim=False):
        if dim is None:
            flat = op(cx, "reshape", [x], shape=(x.type.numel(),))
            r = op(cx, name, [flat], axis=0)
            return op(cx, "reshape", [r], shape=(1,) * x.rank) if keepdim else r
        return op(cx, name, [x], axis=axis(cx, dim, x.rank), keepdims=bool(keepdim))
    return f


conv("argmax")(_arg("argmax"))
conv("argmin")(_arg("argmin"))


def _var_impl(cx, n, x, dim, correction, keepdim):
    if correction is None:
        correction = 1
    c = need_static(cx, correction, "correction")
    ax = axes(cx, dim, x.rank)
    if float(c).is_integer():
        return op(cx, "var", [x], axes=ax, keepdims=bool(keepdim), correction=int(c))
    # a fractional correction (the op's is an int): the biased variance times n / max(n - c, 0)
    count = 1
    for a in (range(x.rank) if ax is None else ax):
        count *= need_static(cx, x.shape[a], "the reduced size with a fractional correction")
    v = op(cx, "var", [x], axes=ax, keepdims=bool(keepdim), correction=0)
    d = max(count - float(c), 0.0)
    return op(cx, "mul", [v, scalar(cx, count / d if d else float("inf"), v.dtype)])


@conv("var")
def _var(cx, n, x, dim=None, unbiased=None, keepdim=False, correction=None):
    if isinstance(dim, bool):  # var.default(x, unbiased)
        dim, unbiased = None, dim
    if correction is None and unbiased is not None:
        correction = 1 if unbiased else 0
    return _var_impl(cx, n, x, dim, correction, keepdim)


@conv("std")
def _std(cx, n, x, dim=None, unbiased=None, keepdim=False, correction=None):
    return op(cx, "sqrt", [_var(cx, n, x, dim, unbiased, keepdim, correction)])


@conv("var_mean")
def _var_mean(cx, n, x, dim=None, unbiased=None, keepdim=False, correction=None):
    v = _var(cx, n, x, dim, unbiased, keepdim, correction)
    m = op(cx, "reduce_mean", [x], axes=axes(cx, dim if not isinstance(dim, bool) else None, x.rank),
           keepdims=bool(keepdim))
    return (v, m)


@conv("cumsum", "cumprod")
def _cumsum(cx, n, x, dim, dtype=None):
    x = cast(cx, x, out_dtype(cx, n))
    return op(cx, str(n.target).split(".")[1], [x], axis=axis(cx, dim, x.rank))


def _anyall(name):
    # max/min over bool: over no elements they give False/True, as any/all do
    def f(cx, n, x, dim=None, keepdim=False):
        b = op(cx, "not_equal", [x, scalar(cx, 0, x.dtype)]) if x.dtype is not DType.bool else x
        return op(cx, name, [b], axes=axes(cx, dim, x.rank), keepdims=bool(keepdim))
    return f


conv("any")(_anyall("reduce_max"))
conv("all")(_anyall("reduce_min"))


@conv("linalg_vector_norm")
def _vector_norm(cx, n, x, ord=2, dim=None, keepdim=False, dtype=None):
    out = out_dtype(cx, n)
    # torch accumulates a 16-bit norm in float32 (its squares alone overflow float16 past 256)
    x = cast(cx, x, DType.float32 if out in (DType.bfloat16, DType.float16) else out)
    return cast(cx, _norm(cx, x, float(ord), axes(cx, dim, x.rank), bool(keepdim)), out)


def _norm(cx, x, ord: float, ax, keep: bool):
    a = op(cx, "abs", [x])
    if ord == float("inf"):
        return op(cx, "reduce_max", [a], axes=ax, keepdims=keep)
    if ord == float("-inf"):
        return op(cx, "reduce_min", [a], axes=ax, keepdims=keep)
    if ord == 0:
        nz = op(cx, "cast", [op(cx, "not_equal", [x, scalar(cx, 0, x.dtype)])], dtype=x.dtype)
        return op(cx, "reduce_sum", [nz], axes=ax, keepdims=keep)
    if ord == 1:
        return op(cx, "reduce_sum", [a], axes=ax, keepdims=keep)
    if ord == 2:
        return op(cx, "sqrt", [op(cx, "reduce_sum", [op(cx, "mul", [x, x])], axes=ax, keepdims=keep)])
    s = op(cx, "reduce_sum", [op(cx, "pow", [a, scalar(cx, ord, x.dtype)])], axes=ax, keepdims=keep)
    return op(cx, "pow", [s, scalar(cx, 1.0 / ord, x.dtype)])


@conv("topk")
def _topk(cx, n, x, k, dim=-1, largest=True, sorted=True):
    return op(cx, "topk", [x], k=k, axis=axis(cx, dim, x.rank), largest=bool(largest), sorted=bool(sorted))


@conv("sort")
def _sort(cx, n, x, dim=-1, descending=False, stable=None):
    """The whole axis's topk: NaN last ascending and first descending, as torch's; equal values in
    index order (torch's stable=True; stable=False allows any order of them)."""
    if x.rank == 0:
        return op(cx, "topk", [x], k=1, axis=-1, largest=bool(descending), sorted=True)
    a = axis(cx, dim, x.rank)
    return op(cx, "topk", [x], k=x.shape[a], axis=a, largest=bool(descending), sorted=True)
