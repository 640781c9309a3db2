"""Recognize hand-written forms of ops braze has natively.

GPT-2 (and other "NewGELU" models) spell the tanh GELU out as
``0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))``: eight nodes, one of them
a ``pow``. As one ``gelu(approximate="tanh")`` it becomes a oneDNN post-op of
the GEMM before it instead of a separate pass over memory (rule ``gelu_tanh``).
"""

from __future__ import annotations

import math

from ..ir.graph import Function, Module, Node, Value
from .common import Namer, make_node, replace_all_uses, scalar_value, top_functions
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


def _rewrite(module: Module, f: Function) -> int:
    namer = Namer(f)
    out, count = [], 0
    for n in f.nodes:
        out.append(n)
        g = _gelu_tanh(module, n, namer)
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
