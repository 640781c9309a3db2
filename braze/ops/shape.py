"""Shape ops: reshape, permute, expand, concat, split, slice, (un)squeeze, flatten, pad, tile."""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import DType, TensorType
from .common import _fmt, norm_axis, promote
from .opdef import Attr, defop

BIG = 2 ** 62  # a slice bound at or past this means "to the end"


def _require_equal(ctx, a, b, what, msg=None, hint=None):
    """Prove a == b, record it as a run-time-checked constraint, or raise."""
    eq = ctx.equal(a, b)
    if eq is False:
        raise ctx.error(msg or f"{what} {a} and {b} differ", hint=hint)
    if eq is None:
        ctx.assume_equal(a, b, what)


# ---------------------------------------------------------------------------
# reshape / permute / expand
# ---------------------------------------------------------------------------


def _reshape_infer(ctx, x, *, shape):
    for d in shape:
        if isinstance(d, int) and d < 0:
            raise ctx.error(f"target shape {_fmt(shape)} has a negative dim {d}",
                            hint="reshape takes no -1: the frontend resolves it from the input's element count")
    _require_equal(ctx, S.prod(x.shape), S.prod(shape), "element counts",
                   msg=f"cannot reshape {_fmt(x.shape)} into {_fmt(shape)}: element counts "
                       f"{S.prod(x.shape)} and {S.prod(shape)} differ")
    return TensorType(x.dtype, tuple(ctx.simplify(d) for d in shape))


def _reshape_ref(ctx, x, *, shape):
    return np.reshape(x, tuple(shape))


defop("reshape", narrow=True, inputs=("x",), attrs={"shape": Attr("intlikes", doc="target shape, no -1")},
      infer=_reshape_infer, reference=_reshape_ref, kind="injective",
      doc="Same elements (row-major) in a new shape.")


def _permute_infer(ctx, x, *, perm):
    if len(perm) != x.rank:
        raise ctx.error(f"perm {list(perm)} has {len(perm)} entries but the input {x} has rank {x.rank}")
    p = [norm_axis(ctx, a, x.rank) for a in perm]
    if sorted(p) != list(range(x.rank)):
        raise ctx.error(f"perm {list(perm)} is not a permutation of 0..{x.rank - 1}")
    return TensorType(x.dtype, tuple(x.shape[i] for i in p))


def _permute_ref(ctx, x, *, perm):
    return np.transpose(x, tuple(a % x.ndim for a in perm)) if x.ndim else x


defop("permute", narrow=True, inputs=("x",), attrs={"perm": Attr("ints", doc="output axis i is input axis perm[i]")},
      infer=_permute_infer, reference=_permute_ref, kind="injective",
      doc="Transpose axes (numpy.transpose).")


def _expand_infer(ctx, x, *, shape):
    if len(shape) < x.rank:
        raise ctx.error(f"cannot expand {x} to the lower-rank shape {_fmt(shape)}")
    lead = len(shape) - x.rank
    out = []
    for i, t in enumerate(shape):
        if isinstance(t, int) and t == -1:
            if i < lead:
                raise ctx.error(f"-1 in expand shape {_fmt(shape)} at a new leading dim {i}")
            out.append(x.shape[i - lead])
            continue
        if isinstance(t, int) and t < 0:
            raise ctx.error(f"expand shape {_fmt(shape)} has a negative dim {t}")
        if i < lead:
            out.append(t)
            continue
        d = x.shape[i - lead]
        if isinstance(d, int) and d == 1:
            out.append(t)
            continue
        _require_equal(ctx, d, t, "expanded dims",
                       msg=f"cannot expand dim {i - lead} of size {d} to {t} (input {x}, shape {_fmt(shape)})",
                       hint="only size-1 dims can be expanded")
        out.append(ctx.simplify(d))
    return TensorType(x.dtype, tuple(out))


