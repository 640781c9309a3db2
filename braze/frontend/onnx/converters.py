"""ONNX op -> braze op converters: math, activations, logic, casts, reductions, normalization, linalg.

One function per ONNX op type, registered with the attributes it handles; an
attribute outside that list makes the import fail with UnsupportedOpError.
Shape, index and creation ops are in ``converters_shape``; conv and pools in
``converters_nn``.
"""

from __future__ import annotations

import numpy as np

from ...ir.types import DType
from . import fold, narrow
from .common import is_symbolic_array, onnx_dtype
from .convert import converter
from .converters_shape import einsum


# ---------------------------------------------------------------------------
# elementwise binary
# ---------------------------------------------------------------------------

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div",
           "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
           "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


def _fold_binary(ctx, op_type, dtype):
    ks = fold.knowns(ctx, (0, 1))
    if ks is None:
        return None
    return fold.binary(ctx, op_type, ks[0], ks[1], dtype)


@converter(*_BINARY)
def _binary(ctx):
    t = ctx.node.op_type
    r = _fold_binary(ctx, t, ctx.tv(0).dtype)
    if r is not None:
        return r
    return ctx.op(_BINARY[t], ctx.value(0), ctx.value(1))


_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@converter(*_BITWISE)
def _bitwise(ctx):
    return ctx.op(_BITWISE[ctx.node.op_type], ctx.value(0), ctx.value(1))


@converter("BitwiseNot")
def _bitwise_not(ctx):
    return ctx.op("bitwise_not", ctx.value(0))


@converter("BitShift", attrs=("direction",))
def _bitshift(ctx):
    d = ctx.attr("direction")
    if d not in ("LEFT", "RIGHT"):
        raise ctx.unsupported(f"direction={d!r}", hint="ONNX's BitShift shifts LEFT or RIGHT")
    return ctx.op("bitshift_left" if d == "LEFT" else "bitshift_right", ctx.value(0), ctx.value(1))


@converter("BitCast", attrs=("to",))
def _bitcast(ctx):
    to, x = onnx_dtype(ctx.attr("to"), ctx.where()), ctx.value(0)
    if {to, x.dtype} & {DType.float16, DType.bfloat16}:
        raise ctx.unsupported(f"{x.dtype.name} to {to.name}", hint="braze bit-casts no 16-bit float yet")
    return ctx.op("bitcast", x, dtype=to)


@converter("Pow")
def _pow(ctx):
    x, y = ctx.value(0), ctx.value(1)
    ks = fold.knowns(ctx, (1,))
    if ks is not None and ks[0].size == 1 and x.dtype.is_float:
        e = float(np.asarray(ks[0]).reshape(-1)[0])
        if e == 1.0:
            return ctx.op("mul", x, ctx.scalar(1, x.dtype))
        if e == 2.0:
            return ctx.op("mul", x, x)
        # not sqrt for 0.5: ONNX's Pow is IEEE pow (-inf -> inf, -0 -> +0); decompose makes it a sqrt that keeps those
    if y.dtype is not x.dtype and x.dtype.is_float:
        y = ctx.cast(y, x.dtype)
    out = ctx.op("pow", x, y)
    return ctx.cast(out, x.dtype)


@converter("Mod", attrs=("fmod",))
def _mod(ctx):
    fmod = ctx.attr("fmod", 0)
    dt = ctx.tv(0).dtype
    if not fmod:  # Python/NumPy remainder: the sign of the divisor
        r = _fold_binary(ctx, "Mod", dt)
        if r is not None:
            return r
        return ctx.op("remainder", ctx.value(0), ctx.value(1))
    return ctx.op("fmod", ctx.value(0), ctx.value(1))  # C fmod: the sign of the dividend


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx):
    t = ctx.node.op_type
    n = ctx.n_inputs()
    dt = ctx.tv(0).dtype
    if t in ("Max", "Min"):
        ks = fold.knowns(ctx)
        if ks is not None:
            acc = ks[0]
            for k in ks[1:]:
                acc = fold.binary(ctx, t, acc, k, dt)
                if acc is None:
                    break
                acc = acc.known
            if acc is not None:
                return fold.result(acc, dt)
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[t]
    acc = ctx.value(0)
    for i in range(1, n):
        acc = ctx.op(op, acc, ctx.value(i))
    if n == 1:
        acc = ctx.op("mul", acc, ctx.scalar(1, dt)) if t in ("Sum", "Mean") else acc
    if t == "Mean" and n > 1:
        acc = ctx.op("div", acc, ctx.scalar(n, dt))
    return acc


