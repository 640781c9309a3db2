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

import math
import warnings

import numpy as np

from ..ir import sym as S
from ..ops import get_op
from ..ops.registry import RefCtx
from ..reference import _eval_attr

SLACK = 2.0
FLOOR = {"float32": 1e-30, "float64": 1e-300, "float16": 1e-6, "bfloat16": 1e-6}
UNIT = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
BIG = 1e300

# per-op rounding factor (in units of the output's unit roundoff) and absolute error
ROUND = {"exp": 4, "log": 4, "tanh": 8, "erf": 4, "gelu": 16, "sigmoid": 8, "silu": 8, "sin": 4, "cos": 4,
         "softplus": 8, "elu": 8, "pow": 8, "rsqrt": 4, "sqrt": 2, "reciprocal": 2, "hardswish": 3,
         "hardsigmoid": 2, "leaky_relu": 2, "div": 2, **{f: 4 for f in ("tan", "asin", "acos", "atan", "sinh", "cosh",
                                                                         "asinh", "acosh", "atanh")}}
ABS = {"erf": 1e-6, "gelu": 1e-6, "elu": 1e-6, "log": 1e-7, "tanh": 1e-7, "sin": 1e-7, "cos": 1e-7,
       "softplus": 1e-7, "silu": 1e-7, "sigmoid": 1e-8}
LIPSCHITZ = {"tanh": 1.0, "erf": 1.13, "sigmoid": 0.25, "silu": 1.1, "gelu": 1.13, "sin": 1.0, "cos": 1.0,
             "softplus": 1.0, "hardswish": 1.5, "relu": 1.0, "abs": 1.0, "neg": 1.0, "clamp": 1.0}
EXACT_OPS = {"relu", "abs", "neg", "clamp", "maximum", "minimum", "where", "reduce_max", "reduce_min",
             "max_pool2d", "remainder", "fmod"}