def _expand_ref(ctx, x, *, shape):
    lead = len(shape) - x.ndim
    tgt = tuple(x.shape[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(shape))
    return np.broadcast_to(x, tgt)


defop("expand", narrow=True, inputs=("x",), attrs={"shape": Attr("intlikes", doc="target shape; -1 keeps the input dim")},
      infer=_expand_infer, reference=_expand_ref, kind="broadcast",
      doc="Broadcast size-1 dims (and new leading dims) to a shape.")


# ---------------------------------------------------------------------------
# concat / split
# ---------------------------------------------------------------------------


def _concat_infer(ctx, *xs, axis):
    if not xs:
        raise ctx.error("needs at least one input")
    r = xs[0].rank
    for t in xs[1:]:
        if t.rank != r:
            raise ctx.error(f"inputs have different ranks: {', '.join(str(t) for t in xs)}")
    ax = norm_axis(ctx, axis, r)
    out = list(xs[0].shape)
    total = 0
    for t in xs:
        for i in range(r):
            if i == ax:
                continue
            _require_equal(ctx, out[i], t.shape[i], "concat dims",
                           msg=f"inputs {', '.join(str(u) for u in xs)} differ in dim {i}, "
                               f"which is not the concat axis {ax}")
        total = S.add(total, t.shape[ax])
    out = [ctx.simplify(d) for d in out]
    out[ax] = ctx.simplify(total)
    try:
        dt = promote(*(t.dtype for t in xs))
    except TypeError as e:
        raise ctx.error(str(e), hint="cast the inputs to one dtype first") from None
    return TensorType(dt, tuple(out))


def _concat_ref(ctx, *xs, axis):
    dt = promote(*(DType.from_numpy(a.dtype) for a in xs)).numpy
    return np.concatenate([a.astype(dt, copy=False) for a in xs], axis=axis)


defop("concat", narrow=True, inputs=("xs*",), attrs={"axis": Attr("int", 0, "axis to join on")},
      infer=_concat_infer, reference=_concat_ref, kind="injective",
      doc="Join tensors along an axis.")


def _split_infer(ctx, x, *, axis, sizes):
    ax = norm_axis(ctx, axis, x.rank)
    if not sizes:
        raise ctx.error("needs at least one size")
    for s in sizes:
        if isinstance(s, int) and s < 0:
            raise ctx.error(f"sizes {list(sizes)} has a negative entry")
    total = 0
    for s in sizes:
        total = S.add(total, s)
    _require_equal(ctx, total, x.shape[ax], "split sizes",
                   msg=f"sizes {list(sizes)} sum to {total}, but dim {ax} of {x} is {x.shape[ax]}")
    outs = []
    for s in sizes:
        shp = list(x.shape)
        shp[ax] = ctx.simplify(s)
        outs.append(TensorType(x.dtype, tuple(shp)))
    return tuple(outs)


def _split_ref(ctx, x, *, axis, sizes):
    idx = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, idx, axis=axis))


defop("split", narrow=True, inputs=("x",), attrs={"axis": Attr("int", 0), "sizes": Attr("intlikes", doc="one per output")},
      infer=_split_infer, reference=_split_ref, kind="injective",
      doc="Split along an axis into pieces of the given sizes (one output each).")


# ---------------------------------------------------------------------------
# slice
# ---------------------------------------------------------------------------


def _sign(x):
    """+1 if provably >= 0, -1 if provably < 0, else None."""
    lo, hi = S.bounds(x)
    if lo >= 0:
        return 1
    if hi < 0:
        return -1
    return None


def _norm_bound(ctx, v, d, step, which):
    """Python's slice-bound normalization on a dim d (IntLike)."""
    if step > 0:
        if isinstance(v, int) and v >= BIG:
            return d
        if isinstance(v, int) and v <= -BIG:
            return 0
        sg = _sign(v)
        if sg is None:
            raise ctx.error(f"{which} {v} may be negative or not; its sign decides how it is read",
                            hint="give the symbol a range (Sym(..., lo=0)) or normalize the bound in the frontend")
        if sg > 0:
            return S.smin(v, d)
        return S.smax(S.add(v, d), 0)
    # negative step: bounds clamp to [-1, d - 1]
    if isinstance(v, int) and v >= BIG:
        return S.add(d, -1)
    if isinstance(v, int) and v <= -BIG:
        return -1
    sg = _sign(v)
    if sg is None:
        raise ctx.error(f"{which} {v} may be negative or not; its sign decides how it is read",
                        hint="give the symbol a range (Sym(..., lo=0)) or normalize the bound in the frontend")
    if sg > 0:
        return S.smin(v, S.add(d, -1))
    return S.smax(S.add(v, d), -1)


