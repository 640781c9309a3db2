"""Stage ``collapse``: adjacent loops of a nest merge into one when every access is
affine in both with ``stride(outer) == stride(inner) * extent(inner)`` (contiguous
dims), and loops of extent 1 go. Fewer, longer loops: one parallel split, one long
vector loop. Needs flat accesses (``flatten``); other nests are left as they are.

A reduction's own loops merge by the same rule (``collapse_reduce``): batch norm's
statistics of an NCHW activation sum over (n, h, w), and h and w are one contiguous
run of H x W elements. Left apart, the innermost loop was W long (12 in a convnet's
third stage), shorter than a vector, and the sum ran scalar at 9 GB/s.
"""

from __future__ import annotations

import dataclasses

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Kernel, Reduce, Store
from .nest import accesses, build_nest, coeff, is_flat, map_nests, next_loop_index, subs_store


def collapse_loops(vars_, exts, stores):
    """``(vars, extents, stores)`` with unit loops dropped and contiguous neighbours merged."""
    unit = {v: 0 for v, e in zip(vars_, exts) if isinstance(e, int) and e == 1}
    if unit:
        stores = [Store(s.buffer, (S.subs(s.index[0], unit), s.index[1] if s.index[1] is None else
                                   L.subs_expr(s.index[1], unit)), L.subs_expr(s.value, unit), True)
                  for s in stores]
        exts = [e for v, e in zip(vars_, exts) if v not in unit]
        vars_ = [v for v in vars_ if v not in unit]
    vars_, exts = list(vars_), list(exts)
    i = len(vars_) - 2
    while i >= 0:
        u, w = vars_[i], vars_[i + 1]
        polys, other = accesses(stores)
        ok = u not in other and w not in other
        if ok:
            for p in polys:
                cu, cw = coeff(p, u), coeff(p, w)
                if cu is None or cw is None or S.add(cu, S.mul(-1, S.mul(cw, exts[i + 1]))) != 0:
                    ok = False
                    break
        if ok:
            # u * ext(w) + w is one variable f: cu*u + cw*w == cw*f
            ext = S.mul(exts[i], exts[i + 1])
            f = L.loop_var(ext, "f")
            m = {u: 0, w: f}
            stores = [subs_store(s, m) for s in stores]
            vars_[i:i + 2] = [f]
            exts[i:i + 2] = [ext]
        i -= 1
    return vars_, exts, stores


def _mergeable(body, u, w, ext_w) -> bool:
    """Whether every load in ``body`` is affine in loop vars u and w with u's stride w's times w's
    extent, and neither is used any other way (a gathered index, an IndexValue, an extent)."""
    polys, other = accesses([], [body])
    return u not in other and w not in other and all(
        (cu := coeff(p, u)) is not None and (cw := coeff(p, w)) is not None
        and S.add(cu, S.mul(-1, S.mul(cw, ext_w))) == 0 for p in polys)


def collapse_reduce(r: Reduce) -> Reduce:
    """``r`` with its contiguous neighbouring loops merged, inner first (the order of the terms it
    combines is unchanged); argmax/argmin keep theirs, as they count positions along one loop."""
    if r.op in ("argmax", "argmin") or len(r.loops) < 2:
        return r
    loops, body = list(r.loops), r.body
    i = len(loops) - 2
    while i >= 0:
        (u, eu), (w, ew) = loops[i], loops[i + 1]
        if _mergeable(body, u, w, ew):
            ext = S.mul(eu, ew)
            # named after w, not fresh: equal reductions (one mean read in several places) must stay
            # equal, for materialize and hoist compute each once; no loop_var name ends in a letter
            f = L.LoopVar(f"{w.name}c", ext)
            m = {u: 0, w: f}
            body = L.map_expr(body, lambda y: y, index_fn=lambda p: S.subs(p, m))
            loops[i:i + 2] = [(f, ext)]
        i -= 1
    return r if len(loops) == len(r.loops) else dataclasses.replace(r, body=body, loops=tuple(loops))


def collapse_nest(vars_, exts, stores) -> list:
    if not is_flat(stores):
        return build_nest(vars_, exts, stores)
    merge = (lambda y: collapse_reduce(y) if isinstance(y, Reduce) else y)
    stores = [Store(s.buffer, s.index, L.map_expr(s.value, merge), True) for s in stores]
    return build_nest(*collapse_loops(vars_, exts, stores))


def collapse(kernel: Kernel) -> Kernel:
    """Every flat perfect nest with its contiguous loops merged."""
    with L.kernel_names(next_loop_index(kernel)):
        return map_nests(kernel, collapse_nest)
