"""Many architectures from small configs, random weights, for the plug-in sweep
(``scripts/plugin_sweep.py``) and its slow test: 36 ``transformers`` text models (encoders,
decoders, GQA, rotary and ALiBi positions, mixtures of experts, a state-space model) and six
convnets and vision transformers (transformers' ConvNeXt, Swin, ResNet and ViT; a depthwise
convnet and a conv + batch-norm net in plain PyTorch).

``build(name)`` gives an ``Arch``: the module (eval mode), ``make_inputs(shape)`` and the
``shapes`` to call it at. Text shapes are (batch, seq), vision shapes (batch, height, width);
both bring batch 1 back after a larger batch, which is when dynamo hands over a graph
specialised to it. Nothing is downloaded; torch and transformers are imported only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

TEXT_SHAPES = [(1, 5), (3, 23), (1, 5), (2, 17)]
VISION_SHAPES = [(1, 32, 32), (3, 48, 40), (1, 32, 32), (2, 40, 56)]

_SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=320)
_GQA = dict(_SMALL, num_key_value_heads=2)
_GPT = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=320)
_T5 = dict(d_model=64, num_layers=2, num_heads=4, d_kv=16, d_ff=128, vocab_size=320)

# name -> (transformers model class, config class, config keywords)
TEXT = {
    "bert": ("BertModel", "BertConfig", _SMALL),
    "roberta": ("RobertaModel", "RobertaConfig", dict(_SMALL, pad_token_id=1)),
    "distilbert": ("DistilBertModel", "DistilBertConfig", dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                              vocab_size=320)),
    "electra": ("ElectraModel", "ElectraConfig", dict(_SMALL, embedding_size=32)),
    "albert": ("AlbertModel", "AlbertConfig", dict(_SMALL, embedding_size=32)),
    "deberta": ("DebertaModel", "DebertaConfig", _SMALL),
    "deberta_v2": ("DebertaV2Model", "DebertaV2Config", _SMALL),
    "mpnet": ("MPNetModel", "MPNetConfig", _SMALL),
    "squeezebert": ("SqueezeBertModel", "SqueezeBertConfig", dict(_SMALL, embedding_size=64)),
    "convbert": ("ConvBertModel", "ConvBertConfig", dict(_SMALL, embedding_size=64)),
    "funnel": ("FunnelModel", "FunnelConfig", dict(d_model=64, n_head=4, d_head=16, d_inner=128, vocab_size=320,
                                                  block_sizes=[1, 1])),
    "xlnet": ("XLNetModel", "XLNetConfig", dict(d_model=64, n_layer=2, n_head=4, d_inner=128, vocab_size=320)),
    "t5_encoder": ("T5EncoderModel", "T5Config", _T5),
    "bart": ("BartModel", "BartConfig", dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                            vocab_size=320)),
    "gpt2": ("GPT2Model", "GPT2Config", _GPT),
    "gpt_neo": ("GPTNeoModel", "GPTNeoConfig", dict(hidden_size=64, num_layers=2, num_heads=4, vocab_size=320,
                                                   attention_types=[[["global", "local"], 1]])),
    "gpt_neox": ("GPTNeoXModel", "GPTNeoXConfig", _SMALL),
    "gptj": ("GPTJModel", "GPTJConfig", dict(_GPT, rotary_dim=8)),
    "codegen": ("CodeGenModel", "CodeGenConfig", dict(_GPT, rotary_dim=8)),
    "opt": ("OPTModel", "OPTConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                                         vocab_size=320, word_embed_proj_dim=64)),
    "bloom": ("BloomModel", "BloomConfig", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=320)),
    "falcon": ("FalconModel", "FalconConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                  vocab_size=320)),
    "llama": ("LlamaModel", "LlamaConfig", _GQA),
    "mistral": ("MistralModel", "MistralConfig", _GQA),
    "qwen2": ("Qwen2Model", "Qwen2Config", _GQA),
    "qwen3": ("Qwen3Model", "Qwen3Config", dict(_GQA, head_dim=16)),
    "phi": ("PhiModel", "PhiConfig", _SMALL),
    "phi3": ("Phi3Model", "Phi3Config", dict(_GQA, pad_token_id=0)),
    "gemma": ("GemmaModel", "GemmaConfig", dict(_GQA, head_dim=16)),
    "gemma2": ("Gemma2Model", "Gemma2Config", dict(_GQA, head_dim=16)),
    "stablelm": ("StableLmModel", "StableLmConfig", _GQA),
    "olmo": ("OlmoModel", "OlmoConfig", _GQA),
    "starcoder2": ("Starcoder2Model", "Starcoder2Config", _GQA),
    "mixtral": ("MixtralModel", "MixtralConfig", dict(_GQA, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": ("Qwen2MoeModel", "Qwen2MoeConfig", dict(_GQA, num_experts=4, num_experts_per_tok=2,
                                                         moe_intermediate_size=32, shared_expert_intermediate_size=64)),
    "mamba": ("MambaModel", "MambaConfig", dict(hidden_size=32, num_hidden_layers=2, vocab_size=320, state_size=8,
                                               expand=2)),
}

VISION = ("convnext", "swin", "resnet", "vit", "depthwise", "conv_bn")


@dataclass
class Arch:
    name: str
    module: Any  # torch.nn.Module, eval mode
    make_inputs: Callable[[tuple], tuple]  # shape -> the call's positional arguments
    shapes: list[tuple]
    kind: str  # "text" or "vision"


def names() -> list[str]:
    return list(TEXT) + list(VISION)


def build(name: str) -> Arch:
    import torch
    torch.manual_seed(0)
    if name in TEXT:
        return _text(name)
    if name in VISION:
        module = _VISION_BUILDERS[name]()
        return Arch(name, module.eval(), _image, list(VISION_SHAPES), "vision")
    raise KeyError(f"unknown architecture {name!r}; choose from {', '.join(names())}")


def first_tensor(out):
    """The first tensor of a model's output (a tensor, a tuple, or a transformers ModelOutput)."""
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state") and out.last_hidden_state is not None:
        return out.last_hidden_state
    if isinstance(out, dict):
        out = list(out.values())
    return first_tensor(out[0])


