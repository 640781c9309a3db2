"""An index out of range is the user's error: eager raises for it, and so does the compiled model,
with eager's own exception, never an answer read from a clamped index (docs/semantics.md)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402

nn = torch.nn


class Lookups(nn.Module):
    """An embedding (a token id past the vocabulary), index_select, torch.gather, x[i], x[i, j],
    a one-hot scatter and index_add: the index ops a model reaches, each fused with arithmetic
    around it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids, x, sel, g, i, j, k, rows):
        e = self.emb(ids).sum(-1)
        s = x.index_select(0, sel) * 2
        t = torch.gather(x, 1, g) + 1
        a = x[i] - 1
        b = x[i, j] * 3
        h = x.scatter(1, k, 2.0)
        r = x.index_add(0, rows, x[:3] * 2)
        return e, s, t, a, b, h, r


def _inputs(n=5, **bad):
    torch.manual_seed(1)
    args = dict(ids=torch.tensor([[1, 9, 0]]), x=torch.randn(n, 6), sel=torch.tensor([0, n - 1, 2]),
                g=torch.tensor([[0, 5]] * n), i=torch.tensor([-1, 0, n - 1]), j=torch.tensor([5, -6, 0]),
                k=torch.tensor([[1], [5]] + [[0]] * (n - 2)), rows=torch.tensor([0, 2, n - 1]))
    for k, (pos, v) in bad.items():
        args[k] = args[k].clone()
        args[k].view(-1)[pos] = v
    return tuple(args.values())


@pytest.mark.parametrize("bad", [{"ids": (1, 10)}, {"ids": (0, -1)}, {"sel": (1, 7)}, {"sel": (0, -1)},
                                 {"g": (3, 6)}, {"g": (0, -1)}, {"k": (1, 6)}, {"k": (0, -1)},
                                 {"rows": (1, -1)}, {"rows": (2, 7)}, {"i": (0, -8)}, {"i": (2, 7)},
                                 {"j": (1, 6)}, {"j": (0, -7)}])
def test_an_index_out_of_range_raises_eagers_error(bad, fresh_warnings):
    """Every op's good call first (at two shapes: the library is built), then at 7 rows one index
    out of range: eager's exception type and message, one BrazeWarning naming the range check, and the
    next good call is right again."""
    m = Lookups()
    c = torch.compile(m, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (5, 7):
            for got, want in zip(c(*_inputs(n)), m(*_inputs(n))):
                torch.testing.assert_close(got, want)
        args = _inputs(7, **bad)
        with pytest.raises(Exception) as eager:
            m(*args)
        with pytest.raises(type(eager.value)) as got:
            c(*args)
        assert str(got.value) == str(eager.value)
        for got, want in zip(c(*_inputs(6)), m(*_inputs(6))):
            torch.testing.assert_close(got, want)
    said = [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]
    assert len(said) == 1 and "index is out of range" in said[0], said
