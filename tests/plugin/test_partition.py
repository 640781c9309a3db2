"""Per-op fallback: braze compiles the regions it supports, PyTorch runs the rest, one warning per op."""

from __future__ import annotations

import logging
import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class Mixed(nn.Module):
    """Supported layers around ops braze lacks: cummax, an FFT (complex), nonzero (data-dependent)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        y = torch.relu(self.a(x))
        v, idx = torch.cummax(y, dim=-1)
        f = torch.fft.rfft(v, dim=-1).abs()
        z = self.b(v) + f.sum(-1, keepdim=True)
        nz = torch.nonzero(z > 0)
        return z * 2, nz.shape[0] + z.sum(), idx


def _braze_warnings(record):
    return [w for w in record if issubclass(w.category, BrazeWarning)]


def _compare_and_warnings(m, inputs, tol) -> str:
    """Compile ``m`` with the backend, check it against eager at every input, return the text
    of the BrazeWarnings it gave."""
    c = torch.compile(m, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record, torch.no_grad():
        warnings.simplefilter("always")
        for x in inputs:
            torch.testing.assert_close(c(x), m(x), rtol=tol, atol=tol)
    return " | ".join(str(w.message) for w in _braze_warnings(record))


def test_unsupported_ops_run_in_torch_with_one_warning_each(fresh_warnings, compiles):
    m = Mixed().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    before = compiles()
    with warnings.catch_warnings(record=True) as record, torch.no_grad():
        warnings.simplefilter("always")
        for b in (2, 3, 1, 5, 2, 9):
            x = torch.randn(b, 16)
            got, want = c(x), m(x)
            torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-3)
            assert torch.equal(got[2], want[2])
    texts = [str(w.message) for w in _braze_warnings(record)]
    for op in ("aten.cummax.default", "aten._fft_r2c.default"):
        mine = [t for t in texts if op in t]
        assert len(mine) == 1, (op, texts)
        assert "test_partition.py" in mine[0] and "no converter" in mine[0]
    cummax = next(w for w in _braze_warnings(record) if "cummax" in str(w.message))
    assert cummax.filename.endswith("test_partition.py")  # the warning points at the user's line
    assert "torch.cummax(y, dim=-1)" in str(cummax.message)
    assert any("complex64" in t for t in texts)
    assert compiles() > before, "braze compiled none of the supported regions"


def test_debug_prints_the_partition_and_time_shares(caplog):
    from braze.plugin import report
    m = Mixed().eval()
    c = torch.compile(m, backend="braze", dynamic=True, options={"debug": 1})
    with caplog.at_level(logging.INFO, logger="braze.plugin"), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in (3, 4, 4):
            c(torch.randn(b, 16))
    text = caplog.text
    assert "braze region(s)" in text and "torch: " in text and "cummax.default" in text
    shares = report.time_report()
    assert "braze fused_" in shares and "torch and glue" in shares and "calls" in shares


def test_a_refused_converter_splits_the_region(fresh_warnings):
    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = F.avg_pool2d(torch.relu(self.conv(x)), 2, divisor_override=3)  # braze refuses divisor_override
            return torch.sigmoid(y) * 2

    texts = _compare_and_warnings(Pool().eval(), [torch.randn(2, 3, hw, hw) for hw in (8, 10, 12)], 1e-5)
    assert any("avg_pool2d" in t and "divisor_override" in t for t in texts.split(" | ")), texts


def test_an_output_braze_lacks_leaves_only_its_op_to_torch(fresh_warnings, compiles):
    """group_norm's mean output is used: braze does not compute it, so group_norm alone runs in
    PyTorch (with a warning naming the output), and the ops around it still compile."""
    class Stats(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            h = torch.relu(self.conv(x))
            n, c, hh, ww = h.shape
            y, mean, _ = torch.ops.aten.native_group_norm(h, None, None, n, c, hh * ww, 2, 1e-5)
            return torch.sigmoid(y) * 2, mean * 3

    before = compiles()
    texts = _compare_and_warnings(Stats().eval(), [torch.randn(2, 3, hw, hw) for hw in (8, 10, 12)], 1e-5)
    mine = [t for t in texts.split(" | ") if "native_group_norm" in t]
    assert mine and "mean output" in mine[0], texts
    assert not any("region of" in t for t in texts.split(" | ")), texts  # no region fell back whole
    assert compiles() > before, "braze compiled none of the ops around group_norm"


def test_what_braze_cannot_run_natively_stays_in_torch(fresh_warnings):
    class Half(nn.Module):
        def forward(self, x):
            h = torch.tanh(x).half() * 3  # float16 elementwise: braze's (computed in float32)
            y = (h @ h.transpose(-1, -2)).float() + 1  # a float16 GEMM: braze's too (issue 23)
            c = torch.view_as_complex(y.unsqueeze(-1).expand(*y.shape, 2).contiguous())
            return torch.view_as_real(c * (1 + 2j)).sum(-1)  # complex: PyTorch's

    # braze's float16 GEMM sums in another order than eager's: one float16 ulp of values up to 82
    # (0.0625), doubled by the last sum
    texts = _compare_and_warnings(Half(), [torch.randn(4, 4, s, s) for s in (5, 6, 9)], 0.13)
    import re
    assert set(re.findall(r"braze runs aten\.(\w+)", texts)) == {"view_as_complex", "mul", "view_as_real"}, texts
    assert "mul.Tensor in PyTorch (braze has no complex64 kernels)" in texts, texts


def test_a_conv_by_a_weight_computed_at_run_time_compiles(fresh_warnings):
    class RuntimeWeight(nn.Module):  # weight normalization: the weight is computed at every call
        def __init__(self):
            super().__init__()
            self.v, self.g = nn.Parameter(torch.randn(6, 4, 3, 3)), nn.Parameter(torch.rand(6, 1, 1, 1) + 0.5)

        def forward(self, x):
            w = self.g * self.v / self.v.square().sum((1, 2, 3), keepdim=True).sqrt()
            return F.conv2d(torch.relu(x), w) + 1

    texts = _compare_and_warnings(RuntimeWeight(), [torch.randn(b, 4, s, s) for b, s in ((2, 5), (3, 6), (1, 9))],
                                  1e-4)
    assert "PyTorch" not in texts, texts


def test_a_graph_break_gives_each_graph_its_own_compile(compiles):
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            y = torch.relu(self.a(x))
            print("", end="")  # a graph break
            return self.b(y).tanh()

    m = Broken().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b in (2, 3, 7):
            x = torch.randn(b, 8)
            torch.testing.assert_close(c(x), m(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2
    assert compiles() - before <= 2


def test_an_integer_argument_in_a_shape_is_compiled_for_its_value_and_checked(fresh_warnings):
    """GPT-2's ``hidden_states[:, -logits_to_keep:]`` with logits_to_keep = 0, an integer argument
    dynamo makes a symbol no tensor shape carries: braze builds the region for that value, forward
    and backward, at every shape; a call with another value that the same graph serves runs in
    PyTorch, with one warning that says why, and the answers are eager's."""
    class KeepLast(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, h, k):
            return self.lin(torch.relu(self.lin(h))[:, slice(-k, None), :]) * 2

    m = KeepLast()
    c = torch.compile(m, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for s in (1, 5, 7, 9):
            h = torch.randn(2, s, 8)
            got, want = c(h, 0), m(h, 0)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            got.square().sum().backward()
        h = torch.randn(2, 9, 8)
        torch.testing.assert_close(c(h, -3), m(h, -3), rtol=1e-5, atol=1e-5)  # dynamo guards k: a new graph
    assert not _braze_warnings(record), [str(w.message) for w in _braze_warnings(record)]


def test_a_graph_that_is_one_region_checks_its_pinned_integer(fresh_warnings):
    """``x[:k]`` alone is one region, which the plug-in calls without the FX layer. With k < 0
    dynamo serves k = -2 and k = -5 with one graph, and braze's library is built for k = -2 (a
    negative integer is pinned: pins.size_arguments): the call with -5 must run in PyTorch (with
    one warning), not return the answer for -2."""
    c = torch.compile(lambda x, k: x[:k] * 2, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n, k in ((6, -2), (7, -5), (9, -2), (8, -3)):
            x = torch.randn(n)
            torch.testing.assert_close(c(x, k), x[:k] * 2)
    assert len(_braze_warnings(record)) == 1, [str(w.message) for w in _braze_warnings(record)]
    assert "integer arguments" in str(_braze_warnings(record)[0].message)


def test_a_pinned_integer_is_checked_on_every_call():
    """The check a region with a pinned integer runs on each call: every integer argument and dim
    that uses the pinned symbol must equal what the library was built for."""
    from braze.plugin.pins import pin_check, pinned_symbols
    from braze.plugin.region import _shape_symbols
    seen = []

    def capture(gm, example_inputs):
        from torch._guards import detect_fake_mode
        seen.append((gm, detect_fake_mode(example_inputs).shape_env))
        return gm

    c = torch.compile(lambda h, k: (h * 2, k - 1), backend=capture, dynamic=True)
    c(torch.randn(2, 5), 0)
    gm, shape_env = seen[-1]
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [i for i, p in enumerate(places) if isinstance(p.meta["example_value"], torch.Tensor)]
    for p in places:
        p.meta["val"] = p.meta["example_value"]
    pinned = pinned_symbols(places, shape_env, _shape_symbols(places, tensors)[0])
    assert [int(v) for v in pinned.values()] == [0], pinned  # k; never the sizes of h
    agrees = pin_check(places, tensors, pinned)
    assert len(places) == 4, places  # h's two sizes, h, k
    h = torch.randn(3, 7)
    assert agrees([3, 7, h, 0]) and not agrees([3, 7, h, 2])


def test_a_size_equality_torch_guards_is_a_fact_braze_checks(fresh_warnings):
    """A loss over logits [b, s, v] and labels [b2, s2], both flattened: torch checked
    b*s == b2*s2, and dynamo guards it. braze takes that equality as a fact (its entry checks it on every call), so
    the loss's backward (a scatter of the label positions) stays in braze, and the answers and
    gradients are eager's. Without the fact, braze refused the scatter."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 5)

        def forward(self, h, labels):
            return nn.functional.cross_entropy(self.lin(h).view(-1, 5), labels.reshape(-1))

    m = Head()
    c = torch.compile(m, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for (b, s), (b2, s2) in (((2, 6), (3, 4)), ((4, 3), (2, 6)), ((1, 15), (5, 3)), ((3, 1), (1, 3))):
            h, labels = torch.randn(b, s, 8), torch.randint(0, 5, (b2, s2))
            m.zero_grad()
            want = m(h, labels)
            want.backward()
            grads = [p.grad.clone() for p in m.parameters()]
            m.zero_grad()
            got = c(h, labels)
            got.backward()
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            for p, g in zip(m.parameters(), grads):
                torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)
    texts = [str(w.message) for w in _braze_warnings(record)]
    # the backward's view back to [b, s, 5] needs b and s apart, which no tensor it reads carries
    assert all("aten.view" in t for t in texts), texts


def test_a_view_of_an_input_is_made_where_it_is_read(caplog):
    """``w.t()`` read by a later region (after an op torch runs) is made in that region, and
    returned by torch as a view of ``w``: a region that computed it would write a copy of the
    weight (GPT-2's tied LM head: 154 MB a step)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from braze.options import Options
    from braze.plugin.partition import compile_graph

    def f(x, w):
        s = torch.cummax(torch.sin(x), dim=-1)[0]  # torch's: the mm after it is a second region
        return torch.mm(s, w.t()) + 1, w.t(), torch.cos(x)

    x, w = torch.randn(5, 8), torch.randn(6, 8)
    gm = make_fx(f, tracing_mode="fake")(x, w)
    with caplog.at_level(logging.INFO, logger="braze.plugin"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call = compile_graph(gm, {}, Options(debug=1))
        got = call([x, w])
    for g, want in zip(got, f(x, w)):
        torch.testing.assert_close(g, want)
    assert got[1].data_ptr() == w.data_ptr() and got[1].stride() == (1, 8)
    regions = [line for line in caplog.text.splitlines() if "braze fused_" in line]
    assert any("t.default" in line and "mm.default" in line for line in regions), regions
    assert not any("t.default" in line and "sin.default" in line for line in regions), regions
