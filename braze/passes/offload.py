"""Library offload: which ops of each gemm or conv group oneDNN runs, decided once, in the IR.

Fusion gives a ``gemm``/``conv`` group an anchor (``linear``, ``matmul``,
``conv2d``), view prologues (a ``matmul``'s also transposes of an operand) and an
elementwise epilogue. This pass keeps in the group what one oneDNN call does: the
prologue, the anchor, then at most a
bias add straight on the anchor's result, one activation and a residual add (views
between the anchor and the activation or residual only rename the result). It
names them on the ``fused`` node, ``post_ops=["bias", "gelu_tanh", "residual"]``,
in the order of the callee's nodes, and moves the rest of the epilogue into a new
``pointwise`` group that reads the library's result. A last ``cast`` of the float32
result to the operands' 16-bit dtype, with no residual, is the post-op ``cast``: the
call stores that dtype, rounding once; a relu after it is the one post-op that may follow
(``post_ops=["cast", "relu"]``: relu(round(x))). The host generator then only
translates: it decides nothing.

``offload(module)`` mutates the module and returns it. A group the library cannot
run raises ``UnsupportedOpError`` here, with the op's source location.
"""

from __future__ import annotations

import math

from ..errors import BrazeError, UnsupportedOpError
from ..ir.graph import Function, Module, Node, Value
from ..ir.types import DType
from ..ops.registry import get_op
from .common import result_ids, top_functions, users
from .node_classes import BACKWARD_CONVS, CONVS, GEMMS, swaps_last_two, weight_permute
from .precision import HALF

ANCHORS = {"gemm": GEMMS, "conv": CONVS}
VIEW_OPS = ("reshape", "flatten", "squeeze", "unsqueeze")
# activations a library call applies after its product. oneDNN applies the first four as
# post-ops; its gelu and silu give NaN at +-inf, as eager does (docs/semantics.md). Not
# sigmoid: some of oneDNN's convolutions (few channels, a pad as tall as the kernel) map NaN to
# 0 in it (fuzz seed 986). relu and relu6 (a clamp to [0, 6]) are EAGER_ACTIVATIONS: oneDNN's
# relu and clip would turn NaN into a number, so the helper applies them itself as eager does
# (x < 0 ? 0 : x, NaN and -0 kept): in its small-M kernels' epilogue, else over the result after
# oneDNN's primitive, in the result's dtype. So nothing is absorbed after them, and they are the
# one post-op after a cast (hoist_casts puts ResNet's relus there under a bf16 policy). A separate
# pass over the result had taken 5.6-7.9% of the depthwise convnet's call after its expand 1x1
# convolution (AMD EPYC, AVX2). Only on a result in the operands' dtype: a bf16 policy's float32
# result (ResNet's relu(conv + residual)) is rounded by a kernel of its own for the next product,
# which applies the relu on the way; the helper's pass before it took 0.999-1.061x the time.
# Any activation may follow the residual add (BRAZE_ACT_AFTER_RESIDUAL).
EAGER_ACTIVATIONS = ("relu", "relu6")
ACTIVATIONS = ("gelu", "gelu_tanh", "silu", "tanh") + EAGER_ACTIVATIONS
POST_OPS = ("scale", "bias", "residual", "cast") + ACTIVATIONS


def activation_name(n: Node) -> str | None:
    """The post-op name of an activation node a library call can apply, else None."""
    if n.op == "gelu":
        return "gelu_tanh" if n.attrs.get("approximate") == "tanh" else "gelu"
    if n.op == "clamp":  # a lower bound of +0 (clamp(x, -0.0) gives -0 below it)
        lo, hi = n.attrs.get("min"), n.attrs.get("max")
        if lo != 0 or math.copysign(1.0, lo) < 0 or not n.outputs[0].dtype.is_float:
            return None
        return {None: "relu", 6.0: "relu6"}.get(hi)
    return n.op if n.op in ACTIVATIONS else None


def offload(module: Module) -> Module:
    """Split every gemm/conv group into the library call and a generated epilogue."""
    used = set(module.functions)
    for f in top_functions(module):
        out: list[Node] = []
        epilogues: list[Node] = []
        for n in f.nodes:
            if n.op == "fused" and n.attrs.get("kind") in ANCHORS and n.attrs.get("post_ops") is None:
                split = _split(module, f, n, used)
                out.extend(split)
                epilogues += split[1:]
            else:
                out.append(n)
        f.nodes = out
        readers = users(f)  # a join moves only nodes that read one epilogue: the others' readers hold
        for e in epilogues:
            _join_reader(module, f, e, readers.get(id(e.outputs[0]), []))
    return module


