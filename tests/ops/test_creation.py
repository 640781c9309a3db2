"""arange, full, full_like against torch, with symbolic lengths; uniform against NumPy."""

import numpy as np
import pytest
import torch

import braze.reference as R
from braze.errors import ShapeError
from braze.ir import sym as S
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build

b_, s_, t_ = Sym("b"), Sym("s"), Sym("t")


@pytest.mark.parametrize("start,end,step", [(0, 10, 1), (3, 10, 2), (10, 0, -3), (0, 0, 1), (5, 2, 1),
                                            (0.5, 3.2, 0.25), (-1.0, 1.0, 0.3), (2, -7, -2)])
@pytest.mark.parametrize("dtype", ["i64", "f32", "f64"])
def test_arange_static(start, end, step, dtype):
    m, out = build([], lambda b: b.arange(start=start, end=end, step=step, dtype=dtype))
    tdt = {"i64": torch.int64, "f32": torch.float32, "f64": torch.float64}[dtype]
    if dtype == "i64" and any(isinstance(v, float) for v in (start, end, step)):
        return
    if (end - start) * step < 0:  # torch raises; braze follows numpy (empty)
        want = np.arange(start, end, step).astype(out.type.dtype.numpy)
    else:
        want = torch.arange(start, end, step, dtype=tdt).numpy()
    assert out.type.shape == want.shape
    assert_close(R.run(m), want)


@pytest.mark.parametrize("start,step", [(0, 1), (2, 1), (0, 3), (1, 2)])
def test_arange_symbolic_end(start, step):
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.arange(start=start, end=s_, step=step, dtype="i64"))
    n = out.type.shape[0]
    if start == 0 and step == 1:
        assert n == s_
    assert S.free_syms(n) == {s_}
    for ss in (1, 2, 5, 16):
        want = torch.arange(start, ss, step).numpy() if ss >= start else np.arange(start, ss, step)
        np.testing.assert_array_equal(R.run(m, np.zeros((1, ss), np.float32)), want)


def test_arange_symbolic_start_end_and_negative_step():
    m, out = build([tensor("f32", s_), tensor("f32", t_)],
                   lambda b, x, y: b.arange(start=t_, end=s_ + t_, dtype="i32"))
    assert out.type.shape == (s_,)
    assert_close(R.run(m, np.zeros(4, np.float32), np.zeros(3, np.float32)), np.arange(3, 7, dtype=np.int32))
    m, out = build([tensor("f32", s_)], lambda b, x: b.arange(start=s_, end=0, step=-2, dtype="i64"))
    for ss in (1, 4, 7):
        np.testing.assert_array_equal(R.run(m, np.zeros(ss, np.float32)), torch.arange(ss, 0, -2).numpy())


def test_arange_errors():
    with pytest.raises(ShapeError, match="step must not be 0"):
        build([], lambda b: b.arange(start=0, end=3, step=0, dtype="i64"))
    with pytest.raises(ShapeError, match="float and symbolic"):
        build([tensor("f32", s_)], lambda b, x: b.arange(start=0.5, end=s_, dtype="f32"))
    with pytest.raises(ShapeError, match="constant"):
        build([tensor("f32", s_)], lambda b, x: b.arange(start=0, end=10, step=s_, dtype="i64"))


@pytest.mark.parametrize("dtype,value", [("f32", 1.5), ("i64", 3.0), ("bool", 1.0), ("f16", -2.0), ("f32", float("-inf"))])
def test_full(dtype, value):
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.full(shape=(s_, 3, b_), value=value, dtype=dtype))
    assert out.type.shape == (s_, 3, b_)
    tdt = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool, "f16": torch.float16}[dtype]
    for bb, ss in ((1, 1), (2, 5)):
        want = torch.full((ss, 3, bb), value, dtype=tdt).numpy()
        got = R.run(m, np.zeros((bb, ss), np.float32))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_full_static_and_errors():
    m, out = build([], lambda b: b.full(shape=(), value=2.0, dtype="f32"))
    assert out.type.shape == () and R.run(m) == np.float32(2.0)
    with pytest.raises(ShapeError, match="negative"):
        build([], lambda b: b.full(shape=(-1, 2), value=2.0, dtype="f32"))


