"""The schedule as named stages (braze/schedule): what each stage does to a lowered kernel,
that the stages run one by one are ``schedule``, that a stage's output depends on its input
only, and that every stage's output is a kernel that prints, emits C and computes the same."""

from __future__ import annotations

import ctypes
import dataclasses
import textwrap

import numpy as np
import pytest

import braze
from braze import reference
from braze.codegen.c_kernel import c_prelude, kernel_entry, kernel_to_c
from braze.errors import BrazeError
from braze.ir import loop as L
from braze.ir import sym as S
from braze.ops import Builder, tensor
from braze.lowering import build_kernel, lower_function
from braze.schedule import (
    KERNEL_STAGES,
    collapse,
    flatten,
    hoist,
    jam,
    keep,
    materialize,
    parallelize,
    partition,
    schedule,
    tile,
    vectorize,
    widen,
)

NAMES = ["flatten", "collapse", "tile", "materialize", "hoist", "keep", "widen", "vectorize", "parallelize",
         "partition", "jam"]


def lowered(b: Builder) -> L.Kernel:
    with L.kernel_names():
        return lower_function(b.func, b.module)


def upto(k: L.Kernel, last) -> L.Kernel:
    """``k`` after the default stages up to and including ``last``."""
    for stage in KERNEL_STAGES:
        k = stage(k)
        if stage is last:
            return k
    raise AssertionError(last)


def fors(k) -> list:
    return [s for s in k.body if isinstance(s, L.For)]


def chain(f: L.For) -> list:
    out = [f]
    while True:
        inner = [s for s in out[-1].body if isinstance(s, L.For)]
        if len(inner) != 1:
            return out
        out.append(inner[0])


def accesses(k) -> list:
    out = []
    for s in L.walk_stmts(k.body):
        if isinstance(s, L.Store):
            out.append(s)
        for e in L.stmt_exprs(s):
            out.extend(x for x in L.walk(e) if isinstance(x, L.Load))
    return out


# --- small functions -------------------------------------------------------------------


def f_exp():
    """Pointwise over a contiguous [B, S, 8]."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("B"), b.sym("S"), 8))
    b.ret(b.exp(x))
    return b


def f_transpose():
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), b.sym("M")))
    b.ret(b.permute(x, perm=(1, 0)))
    return b


def f_layer_norm():
    b = Builder()
    B, H = b.sym("B"), b.sym("H")
    x = b.param("x", tensor("f32", B, 4, H))
    w = b.param("w", tensor("f32", H))
    b.ret(b.relu(b.layer_norm(b.add(x, w), w)))
    return b


def f_column_mean():
    """A reduction over the outer axis: the mean depends on the column only."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("B"), b.sym("N")))
    b.ret(b.sub(x, b.reduce_mean(x, axes=(0,), keepdims=True)))
    return b


def f_mixed():
    """Three nests (a stitch with a materialized column mean, a reshape, a 0-d sum)."""
    b = Builder()
    B, N = b.sym("B"), b.sym("N")
    x = b.param("x", tensor("f32", B, N))
    b.ret(b.layer_norm(x, axis=-1), b.sub(x, b.reduce_mean(x, axes=(0,), keepdims=True)),
          b.exp(b.reshape(x, shape=(B, N, 1))), b.reduce_sum(x))
    return b


def f_log_softmax_axis0():
    """Two temps, the second reading the first."""
    b = Builder()
    x = b.param("x", tensor("f32", 4, b.sym("N")))
    b.ret(b.log_softmax(x, axis=0))
    return b


