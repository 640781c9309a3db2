"""Stage ``widen``: a kernel over bfloat16 or float16 tensors computes in float32.

Before it, a kernel's arithmetic has its tensors' dtype (``x[i] + y[i]`` is bf16). After it:

- a load of a 16-bit argument is widened at once: ``f32(x[i])``;
- every value of a 16-bit type becomes float32: arithmetic, ``let`` variables, reductions
  (which therefore accumulate in float32) and kernel-local buffers (stage ``keep``'s row
  buffers, ``materialize``'s temporaries);
- a store into a 16-bit argument rounds once: ``out[i] = bf16(v)``;
- an explicit cast to a 16-bit type inside the kernel still rounds there: ``f32(bf16(v))``.

So a fused chain rounds only where its result is stored, as inductor's generated CPU code
does; the reference rounds after every op, and tests compare the two within bf16/f16
tolerances. The kernel's arguments keep their 16-bit type: the host passes 16-bit memory.
Conversions are braze_half.h's (round to nearest even, subnormals kept). A kernel without
16-bit values is returned unchanged. Runs after ``keep`` (whose row buffers it widens) and
before ``vectorize``.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir.loop import Alloc, Buffer, Cast, Expr, For, Kernel, Let, Load, Reduce, Store, Var
from ..ir.types import DType
from .nest import with_body

F32 = DType.float32
HALF = (DType.bfloat16, DType.float16)


def _uses_half(kernel: Kernel) -> bool:
    if any(b.dtype in HALF for b in kernel.buffers):
        return True
    for s in L.walk_stmts(kernel.body):
        if isinstance(s, Alloc) and s.buffer.dtype in HALF:
            return True
        if isinstance(s, Let) and s.var.dtype in HALF:
            return True
        for e in _stmt_exprs(s):
            if any(x.dtype in HALF for x in L.walk(e)):
                return True
    return False


def _stmt_exprs(s) -> tuple:
    if isinstance(s, Store):
        return (s.value, *(i for i in s.index if isinstance(i, Expr)))
    if isinstance(s, Let):
        return (s.value,)
    return ()


class _Widen:
    def __init__(self):
        self.local: dict = {}  # id(16-bit kernel-local Buffer) -> its float32 twin

    def buffer(self, b: Buffer) -> Buffer:
        return self.local.get(id(b), b)

    def node(self, e: Expr) -> Expr:
        """One node, its children already widened (L.map_expr's callback)."""
        if isinstance(e, Load):
            b = self.buffer(e.buffer)
            if b is not e.buffer:
                return replace(e, buffer=b)
            return Cast(e, F32) if b.dtype in HALF else e
        if isinstance(e, Cast):
            if e.dtype in HALF:  # an explicit rounding inside the kernel
                return Cast(e, F32)
            return e.x if e.dtype == F32 and e.x.dtype == F32 else e
        if isinstance(e, Var) and e.dtype in HALF:
            return Var(e.name, F32)
        if getattr(e, "dtype", None) in HALF:  # Const, Unary, Binary, Select, Reduce
            return replace(e, dtype=F32)
        return e

    def expr(self, e: Expr) -> Expr:
        return L.map_expr(e, self.node)

    def stmt(self, s):
        if isinstance(s, For):
            return replace(s, body=[self.stmt(x) for x in s.body])
        if isinstance(s, Alloc):
            if s.buffer.dtype not in HALF:
                return s
            wide = replace(s.buffer, dtype=F32)
            self.local[id(s.buffer)] = wide
            return Alloc(wide)
        if isinstance(s, Let):
            return Let(Var(s.var.name, F32) if s.var.dtype in HALF else s.var, self.expr(s.value))
        if isinstance(s, Store):
            b = self.buffer(s.buffer)
            index = tuple(self.expr(i) if isinstance(i, Expr) else i for i in s.index)
            v = self.expr(s.value)
            if b.dtype in HALF:
                # round once, here (an explicit rounding of the same type just before is the same)
                inner = v.x.x if isinstance(v, Cast) and isinstance(v.x, Cast) and v.x.dtype == b.dtype else v
                v = Cast(inner, b.dtype)
            return Store(b, index, v, s.flat)
        return s


def widen(kernel: Kernel) -> Kernel:
    """``kernel`` computing in float32 where it had bfloat16 / float16 values (module docs)."""
    if not _uses_half(kernel):
        return kernel
    return with_body(kernel, [_Widen().stmt(s) for s in kernel.body])


__all__ = ["HALF", "widen"]
