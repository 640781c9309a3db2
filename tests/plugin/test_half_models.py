"""bfloat16 and float16 models in plug-in mode: braze compiles every op but GEMMs and
convolutions (float32 only in oneDNN so far), computing in float32 with one rounding per stored
tensor (stage widen); the GEMMs run in PyTorch, with one warning naming the dtype."""

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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_model_compiles_all_but_its_gemm(dtype, fresh_warnings, compiles):
    torch.manual_seed(0)
    m = Encoderish().to(dtype)
    c = torch.compile(m, backend="braze", dynamic=True)
    before = compiles()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught, NativeCalls() as native:
        warnings.simplefilter("always")
        for rows in (1, 5, 17, 3):
            x = torch.randn(2, rows, 64, dtype=dtype)
            got, got_sum = c(x)
            want, want_sum = m(x)
            assert got.dtype == dtype and got_sum.dtype == torch.float32
            # one rounding against eager's per-op roundings: a few units in the last place
            ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
            err = (got.float() - want.float()).abs().max().item()
            assert err <= 4 * ulp * max(1.0, want.float().abs().max().item()), (rows, err)
            torch.testing.assert_close(got_sum, want_sum, rtol=1e-5, atol=1e-4)
    assert native.count >= 2 * 3, "braze did not compute both regions at every call after the first"
    assert compiles() > before
    msgs = [str(w.message) for w in caught if issubclass(w.category, BrazeWarning)]
    name = str(dtype).removeprefix("torch.")
    assert any(f"no {name} GEMMs or convolutions yet" in s for s in msgs), msgs
    assert not any("kernels)" in s for s in msgs), msgs  # no op refused for its dtype alone


def test_autocast_regions_compile_around_their_gemms(compiles):
    """Under torch.autocast(bfloat16) the casts, GELU and layer_norm are braze's, the bf16 GEMMs
    PyTorch's; the result matches eager within bfloat16's tolerance."""
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
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), NativeCalls() as native:
        for rows in (1, 7, 33, 2):
            x = torch.randn(rows, 64)
            got, want = c(x), m(x)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)
    assert compiles() > before and native.count >= 3 * 3
