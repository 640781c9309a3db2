"""Recognize hand-written forms of ops braze has natively.

GPT-2 (and other "NewGELU" models) spell the tanh GELU out as
``0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))``: eight nodes, one of them
a ``pow``. As one ``gelu(approximate="tanh")`` it becomes a oneDNN post-op of
the GEMM before it instead of a separate pass over memory (rule ``gelu_tanh``).

A weight that is both an embedding and the LM head (GPT-2's ``wte``) gets two gradients that the
backward adds: ``t(dLogits) @ h + embedding_dense_backward(...)``, the second an ``index_add``
into zeros. ``add(a, index_add(full(0), i, s))`` becomes ``index_add(a, i, s)`` (rule
``add_into_rows``): the rows are added into ``a`` itself, in place when nothing else reads it
(``memory.in_place_inputs``), with no zeros and no third table-sized tensor. The sums differ
in order (``a + s1 + s2`` for ``a + (0 + s1 + s2)``), within a rounding per repeated index.
"""

from __future__ import annotations

import math

from ..ir.graph import Function, Module, Node, Value
from .common import Namer, constant_value, make_node, replace_all_uses, same_shape, scalar_value, top_functions
from .rules import rule


def _near(a, b, v: Value | None = None) -> bool:
    """a is b, as nearly as a constant of v's dtype can say it (a bfloat16 model's sqrt(2/pi) is
    0.796875)."""
    tol = 1e-5 if v is None or not v.dtype.is_float else max(1e-5, float(v.dtype.finfo.eps))
    return a is not None and abs(a - b) <= tol * abs(b)


def _split_const(module: Module, node, want: float):
    """For a binary node with one scalar constant ~ ``want``: the other input, else None."""
    if node is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if _near(scalar_value(module, b), want, b):
        return a
    if _near(scalar_value(module, a), want, a):
        return b
    return None


def _is_cube_of(module: Module, v: Value, x: Value) -> bool:
    p = v.producer
    if p is None:
        return False
    if p.op == "pow" and p.inputs[0] is x and _near(scalar_value(module, p.inputs[1]), 3.0, p.inputs[1]):
        return True
    if p.op == "mul":  # x*x*x in either association
        a, b = p.inputs
        for sq, lin in ((a, b), (b, a)):
            q = sq.producer
            if lin is x and q is not None and q.op == "mul" and q.inputs[0] is x and q.inputs[1] is x:
                return True
    return False


def _match_gelu_tanh(module: Module, n) -> Value | None:
    if n.op != "mul" or len(n.inputs) != 2:
        return None
    for half, g in (n.inputs, n.inputs[::-1]):
        hp = half.producer
        x = _split_const(module, hp, 0.5) if hp is not None and hp.op == "mul" else None
        gp = g.producer
        t = _split_const(module, gp, 1.0) if gp is not None and gp.op == "add" else None
        if x is None or t is None or t.producer is None or t.producer.op != "tanh":
            continue
        ep = t.producer.inputs[0].producer
        d = _split_const(module, ep, math.sqrt(2 / math.pi)) if ep is not None and ep.op == "mul" else None
        dp = d.producer if d is not None else None
        if dp is None or dp.op != "add" or x not in dp.inputs:
            continue
        c = dp.inputs[1] if dp.inputs[0] is x else dp.inputs[0]
        cp = c.producer
        cube = _split_const(module, cp, 0.044715) if cp is not None and cp.op == "mul" else None
        if cube is not None and _is_cube_of(module, cube, x):
            return x
    return None


@rule("recognize_patterns", "gelu_tanh")
def _gelu_tanh(module: Module, n: Node, namer: Namer) -> Node | None:
    """The gelu node that replaces the hand-written tanh GELU ending at ``n``, else None."""
    x = _match_gelu_tanh(module, n)
    if x is None or not x.dtype.is_float or n.outputs[0].shape != x.shape:
        return None
    return make_node(module, "gelu", [x], {"approximate": "tanh"}, loc=n.loc, namer=namer, name="gelu")


def _zeros(module: Module, v: Value) -> bool:
    """Whether ``v`` is zeros: a ``full`` of 0, or one that constant folding made a constant."""
    p = v.producer
    if p is not None and p.op == "full":
        return float(p.attrs["value"]) == 0
    c = constant_value(module, v)
    return c is not None and not c.any()


@rule("recognize_patterns", "add_into_rows")
def _add_into_rows(module: Module, n: Node, namer: Namer, uses: dict) -> Node | None:
    """``index_add(a, i, s)`` for ``n = add(a, index_add(full(0), i, s))`` (either order) with
    ``a`` of the sum's type and the index_add read by ``n`` alone (``uses``: id(value) -> its
    readers, a function result counted as one), else None."""
    if n.op != "add" or len(n.inputs) != 2:
        return None
    out = n.outputs[0]
    for a, r in (n.inputs, n.inputs[::-1]):
        p = r.producer
        if p is None or p.op != "index_add" or not _zeros(module, p.inputs[0]) or uses.get(id(r)) != 1 or \
                a.dtype != out.dtype or r.dtype != out.dtype or \
                not all(same_shape(module.constraints, v.shape, out.shape) for v in (a, r)):
            continue
        return make_node(module, "index_add", [a, p.inputs[1], p.inputs[2]], dict(p.attrs), loc=n.loc,
                         namer=namer, name="rows_added")
    return None


def _rewrite(module: Module, f: Function) -> int:
    namer = Namer(f)
    uses: dict = {}
    for v in [v for m in f.nodes for v in m.inputs] + list(f.results):
        if v is not None:
            uses[id(v)] = uses.get(id(v), 0) + 1
    out, count = [], 0
    for n in f.nodes:
        out.append(n)
        g = _gelu_tanh(module, n, namer)
        g = g if g is not None else _add_into_rows(module, n, namer, uses)
        if g is not None:
            out.append(g)
            replace_all_uses(f, n.outputs[0], g.outputs[0])
            count += 1
    f.nodes = out
    return count


def recognize_patterns(module: Module) -> Module:
    """Mutates and returns ``module``; the replaced nodes are left for dce."""
    for f in top_functions(module):
        _rewrite(module, f)
    return module
