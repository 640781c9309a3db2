"""Issue 24's acceptance at model scale: 20 AdamW steps through torch.compile(backend="braze",
dynamic=True) from eager's weights, with the batch and sequence (or image) size changing between
steps and dropout 0: every loss within 1e-4 of eager's (relative) and the final weights within
1e-4, or, for a run float32 cannot pin down (ResNet-50 at small images: eager's own float32
gradients are 10-30% off float64's in its last blocks, where batch norm averages a dozen
numbers, and its losses 1% on average), braze as close to a float64 run as eager is (within 2x,
the losses on average over the run, the weights at their worst); and no library built after
the first two distinct shapes but batch 1's. The models are the training benchmark's, each with
its own head and loss: an MLP and ResNet-50 (zoo) with cross-entropy, BERT-base with a
classification head, GPT-2 and a LLaMA-style decoder with their LM loss. Slow (about 25 minutes
on 2 cores): python -m pytest -m slow tests/models/test_training_slow.py"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import braze  # noqa: E402
from braze import zoo  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_cache")]

STEPS = 20
LR = 1e-4


def _classifier_loss(module, x, y):
    return torch.nn.functional.cross_entropy(module(x), y)


def _lm_loss(module, ids, _):
    return module(input_ids=ids, labels=ids).loss


def _mlp():
    def batch(b, _, g):
        return torch.randn(b, 1024, generator=g), torch.randint(0, 1000, (b,), generator=g)
    return zoo.get("mlp").module.train(), _classifier_loss, batch


def _resnet50():
    def batch(b, hw, g):
        return torch.randn(b, 3, hw, hw + 16, generator=g), torch.randint(0, 1000, (b,), generator=g)
    return zoo.get("resnet50").module.train(), _classifier_loss, batch


def _no_dropout(cfg):
    for k in dir(cfg):
        if ("dropout" in k or k.endswith("_pdrop")) and isinstance(getattr(cfg, k, None), float):
            setattr(cfg, k, 0.0)
    cfg._attn_implementation = "sdpa"
    return cfg


def _token_batch(vocab):
    def batch(b, s, g):
        return torch.randint(0, vocab, (b, s), generator=g), None
    return batch


def _bert():
    torch.manual_seed(0)
    module = transformers.BertForSequenceClassification(_no_dropout(transformers.BertConfig(num_labels=3))).train()

    def loss(m, ids, _):
        return m(input_ids=ids, labels=ids[:, 0] % 3).loss
    return module, loss, _token_batch(module.config.vocab_size)


def _gpt2():
    torch.manual_seed(0)
    module = transformers.GPT2LMHeadModel(_no_dropout(transformers.GPT2Config(use_cache=False))).train()
    return module, _lm_loss, _token_batch(module.config.vocab_size)


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=2000, use_cache=False)
    return transformers.LlamaForCausalLM(_no_dropout(cfg)).train(), _lm_loss, _token_batch(cfg.vocab_size)


# (batch, seq or image size) of each of the 20 steps: two distinct shapes first, then others
# (batch 1 among them, which dynamo traces as a graph of its own)
SHAPES = {
    "mlp": [(4, 0), (7, 0), (1, 0), (3, 0), (16, 0)],
    "resnet50": [(2, 64), (3, 80), (1, 64), (2, 96)],
    "bert": [(2, 16), (3, 24), (1, 9), (2, 33), (4, 12)],
    "gpt2": [(2, 16), (3, 24), (1, 9), (2, 33), (4, 12)],
    "llama": [(2, 16), (3, 24), (1, 9), (2, 33), (4, 12)],
}
MODELS = {"mlp": _mlp, "resnet50": _resnet50, "bert": _bert, "gpt2": _gpt2, "llama": _llama}


def _libraries() -> int:
    """Libraries braze built or loaded from its disk cache so far in this process."""
    st = braze.stats()
    return st["native_compiles"] + st["cache_hits"]


def _steps(module, fn, loss_fn, batch, shapes):
    """20 AdamW steps of ``module``'s weights, called as ``fn``, cycling through ``shapes``: the
    losses, and the libraries braze had after each step."""
    opt = torch.optim.AdamW(module.parameters(), lr=LR)
    losses, libraries = [], []
    for step in range(STEPS):
        shape = shapes[step % len(shapes)]
        x, y = batch(*shape, torch.Generator().manual_seed(step))
        opt.zero_grad()
        loss = loss_fn(fn, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        libraries.append(_libraries())
    return losses, libraries


def _errors(losses, weights, ref_losses, ref_weights):
    """Per step, each loss's relative distance from ``ref_losses``; per parameter, its largest
    distance from ``ref_weights`` (absolute below 1, relative above)."""
    loss_err = [abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)]
    weight_err = {n: ((w.double() - r.double()).abs() / r.double().abs().clamp(min=1)).max().item()
                  for (n, w), r in zip(weights, ref_weights)}
    return loss_err, weight_err


@pytest.mark.parametrize("name", list(MODELS))
def test_twenty_adamw_steps_match_eager(name):
    """Losses and weights within 1e-4 of eager's. Where they are not, the run is one float32
    cannot pin down: then braze must be as close to the same steps in float64 as eager's float32
    is (within 2x: its losses on average, its weights at their worst). After the first two shapes the only libraries braze builds are batch 1's:
    dynamo traces batch 1 as a program of its own, which runs in PyTorch at its first call, and
    whose backward's inputs differ in rank from the general one's."""
    torch._dynamo.reset()
    module, loss_fn, batch = MODELS[name]()
    twin, wide = copy.deepcopy(module), copy.deepcopy(module)
    eager, _ = _steps(module, module, loss_fn, batch, SHAPES[name])
    start = _libraries()
    try:
        run, libraries = _steps(twin, torch.compile(twin, backend="braze", dynamic=True), loss_fn, batch,
                                SHAPES[name])
    finally:
        torch._dynamo.reset()
    loss_err, weight_err = _errors(run, list(twin.named_parameters()), eager, list(module.parameters()))
    if max(loss_err) > 1e-4 or max(weight_err.values()) > 1e-4:
        wide.double()

        def wide_batch(*args):
            return tuple(t.double() if t is not None and t.is_floating_point() else t for t in batch(*args))
        ref, _ = _steps(wide, wide, loss_fn, wide_batch, SHAPES[name])
        refs = list(wide.parameters())
        eager_l, eager_w = _errors(eager, list(module.named_parameters()), ref, refs)
        braze_l, braze_w = _errors(run, list(twin.named_parameters()), ref, refs)
        # over the run: step by step the two float32 runs are as far from each other as from float64
        b, e = sum(braze_l) / STEPS, sum(eager_l) / STEPS
        assert b <= max(2 * e, 1e-4), f"{name}: losses off float64's by {b:.2e} on average, eager's by {e:.2e}"
        worst = max(braze_w, key=braze_w.get)
        assert braze_w[worst] <= max(2 * max(eager_w.values()), 1e-4), \
            f"{name} {worst}: off float64's by {braze_w[worst]:.2e}, eager's weights by {max(eager_w.values()):.2e}"
    assert libraries[1] > start, f"{name}: braze built nothing"
    shapes = [SHAPES[name][i % len(SHAPES[name])] for i in range(STEPS)]
    later = [(i, shapes[i], libraries[i] - libraries[i - 1]) for i in range(2, STEPS) if libraries[i] > libraries[i - 1]]
    assert all(shape[0] == 1 for _, shape, _ in later), \
        f"{name}: libraries built after the first two shapes (step, shape, how many): {later}"
