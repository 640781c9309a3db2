"""Marks for tests whose premise needs a CPU feature that not every host has (CPUs differ between
machines: braze detects the ISA, and so do its tests)."""

from __future__ import annotations

import pytest


def small_m_kernel_here() -> bool:
    """Whether braze's small-M GEMM kernels run on this CPU (AVX-512, or AVX2 with FMA: the helper's
    braze_dnnl_smallm*.c): without them a GEMM has one kernel in `fast` tuning, so there is nothing to
    measure."""
    from braze.codegen.isa import host_isa
    from braze.pipeline import kernel_rules
    isa = host_isa()
    return isa.name == "avx512" or kernel_rules(isa) == "avx2"


needs_small_m_kernel = pytest.mark.skipif(
    not small_m_kernel_here(), reason="braze's small-M GEMM kernels need AVX-512 or AVX2 with FMA: this CPU's "
                                      "GEMMs have one kernel to tune, so fast tuning measures nothing")