def _text(name: str) -> Arch:
    import torch
    import transformers
    model_cls, cfg_cls, kw = TEXT[name]
    cfg = getattr(transformers, cfg_cls)(**kw)
    cfg.use_cache = False
    cls = getattr(transformers, model_cls)
    cfg._attn_implementation = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    module = cls(cfg).eval()

    def make_inputs(shape):
        b, s = shape
        g = torch.Generator().manual_seed(b * 1000 + s)
        return (torch.randint(2, 320, (b, s), generator=g),)
    return Arch(name, module, make_inputs, list(TEXT_SHAPES), "text")


def _image(shape):
    import torch
    b, h, w = shape
    g = torch.Generator().manual_seed(b * 10000 + h * 100 + w)
    return (torch.randn(b, 3, h, w, generator=g),)


def _convnext():
    import transformers
    return transformers.ConvNextModel(transformers.ConvNextConfig(
        num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2))


def _swin():
    import transformers
    return transformers.SwinModel(transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4))


def _resnet():
    import transformers
    return transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"))


def _vit():
    import torch
    import transformers
    vit = transformers.ViTModel(transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128))

    class AnySize(torch.nn.Module):  # position embeddings interpolated to the image's size
        def __init__(self):
            super().__init__()
            self.vit = vit

        def forward(self, x):
            return self.vit(x, interpolate_pos_encoding=True).last_hidden_state
    return AnySize()


def _depthwise():
    import torch
    nn = torch.nn

    class Depthwise(nn.Module):  # MobileNetV2-like: expand, depthwise 3x3, project, residual
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU6())
            self.block = nn.Sequential(nn.Conv2d(16, 64, 1), nn.BatchNorm2d(64), nn.ReLU6(),
                                       nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.BatchNorm2d(64), nn.ReLU6(),
                                       nn.Conv2d(64, 16, 1), nn.BatchNorm2d(16))
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            y = self.stem(x)
            y = y + self.block(y)
            return self.head(y.mean((2, 3)))
    return Depthwise()


def _conv_bn():
    import torch
    nn = torch.nn

    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU())
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            return torch.softmax(self.fc(nn.functional.adaptive_avg_pool2d(self.body(x), 1).flatten(1)), -1)
    return ConvBN()


# a 16-bit run's error bound is max(floor, twice eager's own error), of the largest output
HALF_FLOOR = {"bfloat16": 0.02, "float16": 0.005}


