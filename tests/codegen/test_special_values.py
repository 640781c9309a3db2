"""Every elementwise op at special values: +-inf, NaN, +-0, denormals, the largest finite
values, the smallest normal, integer extremes.

For each op and dtype the reference (braze.reference.run) and the native backend
(braze.compile on a Builder module) must agree: bit for bit for exact ops (arithmetic,
sqrt, rounding, comparisons, casts...), within the dtype's tolerance otherwise, NaN
matching NaN and the sign of zero checked wherever the result is zero. Each value runs
at sizes 1, 7, 16 and 37, so it is computed in the SIMD body and in the scalar
remainder, and all the copies must have the same bits. Both are checked against torch
eager too, except where torch is wrong (docs/semantics.md).

Ops come from the registry (every op of kind "elementwise"): an op this file does not
know is still tested, with its default attributes, on the dtypes it accepts.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.codegen.isa import host_isa
from braze.errors import ShapeError
from braze.ir.types import DType
from braze.ops import Builder, tensor
from braze.ops.registry import all_ops
from braze.testing import TOLERANCES, differs_from_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

SIZES = (1, 7, 16, 37)  # scalar only, scalar only, one vector (AVX-512), vectors and a remainder


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


def float_values(dt: str, short=False) -> np.ndarray:
    fi = np.finfo(dt)
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 3.0, fi.max, -fi.max, fi.tiny, -fi.tiny,
         fi.smallest_subnormal * 3]
    if not short:
        v += [-fi.smallest_subnormal * 3, 20.0, -20.0, 88.8, -104.5, 1e-20, 7.25, -0.3, fi.max / 4]
        v += [1e-40, -1e-40] if dt == "float32" else [1e-310, -1e-310, 800.0, -800.0]
    return np.array(v, dtype=dt)


def int_values(dt: str) -> np.ndarray:
    ii = np.iinfo(dt)
    return np.array([0, 1, -1, 2, -7, 7, 3, ii.max, ii.min, ii.max - 1, ii.min + 1], dtype=dt)


def values(dt: str, short=False):
    return float_values(dt, short) if dt.startswith("float") else int_values(dt)


# ---------------------------------------------------------------------------
# the ops: attributes, torch counterparts, exactness
# ---------------------------------------------------------------------------

# results rounded once from the exact value, in the reference (float64, then rounded) and
# natively: these must match bit for bit
EXACT = {"add", "sub", "mul", "div", "neg", "abs", "sign", "relu", "floor", "ceil", "round", "clamp", "maximum",
         "minimum", "remainder", "sqrt", "reciprocal", "equal", "not_equal", "less", "less_equal", "greater",
         "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "where", "cast"}

ATTRS = {"clamp": {"min": -1.5, "max": 2.5}, "leaky_relu": {"alpha": 0.1}}

UNARY_TORCH = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "silu": F.silu, "sin": torch.sin,
    "cos": torch.cos, "hardswish": F.hardswish, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": F.elu, "softplus": F.softplus, "hardsigmoid": F.hardsigmoid, "neg": torch.neg, "abs": torch.abs,
    "sign": torch.sign, "relu": torch.relu, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "clamp": lambda x: torch.clamp(x, -1.5, 2.5), "logical_not": torch.logical_not,
}
BINARY_TORCH = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "remainder": torch.remainder, "equal": torch.eq,
    "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le, "greater": torch.gt,
    "greater_equal": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}


def elementwise_ops() -> dict:
    return {n: op for n, op in all_ops().items() if op.kind == "elementwise"}


def _variants(name, op):
    """(label, op name, attrs, arity) of every variant of an op."""
    if name == "gelu":
        return [("gelu", "gelu", {"approximate": "none"}, 1), ("gelu_tanh", "gelu", {"approximate": "tanh"}, 1)]
    if name == "cast":
        return []  # test_casts
    if name == "where":
        return []  # test_where
    n_in = len(op.inputs)
    return [(name, name, ATTRS.get(name, {}), n_in)]


def test_every_elementwise_op_is_covered():
    names = set(elementwise_ops())
    covered = {v[1] for n, op in elementwise_ops().items() for v in _variants(n, op)} | {"cast", "where"}
    assert names == covered
    for n, op in elementwise_ops().items():
        assert n in ("cast", "where") or len(op.inputs) in (1, 2), f"{n}: add it to _variants"


# ---------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------


def _tol(dtype, exact):
    if exact or dtype not in TOLERANCES:
        return None
    return TOLERANCES[dtype]


def _same_or_close(got, want, tol, what):
    """Bit-exact (tol None) or within (rtol, atol); NaN matches NaN; where both are zero, the
    sign of zero matches."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    if got.dtype.kind != "f":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        if tol is None:
            ok = both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
        else:
            rtol, atol = tol
            with np.errstate(invalid="ignore"):
                ok = both_nan | (g == w) | (np.abs(g - w) <= atol + rtol * np.abs(w))
            ok &= ~((g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w)))
        bad = ~ok
    if bad.any():
        i = np.flatnonzero(bad)[:6]
        raise AssertionError(f"{what}: {bad.sum()} differ, e.g. at {i.tolist()}: got {got.ravel()[i].tolist()}, "
                             f"want {want.ravel()[i].tolist()}")


