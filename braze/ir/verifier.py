"""Checking a Module's invariants (``braze.ir.verify``).

* SSA: parameters are distinct, each value is defined once, and used only after
  its definition, in the same function; results are defined in the function.
* Every node's op is registered, takes that many inputs (``none`` only where
  an input is optional), and has complete, well-kinded attributes.
* ``constant`` nodes name constants the module has.
* Output types agree with the op's shape inference, re-run on a copy of the
  module's constraint store: same dtype and rank, dims equal under the
  constraints.
* Every symbol in a type (or a symbolic attribute) is declared in the store.
"""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError, VerifyError
from . import sym as S
from .graph import ConstantRef, Function, Module, Node, Value
from .types import DType, TensorType


def verify_module(module: Module) -> None:
    if not isinstance(module, Module):
        raise VerifyError(f"expected a braze Module, got {type(module).__name__}")
    for name, c in module.constants.items():
        if not isinstance(c, (np.ndarray, ConstantRef)):
            raise VerifyError(f"constant @{name} is a {type(c).__name__}; expected a numpy array or ConstantRef")
        if isinstance(c, np.ndarray):
            try:
                DType.from_numpy(c.dtype)
            except TypeError as e:
                raise VerifyError(f"constant @{name}: {e}") from None
    store = module.constraints.copy()  # inference may record assumptions; keep the module's store as is
    for key, f in module.functions.items():
        if not isinstance(f, Function):
            raise VerifyError(f"module.functions['{key}'] is a {type(f).__name__}, not a Function")
        if f.name != key:
            raise VerifyError(f"function @{f.name} is stored under the key '{key}'",
                              hint="the key in module.functions must be the function's name")
        _FunctionVerifier(module, f, store).run()
    for fn, names in module.output_names.items():
        f = module.functions.get(fn)
        if f is None:
            raise VerifyError(f"output names are given for @{fn}, which the module does not have")
        if len(names) != len(f.results) or not all(isinstance(n, str) for n in names):
            raise VerifyError(f"@{fn} has {len(f.results)} results but {len(names)} output names: {names}",
                              hint="give one name (a string) per result")
    for fn, given in module.donated.items():
        f = module.functions.get(fn)
        for param, k in given.items():
            p = next((q for q in f.params if q.name == param), None) if f else None
            if p is None or not 0 <= k < len(f.results) or list(given.values()).count(k) != 1:
                raise VerifyError(f"donated input %{param} of @{fn} for result {k}: the module has no such input "
                                  "or result, or gives that result two inputs")
    for name, bound in module.data_symbols.items():
        if module.constraints.symbol(name) is None:
            raise VerifyError(f"size {name}: the module declares no such symbol")
        for s in S.free_syms(bound):
            if module.constraints.symbol(s.name) is None:
                raise VerifyError(f"size {name}: its bound {bound} uses symbol '{s.name}', which the module does "
                                  "not declare")
    for (fn, param, index), name in module.value_symbols.items():
        f = module.functions.get(fn)
        p = next((q for q in f.params if q.name == param), None) if f else None
        where = f"value symbol {name} (@{fn} %{param} element {index})"
        if p is None:
            raise VerifyError(f"{where}: the module has no such input")
        if p.dtype not in (DType.float32, DType.float64) and not p.dtype.is_int or not p.type.is_static() \
                or not 0 <= index < int(p.type.numel()):
            raise VerifyError(f"{where}: the input is {p.type}; it must be an integer (or float32/64) input of "
                              "static shape that has that element")
        if module.constraints.symbol(name) is None:
            raise VerifyError(f"{where}: the module declares no such symbol")