def slice_len(ctx, d, start, end, step):
    if step == 0:
        raise ctx.error("step must not be 0")
    # common forms, with simpler results
    if step == 1 and isinstance(end, int) and end >= BIG:
        if isinstance(start, int) and start < 0:
            return S.smin(-start, d) if start > -BIG else d
        if isinstance(start, int) and start == 0:
            return d
        if isinstance(start, int) and start > 0:
            return S.smax(S.add(d, -start), 0)
    s = _norm_bound(ctx, start, d, step, "start")
    e = _norm_bound(ctx, end, d, step, "end")
    if step > 0:
        n = S.floordiv(S.add(S.add(e, S.mul(-1, s)), step - 1), step)
    else:
        n = S.floordiv(S.add(S.add(s, S.mul(-1, e)), -step - 1), -step)
    return S.smax(n, 0)


def _slice_infer(ctx, x, *, axis, start, end, step):
    ax = norm_axis(ctx, axis, x.rank)
    shp = list(x.shape)
    shp[ax] = ctx.simplify(slice_len(ctx, x.shape[ax], start, end, step))
    return TensorType(x.dtype, tuple(shp))


def _slice_ref(ctx, x, *, axis, start, end, step):
    ix = [slice(None)] * x.ndim
    ix[axis] = slice(start, end, step)
    return x[tuple(ix)]


defop("slice", narrow=True, inputs=("x",),
      attrs={"axis": Attr("int", doc="axis to slice"),
             "start": Attr("intlike", 0, "first index (negative counts from the end)"),
             "end": Attr("intlike", BIG, "one past the last index; >= 2**62 means the end"),
             "step": Attr("int", 1, "stride, may be negative")},
      infer=_slice_infer, reference=_slice_ref, kind="injective",
      doc="x[start:end:step] along one axis (Python slice semantics).")


# ---------------------------------------------------------------------------
# unsqueeze / squeeze / flatten
# ---------------------------------------------------------------------------


def _unsqueeze_infer(ctx, x, *, axes):
    r = x.rank + len(axes)
    ax = sorted(norm_axis(ctx, a, r) for a in axes)
    if len(set(ax)) != len(ax):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    out = list(x.shape)
    for a in ax:
        out.insert(a, 1)
    return TensorType(x.dtype, tuple(out))


def _unsqueeze_ref(ctx, x, *, axes):
    r = x.ndim + len(axes)
    return np.expand_dims(x, tuple(sorted(a % r for a in axes)))


defop("unsqueeze", narrow=True, inputs=("x",), attrs={"axes": Attr("ints", doc="positions of the new dims in the output")},
      infer=_unsqueeze_infer, reference=_unsqueeze_ref, kind="injective",
      doc="Insert size-1 dims.")


def _squeeze_infer(ctx, x, *, axes):
    if axes is None:
        keep = []
        for d in x.shape:
            if isinstance(d, int):
                if d != 1:
                    keep.append(d)
                continue
            lo, hi = ctx.constraints.bounds(d)
            if lo <= 1 <= hi:
                raise ctx.error(f"squeeze without axes on {x} is ambiguous: dim {d} may be 1 at run time",
                                hint="pass the axes to squeeze explicitly")
            keep.append(d)
        return TensorType(x.dtype, tuple(keep))
    ax = {norm_axis(ctx, a, x.rank) for a in axes}
    out = []
    for i, d in enumerate(x.shape):
        if i in ax:
            _require_equal(ctx, d, 1, "squeezed dim", msg=f"cannot squeeze dim {i} of {x}: its size is {d}, not 1")
            continue
        out.append(ctx.simplify(d))
    return TensorType(x.dtype, tuple(out))


def _squeeze_ref(ctx, x, *, axes):
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(sorted({a % x.ndim for a in axes})))


