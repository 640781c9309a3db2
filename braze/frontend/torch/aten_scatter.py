"""ATen converters that add or write rows into a tensor (braze's ``index_add`` and ``index_put``):
``index_add``, ``index_put`` (with one index tensor), and ``embedding_dense_backward``, an
embedding's gradient."""

from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.types import DType
from .common import ISSUES_HINT
from .convert import axis, cast, checked_index, conv, op, scalar

# braze_scatter.h adds in these; torch's 16-bit scatter-adds round each add, as a float32 helper would not
_TYPES = (DType.float32, DType.float64, DType.int32, DType.int64)


def _check(cx, what, x, idx):
    if x.dtype not in _TYPES:
        raise UnsupportedOpError(f"{what} of {x.dtype.name} is not supported (braze adds rows of "
                                 f"{', '.join(t.name for t in _TYPES)})", where=str(cx.loc), hint=ISSUES_HINT)
    if idx.dtype is DType.bool or not idx.dtype.is_int:
        raise UnsupportedOpError(f"{what} with {idx.dtype.name} indices is not supported: braze adds at "
                                 "integer indices", where=str(cx.loc), hint="index with the positions, not a mask")
    if x.rank == 0:
        raise UnsupportedOpError(f"{what} into a 0-d tensor is not supported", where=str(cx.loc), hint=ISSUES_HINT)


def _rows(cx, x, idx, src, ax, reduce: str = "add"):
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
    return _rows(cx, x, index, src, ax)


@conv("index_put")
def _index_put(cx, n, x, indices, values, accumulate=False):
    """``x[..., idx, ...] = values`` (or ``+=`` with accumulate) with one integer index tensor; without
    accumulate a repeated index takes the last of its values (torch leaves which undefined)."""
    pos = [i for i, t in enumerate(indices) if t is not None]
    if len(pos) != 1:
        raise UnsupportedOpError(f"index_put with {len(pos)} index tensors is not supported", where=str(cx.loc),
                                 hint=ISSUES_HINT)
    ax, idx = pos[0], indices[pos[0]]
    _check(cx, "index_put", x, idx)
    shape = tuple(x.shape[:ax]) + tuple(idx.shape) + tuple(x.shape[ax + 1:])
    src = cast(cx, values, x.dtype)
    if tuple(src.shape) != shape:
        src = op(cx, "expand", [src], shape=shape)
    return _rows(cx, x, idx, src, ax, "add" if accumulate else "none")


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
