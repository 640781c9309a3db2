"""The ONNX converter registry: converter modules register each function with ``@converter``,
with the attributes it handles; ``table`` imports them all."""

from __future__ import annotations

CONVERTERS: dict = {}  # ONNX op type -> (function(ctx) -> outputs, allowed attribute names)


def converter(*op_types, attrs=()):
    def deco(fn):
        for t in op_types:
            CONVERTERS[t] = (fn, frozenset(attrs))
        return fn
    return deco
