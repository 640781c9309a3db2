"""The torch.compile backend: registration, options, lowering, write-back, grad mode, threads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import warnings

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.errors import BrazeError  # noqa: E402

nn = torch.nn


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()


def test_entry_point_registers_the_backend():
    from importlib.metadata import entry_points
    eps = {e.name: e.value for e in entry_points(group="torch_dynamo_backends")}
    assert eps.get("braze") == "braze.plugin:backend"
    assert "braze" in torch._dynamo.list_backends(exclude_tags=())


def test_backend_works_without_importing_braze(tmp_path):
    code = (
        "import sys, torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()\n"
        "assert 'braze' not in sys.modules\n"
        "c = torch.compile(m, backend='braze', dynamic=True)\n"
        "with torch.no_grad():\n"
        "    for b in (2, 5):\n"
        "        x = torch.randn(b, 4)\n"
        "        assert torch.allclose(c(x), m(x), atol=1e-6)\n"
        "import braze\n"
        "print('native', braze.stats()['native_compiles'] + braze.stats()['cache_hits'])\n")
    env = dict(os.environ, BRAZE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "native 1" in out.stdout  # braze built the library: no silent eager fallback


@pytest.mark.parametrize("bad, what", [({"thread": 2}, "unknown braze option 'thread'"),
                                       ({"threads": 0}, "'threads' must be an integer >= 1"),
                                       ({"debug": "x"}, "'debug' must be an integer >= 0"),
                                       ({"precision": "int8"}, "precision='int8' is not one of fp32, bf16, fp16"),
                                       ({"precision_keep": [3]}, "must be a list of op names or module paths"),
                                       ({"rng": "numpy"}, "'rng' must be 'braze' or 'torch'"),
                                       ({"tune": "always"}, "tune='always' is not one of off, cached, fast, full"),
                                       ({"tune_budget_s": -1}, "'tune_budget_s' must be a positive number")])
def test_bad_options_name_the_problem(bad, what):
    from braze.plugin.dynamo import plugin_options
    with pytest.raises(BrazeError, match=what):
        plugin_options(bad)
    c = torch.compile(mlp(), backend="braze", options=bad)
    with pytest.raises(Exception, match=what):
        c(torch.randn(2, 16))


def test_options_reach_the_compile(tmp_path):
    m = mlp()
    c = torch.compile(m, backend="braze", dynamic=True,
                      options={"threads": 1, "cache_dir": str(tmp_path / "cache"), "dump": str(tmp_path / "dump")})
    with torch.no_grad():
        for b in (3, 4):
            x = torch.randn(b, 16)
            torch.testing.assert_close(c(x), m(x))
    assert any((tmp_path / "cache").rglob("*.so")), "the library was not cached where options said"
    # each region of each graph dumps into a directory of its own (a training step has two graphs)
    dumps = [p.parent.name for p in (tmp_path / "dump").glob("*/model.c")]
    assert dumps and all(re.fullmatch(r"inference\d+_fused_\d+", d) for d in dumps), dumps


def test_tuning_options_reach_the_compile():
    from braze.plugin.dynamo import plugin_options
    opts = plugin_options({"tune": "fast", "tune_budget_s": 30}).opts
    assert (opts.tune, opts.tune_budget_s) == ("fast", 30.0)
    assert plugin_options(None).opts.tune == "cached"


def test_a_training_step_dumps_its_forward_and_backward_apart(tmp_path):
    m = mlp()
    c = torch.compile(m, backend="braze", dynamic=True, options={"dump": str(tmp_path / "dump")})
    for b in (3, 4):
        c(torch.randn(b, 16)).square().mean().backward()
    dumps = sorted(re.sub(r"\d+_fused_\d+$", "", p.parent.name) for p in (tmp_path / "dump").glob("*/model.c"))
    assert dumps == ["backward", "forward"], dumps


def test_precision_options_reach_the_compile_and_key_the_reuse(fresh_warnings):
    """precision and precision_keep reach the compile's Options; a library compiled under one
    precision never serves a compile that asked for another (it would run the other dtype)."""
    import braze
    from braze.plugin.dynamo import plugin_options
    opts = plugin_options({"precision": "bf16", "precision_keep": "lm_head"}).opts
    assert opts.precision == "bf16" and opts.precision_keep == ("lm_head",)
    m = mlp()
    x = torch.randn(3, 16)

    def libraries():
        s = braze.stats()
        return s["native_compiles"] + s["cache_hits"]

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a CPU without bf16 GEMMs warns and compiles float32
        torch.compile(m, backend="braze", dynamic=True)(x)
        before = libraries()
        torch.compile(m, backend="braze", dynamic=True)(x)
        assert libraries() == before  # the same options: the library is reused
        torch.compile(m, backend="braze", dynamic=True, options={"precision": "bf16"})(x)
        assert libraries() == before + 1  # another precision: a library of its own


def test_dynamic_batch_one_library_every_shape(run_shapes, compiles):
    before = compiles()
    counts = run_shapes(mlp(), lambda b: (torch.randn(b, 16),), [(1,), (2,), (3,), (7,), (1,), (16,)])
    assert counts[-1] - before <= 1, f"native compiles per call: {[c - before for c in counts]}"
    assert counts[-1] == counts[1], "a native compile after the first two shapes"


def test_int16_compiles_natively(fresh_warnings):
    """int16 (what int8 + uint8 promote to) runs in braze's kernels: arithmetic wrapping as eager's,
    floor division, sums, bit ops, casts and a gather, at three sizes, with no op left to PyTorch."""
    def f(a, b, x):
        c = a * b + 32000
        return (c, a // (b.abs() + 1), a.sum(0), a.sum(0, dtype=torch.int16), a ^ b, a >> 3, a.float() * x,
                (x * 1000).to(torch.int16), a[(b.abs() % a.shape[0]).long()], a.to(torch.int8) + b.to(torch.uint8))

    c = torch.compile(f, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (3, 5, 9):
            g = torch.Generator().manual_seed(n)
            a, b = (torch.randint(-300, 300, (n,), generator=g, dtype=torch.int16) for _ in range(2))
            x = torch.randn(n, generator=g)
            for got, want in zip(c(a, b, x), f(a, b, x)):
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want)
    said = [str(w.message) for w in record if "braze" in str(w.message)]
    assert not said, said


def test_buffer_mutation_is_written_back():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("calls", torch.zeros(1))
            self.register_buffer("running", torch.zeros(4))

        def forward(self, x):
            self.calls.add_(1)
            self.running.mul_(0.5).add_(x.mean(0))
            return self.lin(x) + self.running

    m, ref = Counter().eval(), Counter().eval()
    ref.load_state_dict(m.state_dict())
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad():
        for b in (2, 3, 5, 2):
            x = torch.randn(b, 4)
            torch.testing.assert_close(c(x), ref(x))
    assert m.calls.item() == 4
    torch.testing.assert_close(m.running, ref.running)


def test_grad_mode_trains_through_torch_backward():
    m, ref = mlp().train(), mlp().train()
    c = torch.compile(m, backend="braze", dynamic=True)
    for b in (2, 3):
        x = torch.randn(b, 16)
        c(x).square().sum().backward()
        ref(x).square().sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_threads_share_one_compiled_model():
    m = mlp()
    c = torch.compile(m, backend="braze", dynamic=True)
    xs = [torch.randn(b, 16) for b in (1, 2, 3, 5, 8, 13)]
    with torch.no_grad():
        want = [m(x) for x in xs]
        for x in xs:
            c(x)
            c(x)  # every graph compiled before the threads start
    errors = []

    def work(k):
        try:
            with torch.no_grad():
                for i in range(40):
                    j = (i + k) % len(xs)
                    torch.testing.assert_close(c(xs[j]), want[j], rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_bad_input_raises_what_eager_raises():
    m = mlp()
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad():
        c(torch.randn(2, 16))
        for bad in (torch.randn(2, 15), torch.randint(0, 3, (2, 16))):
            with pytest.raises(RuntimeError) as eager:
                m(bad)
            with pytest.raises(RuntimeError) as got:
                c(bad)
            assert type(eager.value).__name__ in type(got.value).__name__ or \
                isinstance(got.value, type(eager.value)), (type(got.value), type(eager.value))


def test_a_float_attribute_changed_later_is_honoured(fresh_warnings):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.scale = 0.5

        def forward(self, x):
            return torch.tanh(self.lin(x) * self.scale)

    m = Scaled().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad():
        for b in (2, 3):
            x = torch.randn(b, 8)
            torch.testing.assert_close(c(x), m(x))
        m.scale = 2.0  # dynamo passes this float without a guard; braze baked 0.5 in
        with pytest.warns(braze.errors.BrazeWarning, match="changed value"):
            x = torch.randn(3, 8)
            torch.testing.assert_close(c(x), m(x))


def test_a_float_argument_is_read_at_each_call(fresh_warnings):
    """A float the caller passes (a temperature) is an input of the library, not a constant: a
    new value at each call runs natively, with no warning; an attribute (eps) stays baked in."""
    from braze.testing import NativeCalls

    class Tempered(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.eps = 1e-3

        def forward(self, x, temperature):
            return torch.softmax(self.lin(x) / temperature, -1) + self.eps

    m = Tempered().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    calls = NativeCalls()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", braze.errors.BrazeWarning)
        c(torch.randn(2, 8), 0.5)  # compiles
        steps = ((3, 0.7), (3, 2.0), (1, 1e-3), (4, 0.5))
        for b, t in steps:
            x = torch.randn(b, 8)
            with calls:
                got = c(x, t)
            torch.testing.assert_close(got, m(x, t))
    assert calls.count >= len(steps), calls.count  # braze ran every call, not PyTorch


def test_debug_3_reports_each_region_s_slowest_kernels(tmp_path):
    from braze.plugin import report
    m = mlp()
    c = torch.compile(m, backend="braze", dynamic=True,
                      options={"debug": 3, "cache_dir": str(tmp_path / "cache")})
    with torch.no_grad():
        for b in (3, 4):
            c(torch.randn(b, 16))
    text = report._graphs[-1].kernel_reports()  # what the exit report logs
    assert re.search(r"inference graph \d+, fused_\d+:", text), text
    assert re.search(r"@main: gemm @fused_\d+ +\d+\.\d+ +2 ", text), text  # its two calls
