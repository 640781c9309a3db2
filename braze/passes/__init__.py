"""Graph passes: each is ``fn(module) -> module``; it mutates the module it is given and
returns it (``braze.pipeline.run_pipeline`` copies the input first).

* ``canonicalize``: identity casts/reshapes/permutes/expands/slices, view chains, x*1, x+(-0.0)
* ``constant_fold``: all-constant nodes (and conv + batch_norm weights) -> constants
* ``cse``, ``dce``
* ``channels_last``: float conv2d / max_pool2d in NHWC, permutes sunk and cancelled
* ``recognize_patterns``: hand-written ops (tanh GELU) -> the native op
* ``decompose``: scaled_dot_product_attention -> matmul, softmax, matmul
* ``precision``: casts so each GEMM / convolution runs in a dtype the library takes (the
  ``precision=`` policy, 16-bit models); ``hoist_casts``: a cast to 16 bits moved above the
  ops that commute with rounding (relu, max_pool2d, layout changes), so a product stores 16 bits
* ``fuse``: groups -> ``fused`` nodes calling ``@fused_N`` sub-functions (``fusion_report``)
* ``plan_memory`` / ``assign_memory``: arena offsets for intermediates (``MemoryPlan``)

Their local rewrite rules are named; ``with collect_rule_stats() as stats:`` counts the hits
of each in the block (``stats.report()``; see braze/passes/rules.py).
"""

from .canonicalize import canonicalize
from .common import copy_module
from .constant_fold import constant_fold
from .cse import cse
from .dce import dce
from .decompose import decompose
from .layout import channels_last
from .patterns import recognize_patterns
from .precision import hoist_casts, precision
from .rules import RuleStats, all_rules, collect_rule_stats
from .fusion import fuse, fusion_report, group_counts
from .memory import MemoryPlan, assign_memory, plan_memory

__all__ = ["canonicalize", "channels_last", "recognize_patterns", "constant_fold", "cse", "dce", "decompose", "precision", "hoist_casts", "fuse", "fusion_report", "group_counts",
           "plan_memory", "assign_memory", "MemoryPlan", "copy_module", "RuleStats", "collect_rule_stats", "all_rules"]
