"""Proposers of the shape and index ops (reshape, permute, expand, concat, split, slice, squeeze,
unsqueeze, flatten, pad, tile, gather, index_add/index_put, tril/triu, resize, topk): the views and data
movement of the graph, split from proposers.py, whose table (``PROPOSERS``) lists them."""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ir.types import TensorType
from .common import BOOL, F32, I32, I64, Reject
from .operands import dtype_of, props, shape_of




def _factors(d):
    if isinstance(d, int):
        out, p, n = [], 2, d
        while n > 1 and p <= n:
            while n % p == 0:
                out.append(p)
                n //= p
            p += 1
        return out if d != 0 else [0]
    return [d]


def p_reshape(gen, op):
    x = gen.pick(lambda g: True)
    atoms = [f for d in shape_of(x) for f in _factors(d)]
    gen.rng.shuffle(atoms) if gen.rng.random() < 0.3 else None
    dims, cur = [], 1
    for a in atoms:
        cur = S.mul(cur, a)
        if gen.rng.random() < 0.5:
            dims.append(cur)
            cur = 1
    if cur != 1 or not dims:
        dims.append(cur)
    for _ in range(int(gen.rng.integers(0, 2))):
        dims.insert(int(gen.rng.integers(0, len(dims) + 1)), 1)
    gen.emit(op, [x], {"shape": tuple(dims)})


def p_permute(gen, op):
    x = gen.pick(lambda g: g.t.rank >= 2)
    r = len(shape_of(x))
    perm = [int(i) for i in gen.rng.permutation(r)]
    gen.emit(op, [x], {"perm": tuple(p - r if gen.rng.random() < 0.2 else p for p in perm)})


def p_expand(gen, op):
    x = gen.pick(lambda g: any(d == 1 for d in g.shape) or gen.rng.random() < 0.3)
    shape = [gen.dim() if (isinstance(d, int) and d == 1 and gen.rng.random() < 0.7) else
             (-1 if gen.rng.random() < 0.2 else d) for d in shape_of(x)]
    lead = [gen.dim() for _ in range(int(gen.choice([0, 0, 1, 2])))]
    gen.emit(op, [x], {"shape": tuple(lead + shape)})


def _with_axis(gen, x):
    """``x``, its shape and a random axis of it (rejects a 0-d ``x``)."""
    sx = shape_of(x)
    if not sx:
        raise Reject("rank 0")
    return x, sx, int(gen.rng.integers(0, len(sx)))


def p_concat(gen, op):
    x, sx, ax = _with_axis(gen, gen.pick(lambda g: g.t.rank >= 1,
                                         fresh_type=TensorType(F32, gen.shape(int(gen.rng.integers(1, 4))))))
    sx = list(sx)
    ins = [x]
    for _ in range(int(gen.rng.integers(1, 3))):
        sh = list(sx)
        sh[ax] = gen.dim(allow_zero=True)
        got = gen.pick(lambda g: g.t.rank == len(sx) and g.dtype == dtype_of(x) and all(
            i == ax or gen.module.constraints.equal(p, q) is True for i, (p, q) in enumerate(zip(g.shape, sx))),
            fresh_type=TensorType(dtype_of(x), tuple(sh)))
        ins.append(got)
    gen.rng.shuffle(ins)
    gen.emit(op, ins, {"axis": ax - len(sx) if gen.rng.random() < 0.3 else ax})


def p_split(gen, op):
    x, sx, ax = _with_axis(gen, gen.pick(lambda g: g.t.rank >= 1))
    d = sx[ax]
    if isinstance(d, int):
        cuts = sorted(gen.rng.integers(0, d + 1, size=int(gen.rng.integers(1, 3))).tolist())
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [d])]
    else:
        k = int(gen.choice([0, 1, 2]))
        if gen.min_val(d) < k:
            raise Reject("a piece would be negative")
        sizes = [k, S.add(d, -k)] if gen.rng.random() < 0.5 else [S.add(d, -k), k]
    gen.emit(op, [x], {"axis": ax, "sizes": tuple(sizes)})


def p_slice(gen, op):
    x, sx, ax = _with_axis(gen, gen.pick(lambda g: g.t.rank >= 1))
    step = int(gen.choice([1, 1, 2, 3, -1, -2]))
    start = int(gen.choice([0, 0, 1, 2, -1, -3, 2 ** 62, -(2 ** 62)]))
    end = gen.choice([2 ** 62, 2 ** 62, -1, 1, 3, -(2 ** 62)])
    gen.emit(op, [x], {"axis": ax, "start": start, "end": int(end), "step": step})


