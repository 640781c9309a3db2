"""What fusion calls each node, what a scatter group takes around it (``scatter_group_nodes``), and
the group kinds: which ops anchor a library call (``GEMMS``, ``CONVS``), which run as a call into a
header (``SCATTERS``, ``ATTENTIONS``, ``SELECTS``), and which group kinds the host runs as calls
(``CALL_KINDS``) rather than as generated kernels. Fusion (``passes/fusion.py``), the library
offload, the pipeline and the host code read these."""

from __future__ import annotations

from ..ir.graph import Node
from ..ir.types import DType
from ..ops.registry import get_op

# groups the host runs as a call (oneDNN, braze_scatter.h, braze_attention.h, braze_select.h), with no
# generated kernel
CALL_KINDS = ("gemm", "conv", "scatter", "attention", "select")
# groups that fusion's merge rules (2 and 3 of passes/fusion.py) neither grow nor merge into
CLOSED_KINDS = ("gemm", "conv", "scatter", "attention", "select", "opaque")
VIEWS = ("reshape", "flatten", "squeeze", "unsqueeze")
RELAYOUTS = VIEWS + ("permute",)
NORMS = ("softmax", "log_softmax", "layer_norm", "rms_norm")
GEMMS = ("linear", "matmul")
# convolutions oneDNN's backward calls run (no post-ops): conv2d's gradients, and conv_transpose2d,
# which computes what the input gradient does
BACKWARD_CONVS = ("conv2d_backward_input", "conv2d_backward_weight", "conv_transpose2d")
CONVS = ("conv2d",) + BACKWARD_CONVS
SCATTERS = ("index_add", "index_put")
ATTENTIONS = ("attention_backward",)
# ops braze_select.h runs, each alone in a ``select`` group: those whose output size their data
# decides (ops/select.py), and a topk whose rows are too long for its loops (passes/decompose.py)
SELECTS = ("nonzero", "unique", "non_max_suppression", "topk")
# computed at any output index from a window of their input, like an elementwise op: they fuse
# with the ops after them and the views before them (fusion.amplifies keeps what computes out)
WINDOWS = ("direct_conv2d",)


def node_class(n: Node) -> str:
    """const | pw | red | norm | gemm | conv | scatter | attention | select | opaque"""
    if n.op == "constant":
        return "const"
    if n.op in GEMMS:
        return "gemm"
    if n.op in CONVS:
        return "conv"
    if n.op in SCATTERS:
        return "scatter"
    if n.op in ATTENTIONS:
        return "attention"
    if n.op in SELECTS:
        return "select"
    if n.op in NORMS:
        return "norm"
    if n.op == "batch_norm" or n.op in WINDOWS:
        return "pw"  # inference batch norm is per-channel elementwise; a window is, at each output
    if n.op == "fused":
        return "opaque"
    kind = get_op(n.op).kind
    if kind in ("elementwise", "broadcast", "injective", "creation"):
        return "pw"
    if kind == "reduction" and n.op not in ("cumsum", "cumprod"):
        return "red"
    return "opaque"


def before_views(v):
    """``v`` with the views that make it (reshape, squeeze, ...) undone: the value whose memory it is.
    A call group (a scatter's) takes its operands' and result's views inside: they move no data."""
    while v.producer is not None and v.producer.op in VIEWS:
        v = v.producer.inputs[0]
    return v


def scatter_group_nodes(n: Node, results: set, cons: dict) -> list:
    """A scatter and what its group takes (fusion rule 5): the views of its operands and of its result
    that nothing else reads, and the ``full`` under its ``x``. ``results``: ids of the function's
    results; ``cons``: id(value) -> the nodes that read it."""
    def only_reader(v, node) -> bool:
        return id(v) not in results and [id(u) for u in cons.get(id(v), ())] == [id(node)]

    around = []
    for v in n.inputs:
        node = n
        while v is not None and v.producer is not None and only_reader(v, node) and \
                (v.producer.op in VIEWS or (v.producer.op == "full" and v is before_views(n.inputs[0]))):
            node = v.producer
            around.append(node)
            v = node.inputs[0] if node.inputs else None
    out = n.outputs[0]
    while id(out) not in results and len(cons.get(id(out), ())) == 1 and cons[id(out)][0].op in VIEWS:
        around.append(cons[id(out)][0])
        out = around[-1].outputs[0]
    return around + [n]


def swaps_last_two(n: Node) -> bool:
    """A ``permute`` that swaps the last two axes and keeps the rest: a matmul reads its input
    transposed in place (oneDNN's strides), so it needs no kernel of its own."""
    perm = list(n.attrs.get("perm", ())) if n.op == "permute" else []
    r = len(perm)
    return r >= 2 and perm == list(range(r - 2)) + [r - 1, r - 2]


def weight_permute(conv: Node) -> Node | None:
    """The ``permute(w, [0, 3, 1, 2])`` of a weight read at run time that a one-group ``conv2d``
    takes as its OIHW weight (the plug-in reads a channels-last weight so: plugin/strides.py's
    ``channels_last_inputs``),
    else None."""
    w = conv.inputs[1] if len(conv.inputs) > 1 else None
    p = w.producer if w is not None else None
    if p is None or p.op != "permute" or tuple(p.attrs["perm"]) != (0, 3, 1, 2) or p.inputs[0].producer is not None \
            or conv.attrs.get("groups", 1) != 1 or w.dtype is not DType.float32:
        return None
    return p
