"""One proposer per op (or op family): operands and attributes for a candidate node.

A proposer calls ``gen.emit(op, inputs, attrs)``, which checks the candidate with
the op's shape inference and raises ``Reject`` when it does not fit; run-time
rules that inference cannot see (a window larger than the input, a reduction
of an empty axis with no identity, an index range) are checked here at the
generator's run shapes, and also raise ``Reject``. Operands are values of the
graph so far or ``New`` parameters/constants.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import sym as S
from ..ir.types import TensorType
from ..ops import all_ops
from ..ops.elementwise import DIVIDING_OPS
from .common import ACTIVATIONS, BF16, BOOL, F16, F32, F64, I32, I64, STATIC_DIMS, GVal, New, Reject
from .operands import (bcast_ok, bcast_to_ok, check_int_bound, dtype_of, numeric, partner, props, random_axes,
                       reduced_count, shape_of)
from .proposers_shape import (
    p_reshape, p_permute, p_expand, p_concat, p_split, p_slice, p_squeeze,
    p_unsqueeze, p_flatten, p_pad, p_tile, p_gather, p_index_add, p_tri,
    p_resize, p_topk,
)


# ---------------------------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------------------------

FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "sigmoid", "silu", "sin", "cos",
               "hardswish", "gelu", "leaky_relu", "elu", "softplus", "hardsigmoid", "tan", "asin", "acos", "atan",
               "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "erfc")


def p_float_unary(gen, op):
    x = gen.fval()
    attrs = {}
    r = gen.rng
    if op == "gelu":
        attrs["approximate"] = gen.choice(["none", "tanh"])
    elif op == "leaky_relu" and r.random() < 0.5:
        attrs["alpha"] = float(gen.choice([0.01, 0.2, 1.5]))
    elif op == "elu" and r.random() < 0.5:
        attrs["alpha"] = float(gen.choice([0.5, 1.0, 2.0]))
    elif op == "softplus" and r.random() < 0.5:
        attrs.update(beta=float(gen.choice([0.5, 1.0, 2.0])), threshold=float(gen.choice([5.0, 20.0])))
    elif op == "hardsigmoid" and r.random() < 0.5:
        attrs.update(alpha=0.2, beta=0.5)
    gen.emit(op, [x], attrs, exact=False)


def p_numeric_unary(gen, op):
    """neg abs relu (continuous); sign floor ceil round trunc clamp (exact operands for floats)."""
    disc = op in ("sign", "floor", "ceil", "round", "trunc")
    x = gen.pick(lambda g: numeric(g) and (g.exact or not disc),
                 fresh_type=TensorType(gen.choice([F32, F32, I64, I32]), gen.shape()))
    attrs = {}
    if op == "clamp":
        lo = None if gen.rng.random() < 0.3 else float(gen.choice([-1.5, -1.0, 0.0, 0.5]))
        hi = None if (gen.rng.random() < 0.3 and lo is not None) else float(gen.choice([-0.5, 1.0, 2.5]))
        attrs = {"min": lo, "max": hi}
    gen.emit(op, [x], attrs)


def p_binary(gen, op):
    r = gen.rng
    if op == "pow":
        a = gen.fval()
        b = partner(gen, a, exact=True) if r.random() < 0.5 else \
            gen.new(TensorType(dtype_of(a), ()), const=True, high=None)
        if isinstance(b, New) and b.const and b.type.rank == 0:
            b.data = np.asarray(gen.choice([2.0, 3.0, 0.5, -1.0, 1.5]), dtype=np.float32)
        if r.random() < 0.5:  # a positive base keeps pow continuous
            a = gen.like(shape_of(b), F32, low=0.0) if isinstance(a, New) else a
        gen.emit(op, [a, b], {}, exact=False)
        return
    disc = op in ("remainder", "fmod")  # discontinuous in the divisor
    allow_bool = op in ("add", "mul", "maximum", "minimum")
    dt = gen.choice([F32, F32, F32, I64, I32] + ([BOOL] if allow_bool else []))
    a = gen.pick(lambda g: (g.dtype is BOOL) == (dt is BOOL) and g.dtype.is_float == dt.is_float
                 and (g.exact or not disc), fresh_type=TensorType(dt, gen.shape()))
    if op in DIVIDING_OPS and not dt.is_float and not dtype_of(a).is_float:
        # an integer divisor 0 is an error (the reference raises, as torch): a fresh divisor of one sign
        lo, hi = (1, 6) if r.random() < 0.6 else (-5, 0)
        b = gen.like(shape_of(a), dtype_of(a), const=None if r.random() < 0.5 else True, low=lo, high=hi)
    else:
        b = partner(gen, a, exact=disc, const=None if r.random() < 0.5 else True)
        if r.random() < 0.4:
            a, b = b, a
    fl = dtype_of(a).is_float or dtype_of(b).is_float
    ea, _, ia = props(gen, a)
    eb, _, ib = props(gen, b)
    bound = {"add": ia + ib, "sub": ia + ib, "mul": ia * ib, "div": ia, "remainder": ib, "fmod": ia,
             "maximum": max(ia, ib), "minimum": max(ia, ib)}[op]
    if not fl:
        check_int_bound(bound)
    exact = ea and eb and (not fl or op in ("maximum", "minimum", "remainder", "fmod"))
    gen.emit(op, [a, b], {}, exact=exact, ibound=bound)


def p_compare(gen, op):
    dt = gen.choice([F32, F32, I64, BOOL])
    a = gen.pick(lambda g: g.exact and (g.dtype is BOOL) == (dt is BOOL), fresh_type=TensorType(dt, gen.shape()))
    b = partner(gen, a, exact=True, allow_bool=True)
    gen.emit(op, [a, b], {}, exact=True, ibound=1.0)


def p_logical(gen, op):
    a = gen.pick(lambda g: g.exact, fresh_type=TensorType(BOOL, gen.shape()))
    if op == "logical_not":
        gen.emit(op, [a], {}, exact=True, ibound=1.0)
        return
    b = partner(gen, a, exact=True, allow_bool=True)
    gen.emit(op, [a, b], {}, exact=True, ibound=1.0)


def p_bitwise(gen, op):
    """Integer (or bool) operands; the result's bound from the operands' (two's complement: a k-bit
    pattern and/or/xor a k-bit pattern stays within k bits); shifts by a constant, left by at most 3."""
    dt = gen.choice([I64, I32, I32] + ([BOOL] if not op.startswith("bitshift") else []))
    a = gen.pick(lambda g: g.exact and g.dtype is dt, fresh_type=TensorType(dt, gen.shape()))
    _, _, ia = props(gen, a)
    if op == "bitwise_not":
        gen.emit(op, [a], {}, exact=True, ibound=ia + 1)
        return
    if op.startswith("bitshift"):
        k = int(gen.rng.integers(-1, 4 if op == "bitshift_left" else 40))
        b = gen.new(TensorType(dt, ()), const=True, high=None)
        b.data = np.asarray(k, dtype=dt.numpy)
        check_int_bound(ia * 8)
        gen.emit(op, [a, b], {}, exact=True, ibound=ia * 8 if op == "bitshift_left" else ia)
        return
    b = partner(gen, a, exact=True, allow_bool=dt is BOOL)
    if dtype_of(b) is not dt:
        raise Reject("bitwise operands of one dtype")
    _, _, ib = props(gen, b)
    gen.emit(op, [a, b], {}, exact=True, ibound=2 * max(ia, ib) + 1)


def p_bitcast(gen, op):
    # fresh int32 in [2^29, 2^30) -> float32: their bits are normal floats in [2^-63, 2) (negative ints would be
    # NaNs, small ones denormals); a float's bits as an int would pass the integer bound
    a = gen.new(TensorType(I32, gen.shape()), low=2 ** 29, high=2 ** 30 - 1)
    gen.emit(op, [a], {"dtype": F32}, exact=True, ibound=2.0)


def p_where(gen, op):
    c = gen.pick(lambda g: g.exact and g.dtype is BOOL, fresh_type=TensorType(BOOL, gen.shape()))
    a = gen.pick(lambda g: numeric(g) and bcast_ok(gen, c.type.shape if isinstance(c, New) else c.shape, g.shape))
    b = partner(gen, a)
    if gen.rng.random() < 0.5:
        a, b = b, a
    _, _, ia = props(gen, a)
    _, _, ib = props(gen, b)
    gen.emit(op, [c, a, b], {}, ibound=max(ia, ib))


def p_cast(gen, op):
    x = gen.pick(lambda g: True)
    src = dtype_of(x)
    ex, sp, ib = props(gen, x)
    dst = gen.choice([F32, F64, I64, I32, BOOL, BF16, F16])
    if dst == src:
        raise Reject("same dtype")
    if dst in (BF16, F16) and src not in (F32, BF16, F16):
        # braze (and torch) convert through float32, rounding twice; numpy's float16 rounds once
        raise Reject("16-bit casts from float32 only")
    if src.is_float and not dst.is_float and (not ex or sp):
        raise Reject("float to int needs an exact, finite operand")
    exact = ex and not (src.is_int and dst is F32 and ib >= 2 ** 24)
    gen.emit(op, [x], {"dtype": dst}, exact=exact, ibound=1.0 if dst is BOOL else ib)


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------


def p_reduce(gen, op):
    float_only = op in ("reduce_mean", "var")
    disc = op in ("argmax", "argmin")
    x = gen.pick(lambda g: (g.dtype.is_float or not float_only) and (g.exact or not disc)
                 and (g.dtype is not BOOL or op in ("reduce_max", "reduce_min", "reduce_sum"))
                 and g.t.rank >= (1 if disc else 0))
    shape = shape_of(x)
    ex, sp, ib = props(gen, x)
    attrs = {"keepdims": bool(gen.rng.random() < 0.4)}
    if op in ("argmax", "argmin"):
        if len(shape) == 0:
            raise Reject("rank 0")
        attrs["axis"] = int(gen.rng.integers(-len(shape), len(shape)))
        axes = (attrs["axis"],)
    else:
        axes = attrs["axes"] = random_axes(gen, len(shape))
        if op == "var":
            attrs["correction"] = int(gen.choice([0, 1, 1, 2]))
    counts = reduced_count(gen, shape, axes)
    if op in ("reduce_max", "reduce_min", "argmax", "argmin") and min(counts) == 0:
        raise Reject("empty reduction without identity")
    exact = ex if op in ("reduce_max", "reduce_min", "argmax", "argmin") else not dtype_of(x).is_float and ex
    bound = ib
    if not dtype_of(x).is_float:
        if op == "reduce_sum":
            bound = ib * max(counts)
        elif op == "reduce_prod":
            # past 64 factors it is over anyway; a float power past 1e308 raises, not inf (seed 50923)
            bound = 1.0 if ib <= 1 else math.inf if math.log(ib) * min(max(counts), 64) > 700 else \
                ib ** min(max(counts), 64)
        elif op in ("argmax", "argmin"):
            bound = float(max(counts))
        check_int_bound(bound)
    gen.emit(op, [x], attrs, exact=exact, ibound=bound)


def p_cumprod(gen, op):
    """Floats near 1 (a product of many large ones overflows, of small ones underflows to 0)."""
    x = gen.new(TensorType(F32, gen.shape(int(gen.rng.integers(1, 4)))), low=-1.5, high=1.5)
    axis = int(gen.rng.integers(-x.type.rank, x.type.rank))
    gen.emit(op, [x], {"axis": axis, "exclusive": bool(gen.rng.random() < 0.3),
                       "reverse": bool(gen.rng.random() < 0.3)}, exact=False)


def p_cumsum(gen, op):
    x = gen.pick(lambda g: g.t.rank >= 1, fresh_type=TensorType(F32, gen.shape(int(gen.rng.integers(1, 4)))))
    shape = shape_of(x)
    if not shape:
        raise Reject("rank 0")
    axis = int(gen.rng.integers(-len(shape), len(shape)))
    ex, _, ib = props(gen, x)
    fl = dtype_of(x).is_float
    bound = ib * max(gen.evals(shape[axis]))
    if not fl:
        check_int_bound(bound)
    gen.emit(op, [x], {"axis": axis, "exclusive": bool(gen.rng.random() < 0.3),
                       "reverse": bool(gen.rng.random() < 0.3)}, exact=ex and not fl, ibound=bound)


# ---------------------------------------------------------------------------------------------
# normalization
# ---------------------------------------------------------------------------------------------


def param_like(gen, shape, low=None):
    """A per-feature parameter: a constant when the shape is static, else a parameter."""
    t = TensorType(F32, tuple(shape))
    return gen.new(t, const=t.is_static() and gen.rng.random() < 0.8, low=low)


def p_norm(gen, op):
    x = gen.fval(lambda g: g.t.rank >= 1, fresh_type=TensorType(F32, gen.shape(int(gen.rng.integers(1, 4)))))
    shape = shape_of(x)
    r = len(shape)
    if r == 0:
        raise Reject("rank 0")
    if op in ("softmax", "log_softmax"):
        gen.emit(op, [x], {"axis": int(gen.rng.integers(-r, r))}, exact=False)
        return
    if op == "batch_norm":
        if r < 2:
            raise Reject("rank < 2")
        c = (shape[1],)
        ins = [x, param_like(gen, c), param_like(gen, c), param_like(gen, c), param_like(gen, c, low=0.0)]
        gen.emit(op, ins, {"eps": float(gen.choice([1e-5, 1e-3]))}, exact=False)
        return
    axis = int(gen.rng.integers(-r, 0))
    norm = shape[axis % r:]
    ins = [x]
    if gen.rng.random() < 0.6:
        ins.append(param_like(gen, norm))
        if op == "layer_norm" and gen.rng.random() < 0.6:
            ins.append(param_like(gen, norm))
    gen.emit(op, ins, {"axis": axis, "eps": float(gen.choice([1e-5, 1e-6, 1e-2]))}, exact=False)


def p_group_norm(gen, op):
    """Channels on axis 1; groups divide them. A symbolic channel count takes groups=1 (a run
    shape it does not divide would be an input error)."""
    x = gen.fval(lambda g: g.t.rank >= 2,
                 fresh_type=TensorType(F32, (gen.dim(), int(gen.choice([1, 2, 4, 6, 8])))
                                       + tuple(gen.dim() for _ in range(int(gen.choice([0, 1, 2]))))))
    shape = shape_of(x)
    if len(shape) < 2:
        raise Reject("rank < 2")
    c = shape[1]
    groups = int(gen.choice([g for g in range(1, c + 1) if c % g == 0])) if isinstance(c, int) and c > 0 else 1
    ins = [x]
    if gen.rng.random() < 0.6:
        ins.append(param_like(gen, (c,)))
        if gen.rng.random() < 0.6:
            ins.append(param_like(gen, (c,)))
    gen.emit(op, ins, {"groups": groups, "eps": float(gen.choice([1e-5, 1e-3]))}, exact=False)


# ---------------------------------------------------------------------------------------------
# gemm and conv, with the epilogues the vendor path fuses
# ---------------------------------------------------------------------------------------------


def f32_value(gen, min_rank, pred=lambda g: True):
    rank = int(gen.rng.integers(min_rank, min_rank + 2))
    return gen.pick(lambda g: g.dtype is F32 and g.t.rank >= min_rank and pred(g),
                    fresh_type=TensorType(F32, gen.shape(rank)))


def epilogue(gen, y: GVal, bias_shape):
    """Some of: bias add, an activation, a residual add; in the order the library fuses them,
    sometimes shuffled (then part of it becomes a generated kernel)."""
    steps = [s for s in ("bias", "act", "residual") if gen.rng.random() < 0.5]
    if gen.rng.random() < 0.2:
        gen.rng.shuffle(steps)
    for s in steps:
        if s == "bias":
            b = gen.new(TensorType(F32, bias_shape), const=True)
            (y,) = gen.emit("add", [y, b] if gen.rng.random() < 0.7 else [b, y], {}, exact=False)
        elif s == "act":
            act = gen.choice(list(ACTIVATIONS))
            attrs = {"approximate": gen.choice(["none", "tanh"])} if act == "gelu" else {}
            (y,) = gen.emit(act, [y], attrs, exact=False)
        else:
            other = gen.pick(lambda g: g.dtype is F32 and g is not y and g.t.rank == y.t.rank
                             and all(gen.module.constraints.equal(p, q) is True for p, q in zip(g.shape, y.shape)),
                             fresh_type=y.t)
            (y,) = gen.emit("add", [y, other] if gen.rng.random() < 0.7 else [other, y], {}, exact=False)
    return y


def static_last(g) -> bool:
    return g.t.rank >= 1 and isinstance(g.shape[-1], int)


def p_linear(gen, op):
    x = f32_value(gen, 1, static_last)
    shape = shape_of(x)
    if not shape or not isinstance(shape[-1], int):
        raise Reject("contracted dim is symbolic")
    k = shape[-1]
    n = int(gen.choice(STATIC_DIMS[1:] + (16, 32)))
    const = gen.rng.random() < 0.8  # a weight that is an input: the library's plain GEMM
    w = gen.new(TensorType(F32, (n, k)), const=const, high=1.0 / max(1.0, np.sqrt(k)))
    ins = [x, w]
    if gen.rng.random() < 0.4:
        ins.append(gen.new(TensorType(F32, (n,)), const=True))
    (y,) = gen.emit("linear", ins, {}, exact=False)
    if gen.rng.random() < 0.6:
        epilogue(gen, y, (n,))


def p_matmul(gen, op):
    mode = gen.choice(["const", "act", "act", "bcast"])
    a = f32_value(gen, 2)
    sa = shape_of(a)
    if len(sa) < 2:
        raise Reject("rank < 2")
    k = sa[-1]
    n = gen.dim()
    if mode == "const":
        if not isinstance(k, int):
            raise Reject("contracted dim is symbolic")
        b = gen.new(TensorType(F32, (k, int(gen.choice(STATIC_DIMS)))), const=True)
    elif mode == "act":
        b = gen.new(TensorType(F32, tuple(sa[:-2]) + (k, n)))
    else:
        batch = tuple(1 if gen.rng.random() < 0.5 else d for d in sa[:-2])
        if gen.rng.random() < 0.3:
            batch = (gen.dim(),) + batch
        b = gen.new(TensorType(F32, batch + (k, n)), const=False)
    if gen.rng.random() < 0.3:
        a, b = b, a  # the new operand on the left
        sb = shape_of(a)
        a = gen.new(TensorType(F32, tuple(sb[:-2]) + (gen.dim(), sb[-2])))
    if gen.rng.random() < 0.2:  # a vector on one side
        if gen.rng.random() < 0.5:
            b = gen.new(TensorType(F32, (shape_of(a)[-1],)))
        else:
            a = gen.new(TensorType(F32, (shape_of(b)[-2],)))
    (y,) = gen.emit("matmul", [a, b], {}, exact=False)
    if gen.rng.random() < 0.5:
        epilogue(gen, y, (y.shape[-1],))


def spatial_ok(gen, d, span) -> bool:
    return gen.min_val(d) >= span


def _conv_operands(gen):
    """(x, w, attrs) of a random convolution that fits its input."""
    r = gen.rng
    c = int(gen.choice([1, 2, 3, 4, 8]))
    g = int(gen.choice([1, 1, 1, c])) if c > 1 else 1
    if g > 1 and c % 2 == 0 and r.random() < 0.3:
        g = 2
    o = g * int(gen.choice([1, 2, 3]))
    kh, kw = int(gen.choice([1, 2, 3])), int(gen.choice([1, 3]))
    stride = (int(gen.choice([1, 1, 2])), int(gen.choice([1, 2])))
    dil = (int(gen.choice([1, 1, 2])), 1)
    pad = tuple(int(gen.choice([0, 0, 1, 2])) for _ in range(4))
    x = gen.pick(lambda v: v.dtype is F32 and v.t.rank == 4 and v.shape[1] == c,
                 fresh_type=TensorType(F32, (gen.dim(), c, gen.dim(), gen.dim())))
    sx = shape_of(x)
    if min(gen.min_val(sx[2]), gen.min_val(sx[3])) < 1:
        raise Reject("zero height or width")  # torch refuses it; the native conv says so too
    for d, k, dl, p0, p1 in ((sx[2], kh, dil[0], pad[0], pad[2]), (sx[3], kw, dil[1], pad[1], pad[3])):
        if gen.min_val(S.add(d, p0 + p1)) < dl * (k - 1) + 1:
            raise Reject("window larger than the padded input")
    w = gen.new(TensorType(F32, (o, c // g, kh, kw)), const=True, high=1.0 / np.sqrt(c // g * kh * kw))
    return x, w, {"stride": stride, "padding": pad, "dilation": dil, "groups": g}


def p_conv(gen, op):
    r = gen.rng
    x, w, attrs = _conv_operands(gen)
    o = w.type.shape[0]
    ins = [x, w]
    if r.random() < 0.4:
        ins.append(gen.new(TensorType(F32, (o,)), const=True))
    (y,) = gen.emit("conv2d", ins, attrs, exact=False)
    if r.random() < 0.2:
        cc = (o,)
        (y,) = gen.emit("batch_norm", [y, param_like(gen, cc), param_like(gen, cc), param_like(gen, cc),
                                       param_like(gen, cc, low=0.0)], {}, exact=False)
    if r.random() < 0.6:
        epilogue(gen, y, (o, 1, 1))


def p_conv_grad(gen, op):
    """A convolution, then its input's or weight's gradient with the convolution's output as the gradient."""
    x, w, attrs = _conv_operands(gen)
    x, w = gen.materialize(x), gen.materialize(w)  # one input and one weight for both nodes
    (y,) = gen.emit("conv2d", [x, w], attrs, exact=False)
    gen.emit(op, [y, x, w], attrs, exact=False)