DISCONTINUOUS = {"floor", "ceil", "round", "sign", "equal", "not_equal", "less", "less_equal", "greater",
                 "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "argmax", "argmin"}


def mag(x):
    """|x| with inf -> 1e300 and nan -> 0, in float64 (a magnitude to multiply errors by)."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    return np.nan_to_num(a, nan=0.0, posinf=BIG)


def _isf(dt) -> bool:
    """A float dtype, ml_dtypes' bfloat16 included (numpy files it under kind 'V')."""
    return dt.kind == "f" or dt.name == "bfloat16"


def _finfo(dt):
    """numpy's finfo, and ml_dtypes' for bfloat16 (numpy's refuses it)."""
    if np.dtype(dt).name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(dt)


def unit(a) -> float:
    return UNIT.get(np.asarray(a).dtype.name, 0.0)


def rnd(out, c=1.0, absolute=0.0):
    """The rounding part of a float output's bound: c u |out| (+ an absolute term), and the
    smallest normal number when c > 0: a denormal result may be flushed to 0 (oneDNN runs
    with FTZ/DAZ; the vector exp returns 0 below the normal range)."""
    out = np.asarray(out)
    u = unit(out)
    if u == 0.0:
        return np.zeros(out.shape)
    fi = _finfo(out.dtype)
    return c * u * np.minimum(mag(out), fi.max) + absolute + (float(fi.tiny) if c > 0 else 0.0)


def _any_err(e, shape):
    """Where an operand's error is nonzero, at the output's shape (everywhere when the
    operand does not broadcast to it: a reduction's or a matmul's operand)."""
    nz = np.asarray(e) != 0  # NaN counts as an error
    try:
        return np.broadcast_to(nz, shape)
    except ValueError:
        return np.full(shape, bool(nz.any()))


def clean(p, *errs):
    """A propagated part: NaN -> unbounded, and exactly 0 where every operand error is 0."""
    p = np.asarray(p, dtype=np.float64)
    p = np.where(np.isnan(p), np.inf, p)
    if errs:
        any_err = np.zeros(p.shape, dtype=bool)
        for e in errs:
            if e is not None:
                any_err = any_err | _any_err(e, p.shape)
        p = np.where(any_err, p, 0.0)
    return p


def unbounded_if(errs, shape):
    """0, or inf where any operand carries error (for discontinuous ops)."""
    out = np.zeros(shape)
    for e in errs:
        if e is not None:
            out = np.where(_any_err(e, shape), np.inf, out)
    return out


def _f64(x):
    return np.asarray(x, dtype=np.float64)


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
            if _isf(a.dtype):
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
    floats = [np.asarray(x) for x in ins if x is not None and _isf(np.asarray(x).dtype)]
    if opdef.kind == "elementwise":
        fin = np.ones(out.shape, dtype=bool)
        for x in floats:
            try:
                fin = fin & np.broadcast_to(np.isfinite(x), out.shape)
            except ValueError:
                fin = fin & bool(np.isfinite(x).all())
        return inf & fin
    return inf & all(bool(np.isfinite(x).all()) for x in floats)


def _ovf(total, out):
    """Unbounded where a sum of magnitudes (float64) may overflow the output's dtype on the way:
    the order of the partial sums then decides between inf, -inf, nan and a finite value."""
    lim = _finfo(np.asarray(out).dtype).max if _isf(np.asarray(out).dtype) else np.inf
    return np.where(np.asarray(total) > lim / 2, np.inf, 0.0)


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
        return _move(ctx, opdef, ins, es, outs, attrs)
    if opdef.kind == "creation":
        return [np.zeros(o.shape) for o in outs]
    # an op with no rule: exact operands give a few ulp; inexact ones are unbounded
    return [unbounded_if(es, o.shape) + rnd(o, 8) for o in outs]


def _move(ctx, opdef, ins, es, outs, attrs):
    """Shape ops: the error moves with the data (gather's indices stay as they are)."""
    data = [None if e is None else _f64(e) for e in es]
    if opdef.name in ("gather", "gather_elements"):
        data = [data[0], ins[1]]
    if opdef.name == "pad":
        attrs = dict(attrs, value=0.0)
    r = opdef.reference(ctx, *data, **attrs)
    r = list(r) if isinstance(r, (tuple, list)) else [r]
    return [np.asarray(x, dtype=np.float64) for x in r]


# ---------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------


def _unary(fn):
    def rule(ctx, opdef, ins, es, outs, attrs):
        x, e, out = _f64(ins[0]), es[0], outs[0]
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
            if op in ("log", "sqrt", "rsqrt"):
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
        x, y = _f64(a), _f64(b)
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


def _count(x, axes):
    return int(np.prod([np.shape(x)[a] for a in axes])) if axes else 1


def _reduce(ctx, opdef, ins, es, outs, attrs):
    op = opdef.name
    x, e, out = ins[0], es[0], outs[0]
    ax = _axes(x, attrs)
    kd = attrs["keepdims"]
    n = _count(x, ax)
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
        return clean(se, se) + n * u * SX + _ovf(SX, out)
    if op == "reduce_mean":
        k = max(n, 1)
        se = np.sum(e, axis=ax, keepdims=kd) / k
        return clean(se, se) + (n + 1) * u * SX / k + _ovf(SX, out)
    if op == "reduce_prod":
        P = np.prod(X + e, axis=ax, keepdims=True)
        frac = np.where(X + e > 0, e / np.where(X + e > 0, X + e, 1.0), 0.0)
        p = np.sum(frac, axis=ax, keepdims=True) * P
        PX = np.prod(np.maximum(X, 1.0), axis=ax, keepdims=True)  # the largest partial product
        small = np.prod(np.minimum(X, 1.0), axis=ax, keepdims=True)  # the smallest one
        tiny = float(_finfo(out.dtype).tiny) if _isf(out.dtype) else 0.0
        # a partial product in the denormal range has lost bits: tiny * (what multiplies it later)
        r = (n + 1) * u * np.prod(X, axis=ax, keepdims=True) + _ovf(PX, out) + \
            np.where(small < tiny, 2 * tiny * PX, 0.0)
        res = clean(p, e) if np.ndim(x) == 0 else clean(p, np.max(e, axis=ax, keepdims=True, initial=0.0)) + r
        return res if kd else np.reshape(res, out.shape)
    if op == "var":
        dof = n - attrs["correction"]
        xf = _f64(x)
        m = np.mean(xf, axis=ax, keepdims=True) if n else xf
        cdev = mag(xf - m)
        me = np.mean(e, axis=ax, keepdims=True) if n else e
        E2 = e + me
        num = 2 * np.sum(cdev * E2, axis=ax, keepdims=kd) + np.sum(E2 * E2, axis=ax, keepdims=kd)
        r = 2 * (n + 2) * u * np.sum(X * X, axis=ax, keepdims=kd) + _ovf(np.sum(X * X, axis=ax, keepdims=kd), out)
        with np.errstate(all="ignore"):
            p = clean(num / dof if dof > 0 else np.zeros(out.shape), np.sum(e, axis=ax, keepdims=kd))
            if dof <= 0:  # ss / 0: inf, or NaN where ss is 0: it underflows in the output dtype
                # (seed 1007), or the operands' errors may make every deviation 0 (seed 72319)
                ss = np.sum(np.maximum(cdev - E2, 0.0) ** 2, axis=ax, keepdims=kd)
                p = np.where(ss < (n + 2) * float(_finfo(out.dtype).tiny), np.inf, p)
            return p + (r / dof if dof > 0 else 0.0) + rnd(out, 2)
    raise AssertionError(op)


def _scan(ctx, opdef, ins, es, outs, attrs):
    """cumsum and cumprod: n + 1 roundings of the running value, and the operands' errors carried."""
    x, e, out = ins[0], es[0], outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([opdef.reference(ctx, e, **attrs)], out.shape)
    n = np.shape(x)[attrs["axis"] % np.ndim(x)] if np.ndim(x) else 1
    cx = opdef.reference(ctx, mag(x), **attrs)
    if opdef.name == "cumsum":
        pe = opdef.reference(ctx, _f64(e), **attrs)
        return clean(pe, pe) + (n + 1) * unit(out) * cx + _ovf(cx, out)
    pe = opdef.reference(ctx, mag(x) + _f64(e), **attrs) - cx  # each factor off by its error, at worst
    # a partial product in another order (braze's reversed scan multiplies from the element on) can
    # overflow where the reference's does not: bounded by the product of the factors above 1
    big = opdef.reference(ctx, np.maximum(mag(x), 1.0), **attrs)
    small = opdef.reference(ctx, np.minimum(mag(x), 1.0), **attrs)  # ... or underflow: then all of it may go
    under = np.where(small < _finfo(np.asarray(out).dtype).tiny, cx, 0.0) if _isf(np.asarray(out).dtype) else 0.0
    return clean(pe, pe) + (n + 1) * unit(out) * cx + _ovf(big, out) + under


def _attention_backward(ctx, opdef, ins, es, outs, attrs):
    """A running error analysis of the backward's formula (braze_attention.h's doc) on the
    reference's values in float64: the scores, p = exp(s - lse), then each product's sums."""
    q, k, v, o, do, lse = (_f64(x) for x in ins[:6])
    mask = ins[6] if len(ins) > 6 else None
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, 1), np.repeat(v, g, 1)
    u, sc, (E, Ev), (L, S) = unit(outs[0]), attrs["scale"], (q.shape[-1], v.shape[-1]), (q.shape[2], k.shape[2])
    t = lambda a: np.swapaxes(a, -1, -2)  # noqa: E731
    s = q @ t(k) * sc
    keep = np.ones(s.shape, bool)
    if attrs.get("is_causal"):
        keep &= np.tril(np.ones((L, S), bool))
    if mask is not None:
        keep &= mask if mask.dtype == np.bool_ else np.isfinite(mask)
        s = s if mask.dtype == np.bool_ else s + np.where(np.isfinite(mask), mask, 0)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.where(keep, np.exp(np.minimum(s - lse[..., None], 700)), 0.0)
    es = (E + 2) * u * (mag(q) @ t(mag(k))) * sc + 2 * u * np.abs(s)
    ep = np.where(keep, p * (es + u * np.abs(s - lse[..., None]) + 8 * u), 0.0)
    dp, d = do @ t(v), np.sum(do * o, -1, keepdims=True)
    e_dpd = (Ev + 2) * u * (mag(do) @ t(mag(v)) + np.sum(mag(do * o), -1, keepdims=True))
    ds = p * (dp - d) * sc
    e_ds = (ep * np.abs(dp - d) + p * e_dpd + 4 * u * np.abs(ds / sc)) * sc
    e_dq = e_ds @ mag(k) + (S + 2) * u * (np.abs(ds) @ mag(k))
    e_dk = t(e_ds) @ mag(q) + (L + 2) * u * (t(np.abs(ds)) @ mag(q))
    e_dv = t(ep) @ mag(do) + (L + 2) * u * (t(p) @ mag(do))
    fold = lambda a: a.reshape(a.shape[0], a.shape[1] // g, g, *a.shape[2:]).sum(2) * (1 + g * u)  # noqa: E731
    if any(e is not None and np.any(np.asarray(e) != 0) for e in es):  # the proposer gives exact operands
        return [np.full(x.shape, np.inf) for x in outs]
    return [np.where(np.isfinite(x), x, np.inf) for x in (e_dq, fold(e_dk), fold(e_dv))]


def _index_add(ctx, opdef, ins, es, outs, attrs):
    """A running sum per row, as cumsum's: each row's errors added up, and a rounding per add
    of at most the row's sum of magnitudes (n the most adds any row takes, plus one)."""
    x, idx, src = ins
    out = outs[0]
    if out.dtype.kind in "iub":
        return unbounded_if([es[0], es[2]], out.shape)
    pe = opdef.reference(ctx, _f64(es[0]), idx, _f64(es[2]), **attrs)
    cx = opdef.reference(ctx, mag(x), idx, mag(src), **attrs)
    n = np.bincount(np.asarray(idx, np.int64) % max(np.shape(x)[attrs["axis"] % np.ndim(x)], 1)).max(initial=0)
    return clean(pe, pe) + (n + 1) * unit(out) * cx + _ovf(cx, out)


def _max_pool_backward(ctx, opdef, ins, es, outs, attrs):
    """grad added at each window's winner: a sum per input position, as index_add's (n the most
    windows one position wins, plus one, roundings of its sum of magnitudes; seed 60658 summed
    +-3e38 with 0.23 in another order); unbounded where the winners may differ."""
    grad, x, idx = ins
    out = outs[0]
    add = lambda g: _f64(opdef.reference(ctx, np.asarray(g, np.float64), x, idx, **attrs))  # noqa: E731
    pe = add(np.zeros(np.shape(grad)) if es[0] is None else es[0])
    cx = add(mag(grad))
    n = add(np.ones(np.shape(grad))).max(initial=0)
    return clean(pe, pe) + (n + 1) * unit(out) * cx + _ovf(cx, out) + unbounded_if([es[2]], out.shape)


def _softmax(ctx, opdef, ins, es, outs, attrs):
    x, e, out = _f64(ins[0]), es[0], outs[0]
    if x.ndim == 0:
        return rnd(out, 8)
    ax = attrs["axis"] % x.ndim
    n = x.shape[ax]
    u = unit(out)
    mx = np.max(np.nan_to_num(x, nan=0.0, posinf=BIG, neginf=-BIG), axis=ax, keepdims=True, initial=-BIG)
    ez = e + u * (mag(x) + mag(mx))  # the error of x - max
    emax = np.max(ez, axis=ax, keepdims=True, initial=0.0)
    if opdef.name == "softmax":
        y = mag(out)
        # a 16-bit softmax computes in float32 and rounds where it is stored (stage widen): cast to
        # a wider type in the same kernel, a value below the 16-bit normal range stays (seed 48064)
        floor = 1e-38 if np.asarray(out).dtype.itemsize >= 4 else float(_finfo(out.dtype).tiny)
        return clean(y * np.expm1(2 * (ez + emax)), emax) + 2 * (n + 8) * u * y + floor
    return clean(ez + emax, emax) + (n + 8) * u + rnd(out, 4)


def _layer_norm(ctx, opdef, ins, es, outs, attrs):
    x, out = _f64(ins[0]), outs[0]
    e = es[0]
    nd = x.ndim
    ax = tuple(range(attrs["axis"] % nd, nd))
    n = _count(x, ax)
    u = unit(out)
    eps = attrs["eps"]
    X = mag(x)
    rms = opdef.name == "rms_norm"
    if rms:
        c = x
        v = np.mean(x * x, axis=ax, keepdims=True)
        ec = e + n * u * X
        dv = 2 * np.mean(X * ec, axis=ax, keepdims=True) + np.mean(ec * ec, axis=ax, keepdims=True)
    else:
        m = np.mean(x, axis=ax, keepdims=True)
        c = x - m
        v = np.mean(c * c, axis=ax, keepdims=True)
        ec = e + np.mean(e, axis=ax, keepdims=True) + 2 * n * u * np.mean(X, axis=ax, keepdims=True)
        dv = 2 * np.mean(mag(c) * ec, axis=ax, keepdims=True) + np.mean(ec * ec, axis=ax, keepdims=True)
    dv = dv + 2 * (n + 2) * u * np.mean(X * X, axis=ax, keepdims=True)
    ovf = _ovf(n * np.mean(X * X, axis=ax, keepdims=True), out)
    s_lo = np.sqrt(np.maximum(v - dv, 0.0) + eps)
    s_hi = np.sqrt(v + dv + eps)
    p = ec / s_lo + mag(c) * (1.0 / s_lo - 1.0 / s_hi)
    w = ins[1] if len(ins) > 1 and ins[1] is not None else None
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else None
    extra = [x_ for x_ in es[1:] if x_ is not None]
    y = mag(c) / np.sqrt(v + eps)
    if w is not None:
        # the normalized value, if denormal, keeps few bits, and |w| (up to 3e38) scales its
        # spacing (fuzz seed 71609: 5.5e-45 times 3e38)
        sub = float(_finfo(np.promote_types(out.dtype, np.float32)).smallest_subnormal)
        p = p * mag(w) + 2 * sub * mag(w)
        y = y * mag(w)
    r = 8 * u * (y + (mag(bias) if bias is not None else 0.0))
    # p holds the rounding of the mean and variance too: not zero even for exact operands
    return clean(p) + unbounded_if(extra, out.shape) + r + rnd(out, 2) + ovf


def _batch_norm(ctx, opdef, ins, es, outs, attrs):
    x, scale, bias, mean, var = (_f64(a) for a in ins)
    out = outs[0]
    shape = (1, -1) + (1,) * (x.ndim - 2)
    k = mag(scale).reshape(shape) / np.sqrt(var.reshape(shape) + attrs["eps"])
    y = mag(x - mean.reshape(shape)) * k
    r = 6 * unit(out) * (y + mag(bias).reshape(shape) + mag(x) * k)
    # any evaluation order: (x - mean) * scale / sqrt(var + eps), or x * k + (bias - mean * k)...
    d, sc = mag(x) + mag(mean).reshape(shape), mag(scale).reshape(shape)
    sd = np.sqrt(mag(var).reshape(shape) + attrs["eps"])
    ovf = _ovf(np.maximum(np.maximum(d, d * sc), np.maximum(d / sd, np.maximum(sc / sd, d * sc / sd))), out)
    # k = scale / sqrt(var + eps) in the denormal range keeps few bits, and x (up to 3e38) scales
    # its spacing (seed 81497: k = -3e-42, x = 1e30; PyTorch's kernel multiplies by k too)
    sub = 2 * float(_finfo(np.promote_types(out.dtype, np.float32)).smallest_subnormal) * d
    return clean(es[0] * k, es[0]) + unbounded_if(es[1:], out.shape) + r + ovf + sub


def _group_norm(ctx, opdef, ins, es, outs, attrs):
    """layer_norm's bound on each (sample, group) row, then the per-channel affine."""
    x, out = ins[0], outs[0]
    n, c, g = x.shape[0], x.shape[1], attrs["groups"]
    row = (c // g) * int(np.prod(x.shape[2:], dtype=np.int64))
    ln = type("LN", (), {"name": "layer_norm"})
    base = _layer_norm(ctx, ln, [np.reshape(x, (n, g, row))], [np.reshape(es[0], (n, g, row))],
                       [np.reshape(out, (n, g, row))], {"axis": -1, "eps": attrs["eps"]})
    p = np.reshape(base, x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    w = ins[1] if len(ins) > 1 else None
    b = ins[2] if len(ins) > 2 else None
    if w is not None:
        p = p * mag(w).reshape(shape)
    r = 4 * unit(out) * (mag(out) + (2 * mag(b).reshape(shape) if b is not None else 0.0))
    return p + r + unbounded_if([e for e in es[1:] if e is not None], out.shape)


def _resize(ctx, opdef, ins, es, outs, attrs):
    """nearest moves the error with the data; linear and cubic are weighted sums of taps whose
    weights both sides compute alike (the same float32 operations): the operands' errors times
    |w|, plus the rounding of a sum of every tap in the tensor product (in any order)."""
    if attrs["mode"] == "nearest":
        return _move(ctx, opdef, ins, es, outs, attrs)
    from ..ops.resize import axis_taps, coord_dtype
    from ..ir.types import DType
    x, out = ins[0], outs[0]
    cd = coord_dtype(DType.from_numpy(out.dtype)).numpy
    sizes, scales = attrs["sizes"], attrs["scales"]
    k = len(sizes)
    opts = {a: attrs[a] for a in ("mode", "coord", "nearest", "cubic_a", "exclude_outside", "torch_shortcuts")}
    ew, xw = _f64(es[0]), mag(x)
    taps = 1
    for j, m in enumerate(sizes):
        ax = x.ndim - k + j
        idx, w = axis_taps(x.shape[ax], int(m), None if scales is None else scales[j], cd=cd, **opts)
        taps *= len(idx)
        shape = (int(m),) + (1,) * (x.ndim - ax - 1)
        ws = [np.abs(c.astype(np.float64)).reshape(shape) for c in w]
        ew = sum(np.take(ew, i, axis=ax) * c for i, c in zip(idx, ws))
        xw = sum(np.take(xw, i, axis=ax) * c for i, c in zip(idx, ws))
    r = (taps + 2) * unit(out) * xw + _ovf(taps * xw, out)
    return clean(ew, ew) + r + rnd(out, 1)


def _topk(ctx, opdef, ins, es, outs, attrs):
    """The j-th largest of perturbed values is within the largest perturbation of its row;
    indices of an inexact operand may differ wherever values are close (unchecked)."""
    x, e = ins[0], _f64(es[0])
    vals, idx = outs
    if np.ndim(x) == 0:
        return [e.copy(), unbounded_if([e], idx.shape)]
    ax = attrs["axis"] % np.ndim(x)
    row = np.max(e, axis=ax, keepdims=True, initial=0.0)
    return [clean(np.broadcast_to(row, vals.shape), row), unbounded_if([row], idx.shape)]


def _matmul(ctx, opdef, ins, es, outs, attrs):
    a, b = ins[0], ins[1]
    ea, eb = es[0], es[1]
    out = outs[0]
    A, B = mag(a), mag(b)
    if opdef.name == "linear":
        B, eb = B.T, eb.T
    k = np.shape(a)[-1]
    p = np.matmul(ea, B) + np.matmul(A, eb) + np.matmul(ea, eb)
    # an uncertain term times an inf one: NaN (0 * inf) or +-inf
    b_inf = np.isinf(np.asarray(b, dtype=np.float64))
    b_inf = b_inf.T if opdef.name == "linear" else b_inf
    hits = np.matmul((ea > 0).astype(np.float64), b_inf.astype(np.float64)) + \
        np.matmul(np.isinf(np.asarray(a, dtype=np.float64)).astype(np.float64), (eb > 0).astype(np.float64))
    p = np.where(hits > 0, np.inf, p)
    AB = np.matmul(A, B)
    r = (k + 2) * unit(out) * AB + _ovf(AB, out)
    if opdef.name == "linear" and len(ins) > 2 and ins[2] is not None:
        r = r + 2 * unit(out) * (mag(out) + mag(ins[2]))
        p = p + es[2]
    return clean(p, p) + r + rnd(out, 2)


def _conv(ctx, opdef, ins, es, outs, attrs):
    x, w = mag(ins[0]), mag(ins[1])
    out = outs[0]
    ref = opdef.reference
    direct = opdef.name == "direct_conv2d"  # NHWC, weight [kh, kw, in/groups, out]
    if opdef.name == "conv_transpose2d":  # weight [in, out/groups, kh, kw]: in/groups * kh * kw terms
        k = np.shape(w)[0] // attrs.get("groups", 1) * int(np.prod(np.shape(w)[2:]))
    else:
        k = int(np.prod(np.shape(w)[:3] if direct else np.shape(w)[1:]))
    p = ref(ctx, _f64(es[0]), w, **attrs) + ref(ctx, x, _f64(es[1]), **attrs)
    xw = ref(ctx, x, w, **attrs)
    r = (k + 2) * unit(out) * xw + _ovf(xw, out)
    if len(ins) > 2 and ins[2] is not None:
        bshape = (1, -1, 1, 1) if not direct and attrs.get("layout", "nchw") == "nchw" else (1, 1, 1, -1)
        r = r + 2 * unit(out) * mag(ins[2]).reshape(bshape if out.ndim == 4 else bshape[1:])
    return clean(p, p) + r + rnd(out, 2)


def _grid_sample(ctx, opdef, ins, es, outs, attrs):
    """Unbounded where the grid carries error (nearest jumps; the taps move); else the taps' weights
    (at most 1 in sum for bilinear and nearest, about 1.6 for bicubic's) times x's error and the
    roundings of a 4- or 16-term sum and of the coordinates."""
    x, out = mag(ins[0]), outs[0]
    n, c = x.shape[:2]
    k, wsum = (16, 2.0) if attrs["mode"] == "bicubic" else (4, 1.0)
    big = np.max(x.reshape(n, c, -1), axis=-1, initial=0.0)[:, :, None, None]
    err = np.max(_f64(es[0]).reshape(n, c, -1), axis=-1, initial=0.0)[:, :, None, None]
    r = wsum * err + (k + 8) * unit(out) * wsum * big + np.zeros(out.shape)
    return np.where(unbounded_if([es[1]], out.shape) > 0, np.inf, r) + rnd(out, 2)


def _pool(ctx, opdef, ins, es, outs, attrs):
    x, e, out = ins[0], _f64(es[0]), outs[0]
    if opdef.name == "max_pool2d":
        pm = opdef.reference(ctx, e, **attrs)
        return clean(pm, pm)
    if opdef.name == "avg_pool2d":
        k = int(np.prod(attrs["kernel"])) if len(attrs["kernel"]) == 2 else attrs["kernel"][0] ** 2
    else:
        k = int(np.prod(np.shape(x)[-2:]))
    p = opdef.reference(ctx, e, **attrs)
    sx = opdef.reference(ctx, mag(x), **attrs)
    return clean(p, p) + (k + 2) * unit(out) * sx + _ovf(k * sx, out)


def _sdpa(ctx, opdef, ins, es, outs, attrs):
    q, k, v = (_f64(a) for a in ins[:3])
    out = outs[0]
    u = unit(out)
    E = q.shape[-1]
    scale = attrs["scale"] if attrs["scale"] is not None else 1.0 / math.sqrt(E)
    kt = np.swapaxes(k, -1, -2)
    s = np.matmul(q, kt) * scale
    QK = np.matmul(mag(q), mag(kt))
    es_ = (np.matmul(es[0], mag(kt)) + np.matmul(mag(q), np.swapaxes(es[1], -1, -2))
           + (E + 2) * u * QK + _ovf(QK, out)) * abs(scale)
    L, S_ = s.shape[-2], s.shape[-1]
    mask = np.ones((L, S_), dtype=bool)
    if attrs["is_causal"]:
        mask = np.tril(mask)
    elif len(ins) > 3 and ins[3] is not None:
        m = ins[3]
        if m.dtype == np.bool_:
            mask = mask & m
        else:
            s = s + _f64(m)
    s = np.where(mask, s, -np.inf)
    with np.errstate(all="ignore"):
        mx = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
        pz = np.exp(s - mx)
        p = pz / np.sum(pz, axis=-1, keepdims=True)
    p = np.nan_to_num(p)
    ez = np.where(mask, es_ + u * (mag(s) + mag(mx)), 0.0)
    emax = np.max(ez, axis=-1, keepdims=True, initial=0.0)
    ep = p * np.expm1(2 * (ez + emax)) + 2 * (S_ + 8) * u * p
    V = mag(v)
    r = np.matmul(ep, V) + np.matmul(p, es[2]) + (S_ + 2) * u * np.matmul(p, V)
    ovf = _ovf(np.max(V, axis=-2, keepdims=True, initial=0.0), out)
    return clean(r, r) + (S_ + 2) * u * np.matmul(p, V) + rnd(out, 4) + ovf


_F = {"exp": np.exp, "log": np.log, "sqrt": lambda x: np.sqrt(np.maximum(x, 0)),
      "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x, "tan": np.tan, "asin": np.arcsin,
      "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
      "acosh": np.arccosh, "atanh": np.arctanh}
# where an operand interval leaves the domain (or reaches a pole), any value is possible
_EDGE = {"asin": lambda x, e: (x + e >= 1) | (x - e <= -1), "acos": lambda x, e: (x + e >= 1) | (x - e <= -1),
         "atanh": lambda x, e: (x + e >= 1) | (x - e <= -1), "acosh": lambda x, e: x - e <= 1,
         "tan": lambda x, e: np.floor((x - e) / np.pi - 0.5) != np.floor((x + e) / np.pi - 0.5)}

RULES = {
    **{op: _unary(_F.get(op)) for op in ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "sigmoid",
                                         "silu", "sin", "cos", "hardswish", "gelu", "leaky_relu", "elu", "softplus",
                                         "hardsigmoid", "relu", "abs", "neg", "clamp", "tan", "asin", "acos", "atan",
                                         "sinh", "cosh", "asinh", "acosh", "atanh")},
    **{op: _binary for op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod")},
    "where": _where, "cast": _cast,
    **{op: _reduce for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "var")},
    "cumsum": _scan, "cumprod": _scan, "index_add": _index_add, "attention_backward": _attention_backward,
    "max_pool2d_backward": _max_pool_backward,
    "softmax": _softmax, "log_softmax": _softmax,
    "layer_norm": _layer_norm, "rms_norm": _layer_norm, "batch_norm": _batch_norm, "group_norm": _group_norm,
    "resize": _resize, "topk": _topk,
    "matmul": _matmul, "linear": _matmul, "conv2d": _conv, "direct_conv2d": _conv, "conv_transpose2d": _conv,
    "grid_sample": _grid_sample, "max_pool2d": _pool, "avg_pool2d": _pool, "adaptive_avg_pool2d": _pool,
    "scaled_dot_product_attention": _sdpa,
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
    if not (_isf(expected.dtype) or expected.dtype.kind == "c") or expected.dtype.name not in UNIT:
        bad = actual != expected
        unchecked = np.isinf(err) if err is not None else np.zeros(expected.shape, bool)
        bad = bad & ~unchecked
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return False, (f"{int(bad.sum())} of {bad.size} differ; first at {i}: got {actual[i]!r}, "
                           f"expected {expected[i]!r}"), int(unchecked.sum())
        return True, "", int(unchecked.sum())
    a, r = _f64(actual), _f64(expected)
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
