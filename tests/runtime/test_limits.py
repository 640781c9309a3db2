"""measured_limits: the machine's copy and GEMM rates for the BRAZE_DEBUG=3 profile."""

from __future__ import annotations

import numpy as np
import pytest

from braze.extern import onednn
from braze.runtime import limits


def test_the_onednn_helper_times_a_gemm():
    if not onednn.available():
        pytest.skip("oneDNN is not installed: the limit is NumPy's alone")
    x = np.ones((256, 256), np.float32)
    s = limits._onednn_gemm_seconds(x, x)
    assert s is not None and 0 < s < 1


@pytest.mark.parametrize("helper_s, faster", [(1e-3, True), (None, False), (1e3, False)])
def test_the_gemm_limit_is_the_faster_library(monkeypatch, helper_s, faster):
    monkeypatch.setattr(limits, "_onednn_gemm_seconds", lambda x, y: helper_s)
    lim = limits.measured_limits.__wrapped__()  # not the process's cached figure
    assert lim.bandwidth_gbs > 0
    helper = 2 * 1024 ** 3 / 1e-3 / 1e9  # 2147 GFLOP/s: no 2-core NumPy product runs so fast
    assert (lim.gemm_gflops == pytest.approx(helper)) is faster
