"""Reading the text of loop-IR kernels (``str(kernel)``, see ``loop_printer``) back.

    parse_kernel(text) -> Kernel            # one kernel
    parse_kernels(text) -> list[Kernel]     # several, as a dump file holds them

One statement per line; a loop's body is the lines under it, indented further. ``#``
starts a comment. Symbolic integers (extents, indices, shapes) are read by the graph
IR's expression parser (``braze.ir.parser``), rebuilt with ``braze.ir.sym`` arithmetic
under the declared ranges, so they come back in canonical form. Errors are
``IRParseError``s naming the line, the column and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields, replace

from ..errors import IRParseError
from . import loop as L
from .loop_printer import BINARY_SYMBOLS, COMPARE_SYMBOLS, implied_dtype
from .parser import Tok, _Parser
from .sym import Sym
from .types import DType

_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<comment>\#[^\n]*)
  | (?P<float>\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<glob>@(?:[A-Za-z0-9_.]+|(?=")))
  | (?P<op>\.\.|//|==|!=|<=|>=|[\[\](){},:;=+\-*/%&|^<>])
  | (?P<str>(?="))
""", re.VERBOSE)

_DECODER = json.JSONDecoder()
_BINARY_OPS = {v: k for k, v in BINARY_SYMBOLS.items()}
_COMPARE_OPS = {v: k for k, v in COMPARE_SYMBOLS.items()}
_PREFIX_BINARY = tuple(op for op in L.BINARY_OPS if op not in BINARY_SYMBOLS)  # max(a, b), pow(a, b), ...
_DTYPES = {d.short: d for d in DType}
_DEFAULT_GRAIN = next(f.default for f in fields(L.For) if f.name == "grain")


