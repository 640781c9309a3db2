"""The ONNX converter registry: converter modules register each function with ``@converter``,
with the attributes it handles; ``table`` imports them all."""

from __future__ import annotations

CONVERTERS: dict = {}  # op_key -> (function(ctx) -> outputs, allowed attribute names)
TAKES_SEQUENCES: set = set()  # op keys whose converters take sequences and optionals (common.Seq, Opt)


def op_key(domain: str, op_type: str) -> str:
    """An op's name in CONVERTERS: its type in the default domain, ``domain::type`` in another
    (``ai.onnx.preview::FlexAttention``)."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def converter(*op_types, attrs=(), sequences=False):
    """Register ``fn`` for ``op_types``; with ``sequences``, it takes sequence and optional inputs too
    (any other converter gets an UnsupportedOpError naming the input instead)."""
    def deco(fn):
        for t in op_types:
            CONVERTERS[t] = (fn, frozenset(attrs))
            if sequences:
                TAKES_SEQUENCES.add(t)
        return fn
    return deco
