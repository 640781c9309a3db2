"""Stage ``parallelize``: the outermost loop of each nest runs under OpenMP when its work
(an IntLike, tested at run time) reaches ``GRAIN``. A nest that is one vector loop is
split into parallel chunks of ``CHUNK`` elements (``REDUCE_CHUNK`` where each element is a
reduction), each a vector loop; one of at most a chunk (a constant) stays a plain vector loop.

Work is an estimate of the nest's time from a cost model (``_work``): every element of
every pass over the data (a stitch nest reads its row once per reduction and once per
loop over it) weighs what the code does to it (``cost.expr_cost``: a load or an add one
unit, exp ten, GELU twenty-four), times ``SCALAR`` where the code is not vectorized. A
loop of one iteration gets no threads.

``GRAIN``, measured on this project's reference machine (2 cores, GNU OpenMP): starting
and joining a parallel region costs 0.7 us with the threads spinning, 1.25 us after
2 ms idle; vector code runs at about 0.04 ns per unit (exp: 12 units with its load and
store, 0.445 ns per element; GELU: 26 units, 1.02 ns; ``benchmarks/math_ulp.py``). Two
threads pay when the work takes more than twice the region's cost, 2.5 us: 65536 units.

Long float32 sums over few vector lanes (a batch norm's statistics over NHWC rows) run in
parts of rows first (``part_sums``), the parts in parallel where no loop is outside them.

Runs after ``vectorize`` (it splits the loops that stage marked, and reads their kinds).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import For, Kernel, Let, Store
from .cost import STORE_COST, split_cost
from .nest import fresh_name, loop_chain, next_loop_index, subs_stmts, subs_store, used_names, with_body
from .part_sums import sums_in_parts

GRAIN = 65536  # work units (about 2.6 us of vector code) below which threads cost more than they give
CHUNK = 4096  # elements per parallel chunk of a one-loop nest
# elements per parallel chunk of a one-loop nest whose elements each reduce many (a batch norm's
# per-channel statistics over N, H, W in NHWC: 64 channels, each a long sum): two vectors of
# AVX2, one of AVX-512
REDUCE_CHUNK = 16
FEW = 8  # an outer loop with fewer iterations than this may leave threads idle (_rows_joined)
SCALAR = 8  # a scalar element costs about this many vector-code units (lanes, less overheads)


def _bound(ext: S.IntLike) -> S.IntLike:
    """``ext`` with each loop variable replaced by its extent: an upper bound that the
    code before the loop can evaluate (a cumsum's reduction runs to its row index)."""
    for _ in range(8):
        lvs = {v: v.extent for v in S.free_syms(ext) if L.is_loop_var(v)}
        if not lvs:
            break
        ext = S.subs(ext, lvs)
    return ext


def _expr_work(e, scale: int) -> S.IntLike:
    """Units to evaluate ``e`` once (``scale``: SCALAR in scalar code, 1 in vector code); a
    Reduce inside counts its body, and an accumulate, once per element it visits."""
    own, reduces = split_cost(e)
    w: S.IntLike = own * scale
    for r in reduces:
        n = S.prod([_bound(ext) for _, ext in r.loops])
        w = S.add(w, S.mul(n, S.add(_expr_work(r.body, 1 if r.vector else SCALAR), 1)))
    return w


def _work(stmts, scale: int = SCALAR) -> S.IntLike:
    """Units of work of ``stmts``: a loop's extent times its body's, each statement's
    expressions (``_expr_work``) plus one for a store."""
    w: S.IntLike = 0
    for s in stmts:
        if isinstance(s, For):
            inner = 1 if s.kind == "vector" else scale
            w = S.add(w, S.mul(_bound(s.extent), _work(s.body, inner)))
        elif isinstance(s, Store):
            w = S.add(w, S.add(_expr_work(s.value, scale), scale * STORE_COST))
        elif isinstance(s, Let):
            w = S.add(w, _expr_work(s.value, scale))
    return w


def _one_is_none(work, extent):
    """``work``, or 0 (no threads) when the parallel loop has one iteration."""
    return S.mul(work, S.smin(S.add(extent, -1), 1))


def _chunked(f: For, work, chunk: int) -> For:
    """``for c in 0..ceil(e/chunk) (parallel): for v in 0..min(chunk, e - chunk*c) (vector)``."""
    e = f.extent
    n = S.floordiv(S.add(e, chunk - 1), chunk)
    c = L.loop_var(n, "c")
    inner_ext = S.smin(chunk, S.add(e, S.mul(-chunk, c)))
    w = L.loop_var(inner_ext, "v")
    m = {f.var: S.add(S.mul(chunk, c), w)}
    inner = For(w, inner_ext, [subs_store(s, m) for s in f.body], "vector")
    return For(c, n, [inner], "parallel", work=_one_is_none(work, n), grain=GRAIN)


def _parallel_nest(f: For, fresh) -> list:
    """``f`` laid out for threads: one nest, or the statements of its sums in parts
    (``part_sums``), whose parts then run in parallel where no loop is outside them."""
    if (parts := sums_in_parts(f, fresh)) is not None:
        if len(parts) == 1:
            f = parts[0]  # an outer loop: it runs in parallel below, its parts one after the other
        else:
            nest = parts[-2]
            return parts[:-2] + [replace(nest, kind="parallel", work=_one_is_none(_work([f]), nest.extent),
                                         grain=GRAIN), parts[-1]]
    chain = loop_chain(f)
    work = _work([f])
    if len(chain) == 1 and f.kind == "vector":
        if not all(isinstance(s, Store) and s.flat for s in f.body):
            return [f]
        reduces = any(isinstance(y, L.Reduce) for s in f.body for y in L.walk(s.value))
        chunk = REDUCE_CHUNK if reduces else CHUNK
        if isinstance(f.extent, int) and f.extent <= chunk:
            return [f]
        return [_chunked(f, work, chunk)]
    f = _rows_joined(f)
    return [replace(f, body=list(f.body), kind="parallel", work=_one_is_none(work, f.extent), grain=GRAIN)]


def _rows_joined(f: For) -> For:
    """``for a: for b: body`` as one loop over a x b when ``a`` may have fewer than ``FEW``
    iterations (a batch of 1): the threads split the two together. Collapse merged the loops
    it could; what is left indexes by ``b`` apart (a window's row, clamped into the input)."""
    inner = f.body[0] if len(f.body) == 1 else None
    if (f.kind != "serial" or not isinstance(inner, For) or inner.kind != "serial"
            or S.bounds(_bound(f.extent))[0] >= FEW or f.var in S.free_syms(inner.extent)
            or S.bounds(_bound(inner.extent))[0] < 1  # the index divides by it
            or not all(isinstance(s, (For, Store, Let)) and (not isinstance(s, Store) or s.flat)
                       for s in L.walk_stmts(inner.body))):
        return f
    v = L.loop_var(S.mul(f.extent, inner.extent), "i")
    m = {f.var: S.floordiv(v, inner.extent), inner.var: S.mod(v, inner.extent)}
    return For(v, v.extent, subs_stmts(inner.body, m), "serial")


def parallelize(kernel: Kernel) -> Kernel:
    """Every nest's outer loop, parallel above a grain of work."""
    names = used_names(kernel)
    taken = frozenset(b.name for b in kernel.buffers)
    with L.kernel_names(next_loop_index(kernel)):
        body = [t for s in kernel.body
                for t in (_parallel_nest(s, lambda: fresh_name(names, "part", taken))
                          if isinstance(s, For) and s.kind in ("serial", "vector") else [s])]
    return with_body(kernel, body)


__all__ = ["CHUNK", "GRAIN", "REDUCE_CHUNK", "parallelize"]