def f_batch_norm_grad():
    """Batch norm's backward statistics of an NCHW activation: sums over (n, h, w) per channel, one
    mean read twice."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), 8, b.sym("H"), b.sym("W")))
    mean = b.reduce_mean(x, axes=(0, 2, 3), keepdims=True)
    b.ret(b.mul(b.sub(x, mean), b.reduce_sum(b.sub(x, mean), axes=(0, 2, 3), keepdims=True)))
    return b


def f_nhwc_to_nchw():
    """A batch-norm-like affine map and relu, NHWC in, NCHW out (a convnet's saved activation)."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), b.sym("H"), b.sym("W"), 32))
    s = b.param("s", tensor("f32", 32))
    b.ret(b.relu(b.mul(b.permute(x, perm=(0, 3, 1, 2)), b.reshape(s, shape=(1, 32, 1, 1)))))
    return b


def f_nchw_to_nhwc_rgb():
    """An RGB image, NCHW in, NHWC out (a convnet's input for its first convolution)."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), 3, b.sym("H"), b.sym("W")))
    b.ret(b.permute(x, perm=(0, 2, 3, 1)))
    return b


FUNCS = [f_exp, f_transpose, f_layer_norm, f_column_mean, f_mixed, f_log_softmax_axis0, f_batch_norm_grad,
         f_nhwc_to_nchw, f_nchw_to_nhwc_rgb]


# --- the stage list -----------------------------------------------------------------------


def test_the_stages_are_named_and_ordered():
    assert [s.__name__ for s in KERNEL_STAGES] == NAMES
    assert list(KERNEL_STAGES) == [flatten, collapse, tile, materialize, hoist, keep, widen, vectorize, parallelize,
                                   partition, jam]


# --- each stage ---------------------------------------------------------------------------


def test_flatten_gives_every_access_one_offset():
    k = lowered(f_exp())
    assert not any(a.flat for a in accesses(k))
    after = flatten(k)
    assert all(a.flat for a in accesses(after))
    assert str(after) != str(k) and "[[" in str(after) and "[[" not in str(k)
    (store,) = [s for s in L.walk_stmts(after.body) if isinstance(s, L.Store)]
    i, j, m = (f.var for f in chain(fors(after)[0]))
    assert store.index == (S.add(S.add(S.mul(i, S.mul(S.Sym("S"), 8)), S.mul(j, 8)), m), None)
    assert len(chain(fors(after)[0])) == 3  # the loops are untouched


def test_collapse_merges_contiguous_loops_only():
    k = flatten(lowered(f_exp()))
    (f,) = fors(collapse(k))
    assert len(chain(f)) == 1 and f.extent == S.mul(S.mul(S.Sym("B"), S.Sym("S")), 8)
    assert str(collapse(k)).count(" for ") == 1 and str(k).count(" for ") == 3
    # a transpose reads x across rows: its two loops stay
    t = flatten(lowered(f_transpose()))
    assert len(chain(fors(collapse(t))[0])) == 2


def test_collapse_merges_a_reductions_contiguous_loops():
    """A sum over (n, h, w) of NCHW reads h and w as one run of H x W: its loops become (n, h*w), so the
    innermost loop is long enough for a vector (W alone was 12 in a convnet). Equal reductions stay
    equal (the merged loop is named after the inner one), so the mean is still computed once."""
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), 8, b.sym("H"), b.sym("W")))
    b.ret(b.reduce_sum(x, axes=(0, 2, 3)))
    (r,) = [e for s in accesses(collapse(flatten(lowered(b)))) if isinstance(s, L.Store)
            for e in L.walk(s.value) if isinstance(e, L.Reduce)]
    assert [ext for _, ext in r.loops] == [S.Sym("N"), S.mul(S.Sym("H"), S.Sym("W"))]
    k = collapse(flatten(lowered(f_batch_norm_grad())))
    (store,) = [s for s in L.walk_stmts(k.body) if isinstance(s, L.Store)]
    text = str(store.value)
    reduces = {str(e) for e in L.walk(store.value) if isinstance(e, L.Reduce)}
    assert len(reduces) == 2 and all(len(e.split(" < ")) >= 3 for e in reduces)  # the mean's sum and the other
    mean = min(reduces, key=len)
    assert text.count(mean) == 2  # the mean, read in two places, is one expression
    # NHWC: (n, h, w) are strided by C but contiguous with each other: one loop of N*H*W
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), b.sym("H"), b.sym("W"), 8))
    b.ret(b.reduce_sum(x, axes=(0, 1, 2)))
    (r,) = [e for s in accesses(collapse(flatten(lowered(b)))) if isinstance(s, L.Store)
            for e in L.walk(s.value) if isinstance(e, L.Reduce)]
    assert len(r.loops) == 1
    # a transposed read ([W, H] summed over both, read as x[h, w] with w outer) keeps its loops
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("H"), b.sym("W")))
    b.ret(b.reduce_sum(b.permute(x, perm=(1, 0)), axes=(0, 1)))
    (r,) = [e for s in accesses(collapse(flatten(lowered(b)))) if isinstance(s, L.Store)
            for e in L.walk(s.value) if isinstance(e, L.Reduce)]
    assert len(r.loops) == 2


def test_tile_blocks_a_transposing_nest():
    """(n, c, hw) reading NHWC: blocks of 64 pixels with the channels inside, then the rest."""
    k = upto(lowered(f_nhwc_to_nchw()), collapse)
    main, rest = fors(tile(k))
    assert [str(f.extent) for f in chain(main)] == ["N", "((H*W) // 64)", "32", "64"]
    assert [str(f.extent) for f in chain(rest)] == ["N", "32", "((H*W) % 64)"]
    # a nest that reads and writes in one order is left as it is, and so is a tiled one
    plain = upto(lowered(f_exp()), collapse)
    assert str(tile(plain)) == str(plain)
    assert str(tile(tile(k))) == str(tile(k))
    # a static multiple of 64 pixels has no rest nest
    b = Builder()
    b.ret(b.permute(b.param("x", tensor("f32", b.sym("N"), 16, 8, 32)), perm=(0, 3, 1, 2)))
    (main,) = fors(tile(upto(lowered(b), collapse)))
    assert [str(f.extent) for f in chain(main)] == ["N", "2", "32", "64"]


def test_tile_blocks_the_pixels_of_a_few_channels_gathered():
    """(n, hw, c) of 3 channels reading NCHW: blocks of 64 pixels with the channels inside, then the
    rest; the loop of 3 stays scalar (a vector loop of it would never run its vector part), so the
    C compiler sees static loops of 64 and 3 (interleaved stores)."""
    k = upto(lowered(f_nchw_to_nhwc_rgb()), collapse)
    main, rest = fors(tile(k))
    assert [str(f.extent) for f in chain(main)] == ["N", "((H*W) // 64)", "64", "3"]
    assert [str(f.extent) for f in chain(rest)] == ["N", "((H*W) % 64)", "3"]
    assert str(tile(tile(k))) == str(tile(k))
    done = schedule(lowered(f_nchw_to_nhwc_rgb()))
    assert not [f for f in L.walk_stmts(done.body) if isinstance(f, L.For) and f.kind == "vector"]
    m = braze.compile(f_nchw_to_nhwc_rgb().module)
    rng = np.random.default_rng(0)
    for shp in [(1, 3, 1, 1), (2, 3, 7, 9), (1, 3, 8, 8), (3, 3, 13, 11), (2, 3, 96, 129)]:
        a = rng.standard_normal(shp).astype(np.float32)
        np.testing.assert_array_equal(m(a), a.transpose(0, 2, 3, 1), err_msg=str(shp))
    # a static multiple of 64 pixels has no rest nest
    b = Builder()
    b.ret(b.permute(b.param("x", tensor("f32", b.sym("N"), 3, 16, 8)), perm=(0, 2, 3, 1)))
    (main,) = fors(tile(upto(lowered(b), collapse)))
    assert [str(f.extent) for f in chain(main)] == ["N", "2", "64", "3"]
    # 8 channels or more keep their vector loop (the gather of a vector of channels)
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), 8, b.sym("H"), b.sym("W")))
    b.ret(b.permute(x, perm=(0, 2, 3, 1)))
    k8 = upto(lowered(b), collapse)
    assert str(tile(k8)) == str(k8)


def test_collapse_drops_unit_loops():
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N"), 1))
    b.ret(b.exp(b.permute(x, perm=(1, 0))))  # [1, N]: the unit loop is outermost
    (f,) = fors(collapse(flatten(lowered(b))))
    assert len(chain(f)) == 1 and f.extent == S.Sym("N")


def test_collapse_needs_flat_accesses():
    k = lowered(f_exp())
    assert str(collapse(k)) == str(k)


def test_materialize_moves_an_outer_axis_reduction_to_a_temp():
    k = upto(lowered(f_column_mean()), collapse)
    after = materialize(k)
    alloc, tmp_nest, main = after.body
    assert isinstance(alloc, L.Alloc) and alloc.buffer.role == "temp" and alloc.buffer.name == "tmp0"
    assert alloc.buffer.shape == (S.Sym("N"),)
    (tmp_store,) = chain(tmp_nest)[-1].body
    assert tmp_store.buffer is alloc.buffer and isinstance(tmp_store.value, L.Reduce)
    # the main nest reads the temp and reduces nothing
    (store,) = chain(main)[-1].body
    assert not any(isinstance(x, L.Reduce) for x in L.walk(store.value))
    assert any(isinstance(x, L.Load) and x.buffer == alloc.buffer for x in L.walk(store.value))
    assert "alloc tmp0" in str(after) and "alloc" not in str(k)


def test_materialize_leaves_row_reductions_to_hoist():
    k = upto(lowered(f_layer_norm()), collapse)
    assert str(materialize(k)) == str(k)


def test_hoist_stitches_row_reductions_into_lets():
    k = upto(lowered(f_layer_norm()), materialize)
    after = hoist(k)
    (outer,) = fors(after)
    assert outer.extent == S.mul(4, S.Sym("B"))  # [B, 4] collapsed into one row loop
    lets = [s for s in outer.body if isinstance(s, L.Let)]
    reds = [s for s in lets if isinstance(s.value, L.Reduce)]
    assert len(reds) == 2 and all(r.var.name.startswith("r") for r in reds)
    # the variance reads the mean as a Var, not a second sum
    assert any(isinstance(n, L.Var) for n in L.walk(reds[1].value.body))
    (inner,) = [s for s in outer.body if isinstance(s, L.For)]
    assert inner.kind == "serial" and all(isinstance(s, L.Store) for s in inner.body)
    assert not any(isinstance(x, L.Reduce) for s in inner.body for x in L.walk(s.value))
    assert "let r" in str(after) and "let " not in str(k)


def f_row_statistics():
    """A row's mean and the sum of squared deviations from it, both row-shaped results (a
    training forward's saved LayerNorm statistics): a nest with no loop over the row's elements."""
    b = Builder()
    B = b.sym("B")
    x = b.param("x", tensor("f32", B, 37))
    mean = b.reduce_mean(x, axes=(-1,), keepdims=True)
    d = b.sub(x, mean)
    b.ret(mean, b.reduce_sum(b.mul(d, d), axes=(-1,), keepdims=True))
    return b


def test_hoist_lets_a_reduction_that_another_reads_in_a_row_nest(_cache):
    """With no element loop to hoist into, the mean becomes a Let in the row loop, before the
    stores, and the squares' sum reads it as a Var: each row is read once per reduction, not the
    mean summed again for every element (quadratic: 100 ms for one BERT layer's statistics)."""
    b = f_row_statistics()
    k = upto(lowered(b), materialize)
    after = hoist(k)
    (row,) = fors(after)
    lets = [s for s in row.body if isinstance(s, L.Let)]
    assert len(lets) == 1 and isinstance(lets[0].value, L.Reduce)
    stores = [s for s in row.body if isinstance(s, L.Store)]
    assert len(stores) == 2 and not any(isinstance(x, L.Reduce) and any(isinstance(y, L.Reduce) for y in
                                                                         L.walk(x.body))
                                        for s in stores for x in L.walk(s.value))
    x = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    want = reference.run(b.module, x)
    for g, w in zip(_run(schedule(lowered(b)), b.module, b.func, [x], 32), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_vectorize_marks_contiguous_inner_loops_and_reductions():
    k = upto(lowered(f_layer_norm()), hoist)
    after = vectorize(k)
    (outer,) = fors(after)
    assert outer.kind == "serial" and chain(outer)[-1].kind == "vector"
    reds = [s.value for s in outer.body if isinstance(s, L.Let) and isinstance(s.value, L.Reduce)]
    assert reds and all(r.vector for r in reds)
    assert "vector for" in str(after) and "vector for" not in str(k)
    # int64 arithmetic has no vector form here: the loop stays scalar
    b = Builder()
    x = b.param("x", tensor("i64", b.sym("N"), b.sym("M")))
    b.ret(b.add(x, x))
    t = upto(lowered(b), vectorize)
    assert all(f.kind == "serial" for f in chain(fors(t)[0]))


def test_parallelize_splits_work_over_threads():
    # a stitch nest: the row loop; its work grows with every pass over the row, and a
    # single row gets no threads
    k = upto(lowered(f_layer_norm()), vectorize)
    (outer,) = fors(parallelize(k))
    B, H = S.Sym("B"), S.Sym("H")
    assert outer.kind == "parallel" and S.free_syms(outer.work) == {B, H}
    w = [S.evaluate(outer.work, {"B": b, "H": h}) for b, h in ((1, 100), (1, 200), (2, 100), (3, 100))]
    assert 0 < w[0] < w[1] < 2 * w[0] + 1 and w[3] == 3 * w[2] // 2
    # one long vector loop: parallel chunks of vector loops
    (f,) = fors(parallelize(upto(lowered(f_exp()), vectorize)))
    assert f.kind == "parallel" and [x.kind for x in chain(f)] == ["parallel", "vector"]
    # a short constant one stays a plain vector loop
    b = Builder()
    x = b.param("x", tensor("f32", 100))
    b.ret(b.exp(x))
    (f,) = fors(schedule(lowered(b)))
    assert f.kind == "vector" and len(chain(f)) == 1


def test_parallelize_joins_a_short_batch_loop_with_its_rows():
    """A nest collapse left apart, whose outer loop may run once (a batch of 1), runs batch x rows
    as one parallel loop, indexed by division and remainder; a batch of at least 8 stays as it was."""
    def pool(n):
        b = Builder()
        x = b.param("x", tensor("f32", n, b.sym("H", 3), 7, 16))
        b.ret(b.op("max_pool2d", [x], kernel=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1), layout="nhwc"))
        return b
    b = pool(Builder().sym("N"))
    (f,) = fors(schedule(lowered(b)))
    assert f.kind == "parallel" and "//" in str(f) and f.var.extent == S.mul(S.Sym("N"), S.Sym("H"))
    m = braze.compile(b.module)
    rng = np.random.default_rng(0)
    for shp in [(1, 3, 7, 16), (1, 9, 7, 16), (3, 5, 7, 16)]:
        a = rng.standard_normal(shp).astype(np.float32)
        np.testing.assert_array_equal(m(a), reference.run(b.module, a))
    (f,) = fors(schedule(lowered(pool(8))))
    assert f.kind == "parallel" and f.extent == 8


def _pool(n, h=None, w=7, pad=1):
    """A padded 3x3 max pool over NHWC, batch ``n`` (8: the rows stay a serial loop)."""
    b = Builder()
    x = b.param("x", tensor("f32", n, h if h is not None else b.sym("H", 1), w, 16))
    b.ret(b.op("max_pool2d", [x], kernel=(3, 3), stride=(1, 1), padding=(pad,) * 4, layout="nhwc"))
    return b


def test_partition_runs_a_window_s_border_and_interior_apart():
    """A row's pixels run as a border loop, the interior and a border loop. The interior's taps
    test the row only, and load the column without a clamp; the rows stay one loop, their tests
    computed once per row."""
    k = upto(lowered(_pool(8)), parallelize)
    (par,) = fors(k)
    assert [x.var.name[:2] for x in chain(par)] == ["_i", "_i", "_i", "_i"]
    (f,) = fors(partition(k))
    (rows,) = fors(f)
    assert rows.var.name.startswith("_i")
    cols = fors(rows)
    assert [c.var.name[:2] for c in cols] == ["_e", "_p", "_e"]
    assert [c.extent for c in cols] == [1, 5, 1]  # the columns whose window lies in the image
    interior, border = str(cols[1]), str(cols[0])
    assert border.count(">=") == 2 and "16*max(0, " in border
    assert interior.count(">=") == 1 and "16*max(" not in interior and "16*min(" not in interior, interior


def test_partition_keeps_the_values_at_every_size():
    """Images smaller than the window (no interior), one row, odd sizes: the same bits as the
    reference, whose maximum involves no rounding; a second run of the stage changes nothing."""
    rng = np.random.default_rng(0)
    for n, w, pad in ((8, 7, 1), (Builder().sym("N"), 5, 2), (8, 1, 1)):
        b = _pool(n, w=w, pad=pad)
        k = schedule(lowered(b))
        assert str(partition(k)) == str(k)
        m = braze.compile(b.module)
        for h in (1, 2, 3, 4, 9):
            shp = (8 if n == 8 else 3, h, w, 16)
            a = rng.standard_normal(shp).astype(np.float32)
            np.testing.assert_array_equal(m(a), reference.run(b.module, a), err_msg=str((n, w, pad, h)))


TAPS = """
    kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
      for _i1 in 0..n:
        y[[_i1]] = ((select(((idx(_i1 - 1) >= 0) & (idx(_i1 - 1) < idx(n))), x[[max(0, _i1 - 1)]], 0.0) + x[[_i1]]) + select(((idx(_i1 + 1) >= 0) & (idx(_i1 + 1) < idx(n))), x[[min(n - 1, _i1 + 1)]], 0.0))
    """


def test_partition_ir_in_ir_out():
    """A 3-tap padded sum: the first element, the interior as plain loads and adds (from 1 to
    max(1, n - 1)), the rest; the borders keep the body as it was."""
    from braze.ir.loop_parser import parse_kernel
    k = partition(parse_kernel(textwrap.dedent(TAPS)))
    lines = str(k).splitlines()
    assert lines[1::2] == ["  for _e2 in 0..1:", "  for _p3 in 0..max(1, n - 1) - 1:",
                           "  for _e4 in 0..-max(1, n - 1) + n:"]
    assert lines[4] == "    y[[_p3 + 1]] = ((x[[_p3]] + x[[_p3 + 1]]) + x[[_p3 + 2]])"
    assert "select" in lines[2] and "select" in lines[6]
    assert str(partition(k)) == str(k) and str(parse_kernel(str(k))) == str(k)


@pytest.mark.parametrize("body", [
    "select((idx(n - _i1 - 2) >= 0), x[[max(0, n - _i1 - 2)]], 0.0)",  # the index falls as _i1 grows
    "sum(_r2 < n: select((idx(_i1) < idx(_r2 * _r2)), x[[_r2]], 0.0))",  # not affine in the tap
])
def test_partition_leaves_a_loop_whose_tests_it_cannot_bound(body):
    from braze.ir.loop_parser import parse_kernel
    k = parse_kernel(textwrap.dedent(f"""
        kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
          for _i1 in 0..n:
            y[[_i1]] = {body}
        """))
    assert str(partition(k)) == str(k)


def f_channel_sums(layout: str):
    """A batch norm's per-channel sums over N, H, W: NCHW or NHWC, 64 channels."""
    b = Builder()
    n, h, w = b.sym("N"), b.sym("H"), b.sym("W")
    shape, axes = ((n, 64, h, w), (0, 2, 3)) if layout == "nchw" else ((n, h, w, 64), (0, 1, 2))
    x = b.param("x", tensor("f32", *shape))
    b.ret(b.reduce_sum(x, axes=axes))
    return b


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_per_channel_sums_run_in_vector_lanes_and_threads(layout, _cache):
    """NCHW: the sum's own innermost loop (a row of W) runs in vector lanes, never the channels
    (that would gather eight strided elements at every step), and the channels run in parallel.
    NHWC: the channels are the lanes, and the rows run in parts, in parallel (``part_sums``), not
    one serial loop. Both compute NumPy's sums."""
    b = f_channel_sums(layout)
    k = schedule(lowered(b))
    if layout == "nchw":
        (f,) = fors(k)
        red = next(y for st in L.walk_stmts([f]) if isinstance(st, L.Store) for y in L.walk(st.value)
                   if isinstance(y, L.Reduce))
        assert f.kind == "parallel" and not any(x.kind == "vector" for x in chain(f)) and red.vector
    else:
        parts, final = fors(k)
        assert parts.kind == "parallel" and final.kind == "vector"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 64, 5, 7) if layout == "nchw" else (3, 5, 7, 64)).astype(np.float32)
    (got,) = _run(k, b.module, b.func, [x], 32)
    np.testing.assert_allclose(got, x.sum(axis=(0, 2, 3) if layout == "nchw" else (0, 1, 2)), rtol=1e-5, atol=1e-5)


