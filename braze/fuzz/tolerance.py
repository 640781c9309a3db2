"""A per-element error bound for every value of a graph, propagated from its inputs.

Why not one rtol/atol: a random graph's condition varies by orders of magnitude.
``x - y`` of two nearly equal values, a ``log`` near 0, a ``layer_norm`` of an
almost constant row or a sum of a thousand terms may differ between two correct
implementations by far more than 1e-5 of the result; a plain ``add`` may not
differ at all. A fixed tolerance either floods the run with false reports or
hides real bugs in well-conditioned graphs. So the bound is *computed*:

* Every value ``v`` gets an array ``E(v) >= 0``: a bound on ``|computed - exact|``
  that holds for any implementation that rounds each op once (or with the
  documented ulp error of braze's vector math) in any summation order. Inputs
  and constants are exact (``E = 0``).
* Each op maps its operands' ``E`` to its output's by a running error analysis
  on the reference's own values: ``E(a+b) = E(a) + E(b) + u|a+b|``,
  ``E(a*b) = |a|E(b) + |b|E(a) + E(a)E(b) + u|ab|``; a monotone unary ``f`` by
  its interval ``max|f(x +- E) - f(x)|`` (exp, log, sqrt, reciprocal, pow), a
  bounded-slope one by its Lipschitz constant (tanh, erf, gelu, sin ...);
  reductions add ``n u sum|x|`` (any summation order, ``n`` the reduced length);
  matmul/linear/conv add ``K u (|A| @ |B|)`` (``K`` the contracted length);
  softmax, layer_norm, rms_norm and var bound the perturbed result by intervals
  of their mean and variance (so a near-constant row makes the bound large, as
  it should). Shape ops move ``E`` with the data (the op's own reference is
  applied to ``E``). Discontinuous ops (floor, sign, comparisons, argmax, casts
  to int) get a bound of 0 when their operands are exact and "unbounded"
  otherwise; the generator only gives them exact operands.
* ``u`` is the unit roundoff of the output's dtype times a per-op factor: 1 for
  correctly rounded ops, a few for braze_vec.h's polynomial exp/log/tanh/erf/gelu
  (their documented errors), plus absolute terms where an approximation is
  absolute (erf: 5e-7), plus the smallest normal number (a denormal result may
  be flushed to 0: oneDNN runs with FTZ/DAZ).
* Overflow on the way is not checked: where an output is inf from finite
  operands, or a sum of magnitudes (a reduction, a dot product, a variance, any
  order of batch_norm's terms) passes the dtype's largest value, partial sums in
  another order give inf, -inf, NaN or a finite value, all correct; those
  elements are "unbounded". An operand interval that reaches the edge of a
  function's domain (log, sqrt, reciprocal at 0) makes the result unbounded too.

Both sides (native and reference) are within ``E`` of the exact value, so they
are within ``2E`` of each other; the check allows ``SLACK * 2E + FLOOR``
(SLACK = 2 for the first-order terms the intervals leave out). Where the
reference is NaN or +-inf, the native result must be the same NaN or inf
unless the operands' propagated error is unbounded. Integers and bools compare
exactly (their bound is 0 by construction). Magnitudes are sanitised (inf ->
1e300, nan -> 0) before they multiply errors, so an exact inf operand gives a
finite bound and its inf result is checked for equality.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..ir import sym as S
from ..ops import get_op
from ..ops.registry import RefCtx
from ..reference import _eval_attr
from .tolerance_math import (BIG, FLOOR, SLACK, UNIT, clean, count, f64, finfo, is_float, mag, move, overflow, rnd,
                             unbounded_if, unit)
from .tolerance_ops import OP_RULES

# per-op rounding factor (in units of the output's unit roundoff) and absolute error
ROUND = {"exp": 4, "log": 4, "tanh": 8, "erf": 4, "gelu": 16, "sigmoid": 8, "silu": 8, "sin": 4, "cos": 4,
         "softplus": 8, "elu": 8, "pow": 8, "rsqrt": 4, "sqrt": 2, "reciprocal": 2, "hardswish": 3,
         "hardsigmoid": 2, "leaky_relu": 2, "div": 2, **{f: 4 for f in ("tan", "asin", "acos", "atan", "sinh", "cosh",
                                                                         "asinh", "acosh", "atanh", "log2", "log10",
                                                                         "exp2", "erfc")}}
ABS = {"erf": 1e-6, "gelu": 1e-6, "elu": 1e-6, "log": 1e-7, "tanh": 1e-7, "sin": 1e-7, "cos": 1e-7,
       "softplus": 1e-7, "silu": 1e-7, "sigmoid": 1e-8}
LIPSCHITZ = {"tanh": 1.0, "erf": 1.13, "erfc": 1.13, "sigmoid": 0.25, "silu": 1.1, "gelu": 1.13, "sin": 1.0, "cos": 1.0,
             "softplus": 1.0, "hardswish": 1.5, "relu": 1.0, "abs": 1.0, "neg": 1.0, "clamp": 1.0}
EXACT_OPS = {"relu", "abs", "neg", "clamp", "maximum", "minimum", "where", "reduce_max", "reduce_min",
             "max_pool2d", "remainder", "fmod"}
DISCONTINUOUS = {"floor", "ceil", "round", "trunc", "sign", "equal", "not_equal", "less", "less_equal", "greater",
                 "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "argmax", "argmin"}


# ---------------------------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------------------------


def propagate(module, func, arrays, env):
    """(values, errors): every value's reference array and its bound, by Value id."""
    ctx = RefCtx(env, module.constants, module=module)
    vals, errs = {}, {}
    for p, a in zip(func.params, arrays):
        vals[id(p)] = np.asarray(a)
        errs[id(p)] = np.zeros(np.shape(a))
    for node in func.nodes:
        opdef = get_op(node.op)
        ins = [None if v is None else vals[id(v)] for v in node.inputs]
        es = [None if v is None else errs[id(v)] for v in node.inputs]
        attrs = {k: _eval_attr(opdef.attrs[k].kind, v, env) for k, v in node.attrs.items()}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # means of empty slices: NaN, as intended
            out = opdef.reference(ctx, *ins, **attrs)
            outs = [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,))]
            eo = bound(ctx, node.op, opdef, ins, es, outs, attrs)
            if node.op == "add":
                eo = [eo[0] + _fused_residual(node, ins, outs[0], env)]
            elif node.op in ("gelu", "silu") and _after_product(node.inputs[0]):
                eo = [np.where(np.isinf(np.asarray(ins[0], np.float64)), np.inf, eo[0])]
        for v, a, e in zip(node.outputs, outs, eo):
            vals[id(v)] = a
            e = np.broadcast_to(np.asarray(e, dtype=np.float64), a.shape)
            e = np.where(np.isnan(e), np.inf, e)
            if is_float(a.dtype):
                e = np.where(_overflowed(opdef, ins, a), np.inf, e)
            errs[id(v)] = e
    return vals, errs


