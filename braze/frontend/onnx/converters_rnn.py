"""ONNX's recurrent layers, RNN, GRU and LSTM, unrolled at import over a sequence of static length (as
Scan is: ``converters_control.MAX_STEPS`` steps at most). The input products of every step are one
GEMM before the loop; each step adds its hidden state's product and applies the gates, as ONNX's
equations write them (gate orders: LSTM i, o, f, c; GRU z, r, h). Batch and hidden sizes may be
symbolic.

``sequence_lens`` masks the steps past each batch row's length: the state stays, and Y is 0 there.
A reverse direction walks the steps from the last, so each row's first step is its own last one.
The activations are ONNX ops converted as they are elsewhere (``Importer.run_subgraph`` of a one-node
graph), or Affine and ScaledTanh, which ONNX defines only here."""

from __future__ import annotations

from ...ir import sym as S
from .convert import converter
from .converters_control import MAX_STEPS

_RNN_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout")
# activations that take alpha (and beta), with ONNX's defaults
_ALPHA = {"LeakyRelu": 0.01, "HardSigmoid": 0.2, "Elu": 1.0, "ThresholdedRelu": 1.0, "Affine": 1.0, "ScaledTanh": 1.0}
_BETA = {"HardSigmoid": 0.5, "Affine": 0.0, "ScaledTanh": 1.0}
_PLAIN = ("Sigmoid", "Tanh", "Relu", "Softsign", "Softplus")


def _activations(ctx, defaults: list[str], nd: int) -> list:
    """One function per activation of every direction (a value -> a value), in ONNX's order."""
    names = ctx.attr("activations") or defaults * nd
    if len(names) != len(defaults) * nd:
        raise ctx.unsupported(f"{len(names)} activations for {nd} direction(s) of {len(defaults)} each")
    alphas, betas = list(ctx.attr("activation_alpha") or []), list(ctx.attr("activation_beta") or [])
    fns = []
    for name in names:
        name = {n.lower(): n for n in (*_PLAIN, *_ALPHA)}.get(name.lower(), name)
        if name not in _PLAIN and name not in _ALPHA:
            raise ctx.unsupported(f"activation {name!r}",
                                  hint=f"one of {', '.join(sorted((*_PLAIN, *_ALPHA)))}")
        alpha = (alphas.pop(0) if alphas else _ALPHA[name]) if name in _ALPHA else None
        beta = (betas.pop(0) if betas else _BETA[name]) if name in _BETA else None
        fns.append(_activation(ctx, name, alpha, beta))
    return fns


def _activation(ctx, name, alpha, beta):
    def f(x):
        s = lambda v: ctx.scalar(v, x.dtype)  # noqa: E731
        if name == "Affine":
            return ctx.op("add", ctx.op("mul", x, s(alpha)), s(beta))
        if name == "ScaledTanh":
            return ctx.op("mul", ctx.op("tanh", ctx.op("mul", x, s(beta))), s(alpha))
        return ctx.onnx_op(name, x, **{k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None})
    return f


