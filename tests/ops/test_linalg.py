"""matmul and linear against torch, with symbolic dims."""

import numpy as np
import pytest
import torch

import braze.reference as R
from braze.errors import InputError, ShapeError
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, assert_close_scaled, build, concrete_shape, rand

b_, s_, h_, k_, t_ = Sym("b"), Sym("s"), Sym("h"), Sym("k"), Sym("t")
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("ashape,bshape,want", [
    ((b_, s_, 768), (768, 96), (b_, s_, 96)),
    ((s_, 7), (7,), (s_,)),
    ((7,), (b_, 7, s_), (b_, s_)),
    ((7,), (7,), ()),
    ((b_, 1, s_, 5), (h_, 5, 3), (b_, h_, s_, 3)),
    ((b_, h_, s_, 8), (b_, h_, 8, s_), (b_, h_, s_, s_)),
    ((1, 1), (1, s_), (1, s_)),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul(ashape, bshape, want, dtype):
    dt = "f32" if dtype == "float32" else "f64"
    m, out = build([tensor(dt, *ashape), tensor(dt, *bshape)], lambda b, x, y: b.matmul(x, y))
    assert out.type.shape == want
    for env in ({"b": 1, "s": 1, "h": 1}, {"b": 2, "s": 13, "h": 3}, {"b": 3, "s": 64, "h": 2}):
        a, c = rand(RNG, concrete_shape(ashape, env), dtype), rand(RNG, concrete_shape(bshape, env), dtype)
        got = R.run(m, a, c)
        assert_close_scaled(got, torch.matmul(torch.from_numpy(a), torch.from_numpy(c)).numpy(), dtype)


def test_matmul_large_k():
    m, out = build([tensor("f32", s_, 4096), tensor("f32", 4096, 33)], lambda b, x, y: b.matmul(x, y))
    a, c = rand(RNG, (5, 4096)), rand(RNG, (4096, 33))
    ref = torch.from_numpy(a) @ torch.from_numpy(c)
    assert_close_scaled(R.run(m, a, c), ref.numpy())


def test_matmul_float16():
    m, _ = build([tensor("f16", s_, 32), tensor("f16", 32, 8)], lambda b, x, y: b.matmul(x, y))
    a, c = rand(RNG, (9, 32), "float16"), rand(RNG, (32, 8), "float16")
    got = R.run(m, a, c)
    assert got.dtype == np.float16
    ref = (torch.from_numpy(a).float() @ torch.from_numpy(c).float()).half().numpy()
    assert_close(got, ref, "float16", rtol=2e-2, atol=2e-2)


def test_matmul_int():
    m, out = build([tensor("i64", s_, 4), tensor("i64", 4, 3)], lambda b, x, y: b.matmul(x, y))
    a, c = RNG.integers(-5, 5, (6, 4)), RNG.integers(-5, 5, (4, 3))
    np.testing.assert_array_equal(R.run(m, a, c), a @ c)


def test_matmul_contracted_mismatch():
    with pytest.raises(ShapeError, match="contracted dims 768 and 512 differ"):
        build([tensor("f32", b_, s_, 768), tensor("f32", 512, 4)], lambda b, x, y: b.matmul(x, y))
    with pytest.raises(ShapeError, match="contracted"):
        build([tensor("f32", s_, 2 * s_), tensor("f32", s_, 4)], lambda b, x, y: b.matmul(x, y))


def test_matmul_symbolic_contraction_assumed():
    m, out = build([tensor("f32", s_, k_), tensor("f32", t_, 4)], lambda b, x, y: b.matmul(x, y))
    assert out.type.shape == (s_, 4)
    assert m.constraints.equal(k_, t_) is True
    a, c = rand(RNG, (3, 5)), rand(RNG, (5, 4))
    assert_close(R.run(m, a, c), a @ c)
    with pytest.raises(InputError):
        R.run(m, rand(RNG, (3, 5)), rand(RNG, (6, 4)))


def test_matmul_rank0_error():
    with pytest.raises(ShapeError):
        build([tensor("f32"), tensor("f32", 3)], lambda b, x, y: b.matmul(x, y))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xshape", [(b_, s_, 64), (s_, 64), (64,)])
def test_linear(bias, xshape):
    w = rand(RNG, (48, 64))
    bv = rand(RNG, (48,))

    def fn(b, x):
        ins = [x, b.constant(w)] + ([b.constant(bv)] if bias else [])
        return b.linear(*ins)

    m, out = build([tensor("f32", *xshape)], fn)
    assert out.type.shape == xshape[:-1] + (48,)
    for env in ({"b": 1, "s": 1}, {"b": 3, "s": 17}):
        x = rand(RNG, concrete_shape(xshape, env))
        ref = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w),
                                         torch.from_numpy(bv) if bias else None)
        assert_close_scaled(R.run(m, x), ref.numpy())


def test_linear_errors():
    w = rand(RNG, (48, 64))
    with pytest.raises(ShapeError, match="contracted dims 32 and 64 differ"):
        build([tensor("f32", s_, 32)], lambda b, x: b.linear(x, b.constant(w)))
    with pytest.raises(ShapeError, match="weight must be 2-D"):
        build([tensor("f32", s_, 64)], lambda b, x: b.linear(x, b.constant(rand(RNG, (2, 48, 64)))))
    with pytest.raises(ShapeError):
        build([tensor("f32", s_, 64)], lambda b, x: b.linear(x, b.constant(w), b.constant(rand(RNG, (47,)))))
