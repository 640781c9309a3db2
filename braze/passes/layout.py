"""Channels-last layout: NCHW convolutions (forward and gradients) and max pools (forward, indices,
backward) run in NHWC.

oneDNN's fast convolutions want NHWC (docs/gemm.md: plain NCHW 1x1 convs run
at under 1 GFLOP/s). Each float ``conv2d`` / ``max_pool2d`` (and its indices and backward) becomes
``permute(op(permute(x, to_nhwc), layout="nhwc"), to_nchw)`` (rule ``to_nhwc``); then each
``to_nchw`` permute sinks (rule ``sink_permute``) through the elementwise ops after it (relu,
residual add) and pads (a SAME window on a symbolic size is padded apart) until it meets a
``to_nhwc`` permute, and the pair cancels (the
canonicalize pass merges and drops them). What remains are permutes at the
edges of the convolutional part of the graph; a global average pool there reads
the NHWC value itself (rule ``pool_in_nhwc``: a mean over H and W).

First, an inference ``batch_norm`` of a float32 convolution's result whose parameters are read
at run time (the plug-in's live weights; constant ones were folded into the convolution) becomes
``x * s + t`` (rule ``scale_shift``), with ``s = scale / sqrt(var + eps)`` and
``t = bias - mean * s`` computed per channel, as eager's CPU kernel computes it: elementwise ops
sink with the permutes, and the convolution's library call applies them (offload's ``scale``
and ``bias`` post-ops) where a batch norm was a pass of its own over the result.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Function, Module
from ..ir.types import DType
from ..ops.registry import get_op
from .common import Namer, add_constant, constant_value, make_node, replace_all_uses, top_functions
from .rules import Rule

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
# each op run in NHWC, and the positions of its inputs it reads in NHWC (a conv's weight stays OIHW). A
# pool's and a conv's input gradient read only the shape of their input x, NHWC too: a training step's
# backward gets its saved activations channels-last (plugin/saved_layout.py), so that costs no transpose
CHANNELS_LAST_OPS = {"conv2d": (0,), "max_pool2d": (0,), "max_pool2d_indices": (0,),
                     "max_pool2d_backward": (0, 1, 2), "conv2d_backward_input": (0, 1),
                     "conv2d_backward_weight": (0, 1), "conv_transpose2d": (0,)}
# ops whose result is not an activation: it keeps its layout (a weight's gradient, OIHW)
_WEIGHT_RESULTS = {"conv2d_backward_weight"}
_SCALE_SHIFT = Rule("channels_last", "scale_shift")
_TO_NHWC = Rule("channels_last", "to_nhwc")
_SINK = Rule("channels_last", "sink_permute")
_POOL = Rule("channels_last", "pool_in_nhwc")


def _is_to_nchw(v) -> bool:
    p = v.producer
    return p is not None and p.op == "permute" and tuple(p.attrs["perm"]) == TO_NCHW


def _replace(module: Module, f: Function, namer: Namer, n, m, out: list) -> None:
    """n's uses read ``permute(m, to_nchw)`` instead: m, computed in NHWC, and the permute back join out."""
    back = make_node(module, "permute", [m.outputs[0]], {"perm": TO_NCHW}, loc=n.loc, namer=namer, name="nchw")
    out += [m, back]
    replace_all_uses(f, n.outputs[0], back.outputs[0])


def _convert(module: Module, f: Function, namer: Namer) -> int:
    out, changed = [], 0
    for n in f.nodes:
        x = n.inputs[0] if n.inputs else None
        acts = CHANNELS_LAST_OPS.get(n.op, ())
        if acts and n.attrs.get("layout", "nchw") == "nchw" and x is not None and \
                all(n.inputs[i] is not None and n.inputs[i].rank == 4 for i in acts) \
                and x.dtype in (DType.float32, DType.bfloat16, DType.float16):
            ps = {i: make_node(module, "permute", [n.inputs[i]], {"perm": TO_NHWC}, loc=n.loc, namer=namer,
                               name="nhwc") for i in acts}
            ins = [ps[i].outputs[0] if i in ps else v for i, v in enumerate(n.inputs)]
            m = make_node(module, n.op, ins, {**n.attrs, "layout": "nhwc"}, loc=n.loc, namer=namer, name=n.op)
            out += ps.values()
            if n.op in _WEIGHT_RESULTS:
                out.append(m)
                replace_all_uses(f, n.outputs[0], m.outputs[0])
            else:
                _replace(module, f, namer, n, m, out)
            changed += 1
            _TO_NHWC.hit()
        else:
            out.append(n)
    f.nodes = out
    return changed


