"""The in-place sum of a tied embedding's two gradients (``braze.plugin.embedding``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from braze.plugin.embedding import embedding_dense_backward_add, fold_embedding_grads  # noqa: E402
from braze.plugin.partition import TORCH_META  # noqa: E402

aten = torch.ops.aten


@pytest.mark.parametrize("padding_idx", [-1, 0, 3])
@pytest.mark.parametrize("shape", [(1,), (2, 7), (3, 1, 5)])
def test_the_sum_is_aten_s(padding_idx, shape):
    """Repeated indices, the padding row and 1-sized dims, int64 and int32 indices."""
    g = torch.Generator().manual_seed(len(shape) * 10 + padding_idx)
    ids = torch.randint(0, 6, shape, generator=g)
    ids.view(-1)[0] = max(padding_idx, 0)
    grad = torch.randn(*shape, 4, generator=g)
    x = torch.randn(6, 4, generator=g)
    want = x + aten.embedding_dense_backward(grad, ids, 6, padding_idx, False)
    for idx in (ids, ids.int()):
        got = embedding_dense_backward_add(x.clone(), grad, idx, padding_idx)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def _graph(x_op: str):
    """``x + embedding_dense_backward(...)``, ``x`` a fresh mm, a view of one, or a graph input."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(a, b, w, grad, ids):
        x = {"mm": lambda: torch.mm(a, b), "view": lambda: torch.mm(b.t(), a.t()).t(), "input": lambda: w}[x_op]()
        return x + aten.embedding_dense_backward(grad, ids, 6, 0, False)

    args = (torch.randn(6, 3), torch.randn(3, 4), torch.randn(6, 4), torch.randn(5, 4), torch.randint(0, 6, (5,)))
    return make_fx(f, tracing_mode="fake")(*args), f, args


@pytest.mark.parametrize("x_op", ["mm", "view", "input"])
def test_only_a_gradient_nothing_else_reads_is_written(x_op):
    gm, f, args = _graph(x_op)
    done = fold_embedding_grads(gm)
    assert done == (x_op != "input")  # a graph input is the caller's: never written
    marked = [n for n in gm.graph.nodes if n.meta.get(TORCH_META)]
    assert len(marked) == done
    w = args[2].clone()
    torch.testing.assert_close(gm(*args), f(*args))
    assert torch.equal(args[2], w)
