"""The canonical text form of a Module (``str(module)``); ``braze.ir.parse`` reads it back.

::

    module {
      symbols {
        batch in [1, inf]
        seq in [1, 512]
      }
      constraints {
        seq_k == seq
        seq % 8 == 0
        seq in [1, 512]
      }
      constants {
        @w0 : f32[768, 768] = dense<sha256:9f86d0...>
        @c1 : f32[] = [0.5]
      }
      notes {
        @main %x 2 "fixed to 768 at export"
      }
      values {
        @main %shape 0 rows
      }
      func @main(%x: f32[batch, seq, 768]) -> (f32[batch, seq, 768]) {
        %w0 = constant() {name="w0"} : f32[768, 768]
        %1 = matmul(%x, %w0) : f32[batch, seq, 768]  loc{"file":"m.py","line":12}
        %2, %3 = split(%1) {axis=2, sizes=[384, 384]} : f32[batch, seq, 384], f32[batch, seq, 384]
        return %2
      }
    }

Canonical means: equal modules print equal text. Symbolic expressions are
printed in their canonical form under the ranges the module's constraint store
gives their symbols; attributes are sorted by key, with the op's defaults filled
in; constants with more than ``inline_limit`` elements print as their content
hash only; value names that would clash get a suffix.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from . import sym as S
from .constant import ConstantRef, array_digest
from .types import DType, TensorType
from .value import Node, Value

# Module and Function come in as arguments, never by import: graph.py prints through this module.

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_VALUE_NAME_RE = re.compile(r"[A-Za-z0-9_.]+\Z")


def print_module(module, inline_limit: int = 16) -> str:
    return _Printer(module).module(inline_limit)


def print_function(module, func) -> str:
    """One function's text, without the module's symbols and constants."""
    return "\n".join(_Printer(module).function(func.name, func))


def format_node(module, node: Node) -> str:
    """One node as a line of text, with the values' own names (for messages)."""
    p = _Printer(module)
    try:
        return p.node(node, None)
    except Exception:  # a node too broken to print: say what we can
        return repr(node)


def format_value_name(name: str) -> str:
    return "%" + (name if _VALUE_NAME_RE.match(name or "") else json.dumps(name))


def format_global_name(name: str) -> str:
    return "@" + (name if _VALUE_NAME_RE.match(name or "") else json.dumps(name))


def format_float(x) -> str:
    """A float that reads back exactly, as a float (always with '.', 'e', inf or nan)."""
    r = repr(float(x))
    return r


