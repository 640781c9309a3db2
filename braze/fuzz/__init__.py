"""Random-graph differential testing (NNSmith-style): generate, compile, compare.

* ``generator``: random well-typed graph functions over the ops braze claims.
* ``tolerance``: a per-element error bound propagated through the graph.
* ``runner``: compile several graphs at once, run each at several shapes, compare
  with the reference interpreter; ``python -m braze.fuzz`` / ``scripts/fuzz.py``.
"""

from .generator import Config, RandomGraph, generate, generate_batch

__all__ = ["Config", "RandomGraph", "generate", "generate_batch"]
