"""Ops whose output size their data decides: ``nonzero``, ``unique``, ``non_max_suppression``.

Each names the size it decides in its ``size`` attribute, a symbol of the module's ``sizes``
block (``Module.data_symbols``) with an upper bound in the input's symbols: memory is planned
for the bound, and the ops after it read the size the node found (a BladeDISC-style upper-bound
allocation with a run-time size). They make int64 indices only; the values they pick are a
``gather`` after them (ONNX's Compress and Unique's values).

The host runs each as a call into ``braze_select.h``; none fuses with anything.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import DType, TensorType
from .common import norm_axis
from .opdef import Attr, defop

I64 = DType.int64
_SIZE = Attr("size", doc="the symbol of the size this node decides (a sizes-block entry)")


def _nonzero_infer(ctx, x, *, size):
    if x.rank == 0:
        raise ctx.error(f"takes a tensor of rank >= 1, got {x}", hint="reshape a scalar to [1] first")
    return TensorType(I64, (x.rank, size))


defop("nonzero", inputs=("x",), attrs={"size": _SIZE}, infer=_nonzero_infer,
      reference=lambda ctx, x, *, size: np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1),
      doc="[rank, count] int64: the coordinates of x's nonzero elements (NaN is nonzero, -0 is not), in "
          "row-major order (ONNX NonZero; torch.nonzero transposed).")


def _unique_infer(ctx, x, *, axis, sorted, size):
    if x.rank == 0:
        raise ctx.error(f"takes a tensor of rank >= 1, got {x}", hint="reshape a scalar to [1] first")
    if x.dtype is DType.bool or x.dtype.itemsize == 2 and x.dtype.is_float:
        raise ctx.error(f"does not take {x.dtype.name} (got {x})", hint="cast to float32 or an integer type")
    ax = norm_axis(ctx, axis, x.rank)
    n = x.shape[ax]
    return TensorType(I64, (size,)), TensorType(I64, (n,)), TensorType(I64, (size,))


def slice_order(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a stable lexicographic order of ``rows`` [n, m], and whether each row in that order equals the
    one before it). Floats compare as numbers, with NaN above everything and equal to NaN; -0 == 0."""
    keys = []
    for c in range(rows.shape[1] - 1, -1, -1):  # np.lexsort: the last key is the first compared
        col = rows[:, c]
        if col.dtype.kind == "f":
            nan = np.isnan(col)
            keys += [np.where(nan, 0, col), nan]
        else:
            keys.append(col)
    order = np.lexsort(keys) if keys else np.arange(rows.shape[0])
    s = rows[order]
    same = np.ones(len(order), dtype=bool)
    same[0:1] = False
    if s.shape[1]:
        eq = (s[1:] == s[:-1]) | (np.isnan(s[1:]) & np.isnan(s[:-1]) if s.dtype.kind == "f" else False)
        same[1:] = eq.all(axis=1)
    return order, same


def unique_numpy(x: np.ndarray, axis: int, sorted: bool):
    """(first, inverse, counts) for the distinct slices of ``x`` along ``axis``: each one's first index,
    each slice's group, each group's size. Groups come in ascending order (``sorted``), else in the
    order they first appear."""
    n = x.shape[axis]
    rows = np.moveaxis(x, axis, 0).reshape(n, -1)
    order, same = slice_order(rows)
    group = np.cumsum(~same) - 1
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = group
    k = int(group[-1]) + 1 if n else 0
    first = np.full(k, n, dtype=np.int64)
    np.minimum.at(first, group, order)
    counts = np.bincount(group, minlength=k).astype(np.int64)
    if not sorted:
        by_first = np.argsort(first, kind="stable")
        rank = np.empty(k, dtype=np.int64)
        rank[by_first] = np.arange(k)
        first, counts, inverse = first[by_first], counts[by_first], rank[inverse]
    return first, inverse, counts


defop("unique", inputs=("x",),
      attrs={"axis": Attr("int", 0), "sorted": Attr("bool", True, "groups in ascending order, else by first "
                                                                  "appearance"), "size": _SIZE},
      infer=_unique_infer,
      reference=lambda ctx, x, *, axis, sorted, size: unique_numpy(x, axis % x.ndim, sorted),
      doc="(first [count], inverse [n], counts [count]) int64 of x's distinct slices along axis (n of "
          "them): each distinct slice's first index, the group of every slice, the group sizes. Slices "
          "compare lexicographically; NaN is above every number and equal to NaN, -0 equals 0.")