# ---------------------------------------------------------------------------
# elementwise unary and activations
# ---------------------------------------------------------------------------

_UNARY = {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu", "Sin": "sin", "Cos": "cos",
          "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Not": "logical_not",
          "HardSwish": "hardswish", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh",
          "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh"}


@converter(*_UNARY)
def _unary(ctx):
    t = ctx.node.op_type
    ks = fold.knowns(ctx, (0,))
    if ks is not None:
        r = fold.unary(ctx, t, ks[0], ctx.tv(0).dtype)
        if r is not None:
            return r
    y = ctx.op(_UNARY[t], ctx.value(0))
    if t == "Sign" and ctx.tv(0).dtype.is_float:  # ONNX: sign(NaN) is NaN (braze's sign, as torch's, gives 0)
        x = ctx.value(0)
        y = ctx.op("where", ctx.op("not_equal", x, x), x, y)
    return y


@converter("IsNaN")
def _isnan(ctx):
    x = ctx.value(0)
    return ctx.op("not_equal", x, x)


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _isinf(ctx):
    x = ctx.value(0)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    outs = []
    if pos:
        outs.append(ctx.op("equal", x, ctx.scalar(np.inf, x.dtype)))
    if neg:
        outs.append(ctx.op("equal", x, ctx.scalar(-np.inf, x.dtype)))
    if not outs:
        return ctx.op("full_like", x, value=0.0, dtype=DType.bool)
    return outs[0] if len(outs) == 1 else ctx.op("logical_or", *outs)


@converter("Identity", sequences=True)
def _identity(ctx):
    return ctx.tv(0)


@converter("Gelu", attrs=("approximate",))
def _gelu(ctx):
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.unsupported(f"approximate={approx!r}")
    return ctx.op("gelu", ctx.value(0), approximate=approx)


@converter("LeakyRelu", attrs=("alpha",))
def _leaky_relu(ctx):
    return ctx.op("leaky_relu", ctx.value(0), alpha=ctx.attr("alpha", 0.01))


@converter("Elu", attrs=("alpha",))
def _elu(ctx):
    return ctx.op("elu", ctx.value(0), alpha=ctx.attr("alpha", 1.0))


@converter("Softplus")
def _softplus(ctx):
    return ctx.op("softplus", ctx.value(0), beta=1.0, threshold=20.0)


@converter("HardSigmoid", attrs=("alpha", "beta"))
def _hardsigmoid(ctx):
    return ctx.op("hardsigmoid", ctx.value(0), alpha=ctx.attr("alpha", 0.2), beta=ctx.attr("beta", 0.5))


@converter("Selu", attrs=("alpha", "gamma"))
def _selu(ctx):
    x = ctx.value(0)
    alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr("gamma", 1.05070102214813232421875)
    return ctx.op("mul", ctx.op("elu", x, alpha=alpha), ctx.scalar(gamma, x.dtype))


@converter("Celu", attrs=("alpha",))
def _celu(ctx):
    x = ctx.value(0)
    a = ctx.attr("alpha", 1.0)
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) == elu(x / alpha) * alpha
    y = ctx.op("elu", ctx.op("div", x, ctx.scalar(a, x.dtype)), alpha=1.0)
    return ctx.op("mul", y, ctx.scalar(a, x.dtype))


@converter("Softsign")
def _softsign(ctx):
    x = ctx.value(0)
    return ctx.op("div", x, ctx.op("add", ctx.op("abs", x), ctx.scalar(1, x.dtype)))


