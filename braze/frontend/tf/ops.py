"""The TF ops braze converts: TF op name -> function(TFNode) -> output tensors (TVs).

Most write the op as ONNX ops run through braze's ONNX converters (``node.onnx``); convolutions
and pools stay NHWC in the model (a transpose each side, which the channels_last pass cancels).
"""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from ..onnx.common import TV, is_symbolic_array, to_onnx_dtype

TF_OPS: dict = {}
BIG = np.iinfo(np.int64).max  # a slice bound past either end


def tf_op(*names):
    def deco(fn):
        for n in names:
            TF_OPS[n] = fn
        return fn
    return deco


def _rank(t: TV) -> int:
    return len(t.shape)


# --- graph plumbing ------------------------------------------------------------------------
@tf_op("Const")
def _const(n):
    a = n.attr("value")
    dt = n.attr("dtype")
    if dt is None:
        raise n.unsupported(f"its dtype {n.nd.attr['dtype'].type} has no braze type")
    return n.const(a, dt)


@tf_op("Identity", "StopGradient", "PreventGradient", "Snapshot", "EnsureShape", "CheckNumerics")
def _identity(n):
    return n.inputs[0]


@tf_op("IdentityN")
def _identity_n(n):
    return list(n.inputs)


@tf_op("NoOp", "Assert")
def _nothing(n):
    return []


# --- elementwise ---------------------------------------------------------------------------
_BINARY = {"AddV2": "Add", "Add": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "Div", "Maximum": "Max",
           "Minimum": "Min", "Pow": "Pow", "Equal": "Equal", "Less": "Less", "LessEqual": "LessOrEqual",
           "Greater": "Greater", "GreaterEqual": "GreaterOrEqual", "LogicalAnd": "And", "LogicalOr": "Or"}


@tf_op(*_BINARY)
def _binary(n):
    return n.onnx1(_BINARY[n.op], *n.inputs)


@tf_op("Div")
def _div(n):
    return _floordiv(n) if not n.inputs[0].dtype.is_float else n.onnx1("Div", *n.inputs)


@tf_op("FloorDiv")
def _floordiv(n):
    a, b = n.inputs
    if a.dtype.is_float:
        return n.onnx1("Floor", n.onnx1("Div", a, b))
    if a.known is not None and b.known is not None:  # shape arithmetic: symbolic floor division
        out = np.empty(np.broadcast_shapes(a.known.shape, b.known.shape), dtype=object)
        for idx, (x, y) in zip(np.ndindex(out.shape), np.broadcast(a.known, b.known)):
            out[idx] = S.floordiv(_int(x), _int(y))
        return n.const(out, a.dtype)
    # a // b == trunc(a / b) - (a mod b - fmod(a, b)) / b: the remainders differ by 0 or b, so
    # nothing overflows at the dtype's minimum, as (a - a mod b) / b did
    step = n.onnx1("Sub", n.onnx1("Mod", a, b, fmod=0), n.onnx1("Mod", a, b, fmod=1))
    return n.onnx1("Sub", n.onnx1("Div", a, b), n.onnx1("Div", step, b))


def _int(x):
    return x if isinstance(x, S.SymExpr) else int(x)


@tf_op("FloorMod")
def _floormod(n):
    return n.onnx1("Mod", *n.inputs, fmod=0)  # the sign of the divisor, for floats too


@tf_op("TruncateMod")
def _truncatemod(n):
    return n.onnx1("Mod", *n.inputs, fmod=1)  # C's fmod: the sign of the dividend


@tf_op("NotEqual")
def _not_equal(n):
    return n.onnx1("Not", n.onnx1("Equal", *n.inputs))


@tf_op("SquaredDifference")
def _squared_difference(n):
    d = n.onnx1("Sub", *n.inputs)
    return n.onnx1("Mul", d, d)


@tf_op("AddN")
def _add_n(n):
    out = n.inputs[0]
    for x in n.inputs[1:]:
        out = n.onnx1("Add", out, x)
    return out


@tf_op("BiasAdd")
def _bias_add(n):
    x, b = n.inputs
    if n.attr("data_format", "NHWC") == "NCHW" and _rank(x) > 2:
        b = n.onnx1("Reshape", b, n.const([-1] + [1] * (_rank(x) - 2), DType.int64))
    return n.onnx1("Add", x, b)


