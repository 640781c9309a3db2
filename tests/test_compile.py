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