def _join_reader(module: Module, f: Function, e: Node, readers: list[Node]) -> None:
    """A pointwise group that reads only the generated epilogue ``e``'s result, elementwise, joins
    it: one kernel, one read of the result. (fuse kept it apart, as the epilogue was then inside
    the product's group: under a bf16 policy ResNet's ``relu(conv + residual)`` and the cast of it
    to bfloat16 for the next convolution, which read the float32 result twice.)"""
    v = e.outputs[0]
    r = next((m for m in readers if m.op == "fused" and m.attrs.get("kind") == "pointwise" and len(m.inputs) == 1
              and all(o.type.shape == v.type.shape for o in m.outputs)
              and all(q.op == "constant" or get_op(q.op).kind == "elementwise"
                      for q in module.functions[m.attrs["callee"]].nodes)), None)
    if r is None:
        return
    mine, theirs = module.functions[e.attrs["callee"]], module.functions.pop(r.attrs["callee"])
    inner, p = mine.results[0], theirs.params[0]
    for m in theirs.nodes:
        m.inputs = [inner if x is p else x for x in m.inputs]
    mine.nodes += theirs.nodes
    keep = len(readers) > 1 or id(v) in result_ids(f)  # the result itself is still read
    mine.results = ([inner] if keep else []) + [inner if x is p else x for x in theirs.results]
    e.outputs = ([v] if keep else []) + list(r.outputs)
    for o in r.outputs:
        o.producer = e
    f.nodes.remove(r)


def _where(n: Node) -> str | None:
    return str(n.loc) if n.loc else None


def _split(module: Module, f: Function, n: Node, used: set) -> list[Node]:
    callee = module.functions[n.attrs["callee"]]
    kind = n.attrs["kind"]
    const_of = {id(m.outputs[0]): m for m in callee.nodes if m.op == "constant"}
    anchor_i = next((i for i, m in enumerate(callee.nodes) if m.op in ANCHORS[kind]), None)
    if anchor_i is None or len(n.outputs) != 1:
        raise BrazeError(f"the {kind} group @{callee.name} has no single {'/'.join(ANCHORS[kind])} with one output",
                         where=_where(n), hint="this is a braze bug; please report it")
    anchor = callee.nodes[anchor_i]
    for m in callee.nodes[:anchor_i]:
        if m.op not in VIEW_OPS and m.op != "constant" and not (anchor.op == "matmul" and swaps_last_two(m)) and \
                weight_permute(anchor) is not m:
            raise BrazeError(f"the {kind} group @{callee.name} computes '{m.op}' before its {anchor.op}; "
                             "only views and a matmul operand's transpose may come first", where=_where(m),
                             hint="this is a braze bug; please report it")
    _check_anchor(module, anchor)
    post_ops, absorbed = _absorb(module, callee, anchor_i, const_of)
    rest = callee.nodes[anchor_i + 1 + absorbed:]
    rest = [m for m in rest if m.op != "constant"]
    n.attrs["post_ops"] = post_ops
    if not rest:
        return [n]
    # the library result: the last absorbed value, a new intermediate of the caller
    chain = callee.nodes[anchor_i + absorbed].outputs[0]
    lib_out = Value(f"{callee.name}_out", chain.type)
    keep = callee.nodes[:anchor_i + 1 + absorbed]
    epi = _epilogue(module, callee, chain, rest, n, lib_out, used)
    callee.nodes = keep
    callee.results = [chain]
    _drop_unused_params(callee, n)
    lib = Node("fused", n.inputs, dict(n.attrs), [lib_out], n.loc)
    return [lib, epi]


def _check_anchor(module: Module, a: Node) -> None:
    """Operands of one dtype the library runs natively here (the precision pass made them so)."""
    x, w = a.inputs[:2]
    native = module.precision.get("library", ("float32",))
    if x.dtype != w.dtype or x.dtype.name not in native:
        raise UnsupportedOpError(f"{a.op} on {x.dtype.name} and {w.dtype.name} operands is not supported natively "
                                 f"(the library runs {', '.join(native)} here)", where=_where(a),
                                 hint="run the precision pass before offload; it casts the operands")


