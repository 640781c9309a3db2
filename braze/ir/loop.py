"""Loop IR: the kernel-level representation between the graph IR and C.

A ``Kernel`` is a list of statements over row-major contiguous ``Buffer``s
with symbolic shapes; it receives the value of each symbol as an ``int64_t``.

* Index expressions are braze ``IntLike``s (``braze.ir.sym``); loop variables
  are ``Sym``s with ``lo=0`` (their extents are registered with
  ``loop_var``, so index helpers can prove ``0 <= i < extent``). An index may
  also be an integer scalar ``Expr`` (a gathered, data-dependent index).
* Scalar expressions (immutable, hashable, compared structurally so a
  common subexpression is the same object as far as dicts care):
  ``Const Var Load Unary Binary Compare Select Cast IndexValue Reduce``.
* Statements: ``For Store Let Alloc``.

``str(kernel)`` prints the nested form (``BRAZE_DUMP`` shows it).

Loads and stores start with one index per buffer dim (``flat=False``); the
schedule rewrites them to one flat element offset (``flat=True``, the index
is ``(poly, extra)``: an ``IntLike`` plus an optional integer ``Expr``).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from dataclasses import dataclass, replace
from typing import Union

from . import sym as S
from .sym import IntLike, Sym
from .types import DType

# ---------------------------------------------------------------------------
# loop variables
# ---------------------------------------------------------------------------

class LoopVar(Sym):
    """A loop variable: a ``Sym`` ranging over ``[0, extent)`` that carries its extent."""

    __slots__ = ("extent",)

    def __init__(self, name: str, extent: IntLike):
        super().__init__(name, 0, extent - 1 if isinstance(extent, int) and extent >= 1 else None)
        object.__setattr__(self, "extent", extent)


_KERNEL_COUNTER: contextvars.ContextVar = contextvars.ContextVar("braze_loop_var_counter", default=None)
_PROCESS_COUNTER = itertools.count(1)


@contextlib.contextmanager
def kernel_names(start: int = 1):
    """Number the loop variables made inside this block from ``start``, so a kernel's text (and
    the compile-cache key) depends on the kernel only, not on what the process built before."""
    token = _KERNEL_COUNTER.set(itertools.count(start))
    try:
        yield
    finally:
        _KERNEL_COUNTER.reset(token)


def loop_var(extent: IntLike, prefix: str = "i") -> LoopVar:
    """A fresh loop variable ranging over ``[0, extent)`` (unique within the current
    ``kernel_names`` block, or within the process outside one)."""
    counter = _KERNEL_COUNTER.get() or _PROCESS_COUNTER
    return LoopVar(f"_{prefix}{next(counter)}", extent)


def is_loop_var(s) -> bool:
    return isinstance(s, LoopVar)


def loop_extent(s: Sym) -> IntLike | None:
    return s.extent if isinstance(s, LoopVar) else None


# ---------------------------------------------------------------------------
# scalar expressions
# ---------------------------------------------------------------------------


class Expr:
    """Base of scalar expressions; every subclass has a ``dtype`` field."""

    __slots__ = ()
    dtype: DType

    def __str__(self):
        from .loop_printer import expr_str
        return expr_str(self)

    __repr__ = __str__

    def __getstate__(self):  # pickle and copy: not what nodes cache (_cache_hash, _node_cached)
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


Index = Union[IntLike, Expr]


@dataclass(frozen=True, repr=False)
class Const(Expr):
    value: object  # float | int | bool
    dtype: DType


@dataclass(frozen=True, repr=False)
class Var(Expr):
    """A scalar bound by a ``Let``."""
    name: str
    dtype: DType


@dataclass(frozen=True, repr=False)
class Load(Expr):
    buffer: "Buffer"
    index: tuple  # per dim (IntLike | Expr), or (poly, extra) when flat
    flat: bool = False

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


UNARY_FNS = ("neg", "abs", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "sigmoid",
             "silu", "gelu", "gelu_tanh", "sin", "cos", "floor", "ceil", "round", "not", "bitnot", "bitcast",
             "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
             "erfc", "trunc", "divisor")
# computed by the C library's function of that name (tanf, asin, ...), in vectors lane by lane: rare in models,
# so no vector math of their own
LIBM_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
              "erfc", "trunc")
# divisor(b): b, an integer divisor (data); where b is 0 (eager raises) the kernel fails (KERNEL_DIV_ZERO)
# and the division gives 0. It stays where it is (schedule.hoist): an empty loop divides nothing
# bitcast: x's bits as the node's dtype (of x's width); shl/shr: braze.ops.bitwise's shifts (a shift
# out of the width's range gives the sign's fill)
# uniform(seed, counter): braze.ops.creation's counter-based random float32 in [0, 1), both int64
# axis_index(i, n): a gathered index i (data), counted from the end when negative, in [0, n); where i is
# outside [-n, n) (eager raises) the read is clamped into the axis and the kernel fails (KERNEL_BAD_INDEX)
BINARY_OPS = ("add", "sub", "mul", "div", "mod", "fmod", "pow", "max", "min", "and", "or", "xor", "shl", "shr",
              "uniform", "axis_index")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
REDUCE_OPS = ("sum", "prod", "max", "min", "argmax", "argmin")


@dataclass(frozen=True, repr=False)
class Unary(Expr):
    fn: str
    x: Expr
    dtype: DType


@dataclass(frozen=True, repr=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, repr=False)
class Compare(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType = DType.bool


@dataclass(frozen=True, repr=False)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, repr=False)
class Cast(Expr):
    x: Expr
    dtype: DType


@dataclass(frozen=True, repr=False)
class IndexValue(Expr):
    """An index (IntLike) used as a value."""
    value: IntLike
    dtype: DType = DType.int64


@dataclass(frozen=True, repr=False)
class Reduce(Expr):
    """``op`` of ``body`` over the nested ``loops`` ((var, extent), outer first).

    argmax/argmin give the int64 position along the (single) loop, first
    occurrence. ``vector``: the schedule found the innermost loop contiguous,
    so C code may vectorize it with a horizontal combine at the end.
    """
    op: str
    body: Expr
    loops: tuple  # ((Sym, IntLike), ...)
    dtype: DType
    vector: bool = False


def _cache_hash(cls):
    """Expressions are trees that passes key dicts by (hoist's memo, CSE): the dataclass hash walks
    the whole tree at every lookup, which made a large kernel's schedule quadratic (a trilinear
    volume grid_sample: 2.3M hash calls, 30 s). Computed once per node instead, in its __dict__;
    ``Expr.__getstate__`` leaves it out, since string hashes differ between processes."""
    tree_hash = cls.__hash__

    def __hash__(self):
        h = self.__dict__.get("_hash")
        if h is None:
            h = tree_hash(self)
            object.__setattr__(self, "_hash", h)
        return h
    cls.__hash__ = __hash__
    return cls


for _cls in (Const, Var, Load, Unary, Binary, Compare, Select, Cast, IndexValue, Reduce):
    _cache_hash(_cls)


def children(e: Expr) -> tuple:
    """Sub-expressions of ``e`` (including integer Exprs inside indices)."""
    if isinstance(e, (Unary, Cast)):
        return (e.x,)
    if isinstance(e, (Binary, Compare)):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Load):
        return tuple(i for i in e.index if isinstance(i, Expr))
    if isinstance(e, Reduce):
        return (e.body,)
    return ()


def _int_syms(x, kids: list) -> frozenset:
    out = frozenset().union(*kids)
    if isinstance(x, IndexValue):
        out |= S.free_syms(x.value)
    elif isinstance(x, Load):
        for i in x.index:
            if not isinstance(i, Expr) and i is not None:
                out |= S.free_syms(i)
    elif isinstance(x, Reduce):
        for _, ext in x.loops:
            out |= S.free_syms(ext)
    return out


def int_syms(e: Expr) -> frozenset:
    """Symbols appearing in IntLike parts of ``e`` (indices, IndexValues, extents)."""
    return _node_cached(e, "_int_syms", _int_syms)


def _node_cached(e: Expr, key: str, combine):
    """``combine(node, [its children's values])``, bottom-up, kept on each node under ``key``: an
    expression never changes, and the schedule asks for these of every node of a tree (hoist), which
    walking the subtree each time made quadratic. Iterative, as deep trees exist."""
    stack = [(e, False)]
    while stack:
        x, ready = stack.pop()
        if key in x.__dict__:
            continue
        kids = children(x)
        if ready:
            object.__setattr__(x, key, combine(x, [c.__dict__[key] for c in kids]))
        else:
            stack.append((x, True))
            stack.extend((c, False) for c in kids if key not in c.__dict__)
    return e.__dict__[key]


def _loop_syms(i) -> frozenset:
    return frozenset(s for s in S.free_syms(i) if is_loop_var(s))


def _free_lv(e, kids: list) -> frozenset:
    r = frozenset().union(*kids)
    if isinstance(e, IndexValue):
        r = _loop_syms(e.value)
    elif isinstance(e, Load):
        for i in e.index:
            if not isinstance(i, Expr) and i is not None:
                r |= _loop_syms(i)
    elif isinstance(e, Reduce):
        for _, ext in e.loops:
            r |= _loop_syms(ext)
        r = r - frozenset(v for v, _ in e.loops)
    return r


def free_loop_vars(e: Expr) -> frozenset:
    """Loop vars ``e`` depends on (a Reduce's own loop vars are bound inside it)."""
    return _node_cached(e, "_free_loop_vars", _free_lv)


def vars_used(e: Expr) -> frozenset:
    """Names of the Let-bound ``Var``s ``e`` reads."""
    return _node_cached(e, "_vars_used", lambda x, kids: frozenset([x.name]).union(*kids) if isinstance(x, Var)
                        else frozenset().union(*kids))


def map_expr(e: Expr, fn, index_fn=None) -> Expr:
    """Rebuild ``e`` bottom-up; ``fn(new_node) -> Expr`` may replace each node;
    ``index_fn(IntLike) -> IntLike`` rewrites IntLike parts."""
    memo: dict = {}

    def go(x):
        k = id(x)
        if k in memo:
            return memo[k][1]
        ix = index_fn or (lambda i: i)
        if isinstance(x, Unary):
            y = replace(x, x=go(x.x))
        elif isinstance(x, Cast):
            y = replace(x, x=go(x.x))
        elif isinstance(x, (Binary, Compare)):
            y = replace(x, a=go(x.a), b=go(x.b))
        elif isinstance(x, Select):
            y = replace(x, cond=go(x.cond), a=go(x.a), b=go(x.b))
        elif isinstance(x, Load):
            y = replace(x, index=tuple(go(i) if isinstance(i, Expr) else (None if i is None else ix(i))
                                       for i in x.index))
        elif isinstance(x, IndexValue):
            y = replace(x, value=ix(x.value))
        elif isinstance(x, Reduce):
            y = replace(x, body=go(x.body), loops=tuple((v, ix(ext)) for v, ext in x.loops))
        else:
            y = x
        if y == x:
            y = x
        z = fn(y)
        memo[k] = (x, z)
        return z

    return go(e)


def subs_expr(e: Expr, mapping: dict) -> Expr:
    """Substitute symbols (loop vars) in every IntLike part of ``e``."""
    if not mapping:
        return e
    return map_expr(e, lambda y: y, lambda i: S.subs(i, mapping))


def walk(e: Expr):
    """Every node of ``e``, pre-order (shared nodes once)."""
    seen = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(children(x))


def outer_reduces(e: Expr):
    """The reductions in ``e`` that no other reduction of it holds."""
    if isinstance(e, Reduce):
        yield e
        return
    for c in children(e):
        yield from outer_reduces(c)


# ---------------------------------------------------------------------------
# buffers, statements, kernels
# ---------------------------------------------------------------------------

ROLES = ("in", "out", "temp")


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: DType
    shape: tuple  # IntLikes, row-major contiguous
    role: str = "in"
    const_name: str | None = None  # set for a module constant passed as an input

    def __post_init__(self):
        assert self.role in ROLES, self.role

    def numel(self) -> IntLike:
        return S.prod(self.shape)

    def strides(self) -> tuple:
        out = []
        st: IntLike = 1
        for d in reversed(self.shape):
            out.append(st)
            st = S.mul(st, d)
        return tuple(reversed(out))

    def __str__(self):
        return f"{self.name}: {self.dtype.short}[{', '.join(str(d) for d in self.shape)}]"


class Stmt:
    def __str__(self):
        from .loop_printer import stmt_lines
        return "\n".join(stmt_lines(self, 0))


FOR_KINDS = ("serial", "parallel", "vector", "unroll", "grid", "block", "thread")  # the last three: schedule/gpu.py


@dataclass(eq=False)
class For(Stmt):
    var: Sym
    extent: IntLike
    body: list
    kind: str = "serial"
    work: IntLike | None = None  # parallel: run threads only when work >= grain
    grain: int = 32768
    jam: bool = False  # vector: whole vectors emitted side by side, their statements interleaved (schedule/jam.py)

    def __post_init__(self):
        assert self.kind in FOR_KINDS, self.kind


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: tuple
    value: Expr
    flat: bool = False


@dataclass(eq=False)
class Let(Stmt):
    var: Var
    value: Expr


@dataclass(eq=False)
class Alloc(Stmt):
    """A kernel-local buffer (role temp), live to the end of the enclosing block."""
    buffer: Buffer


@dataclass(eq=False)
class Kernel:
    name: str
    buffers: list  # Buffer, in argument order
    syms: list  # Sym, in argument order after the buffers
    body: list
    kind: str = "pointwise"  # pointwise | reduction | stitch (informational)
    scheduled: bool = False
    # its output is written over an input of its type (memory planning: in_place_elementwise), so
    # the C declares no buffer restrict
    in_place: bool = False
    # bytes from which a float32 output that vector loops store streams past the caches (set by
    # stage vectorize, schedule/vectorize.py STREAM_BYTES); None: it never does
    stream: int | None = None

    def inputs(self) -> list:
        return [b for b in self.buffers if b.role == "in"]

    def outputs(self) -> list:
        return [b for b in self.buffers if b.role == "out"]

    def __str__(self):
        from .loop_printer import kernel_str
        return kernel_str(self)


def walk_stmts(stmts):
    """Every statement, pre-order."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from walk_stmts(s.body)


def stmt_exprs(s: Stmt) -> list:
    if isinstance(s, Store):
        return [s.value] + [i for i in s.index if isinstance(i, Expr)]
    if isinstance(s, Let):
        return [s.value]
    return []


__all__ = ["Alloc", "Binary", "Buffer", "Cast", "Compare", "Const", "Expr", "For", "Index", "IndexValue",
           "Kernel", "Let", "Load", "LoopVar", "Reduce", "Select", "Stmt", "Store", "Unary", "Var", "children",
           "free_loop_vars", "int_syms", "is_loop_var", "kernel_names", "loop_extent", "loop_var", "map_expr", "subs_expr",
           "vars_used", "walk", "walk_stmts", "with_children", "is_trivial", "stmt_exprs"]


def with_children(e: Expr, new: list) -> Expr:
    """``e`` with its ``children(e)`` replaced by ``new`` (same order)."""
    if isinstance(e, (Unary, Cast)):
        y = replace(e, x=new[0])
    elif isinstance(e, (Binary, Compare)):
        y = replace(e, a=new[0], b=new[1])
    elif isinstance(e, Select):
        y = replace(e, cond=new[0], a=new[1], b=new[2])
    elif isinstance(e, Load):
        it = iter(new)
        y = replace(e, index=tuple(next(it) if isinstance(i, Expr) else i for i in e.index))
    elif isinstance(e, Reduce):
        y = replace(e, body=new[0])
    else:
        return e
    return e if y == e else y


def is_trivial(e: Expr) -> bool:
    return isinstance(e, (Const, Var, IndexValue))


def kernel_syms(k: Kernel) -> list:
    """The symbols (not loop variables) ``k`` reads, sorted by name: its ``int64_t`` arguments.
    Here, not in lowering or the schedule, so both can ask without importing each other."""
    syms: set = set()
    for b in k.buffers:
        for d in b.shape:
            syms |= S.free_syms(d)
    for s in walk_stmts(k.body):
        if isinstance(s, For):
            syms |= S.free_syms(s.extent)
            if s.work is not None:
                syms |= S.free_syms(s.work)
        if isinstance(s, (Store, Let)):
            for e in stmt_exprs(s):
                syms |= int_syms(e)
            if isinstance(s, Store):
                for i in s.index:
                    if not isinstance(i, Expr) and i is not None:
                        syms |= S.free_syms(i)
    return sorted((s for s in syms if not is_loop_var(s)), key=lambda s: s.name)
