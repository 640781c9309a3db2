"""ATen op -> braze op converters: the table and the dispatch.

A converter is ``fn(cx, node, *args, **kwargs)``: ``cx`` is the Importer
(``cx.b`` the Builder, ``cx.loc`` the node's SourceLoc), ``args`` the FX
arguments with tensors as braze Values and sizes as IntLikes. It returns a
Value, a tuple of Values (multi-output ops, read back through getitem), or
``None`` (asserts). Keys are ``"aten.name.overload"`` or ``"aten.name"``
(any overload). In-place ops (``relu_``) use their functional converter.
The converters live in ``aten_math``, ``aten_shape`` and ``aten_nn``, built with the
registry and helpers of ``convert``; ``table()`` imports them.
"""

from __future__ import annotations

import operator

from ...errors import UnsupportedOpError
from ...ir.graph import Value
from .common import source_loc, to_braze_dtype
from .convert import CONVERTERS, float_value, op

SKIP = {"aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range",
        "aten.sym_constrain_range_for_size", "aten._assert_async", "aten._functional_assert_async",
        "aten._functional_sym_constrain_range", "aten._functional_sym_constrain_range_for_size",
        "aten._check_is_size"}


def table() -> dict:
    """CONVERTERS with every converter module registered."""
    from . import aten_math, aten_nn, aten_scatter, aten_shape  # noqa: F401
    return CONVERTERS


# ---------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------


def _names(target):
    """(full name, packet name, in-place?) of an ATen OpOverload."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None, None, False
    base = schema.name.split("::")[-1]
    ns = schema.name.split("::")[0]
    ovl = getattr(target, "_overloadname", "default") or "default"
    inplace = False
    if base.endswith("_") and not base.startswith("_") and schema.arguments and \
            schema.arguments[0].alias_info is not None and schema.arguments[0].alias_info.is_write:
        inplace = True
        base = base[:-1]
    return f"{ns}.{base}.{ovl}", f"{ns}.{base}", inplace


def packet_name(target) -> str:
    """``aten.relu`` of ``aten.relu.default``; "" for a target that is not an ATen op."""
    return _names(target)[1] or ""


def lookup(target):
    full, packet, inplace = _names(target)
    if full is None:
        return None, False
    convs = table()
    fn = convs.get(full) or convs.get(packet)
    return fn, inplace


def is_supported(target) -> bool:
    if target is operator.getitem:
        return True
    full, packet, _ = _names(target)
    if full is None:  # python callables on sizes (operator.mul, sym_max...): evaluated from meta
        return not str(getattr(target, "__module__", "")).startswith("torch._higher_order")
    if packet in SKIP or packet.startswith("aten.sym_"):
        return True
    return lookup(target)[0] is not None


UNSUPPORTED_HINT = ("`braze ops` lists what braze supports; rewrite those lines with supported ops, or, if your "
                    "model needs them, file an issue with the op names and a small module that uses them")


def op_display_name(target) -> str:
    full, _, _ = _names(target)
    return full or str(getattr(target, "__name__", target))


def unsupported_error(node) -> UnsupportedOpError:
    return unsupported_report([node])


def _line_of(loc) -> str:
    """``file:line: code`` (one entry per source line, whatever the FX node names), else the loc."""
    if loc.file and loc.line:
        return f"{loc.file}:{loc.line}" + (f": {loc.code.strip()}" if loc.code else "")
    return str(loc)


def unsupported_report(nodes, note: str | None = None) -> UnsupportedOpError:
    """One error naming every unsupported op among ``nodes`` (FX nodes), each with its count and
    up to three source lines, most frequent first. ``note`` is added to the hint."""
    by_op: dict[str, list] = {}
    for n in nodes:
        by_op.setdefault(op_display_name(n.target), []).append(n)
    order = sorted(by_op, key=lambda k: (-len(by_op[k]), k))
    first = str(source_loc(by_op[order[0]][0]))
    hint = UNSUPPORTED_HINT + (f"; {note}" if note else "")
    if len(order) == 1 and len(by_op[order[0]]) == 1:
        err = UnsupportedOpError(f"torch op '{order[0]}' is not supported by braze's torch frontend",
                                 where=first, hint=hint)
    else:
        lines = []
        for name in order:
            locs = list(dict.fromkeys(_line_of(source_loc(n)) for n in by_op[name]))
            lines.append(f"    {name} x{len(by_op[name])}, at:")
            lines += [f"        {loc}" for loc in locs[:3]]
            if len(locs) > 3:
                lines.append(f"        and {len(locs) - 3} more")
        err = UnsupportedOpError(f"the model uses {len(order)} torch op{'s' if len(order) > 1 else ''} that braze's "
                                 f"torch frontend does not support ({len(nodes)} uses in all):\n" + "\n".join(lines),
                                 where=first, hint=hint)
    err.unsupported = {k: len(by_op[k]) for k in order}  # op name -> count, for callers and tests
    return err


def convert_node(cx, n):
    import torch
    target = n.target
    if target is operator.getitem:
        seq = cx.env[n.args[0]]
        return seq[n.args[1]]
    full, packet, inplace = _names(target)
    if packet in SKIP:
        return None
    val = n.meta.get("val")
    if isinstance(val, torch.SymFloat) and not val.node.expr.is_Number:
        return float_value(cx, val.node.expr)  # a float computed from sizes: at run time
    if isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool)):
        return cx.sym(val)  # size arithmetic: evaluated now, no graph node
    fn, inplace = lookup(target)
    if fn is None:
        raise unsupported_error(n)
    args = cx.value(list(n.args))
    kwargs = {k: cx.value(v) for k, v in n.kwargs.items()}
    kwargs.pop("device", None), kwargs.pop("layout", None), kwargs.pop("pin_memory", None)
    kwargs.pop("memory_format", None), kwargs.pop("non_blocking", None)
    out = fn(cx, n, *args, **kwargs)
    out = _match_meta(cx, n, val, out)
    if inplace:
        src = n.args[0]
        _check_inplace_target(cx, n, src)
        cx.env[src] = out  # later reads of the mutated tensor see the result
    return out


def _check_inplace_target(cx, n, src):
    import torch.fx as fx
    if isinstance(src, fx.Node) and src.op == "call_function":
        schema = getattr(src.target, "_schema", None)
        ai = schema.returns[0].alias_info if schema is not None and schema.returns else None
        if ai is not None and not ai.is_write:
            raise UnsupportedOpError(f"in-place op '{n.target}' writes into a view ('{src.target}')",
                                     where=str(cx.loc),
                                     hint="use the out-of-place form, or call ep.run_decompositions() first")


def _match_meta(cx, n, val, out):
    """Cast to torch's dtype where inference differs, and catch provably wrong shapes."""
    import torch
    if isinstance(out, Value) and isinstance(val, torch.Tensor):
        want = to_braze_dtype(val.dtype, str(cx.loc))
        if out.dtype != want:
            out = op(cx, "cast", [out], dtype=want)
        shape = cx.shape_of(val)
        if len(shape) != out.rank or any(cx.module.constraints.equal(a, b) is False
                                         for a, b in zip(shape, out.shape)):
            from ...errors import ShapeError
            raise ShapeError(f"torch frontend: '{n.target}' gave {out.type} but torch says "
                             f"[{', '.join(str(d) for d in shape)}]", where=str(cx.loc),
                             hint="this is a bug in braze's converter for this op; please report it")
    return out
