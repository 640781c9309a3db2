"""A small model zoo for tests and benchmarks: MLP, BERT-base, GPT-2, ResNet-50 (``MODELS``), and
ViT-base, a LLaMA-style decoder and a depthwise convnet (``EXTRA``: by name, for benchmarks).

Every model is built from code or a config object with seeded random weights
(nothing is downloaded). torch and transformers are imported only inside the
functions, so ``import braze.zoo`` is cheap.

Each ``ZooModel`` carries its symbolic dims (name -> export range), test
shapes (small, including 1 and odd sizes), the ``dynamic_shapes`` spec for
``torch.export`` (``torch.export.Dim`` objects named like the dims) and a
``make_inputs(**dims)`` that builds a matching tuple of input tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import require

SEED = 0


@dataclass
class ZooModel:
    name: str
    module: Any  # torch.nn.Module, eval mode, float32
    make_inputs: Callable[..., tuple]  # make_inputs(**dims) -> tuple of torch tensors
    dims: dict[str, tuple[int, int]]  # symbolic dim name -> (min, max) for export
    test_shapes: list[dict[str, int]]  # dim values to test at
    dynamic_shapes: Any  # for torch.export.export(..., dynamic_shapes=...)
    input_names: list[str]
    example_dims: dict[str, int] = field(default_factory=dict)  # dims of the export example
    # the floor of a call's memory traffic at these dims: the bytes a perfect kernel must read and write
    bytes_moved: Callable[..., int] | None = None
    # GEMM/convolution flops (2 per multiply-add) at these dims
    # (the benchmarks report whichever of GB/s and GFLOP/s is nearer its machine limit)
    flops: Callable[..., int] | None = None

    def example_inputs(self) -> tuple:
        return self.make_inputs(**self.example_dims)

    def __repr__(self):
        return f"<ZooModel {self.name}: inputs {self.input_names}, dims {self.dims}>"


def _seeded():
    import torch
    torch.manual_seed(SEED)
    return torch


def _generator(dims: dict[str, int], salt: int = 0):
    import torch
    g = torch.Generator().manual_seed(1000 + salt + sum((i + 1) * 7919 * v for i, v in enumerate(dims.values())))
    return g


def _counted_flops(module, make_inputs) -> Callable[..., int]:
    """flops(**dims): the matmul and convolution flops torch's FlopCounterMode counts for one call,
    traced on fake tensors (no arithmetic runs). Fused attention kernels (SDPA) are not counted."""
    def flops(**dims) -> int:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.utils.flop_counter import FlopCounterMode
        inputs = make_inputs(**dims)
        with FakeTensorMode(allow_non_fake_inputs=True) as fm, torch.no_grad():
            fake = tuple(fm.from_tensor(x) for x in inputs)
            with FlopCounterMode(display=False) as fc:
                module(*fake)
        return fc.get_total_flops()
    return flops


def _weight_bytes(module) -> Callable[..., int]:
    """bytes_moved(**dims): every matrix and filter read once (embedding tables excluded: a call
    reads only its rows). The memory floor of a call at small batch."""
    import torch
    skip = {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.Embedding)}
    total = sum(p.numel() * p.element_size() for p in module.parameters() if p.dim() >= 2 and id(p) not in skip)
    return lambda **dims: total


def _dim(name: str, lo: int, hi: int):
    from torch.export import Dim
    return Dim(name, min=lo, max=hi)


# ---------------------------------------------------------------------------
# MLP
# ---------------------------------------------------------------------------


def mlp() -> ZooModel:
    torch = _seeded()
    nn = torch.nn
    module = nn.Sequential(
        nn.Linear(1024, 4096), nn.GELU(),
        nn.Linear(4096, 4096), nn.GELU(),
        nn.Linear(4096, 1000),
    ).eval().float()

    def make_inputs(batch: int = 2):
        g = _generator({"batch": batch})
        return (torch.randn(batch, 1024, generator=g),)

    dims = {"batch": (1, 64)}
    batch = _dim("batch", *dims["batch"])
    return ZooModel("mlp", module, make_inputs, dims,
                    test_shapes=[{"batch": 1}, {"batch": 2}, {"batch": 3}, {"batch": 7}],
                    dynamic_shapes=({0: batch},), input_names=["input"], example_dims={"batch": 4},
                    flops=lambda batch: 2 * batch * (1024 * 4096 + 4096 * 4096 + 4096 * 1000),
                    bytes_moved=_weight_bytes(module))


# ---------------------------------------------------------------------------
# BERT-base
# ---------------------------------------------------------------------------


def bert() -> ZooModel:
    torch = _seeded()
    transformers = require("transformers", "examples")
    cfg = transformers.BertConfig()
    cfg._attn_implementation = "sdpa"
    model = transformers.BertModel(cfg, add_pooling_layer=True)
    model = model.eval().float()
    model.config.use_cache = False
    model.config.return_dict = True
    module = _BertWrapper(model)

    def make_inputs(batch: int = 2, seq: int = 8):
        g = _generator({"batch": batch, "seq": seq})
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        # pad the tail of every other sequence so the mask matters
        for i in range(1, batch, 2):
            keep = max(1, seq - 1 - (i % max(seq, 1)))
            mask[i, keep:] = 0
        return ids, mask

    dims = {"batch": (1, 64), "seq": (1, 512)}
    b, s = _dim("batch", *dims["batch"]), _dim("seq", *dims["seq"])
    return ZooModel("bert", module, make_inputs, dims,
                    test_shapes=[{"batch": 1, "seq": 1}, {"batch": 1, "seq": 8}, {"batch": 2, "seq": 13},
                                 {"batch": 3, "seq": 33}],
                    dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}),
                    input_names=["input_ids", "attention_mask"], example_dims={"batch": 2, "seq": 16},
                    flops=_counted_flops(module, make_inputs), bytes_moved=_weight_bytes(module))


def _wrapper_classes():
    import torch

    class BertWrapper(torch.nn.Module):
        """Returns (last_hidden_state, pooler_output) as plain tensors."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    class GPT2Wrapper(torch.nn.Module):
        """Returns the last hidden state; no KV cache."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                             return_dict=True)
            return out.last_hidden_state

    return BertWrapper, GPT2Wrapper


def _BertWrapper(model):
    return _wrapper_classes()[0](model).eval()


def _GPT2Wrapper(model):
    return _wrapper_classes()[1](model).eval()


# ---------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------


def gpt2() -> ZooModel:
    torch = _seeded()
    transformers = require("transformers", "examples")
    cfg = transformers.GPT2Config()
    # "sdpa" does not export with a dynamic seq: the fake (meta) strides of
    # its output make GPT-2's Conv1D ``x.view(-1, n)`` fail; "eager" exports
    cfg._attn_implementation = "eager"
    cfg.use_cache = False
    model = transformers.GPT2Model(cfg).eval().float()
    module = _GPT2Wrapper(model)

    def make_inputs(batch: int = 2, seq: int = 8):
        g = _generator({"batch": batch, "seq": seq}, salt=1)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        for i in range(1, batch, 2):  # left padding on every other row
            pad = min(seq - 1, 1 + i % 3)
            mask[i, :pad] = 0
        return ids, mask

    dims = {"batch": (1, 64), "seq": (1, 1024)}
    b, s = _dim("batch", *dims["batch"]), _dim("seq", *dims["seq"])
    return ZooModel("gpt2", module, make_inputs, dims,
                    test_shapes=[{"batch": 1, "seq": 1}, {"batch": 1, "seq": 9}, {"batch": 2, "seq": 16},
                                 {"batch": 3, "seq": 31}],
                    dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}),
                    input_names=["input_ids", "attention_mask"], example_dims={"batch": 2, "seq": 16},
                    flops=_counted_flops(module, make_inputs), bytes_moved=_weight_bytes(module))


# ---------------------------------------------------------------------------
# ResNet-50 (plain PyTorch, torchvision layout and parameter names)
# ---------------------------------------------------------------------------


def _resnet_classes():
    import torch
    nn = torch.nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._make_layer(64, layers[0])
            self.layer2 = self._make_layer(128, layers[1], stride=2)
            self.layer3 = self._make_layer(256, layers[2], stride=2)
            self.layer4 = self._make_layer(512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * 4, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def _make_layer(self, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNet


def _batch_norms_drawn(module, seed: int, affine: bool):
    """``module`` in eval mode with non-trivial batch-norm statistics (and scales and shifts when
    ``affine``), drawn from ``seed``, so inference-mode batch norm is really exercised."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                if affine:
                    m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.5)
                    m.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return module.eval().float()


