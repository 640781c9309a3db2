"""ATen converters that add or write rows into a tensor (braze's ``index_add`` and ``index_put``):
``index_add``, ``index_put`` (with one index tensor), ``scatter_add`` and ``scatter_reduce`` (as
rows of one element of the flattened tensor), and ``embedding_dense_backward``, an embedding's
gradient."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.types import DType
from .common import ISSUES_HINT
from .convert import axis, cast, checked_index, conv, op, scalar

# braze_scatter.h adds in these; torch's 16-bit scatter-adds round each add, as a float32 helper would not
_TYPES = (DType.float32, DType.float64, DType.int32, DType.int64)


def _check(cx, what, x, idx, copy: bool = False):
    """Refuse what braze_scatter.h has no kernel for: adds and products outside ``_TYPES``
    (``copy``: rows only written, of any dtype)."""
    if x.dtype not in _TYPES and not copy:
        raise UnsupportedOpError(f"{what} of {x.dtype.name} is not supported (braze adds rows of "
                                 f"{', '.join(t.name for t in _TYPES)})", where=str(cx.loc), hint=ISSUES_HINT)
    if idx.dtype is DType.bool or not idx.dtype.is_int:
        raise UnsupportedOpError(f"{what} with {idx.dtype.name} indices is not supported: braze adds at "
                                 "integer indices", where=str(cx.loc), hint="index with the positions, not a mask")
    if x.rank == 0:
        raise UnsupportedOpError(f"{what} into a 0-d tensor is not supported", where=str(cx.loc), hint=ISSUES_HINT)


def put_rows(cx, x, idx, src, ax, reduce: str = "add"):
    """index_add (or index_put with ``reduce``) of ``src`` (x's shape with dim ``ax`` replaced by
    idx's shape) at ``idx`` (any rank, flattened)."""
    if idx.rank != 1:
        n = S.prod(tuple(idx.shape))
        idx = op(cx, "reshape", [idx], shape=(n,))
        src = op(cx, "reshape", [src], shape=tuple(x.shape[:ax]) + (n,) + tuple(x.shape[ax + 1:]))
    if reduce == "add":
        return op(cx, "index_add", [x, idx, src], axis=ax)
    return op(cx, "index_put", [x, idx, src], axis=ax, reduce=reduce)


@conv("index_add")
def _index_add(cx, n, x, dim, index, source, alpha=1):
    _check(cx, "index_add", x, index)
    ax = axis(cx, dim, x.rank)
    index = checked_index(cx, index, x.shape[ax], wrap=False)  # torch's index_add takes no negative index
    src = cast(cx, source, x.dtype)
    if alpha != 1:
        src = op(cx, "mul", [src, scalar(cx, alpha, x.dtype)])
    return put_rows(cx, x, index, src, ax)


@conv("index_put")
def _index_put(cx, n, x, indices, values, accumulate=False):
    """``x[..., idx, ...] = values`` (or ``+=`` with accumulate) with one integer index tensor; without
    accumulate a repeated index takes the last of its values (torch leaves which undefined)."""
    pos = [i for i, t in enumerate(indices) if t is not None]
    if len(pos) != 1:
        raise UnsupportedOpError(f"index_put with {len(pos)} index tensors is not supported", where=str(cx.loc),
                                 hint=ISSUES_HINT)
    ax, idx = pos[0], indices[pos[0]]
    _check(cx, "index_put", x, idx, copy=not accumulate)
    shape = tuple(x.shape[:ax]) + tuple(idx.shape) + tuple(x.shape[ax + 1:])
    src = cast(cx, values, x.dtype)
    if tuple(src.shape) != shape:
        src = op(cx, "expand", [src], shape=shape)
    return put_rows(cx, x, idx, src, ax, "add" if accumulate else "none")


@conv("index_copy")
def _index_copy(cx, n, x, dim, index, source):
    """``x.index_copy(dim, index, source)``: rows of ``source`` written at ``index`` along ``dim``
    (transformers' StaticCache writes its KV cache so); an index outside [0, n) fails the call, as
    eager raises."""
    _check(cx, "index_copy", x, index, copy=True)
    if index.rank != 1:
        raise UnsupportedOpError(f"index_copy with a {index.rank}-d index is not supported", where=str(cx.loc),
                                 hint="index with a 1-d tensor of positions")
    ax = axis(cx, dim, x.rank)
    index = checked_index(cx, index, x.shape[ax], wrap=False)
    return put_rows(cx, x, index, cast(cx, source, x.dtype), ax, reduce="none")


# scatter_reduce's reductions as index_put's, and the value a target starts from without include_self
_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _start(reduce: str, dt: DType) -> float | int:
    if reduce == "sum":
        return 0
    if reduce == "prod":
        return 1
    if dt.is_float:
        return float("-inf") if reduce == "amax" else float("inf")
    info = np.iinfo(dt.numpy)
    return int(info.min if reduce == "amax" else info.max)


def _scatter(cx, what, x, dim, index, src, reduce="sum", include_self=True):
    """``x`` with each element of ``src`` (at the positions of ``index``, which may be smaller)
    reduced into the element of ``x`` that ``index`` names along ``dim``: an ``index_add`` (or
    ``index_put``) of single elements into the flattened ``x``, at each target's flat position.
    An index outside [0, n) fails the call, as eager raises (flattened, it would land in another
    row). Targets take ``src`` in row-major order of ``index``, as torch's CPU loop adds them."""
    _check(cx, what, x, index)
    if reduce not in _REDUCE:
        raise UnsupportedOpError(f"{what} with reduce={reduce!r} is not supported", where=str(cx.loc),
                                 hint=ISSUES_HINT)
    ax = axis(cx, dim, x.rank)
    if index.rank != x.rank:
        raise UnsupportedOpError(f"{what} with an index of rank {index.rank} into rank {x.rank}", where=str(cx.loc))
    i64 = DType.int64
    src = cast(cx, src, x.dtype)
    shape = tuple(index.shape)
    if tuple(src.shape) != shape:
        for d, n in enumerate(shape):
            src = op(cx, "slice", [src], axis=d, start=0, end=n, step=1)
    flat = None
    stride = 1
    for d in reversed(range(x.rank)):
        if d == ax:
            c = checked_index(cx, index, x.shape[ax], wrap=False)
        else:
            c = op(cx, "arange", [], start=0, end=shape[d], step=1, dtype=i64)
            c = op(cx, "reshape", [c], shape=tuple(shape[d] if k == d else 1 for k in range(x.rank)))
        if not (isinstance(stride, int) and stride == 1):
            c = op(cx, "mul", [c, scalar(cx, stride, i64)])
        flat = c if flat is None else op(cx, "add", [flat, c])
        stride = S.mul(stride, x.shape[d])
    count = S.prod(shape)
    flat = op(cx, "reshape", [op(cx, "expand", [flat], shape=shape)], shape=(count,))
    rows = op(cx, "reshape", [src], shape=(count,))
    out = op(cx, "reshape", [x], shape=(S.prod(tuple(x.shape)),))
    if not include_self:  # the targets start from the reduction's identity
        # a constant of x's dtype (full's float value would round int64's extremes)
        fill = op(cx, "expand", [scalar(cx, _start(reduce, x.dtype), x.dtype)], shape=(count,))
        out = op(cx, "index_put", [out, flat, fill], axis=0, reduce="none")
    red = _REDUCE[reduce]
    out = op(cx, "index_add", [out, flat, rows], axis=0) if red == "add" else \
        op(cx, "index_put", [out, flat, rows], axis=0, reduce=red)
    return op(cx, "reshape", [out], shape=tuple(x.shape))


@conv("scatter_add")
def _scatter_add(cx, n, x, dim, index, src):
    return _scatter(cx, "scatter_add", x, dim, index, src)


@conv("scatter_reduce")
def _scatter_reduce(cx, n, x, dim, index, src, reduce, include_self=True):
    return _scatter(cx, "scatter_reduce", x, dim, index, src, reduce, include_self)


@conv("embedding_dense_backward")
def _embedding_dense_backward(cx, n, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The weight's gradient: zeros of [num_weights, D] with each position's gradient row added
    at its index; the padding index's row gets none."""
    if scale_grad_by_freq:
        raise UnsupportedOpError("embedding_dense_backward with scale_grad_by_freq is not supported",
                                 where=str(cx.loc), hint=ISSUES_HINT)
    d = grad.shape[-1]
    zeros = op(cx, "full", [], shape=(num_weights, d), value=0.0, dtype=grad.dtype)
    _check(cx, "embedding_dense_backward", zeros, indices)
    count = S.prod(tuple(indices.shape))
    idx = op(cx, "reshape", [indices], shape=(count,))
    rows = op(cx, "reshape", [grad], shape=(count, d))
    if padding_idx is not None and padding_idx >= 0:
        pad = op(cx, "equal", [idx, scalar(cx, padding_idx, idx.dtype)])
        rows = op(cx, "where", [op(cx, "unsqueeze", [pad], axes=(1,)), scalar(cx, 0.0, grad.dtype), rows])
    return op(cx, "index_add", [zeros, idx, rows], axis=0)