def _run_group(dtypes, variants, arrays, label):
    """Every variant applied to params of ``dtypes``: one module (one compile) per output
    dtype, so that float32 results get a vectorized kernel. Checks native == reference at
    every size and position; returns [(variant, reference result)]."""
    by_dtype: dict = {}
    for v in variants:
        try:
            t = _probe(dtypes, v)
        except ShapeError:  # the op does not take this dtype
            continue
        by_dtype.setdefault(t, []).append(v)
    out = []
    for group in by_dtype.values():
        out += _run_module(dtypes, group, arrays, label)
    return out


def _probe(dtypes, v):
    b = Builder()
    n = b.sym("n")
    ps = [b.param(f"x{i}", tensor(dt, n)) for i, dt in enumerate(dtypes)]
    return b.op(v[1], ps[:v[3]], **v[2]).type.dtype


def _run_module(dtypes, kept, arrays, label):
    b = Builder()
    n = b.sym("n")
    ps = [b.param(f"x{i}", tensor(dt, n)) for i, dt in enumerate(dtypes)]
    b.ret(*[b.op(v[1], ps[:v[3]], **v[2]) for v in kept])
    native = braze.compile(b.module)
    if b.func.results[0].dtype is DType.float32 and set(dtypes) == {"float32"} and host_isa().vector_bytes:
        src = (Path(native.library.path).parent / "source.c").read_text()
        assert "bz_ld(" in src, "the float32 kernel should be vectorized"
    want = braze.reference.run(b.module, *arrays)
    want = want if isinstance(want, tuple) else (want,)
    for k in range(len(arrays[0])):
        for size in SIZES:
            got = native(*[np.full(size, a[k], a.dtype) for a in arrays])
            got = got if isinstance(got, tuple) else (got,)
            for v, g, w in zip(kept, got, want):
                what = f"{v[0]}{tuple(a[k] for a in arrays)} {label} at size {size}"
                _same_or_close(g, np.full(size, w[k], w.dtype), _tol(w.dtype.name, v[1] in EXACT), what)
                # every copy has the first copy's bits (SIMD body and scalar remainder agree)
                assert np.array_equal(g.view(np.uint8).reshape(size, -1), np.repeat(g.view(np.uint8).reshape(
                    size, -1)[:1], size, axis=0)), what
    return list(zip(kept, want))


def _vs_torch(results, arrays, table, label):
    for (lab, op, attrs, _), w in results:
        fn = table.get(lab)
        if fn is None or (arrays[0].dtype.kind != "f" and op in ("div", "clamp", "pow")):
            continue  # ints: torch.div is true division, clamp promotes, pow of negatives
        with np.errstate(all="ignore"):
            t = fn(*[torch.from_numpy(a) for a in arrays]).numpy()
        skip = differs_from_torch(op, attrs, *arrays)
        tol = _tol(w.dtype.name, False)
        if tol is not None:
            tol = (4 * tol[0], tol[1])  # torch's float32 kernels are a few ulp off
        _same_or_close(np.where(skip, w, t).astype(w.dtype), w, tol, f"torch vs braze: {lab} {label}")


# ---------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------

