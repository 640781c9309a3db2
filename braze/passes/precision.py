"""Compute precision: the dtype each GEMM, batched matmul and convolution runs in, decided once, in the IR.

``module.precision`` says what the user asked for and what the CPU runs (set by
``pipeline.compile_to_c`` from ``Options.precision`` and the host's features, printed in the
module's ``precision`` block): ``policy`` is "fp32", "bf16" or "fp16"; ``library`` lists the
operand dtypes the GEMM / convolution library runs natively here (float32 always; bfloat16
with AVX512_BF16 or AMX-BF16; float16 with AVX512_FP16 or AMX-FP16); ``keep`` lists op names
and module paths the user keeps in float32 (``Options.precision_keep``).

For every product in ``LOW_PRECISION_OPS`` this pass:

1. under a 16-bit policy, gives a float32 product its operands in that dtype and keeps its
   result float32 (``out_dtype=f32``): the product accumulates in float32 and rounds once. A
   constant weight's cast folds into a 16-bit constant (the next ``constant_fold``): cast
   once, half the bytes. Everything else stays float32 (``KEEP_FP32`` lists what torch.autocast
   also keeps there), and so do the products ``keep`` names: by op (``matmul``: attention's
   products) or by the module they come from (``lm_head``, ``encoder.layer.0``, and every
   module below it);
2. widens to float32 a product whose operand dtype the library does not run natively (a
   float16 model without AVX512_FP16): constant weights once, and the result rounds back once
   to the model's dtype;
3. gives operands of two float dtypes (``linear(f32, bf16)``) their promoted dtype, so the
   library sees one operand dtype.

Bias operands keep their dtype (the library adds a float32 bias to a 16-bit product). The
pass inserts ``cast`` nodes, which fuse into their producers' kernels (a norm then stores its
output in bfloat16 directly). ``precision(module)`` mutates the module and returns it.
"""

from __future__ import annotations

import re

from ..ir.graph import Module, Node, Value
from ..ir.types import DType
from ..ops.common import promote
from .common import Namer, make_node, replace_all_uses, top_functions

# products the 16-bit policies run in 16 bits (torch.autocast's CPU lower-precision list holds
# these: mm, bmm, linear, conv2d, baddbmm, addmm, matmul)
LOW_PRECISION_OPS = ("linear", "matmul", "conv2d")
# what stays float32 under a 16-bit policy (torch.autocast's CPU fp32 list, as braze ops): every op
# not in LOW_PRECISION_OPS does, these are named for the docs and the tests
KEEP_FP32 = ("layer_norm", "rms_norm", "batch_norm", "group_norm", "softmax", "log_softmax", "exp", "log", "pow",
             "reduce_sum", "reduce_mean", "cross_entropy", "mse_loss")
POLICY_DTYPES = {"fp32": DType.float32, "bf16": DType.bfloat16, "fp16": DType.float16}
PRODUCT_DTYPES = (DType.float32, DType.bfloat16, DType.float16)


def library_dtypes(host_features) -> tuple[str, ...]:
    """The operand dtypes oneDNN runs natively on a CPU with these features (braze.codegen.isa)."""
    out = ["float32"]
    if {"avx512_bf16", "amx_bf16"} & set(host_features):
        out.append("bfloat16")
    if {"avx512_fp16", "amx_fp16"} & set(host_features):
        out.append("float16")
    return tuple(out)


def module_path(name: str | None) -> str:
    """A node's module path as the user writes it: torch.export's ``encoder.layer.0``; dynamo's
    ``L['self'].encoder.layer[0]`` loses its root and brackets."""
    if not name:
        return ""
    name = re.sub(r"^L\[[^\]]*\]\.?", "", name)
    return re.sub(r"\[([^\]]*)\]", r".\1", name).strip(".").replace("'", "")


def kept(n: Node, keep) -> bool:
    """``n`` stays float32: ``keep`` names its op, its module, or a module above it."""
    if n.op in keep:
        return True
    path = module_path(n.loc.name if n.loc is not None else None)
    return any(path == k or path.startswith(k + ".") for k in keep)


def precision(module: Module) -> Module:
    """Casts around each product so it runs in a dtype the library takes (see the module doc)."""
    policy = POLICY_DTYPES[module.precision.get("policy", "fp32")]
    native = {DType.parse(d) for d in module.precision.get("library", ("float32",))}
    keep = tuple(module.precision.get("keep", ()))
    for f in top_functions(module):
        namer = Namer(f)
        out: list[Node] = []
        for n in f.nodes:
            if n.op not in LOW_PRECISION_OPS or n.attrs.get("out_dtype") is not None:
                out.append(n)
                continue
            x, w = n.inputs[:2]
            y = n.outputs[0]
            if not (x.dtype.is_float and w.dtype.is_float) or y.dtype not in PRODUCT_DTYPES:
                out.append(n)  # decompose made integer and float64 products sums; nothing to do
                continue
            dt = promote(x.dtype, w.dtype)
            if dt is DType.float32 and policy is not DType.float32 and policy in native and not kept(n, keep):
                dt = policy
            elif dt not in native:
                dt = DType.float32
            if dt is x.dtype and dt is w.dtype:
                out.append(n)
                continue
            ins = [_cast(module, namer, v, dt, n, out) for v in (x, w)]
            if len(n.inputs) > 2 and n.inputs[2] is not None:  # the library takes a float32 bias or one in dt
                b = n.inputs[2]
                ins.append(b if b.dtype in (DType.float32, dt) else _cast(module, namer, b, DType.float32, n, out))
            widened = dt is DType.float32 and y.dtype is not dt
            # under a policy the product keeps its float32 result; widened, it rounds back once after
            out_dtype = None if widened or y.dtype is dt else y.dtype
            m = make_node(module, n.op, ins, {**n.attrs, "out_dtype": out_dtype}, loc=n.loc, namer=namer, name=y.name)
            out.append(m)
            result = _cast(module, namer, m.outputs[0], y.dtype, n, out) if widened else m.outputs[0]
            replace_all_uses(f, y, result)
        f.nodes = out
    return module


def _cast(module: Module, namer: Namer, v: Value, dt: DType, n: Node, out: list[Node]) -> Value:
    """v in dt: v itself, or a new cast node's output (appended to out)."""
    if v.dtype is dt:
        return v
    c = make_node(module, "cast", [v], {"dtype": dt}, loc=n.loc, namer=namer, name=f"{v.name}_{dt.short}")
    out.append(c)
    return c.outputs[0]