class _FunctionVerifier:
    def __init__(self, module: Module, f: Function, store):
        self.m = module
        self.f = f
        self.store = store
        self.declared = module.constraints  # symbols must be declared in the module itself
        # the data symbols (Module.data_symbols) bound at this point: by a node that ran, or by the
        # caller (they appear in a parameter's type)
        self.sizes: set[str] = set()

    def fail(self, what: str, node: Node | None = None, hint: str | None = None):
        where = None
        if node is not None:
            from .printer import format_node
            where = f"@{self.f.name}: {format_node(self.m, node)}"
            if node.loc is not None:
                where += f"\n  from: {node.loc}"
        raise VerifyError(f"in @{self.f.name}: {what}", where=where, hint=hint)

    def check_type(self, t, what: str, node: Node | None):
        if not isinstance(t, TensorType):
            self.fail(f"{what} has type {t!r}, not a TensorType", node)
        for d in t.shape:
            if isinstance(d, bool) or not isinstance(d, (int, S.SymExpr)):
                self.fail(f"{what} has a dim {d!r} that is not an int or symbolic expression", node)
            if isinstance(d, int) and d < 0:
                self.fail(f"{what} has a negative dim {d}", node)
        self.check_syms(t.free_syms(), what, node)

    def size_defined(self, s, n: Node):
        """``n`` decides the size ``s`` when it runs (its ``size`` attribute)."""
        if s.name not in self.m.data_symbols:
            self.fail(f"'{n.op}' decides the size {s.name}, which the module's sizes block does not list", n,
                      hint="a size symbol needs an upper bound: module.data_symbols[name] = bound")
        if s.name in self.sizes:
            self.fail(f"the size {s.name} is decided twice", n, hint="give each node its own size symbol")
        self.sizes.add(s.name)

    def check_syms(self, syms, what: str, node: Node | None):
        for s in sorted(syms, key=lambda s: s.name):
            if self.declared.symbol(s.name) is None:
                self.fail(f"{what} uses symbol '{s.name}', which the module does not declare", node,
                          hint="declare it with module.constraints.add_symbol(Sym(...)) (Builder.sym does)")

    def run(self):
        f = self.f
        # how often each value is defined anywhere in the function
        all_defs: dict[int, int] = {}
        for v in f.params:
            all_defs[id(v)] = all_defs.get(id(v), 0) + 1
        for n in f.nodes:
            for v in getattr(n, "outputs", ()):
                all_defs[id(v)] = all_defs.get(id(v), 0) + 1
        defined: set[int] = set()
        for i, p in enumerate(f.params):
            if not isinstance(p, Value):
                self.fail(f"parameter {i} is a {type(p).__name__}, not a Value")
            if id(p) in defined:
                self.fail(f"parameter %{p.name} appears twice in the parameter list")
            defined.add(id(p))
            self.check_type(p.type, f"parameter %{p.name}", None)
            self.sizes |= {s.name for s in p.type.free_syms() if s.name in self.m.data_symbols}
        for n in f.nodes:
            self.node(n, defined, all_defs)
        for i, v in enumerate(f.results):
            if not isinstance(v, Value):
                self.fail(f"result {i} is a {type(v).__name__}, not a Value")
            if id(v) not in defined:
                self.fail(f"result %{v.name} is not defined in the function (a dangling value)")

    def node(self, n: Node, defined: set, all_defs: dict):
        from ..ops.registry import REQUIRED, InferCtx, get_op
        if not isinstance(n, Node):
            self.fail(f"a node list entry is a {type(n).__name__}, not a Node")
        try:
            opdef = get_op(n.op)
        except BrazeError:
            self.fail(f"unknown op '{n.op}'", n, hint="see braze.ops.all_ops()")
        err = opdef.check_arity(len(n.inputs))
        if err:
            self.fail(f"op '{n.op}' {err}", n)
        # inputs: defined earlier in this function; none only where optional
        specs = list(opdef.inputs)
        for i, v in enumerate(n.inputs):
            spec = specs[min(i, len(specs) - 1)] if specs else ""
            if v is None:
                if not spec.endswith("?"):
                    self.fail(f"input {i} ('{spec.rstrip('?*')}') of '{n.op}' is none, but it is not optional", n)
                continue
            if not isinstance(v, Value):
                self.fail(f"input {i} of '{n.op}' is a {type(v).__name__}, not a Value", n)
            if id(v) not in defined:
                if id(v) in all_defs:
                    self.fail(f"input %{v.name} is used before its definition", n)
                self.fail(f"input %{v.name} is not defined in @{self.f.name} (a dangling value)", n)
        # attributes: known, complete, well-kinded
        unknown = sorted(set(n.attrs) - set(opdef.attrs))
        if unknown:
            self.fail(f"op '{n.op}' has no attribute(s) {unknown}", n,
                      hint=f"its attributes are: {', '.join(opdef.attrs) or 'none'}")
        full = {}
        for k, a in opdef.attrs.items():
            if k not in n.attrs:
                if a.default is REQUIRED:
                    self.fail(f"op '{n.op}' needs attribute '{k}' ({a.kind})", n)
                full[k] = a.default
                continue
            v = n.attrs[k]
            if not (v is None and a.default is None) and not _well_kinded(v, a.kind):
                self.fail(f"attribute '{k}' of '{n.op}' must be {a.kind}, got {v!r} ({type(v).__name__})", n)
            if a.kind in ("intlike", "intlikes", "any", "size"):
                self.check_syms(_attr_syms(v), f"attribute '{k}'", n)
            if a.kind == "size":
                self.size_defined(v, n)
            full[k] = v
        if n.op == "constant":
            cname = full.get("name")
            if cname not in self.m.constants:
                self.fail(f"constant node names @{cname}, which is not in the module's constants", n)
        # outputs: each defined once, here
        for v in n.outputs:
            if not isinstance(v, Value):
                self.fail(f"an output of '{n.op}' is a {type(v).__name__}, not a Value", n)
            if id(v) in defined:
                self.fail(f"value %{v.name} is defined more than once (SSA)", n)
            if v.producer is not n and all_defs.get(id(v)) == 1:  # else reported where it is redefined
                self.fail(f"output %{v.name}'s producer is not this node", n,
                          hint="a Value must be the output of exactly one node; make a new Value")
            self.check_type(v.type, f"output %{v.name}", n)
        if n.op == "fused" and n.attrs.get("callee") in self.m.functions:
            for m in self.m.functions[n.attrs["callee"]].nodes:  # what the group runs decides them here
                self.sizes |= {v.name for k, v in m.attrs.items() if isinstance(v, S.Sym) and
                               v.name in self.m.data_symbols}
        for v in n.outputs:
            early = sorted(s.name for s in v.type.free_syms()
                           if s.name in self.m.data_symbols and s.name not in self.sizes)
            if early:
                self.fail(f"output %{v.name} ({v.type}) uses the size {early[0]} before a node decides it", n,
                          hint="a size symbol is bound by the node whose 'size' attribute names it")
        # types: re-run inference
        ctx = InferCtx(n.op, self.store, n.loc, self.m.constants, module=self.m)
        in_types = [None if v is None else v.type for v in n.inputs]
        try:
            out = opdef.infer(ctx, *in_types, **full)
        except BrazeError as e:
            self.fail(f"shape inference fails: {e.what}", n, hint=e.hint)
        except Exception as e:
            self.fail(f"shape inference fails: {type(e).__name__}: {e}", n)
        inferred = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(inferred) != len(n.outputs):
            self.fail(f"'{n.op}' produces {len(inferred)} output(s) here, the node has {len(n.outputs)}", n)
        for i, (t, v) in enumerate(zip(inferred, n.outputs)):
            if t.dtype != v.type.dtype:
                self.fail(f"output %{v.name} is {v.type.dtype.short}, but '{n.op}' gives {t.dtype.short}", n)
            if len(t.shape) != len(v.type.shape):
                self.fail(f"output %{v.name} has rank {len(v.type.shape)}, but '{n.op}' gives rank {len(t.shape)} "
                          f"({t})", n)
            for ax, (a, b) in enumerate(zip(t.shape, v.type.shape)):
                if self.store.equal(a, b) is not True:
                    self.fail(f"output %{v.name} has type {v.type}, but '{n.op}' gives {t}: dim {ax} is {b}, "
                              f"expected {a}", n)
        for v in n.outputs:
            defined.add(id(v))


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _is_intlike(v) -> bool:
    return _is_int(v) or isinstance(v, S.SymExpr)


def _well_kinded(v, kind: str) -> bool:
    seq = isinstance(v, (list, tuple))
    if kind == "int":
        return _is_int(v)
    if kind == "float":
        return _is_real(v)
    if kind == "bool":
        return isinstance(v, (bool, np.bool_))
    if kind == "str":
        return isinstance(v, str)
    if kind == "dtype":
        return isinstance(v, DType)
    if kind == "ints":
        return seq and all(_is_int(x) for x in v)
    if kind == "floats":
        return seq and all(_is_real(x) for x in v)
    if kind == "intlike":
        return _is_intlike(v)
    if kind == "intlikes":
        return seq and all(_is_intlike(x) for x in v)
    if kind == "size":
        return isinstance(v, S.Sym)
    return True  # any


def _attr_syms(v) -> frozenset:
    if isinstance(v, S.SymExpr):
        return v.free_syms()
    if isinstance(v, (list, tuple)):
        out = frozenset()
        for x in v:
            out |= _attr_syms(x)
        return out
    return frozenset()


__all__ = ["verify_module"]