_UNARY = {"Neg": "Neg", "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Reciprocal": "Reciprocal", "Inv": "Reciprocal",
          "Tanh": "Tanh", "Sigmoid": "Sigmoid", "Relu": "Relu", "Elu": "Elu", "Selu": "Selu", "Softplus": "Softplus",
          "Erf": "Erf", "Abs": "Abs", "Floor": "Floor", "Ceil": "Ceil", "Round": "Round", "Sign": "Sign",
          "Sin": "Sin", "Cos": "Cos", "IsNan": "IsNaN", "LogicalNot": "Not"}


@tf_op(*_UNARY)
def _unary(n):
    return n.onnx1(_UNARY[n.op], n.inputs[0])


@tf_op("Rsqrt")
def _rsqrt(n):
    return n.onnx1("Reciprocal", n.onnx1("Sqrt", n.inputs[0]))


@tf_op("Square")
def _square(n):
    return n.onnx1("Mul", n.inputs[0], n.inputs[0])


@tf_op("Erfc")
def _erfc(n):
    return n.graph1("erfc", n.inputs[0])  # 1 - erf(x) cancels: 0 at 7.5 (TF: 2.8e-26), 3e-3 off at 3


@tf_op("Relu6")
def _relu6(n):
    x = n.inputs[0]
    return n.onnx1("Clip", x, n.const(np.zeros((), x.dtype.numpy), x.dtype), n.const(np.full((), 6, x.dtype.numpy), x.dtype))


@tf_op("LeakyRelu")
def _leaky_relu(n):
    return n.onnx1("LeakyRelu", n.inputs[0], alpha=float(n.attr("alpha", 0.2)))


@tf_op("ClipByValue")
def _clip(n):
    return n.onnx1("Clip", *n.inputs)


@tf_op("Cast")
def _cast(n):
    to = n.attr("DstT")
    if to is None:
        raise n.unsupported("its destination type has no braze type")
    return n.onnx1("Cast", n.inputs[0], to=to_onnx_dtype(to))


@tf_op("Select", "SelectV2")
def _select(n):
    c, x, y = n.inputs
    if n.op == "Select" and _rank(c) == 1 and _rank(x) > 1:  # a condition per row
        c = n.onnx1("Reshape", c, n.const([-1] + [1] * (_rank(x) - 1), DType.int64))
    return n.onnx1("Where", c, x, y)


# --- linear algebra ------------------------------------------------------------------------
def _swap_last(n, t: TV) -> TV:
    perm = list(range(_rank(t)))
    perm[-2:] = perm[-1], perm[-2]
    return n.onnx1("Transpose", t, perm=perm)


def _as(n, t: TV, to) -> TV:
    """``t`` cast to the DType ``to`` (None: as it is)."""
    return t if to is None or to is t.dtype else n.onnx1("Cast", t, to=to_onnx_dtype(to))