def p_squeeze(gen, op):
    x = gen.pick(lambda g: any(isinstance(d, int) and d == 1 for d in g.shape))
    ones = [i for i, d in enumerate(shape_of(x)) if isinstance(d, int) and d == 1]
    if not ones or gen.rng.random() < 0.2:
        gen.emit(op, [x], {"axes": None})
        return
    k = int(gen.rng.integers(1, len(ones) + 1))
    gen.emit(op, [x], {"axes": tuple(sorted(gen.rng.choice(ones, size=k, replace=False).tolist()))})


def p_unsqueeze(gen, op):
    x = gen.pick(lambda g: True)
    r = len(shape_of(x)) + int(gen.rng.integers(1, 3))
    axes = gen.rng.choice(r, size=r - len(shape_of(x)), replace=False).tolist()
    gen.emit(op, [x], {"axes": tuple(int(a) for a in axes)})


def p_flatten(gen, op):
    x = gen.pick(lambda g: True)
    r = max(len(shape_of(x)), 1)
    s = int(gen.rng.integers(0, r))
    e = int(gen.rng.integers(s, r))
    gen.emit(op, [x], {"start_axis": s, "end_axis": e - r if gen.rng.random() < 0.5 else e})


def p_pad(gen, op):
    x = gen.pick(lambda g: g.t.rank >= 1)
    sx = shape_of(x)
    mode = gen.choice(["constant", "constant", "reflect", "edge"])
    r = len(sx)
    pads = [int(gen.choice([0, 0, 1, 2] + ([-1] if mode == "constant" else []))) for _ in range(2 * r)]
    for i, d in enumerate(sx):
        b, e = pads[i], pads[r + i]
        if gen.min_val(S.add(d, b + e)) < 0 or (b < 0 and gen.min_val(d) < -b) or (e < 0 and gen.min_val(d) < -e):
            raise Reject("crops below zero")
        if mode == "reflect" and max(b, e) > 0 and gen.min_val(d) <= max(b, e):
            raise Reject("reflect pad >= dim")
        if mode == "edge" and max(b, e) > 0 and gen.min_val(d) < 1:
            raise Reject("edge pad of an empty dim")
    attrs = {"pads": tuple(pads), "mode": mode}
    if mode == "constant":
        attrs["value"] = float(gen.choice([0.0, 1.0, -2.5]))
    gen.emit(op, [x], attrs)


def p_tile(gen, op):
    x = gen.pick(lambda g: g.t.rank >= 1)
    r = len(shape_of(x)) + int(gen.choice([0, 0, 1]))
    gen.emit(op, [x], {"repeats": tuple(int(gen.choice([1, 1, 2, 3, 0])) for _ in range(max(r, 1)))})


def p_gather(gen, op):
    x, sx, ax = _with_axis(gen, gen.pick(lambda g: g.t.rank >= 1))
    d = sx[ax]
    if not gen.always_pos(d):
        raise Reject("empty axis")
    if op == "gather":
        ishape = tuple(gen.dim() for _ in range(int(gen.choice([0, 1, 1, 2]))))
    else:
        ishape = tuple(gen.dim() if i == ax else (d_ if gen.rng.random() < 0.7 or not isinstance(d_, int)
                                                  else int(gen.rng.integers(1, d_ + 1)) if d_ >= 1 else d_)
                       for i, d_ in enumerate(sx))
    idx = gen.new(TensorType(gen.choice([I64, I64, I32]), ishape), index_dim=d)
    gen.emit(op, [x, idx], {"axis": ax - len(sx) if gen.rng.random() < 0.3 else ax})


def p_index_add(gen, op):
    """Rows added (index_add) or put into ``x``: written (``none``) in any dtype, as braze_scatter.h
    copies them (a bfloat16 KV cache), else multiplied, maxed or minned in in 32- and 64-bit ones."""
    reduce = gen.choice(["none", "none", "mul", "max", "min"]) if op == "index_put" else None
    any_dtype = reduce == "none"
    x, sx, ax = _with_axis(gen, gen.pick(lambda g: g.t.rank >= 1 and (any_dtype or g.dtype in (F32, I64, I32))))
    if not gen.always_pos(sx[ax]):
        raise Reject("empty axis")
    n = gen.dim()
    idx = gen.new(TensorType(gen.choice([I64, I64, I32]), (n,)), index_dim=sx[ax])
    src = gen.new(TensorType(dtype_of(x), tuple(sx[:ax]) + (n,) + tuple(sx[ax + 1:])))
    attrs = {"axis": ax - len(sx) if gen.rng.random() < 0.3 else ax}
    if op == "index_put":
        attrs["reduce"] = reduce
    gen.emit(op, [x, idx, src], attrs)