def _image_model(name: str, module, salt: int, min_side: int, side: int, test_shapes: list[dict]) -> ZooModel:
    """A convnet on [batch, 3, height, width] images, every dim dynamic (batch 1-64, sides
    min_side-512), exported at batch 2, side x side."""
    import torch

    def make_inputs(batch: int = 2, height: int = side, width: int = side):
        gi = _generator({"batch": batch, "height": height, "width": width}, salt=salt)
        return (torch.randn(batch, 3, height, width, generator=gi),)

    dims = {"batch": (1, 64), "height": (min_side, 512), "width": (min_side, 512)}
    b, h, w = (_dim(k, *v) for k, v in dims.items())
    return ZooModel(name, module, make_inputs, dims, test_shapes=test_shapes,
                    dynamic_shapes=({0: b, 2: h, 3: w},), input_names=["x"],
                    example_dims={"batch": 2, "height": side, "width": side},
                    flops=_counted_flops(module, make_inputs), bytes_moved=_weight_bytes(module))


def resnet50() -> ZooModel:
    _seeded()
    module = _batch_norms_drawn(_resnet_classes()(), SEED + 5, affine=True)
    # the final feature map must be larger than 1x1: torch.export specializes a
    # size-1 map (a guard ``1 + (h - 1) // 32 != 1``), so images start at 33
    return _image_model("resnet50", module, salt=2, min_side=33, side=64,
                        test_shapes=[{"batch": 1, "height": 33, "width": 33},
                                     {"batch": 2, "height": 35, "width": 47},
                                     {"batch": 1, "height": 64, "width": 64},
                                     {"batch": 3, "height": 49, "width": 40}])


