"""ATen converters: views, reshapes, concat/split, slicing, padding, indexing, creation."""

from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Value
from ...ir.types import DType
from .aten_scatter import put_rows
from .convert import axis, cast, checked_index, conv, meta, need_static, op, out_dtype, out_shape, scalar, tensor
from .common import ISSUES_HINT

BIG = 2 ** 62  # an open slice end


# ---------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------


@conv("view", "reshape", "_unsafe_view", "view_copy", "flatten", "unflatten", "view_as", "reshape_as",
      "_reshape_alias", "_reshape_copy")
def _reshape(cx, n, x, *args, **kw):
    shape = out_shape(cx, n)
    dt = out_dtype(cx, n)
    if dt != x.dtype:  # view(dtype): the same bits read as another dtype
        if {dt, x.dtype} & {DType.float16, DType.bfloat16}:
            raise UnsupportedOpError(f"'{n.target}' from {x.dtype.name} to {dt.name} (braze bit-casts no 16-bit "
                                     "float yet)", where=str(cx.loc), hint=ISSUES_HINT)
        if dt.itemsize != x.dtype.itemsize or tuple(shape) != tuple(x.shape):
            raise UnsupportedOpError(f"'{n.target}' from {x.dtype.name} to {dt.name}, which changes the shape "
                                     "(the dtypes' widths differ)", where=str(cx.loc), hint=ISSUES_HINT)
        return op(cx, "bitcast", [x], dtype=dt)
    if tuple(shape) == tuple(x.shape):
        return x
    return op(cx, "reshape", [x], shape=shape)


@conv("permute", "permute_copy")
def _permute(cx, n, x, dims):
    perm = tuple(axis(cx, d, x.rank) for d in dims)
    if perm == tuple(range(x.rank)):
        return x
    return op(cx, "permute", [x], perm=perm)


