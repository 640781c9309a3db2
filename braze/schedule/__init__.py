"""Schedules: how a lowered loop-IR kernel is laid out on the CPU.

``KERNEL_STAGES`` is the default schedule as an ordered list of ``Kernel -> Kernel``
stages and ``schedule(kernel, stages=None)`` runs them (see default.py).
"""

from .collapse import collapse
from .default import CHUNK, GRAIN, KERNEL_STAGES, Stage, schedule
from .flatten import flatten
from .hoist import hoist
from .jam import jam
from .keep import keep
from .materialize import materialize
from .nest import next_loop_index
from .parallelize import parallelize
from .partition import partition
from .tile import tile
from .vectorize import vectorize
from .widen import widen

__all__ = ["CHUNK", "GRAIN", "KERNEL_STAGES", "Stage", "collapse", "flatten", "hoist", "jam", "keep", "materialize",
           "next_loop_index", "parallelize", "partition", "schedule", "tile", "vectorize", "widen"]
