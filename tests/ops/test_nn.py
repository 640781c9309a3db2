"""Normalization ops: reference vs torch eager over symbolic shapes, plus inference.

Expected values come from torch in float64, rounded to the input dtype, and
also from torch in the input dtype itself for float32 (so the reference agrees
with what eager users see, to float32 tolerance).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from braze.errors import InputError, ShapeError
from braze.ir.sym import Sym
from braze.ir.types import DType

FLOATS = ["float32", "float16", "bfloat16", "float64"]


def _expected(T, fn, arrays, dtype):
    ts = [None if a is None else T.to_torch(a).double() for a in arrays]
    return fn(*ts).to(T.TORCH[dtype])


def _check_both(T, got, fn, arrays, dtype, what):
    T.check(got, _expected(T, fn, arrays, dtype), what=what)
    if dtype == "float32":  # torch's own float32 kernel, too
        T.check(got, fn(*[None if a is None else T.to_torch(a) for a in arrays]), what=what + " (f32 eager)",
                rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_softmax_vs_torch(T, rng, op, dtype, axis, scale):
    module, out = T.build(op, ["b s 3"], [dtype], axis=axis)
    assert out.type.dtype is DType[dtype] and out.type.shape == (Sym("b"), Sym("s"), 3)
    fn = getattr(torch, op)
    for b_, s_ in T.SIZES:
        x = T.rand(rng, (b_, s_, 3), dtype, scale=scale)  # scale 100: exp overflows without the max shift
        _check_both(T, T.run(module, x), lambda t: fn(t, dim=axis), [x], dtype, f"{op} axis={axis} {(b_, s_)}")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_masked_rows(T, op):
    module, _ = T.build(op, ["n m"], ["float32"])
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [1e30, 0.0, -1e30]], np.float32)
    T.check(T.run(module, x), getattr(torch, op)(torch.from_numpy(x), dim=-1))


# (x spec, axis, weight/bias spec): normalized shape is x.shape[axis:]
LN_CASES = [("b s 8", -1, "8"), ("b s 8", 2, "8"), ("b s 8", -2, "s 8"), ("b s", 0, "b s"), ("b s 8", -1, None)]


@pytest.mark.parametrize("xspec,axis,wspec", LN_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_vs_torch(T, rng, xspec, axis, wspec, dtype, bias):
    eps = 1e-5 if bias else 1e-3
    specs = [xspec, wspec, wspec if (bias and wspec) else None]
    module, out = T.build("layer_norm", specs, [dtype] * 3, axis=axis, eps=eps)
    assert out.type.shape == T.parse_dims(xspec) and out.type.dtype is DType[dtype]
    for b_, s_ in T.SIZES:
        env = {"b": b_, "s": s_}
        shape = T.concrete(xspec, env)
        x = (T.rand(rng, shape, "float64", scale=2.0) + 3.0).astype(T.np_dtype(dtype))
        w = None if specs[1] is None else T.rand(rng, T.concrete(specs[1], env), dtype)
        bb = None if specs[2] is None else T.rand(rng, T.concrete(specs[2], env), dtype)
        norm_shape = shape[axis % len(shape):]
        got = T.run(module, x, w, bb)
        _check_both(T, got, lambda t, tw, tb: F.layer_norm(t, norm_shape, tw, tb, eps), [x, w, bb], dtype,
                    f"layer_norm {xspec} axis={axis} {env}")


@pytest.mark.parametrize("xspec,axis,wspec", LN_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_vs_torch(T, rng, xspec, axis, wspec, dtype):
    module, out = T.build("rms_norm", [xspec, wspec], [dtype] * 2, axis=axis)
    assert out.type.shape == T.parse_dims(xspec) and out.type.dtype is DType[dtype]
    for b_, s_ in T.SIZES:
        env = {"b": b_, "s": s_}
        shape = T.concrete(xspec, env)
        x = T.rand(rng, shape, dtype, scale=2.0)
        w = None if wspec is None else T.rand(rng, T.concrete(wspec, env), dtype)
        norm_shape = shape[axis % len(shape):]
        got = T.run(module, x, w)
        _check_both(T, got, lambda t, tw: F.rms_norm(t, norm_shape, tw, 1e-6), [x, w], dtype,
                    f"rms_norm {xspec} axis={axis} {env}")


@pytest.mark.parametrize("xspec", ["b 3", "b 3 s", "b 3 s 5"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_vs_torch(T, rng, xspec, dtype):
    specs = [xspec, "3", "3", "3", "3"]
    module, out = T.build("batch_norm", specs, [dtype] * 5, eps=1e-3)
    assert out.type.shape == T.parse_dims(xspec)
    for b_, s_ in T.SIZES:
        x = T.rand(rng, T.concrete(xspec, {"b": b_, "s": s_}), dtype, scale=2.0)
        scale, bias, mean = (T.rand(rng, (3,), dtype) for _ in range(3))
        var = T.rand(rng, (3,), dtype, low=0.1, high=2.0)
        got = T.run(module, x, scale, bias, mean, var)
        _check_both(T, got, lambda t, w, bb, m, v: F.batch_norm(t, m, v, w, bb, training=False, eps=1e-3),
                    [x, scale, bias, mean, var], dtype, f"batch_norm {xspec} {(b_, s_)}")


# ---------------------------------------------------------------------------
# inference
# ---------------------------------------------------------------------------


def test_layer_norm_symbolic_weight_is_checked_at_run_time(T):
    module, out = T.build("layer_norm", ["b s", "t", None], ["float32", "float32", None])
    assert out.type.shape == (Sym("b"), Sym("s"))
    x = np.ones((2, 4), np.float32)
    T.run(module, x, np.ones(4, np.float32))
    with pytest.raises(InputError):
        T.run(module, x, np.ones(5, np.float32))


@pytest.mark.parametrize("op,specs,dtypes,attrs,match", [
    ("softmax", ["b s"], ["int64"], {}, "floating-point"),
    ("log_softmax", ["b s"], ["float32"], {"axis": 2}, "out of range"),
    ("layer_norm", ["b s 8", "4"], ["float32", "float32"], {}, "must be equal"),
    ("layer_norm", ["b s 8", "s 8"], ["float32", "float32"], {}, "normalized shape"),
    ("layer_norm", ["b s 8", "8"], ["float32", "int32"], {}, "weight must be a floating"),
    ("layer_norm", ["b s 8"], ["float32"], {"axis": -4}, "out of range"),
    ("rms_norm", ["b s 8", "8 1"], ["float32", "float32"], {}, "normalized shape"),
    ("rms_norm", ["b s"], ["int32"], {}, "floating-point"),
    ("batch_norm", ["b"] + ["1"] * 4, ["float32"] * 5, {}, "rank >= 2"),
    ("batch_norm", ["b 3 s", "4", "3", "3", "3"], ["float32"] * 5, {}, "must be equal"),
    ("batch_norm", ["b 3 s", "3 1", "3", "3", "3"], ["float32"] * 5, {}, "1-D"),
])
def test_infer_errors(T, op, specs, dtypes, attrs, match):
    with pytest.raises(ShapeError, match=match):
        T.build(op, specs, dtypes, **attrs)


# ---------------------------------------------------------------------------
# group_norm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("xspec,groups", [("b 6 s", 3), ("b 6 s", 1), ("b 6 s", 6), ("b 4 s 3", 2), ("b 4", 2)])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_vs_torch(T, rng, xspec, groups, dtype, affine):
    c = int(xspec.split()[1])
    specs = [xspec] + (["%d" % c, "%d" % c] if affine else [])
    module, out = T.build("group_norm", specs, [dtype] * len(specs), groups=groups, eps=1e-3)
    assert out.type == module.main.params[0].type
    for b_, s_ in T.SIZES:
        env = {"b": b_, "s": s_}
        x = T.rand(rng, T.concrete(xspec, env), dtype, scale=2.0)
        ps = [T.rand(rng, (c,), dtype) for _ in range(2)] if affine else []
        got = T.run(module, x, *ps)
        _check_both(T, got, lambda t, *p: torch.group_norm(t, groups, *p, eps=1e-3), [x] + ps, dtype,
                    f"group_norm {xspec} g={groups} {env}")


@pytest.mark.parametrize("specs,attrs,match", [
    (["b 6 s"], dict(groups=4), "not divisible"),
    (["b"], dict(groups=1), "rank >= 2"),
    (["b 6 s", "5"], dict(groups=3), "weight length"),
    (["b 6 s", "6 1"], dict(groups=3), "1-D"),
])
def test_group_norm_infer_errors(T, specs, attrs, match):
    with pytest.raises(ShapeError, match=match):
        T.build("group_norm", specs, ["float32"] * len(specs), **attrs)


@pytest.mark.parametrize("shape", [(0, 6, 3), (2, 6, 0), (0, 6, 0)])
def test_group_norm_of_an_empty_batch_or_spatial_dim_is_empty(T, shape):
    """Found by the fuzzer: the reference reshaped to (N, groups, -1), which NumPy refuses for 0 elements."""
    from braze.ops import get_op
    from braze.ops.registry import RefCtx
    x = np.zeros(shape, np.float32)
    w = np.ones(6, np.float32)
    got = get_op("group_norm").reference(RefCtx({}), x, w, w, groups=3, eps=1e-5)
    want = torch.group_norm(torch.from_numpy(x), 3, torch.from_numpy(w), torch.from_numpy(w)).numpy()
    assert got.shape == want.shape == shape and got.dtype == np.float32
