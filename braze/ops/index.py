"""Indexing ops: gather (numpy.take), gather_elements (torch.gather), index_add (scatter-add of
rows: torch.index_add, embedding gradients), index_put (rows written, or multiplied, maxed or
minned in: ONNX's ScatterElements and ScatterND, torch's index_put), tril, triu."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .common import norm_axis
from .opdef import Attr, defop


def _int_indices(ctx, idx):
    if not idx.dtype.is_int:
        raise ctx.error(f"indices must be an integer tensor, got {idx}", hint="cast them to int64")


WRAP = Attr("bool", True, "a negative index counts from the end (numpy, ONNX, torch's x[i]); false: it is "
             "out of range (torch.gather, index_select, embedding)")


def _check_range(what: str, idx, n: int, axis: int, wrap: bool) -> None:
    lo = -n if wrap else 0
    if idx.size and (idx.min() < lo or idx.max() >= n):
        raise IndexError(f"{what}: an index is out of range [{lo}, {n}) for axis {axis}")


def _gather_infer(ctx, x, idx, *, axis, wrap):
    _int_indices(ctx, idx)
    if x.rank == 0:
        raise ctx.error(f"cannot gather from a scalar {x}")
    ax = norm_axis(ctx, axis, x.rank)
    return TensorType(x.dtype, x.shape[:ax] + idx.shape + x.shape[ax + 1:])


def _gather_ref(ctx, x, idx, *, axis, wrap):
    _check_range("gather", idx, x.shape[axis], axis, wrap)
    return np.take(x, idx.astype(np.int64, copy=False), axis=axis)


defop("gather", narrow=True, inputs=("x", "indices"), attrs={"axis": Attr("int", 0), "wrap": WRAP},
      infer=_gather_infer, reference=_gather_ref, kind="injective",
      doc="numpy.take along an axis; an index out of range is an error.")


def _gather_elements_infer(ctx, x, idx, *, axis, wrap):
    _int_indices(ctx, idx)
    if x.rank != idx.rank:
        raise ctx.error(f"input {x} and indices {idx} must have the same rank")
    norm_axis(ctx, axis, x.rank)
    return TensorType(x.dtype, idx.shape)


def _gather_elements_ref(ctx, x, idx, *, axis, wrap):
    ax = axis % max(x.ndim, 1)
    n = x.shape[ax]
    idx = idx.astype(np.int64, copy=False)
    _check_range("gather_elements", idx, n, axis, wrap)
    idx = np.where(idx < 0, idx + n, idx)
    # torch.gather: the indices may be smaller than x in the other dims
    xs = x[tuple(slice(None) if i == ax else slice(0, idx.shape[i]) for i in range(x.ndim))]
    return np.take_along_axis(xs, idx, axis=ax)


defop("gather_elements", inputs=("x", "indices"), attrs={"axis": Attr("int"), "wrap": WRAP},
      infer=_gather_elements_infer, reference=_gather_elements_ref, kind="injective",
      doc="torch.gather: out[i][j] = x[idx[i][j]][j] along axis.")


def _index_add_infer(ctx, x, idx, src, *, axis):
    _int_indices(ctx, idx)
    if idx.rank != 1:
        raise ctx.error(f"index must be 1-D, got {idx}", hint="flatten the index and the source rows first")
    if src.dtype != x.dtype:
        raise ctx.error(f"source {src} and input {x} must have one dtype")
    if x.rank == 0 or src.rank != x.rank:
        raise ctx.error(f"source {src} must have the rank of input {x} (at least 1)")
    ax = norm_axis(ctx, axis, x.rank)
    for i, (a, b) in enumerate(zip(src.shape, x.shape[:ax] + idx.shape + x.shape[ax + 1:])):
        eq = ctx.equal(a, b)
        if eq is False:
            raise ctx.error(f"source {src} dim {i} is {a}, but input {x} and index {idx} need {b}")
        if eq is None:
            ctx.assume_equal(a, b, "index_add source dims")
    return x


def _rows(what: str, x, idx, axis: int):
    """(the axis, its rows at ``idx`` with negative ones wrapped); an index out of [-n, n) is an error."""
    ax = axis % x.ndim
    n = x.shape[ax]
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise IndexError(f"{what}: an index is out of range [-{n}, {n}) for axis {axis}")
    return ax, np.where(idx < 0, idx + n, idx)


def index_add_numpy(x, idx, src, axis: int):
    """out = x, then out[..., idx[i], ...] += src[..., i, ...] along ``axis`` for i in order;
    negative indices wrap, and an index out of [-n, n) is an error."""
    ax, j = _rows("index_add", x, idx, axis)
    out = x.copy()
    np.add.at(out, (slice(None),) * ax + (j,), src)
    return out


defop("index_add", inputs=("x", "indices", "src"), attrs={"axis": Attr("int", 0)},
      infer=_index_add_infer, reference=lambda ctx, x, idx, src, *, axis: index_add_numpy(x, idx, src, axis),
      kind="opaque",
      doc="torch.index_add: x with src's slices added along axis at the 1-D indices, in index order "
          "(repeats add up); negative indices wrap.")


INDEX_PUT_REDUCE = ("none", "mul", "max", "min")  # "add" is index_add


def _index_put_infer(ctx, x, idx, src, *, axis, reduce):
    if reduce not in INDEX_PUT_REDUCE:
        raise ctx.error(f"reduce must be one of {', '.join(INDEX_PUT_REDUCE)}, got {reduce!r}",
                        hint="a scatter that adds is index_add")
    return _index_add_infer(ctx, x, idx, src, axis=axis)


def index_put_numpy(x, idx, src, axis: int, reduce: str):
    """out = x, then for each i in order the slice out[..., idx[i], ...] is src[..., i, ...] (reduce
    "none": the last write wins) or that combined with it ("mul", or "max"/"min", where NaN wins as
    in numpy.maximum); negative indices wrap, and an index out of [-n, n) is an error."""
    ax, j = _rows("index_put", x, idx, axis)
    out = x.copy()
    at = (slice(None),) * ax
    if reduce == "none":
        rows, last = np.unique(j[::-1], return_index=True)  # each row's last write
        out[at + (rows,)] = np.take(src, len(j) - 1 - last, axis=ax)
    else:
        {"mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduce].at(out, at + (j,), src)
    return out


defop("index_put", inputs=("x", "indices", "src"),
      attrs={"axis": Attr("int", 0), "reduce": Attr("str", "none", "none | mul | max | min")},
      infer=_index_put_infer,
      reference=lambda ctx, x, idx, src, *, axis, reduce: index_put_numpy(x, idx, src, axis, reduce),
      kind="opaque",
      doc="x with src's slices written along axis at the 1-D indices in index order (reduce none: the "
          "last write wins), or multiplied, maxed or minned in (NaN wins); negative indices wrap.")


def _tri_infer(ctx, x, *, k):
    if x.rank < 2:
        raise ctx.error(f"needs rank >= 2 (works on the last two dims), got {x}")
    return x


defop("tril", inputs=("x",), attrs={"k": Attr("intlike", 0, "diagonal offset")},
      infer=_tri_infer, reference=lambda ctx, x, *, k: np.tril(x, k), kind="injective",
      doc="Zero the elements above the k-th diagonal of the last two dims.")
defop("triu", inputs=("x",), attrs={"k": Attr("intlike", 0, "diagonal offset")},
      infer=_tri_infer, reference=lambda ctx, x, *, k: np.triu(x, k), kind="injective",
      doc="Zero the elements below the k-th diagonal of the last two dims.")
