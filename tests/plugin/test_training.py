"""Training through the plug-in (issue 24): braze compiles the forward and the backward graph of a
step, with the weights as run-time inputs, at every shape from one compile; losses, gradients
and weights equal eager's."""

from __future__ import annotations

import contextlib
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402
from braze.testing import NativeCalls  # noqa: E402

nn = torch.nn
F = torch.nn.functional
BATCHES = (3, 5, 1, 7, 3, 9, 2, 5)  # batch 1 after a larger batch: dynamo specialises a graph to it


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.ln, self.b = nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.b(self.ln(F.gelu(self.a(x)))), y)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x, y):
        h = F.max_pool2d(torch.relu(self.conv(x)), 3, 2, 1)
        return F.cross_entropy(self.fc(h.mean((2, 3))), y)


class Conv1dNet(nn.Module):
    """1-d convolutions, one strided and dilated, one grouped: braze runs both graphs as over an
    image of height 1."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv1d(3, 8, 3, padding=1)
        self.b = nn.Conv1d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2, bias=False)
        self.fc = nn.Linear(8, 5)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(self.b(torch.relu(self.a(x))).mean(2)), y)


class TopK(nn.Module):
    """A top-k whose backward scatters k gradients a row, a scatter braze does not have."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.fc = nn.Linear(32, 16), nn.Linear(3, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(torch.topk(torch.tanh(self.a(x)), 3, dim=-1).values), y)


class ConvNet(nn.Module):
    """Convolutions with a bias, a stride, groups and dilation, trained through braze."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 12, 3, stride=2, padding=1, groups=4, bias=False)
        self.c = nn.Conv2d(12, 12, 3, padding=2, dilation=2)
        self.fc = nn.Linear(12, 5)

    def forward(self, x, y):
        h = torch.relu(self.b(torch.relu(self.a(x))))
        return F.cross_entropy(self.fc((self.c(h) + h).mean((2, 3))), y)


class BNNet(nn.Module):
    """Convolution, training-mode batch norm (running statistics updated), relu, a linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        # no conv bias: batch norm cancels it, its gradient is rounding noise, and AdamW turns
        # that noise into steps of lr
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.Linear(8, 5)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3))), y)


class Attention(nn.Module):
    """One attention layer over [batch, seq, 32] (4 query heads of 8), with the key/value heads
    grouped (GQA) or not, causal or with a padding mask, and a linear head."""

    def __init__(self, kv_heads=4, mode="causal"):
        super().__init__()
        torch.manual_seed(0)
        self.kv_heads, self.mode = kv_heads, mode
        # no key bias: softmax cancels it, its gradient is rounding noise (AdamW's steps of lr)
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 8 * kv_heads, bias=False), nn.Linear(32, 8 * kv_heads)
        self.o, self.fc = nn.Linear(32, 32), nn.Linear(32, 10)

    def forward(self, x, y):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 4, 8).transpose(1, 2)
        k, v = (f(x).view(b, s, self.kv_heads, 8).transpose(1, 2) for f in (self.k, self.v))
        if self.mode == "causal":
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != 4)
        else:  # the last key of every sequence masked out, as padding is
            keep = (torch.arange(s) < s - 1).expand(s, s)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=self.kv_heads != 4)
        h = x + self.o(a.transpose(1, 2).reshape(b, s, 32))
        return F.cross_entropy(self.fc(h.mean(1)), y)


class Embed(nn.Module):
    """Token embeddings (a padding index among them), LayerNorm, mean over the tokens, a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.ln, self.fc = nn.Embedding(50, 16, padding_idx=0), nn.LayerNorm(16), nn.Linear(16, 10)

    def forward(self, ids, y):
        return F.cross_entropy(self.fc(self.ln(self.emb(ids)).mean(1)), y)


class TiedLM(nn.Module):
    """An LM head that shares the embedding's weight (GPT-2's): the weight gets the head's gradient
    and the embedding's, which the backward adds."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.ln = nn.Embedding(50, 16, padding_idx=0), nn.LayerNorm(16)

    def forward(self, ids, y):
        logits = self.ln(self.emb(ids)) @ self.emb.weight.t()
        return F.cross_entropy(logits.reshape(-1, 50), ids.reshape(-1))