def _sink(module: Module, f: Function, namer: Namer) -> int:
    """elementwise(permute(a, to_nchw), ...) -> permute(elementwise(a, ...), to_nchw), and a global
    average pool likewise (``_global_pool_of_nchw``)."""
    changed = 0
    out = []
    for n in f.nodes:
        kind = get_op(n.op).kind
        acts = [v for v in n.inputs if v is not None and v.rank == 4]
        others = [v for v in n.inputs if v is not None and v.rank != 4]
        if kind == "elementwise" and len(n.outputs) == 1 and any(_is_to_nchw(v) for v in acts) \
                and all(_scalar_or_per_channel(v) for v in others) and n.outputs[0].rank == 4:
            ins = []
            for v in n.inputs:
                if v is not None and v.rank < 4 and not all(d == 1 for d in v.shape):
                    # a per-channel operand ([C, 1, 1]: batch norm's affine): [1, 1, 1, C]
                    r = make_node(module, "reshape", [v], {"shape": [1] * (4 - v.rank) + list(v.shape)}, loc=n.loc,
                                  namer=namer, name="bc")
                    out.append(r)
                    v = r.outputs[0]
                if v is None or v.rank != 4:
                    ins.append(v)
                elif _is_to_nchw(v):
                    ins.append(v.producer.inputs[0])
                else:  # an NCHW operand (e.g. the block input of a residual add): bring it to NHWC
                    p = make_node(module, "permute", [v], {"perm": TO_NHWC}, loc=n.loc, namer=namer, name="nhwc")
                    out.append(p)
                    ins.append(p.outputs[0])
            m = make_node(module, n.op, ins, n.attrs, loc=n.loc, namer=namer, name=n.op)
            _replace(module, f, namer, n, m, out)
            changed += 1
            _SINK.hit()
        elif n.op == "pad" and n.inputs[0].rank == 4 and _is_to_nchw(n.inputs[0]):
            # each dim's padding moves with the dim: a SAME window on a symbolic size (padded apart
            # before the pool or convolution that reads it NHWC) keeps no transpose pair
            pads = list(n.attrs["pads"])
            nhwc = [pads[i] for i in TO_NHWC] + [pads[4 + i] for i in TO_NHWC]
            m = make_node(module, "pad", [n.inputs[0].producer.inputs[0]], {**n.attrs, "pads": tuple(nhwc)},
                          loc=n.loc, namer=namer, name="pad")
            _replace(module, f, namer, n, m, out)
            changed += 1
            _SINK.hit()
        elif _global_pool_of_nchw(n):
            keep = n.op == "adaptive_avg_pool2d" or n.attrs.get("keepdims", False)
            m = make_node(module, "reduce_mean", [n.inputs[0].producer.inputs[0]], {"axes": [1, 2], "keepdims": keep},
                          loc=n.loc, namer=namer, name="mean")
            if keep:
                _replace(module, f, namer, n, m, out)
            else:  # [N, C] either way
                out.append(m)
                replace_all_uses(f, n.outputs[0], m.outputs[0])
            changed += 1
            _POOL.hit()
        else:
            out.append(n)
    f.nodes = out
    return changed


def _scalar_or_per_channel(v) -> bool:
    """A lower-rank operand of an elementwise op on an NCHW activation that broadcasts over all of
    it but the channels: [], [1], [C, 1, 1] or [1, C, 1, 1] without the leading ones."""
    dims = [1] * (4 - v.rank) + list(v.shape)
    return all(d == 1 for i, d in enumerate(dims) if i != 1)


def _global_pool_of_nchw(n) -> bool:
    """adaptive_avg_pool2d(permute(a, to_nchw)) to 1x1, or a reduce_mean of it over H and W (a
    training graph's pool, decomposed): the sink rule makes it permute(reduce_mean(a over H, W),
    to_nchw), the mean of each channel read where it is, not after a transpose of the whole
    activation (ResNet's head: 2048 channels of 7x7, a 2.7 GB/s kernel; a small convnet's last
    block in training, 0.25 ms of a 12 ms step)."""
    x = n.inputs[0] if n.inputs else None
    if x is None or x.rank != 4 or not _is_to_nchw(x) or not x.dtype.is_float:
        return False
    if n.op == "adaptive_avg_pool2d":
        return list(n.attrs["output_size"]) == [1, 1]
    return n.op == "reduce_mean" and sorted(a % 4 for a in (n.attrs.get("axes") or ())) == [2, 3]


def _scale_shift(module: Module, f: Function, namer: Namer) -> None:
    """batch_norm(conv2d(...), run-time parameters) -> conv2d(...) * s + t (see the module doc)."""
    out = []
    for n in f.nodes:
        x = n.inputs[0] if n.inputs else None
        if n.op != "batch_norm" or x is None or x.producer is None or x.producer.op != "conv2d" or \
                x.rank != 4 or any(v.dtype != DType.float32 for v in n.inputs) or \
                all(constant_value(module, v) is not None for v in n.inputs[1:]):
            out.append(n)
            continue
        scale, bias, mean, var = n.inputs[1:]

        def node(op, ins, attrs=None, name="bn"):
            m = make_node(module, op, ins, attrs, loc=n.loc, namer=namer, name=name)
            out.append(m)
            return m.outputs[0]
        eps = node("constant", [], {"name": add_constant(module, np.float32(n.attrs["eps"]), "bn_eps")}, "bn_eps")
        one = node("constant", [], {"name": add_constant(module, np.float32(1.0), "bn_one")}, "bn_one")
        s = node("mul", [node("div", [one, node("sqrt", [node("add", [var, eps])])]), scale], name="bn_scale")
        t = node("sub", [bias, node("mul", [mean, s])], name="bn_shift")
        per_channel = {"shape": [x.shape[1], 1, 1]}
        y = node("mul", [x, node("reshape", [s], per_channel)], name="bn_scaled")
        y = node("add", [y, node("reshape", [t], per_channel)], name=n.outputs[0].name)
        replace_all_uses(f, n.outputs[0], y)
        _SCALE_SHIFT.hit()
    f.nodes = out


def channels_last(module: Module) -> Module:
    """Mutates and returns ``module``; run canonicalize, cse and dce after it."""
    for f in top_functions(module):
        namer = Namer(f)
        _scale_shift(module, f, namer)
        if not _convert(module, f, namer):
            continue
        while _sink(module, f, namer):
            pass
    return module