class _KernelParser(_Parser):
    """The graph parser's token helpers and symbolic-expression grammar, with loop-IR tokens,
    statements and scalar values on top. Names resolve in scopes: ``self.syms`` (kernel symbols
    and the loop variables of enclosing loops), ``self.buffers``, ``self.lets``."""

    def __init__(self, text: str):
        # not _Parser.__init__: the graph IR's tokenizer does not know loop-IR operators
        self.text = text
        self.i = 0
        self.syms: dict[str, Sym] = {}
        self.toks: list[Tok] = []
        self.toks = self._tokenize(text)

    def _tokenize(self, text: str) -> list[Tok]:
        toks, pos, line, line_start = [], 0, 1, 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            col = pos - line_start + 1
            if m is None:
                raise self.error(f"unexpected character {text[pos]!r}", Tok("op", text[pos], None, line, col))
            kind, g, end = m.lastgroup, m.group(), m.end()
            if kind == "ws":
                if "\n" in g:
                    line += g.count("\n")
                    line_start = pos + g.rindex("\n") + 1
            elif kind in ("str", "glob") and (kind == "str" or end == pos + 1):
                q = end if kind == "glob" else pos
                try:
                    s, end = _DECODER.raw_decode(text, q)
                except json.JSONDecodeError as e:
                    raise self.error(f"bad string literal ({e.msg})", Tok("str", "", None, line, col)) from None
                if not isinstance(s, str) or "\n" in text[pos:end]:
                    raise self.error("expected a one-line string literal", Tok("str", "", None, line, col))
                toks.append(Tok(kind, text[pos:end], s, line, col))
            elif kind != "comment":
                value = int(g) if kind == "int" else float(g) if kind == "float" else g[1:] if kind == "glob" else g
                toks.append(Tok(kind, g, value, line, col))
            pos = end
        toks.append(Tok("eof", "", None, line, len(text) - line_start + 1))
        return toks

    # --- helpers -------------------------------------------------------------------------
    def sym(self, name: str) -> Sym:
        s = self.syms.get(name)
        if s is None:
            raise self.error(f"symbol '{name}' is not declared: not in the kernel's syms, not an enclosing "
                             "loop's variable", self.toks[self.i - 1])
        return s

    def expect(self, text: str, context: str = "") -> Tok:
        if not self.at(text) and self._line_ended():
            raise self._at_line_end(f"expected '{text}'{' ' + context if context else ''}")
        return super().expect(text, context)

    def expect_kind(self, kind: str, what: str) -> Tok:
        if self.tok.kind != kind and self._line_ended():
            raise self._at_line_end(f"expected {what}")
        return super().expect_kind(kind, what)

    def _line_ended(self) -> bool:
        return 0 < self.i and self.tok.line > self.toks[self.i - 1].line

    def _at_line_end(self, what: str) -> IRParseError:
        """A statement cut short: point past the last token of its line, not at the next line."""
        last = self.toks[self.i - 1]
        return self.error(f"{what}, found the end of the line",
                          Tok("eof", "", None, last.line, last.col + len(last.text)))

    def name(self, what: str) -> Tok:
        if self.tok.kind not in ("id", "str"):
            raise self.error(f"expected {what}, found {self.tok.describe()}")
        return self.next()

    def end_of_line(self, line: int, what: str):
        if self.tok.kind != "eof" and self.tok.line == line:
            raise self.error(f"expected the end of the line after {what}, found {self.tok.describe()}")

    def sym_expr_until(self, stop: int | None):
        """A symbolic expression that ends at token ``stop`` (the ``+`` before a braced index)."""
        if stop is None:
            return self.expr()
        saved = self.toks
        self.toks = saved[:stop] + [Tok("eof", "", None, saved[stop].line, saved[stop].col)]
        try:
            x = self.expr()
        finally:
            self.toks = saved
        if self.i != stop:
            raise self.error(f"expected '+ {{' after a flat index's offset, found {self.tok.describe()}")
        return x

    def bind(self, var: Sym):
        """Bind a loop variable; returns what to restore."""
        old = self.syms.get(var.name)
        self.syms[var.name] = var
        return var.name, old

    def unbind(self, saved):
        name, old = saved
        if old is None:
            del self.syms[name]
        else:
            self.syms[name] = old

    # --- kernels -------------------------------------------------------------------------
    def kernel(self) -> L.Kernel:
        head = self.expect("kernel", "at the start of a kernel")
        name = self.name("a kernel name").value
        open_i = self.i
        self.expect("(", "to open the kernel's buffers")
        close_i = self._closing(open_i)
        # the symbols follow the buffers, whose shapes use them: read them first
        self.i = close_i + 1
        self.syms, self.buffers, self.lets = {}, {}, {}
        sym_list = []
        if self.accept(";"):
            self.expect("syms", "after ';' in a kernel's header")
            sym_list.append(self.sym_decl())
            while self.accept(","):
                sym_list.append(self.sym_decl())
        self.expect("[", "to open the kernel's flags ([pointwise], [stitch, scheduled], ...)")
        kind = self.expect_kind("id", "the kernel's kind (pointwise, reduction, stitch)").text
        flags, stream = set(), None
        while self.accept(","):
            t = self.expect_kind("id", "a kernel flag (scheduled, in_place, stream BYTES)")
            if t.text not in ("scheduled", "in_place", "stream") or t.text in flags:
                raise self.error(f"expected a kernel flag (scheduled, in_place, stream BYTES) once, found "
                                 f"{t.describe()}", t)
            flags.add(t.text)
            if t.text == "stream":
                stream = self.expect_int("the bytes from which outputs stream (stream BYTES)")
                if stream < 0:
                    raise self.error(f"stream {stream}: the bytes from which outputs stream are 0 or more",
                                     self.toks[self.i - 1])
        self.expect("]", "to close the kernel's flags")
        end_i = self.i
        self.i = open_i + 1
        buffers = []
        if not self.at(")"):
            buffers.append(self.buffer_decl(None))
            while self.accept(","):
                buffers.append(self.buffer_decl(None))
        self.expect(")", "to close the kernel's buffers")
        self.i = end_i
        self.end_of_line(head.line, "the kernel's header")
        body = self.block(head.col)
        return L.Kernel(name, buffers, sym_list, body, kind, "scheduled" in flags, "in_place" in flags, stream)

    def _closing(self, open_i: int) -> int:
        """Index of the ``)`` that closes the ``(`` at ``open_i``, on the same line."""
        depth = 0
        for j in range(open_i, len(self.toks)):
            t = self.toks[j]
            if t.kind == "eof" or t.line != self.toks[open_i].line:
                break
            if t.kind == "op" and t.text in ("(", "[", "{"):
                depth += 1
            elif t.kind == "op" and t.text in (")", "]", "}"):
                depth -= 1
                if depth == 0:
                    return j
        raise self.error("expected ')' to close the kernel's buffers on the header's line", self.toks[open_i])

    def sym_decl(self) -> Sym:
        t = self.expect_kind("id", "a symbol name")
        lo, hi = self.range_() if self.at("in") else (1, None)
        if t.text in self.syms:
            raise self.error(f"symbol '{t.text}' is declared twice", t)
        try:
            s = self.syms[t.text] = Sym(t.text, lo, hi)
        except ValueError as e:
            raise self.error(str(e), t) from None
        return s

    def buffer_decl(self, role: str | None) -> L.Buffer:
        """``[role] name: dtype[dims] [= @constant]``; ``role`` given: the role is optional."""
        if role is None or (self.tok.text in L.ROLES and self.peek().text != ":"):
            t = self.expect_kind("id", "a buffer role (in, out, temp)")
            if t.text not in L.ROLES:
                raise self.error(f"expected a buffer role (in, out, temp), found {t.describe()}", t)
            role = t.text
        t = self.name("a buffer name")
        self.expect(":", "after a buffer's name")
        ty = self.type()
        const_name = self.expect_kind("glob", "a module constant (@name)").value if self.accept("=") else None
        if t.value in self.buffers:
            raise self.error(f"buffer '{t.value}' is declared twice", t)
        b = self.buffers[t.value] = L.Buffer(t.value, ty.dtype, ty.shape, role, const_name)
        return b

    # --- statements ----------------------------------------------------------------------
    def block(self, parent_col: int) -> list:
        """The statements on the following lines indented past ``parent_col``."""
        out, indent = [], None
        while self.tok.kind != "eof" and self.tok.col > parent_col:
            if indent is None:
                indent = self.tok.col
            elif self.tok.col != indent:
                raise self.error(f"expected a statement at column {indent} (the block's indentation), "
                                 f"found {self.tok.describe()} at column {self.tok.col}")
            out.append(self.stmt())
        return out

    def stmt(self):
        t, nxt = self.tok, self.peek()
        if t.kind in ("id", "str") and nxt.text == "[" and nxt.kind == "op":
            return self.store()
        if self.at("let"):
            return self.let()
        if self.at("alloc"):
            self.next()
            s = L.Alloc(self.buffer_decl("temp"))
            self.end_of_line(t.line, "an alloc")
            return s
        if self.at("for") or (t.text in L.FOR_KINDS and nxt.text == "for"):
            return self.for_()
        raise self.error(f"expected a statement (for, let, alloc, or a store buf[...] = value), found {t.describe()}")

    def for_(self) -> L.For:
        head = self.tok
        kind = self.next().text if not self.at("for") else "serial"
        self.expect("for")
        vt, own = self.binding()
        self.expect("in", "after a loop's variable")
        start = self.expect_int("a loop's start (0)")
        if start != 0:
            raise self.error("loops start at 0", self.toks[self.i - 1])
        self.expect("..", "between a loop's bounds (0..extent)")
        ext = self.expr()
        work, grain, jam = None, _DEFAULT_GRAIN, False
        if self.accept("("):
            if self.accept("jam"):
                jam = True
            elif self.accept("threads"):
                self.expect("if", "after 'threads'")
                work = self.expr()
                self.expect(">=", "after a loop's work")
                grain = self.expect_int("a loop's grain (an integer)")
            else:
                self.expect("grain", "in a loop's (threads if WORK >= GRAIN), (grain G) or (jam)")
                grain = self.expect_int("a loop's grain (an integer)")
            self.expect(")", "to close a loop's clause")
            if not jam and self.accept("("):
                self.expect("jam", "in a loop's second clause (jam)")
                self.expect(")", "to close a loop's (jam)")
                jam = True
        self.expect(":", "to end a loop's header")
        self.end_of_line(head.line, "a loop's header")
        var = L.LoopVar(vt.value, ext if own is None else own)
        saved = self.bind(var)
        body = self.block(head.col)
        self.unbind(saved)
        return L.For(var, ext, body, kind, work, grain, jam)

    def binding(self):
        """A loop variable where a loop binds it: (name token, its own extent or None)."""
        vt = self.expect_kind("id", "a loop variable")
        if self.at("(") and self.peek().text == "extent":
            self.next()
            self.next()
            own = self.expr()
            self.expect(")", "to close a loop variable's (extent E)")
            return vt, own
        return vt, None

    def store(self) -> L.Store:
        t = self.tok
        buf = self.buffer_ref()
        index, flat = self.index()
        self.expect("=", "after a store's target")
        value = self.value()
        self.end_of_line(t.line, "a store")
        return L.Store(buf, index, value, flat)

    def let(self) -> L.Let:
        t = self.next()
        nt = self.name("a let's variable name")
        self.expect(":", "after a let's name")
        var = L.Var(nt.value, self.dtype())
        self.expect("=", "after a let's dtype")
        value = self.value()
        self.end_of_line(t.line, "a let")
        self.lets[var.name] = var
        return L.Let(var, value)

    # --- accesses -------------------------------------------------------------------------
    def buffer_ref(self) -> L.Buffer:
        t = self.name("a buffer name")
        b = self.buffers.get(t.value)
        if b is None:
            raise self.error(f"buffer '{t.value}' is not declared (in the kernel's header or by an alloc above)", t)
        return b

    def index(self):
        """``[i, {e}, ...]`` -> (per-dim index, False); ``[[poly + {extra}]]`` -> ((poly, extra), True)."""
        self.expect("[", "to open an index")
        if self.accept("["):
            extra = None
            if self.at("{"):
                poly, extra = 0, self.braced()
            else:
                stop = self._plus_brace()
                poly = self.sym_expr_until(stop)
                if stop is not None:
                    self.next()
                    extra = self.braced()
            self.expect("]", "to close a flat index")
            self.expect("]", "to close a flat index")
            return (poly, extra), True
        items = []
        if not self.at("]"):
            items.append(self.braced() if self.at("{") else self.expr())
            while self.accept(","):
                items.append(self.braced() if self.at("{") else self.expr())
        self.expect("]", "to close an index")
        return tuple(items), False

    def _plus_brace(self) -> int | None:
        """Index of the ``+`` that precedes ``{extra}`` in a flat index, if any."""
        depth = 0
        for j in range(self.i, len(self.toks) - 1):
            t = self.toks[j]
            if t.kind == "eof" or (t.kind == "op" and t.text in (")", "]") and depth == 0):
                return None
            if t.kind == "op" and t.text in ("(", "["):
                depth += 1
            elif t.kind == "op" and t.text in (")", "]"):
                depth -= 1
            elif t.kind == "op" and t.text == "+" and depth == 0 and self.toks[j + 1].text == "{":
                return j
        return None

    def braced(self) -> L.Expr:
        self.expect("{", "to open a scalar index")
        e = self.value()
        self.expect("}", "to close a scalar index")
        return e

    # --- values -----------------------------------------------------------------------------
    def value(self) -> L.Expr:
        """A scalar expression, with an optional ``:dtype`` suffix."""
        t = self.tok
        e = self.atom()
        if self.at(":"):
            self.next()
            e = _with_dtype(e, self.dtype(), lambda msg: self.error(msg, t))
        return e

    def atom(self) -> L.Expr:
        t = self.tok
        if self.accept("("):
            a = self.value()
            op = self.next()
            if op.kind != "op" or (op.text not in _BINARY_OPS and op.text not in _COMPARE_OPS):
                raise self.error(f"expected an operator ({' '.join([*_BINARY_OPS, *_COMPARE_OPS])}), "
                                 f"found {op.describe()}", op)
            b = self.value()
            self.expect(")", f"to close '({a} {op.text} ...'")
            if op.text in _COMPARE_OPS:
                return L.Compare(_COMPARE_OPS[op.text], a, b)
            return L.Binary(_BINARY_OPS[op.text], a, b, implied_dtype("Binary", None, a))
        if t.kind in ("int", "float") or (t.text == "-" and t.kind == "op"):
            return self.number()
        if t.kind == "id" and self.peek().text in ("(", "vector") and self.peek().kind in ("op", "id"):
            return self.call()
        if t.kind in ("id", "str"):
            if self.peek().text == "[" and self.peek().kind == "op":
                buf = self.buffer_ref()
                index, flat = self.index()
                return L.Load(buf, index, flat)
            if t.kind == "id":  # bare, these are literals; a variable spelled so is quoted
                if t.text in ("true", "false"):
                    self.next()
                    return L.Const(t.text == "true", DType.bool)
                if t.text in ("inf", "nan"):
                    return self.number()
            self.next()
            name = t.text if t.kind == "id" else t.value
            var = self.lets.get(name)
            if var is None:
                if not self.at(":"):
                    raise self.error(f"'{name}' is not defined by a let above (an unbound variable needs its "
                                     f"dtype: {name}:f32)", t)
                self.next()
                return L.Var(name, self.dtype())
            return var
        raise self.error(f"expected a value (a number, a variable, buf[...], fn(...) or '('), found {t.describe()}")

    def number(self) -> L.Const:
        neg = self.accept("-")
        n = self.next()
        if n.kind == "id" and n.text in ("inf", "nan"):
            v = float(n.text)
        elif n.kind in ("int", "float"):
            v = n.value
        else:
            raise self.error(f"expected a number after '-', found {n.describe()}", n)
        v = -v if neg else v
        return L.Const(v, DType.float32 if isinstance(v, float) else DType.int64)

    def call(self) -> L.Expr:
        t = self.next()
        fn = t.text
        if fn in L.REDUCE_OPS and (self.at("vector") or self._reduce_ahead()):
            return self.reduce(fn)
        self.expect("(", f"after '{fn}'")
        if fn == "idx":
            x = self.expr()
            self.expect(")", "to close idx(...)")
            return L.IndexValue(x)
        args = [self.value()]
        while self.accept(","):
            args.append(self.value())
        self.expect(")", f"to close {fn}(...)")
        want = 1 if fn in L.UNARY_FNS or fn in _DTYPES else 2 if fn in _PREFIX_BINARY else 3 if fn == "select" else None
        if want is None:
            raise self.error(f"unknown function '{fn}'", t, hint="unary: " + ", ".join(L.UNARY_FNS) +
                             "; binary: " + ", ".join(_PREFIX_BINARY) + "; select, idx, a dtype (a cast), "
                             "a reduction (" + ", ".join(L.REDUCE_OPS) + ")")
        if len(args) != want:
            raise self.error(f"{fn}(...) takes {want} argument(s), found {len(args)}", t)
        if fn in L.UNARY_FNS:
            return L.Unary(fn, args[0], implied_dtype("Unary", fn, args[0]))
        if fn in _DTYPES:
            return L.Cast(args[0], _DTYPES[fn])
        if fn == "select":
            return L.Select(args[0], args[1], args[2], implied_dtype("Select", None, args[1]))
        return L.Binary(fn, args[0], args[1], implied_dtype("Binary", fn, args[0]))

    def _reduce_ahead(self) -> bool:
        """After a reduction's name: ``(:`` or ``(var <`` or ``(var (extent``, not a binary max(a, b)."""
        a, b, c = self.peek(1), self.peek(2), self.peek(3)
        return self.at("(") and (a.text == ":" or (a.kind == "id" and (b.text == "<" or (
            b.text == "(" and c.text == "extent"))))

    def reduce(self, op: str) -> L.Reduce:
        vector = self.accept("vector")
        self.expect("(", f"to open {op}(...)")
        loops, saved = [], []
        if not self.at(":"):
            while True:
                vt, own = self.binding()
                self.expect("<", "after a reduction's variable")
                ext = self.expr()
                var = L.LoopVar(vt.value, ext if own is None else own)
                saved.append(self.bind(var))
                loops.append((var, ext))
                if not self.accept(","):
                    break
        self.expect(":", "between a reduction's loops and its body")
        body = self.value()
        for s in reversed(saved):
            self.unbind(s)
        self.expect(")", f"to close {op}(...)")
        return L.Reduce(op, body, tuple(loops), implied_dtype("Reduce", op, body), vector)


