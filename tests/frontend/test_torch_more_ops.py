"""The torch frontend on fmod/roll, F.interpolate (every mode, size and scale_factor, with and
without torch's decompositions), group_norm, weight norm, topk and sort: the reference against
eager and the native build against the reference, at symbolic dims (1, odd and even sizes)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.testing import assert_close, flatten_outputs, torch_module  # noqa: E402

Dim = torch.export.Dim
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "torch_more_cache"))


Fn = torch_module


def check(mod, inputs, dyn, native=True, decompose=False, exact=False, rtol=1e-5, atol=2e-6):
    """Export at inputs[-1], import; reference vs eager and native vs reference at every input."""
    mod = mod.eval()
    with torch.no_grad():  # Fn.forward(*xs): one varargs entry
        ep = torch.export.export(mod, inputs[-1], dynamic_shapes=(tuple(dyn),), strict=False)
    if decompose:
        ep = ep.run_decompositions()
    m = braze.import_torch(ep)
    before = braze.stats()["native_compiles"] + braze.stats()["cache_hits"]
    cm = braze.compile(m) if native else None
    for ins in inputs:
        with torch.no_grad():
            want = [w.numpy() for w in flatten_outputs(mod(*ins))]
        ref = braze.reference.run(m, *ins)
        ref = list(ref) if isinstance(ref, tuple) else [ref]
        got = cm(*ins) if cm else None
        got = (list(got) if isinstance(got, tuple) else [got]) if cm else [None] * len(ref)
        for k, (w, r, g) in enumerate(zip(want, ref, got)):
            what = f"output {k} at {[tuple(i.shape) for i in ins]}"
            assert r.dtype == w.dtype, what
            ex = exact if isinstance(exact, bool) else k in exact
            if ex or w.dtype.kind != "f":
                np.testing.assert_array_equal(r, w, err_msg=what)
            else:
                assert_close(r, w, rtol=rtol, atol=atol, what=what)
            if g is not None:
                g = g.numpy()
                if ex or w.dtype.kind != "f":
                    np.testing.assert_array_equal(g, r, err_msg="native " + what)
                else:
                    assert_close(g, r, rtol=rtol, atol=max(atol, 1e-5), what="native " + what)
    if cm:
        assert braze.stats()["native_compiles"] + braze.stats()["cache_hits"] == before + 1
    return m


@pytest.mark.parametrize("decompose", [False, True])  # torch's roll decomposition goes through fmod
def test_fmod_tensor_scalar_and_roll(decompose):
    def f(self, x, i):
        return (torch.fmod(x, 0.7), torch.fmod(x, x * 0.5 + 3.0), torch.fmod(i, 3), torch.fmod(i, -4),
                torch.roll(x, shifts=(-2, 3), dims=(1, 2)), torch.roll(i, 5, 1))

    s = Dim("s", min=4, max=64)
    inputs = [(torch.randn(2, n, n + 1) * 4, torch.arange(2 * n).reshape(2, n) - n) for n in (4, 5, 9)]
    check(Fn(f), inputs, ({1: s, 2: s + 1}, {1: s}), decompose=decompose)


MODES = [("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True), ("bicubic", False),
         ("bicubic", True)]


NEAREST = {0, 1}  # outputs of the nearest modes: the same indices as torch, exactly


@pytest.mark.parametrize("how", ["size", "scale2", "scale1.5"])
def test_interpolate_every_mode_symbolic_hw(how):
    kw = {"size": dict(size=(7, 5)), "scale2": dict(scale_factor=2.0), "scale1.5": dict(scale_factor=(1.5, 0.75))}[how]

    def f(self, x):
        return tuple(F.interpolate(x, mode=mode, align_corners=ac, **kw) for mode, ac in MODES)

    h, w = Dim("h", min=4, max=64), Dim("w", min=4, max=64)
    g = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(1, 2, a, b, generator=g),) for a, b in [(4, 4), (5, 9), (13, 6)]]
    # bicubic's 16-tap float32 sums: eager is up to ~7e-6 from float64 (an unseeded run hit 2.4e-6)
    check(Fn(f), inputs, ({2: h, 3: w},), exact=NEAREST, atol=2e-5)


@pytest.mark.parametrize("modes,native", [
    ([("nearest-exact", None)], False),
    pytest.param([("nearest-exact", None), ("bicubic", False), ("bicubic", True)], True, marks=pytest.mark.slow)])
def test_interpolate_decomposed_program(modes, native):
    """run_decompositions() turns nearest-exact and bicubic (the others stay upsample_*) into
    index/floor/clamp graphs on SymFloats (torch's export and decomposition take ~5 s for bicubic)."""

    def f(self, x):
        return tuple(F.interpolate(x, scale_factor=1.5, mode=mode, align_corners=ac) for mode, ac in modes)

    h, w = Dim("h", min=4, max=64), Dim("w", min=4, max=64)
    inputs = [(torch.randn(1, 2, a, b),) for a, b in [(4, 4), (5, 9)]]
    check(Fn(f), inputs, ({2: h, 3: w},), native=native, decompose=True, exact={0})


def test_interpolate_1d_3d():
    def f(self, x, v):
        return (F.interpolate(x, scale_factor=2, mode="linear"), F.interpolate(x, size=5, mode="nearest"),
                F.interpolate(v, size=(3, 4, 5), mode="trilinear", align_corners=True))

    t = Dim("t", min=2, max=64)
    inputs = [(torch.randn(2, 3, n), torch.randn(1, 1, 2, n, 3)) for n in (2, 3, 8)]
    check(Fn(f), inputs, ({2: t}, {3: t}), native=False)


def test_group_norm_weight_norm_conv1d():
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, padding=1, groups=2), dim=2)
    old = nn.utils.weight_norm(nn.Conv1d(6, 6, 1), dim=0)

    def f(self, x):
        h = F.gelu(self.gn(self.conv(x)))
        return self.old(h) + F.group_norm(h, 2, eps=1e-3)

    m = Fn(f, conv=conv, old=old, gn=nn.GroupNorm(3, 6))
    t = Dim("t", min=1, max=4096)
    check(m, [(torch.randn(2, 4, n),) for n in (1, 7, 64)], ({2: t},), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("decompose", [False, True])  # aten.conv_transpose2d, or aten.convolution(transposed)
def test_transposed_convolutions_1d_and_2d(decompose):
    up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
    grouped = nn.ConvTranspose2d(6, 4, (3, 2), stride=(1, 2), padding=(0, 1), groups=2, dilation=(2, 1), bias=False)
    one = nn.ConvTranspose1d(4, 3, 3, stride=2)

    def f(self, x, y):
        return torch.relu(self.grouped(self.up(x))), self.one(y)

    m = Fn(f, up=up, grouped=grouped, one=one)
    n, h, w, l_ = Dim("n", min=1, max=8), Dim("h", min=1, max=64), Dim("w", min=1, max=64), Dim("l", min=1, max=64)
    inputs = [(torch.randn(b, 4, hh, ww), torch.randn(b, 4, ll)) for b, hh, ww, ll in ((1, 1, 1, 1), (2, 5, 7, 9),
                                                                                        (3, 8, 3, 4))]
    check(m, inputs, ({0: n, 2: h, 3: w}, {0: n, 2: l_}), decompose=decompose)


def test_grid_sample_every_mode():
    def f(self, x, g):
        return (F.grid_sample(x, g, mode="bilinear", padding_mode="zeros", align_corners=False),
                F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True),
                F.grid_sample(x, g, mode="bicubic", padding_mode="zeros", align_corners=True))

    n, h, w, ho = Dim("n", min=1, max=8), Dim("h", min=1, max=64), Dim("w", min=1, max=64), Dim("ho", min=1, max=64)
    g = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(b, 2, hh, ww, generator=g), torch.rand(b, hoo, 3, 2, generator=g) * 2.4 - 1.2)
              for b, hh, ww, hoo in ((1, 1, 1, 1), (2, 5, 7, 4), (3, 8, 3, 6))]
    check(Fn(f), inputs, ({0: n, 2: h, 3: w}, {0: n, 1: ho}), atol=3e-6)


