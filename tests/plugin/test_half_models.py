"""bfloat16 and float16 models in plug-in mode: braze compiles every op, GEMMs included (oneDNN in
the model's dtype where the CPU runs it natively, else widened to float32: passes/precision.py);
the other ops compute in float32 with one rounding per stored tensor (stage widen)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402
from braze.testing import NativeCalls  # noqa: E402

nn = torch.nn


class Encoderish(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.lin = nn.LayerNorm(64), nn.LayerNorm(64), nn.Linear(64, 64)

    def forward(self, x):
        h = nn.functional.gelu(self.ln1(x)) * x
        a = self.lin(h).softmax(-1)
        return self.ln2(h + a * 3.0).tanh(), (x.float() * 2).sum(-1)


def _calls_and_warnings(c, m, make, dtype, rows_list, check):
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught, NativeCalls() as native:
        warnings.simplefilter("always")
        for rows in rows_list:
            x = make(rows)
            check(rows, c(x), m(x))
    return native.count, [str(w.message) for w in caught if issubclass(w.category, BrazeWarning)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_model_compiles_whole(dtype, fresh_warnings, compiles):
    torch.manual_seed(0)
    m = Encoderish().to(dtype)
    c = torch.compile(m, backend="braze", dynamic=True)
    before = compiles()

    def check(rows, got_pair, want_pair):
        (got, got_sum), (want, want_sum) = got_pair, want_pair
        assert got.dtype == dtype and got_sum.dtype == torch.float32
        # one rounding per stored tensor against eager's per-op roundings: a few units in the last place
        ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 4 * ulp * max(1.0, want.float().abs().max().item()), (rows, err)
        torch.testing.assert_close(got_sum, want_sum, rtol=1e-5, atol=1e-4)

    rows_list = (1, 5, 17, 3)
    native, msgs = _calls_and_warnings(c, m, lambda r: torch.randn(2, r, 64, dtype=dtype), dtype, rows_list, check)
    assert not msgs, msgs  # no op in PyTorch, no region refused
    assert native >= len(rows_list) - 1, "braze did not run the model at every call after the first"
    assert compiles() > before


def test_autocast_regions_compile_whole(fresh_warnings, compiles):
    """Under torch.autocast(bfloat16) the casts, bf16 GEMMs, GELU and layer_norm are all braze's;
    the result matches eager within bfloat16's tolerance."""
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.ln = nn.Linear(64, 128), nn.Linear(128, 64), nn.LayerNorm(64)

        def forward(self, x):
            return self.ln(self.b(nn.functional.gelu(self.a(x))) + x)

    torch.manual_seed(0)
    m = MLP().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    before = compiles()

    def check(rows, got, want):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        native, msgs = _calls_and_warnings(c, m, lambda r: torch.randn(r, 64), torch.bfloat16, (1, 7, 33, 2), check)
    assert not msgs, msgs
    assert compiles() > before and native >= 3


def test_the_bf16_policy_reads_live_weights_at_every_call(fresh_warnings):
    """Under options={"precision": "bf16"} the plug-in still reads the weights at each call: a write
    through .data, through a NumPy view and an optimizer step are all seen, with braze computing."""
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 16)

        def forward(self, x):
            return self.b(nn.functional.gelu(self.a(x)))

    torch.manual_seed(0)
    m = MLP().eval()
    c = torch.compile(m, backend="braze", dynamic=True, options={"precision": "bf16"})

    def check(rows):
        x = torch.randn(rows, 32)
        with torch.no_grad():
            got, want = c(x), m(x)
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)

    with warnings.catch_warnings(record=True) as caught, NativeCalls() as native:
        warnings.simplefilter("always")
        for rows in (3, 7, 1, 5):
            check(rows)
        with torch.no_grad():
            m.a.weight.data.mul_(-1.5)
        check(7)
        m.b.weight.detach().numpy()[:] *= 0.5
        check(3)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(torch.randn(4, 32)).square().sum().backward()
        opt.step()
        check(5)
    said = [str(w.message) for w in caught if issubclass(w.category, BrazeWarning)]
    from braze.codegen.isa import host_isa
    from braze.passes.precision import policy_pays
    if policy_pays("bf16", host_isa().host_features):
        assert not said
    else:  # a CPU without AVX512_BF16 or AMX-BF16 compiles float32, and says so
        assert said and all("compiling float32" in m for m in said), said
    assert native.count >= 6
