"""Reading the text form of a Module (see braze/ir/printer.py) back.

A small tokenizer and a recursive-descent parser, no dependencies. Symbolic
expressions are rebuilt with braze.ir.sym arithmetic, so they come back in
canonical form. Output types are taken from the text; shape inference is not
re-run here (``braze.ir.verify`` does that).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

import numpy as np

from ..errors import IRParseError
from . import sym as S
from .constraints import ConstraintStore
from .graph import ConstantRef, Function, Module, Node, SourceLoc, Value, array_digest
from .sym import Sym
from .types import DType, TensorType

# --------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<dense>dense<sha256:(?P<digest>[0-9a-fA-F]+)>)
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<val>%(?:[A-Za-z0-9_.]+|(?=")))
  | (?P<glob>@(?:[A-Za-z0-9_.]+|(?=")))
  | (?P<dtype>\#[A-Za-z0-9_]+)
  | (?P<op>->|==|<=|//|[{}()\[\],:=+\-*%<>])
  | (?P<str>(?="))
""", re.VERBOSE)

_DECODER = json.JSONDecoder()


class Tok:
    __slots__ = ("kind", "text", "value", "line", "col")

    def __init__(self, kind, text, value, line, col):
        self.kind, self.text, self.value, self.line, self.col = kind, text, value, line, col

    def __repr__(self):
        return f"Tok({self.kind}, {self.text!r}, {self.line}:{self.col})"

    def describe(self) -> str:
        if self.kind == "eof":
            return "the end of the text"
        return repr(self.text)


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    pos, line, line_start = 0, 1, 0
    n = len(text)

    def err(msg, p):
        col = p - line_start + 1
        e = IRParseError(f"{line}:{col}: {msg}", where=_caret(text, line, col))
        e.line, e.col = line, col
        raise e

    def count_lines(chunk, start):
        """Move line/line_start past the newlines in ``chunk``, which starts at ``start``."""
        nonlocal line, line_start
        nl = chunk.count("\n")
        if nl:
            line += nl
            line_start = start + chunk.rindex("\n") + 1

    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            err(f"unexpected character {text[pos]!r}", pos)
        kind = m.lastgroup
        if kind == "digest":
            kind = "dense"
        col = pos - line_start + 1
        end = m.end()
        if kind == "ws":
            count_lines(m.group(), pos)
            pos = end
            continue
        if kind in ("val", "glob", "str"):
            # a JSON-quoted name or string literal
            if kind != "str" and end > pos + 1:
                toks.append(Tok(kind, m.group(), m.group()[1:], line, col))
                pos = end
                continue
            q = end if kind != "str" else pos
            try:
                s, qend = _DECODER.raw_decode(text, q)
            except json.JSONDecodeError as e:
                err(f"bad string literal ({e.msg})", q)
            if not isinstance(s, str):
                err("expected a string literal", q)
            if "\n" in text[pos:qend]:
                err("string literal runs past the end of the line", q)
            toks.append(Tok(kind, text[pos:qend], s, line, col))
            pos = qend
            continue
        if kind == "id" and m.group() == "loc" and text.startswith("{", end):
            try:
                d, jend = _DECODER.raw_decode(text, end)
            except json.JSONDecodeError as e:
                err(f"bad loc{{...}} JSON ({e.msg})", end)
            chunk = text[pos:jend]
            toks.append(Tok("loc", chunk, d, line, col))
            count_lines(chunk, pos)
            pos = jend
            continue
        g = m.group()
        if kind == "int":
            value = int(g)
        elif kind == "float":
            value = float(g)
        elif kind == "dense":
            value = m.group("digest").lower()
        elif kind == "dtype":
            value = g[1:]
        else:
            value = g
        toks.append(Tok(kind, g, value, line, col))
        pos = end
    toks.append(Tok("eof", "", None, line, pos - line_start + 1))
    return toks