# ---------------------------------------------------------------------------
# ViT-base and a LLaMA-style decoder (plug-in mode's acceptance families; not in MODELS, so the
# default tests stay quick: ``get`` and the benchmarks reach them by name)
# ---------------------------------------------------------------------------


def _hidden_state_wrapper(model, arg: str):
    import torch

    class LastHiddenState(torch.nn.Module):
        """Returns the last hidden state as a plain tensor; no KV cache."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(**{arg: x}, return_dict=True).last_hidden_state

    return LastHiddenState(model).eval()


def vit() -> ZooModel:
    torch = _seeded()
    transformers = require("transformers", "examples")
    cfg = transformers.ViTConfig()  # ViT-base/16 at 224x224
    cfg._attn_implementation = "sdpa"
    module = _hidden_state_wrapper(transformers.ViTModel(cfg, add_pooling_layer=False).eval().float(), "pixel_values")

    def make_inputs(batch: int = 2):
        return (torch.randn(batch, 3, 224, 224, generator=_generator({"batch": batch}, salt=3)),)

    dims = {"batch": (1, 64)}
    return ZooModel("vit", module, make_inputs, dims, test_shapes=[{"batch": 1}, {"batch": 2}, {"batch": 3}],
                    dynamic_shapes=({0: _dim("batch", *dims["batch"])},), input_names=["pixel_values"],
                    example_dims={"batch": 2})


def depthwise() -> ZooModel:
    """A MobileNetV2-like convnet (zoo_archs: a stride-2 stem, then expand 1x1, depthwise 3x3,
    project 1x1 with a residual, pooled to a linear head), batch norms with non-trivial
    statistics: the depthwise convnet of issue 29's shared-machine benchmark."""
    _seeded()
    from .zoo_archs import _depthwise
    module = _batch_norms_drawn(_depthwise(), SEED + 6, affine=False)
    return _image_model("depthwise", module, salt=6, min_side=8, side=96,
                        test_shapes=[{"batch": 1, "height": 9, "width": 13}, {"batch": 3, "height": 64, "width": 47}])


def llama() -> ZooModel:
    torch = _seeded()
    transformers = require("transformers", "examples")
    # LLaMA-style: grouped-query attention, rotary embeddings, RMSNorm, SiLU-gated MLP
    cfg = transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                                   num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                                   max_position_embeddings=2048, use_cache=False)
    cfg._attn_implementation = "sdpa"
    module = _hidden_state_wrapper(transformers.LlamaModel(cfg).eval().float(), "input_ids")

    def make_inputs(batch: int = 2, seq: int = 8):
        g = _generator({"batch": batch, "seq": seq}, salt=4)
        return (torch.randint(0, cfg.vocab_size, (batch, seq), generator=g),)

    dims = {"batch": (1, 64), "seq": (1, 2048)}
    b, s = _dim("batch", *dims["batch"]), _dim("seq", *dims["seq"])
    return ZooModel("llama", module, make_inputs, dims,
                    test_shapes=[{"batch": 1, "seq": 1}, {"batch": 1, "seq": 9}, {"batch": 2, "seq": 16}],
                    dynamic_shapes=({0: b, 1: s},), input_names=["input_ids"], example_dims={"batch": 2, "seq": 16},
                    flops=_counted_flops(module, make_inputs), bytes_moved=_weight_bytes(module))


# ---------------------------------------------------------------------------
# memory-bound chains: normalization, softmax and activations with no GEMM, one row per token
# ---------------------------------------------------------------------------


