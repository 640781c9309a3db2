"""``resize``: nearest / linear / cubic interpolation of the trailing axes (F.interpolate,
ONNX Resize).

Per resized axis with input size ``n``, output size ``m`` and output index ``d``, in
the *coordinate dtype* (float32, or float64 for float64 inputs, as torch's opmath):

* the inverse scale ``r`` is ``1 / scale`` when ``scales`` is given, else ``n / m``;
* the resized length ``L`` is ``n * scale`` when ``scales`` is given (ONNX: a float), else ``m``;
* the source coordinate ``src`` is, by ``coord``:
  ``asymmetric`` ``d * r``; ``half_pixel`` ``(d + 0.5) * r - 0.5``;
  ``pytorch_half_pixel`` the same, or 0 when ``L == 1``;
  ``align_corners`` ``d * (n - 1) / (L - 1)``, or 0 when ``L == 1`` (torch's align_corners
  ignores its scale factor: its frontend gives no ``scales`` then);
  ``half_pixel_symmetric`` ``(d + 0.5) * r - 0.5 + (n - m * r) / 2`` (ONNX: the output's
  centre on the input's when ``m`` rounds ``L`` down);
  ``tf_crop_and_resize`` ``d * (e - s) * (n - 1) / (L - 1) + s * (n - 1)``, or
  ``(e - s) * (n - 1) / 2 + s * (n - 1)`` when ``L == 1``, for the axis's ``roi`` ``[s, e]``;
  where that falls outside ``[0, n - 1]`` on any axis, the output is ``extrapolation``;
* ``nearest`` takes ``x[clamp(round(src), 0, n - 1)]`` with ``round`` one of ``floor``,
  ``ceil``, ``round_prefer_floor`` (``ceil(src - 0.5)``), ``round_prefer_ceil``
  (``floor(src + 0.5)``); with half-pixel coordinates the +-0.5 cancel exactly
  (``floor((d + 0.5) * r)``: torch's nearest-exact);
* ``linear`` blends ``x[i0]`` and ``x[i1]``: ``s = max(src, 0)``,
  ``i0 = min(floor(s), n - 1)``, ``t = clamp(s - i0, 0, 1)``, ``i1 = min(i0 + 1, n - 1)``
  (torch's rule; equal to ONNX's edge padding);
* ``cubic`` blends ``x[clamp(i0 - 1 + j, 0, n - 1)]``, ``j = 0..3``, with Keys' weights
  for ``t`` and ``cubic_a`` (``i0``, ``t`` as for linear but without the clamp of
  ``src``); ``exclude_outside`` zeroes the taps outside ``[0, n)`` and renormalizes.

With ``antialias`` (ONNX), linear and cubic widen their kernel by ``1 / s`` where the axis
shrinks by ``s = min(scale, 1)`` (``m / n`` without ``scales``): taps ``i0 + k`` for ``k`` in
``[k0, 2 - k0)``, ``k0 = floor(-w / s) + 1`` (``w`` 1 for linear, 2 for cubic), each weighted
by the kernel at ``(k - t) * s`` (zero outside ``[0, n)`` with ``exclude_outside``); ``i0``,
``t`` are ``floor(src)`` and the fraction, or ``src - 1`` and 1 where ``src`` is a whole number
(ONNX's choice of the left window then). The axis's weighted sum is divided by the weights' sum
(ONNX normalizes each weight: the same up to rounding, and the weights' trees stay small). Several axes combine as the tensor product of their taps. ``torch_shortcuts`` adds
torch's exact cases (they only matter when ``scales`` is given): an axis with
``m == n`` is copied, and with nearest, one with ``m == 2 n`` reads ``d // 2``.
Output sizes are the ``sizes`` attribute (symbolic dims allowed): frontends compute
them from scale factors. The reference computes coordinates, weights and the weighted sums
in the coordinate dtype, the last axis first, as torch and the lowering do: a float32 sum
along the last axis that overflows to inf then meets the other axes' taps, zero weights
included, so 0 * inf gives NaN here as in torch and ONNX Runtime (a float64 sum would have
stayed finite).
"""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .opdef import Attr, defop

MODES = ("nearest", "linear", "cubic")
COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric",
          "tf_crop_and_resize")
NEAREST = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def coord_dtype(dt: DType) -> DType:
    return DType.float64 if dt is DType.float64 else DType.float32


def cubic_weights(t, a):
    """Keys' cubic convolution weights of the taps at offsets -1, 0, 1, 2 for fraction t (torch/ONNX)."""
    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = t * 0 + 1
    return [far(t + one), near(t), near(one - t), far((one - t) + one)]