class Positions(nn.Module):
    """A learned position table added to every sequence (BERT's): its gradient is a sum over the
    batch, which the backward of a graph specialised to a batch of 1 passes on as it is."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.pos, self.fc = nn.Parameter(0.1 * torch.randn(1, 6, 32)), nn.Linear(32, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(torch.tanh(x + self.pos).mean(1)), y)


def _batch(model, b, seed):
    g = torch.Generator().manual_seed(seed)
    if isinstance(model, Positions):
        return torch.randn(b, 6, 32, generator=g), torch.randint(0, 10, (b,), generator=g)
    if isinstance(model, (Embed, TiedLM)):
        return torch.randint(0, 50, (b, 3 + b), generator=g), torch.randint(0, 10, (b,), generator=g)
    if isinstance(model, Attention):
        return torch.randn(b, 2 + b, 32, generator=g), torch.randint(0, 10, (b,), generator=g)
    if isinstance(model, BrokenLoss):
        return torch.randn(b, 2 + b, 16, generator=g), torch.randint(0, 10, (b,), generator=g)
    if isinstance(model, Conv1dNet):
        return torch.randn(b, 3, 5 + b, generator=g), torch.randint(0, 5, (b,), generator=g)
    if isinstance(model, (SmallCNN, BNNet, BNPoolNet, ConvNet)):
        hw = 6 + 2 * (b % 3)
        return torch.randn(b, 3, hw, hw, generator=g), torch.randint(0, 5, (b,), generator=g)
    return torch.randn(b, 32, generator=g), torch.randint(0, 10, (b,), generator=g)


def _train(model, fn, batches, micro: int = 1, after_step=None, twice: bool = False):
    """AdamW steps over ``batches``, each over ``micro`` micro-batches (gradients accumulated);
    the losses, and the native calls braze made in the forwards and in the backwards.
    ``after_step(step)`` runs after each step. ``twice``: each loss is backpropagated twice, the
    first time with ``retain_graph=True``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, fwd, bwd = [], NativeCalls(), NativeCalls()
    for step, b in enumerate(batches):
        opt.zero_grad()
        for k in range(micro):
            x, y = _batch(model, b, 100 * step + k)
            with fwd:
                loss = fn(x, y) / micro
            with bwd:
                loss.backward(retain_graph=twice)
                if twice:
                    loss.backward()
            losses.append(loss.item())
        opt.step()
        if after_step is not None:
            after_step(step)
    return losses, fwd.count, bwd.count, fwd.reusing + bwd.reusing


def _close_runs(eager, compiled, tol=1e-4):
    le, lc = eager[0], compiled[0]
    for i, (a, b) in enumerate(zip(le, lc)):
        assert abs(a - b) <= tol * max(abs(a), 1e-6), f"loss {i}: eager {a}, braze {b}"


def _close_weights(m_eager, m_braze, tol=1e-4):
    for (name, p), q in zip(m_eager.named_parameters(), m_braze.parameters()):
        torch.testing.assert_close(q, p, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def _train_both(m, batches):
    """AdamW steps over ``batches`` in eager on ``m`` and through braze on a copy, checked to give
    the same losses and weights: (the copy, braze's run, the BrazeWarnings' texts)."""
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True)
    eager = _train(m, m, batches)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run = _train(mb, c, batches)
    _close_runs(eager, run)
    _close_weights(m, mb)
    return mb, run, [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]


def test_forward_and_backward_compile_and_match_eager(compiles, fresh_warnings):
    """AdamW steps at changing batch sizes: every loss and the final weights as eager's, both
    graphs of a step computed by braze (no op left to PyTorch: no warning), and no native
    compile after the first two shapes. No library keeps dropped outputs for its next call: the
    forward's would stay held through the backward, the backward's through the next forward."""
    m = MLP()
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True)
    eager = _train(m, m, BATCHES)
    counts = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run = _train(mb, c, BATCHES, after_step=lambda step: counts.append(compiles()))
    _close_runs(eager, run)
    _close_weights(m, mb)
    assert [str(w.message) for w in record if issubclass(w.category, BrazeWarning)] == []
    assert run[1] >= len(BATCHES) and run[2] >= len(BATCHES), f"braze ran {run[1]} forward and {run[2]} " \
        "backward calls"
    assert counts[1:] == [counts[1]] * (len(BATCHES) - 1), f"libraries after each step: {counts}"
    assert run[3] == 0, f"{run[3]} native calls kept their outputs for reuse"


def test_a_batch_of_1_after_two_shapes_compiles_nothing(compiles):
    """Batch 1 first, then 3, then both again: the batch-1 backward returns one gradient fewer
    than the general one (no sum over the batch) and is served by the general library, whose
    sum over a batch of 1 it picks out; no native compile after the first two shapes."""
    m = Positions()
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True)
    batches = (1, 3, 1, 3, 1, 4, 1)
    eager = _train(m, m, batches)
    counts = []
    run = _train(mb, c, batches, after_step=lambda step: counts.append(compiles()))
    _close_runs(eager, run)
    _close_weights(m, mb)
    assert counts[1:] == [counts[1]] * (len(batches) - 1), f"libraries after each step: {counts}"
    assert run[2] >= len(batches) - 1, f"braze ran {run[2]} backward calls"  # the first: torch's


