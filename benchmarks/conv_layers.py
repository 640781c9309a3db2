"""Convolutions layer by layer: braze's kernel counters next to OpenVINO's per-layer counters.

    python -m benchmarks.conv_layers [--models resnet50,depthwise] [--shapes full] [--threads 2]
                                     [--min-time 2.0] [--precision fp32|bf16]
                                     [--out benchmarks/results] [--stem conv_layers]

Per model, in one process: braze compiles the zoo model once (dynamic dims, ``debug=3``: a
time counter around every kernel). OpenVINO compiles the same model's .onnx for each shape
(static, ``PERF_COUNT``, f32, the thread count, LATENCY; with ``--precision bf16``, braze's
``precision="bf16"`` policy against OpenVINO's bf16 hint): with dynamic dims its counters missed up
to a third of a call (ResNet-50 at 2x96x128: 7.4 of 12.2 ms). Per shape, blocks of calls
alternate between the two (a pause between blocks lets the other's threads go idle) until
``--min-time`` seconds and at least 5 blocks each; per layer, the median over blocks of the time
per call.

Layers are matched by what they compute, not by name: a convolution's signature is its kernel,
stride, channels, groups and output size (``3x3/s1 64->64 g1 @56x56``). braze's time for a
signature is its convolution kernels plus the elementwise kernels that only apply an activation
to their output (a ReLU braze runs apart, over the result in place, or a cast to 16 bits), since
OpenVINO fuses those into the convolution; so is a residual add, which both fuse. Everything else
is one row per kind of kernel (braze) or layer type (OpenVINO). The counters cost time of their
own, so the totals are above a plain call's.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections import Counter, defaultdict

from .harness import per_model_main, per_model_markdown
from .run import shape_str

DEFAULT_MODELS = ["resnet50", "depthwise"]
BLOCK_S = 0.2  # seconds of calls per block
_ACTIVATIONS = {"relu", "clamp", "cast"}  # a cast stands for the store to 16 bits that OpenVINO fuses
# braze's precision= policy -> OpenVINO's INFERENCE_PRECISION_HINT
OV_PRECISION = {"fp32": "f32", "bf16": "bf16"}


def _sig(kh, kw, stride, ic, oc, groups, oh, ow) -> str:
    return f"{kh}x{kw}/s{stride} {ic}->{oc} g{groups} @{oh}x{ow}"


def _flops(sig: str, batch: int) -> float:
    k, chans, g, at = sig.split()
    kh, kw = map(int, k.split("/")[0].split("x"))
    ic, oc = map(int, chans.split("->"))
    oh, ow = map(int, at[1:].split("x"))
    return 2.0 * batch * oh * ow * oc * (ic // int(g[1:])) * kh * kw


def braze_layers(module, dims: dict) -> tuple[dict[str, str], Counter]:
    """kernel callee -> the signature of the convolution it computes (or whose activation it
    applies), or ``other: <kind>``; and the convolutions per signature."""
    from braze.ir import sym as S

    def ev(x):
        return int(S.evaluate(x, dims))
    out, made, convs = {}, {}, Counter()
    for n in module.main.nodes:
        if n.op != "fused":
            continue
        callee, kind = n.attrs["callee"], n.attrs.get("kind", "?")
        f = module.functions[callee]
        conv = next((m for m in f.nodes if m.op in ("conv2d", "direct_conv2d")), None)
        if conv is not None:
            w, y = conv.inputs[1].type.shape, conv.outputs[0].type.shape
            g = int(conv.attrs.get("groups", 1))
            if conv.op == "conv2d":  # OIHW weight; NHWC data where layout says so
                oc, icg, kh, kw = w
                nhwc = conv.attrs.get("layout") == "nhwc"
            else:  # [kh, kw, in / groups, out], NHWC data
                kh, kw, icg, oc = w
                nhwc = True
            oh, ow = (ev(y[1]), ev(y[2])) if nhwc else (ev(y[2]), ev(y[3]))
            sig = _sig(kh, kw, int(conv.attrs.get("stride", [1])[0]), int(icg) * g, int(oc), g, oh, ow)
            out[callee] = sig
            made[id(n.outputs[0])] = sig
            convs[sig] += 1
        elif {m.op for m in f.nodes if m.op not in ("constant",)} <= _ACTIVATIONS and \
                id(n.inputs[0]) in made:
            out[callee] = made[id(n.outputs[0])] = made[id(n.inputs[0])]
        else:
            out[callee] = f"other: {kind}"
    return out, convs


def ov_layers(model) -> dict[str, str]:
    """OpenVINO node name -> signature, for the convolutions of ``model`` (an ``ov.Model`` with
    static shapes); the compiled model's profiling names its nodes alike."""
    out = {}
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind not in ("Convolution", "GroupConvolution"):
            continue
        w, y = list(op.get_input_shape(1)), list(op.get_output_shape(0))
        if kind == "GroupConvolution":
            g, ocg, icg, kh, kw = w
            oc = g * ocg
        else:
            g, (oc, icg, kh, kw) = 1, w
        stride = int(op.get_attributes()["strides"][0])
        out[op.get_friendly_name()] = _sig(kh, kw, stride, icg * g, oc, g, y[2], y[3])
    return out


