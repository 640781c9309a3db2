"""Core of the loop lowering: op registration, ``TensorFn``, ``LowerCtx`` and the
scalar expression helpers every lowering builds with."""

from __future__ import annotations

import math
from typing import Callable

from ..errors import BrazeError
from ..ir import loop as L
from ..ir.graph import Module
from ..ir.loop import Binary, Cast, Compare, Const, Expr, IndexValue, Reduce, Select, Unary
from ..ir.sym import IntLike
from ..ir.types import DType, TensorType, Typed
from ..ops.registry import get_op


I64 = DType.int64
BOOL = DType.bool

# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


LOWERINGS: dict[str, Callable] = {}  # op name -> its loop lowering, filled as this package loads


def lowering(*names: str):
    """Register ``fn(ctx, *inputs, **attrs)`` as the loop lowering of ops ``names`` (each a
    registered op: op semantics live in braze/ops, their loop form here)."""

    def deco(fn):
        for n in names:
            get_op(n)  # an unknown name is an error here, not a silent entry
            LOWERINGS[n] = fn
        return fn

    return deco


def lowered_ops() -> list[str]:
    return sorted(LOWERINGS)


# ---------------------------------------------------------------------------
# tensor index functions and the lowering context
# ---------------------------------------------------------------------------


class TensorFn(Typed):
    """An index function ``idx -> Expr`` with the tensor's type. Calls are memoized
    per index, so the same element requested twice is the same Expr object."""

    __slots__ = ("fn", "type", "_memo")

    def __init__(self, fn: Callable, type: TensorType):
        self.fn = fn
        self.type = type
        self._memo: dict = {}

    def __call__(self, idx) -> Expr:
        idx = tuple(idx)
        if len(idx) != self.rank:
            raise BrazeError(f"lowering bug: index {idx} has {len(idx)} entries for a tensor {self.type}")
        try:
            return self._memo[idx]
        except KeyError:
            pass
        except TypeError:
            return self._call(idx)
        e = self._call(idx)
        self._memo[idx] = e
        return e

    def _call(self, idx):
        e = self.fn(idx)
        if not isinstance(e, Expr):
            raise BrazeError(f"lowering bug: index function returned {type(e).__name__}, expected an Expr")
        return cast(e, self.dtype)


class LowerCtx:
    """What an op's lowering may consult: its node, output types, the module."""

    def __init__(self, node, module: Module | None, state: "_State"):
        self.node = node
        self.module = module
        self._state = state
        self.out_types = [v.type for v in node.outputs]

    @property
    def out_type(self) -> TensorType:
        return self.out_types[0]

    def error(self, what: str, hint: str | None = None) -> BrazeError:
        return BrazeError(f"lowering {self.node.op}: {what}", where=str(self.node.loc) if self.node.loc else None,
                          hint=hint)

    def memo(self, key, build: Callable):
        """Build once per key (per node): keeps shared sub-results (a row's max) one object."""
        d = self._state.memo.setdefault(id(self.node), {})
        if key not in d:
            d[key] = build()
        return d[key]

    def reduce(self, op: str, body: Callable, extents, dtype: DType) -> Expr:
        """``op`` over fresh loop vars with ``extents``; ``body(vars) -> Expr``.

        With no extents (a 0-d input, or no axes) there is one element: the reduction
        is that element itself, and the position of an arg reduction is 0."""
        if not extents:
            return Const(0, I64) if op in ("argmax", "argmin") else cast(body([]), dtype)
        vs = [L.loop_var(e, "r") for e in extents]
        b = body(vs)
        if op not in ("argmax", "argmin"):
            b = cast(b, dtype)
        return Reduce(op, b, tuple(zip(vs, extents)), dtype)


class _State:
    def __init__(self):
        self.memo: dict = {}


# ---------------------------------------------------------------------------
# expression helpers
# ---------------------------------------------------------------------------


def const(v, dt: DType) -> Const:
    if dt.is_float:
        return Const(float(v), dt)
    if dt is BOOL:
        return Const(bool(v), dt)
    return Const(int(v), dt)


def cast(e: Expr, dt: DType) -> Expr:
    if e.dtype == dt:
        return e
    if e.dtype.is_narrow or dt.is_narrow:
        return _narrow_cast(e, dt)
    if isinstance(e, Const):
        v = e.value
        if dt is BOOL:
            return Const(bool(v), dt)
        if dt.is_float:
            return Const(float(v), dt)
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return Cast(e, dt)
        return Const(int(v), dt)
    return Cast(e, dt)


def _narrow_cast(e: Expr, dt: DType) -> Expr:
    """A cast from or to a narrow type, through the one wide type its C conversion takes or gives
    (braze_narrow.h): float32 for a minifloat, int64 for a narrow integer (float sources convert
    directly: truncation then wrap-around). The emitter sees only those four forms."""
    src = e.dtype
    if src.is_narrow:
        wide = DType.float32 if src.is_minifloat else I64
        return cast(Cast(e, wide), dt)
    if dt.is_minifloat and src not in (DType.float32, DType.float64):
        e = cast(e, DType.float32)
    elif not dt.is_minifloat and not (src.is_int or src in (DType.float32, DType.float64)):
        e = cast(e, DType.float32 if src.is_float else I64)
    return Cast(e, dt)


def _b(op, a: Expr, b: Expr, dt: DType | None = None) -> Expr:
    dt = dt or a.dtype
    return Binary(op, cast(a, dt), cast(b, dt), dt)


def add(a, b): return _b("add", a, b)
def sub(a, b): return _b("sub", a, b)
def mul(a, b): return _b("mul", a, b)
def div(a, b): return _b("div", a, b)
def vmax(a, b): return _b("max", a, b)
def vmin(a, b): return _b("min", a, b)
def un(fn, x): return Unary(fn, x, x.dtype)
def cmp(op, a, b): return Compare(op, a, cast(b, a.dtype))
def select(c, a, b): return Select(cast(c, BOOL), a, cast(b, a.dtype), a.dtype)


def fconst(v, like: Expr) -> Const:
    return const(v, like.dtype)


def intlike_value(x: IntLike, dt: DType) -> Expr:
    """An IntLike as a value of dtype dt."""
    if isinstance(x, int):
        return const(x, dt)
    return cast(IndexValue(x), dt)
