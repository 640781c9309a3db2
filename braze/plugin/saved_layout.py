"""Saved activations channels-last across a training step's forward and backward graphs.

braze runs a convnet's convolutions, max pools and the elementwise work between them in NHWC
(``passes/layout.py``). The activations the backward reads (AOTAutograd's saved tensors) leave
the forward graph as NCHW values, so each one computed in NHWC was transposed at the end of the
forward and back at the start of the backward: on a small convnet (16x32x48x48 activations,
4.7 MB each) a dozen transpose kernels and reductions reading across the two orders.

Both graphs are rewritten before they are partitioned:

- **forward**: a saved 4-D activation that braze makes in NHWC (``nhwc_made``), and that the
  graph returns once (not to the user as well), is returned as
  ``permute(permute(s, to_nhwc), to_nchw)``; the forward's own readers of ``s`` are unchanged. braze's region returns
  the inner NHWC tensor, whose transposes the layout pass cancels, and PyTorch makes the outer
  permute, a view: autograd saves an NCHW tensor with channels-last strides, the same values.
- **backward**: each such input ``x`` is read as ``permute(permute(x, to_nhwc), to_nchw)``. The
  inner permute, PyTorch's, is a contiguous view of the channels-last tensor, which braze takes
  without a copy; the outer one, braze's, sinks into the NHWC ops that read it.

The backward's placeholders are named as the forward's outputs, so the forward's compiler hands
the backward's the names it rewrote. Nothing depends on the two agreeing: a saved tensor with
other strides (the forward ran in PyTorch) is a view braze copies before it reads it
(``runtime.loader``), and PyTorch's ops read any strides.
"""

from __future__ import annotations

import operator

from ..frontend.torch.aten import packet_name

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
LAYOUT_META = "braze_layout_view"  # FX node meta: a permute PyTorch makes on purpose (a view, no warning)
_MADE_IN_NHWC = {"aten.convolution", "aten.max_pool2d_with_indices"}
_SAME_LAYOUT = {"aten.detach", "aten.alias", "aten.clone"}  # their result is laid out as their input
_BATCH_NORMS = {"aten._native_batch_norm_legit_functional", "aten._native_batch_norm_legit",
                "aten.native_batch_norm", "aten._native_batch_norm_legit_no_training"}


def _rank4(node) -> bool:
    import torch
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return isinstance(val, torch.Tensor) and val.dim() == 4


def nhwc_made(node, memo: dict | None = None) -> bool:
    """Whether braze computes the 4-D ``node`` in NHWC: a 2-D convolution, a max pool (values and
    indices), a batch norm's output of such, an elementwise op with such an operand (the layout
    pass sinks the transposes through them), or a detach of such (a relu's saved mask)."""
    import torch
    memo = {} if memo is None else memo
    if node in memo:
        return memo[node]
    memo[node] = False  # a cycle cannot happen in an FX graph; this also bounds the walk
    made = False
    if getattr(node, "op", None) == "call_function" and _rank4(node):
        if node.target is operator.getitem:
            src, index = node.args[0], node.args[1]
            kind = packet_name(src.target) if getattr(src, "op", None) == "call_function" else ""
            made = kind == "aten.max_pool2d_with_indices" or \
                (kind in _BATCH_NORMS and index == 0 and nhwc_made(src.args[0], memo))
        elif packet_name(node.target) in _MADE_IN_NHWC:
            made = True
        elif packet_name(node.target) in _SAME_LAYOUT:
            made = nhwc_made(node.args[0], memo)
        elif torch.Tag.pointwise in getattr(node.target, "tags", ()):
            made = any(nhwc_made(a, memo) for a in node.all_input_nodes)
    memo[node] = made
    return made


def permute_node(graph, after, x, perm, torch_view: bool):
    """``permute(x, perm)``, placed after ``after``; ``torch_view``: one PyTorch makes (a view)."""
    import torch
    with graph.inserting_after(after):
        p = graph.call_function(torch.ops.aten.permute.default, (x, perm))
    val = x.meta["val"]
    with val.fake_mode:
        p.meta["val"] = val.permute(perm)
    if torch_view:
        p.meta[LAYOUT_META] = True
    return p


def saved_start() -> int | None:
    """In a training step's forward graph, the index of its first saved activation among its
    outputs (those before it are the user's); None when AOTAutograd does not say."""
    from torch._guards import TracingContext
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    return getattr(meta, "num_forward", None)


def forward(gm) -> set[str]:
    """Rewrites the forward graph ``gm`` in place (see the module doc); returns the names of the
    saved activations it now returns channels-last."""
    start = saved_start()
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if start is None or out is None or not isinstance(out.args[0], (list, tuple)):
        return set()
    results = list(out.args[0])
    memo: dict = {}
    names = set()
    for k in range(start, len(results)):
        s = results[k]
        if getattr(s, "op", None) != "call_function" or results.count(s) != 1 or not nhwc_made(s, memo):
            continue
        inner = permute_node(gm.graph, s, s, TO_NHWC, torch_view=False)
        results[k] = permute_node(gm.graph, inner, inner, TO_NCHW, torch_view=True)
        names.add(s.name)
    if names:
        out.args = (type(out.args[0])(results),) + tuple(out.args[1:])
        gm.recompile()
    return names


def backward(gm, names: set[str]) -> int:
    """Rewrites the backward graph ``gm`` in place: its inputs named in ``names`` (``forward``'s)
    are read through the two permutes (see the module doc). Returns how many."""
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    chosen = [p for p in places if p.name in names and _rank4(p)]
    last = places[-1] if places else None
    for ph in chosen:
        users = list(ph.users)
        view = permute_node(gm.graph, last, ph, TO_NHWC, torch_view=True)
        last = back = permute_node(gm.graph, view, view, TO_NCHW, torch_view=False)
        for u in users:
            u.replace_input_with(ph, back)
    if chosen:
        gm.recompile()
    return len(chosen)