def test_topk_values_and_indices():
    def f(self, x, i):
        v, idx = torch.topk(x, 3, dim=1)
        v2, idx2 = x.topk(2, dim=-1, largest=False, sorted=True)
        return v, idx, v2, idx2, torch.topk(i, 4).values

    s = Dim("s", min=4, max=512)
    g = torch.Generator().manual_seed(0)
    inputs = [(torch.randn(2, n, 5, generator=g), torch.randperm(3 * n, generator=g).reshape(3, n))
              for n in (4, 7, 65)]  # distinct values: torch's indices are unambiguous
    check(Fn(f), inputs, ({1: s}, {1: s}), exact=True)


def test_sort_argsort_and_msort_are_topk_of_the_whole_axis():
    """With NaN (last ascending, first descending) and a stable sort's ties exact; the other sorts'
    indices point at the sorted values (torch's unstable sort may order ties otherwise)."""
    def f(self, x):
        st = torch.sort(x, dim=1, stable=True)
        return (st.values, st.indices, torch.sort(x, dim=0, descending=True, stable=True).indices,
                x.sort(-1, descending=True).values, x.msort(), torch.sort(x[0, 0]).values)

    def g(self, x):
        return x.argsort(1), x.sort(dim=-1, descending=True).indices

    s = Dim("s", min=1, max=512)
    gen = torch.Generator().manual_seed(0)
    inputs = []
    for n in (1, 7, 70, 300):  # braze_select.h (the axis may be 512 long): a merge sort of each row
        x = torch.randint(-3, 3, (3, n, 2), generator=gen).float()  # many ties
        x[0, 0, 0] = x[2, n - 1, 1] = float("nan")
        inputs.append((x,))
    check(Fn(f), inputs, ({1: s},), exact=True)
    ep = torch.export.export(Fn(g), inputs[-1], dynamic_shapes=(({1: s},),), strict=False)
    cm = braze.compile(ep)
    for (x,) in inputs:
        for got, d in zip(cm(x), (1, -1)):
            got = torch.from_numpy(np.asarray(got))
            want_vals = torch.sort(x, dim=d, stable=True, descending=d == -1).values
            np.testing.assert_array_equal(x.gather(d, got).numpy(), want_vals.numpy())


