"""Bitwise ops on integers: and, or, xor, not, the two shifts, and a bit cast between dtypes of one width.

``bitwise_and/or/xor/not`` take ints and bool (on bool they are the logical ops) and promote as the
arithmetic ops do. The shifts take ints; a shift by a negative amount, or by the dtype's width or more,
gives what the sign alone gives (-1 for a right shift of a negative value, else 0), as ONNX's BitShift
(opset 28) defines it; bits shifted past a signed value's sign bit are dropped. ``bitcast`` keeps the bits
and changes the dtype (ONNX BitCast, ``torch.Tensor.view(dtype)``) between dtypes of one width.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import DType, TensorType
from .common import elementwise_infer, promote
from .opdef import Attr, defop


def _ints(ctx, *types, bool_ok=True):
    for t in types:
        if t.dtype.is_float or (t.dtype is DType.bool and not bool_ok):
            raise ctx.error(f"needs integer{' or bool' if bool_ok else ''} inputs, got {t}",
                            hint="bit operations apply to integer tensors; cast floats first, or bitcast them")


def _binary_infer(bool_ok):
    base = elementwise_infer()

    def infer(ctx, a: TensorType, b: TensorType, **_):
        _ints(ctx, a, b, bool_ok=bool_ok)
        return base(ctx, a, b)

    return infer


def _promoted(a, b):
    dt = promote(DType.from_numpy(a.dtype), DType.from_numpy(b.dtype)).numpy
    return a.astype(dt, copy=False), b.astype(dt, copy=False)


def _logic_ref(fn):
    return lambda ctx, a, b, **_: fn(*_promoted(a, b))


for _name, _fn in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                   "bitwise_xor": np.bitwise_xor}.items():
    defop(_name, inputs=("a", "b"), infer=_binary_infer(True), reference=_logic_ref(_fn), kind="elementwise",
          doc=f"a {_name.split('_')[1]} b bit by bit, broadcast (on bool: the logical op)")

defop("bitwise_not", inputs=("x",), infer=lambda ctx, x, **_: (_ints(ctx, x), x)[1],
      reference=lambda ctx, x, **_: np.invert(x), kind="elementwise",
      doc="every bit of x flipped (on bool: logical not)")


def _shift_ref(left):
    def reference(ctx, a, b, **_):
        a, b = np.broadcast_arrays(*_promoted(a, b))
        bits = a.dtype.itemsize * 8
        out = (b < 0) | (b >= bits)
        s = np.where(out, 0, b).astype(np.uint64)
        if left:  # in the unsigned type of the width: what passes the top bit is dropped
            u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
            r = np.left_shift(u.astype(np.uint64), s).astype(u.dtype).view(a.dtype)
            return np.where(out, np.zeros((), a.dtype), r)
        r = np.right_shift(a, s.astype(a.dtype))  # arithmetic for signed dtypes
        fill = np.where(a < 0, np.array(-1).astype(a.dtype), np.zeros((), a.dtype)) if a.dtype.kind == "i" \
            else np.zeros((), a.dtype)
        return np.where(out, fill, r)

    return reference


for _name, _left in {"bitshift_left": True, "bitshift_right": False}.items():
    defop(_name, inputs=("a", "b"), infer=_binary_infer(False), reference=_shift_ref(_left), kind="elementwise",
          doc=f"a shifted {'left' if _left else 'right (arithmetic on signed ints)'} by b bits, broadcast; b < 0 or "
              "b >= the width gives " + ("0" if _left else "-1 for a negative a, else 0"))


def _bitcast_infer(ctx, x: TensorType, *, dtype):
    for d in (x.dtype, dtype):
        if d in (DType.float16, DType.bfloat16):
            raise ctx.error(f"does not bit-cast {d.name} yet", hint="bitcast 32- or 64-bit floats, or ints")
    if dtype is DType.bool and x.dtype is not DType.bool:
        raise ctx.error(f"cannot bit-cast {x.dtype.name} to bool: a byte other than 0 or 1 is no bool",
                        hint="compare with 0 instead (not_equal)")
    if dtype.itemsize != x.dtype.itemsize:
        raise ctx.error(f"cannot bit-cast {x.dtype.name} ({x.dtype.itemsize * 8} bits) to {dtype.name} "
                        f"({dtype.itemsize * 8} bits): the widths differ", hint="bitcast between dtypes of one width")
    return x.with_dtype(dtype)


defop("bitcast", narrow=True, inputs=("x",), attrs={"dtype": Attr("dtype", doc="target dtype, of x's width")},
      infer=_bitcast_infer, reference=lambda ctx, x, *, dtype: np.asarray(x).view(dtype.numpy),
      kind="elementwise", doc="x's bits read as dtype (same width; not float16/bfloat16)")
