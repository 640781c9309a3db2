"""Region results that PyTorch reads have the strides PyTorch traced.

braze's kernels write every result contiguous. Eager's results are not always: a convolution of
a channels-last input is channels-last, an elementwise op on a transposed input is transposed,
and a transpose of an intermediate is a view of it. PyTorch's ops read a tensor through its
strides, so most give the same values either way, but not all: ``as_strided`` (the user's, or
AOTAutograd's when it cannot replay a view) reads the storage by the strides it traced, and read
a braze result's elements in the wrong order (a silent wrong answer), while a ``view`` that the
traced strides allow raised on braze's.

So before the graph is partitioned, each node braze computes whose traced value is dense but not
contiguous, and that PyTorch reads (a PyTorch op, or the graph's output), is given to those
readers as ``permute(permute(x, order), inverse)``: braze computes the inner permute, which is
contiguous, and PyTorch makes the outer one, a view with the traced strides. The layout pass
cancels the inner permute against braze's own transposes where it can (a convolution braze runs
in NHWC, read channels-last: no copy at all).

A traced value that is not dense (a slice, a select or an expand of an intermediate) cannot be
written with its strides. Where it is a view, PyTorch makes it for its PyTorch readers, from the
view's input, which braze then returns with that input's traced strides (this rule again). A
non-dense result of anything else (none of the converters makes one) stays contiguous, as do the
strides PyTorch reads as numbers (``sym_stride``).
"""

from __future__ import annotations

from .saved_layout import TO_NHWC, backward, permute_node


def dense_order(val) -> list[int] | None | bool:
    """The permutation of ``val``'s dims from the largest stride to the smallest, when ``val`` is
    dense, starts its storage, and is not contiguous; True when it is contiguous (or empty); None
    when it is not dense. Symbolic sizes are read at their hints (no guard): a dense layout's order
    does not depend on the sizes."""
    import torch
    from torch.fx.experimental.symbolic_shapes import optimization_hint
    if not isinstance(val, torch.Tensor):
        return True
    try:
        sizes = [optimization_hint(s) for s in val.shape]
        strides = [optimization_hint(s) for s in val.stride()]
        offset = optimization_hint(val.storage_offset())
    except Exception:  # noqa: BLE001 -- no hint (an unbacked size): leave it as it was
        return True
    if 0 in sizes:
        return True
    order = sorted(range(val.dim()), key=lambda i: (-strides[i], i))
    step = 1
    for i in reversed(order):
        if sizes[i] != 1 and strides[i] != step:
            return None
        step *= sizes[i]
    if offset != 0:
        return None
    return True if order == list(range(val.dim())) else order


def keep_traced_strides(g, reasons: dict, torch_readers, is_view, view_reason: str) -> int:
    """Rewrites ``g`` in place (see the module doc). ``reasons``: the partition's (None: braze
    computes the node); ``torch_readers(node)``: the users of ``node`` that PyTorch runs;
    ``is_view(node)``: whether ``node`` is a view op PyTorch can make; a view PyTorch takes over
    gets ``view_reason``. Returns how many nodes it rewrote; the permutes it adds have no reason
    yet."""
    rewritten = 0
    for n in reversed(list(g.graph.nodes)):  # readers first: a view PyTorch takes over makes its input read
        if n.op != "call_function" or reasons.get(n.name) is not None:
            continue
        order = dense_order(n.meta.get("val"))
        readers = torch_readers(n) if order is not True else []
        if not readers or (order is None and not is_view(n)):
            continue
        if order is None:
            with g.graph.inserting_after(n):
                twin = g.graph.node_copy(n)
            reasons[twin.name] = view_reason
            new = twin
        else:
            inverse = sorted(range(len(order)), key=order.__getitem__)
            inner = permute_node(g.graph, n, n, order, torch_view=False)
            new = permute_node(g.graph, inner, inner, inverse, torch_view=True)
        for u in readers:
            u.replace_input_with(n, new)
        rewritten += 1
    return rewritten


def channels_last_inputs(gm, skip) -> int:
    """Rewrites an inference graph ``gm`` in place: each 4-D input with channels-last strides (an
    image, or a weight of a model moved to ``memory_format=torch.channels_last``) but those named
    in ``skip`` (the frozen ones) is read through the two permutes, as ``saved_layout.backward``
    reads saved activations: braze takes its NHWC (a weight's OHWI) memory as it is, where it copied
    the tensor to NCHW at every call. Returns how many."""
    names = {p.name for p in gm.graph.nodes if p.op == "placeholder" and p.name not in skip and
             dense_order(p.meta.get("val")) == TO_NHWC}
    return backward(gm, names) if names else 0