def sweep_one(name: str, tol: float = 1e-4, dtype: str | None = None, precision: str | None = None) -> dict:
    """Run architecture ``name`` under ``torch.compile(backend="braze", dynamic=True)`` at its
    shapes, against eager; per shape: libraries built or loaded so far, dynamo's graphs so far,
    native calls, max |error| / max |eager| (what ``scripts/plugin_sweep.py`` reports). An
    exception out of the compiled call is recorded, not raised.

    ``dtype`` ("bfloat16", "float16"): the model and its float inputs cast to it, compared with
    eager in that dtype. ``precision`` ("bf16", "fp16"): the plug-in's policy on the float32
    model, compared with float32 eager. Either way a shape's bound (its ``tol``) is
    max(HALF_FLOOR, twice eager's own error against float32: the model's, at the same rounded
    weights, or torch.autocast's), and ``argmax_agree`` is the share of the positions float32
    decides by more than that bound where the argmax over the last dim agrees with float32's."""
    import copy
    import contextlib
    import warnings

    import torch

    from . import stats
    from .errors import BrazeWarning
    from .testing import NativeCalls, rel_error
    arch = build(name)
    low = dtype or {"bf16": "bfloat16", "fp16": "float16"}.get(precision or "")
    half = getattr(torch, low) if low else None
    model = copy.deepcopy(arch.module).to(half) if dtype else arch.module
    fp32 = copy.deepcopy(model).float() if dtype else arch.module  # float32 at the (rounded) weights

    def cast(args):
        return tuple(a.to(half) if dtype and a.is_floating_point() else a for a in args)

    c = torch.compile(model, backend="braze", dynamic=True, options={"precision": precision} if precision else None)
    rows, messages = [], []
    rec = {"arch": name, "kind": arch.kind, "shapes": rows, "warnings": messages, "tol": tol, "dtype": dtype,
           "precision": precision}
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught, NativeCalls() as calls:
        warnings.simplefilter("always")
        for shape in arch.shapes:
            args = arch.make_inputs(shape)
            before = calls.count
            try:
                got = first_tensor(c(*cast(args))).float()
            except Exception as e:  # noqa: BLE001 -- what escaped the backend is the finding
                rec["error"] = f"at {shape}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                break
            row = {"shape": list(shape)}
            if low:
                exact = first_tensor(fp32(*args)).float()
                autocast = torch.autocast("cpu", dtype=half) if precision else contextlib.nullcontext()
                with autocast:
                    eager = first_tensor(model(*cast(args))).float()
                row["eager_rel_error"] = rel_error(eager.numpy(), exact.numpy())
                row["tol"] = max(HALF_FLOOR[low], 2 * row["eager_rel_error"])
                want = exact if precision else eager
                row["argmax_agree"] = _argmax_agreement(got, exact, row["tol"])
            else:
                want = first_tensor(arch.module(*args))
            s = stats()
            row.update({"libraries": s["native_compiles"] + s["cache_hits"],
                        "dynamo_graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]),
                        "native_calls": calls.count - before, "rel_error": rel_error(got.numpy(), want.numpy())})
            rows.append(row)
    for w in caught:
        if issubclass(w.category, BrazeWarning) and str(w.message) not in messages:
            messages.append(str(w.message))
    return rec


def _argmax_agreement(got, exact, tol: float) -> float:
    """Share of the rows (over the last dim) that ``exact`` decides by more than tol x its largest
    magnitude where got's argmax is exact's (1.0 when none is decided)."""
    import torch
    if exact.dim() == 0 or exact.shape[-1] < 2:
        return 1.0
    top2 = exact.topk(2, dim=-1).values
    decided = (top2[..., 0] - top2[..., 1]) > tol * exact.abs().max()
    if not bool(decided.any()):
        return 1.0
    same = got.argmax(-1) == exact.argmax(-1)
    return float(same[decided].float().mean())


def verdict(rec: dict) -> str:
    """ok; exception (one left the compiled call); wrong (beyond tol of eager); late library
    (one built after the first two shapes); all in torch (braze computed nothing)."""
    if "error" in rec:
        return "exception"
    rows = rec["shapes"]
    if any(r["rel_error"] > r.get("tol", rec.get("tol", 1e-4)) or r.get("argmax_agree", 1.0) < 0.99 for r in rows):
        return "wrong"
    if len(rows) > 2 and rows[-1]["libraries"] > rows[1]["libraries"]:
        return "late library"
    if not any(r["native_calls"] for r in rows):
        return "all in torch"
    return "ok"


_VISION_BUILDERS = {"convnext": _convnext, "swin": _swin, "resnet": _resnet, "vit": _vit, "depthwise": _depthwise,
                    "conv_bn": _conv_bn}

__all__ = ["Arch", "TEXT", "VISION", "TEXT_SHAPES", "VISION_SHAPES", "build", "names", "first_tensor", "sweep_one",
           "verdict"]