def _fused_residual(node, ins, out, env):
    """An add of a product's result (conv2d, linear, matmul) may run inside the library call as
    its residual post-op, which oneDNN accumulates with the partial sums (across blocks of K):
    up to k + 2 roundings at the residual's magnitude (seed 63626: 3 ulp of a 0.25 residual on
    a conv whose terms were 1e-9)."""
    extra = 0.0
    for i, v in enumerate(node.inputs):
        p = v.producer if v is not None else None
        if p is None or p.op not in ("conv2d", "linear", "matmul") or v is not p.outputs[0]:
            continue
        w = p.inputs[1].type.shape
        k = S.evaluate(S.prod(w[1:]) if p.op == "conv2d" else w[-1] if p.op == "linear"
                       else p.inputs[0].type.shape[-1], env)
        other = ins[1 - i]
        extra = extra + (k + 2) * unit(out) * np.broadcast_to(mag(other), np.shape(out))
    return extra


def _after_product(v) -> bool:
    """Whether ``v`` is a product's result (conv2d, linear, matmul), perhaps plus a bias or a
    residual: an activation of it runs as a oneDNN post-op, whose gelu(+-inf) and silu(-inf)
    are NaN, as eager's, where braze's own kernels give the limits (docs/semantics.md; seed
    82751: gelu of a matmul plus a -inf bias)."""
    for _ in range(3):
        p = v.producer if v is not None else None
        if p is None:
            return False
        if p.op in ("conv2d", "linear", "matmul"):
            return True
        if p.op != "add":
            return False
        v = next((u for u in p.inputs if u is not None and u.producer is not None
                  and u.producer.op in ("conv2d", "linear", "matmul", "add")), None)
    return False


