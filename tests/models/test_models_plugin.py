"""Plug-in mode on whole models: torch.compile(m, backend="braze", dynamic=True) on small configs of
each acceptance family, against eager at four or more shapes per dynamic dim (1 included), with no
braze library built after the first two shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

nn = torch.nn


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def libraries() -> int:
    import braze
    s = braze.stats()
    return s["native_compiles"] + s["cache_hits"]


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


def check(model, make_inputs, shapes, tol=1e-4):
    from braze.testing import rel_error
    compiled = torch.compile(model, backend="braze", dynamic=True)
    before, counts = libraries(), []
    with torch.no_grad():
        for shape in shapes:
            args = make_inputs(*shape)
            got, want = first_tensor(compiled(*args)), first_tensor(model(*args))
            assert tuple(got.shape) == tuple(want.shape), shape
            err = rel_error(got.numpy(), want.numpy())
            assert err <= tol, f"at {shape}: rel error {err:.3g}"
            counts.append(libraries() - before)
    assert counts[-1] == counts[1], f"libraries built after each shape: {counts}"
    assert counts[-1] >= 1, "braze compiled nothing"


def hf(cls, cfg):
    torch.manual_seed(0)
    if cfg.model_type != "mamba":
        cfg._attn_implementation = "sdpa"
    return cls(cfg).eval()


# (batch, seq) pairs: each dim takes 4+ values, 1 included, the first two shapes trace both graphs
SEQ_SHAPES = [(1, 1), (2, 5), (3, 8), (1, 9), (2, 1), (4, 17), (5, 3), (1, 2)]


def ids(vocab):
    return lambda b, s: (torch.randint(0, vocab, (b, s)),)


def test_mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)).eval()
    check(m, lambda b: (torch.randn(b, 32),), [(1,), (2,), (3,), (7,), (1,), (16,)])


def test_bert():
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=500)
    m = hf(transformers.BertModel, cfg)
    check(m, lambda b, s: (torch.randint(0, 500, (b, s)), torch.ones(b, s, dtype=torch.long)), SEQ_SHAPES)


def test_gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, use_cache=False)
    check(hf(transformers.GPT2Model, cfg), ids(500), SEQ_SHAPES)


def test_llama_gqa_rope_rmsnorm_silu():
    cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, vocab_size=500, use_cache=False)
    check(hf(transformers.LlamaModel, cfg), ids(500), SEQ_SHAPES)


def test_vit():
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 image_size=32, patch_size=8)
    check(hf(transformers.ViTModel, cfg), lambda b: (torch.randn(b, 3, 32, 32),), [(1,), (2,), (3,), (1,), (6,)])


def test_resnet_like_convnet():
    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))

    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                      Block(16), Block(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
    with torch.no_grad():  # non-trivial batch norm statistics
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2)
    check(m, lambda b, hw: (torch.randn(b, 3, hw, hw),), [(1, 32), (2, 40), (3, 33), (1, 57), (4, 64), (2, 31)])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_with_kv_cache_matches_eager(family):
    import braze
    if family == "gpt2":
        cfg, cls = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=300), transformers.GPT2LMHeadModel
    else:
        cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=128, vocab_size=300)
        cls = transformers.LlamaForCausalLM
    cfg.pad_token_id = cfg.bos_token_id = cfg.eos_token_id = 0
    m = hf(cls, cfg)
    ref = cls(cfg).eval()
    ref.load_state_dict(m.state_dict())
    m.forward = torch.compile(m.forward, backend="braze", dynamic=True)
    counts = []
    with torch.no_grad():
        for prompt in (7, 4, 11):
            x = torch.randint(1, 300, (2, prompt))
            out = m.generate(x, max_new_tokens=10, do_sample=False)
            want = ref.generate(x, max_new_tokens=10, do_sample=False)
            assert torch.equal(out, want), f"prompt {prompt}: tokens differ from eager"
            counts.append(libraries())
    assert counts[0] >= 1 and counts[-1] == counts[0], f"libraries after each generate: {counts}"
    assert braze.stats()["native_compiles"] >= 0


def test_mixture_of_experts_routing():
    cfg = transformers.MixtralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=96, vocab_size=300, num_local_experts=4, num_experts_per_tok=2,
                                     use_cache=False)
    m = hf(transformers.MixtralModel, cfg)
    from braze.testing import rel_error
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad(), pytest.warns(Warning):
        for b, s in SEQ_SHAPES[:5]:
            x = torch.randint(0, 300, (b, s))
            err = rel_error(c(x).last_hidden_state.numpy(), m(x).last_hidden_state.numpy())
            assert err <= 1e-4, (b, s, err)


def test_state_space_model_loops_over_the_sequence():
    cfg = transformers.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=300, state_size=8, expand=2,
                                   use_cache=False)
    check(hf(transformers.MambaModel, cfg), ids(300), SEQ_SHAPES[:4])  # 1 and odd lengths; a loop per token
