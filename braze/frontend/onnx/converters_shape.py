"""ONNX shape, index and creation ops, folded on known values where possible.

``Shape`` of a tensor with symbolic dims yields a known value holding the
symbols; ``Gather``, ``Concat``, ``Unsqueeze``, ``Slice`` ... of known values stay
known, so ``Reshape``, ``Expand``, ``Slice``, ``Tile``, ``Pad``, ``Range`` and
``ConstantOfShape`` get symbolic attributes instead of run-time tensors.
"""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from . import fold
from .common import TV, as_object, is_symbolic_array, onnx_dtype
from .convert import converter


def _known_or_none(ctx, i):
    k = fold.knowns(ctx, (i,))
    return None if k is None else k[0]


# ---------------------------------------------------------------------------
# sources of known values
# ---------------------------------------------------------------------------


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints", "sparse_value",
                              "value_string", "value_strings"))
def _constant(ctx):
    from onnx import numpy_helper

    a = ctx._attrs
    if "value" in a:
        dt = onnx_dtype(a["value"].t.data_type, ctx.where())
        arr = numpy_helper.to_array(a["value"].t)
    elif "value_float" in a:
        dt, arr = DType.float32, np.array(ctx.attr("value_float"), np.float32)
    elif "value_floats" in a:
        dt, arr = DType.float32, np.array(ctx.attr("value_floats"), np.float32)
    elif "value_int" in a:
        dt, arr = DType.int64, np.array(ctx.attr("value_int"), np.int64)
    elif "value_ints" in a:
        dt, arr = DType.int64, np.array(ctx.attr("value_ints"), np.int64)
    else:
        kind = next(iter(a), "nothing")
        raise ctx.unsupported(f"a Constant holding {kind}",
                              hint="braze supports dense numeric constants")
    return TV(known=np.asarray(arr).astype(dt.numpy), dtype=dt, name=ctx.node.output[0])


@converter("Shape", attrs=("start", "end"))
def _shape(ctx):
    t = ctx.tv(0)
    r = t.rank
    start, end = ctx.attr("start", 0), ctx.attr("end", r)
    dims = list(t.shape)[slice(max(-r, min(start, r)) if start < 0 else min(start, r),
                               max(-r, end) if end < 0 else min(end, r))]
    a = np.empty(len(dims), dtype=object)
    for i, d in enumerate(dims):
        a[i] = d
    return fold.result(a, DType.int64)


@converter("Size")
def _size(ctx):
    a = np.empty((), dtype=object)
    a[()] = S.prod(ctx.tv(0).shape)
    return fold.result(a, DType.int64)


@converter("Dropout", attrs=("seed",))
def _dropout(ctx):
    training = ctx.tv(2) is not None and bool(ctx.const_scalar(2, "training_mode"))
    ratio = ctx.const_scalar(1, "ratio") if training and ctx.tv(1) is not None else 0.5
    if training and ratio != 0:  # a ratio of 0 drops nothing: the identity, training or not
        raise ctx.unsupported(f"training_mode=True with ratio {ratio} (random masks)",
                              hint="export the model in eval mode")
    outs = [ctx.tv(0)]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        outs.append(ctx.op("full_like", ctx.value(0), value=1.0, dtype=DType.bool))
    return outs


@converter("ConstantOfShape", attrs=("value",))
def _constant_of_shape(ctx):
    shape = ctx.known_ints(0, "shape", run_time=(0, None))
    v = ctx.attr("value")
    if v is None:
        v, dt = np.zeros(1, np.float32), DType.float32
    else:
        dt = onnx_dtype(ctx._attrs["value"].t.data_type, ctx.where())
    val = np.asarray(v).reshape(-1)[0]
    if not any(S.is_symbolic(d) for d in shape) and int(np.prod(shape)) <= 1 << 12:
        return TV(known=np.full(tuple(shape), val, dtype=dt.numpy), dtype=dt)
    return ctx.op("full", shape=tuple(shape), value=float(val), dtype=dt)


