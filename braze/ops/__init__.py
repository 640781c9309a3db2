"""Operators: one registry entry per op (attributes, symbolic inference, NumPy reference)."""

from .builder import Builder, tensor
from .registry import Attr, OpDef, all_ops, defop, get_op

__all__ = ["Attr", "OpDef", "Builder", "all_ops", "defop", "get_op", "tensor"]
