"""Import-time folding of known values (small int tensors that may hold symbolic dims).

Each folder takes NumPy arrays (object dtype when elements are symbolic) and
returns an array, or ``None`` when the result cannot be decided at import time
(then the converter emits a graph op instead).
"""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .common import TV, as_object, is_symbolic_array, normalize_known

FOLD_LIMIT = 1 << 16  # fold known values with at most this many elements


class _Undecided(Exception):
    pass


def knowns(ctx, idxs=None):
    """Known arrays of the given inputs (absent optional inputs skipped), or None if any is unknown."""
    idxs = range(ctx.n_inputs()) if idxs is None else idxs
    out = []
    for i in idxs:
        t = ctx.tv(i)
        if t is None:
            out.append(None)
            continue
        if t.known is None or t.known.size > FOLD_LIMIT:
            return None
        out.append(t.known)
    return out


def result(a, dtype: DType) -> TV:
    return TV(known=normalize_known(np.asarray(a) if not isinstance(a, np.ndarray) else a, dtype), dtype=dtype)


def _elementwise(fn, *arrays):
    arrs = [as_object(a) for a in arrays]
    b = np.broadcast_arrays(*arrs)
    out = np.empty(b[0].shape, dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*(x[idx] for x in b))
    return out


def _sign(ctx, x) -> int | None:
    """-1, 0, 1 or None (unknown) for an IntLike, using the module's symbol ranges."""
    if not isinstance(x, S.SymExpr):
        return (x > 0) - (x < 0)
    x = ctx.imp.module.constraints.simplify(x)
    if not isinstance(x, S.SymExpr):
        return (x > 0) - (x < 0)
    lo, hi = ctx.imp.module.constraints.bounds(x)
    if lo > 0:
        return 1
    if hi < 0:
        return -1
    if lo == hi == 0:
        return 0
    return None


def _cmp(ctx, a, b) -> int:
    s = _sign(ctx, S.add(a, S.mul(-1, b)) if (S.is_symbolic(a) or S.is_symbolic(b)) else a - b)
    if s is None:
        if ctx.imp.module.constraints.equal(a, b) is True:
            return 0
        raise _Undecided
    return s


def _nonneg(ctx, *xs) -> bool:
    return all(_sign(ctx, x) in (0, 1) for x in xs)


def _int_div(ctx, a, b):
    if not (S.is_symbolic(a) or S.is_symbolic(b)):
        if b == 0:
            raise _Undecided
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if _nonneg(ctx, a) and _sign(ctx, b) == 1:
        return S.floordiv(a, b)
    raise _Undecided


def _int_mod(ctx, a, b):
    if not (S.is_symbolic(a) or S.is_symbolic(b)):
        if b == 0:
            raise _Undecided
        return a % b
    if _nonneg(ctx, a) and _sign(ctx, b) == 1:
        return S.mod(a, b)
    raise _Undecided


def binary(ctx, op: str, a: np.ndarray, b: np.ndarray, dtype: DType):
    """Fold an ONNX binary op on known values; None when undecidable."""
    sym = is_symbolic_array(a) or is_symbolic_array(b)
    try:
        if not sym:
            with np.errstate(all="ignore"):
                if op in ("Add", "Sub", "Mul"):
                    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
                    return result(f(a, b).astype(dtype.numpy), dtype)
                if op == "Div":
                    if dtype.is_float:
                        return result((a / b).astype(dtype.numpy), dtype)
                    return result(_elementwise(lambda x, y: _int_div(ctx, x, y), a, b), dtype)
                if op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
                    f = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
                         "Greater": np.greater, "GreaterOrEqual": np.greater_equal}[op]
                    return result(f(a, b), DType.bool)
                if op in ("Max", "Min"):
                    return result((np.maximum if op == "Max" else np.minimum)(a, b), dtype)
                if op == "And":
                    return result(np.logical_and(a, b), DType.bool)
                if op == "Or":
                    return result(np.logical_or(a, b), DType.bool)
                if op == "Mod" and not dtype.is_float:
                    return result(_elementwise(lambda x, y: _int_mod(ctx, x, y), a, b), dtype)
            return None
        if dtype.is_float:
            return None
        if op == "Add":
            return result(_elementwise(S.add, a, b), dtype)
        if op == "Sub":
            return result(_elementwise(lambda x, y: S.add(x, S.mul(-1, y)), a, b), dtype)
        if op == "Mul":
            return result(_elementwise(S.mul, a, b), dtype)
        if op == "Div":
            return result(_elementwise(lambda x, y: _int_div(ctx, x, y), a, b), dtype)
        if op == "Mod":
            return result(_elementwise(lambda x, y: _int_mod(ctx, x, y), a, b), dtype)
        if op == "Max":
            return result(_elementwise(S.smax, a, b), dtype)
        if op == "Min":
            return result(_elementwise(S.smin, a, b), dtype)
        cmp = {"Equal": lambda c: c == 0, "Less": lambda c: c < 0, "LessOrEqual": lambda c: c <= 0,
               "Greater": lambda c: c > 0, "GreaterOrEqual": lambda c: c >= 0}.get(op)
        if cmp is not None:
            return result(_elementwise(lambda x, y: bool(cmp(_cmp(ctx, x, y))), a, b).astype(bool), DType.bool)
    except _Undecided:
        return None
    return None


