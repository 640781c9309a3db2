"""Shape ops against torch/numpy with symbolic dims."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import braze.reference as R
from braze.errors import InputError, ShapeError
from braze.ir import sym as S
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build, concrete_shape, rand

b_, s_, t_, h_ = Sym("b"), Sym("s"), Sym("t"), Sym("h")
RNG = np.random.default_rng(2)
ENVS = ({"b": 1, "s": 1, "t": 1, "h": 1}, {"b": 2, "s": 5, "t": 3, "h": 4}, {"b": 3, "s": 17, "t": 8, "h": 2})


def run_all(m, shapes, ref_fn, envs=ENVS, dtype="float32"):
    for env in envs:
        xs = [rand(RNG, concrete_shape(sh, env), dtype) for sh in shapes]
        got = R.run(m, *xs)
        want = ref_fn(*[torch.from_numpy(x) for x in xs])
        if isinstance(want, (tuple, list)):
            for g, w in zip(got if isinstance(got, tuple) else (got,), want):
                assert_close(g, w.numpy())
        else:
            assert_close(got, want.numpy())


# --- reshape -----------------------------------------------------------------

def test_reshape_symbolic():
    m, out = build([tensor("f32", b_, s_, 6)], lambda b, x: b.reshape(x, shape=(b_, s_ * 2, 3)))
    assert out.type.shape == (b_, 2 * s_, 3)
    run_all(m, [(b_, s_, 6)], lambda x: x.reshape(x.shape[0], -1, 3))
    m, out = build([tensor("f32", b_, s_, 6)], lambda b, x: b.reshape(x, shape=(b_ * s_ * 6,)))
    assert out.type.shape == (6 * b_ * s_,)
    run_all(m, [(b_, s_, 6)], lambda x: x.reshape(-1))
    m, out = build([tensor("f32", 1, 1)], lambda b, x: b.reshape(x, shape=()))
    assert R.run(m, np.ones((1, 1), np.float32)).shape == ()


def test_reshape_errors_and_assumed():
    with pytest.raises(ShapeError, match=r"cannot reshape \[b, 6\] into \[b, 4\]"):
        build([tensor("f32", b_, 6)], lambda b, x: b.reshape(x, shape=(b_, 4)))
    with pytest.raises(ShapeError, match="no -1"):
        build([tensor("f32", b_, 6)], lambda b, x: b.reshape(x, shape=(-1, 6)))
    m, out = build([tensor("f32", s_, 4), tensor("f32", t_)], lambda b, x, y: b.reshape(x, shape=(t_, 2)))
    assert out.type.shape == (t_, 2)
    assert m.constraints.equal(4 * s_, 2 * t_) is True
    assert R.run(m, rand(RNG, (3, 4)), rand(RNG, (6,))).shape == (6, 2)
    with pytest.raises(InputError):
        R.run(m, rand(RNG, (3, 4)), rand(RNG, (5,)))


# --- permute / expand --------------------------------------------------------

@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (-1, 0, 1)])
def test_permute(perm):
    m, out = build([tensor("f32", b_, s_, 3)], lambda b, x: b.permute(x, perm=perm))
    assert out.type.shape == tuple((b_, s_, 3)[p] for p in perm)
    run_all(m, [(b_, s_, 3)], lambda x: x.permute(*[p % 3 for p in perm]))


def test_permute_errors():
    with pytest.raises(ShapeError, match="permutation"):
        build([tensor("f32", b_, s_)], lambda b, x: b.permute(x, perm=(0, 0)))
    with pytest.raises(ShapeError, match="rank"):
        build([tensor("f32", b_, s_)], lambda b, x: b.permute(x, perm=(0, 1, 2)))


def test_expand():
    m, out = build([tensor("f32", 1, s_, 1)], lambda b, x: b.expand(x, shape=(b_, 2, -1, h_)))
    assert out.type.shape == (b_, 2, s_, h_)
    # b and h are not bound by the inputs here, so add inputs that bind them
    m, out = build([tensor("f32", 1, s_, 1), tensor("f32", b_, h_)],
                   lambda b, x, y: b.expand(x, shape=(b_, 2, -1, h_)))
    run_all(m, [(1, s_, 1), (b_, h_)], lambda x, y: x.expand(y.shape[0], 2, -1, y.shape[1]))
    m, out = build([tensor("f32", s_, 1)], lambda b, x: b.expand(x, shape=(s_, 5)))
    assert out.type.shape == (s_, 5)
    run_all(m, [(s_, 1)], lambda x: x.expand(-1, 5))


def test_expand_errors():
    with pytest.raises(ShapeError, match="cannot expand dim 0 of size 3 to 4"):
        build([tensor("f32", 3, 1)], lambda b, x: b.expand(x, shape=(4, 2)))
    with pytest.raises(ShapeError):
        build([tensor("f32", 3, 1)], lambda b, x: b.expand(x, shape=(3,)))


# --- concat / split ----------------------------------------------------------

def test_concat():
    m, out = build([tensor("f32", b_, s_, 4), tensor("f32", b_, t_, 4), tensor("f32", b_, 1, 4)],
                   lambda b, x, y, z: b.concat(x, y, z, axis=1))
    assert out.type.shape == (b_, s_ + t_ + 1, 4)
    run_all(m, [(b_, s_, 4), (b_, t_, 4), (b_, 1, 4)], lambda x, y, z: torch.cat([x, y, z], 1))
    m, out = build([tensor("f32", s_, 2), tensor("f32", s_, 3)], lambda b, x, y: b.concat(x, y, axis=-1))
    assert out.type.shape == (s_, 5)
    run_all(m, [(s_, 2), (s_, 3)], lambda x, y: torch.cat([x, y], -1))


def test_concat_promotes_and_errors():
    m, out = build([tensor("f32", s_), tensor("f64", 2)], lambda b, x, y: b.concat(x, y, axis=0))
    assert out.type.dtype.name == "float64" and out.type.shape == (s_ + 2,)
    assert R.run(m, rand(RNG, (3,)), rand(RNG, (2,), "float64")).dtype == np.float64
    with pytest.raises(ShapeError, match="differ in dim 1"):
        build([tensor("f32", s_, 2), tensor("f32", s_, 3)], lambda b, x, y: b.concat(x, y, axis=0))
    with pytest.raises(ShapeError, match="ranks"):
        build([tensor("f32", s_, 2), tensor("f32", s_)], lambda b, x, y: b.concat(x, y, axis=0))


def test_split():
    m, out = build([tensor("f32", b_, s_), tensor("f32", t_)], lambda b, x, y: b.split(x, axis=1, sizes=(t_, s_ - t_)))
    assert [o.type.shape for o in out] == [(b_, t_), (b_, s_ - t_)]
    for bb, ss, tt in ((1, 1, 1), (2, 5, 2), (3, 9, 9)):
        x = rand(RNG, (bb, ss))
        got = R.run(m, x, rand(RNG, (tt,)))
        for g, w in zip(got, torch.split(torch.from_numpy(x), [tt, ss - tt], 1)):
            assert_close(g, w.numpy())
    m, out = build([tensor("f32", 10, s_)], lambda b, x: b.split(x, axis=0, sizes=(3, 3, 4)))
    assert [o.type.shape for o in out] == [(3, s_), (3, s_), (4, s_)]
    run_all(m, [(10, s_)], lambda x: torch.split(x, [3, 3, 4], 0))


def test_split_errors():
    with pytest.raises(ShapeError, match="sum to 7"):
        build([tensor("f32", 10, s_)], lambda b, x: b.split(x, axis=0, sizes=(3, 4)))
    m, out = build([tensor("f32", s_)], lambda b, x: b.split(x, axis=0, sizes=(2, 3)))
    assert m.constraints.equal(s_, 5) is True
    with pytest.raises(InputError):
        R.run(m, rand(RNG, (4,)))


# --- slice -------------------------------------------------------------------

BIG = 2 ** 63 - 1
SLICES = [(0, BIG, 1), (1, BIG, 1), (-3, BIG, 1), (0, -1, 1), (1, -1, 1), (2, 5, 1), (-4, -1, 1), (0, 3, 2),
          (1, BIG, 3), (-BIG, BIG, 1), (5, 2, 1), (BIG, -BIG, -1), (-1, -BIG, -2), (4, 1, -1), (-2, 0, -1)]


@pytest.mark.parametrize("start,end,step", SLICES)
def test_slice_symbolic(start, end, step):
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.slice(x, axis=1, start=start, end=end, step=step))
    for n in (1, 2, 3, 4, 6, 11):
        x = rand(RNG, (2, n))
        want = x[:, start:end:step]
        assert concrete_shape(out.type.shape, {"b": 2, "s": n}) == want.shape
        got = R.run(m, x)
        np.testing.assert_array_equal(got, want)
        if step > 0 and abs(start) < 2 ** 62:
            assert_close(got, torch.from_numpy(x)[:, start:end:step].numpy())


def test_slice_shape_expressions():
    def shape(start, end, step=1):
        return build([tensor("f32", s_)], lambda b, x: b.slice(x, axis=0, start=start, end=end, step=step))[1].type.shape[0]

    assert shape(0, BIG) == s_
    assert shape(1, BIG) == s_ - 1
    assert shape(1, -1) == S.smax(0, s_ - 2)
    assert shape(-3, BIG) == S.smin(3, s_)
    assert shape(0, 4) == S.smin(4, s_)
    assert shape(0, s_) == s_
    assert shape(3, BIG) == S.smax(0, s_ - 3)


def test_slice_symbolic_bounds():
    m, out = build([tensor("f32", b_, s_), tensor("f32", t_)],
                   lambda b, x, y: b.slice(x, axis=1, start=t_, end=BIG))
    assert t_ in S.free_syms(out.type.shape[1]) and s_ in S.free_syms(out.type.shape[1])
    for n, k in ((5, 2), (5, 5), (3, 7)):
        x = rand(RNG, (2, n))
        np.testing.assert_array_equal(R.run(m, x, rand(RNG, (k,))), x[:, k:])
    m, out = build([tensor("f32", s_, 3)], lambda b, x: b.slice(x, axis=0, start=0, end=s_ - 1))
    assert out.type.shape == (s_ - 1, 3)
    x = rand(RNG, (4, 3))
    np.testing.assert_array_equal(R.run(m, x), x[:3])


def test_slice_errors():
    with pytest.raises(ShapeError, match="step"):
        build([tensor("f32", s_)], lambda b, x: b.slice(x, axis=0, start=0, end=3, step=0))
    with pytest.raises(ShapeError, match="may be negative"):
        build([tensor("f32", s_), tensor("f32", t_)], lambda b, x, y: b.slice(x, axis=0, start=s_ - t_, end=BIG))
    with pytest.raises(ShapeError, match="out of range"):
        build([tensor("f32", s_)], lambda b, x: b.slice(x, axis=1, start=0, end=3))


# --- unsqueeze / squeeze / flatten -------------------------------------------

def test_unsqueeze_squeeze():
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.unsqueeze(x, axes=(0, -1)))
    assert out.type.shape == (1, b_, s_, 1)
    run_all(m, [(b_, s_)], lambda x: x[None, :, :, None])
    m, out = build([tensor("f32", 1, b_, 1, s_)], lambda b, x: b.squeeze(x, axes=(0, 2)))
    assert out.type.shape == (b_, s_)
    run_all(m, [(1, b_, 1, s_)], lambda x: x.squeeze(2).squeeze(0))
    m, out = build([tensor("f32", 1, 3, 1)], lambda b, x: b.squeeze(x))
    assert out.type.shape == (3,)
    with pytest.raises(ShapeError, match="ambiguous"):
        build([tensor("f32", 1, s_)], lambda b, x: b.squeeze(x))
    with pytest.raises(ShapeError, match="not 1"):
        build([tensor("f32", 1, 3)], lambda b, x: b.squeeze(x, axes=(1,)))


@pytest.mark.parametrize("start,end", [(1, -1), (0, -1), (0, 1), (2, 3), (1, 1)])
def test_flatten(start, end):
    shp = (b_, s_, 3, h_)
    m, out = build([tensor("f32", *shp)], lambda b, x: b.flatten(x, start_axis=start, end_axis=end))
    e = end % 4
    assert out.type.shape == shp[:start] + (S.prod(shp[start:e + 1]),) + shp[e + 1:]
    run_all(m, [shp], lambda x: torch.flatten(x, start, end))


# --- pad / tile --------------------------------------------------------------

@pytest.mark.parametrize("mode,tmode", [("constant", "constant"), ("reflect", "reflect"), ("edge", "replicate")])
def test_pad(mode, tmode):
    pads = (0, 0, 1, 2, 0, 0, 3, 1)  # begins of 4 dims, then ends
    m, out = build([tensor("f32", b_, 2, s_, 5)], lambda b, x: b.pad(x, pads=pads, mode=mode, value=1.5))
    assert out.type.shape == (b_, 2, s_ + 4, 8)
    kw = {"value": 1.5} if mode == "constant" else {}
    envs = ENVS[1:] if mode == "reflect" else ENVS  # reflect needs pad < dim
    run_all(m, [(b_, 2, s_, 5)], lambda x: F.pad(x, (2, 1, 1, 3), mode=tmode, **kw), envs=envs)


def test_pad_symbolic_and_negative():
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.pad(x, pads=(s_, 0, 0, -1)))
    assert out.type.shape == (b_ + s_, s_ - 1)
    for bb, ss in ((1, 2), (3, 5)):
        x = rand(RNG, (bb, ss))
        want = F.pad(torch.from_numpy(x), (0, -1, ss, 0)).numpy()
        assert_close(R.run(m, x), want)
    with pytest.raises(ShapeError, match="needs 4"):
        build([tensor("f32", b_, s_)], lambda b, x: b.pad(x, pads=(1, 1)))
    with pytest.raises(ShapeError, match="mode"):
        build([tensor("f32", b_, s_)], lambda b, x: b.pad(x, pads=(1, 1, 1, 1), mode="circularx"))


@pytest.mark.parametrize("reps", [(1, 1), (2, 3), (2, 1, 2), (s_, 1)])
def test_tile(reps):
    m, out = build([tensor("f32", s_, 3)], lambda b, x: b.tile(x, repeats=reps))
    want = tuple(S.mul(a, r) for a, r in zip(((1,) * (len(reps) - 2)) + (s_, 3), reps))
    assert out.type.shape == want
    for n in (1, 4):
        x = rand(RNG, (n, 3))
        r = tuple(S.evaluate(v, {"s": n}) for v in reps)
        assert_close(R.run(m, x), torch.from_numpy(x).tile(r).numpy())


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_of_a_0d_tensor_is_the_tensor(mode):
    """np.pad refuses an empty width list (fuzz seeds 766, 3278)."""
    m, out = build([tensor("f32")], lambda b, x: b.pad(x, pads=(), mode=mode))
    assert out.type.shape == ()
    x = np.array(2.5, np.float32)
    got = R.run(m, x)
    assert got.shape == () and got == x
