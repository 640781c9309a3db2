"""Readable text of loop-IR kernels (``str(kernel)``)."""

from __future__ import annotations

from . import loop as L

_BIN_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&", "or": "|", "xor": "^"}
_CMP_SYM = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _idx(i) -> str:
    return str(i)


def _index_str(load_or_store) -> str:
    if load_or_store.flat:
        poly, extra = load_or_store.index
        s = str(poly)
        if extra is not None:
            s = f"{s} + {expr_str(extra)}" if not (isinstance(poly, int) and poly == 0) else expr_str(extra)
        return f"[[{s}]]"
    return "[" + ", ".join(expr_str(i) if isinstance(i, L.Expr) else _idx(i) for i in load_or_store.index) + "]"


def expr_str(e) -> str:
    if isinstance(e, L.Const):
        return repr(e.value) if e.dtype.is_float else str(e.value)
    if isinstance(e, L.Var):
        return e.name
    if isinstance(e, L.Load):
        return f"{e.buffer.name}{_index_str(e)}"
    if isinstance(e, L.IndexValue):
        return f"idx({e.value})"
    if isinstance(e, L.Unary):
        return f"{e.fn}({expr_str(e.x)})"
    if isinstance(e, L.Binary):
        if e.op in _BIN_SYM:
            return f"({expr_str(e.a)} {_BIN_SYM[e.op]} {expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, L.Compare):
        return f"({expr_str(e.a)} {_CMP_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, L.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, L.Cast):
        return f"{e.dtype.short}({expr_str(e.x)})"
    if isinstance(e, L.Reduce):
        loops = ", ".join(f"{v} < {ext}" for v, ext in e.loops)
        vec = " vector" if e.vector else ""
        return f"{e.op}{vec}({loops}: {expr_str(e.body)})"
    return f"<{type(e).__name__}>"


def stmt_lines(s, depth: int) -> list[str]:
    pad = "  " * depth
    if isinstance(s, L.For):
        head = f"{pad}{'' if s.kind == 'serial' else s.kind + ' '}for {s.var} in 0..{s.extent}"
        if s.kind == "parallel" and s.work is not None:
            head += f"  (threads if {s.work} >= {s.grain})"
        out = [head + ":"]
        for b in s.body:
            out.extend(stmt_lines(b, depth + 1))
        return out
    if isinstance(s, L.Store):
        return [f"{pad}{s.buffer.name}{_index_str(s)} = {expr_str(s.value)}"]
    if isinstance(s, L.Let):
        return [f"{pad}let {s.var.name}: {s.var.dtype.short} = {expr_str(s.value)}"]
    if isinstance(s, L.Alloc):
        return [f"{pad}alloc {s.buffer}"]
    return [f"{pad}<{type(s).__name__}>"]


def kernel_str(k) -> str:
    args = ", ".join(f"{b.role} {b}" for b in k.buffers)
    syms = ", ".join(str(s) for s in k.syms)
    lines = [f"kernel {k.name}({args}){'; syms ' + syms if syms else ''}  [{k.kind}]"]
    for s in k.body:
        lines.extend(stmt_lines(s, 1))
    return "\n".join(lines)
