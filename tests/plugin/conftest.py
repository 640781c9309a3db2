"""Plug-in mode fixtures: a fresh dynamo per test, and a helper that runs a compiled model
against eager at several shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fresh_warnings():
    """Forget which ops braze already warned about, so a test sees its warnings."""
    from braze.plugin import report
    with report._lock:
        report._warned.clear()


def native_compiles() -> int:
    """Libraries braze built or loaded in this process (C compiler runs plus disk-cache hits), so a
    test counts the same whatever the cache holds."""
    import braze
    s = braze.stats()
    return s["native_compiles"] + s["cache_hits"]


@pytest.fixture
def compiles():
    return native_compiles


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if hasattr(out, "logits"):
        return out.logits
    raise TypeError(f"no tensor in {type(out).__name__}")


@pytest.fixture
def run_shapes():
    return _run_shapes


def _run_shapes(model, make_inputs, shapes, *, tol=1e-4, compile_kw=None):
    """Compile ``model`` with the braze backend (dynamic=True), call it at every shape, compare with
    eager, and return the native compile count after each call."""
    from braze.testing import rel_error
    compiled = torch.compile(model, backend="braze", dynamic=True, **(compile_kw or {}))
    counts = []
    with torch.no_grad():
        for shape in shapes:
            args = make_inputs(*shape)
            got = first_tensor(compiled(*args))
            want = first_tensor(model(*args))
            assert tuple(got.shape) == tuple(want.shape), f"at {shape}"
            err = rel_error(got.numpy(), want.numpy())
            assert err <= tol, f"at {shape}: rel error {err:.3g} > {tol}"
            counts.append(native_compiles())
    return counts
