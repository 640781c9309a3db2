"""Loop IR: construction, printing, index simplification, lowering structure, the default schedule
(its stages one by one: tests/schedule/test_stages.py)."""

import numpy as np

from braze.ir import loop as L
from braze.ir import sym as S
from braze.ir.types import DType
from braze.ops import Builder, tensor
from braze.lowering import ifloordiv, imod, lower_function, reshape_index
from braze.schedule import schedule
from braze.schedule.nest import coeff
from braze.schedule.vectorize import vector_ok

F32 = DType.float32


def test_exprs_are_structural_and_print():
    buf = L.Buffer("x", F32, (S.Sym("N"),))
    i = L.loop_var(S.Sym("N"))
    a = L.Binary("add", L.Load(buf, (i,)), L.Const(1.0, F32), F32)
    b = L.Binary("add", L.Load(buf, (i,)), L.Const(1.0, F32), F32)
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert str(a) == f"(x[{i}] + 1.0)"
    assert L.free_loop_vars(a) == {i}
    r = L.Reduce("sum", L.Load(buf, (i,)), ((i, S.Sym("N")),), F32)
    assert L.free_loop_vars(r) == frozenset()
    assert str(r).startswith("sum(")


def test_kernel_printer_nested():
    N = S.Sym("N")
    x = L.Buffer("x", F32, (N,), "in")
    y = L.Buffer("y", F32, (N,), "out")
    i = L.loop_var(N)
    k = L.Kernel("k", [x, y], [N], [L.For(i, N, [L.Store(y, (i,), L.Unary("exp", L.Load(x, (i,)), F32))],
                                          "parallel", work=N)])
    text = str(k)
    assert text.splitlines()[0] == "kernel k(in x: f32[N], out y: f32[N]); syms N  [pointwise]"
    assert "parallel for" in text and f"y[{i}] = exp(x[{i}])" in text


def test_index_helpers_use_loop_ranges():
    H = S.Sym("H")
    i, j = L.loop_var(S.Sym("B")), L.loop_var(H)
    flat = i * H + j
    assert ifloordiv(flat, H) == i
    assert imod(flat, H) == j
    # [B, S, 12] -> [B, S, 3, 4] and back: no div/mod where the dims line up
    a, b, c, d = (L.loop_var(e) for e in (S.Sym("B"), S.Sym("S"), 3, 4))
    assert reshape_index((a, b, c, d), (S.Sym("B"), S.Sym("S"), 3, 4), (S.Sym("B"), S.Sym("S"), 12)) == (
        a, b, 4 * c + d)
    m = L.loop_var(12)
    assert reshape_index((a, b, m), (S.Sym("B"), S.Sym("S"), 12), (S.Sym("B"), S.Sym("S"), 3, 4)) == (
        a, b, m // 4, m % 4)


def test_coeff():
    N = S.Sym("N")
    i, j = L.loop_var(N), L.loop_var(N)
    assert coeff(N * i + j, i) == N
    assert coeff(N * i + j, j) == 1
    assert coeff(S.floordiv(i, 2), i) is None
    assert coeff(N, i) == 0


def _ln_func():
    b = Builder()
    B, H = b.sym("B"), b.sym("H")
    x = b.param("x", tensor("f32", B, 4, H))
    w = b.param("w", tensor("f32", H))
    b.ret(b.relu(b.layer_norm(b.add(x, w), w)))
    return b


def test_lowering_inlines_everything():
    b = _ln_func()
    k = lower_function(b.func, b.module)
    assert [buf.role for buf in k.buffers] == ["in", "in", "out"]
    assert [s.name for s in k.syms] == ["B", "H"]
    assert k.kind == "stitch"
    text = str(k)
    assert "relu" not in text and "select(" in text and "sum(" in text  # relu: x < 0 ? 0 : x


def test_schedule_stitch_structure():
    b = _ln_func()
    k = schedule(lower_function(b.func, b.module))
    assert k.scheduled
    (outer,) = [s for s in k.body if isinstance(s, L.For)]
    # [B, 4] collapsed into one row loop, run in parallel above a grain
    assert outer.kind == "parallel" and outer.extent == 4 * S.Sym("B") and outer.work is not None
    lets = [s for s in outer.body if isinstance(s, L.Let)]
    reds = [s for s in lets if isinstance(s.value, L.Reduce)]
    assert len(reds) == 2 and all(r.value.vector for r in reds)
    # the variance pass reads the mean as a Var, not a recomputed sum
    assert any(isinstance(n, L.Var) for n in L.walk(reds[1].value.body))
    (inner,) = [s for s in outer.body if isinstance(s, L.For)]
    assert inner.kind == "vector" and inner.extent == S.Sym("H")


def test_schedule_collapses_pointwise_and_chunks():
    b = Builder()
    B, S_ = b.sym("B"), b.sym("S")
    x = b.param("x", tensor("f32", B, S_, 8))
    b.ret(b.exp(x))
    k = schedule(lower_function(b.func, b.module))
    (outer,) = k.body
    assert outer.kind == "parallel"
    (inner,) = outer.body
    assert inner.kind == "vector"
    assert isinstance(inner.body[0], L.Store)


def test_schedule_materializes_cross_row_reduction():
    b = Builder()
    B, N = b.sym("B"), b.sym("N")
    x = b.param("x", tensor("f32", B, N))
    b.ret(b.sub(x, b.reduce_mean(x, axes=(0,), keepdims=True)))
    k = schedule(lower_function(b.func, b.module))
    assert isinstance(k.body[0], L.Alloc)
    assert "alloc tmp" in str(k)


def test_vector_ok_rules():
    N = S.Sym("N")
    x = L.Buffer("x", F32, (N,))
    ids = L.Buffer("ids", DType.int64, (N,))
    i = L.loop_var(N)
    assert vector_ok(L.Unary("exp", L.Load(x, (i, None), True), F32), i)
    assert not vector_ok(L.Compare("lt", L.IndexValue(i), L.Const(3, DType.int64)), i)
    assert vector_ok(L.Cast(L.Load(ids, (i, None), True), F32), i)


def test_constants_become_buffers_or_literals():
    b = Builder()
    N = b.sym("N")
    x = b.param("x", tensor("f32", N, 3))
    k = b.constant(np.arange(3, dtype=np.float32), name="w")
    b.ret(b.mul(b.add(x, k), b.constant(np.float32(2.0))))
    kern = lower_function(b.func, b.module)
    consts = [buf for buf in kern.buffers if buf.const_name]
    assert len(consts) == 1 and consts[0].const_name == "w"
    assert "2.0" in str(kern)