@pytest.mark.parametrize("dtype", [None, "i32", "f64"])
def test_full_like(dtype):
    m, out = build([tensor("f32", b_, s_)], lambda b, x: b.full_like(x, value=7.0, dtype=dtype))
    assert out.type.shape == (b_, s_)
    assert out.type.dtype.name == ("float32" if dtype is None else {"i32": "int32", "f64": "float64"}[dtype])
    tdt = {None: torch.float32, "i32": torch.int32, "f64": torch.float64}[dtype]
    x = np.zeros((2, 3), np.float32)
    want = torch.full_like(torch.from_numpy(x), 7.0, dtype=tdt).numpy()
    got = R.run(m, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# uniform: counter-based random numbers (dropout's masks)
# ---------------------------------------------------------------------------


def _uniform_model(stream=0):
    return build([tensor("i64"), tensor("f32", b_, s_)],
                 lambda b, seed, x: b.op("add", [x, b.op("uniform", [seed], shape=(b_, s_), stream=stream)]))


def test_uniform_is_splitmix64():
    """Seed 0's first outputs are SplitMix64's published ones (0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4,
    0x06c45d188009454f, 0xf88bb8a8724c81ec), their top 24 bits over 2^24."""
    from braze.ops.creation import uniform_numpy
    want = np.array([0xE220A8, 0x6E789E, 0x06C45D, 0xF88BB8], np.float64) / 2 ** 24
    np.testing.assert_array_equal(uniform_numpy(0, 4), want.astype(np.float32))


@pytest.mark.parametrize("stream", [0, 5])
def test_uniform_native_is_the_reference_bit_for_bit(stream):
    """The generated C (vector lanes and the scalar tail) against NumPy, at symbolic sizes 1, odd and
    past a vector, for seeds of both signs."""
    import braze
    m, _ = _uniform_model(stream)
    native = braze.compile(m)
    for (bb, ss), seed in zip([(1, 1), (3, 7), (2, 65), (17, 128)], [0, -1, 2 ** 62 + 11, -(2 ** 63)]):
        x = np.zeros((bb, ss), np.float32)
        want = R.run(m, np.array(seed, np.int64), x)
        np.testing.assert_array_equal(np.asarray(native(np.array(seed, np.int64), x)), want)


def test_uniform_streams_and_seeds_are_independent_and_uniform():
    from braze.ops.creation import uniform_numpy
    n = 1 << 20
    a, b, c = uniform_numpy(5, n), uniform_numpy(5, n, stream=1), uniform_numpy(6, n)
    for u in (a, b, c):
        assert u.min() >= 0 and u.max() < 1
        counts = np.bincount((u * 64).astype(np.int64), minlength=64)
        chi2 = (((counts - n / 64) ** 2) / (n / 64)).sum()
        assert chi2 < 120, chi2  # 63 degrees of freedom: p < 1e-5 beyond 120
    for u, v in ((a, b), (a, c), (a[1:], a[:-1])):
        assert abs(np.corrcoef(u, v)[0, 1]) < 5 / np.sqrt(n)


def test_uniform_reads_back_as_loop_ir():
    from braze.ir.loop_parser import parse_kernel
    from braze.lowering import build_kernel
    m, _ = _uniform_model(3)
    k = build_kernel(m.functions["main"], m, "k")
    assert "uniform(" in str(k)
    assert str(parse_kernel(str(k))) == str(k)


def test_uniform_checks_its_seed():
    with pytest.raises(ShapeError, match="seed must be a 0-d int64"):
        build([tensor("i32")], lambda b, seed: b.op("uniform", [seed], shape=(3,)))
    with pytest.raises(ShapeError, match="stream must be"):
        build([tensor("i64")], lambda b, seed: b.op("uniform", [seed], shape=(3,), stream=-1))
