"""The product knob: which kernel multiplies by a prepacked (constant) weight, per range of M.

Two kinds of call have the knob:

* ``gemm``: a linear or 2-D matmul on a constant weight (the host's ``braze_matmul``).
* ``conv1x1``: an NHWC convolution with a 1x1 constant kernel, stride 1, no padding, one group:
  a product of the [N*H*W, IC] input by the [OC, IC] weight, so it may run as a GEMM too.

The kernels are ``conv`` (``conv1x1`` only: oneDNN's convolution, as before), and
braze_matmul's paths (braze_dnnl.h ``BRAZE_PATH_*``): ``smallm``, braze's small-M kernel,
straight from the packed weight (where the weight's layout, dtypes and activation allow; else
oneDNN); ``dnnl``, a oneDNN primitive per M, created at the first call with that M; ``dnnl_rt``,
one oneDNN primitive with a run-time M (none to create at a new M).

``DEFAULTS`` are the rules braze runs where nothing was measured: for a GEMM the small-M kernel up
to ``SMALL_M_MAX`` rows (measured on BERT-base's GEMMs, docs/gemm.md), for a 1x1 convolution
oneDNN's convolution. A helper built for AVX2 without AVX-512 has kernels of its own
(braze_dnnl_smallm_avx2.c), with its own rules, ``AVX2_DEFAULTS``: the small-M kernel up to
``AVX2_SMALL_M_MAX`` rows, and up to ``AVX2_TINY_MAX_M`` for a weight of at most
``AVX2_TINY_WEIGHT`` elements (no oneDNN primitive to create at a new shape). On a CPU with
AMX-BF16, ``AMX_DEFAULTS`` give a bfloat16 GEMM the small-M kernel up to
``AMX_BF16_SMALL_M_MAX`` rows only. The module's ``tuning`` block names the rules
(``rules "avx2"``, ``rules "amx"``; none: ``DEFAULTS``). The dispatch pass writes
a table on every such call (``dispatch`` on its ``fused`` node); the host turns it into range
tests on M.

A site is measured in its own dtypes: the operands' (float32, bfloat16 or float16, one for both),
the result's (theirs, or float32: the bf16 policy keeps a product's result float32 unless it
rounds as it stores) and the bias's, all in its database key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.host_library import ACTIVATION_CODES as ACT_CODES
from ..codegen.host_library import AFTER_RESIDUAL, act_code, post_op_operands
from ..ir import sym as S
from ..ir.graph import Module, Node
from ..ir.types import DType
from ..ops.conv import is_pointwise_conv
from ..passes.offload import ANCHORS, transposed_operands
from ..passes.precision import PRODUCT_DTYPES

SMALL_M_MAX = 48  # the helper's SMALLM_DEFAULT_MAX (braze_dnnl_matmul.c)
DEFAULTS = {"gemm": ((SMALL_M_MAX, "smallm"), (None, "dnnl")), "conv1x1": ((None, "conv"),)}
# AVX2 (braze_dnnl_smallm_avx2.c): its panels to SP2_MAX rows ran BERT-base's GEMMs 1.04-1.09x
# faster than oneDNN at 64-96 rows and 1.01-1.17x at 112-127. A weight of at most SP2_TINY_W
# elements takes them at any M, with no oneDNN primitive to create at a new shape: the depthwise
# convnet's 1x1 convolutions took 0.75-0.95x oneDNN's time at 1024 and 4608 pixels, 1.04-1.06x at
# 100352, so up to AVX2_TINY_MAX_M rows (docs/gemm.md)
AVX2_SMALL_M_MAX = 127
AVX2_TINY_WEIGHT = 1024
AVX2_TINY_MAX_M = (1 << 14) - 1
AVX2_DEFAULTS = {"gemm": ((AVX2_SMALL_M_MAX, "smallm"), (None, "dnnl")), "conv1x1": ((None, "conv"),)}
# AMX-BF16: oneDNN's bfloat16 products run on the tiles, and on BERT-base's weights took 0.81x the
# small-M kernel's (VDPBF16PS) time at 8 rows and 0.32x at 48, 1.00x at 4 and 1.7-1.8x at 1-2
# (benchmarks.small_m, Xeon with AMX); float32 keeps DEFAULTS
AMX_BF16_SMALL_M_MAX = 4
AMX_DEFAULTS = {**DEFAULTS, "gemm bfloat16": ((AMX_BF16_SMALL_M_MAX, "smallm"), (None, "dnnl"))}
RULES = {"": DEFAULTS, "avx2": AVX2_DEFAULTS, "amx": AMX_DEFAULTS}
AVX2_TINY = {"gemm": ((AVX2_TINY_MAX_M, "smallm"), (None, "dnnl")),
             "conv1x1": ((AVX2_TINY_MAX_M, "smallm"), (None, "conv"))}
CHOICES = {"gemm": ("smallm", "dnnl", "dnnl_rt"), "conv1x1": ("conv", "smallm", "dnnl", "dnnl_rt")}
DEFAULT = DEFAULTS["gemm"]


# the activations the small-M kernels apply in their epilogue (smallm_act_ok in
# braze_dnnl_smallm*.c): with another (tanh), ``smallm`` runs oneDNN's primitives instead, the
# run-time-M one on the plain weight up to GEMV_ROWS rows without a residual, else one per M
# (braze_dnnl_matmul.c's dnnl_rule, SMALL_M); such a product's table names those
SMALLM_ACTS = frozenset({0, *(ACT_CODES[a] for a in ("gelu", "gelu_tanh", "silu", "relu", "relu6"))})
GEMV_ROWS = 2


def default_rule(kind: str, rules: str = "", n: int | None = None, k: int | None = None, act: int = 0,
                 residual: bool = False, dtype: str = "float32") -> tuple:
    """The table braze runs for a product of this kind where nothing was measured, under the
    helper's ``rules`` (RULES' keys), for a weight of ``n`` x ``k`` (None: not known), the
    activation ``act`` (ACT_CODES' value) in its epilogue, whether it adds a residual, and its
    operands' ``dtype`` (a rule set may have one of its own: "gemm bfloat16"): oneDNN's kernels
    where no small-M kernel takes the activation."""
    if act & ~AFTER_RESIDUAL not in SMALLM_ACTS:  # the small-M kernels apply any of them after the residual too
        if kind == "conv1x1":
            return ((None, "conv"),)
        return ((None, "dnnl"),) if residual else ((GEMV_ROWS, "dnnl_rt"), (None, "dnnl"))
    if rules == "avx2" and n is not None and k is not None and n * k <= AVX2_TINY_WEIGHT:
        return AVX2_TINY[kind]
    return RULES[rules].get(f"{kind} {dtype}", RULES[rules][kind])


@dataclass(frozen=True)
class ProductSite:
    """What a product's speed depends on, names aside: the tuning database's key."""
    n: int
    k: int
    transposed: int  # 1: the weight's memory is [N, K] (torch's linear, a 1x1 kernel); 0: [K, N]
    bias: bool
    residual: bool
    act: int  # ACT_CODES' value, 0 for none
    dtype: str = "float32"  # the operands'
    kind: str = "gemm"  # or "conv1x1"
    rules: str = field(default="", compare=False)  # the module's default rules: not part of the key
    out_dtype: str = "float32"  # the result's (and the residual's): a 16-bit product may round as it stores
    bias_dtype: str = "float32"

    @property
    def key(self) -> str:
        key = (f"{self.kind} n={self.n} k={self.k} transposed={self.transposed} bias={int(self.bias)} "
               f"residual={int(self.residual)} act={self.act} {self.dtype}")
        # a float32 product's key is the one it had before 16-bit products were measured
        if (self.dtype, self.out_dtype, self.bias_dtype) != ("float32",) * 3:
            key += f" out={self.out_dtype}" + (f" bias_dtype={self.bias_dtype}" if self.bias else "")
        return key

    @property
    def default(self) -> tuple:
        return default_rule(self.kind, self.rules, self.n, self.k, self.act, self.residual, self.dtype)

    @property
    def choices(self) -> tuple:
        return CHOICES[self.kind]

    def describe(self) -> str:
        act = next((k for k, v in ACT_CODES.items() if v == self.act & ~AFTER_RESIDUAL), f"act{self.act}")
        order = (("bias", self.bias), ("residual", self.residual), (act, self.act)) if self.act & AFTER_RESIDUAL \
            else (("bias", self.bias), (act, self.act), ("residual", self.residual))
        epi = "+".join(x for x, on in order if on)
        types = "" if self.dtype == "float32" else f" {self.dtype}" + (
            f" -> {self.out_dtype}" if self.out_dtype != self.dtype else "")
        return ("1x1 conv " if self.kind == "conv1x1" else "") + f"{self.n}x{self.k}" + (f" {epi}" if epi else "") + types


@dataclass(frozen=True)
class Call:
    """A call with the knob: its kind, its M (symbolic), and its site (None where N or K is
    symbolic, or the operands' dtypes differ: those keep the default and are never measured)."""
    kind: str
    M: object
    site: ProductSite | None
    rules: str = ""
    dtype: str = "float32"  # the left operand's

    @property
    def default(self) -> tuple:
        return self.site.default if self.site is not None else \
            default_rule(self.kind, self.rules, dtype=self.dtype)


def _epilogue(n: Node, callee, anchor: Node) -> tuple[bool, bool, int, DType]:
    """Whether the call adds a bias and a residual, its activation's code, and the bias's dtype."""
    post_ops = tuple(n.attrs["post_ops"])
    bias_dtype = DType.float32
    in_anchor = anchor.op in ("linear", "conv2d") and len(anchor.inputs) > 2 and anchor.inputs[2] is not None
    if in_anchor:
        bias_dtype = anchor.inputs[2].dtype
    elif "bias" in post_ops:
        after = [m for m in callee.nodes[callee.nodes.index(anchor) + 1:] if m.op != "constant"]
        bias_dtype = dict(post_op_operands(callee.name, after, anchor, post_ops))["bias"].dtype
    return in_anchor or "bias" in post_ops, "residual" in post_ops, act_code(post_ops), bias_dtype


def _measurable(x, w, y) -> bool:
    """The operands share a dtype the library multiplies, and the result is in it or in float32 (a
    16-bit product under a policy keeps a float32 result, or rounds as it stores)."""
    return x.dtype == w.dtype and x.dtype in PRODUCT_DTYPES and y.dtype in (x.dtype, DType.float32)


def dispatched_calls(module: Module):
    """(``fused`` node, its ``library_call`` or None) for every node with a dispatch table, in order."""
    for f in module.functions.values():
        for n in f.nodes:
            if n.attrs.get("dispatch") is not None:
                yield n, library_call(module, n)


def library_call(module: Module, n: Node) -> Call | None:
    """The knob's call of a ``fused`` gemm or conv node on a constant weight, else None."""
    kind = n.attrs.get("kind") if n.op == "fused" else None
    if kind not in ("gemm", "conv") or n.attrs.get("post_ops") is None:
        return None
    callee = module.functions.get(n.attrs.get("callee"))
    if callee is None:
        return None
    consts = {id(m.outputs[0]) for m in callee.nodes if m.op == "constant"}
    anchor = next((m for m in callee.nodes if m.op in ANCHORS[kind]), None)
    if anchor is None or len(anchor.inputs) < 2 or id(anchor.inputs[1]) not in consts:
        return None
    x, w = anchor.inputs[0], anchor.inputs[1]
    if kind == "conv":
        if not is_pointwise_conv(anchor, w.shape):
            return None
        N, K, M, transposed = w.shape[0], w.shape[1], S.prod(x.shape[:3]), 1
        kind = "conv1x1"
    else:
        ta, tb = transposed_operands(callee, anchor)
        if not (anchor.op == "linear" or (w.rank == 2 and not ta)):
            return None
        N = w.shape[0] if anchor.op == "linear" else w.shape[1]
        K, M, transposed = x.shape[-1], S.prod(x.shape[:-1]), 1 if anchor.op == "linear" or tb else 0
    rules = module.tuning.get("rules", "")
    y = n.outputs[0]
    if not (isinstance(N, int) and isinstance(K, int)) or not _measurable(x, w, y):
        return Call(kind, M, None, rules, x.dtype.name)
    bias, residual, act, bias_dtype = _epilogue(n, callee, anchor)
    site = ProductSite(N, K, transposed, bias, residual, act, x.dtype.name, kind, rules, y.dtype.name, bias_dtype.name)
    return Call(kind, M, site, rules, x.dtype.name)