def measure(name: str, shapes: list[dict], min_time: float, precision: str = "fp32") -> dict:
    import numpy as np
    import openvino as ov
    import torch

    import braze
    from braze import zoo

    from .backends import _onnx_file
    zm = zoo.get(name)
    with torch.no_grad():
        cm = braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes,
                           precision=precision, options={"debug": 3})
    onnx_dir = tempfile.mkdtemp(prefix="conv_layers_")
    path, _ = _onnx_file(zm, onnx_dir)
    core = ov.Core()
    model = core.read_model(str(path))
    threads = torch.get_num_threads()
    in_names = [i.get_any_name() for i in model.inputs]
    rows = []
    for dims in shapes:
        x = [t.numpy() for t in zm.make_inputs(**dims)]
        feed = dict(zip(in_names, (np.ascontiguousarray(a) for a in x)))
        kmap, braze_convs = braze_layers(cm.module, dims)
        static = model.clone()  # with dynamic dims, OpenVINO's counters missed up to a third of a call
        static.reshape({k: list(v.shape) for k, v in feed.items()})
        ov_map = ov_layers(static)
        req = core.compile_model(static, "CPU", {
            "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": OV_PRECISION[precision],
            "PERF_COUNT": "YES"}).create_infer_request()
        for _ in range(3):
            cm(*x)
            req.infer(feed, share_inputs=True)
        b_blocks, o_blocks, b_calls, o_calls = [], [], [], []
        t_start = time.perf_counter()
        while len(b_blocks) < 5 or time.perf_counter() - t_start < min_time:
            before = {k.label: k.seconds for k in cm.profile()}
            n, t0 = 0, time.perf_counter()
            while n < 3 or time.perf_counter() - t0 < BLOCK_S:
                cm(*x)
                n += 1
            b_calls.append((time.perf_counter() - t0) / n)
            per = defaultdict(float)
            for k in cm.profile():
                callee = k.label.rsplit("@", 1)[-1]
                per[kmap.get(callee, "other: host")] += (k.seconds - before.get(k.label, 0.0)) / n
            b_blocks.append(per)
            time.sleep(0.05)
            per, n, t0 = defaultdict(float), 0, time.perf_counter()
            while n < 3 or time.perf_counter() - t0 < BLOCK_S:
                req.infer(feed, share_inputs=True)
                for p in req.profiling_info:
                    per[ov_map.get(p.node_name, f"other: {p.node_type}")] += p.real_time.total_seconds()
                n += 1
            o_calls.append((time.perf_counter() - t0) / n)
            o_blocks.append({k: v / n for k, v in per.items()})
            time.sleep(0.05)
        prims, ran = defaultdict(set), set()
        for p in req.profiling_info:
            if p.node_name in ov_map:
                prims[ov_map[p.node_name]].add(p.exec_type)
                ran.add(p.node_name)
        ov_convs = Counter(ov_map[node] for node in ran)
        counts = {sig: [braze_convs[sig], ov_convs[sig]] for sig in braze_convs | ov_convs}
        layers = []
        for sig in sorted(set().union(*b_blocks, *o_blocks), key=lambda s: (s.startswith("other"), s)):
            b = statistics.median(d.get(sig, 0.0) for d in b_blocks) * 1e3
            o = statistics.median(d.get(sig, 0.0) for d in o_blocks) * 1e3
            row = {"layer": sig, "braze_ms": b, "openvino_ms": o, "braze_over_openvino": b / o if o else None,
                   "count": counts.get(sig),
                   "openvino_kernel": ",".join(sorted(prims.get(sig, ())))}
            if not sig.startswith("other"):
                fl = _flops(sig, dims.get("batch", 1))
                row.update(braze_gflops=fl / b / 1e6 if b else None, openvino_gflops=fl / o / 1e6 if o else None)
            layers.append(row)
        cover_b = sum(r["braze_ms"] for r in layers) / (statistics.median(b_calls) * 1e3)
        cover_o = sum(r["openvino_ms"] for r in layers) / (statistics.median(o_calls) * 1e3)
        conv_b = sum(r["braze_ms"] for r in layers if not r["layer"].startswith("other"))
        conv_o = sum(r["openvino_ms"] for r in layers if not r["layer"].startswith("other"))
        rows.append({"shape": shape_str(dims), "dims": dims, "layers": layers, "blocks": len(b_blocks),
                     "braze_call_ms": statistics.median(b_calls) * 1e3,
                     "openvino_call_ms": statistics.median(o_calls) * 1e3,
                     "braze_conv_ms": conv_b, "openvino_conv_ms": conv_o,
                     "counted": {"braze": cover_b, "openvino": cover_o}})
        print(f"  {name} {shape_str(dims)}: convolutions braze {conv_b:.3f} ms, openvino {conv_o:.3f} ms "
              f"({conv_b / conv_o:.3f}x); calls (counters on) {rows[-1]['braze_call_ms']:.3f} / "
              f"{rows[-1]['openvino_call_ms']:.3f} ms", flush=True)
    return {"model": name, "shapes": rows}


