"""Stage ``materialize``: a reduction that skips an outer loop of its nest
(``x - mean(x, axis=0)``: the mean depends on the column, not the row) would be
recomputed for every value of that loop. It is computed once into a temp buffer
(``alloc tmp<n>``) by a nest of its own, placed before the nest that reads it.

The new nest is built flat and collapsed, like the nests beside it at this point
of the schedule (and its own reductions are materialized in turn); the stages after
this one lay it out with the others. A reduction over a prefix of the loops is left
for ``hoist``. Needs flat accesses and two or more loops.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir.loop import Alloc, Buffer, Kernel, Load, Reduce, Store
from .collapse import collapse_loops
from .flatten import flatten_store
from .nest import (
    build_nest,
    flat_offset,
    fresh_name,
    is_flat,
    map_nests,
    next_loop_index,
    used_names,
)


def _materialize(vars_, exts, stores, names: set, taken: frozenset) -> list:
    """The statements of one nest: temp allocations and nests, then the nest itself."""
    if len(vars_) < 2 or not is_flat(stores):
        return build_nest(vars_, exts, stores)
    pos = {v: i for i, v in enumerate(vars_)}
    done: dict = {}
    pre: list = []

    def fn(y):
        if not isinstance(y, Reduce):
            return y
        fv = L.free_loop_vars(y)
        if not fv or any(v not in pos for v in fv) or L.vars_used(y):
            return y
        d = sorted(pos[v] for v in fv)
        if d == list(range(d[-1] + 1)):
            return y  # depends on a prefix of the loops: hoisting handles it
        hit = done.get(y)
        if hit is not None:
            return hit
        dvars = [vars_[i] for i in d]
        dexts = [exts[i] for i in d]
        buf = Buffer(fresh_name(names, "tmp", taken), y.dtype, tuple(dexts), "temp")
        nv = [L.loop_var(e, "m") for e in dexts]
        store = flatten_store(Store(buf, tuple(nv), L.subs_expr(y, dict(zip(dvars, nv)))))
        pre.append(Alloc(buf))
        pre.extend(_materialize(*collapse_loops(nv, dexts, [store]), names, taken))
        load = Load(buf, flat_offset(buf, tuple(dvars)), True)
        done[y] = load
        return load

    stores = [Store(s.buffer, s.index, L.map_expr(s.value, fn), True) for s in stores]
    return pre + build_nest(vars_, exts, stores)


def materialize(kernel: Kernel) -> Kernel:
    """Reductions that skip an outer loop, computed once into temp buffers."""
    names = used_names(kernel)
    taken = frozenset(b.name for b in kernel.buffers)  # a temp must not share a C name with an argument
    with L.kernel_names(next_loop_index(kernel)):
        return map_nests(kernel, lambda v, e, s: _materialize(v, e, s, names, taken))


__all__ = ["materialize"]