class _Printer:
    def __init__(self, module):
        self.m = module
        self.store = module.constraints
        self._expr_cache: dict = {}

    # --- symbolic expressions -----------------------------------------------
    def expr(self, x) -> str:
        if isinstance(x, bool) or not isinstance(x, (int, S.SymExpr)):
            if isinstance(x, np.integer):
                return str(int(x))
            return str(x)
        if isinstance(x, int):
            return str(x)
        k = x.key()
        s = self._expr_cache.get(k)
        if s is None:
            s = str(self.normalize(x))
            self._expr_cache[k] = s
        return s

    def normalize(self, x):
        """``x`` rebuilt over the store's symbols (so with the store's ranges)."""
        if not isinstance(x, S.SymExpr):
            return x
        repl = {}
        for s in x.free_syms():
            t = self.store.symbol(s.name)
            if t is None:
                t = S.Sym(s.name)
            if (t.lo, t.hi) != (s.lo, s.hi):
                repl[s] = t
        if not repl:
            return x
        try:
            return S.subs(x, repl)
        except Exception:
            return x

    # --- types ----------------------------------------------------------------
    def type(self, t) -> str:
        if not isinstance(t, TensorType):
            return f"<{t!r}>"
        return f"{t.dtype.short}[{', '.join(self.expr(d) for d in t.shape)}]"

    # --- attribute values -------------------------------------------------------
    def value(self, v, kind: str | None = None) -> str:
        if v is None:
            return "none"
        if kind == "float" and _is_real(v):
            return format_float(v)
        if kind == "floats" and isinstance(v, (list, tuple)) and all(_is_real(x) for x in v):
            return "[" + ", ".join(format_float(x) for x in v) + "]"
        if kind == "dtype" and isinstance(v, str):
            try:
                return "#" + DType.parse(v).short
            except ValueError:
                pass
        elem_kind = {"ints": "int", "floats": "float", "intlikes": "intlike"}.get(kind)
        if isinstance(v, (bool, np.bool_)):
            return "true" if v else "false"
        if isinstance(v, (int, np.integer, S.SymExpr)):
            return self.expr(v)
        if isinstance(v, (float, np.floating)):
            return format_float(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, DType):
            return "#" + v.short
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(self.value(x, elem_kind) for x in v) + "]"
        return f"<unprintable {type(v).__name__}: {v!r}>"

    def attrs(self, node: Node) -> str:
        attrs = dict(node.attrs)
        kinds: dict[str, str] = {}
        try:
            from ..ops.registry import REQUIRED, get_op
            opdef = get_op(node.op)
        except Exception:
            opdef = None
        if opdef is not None:
            for k, a in opdef.attrs.items():
                kinds[k] = a.kind
                if k not in attrs and a.default is not REQUIRED and a.default is not None:
                    attrs[k] = a.default
                elif k in attrs and attrs[k] is None and a.default is None:
                    del attrs[k]  # the default: saying so adds nothing
        if not attrs:
            return ""
        parts = []
        for k in sorted(attrs):
            key = k if _IDENT_RE.match(k) else json.dumps(k)
            parts.append(f"{key}={self.value(attrs[k], kinds.get(k))}")
        return " {" + ", ".join(parts) + "}"

    # --- constants --------------------------------------------------------------
    def constant(self, name: str, c, inline_limit: int) -> str:
        head = f"{format_global_name(name)} : "
        if isinstance(c, ConstantRef):
            return head + f"{self.type(c.type)} = dense<sha256:{c.digest}>"
        a = np.asarray(c)
        try:
            dt = DType.from_numpy(a.dtype)
        except TypeError:
            return head + f"<unsupported constant dtype {a.dtype}>"
        t = f"{dt.short}[{', '.join(str(d) for d in a.shape)}]"
        if a.size > inline_limit:
            return head + f"{t} = dense<sha256:{array_digest(a)}>"
        return head + f"{t} = [{', '.join(_scalar(x, dt) for x in a.reshape(-1))}]"

    # --- functions ----------------------------------------------------------------
    def node(self, node: Node, names: "_Names | None") -> str:
        nm = (lambda v: format_value_name(v.name)) if names is None else names.use
        outs = ", ".join(nm(v) if names is None else names.define(v) for v in node.outputs)
        ins = ", ".join("none" if v is None else nm(v) for v in node.inputs)
        s = f"{outs} = " if node.outputs else ""
        s += f"{node.op}({ins}){self.attrs(node)}"
        if node.outputs:
            s += " : " + ", ".join(self.type(v.type) for v in node.outputs)
        if node.loc is not None:
            s += f"  loc{node.loc.to_json()}"
        return s

    def function(self, key: str, f) -> list[str]:
        names = _Names(f)
        params = ", ".join(f"{names.define(p)}: {self.type(p.type)}" for p in f.params)
        res_types = ", ".join(self.type(v.type) for v in f.results)
        lines = [f"  func {format_global_name(f.name)}({params}) -> ({res_types}) {{"]
        for n in f.nodes:
            lines.append("    " + self.node(n, names))
        ret = ", ".join(names.use(v) for v in f.results)
        lines.append(f"    return {ret}" if ret else "    return")
        lines.append("  }")
        return lines

    # --- the module -----------------------------------------------------------------
    def module(self, inline_limit: int) -> str:
        lines = ["module {"]
        syms = self.store.symbols
        if syms:
            lines.append("  symbols {")
            for name, s in syms.items():
                lines.append(f"    {name} in {s.range_str()}")
            lines.append("  }")
        if self.store.facts:
            lines.append("  constraints {")
            for f in self.store.facts:
                lines.append("    " + self.fact(f))
            lines.append("  }")
        if self.m.constants:
            lines.append("  constants {")
            for name, c in self.m.constants.items():
                lines.append("    " + self.constant(name, c, inline_limit))
            lines.append("  }")
        if self.m.input_notes:
            lines.append("  notes {")
            for (fn, param, axis), text in sorted(self.m.input_notes.items()):
                lines.append(f"    {format_global_name(fn)} {format_value_name(param)} {axis} {json.dumps(text)}")
            lines.append("  }")
        if self.m.value_symbols:
            lines.append("  values {")
            for (fn, param, index), name in sorted(self.m.value_symbols.items()):
                lines.append(f"    {format_global_name(fn)} {format_value_name(param)} {index} {name}")
            lines.append("  }")
        if self.m.donated:
            lines.append("  donated {")
            for fn, given in sorted(self.m.donated.items()):
                for param, k in sorted(given.items()):
                    lines.append(f"    {format_global_name(fn)} {format_value_name(param)} {k}")
            lines.append("  }")
        if self.m.data_symbols:
            lines.append("  sizes {")
            for name, bound in sorted(self.m.data_symbols.items()):
                lines.append(f"    {name} <= {self.expr(bound)}")
            lines.append("  }")
        if self.m.output_names:
            lines.append("  outputs {")
            for fn, names in sorted(self.m.output_names.items()):
                lines.append(f"    {format_global_name(fn)} " + " ".join(json.dumps(n) for n in names))
            lines.append("  }")
        if self.m.precision:
            lines.append("  precision {")
            lines.append(f"    policy {self.m.precision.get('policy', 'fp32')}")
            lines.append("    library " + " ".join(DType.parse(d).short for d in self.m.precision.get("library", ())))
            if self.m.precision.get("keep"):
                lines.append("    keep " + " ".join(json.dumps(k) for k in self.m.precision["keep"]))
            lines.append("  }")
        if self.m.tuning:
            lines.append("  tuning {")
            lines.extend(f"    {k} {json.dumps(v)}" for k, v in sorted(self.m.tuning.items()))
            lines.append("  }")
        if self.m.arena_sizes:
            lines.append("  memory {")
            for fn, size in self.m.arena_sizes.items():
                lines.append(f"    {format_global_name(fn)} arena {self.expr(size)}")
            lines.append("  }")
        for key, f in self.m.functions.items():
            lines.extend(self.function(key, f))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def fact(self, f: tuple) -> str:
        if f[0] == "eq":
            return f"{self.expr(f[1])} == {self.expr(f[2])}"
        if f[0] == "div":
            a = self.normalize(f[1])
            return f"{S._paren(a)} % {f[2]} == 0"
        if f[0] == "range":
            hi = "inf" if f[3] is None else f[3]
            return f"{f[1].name if isinstance(f[1], S.Sym) else f[1]} in [{f[2]}, {hi}]"
        return f"<unknown fact {f!r}>"