def _chain(name: str, width: int, forward, params: dict) -> ZooModel:
    torch = _seeded()

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for k, shape in params.items():
                setattr(self, k, torch.nn.Parameter(torch.randn(*shape) * 0.1 + (1.0 if k.endswith("w") else 0.0)))

        def forward(self, x):
            return forward(self, x)

    def make_inputs(rows: int = 4):
        return (torch.randn(rows, width, generator=_generator({"rows": rows}, salt=5)) * 2,)

    dims = {"rows": (1, 65536)}
    weights = sum(4 * math.prod(s) for s in params.values())
    return ZooModel(name, Chain().eval(), make_inputs, dims,
                    test_shapes=[{"rows": 1}, {"rows": 7}, {"rows": 64}],
                    dynamic_shapes=({0: _dim("rows", *dims["rows"])},), input_names=["x"],
                    example_dims={"rows": 16}, bytes_moved=lambda rows: 2 * 4 * rows * width + weights)


def chain_ln() -> ZooModel:
    """softmax -> gelu * sigmoid -> residual add -> layer_norm over 1024-wide rows."""
    import torch
    F = torch.nn.functional

    def forward(m, x):
        s = torch.softmax(x, -1) * 1024.0
        return F.layer_norm(F.gelu(s) * torch.sigmoid(s) + x, (1024,), m.ln_w, m.ln_b)

    return _chain("chain_ln", 1024, forward, {"ln_w": (1024,), "ln_b": (1024,)})


def chain_rms() -> ZooModel:
    """rms_norm -> SiLU gate -> log_softmax over 768-wide rows."""
    import torch
    F = torch.nn.functional

    def forward(m, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.rms_w
        return F.log_softmax(F.silu(h) * (h + m.gate_b), -1)

    return _chain("chain_rms", 768, forward, {"rms_w": (768,), "gate_b": (768,)})


def block() -> ZooModel:
    """A transformer block's tail: linear 768 -> 768, GELU, a residual add, layer_norm."""
    torch = _seeded()
    nn = torch.nn
    width = 768

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(width, width)
            self.ln = nn.LayerNorm(width)

        def forward(self, x):
            return self.ln(nn.functional.gelu(self.fc(x)) + x)

    def make_inputs(rows: int = 4):
        return (torch.randn(rows, width, generator=_generator({"rows": rows}, salt=7)),)

    dims = {"rows": (1, 65536)}
    return ZooModel("block", Block().eval(), make_inputs, dims,
                    test_shapes=[{"rows": 1}, {"rows": 7}, {"rows": 64}],
                    dynamic_shapes=({0: _dim("rows", *dims["rows"])},), input_names=["x"],
                    example_dims={"rows": 16}, flops=lambda rows: 2 * rows * width * width,
                    bytes_moved=lambda rows: 4 * (2 * rows * width + width * width))


MODELS = {"mlp": mlp, "bert": bert, "gpt2": gpt2, "resnet50": resnet50}
EXTRA = {"vit": vit, "llama": llama, "depthwise": depthwise, "chain_ln": chain_ln, "chain_rms": chain_rms,
         "block": block}


def get(name: str) -> ZooModel:
    make = MODELS.get(name) or EXTRA.get(name)
    if make is None:
        raise KeyError(f"unknown zoo model {name!r}; choose from {', '.join(names())}")
    return make()


def all_models() -> list[ZooModel]:
    return [f() for f in MODELS.values()]


def export(zm: ZooModel):
    """``torch.export`` the model with its dynamic dims (non-strict)."""
    import torch

    from .frontend.quiet import quiet_exporters
    with torch.no_grad(), quiet_exporters():
        return torch.export.export(zm.module, zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes,
                                   strict=False)


def export_onnx(zm: ZooModel, path) -> str:
    """``torch.onnx.export`` (dynamo) with dynamic dims; dim_params take the Dim names."""
    import torch

    from .frontend.quiet import quiet_exporters
    with torch.no_grad(), quiet_exporters():
        torch.onnx.export(zm.module, zm.example_inputs(), str(path), dynamo=True, dynamic_shapes=zm.dynamic_shapes,
                          input_names=zm.input_names, opset_version=18, external_data=False, verbose=False)
    return str(path)


def names() -> list[str]:
    return list(MODELS) + list(EXTRA)


def first_output(out):
    """The first tensor of a model's output (a tensor or a tuple of them)."""
    return out[0] if isinstance(out, (tuple, list)) else out


__all__ = ["ZooModel", "mlp", "bert", "gpt2", "resnet50", "vit", "llama", "chain_ln", "chain_rms", "block",
           "all_models", "get", "export", "export_onnx", "names",
           "first_output", "MODELS"]
