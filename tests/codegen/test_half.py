"""braze_half.h: float32 <-> bfloat16 / float16 conversions, on every path a kernel may take
(scalar, and BZ_VL lanes at each vector width, with and without F16C), against ml_dtypes.

bfloat16 results match ml_dtypes bit for bit, NaN included (its quiet NaN, with the sign).
float16 results match ml_dtypes (numpy's float16) bit for bit except NaN payloads: numpy keeps a
NaN's payload as it is, F16C (and torch on x86) sets the quiet bit; every path gives F16C's NaN.
The default suite converts a sample that reaches every exponent and every rounding case; the slow
test converts all 2^32 float32 patterns.
"""

from __future__ import annotations

import ctypes as C

import ml_dtypes
import numpy as np
import pytest

from braze.codegen import isa as isa_mod
from braze.runtime.compiler import compile_shared

_SRC = r"""
#include "braze_vec.h"

#define LOOP(NAME, T_IN, T_OUT, SCALAR, VLOAD, VSTORE)                                   \
    void NAME(const T_IN *x, T_OUT *y, int64_t n) {                                     \
        int64_t i = 0;                                                                  \
        VLOOP(VLOAD, VSTORE)                                                            \
        for (; i < n; i++) y[i] = SCALAR(x[i]);                                         \
    }
#if BZ_VB > 0
#define VLOOP(VLOAD, VSTORE) for (; i + BZ_VB / 4 <= n; i += BZ_VB / 4) VSTORE(y + i, VLOAD(x + i));
#else
#define VLOOP(VLOAD, VSTORE)
#endif

LOOP(to_bf16, float, uint16_t, bz_f32_to_bf16, bz_ld, bz_st_bf16)
LOOP(from_bf16, uint16_t, float, bz_bf16_to_f32, bz_ld_bf16, bz_st)
LOOP(to_f16, float, uint16_t, bz_f32_to_f16, bz_ld, bz_st_f16)
LOOP(from_f16, uint16_t, float, bz_f16_to_f32, bz_ld_f16, bz_st)

void to_f16_int(const float *x, uint16_t *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = bz_f32_to_f16_int(x[i]); }
void from_f16_int(const uint16_t *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] = bz_f16_to_f32_int(x[i]); }
"""


def _variants():
    """(id, cflags) for each path this host can run: scalar, each vector ISA, and AVX2 without
    F16C (the integer lanes of float16)."""
    out = [("scalar", ["-DBZ_VB=0"])]
    for level in ("sse", "avx2", "avx512"):
        lv = isa_mod.level_isa(level)
        if lv is None:
            continue
        flags = [f for f in lv.cflags if not f.startswith("-DBZ_HAVE_MVEC")]
        out.append((level, [*flags, f"-DBZ_VB={lv.vector_bytes}"]))
        if level == "avx2" and "-mf16c" in flags:
            out.append(("avx2-no-f16c", [f for f in flags if f != "-mf16c"] + ["-mno-f16c", "-DBZ_VB=32"]))
    return out


VARIANTS = _variants()


def _load(name, flags, cache_dir):
    lib = C.CDLL(str(compile_shared(_SRC, name=f"half_{name}", extra_cflags=flags, cache_dir=cache_dir)))
    for fn in ("to_bf16", "from_bf16", "to_f16", "from_f16", "to_f16_int", "from_f16_int"):
        getattr(lib, fn).argtypes = [C.c_void_p, C.c_void_p, C.c_int64]
        getattr(lib, fn).restype = None
    return lib


@pytest.fixture(scope="module", params=VARIANTS, ids=[v[0] for v in VARIANTS])
def lib(request, tmp_path_factory):
    return _load(*request.param, tmp_path_factory.getbasetemp() / "half_cache")


def _run(lib, fn, x, out_dtype):
    y = np.empty(x.shape, out_dtype)
    getattr(lib, fn)(x.ctypes.data, y.ctypes.data, x.size)
    return y


def _sample() -> np.ndarray:
    """Every sign and exponent, every bfloat16 and float16 rounding case (below, at and above
    each tie, odd and even), subnormals, infinities, NaNs of every kind; plus random bits. An odd
    length: the vector loops' tails run too."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0xa000, 0xffff],
                    np.uint32)
    grid = (hi[:, None] | lows[None, :]).ravel()
    rng = np.random.default_rng(0)
    return np.concatenate([grid, rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint32),
                           np.array([0x477fe000, 0x477fefff, 0x477ff000, 0x38800000, 0x387fffff, 0x33000000,
                                     0x33000001, 0x32ffffff], np.uint32)]).view(np.float32)


def _want(x):
    with np.errstate(all="ignore"):
        return x.astype(ml_dtypes.bfloat16).view(np.uint16), x.astype(np.float16).view(np.uint16)


def _check_bf16(lib, x, want):
    got = _run(lib, "to_bf16", x, np.uint16)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(int(x.view(np.uint32)[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def _check_f16(lib, x, want):
    nan = np.isnan(x)
    u = x.view(np.uint32)[nan]
    f16c = (((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff)).astype(np.uint16)
    for fn in ("to_f16", "to_f16_int"):
        got = _run(lib, fn, x, np.uint16)
        bad = np.flatnonzero((got != want) & ~nan)
        assert bad.size == 0, (fn, [(hex(int(x.view(np.uint32)[i])), hex(int(got[i])), hex(int(want[i])))
                                    for i in bad[:5]])
        # NaN: F16C's (quiet, sign and the top 9 payload bits kept), on every path
        assert np.array_equal(got[nan], f16c), fn


def test_float32_to_bfloat16(lib):
    x = _sample()
    _check_bf16(lib, x, _want(x)[0])


def test_float32_to_float16(lib):
    x = _sample()
    _check_f16(lib, x, _want(x)[1])


def test_widening_every_16_bit_pattern(lib):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    h = np.concatenate([h, h[:7]])  # a tail
    got = _run(lib, "from_bf16", h, np.float32)
    assert np.array_equal(got.view(np.uint32), h.astype(np.uint32) << 16)  # exact, NaN payloads kept
    want = h.view(np.float16).astype(np.float32)
    for fn in ("from_f16", "from_f16_int"):
        got = _run(lib, fn, h, np.float32)
        nan = np.isnan(want)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), fn
        # NaN: quiet, payload and sign kept (F16C's)
        hn = h[nan].astype(np.uint32)
        q = ((hn & 0x8000) << 16) | 0x7f800000 | ((hn & 0x3ff) << 13) | 0x400000
        assert np.array_equal(got[nan].view(np.uint32), q), fn


def test_round_trip_is_exact(lib):
    """Every bfloat16 and float16 value survives widening and rounding back."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for to, frm in (("to_bf16", "from_bf16"), ("to_f16", "from_f16")):
        f = _run(lib, frm, h, np.float32)
        ok = ~np.isnan(f)
        assert np.array_equal(_run(lib, to, f, np.uint16)[ok], h[ok]), to


@pytest.mark.slow
def test_every_float32_pattern(tmp_path):
    """All 2^32 inputs on every path, in chunks of 2^26 (numpy's float16 rounding, the oracle,
    takes most of the ~8 minutes)."""
    libs = [_load(name, flags, tmp_path) for name, flags in VARIANTS]
    step = 1 << 26
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        want_bf16, want_f16 = _want(x)
        for lib in libs:
            _check_bf16(lib, x, want_bf16)
            _check_f16(lib, x, want_f16)