def _overflowed(opdef, ins, out):
    """Where ``out`` is +-inf from finite operands: an overflow, whose result depends on
    rounding and evaluation order (an FMA, a partial sum), so it is not checked."""
    inf = np.isinf(out)
    if not inf.any():
        return inf
    floats = [np.asarray(x) for x in ins if x is not None and is_float(np.asarray(x).dtype)]
    if opdef.kind == "elementwise":
        fin = np.ones(out.shape, dtype=bool)
        for x in floats:
            try:
                fin = fin & np.broadcast_to(np.isfinite(x), out.shape)
            except ValueError:
                fin = fin & bool(np.isfinite(x).all())
        return inf & fin
    return inf & all(bool(np.isfinite(x).all()) for x in floats)


def bound(ctx, op, opdef, ins, es, outs, attrs):
    """The outputs' error bounds of one node."""
    out = outs[0]
    rule = RULES.get(op)
    if rule is not None:
        r = rule(ctx, opdef, ins, es, outs, attrs)
        return r if isinstance(r, list) else [r]
    if op in DISCONTINUOUS:
        return [unbounded_if(es, out.shape)]
    if opdef.kind in ("injective", "broadcast"):
        return move(ctx, opdef, ins, es, outs, attrs)
    if opdef.kind == "creation":
        return [np.zeros(o.shape) for o in outs]
    # an op with no rule: exact operands give a few ulp; inexact ones are unbounded
    return [unbounded_if(es, o.shape) + rnd(o, 8) for o in outs]


# ---------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------


def _unary(fn):
    def rule(ctx, opdef, ins, es, outs, attrs):
        x, e, out = f64(ins[0]), es[0], outs[0]
        op = opdef.name
        if op in LIPSCHITZ or op in ("leaky_relu", "elu", "hardsigmoid"):
            L = LIPSCHITZ.get(op, 1.0)
            if op == "leaky_relu":
                L = max(1.0, abs(attrs["alpha"]))
            elif op == "elu":
                L = max(1.0, abs(attrs["alpha"]))
            elif op == "hardsigmoid":
                L = abs(attrs["alpha"])
            elif op == "softplus":
                L = 1.0
            p = L * e
            if op in ("sin", "cos"):  # bounded, unless the operand may be inf (then NaN)
                p = np.where(np.isinf(e), np.inf, np.minimum(p, 2.0))
        else:
            f = fn
            p = np.maximum(np.abs(f(x + e) - f(x)), np.abs(f(x - e) - f(x)))
            # an operand interval reaching 0 (or below): -inf, NaN or a value are all possible
            if op in ("log", "log2", "log10", "sqrt", "rsqrt"):
                p = np.where((x - e <= 0) & (e > 0), np.inf, p)
            if op in ("reciprocal",):
                p = np.where((x - e <= 0) & (x + e >= 0) & (e > 0), np.inf, p)
            if op in _EDGE:
                p = np.where(_EDGE[op](x, e) & (e > 0), np.inf, p)
        c = 0.0 if op in EXACT_OPS else ROUND.get(op, 1)
        a = ABS.get(op, 0.0)
        if op == "elu":
            a *= max(1.0, abs(attrs["alpha"]))
        if op == "hardsigmoid":  # alpha*x + beta cancels; alpha and beta round to float32 too
            a = 4 * unit(out) * (abs(attrs["alpha"]) * mag(x) + abs(attrs["beta"]))
        return clean(p, e) + rnd(out, c, a if out.dtype == np.float32 else 0.0)

    return rule


