"""The error of braze_vmath.h's float32 math against float64, as docs/semantics.md states it.

A sparse sweep of the float32 bit patterns here (every 16384th); ``python -m
benchmarks.math_ulp`` runs the dense one that the table in the docs quotes.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # benchmarks/ is a top-level package of the repository, not installed
    sys.path.insert(0, str(ROOT))

pytest.importorskip("scipy")  # the float64 erf reference
from benchmarks import math_ulp  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")

STRIDE = 1 << 14

# max ulp over the sweep; the docs' table (stride 64) is within these
ULP_BOUND = {"exp": 1.5, "log": 1.0, "log1p": 3.0, "erf": 6.0, "sigmoid": 3.0, "silu": 3.5,
             "tanh": 1.5, "expm1": 2.5}


@pytest.fixture(scope="module")
def built():
    refs = math_ulp._ref()
    _, _, fns = math_ulp._build(refs)
    return refs, fns


@pytest.mark.parametrize("name", sorted(ULP_BOUND))
def test_own_math_within_its_stated_ulp(built, name):
    refs, fns = built
    f = fns[(name, "own")]
    ulp, at, _ = math_ulp.max_ulp(f, refs[name][0], STRIDE,
                                  tiny=math_ulp.MIN_RESULT_OF.get(name, math_ulp.MIN_RESULT))
    assert ulp <= ULP_BOUND[name], f"{name}: {ulp:.2f} ulp at x = {at!r}"


def test_gelu_absolute_error_and_its_negative_tail(built):
    """gelu is PyTorch's formula x/2 (1 + erf(x/sqrt 2)): 1 + erf cancels on the negative
    side (as in eager), so its relative error grows there; its absolute error is small
    everywhere, its relative error small from x = -1 up, and below x = -5.55 (where
    erf(x/sqrt 2) rounds to -1) it is -0, as eager's."""
    refs, fns = built
    _, _, abs_err = math_ulp.max_ulp(fns[("gelu", "kernel")], refs["gelu"][0], STRIDE)
    assert abs_err < 1.5e-6
    tail = math_ulp._call(fns[("gelu", "kernel")], np.float32([-5.55, -6.0, -10.0, -1e30, -np.inf]))
    assert (tail == 0).all() and np.signbit(tail).all()
    x = np.linspace(-1, 10, 10001, dtype=np.float32)
    got = math_ulp._call(fns[("gelu", "kernel")], x).astype(np.float64)
    want = refs["gelu"][0](x.astype(np.float64))
    ok = np.abs(want) > 1e-3
    assert (np.abs(got - want)[ok] / np.abs(want[ok])).max() < 1e-6


def test_exp_is_exact_to_an_ulp_down_to_the_smallest_normal(built):
    """Every float in [-88, -86.9]: exp's normal results within 1 ulp, and 0 below
    ln(FLT_MIN) (no denormals, by design). A clamp at -87 once gave exp(-87) on
    [-87.34, -87]."""
    _, fns = built
    lo, hi = np.float32(-88.0).view(np.uint32), np.float32(-86.9).view(np.uint32)
    x = np.arange(hi, lo + 1, dtype=np.uint32).view(np.float32)
    got = math_ulp._call(fns[("exp", "kernel")], x)
    want = np.exp(x.astype(np.float64))
    normal = want >= np.finfo(np.float32).tiny
    assert (got[~normal] == 0).all()
    w32 = want[normal].astype(np.float32)
    err = np.abs(got[normal] - want[normal]) / np.spacing(w32).astype(np.float64)
    assert err.max() <= 1.0, x[normal][err.argmax()]
