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


def bf16_products_here() -> bool:
    """Whether oneDNN multiplies bfloat16 operands natively on this CPU (AVX512_BF16 or AMX-BF16):
    elsewhere the precision pass widens them, so no bfloat16 product reaches the helper."""
    from braze.codegen.isa import host_isa
    from braze.passes.precision import library_dtypes
    return "bfloat16" in library_dtypes(host_isa().host_features)


needs_bf16_products = pytest.mark.skipif(
    not bf16_products_here(), reason="oneDNN multiplies bfloat16 only with AVX512_BF16 or AMX-BF16, which this "
                                     "CPU lacks: its bfloat16 products widen to float32")
