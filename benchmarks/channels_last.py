"""A channels-last model in plug-in mode: ``model.to(memory_format=torch.channels_last)`` with
channels-last inputs (PyTorch's advice for convnets on a CPU) against the same model and inputs in
NCHW, both through ``torch.compile(backend="braze")``, and eager on the channels-last pair.

    python -m benchmarks.channels_last [--models resnet50,depthwise] [--shapes full]
                                       [--threads 2] [--min-time 2.0] [--out benchmarks/results]

Per model, in one process: both compiles (dynamic=True, under no_grad, live weights), each warmed
up at every shape; then per shape the three called in turn until ``--min-time`` seconds and >= 8
rounds; medians, the median of each round's ratios, and each output against eager. braze reads a
channels-last input and a convolution's channels-last (OHWI) weight where they lie
(plugin/strides.py's ``channels_last_inputs``); before, it copied each to NCHW at every call.

Writes ``channels_last.json`` and ``channels_last.md`` to ``--out``.
"""

from __future__ import annotations

import copy
import statistics
import time

from .harness import per_model_main, per_model_markdown, time_once
from .run import shape_str

DEFAULT_MODELS = ["resnet50", "depthwise"]


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    from braze import zoo
    from braze.testing import rel_error
    zm = zoo.get(name)
    cl_module = copy.deepcopy(zm.module).to(memory_format=torch.channels_last)
    nchw = torch.compile(zm.module, backend="braze", dynamic=True)
    cl = torch.compile(cl_module, backend="braze", dynamic=True)

    def cl_inputs(x):
        return [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in x]
    rows = []
    with torch.no_grad():
        for dims in shapes:
            x = zm.make_inputs(**dims)
            for _ in range(3):
                nchw(*x), cl(*cl_inputs(x))
        for dims in shapes:
            x = zm.make_inputs(**dims)
            xc = cl_inputs(x)
            want = zoo.first_output(zm.module(*x)).numpy()
            err = rel_error(zoo.first_output(cl(*xc)).numpy(), want)
            runs = {"nchw": (nchw, x), "channels_last": (cl, xc), "eager_channels_last": (cl_module, xc)}
            times = {k: [] for k in runs}
            t0 = time.perf_counter()
            while len(times["nchw"]) < 8 or time.perf_counter() - t0 < min_time:
                order = list(runs) if len(times["nchw"]) % 2 else list(runs)[::-1]
                for k in order:
                    times[k].append(time_once(*runs[k]))
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            ratio = statistics.median(a / b for a, b in zip(times["channels_last"], times["nchw"]))
            vs_eager = statistics.median(a / b for a, b in zip(times["channels_last"], times["eager_channels_last"]))
            rows.append({"shape": shape_str(dims), "dims": dims, **{f"{k}_ms": v for k, v in med.items()},
                         "cl_over_nchw": ratio, "cl_over_eager_cl": vs_eager, "rounds": len(times["nchw"]),
                         "rel_error_cl": err})
            print(f"  {name} {shape_str(dims)}: channels-last {med['channels_last']:.2f} ms, NCHW {med['nchw']:.2f} ms "
                  f"({ratio:.3f}x), eager channels-last {med['eager_channels_last']:.2f} ms ({vs_eager:.3f}x)",
                  flush=True)
    return {"model": name, "shapes": rows}


def to_markdown(doc: dict) -> str:
    return per_model_markdown(
        doc, "`torch.compile(model, backend='braze', dynamic=True)` of the model moved to channels_last, called "
             "with channels-last inputs, against the same in NCHW and eager on the channels-last pair, in turn; "
             "median times, and the median over rounds of each round's ratio.",
        ["channels-last ms", "NCHW ms", "eager channels-last ms", "channels-last / NCHW",
         "channels-last / eager", "rel err"],
        lambda s: [f"{s['channels_last_ms']:.2f}", f"{s['nchw_ms']:.2f}", f"{s['eager_channels_last_ms']:.2f}",
                   f"{s['cl_over_nchw']:.3f}x", f"{s['cl_over_eager_cl']:.3f}x", f"{s['rel_error_cl']:.1e}"])


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "channels_last", 2.0)


if __name__ == "__main__":
    raise SystemExit(main())
