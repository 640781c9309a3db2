"""Stage ``parallelize``: the outermost loop of each nest runs under OpenMP when its work
(an IntLike, tested at run time) reaches ``GRAIN``. A nest that is one vector loop is
split into parallel chunks of ``CHUNK`` elements, each a vector loop; one of at most
``CHUNK`` (a constant) stays a plain vector loop.

Work: the product of the nest's extents, times (reductions hoisted for it + 1), since
a stitch nest reads its row once per reduction. Runs after ``vectorize`` (it splits the
loops that stage marked).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import For, Kernel, Let, Reduce, Store
from .nest import loop_chain, next_loop_index, subs_store, with_body

GRAIN = 32768  # elements (x passes) below which threads cost more than they give
CHUNK = 4096  # elements per parallel chunk of a one-loop nest


def _n_reduce(lets) -> int:
    return sum(1 for s in lets if isinstance(s, Let) and isinstance(s.value, Reduce))


def _chunked(f: For, work) -> For:
    """``for c in 0..ceil(e/CHUNK) (parallel): for v in 0..min(CHUNK, e - CHUNK*c) (vector)``."""
    e = f.extent
    n = S.floordiv(S.add(e, CHUNK - 1), CHUNK)
    c = L.loop_var(n, "c")
    inner_ext = S.smin(CHUNK, S.add(e, S.mul(-CHUNK, c)))
    w = L.loop_var(inner_ext, "v")
    m = {f.var: S.add(S.mul(CHUNK, c), w)}
    inner = For(w, inner_ext, [subs_store(s, m) for s in f.body], "vector")
    return For(c, n, [inner], "parallel", work=work, grain=GRAIN)


def _parallel_nest(f: For, top_lets: list) -> For:
    """``f`` laid out for threads; ``top_lets``: the Lets hoisted before it (its level -1)."""
    chain = loop_chain(f)
    work = S.prod([x.extent for x in chain])
    n_red = _n_reduce(L.walk_stmts(f.body)) + _n_reduce(top_lets)
    if n_red:
        work = S.mul(work, n_red + 1)
    if len(chain) == 1 and f.kind == "vector":
        small = isinstance(f.extent, int) and f.extent <= CHUNK
        if small or not all(isinstance(s, Store) and s.flat for s in f.body):
            return f
        return _chunked(f, work)
    return replace(f, body=list(f.body), kind="parallel", work=work, grain=GRAIN)


def parallelize(kernel: Kernel) -> Kernel:
    """Every nest's outer loop, parallel above a grain of work."""
    body: list = []
    with L.kernel_names(next_loop_index(kernel)):
        for s in kernel.body:
            if isinstance(s, For) and s.kind in ("serial", "vector"):
                i = len(body)
                while i and isinstance(body[i - 1], Let):
                    i -= 1
                s = _parallel_nest(s, body[i:])
            body.append(s)
    return with_body(kernel, body)


__all__ = ["CHUNK", "GRAIN", "parallelize"]
