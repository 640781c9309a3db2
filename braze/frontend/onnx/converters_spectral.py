"""ONNX's spectral ops: DFT and STFT as products with cosine and sine matrices built at import (the
transform's length must be static), and the window functions (HannWindow, HammingWindow,
BlackmanWindow) as constants of a size known at import.

A DFT of length N along an axis is ``X_k = sum_n x_n e^(-2 pi i k n / N)``: with x = a + i b,
Re X = a C + b S and Im X = b C - a S (C and S the N x K cosine and sine matrices, computed in
float64 and rounded once to the input's dtype). The inverse conjugates and divides by N; with
``onesided`` it is numpy's irfft: the bins past N/2 are the first ones' conjugates, so the interior
bins count twice and the imaginary parts of bin 0 and bin N/2 drop out. The signal is cut or
zero-padded to N first, as numpy.fft does."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .common import onnx_dtype
from .convert import converter

MAX_LENGTH = 4096  # the matrices are N x N constants: past this an FFT would be the right kernel


def _length(ctx, n, what: str) -> int:
    if S.is_symbolic(n) or not 1 <= n <= MAX_LENGTH:
        raise ctx.unsupported(f"a {what} of {n} (braze's DFT is a product with constant matrices, for static "
                              f"lengths from 1 to {MAX_LENGTH})", hint="export with a fixed signal length")
    return int(n)


def _matrices(N: int, K: int, inverse: bool, onesided: bool, dtype: DType):
    """(C, S) [N_in, K] such that Re = a C + b S, Im = b C - a S (forward), or Re = a C - b S,
    Im = b C + a S (inverse, divided by N). Onesided inverse: K = N outputs from N_in = N//2 + 1 bins."""
    if inverse and onesided:
        k = np.arange(N // 2 + 1)[:, None]
        n = np.arange(N)[None, :]
        weight = np.where((k == 0) | ((N % 2 == 0) & (k == N // 2)), 1.0, 2.0) / N
        th = 2 * np.pi * ((k * n) % N) / N
        return (weight * np.cos(th)).astype(dtype.numpy), (weight * np.sin(th)).astype(dtype.numpy)
    n = np.arange(N)[:, None]
    k = np.arange(K)[None, :]
    th = 2 * np.pi * ((n * k) % N) / N  # the product mod N keeps the angle's rounding small
    scale = 1.0 / N if inverse else 1.0
    return (scale * np.cos(th)).astype(dtype.numpy), (scale * np.sin(th)).astype(dtype.numpy)


def _fit(ctx, v, n_in: int, want: int):
    """``v`` [..., n_in] cut or zero-padded to [..., want] (its last axis)."""
    if n_in > want:
        return ctx.op("slice", v, axis=-1, start=0, end=want)
    if n_in < want:
        r = v.rank
        return ctx.op("pad", v, pads=(0,) * r + (0,) * (r - 1) + (want - n_in,), mode="constant", value=0.0)
    return v


def dft(ctx, x, axis: int, N: int, inverse: bool, onesided: bool):
    """The DFT of ``x`` ([..., 1] real or [..., 2] complex) along ``axis`` (not the last), length N."""
    r = x.rank
    c = x.shape[-1]
    if c not in (1, 2):
        raise ctx.unsupported(f"an input whose last dim is {c} (1: real, 2: complex)")
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{x.dtype.name} input", hint="DFT takes a float signal")
    if onesided and not inverse and c == 2:
        raise ctx.unsupported("onesided on a complex signal (ONNX defines it for real ones)")
    perm = tuple(i for i in range(r - 1) if i != axis) + (axis,)
    back = [0] * (r - 1)
    for i, p in enumerate(perm):
        back[p] = i

    def part(j):
        v = ctx.op("squeeze", ctx.op("slice", x, axis=r - 1, start=j, end=j + 1), axes=(r - 1,))
        return ctx.op("permute", v, perm=perm)
    n_in = _length(ctx, x.shape[axis], "signal length")
    a = part(0)
    b = part(1) if c == 2 else None
    if inverse and onesided:
        n_bins = N // 2 + 1
        C, Sn = _matrices(N, N, True, True, x.dtype)
        a = _fit(ctx, a, n_in, n_bins)
        b = _fit(ctx, b, n_in, n_bins) if b is not None else None
        re = ctx.op("matmul", a, ctx.const(C))
        if b is not None:
            re = ctx.op("sub", re, ctx.op("matmul", b, ctx.const(Sn)))
        out = [re]
    else:
        K = N // 2 + 1 if onesided else N
        C, Sn = _matrices(N, K, inverse, onesided, x.dtype)
        a = _fit(ctx, a, n_in, N)
        b = _fit(ctx, b, n_in, N) if b is not None else None
        aC, aS = ctx.op("matmul", a, ctx.const(C)), ctx.op("matmul", a, ctx.const(Sn))
        if b is None:
            re, im = aC, (aS if inverse else ctx.op("neg", aS))
        else:
            bC, bS = ctx.op("matmul", b, ctx.const(C)), ctx.op("matmul", b, ctx.const(Sn))
            re = ctx.op("sub", aC, bS) if inverse else ctx.op("add", aC, bS)
            im = ctx.op("add", bC, aS) if inverse else ctx.op("sub", bC, aS)
        out = [re, im]
    out = [ctx.op("unsqueeze", ctx.op("permute", v, perm=tuple(back)), axes=(r - 1,)) for v in out]
    return out[0] if len(out) == 1 else ctx.op("concat", *out, axis=r - 1)


@converter("DFT", attrs=("axis", "inverse", "onesided"))
def _dft(ctx):
    x = ctx.value(0)
    r = x.rank
    if ctx.version >= 20:
        axis = ctx.const_scalar(2, "axis") if ctx.tv(2) is not None else -2
    else:
        axis = ctx.attr("axis", 1)
    axis = int(axis) % r
    if axis == r - 1:
        raise ctx.unsupported("the last axis as the signal axis (it holds the real and imaginary parts)")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.tv(1) is not None:
        N = _length(ctx, int(ctx.const_scalar(1, "dft_length")), "dft_length")
    else:
        n = _length(ctx, x.shape[axis], "signal length")
        N = 2 * (n - 1) if inverse and onesided else n
    return dft(ctx, x, axis, N, inverse, onesided)


@converter("STFT", attrs=("onesided",))
def _stft(ctx):
    x = ctx.value(0)
    if x.rank != 3:
        raise ctx.unsupported(f"a signal {x.type} (STFT takes [batch, length, 1 or 2])")
    step = int(ctx.const_scalar(1, "frame_step"))
    window = ctx.value(2) if ctx.tv(2) is not None else None
    if ctx.tv(3) is not None:
        frame = int(ctx.const_scalar(3, "frame_length"))
    elif window is not None:
        frame = window.shape[0]
    else:
        frame = x.shape[1]
    frame = _length(ctx, frame, "frame length")
    length = _length(ctx, x.shape[1], "signal length")
    if step < 1 or frame > length:
        raise ctx.unsupported(f"frame_step {step} and frame_length {frame} for a signal of {length}")
    frames = [ctx.op("unsqueeze", ctx.op("slice", x, axis=1, start=f * step, end=f * step + frame), axes=(1,))
              for f in range(1 + (length - frame) // step)]
    y = frames[0] if len(frames) == 1 else ctx.op("concat", *frames, axis=1)  # [batch, frames, frame, c]
    if window is not None:
        y = ctx.op("mul", y, ctx.op("reshape", ctx.cast(window, x.dtype), shape=(frame, 1)))
    return dft(ctx, y, 2, frame, False, bool(ctx.attr("onesided", 1)))


def _window(kind: str, size: int, periodic: bool):
    n = np.arange(size, dtype=np.float64)
    N1 = size if periodic else size - 1
    th = 2 * np.pi * n / N1 if N1 else np.zeros(size)
    if kind == "HannWindow":
        return np.sin(np.pi * n / N1) ** 2 if N1 else np.zeros(size)
    if kind == "HammingWindow":
        return 25.0 / 46.0 - (21.0 / 46.0) * np.cos(th)
    return 0.42 - 0.5 * np.cos(th) + 0.08 * np.cos(2 * th)


@converter("HannWindow", "HammingWindow", "BlackmanWindow", attrs=("output_datatype", "periodic"))
def _windows(ctx):
    size = int(ctx.const_scalar(0, "size"))
    if size < 0:
        raise ctx.unsupported(f"a window of size {size}")
    dt = onnx_dtype(ctx.attr("output_datatype", 1), "output_datatype")
    return ctx.const(_window(ctx.node.op_type, size, bool(ctx.attr("periodic", 1))), dt)


@converter("MelWeightMatrix", attrs=("output_datatype",))
def _mel_weight_matrix(ctx):
    """[dft_length // 2 + 1, num_mel_bins] triangular filters, evenly spaced on the mel scale between the
    edges: a constant built at import (its inputs known there), as ONNX's reference builds it."""
    bins, length, rate = (int(ctx.const_scalar(i, what)) for i, what in
                          ((0, "num_mel_bins"), (1, "dft_length"), (2, "sample_rate")))
    lo, hi = (ctx.const_scalar(i, what) for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")))
    if bins < 1 or not 1 <= length <= MAX_LENGTH or rate < 1:
        raise ctx.unsupported(f"num_mel_bins {bins}, dft_length {length}, sample_rate {rate}",
                              hint=f"give positive values, a dft_length of at most {MAX_LENGTH}")
    # in the reference's dtypes: the edges are float32 inputs, the mel arithmetic float64 numpy scalars
    lo, hi = np.float32(lo), np.float32(hi)
    mel_lo, mel_hi = (2595 * np.log1p(e / 700) / np.log(10) for e in (lo, hi))
    points = np.arange(bins + 2) * ((mel_hi - mel_lo) / (bins + 2)) + mel_lo
    edges = ((length + 1) * (700 * np.expm1(points / 2595 * np.log(10))) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    if not 0 <= lo < hi or edges.min() < 0 or edges.max() >= out.shape[0]:
        raise ctx.unsupported(f"edges {lo} to {hi} Hz for {out.shape[0]} frequency bins at {rate} Hz",
                              hint="give 0 <= lower_edge_hertz < upper_edge_hertz <= sample_rate / 2")
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return ctx.const(out, onnx_dtype(ctx.attr("output_datatype", 1), "output_datatype"))
