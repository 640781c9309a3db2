"""Many transformers architectures from small configs under torch.compile(backend="braze",
dynamic=True): each correct against eager at several (batch, seq) shapes, 1 included, with no braze
library built after the first two shapes. Slow: python -m pytest -m slow tests/models."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=320)
ARCHS = {
    "bert": ("BertModel", "BertConfig", SMALL),
    "roberta": ("RobertaModel", "RobertaConfig", dict(SMALL, pad_token_id=1)),
    "distilbert": ("DistilBertModel", "DistilBertConfig", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                              vocab_size=320)),
    "electra": ("ElectraModel", "ElectraConfig", dict(SMALL, embedding_size=32)),
    "gpt2": ("GPT2Model", "GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=320)),
    "gpt_neox": ("GPTNeoXModel", "GPTNeoXConfig", SMALL),
    "opt": ("OPTModel", "OPTConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                         vocab_size=320, word_embed_proj_dim=64)),
    "bloom": ("BloomModel", "BloomConfig", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=320)),
    "llama": ("LlamaModel", "LlamaConfig", dict(SMALL, num_key_value_heads=2)),
    "mistral": ("MistralModel", "MistralConfig", dict(SMALL, num_key_value_heads=2)),
    "qwen2": ("Qwen2Model", "Qwen2Config", dict(SMALL, num_key_value_heads=2)),
    "phi": ("PhiModel", "PhiConfig", SMALL),
    "gemma": ("GemmaModel", "GemmaConfig", dict(SMALL, num_key_value_heads=2, head_dim=16)),
    "mixtral": ("MixtralModel", "MixtralConfig", dict(SMALL, num_key_value_heads=2, num_local_experts=4,
                                                     num_experts_per_tok=2)),
    "qwen2_moe": ("Qwen2MoeModel", "Qwen2MoeConfig", dict(SMALL, num_key_value_heads=2, num_experts=4,
                                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                                         shared_expert_intermediate_size=64)),
    "mamba": ("MambaModel", "MambaConfig", dict(hidden_size=32, num_hidden_layers=2, vocab_size=320, state_size=8,
                                               expand=2)),
}
SHAPES = [(1, 1), (2, 5), (3, 8), (1, 9), (2, 1), (4, 17), (5, 3)]


def libraries() -> int:
    import braze
    s = braze.stats()
    return s["native_compiles"] + s["cache_hits"]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_architecture_under_the_backend(arch):
    from braze.testing import rel_error
    model_cls, cfg_cls, kw = ARCHS[arch]
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg.use_cache = False
    cls = getattr(transformers, model_cls)
    cfg._attn_implementation = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    torch.manual_seed(0)
    m = cls(cfg).eval()
    torch._dynamo.reset()
    c = torch.compile(m, backend="braze", dynamic=True)
    before, counts = libraries(), []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, s in SHAPES:
            x = torch.randint(2, 320, (b, s))
            got, want = c(x).last_hidden_state, m(x).last_hidden_state
            err = rel_error(got.numpy(), want.numpy())
            assert err <= 1e-4, f"{arch} at {(b, s)}: rel error {err:.3g}"
            counts.append(libraries() - before)
    torch._dynamo.reset()
    assert counts[-1] == counts[1], f"{arch}: libraries built after each shape: {counts}"
