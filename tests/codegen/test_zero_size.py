"""Zero-sized dims, natively and in the reference, against torch (cases the random-graph
fuzzer found: braze/fuzz; each failed on main before its fix)."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))


def _check(module, inputs_list, torch_fn):
    """Native == reference == torch at every input list (one compile)."""
    cm = braze.compile(module)
    compiles = braze.stats()["native_compiles"]
    for xs in inputs_list:
        want = torch_fn(*[torch.from_numpy(x) for x in xs]).numpy()
        ref = braze.reference.run(module, *xs)
        assert_close(ref, want, what="reference vs torch")
        assert_close(cm(*xs), want, what="native vs torch")
    assert braze.stats()["native_compiles"] == compiles


def test_flatten_of_a_static_empty_tensor_compiles():
    # lowering divided by the 0 dim ("symbolic mod by zero")
    n = Sym("n", 1, 8)
    m, _ = build([tensor("f32", 2, 0, 8), tensor("f32", n)],
                 lambda b, x, y: (b.flatten(b.ceil(x), start_axis=0), b.neg(y)))
    cm = braze.compile(m)
    out, y = cm(np.zeros((2, 0, 8), np.float32), np.ones(3, np.float32))
    assert out.shape == (0,) and y.tolist() == [-1, -1, -1]


def test_tile_and_pad_of_an_empty_tensor_compile():
    # lowering took the index modulo the 0 dim
    n = Sym("n", 1, 8)
    m, _ = build([tensor("f32", 1, 0, 3), tensor("f32", n)],
                 lambda b, x, y: (b.pad(b.tile(x, repeats=(2, 3, 1)), pads=(0, 1, 0, 0, 0, 1), value=2.0),
                                  b.neg(y)))
    cm = braze.compile(m)
    x, y = np.zeros((1, 0, 3), np.float32), np.ones(2, np.float32)
    for got, want in zip(cm(x, y), braze.reference.run(m, x, y)):
        assert_close(got, want)


def test_concat_of_a_tiled_input_with_a_dim_that_may_be_empty_does_not_trap():
    # the concat's other branch indexes the tiled input modulo its dim, speculatively: by 0 the
    # process died of SIGFPE (fuzz seed 70587)
    n = Sym("n", 0, 8)
    m, _ = build([tensor("f32", 4, 1, n), tensor("f32", 4, 2, 3)],
                 lambda b, x, c: b.reduce_mean(b.concat(b.tile(x, repeats=(1, 2, 1)), c, axis=2),
                                               axes=(0, 1, 2), keepdims=True))
    _check(m, [[np.ones((4, 1, k), np.float32), np.full((4, 2, 3), 2.0, np.float32)] for k in (0, 1, 3)],
           lambda x, c: torch.cat([x.repeat(1, 2, 1), c], dim=2).mean(dim=(0, 1, 2), keepdim=True))


def test_concat_never_reads_an_empty_piece():
    """Fuzz seed 16614 (tests/fuzz's once-failed seeds): a static 0-size piece's clamped index was
    negative, and the hoisted load read before its arena slot at every call (a segfault where the
    arena began a page). Such pieces are dropped; one whose size may be 0 at run time is read at
    index 0 at the lowest. The results here are the same either way: the read is never selected."""
    n, z = Sym("n", 1, 8), Sym("z", 0, 4)
    m, _ = build([tensor("f32", 0, 3), tensor("f32", n, 3)],
                 lambda b, e, x: b.concat(b.atan(e), b.atan(e), x, axis=0))
    _check(m, [(np.zeros((0, 3), np.float32), np.full((k, 3), 0.25, np.float32)) for k in (1, 3, 8)],
           lambda e, x: torch.cat([e.atan(), e.atan(), x]))
    m, _ = build([tensor("f32", z, 3), tensor("f32", n, 3)], lambda b, y, x: b.concat(y, x, axis=0))
    _check(m, [(np.ones((zz, 3), np.float32), np.full((k, 3), 0.25, np.float32)) for k, zz in ((1, 0), (3, 2), (8, 4))],
           lambda y, x: torch.cat([y, x]))


def test_a_padded_empty_gather_or_division_reads_nothing():
    """Fuzz seed 24563: pad (a select between the source and the pad value) builds its source's read
    at every position. From an empty gather the index it read lay outside the empty index buffer, and
    once the arena held other data the call failed with "an index is out of range". A tensor of static
    size 0 lowers to 0 (braze.lowering.kernel._nothing): no read, no check."""
    from braze.ir import loop as L
    from braze.lowering import lower_function
    n = Sym("n", 1, 8)
    m, _ = build([tensor("f32", n), tensor("i64", 0), tensor("i64", 0), tensor("f32", n)],
                 lambda b, x, i, j, y: (b.pad(b.gather(x, i, axis=0), pads=(0, 2), value=1.0),
                                        b.pad(b.div(i, j), pads=(1, 1), value=7), b.mul(y, y)))
    kernel = lower_function(m.main, m)
    reads = {e.buffer.name for s in L.walk_stmts(kernel.body) for x in L.stmt_exprs(s) for e in L.walk(x)
             if isinstance(e, L.Load)}
    assert reads == {"x3"}, reads  # y
    text = str(kernel)
    assert "axis_index" not in text and "divisor" not in text, text
    cm = braze.compile(m)
    empty = np.zeros(0, np.int64)
    for k in (1, 5, 8, 2):
        y = np.full(k, 3.0, np.float32)
        g, q, yy = cm(np.ones(k, np.float32), empty, empty, y)
        np.testing.assert_array_equal(g, [1.0, 1.0])
        np.testing.assert_array_equal(q, [7, 7])
        np.testing.assert_array_equal(yy, y * y)


@pytest.mark.parametrize("n_lo", [0, 1])
def test_mean_of_values_near_the_float_limit_and_of_an_empty_row(n_lo):
    # the differences from the row's first element overflowed float32 where the mean does not
    # (fuzz seed 70827: inf for -3.9e37); an empty row's mean is NaN
    n = Sym("n", n_lo, 8)
    m, _ = build([tensor("f32", 2, n)], lambda b, x: b.reduce_mean(x, axes=(1,)))
    big = np.array([[-1.367e38, -1.83e37, -0.148, 1.0], [3e38, -3e38, 3e38, -3e38]], np.float32)
    cases = [[big], [np.full((2, 3), 7.25, np.float32)]] + ([[np.zeros((2, 0), np.float32)]] if n_lo == 0 else [])
    _check(m, cases, lambda x: x.mean(dim=1))


def test_average_pool_of_an_empty_input_is_zero_not_nan():
    # a window with no input element (count_include_pad=False): the reference gives 0, the
    # generated kernel gave 0/0
    n = Sym("n", 1, 8)
    m, _ = build([tensor("f32", n, 2, 0)],
                 lambda b, x: b.avg_pool2d(x, kernel=(1, 2), stride=(1, 3), padding=(0, 1, 0, 1),
                                           count_include_pad=False))
    x = np.zeros((3, 2, 0), np.float32)
    want = braze.reference.run(m, x)
    assert want.shape == (3, 2, 1) and np.all(want == 0)
    assert_close(braze.compile(m)(x), want)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis(op):
    n = Sym("n", 0, 8)
    m, _ = build([tensor("f32", 3, n)], lambda b, x: getattr(b, op)(x, axis=-1))
    tfn = getattr(torch, op)
    _check(m, [[np.zeros((3, 0), np.float32)], [np.ones((3, 2), np.float32)]], lambda x: tfn(x, dim=-1))


def test_attention_with_no_keys_gives_zeros():
    s = Sym("s", 0, 8)
    m, _ = build([tensor("f32", 1, 2, 3, 4), tensor("f32", 1, 2, s, 4), tensor("f32", 1, 2, s, 5)],
                 lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    rng = np.random.default_rng(0)
    xs = [[rng.standard_normal(sh).astype(np.float32) for sh in ((1, 2, 3, 4), (1, 2, n, 4), (1, 2, n, 5))]
          for n in (0, 3)]
    _check(m, xs, torch.nn.functional.scaled_dot_product_attention)


@pytest.mark.parametrize("act", ["relu", "sigmoid", "gelu"])
def test_linear_with_an_empty_contracted_dim_is_its_bias(act):
    # oneDNN refused to pack the [N, 0] weight: braze_init failed
    n = Sym("n", 0, 8)
    rng = np.random.default_rng(1)
    w = np.zeros((5, 0), np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    m, _ = build([tensor("f32", n, 0), tensor("f32", n, 5)],
                 lambda b, x, r: b.add(getattr(b, act)(b.add(b.linear(x, b.constant(w, "w")),
                                                                b.constant(bias, "b"))), r))
    xs = [[np.zeros((k, 0), np.float32), rng.standard_normal((k, 5)).astype(np.float32)] for k in (3, 0)]
    tact = getattr(torch.nn.functional, act)
    _check(m, xs, lambda x, r: tact(x @ torch.from_numpy(w).T + torch.from_numpy(bias)) + r)


def test_batched_matmul_with_an_empty_batch_or_rows():
    # the library call refused NULL pointers of empty tensors, and took 0-vs-1 batch dims for 1
    b_, m_ = Sym("b", 0, 8), Sym("m", 0, 8)
    m, _ = build([tensor("f32", b_, 1, m_, 4), tensor("f32", 1, 3, 4, 2)], lambda b, x, y: b.matmul(x, y))
    rng = np.random.default_rng(2)
    xs = [[rng.standard_normal(sh).astype(np.float32) for sh in ((bv, 1, mv, 4), (1, 3, 4, 2))]
          for bv, mv in ((0, 3), (2, 0), (2, 3))]
    _check(m, xs, torch.matmul)


def test_conv_of_an_empty_batch():
    n = Sym("n", 0, 4)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m, _ = build([tensor("f32", n, 3, 6, 6)],
                 lambda b, x: b.relu(b.conv2d(x, b.constant(w, "w"), padding=(1, 1, 1, 1))))
    xs = [[rng.standard_normal((k, 3, 6, 6)).astype(np.float32)] for k in (0, 2)]
    _check(m, xs, lambda x: torch.relu(torch.nn.functional.conv2d(x, torch.from_numpy(w), padding=1)))


def test_convolution_gradients_of_an_empty_batch():
    # the weight's gradient over no samples is zero (the reference had reshaped the empty gradient with a -1)
    n = Sym("n", 0, 4)
    rng = np.random.default_rng(4)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m, _ = build([tensor("f32", n, 4, 6, 6), tensor("f32", n, 3, 6, 6)],
                 lambda b, g, x: (b.conv2d_backward_weight(g, x, b.constant(w, "w"), padding=(1, 1, 1, 1)),
                                  b.conv2d_backward_input(g, x, b.constant(w, "w"), padding=(1, 1, 1, 1))))

    def grads(g, x):
        x = x.clone().requires_grad_(True)
        wt = torch.from_numpy(w).requires_grad_(True)
        torch.nn.functional.conv2d(x, wt, padding=1).backward(g)
        return wt.grad, x.grad

    cm = braze.compile(m)
    for k in (0, 2):
        g, x = (rng.standard_normal((k, c, 6, 6)).astype(np.float32) for c in (4, 3))
        want = [t.numpy() for t in grads(torch.from_numpy(g), torch.from_numpy(x))]
        for got, what in ((braze.reference.run(m, g, x), "reference"), (cm(g, x), "native")):
            for a, e in zip(got, want):
                assert_close(a, e, rtol=1e-4, atol=1e-4, what=f"{what} at batch {k}")


def test_a_graph_whose_intermediates_are_all_empty_runs():
    """Found by the fuzzer: a group_norm of no channels has only empty intermediates, so its
    scratch memory was NULL, and a load hoisted before a loop that runs no times read it (a
    segfault); its float32 parameters also made the result float32."""
    m, _ = build([tensor("f16", 1, Sym("n", 0), 3)],
                 lambda b, x: b.group_norm(x, b.constant(np.zeros(0, np.float32)),
                                           b.constant(np.zeros(0, np.float32)), groups=1))
    out = braze.compile(m)(np.zeros((1, 0, 3), np.float16))
    assert out.shape == (1, 0, 3) and out.dtype == np.float16
