"""An integer divided by zero is the user's error: eager raises ``ZeroDivisionError`` for it, and so
does the compiled model, with eager's own exception, never the 0 a C kernel would give
(docs/semantics.md)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402


def divisions(a, b, c, s):
    """Floor division, remainder, fmod and truncating division of integer tensors, each fused with
    arithmetic around it; ``s`` is a 0-d divisor broadcast over ``a``."""
    return (a // b + 1, (a % b) * 2, torch.fmod(a, c) - 1, torch.div(a, c, rounding_mode="trunc") * 3,
            (a // s).sum(-1), a.float() / b)


def _inputs(n=5, dtype=torch.int64, **bad):
    g = torch.Generator().manual_seed(n)
    args = dict(a=torch.randint(-50, 50, (n, 6), generator=g, dtype=dtype),
                b=torch.randint(1, 7, (n, 6), generator=g, dtype=dtype),
                c=-torch.randint(1, 7, (6,), generator=g, dtype=dtype), s=torch.tensor(3, dtype=dtype))
    for k, pos in bad.items():
        args[k] = args[k].clone()
        args[k].view(-1)[pos] = 0
    return tuple(args.values())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("bad", [{"b": 0}, {"b": 41}, {"c": 5}, {"s": 0}])
def test_an_integer_division_by_zero_raises_eagers_error(bad, dtype, fresh_warnings):
    """Good calls at two shapes first (the library is built), then at 7 rows a divisor 0: eager's
    exception type and message, one BrazeWarning naming the division, and the next good call is
    right again."""
    c = torch.compile(divisions, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for n in (5, 7):
            for got, want in zip(c(*_inputs(n, dtype)), divisions(*_inputs(n, dtype))):
                torch.testing.assert_close(got, want)
        args = _inputs(7, dtype, **bad)
        with pytest.raises(Exception) as eager:
            divisions(*args)
        with pytest.raises(type(eager.value)) as got:
            c(*args)
        assert str(got.value) == str(eager.value)
        for got, want in zip(c(*_inputs(6, dtype)), divisions(*_inputs(6, dtype))):
            torch.testing.assert_close(got, want)
    said = [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]
    assert len(said) == 1 and "integer division by zero" in said[0], said