# NaN stays NaN through each; Sign's of NaN is NaN (ONNX's, as numpy's)
_EXACT_UNARY = {"Ceil": np.ceil, "Floor": np.floor, "Round": np.round, "Sign": np.sign,
                "Relu": lambda a: np.where(a < 0, np.zeros((), a.dtype), a)}  # braze's relu: -0 stays


def unary(ctx, op: str, a: np.ndarray, dtype: DType):
    sym = is_symbolic_array(a)
    try:
        if op == "Neg":
            return result(_elementwise(lambda x: S.mul(-1, x), a) if sym else -a, dtype)
        if op == "Abs":
            if not sym:
                return result(np.abs(a), dtype)

            def f(x):
                s = _sign(ctx, x)
                if s is None:
                    raise _Undecided
                return x if s >= 0 else S.mul(-1, x)
            return result(_elementwise(f, a), dtype)
        if op == "Not" and not sym:
            return result(np.logical_not(a), DType.bool)
        if op in _EXACT_UNARY and not sym:  # exact in any dtype: the kernel would give the same bits
            with np.errstate(all="ignore"):
                return result(np.asarray(_EXACT_UNARY[op](a)).astype(dtype.numpy), dtype)
        if op == "Identity":
            return result(a, dtype)
    except _Undecided:
        return None
    return None


def cast(a: np.ndarray, to: DType):
    """Cast a known value; symbolic values stay symbolic between int dtypes."""
    if is_symbolic_array(a):
        if to in (DType.int64, DType.int32):
            return result(a, to)
        return None
    with np.errstate(all="ignore"):
        return result(np.asarray(a).astype(to.numpy), to)


def where(cond: np.ndarray, x: np.ndarray, y: np.ndarray, dtype: DType):
    if is_symbolic_array(cond):
        return None
    c = np.asarray(cond).astype(bool)
    if is_symbolic_array(x) or is_symbolic_array(y):
        out = _elementwise(lambda cc, a, b: a if cc else b, c, x, y)
        return result(out, dtype)
    return result(np.where(c, x, y), dtype)


_REDUCERS = {"ReduceProd": S.mul, "ReduceSum": S.add, "ReduceMax": S.smax, "ReduceMin": S.smin}


def reduce(op: str, a: np.ndarray, axes, keepdims: bool, dtype: DType):
    """Fold ReduceProd/Sum/Max/Min over a known int value, symbolic elements included
    (tf2onnx's Shape -> Gather -> ReduceProd -> Concat -> Reshape for every Keras Dense);
    None when it cannot be folded."""
    fn = _REDUCERS.get(op)
    if fn is None or dtype.is_float or dtype is DType.bool or a.size == 0:
        return None
    a = np.asarray(a)
    axes = tuple(range(a.ndim)) if axes is None else tuple(sorted({ax % max(a.ndim, 1) for ax in axes}))
    if a.ndim == 0:
        return result(a, dtype)
    if not is_symbolic_array(a):
        f = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[op]
        return result(f(a.astype(dtype.numpy), axis=axes, keepdims=keepdims).astype(dtype.numpy), dtype)
    x = as_object(a)
    keep = [ax for ax in range(x.ndim) if ax not in axes]
    moved = np.transpose(x, keep + list(axes)).reshape([x.shape[ax] for ax in keep] + [-1])
    out = np.empty(moved.shape[:-1], dtype=object)
    for idx in np.ndindex(out.shape):
        acc = None
        for v in moved[idx]:
            acc = v if acc is None else fn(acc, v)
        out[idx] = acc
    if keepdims:
        out = out.reshape([1 if ax in axes else d for ax, d in enumerate(x.shape)])
    return result(out, dtype)