def _absorb(module: Module, callee: Function, anchor_i: int, const_of) -> tuple[list[str], int]:
    """The post-ops one library call applies after the anchor, and how many nodes they span."""
    anchor = callee.nodes[anchor_i]
    rest = callee.nodes[anchor_i + 1:]
    chain = anchor.outputs[0]
    readers, results = users(callee), result_ids(callee)
    w = anchor.inputs[1]
    # post-ops are wired for a weight (linear, conv, a 2-D matmul operand: constant or read at
    # run time); a batched product of two activations, or one whose left operand is read
    # transposed (a weight gradient: no weight call), stores 16 bits at most and runs the rest of
    # its epilogue as a generated kernel, and oneDNN's backward convolutions take none
    if anchor.op in BACKWARD_CONVS:
        return [], 0
    if anchor.op == "matmul" and (w.rank != 2 or _transposed(callee, anchor.inputs[0])):
        # its one post-op: storing 16 bits (attention's second product, read by a 16-bit projection)
        single = len(readers.get(id(chain), ())) == 1 and id(chain) not in results
        return (["cast"], 1) if rest and single and _stores_half(rest[0], chain, anchor) else ([], 0)
    # values with memory of their own: params, constants and views of them before the anchor
    in_memory = {id(p) for p in callee.params} | set(const_of) | \
        {id(m.outputs[0]) for m in callee.nodes[:anchor_i] if m.op in VIEW_OPS}
    has_bias = anchor.op in ("linear", "conv2d") and len(anchor.inputs) > 2 and anchor.inputs[2] is not None
    post: list[str] = []
    i = 0
    while i < len(rest):
        m = rest[i]
        if len(readers.get(id(chain), ())) + (id(chain) in results) != 1:
            break
        act = activation_name(m)
        if "scale" in post and act and act not in EAGER_ACTIVATIONS:
            break  # the helper may apply a scale itself (braze_conv2d_ws), and then relu or relu6 only
        if "cast" in post and act not in EAGER_ACTIVATIONS and m.op not in VIEW_OPS:
            break  # other post-ops run on the float32 accumulator, before the rounding
        if m.op in VIEW_OPS and m.inputs[0] is chain:
            pass
        elif act and not any(p in ACTIVATIONS for p in post) and m.inputs[0] is chain:
            if act in EAGER_ACTIVATIONS:  # the helper's own pass, after all the rest
                if m.outputs[0].dtype != anchor.inputs[0].dtype:
                    break  # a policy's float32 result: the kernel that rounds it for the next product applies it
                post.append(act)
                i += 1
                break
            post.append(act)
        elif m.op == "mul" and not post and not has_bias and _is_scale(m, chain, in_memory, anchor, const_of):
            post.append("scale")
        elif m.op == "add" and not has_bias and (chain is anchor.outputs[0] or post == ["scale"] and
                                                 rest[i - 1].op == "mul") and _is_bias(m, chain, in_memory, anchor):
            post.append("bias")
            has_bias = True
        elif m.op == "add" and "residual" not in post and _is_residual(module, m, chain, in_memory):
            post.append("residual")
        elif _stores_half(m, chain, anchor) and "residual" not in post:
            # the helper reads a residual in the destination's dtype, so a cast after one stays out
            post.append("cast")
        else:
            break
        chain = m.outputs[0]
        i += 1
    return post, i


def _stores_half(m: Node, chain: Value, anchor: Node) -> bool:
    """m rounds the float32 chain to the product's 16-bit operand dtype: the call can store that (a
    product widened to float32 has no 16-bit kernel to store with)."""
    return m.op == "cast" and m.inputs[0] is chain and chain.dtype is DType.float32 and \
        m.outputs[0].dtype in HALF and m.outputs[0].dtype is anchor.inputs[0].dtype


def transposed_operands(callee: Function, anchor: Node) -> tuple[int, int]:
    """(1 if the anchor reads its left operand transposed, the same for its right): a prologue
    ``permute`` swapping the last two axes, which the library call reads in place."""
    return int(_transposed(callee, anchor.inputs[0])), int(_transposed(callee, anchor.inputs[1]))


def _transposed(callee: Function, v: Value) -> bool:
    p = v.producer if v is not None else None
    return p is not None and swaps_last_two(p) and any(m is p for m in callee.nodes)


def _other(m: Node, chain: Value) -> Value | None:
    if len(m.inputs) != 2 or chain not in m.inputs:
        return None
    other = m.inputs[1] if m.inputs[0] is chain else m.inputs[0]
    return None if other is chain else other