@converter("Range")
def _range(ctx):
    dt = ctx.tv(0).dtype
    vals = []
    for i, what in enumerate(("start", "limit", "delta")):
        k = ctx.known_ints(i, what) if not dt.is_float else None
        if dt.is_float:
            vals.append(ctx.const_scalar(i, what))
        else:
            vals.append(k[0])
    start, limit, delta = vals
    if not any(S.is_symbolic(v) for v in vals):
        n = max(0, int(np.ceil((limit - start) / delta)))
        if n <= 1 << 12:
            arr = (np.asarray(start, np.float64) + np.arange(n) * np.asarray(delta, np.float64)) \
                if dt.is_float else start + np.arange(n, dtype=np.int64) * delta
            return TV(known=arr.astype(dt.numpy), dtype=dt)
    return ctx.op("arange", start=start, end=limit, step=delta, dtype=dt)


# ---------------------------------------------------------------------------
# reshaping
# ---------------------------------------------------------------------------


def _resolve_shape(ctx, in_shape, target, allowzero):
    out = list(target)
    neg = [i for i, d in enumerate(out) if isinstance(d, int) and d == -1]
    for i, d in enumerate(out):
        if isinstance(d, int) and d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.unsupported(f"shape {target}: 0 at position {i} copies a dim the input lacks")
            out[i] = in_shape[i]
    if len(neg) > 1:
        raise ctx.unsupported(f"shape {target} has more than one -1")
    if neg:
        rest = S.prod(d for j, d in enumerate(out) if j != neg[0])
        out[neg[0]] = ctx.imp.module.constraints.simplify(S.floordiv(S.prod(in_shape), rest))
    return tuple(out)


@converter("Reshape", attrs=("allowzero",))
def _reshape(ctx):
    t = ctx.tv(0)
    allowzero = ctx.attr("allowzero", 0)
    # fed at run time, a target entry must be a plain size: -1 and (unless allowzero) 0 are codes
    target = ctx.known_ints(1, "target shape", run_time=(0 if allowzero else 1, None))
    shape = _resolve_shape(ctx, t.shape, target, allowzero)
    if t.known is not None and not any(S.is_symbolic(d) for d in shape) and t.known.size <= fold.FOLD_LIMIT:
        return TV(known=t.known.reshape(shape), dtype=t.dtype)
    return ctx.op("reshape", ctx.value(0), shape=shape)


@converter("Flatten", attrs=("axis",))
def _flatten(ctx):
    t = ctx.tv(0)
    axis = ctx.attr("axis", 1)
    axis = axis + t.rank if axis < 0 else axis
    shape = (S.prod(t.shape[:axis]), S.prod(t.shape[axis:]))
    if t.known is not None and t.known.size <= fold.FOLD_LIMIT:
        return TV(known=t.known.reshape(tuple(int(d) for d in shape)), dtype=t.dtype)
    return ctx.op("reshape", ctx.value(0), shape=shape)


@converter("Transpose", attrs=("perm",))
def _transpose(ctx):
    t = ctx.tv(0)
    perm = tuple(ctx.attr("perm", list(range(t.rank))[::-1]))
    k = _known_or_none(ctx, 0)
    if k is not None:
        return TV(known=np.transpose(k, perm), dtype=t.dtype)
    return ctx.op("permute", ctx.value(0), perm=perm)


def _axes_input_or_attr(ctx, idx=1):
    if ctx.has_attr("axes"):
        return list(ctx.attr("axes"))
    if ctx.tv(idx) is None:
        return None
    return [int(a) for a in ctx.known_ints(idx, "axes")]


@converter("Unsqueeze", attrs=("axes",))
def _unsqueeze(ctx):
    t = ctx.tv(0)
    axes = _axes_input_or_attr(ctx)
    r = t.rank + len(axes)
    axes = tuple(sorted(a % r for a in axes))
    k = _known_or_none(ctx, 0)
    if k is not None:
        return TV(known=np.expand_dims(k, axes), dtype=t.dtype)
    return ctx.op("unsqueeze", ctx.value(0), axes=axes)