def _nms_infer(ctx, boxes, scores, max_out=None, iou=None, score_threshold=None, *, center_point_box, size):
    if boxes.rank != 3 or scores.rank != 3 or not boxes.dtype.is_float or scores.dtype != boxes.dtype:
        raise ctx.error(f"takes boxes [batch, boxes, 4] and scores [batch, classes, boxes] of one float type, got "
                        f"{boxes} and {scores}")
    ctx.assume_equal(boxes.shape[0], scores.shape[0], "the batch of boxes and scores")
    ctx.assume_equal(boxes.shape[1], scores.shape[2], "the box count of boxes and scores")
    ctx.assume_equal(boxes.shape[2], 4, "a box's coordinates")
    for t, what, want in ((max_out, "max_output_boxes_per_class", I64), (iou, "iou_threshold", boxes.dtype),
                          (score_threshold, "score_threshold", boxes.dtype)):
        if t is not None and (t.dtype != want or t.rank > 1):
            raise ctx.error(f"{what} must be a {want.name} scalar or [1], got {t}")
    if center_point_box not in (0, 1):
        raise ctx.error(f"center_point_box must be 0 or 1, got {center_point_box}")
    return TensorType(I64, (size, 3))


def _iou_over(a, b, center: int, threshold) -> bool:
    """Whether boxes a and b overlap by more than ``threshold`` (ONNX's suppression test, in the boxes'
    type)."""
    if center:
        ax0, ax1 = a[0] - a[2] / 2, a[0] + a[2] / 2
        bx0, bx1 = b[0] - b[2] / 2, b[0] + b[2] / 2
        ay0, ay1 = a[1] - a[3] / 2, a[1] + a[3] / 2
        by0, by1 = b[1] - b[3] / 2, b[1] + b[3] / 2
    else:  # [y1, x1, y2, x2], either corner first
        ax0, ax1 = min(a[1], a[3]), max(a[1], a[3])
        bx0, bx1 = min(b[1], b[3]), max(b[1], b[3])
        ay0, ay1 = min(a[0], a[2]), max(a[0], a[2])
        by0, by1 = min(b[0], b[2]), max(b[0], b[2])
    ix0, ix1, iy0, iy1 = max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1)
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


def nms_numpy(boxes, scores, max_out=None, iou=None, score_threshold=None, center_point_box: int = 0):
    """ONNX NonMaxSuppression: per batch and class, the boxes by descending score (ties: lower index
    first) above ``score_threshold`` (when given), each kept unless it overlaps a kept one by more
    than ``iou``, at most ``max_out`` (absent: none) per class. [count, 3] of (batch, class, box)."""
    limit = 0 if max_out is None or max_out.size == 0 else max(int(max_out.reshape(-1)[0]), 0)
    t = boxes.dtype.type
    thr = t(0) if iou is None or iou.size == 0 else iou.reshape(-1)[0]
    out = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = np.arange(s.shape[0])
            if score_threshold is not None and score_threshold.size:
                cand = cand[s > score_threshold.reshape(-1)[0]]
            cand = cand[np.lexsort((cand, -s[cand]))] if cand.size else cand
            kept: list[int] = []
            for i in cand:
                if len(kept) >= limit:
                    break
                if not any(_iou_over(boxes[b, i], boxes[b, j], center_point_box, thr) for j in kept):
                    kept.append(int(i))
                    out.append((b, c, int(i)))
    return np.array(out, dtype=np.int64).reshape(-1, 3)


defop("non_max_suppression", inputs=("boxes", "scores", "max_output?", "iou_threshold?", "score_threshold?"),
      attrs={"center_point_box": Attr("int", 0, "0: [y1, x1, y2, x2]; 1: [x center, y center, width, height]"),
             "size": _SIZE},
      infer=_nms_infer,
      reference=lambda ctx, boxes, scores, max_out=None, iou=None, score_threshold=None, *, center_point_box, size:
      nms_numpy(boxes, scores, max_out, iou, score_threshold, center_point_box),
      doc="[count, 3] int64 (batch, class, box) of the boxes ONNX NonMaxSuppression keeps.")
