"""Long float32 sums over few vector lanes, in parts of rows (a step of stage ``parallelize``).

``vector for c < C: out[c] = g(sum(r < R: body))`` with C at most ``FEW_LANES`` (a batch norm's
statistics over the N, H, W rows of a 32-channel NHWC activation) reads each row a vector of
channels at a time, one row after another, per vector. On two threads, one vector of channels
each, the threads read alternate 64-byte halves of every 128-byte row, and each core's
adjacent-line prefetch fetches the other half as well: a convnet's batch norm backward over
16x48x48x32 ran at 20 GB/s (0.72 ms). Instead, the rows are cut into parts of ``PART_ROWS``;
each part sums a whole row at a time into its row of a buffer (``for r: vector for c:
part[k, c] += body``), and the parts are summed in order (in double, as any vector-lane sum):

    alloc part: f32[P, C]                         P = ceil(R / PART_ROWS)
    for k < P:                                    parallel when the nest has no outer loop
      vector for c < C: part[k, c] = 0
      for r < min(PART_ROWS, R - PART_ROWS * k):
        vector for c < C: part[k, c] = part[k, c] + body(c, PART_ROWS * k + r)
    vector for c < C: out[c] = g(sum(k < P: part[k, c]))

Under outer loops (a mean per image, ``for n: vector for c``) the parts run one after another in
each iteration, with the same bits: a graph specialised to batch 1 and the general graph give
one input the same result, whichever library serves it. A part sums in float32, at most
PART_ROWS terms a chain: the bound of a contiguous sum's chains (docs/semantics.md).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import For, Store
from ..ir.types import DType
from .nest import flat_offset, loop_chain

F32 = DType.float32
FEW_LANES = 64  # the most vector lanes (float32 channels) whose sums run in parts
PART_ROWS = 64


def sums_in_parts(f: For, fresh) -> list | None:
    """The statements that replace nest ``f`` (see the module doc), or None where it is not a chain
    of loops down to one vector loop of at most FEW_LANES constant lanes whose stores' reductions
    are all float32 sums over one loop of one extent. ``fresh()`` names a temp buffer.
    For a nest with outer loops, the one nest with its innermost loop replaced; else the
    allocations, the nest of parts (serial: the caller lays it out) and the final nest."""
    chain = loop_chain(f)
    v = chain[-1]
    if v.kind != "vector" or not isinstance(v.extent, int) or v.extent > FEW_LANES or \
            not v.body or not all(isinstance(s, Store) and s.flat for s in v.body):
        return None
    sums = list(dict.fromkeys(r for s in v.body for r in L.outer_reduces(s.value)))
    if not sums or any(r.op != "sum" or r.dtype != F32 or len(r.loops) != 1 for r in sums):
        return None
    total = sums[0].loops[0][1]
    if any(S.add(r.loops[0][1], S.mul(-1, total)) != 0 for r in sums):
        return None
    stmts = _parts(v, sums, total, fresh)
    if len(chain) == 1:
        return stmts
    inner = stmts
    for outer, loop in zip(reversed(chain[:-1]), reversed(chain[1:])):  # keeping the lets beside each loop
        inner = [replace(outer, body=[y for x in outer.body for y in (inner if x is loop else [x])])]
    return inner


def _parts(v: For, sums: list, total, fresh) -> list:
    n_parts = S.floordiv(S.add(total, PART_ROWS - 1), PART_ROWS)
    k = L.loop_var(n_parts, "k")
    r = L.loop_var(S.smin(PART_ROWS, S.add(total, S.mul(-PART_ROWS, k))), "r")
    c0, c1 = L.loop_var(v.extent, "v"), L.loop_var(v.extent, "v")
    allocs, zeros, adds, whole = [], [], [], {}
    for red in sums:
        (rv, _), = red.loops
        buf = L.Buffer(fresh(), F32, (n_parts, v.extent), "temp")
        allocs.append(L.Alloc(buf))
        zeros.append(Store(buf, flat_offset(buf, (k, c0)), L.Const(0.0, F32), True))
        at = flat_offset(buf, (k, c1))
        body = L.subs_expr(red.body, {v.var: c1, rv: S.add(S.mul(PART_ROWS, k), r)})
        adds.append(Store(buf, at, L.Binary("add", L.Load(buf, at, True), body, F32), True))
        kk = L.loop_var(n_parts, "k")
        whole[red] = L.Reduce("sum", L.Load(buf, flat_offset(buf, (kk, v.var)), True), ((kk, n_parts),), F32)
    nest = For(k, n_parts, [For(c0, v.extent, zeros, "vector"), For(r, r.extent, [For(c1, v.extent, adds, "vector")])])
    final = replace(v, body=[Store(s.buffer, s.index, L.map_expr(s.value, lambda y: whole.get(y, y)), True)
                             for s in v.body])
    return allocs + [nest, final]