def _with_dtype(e: L.Expr, dt: DType, error) -> L.Expr:
    """``e`` with the dtype its ``:dtype`` suffix gives."""
    if isinstance(e, L.Load):
        raise error(f"a load's dtype is its buffer's ({e.dtype.short}): no ':{dt.short}' suffix")
    if isinstance(e, L.Cast):
        raise error(f"a cast names its dtype ({e.dtype.short}(...)): no ':{dt.short}' suffix")
    if isinstance(e, L.Const):
        v = e.value
        if dt is DType.bool:
            v = bool(v)
        elif dt.is_float:
            v = float(v)
        elif not (isinstance(v, float) and not math.isfinite(v)):
            v = int(v)  # a NaN or infinity stays a float: the printer writes it so
        return L.Const(v, dt)
    return replace(e, dtype=dt)


# --------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------


def parse_kernels(text: str) -> list[L.Kernel]:
    """Every kernel in ``text`` (``str(kernel)``s, e.g. joined by blank lines as in a dump's kernels.txt)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_kernels takes the kernels' text (str), got {type(text).__name__}")
    p = _KernelParser(text)
    out = []
    while p.tok.kind != "eof":
        out.append(p.kernel())
    return out


def parse_kernel(text: str) -> L.Kernel:
    """The one kernel ``str(kernel)`` printed."""
    if not isinstance(text, str):
        raise TypeError(f"parse_kernel takes the kernel's text (str), got {type(text).__name__}")
    p = _KernelParser(text)
    k = p.kernel()
    if p.tok.kind != "eof":
        raise p.error(f"expected the end of the text after kernel {k.name}, found {p.tok.describe()}",
                      hint="parse_kernels reads several")
    return k


__all__ = ["parse_kernel", "parse_kernels"]