@conv("transpose", "swapaxes", "transpose_copy")
def _transpose(cx, n, x, d0, d1):
    d0, d1 = axis(cx, d0, x.rank), axis(cx, d1, x.rank)
    if d0 == d1:
        return x
    perm = list(range(x.rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return op(cx, "permute", [x], perm=tuple(perm))


@conv("mT", "mH", "adjoint", "matrix_H")
def _mt(cx, n, x):
    return _transpose(cx, n, x, -2, -1)


@conv("numpy_T")
def _numpy_t(cx, n, x):
    return x if x.rank < 2 else op(cx, "permute", [x], perm=tuple(range(x.rank))[::-1])


@conv("movedim")
def _movedim(cx, n, x, src, dst):
    src = [src] if isinstance(src, int) else list(src)
    dst = [dst] if isinstance(dst, int) else list(dst)
    src = [axis(cx, d, x.rank) for d in src]
    dst = [axis(cx, d, x.rank) for d in dst]
    rest = [i for i in range(x.rank) if i not in src]
    perm = [None] * x.rank
    for s, d in zip(src, dst):
        perm[d] = s
    it = iter(rest)
    perm = [p if p is not None else next(it) for p in perm]
    return op(cx, "permute", [x], perm=tuple(perm))


@conv("expand", "expand_as", "broadcast_to", "expand_copy")
def _expand(cx, n, x, *args, **kw):
    shape = out_shape(cx, n)
    if tuple(shape) == tuple(x.shape):
        return x
    return op(cx, "expand", [x], shape=shape)


@conv("cat", "concat", "concatenate")
def _cat(cx, n, xs, dim=0):
    dt = out_dtype(cx, n)
    rank = meta(n).dim()
    xs = [cast(cx, x, dt) for x in xs if not (x.rank == 1 and x.shape[0] == 0 and rank != 1)]
    if len(xs) == 1:
        return xs[0]
    return op(cx, "concat", xs, axis=axis(cx, dim, rank))


@conv("stack")
def _stack(cx, n, xs, dim=0):
    rank = xs[0].rank + 1
    d = axis(cx, dim, rank)
    dt = out_dtype(cx, n)
    parts = [op(cx, "unsqueeze", [cast(cx, x, dt)], axes=(d,)) for x in xs]
    return parts[0] if len(parts) == 1 else op(cx, "concat", parts, axis=d)


def _split_by_meta(cx, n, x, dim):
    d = axis(cx, dim, x.rank)
    sizes = tuple(cx.sym(t.shape[d]) for t in n.meta["val"])
    if len(sizes) == 1:
        return (x,)
    return tuple(op(cx, "split", [x], axis=d, sizes=sizes))


@conv("split", "split_with_sizes", "split_copy", "split_with_sizes_copy")
def _split(cx, n, x, size, dim=0):
    return _split_by_meta(cx, n, x, dim)


@conv("chunk")
def _chunk(cx, n, x, chunks, dim=0):
    return _split_by_meta(cx, n, x, dim)


@conv("tensor_split")
def _tensor_split(cx, n, x, spec, dim=0):
    return _split_by_meta(cx, n, x, dim)


@conv("unbind", "unbind_copy")
def _unbind(cx, n, x, dim=0):
    d = axis(cx, dim, x.rank)
    k = len(n.meta["val"])
    parts = (x,) if k == 1 else tuple(op(cx, "split", [x], axis=d, sizes=(1,) * k))
    return tuple(op(cx, "squeeze", [p], axes=(d,)) for p in parts)


def _clip_end(e):
    if e is None:
        return BIG
    if isinstance(e, int) and e > BIG:
        return BIG
    if isinstance(e, int) and e < -BIG:
        return -BIG
    return e


@conv("flip")
def _flip(cx, n, x, dims):
    for d in sorted({axis(cx, d, x.rank) for d in (dims if isinstance(dims, (list, tuple)) else [dims])}):
        x = op(cx, "slice", [x], axis=d, start=-1, end=-BIG, step=-1)
    return x


@conv("slice", "slice_copy")
def _slice(cx, n, x, dim=0, start=None, end=None, step=1):
    d = axis(cx, dim, x.rank)
    start = 0 if start is None else start
    end = _clip_end(end)
    if isinstance(start, int) and start == 0 and step == 1 and (
            (isinstance(end, int) and end >= BIG) or (cx.module.constraints.equal(end, x.shape[d]) is True)):
        return x
    return op(cx, "slice", [x], axis=d, start=start, end=end, step=int(need_static(cx, step, "slice step")))


def _scatter_bound(cx, v, what: str) -> int:
    """A slice_scatter/select_scatter bound braze can place: a static int from 0 on."""
    if not isinstance(v, int) or v < 0:
        raise UnsupportedOpError(f"{what} {v} (negative or symbolic) is not supported natively", where=str(cx.loc),
                                 hint="index from the start with a constant")
    return v


def _scattered(cx, x, middle, d, start: int, end: int):
    """``x`` with ``x[start:end]`` along ``d`` replaced by ``middle``: its head, middle and tail
    joined (a head or tail past the dim's end is empty, as the slice it replaces)."""
    parts = [op(cx, "slice", [x], axis=d, start=0, end=start, step=1)] if start > 0 else []
    parts.append(cast(cx, middle, x.dtype))
    if end < BIG:
        parts.append(op(cx, "slice", [x], axis=d, start=end, end=BIG, step=1))
    return parts[0] if len(parts) == 1 else op(cx, "concat", parts, axis=d)


def _placed(cx, x, src, d: int, start):
    """``x`` with ``src`` written from ``start`` (a size expression, at least 0) along ``d``: at
    each position of ``x``, ``src``'s element ``i - start`` where that lies in ``src``, else ``x``'s.
    The positions that keep ``x`` read ``src`` too (a gather checks every index it reads): their
    index is clamped into ``src`` padded by one element, which an empty ``src`` has as well."""
    i64 = DType.int64
    n = src.shape[d]
    ends = tuple(1 if k == src.rank + d else 0 for k in range(2 * src.rank))
    src = op(cx, "pad", [cast(cx, src, x.dtype)], pads=ends)
    pos = op(cx, "arange", [], start=0, end=x.shape[d], step=1, dtype=i64)
    at = op(cx, "sub", [pos, scalar(cx, start, i64)])
    inside = op(cx, "logical_and", [op(cx, "greater_equal", [at, scalar(cx, 0, i64)]),
                                    op(cx, "less", [at, scalar(cx, n, i64)])])
    at = op(cx, "minimum", [op(cx, "maximum", [at, scalar(cx, 0, i64)]), scalar(cx, n, i64)])
    moved = op(cx, "gather", [src, at], axis=d)
    inside = op(cx, "reshape", [inside], shape=tuple(x.shape[d] if k == d else 1 for k in range(x.rank)))
    return op(cx, "where", [inside, moved, x])


def _written(cx, x, src, d: int, start):
    """``x`` with ``src`` written from ``start`` along ``d``, as rows put into ``x`` (``index_put``
    at ``start``, ``start + 1``, ...): for an ``x`` whose memory the caller donated
    (``Importer.donated``), where they are written in place. A row past ``x``'s end fails the
    call (eager raises there: the slice it assigns to is shorter than ``src``)."""
    rows = op(cx, "arange", [], start=start, end=S.add(start, src.shape[d]), step=1, dtype=DType.int64)
    return put_rows(cx, x, rows, cast(cx, src, x.dtype), d, reduce="none")


@conv("slice_scatter")
def _slice_scatter(cx, n, x, src, dim=0, start=None, end=None, step=1):
    """functionalized ``x[..., start:end] = src``: what AOTAutograd makes of a slice assignment.
    A start from a size (a decoder's ``cache[:, pos:pos + n] = k``) places ``src`` by position;
    into a buffer the caller donated, its rows are written there."""
    d = axis(cx, dim, x.rank)
    lo = 0 if start is None else start
    store = cx.module.constraints
    if step == 1 and src.rank == x.rank and store.bounds(lo)[0] >= 0 and cx.donated(x):
        return _written(cx, x, src, d, lo)
    if step == 1 and (S.is_symbolic(lo) or S.is_symbolic(end)) and src.rank == x.rank and store.bounds(lo)[0] >= 0:
        return _placed(cx, x, src, d, lo)
    start = _scatter_bound(cx, 0 if start is None else start, "slice_scatter start")
    end = _scatter_bound(cx, _clip_end(end), "slice_scatter end")
    if step != 1 or end < start:
        raise UnsupportedOpError(f"slice_scatter with step {step} from {start} to {end} is not supported natively",
                                 where=str(cx.loc))
    return _scattered(cx, x, src, axis(cx, dim, x.rank), start, end)


@conv("select_scatter")
def _select_scatter(cx, n, x, src, dim, index):
    """functionalized ``x[..., index] = src``."""
    index = _scatter_bound(cx, index, "select_scatter index")
    d = axis(cx, dim, x.rank)
    if cx.donated(x):
        return _written(cx, x, op(cx, "unsqueeze", [src], axes=(d,)), d, index)
    return _scattered(cx, x, op(cx, "unsqueeze", [src], axes=(d,)), d, index, index + 1)


@conv("scatter")
def _scatter(cx, n, x, dim, index, src, reduce=None):
    """``x.scatter(dim, index, src)`` with one index per row along ``dim`` (``index.shape[dim]``
    is 1, its other dims ``x``'s): ``x`` where the position along ``dim`` is not the row's index,
    else ``src`` (a number, or a tensor of ``index``'s shape). What ``nll_loss``'s backward and a
    one-hot make; other forms stay in torch."""
    if x.rank == 0 and index.rank == 0:  # a 0-d tensor is a row of one element
        def row(v):
            return op(cx, "reshape", [v], shape=(1,)) if isinstance(v, Value) else v
        return op(cx, "reshape", [_scatter(cx, n, row(x), 0, row(index), row(src), reduce)], shape=())
    d = axis(cx, dim, x.rank)
    same = all(i == d or cx.module.constraints.equal(index.shape[i], x.shape[i]) is True for i in range(x.rank))
    if reduce is not None or index.rank != x.rank or index.shape[d] != 1 or not same or (
            isinstance(src, Value) and tuple(src.shape) != tuple(index.shape)):
        raise UnsupportedOpError("scatter is supported natively with one index per row along its dim, the index "
                                 "of the input's other sizes, and no reduce", where=str(cx.loc), hint=ISSUES_HINT)
    iota = op(cx, "arange", [], start=0, end=x.shape[d], step=1, dtype=DType.int64)
    if x.rank > 1:
        iota = op(cx, "unsqueeze", [iota], axes=tuple(i for i in range(x.rank) if i != d))
    hit = op(cx, "equal", [checked_index(cx, index, x.shape[d], wrap=False), iota])
    value = cast(cx, src, x.dtype) if isinstance(src, Value) else scalar(cx, src, x.dtype)
    return op(cx, "where", [hit, value, x])


@conv("copy")
def _copy(cx, n, x, src, non_blocking=False):
    """functional ``x.copy_(src)``: src in x's dtype, broadcast to x's shape."""
    y = cast(cx, src, x.dtype)
    return y if tuple(y.shape) == tuple(x.shape) else op(cx, "expand", [y], shape=tuple(x.shape))


@conv("diff")
def _diff(cx, node, x, *args, **kw):
    """``x[1:] - x[:-1]`` along ``dim``, ``n`` times, after ``prepend``/``append`` (bool: xor).
    Converted here, not decomposed: torch's decomposition re-traces the whole program."""
    spec = dict(zip(("n", "dim", "prepend", "append"), args), **kw)
    d = axis(cx, spec.get("dim", -1), x.rank)
    n = int(need_static(cx, spec.get("n", 1), "diff order n"))
    if n == 0:  # torch returns the input itself, without prepend and append
        return x
    parts = [p for p in (spec.get("prepend"), x, spec.get("append")) if p is not None]
    y = op(cx, "concat", parts, axis=d) if len(parts) > 1 else x
    for _ in range(n):
        hi = op(cx, "slice", [y], axis=d, start=1, end=BIG, step=1)
        lo = op(cx, "slice", [y], axis=d, start=0, end=-1, step=1)
        y = op(cx, "logical_xor" if y.dtype == DType.bool else "sub", [hi, lo])
    return y


@conv("select", "select_copy")
def _select(cx, n, x, dim, index):
    d = axis(cx, dim, x.rank)
    end = BIG if (isinstance(index, int) and index == -1) else index + 1
    y = op(cx, "slice", [x], axis=d, start=index, end=end, step=1)
    return op(cx, "squeeze", [y], axes=(d,))


@conv("narrow", "narrow_copy")
def _narrow(cx, n, x, dim, start, length):
    d = axis(cx, dim, x.rank)
    return op(cx, "slice", [x], axis=d, start=start, end=S.add(start, length), step=1)


@conv("unsqueeze", "unsqueeze_copy")
def _unsqueeze(cx, n, x, dim):
    return op(cx, "unsqueeze", [x], axes=(axis(cx, dim, x.rank + 1),))


@conv("squeeze", "squeeze_copy")
def _squeeze(cx, n, x, dim=None):
    if dim is None:
        dims = range(x.rank)
    else:
        dims = [dim] if isinstance(dim, int) else dim
    ax = tuple(sorted({axis(cx, d, x.rank) for d in dims}))
    # a 0-d tensor squeezes to itself (dim 0 or -1 names the tensor, as in torch)
    ax = tuple(a for a in ax if a < x.rank and isinstance(x.shape[a], int) and x.shape[a] == 1)
    if not ax:
        return x
    return op(cx, "squeeze", [x], axes=ax)


@conv("repeat", "tile")
def _repeat(cx, n, x, repeats):
    repeats = list(repeats)
    if len(repeats) < x.rank:  # tile pads the repeats on the left
        repeats = [1] * (x.rank - len(repeats)) + repeats
    if len(repeats) > x.rank:
        x = op(cx, "reshape", [x], shape=(1,) * (len(repeats) - x.rank) + tuple(x.shape))
    if all(isinstance(r, int) and r == 1 for r in repeats):
        return x
    return op(cx, "tile", [x], repeats=tuple(repeats))


def _pads(cx, x, pad):
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise UnsupportedOpError(f"pad list {pad} does not fit a rank-{x.rank} tensor", where=str(cx.loc))
    begins, ends = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):
        ax = x.rank - 1 - i
        begins[ax], ends[ax] = pad[2 * i], pad[2 * i + 1]
    return tuple(begins + ends)


def _negative(p) -> bool:
    return isinstance(p, int) and p < 0


def _pad_op(cx, x, pads, mode, value=0.0):
    """``pad``; in edge and reflect modes an axis with a negative pad is a gather of x[j(i - begin)]
    with j a clamp (edge) or a reflection (torch's definitions, which also hold when the crop
    leaves less than the pad reads)."""
    r = x.rank
    if mode in ("edge", "reflect") and any(_negative(p) for p in pads):
        done = [ax for ax in range(r) if _negative(pads[ax]) or _negative(pads[r + ax])]
        i64 = DType.int64
        for ax in done:
            b, e = pads[ax], pads[r + ax]
            last = scalar(cx, S.add(x.shape[ax], -1), i64)
            idx = op(cx, "arange", [], start=S.mul(-1, b), end=S.add(x.shape[ax], e), step=1, dtype=i64)
            if mode == "edge":
                idx = op(cx, "minimum", [op(cx, "maximum", [idx, scalar(cx, 0, i64)]), last])
            else:  # (n - 1) - |(n - 1) - |j||
                idx = op(cx, "sub", [last, op(cx, "abs", [op(cx, "sub", [last, op(cx, "abs", [idx])])])])
            x = op(cx, "gather", [x, idx], axis=ax)
        pads = tuple(0 if i % r in done else p for i, p in enumerate(pads))
        if all(isinstance(p, int) and p == 0 for p in pads):
            return x
    return op(cx, "pad", [x], pads=pads, mode=mode, value=float(value))


@conv("constant_pad_nd")
def _constant_pad(cx, n, x, pad, value=0):
    return _pad_op(cx, x, _pads(cx, x, pad), "constant", value)


@conv("pad")
def _pad(cx, n, x, pad, mode="constant", value=None):
    m = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}.get(mode)
    if m is None:
        raise UnsupportedOpError(f"pad mode '{mode}' is not supported", where=str(cx.loc),
                                 hint="supported: constant, reflect, replicate")
    return _pad_op(cx, x, _pads(cx, x, pad), m, value or 0.0)