def _caret(text: str, line: int, col: int) -> str:
    lines = text.split("\n")
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    return f"line {line}, column {col}:\n    {src}\n    {' ' * (col - 1)}^"


# --------------------------------------------------------------------------------
# the parser
# --------------------------------------------------------------------------------

_FLOAT_WORDS = {"inf": math.inf, "nan": math.nan}


class _Parser:
    def __init__(self, text: str, syms: Mapping[str, Sym] | None = None):
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.syms: dict[str, Sym] = dict(syms or {})

    # --- token helpers ------------------------------------------------------------
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        t = self.tok
        return t.kind in ("op", "id") and t.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def error(self, what: str, tok: Tok | None = None, hint: str | None = None) -> IRParseError:
        tok = tok or self.tok
        e = IRParseError(f"{tok.line}:{tok.col}: {what}", where=_caret(self.text, tok.line, tok.col), hint=hint)
        e.line, e.col = tok.line, tok.col
        return e

    def expect(self, text: str, context: str = "") -> Tok:
        if not self.at(text):
            ctx = f" {context}" if context else ""
            raise self.error(f"expected '{text}'{ctx}, found {self.tok.describe()}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Tok:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}, found {self.tok.describe()}")
        return self.next()

    def expect_int(self, what: str) -> int:
        neg = self.accept("-")
        t = self.expect_kind("int", what)
        return -t.value if neg else t.value

    # --- symbolic expressions ---------------------------------------------------------
    def sym(self, name: str) -> Sym:
        s = self.syms.get(name)
        if s is None:
            # not declared: the verifier reports it; keep the text readable back
            s = self.syms[name] = Sym(name)
        return s

    def expr(self):
        x = self.term()
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            op = self.next().text
            y = self.term()
            x = S.add(x, y) if op == "+" else S.add(x, S.mul(-1, y))
        return x

    def term(self):
        x = self.unary()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in ("*", "//", "%"):
                self.next()
                y = self.unary()
                x = self._binop(t, x, y)
            elif t.kind == "val":  # "a%b" without spaces lexes as a value name
                self.next()
                name = t.value
                y = int(name) if name.isdigit() else self.sym(name)
                x = self._binop(t, x, y, "%")
            else:
                return x

    def _binop(self, t, x, y, op=None):
        op = op or t.text
        try:
            if op == "*":
                return S.mul(x, y)
            if op == "//":
                return S.floordiv(x, y)
            return S.mod(x, y)
        except ZeroDivisionError:
            raise self.error("division by zero in a symbolic expression", t) from None

    def unary(self):
        if self.accept("-"):
            return S.mul(-1, self.unary())
        if self.accept("+"):
            return self.unary()
        return self.primary()

    def primary(self):
        t = self.tok
        if t.kind == "int":
            self.next()
            return t.value
        if t.kind == "id":
            self.next()
            if t.text in ("min", "max") and self.at("("):
                self.next()
                args = [self.expr()]
                while self.accept(","):
                    args.append(self.expr())
                self.expect(")", f"to close {t.text}(...)")
                return S.smin(*args) if t.text == "min" else S.smax(*args)
            return self.sym(t.text)
        if self.accept("("):
            x = self.expr()
            self.expect(")", "to close '('")
            return x
        raise self.error(f"expected a symbolic integer (an integer, a symbol, min(...), max(...) or "
                         f"'('), found {t.describe()}")

    # --- types --------------------------------------------------------------------------
    def dtype(self) -> DType:
        t = self.tok
        if t.kind != "id":
            raise self.error(f"expected a dtype (f32, i64, bool, ...), found {t.describe()}")
        try:
            d = DType.parse(t.text)
        except ValueError:
            raise self.error(f"unknown dtype {t.text!r}",
                             hint="one of " + ", ".join(x.short for x in DType)) from None
        self.next()
        return d

    def type(self) -> TensorType:
        d = self.dtype()
        self.expect("[", "to open the dims of a type")
        dims = []
        if not self.at("]"):
            dims.append(self.expr())
            while self.accept(","):
                dims.append(self.expr())
        self.expect("]", "to close the dims of a type")
        return TensorType(d, tuple(dims))

    # --- attribute values ---------------------------------------------------------------
    def value(self, kind: str | None) -> Any:
        t = self.tok
        if t.kind == "id" and t.text == "none":
            self.next()
            return None
        if t.kind == "op" and t.text == "[":
            self.next()
            elem = {"ints": "int", "floats": "float", "intlikes": "intlike"}.get(kind, "any")
            items = []
            if not self.at("]"):
                items.append(self.value(elem))
                while self.accept(","):
                    items.append(self.value(elem))
            self.expect("]", "to close a list")
            return tuple(items)
        if t.kind == "str":
            self.next()
            return t.value
        if t.kind == "dtype":
            self.next()
            try:
                return DType.parse(t.value)
            except ValueError:
                raise self.error(f"unknown dtype {t.text!r}") from None
        if kind in ("intlike", "size"):  # a symbol may be called anything, even 'inf' or 'true'
            f = self._float() if self.tok.kind == "float" or self.peek().kind == "float" else None
            return f if f is not None else self.expr()
        if t.kind == "id" and t.text in ("true", "false"):
            self.next()
            return t.text == "true"
        f = self._float()
        if f is not None:
            return f
        return self.expr()

    def _float(self):
        """A float literal (with an optional sign), or None without consuming anything."""
        j = self.i
        sign = 1.0
        if self.tok.kind == "op" and self.tok.text in ("-", "+"):
            sign = -1.0 if self.tok.text == "-" else 1.0
            j += 1
        t = self.toks[j]
        if t.kind == "float":
            self.i = j + 1
            return sign * t.value
        if t.kind == "id" and t.text in _FLOAT_WORDS:
            self.i = j + 1
            return sign * _FLOAT_WORDS[t.text]
        return None

    # --- the module ------------------------------------------------------------------------
    def module(self, constants: Mapping | None) -> Module:
        m = Module()
        self.m = m
        self.expect("module", "at the start of a module")
        self.expect("{", "after 'module'")
        if self.accept("symbols"):
            self.symbols_block(m.constraints)
        if self.accept("constraints"):
            self.constraints_block(m.constraints)
        if self.accept("constants"):
            self.constants_block(m, constants)
        if self.accept("notes"):
            self.notes_block(m)
        if self.accept("values"):
            self.values_block(m)
        if self.accept("donated"):
            self.donated_block(m)
        if self.accept("sizes"):
            self.sizes_block(m)
        if self.accept("outputs"):
            self.outputs_block(m)
        if self.accept("precision"):
            self.precision_block(m)
        if self.accept("tuning"):
            self.tuning_block(m)
        if self.accept("memory"):
            self.memory_block(m)
        while self.at("func"):
            self.function(m)
        if not self.at("}"):
            raise self.error(f"expected 'func' or '}}' to end the module, found {self.tok.describe()}")
        self.next()
        if self.tok.kind != "eof":
            raise self.error(f"expected the end of the text after the module, found {self.tok.describe()}")
        return m

    def range_(self):
        self.expect("in", "before a symbol's range")
        self.expect("[", "to open a range")
        lo = self.expect_int("the range's lower bound (an integer)")
        self.expect(",", "in a range")
        if self.accept("inf"):
            hi = None
        else:
            hi = self.expect_int("the range's upper bound (an integer or inf)")
        self.expect("]", "to close a range")
        return lo, hi

    def symbols_block(self, store: ConstraintStore):
        self.expect("{", "after 'symbols'")
        while not self.accept("}"):
            t = self.expect_kind("id", "a symbol name or '}'")
            lo, hi = self.range_()
            if t.text in self.syms:
                raise self.error(f"symbol '{t.text}' is declared twice", t)
            try:
                s = Sym(t.text, lo, hi)
            except ValueError as e:
                raise self.error(str(e), t) from None
            self.syms[t.text] = store.add_symbol(s)

    def constraints_block(self, store: ConstraintStore):
        self.expect("{", "after 'constraints'")
        while not self.accept("}"):
            start = self.tok
            if start.kind == "id" and self.peek().kind == "id" and self.peek().text == "in":
                self.next()
                lo, hi = self.range_()
                s = self.sym(start.text)
                try:
                    self.syms[s.name] = store.add_range(s, lo, hi)
                except ValueError as e:
                    raise self.error(str(e), start) from None
                continue
            # "x % k == 0" (divisibility, no parentheses around the '%') or "a == b"
            save = self.i
            x = self.unary()
            if self.at("%") and self.peek().kind == "int" and self.peek(2).text == "==" \
                    and self.peek(3).kind == "int" and self.peek(3).value == 0:
                self.next()
                k = self.next().value
                self.next()
                self.next()
                if k <= 0:
                    raise self.error("a divisor must be a positive integer", start)
                store.add_divisible(x, k)
                continue
            self.i = save
            a = self.expr()
            self.expect("==", "in a constraint (a == b, x % k == 0 or sym in [lo, hi])")
            b = self.expr()
            try:
                store.add_equal(a, b)
            except ValueError as e:
                raise self.error(str(e), start) from None

    def notes_block(self, m: Module):
        """``@func %param axis "text"`` lines: why an input dim is what it is."""
        self.expect("{", "after 'notes'")
        while not self.accept("}"):
            fn = self.expect_kind("glob", "a function name (@name) or '}'").value
            param = self.expect_kind("val", "an input name (%name)").value
            axis = self.expect_int("the input's axis (an integer)")
            m.input_notes[(fn, param, axis)] = self.expect_kind("str", "the note (a string)").value

    def values_block(self, m: Module):
        """``@func %param index symbol`` lines: an input element whose value binds a symbol at run time."""
        self.expect("{", "after 'values'")
        while not self.accept("}"):
            fn = self.expect_kind("glob", "a function name (@name) or '}'").value
            param = self.expect_kind("val", "an input name (%name)").value
            index = self.expect_int("the element's flat index (an integer)")
            t = self.expect_kind("id", "a symbol name")
            if m.constraints.symbol(t.text) is None:
                raise self.error(f"'{t.text}' is not a symbol of the module's symbols block", t)
            m.value_symbols[(fn, param, index)] = t.text

    def donated_block(self, m: Module):
        """``@func %param result`` lines: an input the caller hands over for that result (Module.donated)."""
        self.expect("{", "after 'donated'")
        while not self.accept("}"):
            fn = self.expect_kind("glob", "a function name (@name) or '}'").value
            param = self.expect_kind("val", "an input name (%name)").value
            m.donated.setdefault(fn, {})[param] = self.expect_int("the result's index (an integer)")

    def sizes_block(self, m: Module):
        """``symbol <= bound`` lines: a size an op decides at run time (Module.data_symbols)."""
        self.expect("{", "after 'sizes'")
        while not self.accept("}"):
            t = self.expect_kind("id", "a symbol name or '}'")
            if m.constraints.symbol(t.text) is None:
                raise self.error(f"'{t.text}' is not a symbol of the module's symbols block", t)
            self.expect("<=", f"after the size symbol '{t.text}'")
            m.data_symbols[t.text] = self.expr()

    def outputs_block(self, m: Module):
        """``@func "name" ...`` lines: the names a function's results had in the model file."""
        self.expect("{", "after 'outputs'")
        while not self.accept("}"):
            fn = self.expect_kind("glob", "a function name (@name) or '}'").value
            names = []
            while self.tok.kind == "str":
                names.append(self.expect_kind("str", "an output name (a string)").value)
            m.output_names[fn] = names

    def precision_block(self, m: Module):
        """``policy <fp32|bf16|fp16>``, ``library <dtype>...`` and an optional ``keep "<op or module
        path>"...`` line (passes/precision.py)."""
        self.expect("{", "after 'precision'")
        self.expect("policy", "in a precision block")
        policy = self.expect_kind("id", "a precision policy (fp32, bf16 or fp16)")
        if policy.text not in ("fp32", "bf16", "fp16"):
            raise self.error(f"unknown precision policy {policy.text!r} (fp32, bf16 or fp16)", policy)
        self.expect("library", "after the policy in a precision block")
        library = []
        while self.tok.kind == "id" and self.tok.text != "keep":
            t = self.next()
            try:
                library.append(DType.parse(t.text).name)
            except Exception:
                raise self.error(f"{t.text!r} is not a dtype", t) from None
        m.precision = {"policy": policy.text, "library": tuple(library)}
        if self.accept("keep"):
            keep = []
            while self.tok.kind == "str":
                keep.append(self.next().value)
            if not keep:
                raise self.error("'keep' needs op names or module paths, as strings", self.tok)
            m.precision["keep"] = tuple(keep)
        self.expect("}", "to end the precision block")

    def tuning_block(self, m: Module):
        """``<key> <string or integer>`` lines (braze/tune/dispatch.py)."""
        self.expect("{", "after 'tuning'")
        while not self.accept("}"):
            key = self.expect_kind("id", "a tuning setting's name or '}'").text
            if self.tok.kind == "str":
                m.tuning[key] = self.next().value
            else:
                m.tuning[key] = self.expect_int(f"the tuning setting {key!r} (a string or an integer)")

    def memory_block(self, m: Module):
        """``@func arena <bytes>`` lines: each function's scratch size (assign_memory)."""
        self.expect("{", "after 'memory'")
        while not self.accept("}"):
            fn = self.expect_kind("glob", "a function name (@name) or '}'").value
            self.expect("arena", "after the function name in a memory block")
            m.arena_sizes[fn] = self.expr()

    def constants_block(self, m: Module, given: Mapping | None):
        self.expect("{", "after 'constants'")
        while not self.accept("}"):
            t = self.expect_kind("glob", "a constant name (@name) or '}'")
            name = t.value
            if name in m.constants:
                raise self.error(f"constant @{name} is defined twice", t)
            self.expect(":", "after a constant's name")
            tt = self.tok
            ty = self.type()
            if not ty.is_static():
                raise self.error("a constant's shape must be static", tt)
            self.expect("=", "before a constant's value")
            if self.tok.kind == "dense":
                digest = self.next().value
                m.constants[name] = self._given_constant(name, ty, digest, given, t)
            else:
                m.constants[name] = self.inline_constant(ty, t)

    def _given_constant(self, name, ty, digest, given, t):
        if given is None:
            return ConstantRef(ty, digest)
        if name not in given:
            raise self.error(f"constant @{name} is elided in the text and missing from constants=", t,
                             hint="pass every elided constant, or no constants= to get ConstantRef placeholders")
        a = given[name]
        if isinstance(a, ConstantRef):
            if str(a.type) != str(ty) or a.digest != digest:
                raise self.error(f"constant @{name}: the given placeholder is {a.type} sha256:{a.digest[:12]}, "
                                 f"the text says {ty} sha256:{digest[:12]}", t)
            return a
        a = np.asarray(a)
        try:
            dt = DType.from_numpy(a.dtype)
        except TypeError as e:
            raise self.error(f"constant @{name}: {e}", t) from None
        if dt != ty.dtype or tuple(a.shape) != tuple(ty.shape):
            raise self.error(f"constant @{name}: the given array is {dt.short}{list(a.shape)}, "
                             f"the text says {ty}", t)
        if array_digest(a) != digest:
            raise self.error(f"constant @{name}: the given array's content hash does not match the text "
                             f"(sha256:{array_digest(a)[:12]} vs sha256:{digest[:12]})", t)
        return a

    def inline_constant(self, ty: TensorType, t: Tok) -> np.ndarray:
        self.expect("[", "to open a constant's values (or dense<sha256:...>)")
        vals = []
        if not self.at("]"):
            vals.append(self.scalar(ty.dtype))
            while self.accept(","):
                vals.append(self.scalar(ty.dtype))
        self.expect("]", "to close a constant's values")
        n = int(np.prod(ty.shape, dtype=np.int64)) if ty.shape else 1
        if len(vals) != n:
            raise self.error(f"constant of type {ty} needs {n} values, the text has {len(vals)}", t)
        try:
            return np.array(vals, dtype=ty.dtype.numpy).reshape(tuple(ty.shape))
        except (ValueError, OverflowError) as e:
            raise self.error(f"constant values do not fit {ty.dtype.short}: {e}", t) from None

    def scalar(self, dt: DType):
        t = self.tok
        if dt is DType.bool:
            if t.kind == "id" and t.text in ("true", "false"):
                self.next()
                return t.text == "true"
            raise self.error(f"expected true or false, found {t.describe()}")
        f = self._float()
        if f is not None:
            if dt.is_int:
                raise self.error(f"expected an integer for a {dt.short} constant, found a float", t)
            return f
        v = self.expect_int("a number")
        return float(v) if dt.is_float else v

    # --- functions ----------------------------------------------------------------------------
    def function(self, m: Module):
        self.expect("func")
        t = self.expect_kind("glob", "a function name (@name)")
        name = t.value
        if name in m.functions:
            raise self.error(f"function @{name} is defined twice", t)
        f = Function(name)
        scope: dict[str, Value] = {}
        self.expect("(", "to open the parameter list")
        if not self.at(")"):
            while True:
                vt = self.expect_kind("val", "a parameter (%name)")
                self.expect(":", "after a parameter's name")
                v = Value(vt.value, self.type())
                self._define(scope, v, vt)
                f.params.append(v)
                if not self.accept(","):
                    break
        self.expect(")", "to close the parameter list")
        self.expect("->", "before the result types")
        self.expect("(", "to open the result types")
        res_types = []
        if not self.at(")"):
            res_types.append((self.tok, self.type()))
            while self.accept(","):
                res_types.append((self.tok, self.type()))
        self.expect(")", "to close the result types")
        self.expect("{", "to open the function body")
        while not self.at("return"):
            if self.tok.kind == "eof" or self.at("}"):
                raise self.error(f"expected a node or 'return' in @{name}, found {self.tok.describe()}")
            f.nodes.append(self.node(scope))
        rt = self.next()
        if self.tok.kind == "val":
            f.results.append(self._use(scope, self.next()))
            while self.accept(","):
                f.results.append(self._use(scope, self.expect_kind("val", "a result (%name)")))
        self.expect("}", "to close the function body")
        if len(res_types) != len(f.results):
            raise self.error(f"@{name} declares {len(res_types)} result type(s) but returns "
                             f"{len(f.results)} value(s)", rt)
        for (tt, ty), v in zip(res_types, f.results):
            if ty != v.type:
                raise self.error(f"@{name}: result type {ty} does not match %{v.name}: {v.type}", tt)
        m.functions[name] = f

    def _define(self, scope, v: Value, t: Tok):
        if v.name in scope:
            raise self.error(f"value %{v.name} is defined twice", t)
        scope[v.name] = v

    def _use(self, scope, t: Tok) -> Value:
        v = scope.get(t.value)
        if v is None:
            raise self.error(f"value %{t.value} is used but not defined before this point", t)
        return v

    def node(self, scope) -> Node:
        out_toks = []
        if self.tok.kind == "val":
            out_toks.append(self.next())
            while self.accept(","):
                out_toks.append(self.expect_kind("val", "an output value (%name)"))
            self.expect("=", "after a node's outputs")
        opt = self.expect_kind("id", "an op name")
        op = opt.text
        opdef = None
        try:
            from ..ops.registry import get_op
            opdef = get_op(op)
        except Exception:
            pass  # an unknown op reads back as is; the verifier reports it
        self.expect("(", f"after the op name '{op}'")
        inputs = []
        if not self.at(")"):
            while True:
                if self.accept("none"):
                    inputs.append(None)
                else:
                    inputs.append(self._use(scope, self.expect_kind("val", "an input (%name or none)")))
                if not self.accept(","):
                    break
        self.expect(")", f"to close the inputs of '{op}'")
        attrs = {}
        if self.accept("{"):
            if not self.at("}"):
                while True:
                    kt = self.tok
                    if kt.kind not in ("id", "str"):
                        raise self.error(f"expected an attribute name, found {kt.describe()}")
                    self.next()
                    key = kt.value
                    if key in attrs:
                        raise self.error(f"attribute '{key}' is given twice", kt)
                    self.expect("=", f"after attribute '{key}'")
                    a = opdef.attrs.get(key) if opdef is not None else None
                    kind = a.kind if a is not None else None
                    attrs[key] = _coerce(self.value(kind), kind)
                    if not self.accept(","):
                        break
            self.expect("}", "to close the attributes")
        if opdef is not None:  # the printer leaves out an attribute whose value is its default None
            for key, a in opdef.attrs.items():
                if a.default is None:
                    attrs.setdefault(key, None)
        types = []
        if out_toks:
            self.expect(":", f"before the output types of '{op}'")
            types.append(self.type())
            while self.accept(","):
                types.append(self.type())
            if len(types) != len(out_toks):
                raise self.error(f"'{op}' has {len(out_toks)} output(s) but {len(types)} type(s)", opt)
        loc = None
        if self.tok.kind == "loc":
            lt = self.next()
            d = lt.value
            if not isinstance(d, dict) or set(d) - {"file", "line", "name", "code"}:
                raise self.error("loc{...} takes the keys file, line, name, code", lt)
            loc = SourceLoc(**d)
        outs = [Value(t.value, ty) for t, ty in zip(out_toks, types)]
        for t, v in zip(out_toks, outs):
            self._define(scope, v, t)
        return Node(op, inputs, attrs, outs, loc)


