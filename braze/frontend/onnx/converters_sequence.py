"""ONNX sequences and optionals, resolved at import: a sequence is a list of tensors whose length the
import knows (common.Seq), an optional a tensor, a sequence or nothing (common.Opt). Positions must be
known at import; what the ops compute on the tensors (a split, a concatenation, SequenceMap's body per
element) is ordinary graph ops. A sequence whose length depends on tensor data has no such form and is
refused by name."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .common import TV, Opt, Seq, onnx_dtype
from .convert import converter

I64 = DType.int64


def _seq(ctx, i: int) -> Seq:
    t = ctx.tv(i)
    if not isinstance(t, Seq):
        raise ctx.unsupported(f"input {i} ('{ctx.node.input[i]}') is not a sequence")
    return t


def _position(ctx, i: int, n: int, default: int, insert: bool = False) -> int:
    """Input i, a position in a sequence of n (negative counts from the end), known at import."""
    if ctx.tv(i) is None:
        return default
    p = ctx.const_scalar(i, "position")
    hi = n if insert else n - 1
    if not -n <= int(p) <= hi:
        raise ctx.unsupported(f"position {p} outside a sequence of {n}",
                              hint=f"a position lies in [{-n}, {hi}]")
    return int(p) % (n + 1 if insert else n) if p < 0 else int(p)


@converter("SequenceEmpty", attrs=("dtype",), sequences=True)
def _sequence_empty(ctx):
    return Seq([], onnx_dtype(ctx.attr("dtype", 1), ctx.where()))


@converter("SequenceConstruct", sequences=True)
def _sequence_construct(ctx):
    items = [ctx.tv(i) for i in range(ctx.n_inputs())]
    if any(not isinstance(t, TV) for t in items):
        raise ctx.unsupported("an input that is not a tensor")
    if len({t.dtype for t in items}) > 1:
        raise ctx.unsupported(f"tensors of types {sorted({t.dtype.name for t in items})}",
                              hint="a sequence's tensors have one element type")
    return Seq(items, items[0].dtype)


@converter("SequenceAt", sequences=True)
def _sequence_at(ctx):
    s = _seq(ctx, 0)
    if not s.items:
        raise ctx.unsupported("SequenceAt of an empty sequence")
    return s.items[_position(ctx, 1, len(s.items), 0)]


@converter("SequenceInsert", sequences=True)
def _sequence_insert(ctx):
    s, t = _seq(ctx, 0), ctx.tv(1)
    if not isinstance(t, TV) or t.dtype is not s.dtype:
        raise ctx.unsupported(f"inserting {t!r} into a sequence of {s.dtype.name}")
    items = list(s.items)
    items.insert(_position(ctx, 2, len(items), len(items), insert=True), t)
    return Seq(items, s.dtype)


@converter("SequenceErase", sequences=True)
def _sequence_erase(ctx):
    s = _seq(ctx, 0)
    if not s.items:
        raise ctx.unsupported("SequenceErase of an empty sequence")
    items = list(s.items)
    del items[_position(ctx, 1, len(items), len(items) - 1)]
    return Seq(items, s.dtype)


@converter("SequenceLength", sequences=True)
def _sequence_length(ctx):
    return TV(known=np.array(len(_seq(ctx, 0).items), np.int64), dtype=I64)


@converter("ConcatFromSequence", attrs=("axis", "new_axis"), sequences=True)
def _concat_from_sequence(ctx):
    s = _seq(ctx, 0)
    if not s.items:
        raise ctx.unsupported("ConcatFromSequence of an empty sequence (its shape is unknown)")
    vals = [ctx.imp.materialize(t) for t in s.items]
    axis = ctx.attr("axis")
    if ctx.attr("new_axis", 0):
        axis %= vals[0].rank + 1
        vals = [ctx.op("unsqueeze", v, axes=(axis,)) for v in vals]
    else:
        axis %= vals[0].rank
    return vals[0] if len(vals) == 1 else ctx.op("concat", *vals, axis=axis)


@converter("SplitToSequence", attrs=("axis", "keepdims"), sequences=True)
def _split_to_sequence(ctx):
    """Pieces of one each (keepdims=0 drops the axis), of the size ``split`` gives (a scalar: pieces of
    that size, the last shorter), or of each size in ``split``."""
    x = ctx.value(0)
    axis = ctx.attr("axis", 0) % max(x.rank, 1)
    n = x.shape[axis]
    if ctx.tv(1) is None:
        sizes, squeeze = None, not ctx.attr("keepdims", 1)
    else:
        split = ctx.known_ints(1, "split")
        squeeze = False
        if ctx.tv(1).rank == 0:
            if S.is_symbolic(n):
                raise ctx.unsupported(f"splitting a dim of symbolic size {n} into pieces of {split[0]}",
                                      hint="braze needs the number of pieces known at import")
            sizes = [min(split[0], n - k) for k in range(0, n, split[0])]
        else:
            sizes = split
    if sizes is None:
        if S.is_symbolic(n):
            raise ctx.unsupported(f"splitting a dim of symbolic size {n} into pieces of one",
                                  hint="braze needs the number of pieces known at import")
        sizes = [1] * n
    items, start = [], 0
    for k in sizes:
        piece = ctx.op("slice", x, axis=axis, start=start, end=S.add(start, k))
        items.append(TV(value=ctx.op("squeeze", piece, axes=(axis,)) if squeeze else piece))
        start = S.add(start, k)
    return Seq(items, x.dtype)


@converter("SequenceMap", attrs=("body",), sequences=True)
def _sequence_map(ctx):
    """The body once per element: the first input's element, each further sequence's element at that
    position, and the tensor inputs as they are; each body output gathered into a sequence."""
    body = ctx.attr("body")
    first = _seq(ctx, 0)
    rest = [ctx.tv(i) for i in range(1, ctx.n_inputs())]
    n = len(first.items)
    if any(isinstance(t, Seq) and len(t.items) != n for t in rest):
        raise ctx.unsupported("sequences of different lengths", hint="SequenceMap's sequences have one length")
    outs = [[] for _ in body.output]
    for k in range(n):
        feeds = [first.items[k]] + [t.items[k] if isinstance(t, Seq) else t for t in rest]
        for acc, o in zip(outs, ctx.imp.run_subgraph(body, feeds)):
            acc.append(o)
    dtypes = [onnx_dtype(o.type.sequence_type.elem_type.tensor_type.elem_type, ctx.where())
              if o.type.HasField("sequence_type") else None for o in body.output]
    return [Seq(items, items[0].dtype if items else (dt or first.dtype)) for items, dt in zip(outs, dtypes)]


@converter("Optional", attrs=("type",), sequences=True)
def _optional(ctx):
    return Opt(ctx.tv(0))


@converter("OptionalHasElement", sequences=True)
def _optional_has_element(ctx):
    t = ctx.tv(0)
    has = t is not None and not (isinstance(t, Opt) and t.item is None)
    return TV(known=np.array(has), dtype=DType.bool)


@converter("OptionalGetElement", sequences=True)
def _optional_get_element(ctx):
    t = ctx.tv(0)
    if isinstance(t, Opt):
        if t.item is None:
            raise ctx.unsupported("OptionalGetElement of an empty optional",
                                  hint="check it with OptionalHasElement first")
        return t.item
    return t
