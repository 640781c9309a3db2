"""Elementwise lowerings: binary/compare/logical ops, unary math, activations,
clamp, where and cast."""

from __future__ import annotations

import math

import numpy as np

from ..ir.loop import LIBM_UNARY, Binary, Compare, Const, Select, Unary
from ..ops.common import promote
from ..ops.elementwise import DIVIDING_OPS
from .core import (BOOL, add, cast, cmp, const, div, fconst, lowering, mul, select, un, vmax,
                   vmin)
from .index_math import broadcast_to


_BIN_IR = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "max",
           "minimum": "min", "remainder": "mod", "fmod": "fmod"}


@lowering(*_BIN_IR)
def _lower_binary(ctx, a, b):
    op = ctx.node.op
    out = ctx.out_type
    dt = out.dtype
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    ir = _BIN_IR[op]
    if dt is BOOL:
        ir = {"add": "or", "mul": "and"}.get(ir, ir)
    if op in DIVIDING_OPS and dt.is_int:
        return lambda idx: Binary(ir, cast(fa(idx), dt), _divisor(cast(fb(idx), dt)), dt)
    return lambda idx: Binary(ir, cast(fa(idx), dt), cast(fb(idx), dt), dt)


def _divisor(b):
    """An integer divisor, checked for 0 where it is read (eager raises) unless it is a constant
    that is not 0."""
    return b if isinstance(b, Const) and b.value != 0 else Unary("divisor", b, b.dtype)


_CMP_IR = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
           "greater_equal": "ge"}


@lowering(*_CMP_IR)
def _lower_compare(ctx, a, b):
    out = ctx.out_type
    dt = promote(a.dtype, b.dtype)
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    op = _CMP_IR[ctx.node.op]
    return lambda idx: Compare(op, cast(fa(idx), dt), cast(fb(idx), dt))


@lowering("logical_and", "logical_or", "logical_xor")
def _lower_logical(ctx, a, b):
    out = ctx.out_type
    fa, fb = broadcast_to(a, out.shape), broadcast_to(b, out.shape)
    op = ctx.node.op.split("_")[1]
    return lambda idx: Binary(op, cast(fa(idx), BOOL), cast(fb(idx), BOOL), BOOL)


@lowering("logical_not")
def _lower_not(ctx, x):
    return lambda idx: Unary("not", cast(x(idx), BOOL), BOOL)


_SIMPLE_UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "tanh", "erf", "sigmoid", "silu", "sin", "cos", "neg", "abs",
                 *(f for f in LIBM_UNARY if f != "trunc"))


@lowering(*_SIMPLE_UNARY, "rsqrt")
def _lower_unary(ctx, x):
    fn = ctx.node.op
    return lambda idx: un(fn, x(idx))


@lowering("reciprocal")
def _lower_reciprocal(ctx, x):
    return lambda idx: div(fconst(1, x(idx)), x(idx))


@lowering("gelu")
def _lower_gelu(ctx, x, *, approximate):
    fn = "gelu" if approximate == "none" else "gelu_tanh"
    return lambda idx: un(fn, x(idx))


@lowering("relu")
def _lower_relu(ctx, x):
    # x < 0 ? 0 : x (torch): relu(-0) = -0, NaN propagates
    def fn(idx):
        v = x(idx)
        return select(cmp("lt", v, fconst(0, v)), fconst(0, v), v)
    return fn


@lowering("floor", "ceil", "round", "trunc")
def _lower_rounding(ctx, x):
    if not x.dtype.is_float:
        return x
    fn = ctx.node.op
    return lambda idx: un(fn, x(idx))


@lowering("sign")
def _lower_sign(ctx, x):
    def fn(idx):
        v = x(idx)
        z = fconst(0, v)
        return select(cmp("gt", v, z), fconst(1, v), select(cmp("lt", v, z), fconst(-1, v), z))
    return fn


def _finite_below(v):
    """max(v, -largest finite): x * 0 at x = -inf gives the limit -0 instead of NaN."""
    return vmax(v, fconst(-float(v.dtype.finfo.max), v))


@lowering("hardswish")
def _lower_hardswish(ctx, x):
    # x * (t / 6): exactly x for x >= 3 (t / 6 == 1), and -0 at -inf (the limit; torch gives NaN)
    def fn(idx):
        v = x(idx)
        t = vmin(vmax(add(v, fconst(3, v)), fconst(0, v)), fconst(6, v))
        return mul(_finite_below(v), div(t, fconst(6, v)))
    return fn


@lowering("leaky_relu")
def _lower_leaky(ctx, x, *, alpha):
    def fn(idx):
        v = x(idx)
        return select(cmp("ge", v, fconst(0, v)), v, mul(fconst(alpha, v), v))
    return fn


@lowering("elu")
def _lower_elu(ctx, x, *, alpha):
    def fn(idx):
        v = x(idx)
        neg = mul(fconst(alpha, v), un("expm1", v))  # expm1: exact near 0, elu(-0) = -0
        return select(cmp("gt", v, fconst(0, v)), v, neg)
    return fn


@lowering("softplus")
def _lower_softplus(ctx, x, *, beta, threshold):
    def fn(idx):
        v = x(idx)
        bx = mul(fconst(beta, v), v)
        soft = div(add(vmax(bx, fconst(0, v)), un("log1p", un("exp", un("neg", un("abs", bx))))), fconst(beta, v))
        return select(cmp("gt", bx, fconst(threshold, v)), v, soft)
    return fn


@lowering("hardsigmoid")
def _lower_hardsigmoid(ctx, x, *, alpha, beta):
    def fn(idx):
        v = x(idx)
        return vmin(vmax(add(mul(fconst(alpha, v), v), fconst(beta, v)), fconst(0, v)), fconst(1, v))
    return fn


@lowering("clamp")
def _lower_clamp(ctx, x, *, min, max):
    dt = x.dtype
    lo, hi = min, max
    if not dt.is_float:
        info = np.iinfo(dt.numpy)
        lo = None if lo is None else int(np.clip(math.ceil(lo), info.min, info.max))
        hi = None if hi is None else int(np.clip(math.floor(hi), info.min, info.max))

    # x < lo ? lo : x, then x > hi ? hi : x, as eager's clamp: NaN and -0 kept (clamp(-0, 0, 6) is
    # -0), the values the helper's relu and relu6 post-ops give (passes/offload.py)
    def fn(idx):
        v = x(idx)
        if lo is not None:
            c = const(lo, dt)
            v = select(cmp("lt", v, c), c, v)
        if hi is not None:
            c = const(hi, dt)
            v = select(cmp("gt", v, c), c, v)
        return v
    return fn


@lowering("where")
def _lower_where(ctx, c, a, b):
    out = ctx.out_type
    fc, fa, fb = (broadcast_to(t, out.shape) for t in (c, a, b))
    dt = out.dtype
    return lambda idx: Select(cast(fc(idx), BOOL), cast(fa(idx), dt), cast(fb(idx), dt), dt)


@lowering("cast")
def _lower_cast(ctx, x, *, dtype):
    return lambda idx: cast(x(idx), dtype)