class _Layer:
    """What the three ops share: the inputs in [seq, batch, feature] order, the per-direction
    weights, the loop over steps with the length mask, and the outputs in the node's layout."""

    def __init__(self, ctx, gates: int):
        self.ctx = ctx
        self.layout = ctx.attr("layout", 0)
        x = ctx.value(0)
        self.x = ctx.op("permute", x, perm=(1, 0, 2)) if self.layout else x
        self.w, self.r = ctx.value(1), ctx.value(2)
        self.b = ctx.value(3) if ctx.tv(3) is not None else None
        self.lens = ctx.value(4) if ctx.tv(4) is not None else None
        self.h0 = self.state_input(5)
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.unsupported(f"direction={direction!r}")
        self.dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.hidden = self.r.shape[-1]
        self.gates = gates
        self.rt: dict = {}  # (direction, first gate, end gate) -> R^T's columns (_rh)
        self.clip = ctx.attr("clip")
        steps = self.x.shape[0]
        if S.is_symbolic(steps) or not 1 <= steps <= MAX_STEPS:
            raise ctx.unsupported(f"a sequence of {steps} steps: braze unrolls {ctx.node.op_type} over 1 to "
                                  f"{MAX_STEPS} steps of a static length",
                                  hint="export with a fixed sequence length")
        self.steps = steps

    def state_input(self, i: int):
        """Input ``i`` (an initial state) as [num_directions, batch, hidden], or None."""
        if self.ctx.tv(i) is None:
            return None
        v = self.ctx.value(i)
        return self.ctx.op("permute", v, perm=(1, 0, 2)) if self.layout else v

    def take(self, v, d: int):
        """Direction ``d`` of a [num_directions, ...] tensor."""
        return self.ctx.op("squeeze", self.ctx.op("slice", v, axis=0, start=d, end=d + 1), axes=(0,))

    def part(self, v, k: int, axis: int = -1):
        """Gate ``k``'s block of hidden-size rows (or columns) along ``axis``."""
        h = self.hidden
        return self.ctx.op("slice", v, axis=axis, start=S.mul(k, h), end=S.mul(k + 1, h))

    def clipped(self, v):
        return v if self.clip is None else self.ctx.op("clamp", v, min=-float(self.clip), max=float(self.clip))

    def biases(self, d: int):
        """(Wb, Rb) of direction ``d``, or (None, None)."""
        if self.b is None:
            return None, None
        b = self.take(self.b, d)
        n = S.mul(self.gates, self.hidden)
        return (self.ctx.op("slice", b, axis=0, start=0, end=n),
                self.ctx.op("slice", b, axis=0, start=n, end=S.mul(2, n)))

    def inputs_product(self, d: int, bias):
        """X W^T (+ ``bias``) for every step at once: [steps, batch, gates * hidden]."""
        ctx = self.ctx
        xw = ctx.op("matmul", self.x, ctx.op("permute", self.take(self.w, d), perm=(1, 0)))
        return xw if bias is None else ctx.op("add", xw, bias)

    def initial(self, v, d: int):
        if v is not None:
            return self.take(v, d)
        return self.ctx.op("full", shape=(self.x.shape[1], self.hidden), value=0.0, dtype=self.x.dtype)

    def step_input(self, xw, t: int):
        return self.ctx.op("squeeze", self.ctx.op("slice", xw, axis=0, start=t, end=t + 1), axes=(0,))

    def valid(self, t: int):
        """[batch, 1] bool: whether step ``t`` lies within each row's length (None: every row)."""
        if self.lens is None:
            return None
        ok = self.ctx.op("less", self.ctx.scalar(t, self.lens.dtype), self.lens)
        return self.ctx.op("unsqueeze", ok, axes=(1,))

    def order(self, d: int):
        return range(self.steps - 1, -1, -1) if self.dirs[d] == "reverse" else range(self.steps)

    def outputs(self, ys: list, finals: list[list]):
        """Y [steps, dirs, batch, hidden] (or [batch, steps, dirs, hidden]) and each state [dirs, batch,
        hidden] (or [batch, dirs, hidden]) from each direction's per-step outputs and final states."""
        ctx = self.ctx
        per_dir = [ctx.op("concat", *[ctx.op("unsqueeze", y, axes=(0,)) for y in seq], axis=0) for seq in ys]
        y = ctx.op("concat", *[ctx.op("unsqueeze", v, axes=(1,)) for v in per_dir], axis=1) \
            if len(per_dir) > 1 else ctx.op("unsqueeze", per_dir[0], axes=(1,))
        states = []
        for f in finals:
            s = ctx.op("concat", *[ctx.op("unsqueeze", v, axes=(0,)) for v in f], axis=0) \
                if len(f) > 1 else ctx.op("unsqueeze", f[0], axes=(0,))
            states.append(ctx.op("permute", s, perm=(1, 0, 2)) if self.layout else s)
        if self.layout:
            y = ctx.op("permute", y, perm=(2, 0, 1, 3))
        return [y, *states]

    def run(self, step, n_states: int, init: list, input_bias=None):
        """Every direction's loop: ``step(d, xw_t, states) -> (y_t, new states)``; ``input_bias(d)`` is
        what the inputs' product adds (default Wb + Rb)."""
        ctx = self.ctx
        ys, finals = [], [[] for _ in range(n_states)]
        for d in range(len(self.dirs)):
            if input_bias is None:
                wb, rb = self.biases(d)
                bias = None if wb is None else ctx.op("add", wb, rb)
            else:
                bias = input_bias(d)
            xw = self.inputs_product(d, bias)
            states = [self.initial(v, d) for v in init]
            seq = [None] * self.steps
            for t in self.order(d):
                y, new = step(d, self.step_input(xw, t), states)
                ok = self.valid(t)
                if ok is not None:
                    new = [ctx.op("where", ok, n, s) for n, s in zip(new, states)]
                    y = ctx.op("where", ok, y, ctx.scalar(0, y.dtype))
                states = new
                seq[t] = y
            ys.append(seq)
            for k, s in enumerate(states):
                finals[k].append(s)
        return self.outputs(ys, finals)


