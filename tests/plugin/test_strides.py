"""Region results PyTorch reads have the strides eager gives them (``plugin/strides.py``).

braze writes results contiguous. Where eager's are not (a channels-last convolution, an
elementwise op on a transposed input, a transpose of an intermediate), ``as_strided`` read braze's
in the wrong order: a silent wrong answer. These fail without the rewrite."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402
from braze.plugin.strides import dense_order  # noqa: E402
from braze.testing import NativeCalls  # noqa: E402

nn = torch.nn


class ChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        flat = y.permute(0, 2, 3, 1).reshape(y.shape[0], -1)[:, :5]  # a view only channels-last allows
        return flat, y.as_strided((2, 3), (1, 8)) * 1, y


class Transposes(nn.Module):
    def forward(self, x):
        y = (x * 2).transpose(0, 1)  # a view of an intermediate
        return y.as_strided((2, 2), (1, 1)) + 0, torch.sin(x.t()), y


def _compare(model, inputs):
    compiled = torch.compile(model, backend="braze", dynamic=True)
    with torch.no_grad():
        for x in inputs:
            want, got = model(x), compiled(x)
            for w, g in zip(want, got):
                assert g.stride() == w.stride(), (tuple(x.shape), g.stride(), w.stride())
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_channels_last_convolution_keeps_eagers_strides():
    _compare(ChannelsLast().eval(), [torch.randn(b, 3, h, w).to(memory_format=torch.channels_last)
                                     for b, h, w in ((2, 6, 6), (1, 5, 9), (3, 7, 4))])


def test_transposed_results_keep_eagers_strides():
    _compare(Transposes(), [torch.randn(4, 3), torch.randn(5, 2), torch.randn(2, 7)])


class PoolHead(nn.Module):
    """A classifier's head: torch decomposes the adaptive pool of a channels-last activation into
    a mean and an ``as_strided`` to channels-last strides, which braze has no converter for."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.bn(self.conv(x))), 1), 1))


def test_a_channels_last_input_through_a_pooled_head_runs_without_a_warning(fresh_warnings):
    """The as_strided is PyTorch's, made without a copy from braze's mean (eager's strides), with
    no warning: it names nothing the user wrote."""
    m = PoolHead().eval()
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad(), warnings.catch_warnings(), NativeCalls() as calls:
        warnings.simplefilter("error", BrazeWarning)
        for b, h, w in ((2, 9, 11), (1, 5, 5), (3, 7, 12)):
            x = torch.randn(b, 3, h, w).contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    assert calls.count >= 3


def test_dense_order():
    x = torch.empty(2, 3, 4, 5)
    assert dense_order(x) is True  # contiguous already
    assert dense_order(x.to(memory_format=torch.channels_last)) == [0, 2, 3, 1]
    assert dense_order(x[0, 0].t()) == [1, 0]
    assert dense_order(x[:, 1:]) is None  # not at the storage's start
    assert dense_order(x[:, :, ::2]) is None  # gaps
    assert dense_order(torch.empty(3, 1).expand(3, 4)) is None  # stride 0
    assert dense_order(torch.empty(0, 3).t()) is True  # empty: any strides


@pytest.mark.filterwarnings("ignore:braze runs aten.as_strided")
def test_a_training_step_returns_eagers_strides_and_gradients():
    """The forward's user outputs take eager's strides; its saved activations keep braze's layout
    (only the backward reads them), and the gradients match eager's."""
    model = ChannelsLast()
    twin = ChannelsLast()
    compiled = torch.compile(twin, backend="braze", dynamic=True)
    for b, h, w in ((2, 6, 6), (1, 5, 9)):
        x = torch.randn(b, 3, h, w).to(memory_format=torch.channels_last)
        y_want, y_got = model(x)[2], compiled(x)[2]
        assert y_got.stride() == y_want.stride()
        torch.testing.assert_close(y_got, y_want, rtol=1e-5, atol=1e-5)
        y_want.square().sum().backward()
        y_got.square().sum().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4)
            p.grad = q.grad = None
