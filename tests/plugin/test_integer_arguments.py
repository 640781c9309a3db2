"""An integer argument of the user's (a decoder's ``start_pos``, a slice length, a scale) is a
symbol dynamo passes to the graph. braze takes it as a 0-d tensor of its own, whose value the
entry reads as the symbol's (``plugin/pins.size_arguments``), so one library serves every value,
natively: before, the library was built for the first value and every other value ran in PyTorch."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.errors import BrazeWarning  # noqa: E402

nn = torch.nn


def _braze_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]


class Decoder(nn.Module):
    """The LLaMA reference code's cache: ``forward(tokens, start_pos)`` writes the new keys and
    values at ``start_pos`` of a buffer (a slice assignment) and attends over ``:start_pos + n``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)
        self.register_buffer("cache_k", torch.zeros(2, 16, 8))
        self.register_buffer("cache_v", torch.zeros(2, 16, 8))

    def forward(self, x, start_pos: int):
        n = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        self.cache_k[:, start_pos:start_pos + n] = k
        self.cache_v[:, start_pos:start_pos + n] = v
        keys, values = self.cache_k[:, :start_pos + n], self.cache_v[:, :start_pos + n]
        att = (q @ keys.transpose(1, 2) / 8 ** 0.5).softmax(-1)
        return self.out(att @ values) + start_pos


def test_a_decoders_start_position_runs_natively_at_every_value(fresh_warnings):
    """Prefill at 0, then one token at a time: the same answers and cache as eager, no braze
    warning (no call ran in PyTorch), one native compile for the decode steps."""
    eager, model = Decoder(), Decoder()
    c = torch.compile(model, backend="braze", dynamic=True)
    torch.manual_seed(1)
    steps = [torch.randn(2, 3, 8)] + [torch.randn(2, 1, 8) for _ in range(6)]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pos = 0
        for k, x in enumerate(steps):
            if k == 2:
                before = braze.stats()["native_compiles"] + braze.stats()["cache_hits"]
            torch.testing.assert_close(c(x, pos), eager(x, pos), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(model.cache_k, eager.cache_k)
            torch.testing.assert_close(model.cache_v, eager.cache_v)
            pos += x.shape[1]
    assert not _braze_warnings(record), _braze_warnings(record)
    assert braze.stats()["native_compiles"] + braze.stats()["cache_hits"] == before


@pytest.mark.parametrize("fn", [lambda x, k: x[:k] * 2, lambda x, k: x * k + 1,
                                lambda x, k: torch.cat([x[k:], x[:k]]) - k])
def test_an_integer_argument_serves_every_value(fn, fresh_warnings):
    """A slice length, a scale, a rotation: values seen once each, 0 included, after the two calls
    that make dynamo's graph dynamic; a negative scale runs in PyTorch with one warning."""
    c = torch.compile(fn, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n, k in ((9, 2), (7, 3), (8, 5), (9, 0), (6, 4), (9, 7), (8, 1)):
            x = torch.randn(n)
            torch.testing.assert_close(c(x, k), fn(x, k))
        said = _braze_warnings(record)
        assert not said, said
        x = torch.randn(9)
        torch.testing.assert_close(c(x, -2), fn(x, -2))
    assert len(_braze_warnings(record)) <= 1, _braze_warnings(record)


def test_a_large_integer_argument(fresh_warnings):
    """A step counter or a seed of 10**12: the value travels as one int64 (a tensor that long would
    not fit), natively."""
    fn = lambda x, k: x * k + (k % 7)  # noqa: E731
    c = torch.compile(fn, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for k in (3, 5, 10 ** 12, 2 ** 40 + 1, 9):
            x = torch.randn(6, dtype=torch.float64)
            torch.testing.assert_close(c(x, k), fn(x, k))
    assert not _braze_warnings(record), _braze_warnings(record)