def test_a_select_group_compiles_with_quotes_in_its_line_and_the_verifier_on():
    """The group's source line goes into a C string (an out-of-memory message), and debug=1 verifies
    every stage, ``fused`` nodes of kind select included."""
    def f(self, x):
        return torch.sort(x, dim=-1).values * {"two": 2}["two"]

    ep = torch.export.export(Fn(f), (torch.randn(2, 100),), dynamic_shapes=(({1: Dim("s")},),), strict=False)
    cm = braze.compile(ep, options={"debug": 1})
    assert any(n.attrs.get("kind") == "select" for n in cm.module.main.nodes if n.op == "fused")
    x = torch.randn(2, 70)
    np.testing.assert_array_equal(np.asarray(cm(x)), (torch.sort(x, dim=-1).values * 2).numpy())


def test_derived_dims_become_input_symbols():
    """A dim exported as 4 * hb (a derived Dim) is the symbol; hb is (dim // 4), and the
    divisibility is checked on every call, natively too."""
    def f(self, x):
        b, h, w = x.shape
        return x.view(b, h // 4, 4, w).sum(2) * 2

    hb = Dim("hb", min=2, max=16)
    m = check(Fn(f), [(torch.randn(2, 4 * i, 3),) for i in (2, 3, 5)], ({0: Dim("batch", min=1, max=8), 1: 4 * hb},))
    assert "hb_x4" in m.symbols and m.main.params[0].type.shape[1] == m.symbols["hb_x4"]
    cm = braze.compile(m)
    for run in (lambda x: braze.reference.run(m, x), cm):
        with pytest.raises(braze.InputError, match="divisible by 4"):
            run(torch.randn(2, 10, 3))


def test_unsafe_index_and_masked_index():
    """What inductor-style decompositions of interpolate and padding emit."""
    def f(self, x):
        n = x.shape[1]
        i = torch.arange(n + 2) - 1  # -1 and n are out of range: masked off below
        mask = (i >= 0) & (i < n)
        a = torch.ops.aten._unsafe_index(x, [None, torch.arange(n) // 2])
        b = torch.ops.aten._unsafe_masked_index(x, mask, [None, i], -7.0)
        return a, b

    s = Dim("s", min=2, max=64)
    check(Fn(f), [(torch.randn(2, n),) for n in (2, 5, 8)], ({1: s},), exact=True)


def test_int_linspace_follows_eager_not_the_float32_decomposition():
    """torch's own decomposition computes int linspace in float32 (3 where eager gives 4)."""
    def f(self, x, a, b):
        return (x + torch.linspace(0, 7, 50, dtype=torch.int64), torch.linspace(-3.7, 11.2, 333, dtype=torch.int64),
                torch.linspace(a, b, 77, dtype=torch.int64), torch.linspace(a, b, 9), torch.linspace(5, -2, 1))

    a, b = torch.tensor(-9.5), torch.tensor(9.25)
    check(Fn(f), [(torch.zeros(50, dtype=torch.int64), a, b)], [None, None, None])


def test_diff_is_converted_without_decomposing_the_program(monkeypatch):
    # transformers' masks call diff; decomposing it would re-trace the whole program
    def f(self, x, m, i):
        return torch.diff(x), torch.diff(x, n=2, dim=0), torch.diff(m, dim=-1), torch.diff(i, n=1, dim=1)

    def g(self, x):  # n=0 is the input itself: torch drops prepend and append then
        return (torch.diff(x, dim=1, prepend=x[:, :2], append=x[:, -1:]), torch.diff(x, n=3),
                torch.diff(x, n=0, dim=1, prepend=x[:, :2], append=x[:, -1:]))

    def no_decompositions(self, *a, **k):
        raise AssertionError("the program was decomposed")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", no_decompositions)
    s = Dim("s", min=3, max=64)  # torch's export guards s - 1 != 1 for a diff along s
    inputs = [(torch.randn(3, n), torch.rand(2, n) > 0.5, torch.arange(2 * n).reshape(2, n) ** 2) for n in (3, 4, 7)]
    check(Fn(f), inputs, ({1: s}, {1: s}, {1: s}), exact=True)
    s = Dim("s", min=5, max=64)
    check(Fn(g), [(torch.randn(2, n),) for n in (5, 6, 9)], ({1: s},), exact=True)


def test_index_add_index_put_accumulate_and_the_embedding_gradient():
    """Rows added at indices (braze's index_add): torch.index_add with alpha, index_put with
    accumulate (negative and repeated indices, values broadcast, a 2-D index), and an embedding's
    gradient with a padding index, at symbolic row and index counts."""
    aten = torch.ops.aten

    def f(self, x, i, src, j):
        neg = j - 6  # negative indices, which index_put wraps
        return (torch.index_add(x, 0, i, src, alpha=0.5),
                torch.index_put(x, (neg,), torch.ones(3), accumulate=True),
                torch.index_put(x, (i.reshape(1, -1),), src.unsqueeze(0), accumulate=True),
                aten.embedding_dense_backward(src, i, 6, 2, False))

    n = Dim("n", min=1, max=64)
    rng = np.random.default_rng(4)

    def inputs(k):
        f32 = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
        return f32(6, 3), torch.from_numpy(rng.integers(0, 6, k)), f32(k, 3), torch.from_numpy(rng.integers(0, 6, k))
    ins = [inputs(k) for k in (1, 7, 20)]
    m = check(Fn(f), ins, ({}, {0: n}, {0: n}, {0: n}))
    assert sum(n.op == "index_add" for n in m.main.nodes) == 4


def test_scatter_add_and_scatter_reduce_into_the_flattened_tensor():
    """torch.scatter_add and scatter_reduce (sum, prod, amax, amin, with and without the tensor's
    own values) along dim 0 and 1, an index smaller than src, the GNN form (a column index
    expanded over the features), int64 too, at symbolic edge counts: the same bits as eager (the
    same order of adds). An index outside [0, n) fails the call (flattened, it would add into
    another row)."""
    from braze.errors import InputError

    def f(self, x, i, src, xi):
        j = i % 3
        return (x.scatter_add(0, i, src), x.scatter_add(1, j.t()[:, :1], src.t()),
                x.scatter_reduce(0, i, src, "sum", include_self=False),
                x.scatter_reduce(0, i, src, "prod"), x.scatter_reduce(0, i, src, "amax", include_self=False),
                x.scatter_reduce(0, i[:, :1].expand(-1, 3), src, "amin"),
                torch.zeros(6, 3).scatter_add(0, i[:, :1].expand(-1, 3), src * 2),
                xi.scatter_reduce(0, i, (src * 100).long(), "amin", include_self=False),
                xi.scatter_add(0, i, (src * 100).long()))

    n = Dim("n", min=1, max=64)
    rng = np.random.default_rng(6)

    def inputs(k):
        f32 = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
        return (f32(6, 3), torch.from_numpy(rng.integers(0, 6, (k, 3))), f32(k, 3),
                torch.from_numpy(rng.integers(-50, 50, (6, 3))))
    ins = [inputs(k) for k in (1, 2, 7, 20)]
    m = check(Fn(f), ins, ({}, {0: n}, {0: n}, {}), exact=True)
    assert not any(n.op == "scatter" for n in m.main.nodes)
    cm = braze.compile(m)
    x, i, src, xi = inputs(5)
    for bad in (6, -1):
        i2 = i.clone()
        i2[3, 1] = bad
        with pytest.raises(RuntimeError):
            f(None, x, i2, src, xi)
        with pytest.raises(InputError, match="index is out of range"):
            cm(x, i2, src, xi)


def test_index_put_without_accumulate_writes_rows_the_last_write_winning():
    """``x[idx] = v`` (braze's index_put): negative indices wrap, values broadcast, a repeated index
    takes its last row, at symbolic row and index counts."""

    def f(self, x, i, src):
        y = x.clone()
        y[i - 6] = src
        return y, torch.index_put(x, (i,), torch.full((3,), 2.5))

    n = Dim("n", min=1, max=64)
    rng = np.random.default_rng(5)

    def inputs(k):
        i = torch.from_numpy(rng.permutation(6)[: min(k, 6)] if k <= 6 else rng.integers(0, 6, k))
        return (torch.from_numpy(rng.standard_normal((6, 3)).astype(np.float32)), i,
                torch.from_numpy(rng.standard_normal((len(i), 3)).astype(np.float32)))
    ins = [inputs(k) for k in (1, 5, 6)]
    m = check(Fn(f), ins, ({}, {0: n}, {0: n}), exact=True)
    assert sum(n.op == "index_put" for n in m.main.nodes) == 2
    # repeated indices: torch leaves the winner undefined; braze takes the last (numpy's order)
    x, i = torch.zeros(4, 2), torch.tensor([1, 3, 1, 1, 0])
    src = torch.arange(10.0).reshape(5, 2)
    cm = braze.compile(Fn(lambda self, x, i, s: torch.index_put(x, (i,), s)), (x, i, src))
    want = np.zeros((4, 2), np.float32)
    want[[3, 1, 0]] = src.numpy()[[1, 3, 4]]
    np.testing.assert_array_equal(cm(x, i, src), want)