@tf_op("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _matmul(n):
    a, b = n.inputs
    swap_a, swap_b = ("transpose_a", "transpose_b") if n.op == "MatMul" else ("adj_x", "adj_y")
    if n.attr(swap_a, False):
        a = _swap_last(n, a)
    if n.attr(swap_b, False):
        b = _swap_last(n, b)
    return _as(n, n.onnx1("MatMul", a, b), n.attr("Tout"))


@tf_op("Einsum")
def _einsum(n):
    return n.onnx1("Einsum", *n.inputs, equation=n.attr("equation"))


# --- shapes and indexing -------------------------------------------------------------------
@tf_op("Shape", "Size")
def _shape(n):
    return _as(n, n.onnx1(n.op, n.inputs[0]), n.attr("out_type", DType.int32))


@tf_op("Rank")
def _rank_op(n):
    return n.const(np.int32(_rank(n.inputs[0])))


@tf_op("Reshape")
def _reshape(n):
    x, shape = n.inputs
    return n.onnx1("Reshape", x, shape if shape.dtype is DType.int64 else n.onnx1("Cast", shape, to=7), allowzero=1)


@tf_op("Transpose")
def _transpose(n):
    perm = [int(p) for p in n.known(1).reshape(-1)]
    return n.onnx1("Transpose", n.inputs[0], perm=perm)


def _axes(n, t: TV) -> TV:
    return t if t.dtype is DType.int64 else n.onnx1("Cast", t, to=7)


@tf_op("ExpandDims")
def _expand_dims(n):
    x, axis = n.inputs
    a = int(n.known(1).reshape(-1)[0])
    if a < 0:
        a += _rank(x) + 1  # TF counts a negative axis in the output's rank
    return n.onnx1("Unsqueeze", x, n.const([a], DType.int64))


@tf_op("Squeeze")
def _squeeze(n):
    dims = n.attr("squeeze_dims", [])
    return n.onnx1("Squeeze", n.inputs[0], n.const(dims, DType.int64) if dims else None)


@tf_op("ConcatV2")
def _concat(n):
    axis = int(n.known(len(n.inputs) - 1).reshape(-1)[0])
    return n.onnx1("Concat", *n.inputs[:-1], axis=axis)


@tf_op("Pack")
def _pack(n):
    axis = int(n.attr("axis", 0))
    if axis < 0:
        axis += _rank(n.inputs[0]) + 1
    ax = n.const([axis], DType.int64)
    parts = [n.onnx1("Unsqueeze", x, ax) for x in n.inputs]
    return parts[0] if len(parts) == 1 else n.onnx1("Concat", *parts, axis=axis)


@tf_op("Unpack")
def _unpack(n):
    x = n.inputs[0]
    axis = int(n.attr("axis", 0)) % _rank(x)
    num = int(n.attr("num"))
    ax = n.const([axis], DType.int64)
    parts = n.onnx("Split", [x], outputs=num, axis=axis, num_outputs=num) if num > 1 else [x]
    return [n.onnx1("Squeeze", p, ax) for p in parts]


@tf_op("GatherV2")
def _gather(n):
    x, idx, axis = n.inputs
    if int(n.attr("batch_dims", 0)) != 0:
        raise n.unsupported("batch_dims other than 0 is not supported")
    # TF refuses a negative index, where ONNX's Gather counts it from the end: it becomes one past
    # any axis, which Gather's run-time check refuses as out of range
    idx = _axes(n, idx)
    idx = n.onnx1("Where", n.onnx1("Less", idx, n.const(np.int64(0))), n.const(np.int64(2 ** 62)), idx)
    return n.onnx1("Gather", x, idx, axis=int(n.known(2).reshape(-1)[0]))


@tf_op("Fill")
def _fill(n):
    dims, value = n.inputs
    return n.onnx1("Expand", value, _axes(n, dims))


@tf_op("ZerosLike", "OnesLike")
def _like(n):
    x = n.inputs[0]
    v = n.const(np.full((), 0 if n.op == "ZerosLike" else 1, x.dtype.numpy), x.dtype)
    return n.onnx1("Expand", v, n.onnx1("Shape", x))


@tf_op("BroadcastTo")
def _broadcast_to(n):
    return n.onnx1("Expand", n.inputs[0], _axes(n, n.inputs[1]))


@tf_op("Range")
def _range(n):
    return n.onnx1("Range", *n.inputs)


@tf_op("Tile")
def _tile(n):
    return n.onnx1("Tile", n.inputs[0], _axes(n, n.inputs[1]))


@tf_op("Slice")
def _slice(n):
    x = n.inputs[0]
    begin = list(n.known(1).reshape(-1))
    size = list(n.known(2).reshape(-1))
    ends = [BIG if not isinstance(s, S.SymExpr) and int(s) == -1 else S.add(_int(b), _int(s))
            for b, s in zip(begin, size)]
    return n.onnx1("Slice", x, n.const(np.array([_int(b) for b in begin], dtype=object), DType.int64),
                   n.const(np.array(ends, dtype=object), DType.int64),
                   n.const(list(range(len(begin))), DType.int64))


@tf_op("StridedSlice")
def _strided_slice(n):
    """TF's five masks as one ONNX Slice over the spec's axes, then the new axes and the shrunk ones."""
    x = n.inputs[0]
    begin, end, strides = (list(n.known(i).reshape(-1)) for i in (1, 2, 3))
    masks = {k: int(n.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                            "shrink_axis_mask")}
    rank = _rank(x)
    spec_new = [i for i in range(len(begin)) if masks["new_axis_mask"] >> i & 1]
    ellipsis = [i for i in range(len(begin)) if masks["ellipsis_mask"] >> i & 1]
    if len(ellipsis) > 1:
        raise n.unsupported("more than one ellipsis")
    # each spec entry's input axis (None for a new axis); an ellipsis covers the axes no entry names
    covered = len(begin) - len(spec_new) - len(ellipsis)
    axis_of, axis = [], 0
    for i in range(len(begin)):
        if i in ellipsis:
            axis += rank - covered
            axis_of.append(None)
        elif i in spec_new:
            axis_of.append(None)
        else:
            axis_of.append(axis)
            axis += 1
    starts, ends, steps, axes, shrink = [], [], [], [], []
    for i, ax in enumerate(axis_of):
        if ax is None:
            continue
        b, e, s = _int(begin[i]), _int(end[i]), _int(strides[i])
        if isinstance(s, S.SymExpr) or s == 0:
            raise n.unsupported("its strides must be known non-zero numbers")
        if masks["shrink_axis_mask"] >> i & 1:
            # one index: [b, b + 1) (b = -1 ends at the end)
            e = BIG if not isinstance(b, S.SymExpr) and b == -1 else S.add(b, 1)
            s = 1
            shrink.append(ax)
        else:
            if masks["begin_mask"] >> i & 1:
                b = 0 if s > 0 else BIG
            if masks["end_mask"] >> i & 1:
                e = BIG if s > 0 else -BIG
        starts.append(b)
        ends.append(e)
        steps.append(s)
        axes.append(ax)
    out = x
    if axes:
        out = n.onnx1("Slice", x, n.const(np.array(starts, dtype=object), DType.int64),
                      n.const(np.array(ends, dtype=object), DType.int64), n.const(axes, DType.int64),
                      n.const(steps, DType.int64))
    if shrink:
        out = n.onnx1("Squeeze", out, n.const(shrink, DType.int64))
    if spec_new:
        # each new axis's place in the output: the entries before it that stay axes
        places, pos = [], 0
        for i, ax in enumerate(axis_of):
            if i in spec_new:
                places.append(pos)
                pos += 1
            elif i in ellipsis:
                pos += rank - covered
            elif not masks["shrink_axis_mask"] >> i & 1:
                pos += 1
        out = n.onnx1("Unsqueeze", out, n.const(places, DType.int64))
    return out


@tf_op("ReverseV2")
def _reverse(n):
    x = n.inputs[0]
    axes = sorted({int(a) % _rank(x) for a in n.known(1).reshape(-1)})
    if not axes:
        return x
    k = len(axes)
    return n.onnx1("Slice", x, n.const([-1] * k, DType.int64), n.const([-BIG] * k, DType.int64),
                   n.const(axes, DType.int64), n.const([-1] * k, DType.int64))


@tf_op("Split")
def _split(n):
    axis_t, x = n.inputs
    axis = int(n.known(0).reshape(-1)[0])
    num = int(n.attr("num_split"))
    return n.onnx("Split", [x], outputs=num, axis=axis, num_outputs=num) if num > 1 else [x]


@tf_op("SplitV")
def _split_v(n):
    x, sizes, _ = n.inputs
    axis = int(n.known(2).reshape(-1)[0])
    return n.onnx("Split", [x, _axes(n, sizes)], outputs=int(n.attr("num_split")), axis=axis)


@tf_op("Pad", "PadV2", "MirrorPad")
def _pad(n):
    x, pads = n.inputs[:2]
    p = n.known(1)
    flat = n.const(np.concatenate([p[:, 0], p[:, 1]]).astype(object) if is_symbolic_array(p) else
                   np.concatenate([p[:, 0], p[:, 1]]), DType.int64)
    if n.op == "MirrorPad":
        mode = n.attr("mode", "REFLECT")
        if mode != "REFLECT":
            raise n.unsupported(f"mode {mode} is not supported (REFLECT is)")
        return n.onnx1("Pad", x, flat, mode="reflect")
    value = n.inputs[2] if len(n.inputs) > 2 else None
    return n.onnx1("Pad", x, flat, value, mode="constant")


# --- reductions ----------------------------------------------------------------------------
_REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax", "Min": "ReduceMin", "Prod": "ReduceProd"}


@tf_op(*_REDUCE)
def _reduce(n):
    x, axes = n.inputs
    return n.onnx1(_REDUCE[n.op], x, _axes(n, axes), keepdims=int(bool(n.attr("keep_dims", False))),
                   noop_with_empty_axes=1)


@tf_op("ArgMax", "ArgMin")
def _arg(n):
    x = n.inputs[0]
    axis = int(n.known(1).reshape(-1)[0])
    return _as(n, n.onnx1(n.op, x, axis=axis, keepdims=0), n.attr("output_type", DType.int64))


@tf_op("Softmax", "LogSoftmax")
def _softmax(n):
    return n.onnx1(n.op, n.inputs[0], axis=-1)


@tf_op("Cumsum")
def _cumsum(n):
    return n.onnx1("CumSum", n.inputs[0], n.inputs[1], exclusive=int(bool(n.attr("exclusive", False))),
                   reverse=int(bool(n.attr("reverse", False))))


@tf_op("TopKV2")
def _topk(n):
    x, k = n.inputs
    values, indices = n.onnx("TopK", [x, n.onnx1("Reshape", _axes(n, k), n.const([1], DType.int64))], outputs=2,
                             axis=-1, largest=1, sorted=1)
    return [values, _as(n, indices, n.attr("index_type", DType.int32))]


# --- convolution, pooling, batch norm (NHWC) -----------------------------------------------
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _nhwc(n) -> bool:
    fmt = n.attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise n.unsupported(f"data_format {fmt} is not supported (NHWC and NCHW are)")
    return fmt == "NHWC"


def _spatial(n, name: str, nhwc: bool) -> list[int]:
    v = [int(x) for x in n.attr(name, [1, 1, 1, 1])]
    return v[1:3] if nhwc else v[2:4]


def _padding(n, nhwc: bool) -> dict:
    pad = n.attr("padding", "VALID")
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}  # TF puts the odd pixel at the end, as SAME_UPPER does
    if pad == "VALID":
        return {"auto_pad": "VALID"}
    if pad == "EXPLICIT":
        p = [int(x) for x in n.attr("explicit_paddings", [])]
        hw = p[2:6] if nhwc else p[4:8]  # (before, after) per dim, NHWC or NCHW
        return {"pads": [hw[0], hw[2], hw[1], hw[3]]}
    raise n.unsupported(f"padding {pad} is not supported")