def _rh(layer, d: int, h, k0: int, k1: int):
    """H R^T for gates k0..k1-1 at once (one product per step, not one per gate): [batch, gates * hidden]."""
    key = (d, k0, k1)
    if key not in layer.rt:  # each direction's transposed weights, made once for every step
        r = layer.take(layer.r, d)
        if (k0, k1) != (0, layer.gates):
            r = layer.ctx.op("slice", r, axis=0, start=S.mul(k0, layer.hidden), end=S.mul(k1, layer.hidden))
        layer.rt[key] = layer.ctx.op("permute", r, perm=(1, 0))
    return layer.ctx.op("matmul", h, layer.rt[key])


@converter("RNN", attrs=_RNN_ATTRS)
def _rnn(ctx):
    layer = _Layer(ctx, 1)
    f = _activations(ctx, ["Tanh"], len(layer.dirs))

    def step(d, xw, states):
        h = f[d](layer.clipped(ctx.op("add", xw, _rh(layer, d, states[0], 0, 1))))
        return h, [h]
    return layer.run(step, 1, [layer.h0])


@converter("GRU", attrs=_RNN_ATTRS + ("linear_before_reset",))
def _gru(ctx):
    layer = _Layer(ctx, 3)
    acts = _activations(ctx, ["Sigmoid", "Tanh"], len(layer.dirs))
    before = bool(ctx.attr("linear_before_reset", 0))
    h2 = S.mul(2, layer.hidden)

    def input_bias(d):
        """Wb + Rb for z and r, Wbh for h: Rbh sits inside the reset gate's product."""
        wb, rb = layer.biases(d)
        if wb is None:
            return None
        zr = ctx.op("add", ctx.op("slice", wb, axis=0, start=0, end=h2), ctx.op("slice", rb, axis=0, start=0, end=h2))
        return ctx.op("concat", zr, layer.part(wb, 2, axis=0), axis=0)

    rbh = [layer.part(layer.biases(d)[1], 2, axis=0) if layer.b is not None else None for d in range(len(layer.dirs))]

    def step(d, xw, states):
        f, g = acts[2 * d], acts[2 * d + 1]
        h = states[0]
        # z and r from one product; h's gate from its own (of r * H unless linear_before_reset)
        hz = _rh(layer, d, h, 0, 3 if before else 2)
        z = f(layer.clipped(ctx.op("add", layer.part(xw, 0), layer.part(hz, 0))))
        r = f(layer.clipped(ctx.op("add", layer.part(xw, 1), layer.part(hz, 1))))
        hr = layer.part(hz, 2) if before else _rh(layer, d, ctx.op("mul", r, h), 2, 3)
        if rbh[d] is not None:
            hr = ctx.op("add", hr, rbh[d])
        n = g(layer.clipped(ctx.op("add", layer.part(xw, 2), ctx.op("mul", r, hr) if before else hr)))
        new = ctx.op("add", ctx.op("mul", ctx.op("sub", ctx.scalar(1, h.dtype), z), n), ctx.op("mul", z, h))
        return new, [new]
    return layer.run(step, 1, [layer.h0], input_bias)


@converter("LSTM", attrs=_RNN_ATTRS + ("input_forget",))
def _lstm(ctx):
    layer = _Layer(ctx, 4)
    acts = _activations(ctx, ["Sigmoid", "Tanh", "Tanh"], len(layer.dirs))
    c0 = layer.state_input(6)
    peep = ctx.value(7) if ctx.tv(7) is not None else None
    couple = bool(ctx.attr("input_forget", 0))

    # each direction's peepholes (P holds i, o, f), sliced once for every step
    peeps = [[layer.part(layer.take(peep, d), k, axis=0) for k in range(3)] if peep is not None else None
             for d in range(len(layer.dirs))]

    def step(d, xw, states):
        f, g, hf = acts[3 * d: 3 * d + 3]
        h, c = states
        gates = ctx.op("add", xw, _rh(layer, d, h, 0, 4))  # every gate's input in one product

        def pre(k, pk=None, cell=None):
            """Gate ``k``'s input (W's order i, o, f, c), with peephole ``pk`` times ``cell``."""
            v = layer.part(gates, k)
            if peeps[d] is not None and pk is not None:
                v = ctx.op("add", v, ctx.op("mul", peeps[d][pk], cell))
            return layer.clipped(v)
        i = f(pre(0, 0, c))
        forget = ctx.op("sub", ctx.scalar(1, h.dtype), i) if couple else f(pre(2, 2, c))
        c_new = ctx.op("add", ctx.op("mul", forget, c), ctx.op("mul", i, g(pre(3))))
        o = f(pre(1, 1, c_new))
        h_new = ctx.op("mul", o, hf(c_new))
        return h_new, [h_new, c_new]
    return layer.run(step, 2, [layer.h0, c0])
