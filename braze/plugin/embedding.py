"""An embedding's gradient added into its weight's other gradient in place (tied embeddings).

The weight of a tied LM head (GPT-2's ``wte``) gets two gradients in the backward: the LM
head's, ``t(dLogits) @ h``, and the embedding's, ``embedding_dense_backward``, which torch
computes whole (``dynamo._kept_whole``), and the graph adds them. That is three V x D tensors at
once (154 MB each for GPT-2) and a pass over them: torch zeroes one, scatters the rows into it,
and the add reads two and writes a third. Scattering the rows straight into the other gradient,
which nothing else reads, needs none of it (``embedding_dense_backward_add``).
"""

from __future__ import annotations

from ..frontend.torch.aten import packet_name
from .partition import FREE_VIEWS, TORCH_META

REASON = ("braze has no scatter-add; torch adds the embedding's gradient rows into the weight's other "
          "gradient in place")


def embedding_dense_backward_add(x, grad, indices, padding_idx: int):
    """``x + embedding_dense_backward(grad, indices, x.shape[0], padding_idx, False)``, written
    into ``x``: the graph reads ``x`` nowhere else (``fold_embedding_grads``)."""
    rows = grad.reshape(-1, x.shape[-1])
    ids = indices.reshape(-1).long()
    if padding_idx >= 0:  # the padding row gets no gradient
        keep = ids != padding_idx
        rows, ids = rows[keep], ids[keep]
    return x.index_put_((ids,), rows, accumulate=True)


def _owned(n) -> bool:
    """Whether ``n`` is a fresh tensor, or views of one, that only the next node reads: writing
    into it changes nothing else the graph computes."""
    while True:
        if n.op != "call_function" or len(n.users) != 1 or not hasattr(n.target, "_schema"):
            return False
        if packet_name(n.target) not in FREE_VIEWS:
            return not n.target._schema.is_mutable and not any(r.alias_info for r in n.target._schema.returns)
        n = n.args[0]


def fold_embedding_grads(gm) -> int:
    """Rewrites ``gm`` in place: ``add(x, embedding_dense_backward(...))`` whose ``x`` is
    ``_owned`` and of the gradient's shape and dtype becomes ``embedding_dense_backward_add``,
    which PyTorch runs (``TORCH_META``). Returns how many it rewrote."""
    import torch
    aten = torch.ops.aten
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.add.Tensor or len(n.args) != 2 or n.kwargs:
            continue
        for e, x in (n.args, n.args[::-1]):
            if getattr(e, "target", None) is not aten.embedding_dense_backward.default or len(e.users) != 1:
                continue
            grad, indices, _, padding_idx, scale = (list(e.args) + [False])[:5]
            xv, ev = getattr(x, "meta", {}).get("val"), e.meta.get("val")
            if scale or not isinstance(padding_idx, int) or xv is None or ev is None or \
                    xv.dtype != ev.dtype or tuple(xv.shape) != tuple(ev.shape) or not _owned(x):
                continue
            with gm.graph.inserting_before(n):
                new = gm.graph.call_function(embedding_dense_backward_add, (x, grad, indices, padding_idx))
            new.meta = dict(n.meta)
            new.meta[TORCH_META] = REASON
            n.replace_all_uses_with(new)
            gm.graph.erase_node(n)
            gm.graph.erase_node(e)
            done += 1
            break
    if done:
        gm.recompile()
    return done
