"""Reductions: reference vs torch eager over symbolic shapes, plus inference.

Float reductions are compared with torch run in float64 and rounded to the
input dtype: the reference accumulates in float64, so that is the value it
must match to the dtype's tolerance (torch's own float32 accumulation differs
by more than 1e-5 on long products).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braze.errors import ShapeError
from braze.ir.sym import Sym
from braze.ir.types import DType

SPEC = "b s 5"
AXES = [None, (1,), (-1,), (0, 2), (-3, -1), (2, 0, -1), ()]


def _torch_reduce(op, x, axes, keepdims):
    dims = tuple(range(x.ndim)) if axes is None else tuple(sorted({a % x.ndim for a in axes}))
    if not dims:  # numpy semantics: reduce nothing (torch would reduce everything)
        widen = op in ("reduce_sum", "reduce_prod") and not x.is_floating_point()
        return x.to(torch.int64) if widen else x
    if op == "reduce_prod":
        for d in sorted(dims, reverse=True):
            x = torch.prod(x, d, keepdim=True)
        return x if keepdims else x.reshape([n for i, n in enumerate(x.shape) if i not in dims])
    fn = {"reduce_sum": torch.sum, "reduce_mean": torch.mean, "reduce_max": torch.amax,
          "reduce_min": torch.amin}[op]
    return fn(x, dim=dims, keepdim=keepdims)


def _expected(T, fn, x, dtype):
    """torch result; floats computed in float64 then rounded to dtype."""
    t = T.to_torch(x)
    if t.is_floating_point():
        return fn(t.double()).to(T.TORCH[dtype])
    return fn(t)


def _input(T, rng, op, shape, dtype):
    if op == "reduce_prod":
        if DType[dtype].is_float:
            return rng.uniform(0.97, 1.03, size=shape).astype(T.np_dtype(dtype))
        return rng.choice(np.array([-1, 1, 1, 3]), size=shape).astype(dtype)  # wraps identically in torch
    return T.rand(rng, shape, dtype, scale=2.0)


@pytest.mark.parametrize("op,dtype", [
    (op, dt) for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")
    for dt in ("float32", "float16", "bfloat16", "float64", "int32", "int64", "bool")
    if not (op == "reduce_mean" and dt in ("int32", "int64", "bool")) and not (op == "reduce_prod" and dt == "bool")
])
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_vs_torch(T, rng, op, dtype, axes, keepdims):
    module, out = T.build(op, [SPEC], [dtype], axes=axes, keepdims=keepdims)
    for b_, s_ in T.SIZES:
        x = _input(T, rng, op, (b_, s_, 5), dtype)
        want = _expected(T, lambda t: _torch_reduce(op, t, axes, keepdims), x, dtype)
        assert out.type.dtype.name == str(want.dtype).removeprefix("torch.")
        T.check(T.run(module, x), want, what=f"{op} {dtype} axes={axes} keepdims={keepdims} b,s={b_, s_}")


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_sum"])
def test_reduce_nan_and_inf(T, op):
    module, _ = T.build(op, ["n m"], ["float32"], axes=(1,))
    x = np.array([[1, np.nan, 3], [np.inf, 1, 2], [-np.inf, 0, 5]], np.float32)
    T.check(T.run(module, x), _torch_reduce(op, torch.from_numpy(x), (1,), False))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "float16", "bool"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_vs_torch(T, rng, op, dtype, axis, keepdims):
    module, out = T.build(op, [SPEC], [dtype], axis=axis, keepdims=keepdims)
    assert out.type.dtype is DType.int64
    for b_, s_ in T.SIZES:
        # few distinct values: ties everywhere, so "first occurrence" is tested
        x = T.rand(rng, (b_, s_, 5), "int64", low=0, high=3).astype(T.np_dtype(dtype))
        want = getattr(torch, op)(T.to_torch(x).float() if dtype == "bool" else T.to_torch(x), dim=axis,
                                  keepdim=keepdims)
        T.check(T.run(module, x), want, what=f"{op} axis={axis} b,s={b_, s_}")


def test_argmax_first_occurrence_and_nan(T):
    module, _ = T.build("argmax", ["n"], ["float32"], axis=0)
    assert T.run(module, np.array([1, 3, 3, 2], np.float32)) == 1
    assert T.run(module, np.array([1, np.nan, 3, np.nan], np.float32)) == 1
    module, _ = T.build("argmin", ["n"], ["float32"], axis=0)
    assert T.run(module, np.array([2, 0, 0, 1], np.float32)) == 1


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # torch, when n <= correction
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("axes", [None, (1,), (-1, 0), (2,)])
@pytest.mark.parametrize("correction", [-1, 0, 1, 2])
@pytest.mark.parametrize("keepdims", [False, True])
def test_var_vs_torch(T, rng, dtype, axes, correction, keepdims):
    module, out = T.build("var", [SPEC], [dtype], axes=axes, correction=correction, keepdims=keepdims)
    assert out.type.dtype is DType[dtype]
    for b_, s_ in T.SIZES:
        x = (T.rand(rng, (b_, s_, 5), "float64", scale=3.0) + 10.0).astype(T.np_dtype(dtype))  # offset mean
        want = _expected(T, lambda t: torch.var(t, dim=axes, correction=correction, keepdim=keepdims), x, dtype)
        T.check(T.run(module, x), want, what=f"var axes={axes} c={correction} b,s={b_, s_}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_vs_torch(T, rng, dtype, axis, exclusive, reverse):
    module, out = T.build("cumsum", ["b s"], [dtype], axis=axis, exclusive=exclusive, reverse=reverse)
    want_dt = dtype if DType[dtype].is_float else "int64"
    assert out.type.dtype is DType[want_dt] and out.type.shape == (Sym("b"), Sym("s"))

    def tcumsum(t):
        if reverse:
            t = torch.flip(t, (axis,))
        c = torch.cumsum(t, axis)
        if exclusive:
            c = c - t.to(c.dtype)
        return torch.flip(c, (axis,)) if reverse else c

    for b_, s_ in T.SIZES:
        x = T.rand(rng, (b_, s_), dtype, low=-50, high=50)
        T.check(T.run(module, x), _expected(T, tcumsum, x, want_dt), what=f"cumsum b,s={b_, s_}")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_vs_torch_and_natively(T, rng, dtype, axis, exclusive, reverse):
    import braze

    module, out = T.build("cumprod", ["b s"], [dtype], axis=axis, exclusive=exclusive, reverse=reverse)
    want_dt = dtype if DType[dtype].is_float else "int64"
    assert out.type.dtype is DType[want_dt]

    def tcumprod(t):  # exclusive: the product of what comes before, 1 first (no division: zeros)
        t = torch.flip(t, (axis,)) if reverse else t
        if exclusive:
            one = torch.ones_like(t.narrow(axis, 0, 1))
            t = torch.cat([one, t.narrow(axis, 0, t.shape[axis] - 1)], axis)
        c = torch.cumprod(t, axis)
        return torch.flip(c, (axis,)) if reverse else c

    native = braze.compile(module) if axis == -1 else None  # one axis natively: a compile per case
    for b_, s_ in T.SIZES[:3]:
        x = T.rand(rng, (b_, s_), dtype, low=-2, high=2)
        want = _expected(T, tcumprod, x, want_dt)
        T.check(T.run(module, x), want, what=f"cumprod b,s={b_, s_}")
        if native:
            T.check(native(x), want, what=f"native cumprod b,s={b_, s_}", rtol=1e-5 if dtype == "float32" else None)


def test_cumsum_exclusive_keeps_infinities(T):
    module, _ = T.build("cumsum", ["n"], ["float32"], axis=0, exclusive=True)
    np.testing.assert_array_equal(T.run(module, np.array([1, np.inf, 2], np.float32)), [0, 1, np.inf])


# ---------------------------------------------------------------------------
# inference
# ---------------------------------------------------------------------------

b, s = Sym("b"), Sym("s")


@pytest.mark.parametrize("op,attrs,shape,dtype", [
    ("reduce_sum", dict(axes=(1,)), (b, 4), "float32"),
    ("reduce_sum", dict(axes=(1,), keepdims=True), (b, 1, 4), "float32"),
    ("reduce_mean", dict(axes=(-1, 0)), (s,), "float32"),
    ("reduce_max", dict(), (), "float32"),
    ("reduce_min", dict(keepdims=True), (1, 1, 1), "float32"),
    ("reduce_prod", dict(axes=(1, 1)), (b, 4), "float32"),
    ("reduce_sum", dict(axes=()), (b, s, 4), "float32"),
    ("argmax", dict(axis=1), (b, 4), "int64"),
    ("argmin", dict(axis=-1, keepdims=True), (b, s, 1), "int64"),
    ("var", dict(axes=(1, 2)), (b,), "float32"),
    ("cumsum", dict(axis=1), (b, s, 4), "float32"),
])
def test_infer_symbolic(T, op, attrs, shape, dtype):
    _, out = T.build(op, ["b s 4"], ["float32"], **attrs)
    assert out.type.shape == shape
    assert out.type.dtype is DType[dtype]


@pytest.mark.parametrize("dtype,op,want", [("int32", "reduce_sum", "int64"), ("bool", "reduce_sum", "int64"),
                                           ("int8", "reduce_prod", "int64"), ("int32", "reduce_max", "int32"),
                                           ("bool", "reduce_min", "bool"), ("bool", "cumsum", "int64")])
def test_infer_int_dtypes(T, dtype, op, want):
    attrs = dict(axis=0) if op == "cumsum" else {}
    _, out = T.build(op, ["b s"], [dtype], **attrs)
    assert out.type.dtype is DType[want]


@pytest.mark.parametrize("op,dtype,attrs,match", [
    ("reduce_sum", "float32", dict(axes=(3,)), "out of range"),
    ("reduce_max", "float32", dict(axes=(-4,)), "out of range"),
    ("argmax", "float32", dict(axis=3), "out of range"),
    ("cumsum", "float32", dict(axis=-4), "out of range"),
    ("reduce_mean", "int64", dict(), "float"),
    ("var", "int32", dict(), "float"),
    ("argmax", "float32", dict(), "needs attribute"),
])
def test_infer_errors(T, op, dtype, attrs, match):
    with pytest.raises(ShapeError, match=match):
        T.build(op, ["b s 4"], [dtype], **attrs)


# ---------------------------------------------------------------------------
# 0-d inputs and 0-sized dims
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op,attrs", [("reduce_sum", {}), ("reduce_mean", {}), ("reduce_max", dict(axes=(0,))),
                                      ("reduce_min", dict(axes=(-1,), keepdims=True)), ("reduce_prod", {}),
                                      ("argmax", dict(axis=0)), ("argmin", dict(axis=-1, keepdims=True)),
                                      ("var", dict(correction=0)), ("cumsum", dict(axis=0)),
                                      ("cumsum", dict(axis=-1, exclusive=True))])
def test_0d_input_is_one_element(T, op, attrs):
    module, out = T.build(op, [""], ["float32"], **attrs)
    assert out.type.shape == ()
    x = np.array(-1.25, np.float32)
    got = T.run(module, x)
    assert got.shape == ()
    want = {"argmax": 0, "argmin": 0, "var": 0.0}.get(op, 0.0 if attrs.get("exclusive") else -1.25)
    assert got == want


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_max_min_over_no_elements_give_the_identity(T, dtype):
    """ONNX's rule (and what the native kernels compute): -inf / +inf, the int limits, False / True."""
    x = np.zeros((0, 3), T.np_dtype(dtype))
    lo, hi = {"float32": (-np.inf, np.inf), "int32": (np.iinfo(np.int32).min, np.iinfo(np.int32).max),
              "bool": (False, True)}[dtype]
    for op, want in (("reduce_max", lo), ("reduce_min", hi)):
        module, _ = T.build(op, ["0 3"], [dtype], axes=(0,))
        got = T.run(module, x)
        assert got.dtype == x.dtype and got.shape == (3,)
        np.testing.assert_array_equal(got, np.full(3, want, x.dtype))
    module, _ = T.build("softmax", ["0 3"], ["float32"], axis=0)
    assert T.run(module, np.zeros((0, 3), np.float32)).shape == (0, 3)


def test_argmax_over_a_static_empty_dim_is_an_error(T):
    with pytest.raises(ShapeError, match="size 0"):
        T.build("argmax", ["2 0"], ["float32"], axis=1)
