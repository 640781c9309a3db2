"""Pin a failing graph's mismatch on one node: ``python -m braze.fuzz --seed S --localize``.

The graph is compiled again with every node's output as a result, run at the
failing shape, and each value compared with the reference within its bound.
The first node whose output is out of bounds while all its operands are in
bounds is the suspect (the op, or the kernel it was fused into). Returning
every value changes fusion, so a bug that needs a particular fusion may not
show; then the report says no node differs.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Value
from ..passes.common import copy_module
from .generator import Config, generate
from .tolerance import compare, propagate


def localize(seed: int, config: Config | None = None, run: int | None = None, cache_dir=None) -> str:
    from .runner import _compile
    g = generate(seed, config=config)
    m = copy_module(g.module)
    f = m.functions[g.func]
    outs: list[Value] = [v for n in f.nodes if n.op != "constant" for v in n.outputs]
    f.results = outs
    cm = _compile(m, cache_dir)
    lines = []
    runs = range(len(g.envs)) if run is None else [run]
    for r in runs:
        xs = g.inputs(r)
        vals, errs = propagate(m, f, xs, g.envs[r])
        from .. import reference
        want = reference.run(m, *xs, func=g.func)
        got = cm.function(g.func)(*xs)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        bad = set()
        for v, a, w in zip(outs, got, want):
            ok, msg, _ = compare(a, w, errs[id(v)])
            if not ok:
                bad.add(id(v))
                node = v.producer
                culprit = not any(x is not None and id(x) in bad for x in node.inputs)
                ins = ", ".join("none" if x is None else f"%{x.name}: {x.type}" for x in node.inputs)
                lines.append(f"run {r} {g.envs[r]}: %{v.name} = {node.op}({ins}) {node.attrs}: {msg}"
                             + ("   <- first to differ" if culprit else ""))
                if culprit:
                    lines += _show_operands(node, vals)
    return "\n".join(lines) if lines else "no node differs when every value is a result"


def _show_operands(node, vals) -> list[str]:
    """A few values of the culprit's operands (to see special values)."""
    out = []
    for i, x in enumerate(node.inputs):
        if x is None:
            continue
        flat = np.asarray(vals[id(x)]).ravel()
        out.append(f"    operand {i} %{x.name}: {flat[:12]}{' ...' if flat.size > 12 else ''}")
    return out
