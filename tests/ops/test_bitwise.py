"""Bitwise ops (braze.ops.bitwise): the reference against torch eager and against ONNX's BitShift rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braze.errors import ShapeError

INTS = ["int64", "int32", "int16", "int8", "uint8"]
TORCH = {"bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
         "bitshift_left": torch.bitwise_left_shift, "bitshift_right": torch.bitwise_right_shift}


def _ints(rng, shape, dtype, lo=None, hi=None):
    info = np.iinfo(np.dtype(dtype))
    return rng.integers(info.min if lo is None else lo, info.max if hi is None else hi, size=shape, dtype=dtype,
                        endpoint=True)


@pytest.mark.parametrize("op", sorted(TORCH))
@pytest.mark.parametrize("dtype", INTS)
def test_binary_vs_torch(T, rng, op, dtype):
    m, _ = T.build(op, ["b s", "s"], [dtype, dtype])
    for bs, s in T.SIZES:
        a = _ints(rng, (bs, s), dtype)
        # shift amounts: in range, negative, the width and past it
        b = _ints(rng, (s,), dtype, lo=(-70 if dtype != "uint8" else 0), hi=(127 if dtype == "int8" else 140)) \
            if op.startswith("bitshift") else _ints(rng, (s,), dtype)
        T.check(T.run(m, a, b), TORCH[op](T.to_torch(a), T.to_torch(b)), what=f"{op} {dtype} {bs}x{s}")


@pytest.mark.parametrize("dtype", [*INTS, "bool"])
def test_not_vs_torch(T, rng, dtype):
    m, _ = T.build("bitwise_not", ["b s"], [dtype])
    for bs, s in T.SIZES:
        a = _ints(rng, (bs, s), dtype) if dtype != "bool" else rng.random((bs, s)) < 0.5
        T.check(T.run(m, a), torch.bitwise_not(T.to_torch(a)), what=f"{dtype} {bs}x{s}")


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_shifts_drop_what_passes_the_width(T, dtype):
    bits = np.dtype(dtype).itemsize * 8
    a = np.array([1, 3, np.iinfo(dtype).max, 2 ** (bits - 1)], dtype)
    b = np.array([bits - 1, 1, bits, 1], dtype)
    ml, _ = T.build("bitshift_left", ["n", "n"], [dtype, dtype])
    mr, _ = T.build("bitshift_right", ["n", "n"], [dtype, dtype])
    np.testing.assert_array_equal(T.run(ml, a, b), np.array([2 ** (bits - 1), 6, 0, 0], dtype))
    np.testing.assert_array_equal(T.run(mr, a, b), np.array([0, 1, 0, 2 ** (bits - 2)], dtype))


def test_signed_shift_edges_follow_onnx(T):
    # ONNX BitShift-28: out-of-range amounts leave the sign's fill; a left shift drops bits past the sign
    def run(op, a, b):
        m, _ = T.build(op, ["n", "n"], ["int8", "int8"])
        return T.run(m, np.array(a, np.int8), np.array(b, np.int8))

    np.testing.assert_array_equal(run("bitshift_right", [-8, -8, 8, -1], [1, 8, -1, 7]), [-4, -1, 0, -1])
    np.testing.assert_array_equal(run("bitshift_left", [64, -1, 1, 3], [1, 7, 8, -2]), [-128, -128, 0, 0])


def test_bitcast_keeps_the_bits(T, rng):
    x = np.array([1.0, -0.0, np.inf, np.nan, 1e-45], np.float32)
    m, _ = T.build("bitcast", ["n"], ["float32"], dtype="int32")
    np.testing.assert_array_equal(T.run(m, x), x.view(np.int32))
    m, _ = T.build("bitcast", [""], ["uint64"], dtype="float64")
    np.testing.assert_array_equal(T.run(m, np.array(2 ** 63, np.uint64)).view(np.uint64), np.uint64(2 ** 63))


@pytest.mark.parametrize("op,dtypes,attrs,match", [
    ("bitwise_and", ["float32", "int32"], {}, "needs integer or bool"),
    ("bitshift_left", ["bool", "bool"], {}, "needs integer inputs"),
    ("bitcast", ["float32"], {"dtype": "int64"}, "widths differ"),
    ("bitcast", ["uint8"], {"dtype": "bool"}, "no bool"),
    ("bitcast", ["float16"], {"dtype": "int16"}, "float16"),
])
def test_infer_errors(T, op, dtypes, attrs, match):
    with pytest.raises(ShapeError, match=match):
        T.build(op, ["n"] * len(dtypes), dtypes, **attrs)
