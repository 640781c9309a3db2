"""Common-subexpression elimination: nodes with the same op, the same inputs and the same
attributes compute the same values (every braze op is pure), so later copies are replaced by
the first (rule ``same_node``). ``constant`` nodes naming the same constant, or small constants
(<= 1024 elements) with equal contents, are merged too (rule ``same_constant``).

``cse(module)`` mutates the module and returns it.
"""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.graph import Function, Module, array_digest
from ..ir.types import DType
from .common import apply_replacements, follow
from .dce import dce_function, drop_unused_constants
from .rules import Rule

SMALL_CONSTANT = 1024
_SAME_NODE = Rule("cse", "same_node")
_SAME_CONSTANT = Rule("cse", "same_constant")


def attr_key(v):
    """A hashable key that tells apart everything the printer tells apart (-0.0 vs 0.0, 1 vs 1.0)."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return ("b", v)
    if isinstance(v, (float, np.floating)):
        return ("f", repr(float(v)))
    if isinstance(v, (int, np.integer)):
        return ("i", int(v))
    if isinstance(v, S.SymExpr):
        return ("s", v.key())
    if isinstance(v, DType):
        return ("d", v.name)
    if isinstance(v, str):
        return ("t", v)
    if isinstance(v, (list, tuple)):
        return ("l",) + tuple(attr_key(x) for x in v)
    if isinstance(v, np.ndarray):
        return ("a", v.dtype.name, v.shape, v.tobytes())
    return ("r", repr(v))


def _const_key(module: Module, name: str):
    c = module.constants.get(name)
    if isinstance(c, np.ndarray) and c.size <= SMALL_CONSTANT:
        return ("cdata", c.dtype.name, c.shape, c.tobytes())
    return ("cname", name)


def cse_function(module: Module, f: Function) -> int:
    seen: dict = {}
    repl: dict = {}
    keep = []
    merged = 0
    for n in f.nodes:
        n.inputs = [None if v is None else follow(repl, v) for v in n.inputs]
        if n.op == "constant":
            key = ("constant", _const_key(module, n.attrs.get("name")), n.outputs[0].type.dtype.name)
        else:
            key = (n.op, tuple(None if v is None else id(v) for v in n.inputs),
                   tuple(sorted((k, attr_key(v)) for k, v in n.attrs.items())))
        old = seen.get(key)
        if old is not None and len(old.outputs) == len(n.outputs) and \
                all(a.type == b.type for a, b in zip(old.outputs, n.outputs)):
            for a, b in zip(n.outputs, old.outputs):
                repl[id(a)] = b
            merged += 1
            (_SAME_CONSTANT if n.op == "constant" else _SAME_NODE).hit()
            continue
        seen[key] = n
        keep.append(n)
    f.nodes = keep
    apply_replacements(f, repl)
    return merged


def cse(module: Module) -> Module:
    for f in module.functions.values():
        cse_function(module, f)
        dce_function(f)
    drop_unused_constants(module)
    return module


__all__ = ["cse", "cse_function", "attr_key", "array_digest"]