def p_conv_transpose(gen, op):
    """A transposed convolution with padding that never empties the output (no range narrowed)."""
    c = int(gen.choice([1, 2, 4]))
    g = int(gen.choice([1, 1, c]))
    kh, kw = int(gen.choice([1, 2, 3])), int(gen.choice([1, 3]))
    stride = (int(gen.choice([1, 2])), int(gen.choice([1, 2])))
    dil = (int(gen.choice([1, 2])), 1)
    opad = tuple(int(gen.rng.integers(0, s)) for s in stride)
    ph, pw = (int(gen.rng.integers(0, (d * (k - 1) + 1) // 2 + 1)) for d, k in zip(dil, (kh, kw)))
    x = gen.pick(lambda v: v.dtype is F32 and v.t.rank == 4 and v.shape[1] == c,
                 fresh_type=TensorType(F32, (gen.dim(), c, gen.dim(), gen.dim())))
    w = gen.new(TensorType(F32, (c, int(gen.choice([1, 2, 3])), kh, kw)), const=True, high=1.0 / np.sqrt(c * kh * kw))
    gen.emit(op, [x, w], {"stride": stride, "padding": (ph, pw, ph, pw), "output_padding": opad, "dilation": dil,
                          "groups": g}, exact=False)


def p_grid_sample(gen, op):
    """A float32 image and a fresh grid of points in [-1.25, 1.25] (exact: the taps must not move)."""
    x = gen.pick(lambda v: v.dtype is F32 and v.t.rank == 4, fresh_type=TensorType(F32, (gen.dim(), 2, gen.dim(),
                                                                                        gen.dim())))
    grid = gen.new(TensorType(F32, (shape_of(x)[0], gen.dim(), gen.dim(), 2)), low=-1.25, high=1.25)
    gen.emit(op, [x, grid], {"mode": gen.choice(["bilinear", "nearest", "bicubic"]),
                             "padding_mode": gen.choice(["zeros", "border", "reflection"]),
                             "align_corners": bool(gen.rng.random() < 0.5)}, exact=False)


def p_direct_conv(gen, op):
    """``direct_conv2d`` built directly: an NHWC input, an HWIO weight with at most 4 channels per
    group (decompose's rule writes it from such a conv2d, which p_conv builds too)."""
    r = gen.rng
    cg = int(gen.choice([1, 1, 2, 3, 4]))
    g = int(gen.choice([1, 2, 4])) if cg < 4 else 1
    o = g * int(gen.choice([1, 2, 3]))
    kh, kw = int(gen.choice([1, 2, 3])), int(gen.choice([1, 3, 5]))
    stride, dil = (int(gen.choice([1, 1, 2])), int(gen.choice([1, 2]))), (int(gen.choice([1, 1, 2])), 1)
    pad = tuple(int(gen.choice([0, 0, 1, 2])) for _ in range(4))
    c = cg * g
    x = gen.pick(lambda v: v.dtype is F32 and v.t.rank == 4 and v.shape[3] == c,
                 fresh_type=TensorType(F32, (gen.dim(), gen.dim(), gen.dim(), c)))
    sx = shape_of(x)
    if min(gen.min_val(sx[1]), gen.min_val(sx[2])) < 1:
        raise Reject("zero height or width")
    for d, k, dl, p0, p1 in ((sx[1], kh, dil[0], pad[0], pad[2]), (sx[2], kw, dil[1], pad[1], pad[3])):
        if gen.min_val(S.add(d, p0 + p1)) < dl * (k - 1) + 1:
            raise Reject("window larger than the padded input")
    ins = [x, gen.new(TensorType(F32, (kh, kw, cg, o)), const=True, high=1.0 / np.sqrt(cg * kh * kw))]
    if r.random() < 0.4:
        ins.append(gen.new(TensorType(F32, (o,)), const=True))
    (y,) = gen.emit("direct_conv2d", ins, {"stride": stride, "padding": pad, "dilation": dil, "groups": g},
                    exact=False)
    if r.random() < 0.6:
        epilogue(gen, y, (o,))


# ---------------------------------------------------------------------------------------------
# pools
# ---------------------------------------------------------------------------------------------


def p_pool(gen, op):
    r = gen.rng
    x = gen.fval(lambda g: g.t.rank in (3, 4),
                 fresh_type=TensorType(F32, (gen.dim(), int(gen.choice([1, 2, 3])), gen.dim(), gen.dim())))
    sx = shape_of(x)
    if op == "adaptive_avg_pool2d":
        if min(gen.min_val(sx[-2]), gen.min_val(sx[-1])) < 1:
            raise Reject("empty input")
        gen.emit(op, [x], {"output_size": (int(r.integers(1, 5)), int(r.integers(1, 5)))}, exact=False)
        return
    k = (int(gen.choice([1, 2, 3])), int(gen.choice([1, 2, 3])))
    stride = None if r.random() < 0.4 else (int(gen.choice([1, 2])), int(gen.choice([1, 2, 3])))
    pad = tuple(int(r.integers(0, k[i % 2] // 2 + 1)) for i in range(4))
    attrs = {"kernel": k, "stride": stride, "padding": pad, "ceil_mode": bool(r.random() < 0.3)}
    dil = (1, 1)
    if r.random() < 0.2:
        dil = (2, 1)
        attrs["dilation"] = dil
    if op == "avg_pool2d":
        attrs["count_include_pad"] = bool(r.random() < 0.5)
    for i, d in enumerate(sx[-2:]):
        if gen.min_val(S.add(d, pad[i] + pad[i + 2])) < dil[i] * (k[i] - 1) + 1:
            raise Reject("window larger than the padded input")
    if op == "max_pool2d":
        gen.emit(op, [x], attrs)
    elif op == "avg_pool2d":
        gen.emit(op, [x], attrs, exact=False)
    else:  # a training step's max pool: the indices it saves, and the gradient from them
        (i,) = gen.emit("max_pool2d_indices", [x], attrs, ibound=1e6)  # a position in the plane
        if op == "max_pool2d_backward":
            g = gen.new(TensorType(dtype_of(x), shape_of(i)))
            gen.emit(op, [g, x, i], attrs, exact=False)


# ---------------------------------------------------------------------------------------------
# creation and attention
# ---------------------------------------------------------------------------------------------


def p_arange(gen, op):
    start = int(gen.choice([0, 0, 1, 3]))
    end = gen.choice([gen.dim(), S.add(gen.dim(), 2), 5])
    step = int(gen.choice([1, 1, 2]))
    dt = gen.choice([F32, I64, I32])
    gen.emit(op, [], {"start": start, "end": end, "step": step, "dtype": dt}, exact=True,
             ibound=float(max(gen.evals(S.as_intlike(end))) + 3))


def p_full(gen, op):
    dt = gen.choice([F32, F32, I64, BOOL])
    v = float(gen.choice([0.0, 1.0, -2.0, 0.5]))
    if op == "full":
        gen.emit(op, [], {"shape": gen.shape(), "value": v, "dtype": dt}, exact=True, ibound=2.0)
    else:
        x = gen.pick(lambda g: True)
        gen.emit(op, [x], {"value": v, "dtype": dt if gen.rng.random() < 0.5 else None}, exact=True, ibound=2.0)


def p_uniform(gen, op):
    seed = gen.new(TensorType(I64, ()), low=-2 ** 62, high=2 ** 62)
    gen.emit(op, [seed], {"shape": gen.shape(), "stream": int(gen.choice([0, 0, 1, 7]))}, exact=True, ibound=1.0)


def p_sdpa(gen, op):
    b, h, lq, sk, e = gen.dim(), int(gen.choice([1, 2])), gen.dim(), gen.dim(), int(gen.choice([2, 4, 8]))
    q = gen.new(TensorType(F32, (b, h, lq, e)))
    k = gen.new(TensorType(F32, (b, h, sk, e)))
    v = gen.new(TensorType(F32, (b, h, sk, int(gen.choice([2, 4])))))
    ins = [q, k, v]
    attrs = {}
    r = gen.rng.random()
    if r < 0.3:
        attrs["is_causal"] = True
    elif r < 0.7:
        # torch: the mask broadcasts to (L, S) (braze's inference also takes one that L, S broadcast to)
        ins.append(gen.pick(lambda g: g.dtype is BOOL and g.exact and g.t.rank == 2
                            and bcast_to_ok(gen, (lq, sk), g.shape), fresh_type=TensorType(BOOL, (lq, sk))))
    if gen.rng.random() < 0.3:
        attrs["scale"] = float(gen.choice([0.1, 1.0]))
    gen.emit(op, ins, attrs, exact=False)


def p_attention_backward(gen, op):
    """Fresh operands (a logsumexp need not be q and k's: the formula holds for any)."""
    b, hk, g, lq, sk = gen.dim(), int(gen.choice([1, 2])), int(gen.choice([1, 2])), gen.dim(), gen.dim()
    e, ev = int(gen.choice([2, 4, 8])), int(gen.choice([2, 4]))
    f = lambda *s: gen.new(TensorType(F32, s), const=False)  # noqa: E731
    ins = [f(b, hk * g, lq, e), f(b, hk, sk, e), f(b, hk, sk, ev), f(b, hk * g, lq, ev), f(b, hk * g, lq, ev),
           f(b, hk * g, lq)]
    r = gen.rng.random()
    if r < 0.3:
        ins.append(gen.new(TensorType(BOOL, (b, 1, 1, sk)), const=False))
    elif r < 0.5:
        ins.append(f(lq, sk))
    gen.emit(op, ins, {"is_causal": bool(gen.rng.random() < 0.4), "scale": float(gen.choice([0.1, 0.5]))},
             exact=False)


# ---------------------------------------------------------------------------------------------
# ops with no proposer of their own: by kind and arity
# ---------------------------------------------------------------------------------------------


def propose_generic(gen, op):
    od = all_ops()[op]
    required = [n for n in od.inputs if not n.endswith(("?", "*"))]
    if any(a.default is not None and a.default is not object and a.kind not in ("int", "float", "bool", "str")
           and _required(a) for a in od.attrs.values()):
        raise Reject("no proposer")
    attrs = {}
    for name, a in od.attrs.items():
        if _required(a):
            if a.kind == "int":
                attrs[name] = -1
            else:
                raise Reject("no proposer")
    ins = [gen.pick(lambda g: g.dtype.is_float)]
    for _ in required[1:]:
        ins.append(partner(gen, ins[0]))
    gen.emit(op, ins, attrs, exact=False)


def _required(a):
    from ..ops.registry import REQUIRED
    return a.default is REQUIRED


# ops the generator leaves out, and why (their tests say where they are checked instead)
UNFUZZED = {
    o: "its output's size comes from the data, and the generator fixes every shape before the graph runs "
       "(tests/codegen/test_select_native.py and tests/frontend/test_onnx_select.py check it against the reference)"
    for o in ("nonzero", "unique", "non_max_suppression")}

PROPOSERS = {
    **{o: p_float_unary for o in FLOAT_UNARY},
    **{o: p_numeric_unary for o in ("neg", "abs", "relu", "sign", "floor", "ceil", "round", "trunc", "clamp")},
    **{o: p_binary for o in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod")},
    **{o: p_compare for o in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")},
    **{o: p_logical for o in ("logical_and", "logical_or", "logical_xor", "logical_not")},
    "where": p_where, "cast": p_cast,
    **{o: p_bitwise for o in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitshift_left",
                              "bitshift_right")},
    "bitcast": p_bitcast,
    **{o: p_reduce for o in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "var",
                             "argmax", "argmin")},
    "cumsum": p_cumsum, "cumprod": p_cumprod,
    **{o: p_norm for o in ("softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm")},
    "group_norm": p_group_norm,
    "linear": p_linear, "matmul": p_matmul, "conv2d": p_conv, "direct_conv2d": p_direct_conv,
    "grid_sample": p_grid_sample,
    "conv2d_backward_input": p_conv_grad, "conv2d_backward_weight": p_conv_grad, "conv_transpose2d": p_conv_transpose,
    **{o: p_pool for o in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "max_pool2d_indices",
                           "max_pool2d_backward")},
    "reshape": p_reshape, "permute": p_permute, "expand": p_expand, "concat": p_concat, "split": p_split,
    "slice": p_slice, "squeeze": p_squeeze, "unsqueeze": p_unsqueeze, "flatten": p_flatten, "pad": p_pad,
    "tile": p_tile, "gather": p_gather, "gather_elements": p_gather, "index_add": p_index_add, "index_put": p_index_add,
    "tril": p_tri, "triu": p_tri,
    "resize": p_resize, "topk": p_topk,
    "arange": p_arange, "full": p_full, "full_like": p_full, "uniform": p_uniform,
    "scaled_dot_product_attention": p_sdpa, "attention_backward": p_attention_backward,
}
