"""Selection: ``topk``.

``topk(x; k, axis, largest, sorted)`` gives the k largest (or smallest) elements along
``axis`` and their int64 indices, best first. NaN counts as larger than every number
(torch and NumPy): first for ``largest``, last otherwise. Equal elements (and NaNs) come
in ascending index order: a stable order, as ``torch.sort(stable=True)``. torch's topk
orders ties by whatever its std::nth_element / std::partial_sort leave, which is not
specified; the values always agree, and so do the indices wherever there are no ties.
``sorted=False`` gives the same (sorted) order, one of the orders torch allows.

``passes/decompose.py`` rewrites a row of at most 64 elements with compares and reductions
(each element's rank, then the element of each rank), O(n^2) per row; a longer row is a host
call into braze_select.h (``BZ_TOPK``: a heap of the k best, or a merge sort of (value,
index) pairs).
"""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError
from ..ir import sym as S
from ..ir.types import DType, TensorType
from .common import norm_axis
from .opdef import Attr, defop


def k_may_exceed(constraints, k, n) -> str:
    """Whether k > n: "never", "always" or "maybe", from the symbols' ranges."""
    d = constraints.simplify(S.add(n, S.mul(-1, k)))
    if isinstance(d, int):
        return "never" if d >= 0 else "always"
    lo, hi = constraints.bounds(d)
    return "never" if lo >= 0 else "always" if hi < 0 else "maybe"


def _topk_infer(ctx, x: TensorType, *, k, axis, largest, sorted):
    if x.dtype is DType.bool:
        raise ctx.error(f"does not take bool inputs (got {x})", hint="cast to an int or float dtype first")
    if isinstance(k, int) and k < 0:
        raise ctx.error(f"k must be >= 0, got {k}")
    if x.rank == 0:
        if not (isinstance(k, int) and k == 1) or axis not in (0, -1):
            raise ctx.error("on a 0-d input, k must be 1 and axis 0 or -1")
        return x, x.with_dtype(DType.int64)
    a = norm_axis(ctx, axis, x.rank)
    n = x.shape[a]
    if k_may_exceed(ctx.constraints, k, n) == "always":
        raise ctx.error(f"k = {k} is larger than the dim {n} it selects from")
    shape = tuple(k if i == a else d for i, d in enumerate(x.shape))
    return TensorType(x.dtype, shape), TensorType(DType.int64, shape)


def _topk_ref(ctx, x, *, k, axis, largest, sorted):
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    a = axis % x.ndim
    n = x.shape[a]
    if k > n:
        raise BrazeError(f"topk: k = {k} is larger than the dim {n} it selects from (axis {a})")
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        y = x.astype(np.float64)
        nan = np.isnan(y)
        y = np.where(nan, 0.0, y)
        # lexsort is stable: the last key is the primary one; NaN first for largest, last otherwise
        keys = (-y, ~nan) if largest else (y, nan)
    else:
        y = x.astype(np.int64)
        keys = (~y,) if largest else (y,)  # ~y = -y - 1 orders descending without overflow
    order = np.lexsort(tuple(np.moveaxis(kk, a, -1) for kk in keys), axis=-1)
    idx = np.moveaxis(order[..., :k], -1, a).astype(np.int64)
    return np.take_along_axis(x, idx, axis=a), idx


defop("topk", inputs=("x",),
      attrs={"k": Attr("intlike", doc="how many elements to keep"),
             "axis": Attr("int", -1, "axis to select along"),
             "largest": Attr("bool", True, "the largest (else the smallest)"),
             "sorted": Attr("bool", True, "best first (braze always sorts)")},
      infer=_topk_infer, reference=_topk_ref, kind="opaque",
      doc="the k largest (or smallest) elements along axis, best first, and their int64 indices; "
          "NaN is largest; ties in index order")
