"""Canonicalization: local rewrites that remove work without changing any result bit.

Rules (each checks that the replacement has the node's exact type; names as counted by
``braze.passes.rules``):

* ``identity_<op>``: ``cast`` to the input's dtype, ``reshape`` / ``expand`` /
  ``flatten`` / ``squeeze`` / ``unsqueeze`` to the input's shape, ``permute`` by the
  identity, full-range ``slice`` (start 0, end >= the dim, step 1), one-input ``concat``,
  one-output ``split``, ``tile`` by ones, ``pad`` by zeros -> the input. (A size of 1 that dynamo
  fixed makes many of these: a ``tile`` by the batch, an ``expand`` to it.)
* ``view_chain``: chains of views (``reshape``, ``flatten``, ``squeeze``, ``unsqueeze``): a chain
  that ends in the shape it started from (an unsqueeze/squeeze pair, a reshape
  and its inverse) -> the start; otherwise consecutive views -> one ``reshape``.
* ``permute_chain``: ``permute(permute(x, p), q)`` -> ``permute(x, p[q])`` (dropped if the identity).
* ``mul_one``, ``div_one``: ``x * 1``, ``1 * x``, ``x / 1`` -> x (exact for every float,
  -0.0, inf and NaN included).
* ``add_neg_zero``: ``x + c`` and ``c + x`` -> x only when every element of the constant ``c`` is
  **-0.0** (floats) or 0 (ints): ``x + (+0.0)`` is *not* the identity, since
  ``-0.0 + 0.0 == +0.0`` (the sign of zero would change), so it is kept.
  ``sub_zero``: ``x - 0`` -> x for +0.0 (``-0.0 - 0.0 == -0.0``) and integer 0.
  In every case the constant must not broadcast the result to a larger shape or
  promote its dtype.

* ``weight_as_linear``: ``matmul(x, C)`` with ``C`` a float32 ``[K, N]`` constant that nothing
  else reads (ONNX's MatMul initializers, GPT-2's ``Conv1D``, TF's MatMul) -> ``linear(x, C')``,
  ``C'`` the ``[N, K]`` transpose made here. The same product: the library packs either into one
  layout, and ``[N, K]`` is the one every GEMM kernel reads (AVX2's small-M kernel reads only
  that: docs/gemm.md).

``canonicalize(module)`` mutates the module and returns it; nodes made dead are removed.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..errors import BrazeError
from ..ir.graph import Function, Module, Node, Value
from ..ir.types import DType
from ..ops.shape import BIG
from .common import Namer, apply_replacements, constant_node, constant_value, follow, make_node, same_shape
from .dce import dce_function, drop_unused_constants
from .rules import Rule, rule

PASS = "canonicalize"
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


def _ident(module: Module, v: Value | None, out: Value) -> Value | None:
    """``v`` when it can stand for ``out`` (the same dtype and shape), else None."""
    return v if v is not None and _same_type(module.constraints, v, out) else None


def _identity(op: str, when=None) -> Rule:
    """``op`` -> its input, when the output has the input's type (and ``when(module, n)``)."""
    def fn(module, n):
        return _ident(module, n.inputs[0], n.outputs[0]) if when is None or when(module, n) else None
    return Rule(PASS, f"identity_{op}", fn)


def _perm(n: Node, rank: int) -> list[int]:
    return [p % max(rank, 1) for p in n.attrs["perm"]]


def _is_identity_perm(module, n) -> bool:
    perm = _perm(n, n.outputs[0].rank)
    return perm == list(range(len(perm)))


def _is_full_range(module, n) -> bool:
    a, x = n.attrs, n.inputs[0]
    d = x.type.shape[a["axis"] % max(x.rank, 1)]
    end = a["end"]
    return a["step"] == 1 and isinstance(a["start"], int) and a["start"] == 0 and \
        ((isinstance(end, int) and end >= BIG) or module.constraints.equal(end, d) is True or
         (isinstance(end, int) and isinstance(d, int) and end >= d))


@rule(PASS, "permute_chain")
def _permute_chain(module, n):
    """permute(permute(x, p), q) -> x when p[q] is the identity, else permute(x, p[q])."""
    out, x = n.outputs[0], n.inputs[0]
    inner = x.producer
    if inner is None or inner.op != "permute":
        return None
    p1 = _perm(inner, out.rank)
    comp = [p1[q] for q in _perm(n, out.rank)]
    src = inner.inputs[0]
    if comp == list(range(len(comp))):
        return _ident(module, src, out)
    return make_node(module, "permute", [src], {"perm": tuple(comp)}, loc=n.loc, namer=None, name=out.name)


