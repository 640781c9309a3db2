"""Special values through the torch frontend, reference and native, against eager.

braze follows PyTorch except where PyTorch is mathematically wrong; those cases are the
table in docs/semantics.md, and the last test here checks that each entry still holds
(so the table stays true when torch changes)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402

F = torch.nn.functional
INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _both(fn, *xs):
    """(reference, native) results of ``fn`` exported at ``xs``."""
    ep = torch.export.export(Fn(fn), xs, strict=False)
    ref = braze.reference.run(braze.import_torch(ep), *[x.numpy() for x in xs])
    return ref, braze.compile(ep)(*xs).numpy()


def _rows():
    x = torch.randn(6, 19)
    x[1] = -INF                       # all -inf: _safe_softmax gives 0, softmax NaN
    x[2, 3] = NAN                     # a NaN: NaN either way
    x[3, ::2] = -INF                  # partly -inf: an ordinary softmax
    x[4, 5] = INF                     # +inf: NaN (inf - inf), as torch
    x[5, :18] = -INF                  # one finite element: a one-hot row
    return x


def test_safe_softmax_gives_zeros_for_all_minus_inf_rows():
    x = _rows()
    want = torch.ops.aten._safe_softmax(x, -1).numpy()
    assert np.all(want[1] == 0) and np.isnan(want[2]).all()
    for got in _both(lambda t: torch.ops.aten._safe_softmax(t, -1), x):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # NaN where eager has NaN


def test_plain_softmax_keeps_nan_for_all_minus_inf_rows():
    x = _rows()
    want = torch.softmax(x, -1).numpy()
    assert np.isnan(want[1]).all()
    for got in _both(lambda t: torch.softmax(t, -1), x):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# (torch function, input, braze's value, eager's value): see docs/semantics.md
# (fn, x, braze's value, eager's values: eager's kernels differ between CPUs)
DIFFERENCES = [
    (F.gelu, INF, INF, (NAN, INF)),  # NaN from eager's AVX-512 kernel, inf from its AVX2 and scalar ones
    (F.gelu, -INF, -0.0, NAN),
    (lambda t: F.gelu(t, approximate="tanh"), -INF, -0.0, NAN),
    (F.silu, -INF, -0.0, NAN),
    (F.hardswish, -INF, -0.0, NAN),
    (F.hardswish, 3.0e38, 3.0e38, INF),
]


def test_documented_differences_from_eager():
    """braze keeps the limit where eager's (vectorized) kernels give NaN or overflow; eager
    still differs, so the table in docs/semantics.md is true."""
    for fn, x, ours, eager in DIFFERENCES:
        e = fn(torch.full((64,), x)).numpy()
        assert any(np.array_equal(e, np.full(64, v, np.float32), equal_nan=True)
                   for v in (eager if isinstance(eager, tuple) else (eager,))), (fn, x, e)
        for got in _both(fn, torch.full((37,), x)):
            assert np.array_equal(got, np.full(37, ours, np.float32)), (fn, x, got)
            assert np.array_equal(np.signbit(got), np.full(37, np.signbit(ours))), (fn, x, got)


@pytest.mark.parametrize("p", [0.5, -0.5, 1.5, 3.0, -1.0])
def test_pow_by_a_scalar_and_by_a_tensor_at_special_values(p):
    """eager takes sqrt / rsqrt for x ** 0.5 / x ** -0.5 (NaN at -inf, -0 kept) but IEEE pow
    for a tensor exponent (fuzz seed 2849: numpy's sqrt shortcut made the reference differ)."""
    x = torch.tensor([-INF, -4.0, -0.0, 0.0, 4.0, INF, NAN, 1e-40])
    e = torch.tensor(p)
    want_s, want_t = torch.pow(x, p).numpy(), torch.pow(x, e).numpy()
    (ref_s, nat_s), (ref_t, nat_t) = _both(lambda t: torch.pow(t, p), x), _both(torch.pow, x, e)
    for got, want in ((ref_s, want_s), (nat_s, want_s), (ref_t, want_t), (nat_t, want_t)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all(), (got, want)


def _equal_to_eager(fn, *xs):
    """Each output of ``fn`` (several), from the reference and from C, equals eager's exactly."""
    want = fn(*xs)
    ep = torch.export.export(Fn(fn), xs, strict=False)
    ref = braze.reference.run(braze.import_torch(ep), *[x.numpy() for x in xs])
    got = braze.compile(ep)(*xs)
    for w, r, g in zip(want, ref, got):
        np.testing.assert_array_equal(r, w.numpy())
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_floor_division_at_the_dtype_limits(dtype):
    """a // b at the dtype's minimum and maximum, by divisors of both signs, equals eager's, in the
    reference and in C. (a - a mod b) / b, the old lowering, overflowed there: INT64_MIN // 3 came
    out positive."""
    info = torch.iinfo(dtype)
    vals = [info.min, info.min + 1, -7, -1, 0, 1, 7, info.max - 1, info.max]
    divs = [info.min, -7, -3, -1, 1, 3, 7, info.max]
    a = torch.tensor(vals, dtype=dtype).repeat(len(divs))
    b = torch.tensor(divs, dtype=dtype).repeat_interleave(len(vals))

    def fn(a, b):
        return a // b, torch.div(a, b, rounding_mode="floor"), a // 3
    _equal_to_eager(fn, a, b)


def test_fmax_and_fmin_ignore_one_nan():
    """fmax/fmin give the other operand where one is NaN (maximum/minimum propagate it); braze
    mapped them to maximum/minimum until 2026-12-02."""
    a = torch.tensor([NAN, 1.0, 2.0, NAN, -INF, 3.0, -0.5])
    b = torch.tensor([1.0, NAN, NAN, NAN, 3.0, -INF, 0.5])

    def fn(a, b):
        return torch.fmax(a, b), torch.fmin(a, b), torch.fmax(a, b[:1]), torch.fmin(b, a)
    _equal_to_eager(fn, a, b)


def test_mean_of_rows_led_by_an_infinity():
    """The mean shifts by a row's first element; one that is +-inf made every term inf - inf, NaN,
    where eager gives inf (until 2026-12-02)."""
    x = torch.tensor([[INF, 1.0, -1.0, 2.0], [-INF, -INF, -INF, -INF], [INF, -INF, 0.0, 1.0],
                      [NAN, 1.0, 2.0, 3.0], [1.0, INF, 2.0, 3.0], [-0.0, -0.0, -0.0, -0.0], [2.0, 2.0, 2.0, 2.0]])
    for fn in (lambda t: t.mean(1), lambda t: t.mean(0), lambda t: t[:2].mean(), lambda t: t.mean(1, keepdim=True)):
        want = fn(x).numpy()
        for got in _both(fn, x):
            np.testing.assert_array_equal(got, want)
            zero = want == 0
            assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