@converter("Squeeze", attrs=("axes",))
def _squeeze(ctx):
    t = ctx.tv(0)
    axes = _axes_input_or_attr(ctx)
    if axes is not None:
        axes = tuple(sorted(a % t.rank for a in axes)) if t.rank else ()
    k = _known_or_none(ctx, 0)
    if k is not None:
        return TV(known=np.squeeze(k, axis=axes), dtype=t.dtype)
    return ctx.op("squeeze", ctx.value(0), axes=axes)


@converter("Expand")
def _expand(ctx):
    t = ctx.tv(0)
    shape = ctx.known_ints(1, "shape", run_time=(1, None))
    cons = ctx.imp.module.constraints
    rank = max(t.rank, len(shape))
    ins = (1,) * (rank - t.rank) + tuple(t.shape)
    tgt = (1,) * (rank - len(shape)) + tuple(shape)
    out = []
    for a, b in zip(ins, tgt):
        if isinstance(b, int) and b == 1:
            out.append(a)
        elif isinstance(a, int) and a == 1:
            out.append(b)
        elif cons.equal(a, b) is True:
            out.append(a)
        else:
            out.append(b)  # expand records a == b as a run-time checked constraint
    k = _known_or_none(ctx, 0)
    if k is not None and not any(S.is_symbolic(d) for d in out) and int(np.prod(out)) <= fold.FOLD_LIMIT:
        return TV(known=np.broadcast_to(k, tuple(out)).copy(), dtype=t.dtype)
    return ctx.op("expand", ctx.value(0), shape=tuple(out))


@converter("Tile")
def _tile(ctx):
    t = ctx.tv(0)
    reps = ctx.known_ints(1, "repeats", run_time=(0, None))
    k = _known_or_none(ctx, 0)
    if k is not None and not any(S.is_symbolic(r) for r in reps) and k.size * int(np.prod(reps)) <= fold.FOLD_LIMIT:
        return TV(known=np.tile(k, tuple(reps)), dtype=t.dtype)
    return ctx.op("tile", ctx.value(0), repeats=tuple(reps))


@converter("Concat", attrs=("axis",))
def _concat(ctx):
    axis = ctx.attr("axis")
    ts = [t for t in ctx.inputs if t is not None]
    ks = fold.knowns(ctx)
    if ks is not None:
        ks = [k for k in ks if k is not None]
        sym = any(is_symbolic_array(k) for k in ks)
        arr = np.concatenate([as_object(k) if sym else k for k in ks], axis=axis)
        return fold.result(arr, ts[0].dtype)
    vals = [ctx.imp.materialize(t) for t in ts]
    return vals[0] if len(vals) == 1 else ctx.op("concat", *vals, axis=axis)


@converter("Split", attrs=("axis", "num_outputs"))
def _split(ctx):
    t = ctx.tv(0)
    axis = ctx.attr("axis", 0) % t.rank
    d = t.shape[axis]
    n_out = len(ctx.node.output)
    if ctx.tv(1) is not None:
        sizes = ctx.known_ints(1, "split sizes", run_time=(0, None))
    else:
        n = ctx.attr("num_outputs", n_out)
        chunk = S.floordiv(S.add(d, n - 1), n)
        sizes = [chunk] * (n - 1) + [S.add(d, S.mul(-(n - 1), chunk))]
    if len(sizes) != n_out:
        raise ctx.unsupported(f"{len(sizes)} split sizes for {n_out} outputs")
    k = _known_or_none(ctx, 0)
    if k is not None and not any(S.is_symbolic(s) for s in sizes):
        idx = np.cumsum(sizes)[:-1]
        return [TV(known=p, dtype=t.dtype) for p in np.split(k, idx, axis=axis)]
    outs = ctx.op("split", ctx.value(0), axis=axis, sizes=tuple(sizes))
    return list(outs) if isinstance(outs, tuple) else [outs]


