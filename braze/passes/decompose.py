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

``group_norm(x, w?, b?; groups)`` over ``x [N, C, *rest]`` becomes::

    y = reshape(layer_norm(reshape(x, [N, groups, C/groups * prod(rest)]), axis=-1), x.shape)
    y = y * reshape(w, [C, 1, ...]) + reshape(b, [C, 1, ...])

so each group is one row of layer_norm's stitch kernel (a symbolic C: ``C // groups``, and the
reshape checks at run time that groups divides C).

``topk(x; k, axis, largest)`` becomes, with the axis moved last (``xi`` the element
at i, ``xl`` every other element l of its row, ``n`` the row length)::

    before[i, l] = xl better than xi  or  (xl same as xi and l < i)   # NaN is largest
    rank[i]  = sum_l before[i, l]                                    # 0 for the best
    index[j] = sum_i i * (rank[i] == j)          for j < k           # the element of rank j
    value[j] = gather_elements(x, index)

The compares fuse into their reductions (no n x n buffer). k <= n is required: when the
ranges do not prove it and the dim is a symbol, the symbol's lower bound becomes k; when
it is an expression, the constraint ``min(n, k) == k`` is recorded. A smaller size is then
an input error, checked on every call (torch raises too).

That is n^2 compares per row, so only a row of at most ``TOPK_LOOPS_MAX`` elements (its
static size or its range's upper bound) becomes these loops. A longer row (a vocabulary's
logits: 2.5e9 compares a row at 50257) stays ``topk``, with the same k <= n fact: fusion gives
it a ``select`` group, which the host runs with braze_select.h's ``BZ_TOPK`` (a heap of the k
best so far, or a merge sort of (value, index) pairs for k above a quarter of the row).
The CUDA target has no such call yet.

