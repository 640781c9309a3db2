"""ONNX DFT, STFT and the window functions (converters_spectral.py), compiled natively, against
numpy.fft and torch.stft: forward, inverse, one-sided both ways, odd and even lengths, a length
that cuts or pads the signal, complex input, every signal axis, symbolic batch sizes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _dft_model(shape, axis, length=None, **attrs):
    ins = [helper.make_tensor_value_info("x", F, shape)]
    nodes = [helper.make_node("Constant", [], ["ax"], value=helper.make_tensor("ax", I64, [], [axis]))]
    names = ["x", "", "ax"]
    if length is not None:
        nodes.append(helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", I64, [], [length])))
        names[1] = "n"
    nodes.append(helper.make_node("DFT", names, ["y"], **attrs))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", F, [None] * len(shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _complex(y):
    return y[..., 0] + 1j * y[..., 1]


@pytest.mark.parametrize("n, length, axis", [(8, None, 1), (7, None, 2), (6, 9, 1), (9, 5, 2)])
def test_forward_and_inverse_dft_are_numpy_s(n, length, axis):
    shape = ["b", n, 3, 2] if axis == 1 else ["b", 3, n, 2]
    fwd = braze.compile(_dft_model(shape, axis, length))
    inv = braze.compile(_dft_model(shape, axis, length, inverse=1))
    for b in (1, 4):
        x = np.random.default_rng(b).standard_normal([b] + shape[1:]).astype(np.float32)
        z = _complex(x.astype(np.float64))
        np.testing.assert_allclose(_complex(fwd(x)), np.fft.fft(z, n=length, axis=axis), rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(_complex(inv(x)), np.fft.ifft(z, n=length, axis=axis), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("n, length", [(8, None), (7, None), (10, 7)])
def test_onesided_dft_is_rfft_and_its_inverse_is_irfft(n, length):
    rfft = braze.compile(_dft_model(["b", n, 1], 1, length, onesided=1))
    x = np.random.default_rng(n).standard_normal((3, n, 1)).astype(np.float32)
    want = np.fft.rfft(x[..., 0].astype(np.float64), n=length, axis=1)
    np.testing.assert_allclose(_complex(rfft(x)), want, rtol=1e-5, atol=2e-5)
    bins = want.shape[1]
    full = length or n
    irfft = braze.compile(_dft_model(["b", bins, 2], 1, full, inverse=1, onesided=1))
    spec = np.stack([want.real, want.imag], -1).astype(np.float32)
    got = irfft(spec)
    assert got.shape == (3, full, 1)
    np.testing.assert_allclose(got[..., 0], np.fft.irfft(want, n=full, axis=1), rtol=1e-5, atol=2e-5)


def test_stft_is_torch_s():
    torch = pytest.importorskip("torch")
    frame, step, length = 16, 5, 60
    ins = [helper.make_tensor_value_info("x", F, ["b", length, 1]), helper.make_tensor_value_info("w", F, [frame])]
    nodes = [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", I64, [], [step])),
             helper.make_node("STFT", ["x", "s", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", F, [None] * 4)])
    m = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    w = torch.hann_window(frame)
    for b in (1, 2):
        x = torch.randn(b, length)
        want = torch.stft(x, frame, step, window=w, center=False, onesided=True, return_complex=True)
        got = m(x.numpy()[..., None], w.numpy())
        np.testing.assert_allclose(_complex(got), want.transpose(1, 2).numpy(), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("op, torch_fn", [("HannWindow", "hann_window"), ("HammingWindow", "hamming_window"),
                                          ("BlackmanWindow", "blackman_window")])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_are_torch_s(op, torch_fn, periodic):
    torch = pytest.importorskip("torch")
    nodes = [helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", I64, [], [11])),
             helper.make_node(op, ["n"], ["y"], periodic=periodic)]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", F, [11])])
    m = braze.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    kw = {"alpha": 25 / 46, "beta": 21 / 46} if op == "HammingWindow" else {}
    want = getattr(torch, torch_fn)(11, periodic=bool(periodic), dtype=torch.float64, **kw).numpy()
    np.testing.assert_allclose(m(), want, rtol=1e-6, atol=1e-7)


def test_a_symbolic_signal_length_is_refused_by_name():
    with pytest.raises(UnsupportedOpError, match="static lengths"):
        braze.import_onnx(_dft_model(["b", "n", 2], 1))


def _mel_model(bins, length, rate, lo, hi):
    I32 = TensorProto.INT32
    c = lambda name, t, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, t, [], [v]))  # noqa: E731
    nodes = [c("b", I32, bins), c("n", I32, length), c("r", I32, rate), c("lo", F, lo), c("hi", F, hi),
             helper.make_node("MelWeightMatrix", ["b", "n", "r", "lo", "hi"], ["y"])]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", F, [length // 2 + 1, bins])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bins, length, rate, lo, hi", [(8, 64, 16000, 0.0, 8000.0), (5, 33, 8000, 100.0, 3000.0)])
def test_mel_weight_matrix_is_onnx_s(bins, length, rate, lo, hi):
    from onnx.reference import ReferenceEvaluator

    m = _mel_model(bins, length, rate, lo, hi)
    np.testing.assert_array_equal(braze.compile(m)(), ReferenceEvaluator(m).run(None, {})[0])


def test_mel_edges_past_nyquist_are_refused():
    with pytest.raises(UnsupportedOpError, match="upper_edge_hertz <= sample_rate / 2"):
        braze.import_onnx(_mel_model(8, 64, 16000, 0.0, 20000.0))
