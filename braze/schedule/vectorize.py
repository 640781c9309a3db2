"""Stage ``vectorize``: the innermost loop of a nest becomes ``kind="vector"`` when its
body is float32 arithmetic (16-bit loads and stores widened and rounded by stage ``widen``
included) over contiguous or invariant accesses (C code gives it a
vector main loop and a scalar remainder, so any run-time extent works; a static extent below
``MIN_LANES`` stays scalar, as its vector part would never run); a reduction
whose innermost loop is contiguous gets ``Reduce.vector`` (vector lanes, then a
horizontal combine). Needs flat accesses.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import (
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    For,
    IndexValue,
    Kernel,
    Let,
    Load,
    Reduce,
    Select,
    Store,
    Unary,
    Var,
)
from ..ir.types import DType
from .nest import coeff, with_body
from .widen import HALF

F32 = DType.float32
BOOL = DType.bool
_VECTOR_REDUCE = ("sum", "max", "min", "prod")
MIN_LANES = 8  # float32 lanes of the narrowest vector ISA braze emits (AVX2)
# Output bytes from which a kernel's vector stores bypass the caches (non-temporal): no read
# for ownership, no eviction of what the kernel still reads. Measured (2 threads, x + 1 over
# float32 arrays; 480 MiB L3 shared with other tenants): streaming costs 5% at 32 MiB, gains 10%
# at 64 MiB and 58% at 96 MiB. On a Zen 5 with a 32 MiB L3, 16 MiB gave 0.98-1.00x the time
# on the depthwise convnet (docs/tuning.md). The kernel's ``stream`` carries it, so a dump
# edited by hand, or a tuner, may set another.
STREAM_BYTES = 48 << 20


def vector_ok(e: Expr, v, memo=None) -> bool:
    """Can ``e`` be evaluated for VL consecutive values of loop var v at once?"""
    memo = {} if memo is None else memo
    k = id(e)
    if k in memo:
        return memo[k]
    if v not in L.free_loop_vars(e):
        r = True
    elif isinstance(e, Load):
        r = e.dtype in (F32, BOOL)
    elif isinstance(e, (Const, Var)):
        r = True
    elif isinstance(e, IndexValue) or e.dtype not in (F32, BOOL):
        r = False
    elif isinstance(e, Reduce):
        r = (e.op in _VECTOR_REDUCE and e.dtype == F32 and vector_ok(e.body, v, memo)
             and not any(v in S.free_syms(ext) for _, ext in e.loops))
    elif isinstance(e, Compare):
        r = e.a.dtype == F32 and vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
    elif isinstance(e, Cast):
        if isinstance(e.x, Load) and e.dtype == F32 and (e.x.dtype.is_int or e.x.dtype in HALF):
            r = True  # converted lane by lane, or (16-bit, contiguous) by braze_half.h's bz_ld_*
        elif isinstance(e.x, Cast) and e.dtype == F32 and e.x.dtype in HALF:
            r = e.x.x.dtype == F32 and vector_ok(e.x.x, v, memo)  # stage widen's explicit rounding
        else:
            r = e.x.dtype in (F32, BOOL) and vector_ok(e.x, v, memo)
    elif isinstance(e, Select):
        r = all(vector_ok(x, v, memo) for x in (e.cond, e.a, e.b))
    elif isinstance(e, Binary) and e.op == "uniform":
        r = True  # integer operands: the C computes it lane by lane
    elif isinstance(e, Binary):
        if e.dtype == BOOL:
            r = e.op in ("and", "or", "xor") and vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
        else:
            r = vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
    elif isinstance(e, Unary):
        r = (e.dtype == F32 or e.fn == "not") and e.fn != "bitcast" and vector_ok(e.x, v, memo)
    else:
        r = False
    memo[k] = r
    return r


def _unit_stride(x, v) -> bool:
    """A flat load or store whose offset steps by exactly one element as v steps."""
    if not x.flat:
        return False
    poly, extra = x.index
    if extra is not None and v in L.free_loop_vars(extra):
        return False
    c = coeff(poly, v)
    return isinstance(c, int) and c == 1


def _stored(s: Store) -> Expr:
    """The float32 value a store writes: into a 16-bit buffer, the value it rounds (stage widen)."""
    if s.buffer.dtype in HALF and isinstance(s.value, Cast) and s.value.dtype == s.buffer.dtype:
        return s.value.x
    return s.value


def _store_vector_ok(s: Store, v) -> bool:
    """float32, a 16-bit float rounded from float32, or a bool (a mask's lanes as bytes)."""
    return (s.buffer.dtype in (F32, BOOL) or s.buffer.dtype in HALF and _stored(s) is not s.value) and \
        _unit_stride(s, v)


def _contiguous(e: Expr, v) -> bool:
    """Every load that depends on v reads consecutive elements as v steps."""
    return all(_unit_stride(x, v) for x in L.walk(e)
               if isinstance(x, Load) and v in L.free_loop_vars(x))


def _mark_reduce_vectors(e: Expr) -> Expr:
    def fn(y):
        if isinstance(y, Reduce) and y.loops and not y.vector and y.dtype == F32 and y.op in _VECTOR_REDUCE:
            r, ext = y.loops[-1]
            # fewer elements than the narrowest vector (a 2x2 pool's window row): the vector loop
            # would never run, and its horizontal combine would cost every reduction
            if isinstance(ext, int) and ext < MIN_LANES:
                return y
            if vector_ok(y.body, r) and _contiguous(y.body, r):
                return Reduce(y.op, y.body, y.loops, y.dtype, True)
        return y
    return L.map_expr(e, fn)


def _mark_stmt(s):
    """A copy of ``s`` with its reductions marked (loops copied, so kinds can be set on them)."""
    if isinstance(s, For):
        return replace(s, body=[_mark_stmt(x) for x in s.body])
    if isinstance(s, Store):
        return Store(s.buffer, s.index, _mark_reduce_vectors(s.value), s.flat)
    if isinstance(s, Let):
        return Let(s.var, _mark_reduce_vectors(s.value))
    return s


def _vectorize_nest(s: For) -> None:
    """Every innermost loop of the nest (one whose body is Stores only): one in a perfect
    nest, several in a stitch nest with row buffers (stage ``keep``)."""
    for inner in [x for x in L.walk_stmts([s]) if isinstance(x, For)]:
        stores = inner.body
        if inner.kind != "serial" or not stores or not all(isinstance(x, Store) for x in stores):
            continue
        v = inner.var
        if isinstance(inner.extent, int) and inner.extent < MIN_LANES:  # its vector part would never run
            continue
        if all(_store_vector_ok(x, v) and vector_ok(_stored(x), v) and not _gathering_reduction(_stored(x), v)
               for x in stores):
            inner.kind = "vector"


def _gathering_reduction(e: Expr, v) -> bool:
    """``e`` holds a reduction that could run in vector lanes along its own innermost loop but
    reads strided along ``v`` (a per-channel sum over N, H, W in NCHW): lanes over ``v`` would
    gather VL scattered elements at every step of the reduction, and keep the loop over ``v``
    from running in parallel."""
    return any(isinstance(y, Reduce) and y.vector and not _contiguous(y.body, v) for y in L.walk(e))


def streamed_outputs(kernel: Kernel) -> list:
    """Float32 outputs that a vector loop stores: their stores may stream (bz_st_nt)."""
    stored = {s.buffer.name for f in L.walk_stmts(kernel.body) if isinstance(f, For) and f.kind == "vector"
              for s in L.walk_stmts(f.body) if isinstance(s, Store)}
    return [b for b in kernel.outputs() if b.dtype == F32 and b.name in stored]


def vectorize(kernel: Kernel) -> Kernel:
    """Vectorizable innermost loops and reductions, marked; where vector loops store float32
    outputs, the kernel's ``stream`` threshold (kept if already set)."""
    body = [_mark_stmt(s) for s in kernel.body]
    for s in body:
        if isinstance(s, For):
            _vectorize_nest(s)
    k = with_body(kernel, body)
    if k.stream is None and streamed_outputs(k):
        k.stream = STREAM_BYTES
    return k


__all__ = ["STREAM_BYTES", "streamed_outputs", "vector_ok", "vectorize"]
