"""Ops that every graph needs: constants."""

from __future__ import annotations

from ..ir.constant import ConstantRef
from ..ir.types import DType, TensorType
from .opdef import Attr, defop


def _constant_infer(ctx, *, name):
    c = ctx.constants.get(name)
    if c is None:
        raise ctx.error(f"constant '@{name}' is not in the module")
    if isinstance(c, ConstantRef):
        return c.type
    return TensorType(DType.from_numpy(c.dtype), c.shape)


def _constant_ref(ctx, *, name):
    c = ctx.constants[name]
    if isinstance(c, ConstantRef):
        from ..errors import BrazeError
        raise BrazeError(f"constant '@{name}' has no data: the module was parsed from text "
                         "that elided it", hint="pass constants= to braze.ir.parse")
    return c


defop("constant", inputs=(), attrs={"name": Attr("str", doc="key in Module.constants")},
      infer=_constant_infer, reference=_constant_ref, kind="creation",
      doc="A weight or literal from the module's constants.")


# ---------------------------------------------------------------------------
# fused: a call of a fusion group's sub-function (made by braze.passes.fusion)
# ---------------------------------------------------------------------------

FUSED_KINDS = ("pointwise", "reduction", "stitch", "gemm", "conv", "scatter", "attention", "select", "opaque")


def _callee(ctx, callee):
    m = getattr(ctx, "module", None)
    if m is None:
        raise ctx.error(f"needs the module to find its callee @{callee}",
                        hint="build or check it through braze's Builder, verifier or reference interpreter")
    f = m.functions.get(callee)
    if f is None:
        raise ctx.error(f"callee @{callee} is not a function of the module")
    return f


def _fused_infer(ctx, *xs, callee, kind, post_ops=None, arena=None, dispatch=None):
    from ..ir import sym as S
    if kind not in FUSED_KINDS:
        raise ctx.error(f"kind {kind!r} is not one of {', '.join(FUSED_KINDS)}")
    f = _callee(ctx, callee)
    if len(xs) != len(f.params):
        raise ctx.error(f"@{callee} takes {len(f.params)} inputs, got {len(xs)}")
    repl: dict = {}  # a callee's bare symbolic dim -> the caller's dim, where they differ
    for i, (p, t) in enumerate(zip(f.params, xs)):
        if t is None or t.dtype != p.type.dtype or t.rank != p.type.rank:
            raise ctx.error(f"input {i} is {t}, but @{callee} declares %{p.name}: {p.type}")
        for ax, (d, a) in enumerate(zip(p.type.shape, t.shape)):
            d = S.subs(d, repl) if repl else d
            if ctx.equal(d, a) is True:
                continue
            if isinstance(d, S.Sym) and d not in repl:
                repl[d] = a
                continue
            raise ctx.error(f"input {i} is {t}, but @{callee} declares %{p.name}: {p.type} (dim {ax})")
    outs = [TensorType(v.type.dtype, tuple(ctx.simplify(S.subs(d, repl)) if repl else d for d in v.type.shape))
            for v in f.results]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _fused_ref(ctx, *xs, callee, kind, post_ops=None, arena=None, dispatch=None):
    f = _callee(ctx, callee)
    if ctx.run is None:
        from ..errors import BrazeError
        raise BrazeError(f"fused: running @{callee} needs an interpreter (RefCtx.run)",
                         hint="run the module with braze.reference.run")
    res = ctx.run(f, list(xs))
    return res[0] if len(res) == 1 else res


defop("fused", inputs=("xs*",),
      attrs={"callee": Attr("str", doc="the group's sub-function, e.g. fused_3"),
             "kind": Attr("str", "opaque", " | ".join(FUSED_KINDS)),
             "post_ops": Attr("any", None, "gemm/conv: the ops after the anchor that the library call applies, "
                                           "in order (bias, residual, gelu, gelu_tanh, silu, tanh); set by offload"),
             "arena": Attr("intlikes", None, "each output's byte offset in the function's arena, -1 for a "
                                             "function result (the caller's memory); set by assign_memory"),
             "dispatch": Attr("any", None, "gemm, or 1x1 conv, on a constant weight: the kernel per range of "
                                           "M, [[HI, KERNEL], ..., [none, KERNEL]]; set by dispatch (braze/tune)")},
      infer=_fused_infer, reference=_fused_ref, kind="opaque",
      doc="A fusion group: calls @callee (a function of the same module) on the inputs; its results.")
