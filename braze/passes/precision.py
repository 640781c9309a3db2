"""Compute precision: the dtype each GEMM, batched matmul and convolution runs in, decided once, in the IR.

``module.precision`` says what the user asked for and what the CPU runs (set by
``pipeline.compile_to_c`` from ``Options.precision`` and the host's features, printed in the
module's ``precision`` block): ``policy`` is "fp32", "bf16" or "fp16"; ``library`` lists the
operand dtypes the GEMM / convolution library runs natively here (float32 always; bfloat16
with AVX512_BF16 or AMX-BF16; float16 with AVX512_FP16 or AMX-FP16); ``keep`` lists op names
and module paths the user keeps in float32 (``Options.precision_keep``). A 16-bit policy is
taken only where its products are faster than float32's (``policy_pays``: fp16 needs AMX-FP16).

For every product in ``LOW_PRECISION_OPS`` this pass:

1. under a 16-bit policy, gives a float32 product its operands in that dtype and keeps its
   result float32 (``out_dtype=f32``): the product accumulates in float32 and rounds once. A
   constant weight's cast folds into a 16-bit constant (the next ``constant_fold``): cast
   once, half the bytes. Everything else stays float32 (``KEEP_FP32`` lists what torch.autocast
   also keeps there), and so do a product whose weight is read at run time (the plug-in's live
   weights: a cast at every call costs more than the 16-bit product saves) and the products
   ``keep`` names: by op (``matmul``: attention's products) or by the module they come from
   (``lm_head``, ``encoder.layer.0``, and every module below it);
2. widens to float32 a product whose operand dtype the library does not run natively (a
   float16 model without AVX512_FP16): constant weights once, and the result rounds back once
   to the model's dtype;
3. gives operands of two float dtypes (``linear(f32, bf16)``) their promoted dtype, so the
   library sees one operand dtype.

Bias operands keep their dtype (the library adds a float32 bias to a 16-bit product). The
pass inserts ``cast`` nodes, which fuse into their producers' kernels (a norm then stores its
output in bfloat16 directly). ``hoist_casts``, a later pass, moves a cast to 16 bits up
through the ops that commute with rounding to nearest (``COMMUTES_WITH_ROUNDING``: relu,
max_pool2d, layout changes): ``cast(relu(conv))`` becomes ``relu(cast(conv))``, so the
convolution stores its result in 16 bits (offload's ``cast`` post-op) and the relu moves half
the bytes. Both passes mutate the module and return it.
"""

from __future__ import annotations

import re

from ..ir.graph import Module, Node, Value
from ..ir.types import DType
from ..ops.common import promote
from .common import Namer, make_node, replace_all_uses, top_functions, users

# products the 16-bit policies run in 16 bits (torch.autocast's CPU lower-precision list holds
# these: mm, bmm, linear, conv2d, baddbmm, addmm, matmul)
LOW_PRECISION_OPS = ("linear", "matmul", "conv2d")
# what stays float32 under a 16-bit policy (torch.autocast's CPU fp32 list, as braze ops): every op
# not in LOW_PRECISION_OPS does, these are named for the docs and the tests
KEEP_FP32 = ("layer_norm", "rms_norm", "batch_norm", "group_norm", "softmax", "log_softmax", "exp", "log", "pow",
             "reduce_sum", "reduce_mean", "cross_entropy", "mse_loss")
POLICY_DTYPES = {"fp32": DType.float32, "bf16": DType.bfloat16, "fp16": DType.float16}
PRODUCT_DTYPES = (DType.float32, DType.bfloat16, DType.float16)
HALF = (DType.bfloat16, DType.float16)
# ops f with f(round(x)) == round(f(x)): rounding to nearest is monotone and keeps 0 and NaN (relu's
# -0 aside: a negative that rounds to -0 stays -0, as in a 16-bit model), and moves no element
# into another; a cast to 16 bits moves above them
COMMUTES_WITH_ROUNDING = ("relu", "max_pool2d", "permute", "reshape")