def _coerce(v, kind):
    """Lossless conversion of a parsed attribute to its kind; anything else is kept as read."""
    if kind is None or v is None:
        return v
    if kind == "float" and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if kind == "floats" and isinstance(v, tuple) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       for x in v):
        return tuple(float(x) for x in v)
    if kind == "dtype" and isinstance(v, str):
        try:
            return DType.parse(v)
        except ValueError:
            return v
    return v


# --------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------


def parse_module(text: str, constants: Mapping | None = None) -> Module:
    """Parse ``str(module)`` back into a Module.

    Constants elided as ``dense<sha256:...>`` come from ``constants`` (name ->
    array, checked against the text's type and hash) or, without it, become
    ``ConstantRef`` placeholders (fine for printing and verifying, not for running).
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_module takes the module's text (str), got {type(text).__name__}")
    return _Parser(text).module(constants)


def parse_expr(text: str, syms: Mapping[str, Sym] | None = None):
    """Parse one symbolic integer expression, e.g. ``2*seq + 1`` or ``min(seq, 512)``.

    ``syms`` maps names to Syms (with their ranges); other names become Syms with the default range.
    """
    p = _Parser(text, syms)
    x = p.expr()
    if p.tok.kind != "eof":
        raise p.error(f"expected the end of the expression, found {p.tok.describe()}")
    return x


def parse_type(text: str, syms: Mapping[str, Sym] | None = None) -> TensorType:
    """Parse a tensor type such as ``f32[batch, seq, 768]``."""
    p = _Parser(text, syms)
    t = p.type()
    if p.tok.kind != "eof":
        raise p.error(f"expected the end of the type, found {p.tok.describe()}")
    return t


__all__ = ["parse_module", "parse_expr", "parse_type", "tokenize"]
