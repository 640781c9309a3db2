"""Stage ``jam``: a vector loop over a few channels whose stores multiply many values
broadcast from outside it (a direct convolution reading few input channels: an RGB stem's
27 taps) is marked ``jam``. C code then computes its whole vectors side by side, their
statements interleaved, so each broadcast value is used by every vector as soon as it is
made; emitted one vector after the other, gcc kept all 27 broadcasts live across the loop
and spilled them (a depthwise convnet's 3x3/s2 3->16 stem, AVX2: 0.58-0.64x the time
interleaved, docs/gemm.md). The values and their order of evaluation stay the same.

A loop is jammed when its extent is a constant of at most ``JAM_LANES`` floats (whole
vectors only: 16 channels are two AVX2 vectors, one AVX-512 vector, which is left as it was),
its body is stores alone with no reduction, and they read at least ``JAM_MIN_SCALARS`` float
values that do not vary in it (lets made outside, or loads of one element).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir.loop import For, Kernel, Load, Reduce, Store, Var
from ..ir.types import DType
from .nest import with_body

JAM_LANES = 32  # at most 4 AVX2 vectors side by side: their sums and one broadcast fit in registers
JAM_MIN_SCALARS = 8  # fewer broadcasts fit in registers however the vectors are emitted


def _broadcasts(f: For) -> int:
    """Distinct float values the stores of ``f`` read that do not vary with its variable."""
    seen = set()
    for s in f.body:
        for e in L.stmt_exprs(s):
            for x in L.walk(e):
                if isinstance(x, Var) and x.dtype == DType.float32:
                    seen.add(x.name)
                elif isinstance(x, Load) and x.dtype == DType.float32 and f.var not in L.free_loop_vars(x):
                    seen.add(x)
    return len(seen)


def _jams(f: For) -> bool:
    return (f.kind == "vector" and not f.jam and isinstance(f.extent, int) and f.extent <= JAM_LANES
            and bool(f.body) and all(isinstance(s, Store) and s.flat for s in f.body)
            and not any(isinstance(x, Reduce) for s in f.body for e in L.stmt_exprs(s) for x in L.walk(e))
            and _broadcasts(f) >= JAM_MIN_SCALARS)


def _stmts(stmts: list) -> list:
    out = []
    for s in stmts:
        if isinstance(s, For):
            s = replace(s, body=_stmts(s.body))
            if _jams(s):
                s = replace(s, jam=True)
        out.append(s)
    return out


def jam(kernel: Kernel) -> Kernel:
    """Every vector loop that multiplies many broadcast values by a few whole vectors marked ``jam``."""
    return with_body(kernel, _stmts(kernel.body))


__all__ = ["JAM_LANES", "JAM_MIN_SCALARS", "jam"]
