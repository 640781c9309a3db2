"""ONNX RNN, GRU and LSTM, unrolled at import (converters_rnn.py), compiled natively at symbolic batch
sizes: against torch's nn.LSTM / nn.GRU / nn.RNN with their weights reordered into ONNX's gate
order (an oracle written apart from ONNX's), and against NumPy loops of ONNX's equations for what torch
lacks (sequence lengths, clip, other activations, input_forget, peepholes)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _model(op, steps, inp, hidden, nd, layout=0, lens=False, state=False, peep=False, **attrs):
    g = GATES[op]
    x_shape = ["b", steps, inp] if layout else [steps, "b", inp]
    ins = [helper.make_tensor_value_info("X", F, x_shape),
           helper.make_tensor_value_info("W", F, [nd, g * hidden, inp]),
           helper.make_tensor_value_info("R", F, [nd, g * hidden, hidden]),
           helper.make_tensor_value_info("B", F, [nd, 2 * g * hidden])]
    names = ["X", "W", "R", "B", "", "", "", ""]
    if lens:
        ins.append(helper.make_tensor_value_info("L", TensorProto.INT32, ["b"]))
        names[4] = "L"
    if state:
        h_shape = ["b", nd, hidden] if layout else [nd, "b", hidden]
        ins.append(helper.make_tensor_value_info("H0", F, h_shape))
        names[5] = "H0"
        if op == "LSTM":
            ins.append(helper.make_tensor_value_info("C0", F, h_shape))
            names[6] = "C0"
    if peep:
        ins.append(helper.make_tensor_value_info("P", F, [nd, 3 * hidden]))
        names[7] = "P"
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    direction = "bidirectional" if nd == 2 else attrs.pop("direction", "forward")
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, F, [None] * (4 if o == "Y" else 3)) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _weights(op, torch_layer, nd):
    """ONNX's W, R and B from a torch layer's parameters: torch orders LSTM gates i, f, g, o (ONNX
    i, o, f, c) and GRU gates r, z, n (ONNX z, r, h)."""
    order = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}[op]

    def re(t):
        blocks = np.split(t.detach().numpy(), len(order))
        return np.concatenate([blocks[i] for i in order])
    sfx = ["", "_reverse"][:nd]
    W = np.stack([re(getattr(torch_layer, f"weight_ih_l0{s}")) for s in sfx])
    R = np.stack([re(getattr(torch_layer, f"weight_hh_l0{s}")) for s in sfx])
    B = np.stack([np.concatenate([re(getattr(torch_layer, f"bias_ih_l0{s}")), re(getattr(torch_layer, f"bias_hh_l0{s}"))])
                  for s in sfx])
    return W, R, B


@pytest.mark.parametrize("op, nd, layout", [("LSTM", 1, 0), ("LSTM", 2, 1), ("GRU", 2, 1), ("RNN", 1, 0),
                                             ("RNN", 2, 1)])
def test_against_torch(op, nd, layout):
    torch = pytest.importorskip("torch")
    steps, inp, hidden = 5, 3, 4
    torch.manual_seed(0)
    layer = getattr(torch.nn, op)(inp, hidden, bidirectional=nd == 2, batch_first=bool(layout))
    W, R, B = _weights(op, layer, nd)
    m = braze.compile(_model(op, steps, inp, hidden, nd, layout=layout, state=True,
                             **({"linear_before_reset": 1} if op == "GRU" else {})))
    rng = np.random.default_rng(1)
    for b in (1, 2, 7):
        x = rng.standard_normal((b, steps, inp) if layout else (steps, b, inp)).astype(np.float32)
        h0 = rng.standard_normal((nd, b, hidden)).astype(np.float32)
        c0 = rng.standard_normal((nd, b, hidden)).astype(np.float32)
        state = (torch.from_numpy(h0), torch.from_numpy(c0)) if op == "LSTM" else torch.from_numpy(h0)
        with torch.no_grad():
            y, hs = layer(torch.from_numpy(x), state)
        hn = hs[0] if op == "LSTM" else hs
        st = [np.swapaxes(h0, 0, 1)] if layout else [h0]
        if op == "LSTM":
            st.append(np.swapaxes(c0, 0, 1) if layout else c0)
        got = m(x, W, R, B, *st)
        # torch's Y is [steps, batch, dirs * hidden] (or batch first); ONNX's [steps, dirs, batch, hidden]
        y = y.numpy().reshape(b, steps, nd, hidden).transpose(0, 1, 2, 3) if layout else \
            y.numpy().reshape(steps, b, nd, hidden).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(got[0], y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], np.swapaxes(hn.numpy(), 0, 1) if layout else hn.numpy(),
                                   rtol=1e-5, atol=1e-5)


_ACT = {"Sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)), "Tanh": lambda x, a, b: np.tanh(x),
        "Relu": lambda x, a, b: np.maximum(x, 0), "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
        "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1), "LeakyRelu": lambda x, a, b: np.where(x < 0, a * x, x)}


def _numpy_layer(op, attrs, X, W, R, B, L, H0, C0=None, P=None):
    """One direction of ONNX's equations, step by step (ONNX's reference evaluator ignores clip,
    activations, input_forget and lengths)."""
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op]
    names = attrs.get("activations", defaults)
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    fns = []
    for n in names:
        a = (alphas.pop(0) if alphas else {"HardSigmoid": 0.2, "LeakyRelu": 0.01}[n]) \
            if n in ("HardSigmoid", "LeakyRelu") else None
        b = (betas.pop(0) if betas else 0.5) if n == "HardSigmoid" else None
        fns.append(lambda x, n=n, a=a, b=b: _ACT[n](x, a, b))
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    W, R, B, H0 = W[0], R[0], B[0], H0[0]
    Wb, Rb = np.split(B, 2)
    H, C = H0.copy(), (C0[0].copy() if C0 is not None else None)
    steps = X.shape[0]
    Y = np.zeros((steps,) + H.shape, np.float32)
    order = range(steps - 1, -1, -1) if attrs.get("direction") == "reverse" else range(steps)
    for t in order:
        ok = (t < L)[:, None]
        x = X[t]
        if op == "RNN":
            Hn, Cn = fns[0](cl(x @ W.T + H @ R.T + Wb + Rb)), None
        elif op == "GRU":
            Wz, Wr, Wh = np.split(W, 3)
            Rz, Rr, Rh = np.split(R, 3)
            bz, br, bh = np.split(Wb, 3)
            rz, rr, rh = np.split(Rb, 3)
            z = fns[0](cl(x @ Wz.T + H @ Rz.T + bz + rz))
            r = fns[0](cl(x @ Wr.T + H @ Rr.T + br + rr))
            h = fns[1](cl(x @ Wh.T + (r * H) @ Rh.T + rh + bh))
            Hn, Cn = (1 - z) * h + z * H, None
        else:
            g = x @ W.T + H @ R.T + Wb + Rb
            gi, go, gf, gc = np.split(g, 4, -1)
            pi, po, pf = np.split(P[0], 3)
            i = fns[0](cl(gi + pi * C))
            f = 1 - i if attrs.get("input_forget") else fns[0](cl(gf + pf * C))
            Cn = f * C + i * fns[1](cl(gc))
            o = fns[0](cl(go + po * Cn))
            Hn = o * fns[2](Cn)
        Y[t] = np.where(ok, Hn, 0)
        H = np.where(ok, Hn, H)
        if Cn is not None:
            C = np.where(ok, Cn, C)
    out = [Y[:, None], H[None]]
    return out + ([C[None]] if C is not None else [])


@pytest.mark.parametrize("op, attrs", [
    ("LSTM", {"clip": 0.7, "input_forget": 1}),
    ("LSTM", {"activations": ["HardSigmoid", "LeakyRelu", "Softsign"], "activation_alpha": [0.3, 0.1],
              "activation_beta": [0.4], "direction": "reverse"}),
    ("GRU", {"linear_before_reset": 0, "direction": "reverse", "clip": 1.5}),
    ("RNN", {"activations": ["Relu"], "direction": "reverse"}),
])
def test_against_numpy_with_lengths(op, attrs):
    steps, inp, hidden = 6, 3, 5
    peep = op == "LSTM"
    model = _model(op, steps, inp, hidden, 1, lens=True, state=True, peep=peep, **dict(attrs))
    m = braze.compile(model)
    rng = np.random.default_rng(2)
    g = GATES[op]
    for b, lens in ((1, [6]), (3, [6, 1, 4]), (4, [2, 6, 5, 3])):
        feed = {"X": rng.standard_normal((steps, b, inp)).astype(np.float32),
                "W": rng.standard_normal((1, g * hidden, inp)).astype(np.float32) * 0.5,
                "R": rng.standard_normal((1, g * hidden, hidden)).astype(np.float32) * 0.5,
                "B": rng.standard_normal((1, 2 * g * hidden)).astype(np.float32) * 0.2,
                "L": np.array(lens, np.int32),
                "H0": rng.standard_normal((1, b, hidden)).astype(np.float32)}
        if op == "LSTM":
            feed["C0"] = rng.standard_normal((1, b, hidden)).astype(np.float32)
            feed["P"] = rng.standard_normal((1, 3 * hidden)).astype(np.float32) * 0.3
        want = _numpy_layer(op, attrs, feed["X"], feed["W"], feed["R"], feed["B"], feed["L"], feed["H0"],
                            feed.get("C0"), feed.get("P"))
        got = m(*[feed[i.name] for i in model.graph.input])
        for gv, wv in zip(got, want):
            np.testing.assert_allclose(gv, wv, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_rows_past_their_length_keep_their_state_and_output_zeros(direction):
    """Each row is its own sequence of its length: the same as running that row alone, cut."""
    steps, inp, hidden = 5, 2, 3
    m = braze.compile(_model("GRU", steps, inp, hidden, 1, lens=True, direction=direction))
    cut = braze.compile(_model("GRU", 2, inp, hidden, 1, direction=direction))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((steps, 3, inp)).astype(np.float32)
    W = rng.standard_normal((1, 3 * hidden, inp)).astype(np.float32)
    R = rng.standard_normal((1, 3 * hidden, hidden)).astype(np.float32)
    B = rng.standard_normal((1, 6 * hidden)).astype(np.float32)
    y, yh = m(x, W, R, B, np.array([5, 2, 2], np.int32))
    y2, yh2 = cut(x[:2, 1:], W, R, B)
    np.testing.assert_allclose(y[:2, :, 1:], y2, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(y[2:, :, 1:], 0)
    np.testing.assert_allclose(yh[:, 1:], yh2, rtol=1e-6, atol=1e-6)


def test_a_symbolic_sequence_length_is_refused_by_name():
    model = _model("LSTM", "s", 2, 3, 1)
    with pytest.raises(UnsupportedOpError, match="unrolls LSTM over 1 to 256 steps"):
        braze.import_onnx(model)
