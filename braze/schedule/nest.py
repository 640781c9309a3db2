"""Loop nests, the unit every schedule stage works on, and index helpers they share.

Each top-level ``For`` of a kernel's body (or a lone ``Store`` of a 0-d result)
is one nest. Lowering makes them perfect: ``for i0: for i1: ...: [Store, ...]``;
the stages up to ``hoist`` keep them so, which is how a stage tells the nests
it may still rewrite from ones already laid out (or written by hand).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import Binary, Const, Expr, For, IndexValue, Kernel, Store
from ..ir.types import DType


def perfect_nest(s):
    """``(vars, extents, stores)`` of a serial perfect nest over Stores (a lone
    Store is a nest of no loops), or None for any other statement."""
    vars_, exts = [], []
    while isinstance(s, For):
        if s.kind != "serial":
            return None
        vars_.append(s.var)
        exts.append(s.extent)
        if len(s.body) == 1 and isinstance(s.body[0], For):
            s = s.body[0]
            continue
        body = list(s.body)
        break
    else:
        body = [s]
    if not body or not all(isinstance(x, Store) for x in body):
        return None
    return vars_, exts, body


def build_nest(vars_, exts, body: list) -> list:
    """The serial perfect nest ``for vars_: body`` as a statement list (``body`` itself without loops)."""
    for v, e in reversed(list(zip(vars_, exts))):
        body = [For(v, e, body)]
    return body


def loop_chain(s: For) -> list:
    """The loops of a nest, outermost first, down to the first loop without exactly one loop inside."""
    out = [s]
    while True:
        inner = [x for x in out[-1].body if isinstance(x, For)]
        if len(inner) != 1:
            return out
        out.append(inner[0])


def with_body(kernel: Kernel, body: list) -> Kernel:
    """A new Kernel like ``kernel`` with ``body``; its syms also cover what the new body reads."""
    k = replace(kernel, buffers=list(kernel.buffers), body=body)
    k.syms = sorted(set(kernel.syms) | set(L.kernel_syms(k)), key=lambda s: s.name)
    return k


def map_nests(kernel: Kernel, fn) -> Kernel:
    """Apply ``fn(vars, extents, stores) -> [stmt, ...]`` to every perfect nest at the top level."""
    body = []
    for s in kernel.body:
        nest = perfect_nest(s)
        body.extend([s] if nest is None else fn(*nest))
    return with_body(kernel, body)


def used_names(kernel: Kernel) -> set:
    """Names of the kernel's Let values and temp buffers: the schedule numbers new ones
    ``t{n}`` / ``r{n}`` / ``tmp{n}`` past them, so a stage's names depend on its input only."""
    out = set()
    for s in L.walk_stmts(kernel.body):
        if isinstance(s, L.Let):
            out.add(s.var.name)
        elif isinstance(s, L.Alloc):
            out.add(s.buffer.name)
    return out


def fresh_name(names: set, prefix: str, taken=frozenset()) -> str:
    """``prefix<n>``, n the count of ``names`` (one counter for every prefix) or the first
    free one past it; added to ``names``. ``taken``: other names to avoid (the buffers')."""
    n = len(names)
    while f"{prefix}{n}" in names or f"{prefix}{n}" in taken:
        n += 1
    name = f"{prefix}{n}"
    names.add(name)
    return name


def next_loop_index(kernel: Kernel) -> int:
    """One past the largest loop-variable number in ``kernel`` (``_f12`` is 12). A stage that
    makes loop variables numbers them from here (``kernel_names(next_loop_index(k))``), so its
    output depends on its input only: the same whether the stages run in one go or resume
    from a dumped kernel."""
    top = 0

    def see(v):
        nonlocal top
        digits = v.name.lstrip("_").lstrip("abcdefghijklmnopqrstuvwxyz")
        if digits.isdigit():
            top = max(top, int(digits))

    for s in L.walk_stmts(kernel.body):
        if isinstance(s, For):
            see(s.var)
        for e in L.stmt_exprs(s):
            for x in L.walk(e):
                if isinstance(x, L.Reduce):
                    for v, _ in x.loops:
                        see(v)
    return top + 1


def is_flat(stores: list) -> bool:
    return all(s.flat for s in stores)


# ---------------------------------------------------------------------------
# index helpers
# ---------------------------------------------------------------------------


def flat_offset(buf, index) -> tuple:
    """(poly, extra): the element offset of ``index`` in row-major ``buf``."""
    poly = 0
    extra = None
    for i, st in zip(index, buf.strides()):
        if isinstance(i, Expr):
            t = i if (isinstance(st, int) and st == 1) else Binary("mul", i, _iv(st), DType.int64)
            extra = t if extra is None else Binary("add", extra, t, DType.int64)
        else:
            poly = S.add(poly, S.mul(i, st))
    return (poly, extra)


def _iv(x):
    return Const(x, DType.int64) if isinstance(x, int) else IndexValue(x)


def coeff(poly, v):
    """Coefficient of loop var v in poly if poly is affine in v, else None."""
    c = 0
    for mono, k in S._to_poly(poly).items():
        n = sum(1 for a in mono if a == v)
        others = [a for a in mono if a != v]
        if any(v in S.free_syms(a) for a in others):
            return None
        if n == 0:
            continue
        if n > 1:
            return None
        c = S.add(c, S.mul(k, S.prod(others)))
    return c


def accesses(stores, exprs=()) -> tuple[list, set]:
    """The flat offset polynomials of the stores and of every load in them and in ``exprs``, and
    the symbols used other than in those polynomials (gathered indices, IndexValues, reduction
    extents): a loop variable among them is not affine in every use."""
    polys, other = [], set()

    def visit(e):
        for x in L.walk(e):
            if isinstance(x, L.Load):
                polys.append(x.index[0])
                if x.index[1] is not None:
                    other.update(L.free_loop_vars(x.index[1]))
            elif isinstance(x, IndexValue):
                other.update(S.free_syms(x.value))
            elif isinstance(x, L.Reduce):
                for _, ext in x.loops:
                    other.update(S.free_syms(ext))
    for s in stores:
        polys.append(s.index[0])
        if s.index[1] is not None:
            visit(s.index[1])
            other.update(L.free_loop_vars(s.index[1]))
        visit(s.value)
    for e in exprs:
        visit(e)
    return polys, other


def subs_store(s: Store, m: dict) -> Store:
    """A flat Store with loop vars substituted in its offset polynomial and value."""
    return Store(s.buffer, (S.subs(s.index[0], m), s.index[1]), L.subs_expr(s.value, m), True)


def subs_stmts(stmts: list, m: dict) -> list:
    """Loops, flat Stores and Lets with loop vars substituted (extents, offsets, values)."""
    out = []
    for s in stmts:
        if isinstance(s, For):
            out.append(replace(s, extent=S.subs(s.extent, m), body=subs_stmts(s.body, m)))
        elif isinstance(s, Store):
            out.append(subs_store(s, m))
        else:
            out.append(replace(s, value=L.subs_expr(s.value, m)))
    return out
