"""The scratch arena (braze_arena.h): a call at a shape a little larger than any before grows it
without touching again the pages earlier calls touched. Before, each growth was a fresh
allocation, and every page of it faulted again at its first use (the depthwise convnet's first
call at 8x225x223 after 8x224x224: 3.3x its steady call)."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mremap is Linux's")


class _TwoLinears(torch.nn.Module):
    """Two products whose [rows, 256] results live in the arena, and a small output."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(256, 256, generator=g) / 16)
        self.w2 = torch.nn.Parameter(torch.randn(256, 256, generator=g) / 16)

    def forward(self, x):
        return torch.relu(torch.relu(x @ self.w1) @ self.w2).mean(0)


def _faults(fn) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_slightly_larger_shape_keeps_the_pages_already_touched():
    m = _TwoLinears().eval()
    rows = torch.export.Dim("rows", min=1, max=1 << 20)
    rng = np.random.default_rng(0)
    xs = {n: torch.from_numpy(rng.standard_normal((n, 256), dtype=np.float32)) for n in (20000, 20480, 4000)}
    with torch.no_grad():
        cm = braze.compile(m, example_inputs=(torch.randn(64, 256),), dynamic_shapes={"x": {0: rows}},
                           tune="off")
        for n in (20000, 4000):  # the arena's high-water mark, then a smaller call
            torch.testing.assert_close(cm(xs[n]), m(xs[n]), rtol=1e-4, atol=1e-5)
        got = _faults(lambda: cm(xs[20480]))  # 2.4% more rows
        torch.testing.assert_close(cm(xs[20480]), m(xs[20480]), rtol=1e-4, atol=1e-5)
        again = _faults(lambda: cm(xs[20000]))
    arena_pages = 2 * 20480 * 256 * 4 // 4096  # the two intermediates
    # a fresh arena faulted all of them again (16.6k faults here: oneDNN's scratch too); grown in
    # place, 245: the new 2.4%, the output, and the new shape's oneDNN primitives
    assert got < arena_pages // 4, (got, arena_pages)
    assert again < arena_pages // 10, (again, arena_pages)