def test_few_long_channel_sums_run_in_parts_of_rows(_cache):
    """32 channels of NHWC rows, two sums (of x and of x * x): too few channels to share out
    (each thread would read every other half of each row), so the rows are cut into parts of
    PART_ROWS, each part's sums made in parallel, a whole row at a time, then the parts summed.
    NumPy's sums at 0 rows and at row counts around a part; the same bits on one thread or two."""
    from braze.schedule.part_sums import PART_ROWS
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("N", 0), 32))
    b.ret(b.reduce_sum(x, axes=(0,)), b.reduce_sum(b.mul(x, x), axes=(0,)))
    k = schedule(lowered(b))
    allocs = [st for st in k.body if isinstance(st, L.Alloc)]
    parts, final = fors(k)
    assert len(allocs) == 2 and parts.kind == "parallel" and final.kind == "vector"
    rng = np.random.default_rng(0)
    for n in (0, 1, PART_ROWS - 1, PART_ROWS + 1, 9 * PART_ROWS + 7):
        a = rng.standard_normal((n, 32)).astype(np.float32) + 3
        got = _run(k, b.module, b.func, [a], 64)
        a64 = a.astype(np.float64)
        np.testing.assert_allclose(got[0], a64.sum(0), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(got[1], (a64 * a64).sum(0), rtol=1e-5, atol=1e-3)
    gomp = ctypes.CDLL("libgomp.so.1")
    two = _run(k, b.module, b.func, [a], 64)
    gomp.omp_set_num_threads(1)
    try:
        one = _run(k, b.module, b.func, [a], 64)
    finally:
        gomp.omp_set_num_threads(2)
    for p, q in zip(one, two):
        np.testing.assert_array_equal(p, q)


def test_sums_in_parts_under_an_outer_loop_have_the_bits_of_a_batch_of_one(_cache):
    """A mean per image over H * W rows of 16 channels (``for n: vector for c``) sums in the same
    parts as the graph specialised to one image (no n loop): whichever library serves an image,
    it gets the same bits (two instances of a model called from many threads met both)."""
    from braze.schedule.part_sums import PART_ROWS

    def mean(batched: bool):
        b = Builder()
        rows = b.sym("R")
        x = b.param("x", tensor("f32", *((b.sym("N"),) if batched else ()), rows, 16))
        b.ret(b.reduce_mean(x, axes=(1,) if batched else (0,)))
        return b
    general, one = mean(True), mean(False)
    kg, k1 = schedule(lowered(general)), schedule(lowered(one))
    (outer,) = fors(kg)
    assert outer.kind == "parallel" and any(isinstance(st, L.Alloc) for st in outer.body)
    a = np.random.default_rng(1).standard_normal((3, 20 * PART_ROWS + 5, 16)).astype(np.float32) * 10 + 1
    (got,) = _run(kg, general.module, general.func, [a], 64)
    for i in range(3):
        (alone,) = _run(k1, one.module, one.func, [a[i]], 64)
        np.testing.assert_array_equal(got[i], alone)
        # a part's chain of float32 adds: at most PART_ROWS * 2^-24 of the terms' magnitude
        bound = (PART_ROWS + 2) * 2.0 ** -24 * np.abs(a[i]).astype(np.float64).mean(0)
        assert np.all(np.abs(alone - a[i].astype(np.float64).mean(0)) <= bound)


def test_sums_in_parts_keep_the_lets_beside_their_loop(_cache):
    """A per-row scale hoisted into a let of the outer loop (``for i: let t = w[i]; vector for c:
    sum(r: x[r, i, c] * t)``) stays beside the nest that replaces the vector loop (fuzz seed 5264:
    the let was dropped, and the C read an undeclared name)."""
    b = Builder()
    i_, r_ = b.sym("I"), b.sym("R")
    x = b.param("x", tensor("f32", r_, i_, 16))
    w = b.param("w", tensor("f32", i_))
    b.ret(b.reduce_sum(b.mul(x, b.unsqueeze(w, axes=(1,))), axes=(0,)))
    k = schedule(lowered(b))
    (outer,) = fors(k)
    assert any(isinstance(st, L.Let) for st in outer.body) and any(isinstance(st, L.Alloc) for st in outer.body)
    rng = np.random.default_rng(2)
    a, ws = rng.standard_normal((5, 3, 16)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    (got,) = _run(k, b.module, b.func, [a, ws], 64)
    np.testing.assert_allclose(got, (a * ws[:, None]).sum(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [37, 3])
def test_a_zero_d_result_is_a_lone_store(n):
    # in vector lanes unless shorter than the narrowest vector (a 2x2 pool's window row)
    b = Builder()
    x = b.param("x", tensor("f32", n))
    b.ret(b.reduce_sum(x, axes=(0,)))
    k = schedule(lowered(b))
    (store,) = k.body
    assert isinstance(store, L.Store) and store.flat and store.value.vector == (n >= 8)


# --- composition ----------------------------------------------------------------------------


@pytest.mark.parametrize("make", FUNCS, ids=lambda f: f.__name__)
def test_the_stages_one_by_one_are_schedule(make):
    k = lowered(make())
    want = schedule(k)
    got = k
    for stage in KERNEL_STAGES:
        got = stage(got)
    assert str(dataclasses.replace(got, scheduled=True)) == str(want)
    assert kernel_to_c(got, 64) == kernel_to_c(want, 64)


@pytest.mark.parametrize("make", FUNCS, ids=lambda f: f.__name__)
def test_a_stage_depends_on_its_input_only(make):
    """Not on the loop-variable counter around it (a resumed compile gives the same text),
    nor on having run before: each stage a second time changes nothing."""
    k = lowered(make())
    with L.kernel_names(500):
        elsewhere = schedule(k)
    assert str(elsewhere) == str(schedule(k))
    for stage in KERNEL_STAGES:
        once = stage(k)
        assert str(stage(once)) == str(once), stage.__name__
        k = once
    assert str(schedule(schedule(k))) == str(schedule(k))


def test_schedule_does_not_change_its_input():
    k = lowered(f_mixed())
    before = str(k)
    schedule(k)
    assert str(k) == before and not k.scheduled


def test_a_stage_left_out_is_not_run():
    k = lowered(f_exp())
    no_collapse = schedule(k, [s for s in KERNEL_STAGES if s is not collapse])
    (f,) = fors(no_collapse)
    # parallelize still joins the short outer loop with the next (_rows_joined), by div and mod
    assert [x.kind for x in chain(f)] == ["parallel", "vector"] and "//" in str(no_collapse)
    serial = schedule(k, [s for s in KERNEL_STAGES if s is not parallelize])
    assert "parallel" not in str(serial)
    nothing = schedule(k, [])
    assert nothing.scheduled and str(dataclasses.replace(nothing, scheduled=False)) == str(k)


def test_build_kernel_is_lower_then_schedule():
    b = f_layer_norm()
    k = build_kernel(b.func, b.module)
    assert k.scheduled and str(k) == str(schedule(lowered(b)))


def test_kernel_to_c_emits_what_it_is_given():
    k = lowered(f_exp())
    with pytest.raises(BrazeError, match="not been scheduled"):
        kernel_to_c(k, 64)
    flat = flatten(k)
    assert "#pragma omp" not in kernel_to_c(flat, 64)  # no hidden schedule
    assert "#pragma omp parallel" in kernel_to_c(schedule(k), 64)


# --- every stage's output runs ---------------------------------------------------------------


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "braze-cache"))


def _run(kernel, module, func, arrays, vb):
    from braze.runtime.compiler import compile_shared
    src = c_prelude(vb) + "\n" + kernel_to_c(kernel, vb) + "\n" + kernel_entry(kernel, "bz_test_entry")
    fn = ctypes.CDLL(str(compile_shared(src, name=kernel.name))).bz_test_entry
    fn.restype = None
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
    env = reference.bind_symbols(module, func, arrays)
    ins, keep, outs = iter(arrays), [], []
    for b in kernel.buffers:
        if b.role == "in":
            a = np.ascontiguousarray(next(ins), b.dtype.numpy)
        else:
            a = np.empty(tuple(S.evaluate(d, env) for d in b.shape), b.dtype.numpy)
            outs.append(a)
        keep.append(a)
    ptrs = (ctypes.c_void_p * len(keep))(*[a.ctypes.data for a in keep])
    syms = [int(env[s.name]) for s in kernel.syms]
    fn(ptrs, (ctypes.c_int64 * max(1, len(syms)))(*syms))
    return outs


def test_every_stage_output_computes_the_same(_cache):
    """flatten is the least a kernel needs to be emitted; each stage after it keeps the values."""
    b = f_mixed()
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (3, 37)).astype(np.float32)
    want = reference.run(b.module, x)
    k = lowered(b)
    for stage in KERNEL_STAGES:
        k = stage(k)
        got = _run(k, b.module, b.func, [x], 32)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=stage.__name__)