def _is_bias(m: Node, chain: Value, in_memory: set, anchor: Node) -> bool:
    """``chain + b`` with b a vector in memory (a constant, an input) of shape [N] (gemm) or [OC, 1, 1]
    (conv; NHWC: [OC] or [1, 1, 1, OC]), in float32 or the operands' dtype, the sum in chain's dtype."""
    other = _other(m, chain)
    if other is None or id(other) not in in_memory or other.dtype not in (DType.float32, anchor.inputs[0].dtype) \
            or m.outputs[0].dtype != chain.dtype:
        return False
    if anchor.op == "conv2d":
        if anchor.attrs.get("layout") == "nhwc":
            return _nhwc_channels(other, chain) and m.outputs[0].shape == chain.shape
        return other.shape == (chain.shape[1], 1, 1) and m.outputs[0].shape == chain.shape
    return other.rank == 1 and other.shape[0] == chain.shape[-1] and m.outputs[0].shape == chain.shape


def _nhwc_channels(v: Value, chain: Value) -> bool:
    """v is one value per channel of the NHWC ``chain``: [OC], or [1, 1, 1, OC] (the layout pass's
    per-channel operands), the same memory."""
    return v.rank in (1, 4) and all(d == 1 for d in v.shape[:-1]) and v.shape[-1] == chain.shape[3]


def _is_scale(m: Node, chain: Value, in_memory: set, anchor: Node, const_of) -> bool:
    """``chain * s``, straight on a float32 NHWC convolution's result, with s one float32 value per
    channel in memory: a batch norm's scale (passes/layout.py), on a weight read at run time (a
    constant weight had the batch norm folded into it)."""
    other = _other(m, chain)
    return anchor.op == "conv2d" and anchor.attrs.get("layout") == "nhwc" and chain is anchor.outputs[0] and \
        other is not None and id(other) in in_memory and id(anchor.inputs[1]) not in const_of and \
        chain.dtype is DType.float32 and other.dtype is DType.float32 and _nhwc_channels(other, chain) and \
        m.outputs[0].shape == chain.shape


def _is_residual(module: Module, m: Node, chain: Value, in_memory: set) -> bool:
    """``chain + r`` with r a tensor of chain's shape and dtype, read from memory as it is."""
    other = _other(m, chain)
    if other is None or id(other) not in in_memory or other.dtype != chain.dtype or other.rank != chain.rank:
        return False
    return all(module.constraints.equal(p, q) is True for p, q in zip(other.shape, chain.shape))


def _epilogue(module: Module, callee: Function, chain: Value, nodes: list[Node], n: Node, lib_out: Value,
              used: set) -> Node:
    """A new pointwise group computing ``nodes`` from the library result and the caller's values."""
    name = _fresh(used)
    sub = Function(name)
    outer = {id(p): v for p, v in zip(callee.params, n.inputs)}
    outer[id(chain)] = lib_out
    remap: dict[int, Value] = {}
    inputs: list[Value] = []
    defined = {id(v) for m in nodes for v in m.outputs}
    producers = {id(v): m for m in callee.nodes for v in m.outputs}

    def get(v: Value) -> Value:
        if id(v) in remap:
            return remap[id(v)]
        if id(v) in outer:
            p = Value(v.name, v.type)
            sub.params.append(p)
            inputs.append(outer[id(v)])
            remap[id(v)] = p
            return p
        if id(v) in defined:
            raise BrazeError(f"%{v.name} is used before it is defined in @{callee.name}",
                             hint="this is a braze bug; please report it")
        copy(producers[id(v)])  # a constant or a prologue view: cheap to redo in the epilogue
        return remap[id(v)]

    def copy(m: Node) -> None:
        ins = [None if v is None else get(v) for v in m.inputs]
        outs = [Value(v.name, v.type) for v in m.outputs]
        for v, w in zip(m.outputs, outs):
            remap[id(v)] = w
        sub.nodes.append(Node(m.op, ins, dict(m.attrs), outs, m.loc))

    get(chain)
    for m in nodes:
        copy(m)
    sub.results = [remap[id(callee.results[0])]]
    module.functions[name] = sub
    return Node("fused", inputs, {"callee": name, "kind": "pointwise"}, list(n.outputs), n.loc)


def _drop_unused_params(callee: Function, n: Node) -> None:
    live = {id(v) for m in callee.nodes for v in m.inputs if v is not None} | {id(v) for v in callee.results}
    keep = [i for i, p in enumerate(callee.params) if id(p) in live]
    callee.params = [callee.params[i] for i in keep]
    n.inputs = [n.inputs[i] for i in keep]


def _fresh(used: set) -> str:
    k = 0
    while f"fused_{k}" in used:
        k += 1
    used.add(f"fused_{k}")
    return f"fused_{k}"


__all__ = ["offload", "activation_name", "transposed_operands", "ACTIVATIONS", "EAGER_ACTIVATIONS", "ANCHORS",
           "POST_OPS", "VIEW_OPS"]
