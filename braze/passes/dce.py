"""Dead-code elimination: nodes whose outputs nothing uses, constants no node names,
and ``fused_*`` sub-functions that no ``fused`` node calls.

``dce(module)`` mutates the module and returns it.
"""

from __future__ import annotations

from ..ir.graph import Function, Module
from .common import is_callee


def dce_function(f: Function) -> int:
    """Drop the nodes of ``f`` whose outputs are unused; returns how many were dropped."""
    live = {id(v) for v in f.results}
    keep = []
    for n in reversed(f.nodes):
        if any(id(v) in live for v in n.outputs):
            keep.append(n)
            for v in n.inputs:
                if v is not None:
                    live.add(id(v))
    dropped = len(f.nodes) - len(keep)
    f.nodes = keep[::-1]
    return dropped


def drop_unused_constants(module: Module) -> int:
    used = set()
    for f in module.functions.values():
        for n in f.nodes:
            if n.op == "constant":
                used.add(n.attrs.get("name"))
    dead = [k for k in module.constants if k not in used]
    for k in dead:
        del module.constants[k]
    return len(dead)


def drop_uncalled_fused(module: Module) -> int:
    """Remove functions named ``fused_*`` that no ``fused`` node calls (any more)."""
    n = 0
    while True:
        called = is_callee(module)
        dead = [k for k in module.functions if k.startswith("fused_") and k not in called]
        if not dead:
            return n
        for k in dead:
            del module.functions[k]
            n += 1


def dce(module: Module) -> Module:
    """Unused nodes, then uncalled fused sub-functions, then unused constants (in place)."""
    for f in module.functions.values():
        dce_function(f)
    drop_uncalled_fused(module)
    drop_unused_constants(module)
    return module