# --- a small model through the graph pipeline --------------------------------------------------


def test_a_model_s_kernels_stage_by_stage_are_schedule():
    """Every generated kernel of a small transformer block after the graph passes: the stages
    one by one give the C that ``schedule`` (and ``build_kernel``) gives."""
    from braze.pipeline import run_pipeline
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("B"), b.sym("T"), 16))
    w = b.constant(rng.standard_normal((16, 16)).astype(np.float32), name="w")
    q = b.matmul(b.layer_norm(x, b.constant(np.ones(16, np.float32), name="g")), w)
    s = b.softmax(b.matmul(q, b.permute(q, perm=(0, 2, 1))), axis=-1)
    o = b.add(x, b.gelu(b.matmul(s, q)))
    b.ret(o, b.sub(o, b.reduce_mean(o, axes=(1,), keepdims=True)))
    m = run_pipeline(b.module)
    n = 0
    for f in list(m.functions.values()):
        for node in f.nodes:
            if node.op != "fused" or node.attrs["kind"] in ("gemm", "conv"):
                continue
            callee = m.functions[node.attrs["callee"]]
            with L.kernel_names():
                k = lower_function(callee, m, f"k_{callee.name}")
            for stage in KERNEL_STAGES:
                k = stage(k)
            want = kernel_to_c(build_kernel(callee, m, f"k_{callee.name}"), 32)
            assert kernel_to_c(k, 32) == want, callee.name
            n += 1
    assert n >= 4