@converter("Slice")
def _slice(ctx):
    t = ctx.tv(0)
    # fed at run time, the bounds must be >= 0: a negative one counts from the end, which picks another form
    starts = ctx.known_ints(1, "starts", run_time=(0, None))
    ends = ctx.known_ints(2, "ends", run_time=(0, None))
    axes = ctx.known_ints(3, "axes") if ctx.tv(3) is not None else list(range(len(starts)))
    steps = ctx.known_ints(4, "steps") if ctx.tv(4) is not None else [1] * len(starts)
    if any(S.is_symbolic(s) for s in steps):
        raise ctx.unsupported("symbolic steps")
    k = _known_or_none(ctx, 0)
    concrete = not any(S.is_symbolic(v) for v in starts + ends)
    if k is not None and concrete:
        ix = [slice(None)] * t.rank
        for s, e, a, st in zip(starts, ends, axes, steps):
            ix[int(a) % t.rank] = slice(_clip_big(s), _clip_big(e), int(st))
        return TV(known=k[tuple(ix)], dtype=t.dtype)
    v = ctx.value(0)
    for s, e, a, st in zip(starts, ends, axes, steps):
        v = ctx.op("slice", v, axis=int(a) % t.rank, start=_clip_big(s), end=_clip_big(e), step=int(st))
    return v


def _clip_big(v):
    if isinstance(v, int):
        return max(min(v, 2 ** 62), -(2 ** 62))
    return v


# ---------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------


@converter("Gather", attrs=("axis",))
def _gather(ctx):
    t = ctx.tv(0)
    axis = ctx.attr("axis", 0) % max(t.rank, 1)
    k = _known_or_none(ctx, 0)
    idx = _known_or_none(ctx, 1)
    if k is not None and idx is not None and not is_symbolic_array(idx):
        r = np.take(k, np.asarray(idx).astype(np.int64), axis=axis)
        if not isinstance(r, np.ndarray):  # a scalar element (maybe a symbol)
            r0 = np.empty((), dtype=object)
            r0[()] = r
            r = r0
        return fold.result(r, t.dtype)
    return ctx.op("gather", ctx.value(0), ctx.value(1), axis=axis)


@converter("GatherElements", attrs=("axis",))
def _gather_elements(ctx):
    return ctx.op("gather_elements", ctx.value(0), ctx.value(1), axis=ctx.attr("axis", 0))


@converter("Trilu", attrs=("upper",))
def _trilu(ctx):
    k = ctx.known_ints(1, "k", run_time=(-(2 ** 62), 2 ** 62))[0] if ctx.tv(1) is not None else 0
    op = "triu" if ctx.attr("upper", 1) else "tril"
    return ctx.op(op, ctx.value(0), k=k)


@converter("Pad", attrs=("mode",))
def _pad(ctx):
    t = ctx.tv(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.unsupported(f"mode={mode!r}", hint="braze pads in constant, reflect, edge and wrap modes")
    # fed at run time: no cropping; wrap needs them at import (slices of the input)
    pads = ctx.known_ints(1, "pads", run_time=None if mode == "wrap" else (0, None))
    value = ctx.const_scalar(2, "constant_value") if ctx.tv(2) is not None else 0.0
    if ctx.tv(3) is not None:
        axes = [int(a) % t.rank for a in ctx.known_ints(3, "axes")]
        full = [0] * (2 * t.rank)
        n = len(axes)
        for j, a in enumerate(axes):
            full[a], full[t.rank + a] = pads[j], pads[n + j]
        pads = full
    if mode == "wrap":
        return _wrap_pad(ctx, ctx.value(0), pads)
    return ctx.op("pad", ctx.value(0), pads=tuple(pads), mode=mode, value=float(value if value is not None else 0))


def _wrap_pad(ctx, x, pads):
    """Each axis's last ``b`` elements before it and first ``e`` after it (a pad up to the axis's size)."""
    r = x.rank
    for a in range(r):
        b, e = pads[a], pads[r + a]
        n = x.shape[a]
        if any(S.is_symbolic(v) for v in (b, e)) or b < 0 or e < 0 or \
                any(ctx.imp.module.constraints.equal(S.smax(v, n), n) is not True for v in (b, e)):
            raise ctx.unsupported(f"wrap pads ({b}, {e}) on an axis of {n}",
                                  hint="braze wraps constant pads of at most the axis's size")
        parts = ([ctx.op("slice", x, axis=a, start=S.add(n, -b), end=n)] if b else []) + [x] + \
            ([ctx.op("slice", x, axis=a, start=0, end=e)] if e else [])
        x = parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=a)
    return x


