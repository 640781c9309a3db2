"""Stage ``keep`` (stitch): a value that several passes over a row need is computed once
into a row buffer and read back, instead of recomputed in every pass.

After ``hoist`` a stitch nest is ``for row: [let r = reduce(j < n: ..), ..., for j < n:
stores]``: each reduction and the final loop is one pass over the row, and each pass
evaluates the whole producer chain again (layer_norm after softmax and GELU computes the
exp and the GELU in all of its three passes). Here, for every value (a sub-expression of
float32 type that depends on the row position) that two or more passes over rows of
the same length evaluate, ``cost.keep_saves`` weighs the evaluations saved against a
store, one load per use and one more pass; the most profitable value is kept first,
then the passes are counted again (a kept value's own fill loop is a pass too), until
nothing pays:

    for row:
      alloc row1: f32[n]                 # one per thread (C allocates it before the loop)
      let r0 = max(j < n: x[..])
      for j < n: row1[j] = exp(x[..] - r0)     # the fill loop, before the first use
      let r1 = sum(j < n: row1[j])
      ...

A row buffer is sized from the symbols (the row's extent), so any row length fits.
Cheap values (a load, a multiply) stay recomputed. Needs flat accesses; runs after
``hoist`` and before ``vectorize`` (which then vectorizes the fill loops).
"""

from __future__ import annotations

from dataclasses import replace

from .. import log as _logging
from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Alloc, Buffer, For, Kernel, Let, Load, LoopVar, Reduce, Store
from ..ir.types import DType
from .cost import expr_cost, keep_saves
from .nest import fresh_name, next_loop_index, used_names, with_body

_log = _logging.get("schedule")
F32 = DType.float32


class _Pass:
    """One pass over a row: a Let of a one-loop Reduce, or a loop of Stores."""

    def __init__(self, stmt):
        self.stmt = stmt
        if isinstance(stmt, Let):
            (self.var, self.extent), = stmt.value.loops
            self.exprs = [stmt.value.body]
        else:
            self.var, self.extent = stmt.var, stmt.extent
            self.exprs = [s.value for s in stmt.body]

    def rebuilt(self, fn):
        s = self.stmt
        if isinstance(s, Let):
            return Let(s.var, replace(s.value, body=fn(s.value.body)))
        return replace(s, body=[Store(x.buffer, x.index, fn(x.value), x.flat) for x in s.body])


def _is_pass(s) -> bool:
    if isinstance(s, Let):
        return isinstance(s.value, Reduce) and len(s.value.loops) == 1
    return (isinstance(s, For) and s.kind == "serial" and bool(s.body)
            and all(isinstance(x, Store) and x.flat for x in s.body))


def _candidates(p: _Pass, canon: LoopVar) -> list:
    """Sub-expressions of the pass worth a look, written over the canonical variable, in
    walk order (a dict, not a set: ties between equal gains break the same way in every
    process, whatever the string hash seed)."""
    out: dict = {}
    for e in p.exprs:
        ce = L.subs_expr(e, {p.var: canon})
        for x in L.walk(ce):
            if (x.dtype == F32 and not isinstance(x, Load) and not L.is_trivial(x)
                    and canon in L.free_loop_vars(x)
                    and not any(isinstance(y, Reduce) for y in L.walk(x))):
                out[x] = None
    return list(out)


def _keep_once(stmts: list, names: set, taken: frozenset) -> list | None:
    """``stmts`` with the most profitable value kept, or None if no value pays."""
    idx = [i for i, s in enumerate(stmts) if _is_pass(s)]
    by_extent: dict = {}
    for i in idx:
        p = _Pass(stmts[i])
        if any(L.is_loop_var(v) for v in S.free_syms(p.extent)):
            continue  # a ragged row: no buffer size fits every iteration
        by_extent.setdefault(p.extent, []).append((i, p))
    best = None
    for ext, ps in by_extent.items():
        if len(ps) < 2:
            continue
        canon = LoopVar("_keep", ext)
        uses: dict = {}
        for i, p in ps:
            for c in _candidates(p, canon):
                uses.setdefault(c, []).append((i, p))
        for c, where in uses.items():
            if len(where) < 2:
                continue
            cost = expr_cost(c)
            gain = keep_saves(cost, len(where))
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, c, canon, ext, where, cost)
    if best is None:
        return None
    gain, c, canon, ext, where, cost = best
    buf = Buffer(fresh_name(names, "row", taken), F32, (ext,), "temp")
    j = L.loop_var(ext, "k")
    fill = For(j, ext, [Store(buf, (j, None), L.subs_expr(c, {canon: j}), True)])
    _log.debug("keep %s = %s: cost %d, %d passes, saves %d per element", buf.name, c, cost, len(where), gain)
    out = list(stmts)
    for i, p in where:
        mine = L.subs_expr(c, {canon: p.var})
        load = Load(buf, (p.var, None), True)
        out[i] = p.rebuilt(lambda e, mine=mine, load=load: L.map_expr(e, lambda y: load if y == mine else y))
    first = min(i for i, _ in where)
    return [Alloc(buf)] + out[:first] + [fill] + out[first:]


def _keep_block(stmts: list, names: set, taken: frozenset) -> list:
    stmts = [_keep_stmt(s, names, taken) for s in stmts]
    while True:
        nxt = _keep_once(stmts, names, taken)
        if nxt is None:
            return stmts
        stmts = nxt


def _keep_stmt(s, names, taken):
    if not isinstance(s, For) or s.kind != "serial" or _is_pass(s):
        return s
    return replace(s, body=_keep_block(list(s.body), names, taken))


def keep(kernel: Kernel) -> Kernel:
    """Values that several passes over a row evaluate, kept in per-thread row buffers."""
    names = used_names(kernel)
    taken = frozenset(b.name for b in kernel.buffers)
    with L.kernel_names(next_loop_index(kernel)):
        return with_body(kernel, _keep_block(list(kernel.body), names, taken))


__all__ = ["keep"]