def p_tri(gen, op):
    x = gen.pick(lambda g: g.t.rank >= 2)
    gen.emit(op, [x], {"k": int(gen.choice([0, 0, 1, -1, 2, -3]))})


RESIZE_MODES = ("nearest", "nearest", "linear", "linear", "cubic")
RESIZE_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric",
                 "tf_crop_and_resize")
RESIZE_NEAREST = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def p_resize(gen, op):
    """1 to 3 trailing axes, each to a static size, the same or twice the (symbolic) input size,
    or another symbol; with scale factors sometimes (torch's scale_factor, ONNX's scales)."""
    r = gen.rng
    mode = gen.choice(RESIZE_MODES)
    x = gen.pick(lambda g: g.t.rank >= 1 and (mode == "nearest" or g.dtype.is_float),
                 fresh_type=TensorType(F32, gen.shape(int(gen.choice([3, 4, 4])))))
    sx = shape_of(x)
    if not sx:
        raise Reject("rank 0")
    k = int(r.integers(1, min(len(sx), 3) + 1))
    if any(gen.min_val(d) < 1 for d in sx[-k:]):
        raise Reject("an empty resized axis")
    with_scales = r.random() < 0.35
    sizes, scales = [], []
    for d in sx[-k:]:
        if with_scales:
            f = float(gen.choice([0.5, 1.0, 1.5, 2.0, 3.0, 0.75]))
            if isinstance(d, int):
                m = max(1, int(np.floor(d * f)))
            elif f in (1.0, 2.0, 3.0):
                m = S.mul(int(f), d)
            else:
                m = S.add(d, int(gen.choice([0, 1])))  # sizes and scales need not agree (ONNX)
            scales.append(f)
        else:
            m = gen.choice([int(gen.choice([1, 2, 3, 5, 8, 13])), d, S.mul(2, d), gen.dim()])
            if gen.min_val(m) < 1:
                raise Reject("an empty output axis")
        sizes.append(m)
    attrs = {"sizes": tuple(sizes), "mode": mode, "coord": gen.choice(RESIZE_COORDS)}
    if attrs["coord"] == "tf_crop_and_resize":  # a crop, sometimes reaching past the input
        attrs["roi"] = tuple(float(gen.choice([0.0, 0.1, -0.2])) for _ in range(k)) + \
            tuple(float(gen.choice([1.0, 0.8, 1.25])) for _ in range(k))
        attrs["extrapolation"] = float(gen.choice([0.0, -1.5]))
    if mode == "nearest":
        attrs["nearest"] = gen.choice(RESIZE_NEAREST)
    if mode == "cubic":
        attrs["cubic_a"] = float(gen.choice([-0.75, -0.5]))
        attrs["exclude_outside"] = bool(r.random() < 0.3)
    if with_scales:
        attrs["scales"] = tuple(scales)
        attrs["torch_shortcuts"] = bool(r.random() < 0.5)
    ex, _, ib = props(gen, x)
    gen.emit(op, [x], attrs, exact=ex if mode == "nearest" else False, ibound=ib)


def p_topk(gen, op):
    """k static (at most the axis at every run shape) or the whole axis. The values of an inexact
    operand are within its error (order statistics are 1-Lipschitz); its indices are not checked."""
    x = gen.pick(lambda g: g.dtype is not BOOL)
    sx = shape_of(x)
    ex, _, ib = props(gen, x)
    if not sx:
        gen.emit(op, [x], {"k": 1, "axis": int(gen.choice([0, -1]))}, exact=ex, ibound=ib)
        return
    ax = int(gen.rng.integers(-len(sx), len(sx)))
    d = sx[ax]
    lo = gen.min_val(d)
    k = d if gen.rng.random() < 0.25 else int(gen.rng.integers(0, min(lo, 6) + 1))
    attrs = {"k": k, "axis": ax, "largest": bool(gen.rng.random() < 0.6), "sorted": bool(gen.rng.random() < 0.8)}
    gen.emit(op, [x], attrs, exact=ex, ibound=max(ib, float(max(gen.evals(d)))))