def to_markdown(doc: dict) -> str:
    head = per_model_markdown(
        {**doc, "results": [{"model": r["model"], "shapes": r["shapes"]} for r in doc["results"]]},
        "braze's kernel counters (debug=3) and OpenVINO's PERF_COUNT, blocks of calls in turn; per layer the median "
        "over blocks of ms per call. A convolution's row holds the activation kernels braze runs apart over its "
        "output (OpenVINO fuses them). Counters on, so calls are slower than in the other benchmarks.",
        ["call ms (braze / openvino)", "counters / call (braze / openvino)", "convolutions ms (braze / openvino)",
         "braze / openvino"],
        lambda s: [f"{s['braze_call_ms']:.3f} / {s['openvino_call_ms']:.3f}",
                   f"{s['counted']['braze']:.2f} / {s['counted']['openvino']:.2f}",
                   f"{s['braze_conv_ms']:.3f} / {s['openvino_conv_ms']:.3f}",
                   f"{s['braze_conv_ms'] / s['openvino_conv_ms']:.3f}x"])
    parts = [head]
    for r in doc["results"]:
        for s in r["shapes"]:
            parts.append(f"\n### {r['model']}, {s['shape']}\n")
            parts.append("| layer | count (braze, openvino) | braze ms | openvino ms | braze / openvino | "
                         "braze GFLOP/s | openvino GFLOP/s | openvino kernel |")
            parts.append("|---|---|---|---|---|---|---|---|")
            for row in s["layers"]:
                c = row.get("count")
                ratio = row["braze_over_openvino"]
                parts.append(
                    f"| {row['layer']} | {f'{c[0]}, {c[1]}' if c else ''} | {row['braze_ms']:.3f} | "
                    f"{row['openvino_ms']:.3f} | {f'{ratio:.2f}x' if ratio else '-'} | "
                    f"{row.get('braze_gflops') or 0:.0f} | {row.get('openvino_gflops') or 0:.0f} | "
                    f"{row['openvino_kernel']} |")
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--precision", choices=list(OV_PRECISION), default="fp32")
    known, rest = ap.parse_known_args(argv)
    return per_model_main(rest, __doc__, DEFAULT_MODELS, functools.partial(measure, precision=known.precision),
                          to_markdown, "conv_layers", 2.0)


if __name__ == "__main__":
    raise SystemExit(main())
