"""Dropout in training under the plug-in (issue 24): braze draws the masks from its counter-based
generator, one seed per graph call from torch's generator; the forward and the backward use the
same mask; ``rng='torch'`` leaves dropout to PyTorch, bit for bit as eager."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402
from braze.ops.creation import uniform_numpy  # noqa: E402
from braze.plugin.rng import draw_seed, ops  # noqa: E402
from braze.testing import NativeCalls  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class DropNet(nn.Module):
    """Two dropouts (p = 0.1 after a GELU, p = 0.5 before LayerNorm); ``drop(x, p, site)`` is the
    dropout, so one class is both the model and, with braze's masks drawn in Python, its oracle."""

    def __init__(self, drop=None):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.ln = nn.Linear(16, 48), nn.Linear(48, 16), nn.LayerNorm(16)
        self.drop = drop

    def forward(self, x):
        d = self.drop or (lambda t, p, site: F.dropout(t, p, self.training))
        h = d(F.gelu(self.a(x)), 0.1, 0)
        return self.ln(d(self.b(h), 0.5, 1) + x)


class BrazeMasks:
    """Eager dropout with the masks braze draws: the graph's seed from torch's generator at the
    first dropout of a call, stream k for the k-th dropout (``plugin.rng``)."""

    def __init__(self):
        self.seed = None

    def __call__(self, t, p, site):
        if site == 0:
            self.seed = int(draw_seed())
        u = uniform_numpy(self.seed, t.numel(), site).reshape(tuple(t.shape))
        mask = torch.from_numpy(u < np.float32(1 - p))
        return t * mask * (1 / (1 - p))


def _step(model, x, seed):
    torch.manual_seed(seed)
    out = model(x)
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    return out.detach()


def test_braze_draws_the_masks_and_the_backward_uses_them(fresh_warnings):
    """At changing batch sizes (1 and odd ones): outputs and gradients equal eager's with braze's
    masks drawn in Python, both graphs run in braze, and no op is left to PyTorch."""
    oracle = DropNet(BrazeMasks())
    model = copy.deepcopy(DropNet())
    compiled = torch.compile(model, backend="braze", dynamic=True)
    fwd = NativeCalls()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for step, b in enumerate((3, 5, 1, 7, 4)):
            x = torch.randn(b, 16, generator=torch.Generator().manual_seed(step))
            want = _step(oracle, x, step)
            with fwd:
                got = _step(compiled, x, step)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            for (name, p), q in zip(oracle.named_parameters(), model.parameters()):
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
                p.grad = q.grad = None
    assert [str(w.message) for w in record if issubclass(w.category, BrazeWarning)] == []
    assert fwd.count >= 3, "braze computed too few of the forwards"


def test_the_same_seed_gives_the_same_masks_and_steps_differ():
    model = DropNet()
    compiled = torch.compile(model, backend="braze", dynamic=True)
    x = torch.randn(6, 16)
    for _ in range(2):  # past the first call, which PyTorch may run
        _step(compiled, x, 0)
    a, b, c = (_step(compiled, x, s) for s in (7, 7, 8))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)


def test_keep_rate_and_scale():
    """10^6 elements at p = 0.3: the kept fraction within 3 sigma of 0.7, every kept value scaled by
    exactly float32(1 / 0.7), a dropped inf NaN (as torch's x * mask * scale)."""
    f = torch.compile(lambda x: F.dropout(x, 0.3, True), backend="braze", dynamic=True)
    x = torch.ones(1000, 1000)
    x[0, :8] = math.inf
    for _ in range(2):
        out = f(x)
    calls = NativeCalls()
    with calls:
        out = f(x)
    assert calls.count == 1
    body = out[1:]
    kept = (body != 0).double().mean().item()
    sigma = math.sqrt(0.3 * 0.7 / body.numel())
    assert abs(kept - 0.7) < 3 * sigma, (kept, sigma)
    assert set(body.unique().tolist()) == {0.0, float(torch.tensor(1 / 0.7, dtype=torch.float32))}
    head = out[0, :8]
    assert torch.all(torch.isinf(head) | torch.isnan(head)) and torch.isnan(head).any()


def test_rng_torch_gives_eager_s_masks():
    model = DropNet()
    compiled = torch.compile(copy.deepcopy(model), backend="braze", dynamic=True, options={"rng": "torch"})
    for b in (3, 5, 2):
        x = torch.randn(b, 16)
        torch.testing.assert_close(_step(compiled, x, b), _step(model, x, b), rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_braze_s_kernel_and_the_custom_op_in_torch_agree_bit_for_bit(dtype):
    """What braze computes is what ``braze::dropout`` computes in PyTorch (a region PyTorch runs),
    for every float dtype: a 16-bit output rounds x * mask * scale once, its scale not rounded."""
    f = torch.compile(lambda x: F.dropout(x, 0.1, True), backend="braze", dynamic=True)
    x = torch.randn(5, 37).to(dtype)
    for _ in range(2):
        f(x)
    calls = NativeCalls()
    with calls:
        torch.manual_seed(3)
        got = f(x)
    torch.manual_seed(3)
    want = ops()(x, 0.1, draw_seed(), 0)[0]
    assert calls.count == 1
    assert got.dtype == dtype and torch.equal(got, want)


def _attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True)


def _attention_oracle(q, k, v):
    """SDPA's math path with braze's mask on the probabilities (its one dropout: stream 0)."""
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), -math.inf)
    return BrazeMasks()(scores.softmax(-1), 0.2, 0) @ v


@pytest.mark.parametrize("rng", ["braze", "torch"])
def test_attention_dropout_with_a_dynamic_head_size(rng, fresh_warnings):
    """SDPA's dropout (its math path: a native_dropout on the probabilities), the head size symbolic
    too (the scale a float power of it): outputs and gradients as eager's with the same masks, in
    one braze region per graph with braze's generator. With PyTorch's, a size both sides of the
    dropout read runs in PyTorch (a region returns tensors, not numbers): no region falls back."""
    c = torch.compile(_attention, backend="braze", dynamic=True, options={"rng": rng})
    oracle = _attention if rng == "torch" else _attention_oracle
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for step, (b, s, e) in enumerate([(2, 9, 8), (3, 5, 6), (2, 16, 4)]):
            g = torch.Generator().manual_seed(step)
            ins = [torch.randn(b, 2, s, e, generator=g, requires_grad=True) for _ in range(3)]
            grad = torch.randn(b, 2, s, e, generator=g)
            got, want = (_step_grads(f, ins, grad, step) for f in (c, oracle))
            for x, y in zip(got, want):
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    texts = [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]
    assert texts == [] if rng == "braze" else all("native_dropout" in t for t in texts), texts


def _step_grads(f, ins, grad, seed):
    for x in ins:
        x.grad = None
    torch.manual_seed(seed)
    out = f(*ins)
    out.backward(grad)
    return [out.detach()] + [x.grad.clone() for x in ins]
