"""ONNX control flow that braze resolves at import: Scan over a sequence of static length, and Loop
with a trip count and conditions known at import, become that many copies of their bodies
(Importer.run_subgraph), the state threaded through and the per-step outputs stacked; If runs the
branch its condition picks when that is known at import, and otherwise both branches, selecting each
output with ``where`` (both must give one dtype and shape). A symbolic or long sequence, or a loop's
condition computed from tensor data, is refused by name: braze's graphs have no loops yet."""

from __future__ import annotations

import numpy as np

from ...ir import sym as S
from ...ir.types import DType
from .common import TV, Opt, Seq
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


def _known_bool(t: TV | None) -> bool | None:
    if t is None or t.known is None or t.known.size != 1 or t.known.dtype == object:
        return None
    return bool(t.known.reshape(-1)[0])


@converter("If", attrs=("then_branch", "else_branch"), sequences=True)
def _if(ctx):
    cond = ctx.tv(0)
    pick = _known_bool(cond)
    if pick is not None:
        return ctx.imp.run_subgraph(ctx.attr("then_branch" if pick else "else_branch"), [])
    then = ctx.imp.run_subgraph(ctx.attr("then_branch"), [])
    other = ctx.imp.run_subgraph(ctx.attr("else_branch"), [])
    c = ctx.value(0)
    if c.rank != 0 and S.prod(tuple(c.shape)) != 1:
        raise ctx.unsupported(f"a condition of shape {list(c.shape)}", hint="the condition is one bool")
    c = ctx.op("reshape", ctx.cast(c, DType.bool), shape=())

    def select(k, a, b):
        """where(c, a, b), element by element through sequences and optionals of one structure."""
        if isinstance(a, Seq) and isinstance(b, Seq) and len(a.items) == len(b.items):
            return Seq([select(k, x, y) for x, y in zip(a.items, b.items)], a.dtype)
        if isinstance(a, Opt) and isinstance(b, Opt) and (a.item is None) == (b.item is None):
            return Opt(None if a.item is None else select(k, a.item, b.item))
        if not (isinstance(a, TV) and isinstance(b, TV)):
            raise ctx._needs_known(0, f"condition (output {k} is {a!r} in one branch and {b!r} in the other)")
        a, b = ctx.imp.materialize(a), ctx.imp.materialize(b)
        same = a.dtype == b.dtype and a.rank == b.rank and all(
            ctx.imp.module.constraints.equal(x, y) is True for x, y in zip(a.shape, b.shape))
        if not same:
            raise ctx.unsupported(f"output {k} is {a.type} in one branch and {b.type} in the other, with a "
                                  "condition known only at run time",
                                  hint="give both branches one output shape, or make the condition a constant")
        return TV(value=ctx.op("where", c, a, b))

    return [select(k, a, b) for k, (a, b) in enumerate(zip(then, other))]


@converter("Loop", attrs=("body",), sequences=True)
def _loop(ctx):
    """Unrolled: the trip count (input 0) and the condition (input 1, and the body's each step) known
    at import; ``MAX_STEPS`` steps at most."""
    body = ctx.attr("body")
    n_state = len(ctx.node.input) - 2
    n_scan_out = len(body.output) - 1 - n_state
    if n_state < 0 or n_scan_out < 0 or len(body.input) != n_state + 2:
        raise ctx.unsupported(f"a body of {len(body.input)} inputs and {len(body.output)} outputs for {n_state} "
                              "loop-carried values")
    trips = ctx.const_scalar(0, "trip count") if ctx.tv(0) is not None else None
    cond = True if ctx.tv(1) is None else _known_bool(ctx.tv(1))
    if cond is None:
        ctx.const_scalar(1, "condition")  # raises, naming the input
    limit = "no trip count" if trips is None else f"a trip count of {trips}"
    states = [ctx.tv(2 + i) for i in range(n_state)]
    per_step = [[] for _ in range(n_scan_out)]
    i = 0
    while cond and (trips is None or i < trips):
        if i >= MAX_STEPS:
            raise ctx.unsupported(f"a Loop of more than {MAX_STEPS} steps ({limit}): braze unrolls loops",
                                  hint="export with the loop unrolled, or a smaller trip count")
        feeds = [TV(known=np.array(i, np.int64), dtype=DType.int64), TV(known=np.array(True), dtype=DType.bool)]
        outs = ctx.imp.run_subgraph(body, feeds + states)
        cond = _known_bool(outs[0])
        if cond is None:
            raise ctx.unsupported("the body's condition is computed from tensor data at run time (braze unrolls "
                                  "loops at import)", hint="make the loop's condition a constant")
        states = outs[1:1 + n_state]
        for k, o in enumerate(outs[1 + n_state:]):
            per_step[k].append(ctx.imp.materialize(o))
        i += 1
    if n_scan_out and i == 0:
        raise ctx.unsupported("a Loop of no steps with scan outputs (their element shape is unknown)")
    results = list(states)
    for seq in per_step:
        vals = [ctx.op("unsqueeze", v, axes=(0,)) for v in seq]
        results.append(vals[0] if len(vals) == 1 else ctx.op("concat", *vals, axis=0))
    return results