A forward inclusive ``cumsum`` / ``cumprod`` of a row that may be longer than
``SCAN_LOOPS_MAX`` (each output of its loops re-sums its prefix: n^2 / 2 a row) becomes,
in blocks of B = ``SCAN_BLOCK`` (the row padded with the identity to whole blocks; a 16-bit
float row in float32, rounded once at the end, as its loops round each output once)::

    y[blk, j] = scan(x[blk, :])[j]  (+ or *)  exclusive_scan(total(x[blk', :]) for blk')[blk]

``linear``, ``matmul``, ``conv2d``, ``layer_norm``, ``softmax``, ``rms_norm`` stay
as they are (libraries and fused kernels handle them), except:

- a ``matmul`` or ``linear`` whose contracted dim or an output dim is statically 0:
  oneDNN refuses a weight with a dim of 0, and the result is zeros (plus the bias) or
  empty, so it becomes ``full(0)`` (``+ bias``);
- an integer or float64 ``matmul`` / ``linear`` (oneDNN's is float32 only) becomes
  ``reduce_sum(a[..., m, None, :] * b_t[..., None, n, :], -1)``: exact for integers
  (wrapping as torch does), and the product fuses into the sum.

A float32 or float64 ``pow(x, 0.5)`` becomes ``where(x == -inf, inf, sqrt(x + 0))``: IEEE pow's
values (+inf at -inf, +0 at -0) at the speed of a vector square root.

Each op's decomposition is one rule named after the op (``braze.passes.rules``).
``decompose(module)`` mutates the module and returns it.
"""

from __future__ import annotations


import numpy as np

from ..errors import BrazeError
from ..ir import sym as S
from ..ir.graph import Function, Module, Node, Value
from ..ir.types import DType
from ..ops.attention import attention_row_masked, attention_scores, default_scale
from .common import Namer, apply_replacements, constant_node, make_node, same_shape, scalar_value
from .dce import dce_function
from .rules import Rule


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
    scale = n.attrs.get("scale")
    if scale is None:
        scale = default_scale(q.type.shape[-1])
        if scale is None:
            return None
    emit = _Emit(module, namer, n.loc)
    dt = q.type.dtype
    acc = DType.float64 if dt is DType.float64 else DType.float32
    if dt is not acc:
        q, k, v = (emit("cast", t, dtype=acc) for t in (q, k, v))
    s = attention_scores(emit, emit.const, q, k, mask, bool(n.attrs.get("is_causal")), scale, acc)
    p = emit("softmax", s, axis=-1, name="probs")
    # a row whose scores are all -inf (masked, or -inf scores) gives zeros, as torch's
    # _safe_softmax does, not softmax's NaN; a row with a NaN stays NaN. The max joins the
    # softmax's row kernel.
    _, masked = attention_row_masked(emit, emit.const, s, acc)
    p = emit("where", masked, emit.const(np.array(0, dtype=acc.numpy), "zero"), p, name="probs")
    o = emit("matmul", p, v, name="attn")
    if o.type.dtype is not out.type.dtype:
        o = emit("cast", o, dtype=out.type.dtype)
    if not same_shape(module.constraints, o.type.shape, out.type.shape) or o.type.dtype != out.type.dtype:
        return None
    return emit.nodes, o


def _decompose_group_norm(module: Module, n: Node, namer: Namer):
    x = n.inputs[0]
    w = n.inputs[1] if len(n.inputs) > 1 else None
    b = n.inputs[2] if len(n.inputs) > 2 else None
    shape = x.type.shape
    c, g = shape[1], n.attrs["groups"]
    if isinstance(c, int) and c % g:
        return None
    emit = _Emit(module, namer, n.loc)
    # a symbolic C: C / groups channels per group (the reshape checks at run time that groups divides C)
    row = S.mul(c // g if isinstance(c, int) else S.floordiv(c, g), S.prod(shape[2:]))
    y = emit("reshape", x, shape=(shape[0], g, row), name="groups")
    y = emit("layer_norm", y, axis=-1, eps=n.attrs["eps"], name="normed")
    y = emit("reshape", y, shape=tuple(shape), name="normed")
    per_channel = (c,) + (1,) * (len(shape) - 2)
    if w is not None:
        y = emit("mul", y, emit("reshape", w, shape=per_channel), name="scaled")
    if b is not None:
        y = emit("add", y, emit("reshape", b, shape=per_channel), name="shifted")
    if y.dtype != x.dtype:  # float32 parameters on a 16-bit input: the result keeps the input's dtype
        y = emit("cast", y, dtype=x.dtype, name="cast")
    return emit.nodes, y


# the longest row topk's compares and sums compute (n^2 compares a row); braze_select.h's BZ_TOPK
# takes longer ones
TOPK_LOOPS_MAX = 64


def _decompose_topk(module: Module, n: Node, namer: Namer):
    from ..ops.sort import k_may_exceed
    x = n.inputs[0]
    k, largest = n.attrs["k"], n.attrs["largest"]
    r = x.type.rank
    emit = _Emit(module, namer, n.loc)
    i64 = DType.int64
    if r == 0:
        zero = emit.const(np.array(0, np.int64), "zero")
        return emit.nodes, (x, zero)
    a = n.attrs["axis"] % r
    cnt = x.type.shape[a]
    store = module.constraints
    may = k_may_exceed(store, k, cnt)
    if may == "always":
        return None
    if may == "maybe":  # a smaller dim is an input error, checked on every call
        s = store.simplify(cnt)
        lo = store.bounds(k)[1]
        if isinstance(s, S.Sym) and lo != float("inf"):
            store.add_range(s, int(lo), store.symbols[s.name].hi)
        else:  # an expression (or an unbounded k): the fact min(n, k) == k
            store.add_equal(S.smin(cnt, k), k)
    if store.bounds(store.simplify(cnt))[1] > TOPK_LOOPS_MAX:
        return None  # stays topk: braze_select.h (the host's select group)
    perm = tuple(d for d in range(r) if d != a) + (a,)
    xt = emit("permute", x, perm=perm, name="rows") if a != r - 1 else x
    xi = emit("unsqueeze", xt, axes=(r,), name="xi")  # [..., n, 1]: the element ranked
    xl = emit("unsqueeze", xt, axes=(r - 1,), name="xl")  # [..., 1, n]: the others
    better = emit("greater" if largest else "less", xl, xi, name="better")
    same = emit("equal", xl, xi, name="same")
    if x.type.dtype.is_float:
        nan_i = emit("not_equal", xi, xi, name="nan_i")
        nan_l = emit("not_equal", xl, xl, name="nan_l")
        if largest:  # a NaN beats every number
            better = emit("logical_or", better, emit("logical_and", nan_l, emit("logical_not", nan_i)))
        else:
            better = emit("logical_or", better, emit("logical_and", nan_i, emit("logical_not", nan_l)))
        same = emit("logical_or", same, emit("logical_and", nan_i, nan_l), name="same")
    pos_i = emit("unsqueeze", emit("arange", start=0, end=cnt, step=1, dtype=i64, name="pos"), axes=(1,))
    pos_l = emit("unsqueeze", emit("arange", start=0, end=cnt, step=1, dtype=i64, name="pos"), axes=(0,))
    before = emit("logical_or", better, emit("logical_and", same, emit("less", pos_l, pos_i)), name="before")
    rank = emit("reduce_sum", emit("cast", before, dtype=i64), axes=(-1,), keepdims=False, name="rank")
    want = emit("unsqueeze", emit("arange", start=0, end=k, step=1, dtype=i64, name="slot"), axes=(1,))
    hit = emit("equal", emit("unsqueeze", rank, axes=(r - 1,)), want, name="hit")  # [..., k, n]
    zero = emit.const(np.array(0, np.int64), "zero")
    idx = emit("reduce_sum", emit("where", hit, pos_l, zero), axes=(-1,), keepdims=False, name="index")
    val = emit("gather_elements", xt, idx, axis=r - 1, name="value")
    if a != r - 1:
        inv = tuple(perm.index(d) for d in range(r))
        val = emit("permute", val, perm=inv, name="value")
        idx = emit("permute", idx, perm=inv, name="index")
    return emit.nodes, (val, idx)


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


def _decompose_linear(module: Module, n: Node, namer: Namer):
    """An empty contraction (above), or a product the library does not take (below)."""
    r = _decompose_empty_contraction(module, n, namer)
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    if r is None and _outside_the_library(n):
        emit = _Emit(module, namer, n.loc)  # as matmul below: x [..., i] against w [o, i]
        y = _products_summed(emit, n.inputs[0], n.inputs[1], n.outputs[0])
        return emit.nodes, (y if bias is None else emit("add", y, bias, name=n.outputs[0].name))
    return r


def _outside_the_library(n: Node) -> bool:
    """An integer or float64 product: oneDNN's GEMM takes float32 only."""
    dt = n.outputs[0].type.dtype
    return (dt.is_int or dt is DType.float64) and not all(v.type.dtype is DType.float32 for v in n.inputs[:2])


def _products_summed(emit: _Emit, a: Value, b: Value, out: Value) -> Value:
    """``sum_k a[..., m, k] * b[..., n, k]`` in ``out``'s dtype (``b`` broadcasts against
    ``a[..., m, None, :]``)."""
    dt = out.type.dtype
    a, b = (v if v.type.dtype is dt else emit("cast", v, dtype=dt) for v in (a, b))
    prod = emit("mul", emit("unsqueeze", a, axes=(a.type.rank - 1,)), b, name="products")  # [..., m, n, k]
    y = emit("reduce_sum", prod, axes=(-1,), keepdims=False, name=out.name)  # int sums are int64
    return y if y.type.dtype is dt else emit("cast", y, dtype=dt, name=out.name)


def _decompose_matmul(module: Module, n: Node, namer: Namer):
    """An empty contraction (above), or integer / float64 operands, which the GEMM library
    does not take: broadcast products summed over k (the products fuse into the sum)."""
    r = _decompose_empty_contraction(module, n, namer)
    if r is not None or not _outside_the_library(n):
        return r
    a, b = n.inputs[:2]
    out = n.outputs[0]
    emit = _Emit(module, namer, n.loc)
    a2 = emit("unsqueeze", a, axes=(0,)) if a.type.rank == 1 else a  # [k] -> [1, k]
    rb = b.type.rank
    bt = emit("unsqueeze", b, axes=(0,)) if rb == 1 else emit(  # [.., k, n] -> [.., n, k]
        "permute", b, perm=tuple(range(rb - 2)) + (rb - 1, rb - 2))
    bt = emit("unsqueeze", bt, axes=(bt.type.rank - 2,))  # [.., 1, n, k]: its batch dims align with a's
    y = _products_summed(emit, a2, bt, out)  # [..., m, n]
    if rb == 1:
        y = emit("squeeze", y, axes=(-1,), name=out.name)
    if a.type.rank == 1:
        y = emit("squeeze", y, axes=(-1 if rb == 1 else -2,), name=out.name)
    return emit.nodes, y


# decompose's conv2d rule: a float32 NHWC convolution on a constant weight, whose group reads at
# most DIRECT_IN_CHANNELS input channels (a depthwise convolution reads 1, an RGB stem 3) and whose
# outputs each sum at most DIRECT_TERMS products (taps x channels), runs as braze's loops. Each
# output is then a short sum of vector products that fuses with the ops after it (a depthwise
# convolution's ReLU6, which oneDNN leaves to a pass of its own), and no shape needs a primitive
# (docs/gemm.md). Not under a 16-bit precision policy: its convolutions store 16 bits.
DIRECT_IN_CHANNELS = 4
DIRECT_TERMS = 64


def _decompose_conv2d(module: Module, n: Node, namer: Namer):
    """A convolution reading few channels per group becomes ``direct_conv2d`` on its weight
    permuted to HWIO (folded by the next constant_fold)."""
    a = n.attrs
    x, w = n.inputs[0], n.inputs[1]
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    o, cg, kh, kw = w.type.shape
    if (a.get("layout") != "nhwc" or module.precision.get("policy", "fp32") != "fp32"
            or w.producer is None or w.producer.op != "constant"
            or any(v is not None and v.type.dtype is not DType.float32 for v in (x, w, bias, n.outputs[0]))
            or not all(isinstance(d, int) for d in (o, cg, kh, kw)) or cg > DIRECT_IN_CHANNELS
            or kh * kw * cg > DIRECT_TERMS):
        return None
    emit = _Emit(module, namer, n.loc)
    hwio = emit("permute", w, perm=(2, 3, 1, 0), name="weight_hwio")
    y = emit("direct_conv2d", x, hwio, *([bias] if bias is not None else []), stride=tuple(a["stride"]),
             padding=tuple(a["padding"]), dilation=tuple(a["dilation"]), groups=a["groups"],
             name=n.outputs[0].name)
    return emit.nodes, y


def _decompose_pow(module: Module, n: Node, namer: Namer):
    """A float32 or float64 ``pow`` by the constant 0.5 is a square root, but for IEEE pow's two
    differences: -inf gives +inf and -0 gives +0 (sqrt gives NaN and -0). So it becomes
    ``where(x == -inf, inf, sqrt(x + 0))``: a vector square root instead of ``pow`` lane by lane
    (4M elements: 0.5 ms against 12 ms). Other exponents stay ``pow``."""
    x, out = n.inputs[0], n.outputs[0]
    dt = x.type.dtype
    if dt not in (DType.float32, DType.float64) or out.type.dtype is not dt or \
            scalar_value(module, n.inputs[1]) != 0.5 or \
            not same_shape(module.constraints, x.type.shape, out.type.shape):
        return None
    emit = _Emit(module, namer, n.loc)
    root = emit("sqrt", emit("add", x, emit.const(np.array(0, dt.numpy), "zero")), name="root")  # -0 + 0 = +0
    neg_inf = emit("equal", x, emit.const(np.array(-np.inf, dt.numpy), "neg_inf"))
    return emit.nodes, emit("where", neg_inf, emit.const(np.array(np.inf, dt.numpy), "inf"), root,
                            name=out.name)


# the longest row cumsum / cumprod's loops take (each output re-sums its prefix: n^2 / 2 a row);
# a longer one is summed in blocks of SCAN_BLOCK
SCAN_LOOPS_MAX = 256
SCAN_BLOCK = 64


def _decompose_scan(module: Module, n: Node, namer: Namer):
    """A forward inclusive cumsum / cumprod of a long row, in blocks of B = SCAN_BLOCK: the scan
    inside each block, plus (times) the exclusive scan of the blocks' totals. n * (B + n / B) terms
    a row, not n^2 / 2 (a top-p sampler's cumsum over 50257 probabilities: 1.26e9 adds a row)."""
    x, out = n.inputs[0], n.outputs[0]
    if n.attrs["exclusive"] or n.attrs["reverse"] or x.type.rank == 0:
        return None
    store = module.constraints
    a = n.attrs["axis"] % x.type.rank
    cnt = x.type.shape[a]
    if store.bounds(store.simplify(cnt))[1] <= SCAN_LOOPS_MAX:
        return None
    add = n.op == "cumsum"
    dt, B = out.type.dtype, SCAN_BLOCK
    acc = DType.float32 if dt in (DType.bfloat16, DType.float16) else dt
    emit = _Emit(module, namer, n.loc)
    xc = emit("cast", x, dtype=acc) if x.type.dtype is not acc else x
    nb = S.floordiv(S.add(cnt, B - 1), B)
    r = x.type.rank
    pads = [0] * (2 * r)
    pads[r + a] = S.add(S.mul(nb, B), S.mul(-1, cnt))
    shape = tuple(x.type.shape)
    xp = emit("pad", xc, pads=tuple(pads), mode="constant", value=0.0 if add else 1.0)
    blocks = emit("reshape", xp, shape=shape[:a] + (nb, B) + shape[a + 1:], name="blocks")
    inner = emit(n.op, blocks, axis=a + 1, exclusive=False, reverse=False, name="in_block")
    total = emit("reduce_sum" if add else "reduce_prod", blocks, axes=(a + 1,), keepdims=True, name="block_total")
    before = emit(n.op, total, axis=a, exclusive=True, reverse=False, name="before_block")
    y = emit("add" if add else "mul", inner, before)
    y = emit("reshape", y, shape=shape[:a] + (S.mul(nb, B),) + shape[a + 1:])
    if acc is dt:
        return emit.nodes, emit("slice", y, axis=a, start=0, end=cnt, step=1, name=out.name)
    y = emit("slice", y, axis=a, start=0, end=cnt, step=1)
    return emit.nodes, emit("cast", y, dtype=dt, name=out.name)


# op -> its rule (named after the op), which gives (new nodes, replacement outputs) or None
DECOMPOSITIONS = {op: Rule("decompose", op, fn) for op, fn in (
    ("scaled_dot_product_attention", _decompose_sdpa), ("group_norm", _decompose_group_norm),
    ("topk", _decompose_topk), ("matmul", _decompose_matmul), ("linear", _decompose_linear),
    ("conv2d", _decompose_conv2d), ("pow", _decompose_pow), ("cumsum", _decompose_scan),
    ("cumprod", _decompose_scan))}


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
            except BrazeError:
                r = None  # a piece does not type-check for these shapes: the op stays
        if r is None:
            new_nodes.append(n)
            continue
        nodes, outs = r
        new_nodes.extend(nodes)
        for old, o in zip(n.outputs, outs if isinstance(outs, tuple) else (outs,)):
            repl[id(old)] = o
        count += 1
    f.nodes = new_nodes
    apply_replacements(f, repl)
    dce_function(f)
    return count


def decompose(module: Module) -> Module:
    for f in list(module.functions.values()):
        decompose_function(module, f)
    return module
