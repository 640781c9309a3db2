"""``index_add`` and ``index_put`` compiled (a ``scatter`` group calling braze_scatter.h) against
NumPy (``add.at``, ``multiply.at``, ...; the last write for ``none``) and torch: repeated and
negative indices, int32 and int64 indices, float and integer data, NaN, every axis, sizes of 1, odd
sizes and sizes that run on threads; the fill the group absorbs; the in-place add into a GEMM's
result; and an index out of range."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.errors import InputError
from braze.ops import Builder, tensor
from braze.ir import sym as S
from braze.ops.index import index_add_numpy, index_put_numpy
from braze.pipeline import run_pipeline

pytestmark = pytest.mark.usefixtures("module_cache")


def _index_add_module(dt: str, it: str, axis: int, reduce: str = "add"):
    b = Builder()
    A, V, N = b.sym("A"), b.sym("V"), b.sym("N")
    shape = [A, V, 3]
    x = b.param("x", tensor(dt, *shape))
    idx = b.param("idx", tensor(it, N))
    src_shape = list(shape)
    src_shape[axis % 3] = N
    src = b.param("src", tensor(dt, *src_shape))
    b.ret(b.index_add(x, idx, src, axis=axis) if reduce == "add" else b.index_put(x, idx, src, axis=axis, reduce=reduce))
    return b.module


@pytest.mark.parametrize("dt, it", [("f32", "i64"), ("f32", "i32"), ("f64", "i64"), ("i64", "i32"), ("i32", "i64")])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_index_add_is_numpy_s_add_at_bit_for_bit(dt, it, axis):
    """Each position adds its rows in index order on any number of threads, as ``numpy.add.at``:
    the same bits (the last shape runs on threads)."""
    m = braze.compile(_index_add_module(dt, it, axis))
    rng = np.random.default_rng(axis + 5)
    npt, nit = np.dtype(dt.replace("f", "float").replace("i", "int")), np.dtype(it.replace("i", "int"))
    for a, v, n in ((1, 1, 1), (3, 5, 7), (2, 9, 1), (40, 300, 2000)):
        shape = [a, v, 3]
        ax = axis % 3
        size = shape[ax]
        src_shape = list(shape)
        src_shape[ax] = n
        x = (rng.standard_normal(shape) * 100).astype(npt)
        src = (rng.standard_normal(src_shape) * 100).astype(npt)
        idx = rng.integers(-size, size, n).astype(nit)
        np.testing.assert_array_equal(m(x, idx, src), index_add_numpy(x, idx, src, axis))


@pytest.mark.parametrize("reduce", ["none", "mul", "max", "min"])
@pytest.mark.parametrize("dt, it, axis", [("f32", "i64", 1), ("f64", "i32", 0), ("i64", "i64", -1), ("i32", "i32", 1)])
def test_index_put_is_numpy_s_in_index_order_bit_for_bit(reduce, dt, it, axis):
    """Each position takes its rows in index order on any number of threads: the last write (none),
    or the running product, max or min, with NaN kept as numpy.maximum keeps it."""
    m = braze.compile(_index_add_module(dt, it, axis, reduce))
    rng = np.random.default_rng(axis + 11)
    npt, nit = np.dtype(dt.replace("f", "float").replace("i", "int")), np.dtype(it.replace("i", "int"))
    for a, v, n in ((1, 1, 1), (3, 5, 7), (2, 9, 1), (40, 300, 2000)):
        shape = [a, v, 3]
        ax = axis % 3
        src_shape = list(shape)
        src_shape[ax] = n
        x = (rng.standard_normal(shape) * (1 if reduce == "mul" else 100)).astype(npt)
        src = (rng.standard_normal(src_shape) * (1.5 if reduce == "mul" else 100)).astype(npt)
        if npt.kind == "f":
            x.flat[::7], src.flat[::11] = np.nan, np.nan
            src.flat[1::13] = -0.0
        idx = rng.integers(-shape[ax], shape[ax], n).astype(nit)
        np.testing.assert_array_equal(m(x, idx, src), index_put_numpy(x, idx, src, axis, reduce))


def test_index_put_out_of_range_names_the_op():
    m = braze.compile(_index_add_module("f32", "i64", 0, "max"))
    with pytest.raises(InputError, match=r"index_put.*: index 3 \(position 1\) is outside \[-3, 3\)"):
        m(np.zeros((3, 2, 3), np.float32), np.array([0, 3]), np.ones((2, 2, 3), np.float32))


def test_index_add_matches_torch():
    torch = pytest.importorskip("torch")
    m = braze.compile(_index_add_module("f32", "i64", 1))
    rng = np.random.default_rng(0)
    x, src = rng.standard_normal((4, 6, 3)).astype(np.float32), rng.standard_normal((4, 11, 3)).astype(np.float32)
    idx = rng.integers(0, 6, 11)
    want = torch.index_add(torch.from_numpy(x), 1, torch.from_numpy(idx), torch.from_numpy(src))
    np.testing.assert_allclose(m(x, idx, src), want.numpy(), rtol=1e-6, atol=1e-6)


def test_an_index_out_of_range_is_an_input_error_that_names_it():
    m = braze.compile(_index_add_module("f32", "i64", 0))
    x, src = np.zeros((3, 2, 3), np.float32), np.ones((2, 2, 3), np.float32)
    with pytest.raises(InputError, match=r"index_add.*: index 3 \(position 1\) is outside \[-3, 3\)"):
        m(x, np.array([0, 3]), src)
    with pytest.raises(InputError, match=r"index -4 \(position 0\)"):
        m(x, np.array([-4, 0]), src)


def _embedding_gradient(tied: bool):
    """zeros [V, 8] + rows at ids (an embedding's gradient), added to ``h^T @ g`` when tied."""
    b = Builder()
    T, V = b.sym("T"), 37
    ids = b.param("ids", tensor("i64", T))
    rows = b.param("rows", tensor("f32", T, 8))
    grad = b.index_add(b.full(shape=(V, 8), value=0.0, dtype="f32"), ids, rows, axis=0)
    if tied:
        h, g = b.param("h", tensor("f32", T, V)), b.param("g", tensor("f32", T, 8))
        grad = b.add(b.matmul(b.permute(h, perm=(1, 0)), g), grad)
    b.ret(grad)
    return b.module


@pytest.mark.parametrize("tied", [False, True])
def test_an_embedding_gradient_fills_then_adds_or_adds_in_place(tied):
    """Untied: the group makes its zeros itself (no table-sized input). Tied (a weight that is also
    the LM head): the rows are added into the GEMM's gradient, which the GEMM writes in the
    caller's output: no copy (``memory.in_place_inputs``)."""
    mod = _embedding_gradient(tied)
    planned = run_pipeline(mod)
    nodes = [n for n in planned.main.nodes if n.op == "fused"]
    scatter = next(n for n in nodes if n.attrs["kind"] == "scatter")
    callee = planned.functions[scatter.attrs["callee"]]
    assert [n.op for n in callee.nodes if n.op != "constant"] == ["index_add"]
    if tied:
        gemm = next(n for n in nodes if n.attrs["kind"] == "gemm")
        assert gemm.attrs["arena"] == [-1] and scatter.inputs[0] is gemm.outputs[0]
    else:
        assert len(scatter.inputs) == 2  # ids and rows: the zeros are the group's own
    m = braze.compile(_embedding_gradient(tied))
    rng = np.random.default_rng(1)
    for t in (1, 5, 64):
        ids = rng.integers(0, 37, t)
        rows = rng.standard_normal((t, 8)).astype(np.float32)
        args = [ids, rows]
        want = index_add_numpy(np.zeros((37, 8), np.float32), ids, rows, 0)
        if tied:
            h, g = rng.standard_normal((t, 37)).astype(np.float32), rng.standard_normal((t, 8)).astype(np.float32)
            args += [h, g]
            want = h.T.astype(np.float64) @ g + want
        np.testing.assert_allclose(m(*args), want, rtol=1e-5, atol=1e-5)


def test_a_scatter_group_takes_the_views_around_it():
    """ONNX's scatters view their data as rows: the reshapes of x, the source and the result join the
    scatter group (the helper reads the memory under them), where each would be a copy kernel; a
    view something else reads stays outside."""
    b = Builder()
    N = b.sym("N")
    x = b.param("x", tensor("f32", N, 4, 3))
    idx, src = b.param("idx", tensor("i64", N, 2)), b.param("src", tensor("f32", N, 2, 3))
    rows = b.reshape(x, shape=(S.mul(N, 4), 3))
    put = b.index_put(rows, b.reshape(idx, shape=(S.mul(N, 2),)), b.reshape(src, shape=(S.mul(N, 2), 3)),
                      axis=0, reduce="max")
    b.ret(b.reshape(put, shape=(N, 4, 3)), b.add(rows, rows))  # rows is read twice: not taken
    mod = b.module
    planned = run_pipeline(mod)
    groups = [n for n in planned.main.nodes if n.op == "fused"]
    scatter = next(n for n in groups if n.attrs["kind"] == "scatter")
    ops = [m.op for m in planned.functions[scatter.attrs["callee"]].nodes if m.op != "constant"]
    assert ops.count("reshape") == 3 and ops[-1] == "reshape", ops  # idx's, src's and the result's
    m = braze.compile(mod)
    rng = np.random.default_rng(3)
    for n in (1, 5):
        args = (rng.standard_normal((n, 4, 3)).astype(np.float32), rng.integers(-4 * n, 4 * n, (n, 2)),
                rng.standard_normal((n, 2, 3)).astype(np.float32))
        for got, want in zip(m(*args), braze.reference.run(mod, *args)):
            np.testing.assert_array_equal(got, want)