def test_vectorize_sets_the_streaming_threshold_and_the_c_reads_it():
    """Stage vectorize gives a kernel whose vector loops store a float32 output the ``stream``
    threshold (STREAM_BYTES); one that stores only integers, none; a threshold already in the
    text stays. The C tests the output's bytes against the kernel's threshold, whatever it is:
    a dump edited there compiles with the new one."""
    from braze.ir.loop_parser import parse_kernel
    from braze.schedule.vectorize import STREAM_BYTES
    src = textwrap.dedent("""
        kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
          for _i1 in 0..n:
            y[[_i1]] = exp(x[[_i1]])
        """)
    k = vectorize(parse_kernel(src))
    assert k.stream == STREAM_BYTES and f"stream {STREAM_BYTES}]" in str(k).splitlines()[0]
    assert str(parse_kernel(str(k))) == str(k)
    ints = vectorize(parse_kernel(src.replace("f32", "i32").replace("exp(x[[_i1]])", "x[[_i1]]")))
    assert ints.stream is None and "stream" not in str(ints)
    edited = vectorize(parse_kernel(src.replace("[pointwise]", "[pointwise, stream 4096]")))
    assert edited.stream == 4096
    c = kernel_to_c(schedule(edited), 64)
    assert "* 4 >= 4096.0;" in c and "bz_st_nt(" in c, c
    assert "bz_st_nt(" not in kernel_to_c(schedule(edited), 0)