@conv("reflection_pad1d", "reflection_pad2d", "reflection_pad3d")
def _reflect_pad(cx, n, x, pad):
    return _pad_op(cx, x, _pads(cx, x, pad), "reflect")


@conv("replication_pad1d", "replication_pad2d", "replication_pad3d")
def _replicate_pad(cx, n, x, pad):
    return _pad_op(cx, x, _pads(cx, x, pad), "edge")


# ---------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------


@conv("index_select")
def _index_select(cx, n, x, dim, index):
    if x.rank == 0:  # torch: a 0-d tensor indexed by its only position is itself, 0-d
        return x
    return op(cx, "gather", [x, index], axis=axis(cx, dim, x.rank), wrap=False)


@conv("roll")
def _roll(cx, n, x, shifts, dims=()):
    """out[i] = x[(i - shift) mod n] along each dim: a gather (torch's own decomposition costs
    a run_decompositions pass and goes through fmod)."""
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if not dims:  # roll the flattened tensor
        flat = op(cx, "reshape", [x], shape=(x.type.numel(),))
        return op(cx, "reshape", [_roll(cx, n, flat, shifts, [0])], shape=tuple(x.shape))
    if len(shifts) != len(dims):
        raise UnsupportedOpError(f"roll: {len(shifts)} shifts for {len(dims)} dims", where=str(cx.loc))
    for sh, d in zip(shifts, dims):
        a = axis(cx, d, x.rank)
        size = x.shape[a]
        i = op(cx, "arange", [], start=0, end=size, step=1, dtype=DType.int64)
        src = op(cx, "sub", [i, scalar(cx, sh, DType.int64)])
        src = op(cx, "remainder", [src, scalar(cx, size, DType.int64)])
        x = op(cx, "gather", [x, src], axis=a)
    return x


