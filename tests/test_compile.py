"""braze.compile: inputs of every kind, clear errors out of the native entry, a shared cache."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import braze
from braze.errors import BrazeError, InputError
from braze.ops import Builder, tensor


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))


def _module():
    b = Builder()
    batch, seq = b.sym("batch", 1, 16), b.sym("seq", 1, 64)
    x = b.param("x", tensor("f32", batch, seq, 8))
    w = b.constant(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32), "w")
    y = b.op("linear", [x, w])
    b.ret(b.softmax(b.gelu(y), axis=-1))
    return b.module


def test_numpy_in_numpy_out_and_matches_reference():
    mod = _module()
    m = braze.compile(mod)
    for bs, s in [(1, 1), (3, 7), (16, 64)]:
        x = np.random.rand(bs, s, 8).astype(np.float32)
        y = m(x)
        assert isinstance(y, np.ndarray)
        np.testing.assert_allclose(y, braze.reference.run(mod, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad,err", [
    (np.zeros((3, 8), np.float32), "rank"),
    (np.zeros((3, 5, 8), np.float64), "dtype"),
    (np.zeros((3, 5, 7), np.float32), "dim 2 is 7, expected 8"),
    (np.zeros((17, 5, 8), np.float32), "outside its range"),
])
def test_bad_inputs_raise_and_the_process_keeps_working(bad, err):
    mod = _module()
    m = braze.compile(mod)
    with pytest.raises(InputError, match=err):
        m(bad)
    x = np.ones((2, 3, 8), np.float32)
    np.testing.assert_allclose(m(x), braze.reference.run(mod, x), rtol=1e-5, atol=1e-6)


def test_torch_module_compiles_and_takes_tensors():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    batch = torch.export.Dim("batch", min=1, max=128)
    m = braze.compile(net, (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    for b in (1, 5, 128):
        x = torch.randn(b, 8)
        y = m(x)
        assert isinstance(y, torch.Tensor)
        torch.testing.assert_close(y, net(x).detach(), rtol=1e-5, atol=1e-5)


def test_unknown_model_kind_is_a_clear_error():
    with pytest.raises(BrazeError, match="does not know how to read"):
        braze.compile(42)


def test_two_processes_compile_one_model_into_one_cache(tmp_path):
    script = textwrap.dedent("""
        import sys, numpy as np, braze
        from braze.ops import Builder, tensor
        b = Builder()
        n = b.sym("n")
        x = b.param("x", tensor("f32", n, 33))
        b.ret(b.tanh(b.mul(x, x)))
        m = braze.compile(b.module)
        x = np.linspace(-2, 2, 5 * 33, dtype=np.float32).reshape(5, 33)
        assert np.allclose(m(x), np.tanh(x * x), rtol=1e-5, atol=1e-6)
        print(braze.stats()["native_compiles"], braze.stats()["cache_hits"])
    """)
    env = {**__import__("os").environ, "BRAZE_CACHE_DIR": str(tmp_path / "shared")}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    counts = [tuple(map(int, o.split())) for o, _ in outs]
    assert sum(c[0] for c in counts) == 1 and sum(c[1] for c in counts) == 1  # one compiled, one hit
    libs = list((tmp_path / "shared").rglob("*.so"))
    assert len(libs) == 1
    assert not [p for p in (tmp_path / "shared").rglob("*") if ".tmp" in p.name]


@pytest.mark.parametrize("padding,stride", [((0, 1, 1, 0), (2, 2)), ((2, 0, 1, 3), (1, 2))])
def test_conv_with_asymmetric_padding_compiles(padding, stride):
    """ONNX SAME_UPPER / SAME_LOWER convolutions pad one side more than the other."""
    rng = np.random.default_rng(5)
    b = Builder()
    n, h, w = b.sym("n", 1, 4), b.sym("h", 3, 64), b.sym("w", 4, 64)
    x = b.param("x", tensor("f32", n, 6, h, w))
    wt = b.constant(rng.standard_normal((8, 6, 3, 3)).astype(np.float32), "w")
    bias = b.constant(rng.standard_normal(8).astype(np.float32), "b")
    y = b.op("conv2d", [x, wt, bias], stride=stride, padding=padding, dilation=(1, 1), groups=1)
    b.ret(b.relu(y))
    mod = b.module
    m = braze.compile(mod)
    for shape in [(1, 6, 3, 4), (2, 6, 11, 9), (4, 6, 32, 17)]:
        xv = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(m(xv), braze.reference.run(mod, xv), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs,ws", [
    (("b", 1, "m", 8), (1, 3, 8, 5)),    # [b,1,m,k] @ [1,h,k,n]
    (("b", 3, "m", 8), (3, 8, 5)),       # rank 4 @ rank 3
    (("m", 8), ("b", 2, 8, 5)),          # 2-D left operand
    ((2, 1, "b", "m", 8), (1, 4, "b", 8, 5)),
])
def test_matmul_broadcasts_batch_dims_natively(xs, ws):
    b = Builder()
    syms = {"b": b.sym("b", 1, 8), "m": b.sym("m", 1, 32)}
    dims = lambda t: [syms.get(d, d) if isinstance(d, str) else d for d in t]
    x = b.param("x", tensor("f32", *dims(xs)))
    w = b.param("w", tensor("f32", *dims(ws)))
    b.ret(b.op("matmul", [x, w]))
    mod = b.module
    m = braze.compile(mod)
    rng = np.random.default_rng(len(xs) * 10 + len(ws))
    for env in ({"b": 1, "m": 1}, {"b": 3, "m": 7}, {"b": 8, "m": 32}):
        conc = lambda t: tuple(env.get(d, d) if isinstance(d, str) else d for d in t)
        xv = rng.standard_normal(conc(xs)).astype(np.float32)
        wv = rng.standard_normal(conc(ws)).astype(np.float32)
        got = m(xv, wv)
        np.testing.assert_allclose(got, np.matmul(xv.astype(np.float64), wv), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, braze.reference.run(mod, xv, wv), rtol=1e-5, atol=1e-5)


def test_matmul_symbolic_batch_dim_against_a_static_one_is_checked_at_run_time():
    """Type inference records p == 2 (no run-time broadcast of a symbol that happens to be 1),
    so the native entry rejects other values with the constraint's message."""
    b = Builder()
    p = b.sym("p", 1, 8)
    x = b.param("x", tensor("f32", p, 4, 8))
    w = b.param("w", tensor("f32", 2, 8, 5))
    b.ret(b.op("matmul", [x, w]))
    m = braze.compile(b.module)
    wv = np.ones((2, 8, 5), np.float32)
    assert m(np.ones((2, 4, 8), np.float32), wv).shape == (2, 4, 5)
    with pytest.raises(InputError):
        m(np.ones((3, 4, 8), np.float32), wv)


