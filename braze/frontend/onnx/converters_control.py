"""ONNX control flow that braze unrolls at import: Scan over a sequence of static length becomes that
many copies of its body (Importer.run_subgraph), the state threaded through and the per-step outputs
stacked. A symbolic or long sequence is refused by name: braze's graphs have no loops yet."""

from __future__ import annotations

from ...ir import sym as S
from .common import TV
from .convert import converter

MAX_STEPS = 256  # an unrolled body per step: past this the graph, and its compile, grow too large


@converter("Scan", attrs=("body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
                          "scan_output_axes", "scan_output_directions"))
def _scan(ctx):
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n_state = len(ctx.node.input) - m
    n_scan_out = len(body.output) - n_state
    if n_state < 0 or n_scan_out < 0 or len(body.input) != n_state + m:
        raise ctx.unsupported(f"a body of {len(body.input)} inputs and {len(body.output)} outputs for "
                              f"{n_state} states and {m} scan inputs")
    states = [ctx.tv(i) for i in range(n_state)]
    scans = [ctx.value(n_state + j) for j in range(m)]
    in_axes = [a % x.rank for a, x in zip(ctx.attr("scan_input_axes", [0] * m), scans)]
    in_dirs = ctx.attr("scan_input_directions", [0] * m)
    out_axes = ctx.attr("scan_output_axes", [0] * n_scan_out)
    out_dirs = ctx.attr("scan_output_directions", [0] * n_scan_out)
    lengths = {ctx.imp.module.constraints.simplify(x.shape[a]) for x, a in zip(scans, in_axes)}
    if len(lengths) != 1:
        raise ctx.unsupported(f"scan inputs of different lengths {sorted(map(str, lengths))}")
    steps = lengths.pop()
    if S.is_symbolic(steps) or not 1 <= steps <= MAX_STEPS:
        raise ctx.unsupported(f"a Scan over {steps} steps: braze unrolls Scan, over 1 to {MAX_STEPS} steps of a "
                              "static length", hint="export with a fixed sequence length, or unroll the loop")
    per_step = [[] for _ in range(n_scan_out)]
    for t in range(steps):
        feeds = list(states)
        for x, a, d in zip(scans, in_axes, in_dirs):
            i = steps - 1 - t if d else t
            feeds.append(TV(value=ctx.op("squeeze", ctx.op("slice", x, axis=a, start=i, end=i + 1), axes=(a,))))
        outs = ctx.imp.run_subgraph(body, feeds)
        states = outs[:n_state]
        for k, o in enumerate(outs[n_state:]):
            per_step[k].append(o)
    results = list(states)
    for k, seq in enumerate(per_step):
        vals = [ctx.imp.materialize(o) for o in (seq[::-1] if out_dirs[k] else seq)]
        axis = out_axes[k] % (vals[0].rank + 1)
        vals = [ctx.op("unsqueeze", v, axes=(axis,)) for v in vals]
        results.append(vals[0] if len(vals) == 1 else ctx.op("concat", *vals, axis=axis))
    return results