class _Names:
    """Printed names of a function's values: unique, and stable in definition order."""

    def __init__(self, f):
        self.by_id: dict[int, str] = {}
        self.taken: set[str] = set()

    def define(self, v: Value) -> str:
        if id(v) in self.by_id:  # defined twice: the verifier's business; print as is
            return format_value_name(self.by_id[id(v)])
        name, i = v.name, 1
        while name in self.taken:
            name = f"{v.name}_{i}"
            i += 1
        self.taken.add(name)
        self.by_id[id(v)] = name
        return format_value_name(name)

    def use(self, v) -> str:
        if not isinstance(v, Value):
            return f"<{v!r}>"
        return format_value_name(self.by_id.get(id(v), v.name))


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _scalar(x, dt: DType) -> str:
    if dt is DType.bool:
        return "true" if bool(x) else "false"
    if dt.is_int:
        return str(int(x))
    f = float(x)
    if math.isnan(f) or math.isinf(f):
        return repr(f)
    # the shortest text that reads back to the same value of this dtype
    s = str(x)
    try:
        if "." not in s and "e" not in s:
            raise ValueError
        same = np.array(float(s)).astype(dt.numpy).tobytes() == np.array(x, dtype=dt.numpy).tobytes()
    except (ValueError, OverflowError):
        same = False
    return s if same else repr(f)


__all__ = ["print_module", "format_node", "format_float", "format_value_name"]
