"""Helpers shared by the graph passes: use lists, rewiring, new nodes with inference, module copies.

Every pass is ``fn(module) -> module``. The passes in this package *mutate*
the module they are given and return it (``run_pipeline`` copies the input
once with ``copy_module`` so the caller's module is left alone).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np


from ..ir import sym as S
from ..ir.graph import Function, Module, Node, SourceLoc, Value
from ..ir.types import DType, TensorType
from ..ops.registry import InferCtx, get_op


def users(func: Function) -> dict[int, list[Node]]:
    """id(value) -> the nodes that use it (once per node, in node order)."""
    out: dict[int, list[Node]] = {}
    for n in func.nodes:
        seen = set()
        for v in n.inputs:
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                out.setdefault(id(v), []).append(n)
    return out


def result_ids(func: Function) -> set[int]:
    return {id(v) for v in func.results}


def replace_all_uses(func: Function, old: Value, new: Value) -> None:
    """Every use of ``old`` (node inputs and results) becomes ``new``."""
    if old is new:
        return
    for n in func.nodes:
        if any(v is old for v in n.inputs):
            n.inputs = [new if v is old else v for v in n.inputs]
    func.results = [new if v is old else v for v in func.results]


def follow(repl: dict[int, Value], v: Value) -> Value:
    """The end of ``v``'s replacement chain."""
    while id(v) in repl:
        v = repl[id(v)]
    return v


def apply_replacements(func: Function, repl: dict[int, Value]) -> None:
    """Rewire every use of value ``id -> replacement`` (chains are followed)."""
    if not repl:
        return

    def get(v):
        seen = 0
        while v is not None and id(v) in repl and seen < 1000:
            v = repl[id(v)]
            seen += 1
        return v

    for n in func.nodes:
        n.inputs = [get(v) for v in n.inputs]
    func.results = [get(v) for v in func.results]


def same_shape(store, a, b) -> bool:
    """Shapes equal dim by dim under the constraint store (symbolic dims included)."""
    return len(a) == len(b) and all(store.equal(x, y) is True for x, y in zip(a, b))


def numel(shape):
    return S.prod(shape)


class Namer:
    """Fresh value names for one function."""

    def __init__(self, func: Function):
        self.taken = {p.name for p in func.params}
        for n in func.nodes:
            for v in n.outputs:
                self.taken.add(v.name)

    def __call__(self, hint: str) -> str:
        base = hint or "v"
        name, i = base, 1
        while name in self.taken:
            name = f"{base}_{i}"
            i += 1
        self.taken.add(name)
        return name


def make_node(module: Module, op: str, inputs, attrs: dict | None = None, *, loc: SourceLoc | None = None,
              namer: Namer | None = None, name: str | None = None) -> Node:
    """A new node (not inserted anywhere) with attribute defaults and inferred output types."""
    opdef = get_op(op)
    full = opdef.complete_attrs(attrs or {})
    ctx = InferCtx(op, module.constraints, loc, module.constants, module=module)
    out = opdef.infer(ctx, *[None if v is None else v.type for v in inputs], **full)
    types = list(out) if isinstance(out, (tuple, list)) else [out]
    outs = []
    for i, t in enumerate(types):
        t = TensorType(t.dtype, tuple(module.constraints.simplify(d) for d in t.shape))
        hint = name or op
        if len(types) > 1:
            hint = f"{hint}_{i}"
        outs.append(Value(namer(hint) if namer else hint, t))
    return Node(op, list(inputs), full, outs, loc)


def add_constant(module: Module, array, hint: str = "c") -> str:
    """Store ``array`` as a new module constant; returns its name."""
    from ..ops.builder import sanitize
    a = np.asarray(array, order="C")  # not ascontiguousarray: it turns a 0-d array into shape (1,)
    hint = sanitize(hint)
    name, i = hint, 1
    while name in module.constants:
        name = f"{hint}_{i}"
        i += 1
    module.constants[name] = a
    return name


def constant_node(module: Module, array, hint: str = "c", namer: Namer | None = None,
                  loc: SourceLoc | None = None) -> Node:
    cname = add_constant(module, array, hint)
    return make_node(module, "constant", [], {"name": cname}, loc=loc, namer=namer, name=cname)


def constant_value(module: Module, v: Value | None):
    """The NumPy array behind ``v`` when it is the output of a ``constant`` node with data, else None."""
    if v is None or v.producer is None or v.producer.op != "constant":
        return None
    c = module.constants.get(v.producer.attrs.get("name"))
    return c if isinstance(c, np.ndarray) else None


def scalar_value(module: Module, v: Value | None):
    """The single value of a constant with one element (any shape), else None."""
    c = constant_value(module, v)
    if c is None or c.size != 1:
        return None
    return c.reshape(()).item()


def clone_function(f: Function, name: str | None = None) -> Function:
    vmap: dict[int, Value] = {}
    g = Function(name or f.name)
    for p in f.params:
        q = Value(p.name, p.type)
        vmap[id(p)] = q
        g.params.append(q)
    for n in f.nodes:
        outs = [Value(v.name, v.type) for v in n.outputs]
        for v, w in zip(n.outputs, outs):
            vmap[id(v)] = w
        g.nodes.append(Node(n.op, [None if v is None else vmap.get(id(v), v) for v in n.inputs],
                            dict(n.attrs), outs, n.loc))
    g.results = [vmap.get(id(v), v) for v in f.results]
    return g


def copy_module(m: Module) -> Module:
    """A copy with its own functions, nodes, values and constraint store (constant arrays are shared)."""
    out = Module()
    out.constants = dict(m.constants)
    out.constraints = m.constraints.copy()
    out.input_notes = dict(m.input_notes)
    out.value_symbols = dict(m.value_symbols)
    out.data_symbols = dict(m.data_symbols)
    out.donated = {k: dict(v) for k, v in m.donated.items()}
    out.output_names = {k: list(v) for k, v in m.output_names.items()}
    out.arena_sizes = dict(m.arena_sizes)
    out.precision = dict(m.precision)
    out.tuning = dict(m.tuning)
    for k, f in m.functions.items():
        out.functions[k] = clone_function(f)
    return out


def is_callee(module: Module) -> set[str]:
    """Names of the functions that some ``fused`` node calls."""
    out = set()
    for f in module.functions.values():
        for n in f.nodes:
            if n.op == "fused":
                out.add(n.attrs.get("callee"))
    return out


def top_functions(module: Module) -> list[Function]:
    """The functions that are not the callee of a ``fused`` node (entries)."""
    callees = is_callee(module)
    return [f for k, f in module.functions.items() if k not in callees]


def dtype_of(a: np.ndarray) -> DType:
    return DType.from_numpy(a.dtype)


def iter_nodes(module: Module) -> Iterable[tuple[Function, Node]]:
    for f in module.functions.values():
        for n in f.nodes:
            yield f, n