UNARY = [v for n, op in elementwise_ops().items() for v in _variants(n, op) if v[3] == 1]
BINARY = [v for n, op in elementwise_ops().items() for v in _variants(n, op) if v[3] == 2]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_unary_ops(dtype):
    x = values(dtype)
    results = _run_group([dtype], UNARY, [x], dtype)
    assert len(results) >= (25 if dtype.startswith("float") else 8)
    _vs_torch(results, [x], UNARY_TORCH, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_binary_ops(dtype):
    v = values(dtype, short=True)
    a, b = (z.ravel() for z in np.meshgrid(v, v, indexing="ij"))
    ops = BINARY
    if dtype.startswith("int"):  # negative integer powers and a divisor 0 are errors (as in torch): own groups
        divs = ("div", "remainder", "fmod")
        ops = [o for o in BINARY if o[1] != "pow" and o[1] not in divs]
        _run_group([dtype, dtype], [o for o in BINARY if o[1] == "pow"], [a, np.where(b >= 0, b % 5, 2)], dtype)
        nz = np.where(b == 0, np.asarray(1, b.dtype), b)
        _vs_torch(_run_group([dtype, dtype], [o for o in BINARY if o[1] in divs], [a, nz], dtype), [a, nz],
                  BINARY_TORCH, dtype)
    results = _run_group([dtype, dtype], ops, [a, b], dtype)
    assert len(results) >= (14 if dtype.startswith("float") else 11)
    _vs_torch(results, [a, b], BINARY_TORCH, dtype)


@pytest.mark.parametrize("src", ["float32", "float64", "int32", "int64", "bool"])
def test_casts(src):
    x = values(src) if src != "bool" else np.array([True, False])
    if src.startswith("float"):  # float -> int out of range (or NaN) is unspecified: in-range values only
        x = x[np.isfinite(x) & (np.abs(x) < 100)]
    targets = [t for t in ("f32", "f64", "i32", "i64", "i8", "bool") if DType.parse(t).name != src]
    variants = [(f"cast_{t}", "cast", {"dtype": DType.parse(t)}, 1) for t in targets]
    if src != "bool":
        variants.append(("cast_u8", "cast", {"dtype": DType.uint8}, 1))
        x = x if src.startswith("float") else x[(x > -100) & (x < 100)]
        x = np.concatenate([x, x[x >= 0] + np.asarray(200, x.dtype)]) if src.startswith("int") else x
    results = _run_module([src], variants, [x], src)  # one compile: casts need no vector loop
    assert len(results) == len(variants)
    for (lab, _, attrs, _), w in results:
        t = torch.from_numpy(x).to(getattr(torch, attrs["dtype"].name)).numpy()
        if attrs["dtype"] in (DType.int8, DType.uint8):
            continue  # wraps: torch and numpy agree with the reference by construction
        _same_or_close(w, t, None, f"torch vs braze: {lab} from {src}")


def test_where():
    v = float_values("float32", short=True)
    a, b = (z.ravel() for z in np.meshgrid(v, v, indexing="ij"))
    for c in (True, False):
        cond = np.full(a.shape, c)
        results = _run_group(["bool", "float32", "float32"], [("where", "where", {}, 3)], [cond, a, b], f"cond={c}")
        np.testing.assert_array_equal(results[0][1].view(np.uint32), (a if c else b).view(np.uint32))


def test_integer_division_extremes_do_not_trap():
    """INT64_MIN / -1 traps in the hardware divide (SIGFPE killed the process): it wraps, as
    numpy gives (x / 0 fails the call: test_kernels.test_an_integer_division_by_zero_fails_the_call)."""
    import subprocess
    import sys
    code = ("import numpy as np, braze\n"
            "from braze.ops import Builder, tensor\n"
            "b = Builder(); n = b.sym('n')\n"
            "x = b.param('x', tensor('i64', n)); y = b.param('y', tensor('i64', n))\n"
            "b.ret(b.div(x, y), b.remainder(x, y), b.neg(x), b.abs(x), b.mul(x, y))\n"
            "m = braze.compile(b.module)\n"
            "lo = np.iinfo(np.int64).min\n"
            "a = np.array([lo, lo, 7, lo, -7]); c = np.array([-1, -1, 3, 1, -1])\n"
            "got = m(a, c); want = braze.reference.run(b.module, a, c)\n"
            "assert all(np.array_equal(g, w) for g, w in zip(got, want)), (got, want)\n"
            "print('ok', got[0].tolist())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok"), (r.returncode, r.stdout, r.stderr[-2000:])


# ---------------------------------------------------------------------------
# vector math: the same bits at every vector width, and in scalar code
# ---------------------------------------------------------------------------

_VMATH = ["exp", "log", "erf", "sigmoid", "silu", "gelu", "softplus"]  # softplus: braze's log1p


def test_vector_math_has_the_same_bits_at_every_width():
    """braze_vmath.h's SIMD and scalar instances agree bit for bit: one kernel compiled with
    no vectors and with 16-, 32- and 64-byte vectors gives the same bits on special and
    ordinary values (the SIMD body at every width, the scalar remainder, scalar-only code)."""
    from braze.codegen.c_kernel import c_prelude, kernel_entry, kernel_to_c
    from braze.lowering import build_kernel
    from braze.runtime.compiler import compile_shared
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n))
    outs = [b.op(op, [x]) for op in _VMATH]
    b.ret(*outs)
    kernel = build_kernel(b.func, b.module)
    rng = np.random.default_rng(0)
    xs = np.concatenate([float_values("float32"), rng.standard_normal(300).astype(np.float32) * 4,
                         rng.uniform(-110, 90, 300).astype(np.float32),
                         rng.integers(0, 2 ** 32, 300, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    results = {}
    for vb in (0, 16, 32, 64):
        lib = ctypes.CDLL(str(compile_shared(c_prelude(vb) + kernel_to_c(kernel, vb) +
                                             kernel_entry(kernel, "entry"), name=f"vmath{vb}")))
        ys = [np.empty_like(xs) for _ in outs]
        ptrs = (ctypes.c_void_p * (1 + len(ys)))(xs.ctypes.data, *[y.ctypes.data for y in ys])
        lib.entry(ptrs, (ctypes.c_int64 * 1)(len(xs)))
        results[vb] = ys
    for vb in (16, 32, 64):
        for name, a, s in zip(_VMATH, results[vb], results[0]):
            diff = a.view(np.uint32) != s.view(np.uint32)
            diff &= ~(np.isnan(a) & np.isnan(s))
            assert not diff.any(), f"{name} at {vb} bytes: {xs[diff][:5]} -> {a[diff][:5]} vs scalar {s[diff][:5]}"


def _gelu_tanh64(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


# None: bit agreement only (gelu_tanh's 1 + tanh cancels below x = -3, as in PyTorch's formula)
_MVEC = {"sin": np.sin, "cos": np.cos, "tanh": np.tanh, "expm1": np.expm1, "gelu_tanh": None}


@pytest.mark.parametrize("vb", [0, 16, 32, 64])
def test_libmvec_math_is_one_function_per_width_within_4_ulp(vb):
    """sin, cos, tanh, expm1 come from glibc's vector math where the toolchain links it (tanh
    and expm1 because they measure faster than braze's own: benchmarks/math_ulp.py): one
    implementation per vector width, so within a build the SIMD body, its remainder and
    scalar-only code agree bit for bit (also gelu_tanh, built on tanh); special values are
    exact; finite values are within 4 ulp of float64 (libmvec's documented bound). Widths
    may differ from each other."""
    from braze.codegen.c_kernel import c_prelude, kernel_entry, kernel_to_c
    from braze.ir.loop_parser import parse_kernel
    from braze.runtime.compiler import compile_shared
    from braze.schedule import KERNEL_STAGES, schedule, vectorize
    outs_decl = ", ".join(f"out y{i}: f32[n]" for i in range(len(_MVEC)))
    lowered = parse_kernel(f"kernel k_mvec(in x: f32[n], {outs_decl}); syms n  [pointwise]\n"
                           "  for _i1 in 0..n:\n" +
                           "".join(f"    y{i}[_i1] = {fn}(x[_i1])\n" for i, fn in enumerate(_MVEC)))
    rng = np.random.default_rng(1)
    xs = np.concatenate([float_values("float32"), rng.standard_normal(301).astype(np.float32) * 4,
                         rng.uniform(-1e4, 1e4, 301).astype(np.float32), np.float32([-0.0, 0.0, -1.0, -0.5])])
    outs = {}
    for vector in (True, False):  # the vector loop (with its remainder), and scalar-only code
        k = schedule(lowered, [s for s in KERNEL_STAGES if vector or s is not vectorize])
        lib = ctypes.CDLL(str(compile_shared(c_prelude(vb) + kernel_to_c(k, vb) + kernel_entry(k, "entry"),
                                             name=f"mvec{vb}{vector}")))
        ys = [np.empty_like(xs) for _ in _MVEC]
        ptrs = (ctypes.c_void_p * (1 + len(ys)))(xs.ctypes.data, *[y.ctypes.data for y in ys])
        lib.entry(ptrs, (ctypes.c_int64 * 1)(len(xs)))
        outs[vector] = ys
    for (name, ref), a, s in zip(_MVEC.items(), outs[True], outs[False]):
        same = (a.view(np.uint32) == s.view(np.uint32)) | (np.isnan(a) & np.isnan(s))
        assert same.all(), f"{name} at {vb} bytes: vector {a[~same][:5]} vs scalar {s[~same][:5]} at {xs[~same][:5]}"
        if ref is None:
            continue
        with np.errstate(all="ignore"):
            want = ref(xs.astype(np.float64))
        special = ~np.isfinite(want.astype(np.float32)) | (xs == 0) | ~np.isfinite(xs)
        np.testing.assert_array_equal(a[special], want[special].astype(np.float32), err_msg=f"{name} at {vb}")
        w32 = want[~special].astype(np.float32)
        ulp = np.spacing(np.abs(w32)).astype(np.float64)
        err = np.abs(a[~special].astype(np.float64) - want[~special]) / ulp
        assert err.max() <= 4, f"{name} at {vb} bytes: {err.max():.2f} ulp at {xs[~special][err.argmax()]}"


def test_activations_after_a_gemm_at_special_values():
    """relu after a GEMM keeps NaN (oneDNN's relu post-op would map it to 0, so relu is not
    fused); gelu/silu fused into oneDNN give eager's values at +-inf on this CPU (NaN, and for
    gelu(+inf) inf where eager's AVX2 kernel runs: docs/semantics.md)."""
    import braze
    from braze.ops import Builder, tensor
    x = np.ones((4, 16), np.float32)
    x[0, 0], x[1, 0], x[2, 0] = np.nan, np.inf, -np.inf
    y = torch.from_numpy(x @ np.ones((16, 16), np.float32))  # what the activation sees
    want = {"relu": [np.nan, np.inf, 0.0, 16.0], "gelu": F.gelu(y)[:, 0].tolist(),
            "silu": [np.nan, np.inf, np.nan, 16.0], "sigmoid": [np.nan, 1.0, 0.0, 1.0]}
    assert want["gelu"][0] != want["gelu"][0] and want["gelu"][2] != want["gelu"][2]  # NaN from eager
    for act, w in want.items():
        b = Builder()
        n = b.sym("n", 1, 8)
        y = b.op("linear", [b.param("x", tensor("f32", n, 16)), b.constant(np.ones((16, 16), np.float32), "w")])
        b.ret(getattr(b, act)(y))
        got = braze.compile(b.module)(x)[:, 0]
        np.testing.assert_allclose(got, np.array(w, np.float32), rtol=1e-6, equal_nan=True, err_msg=act)


@pytest.mark.parametrize("act", ["sigmoid", "tanh", "relu"])
def test_activations_after_a_padded_conv_keep_nan(act):
    """A conv with few channels and a pad as tall as its kernel: oneDNN's sigmoid post-op mapped
    the NaN of inf - inf to 0 there (fuzz seed 986), so sigmoid is not fused."""
    import braze
    from braze import reference
    from braze.ops import Builder, tensor
    rng = np.random.default_rng(0)
    b = Builder()
    s = b.sym("s", 1, 17)
    x = b.param("x", tensor("f32", 1, 2, 8, s))
    w = b.constant(rng.standard_normal((4, 2, 2, 3)).astype(np.float32))
    b.ret(getattr(b, act)(b.conv2d(x, w, None, stride=(2, 1), padding=(2, 1, 0, 1), dilation=(1, 1), groups=1)))
    m = braze.compile(b.module)
    xs = rng.standard_normal((1, 2, 8, 5)).astype(np.float32)
    xs[0, 0, 3, 2], xs[0, 0, 2, 2], xs[0, 1, 6, 0] = np.inf, -np.inf, np.nan
    got, want = m(xs), reference.run(b.module, xs)
    assert np.isnan(want).sum() >= 3
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_relu_and_relu6_after_a_product_keep_nan_on_every_path(act):
    """relu and relu6 after a float32 linear or convolution are post-ops the helper applies itself
    (passes/offload.py): in its small-M kernels' epilogue at few rows, after oneDNN's primitive at
    many (the small-M limit of a 16 x 64 weight is 16383 rows on AVX2). Either way NaN stays NaN
    and infinities clamp as eager's do."""
    import braze
    from braze.ops import Builder, tensor
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    clamp = {"min": 0.0, "max": 6.0} if act == "relu6" else {"min": 0.0}
    b = Builder()
    n = b.sym("n", 1, 1 << 16)
    lin = b.op("linear", [b.param("x", tensor("f32", n, 16)), b.constant(w, "w"), b.constant(bias, "b")])
    b.ret(b.op("clamp", [lin], **clamp) if act == "relu6" else b.relu(lin))
    b2 = Builder()
    h = b2.sym("h", 1, 4096)
    conv = b2.conv2d(b2.param("x", tensor("f32", 1, 16, h, 8)), b2.constant(w.reshape(64, 16, 1, 1), "w"),
                     b2.constant(bias, "b"), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    b2.ret(b2.op("clamp", [conv], **clamp))
    b3 = Builder()  # a weight read at each call (the plug-in's live weights)
    m = b3.sym("m", 1, 1 << 16)
    lw = b3.op("linear", [b3.param("x", tensor("f32", m, 16)), b3.param("w", tensor("f32", 64, 16))])
    b3.ret(b3.op("clamp", [lw], **clamp))
    linear, conv1x1, live = braze.compile(b.module), braze.compile(b2.module), braze.compile(b3.module)
    for cm in (linear, conv1x1, live):
        lib = next(nd for nd in cm.module.main.nodes if nd.op == "fused" and nd.attrs["kind"] in ("gemm", "conv"))
        assert lib.attrs["post_ops"][-1] == act
    tw, tb = torch.from_numpy(w), torch.from_numpy(bias)
    eager = (lambda y: F.relu6(y)) if act == "relu6" else F.relu
    for rows in (3, 200, 20000):
        x = rng.standard_normal((rows, 16)).astype(np.float32)
        x[0, 0], x[1, 3], x[2, 5] = np.nan, np.inf, -np.inf
        want = eager(F.linear(torch.from_numpy(x), tw, tb)).numpy()
        assert np.isnan(want).sum() >= 64 and (want == 0).any() and ((want == 6).any() or act == "relu")
        np.testing.assert_allclose(linear(x), want, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{rows} rows")
        want = eager(F.linear(torch.from_numpy(x), tw)).numpy()
        np.testing.assert_allclose(live(x, w), want, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{rows} rows, live")
        xc = np.ascontiguousarray(np.resize(x, (max(rows // 8, 1), 8, 16)).transpose(2, 0, 1))[None]
        want = eager(F.conv2d(torch.from_numpy(xc), tw.reshape(64, 16, 1, 1), tb)).numpy()
        assert np.isnan(want).sum() >= 64
        np.testing.assert_allclose(conv1x1(xc), want, rtol=1e-5, atol=1e-5, equal_nan=True,
                                   err_msg=f"{xc.shape} input")


def test_relu_after_a_residual_add_keeps_nan_on_every_path():
    """relu(x @ w.T + b + r) is one library call (post_ops residual, relu: BRAZE_ACT_AFTER_RESIDUAL)
    at few rows (the small-M kernel) and many (oneDNN's primitive, then the helper's pass): a NaN
    or inf from either operand, and a residual that makes the sum negative, give eager's values."""
    import braze
    from braze.ops import Builder, tensor
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    b = Builder()
    n = b.sym("n", 1, 1 << 16)
    lin = b.op("linear", [b.param("x", tensor("f32", n, 16)), b.constant(w, "w"), b.constant(bias, "b")])
    b.ret(b.relu(b.add(lin, b.param("r", tensor("f32", n, 64)))))
    cm = braze.compile(b.module)
    lib, = [nd for nd in cm.module.main.nodes if nd.op == "fused"]
    assert lib.attrs["post_ops"] == ["residual", "relu"]
    for rows in (3, 200, 20000):
        x = rng.standard_normal((rows, 16)).astype(np.float32)
        r = rng.standard_normal((rows, 64)).astype(np.float32)
        x[0, 0], x[1, 3] = np.nan, np.inf
        r[2, :8], r[2, 8:16] = np.nan, -np.inf
        want = F.relu(F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias))
                      + torch.from_numpy(r)).numpy()
        assert np.isnan(want).sum() >= 72 and (want == 0).any()
        np.testing.assert_allclose(cm(x, r), want, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{rows} rows")
