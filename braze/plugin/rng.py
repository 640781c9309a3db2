"""Dropout's random numbers under the plug-in: braze draws the masks, PyTorch's generator the seed.

A training graph's ``native_dropout`` (its mask is a random draw) becomes ``braze::dropout``,
whose mask is ``uniform(seed, stream) < 1 - p`` from braze's counter-based generator
(``braze.ops.creation.uniform_numpy``): a pure function of the seed, so the fused kernels that
compute it agree wherever they recompute it. Each call of the graph draws one seed from torch's
default generator (``torch.manual_seed`` reproduces a run, as it does eager's); each dropout of
the graph reads its own stream of that seed. The backward reads the mask the forward saved.

``braze::dropout`` also runs in PyTorch (a region braze could not compile, a graph's first call)
with the same bits, from the NumPy generator. The plug-in option ``rng='torch'`` skips all this:
dropout then runs in PyTorch, bit for bit as eager, and splits the graph around it.
"""

from __future__ import annotations

import functools

SEED_META = "braze_seed"  # FX node meta: the graph's seed, drawn by PyTorch on purpose
DROPOUT = "braze::dropout"


@functools.cache
def ops():
    """Registers ``braze::dropout`` with torch (once per process) and returns its overload."""
    import numpy as np
    import torch

    from ..frontend.torch.aten_math import dropout_scale
    from ..ops.creation import uniform_numpy

    @torch.library.custom_op(DROPOUT, mutates_args=(),
                             schema="(Tensor x, float p, Tensor seed, int stream) -> (Tensor, Tensor)")
    def dropout(x, p, seed, stream):
        """native_dropout's (output, mask) with braze's mask; the same ops in the same order as
        the converter's (``frontend.torch.aten_math``), so the same bits."""
        u = uniform_numpy(int(seed), x.numel(), stream).reshape(tuple(x.shape))
        mask = torch.from_numpy(u < np.float32(1.0 - p))
        return x.mul(mask).mul_(dropout_scale(p)), mask

    @dropout.register_fake
    def _(x, p, seed, stream):
        return torch.empty_like(x), torch.empty_like(x, dtype=torch.bool)

    return torch.ops.braze.dropout.default


def draw_seed():
    """One seed from torch's default generator: any int64."""
    import torch
    return torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64)


def braze_dropout(gm) -> int:
    """Rewrites ``gm`` in place: each training-mode ``native_dropout`` becomes ``braze::dropout``
    on one seed that the graph draws first. Returns how many it rewrote."""
    import torch
    drops = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.native_dropout.default
             and (len(n.args) < 3 or n.args[2] is not False) and isinstance(n.meta.get("val"), tuple)]
    if not drops:
        return 0
    op = ops()
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    with gm.graph.inserting_before(first):  # before every region: a seed has no inputs
        seed = gm.graph.call_function(draw_seed)
    seed.meta[SEED_META] = True
    fake = drops[0].meta["val"][0]
    with fake.fake_mode:
        seed.meta["val"] = torch.empty((), dtype=torch.int64)
    for stream, n in enumerate(drops):
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(op, (n.args[0], float(n.args[1]), seed, stream))
        new.meta = dict(n.meta)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
    gm.recompile()
    return len(drops)
