"""Canonicalization: local rewrites that remove work without changing any result bit.

Rules (each checks that the replacement has the node's exact type):

* ``cast`` to the input's dtype -> the input.
* ``reshape`` / ``expand`` to the input's shape, ``permute`` by the identity,
  full-range ``slice`` (start 0, end >= the dim, step 1), one-input ``concat``,
  one-output ``split`` -> the input.
* chains of views (``reshape``, ``flatten``, ``squeeze``, ``unsqueeze``): a chain
  that ends in the shape it started from (an unsqueeze/squeeze pair, a reshape
  and its inverse) -> the start; otherwise consecutive views -> one ``reshape``.
* ``permute(permute(x, p), q)`` -> ``permute(x, p[q])`` (dropped if the identity).
* ``x * 1``, ``1 * x``, ``x / 1`` -> x (exact for every float, -0.0, inf and NaN included).
* ``x + c`` and ``c + x`` -> x only when every element of the constant ``c`` is
  **-0.0** (floats) or 0 (ints): ``x + (+0.0)`` is *not* the identity, since
  ``-0.0 + 0.0 == +0.0`` (the sign of zero would change), so it is kept.
  ``x - 0`` -> x for +0.0 (``-0.0 - 0.0 == -0.0``) and integer 0.
  In every case the constant must not broadcast the result to a larger shape or
  promote its dtype.

``canonicalize(module)`` mutates the module and returns it; nodes made dead are removed.
"""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError
from ..ir.graph import Function, Module, Node, Value
from ..ops.shape import BIG
from .common import Namer, apply_replacements, constant_value, follow, make_node, same_shape
from .dce import dce_function, drop_unused_constants

VIEWS = ("reshape", "flatten", "squeeze", "unsqueeze")


def _same_type(store, a: Value, b: Value) -> bool:
    return a.type.dtype == b.type.dtype and same_shape(store, a.type.shape, b.type.shape)


def _all_const(module, v, pred) -> bool:
    c = constant_value(module, v)
    if c is None or c.size == 0:
        return False
    return bool(pred(c))


def _is_one(c):
    return np.all(c == 1)


def _is_neg_zero_or_int_zero(c):
    if c.dtype.kind == "f" or c.dtype.name == "bfloat16":
        f = c.astype(np.float64)
        return np.all(f == 0) and np.all(np.signbit(f))
    if c.dtype.kind in "iu":
        return np.all(c == 0)
    return False


def _is_pos_zero_or_int_zero(c):
    if c.dtype.kind == "f" or c.dtype.name == "bfloat16":
        f = c.astype(np.float64)
        return np.all(f == 0) and not np.any(np.signbit(f))
    if c.dtype.kind in "iu":
        return np.all(c == 0)
    return False


def _rewrite(module: Module, n: Node, namer: Namer):
    """A Value that replaces n's single output, a new Node replacing n, or None."""
    store = module.constraints
    if len(n.outputs) != 1:
        return None
    out = n.outputs[0]
    ins = n.inputs
    x = ins[0] if ins else None

    def ident(v):
        return v if v is not None and _same_type(store, v, out) else None

    op = n.op
    if op == "cast":
        return ident(x)
    if op in ("reshape", "expand"):
        r = ident(x)
        if r is not None:
            return r
    if op == "permute":
        perm = [p % max(out.rank, 1) for p in n.attrs["perm"]]
        if perm == list(range(len(perm))):
            return ident(x)
        if x is not None and x.producer is not None and x.producer.op == "permute":
            inner = x.producer
            p1 = [p % max(out.rank, 1) for p in inner.attrs["perm"]]
            comp = [p1[q] for q in perm]
            src = inner.inputs[0]
            if comp == list(range(len(comp))):
                return ident(src)
            return make_node(module, "permute", [src], {"perm": tuple(comp)}, loc=n.loc, namer=None,
                             name=out.name)
    if op == "slice":
        a = n.attrs
        ax = a["axis"] % max(x.rank, 1)
        d = x.type.shape[ax]
        end = a["end"]
        if a["step"] == 1 and isinstance(a["start"], int) and a["start"] == 0 and \
                ((isinstance(end, int) and end >= BIG) or store.equal(end, d) is True or
                 (isinstance(end, int) and isinstance(d, int) and end >= d)):
            return ident(x)
    if op == "split":
        return ident(x)
    if op == "concat" and len(ins) == 1:
        return ident(x)
    if op in VIEWS and x is not None:
        r = ident(x) if op != "reshape" else None
        if r is not None:
            return r
        if x.producer is not None and x.producer.op in VIEWS:
            src = x.producer.inputs[0]
            if _same_type(store, src, out):
                return src
            return make_node(module, "reshape", [src], {"shape": tuple(out.type.shape)}, loc=n.loc,
                             namer=None, name=out.name)
    if op in ("mul", "div", "add", "sub") and len(ins) == 2:
        a, b = ins
        cands = []
        if op == "mul":
            cands = [(a, b), (b, a)]
            pred = _is_one
        elif op == "div":
            cands = [(a, b)]
            pred = _is_one
        elif op == "add":
            cands = [(a, b), (b, a)]
            pred = _is_neg_zero_or_int_zero
        else:
            cands = [(a, b)]
            pred = _is_pos_zero_or_int_zero
        for keep, c in cands:
            if _all_const(module, c, pred):
                r = ident(keep)
                if r is not None:
                    return r
    return None


def canonicalize_function(module: Module, f: Function, max_rounds: int = 4) -> int:
    namer = Namer(f)
    changed_total = 0
    for _ in range(max_rounds):
        repl: dict[int, Value] = {}
        changed = 0
        new_nodes = []
        for n in f.nodes:
            if repl:
                n.inputs = [None if v is None else follow(repl, v) for v in n.inputs]
            try:
                r = _rewrite(module, n, namer)
            except BrazeError:  # the rewritten node does not type-check: the rule does not apply
                r = None
            if r is None:
                new_nodes.append(n)
            elif isinstance(r, Value):
                repl[id(n.outputs[0])] = r
                changed += 1
            else:
                new_nodes.append(r)
                for a, b in zip(n.outputs, r.outputs):
                    repl[id(a)] = b
                changed += 1
        f.nodes = new_nodes
        apply_replacements(f, repl)
        dce_function(f)
        changed_total += changed
        if not changed:
            break
    return changed_total


def canonicalize(module: Module) -> Module:
    for f in module.functions.values():
        canonicalize_function(module, f)
    drop_unused_constants(module)
    return module
