"""gather, gather_elements, index_add, tril, triu against torch/numpy with symbolic dims."""

import numpy as np
import pytest
import torch

import braze.reference as R
from braze.errors import BrazeError, ShapeError
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build, rand

b_, s_, t_, v_ = Sym("b"), Sym("s"), Sym("t"), Sym("v")
RNG = np.random.default_rng(3)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", ["i64", "i32"])
def test_gather(axis, idx_dtype):
    xshape = (v_, 4, b_)
    m, out = build([tensor("f32", *xshape), tensor(idx_dtype, s_, t_)],
                   lambda b, x, i: b.gather(x, i, axis=axis))
    ax = axis % 3
    assert out.type.shape == xshape[:ax] + (s_, t_) + xshape[ax + 1:]
    for vv, bb, ss, tt in ((1, 1, 1, 1), (7, 2, 3, 5), (50, 3, 2, 1)):
        x = rand(RNG, (vv, 4, bb))
        n = x.shape[ax]
        idx = RNG.integers(-n, n, (ss, tt)).astype(np.dtype(idx_dtype.replace("i", "int")))
        got = R.run(m, x, idx)
        xt, it = torch.from_numpy(x), torch.from_numpy(idx.astype(np.int64) % n)
        want = xt.index_select(ax, it.reshape(-1)).reshape(got.shape)
        assert_close(got, want.numpy())
        np.testing.assert_array_equal(got, np.take(x, idx, axis=ax))


def test_gather_embedding_and_scalar_index():
    table = rand(RNG, (100, 16))
    m, out = build([tensor("i64", b_, s_)], lambda b, i: b.gather(b.constant(table), i, axis=0))
    assert out.type.shape == (b_, s_, 16)
    idx = RNG.integers(0, 100, (2, 9))
    assert_close(R.run(m, idx), torch.nn.functional.embedding(torch.from_numpy(idx), torch.from_numpy(table)).numpy())
    m, out = build([tensor("f32", b_, s_, 8), tensor("i64")], lambda b, x, i: b.gather(x, i, axis=1))
    assert out.type.shape == (b_, 8)
    x = rand(RNG, (2, 5, 8))
    assert_close(R.run(m, x, np.array(-1)), torch.from_numpy(x)[:, -1].numpy())


def test_gather_errors():
    with pytest.raises(ShapeError, match="integer"):
        build([tensor("f32", s_, 3), tensor("f32", 2)], lambda b, x, i: b.gather(x, i, axis=0))
    with pytest.raises(ShapeError, match="out of range"):
        build([tensor("f32", s_, 3), tensor("i64", 2)], lambda b, x, i: b.gather(x, i, axis=2))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    m, out = build([tensor("f32", b_, s_, 3), tensor("i64", b_, t_, 3)],
                   lambda b, x, i: b.gather_elements(x, i, axis=axis))
    assert out.type.shape == (b_, t_, 3)
    ax = axis % 3
    for bb, ss, tt in ((1, 1, 1), (2, 6, 4), (3, 5, 5)):
        x = rand(RNG, (bb, ss, 3))
        ishape = (bb, tt, 3)
        if ax != 1 and tt > ss:
            continue
        idx = RNG.integers(0, x.shape[ax], ishape)
        want = torch.gather(torch.from_numpy(x), ax, torch.from_numpy(idx)).numpy()
        assert_close(R.run(m, x, idx), want)


def test_gather_elements_negative_and_errors():
    m, _ = build([tensor("f32", s_, 4), tensor("i64", s_, 2)], lambda b, x, i: b.gather_elements(x, i, axis=1))
    x = rand(RNG, (3, 4))
    idx = RNG.integers(-4, 4, (3, 2))
    want = torch.gather(torch.from_numpy(x), 1, torch.from_numpy(idx % 4)).numpy()
    assert_close(R.run(m, x, idx), want)
    with pytest.raises(ShapeError, match="same rank"):
        build([tensor("f32", s_, 4), tensor("i64", s_)], lambda b, x, i: b.gather_elements(x, i, axis=0))


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("k", [0, 1, -2])
def test_tri(op, k):
    m, out = build([tensor("f32", b_, s_, t_)], lambda b, x: b.op(op, [x], k=k))
    assert out.type.shape == (b_, s_, t_)
    for bb, ss, tt in ((1, 1, 1), (2, 5, 7), (1, 8, 3)):
        x = rand(RNG, (bb, ss, tt))
        assert_close(R.run(m, x), getattr(torch, op)(torch.from_numpy(x), k).numpy())


def test_tri_symbolic_k_and_errors():
    m, out = build([tensor("f32", s_, t_), tensor("f32", v_)], lambda b, x, y: b.triu(x, k=v_))
    x = rand(RNG, (6, 6))
    assert_close(R.run(m, x, rand(RNG, (2,))), np.triu(x, 2))
    m, out = build([tensor("bool", s_, s_)], lambda b, x: b.tril(x))
    x = RNG.random((4, 4)) > 0.3
    np.testing.assert_array_equal(R.run(m, x), torch.tril(torch.from_numpy(x)).numpy())
    with pytest.raises(ShapeError, match="rank"):
        build([tensor("f32", s_)], lambda b, x: b.tril(x))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_index_add_reference_is_torch_s(axis):
    """Repeated indices add up, in index order; symbolic dims at 1 and odd sizes."""
    m, out = build([tensor("f32", b_, v_, 3), tensor("i64", s_), tensor("f32", b_, s_, 3) if axis == 1 else
                    tensor("f32", s_, v_, 3) if axis == 0 else tensor("f32", b_, v_, s_)],
                   lambda b, x, i, s: b.index_add(x, i, s, axis=axis))
    assert out.type.shape == (b_, v_, 3)
    for bb, vv, ss in ((1, 1, 1), (2, 5, 9), (3, 7, 4)):
        x = rand(RNG, (bb, vv, 3))
        ax = axis % 3
        n = x.shape[ax]
        src_shape = [bb, vv, 3]
        src_shape[ax] = ss
        src = rand(RNG, tuple(src_shape))
        idx = RNG.integers(0, n, ss)
        want = torch.from_numpy(x).index_add(ax, torch.from_numpy(idx), torch.from_numpy(src))
        assert_close(R.run(m, x, idx, src), want.numpy())


def test_index_add_errors():
    with pytest.raises(ShapeError, match="1-D"):
        build([tensor("f32", v_, 3), tensor("i64", 2, 2), tensor("f32", 4, 3)], lambda b, x, i, s: b.index_add(x, i, s))
    with pytest.raises(ShapeError, match="integer"):
        build([tensor("f32", v_, 3), tensor("f32", s_), tensor("f32", s_, 3)], lambda b, x, i, s: b.index_add(x, i, s))
    with pytest.raises(ShapeError, match="dim 1 is 4"):
        build([tensor("f32", v_, 3), tensor("i64", s_), tensor("f32", s_, 4)], lambda b, x, i, s: b.index_add(x, i, s))
    with pytest.raises(ShapeError, match="one dtype"):
        build([tensor("f32", v_, 3), tensor("i64", s_), tensor("f64", s_, 3)], lambda b, x, i, s: b.index_add(x, i, s))
    m, _ = build([tensor("f32", v_, 3), tensor("i64", s_), tensor("f32", s_, 3)],
                 lambda b, x, i, s: b.index_add(x, i, s))
    with pytest.raises(BrazeError, match="out of range"):
        R.run(m, rand(RNG, (2, 3)), np.array([2]), rand(RNG, (1, 3)))