def _infer(ctx, x: TensorType, *, sizes, mode, coord, nearest, scales, cubic_a, exclude_outside, torch_shortcuts,
           roi, extrapolation, antialias):
    k = len(sizes)
    if k < 1 or k > x.rank:
        raise ctx.error(f"sizes {list(sizes)} must name 1 to {x.rank} trailing axes of {x}")
    if mode not in MODES:
        raise ctx.error(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if coord not in COORDS:
        raise ctx.error(f"coord must be one of {', '.join(COORDS)}, got {coord!r}")
    if nearest not in NEAREST:
        raise ctx.error(f"nearest must be one of {', '.join(NEAREST)}, got {nearest!r}")
    if mode != "nearest" and not x.dtype.is_float:
        raise ctx.error(f"{mode} interpolation needs a floating-point input, got {x}",
                        hint="cast the input to a float dtype first")
    if scales is not None and (len(scales) != k or any(not s > 0 for s in scales)):
        raise ctx.error(f"scales {list(scales)} must be {k} positive numbers, one per resized axis")
    if antialias and scales is None and any(S.is_symbolic(d) for d in (*x.shape[x.rank - k:], *sizes)):
        raise ctx.error(f"antialias needs each axis's scale known: give scales, or static sizes (got {x} to "
                        f"{list(sizes)})", hint="its kernel's width is 2 / scale taps")
    if (coord == "tf_crop_and_resize") != (roi is not None) or roi is not None and len(roi) != 2 * k:
        raise ctx.error(f"coord tf_crop_and_resize takes a roi of {2 * k} numbers (every start, then every end), and "
                        f"no other coord does (got coord {coord!r}, roi {roi})")
    for s in sizes:
        if isinstance(s, int) and s < 1:
            raise ctx.error(f"output sizes must be >= 1, got {list(sizes)}")
    return TensorType(x.dtype, tuple(x.shape[:x.rank - k]) + tuple(S.as_intlike(s) for s in sizes))


# ---------------------------------------------------------------------------
# reference
# ---------------------------------------------------------------------------


def source_coord(n: int, m: int, scale, coord: str, roi, cd):
    """(the source coordinate of each of the m output positions of one axis, and ``(d + 0.5) * r``
    where the coordinate is that less 0.5, else None)."""
    f = cd.type
    d = np.arange(m).astype(cd)
    r = f(1.0 / scale) if scale is not None else f(n) / f(m)
    length = f(n) * f(scale) if scale is not None else f(m)
    if coord == "align_corners":
        return (d * (f(n - 1) / (length - f(1))) if length != 1 else np.zeros(m, cd)), None
    if coord == "pytorch_half_pixel" and length == 1:
        return np.zeros(m, cd), None
    if coord in ("half_pixel", "pytorch_half_pixel"):
        v = (d + f(0.5)) * r
        return v - f(0.5), v
    if coord == "half_pixel_symmetric":
        return (d + f(0.5)) * r - f(0.5) + (f(n) - f(m) * r) / f(2), None
    if coord == "tf_crop_and_resize":
        s, e = f(roi[0]), f(roi[1])
        start = s * f(n - 1)
        return (np.full(m, (e - s) * f(n - 1) / f(2) + start, cd) if length == 1 else
                d * (e - s) * f(n - 1) / (length - f(1)) + start), None
    return d * r, None


def antialias_offsets(n, m, scale, mode: str) -> tuple[float, range]:
    """(s, the tap offsets k) of an antialiased axis (the module docstring); n and m as ints, or
    scale given."""
    s = min(float(scale) if scale is not None else m / n, 1.0)
    k0 = int(np.floor(-(1.0 if mode == "linear" else 2.0) / s) + 1)
    return s, range(k0, 2 - k0)


def antialias_weight(x, mode: str, near, far, ops, consts):
    """The linear or cubic kernel at |x| (x >= 0), with the operations given (NumPy's or the loop IR's):
    ``ops`` (less-equal, less, select, subtract), ``consts`` (0, 1, 2) in the coordinate dtype."""
    le, lt, select, subtract = ops
    zero, one, two = consts
    if mode == "linear":
        return select(le(x, one), subtract(one, x), zero)
    return select(le(x, one), near(x), select(lt(x, two), far(x), zero))


def axis_taps(n: int, m: int, scale, *, mode, coord, nearest, cubic_a, exclude_outside, torch_shortcuts, cd,
              roi=None, antialias=False):
    """(indices, weights) of one axis: lists of arrays over the m output positions
    (weights None for nearest; with ``antialias``, not normalized: divide by their sum)."""
    f = cd.type
    if torch_shortcuts and scale is not None and m == n:
        return [np.arange(m)], (None if mode == "nearest" else [np.ones(m, cd)])
    if torch_shortcuts and scale is not None and mode == "nearest" and m == 2 * n:
        return [np.arange(m) // 2], None
    src, v = source_coord(n, m, scale, coord, roi, cd)
    half = v is not None
    hi = n - 1
    if mode == "nearest":
        if half and nearest == "round_prefer_ceil":
            i = np.floor(v)
        elif half and nearest == "round_prefer_floor":
            i = np.ceil(v) - 1
        else:
            i = {"floor": np.floor, "ceil": np.ceil, "round_prefer_floor": lambda s: np.ceil(s - f(0.5)),
                 "round_prefer_ceil": lambda s: np.floor(s + f(0.5))}[nearest](src)
        return [np.clip(i, 0, hi).astype(np.int64)], None
    if antialias:
        s, ks = antialias_offsets(n, m, scale, mode)
        i0 = np.floor(src)
        t = src - i0
        whole = t == 0
        i0, t = np.where(whole, i0 - f(1), i0).astype(np.int64), np.where(whole, f(1), t).astype(cd)
        a = f(cubic_a)
        near = lambda x: ((a + f(2)) * x - (a + f(3))) * x * x + f(1)  # noqa: E731
        far = lambda x: ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a  # noqa: E731
        w = [antialias_weight(np.abs((f(k) - t) * f(s)), mode, near, far, (np.less_equal, np.less, np.where,
                              np.subtract), (f(0), f(1), f(2))).astype(cd) for k in ks]
        idx = [i0 + k for k in ks]
        if exclude_outside:
            w = [np.where((i >= 0) & (i <= hi), c, f(0)) for i, c in zip(idx, w)]
        return [np.clip(i, 0, hi) for i in idx], w
    if mode == "linear":
        src = np.maximum(src, f(0))
    i0 = np.minimum(np.floor(src), f(hi))
    t = np.clip(src - i0, f(0), f(1)).astype(cd)
    i0 = i0.astype(np.int64)
    if mode == "linear":
        return [i0, np.minimum(i0 + 1, hi)], [f(1) - t, t]
    idx = [i0 - 1 + j for j in range(4)]
    w = [np.asarray(c, cd) for c in cubic_weights(t, f(cubic_a))]
    if exclude_outside:
        w = [np.where((i >= 0) & (i <= hi), c, f(0)) for i, c in zip(idx, w)]
        total = w[0] + w[1] + w[2] + w[3]
        w = [c / total for c in w]
    return [np.clip(i, 0, hi) for i in idx], w


def _reference(ctx, x, *, sizes, mode, coord, nearest, scales, cubic_a, exclude_outside, torch_shortcuts, roi,
               extrapolation, antialias):
    cd = coord_dtype(DType.from_numpy(x.dtype)).numpy
    k = len(sizes)
    y = x if mode == "nearest" else x.astype(cd)
    outside = np.zeros((1,) * x.ndim, bool)
    for j in reversed(range(k)):
        m, ax = sizes[j], x.ndim - k + j
        scale, n = None if scales is None else scales[j], x.shape[ax]
        axis_roi = None if roi is None else (roi[j], roi[k + j])
        if roi is not None:
            src, _ = source_coord(n, int(m), scale, coord, axis_roi, cd)
            out = (src < 0) | (src > cd.type(n - 1))
            outside = outside | out.reshape((int(m),) + (1,) * (x.ndim - ax - 1))
        idx, w = axis_taps(n, int(m), scale, mode=mode, coord=coord, nearest=nearest, cubic_a=cubic_a,
                           exclude_outside=exclude_outside, torch_shortcuts=torch_shortcuts, cd=cd, roi=axis_roi,
                           antialias=antialias and mode != "nearest")
        if w is None:
            y = np.take(y, idx[0], axis=ax)
            continue
        shape = (m,) + (1,) * (x.ndim - ax - 1)
        with np.errstate(over="ignore", invalid="ignore"):  # float32 overflow is torch's too (above)
            y = sum(np.take(y, i, axis=ax) * c.reshape(shape) for i, c in zip(idx, w))
            if antialias and mode != "nearest":
                y = y / sum(w).reshape(shape)
    if roi is not None:
        y = np.where(outside, np.asarray(extrapolation).astype(y.dtype), y)
    return np.asarray(y).astype(x.dtype, copy=False)


defop("resize", inputs=("x",),
      attrs={"sizes": Attr("intlikes", doc="output sizes of the trailing axes (one per resized axis)"),
             "mode": Attr("str", "nearest", "nearest | linear | cubic"),
             "coord": Attr("str", "half_pixel", "half_pixel | pytorch_half_pixel | align_corners | asymmetric | "
                                                "half_pixel_symmetric | tf_crop_and_resize"),
             "nearest": Attr("str", "floor", "floor | ceil | round_prefer_floor | round_prefer_ceil"),
             "scales": Attr("floats", None, "scale factor per resized axis for the coordinates; None: out / in"),
             "cubic_a": Attr("float", -0.75, "the cubic kernel's a (torch and ONNX: -0.75)"),
             "exclude_outside": Attr("bool", False, "cubic: drop taps outside the input, renormalize"),
             "torch_shortcuts": Attr("bool", False, "torch's exact cases for an output of the same or twice "
                                                    "the size (with scales)"),
             "roi": Attr("floats", None, "tf_crop_and_resize: every resized axis's start, then every end, as "
                                         "fractions of the input"),
             "extrapolation": Attr("float", 0.0, "tf_crop_and_resize: the value outside the input"),
             "antialias": Attr("bool", False, "linear and cubic: a kernel widened by 1 / scale where an axis "
                                              "shrinks (ONNX)")},
      infer=_infer, reference=_reference, kind="injective",
      doc="Interpolate the trailing axes to `sizes` (nearest, linear or cubic; F.interpolate, ONNX Resize).")