def test_gradient_accumulation_matches_eager():
    m = MLP()
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True)
    eager = _train(m, m, (4, 3, 6), micro=4)
    braze_run = _train(mb, c, (4, 3, 6), micro=4)
    _close_runs(eager, braze_run)
    _close_weights(m, mb)
    assert braze_run[2] > 0


@pytest.mark.parametrize("model", [MLP, ConvNet])
def test_a_graph_backpropagated_twice_matches_eager(model, fresh_warnings):
    """``loss.backward(retain_graph=True)`` then ``loss.backward()``, as eager allows: PyTorch
    refuses it when the saved activations are donated to the backward, and braze's second
    backward reads them as its first did (the convolutions' channels-last ones included)."""
    m = model()
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True)
    eager = _train(m, m, BATCHES[:4], twice=True)
    run = _train(mb, c, BATCHES[:4], twice=True)
    _close_runs(eager, run)
    _close_weights(m, mb)
    assert run[2] >= 2 * (len(BATCHES[:4]) - 1), f"braze ran {run[2]} backward calls"


def test_backward_false_leaves_the_backward_to_torch():
    m = MLP()
    mb = copy.deepcopy(m)
    c = torch.compile(mb, backend="braze", dynamic=True, options={"backward": False})
    eager = _train(m, m, BATCHES[:3])
    run = _train(mb, c, BATCHES[:3])
    _close_runs(eager, run)
    _close_weights(m, mb)
    assert run[1] > 0 and run[2] == 0, f"braze ran {run[1]} forward and {run[2]} backward calls"


def test_a_backward_op_braze_lacks_runs_alone_in_torch(fresh_warnings):
    """A model whose backward needs an op braze lacks (top-k's scatter of k gradients a row): it
    trains as eager does, that op runs in PyTorch with one warning, and braze computes the rest
    of both graphs."""
    _, run, texts = _train_both(TopK(), BATCHES[:5])
    assert not any("region of" in t for t in texts), texts  # no region fell back whole
    assert len(texts) == 1 and "scatter" in texts[0], texts
    assert run[1] > 0 and run[2] > 0, f"braze ran {run[1]} forward and {run[2]} backward calls"


@pytest.mark.parametrize("model", [ConvNet, SmallCNN, Conv1dNet])
def test_convolutions_and_max_pools_train_in_braze(model, fresh_warnings):
    """Every convolution's input and weight gradient (and its bias's), and a max pool's indices and
    gradient, are braze's: no op of either graph runs in PyTorch, at batch and image sizes that
    change between steps."""
    _, run, texts = _train_both(model(), BATCHES[:5])
    assert not texts, texts
    assert run[1] > 0 and run[2] > 0, f"braze ran {run[1]} forward and {run[2]} backward calls"


def test_batch_norm_trains_with_batch_statistics(fresh_warnings):
    """Training-mode batch norm in braze: the losses, the weights and the running statistics (and
    the batch counter) as eager's after steps at changing batch and image sizes."""
    m = BNNet().train()
    batches = (3, 5, 2, 4, 6)
    mb, run, texts = _train_both(m, batches)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(mb.bn, name), getattr(m.bn, name), rtol=1e-5, atol=1e-5)
    assert int(mb.bn.num_batches_tracked) == int(m.bn.num_batches_tracked) == len(batches)
    assert not any("batch_norm" in t and "_backward" not in t for t in texts), texts  # the forward's is braze's
    assert run[1] > 0 and run[2] > 0


class BNPoolNet(nn.Module):
    """convolution, batch norm, relu and a max pool, then another convolution: every activation the
    backward reads is made channels-last."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.b, self.fc = nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x, y):
        h = F.max_pool2d(torch.relu(self.bn(self.a(x))), 2)
        return F.cross_entropy(self.fc(torch.relu(self.b(h)).mean((2, 3))), y)


def test_saved_activations_cross_channels_last(fresh_warnings):
    """The forward returns the activations it computes in NHWC with channels-last strides, and the
    backward's library reads them as they are: every 4-D tensor it is handed is contiguous (a
    transposed one would have been copied first), some of them NHWC (8 channels last, images of
    6x6 and 10x10); losses and weights as eager's."""
    from braze.runtime.loader import NativeFunction
    handed = []
    call = NativeFunction.__call__

    def record(fn, *args):
        handed.extend((tuple(a.shape), a.is_contiguous()) for a in args if isinstance(a, torch.Tensor) and a.dim() == 4)
        return call(fn, *args)
    mb, run, texts = _train_both(BNPoolNet(), (3, 5, 2))  # compiles both graphs
    m = mb.train()
    c = torch.compile(copy.deepcopy(m), backend="braze", dynamic=True)
    x, y = _batch(BNNet(), 5, 1)
    loss = c(x, y)
    NativeFunction.__call__ = record
    try:
        loss.backward()
    finally:
        NativeFunction.__call__ = call
    assert not texts, texts
    assert handed and all(ok for _, ok in handed), handed
    assert any(shape[-1] == 8 and shape[1] != 8 for shape, _ in handed), handed