defop("squeeze", narrow=True, inputs=("x",), attrs={"axes": Attr("ints", None, "dims to drop (must be 1); None: all 1s")},
      infer=_squeeze_infer, reference=_squeeze_ref, kind="injective",
      doc="Remove size-1 dims.")


def _flatten_infer(ctx, x, *, start_axis, end_axis):
    if x.rank == 0:
        return TensorType(x.dtype, (1,))
    s = norm_axis(ctx, start_axis, x.rank)
    e = norm_axis(ctx, end_axis, x.rank)
    if e < s:
        raise ctx.error(f"end_axis {end_axis} comes before start_axis {start_axis} for {x}")
    out = x.shape[:s] + (S.prod(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return TensorType(x.dtype, out)


def _flatten_ref(ctx, x, *, start_axis, end_axis):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_axis % x.ndim, end_axis % x.ndim
    return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:]) if x.size else \
        x.reshape(x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:])


defop("flatten", narrow=True, inputs=("x",), attrs={"start_axis": Attr("int", 1), "end_axis": Attr("int", -1)},
      infer=_flatten_infer, reference=_flatten_ref, kind="injective",
      doc="Merge dims start_axis..end_axis (inclusive) into one.")


# ---------------------------------------------------------------------------
# pad / tile
# ---------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge")


def _pad_infer(ctx, x, *, pads, mode, value):
    if mode not in _PAD_MODES:
        raise ctx.error(f"unknown mode {mode!r}; expected one of {', '.join(_PAD_MODES)}")
    r = x.rank
    if len(pads) != 2 * r:
        raise ctx.error(f"pads has {len(pads)} entries; {x} needs {2 * r} (all begins, then all ends)")
    out = []
    for i, d in enumerate(x.shape):
        b, e = pads[i], pads[r + i]
        if mode != "constant" and any(isinstance(p, int) and p < 0 for p in (b, e)):
            raise ctx.error(f"negative pads {list(pads)} are only allowed in constant mode")
        n = ctx.simplify(S.add(S.add(d, b), e))
        if isinstance(n, int) and n < 0:
            raise ctx.error(f"pads {list(pads)} crop dim {i} of {x} below zero")
        if mode == "reflect" and isinstance(d, int):
            for p in (b, e):
                if isinstance(p, int) and p > 0 and p >= d:  # a zero pad of an empty dim reads nothing
                    raise ctx.error(f"reflect padding {p} must be smaller than dim {i} of size {d}")
        out.append(n)
    return TensorType(x.dtype, tuple(out))


def _pad_ref(ctx, x, *, pads, mode, value):
    r = x.ndim
    begins, ends = pads[:r], pads[r:]
    # negative pads crop first
    ix = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[ix]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if not widths:  # 0-d: nothing to pad (np.pad takes no empty widths)
        return x.copy()
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, widths, mode=mode)


defop("pad", inputs=("x",),
      attrs={"pads": Attr("intlikes", doc="all begins, then all ends; negative crops (constant mode)"),
             "mode": Attr("str", "constant", "constant | reflect | edge"),
             "value": Attr("float", 0.0, "fill value in constant mode")},
      infer=_pad_infer, reference=_pad_ref, kind="injective",
      doc="Pad every dim (ONNX Pad layout).")


def _tile_infer(ctx, x, *, repeats):
    shape = x.shape
    reps = tuple(repeats)
    if len(reps) < len(shape):
        reps = (1,) * (len(shape) - len(reps)) + reps
    elif len(reps) > len(shape):
        shape = (1,) * (len(reps) - len(shape)) + shape
    for r in reps:
        if isinstance(r, int) and r < 0:
            raise ctx.error(f"repeats {list(repeats)} has a negative entry")
    return TensorType(x.dtype, tuple(ctx.simplify(S.mul(d, r)) for d, r in zip(shape, reps)))


def _tile_ref(ctx, x, *, repeats):
    return np.tile(x, tuple(repeats))


defop("tile", narrow=True, inputs=("x",), attrs={"repeats": Attr("intlikes", doc="per dim (numpy.tile)")},
      infer=_tile_infer, reference=_tile_ref, kind="injective",
      doc="Repeat the whole tensor along each dim (numpy.tile).")