def _binary(ctx, opdef, ins, es, outs, attrs):
    op = opdef.name
    a, b, out = ins[0], ins[1], outs[0]
    ea, eb = es
    if out.dtype.kind in "iub":
        return unbounded_if(es, out.shape)
    A, B = mag(a), mag(b)
    if op in ("add", "sub"):
        p = ea + eb
    elif op == "mul":
        p = A * eb + B * ea + ea * eb
        # an uncertain operand near 0 times inf: NaN (0 * inf) or +-inf
        p = np.where(((ea > 0) & np.isinf(b)) | ((eb > 0) & np.isinf(a)), np.inf, p)
    elif op == "div":
        den = B * (B - eb)
        p = np.where(B > eb, (A * eb + B * ea) / np.where(den > 0, den, 1.0), np.inf)
    elif op in ("maximum", "minimum"):
        p = np.maximum(ea, eb)
    elif op in ("remainder", "fmod"):  # exact, but discontinuous in the divisor
        p = unbounded_if([ea, eb], out.shape)
    elif op == "pow":
        x, y = f64(a), f64(b)
        p = np.maximum(np.abs(np.power(x + ea, y) - np.power(x, y)), np.abs(np.power(x - ea, y) - np.power(x, y)))
        p = np.where((x - ea <= 0) & (x + ea >= 0) & (ea > 0), np.inf, p)
        p = np.where(eb > 0, np.inf, p)  # the generator keeps exponents exact
        lg = np.abs(y * np.log(np.maximum(np.abs(x), 1e-300)))
        return clean(p, ea, eb) + rnd(out, ROUND["pow"]) * (1 + np.nan_to_num(lg, posinf=BIG))
    else:
        p = unbounded_if([ea, eb], out.shape)
    c = 0.0 if op in EXACT_OPS else ROUND.get(op, 1)
    return clean(p, ea, eb) + rnd(out, c)


def _where(ctx, opdef, ins, es, outs, attrs):
    c, out = ins[0], outs[0]
    p = np.where(c, es[1], es[2])
    return clean(p, es[1], es[2]) + unbounded_if([es[0]], out.shape)


def _cast(ctx, opdef, ins, es, outs, attrs):
    x, e, out = ins[0], es[0], outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([e], out.shape)
    return clean(e, e) + rnd(out, 1.0 if np.asarray(x).dtype.itemsize > out.dtype.itemsize
                             or np.asarray(x).dtype.kind in "iu" else 0.0)


def _axes(x, attrs):
    nd = np.ndim(x)
    ax = attrs.get("axes")
    if nd == 0:
        return ()
    return tuple(range(nd)) if ax is None else tuple(sorted({a % nd for a in ax}))


def _reduce(ctx, opdef, ins, es, outs, attrs):
    op = opdef.name
    x, e, out = ins[0], es[0], outs[0]
    ax = _axes(x, attrs)
    kd = attrs["keepdims"]
    n = count(x, ax)
    if out.dtype.kind in "iub":
        return unbounded_if([np.sum(e, axis=ax, keepdims=kd)], out.shape)
    if op in ("reduce_max", "reduce_min"):
        pm = np.max(e, axis=ax, keepdims=kd, initial=0.0)
        return clean(pm, pm)
    X = mag(x)
    u = unit(out)
    SX = np.sum(X, axis=ax, keepdims=kd)
    if op == "reduce_sum":
        se = np.sum(e, axis=ax, keepdims=kd)
        return clean(se, se) + n * u * SX + overflow(SX, out)
    if op == "reduce_mean":
        k = max(n, 1)
        se = np.sum(e, axis=ax, keepdims=kd) / k
        return clean(se, se) + (n + 1) * u * SX / k + overflow(SX, out)
    if op == "reduce_prod":
        P = np.prod(X + e, axis=ax, keepdims=True)
        frac = np.where(X + e > 0, e / np.where(X + e > 0, X + e, 1.0), 0.0)
        p = np.sum(frac, axis=ax, keepdims=True) * P
        PX = np.prod(np.maximum(X, 1.0), axis=ax, keepdims=True)  # the largest partial product
        small = np.prod(np.minimum(X, 1.0), axis=ax, keepdims=True)  # the smallest one
        tiny = float(finfo(out.dtype).tiny) if is_float(out.dtype) else 0.0
        # a partial product in the denormal range has lost bits: tiny * (what multiplies it later)
        r = (n + 1) * u * np.prod(X, axis=ax, keepdims=True) + overflow(PX, out) + \
            np.where(small < tiny, 2 * tiny * PX, 0.0)
        res = clean(p, e) if np.ndim(x) == 0 else clean(p, np.max(e, axis=ax, keepdims=True, initial=0.0)) + r
        return res if kd else np.reshape(res, out.shape)
    if op == "var":
        dof = n - attrs["correction"]
        xf = f64(x)
        m = np.mean(xf, axis=ax, keepdims=True) if n else xf
        cdev = mag(xf - m)
        me = np.mean(e, axis=ax, keepdims=True) if n else e
        E2 = e + me
        num = 2 * np.sum(cdev * E2, axis=ax, keepdims=kd) + np.sum(E2 * E2, axis=ax, keepdims=kd)
        r = 2 * (n + 2) * u * np.sum(X * X, axis=ax, keepdims=kd) + overflow(np.sum(X * X, axis=ax, keepdims=kd), out)
        with np.errstate(all="ignore"):
            p = clean(num / dof if dof > 0 else np.zeros(out.shape), np.sum(e, axis=ax, keepdims=kd))
            if dof <= 0:  # ss / 0: inf, or NaN where ss is 0: it underflows in the output dtype
                # (seed 1007), or the operands' errors may make every deviation 0 (seed 72319)
                ss = np.sum(np.maximum(cdev - E2, 0.0) ** 2, axis=ax, keepdims=kd)
                p = np.where(ss < (n + 2) * float(finfo(out.dtype).tiny), np.inf, p)
            return p + (r / dof if dof > 0 else 0.0) + rnd(out, 2)
    raise AssertionError(op)


