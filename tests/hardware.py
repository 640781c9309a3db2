"""Marks for tests whose premise needs a CPU feature that not every host has (CPUs differ between
machines: braze detects the ISA, and so do its tests)."""

from __future__ import annotations

import pytest


def small_m_kernel_here() -> bool:
    """Whether braze's small-M GEMM kernel runs on this CPU (it is AVX-512 only): without it a GEMM has
    one kernel in `fast` tuning, so there is nothing to measure."""
    from braze.codegen.isa import host_isa
    return host_isa().name == "avx512"


needs_small_m_kernel = pytest.mark.skipif(
    not small_m_kernel_here(), reason="the small-M GEMM kernel is AVX-512 only: this CPU's GEMMs have one kernel "
                                      "to tune, so fast tuning measures nothing")