@converter("DepthToSpace", attrs=("blocksize", "mode"))
def _depth_to_space(ctx):
    x = ctx.value(0)
    bs = ctx.attr("blocksize")
    n, c, h, w = x.shape
    cc = S.floordiv(c, bs * bs)
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.op("reshape", x, shape=(n, bs, bs, cc, h, w))
        y = ctx.op("permute", y, perm=(0, 3, 4, 1, 5, 2))
    else:
        y = ctx.op("reshape", x, shape=(n, cc, bs, bs, h, w))
        y = ctx.op("permute", y, perm=(0, 1, 4, 2, 5, 3))
    return ctx.op("reshape", y, shape=(n, cc, S.mul(h, bs), S.mul(w, bs)))


@converter("SpaceToDepth", attrs=("blocksize", "mode"))
def _space_to_depth(ctx):
    x = ctx.value(0)
    bs = ctx.attr("blocksize")
    n, c, h, w = x.shape
    hh, ww = S.floordiv(h, bs), S.floordiv(w, bs)
    y = ctx.op("reshape", x, shape=(n, c, hh, bs, ww, bs))
    crd = ctx.attr("mode", "DCR") == "CRD"
    y = ctx.op("permute", y, perm=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
    return ctx.op("reshape", y, shape=(n, S.mul(c, bs * bs), hh, ww))


# ---------------------------------------------------------------------------
# Einsum (one or two operands; an ellipsis; a repeated index within an operand takes its diagonal)
# ---------------------------------------------------------------------------


def _spell_ellipsis(ctx, eq: str, terms: list, out: str | None, vals) -> tuple[list, str | None]:
    """The terms and output with each ``...`` replaced by capital letters, one per dim it covers
    (aligned from the right; the operands' must agree)."""
    ranks = [v.rank - (len(tm) - 3) for tm, v in zip(terms, vals) if "..." in tm]
    k = max(ranks, default=0)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:k]
    if k > 26 or any(c.isupper() for c in eq):
        raise ctx.unsupported(f"Einsum equation {eq!r} with an ellipsis and capital letters",
                              hint="spell out the indices")
    covered = [v.shape[tm.index("..."):][:k] for tm, v in zip(terms, vals) if "..." in tm]
    if any(r != k for r in ranks) or any(ctx.imp.module.constraints.equal(a, b) is not True
                                         for c in covered[1:] for a, b in zip(covered[0], c)):
        raise ctx.unsupported(f"Einsum equation {eq!r}: the ellipses cover dims {[list(c) for c in covered]}, "
                              "which would broadcast", hint="give every operand the same dims under the ellipsis")
    terms = [tm.replace("...", letters) for tm in terms]
    return terms, None if out is None else out.replace("...", letters)


def _diagonal(ctx, tm: str, v):
    """``v`` with each index that ``tm`` repeats reduced to its diagonal (moved last), and its term."""
    while len(set(tm)) != len(tm):
        c = next(c for c in tm if tm.count(c) > 1)
        p, q = tm.index(c), tm.index(c, tm.index(c) + 1)
        n = v.shape[p]
        if ctx.imp.module.constraints.equal(n, v.shape[q]) is not True:
            raise ctx.unsupported(f"a diagonal over dims {n} and {v.shape[q]} that may differ")
        rest = [i for i in range(v.rank) if i not in (p, q)]
        v = ctx.op("permute", v, perm=tuple(rest) + (p, q))
        lead = tuple(v.shape[:-2])
        v = ctx.op("reshape", v, shape=lead + (S.mul(n, n),))
        idx = ctx.op("mul", ctx.iota(n), ctx.int_value(S.add(n, 1)))
        v = ctx.op("gather", v, idx, axis=len(lead))
        tm = "".join(tm[i] for i in rest) + c
    return tm, v


