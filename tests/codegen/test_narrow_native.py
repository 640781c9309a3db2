"""The narrow types (float8, float4, int4, int2) compiled (braze_narrow.h) against the reference, which
is ml_dtypes' conversions: every code decoded, and float32s at every exponent with the low bits that
decide a rounding (ties, one ulp past a tie, NaN payloads, infinities, subnormals) encoded; the other
source and target types lowering routes through float32 or int64; moves of narrow tensors (reshape,
transpose, concat, gather) that copy bits; a narrow constant; a saved artifact; and the errors for
arithmetic on narrow values and for casts braze does not define."""

from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.reference
from braze.errors import BrazeError
from braze.ir import parse
from braze.ir.printer import print_module
from braze.ir.types import NARROW, DType, TensorType, is_ml_dtype
from braze.ops import Builder

pytestmark = pytest.mark.usefixtures("module_cache")

MINIFLOATS = sorted((d for d in NARROW if d.is_minifloat), key=lambda d: d.name)
INTS = sorted((d for d in NARROW if not d.is_minifloat), key=lambda d: d.name)


def _float32_edges() -> np.ndarray:
    """Every sign and exponent, each with the low mantissa bits that decide a narrow rounding: the
    top 16 bits all, the low 16 a few (0 makes ties, 1 one past them, 0x8000 a half below...)."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234], np.uint32)
    return (hi[:, None] | lows[None, :]).ravel().view(np.float32)


def _width(dt: DType) -> int:
    return 4 if dt in (DType.float4_e2m1fn, DType.int4, DType.uint4) else 2 if dt in (DType.int2, DType.uint2) else 8


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint8) if a.dtype.itemsize == 1 else np.asarray(a)


def _casts(src: DType, targets, sym="n"):
    """One module: x of ``src`` cast to each target (one compile serves them all)."""
    b = Builder()
    x = b.param("x", TensorType(src, (b.sym(sym),)))
    b.ret(*(b.cast(x, dtype=t) for t in targets))
    return b.module


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.itemsize == 1 and is_ml_dtype(want.dtype):
        np.testing.assert_array_equal(_bits(got), _bits(want))
    else:
        np.testing.assert_array_equal(got, want)  # NaN equals NaN here


def test_every_float32_rounds_to_ml_dtypes_bits():
    targets = [d for d in MINIFLOATS if d is not DType.float8_e8m0fnu] + INTS
    m = _casts(DType.float32, targets)
    x = _float32_edges()
    got, want = braze.compile(m)(x), braze.reference.run(m, x)
    for t, g, w in zip(targets, got, want):
        bad = _bits(g) != _bits(w)
        assert not bad.any(), f"{t.name}: {bad.sum()} mismatches, first at {x[bad][:4]}: {_bits(g)[bad][:4]} " \
                              f"!= {_bits(w)[bad][:4]}"


@pytest.mark.parametrize("dt", MINIFLOATS + INTS, ids=lambda d: d.name)
def test_every_code_decodes_to_ml_dtypes_value(dt):
    wide = [DType.float32, DType.float16, DType.float64] if dt.is_minifloat else \
        [DType.int64, DType.int8, DType.uint8, DType.float32, DType.bool]
    m = _casts(dt, wide)
    codes = np.arange(1 << _width(dt), dtype=np.uint8).view(dt.numpy)
    got, want = braze.compile(m)(codes), braze.reference.run(m, codes)
    for g, w in zip(got, want):
        _same(g, w)
    if dt.is_minifloat:  # the reference is ml_dtypes' own decoding
        np.testing.assert_array_equal(want[0], codes.astype(np.float32))


@pytest.mark.parametrize("src", [DType.float16, DType.bfloat16, DType.float64], ids=lambda d: d.name)
def test_16_and_64_bit_floats_round_through_float32(src, rng):
    targets = [DType.float8_e4m3fn, DType.float8_e5m2fnuz, DType.float4_e2m1fn, DType.int4, DType.uint2]
    m = _casts(src, targets)
    for n in (1, 7, 300):
        x = (rng.standard_normal(n) * 40).astype(src.numpy)
        x[:3] = np.array([np.inf, -np.nan, -0.0])[:min(3, n)]
        for g, w in zip(braze.compile(m)(x), braze.reference.run(m, x)):
            _same(g, w)


def test_integers_and_bools_wrap_into_4_and_2_bits():
    for src, x in ((DType.int32, np.array([-200, -9, -8, -1, 0, 7, 8, 15, 16, 2**31 - 1], np.int32)),
                   (DType.int64, np.array([-2**63, 2**40 + 3, -3, 5], np.int64)),
                   (DType.uint8, np.array([0, 3, 4, 255], np.uint8)),
                   (DType.bool, np.array([True, False]))):
        m = _casts(src, INTS)
        for t, g, w in zip(INTS, braze.compile(m)(x), braze.reference.run(m, x)):
            _same(g, w)
            np.testing.assert_array_equal(_bits(w), x.astype(np.int64) & ((1 << _width(t)) - 1))


def test_narrow_tensors_move_as_bits_and_are_read_by_a_cast(rng):
    """transpose, concat with a slice of itself, a gather of rows, then the decoded sum: the moves copy
    codes (no arithmetic on them), and what follows reads the values."""
    b = Builder()
    n, k = b.sym("n"), b.sym("k")
    x = b.param("x", TensorType(DType.float8_e4m3fn, (n, 3)))
    idx = b.param("idx", TensorType(DType.int64, (k,)))
    t = b.permute(x, perm=(1, 0))
    c = b.concat(t, b.slice(t, axis=1, start=0, end=1), axis=1)
    g = b.gather(b.reshape(x, shape=(n, 3)), idx, axis=0)
    b.ret(c, g, b.mul(b.cast(g, dtype=DType.float32), b.cast(g, dtype=DType.float32)))
    cm = braze.compile(b.module)
    for rows in (1, 5):
        xv = (rng.standard_normal((rows, 3)) * 10).astype(np.float32).astype(DType.float8_e4m3fn.numpy)
        iv = rng.integers(0, rows, 4)
        for g_, w in zip(cm(xv, iv), braze.reference.run(b.module, xv, iv)):
            _same(g_, w)


def test_int4_constant_dequantized_and_saved(tmp_path, rng):
    """A weight kept as int4 (one code per byte): its rows gathered at run time, then dequantized. The
    artifact keeps its codes (safetensors has no int4 type, so it stores the bits), and `braze tune
    --artifact` reads them back as int4."""
    w = rng.integers(-8, 8, (6, 5)).astype(DType.int4.numpy)
    b = Builder()
    x = b.param("x", TensorType(DType.float32, (b.sym("n"), 5)))
    idx = b.param("idx", TensorType(DType.int64, (b.sym("k"),)))
    rows = b.mul(b.cast(b.gather(b.constant(w), idx, axis=0), dtype=DType.float32), b.constant(np.float32(0.25)))
    b.ret(b.matmul(x, b.permute(rows, perm=(1, 0))))
    cm = braze.compile(b.module)
    xv, iv = rng.standard_normal((3, 5)).astype(np.float32), np.array([4, 0, 5, 5])
    want = xv @ (w[iv].astype(np.float32) * 0.25).T
    np.testing.assert_allclose(cm(xv, iv), want, rtol=1e-5, atol=1e-5)
    cm.save(tmp_path / "a")
    np.testing.assert_allclose(braze.load(tmp_path / "a")(xv, iv), want, rtol=1e-5, atol=1e-5)
    from braze.deploy.load import _read_meta
    from braze.deploy.retune import read_module
    back = read_module(tmp_path / "a", _read_meta(tmp_path / "a"))  # each constant checked by its digest
    assert any(c.dtype == DType.int4.numpy and np.array_equal(c, w) for c in back.constants.values())


def test_narrow_types_print_and_parse():
    m = _casts(DType.float8_e5m2, [DType.float32])
    text = print_module(m)
    assert "f8e5m2[n]" in text
    assert print_module(parse(text)) == text


def test_arithmetic_on_a_narrow_value_is_refused_with_the_fix():
    b = Builder()
    x = b.param("x", TensorType(DType.float8_e4m3fn, (4,)))
    with pytest.raises(BrazeError, match="(?s)does not take float8_e4m3fn inputs.*cast the float8_e4m3fn tensor"):
        b.add(x, x)


@pytest.mark.parametrize("src,dst", [(DType.int32, DType.float8_e4m3fn), (DType.float8_e5m2, DType.int32),
                                     (DType.float32, DType.float8_e8m0fnu), (DType.int4, DType.uint4)])
def test_casts_braze_does_not_define_are_refused(src, dst):
    b = Builder()
    x = b.param("x", TensorType(src, (4,)))
    with pytest.raises(BrazeError, match=f"cannot cast {src.name} to {dst.name}"):
        b.cast(x, dtype=dst)


def test_numpy_inputs_of_ml_dtypes_types_are_taken():
    m = _casts(DType.float8_e4m3fn, [DType.float32])
    cm = braze.compile(m)
    x = np.array([1.5, -448, 0.0625], np.float32).astype(DType.float8_e4m3fn.numpy)
    np.testing.assert_array_equal(cm(x), [1.5, -448, 0.0625])
    with pytest.raises(BrazeError, match="dtype"):
        cm(x.view(np.uint8))  # the codes, but not typed as float8: a dtype error, not a guess


def test_the_cuda_target_converts_as_the_cpu(tmp_path, monkeypatch):
    """braze_narrow.h compiled as device code (NVRTC), run without a GPU: the model's .cu over cuda_emu.h
    and the fake driver (tests/codegen/cuda_emu_build.py), every float32 edge and every code."""
    from cuda_emu_build import build_emulated, require_emulation
    require_emulation()
    targets = [d for d in MINIFLOATS if d is not DType.float8_e8m0fnu] + INTS
    b = Builder()
    x = b.param("x", TensorType(DType.float32, (b.sym("n"),)))
    codes = [b.cast(x, dtype=t) for t in targets]
    b.ret(*codes, *(b.cast(q, dtype=DType.float32) for q in codes))
    cm = braze.compile(b.module, target="cuda:sm_90")
    for k, v in build_emulated(cm, tmp_path).items():
        monkeypatch.setenv(k, v)  # read by the library at its first call
    xs = _float32_edges()[::7]
    for g, w in zip(cm(xs), braze.reference.run(b.module, xs)):
        _same(np.asarray(g), w)


def test_a_fused_quantize_dequantize_chain_and_a_reduction(rng):
    """relu(f32(f8(3x)) + 1) and a row sum of int4-wrapped values: narrow casts inside fused kernels,
    next to vectorizable float32 arithmetic, at 1, 5 and 300 rows."""
    b = Builder()
    x = b.param("x", TensorType(DType.float32, (b.sym("n"), 37)))
    q = b.cast(b.mul(x, b.constant(np.float32(3.0))), dtype=DType.float8_e4m3fn)
    y = b.relu(b.add(b.cast(q, dtype=DType.float32), b.constant(np.float32(1.0))))
    s = b.reduce_sum(b.cast(b.cast(x, dtype=DType.int4), dtype=DType.float32), axes=(1,))
    b.ret(y, s)
    cm = braze.compile(b.module)
    for rows in (1, 5, 300):
        xv = (rng.standard_normal((rows, 37)) * 50).astype(np.float32)
        for g, w in zip(cm(xv), braze.reference.run(b.module, xv)):
            np.testing.assert_array_equal(g, w)


def test_threads_calling_one_narrow_model_get_the_reference(rng):
    """One compiled model, four threads, each at shapes of its own: the same codes every call."""
    import threading
    m = _casts(DType.float32, [DType.float8_e4m3fn, DType.int4])
    cm = braze.compile(m)
    inputs = [(rng.standard_normal(n) * 100).astype(np.float32) for n in (1, 7, 300, 4096)]
    wants = [braze.reference.run(m, x) for x in inputs]
    bad = []

    def work(k):
        for i in range(25):
            j = (k + i) % len(inputs)
            for g, w in zip(cm(inputs[j]), wants[j]):
                if not np.array_equal(_bits(np.asarray(g)), _bits(w)):
                    bad.append((k, i))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