@conv("gather")
def _gather(cx, n, x, dim, index, sparse_grad=False):
    shape = out_shape(cx, n)
    if any(isinstance(d, int) and d == 0 for d in shape):  # an empty index (torch lets its rank differ)
        return op(cx, "full", [], shape=shape, value=0.0, dtype=out_dtype(cx, n))
    if x.rank == 0:  # every valid index of a 0-d tensor is 0: the tensor, in the index's shape
        return op(cx, "expand", [x], shape=shape) if shape else x
    return op(cx, "gather_elements", [x, index], axis=axis(cx, dim, x.rank), wrap=False)


@conv("index", "_unsafe_index")
def _index(cx, n, x, indices):
    pos = [i for i, t in enumerate(indices) if t is not None]
    if not pos:
        return x
    if pos != list(range(pos[0], pos[0] + len(pos))):
        raise UnsupportedOpError("advanced indexing with non-adjacent index tensors is not supported",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    idx = [indices[i] for i in pos]
    for t in idx:
        if t.dtype is DType.bool:
            raise UnsupportedOpError("indexing with a boolean mask gives a data-dependent shape",
                                     where=str(cx.loc), hint="use torch.where(mask, x, other) instead")
    p = pos[0]
    if len(idx) == 1:
        return op(cx, "gather", [x, idx[0]], axis=p)
    # several index tensors over adjacent dims: one linear index into the flattened dims
    lin = None
    for j, t in zip(pos, idx):
        d = x.shape[j]
        t = checked_index(cx, t, d, wrap=True)
        lin = t if lin is None else op(cx, "add", [op(cx, "mul", [lin, scalar(cx, d, DType.int64)]), t])
    shp = tuple(x.shape)
    flat = S.prod(shp[p:p + len(idx)])
    xf = op(cx, "reshape", [x], shape=shp[:p] + (flat,) + shp[p + len(idx):])
    return op(cx, "gather", [xf, lin], axis=p)


@conv("_unsafe_masked_index")
def _masked_index(cx, n, x, mask, indices, fill):
    """where(mask, x[indices], fill); masked-off indices may be out of range, so they are
    wrapped (negative) and clamped before the gather."""
    i64 = DType.int64
    safe = []
    for j, t in enumerate(indices):
        if t is None:
            safe.append(None)
            continue
        t, d = cast(cx, t, i64), scalar(cx, x.shape[j], i64)
        t = op(cx, "where", [op(cx, "less", [t, scalar(cx, 0, i64)]), op(cx, "add", [t, d]), t])
        t = op(cx, "maximum", [op(cx, "minimum", [t, scalar(cx, S.add(x.shape[j], -1), i64)]), scalar(cx, 0, i64)])
        safe.append(t)
    v = _index(cx, n, x, safe)
    return op(cx, "where", [cast(cx, mask, DType.bool), v, tensor(cx, fill, v.dtype)])


@conv("triu")
def _triu(cx, n, x, diagonal=0):
    return op(cx, "triu", [x], k=diagonal)


@conv("tril")
def _tril(cx, n, x, diagonal=0):
    return op(cx, "tril", [x], k=diagonal)


# ---------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------


@conv("arange")
def _arange(cx, n, *args, dtype=None, **kw):
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        (start, end), step = args, 1
    else:
        start, end, step = args[:3]
    dt = out_dtype(cx, n)
    if not dt.is_float:  # torch truncates float bounds and step to the int dtype first
        start, end, step = (int(v) if isinstance(v, float) else v for v in (start, end, step))
    return op(cx, "arange", [], start=start, end=end, step=step, dtype=dt)


@conv("linspace")
def _linspace(cx, n, start, end, steps, dtype=None, **kw):
    """Eager's formula, not torch's decomposition (which computes int dtypes in float32 and so
    differs from eager): start and end cast to the dtype first, ``step = (end - start) / (steps
    - 1)`` in double for int dtypes (in the dtype for floats), the first half counted up from
    start, the second down from end."""
    dt = out_dtype(cx, n)
    steps = int(need_static(cx, steps, "linspace steps"))
    if steps <= 1:
        return op(cx, "expand", [cast(cx, tensor(cx, start, dt), dt)], shape=(steps,))
    acc = dt if dt.is_float else DType.float64
    lo, hi = (cast(cx, cast(cx, tensor(cx, v, dt), dt), acc) for v in (start, end))
    step = op(cx, "div", [op(cx, "sub", [hi, lo]), scalar(cx, steps - 1, acc)])
    i = op(cx, "arange", [], start=0, end=steps, step=1, dtype=DType.int64)
    up = op(cx, "add", [lo, op(cx, "mul", [step, cast(cx, i, acc)])])
    back = op(cx, "sub", [scalar(cx, steps - 1, DType.int64), i])
    down = op(cx, "sub", [hi, op(cx, "mul", [step, cast(cx, back, acc)])])
    first_half = op(cx, "less", [i, scalar(cx, steps // 2, DType.int64)])
    return cast(cx, op(cx, "where", [first_half, up, down]), dt)


def _full_impl(cx, n, value):
    dt = out_dtype(cx, n)
    shape = out_shape(cx, n)
    if isinstance(value, Value) or S.is_symbolic(value):
        return op(cx, "expand", [tensor(cx, value, dt)], shape=shape)
    return op(cx, "full", [], shape=shape, value=float(value), dtype=dt)


@conv("full")
def _full(cx, n, size, fill_value, dtype=None, **kw):
    return _full_impl(cx, n, fill_value)


@conv("zeros", "empty", "new_zeros", "new_empty", "empty_strided", "new_empty_strided")
def _zeros(cx, n, *args, **kw):
    return _full_impl(cx, n, 0.0)


@conv("ones", "new_ones")
def _ones(cx, n, *args, **kw):
    return _full_impl(cx, n, 1.0)


@conv("new_full")
def _new_full(cx, n, x, size, fill_value, **kw):
    return _full_impl(cx, n, fill_value)


@conv("full_like")
def _full_like(cx, n, x, fill_value, dtype=None, **kw):
    if isinstance(fill_value, Value) or S.is_symbolic(fill_value):
        return _full_impl(cx, n, fill_value)
    return op(cx, "full_like", [x], value=float(fill_value), dtype=out_dtype(cx, n))


@conv("zeros_like", "empty_like")
def _zeros_like(cx, n, x, dtype=None, **kw):
    return op(cx, "full_like", [x], value=0.0, dtype=out_dtype(cx, n))


@conv("ones_like")
def _ones_like(cx, n, x, dtype=None, **kw):
    return op(cx, "full_like", [x], value=1.0, dtype=out_dtype(cx, n))


@conv("scalar_tensor")
def _scalar_tensor(cx, n, s, dtype=None, **kw):
    return tensor(cx, s, out_dtype(cx, n))
