"""The default CPU schedule: ``KERNEL_STAGES``, run in order by ``schedule``.

Each stage is ``Kernel -> Kernel`` (a new kernel; the input is not changed) and works
nest by nest (braze/schedule/nest.py); its output is a complete loop-IR kernel, so the
text between any two stages can be printed, dumped and read back:

1. ``flatten``      loads and stores address one flat element offset
2. ``collapse``     contiguous adjacent loops merge (a reduction's own too); unit loops go
3. ``tile``         a nest that transposes (NHWC -> NCHW) runs in blocks of pixels, channels inside
4. ``materialize``  reductions that skip an outer loop go to a temp buffer, computed first
5. ``hoist``        loop-invariant reductions and sub-expressions become Lets (stitch kernels)
6. ``keep``         a value several passes over a row need goes to a row buffer, computed once
7. ``widen``        bfloat16 / float16 values computed in float32: widened at loads, rounded at stores
8. ``vectorize``    contiguous float32 innermost loops and reductions marked vector
9. ``parallelize``  outer loops parallel above a grain; a lone vector loop split into chunks
10. ``partition``   a loop with border tests runs as border, interior (tests gone) and border loops
11. ``jam``         a few whole vectors that share many broadcast values computed side by side

A stage's output depends on its input only: new Let and temp names are numbered past
the kernel's (``used_names``), new loop variables past its largest (``next_loop_index``).

A stage whose input is not in the form it expects (a nest not flat, or already laid
out) leaves that nest as it is, so running a stage twice changes nothing.
Leave a stage out by passing the list without it: ``schedule(k, [s for s in
KERNEL_STAGES if s is not collapse])``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..ir.loop import Kernel
from .collapse import collapse
from .flatten import flatten
from .hoist import hoist
from .jam import jam
from .keep import keep
from .materialize import materialize
from .nest import coeff, flat_offset, next_loop_index
from .parallelize import CHUNK, GRAIN, parallelize
from .partition import partition
from .tile import tile
from .vectorize import vector_ok, vectorize
from .widen import widen

Stage = Callable[[Kernel], Kernel]

KERNEL_STAGES: tuple = (flatten, collapse, tile, materialize, hoist, keep, widen, vectorize, parallelize, partition,
                         jam)


def schedule(kernel: Kernel, stages: Sequence[Stage] | None = None) -> Kernel:
    """Run ``stages`` (default ``KERNEL_STAGES``) in order; the result is marked scheduled.

    Each stage numbers the loop variables it makes past the largest in its input
    (``next_loop_index``), so this gives the same text as running the stages one by one.
    """
    for stage in KERNEL_STAGES if stages is None else stages:
        kernel = stage(kernel)
    return replace(kernel, buffers=list(kernel.buffers), syms=list(kernel.syms), body=list(kernel.body),
                   scheduled=True)


__all__ = ["CHUNK", "GRAIN", "KERNEL_STAGES", "Stage", "coeff", "collapse", "flat_offset", "flatten", "hoist",
           "jam", "keep", "materialize", "next_loop_index", "parallelize", "partition", "schedule", "tile", "vector_ok",
           "vectorize", "widen"]
