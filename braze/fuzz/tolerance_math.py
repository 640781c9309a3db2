"""The arithmetic of braze's error bounds (``tolerance.py``): unit roundoffs, magnitudes, the
rounding term of an output, and the markers for "exact" and "unbounded" that every op's rule
(``tolerance.py``, ``tolerance_ops.py``) builds its bound from."""

from __future__ import annotations

import numpy as np

SLACK = 2.0
FLOOR = {"float32": 1e-30, "float64": 1e-300, "float16": 1e-6, "bfloat16": 1e-6}
UNIT = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
BIG = 1e300

def mag(x):
    """|x| with inf -> 1e300 and nan -> 0, in float64 (a magnitude to multiply errors by)."""
    a = np.abs(np.asarray(x, dtype=np.float64))
    return np.nan_to_num(a, nan=0.0, posinf=BIG)


def is_float(dt) -> bool:
    """A float dtype, ml_dtypes' bfloat16 included (numpy files it under kind 'V')."""
    return dt.kind == "f" or dt.name == "bfloat16"


def finfo(dt):
    """numpy's finfo, and ml_dtypes' for bfloat16 (numpy's refuses it)."""
    if np.dtype(dt).name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(dt)


def unit(a) -> float:
    return UNIT.get(np.asarray(a).dtype.name, 0.0)


def rnd(out, c=1.0, absolute=0.0):
    """The rounding part of a float output's bound: c u |out| (+ an absolute term), and the
    smallest normal number when c > 0: a denormal result may be flushed to 0 (oneDNN runs
    with FTZ/DAZ; the vector exp returns 0 below the normal range)."""
    out = np.asarray(out)
    u = unit(out)
    if u == 0.0:
        return np.zeros(out.shape)
    fi = finfo(out.dtype)
    return c * u * np.minimum(mag(out), fi.max) + absolute + (float(fi.tiny) if c > 0 else 0.0)


def _at(mask, shape, otherwise: bool):
    """An operand's ``mask`` at the output's shape; where it does not broadcast (a reduction's or
    a matmul's operand), everywhere if ``otherwise`` and any element is set, else nowhere."""
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        return np.full(shape, otherwise and bool(mask.any()))


def any_err(e, shape):
    """Where an operand's error is nonzero, at the output's shape (everywhere when the
    operand does not broadcast to it)."""
    return _at(np.asarray(e) != 0, shape, True)  # NaN counts as an error


def clean(p, *errs):
    """A propagated part: NaN -> unbounded, exactly 0 where every operand error is 0, and
    unbounded where an operand's is: such an operand may be NaN (an overflowed product times
    0, seed 10785), which a bounded function (atan) keeps, whatever its interval says."""
    p = np.asarray(p, dtype=np.float64)
    p = np.where(np.isnan(p), np.inf, p)
    if errs:
        hit = np.zeros(p.shape, dtype=bool)
        for e in errs:
            if e is not None:
                hit = hit | any_err(e, p.shape)
                # a reduction's or a matmul's rule sums the errors it needs: nowhere if apart
                p = np.where(_at(np.isinf(np.asarray(e)), p.shape, False), np.inf, p)
        p = np.where(hit, p, 0.0)
    return p


def unbounded_if(errs, shape):
    """0, or inf where any operand carries error (for discontinuous ops)."""
    out = np.zeros(shape)
    for e in errs:
        if e is not None:
            out = np.where(any_err(e, shape), np.inf, out)
    return out


def f64(x):
    return np.asarray(x, dtype=np.float64)


def overflow(total, out):
    """Unbounded where a sum of magnitudes (float64) may overflow the output's dtype on the way:
    the order of the partial sums then decides between inf, -inf, nan and a finite value."""
    lim = finfo(np.asarray(out).dtype).max if is_float(np.asarray(out).dtype) else np.inf
    return np.where(np.asarray(total) > lim / 2, np.inf, 0.0)


def move(ctx, opdef, ins, es, outs, attrs):
    """Shape ops: the error moves with the data (gather's indices stay as they are)."""
    data = [None if e is None else f64(e) for e in es]
    if opdef.name in ("gather", "gather_elements"):
        data = [data[0], ins[1]]
    if opdef.name == "pad":
        attrs = dict(attrs, value=0.0)
    if opdef.name == "resize":  # nearest
        return [_nearest_sources(ctx, opdef, ins[0], data[0], attrs)]
    r = opdef.reference(ctx, *data, **attrs)
    r = list(r) if isinstance(r, (tuple, list)) else [r]
    return [np.asarray(x, dtype=np.float64) for x in r]


def _nearest_sources(ctx, opdef, x, e, attrs):
    """A nearest resize's error: each output's source element's, found by resizing the sources'
    positions with the op's own coordinates (float32 unless x is float64: the error map resized in
    float64 took other sources, or the constant, near a roi's edge: seed 17374). tf_crop_and_resize's
    constant outside the roi is exact (seed 13023)."""
    cd = np.float64 if x.dtype == np.float64 else np.float32
    pos = np.arange(x.size, dtype=np.float64).reshape(x.shape).astype(cd)  # exact below 2^24 elements
    src = np.asarray(opdef.reference(ctx, pos, **dict(attrs, extrapolation=-1.0)), dtype=np.float64)
    return np.where(src >= 0, np.reshape(e, -1)[np.maximum(src, 0).astype(np.int64)], 0.0)


def count(x, axes):
    return int(np.prod([np.shape(x)[a] for a in axes])) if axes else 1