def einsum(ctx, eq: str):
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) > 2:
        raise ctx.unsupported(f"Einsum equation {eq!r}", hint="braze supports one or two operands")
    vals = [ctx.value(i) for i in range(len(terms))]
    if "..." in eq:
        terms, out = _spell_ellipsis(ctx, eq, terms, out if arrow else None, vals)
        lhs = ",".join(terms)
        if not arrow:  # implicit output: the ellipsis's dims, then the indices that appear once, sorted
            out = "".join(sorted({c for c in lhs if c.isupper()})) + \
                "".join(sorted(c for c in set(lhs) if c.islower() and lhs.count(c) == 1))
    elif not arrow:  # implicit output: the indices that appear once, sorted
        out = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    for i, tm in enumerate(terms):
        terms[i], vals[i] = _diagonal(ctx, tm, vals[i])
    dims = {}
    for tm, v in zip(terms, vals):
        for c, d in zip(tm, v.shape):
            dims.setdefault(c, d)

    def reduce_unused(tm, v, keep):
        drop = tuple(i for i, c in enumerate(tm) if c not in keep)
        if drop:
            v = ctx.op("reduce_sum", v, axes=drop, keepdims=False)
            tm = "".join(c for c in tm if c in keep)
        return tm, v

    if len(terms) == 1:
        tm, v = reduce_unused(terms[0], vals[0], set(out))
        return ctx.op("permute", v, perm=tuple(tm.index(c) for c in out)) if tm != out else v
    (ta, tb), (a, b) = terms, vals
    ta, a = reduce_unused(ta, a, set(tb) | set(out))
    tb, b = reduce_unused(tb, b, set(ta) | set(out))
    batch = [c for c in ta if c in tb and c in out]
    contr = [c for c in ta if c in tb and c not in out]
    fa = [c for c in ta if c not in tb]
    fb = [c for c in tb if c not in ta]
    pa = batch + fa + contr
    pb = batch + contr + fb
    a = ctx.op("permute", a, perm=tuple(ta.index(c) for c in pa)) if "".join(pa) != ta else a
    b = ctx.op("permute", b, perm=tuple(tb.index(c) for c in pb)) if "".join(pb) != tb else b
    bd, m, kk, n = [dims[c] for c in batch], S.prod(dims[c] for c in fa), S.prod(dims[c] for c in contr), \
        S.prod(dims[c] for c in fb)
    a = ctx.op("reshape", a, shape=tuple(bd) + (m, kk))
    b = ctx.op("reshape", b, shape=tuple(bd) + (kk, n))
    y = ctx.op("matmul", a, b)
    order = batch + fa + fb
    y = ctx.op("reshape", y, shape=tuple(dims[c] for c in order))
    if "".join(order) != out:
        y = ctx.op("permute", y, perm=tuple(order.index(c) for c in out))
    return y


@converter("GatherND", attrs=("batch_dims",))
def _gather_nd(ctx):
    """data[b..., idx[..., 0], ..., idx[..., k-1]] as one gather on data flattened over its first
    batch_dims + k dims (the batch coordinates of each index tuple are its own position's)."""
    x, idx = ctx.value(0), ctx.value(1)
    nb = int(ctx.attr("batch_dims", 0))
    k = idx.shape[-1]
    if S.is_symbolic(k):
        raise ctx.unsupported("an index tuple of symbolic length")
    lead, rest = x.shape[nb:nb + k], x.shape[nb + k:]
    flat = ctx.op("reshape", x, shape=(S.prod(tuple(x.shape[:nb + k])),) + tuple(rest))
    lin = None
    for j in range(k):
        c = ctx.op("squeeze", ctx.op("slice", idx, axis=idx.rank - 1, start=j, end=j + 1), axes=(idx.rank - 1,))
        # c itself, a negative one counted from the end and one out of range an error (gather's check)
        c = ctx.op("gather", ctx.iota(lead[j]), c, axis=0)
        stride = S.prod(lead[j + 1:])
        if not (isinstance(stride, int) and stride == 1):
            c = ctx.op("mul", c, ctx.int_value(stride))
        lin = c if lin is None else ctx.op("add", lin, c)
    q = idx.rank - 1
    for d in range(nb):  # each index tuple's own batch position, times the batch dim's stride
        stride = S.prod(tuple(x.shape[d + 1:nb + k]))
        lin = ctx.op("add", lin, ctx.op("mul", ctx.iota(idx.shape[d], d, q), ctx.int_value(stride)))
    return ctx.op("gather", flat, lin, axis=0)
