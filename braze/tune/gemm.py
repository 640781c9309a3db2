"""The GEMM knob: which kernel multiplies by a prepacked (constant) weight, per range of M.

The choices are braze_matmul's paths (braze_dnnl.h ``BRAZE_PATH_*``): ``smallm``, braze's small-M
kernel, straight from the packed weight (where the weight's layout, dtypes and activation allow;
else oneDNN); ``dnnl``, a oneDNN primitive per M, created at the first call with that M;
``dnnl_rt``, one oneDNN primitive with a run-time M (none to create at a new M).

``DEFAULT`` is the rule measured on BERT-base's GEMMs (docs/gemm.md): the small-M kernel up to
``SMALL_M_MAX`` rows. The dispatch pass writes a table on every such call (``dispatch`` on its
``fused`` node); the host turns it into range tests on M.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import sym as S
from ..ir.graph import Module, Node
from ..ir.types import DType
from ..passes.offload import ANCHORS, transposed_operands

SMALL_M_MAX = 48  # the helper's SMALLM_DEFAULT_MAX (braze_dnnl_matmul.c)
DEFAULT = ((SMALL_M_MAX, "smallm"), (None, "dnnl"))
CHOICES = ("smallm", "dnnl", "dnnl_rt")
# the helper's activation codes (BRAZE_ACT_*) of the post-ops oneDNN applies (passes/offload.py)
ACT_CODES = {"gelu": 2, "gelu_tanh": 3, "silu": 4, "tanh": 6}


@dataclass(frozen=True)
class GemmSite:
    """What a product's speed depends on, names aside: the tuning database's key."""
    n: int
    k: int
    transposed: int  # 1: the weight's memory is [N, K] (torch's linear); 0: [K, N]
    bias: bool
    residual: bool
    act: int  # ACT_CODES' value, 0 for none
    dtype: str = "float32"

    @property
    def key(self) -> str:
        return (f"gemm n={self.n} k={self.k} transposed={self.transposed} bias={int(self.bias)} "
                f"residual={int(self.residual)} act={self.act} {self.dtype}")

    def describe(self) -> str:
        act = next((k for k, v in ACT_CODES.items() if v == self.act), f"act{self.act}")
        epi = "+".join(x for x, on in (("bias", self.bias), (act, self.act), ("residual", self.residual)) if on)
        return f"{self.n}x{self.k}" + (f" {epi}" if epi else "")


def gemm_call(module: Module, n: Node):
    """``(site, M)`` for a ``fused`` gemm node that runs braze_matmul on a constant weight (the
    host's packed-weight call), else None. ``site`` is None where N or K is symbolic, or the
    operands are not all float32 (those keep the default table and are never measured)."""
    if n.op != "fused" or n.attrs.get("kind") != "gemm" or n.attrs.get("post_ops") is None:
        return None
    callee = module.functions.get(n.attrs.get("callee"))
    if callee is None:
        return None
    consts = {id(m.outputs[0]) for m in callee.nodes if m.op == "constant"}
    anchor = next((m for m in callee.nodes if m.op in ANCHORS["gemm"]), None)
    if anchor is None or len(anchor.inputs) < 2:
        return None
    x, w = anchor.inputs[0], anchor.inputs[1]
    ta, tb = transposed_operands(callee, anchor)
    if id(w) not in consts or not (anchor.op == "linear" or (w.rank == 2 and not ta)):
        return None
    N = w.shape[0] if anchor.op == "linear" else w.shape[1]
    K = x.shape[-1]
    M = S.prod(x.shape[:-1])
    post_ops = tuple(n.attrs["post_ops"])
    bias = "bias" in post_ops or (anchor.op == "linear" and len(anchor.inputs) > 2 and anchor.inputs[2] is not None)
    act = next((ACT_CODES[p] for p in post_ops if p in ACT_CODES), 0)
    f32 = all(v.dtype == DType.float32 for v in (x, w, n.outputs[0])) and "cast" not in post_ops
    if not (isinstance(N, int) and isinstance(K, int)) or not f32:
        return None, M
    return GemmSite(N, K, 1 if anchor.op == "linear" or tb else 0, bias, "residual" in post_ops, act), M