@rule(PASS, "view_chain")
def _view_chain(module, n):
    """A view of a view -> the start when it has the end's type, else one reshape of it."""
    out, x = n.outputs[0], n.inputs[0]
    if x is None or x.producer is None or x.producer.op not in VIEWS:
        return None
    src = x.producer.inputs[0]
    if _same_type(module.constraints, src, out):
        return src
    return make_node(module, "reshape", [src], {"shape": tuple(out.type.shape)}, loc=n.loc, namer=None,
                     name=out.name)


def _drop_constant(name: str, pred, commutes: bool = False) -> Rule:
    """``op(x, c)`` (and ``op(c, x)`` when it commutes) -> x when every element of the constant
    ``c`` satisfies ``pred`` and x has the result's type (no broadcast, no promotion)."""
    def fn(module, n):
        if len(n.inputs) != 2:
            return None
        a, b = n.inputs
        for keep, c in ((a, b), (b, a)) if commutes else ((a, b),):
            if _all_const(module, c, pred):
                r = _ident(module, keep, n.outputs[0])
                if r is not None:
                    return r
        return None
    return Rule(PASS, name, fn)


# op -> its rules, tried in order: the first that gives a replacement is applied
RULES: dict[str, tuple[Rule, ...]] = {
    "cast": (_identity("cast"),),
    "reshape": (_identity("reshape"), _view_chain),
    "expand": (_identity("expand"),),
    "flatten": (_identity("flatten"), _view_chain),
    "squeeze": (_identity("squeeze"), _view_chain),
    "unsqueeze": (_identity("unsqueeze"), _view_chain),
    "permute": (_identity("permute", _is_identity_perm), _permute_chain),
    "slice": (_identity("slice", _is_full_range),),
    "split": (_identity("split"),),
    "concat": (_identity("concat", lambda module, n: len(n.inputs) == 1),),
    "tile": (_identity("tile", lambda module, n: all(isinstance(r, int) and r == 1 for r in n.attrs["repeats"])),),
    "pad": (_identity("pad", lambda module, n: all(isinstance(p, int) and p == 0 for p in n.attrs["pads"])),),
    "mul": (_drop_constant("mul_one", _is_one, commutes=True),),
    "div": (_drop_constant("div_one", _is_one),),
    "add": (_drop_constant("add_neg_zero", _is_neg_zero_or_int_zero, commutes=True),),
    "sub": (_drop_constant("sub_zero", _is_pos_zero_or_int_zero),),
}


def _rewrite(module: Module, n: Node, namer: Namer):
    """A Value that replaces n's single output, a new Node replacing n, or None."""
    if len(n.outputs) != 1:
        return None
    for r in RULES.get(n.op, ()):
        out = r(module, n)
        if out is not None:
            return out
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


def _weight_as_linear(module: Module, namer: Namer, uses: Counter, n: Node):
    """(the transposed constant's node, the linear node) replacing ``n``, or None. ``uses``: how many
    times each value (by id) is read in the function."""
    if n.op != "matmul" or len(n.inputs) != 2 or n.inputs[0] is None or n.inputs[0].rank < 2:
        return None
    x, c = n.inputs
    w = constant_value(module, c)
    if w is None or w.ndim != 2 or w.dtype != np.float32 or x.dtype != DType.float32 or uses[id(c)] != 1:
        return None
    t = constant_node(module, np.ascontiguousarray(w.T), hint=f"{c.producer.attrs['name']}_t", namer=namer,
                      loc=c.producer.loc)
    lin = make_node(module, "linear", [x, t.outputs[0]], {"out_dtype": n.attrs.get("out_dtype")}, loc=n.loc,
                    name=n.outputs[0].name)
    return (t, lin) if lin.outputs[0].type == n.outputs[0].type else None


_WEIGHT_AS_LINEAR = Rule(PASS, "weight_as_linear", _weight_as_linear)


def _weights_as_linear(module: Module, f: Function) -> None:
    namer = Namer(f)
    uses = Counter(id(v) for v in [*(i for m in f.nodes for i in m.inputs), *f.results] if v is not None)
    nodes, repl = [], {}
    for n in f.nodes:
        r = _WEIGHT_AS_LINEAR(module, namer, uses, n)
        if r is None:
            nodes.append(n)
            continue
        nodes.extend(r)
        repl[id(n.outputs[0])] = r[1].outputs[0]
    if repl:
        f.nodes = nodes
        apply_replacements(f, repl)
        dce_function(f)


def canonicalize(module: Module) -> Module:
    for f in module.functions.values():
        _weights_as_linear(module, f)
        canonicalize_function(module, f)
    drop_unused_constants(module)
    return module
