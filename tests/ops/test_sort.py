"""``topk``: the reference against torch.topk (values exactly; indices exactly wherever
values are distinct; ties in ascending index order; NaN largest), over symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from braze.errors import BrazeError, ShapeError
from braze.ir.sym import Sym
from braze.ir.types import DType


def _same(a, b):
    return a == b or (a != a and b != b)  # NaNs are equal here


def _check(T, got, x, k, axis, largest, dtype):
    v, i = got
    tv, ti = torch.topk(T.to_torch(x), k, dim=axis, largest=largest, sorted=True)
    T.check(v, tv, what="values")  # NaN positions and values agree
    assert i.dtype == np.int64
    np.testing.assert_array_equal(np.take_along_axis(x, i, axis), v)  # the indices point at the values
    xr, ir, tr = (np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis]) for a in (x, i, ti.numpy()))
    for row, idx, tidx in zip(xr, ir, tr):
        for j, p in enumerate(idx):
            ties = [q for q in range(len(row)) if _same(row[q], row[p])]
            if len(ties) == 1:
                assert p == tidx[j]  # torch's index wherever the value is unique in its row
            # equal values: the lowest indices, in ascending order (stable)
            mine = [q for q in idx if _same(row[q], row[p])]
            assert mine == ties[:len(mine)], (row, idx)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_topk_vs_torch(T, rng, dtype, largest, axis):
    k = 1 if axis == 0 else 3
    module, (v, i) = T.build("topk", ["b s 3"], [dtype], k=k, axis=axis, largest=largest)
    assert v.type.dtype is DType[dtype] and i.type.dtype is DType.int64
    for b_, s_ in [(1, 3), (2, 7), (3, 12), (5, 65)]:
        # small integers: many ties
        x = T.rand(rng, (b_, s_, 3), "int64", low=-3, high=4).astype(T.np_dtype(dtype))
        _check(T, T.run(module, x), x, k, axis, largest, dtype)
        if DType[dtype].is_float:
            x = T.rand(rng, (b_, s_, 3), dtype)
            x[rng.random(x.shape) < 0.2] = np.nan
            x[rng.random(x.shape) < 0.1] = np.inf
            _check(T, T.run(module, x), x, k, axis, largest, dtype)


def test_topk_nan_is_largest_and_ties_are_in_index_order(T):
    module, _ = T.build("topk", ["n"], ["float32"], k=Sym("n"), largest=True)
    x = np.array([1, 3, 3, np.nan, 2, 3, np.nan, -np.inf, np.inf], np.float32)
    v, i = T.run(module, x)
    np.testing.assert_array_equal(i, [3, 6, 8, 1, 2, 5, 4, 0, 7])
    module, _ = T.build("topk", ["n"], ["float32"], k=4, largest=False)
    v, i = T.run(module, x)
    np.testing.assert_array_equal(i, [7, 0, 4, 1])
    np.testing.assert_array_equal(T.run(module, np.array([np.nan] * 5, np.float32))[1], [0, 1, 2, 3])


def test_topk_k_equal_to_dim_and_errors(T):
    module, (v, _) = T.build("topk", ["b s"], ["float32"], k=Sym("s"), axis=1)
    assert v.type.shape == (Sym("b"), Sym("s"))
    module, _ = T.build("topk", ["b s"], ["float32"], k=4)
    with pytest.raises(BrazeError, match="larger than the dim"):
        T.run(module, np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match="larger than the dim"):
        T.build("topk", ["b 3"], ["float32"], k=4)
    with pytest.raises(ShapeError, match="bool"):
        T.build("topk", ["b 3"], ["bool"], k=1)
