"""The ONNX converter registry: converter modules register each function with ``@converter``,
with the attributes it handles; ``table`` imports them all."""

from __future__ import annotations

CONVERTERS: dict = {}  # op_key -> (function(ctx) -> outputs, allowed attribute names)


def op_key(domain: str, op_type: str) -> str:
    """An op's name in CONVERTERS: its type in the default domain, ``domain::type`` in another
    (``ai.onnx.preview::FlexAttention``)."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def converter(*op_types, attrs=()):
    def deco(fn):
        for t in op_types:
            CONVERTERS[t] = (fn, frozenset(attrs))
        return fn
    return deco