_F = {"exp": np.exp, "log": np.log, "sqrt": lambda x: np.sqrt(np.maximum(x, 0)),
      "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x, "tan": np.tan, "asin": np.arcsin,
      "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
      "acosh": np.arccosh, "atanh": np.arctanh, "log2": np.log2, "log10": np.log10, "exp2": np.exp2}
# where an operand interval leaves the domain (or reaches a pole), any value is possible
_EDGE = {"asin": lambda x, e: (x + e >= 1) | (x - e <= -1), "acos": lambda x, e: (x + e >= 1) | (x - e <= -1),
         "atanh": lambda x, e: (x + e >= 1) | (x - e <= -1), "acosh": lambda x, e: x - e <= 1,
         "tan": lambda x, e: np.floor((x - e) / np.pi - 0.5) != np.floor((x + e) / np.pi - 0.5)}

RULES = {
    **{op: _unary(_F.get(op)) for op in ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "sigmoid",
                                         "silu", "sin", "cos", "hardswish", "gelu", "leaky_relu", "elu", "softplus",
                                         "hardsigmoid", "relu", "abs", "neg", "clamp", "tan", "asin", "acos", "atan",
                                         "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
                                         "erfc")},
    **{op: _binary for op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod")},
    "where": _where, "cast": _cast,
    **{op: _reduce for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "var")},
    **OP_RULES,
}


# ---------------------------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------------------------


def compare(actual, expected, err) -> tuple[bool, str, int]:
    """(ok, message, unchecked elements): ``actual`` against ``expected`` within the bound."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return False, f"shape {actual.shape} != expected {expected.shape}", 0
    if actual.dtype != expected.dtype:
        return False, f"dtype {actual.dtype} != expected {expected.dtype}", 0
    if not (is_float(expected.dtype) or expected.dtype.kind == "c") or expected.dtype.name not in UNIT:
        bad = actual != expected
        unchecked = np.isinf(err) if err is not None else np.zeros(expected.shape, bool)
        bad = bad & ~unchecked
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return False, (f"{int(bad.sum())} of {bad.size} differ; first at {i}: got {actual[i]!r}, "
                           f"expected {expected[i]!r}"), int(unchecked.sum())
        return True, "", int(unchecked.sum())
    a, r = f64(actual), f64(expected)
    tol = SLACK * 2 * err + FLOOR[expected.dtype.name]
    unbounded = ~np.isfinite(tol)
    same = (a == r) | (np.isnan(a) & np.isnan(r))
    with np.errstate(invalid="ignore"):
        close = np.abs(a - r) <= tol
    ok = same | unbounded | (np.isfinite(r) & close)
    if ok.all():
        return True, "", int(unbounded.sum())
    bad = ~ok
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    return False, (f"{int(bad.sum())} of {bad.size} elements out of bounds; first at {i}: got {a[i]!r}, "
                   f"expected {r[i]!r}, allowed +-{tol[i]:.3g}"), int(unbounded.sum())


__all__ = ["propagate", "compare", "SLACK"]
