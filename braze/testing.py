"""Tolerances and comparisons shared by braze's tests (and usable by users' tests)."""

from __future__ import annotations

import numpy as np

# (rtol, atol) per dtype name, for comparing one op against its reference
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}

# whole models: max |error| / max |reference| (float32)
MODEL_REL_TOL = 1e-4


def assert_close(actual, expected, dtype: str | None = None, rtol=None, atol=None, what: str = ""):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what} shape {actual.shape} != expected {expected.shape}"
    dtype = dtype or expected.dtype.name
    if dtype not in TOLERANCES:  # ints and bools compare exactly
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    r, a = TOLERANCES[dtype]
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               err_msg=what, equal_nan=True)


def rel_error(actual, expected) -> float:
    """max |actual - expected| / max |expected| (the model-level metric)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    denom = float(np.max(np.abs(expected))) if expected.size else 0.0
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    return err / denom if denom > 0 else err


def assert_ir_round_trips(module) -> None:
    """The module verifies, and its text form parses back into an equal module."""
    from . import ir

    ir.verify(module)
    text = str(module)
    back = ir.parse(text, constants=module.constants)
    assert back == module, "IR text did not parse back into an equal module"
    assert str(back) == text
    ir.verify(back)
    # without the weights, large constants come back as content-hash placeholders
    assert ir.parse(text) == module
