"""The CUDA schedule: ``GPU_STAGES``, the CPU stages that only reshape loops, then ``grid``.

``grid`` marks a kernel's outer perfect nest (each loop's body is the next loop alone) as
``grid`` loops: their iterations are spread over every GPU thread of the launch, one
flattened index, grid-stride (codegen/cuda_kernel.py). What is inside the innermost
grid loop runs on its thread, serially.

    for _i1 in 0..b:                 grid for _i1 in 0..b:
      for _i2 in 0..64:         ->     grid for _i2 in 0..64:
        v3[..] = ...                     v3[..] = ...

Lets between two loops of the nest (index arithmetic and loads of buffers the kernel does not
write, which ``hoist`` moved out) move back into the inner loop first, so the nest is perfect and
the grid spans all of it (``_sink``).

A stitch or reduction kernel, whose rows reduce (a Let or Store of a long reduction at the
row's level), gets a ``block`` nest instead: each row is one block of threads; its reductions
are shared by the block's threads (a strided partial each, then warp shuffles and one step
through shared memory: braze_cuda_lib.cuh's bz_block_reduce) and
its loops become ``thread`` loops, strided over them:

    grid for _i1 in 0..b:            block for _i1 in 0..b:
      let r1 = sum(_r2 < n: ..)  ->    let r1 = sum(_r2 < n: ..)     # the block's threads
      for _i3 in 0..n: ...             thread for _i3 in 0..n: ...

Not run for the GPU: ``keep`` (a row buffer per thread would be device-heap memory),
``vectorize`` and ``parallelize`` (CPU layouts). ``widen`` runs: 16-bit tensors are stored in
16 bits and computed in float32, as on the CPU. A kernel
whose body is not one loop nest (after loop-invariant Lets) keeps serial loops and runs on one thread: correct, slow,
and counted in the compile log, so it shows where a block-level schedule is needed next.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import sym as S
from ..ir.loop import (Binary, Cast, Compare, Const, For, IndexValue, Kernel, Let, Load, Reduce, Select,
                       Store, Unary, Var, stmt_exprs, walk, walk_stmts)
from .collapse import collapse
from .flatten import flatten
from .hoist import hoist
from .materialize import materialize
from .widen import widen


def _mark(f: For, kind: str) -> For:
    body = f.body
    if len(body) == 1 and isinstance(body[0], For) and body[0].kind == "serial":
        body = [_mark(body[0], kind)]
    elif kind == "block":  # the row's loops: their iterations spread over the block's threads
        body = [replace(s, kind="thread") if isinstance(s, For) else s for s in body]
    return replace(f, kind=kind, body=body, work=None)


def _innermost(f: For) -> list:
    while len(f.body) == 1 and isinstance(f.body[0], For):
        f = f.body[0]
    return f.body


# a row reduction at least this long (or of symbolic length) is worth a block of threads
BLOCK_MIN = 64


def _row_reductions(body) -> bool:
    """Whether statements at the row's level (not inside its loops) reduce over a long row."""
    for s in body:
        if isinstance(s, (Let, Store)):
            for e in stmt_exprs(s):
                for x in walk(e):
                    if isinstance(x, Reduce) and x.op not in ("argmax", "argmin"):
                        n = S.prod(ext for _, ext in x.loops)
                        if S.is_symbolic(n) or n >= BLOCK_MIN:
                            return True
    return False


def _lets(body) -> int:
    """How many Lets the body starts with (loop-invariant scalars that ``hoist`` put first: each
    thread computes them again, which costs less than a launch of their own)."""
    n = 0
    while n < len(body) and isinstance(body[n], Let):
        n += 1
    return n


# what a Let may hold to be computed again by every thread: scalar arithmetic and loads of buffers the
# kernel does not write; no reduction
_SCALAR = (Const, Var, Unary, Binary, Compare, Select, Cast, IndexValue)


def _repeatable(s, written: set[str]) -> bool:
    return isinstance(s, Let) and all(isinstance(x, _SCALAR) or (isinstance(x, Load) and x.buffer.name not in written)
                                      for e in stmt_exprs(s) for x in walk(e))


def _sink(f: For, written: set[str]) -> For:
    """A nest whose loops only repeatable Lets separate (index arithmetic and gathers that ``hoist``
    moved out of the inner loop) made perfect again: the Lets move into the loop below them, where
    each thread computes its own. Else the grid would span the outer loops alone, and each of their
    few threads would run the inner loops serially (a [batch, seq, seq] attention mask: 2 threads,
    1.5 ms a call on an H200)."""
    body, n = f.body, 0
    while n < len(body) and _repeatable(body[n], written):
        n += 1
    if len(body) != n + 1 or not isinstance(body[n], For) or body[n].kind != "serial":
        return f
    inner = body[n]
    return replace(f, body=[_sink(replace(inner, body=[*body[:n], *inner.body]) if n else inner, written)])


def grid(kernel: Kernel) -> Kernel:
    """The outer perfect nest of a single-nest kernel (after its Lets) becomes ``grid`` loops."""
    body = list(kernel.body)
    n = _lets(body)
    if len(body) == n + 1 and isinstance(body[n], For) and body[n].kind == "serial":
        nest = _sink(body[n], {s.buffer.name for s in walk_stmts(body) if isinstance(s, Store)})
        body[n] = _mark(nest, "block" if _row_reductions(_innermost(nest)) else "grid")
    return replace(kernel, body=body)


GPU_STAGES: tuple = (flatten, collapse, materialize, hoist, widen, grid)


def grid_loops(kernel: Kernel) -> list:
    """The kernel's grid loops, outer first (empty: it runs on one thread)."""
    out = []
    body = kernel.body[_lets(kernel.body):]
    while len(body) == 1 and isinstance(body[0], For) and body[0].kind in ("grid", "block"):
        out.append(body[0])
        body = body[0].body
    return out


__all__ = ["GPU_STAGES", "grid", "grid_loops"]