@pytest.mark.parametrize("dtype, ws", [("i64", (8, 5)), ("f32", (8,))])
def test_native_limits_are_unsupported_op_errors(dtype, ws):
    """What the native backend does not do yet (int matmul, a vector operand) is an
    UnsupportedOpError, the error that says "not supported", not a bare BrazeError."""
    from braze.errors import UnsupportedOpError
    b = Builder()
    x = b.param("x", tensor(dtype, 4, 8))
    w = b.param("w", tensor(dtype, *ws))
    b.ret(b.op("matmul", [x, w]))
    with pytest.raises(UnsupportedOpError, match="not supported natively"):
        braze.compile(b.module)


def test_gemm_with_an_epilogue_on_an_empty_batch():
    """A library GEMM whose result goes to scratch for an epilogue kernel: at M = 0 the scratch
    has no memory (NULL), which the library call must accept (it was 'invalid arguments')."""
    b = Builder()
    m = b.sym("m", 0, 16)
    x = b.param("x", tensor("f32", m, 3))
    bias = b.param("bias", tensor("f32", 4))
    w = b.constant(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32), "w")
    wt = b.param("wt", tensor("f32", 3, 4))
    y = b.op("add", [b.op("linear", [x, w]), bias])
    z = b.op("add", [b.op("matmul", [x, wt]), bias])
    b.ret(b.op("tanh", [y]), b.op("tanh", [z]))
    mod = b.module
    cm = braze.compile(mod)
    rng = np.random.default_rng(2)
    bv = rng.standard_normal(4).astype(np.float32)
    wv = rng.standard_normal((3, 4)).astype(np.float32)
    for n in (0, 1, 5):
        xv = rng.standard_normal((n, 3)).astype(np.float32)
        for got, want in zip(cm(xv, bv, wv), braze.reference.run(mod, xv, bv, wv)):
            assert got.shape == (n, 4)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