@pytest.mark.parametrize("kv_heads, mode", [(4, "causal"), (2, "causal"), (4, "padding")])
def test_attention_trains_in_braze(kv_heads, mode, fresh_warnings):
    """Attention's forward saves its logsumexp and its backward recomputes the probabilities from
    it, both in braze (GQA, causal and padding masks): the losses and the weights as eager's, and
    no op left to PyTorch."""
    batches = (3, 5, 1, 4)
    _, run, texts = _train_both(Attention(kv_heads, mode), batches)
    assert texts == []
    assert run[1] >= len(batches) and run[2] >= len(batches), f"braze ran {run[1]} forward and {run[2]} " \
        "backward calls"


def test_an_embedding_gradient_is_computed_by_braze(fresh_warnings):
    """embedding_dense_backward is braze's index_add into zeros: no op left to torch, the weights
    follow eager's (a padding index among the tokens)."""
    batches = (3, 5, 2, 4)
    _, run, texts = _train_both(Embed(), batches)
    assert texts == []
    assert run[1] >= len(batches) and run[2] >= len(batches)


def test_a_tied_embedding_s_gradient_is_added_in_place(fresh_warnings, tmp_path, monkeypatch):
    """A weight that is both the embedding and the LM head: braze adds the embedding's gradient rows
    into the head's gradient, which the head's GEMM writes straight into the caller's tensor (no
    table-sized zeros, no copy); no warning, the weights follow eager's, a padding index included."""
    monkeypatch.setenv("BRAZE_DUMP", str(tmp_path))
    batches = (3, 5, 2, 4)
    _, run, texts = _train_both(TiedLM(), batches)
    assert texts == []
    assert run[1] >= len(batches) and run[2] >= len(batches)
    memory = [p.read_text() for p in tmp_path.glob("backward*/*assign_memory*")]
    scatters = [ln for text in memory for ln in text.splitlines() if 'kind="scatter"' in ln]
    assert scatters and all("index_add" not in ln for ln in scatters), scatters
    # the GEMM's gradient, the index_add's x, lives in the caller's tensor: offset -1, as a result
    gemm = [ln for text in memory for ln in text.splitlines() if 'kind="gemm"' in ln and "arena=[-1]" in ln]
    assert gemm, memory


class BrokenLoss(nn.Module):
    """A loss after a graph break that flattens the logits (transformers' ForCausalLMLoss):
    its backward views the gradient back to [batch, seq, classes] with sizes saved from
    the other graph."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 10)

    def forward(self, x, y):
        logits = self.fc(x)
        torch._dynamo.graph_break()
        return F.cross_entropy(logits.view(-1, 10), y.repeat_interleave(x.shape[1]))


def test_a_view_to_sizes_of_another_graph_is_torch_s_without_a_warning(fresh_warnings):
    """The view that braze cannot size (its sizes are the other graph's) runs in PyTorch, which
    makes it without a copy: no warning for it, and the rest is braze's."""
    batches = (3, 5, 2, 4)
    _, run, texts = _train_both(BrokenLoss(), batches)
    assert texts == []
    assert run[1] >= len(batches) and run[2] >= len(batches)


def test_16_bit_attention_is_left_to_torch_alone(fresh_warnings):
    """braze computes attention's training pieces in float32 only: in bfloat16, SDPA's forward (its
    logsumexp) and backward run in PyTorch, one warning each, and braze computes the projection
    around them (the region is not taken down with them)."""
    proj = nn.Linear(8, 8).to(torch.bfloat16)

    def f(x):
        q = proj(x)
        return F.scaled_dot_product_attention(q, x, x, is_causal=True)

    c = torch.compile(f, backend="braze", dynamic=True)
    calls = NativeCalls()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for b, s in [(2, 9), (3, 5), (2, 16)]:
            x = torch.randn(b, 2, s, 8).to(torch.bfloat16)
            grad = torch.randn(b, 2, s, 8).to(torch.bfloat16)
            got, want = [], []
            for fn, out in ((c, got), (f, want)):
                xi = x.clone().requires_grad_()
                proj.zero_grad()
                with calls if fn is c else contextlib.nullcontext():
                    fn(xi).backward(grad)
                out += [xi.grad.float(), proj.weight.grad.float()]
            for a, e in zip(got, want):
                torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)
    texts = sorted(str(w.message) for w in record if issubclass(w.category, BrazeWarning))
    assert len(texts) == 2 and "flash_attention_for_cpu.default" in texts[0] and "backward" in texts[1], texts
    assert calls.count > 0