def _conv(n, w: np.ndarray, group: int):
    nhwc = _nhwc(n)
    x = n.inputs[0]
    if nhwc:
        x = n.onnx1("Transpose", x, perm=_TO_NCHW)
    y = n.onnx1("Conv", x, n.const(np.ascontiguousarray(w)), strides=_spatial(n, "strides", nhwc),
                dilations=_spatial(n, "dilations", nhwc), group=group, **_padding(n, nhwc))
    return n.onnx1("Transpose", y, perm=_TO_NHWC) if nhwc else y


@tf_op("Conv2D")
def _conv2d(n):
    w = n.known(1)  # [kh, kw, in / groups, out]
    c = n.inputs[0].shape[-1 if _nhwc(n) else 1]
    if isinstance(c, S.SymExpr):
        raise n.unsupported("its input channels must be static")
    return _conv(n, w.transpose(3, 2, 0, 1), int(c) // w.shape[2])


@tf_op("DepthwiseConv2dNative")
def _depthwise(n):
    w = n.known(1)  # [kh, kw, in, multiplier]: output channel c * multiplier + m
    kh, kw, c, m = w.shape
    return _conv(n, w.transpose(2, 3, 0, 1).reshape(c * m, 1, kh, kw), c)


@tf_op("MaxPool", "AvgPool")
def _pool(n):
    nhwc = _nhwc(n)
    x = n.inputs[0]
    if nhwc:
        x = n.onnx1("Transpose", x, perm=_TO_NCHW)
    kind = "MaxPool" if n.op == "MaxPool" else "AveragePool"
    extra = {"count_include_pad": 0} if kind == "AveragePool" else {}
    y = n.onnx1(kind, x, kernel_shape=_spatial(n, "ksize", nhwc), strides=_spatial(n, "strides", nhwc),
                **_padding(n, nhwc), **extra)
    return n.onnx1("Transpose", y, perm=_TO_NHWC) if nhwc else y


@tf_op("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _batch_norm(n):
    if n.attr("is_training", False):
        raise n.unsupported("is_training=True (a training graph) is not supported",
                            hint="trace the model with training=False")
    x = n.inputs[0]
    scale, offset, mean, var = (n.known(i).astype(np.float64) for i in range(1, 5))
    s = scale / np.sqrt(var + float(n.attr("epsilon", 1e-3)))
    t = offset - mean * s
    shape = [-1] if _nhwc(n) else [-1, 1, 1]
    dt = x.dtype
    y = n.onnx1("Add", n.onnx1("Mul", x, n.const(s.reshape(shape).astype(dt.numpy), dt)),
                n.const(t.reshape(shape).astype(dt.numpy), dt))
    return [y, None, None, None, None, None]


def supported_ops() -> list[str]:
    return sorted(TF_OPS)


__all__ = ["TF_OPS", "supported_ops"]