# the CPU features under which a 16-bit policy's products beat float32's, with the words a
# warning names them by. AVX512_FP16 alone is not one: oneDNN 3.2's float16 kernels there
# (brg:avx512_core_fp16) widen to float32 for the FMAs, and the fp16 policy took 1.02-1.12x float32's
# time on BERT-base (Xeon with AMX-BF16 but not AMX-FP16), where bf16 took 0.28-0.32x
POLICY_FEATURES = {"bf16": (("avx512_bf16", "amx_bf16"), "AVX512_BF16 or AMX-BF16"),
                   "fp16": (("amx_fp16",), "AMX-FP16")}


def policy_pays(policy: str, host_features) -> bool:
    """Whether a ``precision=policy`` compile's 16-bit products are faster than float32 on a CPU
    with these features (float32 always "pays")."""
    return policy == "fp32" or bool(set(POLICY_FEATURES[policy][0]) & set(host_features))


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
            if dt is DType.float32 and policy is not DType.float32 and policy in native and not kept(n, keep) \
                    and not _weight_read_at_run_time(n):
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


def _weight_read_at_run_time(n: Node) -> bool:
    """The product's weight is an input of the function (the plug-in's live weights), maybe through
    views: a linear's or conv2d's second operand, or a matmul's 2-D right one. Under a 16-bit policy
    it stays float32: its cast would run at every call, reading the float32 weight and writing the
    16-bit one before the product reads that, which made BERT-base at batch 1, seq 16 1.4x slower
    than float32 (a matmul of two activations, attention's, has no weight and is cast)."""
    w = n.inputs[1]
    if n.op == "matmul" and w.rank != 2:
        return False
    while w.producer is not None and w.producer.op in ("permute", "reshape", "expand"):
        w = w.producer.inputs[0]
    return w.producer is None


def hoist_casts(module: Module) -> Module:
    """Every cast to 16 bits moved up through the ops that commute with it (see the module doc).
    A pass of its own, after the clean-up that follows ``precision``: its casts then read the
    values canonicalize and CSE left (cancelled layout permutes, one cast per value)."""
    for f in top_functions(module):
        _hoist_casts(module, f, Namer(f))
    return module


def _hoist_casts(module: Module, f, namer: Namer) -> None:
    """``cast16(g(x))`` -> ``g(cast16(x))`` for g in COMMUTES_WITH_ROUNDING, while g is x's only reader
    and every reader of g(x) is such a cast, until the cast meets another op (a product: offload
    then stores the product in 16 bits)."""
    results = {id(v) for v in f.results}
    moved = True
    while moved:
        moved = False
        readers = users(f)
        for c in f.nodes:
            dt = c.outputs[0].dtype if c.op == "cast" else None
            g = c.inputs[0].producer if dt in HALF else None
            if g is None or g.op not in COMMUTES_WITH_ROUNDING or c.inputs[0].dtype is not DType.float32:
                continue
            x, y = g.inputs[0], g.outputs[0]
            casts = readers.get(id(y), ())
            if len(readers.get(id(x), ())) != 1 or id(x) in results or id(y) in results or \
                    any(r.op != "cast" or r.outputs[0].dtype is not dt for r in casts):
                continue
            c2 = make_node(module, "cast", [x], {"dtype": dt}, loc=g.loc, namer=namer, name=f"{x.name}_{dt.short}")
            g2 = make_node(module, g.op, [c2.outputs[0], *g.inputs[1:]], dict(g.attrs), loc=g.loc, namer=namer,
                           name=f"{y.name}_{dt.short}")
            j = f.nodes.index(g)
            f.nodes[j:j + 1] = [c2, g2]
            for r in casts:
                f.nodes.remove(r)
                replace_all_uses(f, r.outputs[0], g2.outputs[0])
            moved = True
            break


def _cast(module: Module, namer: Namer, v: Value, dt: DType, n: Node, out: list[Node]) -> Value:
    """v in dt: v itself, or a new cast node's output (appended to out)."""
    if v.dtype is dt:
        return v
    c = make_node(module, "cast", [v], {"dtype": dt}, loc=n.loc, namer=namer, name=f"{v.name}_{dt.short}")
    out.append(c)
    return c.outputs[0]
