"""Constant folding: nodes whose inputs are all constants are computed now, with the op's
NumPy reference, into new module constants.

A node folds (rule ``fold_node``) when every input is the output of a ``constant`` node with data, its
attributes and output types are concrete (no symbols), and either the result is
small (<= ``SMALL`` elements) or it is no larger than its inputs together (a
weight transform: transpose, reshape, cast, scale of a weight...). Creation ops
with no inputs (``arange``, ``full``) fold when small and concrete.

It also folds (rule ``conv_batch_norm``) an inference ``batch_norm`` with constant parameters into the
``conv2d`` before it (constant weight and bias, the conv's only user):
``W' = W * s``, ``b' = (b - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``.

Unused constants are dropped. ``constant_fold(module)`` mutates the module and returns it.
"""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError
from ..ir import sym as S
from ..ir.graph import Function, Module, Node
from ..ir.types import DType
from ..ops.registry import RefCtx, get_op
from .common import Namer, apply_replacements, constant_node, constant_value, users
from .dce import dce_function, drop_unused_constants
from .rules import Rule, rule

SMALL = 1 << 16
NEVER = ("constant", "fused")


def _concrete_attrs(attrs) -> bool:
    for v in attrs.values():
        if isinstance(v, S.SymExpr):
            return False
        if isinstance(v, (list, tuple)) and any(isinstance(x, S.SymExpr) for x in v):
            return False
    return True


@rule("constant_fold", "fold_node")
def _fold_node(module: Module, n: Node):
    """The output arrays of ``n`` when it folds, else None."""
    if n.op in NEVER:
        return None
    arrays = []
    for v in n.inputs:
        if v is None:
            arrays.append(None)
            continue
        c = constant_value(module, v)
        if c is None:
            return None
        arrays.append(c)
    if not any(a is not None for a in arrays) and get_op(n.op).kind != "creation":
        return None
    if not _concrete_attrs(n.attrs) or not all(v.type.is_static() for v in n.outputs):
        return None
    out_size = sum(int(np.prod(v.type.shape, dtype=np.int64)) for v in n.outputs)
    in_size = sum(a.size for a in arrays if a is not None)
    if out_size > SMALL and out_size > in_size:
        return None
    opdef = get_op(n.op)
    try:
        with np.errstate(all="ignore"):
            out = opdef.reference(RefCtx({}, module.constants, module=module), *arrays, **n.attrs)
    except (BrazeError, IndexError, ArithmeticError):
        return None  # the reference refuses these values (an index out of range, an integer divided by 0): leave
        # them to fail at run time, as the framework does
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != len(n.outputs):
        return None
    res = []
    for v, a in zip(n.outputs, outs):
        a = np.asarray(a)
        if tuple(a.shape) != tuple(v.type.shape):
            return None
        res.append(np.asarray(a, dtype=v.type.dtype.numpy, order="C"))  # keeps 0-d arrays 0-d
    return res


_CONV_BN = Rule("constant_fold", "conv_batch_norm")


def _fold_conv_bn(module: Module, f: Function, namer: Namer) -> int:
    """conv2d(x, W, b?) -> batch_norm(consts) becomes conv2d(x, W', b')."""
    use = users(f)
    res = {id(v) for v in f.results}
    repl = {}
    new_nodes = []
    dropped = set()
    count = 0
    by_out = {}
    for n in f.nodes:
        for v in n.outputs:
            by_out[id(v)] = n
    for n in f.nodes:
        if id(n) in dropped:
            continue
        if n.op == "batch_norm" and n.inputs[0] is not None and n.inputs[0].producer is not None:
            conv = n.inputs[0].producer
            y = n.inputs[0]
            params = [constant_value(module, v) for v in n.inputs[1:]]
            if conv.op == "conv2d" and len(use.get(id(y), [])) == 1 and id(y) not in res and \
                    all(p is not None for p in params):
                w = constant_value(module, conv.inputs[1])
                b = constant_value(module, conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None \
                    else None
                has_b = len(conv.inputs) > 2 and conv.inputs[2] is not None
                # 16-bit weights too (ml_dtypes' bfloat16 is not numpy kind "f"): folded in float64,
                # rounded once
                if w is not None and (b is not None or not has_b) and DType.from_numpy(w.dtype).is_float:
                    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
                    s = gamma / np.sqrt(var + n.attrs["eps"])
                    w2 = (w.astype(np.float64) * s.reshape(-1, 1, 1, 1)).astype(w.dtype)
                    b0 = b.astype(np.float64) if b is not None else 0.0
                    b2 = ((b0 - mean) * s + beta).astype(w.dtype)
                    wn = constant_node(module, w2, "bn_folded_weight", namer, conv.loc)
                    bn_ = constant_node(module, b2, "bn_folded_bias", namer, conv.loc)
                    from .common import make_node
                    nc = make_node(module, "conv2d", [conv.inputs[0], wn.outputs[0], bn_.outputs[0]],
                                   dict(conv.attrs), loc=conv.loc, namer=namer, name=n.outputs[0].name)
                    # the new conv takes the batch_norm's place (all its inputs exist by then)
                    new_nodes.extend([wn, bn_, nc])
                    repl[id(n.outputs[0])] = nc.outputs[0]
                    count += 1
                    _CONV_BN.hit()
                    continue
        new_nodes.append(n)
    if count:
        f.nodes = new_nodes
        apply_replacements(f, repl)
        dce_function(f)
    return count


def constant_fold_function(module: Module, f: Function) -> int:
    namer = Namer(f)
    folded = _fold_conv_bn(module, f, namer)
    repl = {}
    new_nodes = []
    for n in f.nodes:
        if repl:
            n.inputs = [None if v is None else repl.get(id(v), v) for v in n.inputs]
        arrays = _fold_node(module, n)
        if arrays is None:
            new_nodes.append(n)
            continue
        for v, a in zip(n.outputs, arrays):
            cn = constant_node(module, a, f"{n.op}_{v.name}".replace(".", "_"), namer, n.loc)
            new_nodes.append(cn)
            repl[id(v)] = cn.outputs[0]
        folded += 1
    f.nodes = new_nodes
    apply_replacements(f, repl)
    dce_function(f)
    return folded


def constant_fold(module: Module) -> Module:
    for f in module.functions.values():
        constant_fold_function(module, f)
    drop_unused_constants(module)
    return module
