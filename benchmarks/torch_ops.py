"""How much of a training step PyTorch still computes under the plug-in (issue 24's 10% rule):
torch's profiler over one step's forward and, apart, its backward, in eager and through
``torch.compile(backend="braze", dynamic=True)``, counting the ATen ops that do tensor work.

    python -m benchmarks.torch_ops [--models mlp,llama,bert,bert+dropout] [--shapes quick]
                                   [--threads 2] [--out benchmarks/results]

Counted: top-level ``aten::`` events (an op another ATen op calls is part of its caller), less
views, allocations, fills and size queries (``NOT_WORK``), copies into 0-d and 1-d tensors (buffer
write-backs: batch norm's running statistics, which eager updates inside its own op) and dropouts at p = 0 (they return their input). The optimizer step is not profiled. Per model and
shape: eager's count, braze's, and braze's as a share of eager's, for the model's forward and its
backward (from a fixed output gradient: no loss), with the ops braze left to PyTorch named. The models are benchmarks.training's (dropout at 0 unless
``+dropout``). Writes ``torch_ops.json`` and ``torch_ops.md``.
"""

from __future__ import annotations

from collections import Counter

from .harness import per_model_main, per_model_markdown
from .run import shape_str

DEFAULT_MODELS = ["mlp", "llama", "bert", "bert+dropout"]
NOT_WORK = {  # views, allocations, fills and bookkeeping: what the rule does not count
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::expand", "aten::permute", "aten::t",
    "aten::transpose", "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::as_strided",
    "aten::alias", "aten::detach", "aten::detach_", "aten::empty", "aten::empty_like", "aten::empty_strided",
    "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like", "aten::full", "aten::fill_",
    "aten::zero_", "aten::new_empty", "aten::new_zeros", "aten::resize_", "aten::lift_fresh", "aten::set_",
    "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::to", "aten::lift_fresh_copy",
    "aten::randint", "aten::random_", "aten::result_type", "aten::contiguous", "aten::scalar_tensor",
    "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
}


def _bookkeeping(e) -> bool:
    """A copy into a 0-d or 1-d tensor: a buffer's write-back (batch norm's running statistics and
    step counter, which eager updates inside its batch-norm op and the rule does not count)."""
    shapes = getattr(e, "input_shapes", None) or [[0, 0]]
    return e.name == "aten::copy_" and len(shapes[0]) <= 1


def top_level_work(prof) -> Counter:
    """The ATen ops of ``prof`` that no other ATen op called, less ``NOT_WORK``, buffer write-backs
    (``_bookkeeping``) and a dropout that called nothing (p = 0: it returns its input)."""
    out = Counter()
    for e in prof.events():
        if not e.name.startswith("aten::") or e.name in NOT_WORK or _bookkeeping(e):
            continue
        if e.name == "aten::dropout" and not any(c.name.startswith("aten::") for c in e.cpu_children):
            continue
        p = e.cpu_parent
        while p is not None and not p.name.startswith("aten::"):
            p = p.cpu_parent
        if p is None:
            out[e.name] += 1
    return out


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from braze import zoo

    from .training import TASKS, training_model
    module, inputs, loss_of, _ = training_model(name)
    fns = {"eager": module, "braze": torch.compile(module, backend="braze", dynamic=True)}

    def step(fn, x, profiled=False):
        """The model's forward, then its backward: from its own loss (a task model's, computed in
        the model), else from a fixed output gradient (no loss outside the model is profiled)."""
        module.zero_grad(set_to_none=True)
        counts = []
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) if profiled else _Null() as p:
            out = fn(*x[0], **x[1])
            out = loss_of(out) if name in TASKS else zoo.first_output(out)
        counts.append(top_level_work(p) if profiled else None)
        grad = None if name in TASKS else torch.linspace(0.5, 1.5, out.shape[-1]).expand(out.shape).contiguous()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) if profiled else _Null() as p:
            out.backward(grad)
        counts.append(top_level_work(p) if profiled else None)
        return counts

    for dims in shapes:  # every graph compiled, and past the first calls PyTorch may run
        x = inputs(dims)
        for fn in fns.values():
            for _ in range(3):
                step(fn, x)
    rows = []
    for dims in shapes:
        x = inputs(dims)
        (ef, eb), (bf, bb) = (step(fns[b], x, profiled=True) for b in ("eager", "braze"))
        row = {"shape": shape_str(dims), "dims": dims}
        for part, e, b in (("forward", ef, bf), ("backward", eb, bb)):
            ne, nb = sum(e.values()), sum(b.values())
            row[part] = {"eager_ops": ne, "braze_torch_ops": nb, "share": nb / max(ne, 1),
                         "in_torch": dict(b.most_common())}
        print(f"  {name} {row['shape']}: forward {row['forward']['share']:.1%}, backward "
              f"{row['backward']['share']:.1%} of eager's ATen ops in PyTorch", flush=True)
        rows.append(row)
    return {"model": name, "shapes": rows}


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def to_markdown(doc: dict) -> str:
    def names(ops):
        return ", ".join(f"{k.removeprefix('aten::')} x{v}" for k, v in ops.items()) or "none"

    return per_model_markdown(
        doc, "one training step after warm-up, profiled by torch: top-level ATen ops that do tensor work "
        "(views, allocations, fills, size queries and buffer write-backs not counted) in the forward and in the backward, eager's and what "
        "PyTorch still runs under braze, and braze's count as a share of eager's (issue 24's 10% rule).",
        ["fwd eager", "fwd in torch", "fwd share", "bwd eager", "bwd in torch", "bwd share", "left to PyTorch"],
        lambda s: [s["forward"]["eager_ops"], s["forward"]["braze_torch_ops"], f"{s['forward']['share']:.1%}",
                   s["backward"]["eager_ops"], s["backward"]["braze_torch_ops"], f"{s['backward']['share']:.1%}",
                   f"fwd: {names(s['forward']['in_torch'])}; bwd: {names(s['backward']['in_torch'])}"])


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "torch_ops", 0.0)


if __name__ == "__main__":
    raise SystemExit(main())
