"""Generated kernels over bfloat16 / float16 tensors: loads widen to float32, everything is
computed in float32, each stored value is rounded once (stage widen, braze_half.h).

The oracle is exact: the same math in float64 on the 16-bit inputs, rounded once to the output
type. A kernel may differ from it by at most one unit in the last place of the 16-bit result
(its float32 arithmetic is ~1e-7 off before that rounding), at every ISA level, at shapes with
and without vector tails (1, odd, several vectors). The per-op reference (braze.reference,
which rounds after each op) agrees within the dtype's tolerance.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import braze
from braze import reference
from braze.codegen.isa import LEVELS, host_isa
from braze.ops import Builder, tensor
from braze.testing import assert_close

NP = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
ULP = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}  # relative spacing of the 16-bit type at its coarsest
ISAS = ["scalar", host_isa().name] if host_isa().name != "scalar" else ["scalar"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


def _gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _pointwise(b, dt):
    n, h = b.sym("n"), b.sym("h")
    x, y = b.param("x", tensor(dt, n, h)), b.param("y", tensor(dt, n, h))
    b.ret(b.mul(b.gelu(b.add(x, y)), x))
    return lambda x, y: _gelu(x + y) * x


def _layer_norm(b, dt):
    n, h = b.sym("n"), b.sym("h")
    x = b.param("x", tensor(dt, n, h))
    b.ret(b.layer_norm(x, axis=-1, eps=1e-5))
    return lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def _softmax_and_sums(b, dt):
    n, h = b.sym("n"), b.sym("h")
    x = b.param("x", tensor(dt, n, h))
    b.ret(b.softmax(x, axis=-1), b.reduce_sum(x, axes=(-1,)), b.reduce_max(x, axes=(0,)))

    def f(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True), x.sum(-1), x.max(0)
    return f


def _transpose_add(b, dt):
    n, h = b.sym("n"), b.sym("h")
    x, y = b.param("x", tensor(dt, n, h)), b.param("y", tensor(dt, h, n))
    b.ret(b.add(b.permute(x, perm=(1, 0)), b.exp(y)))  # a strided load: lane by lane
    return lambda x, y: x.T + np.exp(y)


def _mixed(b, dt):
    """float32 in, rounded to 16 bits by an explicit cast, 16-bit out, and a float32 result."""
    n, h = b.sym("n"), b.sym("h")
    x, y = b.param("x", tensor("f32", n, h)), b.param("y", tensor(dt, n, h))
    s = b.add(b.cast(x, dtype=dt), y)
    b.ret(s, b.cast(b.tanh(s), dtype="f32"))
    r = NP[dt]
    return lambda x, y: ((xr := x.astype(r).astype(np.float64)) + y, np.tanh(xr + y))


# outputs whose float32 arithmetic is exact (a sum of two 16-bit values): rounding once gives
# the nearest 16-bit value, which a truncating store would miss about half the time
EXACT = {("mixed", 0)}

MODELS = {"pointwise": _pointwise, "layer_norm": _layer_norm, "softmax_and_sums": _softmax_and_sums,
          "transpose": _transpose_add, "mixed": _mixed}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_half_kernels_round_once(name, dt, isa, monkeypatch):
    monkeypatch.setenv("BRAZE_ISA", isa)
    b = Builder()
    exact = MODELS[name](b, dt)
    m = braze.compile(b.module)
    rng = np.random.default_rng(0)
    for n, h in ((1, 1), (3, 7), (2, 33), (5, 130)):
        args = []
        for p in b.module.main.params:
            shape = (n, h) if p.type.shape[0].name == "n" else (h, n)
            a = rng.uniform(-3, 3, shape).astype(np.float32)
            args.append(a if p.type.dtype.name == "float32" else a.astype(NP[dt]))
        got = m(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = exact(*[a.astype(np.float64) for a in args])
        want = want if isinstance(want, tuple) else (want,)
        ref = reference.run(b.module, *args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        for i, (g, w, r) in enumerate(zip(got, want, ref)):
            assert g.dtype == r.dtype, (i, g.dtype, r.dtype)
            w16 = w.astype(g.dtype).astype(np.float64)  # the exact value rounded once
            g64 = g.astype(np.float64)
            if g.dtype == np.float32:
                np.testing.assert_allclose(g64, w, rtol=1e-5, atol=1e-6, err_msg=f"{name} out {i} at {n}x{h}")
            else:
                tol = ULP[dt] * np.maximum(np.abs(w16), 1e-3 * np.abs(w).max())
                bad = np.abs(g64 - w16) > tol
                assert not bad.any(), (f"{name} out {i} at {n}x{h}: {g64[bad][:4]} against {w16[bad][:4]} "
                                       f"(exact {w[bad][:4]})")
                if (name, i) in EXACT:  # float32 arithmetic is exact here: the nearest value, bit for bit
                    assert np.array_equal(g64, w16), f"{name} out {i} at {n}x{h}: not rounded to nearest"
            assert_close(g64, r.astype(np.float64), dtype="bfloat16" if dt == "bf16" else "float16",
                         what=f"{name} out {i} against the reference")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_a_16_bit_permute_moves_the_bits(dt, isa, monkeypatch):
    """A permute of a 16-bit tensor stores each element as it loaded it (braze_half.h's bz_mv16):
    every pattern comes out as it went in, NaN payloads and signalling NaNs included (a round trip
    through float32 quiets them), in the vector loop and its tail."""
    monkeypatch.setenv("BRAZE_ISA", isa)
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor(dt, n, 4, 37))
    b.ret(b.permute(x, perm=(1, 0, 2)))
    m = braze.compile(b.module)
    if isa != "scalar":
        assert "bz_mv16(" in m.library.path.with_name("source.c").read_text()
    bits = np.arange(2 ** 16, dtype=np.uint16)  # every pattern, in 443 rows of 4 x 37
    bits = np.concatenate([bits, bits[:443 * 148 - 2 ** 16]]).reshape(443, 4, 37)
    got = np.asarray(m(bits.view(NP[dt])))
    np.testing.assert_array_equal(got.view(np.uint16), bits.transpose(1, 0, 2))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_cast_matches_ml_dtypes_bit_for_bit(dt, isa, monkeypatch):
    """float32 -> 16 bits -> float32 in kernels: as ml_dtypes rounds, special values included
    (NaN as a NaN of the same sign), in the vector body and in the tail."""
    monkeypatch.setenv("BRAZE_ISA", isa)
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n))
    h16 = b.cast(x, dtype=dt)
    b.ret(h16, b.cast(h16, dtype="f32"))
    m = braze.compile(b.module)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-45, 65504.0, 65520.0, 3.4e38,
                        1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26], np.float32)
    rng = np.random.default_rng(1)
    for size in (1, 16, 37, 300):
        xs = np.concatenate([special, rng.integers(0, 1 << 32, size, dtype=np.uint32).view(np.float32)])
        got16, back = m(xs)
        with np.errstate(all="ignore"):
            want = xs.astype(NP[dt])
        nan = np.isnan(xs)
        assert np.array_equal(got16.view(np.uint16)[~nan], want.view(np.uint16)[~nan]), size
        assert np.isnan(got16[nan].astype(np.float32)).all() and np.array_equal(np.signbit(got16[nan]), np.signbit(xs[nan]))
        assert np.array_equal(back[~nan].view(np.uint32), want[~nan].astype(np.float32).view(np.uint32)), size
        assert np.isnan(back[nan]).all()


_UNARY_OPS = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "sigmoid", "silu", "sin", "cos", "hardswish",
              "gelu", "leaky_relu", "elu", "softplus", "hardsigmoid", "neg", "abs", "sign", "relu", "floor", "ceil",
              "round")
_BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod")


def _op_graph(kind, op, dt):
    """One op (and a few around it, for the shapes: gather, slice, concat, pad, cumsum, where)."""
    b = Builder()
    n, h = b.sym("n"), b.sym("h")
    x = b.param("x", tensor(dt, n, h))
    if kind == "unary":
        b.ret(b.op(op, [x]))
    elif kind == "binary":
        b.ret(b.op(op, [x, b.param("y", tensor(dt, n, h))]))
    elif kind == "reduce":
        b.ret(b.op(op, [x], axes=(-1,), keepdims=False), b.op(op, [x], axes=(0,), keepdims=True))
    elif op == "gather":  # loads at computed offsets: lane by lane
        b.ret(b.op("gather", [x, b.param("i", tensor("i64", h))], axis=1))
    elif op == "where":
        b.ret(b.op("where", [b.op("greater", [x, b.param("y", tensor(dt, n, h))]), x, b.op("exp", [x])]))
    elif op == "cumsum":
        b.ret(b.op("cumsum", [x], axis=1))
    elif op == "concat_pad":
        b.ret(b.op("pad", [b.op("concat", [x, b.op("neg", [x])], axis=1)], pads=(0, 1, 0, 2), value=0.5))
    return b


_OPS = ([("unary", o) for o in _UNARY_OPS] + [("binary", o) for o in _BINARY_OPS]
        + [("reduce", o) for o in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")]
        + [("other", o) for o in ("gather", "where", "cumsum", "concat_pad")])


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("kind,op", _OPS, ids=[o for _, o in _OPS])
def test_every_op_kind_in_16_bits_against_the_reference(kind, op, dt):
    """Each op on 16-bit tensors, vector body and tail, with special values (inf, nan, -0,
    subnormal) among the inputs: the per-op reference within the dtype's tolerance, and NaN / inf
    where it has them."""
    b = _op_graph(kind, op, dt)
    m = braze.compile(b.module)
    rng = np.random.default_rng(2)
    tiny = 1e-40 if dt == "bf16" else 3e-6  # a subnormal of the type
    for n, h in ((1, 1), (3, 19), (2, 40)):
        args = []
        for p in b.module.main.params:
            if p.type.dtype.name == "int64":
                args.append(rng.integers(-h, h, h).astype(np.int64))
                continue
            a = rng.uniform(0.25, 2.5, (n, h)) * rng.choice([-1, 1], (n, h))
            if op in ("log", "sqrt", "rsqrt", "pow") or kind == "reduce" and op == "reduce_prod":
                a = np.abs(a)
            flat = a.reshape(-1)
            if flat.size >= 8 and kind in ("unary", "binary"):
                flat[:5] = [np.inf, -np.inf, np.nan, -0.0, tiny]
            args.append(a.astype(NP[dt]))
        got = m(*args)
        ref = reference.run(b.module, *args)
        got, ref = (got if isinstance(got, tuple) else (got,)), (ref if isinstance(ref, tuple) else (ref,))
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and g.shape == r.shape
            g64, r64 = g.astype(np.float64), r.astype(np.float64)
            assert np.array_equal(np.isnan(g64), np.isnan(r64)), f"{op} at {n}x{h}: NaN where the reference has none"
            fin = np.isfinite(r64)
            assert np.array_equal(g64[~fin & ~np.isnan(r64)], r64[~fin & ~np.isnan(r64)]), f"{op}: inf"
            assert_close(g64[fin], r64[fin], dtype="bfloat16" if dt == "bf16" else "float16",
                         what=f"{op} at {n}x{h}")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_a_norm_s_float32_weight_is_not_rounded_to_16_bits_first(norm, dt):
    """A 16-bit norm with float32 weight and bias multiplies in float32, as the reference does: a
    weight past the 16-bit range times a 0 is 0 (rounded first it was inf, and 0 * inf NaN; fuzz
    seed 46181), and a weight of 1 + 2^-12 keeps its last bits."""
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor(dt, 2, n))
    w = b.param("w", tensor("f32", n))
    args = (x, w, b.param("c", tensor("f32", n))) if norm == "layer_norm" else (x, w)
    b.ret(b.op(norm, list(args), axis=-1, eps=1e-5))
    m = braze.compile(b.module)
    h = 6
    xs = np.zeros((2, h))
    xs[:, 0], xs[1, 3] = 1.5, -2.0
    ws = np.array([1 + 2 ** -12, 2.0, 3e38, 0.5, -3e38, 1.0], np.float32)
    extra = (np.linspace(-1, 1, h).astype(np.float32),) if norm == "layer_norm" else ()
    a = (xs.astype(NP[dt]), ws, *extra)
    got, ref = m(*a), reference.run(b.module, *a)
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(ref.astype(np.float64)))
    assert_close(got, ref, dt)


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_a_batch_norm_s_float32_statistics_are_not_rounded_to_16_bits_first(dt):
    """A running variance of 1e5 and a mean of 7e4 are past float16's range: rounded first they
    were inf (a channel of bias only, or NaN); the reference uses them as they are."""
    b = Builder()
    x = b.param("x", tensor(dt, 2, 4, b.sym("h")))
    ps = [b.param(k, tensor("f32", 4)) for k in ("scale", "bias", "mean", "var")]
    b.ret(b.op("batch_norm", [x, *ps], eps=1e-5))
    m = braze.compile(b.module)
    xs = np.linspace(-3, 3, 2 * 4 * 5).reshape(2, 4, 5).astype(NP[dt])
    scale, bias = np.array([1.0, 2.0, 0.5, 1.0], np.float32), np.array([0.0, 1.0, -1.0, 0.25], np.float32)
    mean, var = np.array([0.0, 7e4, 1.0, 0.0], np.float32), np.array([1.0, 1.0, 1e5, 3e38], np.float32)
    got, ref = m(xs, scale, bias, mean, var), reference.run(b.module, xs, scale, bias, mean, var)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(ref.astype(np.float64)))
    assert_close(got, ref, dt)