@converter("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(ctx):
    x = ctx.value(0)
    keep = ctx.op("greater", x, ctx.scalar(ctx.attr("alpha", 1.0), x.dtype))
    return ctx.op("where", keep, x, ctx.scalar(0, x.dtype))


@converter("PRelu")
def _prelu(ctx):
    x, slope = ctx.value(0), ctx.value(1)
    neg = ctx.op("less", x, ctx.scalar(0, x.dtype))
    return ctx.op("where", neg, ctx.op("mul", x, slope), x)


@converter("Mish")
def _mish(ctx):
    x = ctx.value(0)
    return ctx.op("mul", x, ctx.op("tanh", ctx.op("softplus", x, beta=1.0, threshold=20.0)))


@converter("Swish", attrs=("alpha",))
def _swish(ctx):
    # a converter, not Swish's function body: that body is written at opset 24, and SwiGLU (opset 28) calls Swish
    x = ctx.value(0)
    alpha = ctx.attr("alpha", 1.0)
    ax = x if alpha == 1.0 else ctx.op("mul", x, ctx.scalar(alpha, x.dtype))
    return ctx.op("mul", x, ctx.op("sigmoid", ax))


@converter("Clip")
def _clip(ctx):
    x = ctx.value(0)
    lo_t, hi_t = ctx.tv(1), ctx.tv(2)
    bounds = []
    for t in (lo_t, hi_t):
        if t is None:
            bounds.append(None)
        elif t.known is not None and t.known.size == 1 and t.known.dtype != object:
            bounds.append(np.asarray(t.known).reshape(-1)[0].item())
        else:
            bounds.append(t)
    if all(b is None or not hasattr(b, "known") for b in bounds):
        lo, hi = bounds
        if lo is None and hi is None:
            return ctx.op("mul", x, ctx.scalar(1, x.dtype))
        if lo is not None and hi is not None and lo > hi:  # ONNX: all outputs are max
            return ctx.op("full_like", x, value=float(hi))
        return ctx.op("clamp", x, min=None if lo is None else float(lo), max=None if hi is None else float(hi))
    y = x
    if lo_t is not None:
        y = ctx.op("maximum", y, ctx.value(1))
    if hi_t is not None:
        y = ctx.op("minimum", y, ctx.value(2))
    return y


@converter("Where")
def _where(ctx):
    ks = fold.knowns(ctx, (0, 1, 2))
    if ks is not None:
        r = fold.where(ks[0], ks[1], ks[2], ctx.tv(1).dtype)
        if r is not None:
            return r
    return ctx.op("where", ctx.value(0), ctx.value(1), ctx.value(2))


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(ctx):
    return _cast_to(ctx, onnx_dtype(ctx.attr("to"), ctx.where()))


@converter("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(ctx):
    return _cast_to(ctx, ctx.tv(1).dtype)


_FLOAT8 = (DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2, DType.float8_e5m2fnuz)


def _cast_to(ctx, to: DType):
    """ONNX's Cast: to a float8 type, ``saturate`` (the default) first clips to the type's largest
    finite value, infinities included; float8_e8m0 is built from the float32 bits (narrow.to_e8m0)."""
    t = ctx.tv(0)
    if to is DType.float8_e8m0fnu and t.dtype is not to:
        return narrow.to_e8m0(ctx, ctx.value(0), bool(ctx.attr("saturate", 1)), ctx.attr("round_mode", "up"))
    bound = float(to.finfo.max) if to in _FLOAT8 and ctx.attr("saturate", 1) and t.dtype.is_float else None
    if t.known is not None and t.known.size <= 1 << 16:
        k = t.known if bound is None or is_symbolic_array(t.known) else np.clip(t.known, -bound, bound)
        r = fold.cast(k, to)
        if r is not None:
            return r
    v = ctx.value(0)
    if bound is not None:
        v = ctx.op("clamp", v, min=-bound, max=bound)
    return ctx.cast(v, to)


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------

_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod",
           "ReduceL1": None, "ReduceL2": None, "ReduceLogSum": None, "ReduceLogSumExp": None,
           "ReduceSumSquare": None}


def _reduce_axes(ctx):
    """(axes or None for all, or () for identity)."""
    t = ctx.node.op_type
    input_form = ctx.version >= (13 if t == "ReduceSum" else 18)
    if input_form:
        axes = ctx.known_ints(1, "axes") if ctx.tv(1) is not None else None
    else:
        axes = ctx.attr("axes")
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else None
    return tuple(int(a) for a in axes)


@converter(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(ctx):
    t = ctx.node.op_type
    axes = _reduce_axes(ctx)
    keep = bool(ctx.attr("keepdims", 1))
    k = ctx.known(0)
    if axes != () and k is not None and k.size <= fold.FOLD_LIMIT:  # shape arithmetic: keep it symbolic
        r = fold.reduce(t, k, axes, keep, ctx.tv(0).dtype)
        if r is not None:
            return r
    x = ctx.value(0)
    if axes == ():
        return ctx.op("mul", x, ctx.scalar(1, x.dtype)) if x.dtype is not DType.bool else ctx.tv(0)
    if x.rank == 0:
        axes = None
    red_axes = range(x.rank) if axes is None else [a % x.rank for a in axes]
    if t in ("ReduceMax", "ReduceMin", "ReduceLogSumExp") and any(isinstance(x.shape[a], int) and x.shape[a] == 0 for a in red_axes):
        # the reduction of an empty set is the op's identity (ONNX): -inf for max, +inf for min
        shape = tuple((1 if keep else None) if i in red_axes else d for i, d in enumerate(x.shape))
        shape = tuple(d for d in shape if d is not None)
        ident = {DType.bool: t == "ReduceMin"}.get(x.dtype, float("inf") if t == "ReduceMin" else float("-inf"))
        if not x.dtype.is_float and x.dtype is not DType.bool:
            info = np.iinfo(x.dtype.numpy)
            ident = info.min if t == "ReduceMax" else info.max
        return ctx.op("full", shape=shape, value=float(ident), dtype=x.dtype)

    def red(op, v):
        return ctx.op(op, v, axes=axes, keepdims=keep)

    if _REDUCE[t]:
        return red(_REDUCE[t], x)
    if t == "ReduceL1":
        return red("reduce_sum", ctx.op("abs", x))
    if t == "ReduceSumSquare":
        return red("reduce_sum", ctx.op("mul", x, x))
    if t == "ReduceL2":
        y = red("reduce_sum", ctx.op("mul", x, x))
        return ctx.op("sqrt", y) if x.dtype.is_float else y  # ints: ONNX truncates; rare
    if t == "ReduceLogSum":
        return ctx.op("log", red("reduce_sum", x))
    # ReduceLogSumExp, stable: m + log(sum(exp(x - m)))
    m = ctx.op("reduce_max", x, axes=axes, keepdims=True)
    m = ctx.op("where", ctx.op("equal", ctx.op("abs", m), ctx.scalar(np.inf, x.dtype)), ctx.scalar(0, x.dtype), m)
    s = ctx.op("log", ctx.op("reduce_sum", ctx.op("exp", ctx.op("sub", x, m)), axes=axes, keepdims=True))
    y = ctx.op("add", s, m)
    if not keep:
        y = ctx.op("squeeze", y, axes=tuple(range(x.rank)) if axes is None else axes)
    return y


@converter("TopK", attrs=("axis", "largest", "sorted"))
def _topk(ctx):
    k = ctx.known_ints(1, "K", run_time=(0, None))
    if len(k) != 1:
        raise ctx.unsupported(f"K must hold one value, got {len(k)}")
    v, i = ctx.op("topk", ctx.value(0), k=k[0], axis=ctx.attr("axis", -1), largest=bool(ctx.attr("largest", 1)),
                  sorted=bool(ctx.attr("sorted", 1)))
    return [v, i]


@converter("CumSum", "CumProd", attrs=("exclusive", "reverse"))
def _cumsum(ctx):
    axis = ctx.known_ints(1, "axis")
    x = ctx.value(0)
    y = ctx.op("cumsum" if ctx.node.op_type == "CumSum" else "cumprod", x, axis=int(axis[0]),
               exclusive=bool(ctx.attr("exclusive", 0)),
               reverse=bool(ctx.attr("reverse", 0)))
    return ctx.cast(y, x.dtype)


# ---------------------------------------------------------------------------
# softmax and normalization
# ---------------------------------------------------------------------------


@converter("Softmax", "LogSoftmax", attrs=("axis",))
def _softmax(ctx):
    op = "softmax" if ctx.node.op_type == "Softmax" else "log_softmax"
    return ctx.op(op, ctx.value(0), axis=ctx.attr("axis", -1))


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(ctx):
    x, w, bias = ctx.value(0), ctx.value(1), ctx.value(2)
    axis = ctx.attr("axis", -1)
    eps = ctx.attr("epsilon", 1e-5)
    ax = axis % x.rank
    norm_shape = x.shape[ax:]
    fits = [v is None or (v.rank == len(norm_shape) and all(ctx.imp.module.constraints.equal(a, b) is True
                                                            for a, b in zip(v.shape, norm_shape))) for v in (w, bias)]
    if all(fits):
        y = ctx.op("layer_norm", x, w, bias, axis=ax, eps=eps)
    else:  # broadcastable scale/bias: normalize, then scale and shift
        y = ctx.op("layer_norm", x, None, None, axis=ax, eps=eps)
        y = ctx.op("mul", y, w)
        if bias is not None:
            y = ctx.op("add", y, bias)
    outs = [y]
    if any(ctx.node.output[1:]):
        stash = onnx_dtype(ctx.attr("stash_type", 1), ctx.where())
        xs = ctx.cast(x, stash)
        axes = tuple(range(ax, x.rank))
        mean = ctx.op("reduce_mean", xs, axes=axes, keepdims=True)
        var = ctx.op("var", xs, axes=axes, keepdims=True, correction=0)
        inv = ctx.op("rsqrt", ctx.op("add", var, ctx.scalar(eps, stash)))
        outs += [mean, inv]
    return outs


@converter("BatchNormalization", attrs=("epsilon", "momentum", "training_mode"))
def _batch_norm(ctx):
    x = ctx.value(0)
    ps = [ctx.cast(ctx.value(i), x.dtype) for i in range(1, 5)]
    eps = ctx.attr("epsilon", 1e-5)
    if not ctx.attr("training_mode", 0):
        if len([o for o in ctx.node.output if o]) > 1:
            raise ctx.unsupported("running mean/var outputs (training only)")
        return ctx.op("batch_norm", x, *ps, eps=eps)
    # the batch's statistics normalize; the running ones move toward them by 1 - momentum (ONNX's rule)
    axes = (0,) + tuple(range(2, x.rank))
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=False)
    var = ctx.op("var", x, axes=axes, keepdims=False, correction=0)
    m = float(ctx.attr("momentum", 0.9))
    keep, take = ctx.scalar(m, x.dtype), ctx.scalar(1.0 - m, x.dtype)
    return [ctx.op("batch_norm", x, ps[0], ps[1], mean, var, eps=eps),
            ctx.op("add", ctx.op("mul", ps[2], keep), ctx.op("mul", mean, take)),
            ctx.op("add", ctx.op("mul", ps[3], keep), ctx.op("mul", var, take))]


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(ctx):
    x, scale, bias = ctx.value(0), ctx.value(1), ctx.value(2)
    axes = tuple(range(2, x.rank))
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=True)
    var = ctx.op("var", x, axes=axes, keepdims=True, correction=0)
    y = ctx.op("mul", ctx.op("sub", x, mean), ctx.op("rsqrt", ctx.op("add", var, ctx.scalar(ctx.attr("epsilon", 1e-5),
                                                                                          x.dtype))))
    c = x.shape[1]
    shp = (1, c) + (1,) * (x.rank - 2)
    return ctx.op("add", ctx.op("mul", y, ctx.op("reshape", scale, shape=shp)), ctx.op("reshape", bias, shape=shp))


# ---------------------------------------------------------------------------
# linear algebra
# ---------------------------------------------------------------------------


@converter("MatMul")
def _matmul(ctx):
    return ctx.op("matmul", ctx.value(0), ctx.value(1))


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def _gemm(ctx):
    a, b, c = ctx.value(0), ctx.value(1), ctx.value(2)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    ta, tb = ctx.attr("transA", 0), ctx.attr("transB", 0)
    if ta:
        a = ctx.op("permute", a, perm=(1, 0))
    if tb and alpha == 1.0 and beta == 1.0 and (c is None or c.rank == 1) and a.dtype.is_float:
        return ctx.op("linear", a, b, c)  # x @ W.T + bias, the common Linear form
    if tb:
        b = ctx.op("permute", b, perm=(1, 0))
    y = ctx.op("matmul", a, b)
    if alpha != 1.0:
        y = ctx.op("mul", y, ctx.scalar(alpha, y.dtype))
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ctx.op("mul", c, ctx.scalar(beta, c.dtype))
        y = ctx.op("add", y, c)
    return y


@converter("Einsum", attrs=("equation",))
def _einsum(ctx):
    return einsum(ctx, ctx.attr("equation"))
