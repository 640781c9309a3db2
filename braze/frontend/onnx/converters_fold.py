"""Blocks summed back into an image for any number of spatial dims (torch's fold, ONNX Col2Im), and
the transposed convolutions braze's oneDNN call does not take (3-D) as a product then such a fold.

Block row (c, tap) of grid position g lands at o = g * stride - pad_begin + tap * dilation on each
axis; where o lies in the image, the element is added there. The target of every (tap, g) is a
constant table built at import (the image, block and grid are static), with the positions outside
the image sent to one extra row that is cut off after, so the adds are one ``index_add`` of rows of
[batch, channels] in index order: the same sums every call."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType

I64 = DType.int64


def fold_blocks(ctx, cols, n, c: int, image, block, grid, strides, dil, pads):
    """cols [n, c * prod(block), prod(grid)] summed into [n, c, *image]."""
    k, length, size = int(np.prod(block)), int(np.prod(grid)), int(np.prod(image))
    rank = len(image)
    taps = np.stack(np.unravel_index(np.arange(k), block), axis=1)  # [k, rank], row-major as the rows
    at = np.stack(np.unravel_index(np.arange(length), grid), axis=1)  # [length, rank]
    o = at[None] * np.array(strides) - np.array(pads[:rank]) + taps[:, None] * np.array(dil)  # [k, length, rank]
    inside = ((o >= 0) & (o < np.array(image))).all(axis=2)
    flat = np.ravel_multi_index(tuple(np.moveaxis(np.where(inside[..., None], o, 0), 2, 0)), image)
    target = np.where(inside, flat, size)  # size: the extra row, cut off after
    rows = ctx.op("reshape", ctx.op("permute", ctx.op("reshape", cols, shape=(n, c, k, length)), perm=(2, 3, 0, 1)),
                  shape=(k * length, n, c))
    zeros = ctx.op("full", shape=(size + 1, n, c), value=0.0, dtype=cols.dtype)
    out = ctx.op("index_add", zeros, ctx.const(target.reshape(-1)), rows, axis=0)
    out = ctx.op("reshape", ctx.op("slice", out, axis=0, start=0, end=size), shape=(*image, n, c))
    return ctx.op("permute", out, perm=(rank, rank + 1, *range(rank)))


def conv_transpose_nd(ctx, x, w, strides, dil, pads, opad, group: int):
    """ConvTranspose of any rank as the product of the weight's transpose with x, folded: block row
    (co, tap) at input position l is sum over ci of w[ci, co, tap] x[ci, l] (per group)."""
    n, cin = x.shape[:2]
    spatial = list(x.shape[2:])
    rank = len(spatial)
    cout_g = w.shape[1]
    kernel = list(w.shape[2:])
    if any(S.is_symbolic(d) for d in spatial + kernel + [cin, cout_g]):
        raise ctx.unsupported(f"a {rank}-D ConvTranspose of input {x.type} (braze folds it over a static grid)",
                              hint="export with fixed spatial sizes")
    k = int(np.prod(kernel))
    image = [(spatial[i] - 1) * strides[i] - pads[i] - pads[rank + i] + dil[i] * (kernel[i] - 1) + 1 + opad[i]
             for i in range(rank)]
    if any(d < 1 for d in image):
        raise ctx.unsupported(f"an output of size {image}", hint="check pads against the kernel")
    cin_g = cin // group
    wt = ctx.op("permute", ctx.op("reshape", w, shape=(group, cin_g, cout_g * k)), perm=(0, 2, 1))  # [g, co*k, ci]
    xs = ctx.op("reshape", x, shape=(n, group, cin_g, int(np.prod(spatial))))
    cols = ctx.op("reshape", ctx.op("matmul", ctx.op("reshape", wt, shape=(1, group, cout_g * k, cin_g)), xs),
                  shape=(n, group * cout_g * k, int(np.prod(spatial))))
    return fold_blocks(ctx, cols, n, group * cout_g, image, kernel, spatial, strides, dil, pads)
