"""Building graph functions op by op, with shape inference at each step.

Frontends and tests use this; it is the one place that creates nodes.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import BrazeError, ShapeError
from ..ir import sym as S
from ..ir.graph import Function, Module, Node, SourceLoc, Value
from ..ir.sym import IntLike, Sym
from ..ir.types import DType, TensorType
from .registry import InferCtx, get_op

_NAME_RE = re.compile(r"[^A-Za-z0-9_.]")


def sanitize(name: str) -> str:
    s = _NAME_RE.sub("_", name).strip("_.") or "v"
    if s[0].isdigit():
        s = "v" + s
    return s


def unique_names(names: list[str]) -> list[str]:
    """The names, each kept as is unless it repeats an earlier one (then ``name_1``, ...):
    a model file's output names, which may repeat when one value is returned twice."""
    seen: set[str] = set()
    out = []
    for n in names:
        m, k = n, 1
        while m in seen:
            m, k = f"{n}_{k}", k + 1
        seen.add(m)
        out.append(m)
    return out


class Builder:
    def __init__(self, module: Module | None = None, func_name: str = "main"):
        self.module = module if module is not None else Module()
        if func_name in self.module.functions:
            raise ValueError(f"function @{func_name} already exists")
        self.func = Function(func_name)
        self.module.functions[func_name] = self.func
        self._names: set[str] = set()
        self._counter = 0
        self._const_cache: dict[tuple, Value] = {}

    # --- names ----------------------------------------------------------------
    def _fresh(self, hint: str | None) -> str:
        if hint:
            base = sanitize(hint)
            name, i = base, 1
            while name in self._names:
                name = f"{base}_{i}"
                i += 1
        else:
            while str(self._counter) in self._names:
                self._counter += 1
            name = str(self._counter)
            self._counter += 1
        self._names.add(name)
        return name

    # --- symbols, params, constants --------------------------------------------
    def sym(self, name: str, lo: int = 1, hi: int | None = None) -> Sym:
        return self.module.constraints.add_symbol(Sym(name, lo, hi))

    def size_sym(self, bound: IntLike) -> Sym:
        """A new size symbol that a node decides when it runs (its ``size`` attribute), at most ``bound``
        (Module.data_symbols): ``u0``, ``u1``, ... as torch names its unbacked sizes."""
        k = len(self.module.data_symbols)
        while self.module.constraints.symbol(f"u{k}") is not None:
            k += 1
        s = self.module.constraints.add_symbol(Sym(f"u{k}", 0, bound if isinstance(bound, int) else None))
        self.module.data_symbols[s.name] = bound
        return s

    def param(self, name: str, type: TensorType) -> Value:
        for s in type.free_syms():
            if self.module.constraints.symbol(s.name) is None:
                self.module.constraints.add_symbol(s)
        v = Value(self._fresh(name), type)
        self.func.params.append(v)
        return v

    def constant(self, array, name: str | None = None, loc: SourceLoc | None = None) -> Value:
        """A weight or literal. Scalars and tiny arrays are shared when equal."""
        a = np.asarray(array)
        if a.dtype == np.dtype("O"):
            raise ShapeError(f"constant {name or ''} has object dtype; expected a numeric array")
        dt = DType.from_numpy(a.dtype)
        key = None
        if a.size <= 16:
            key = (dt, a.shape, a.tobytes())
            if key in self._const_cache:
                return self._const_cache[key]
        cname = sanitize(name) if name else f"c{len(self.module.constants)}"
        base, i = cname, 1
        while cname in self.module.constants:
            cname = f"{base}_{i}"
            i += 1
        self.module.constants[cname] = a
        (v,) = self._emit("constant", [], {"name": cname}, [TensorType(dt, a.shape)], loc, name or cname)
        if key is not None:
            self._const_cache[key] = v
        return v

    # --- ops ------------------------------------------------------------------
    def op(self, op: str, inputs, loc: SourceLoc | None = None, name: str | None = None, **attrs):
        """Apply ``op``; returns one Value, or a tuple for multi-output ops."""
        opdef = get_op(op)
        inputs = list(inputs)
        where = str(loc) if loc else None
        err = opdef.check_arity(len(inputs))
        if err:
            raise ShapeError(f"op '{op}' {err}", where=where)
        for i, v in enumerate(inputs):
            if v is not None and not isinstance(v, Value):
                raise ShapeError(f"op '{op}' input {i} is {type(v).__name__}, expected a Value", where=where)
        try:
            full = opdef.complete_attrs(attrs)
        except BrazeError as e:
            raise ShapeError(e.what, where=where, hint=e.hint) from None
        ctx = InferCtx(op, self.module.constraints, loc, self.module.constants, module=self.module)
        types = [None if v is None else v.type for v in inputs]
        try:
            out = opdef.infer(ctx, *types, **full)
        except BrazeError:
            raise
        except Exception as e:  # a bug or unhandled case in inference: say where
            raise ShapeError(f"{op}: shape inference failed on inputs "
                             f"{', '.join(str(t) for t in types)}: {type(e).__name__}: {e}", where=where) from e
        out_types = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = self._emit(op, inputs, full, out_types, loc, name)
        return outs[0] if not isinstance(out, (tuple, list)) else tuple(outs)

    def _emit(self, op, inputs, attrs, out_types, loc, name):
        outs = []
        for i, t in enumerate(out_types):
            t = TensorType(t.dtype, tuple(self.module.constraints.simplify(d) for d in t.shape))
            hint = None if name is None else (name if len(out_types) == 1 else f"{name}_{i}")
            outs.append(Value(self._fresh(hint), t))
        self.func.nodes.append(Node(op, inputs, attrs, outs, loc))
        return outs

    def ret(self, *values: Value) -> Function:
        self.func.results = list(values)
        return self.func

    # convenience for tests and frontends
    def __getattr__(self, op_name: str):
        if op_name.startswith("_"):
            raise AttributeError(op_name)

        def call(*inputs, loc=None, name=None, **attrs):
            return self.op(op_name, inputs, loc=loc, name=name, **attrs)

        return call


def tensor(dtype, *shape) -> TensorType:
    return TensorType(DType.parse(dtype) if isinstance(dtype, str) else dtype, tuple(shape))


__all__ = ["Builder", "tensor", "sanitize", "S"]
