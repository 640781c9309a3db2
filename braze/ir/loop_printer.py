"""The text of loop-IR kernels (``str(kernel)``); ``braze.ir.loop_parser`` reads it back.

::

    kernel k_norm(in x: f32[batch, 768], in c_w: f32[768] = @ln.weight, out y: f32[batch, 768]); syms batch in [1, 64]  [stitch, scheduled]
      parallel for _i1 in 0..batch  (threads if 2304*batch >= 32768):
        let r0: f32 = sum vector(_r3 < 768: x[[768*_i1 + _r3]])
        let t1: f32 = (r0 / 768.0)
        let r2: f32 = sum vector(_r4 < 768: ((x[[768*_i1 + _r4]] - t1) * (x[[768*_i1 + _r4]] - t1)))
        let t3: f32 = rsqrt(((r2 / 768.0) + 1e-05))
        vector for _i2 in 0..768:
          y[[768*_i1 + _i2]] = (((x[[768*_i1 + _i2]] - t1) * t3) * c_w[[_i2]])

The text holds every field that C generation reads:

* flags: the kind, ``scheduled``, ``in_place`` (the output is written over an input, so the
  C declares no restrict pointers) and ``stream BYTES`` (float32 outputs that vector loops store
  bypass the caches from that many bytes on);
* buffers: role, name, dtype, shape, ``= @name`` of a module constant; ``alloc`` for temps;
* symbols in argument order with their ranges (``in [lo, hi]``, left out for the default
  ``[1, inf]``): index simplification and C's ``/``-for-floordiv depend on them;
* loops: kind (``serial`` is left out), extent, ``(threads if WORK >= GRAIN)`` (``(grain G)``
  without a work), ``(jam)`` (a vector loop whose vectors C computes side by side); a loop
  variable whose own extent differs from its loop's: ``VAR (extent E)``;
* names: bare identifiers, else JSON-quoted (``"c_ln1.weight"``; a variable named ``inf``
  prints ``"inf"``, a bare ``inf`` is the number);
* loads and stores: per-dim ``buf[i, j]`` or flat ``buf[[offset]]``; an index that is a
  scalar expression (data-dependent, a gather) is in braces: ``buf[[4*_i1 + {ids[_i2]}]]``;
* values: fully parenthesized infix for ``+ - * / % & | ^`` and comparisons, calls for the
  rest (``exp(x)``, ``max(a, b)``, ``select(c, a, b)``, ``idx(n - 1)`` (an index as a value),
  ``i32(x)`` (a cast), ``sum vector(_r1 < n, _r2 < 4: body)`` (a reduction));
* dtypes: a value's dtype is implied (a float literal is f32, an integer literal i64, a
  comparison bool, an index value or arg-reduction i64, a Var its let's dtype, anything else
  its first operand's) and printed as a ``:dtype`` suffix where it differs: ``0.5:f64``,
  ``(a + b):i32``.

The printer dispatches on class names and does not import ``braze.ir.loop`` (whose
``__str__`` methods import this module), so the two do not import each other.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields

from .sym import SymExpr
from .types import DType

BINARY_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&", "or": "|", "xor": "^"}
COMPARE_SYMBOLS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
ARG_REDUCE_OPS = ("argmax", "argmin")
# words that read as literals in value position: names spelled so are quoted
RESERVED_NAMES = frozenset(("inf", "nan", "true", "false"))

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONST_NAME_RE = re.compile(r"[A-Za-z0-9_.]+\Z")


def name_str(name: str) -> str:
    """A kernel, buffer or variable name: bare when it is an identifier, else JSON-quoted."""
    return name if _IDENT_RE.match(name) and name not in RESERVED_NAMES else json.dumps(name)


def const_ref(name: str) -> str:
    """The module constant a buffer stands for, as the graph IR writes globals: ``@v0.weight``."""
    return "@" + (name if _CONST_NAME_RE.match(name) else json.dumps(name))


def implied_dtype(kind: str, op: str | None, first) -> DType:
    """The dtype a ``kind`` node has unless its text adds ``:dtype``; ``first`` is its first
    operand (Unary x, Binary a, Select a, Reduce body)."""
    if kind == "Compare":
        return DType.bool
    if kind == "IndexValue" or (kind == "Reduce" and op in ARG_REDUCE_OPS):
        return DType.int64
    return first.dtype


def literal(value, dtype: DType) -> tuple[str, DType]:
    """(text of a constant's value, the dtype that text implies)."""
    if dtype is DType.bool:
        return ("true" if value else "false"), DType.bool
    if dtype.is_float or (isinstance(value, float) and not math.isfinite(value)):
        return repr(float(value)), DType.float32
    return str(int(value)), DType.int64


def is_intlike(i) -> bool:
    return isinstance(i, (int, SymExpr)) and not isinstance(i, bool)


def _suffix(dtype: DType, implied: DType) -> str:
    return "" if dtype == implied else f":{dtype.short}"


def _field_default(obj, name: str):
    return next(f.default for f in fields(obj) if f.name == name)


def _binding(var, extent) -> str:
    """A loop variable where a loop binds it; its own extent only where it differs."""
    own = getattr(var, "extent", extent)
    return str(var) if own == extent else f"{var} (extent {own})"


def sym_decl(s) -> str:
    return s.name if s.lo == 1 and s.hi is None else f"{s.name} in {s.range_str()}"


def buffer_decl(b, role: bool = True) -> str:
    shape = ", ".join(str(d) for d in b.shape)
    s = f"{b.role + ' ' if role else ''}{name_str(b.name)}: {b.dtype.short}[{shape}]"
    return s + (f" = {const_ref(b.const_name)}" if b.const_name is not None else "")


class _Printer:
    def __init__(self, lets: dict | None = None):
        # name -> dtype of the let that binds it, in text order (None: a lone expression, no suffixes on Vars)
        self.lets = lets

    # --- values -------------------------------------------------------------------
    def expr(self, e) -> str:
        fn = getattr(self, "_" + type(e).__name__, None)
        return fn(e) if fn is not None else f"<{type(e).__name__}>"

    def _Const(self, e):
        text, implied = literal(e.value, e.dtype)
        return text + _suffix(e.dtype, implied)

    def _Var(self, e):
        if self.lets is None:
            return name_str(e.name)
        return name_str(e.name) + _suffix(e.dtype, self.lets.get(e.name))

    def _Load(self, e):
        return name_str(e.buffer.name) + self.index(e)

    def _IndexValue(self, e):
        return f"idx({e.value})" + _suffix(e.dtype, DType.int64)

    def _Unary(self, e):
        return f"{e.fn}({self.expr(e.x)})" + _suffix(e.dtype, e.x.dtype)

    def _Binary(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        s = f"({a} {BINARY_SYMBOLS[e.op]} {b})" if e.op in BINARY_SYMBOLS else f"{e.op}({a}, {b})"
        return s + _suffix(e.dtype, e.a.dtype)

    def _Compare(self, e):
        return f"({self.expr(e.a)} {COMPARE_SYMBOLS[e.op]} {self.expr(e.b)})" + _suffix(e.dtype, DType.bool)

    def _Select(self, e):
        return f"select({self.expr(e.cond)}, {self.expr(e.a)}, {self.expr(e.b)})" + _suffix(e.dtype, e.a.dtype)

    def _Cast(self, e):
        return f"{e.dtype.short}({self.expr(e.x)})"

    def _Reduce(self, e):
        loops = ", ".join(f"{_binding(v, ext)} < {ext}" for v, ext in e.loops)
        vec = " vector" if e.vector else ""
        return f"{e.op}{vec}({loops}: {self.expr(e.body)})" + _suffix(e.dtype, implied_dtype("Reduce", e.op, e.body))

    def index(self, access) -> str:
        """``[i, {e}]`` per dim, or ``[[poly + {extra}]]`` flat."""
        if access.flat:
            poly, extra = access.index
            if extra is None:
                return f"[[{poly}]]"
            e = "{" + self.expr(extra) + "}"
            return f"[[{e}]]" if is_intlike(poly) and poly == 0 else f"[[{poly} + {e}]]"
        return "[" + ", ".join(str(i) if is_intlike(i) else "{" + self.expr(i) + "}" for i in access.index) + "]"

    # --- statements ---------------------------------------------------------------
    def stmt_lines(self, s, depth: int) -> list[str]:
        pad = "  " * depth
        kind = type(s).__name__
        if kind == "For":
            head = f"{pad}{'' if s.kind == 'serial' else s.kind + ' '}for {_binding(s.var, s.extent)} in 0..{s.extent}"
            if s.work is not None:
                head += f"  (threads if {s.work} >= {s.grain})"
            elif s.grain != _field_default(s, "grain"):
                head += f"  (grain {s.grain})"
            if s.jam:
                head += "  (jam)"
            out = [head + ":"]
            for b in s.body:
                out.extend(self.stmt_lines(b, depth + 1))
            return out
        if kind == "Store":
            return [f"{pad}{name_str(s.buffer.name)}{self.index(s)} = {self.expr(s.value)}"]
        if kind == "Let":
            line = f"{pad}let {name_str(s.var.name)}: {s.var.dtype.short} = {self.expr(s.value)}"
            if self.lets is not None:
                self.lets[s.var.name] = s.var.dtype
            return [line]
        if kind == "Alloc":
            return [f"{pad}alloc {buffer_decl(s.buffer, role=s.buffer.role != 'temp')}"]
        return [f"{pad}<{kind}>"]


def expr_str(e) -> str:
    return _Printer().expr(e)


def stmt_lines(s, depth: int) -> list[str]:
    return _Printer().stmt_lines(s, depth)


def kernel_str(k) -> str:
    args = ", ".join(buffer_decl(b) for b in k.buffers)
    syms = ", ".join(sym_decl(s) for s in k.syms)
    flags = k.kind + (", scheduled" if k.scheduled else "") + (", in_place" if k.in_place else "") + \
        (f", stream {k.stream}" if k.stream is not None else "")
    lines = [f"kernel {name_str(k.name)}({args}){'; syms ' + syms if syms else ''}  [{flags}]"]
    p = _Printer(lets={})
    for s in k.body:
        lines.extend(p.stmt_lines(s, 1))
    return "\n".join(lines)
