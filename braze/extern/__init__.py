"""Vendor libraries braze calls from generated code (oneDNN for GEMM and convolution)."""

from . import onednn

__all__ = ["onednn"]
