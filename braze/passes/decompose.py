"""Decomposition: ops with no kernel of their own become simpler ops.

``scaled_dot_product_attention(q, k, v, mask?)`` becomes::

    s = matmul(q, permute(k, swap last two)) * scale          # scale = 1/sqrt(E) by default
    s = s + mask                                               # float mask
    s = where(keep, s, -inf)                                   # bool mask and/or causal
    p = softmax(s, axis=-1)
    p = where(reduce_max(s, -1) == -inf, 0, p)                 # all -inf rows give 0 (torch's _safe_softmax)
    out = matmul(p, v)

``keep`` for ``is_causal`` is torch's top-left lower triangle built from index
compares: ``arange(S)[None, :] <= arange(L)[:, None]``; with a bool mask too it
is ``logical_and``-ed in. float16/bfloat16 inputs are computed in float32 and
cast back (as the reference does).

``linear``, ``matmul``, ``conv2d``, ``layer_norm``, ``softmax``, ``rms_norm`` stay
as they are (libraries and fused kernels handle them), except a ``matmul`` or
``linear`` whose contracted dim or an output dim is statically 0: oneDNN
refuses a weight with a dim of 0, and the result is zeros (plus the bias) or
empty, so it becomes ``full(0)`` (``+ bias``).

``decompose(module)`` mutates the module and returns it.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Function, Module, Node, Value
from ..ir.types import DType
from .common import Namer, apply_replacements, constant_node, make_node, same_shape
from .dce import dce_function


class _Emit:
    def __init__(self, module: Module, namer: Namer, loc):
        self.m = module
        self.namer = namer
        self.loc = loc
        self.nodes: list[Node] = []

    def __call__(self, op, *inputs, name=None, **attrs) -> Value:
        n = make_node(self.m, op, list(inputs), attrs, loc=self.loc, namer=self.namer, name=name or op)
        self.nodes.append(n)
        return n.outputs[0]

    def const(self, array, hint) -> Value:
        n = constant_node(self.m, array, hint, self.namer, self.loc)
        self.nodes.append(n)
        return n.outputs[0]


def _decompose_sdpa(module: Module, n: Node, namer: Namer):
    q, k, v = n.inputs[:3]
    mask = n.inputs[3] if len(n.inputs) > 3 else None
    out = n.outputs[0]
    e = q.type.shape[-1]
    scale = n.attrs.get("scale")
    if scale is None:
        if not isinstance(e, int) or e <= 0:
            return None
        scale = 1.0 / math.sqrt(e)
    emit = _Emit(module, namer, n.loc)
    dt = q.type.dtype
    acc = DType.float64 if dt is DType.float64 else DType.float32
    if dt is not acc:
        q, k, v = (emit("cast", t, dtype=acc) for t in (q, k, v))
    r = q.type.rank
    perm = list(range(k.type.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = emit("permute", k, perm=tuple(perm), name="k_t")
    s = emit("matmul", q, kt, name="scores")
    s = emit("mul", s, emit.const(np.array(scale, dtype=acc.numpy), "sdpa_scale"), name="scores")
    keep = None
    if n.attrs.get("is_causal"):
        L, S_ = q.type.shape[-2], k.type.shape[-2]
        i = emit("unsqueeze", emit("arange", start=0, end=L, step=1, dtype=DType.int64, name="row"), axes=(1,))
        j = emit("unsqueeze", emit("arange", start=0, end=S_, step=1, dtype=DType.int64, name="col"), axes=(0,))
        keep = emit("less_equal", j, i, name="causal")
    if mask is not None:
        if mask.type.dtype is DType.bool:
            keep = mask if keep is None else emit("logical_and", keep, mask, name="keep")
        else:
            mk = mask if mask.type.dtype is acc else emit("cast", mask, dtype=acc)
            s = emit("add", s, mk, name="scores")
    if keep is not None:
        s = emit("where", keep, s, emit.const(np.array(-np.inf, dtype=acc.numpy), "neg_inf"), name="scores")
    p = emit("softmax", s, axis=-1, name="probs")
    # a row whose scores are all -inf (masked, or -inf scores) gives zeros, as torch's
    # _safe_softmax does, not softmax's NaN; a row with a NaN stays NaN. The max joins the
    # softmax's row kernel.
    row_max = emit("reduce_max", s, axes=(-1,), keepdims=True)
    masked = emit("equal", row_max, emit.const(np.array(-np.inf, dtype=acc.numpy), "neg_inf"), name="row_masked")
    p = emit("where", masked, emit.const(np.array(0, dtype=acc.numpy), "zero"), p, name="probs")
    o = emit("matmul", p, v, name="attn")
    if o.type.dtype is not out.type.dtype:
        o = emit("cast", o, dtype=out.type.dtype)
    del r
    if not same_shape(module.constraints, o.type.shape, out.type.shape) or o.type.dtype != out.type.dtype:
        return None
    return emit.nodes, o


def _decompose_empty_contraction(module: Module, n: Node, namer: Namer):
    a = n.inputs[0]
    out = n.outputs[0]
    dims = (a.type.shape[-1],) + tuple(out.type.shape)  # K, or an output dim, statically 0
    if not any(isinstance(d, int) and d == 0 for d in dims):
        return None
    emit = _Emit(module, namer, n.loc)
    o = emit("full", shape=tuple(out.type.shape), value=0.0, dtype=out.type.dtype, name=out.name)
    bias = n.inputs[2] if n.op == "linear" and len(n.inputs) > 2 else None
    if bias is not None:
        o = emit("add", o, bias, name=out.name)
    if not same_shape(module.constraints, o.type.shape, out.type.shape) or o.type.dtype != out.type.dtype:
        return None
    return emit.nodes, o


DECOMPOSITIONS = {"scaled_dot_product_attention": _decompose_sdpa, "matmul": _decompose_empty_contraction,
                  "linear": _decompose_empty_contraction}


def decompose_function(module: Module, f: Function) -> int:
    namer = Namer(f)
    repl = {}
    new_nodes = []
    count = 0
    for n in f.nodes:
        if repl:
            n.inputs = [None if v is None else repl.get(id(v), v) for v in n.inputs]
        fn = DECOMPOSITIONS.get(n.op)
        r = None
        if fn is not None:
            try:
                r = fn(module, n, namer)
            except Exception:
                r = None  # not decomposable here (odd shapes); the op stays
        if r is None:
            new_nodes.append(n)
            continue
        nodes, o = r
        new_nodes.extend(nodes)
        repl[id(n.outputs[0])] = o
        count += 1
    f.nodes = new_nodes
    apply_replacements(f, repl)
    dce_function(f)
    return count


def decompose(module: Module) -> Module:
    for f in list(module.functions.values()):
        decompose_function(module, f)
    return module
