"""The default CPU schedule for lowered kernels.

Steps, per loop nest of a lowered kernel (``schedule(kernel) -> Kernel``):

1. flatten: loads and stores use one flat element offset ``(poly, extra)``.
2. collapse: adjacent loops merge when every access is affine in both with
   ``stride(outer) == stride(inner) * extent(inner)`` (contiguous dims).
3. stitch / hoist: a ``Reduce`` (and any non-trivial sub-expression) that does
   not depend on the inner loops becomes a ``Let`` at the outermost loop level
   it depends on; equal sub-expressions share one Let. layer_norm becomes:
   ``parallel for row: let mean = sum(..); let var = sum(..); vector for col: store``.
4. parallel: the outermost loop runs under OpenMP when the work (an IntLike,
   tested at run time) reaches ``GRAIN``; a single collapsed loop is split into
   chunks of ``CHUNK`` (parallel) each running a vector loop.
5. vector: the innermost loop becomes ``kind="vector"`` when its body is float32
   arithmetic over contiguous or invariant accesses (C codegen emits the
   vector main loop and a scalar remainder, so any run-time extent works);
   reductions whose innermost loop is contiguous get ``Reduce.vector``.
"""

from __future__ import annotations

from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import (Binary, Cast, Compare, Const, Expr, For, IndexValue, Kernel, Let, Load, Reduce, Select,
                       Store, Unary, Var)
from ..ir.types import DType

GRAIN = 32768
CHUNK = 4096
F32 = DType.float32
BOOL = DType.bool

# ---------------------------------------------------------------------------
# 1. flat offsets
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


def _flatten_expr(e: Expr) -> Expr:
    def fn(y):
        if isinstance(y, Load) and not y.flat:
            return Load(y.buffer, flat_offset(y.buffer, y.index), True)
        return y
    return L.map_expr(e, fn)


def _flatten_store(s: Store) -> Store:
    if s.flat:
        return s
    idx = tuple(_flatten_expr(i) if isinstance(i, Expr) else i for i in s.index)
    return Store(s.buffer, flat_offset(s.buffer, idx), _flatten_expr(s.value), True)


# ---------------------------------------------------------------------------
# 2. collapse
# ---------------------------------------------------------------------------


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


def _accesses(exprs, stores):
    """Flat polys of every access, and the syms used outside access polys."""
    polys = []
    other = set()

    def visit(e):
        for x in L.walk(e):
            if isinstance(x, Load):
                polys.append(x.index[0])
                if x.index[1] is not None:
                    other.update(L.free_loop_vars(x.index[1]))
            elif isinstance(x, IndexValue):
                other.update(S.free_syms(x.value))
            elif isinstance(x, Reduce):
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


def _collapse(vars_, exts, stores):
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
        polys, other = _accesses([], stores)
        ok = u not in other and w not in other
        if ok:
            for p in polys:
                cu, cw = coeff(p, u), coeff(p, w)
                if cu is None or cw is None or S.add(cu, S.mul(-1, S.mul(cw, exts[i + 1]))) != 0:
                    ok = False
                    break
        if ok:
            ext = S.mul(exts[i], exts[i + 1])
            f = L.loop_var(ext, "f")
            m = {u: 0, w: f}
            stores = [Store(s.buffer, (S.subs(s.index[0], m), s.index[1]), L.subs_expr(s.value, m), True)
                      for s in stores]
            vars_[i:i + 2] = [f]
            exts[i:i + 2] = [ext]
        i -= 1
    return vars_, exts, stores


# ---------------------------------------------------------------------------
# 3. hoisting (stitch)
# ---------------------------------------------------------------------------


class _Hoister:
    def __init__(self, vars_, names):
        self.pos = {v: i for i, v in enumerate(vars_)}
        self.k = len(vars_) - 1
        self.level_of: dict = {}
        self.lets: dict = {lv: [] for lv in range(-1, self.k + 1)}
        self.memo: dict = {}
        self.names = names
        self.n_reduce = 0

    def lvl(self, e):
        lv = -1
        for v in L.free_loop_vars(e):
            if v not in self.pos:
                return None
            lv = max(lv, self.pos[v])
        for n in L.vars_used(e):
            lv = max(lv, self.level_of.get(n, -1))
        return lv

    def value(self, e, c):
        return L.with_children(e, [self.td(ch, c) for ch in L.children(e)])

    def td(self, e, c):
        if L.is_trivial(e):
            return e
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        le = self.lvl(e)
        if le is not None and (le < c or (isinstance(e, Reduce) and le <= c and le < self.k)):
            val = self.value(e, le)
            if isinstance(val, Reduce):
                self.n_reduce += 1
            name = f"{'r' if isinstance(val, Reduce) else 't'}{len(self.names)}"
            self.names.add(name)
            var = Var(name, e.dtype)
            self.lets[le].append(Let(var, val))
            self.level_of[name] = le
            self.memo[e] = var
            return var
        return self.value(e, c)


def _materialize(vars_, exts, stores, names, opts):
    """Reductions that skip an outer loop var (``x - mean(x, axis=0)``) would be
    recomputed for every value of that var: compute them once into a temp buffer
    in a loop nest of their own, before this one."""
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
        name = f"tmp{len(names)}"
        names.add(name)
        buf = L.Buffer(name, y.dtype, tuple(dexts), "temp")
        nv = [L.loop_var(e, "m") for e in dexts]
        body = [Store(buf, tuple(nv), L.subs_expr(y, dict(zip(dvars, nv))))]
        for v, e in reversed(list(zip(nv, dexts))):
            body = [For(v, e, body)]
        pre.append(L.Alloc(buf))
        pre.extend(_schedule_nest(body[0], names, opts))
        load = Load(buf, flat_offset(buf, tuple(dvars)), True)
        done[y] = load
        return load

    stores = [Store(s.buffer, s.index, L.map_expr(s.value, fn), True) for s in stores]
    return stores, pre


# ---------------------------------------------------------------------------
# 5. vector legality
# ---------------------------------------------------------------------------


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
    elif isinstance(e, IndexValue):
        r = False
    elif e.dtype not in (F32, BOOL):
        r = False
    elif isinstance(e, Reduce):
        r = (e.op in ("sum", "max", "min", "prod") and vector_ok(e.body, v, memo)
             and not any(v in S.free_syms(ext) for _, ext in e.loops))
    elif isinstance(e, Compare):
        r = e.a.dtype == F32 and vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
    elif isinstance(e, Cast):
        if isinstance(e.x, Load) and e.dtype == F32 and e.x.dtype.is_int:
            r = True  # converted lane by lane
        else:
            r = e.x.dtype in (F32, BOOL) and vector_ok(e.x, v, memo)
    elif isinstance(e, Select):
        r = all(vector_ok(x, v, memo) for x in (e.cond, e.a, e.b))
    elif isinstance(e, Binary):
        if e.dtype == BOOL:
            r = e.op in ("and", "or", "xor") and vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
        else:
            r = vector_ok(e.a, v, memo) and vector_ok(e.b, v, memo)
    elif isinstance(e, Unary):
        r = (e.dtype == F32 or e.fn == "not") and vector_ok(e.x, v, memo)
    else:
        r = False
    memo[k] = r
    return r


def _store_vector_ok(s: Store, v) -> bool:
    if s.buffer.dtype != F32:
        return False
    poly, extra = s.index
    if extra is not None and v in L.free_loop_vars(extra):
        return False
    c = coeff(poly, v)
    return isinstance(c, int) and c == 1


def _contiguous(e: Expr, v) -> bool:
    """Every load that depends on v reads consecutive elements as v steps."""
    for x in L.walk(e):
        if isinstance(x, Load) and v in L.free_loop_vars(x):
            poly, extra = x.index
            if extra is not None and v in L.free_loop_vars(extra):
                return False
            c = coeff(poly, v)
            if not (isinstance(c, int) and c == 1):
                return False
    return True


def _mark_reduce_vectors(e: Expr) -> Expr:
    def fn(y):
        if isinstance(y, Reduce) and y.loops and not y.vector and y.dtype == F32 and y.op in ("sum", "max", "min",
                                                                                                "prod"):
            r = y.loops[-1][0]
            if vector_ok(y.body, r) and _contiguous(y.body, r):
                return Reduce(y.op, y.body, y.loops, y.dtype, True)
        return y
    return L.map_expr(e, fn)


# ---------------------------------------------------------------------------
# the schedule
# ---------------------------------------------------------------------------


def _nest(s):
    """(vars, extents, innermost stmts) of a perfect loop nest."""
    vars_, exts = [], []
    while isinstance(s, For) and len(s.body) == 1 and isinstance(s.body[0], For):
        vars_.append(s.var)
        exts.append(s.extent)
        s = s.body[0]
    if isinstance(s, For):
        vars_.append(s.var)
        exts.append(s.extent)
        return vars_, exts, list(s.body)
    return vars_, exts, [s]


def _schedule_nest(stmt, names, opts):
    vars_, exts, stores = _nest(stmt)
    if not all(isinstance(s, Store) for s in stores):
        return [stmt]  # already scheduled or hand-written: leave as is
    stores = [_flatten_store(s) for s in stores]
    if opts.get("collapse", True):
        vars_, exts, stores = _collapse(vars_, exts, stores)
    pre: list = []
    if opts.get("materialize", True) and len(vars_) >= 2:
        stores, pre = _materialize(vars_, exts, stores, names, opts)
    k = len(vars_) - 1
    h = _Hoister(vars_, names)
    if k >= 0:
        stores = [Store(s.buffer, s.index, h.value(s.value, k) if not L.is_trivial(s.value) else s.value, True)
                  for s in stores]
    stores = [Store(s.buffer, s.index, _mark_reduce_vectors(s.value), True) for s in stores]
    for lv in h.lets:
        h.lets[lv] = [Let(x.var, _mark_reduce_vectors(x.value)) for x in h.lets[lv]]
    if k < 0:
        return pre + h.lets[-1] + stores
    work = S.prod(exts)
    if h.n_reduce:
        work = S.mul(work, h.n_reduce + 1)
    vec = opts.get("vector", True) and all(_store_vector_ok(s, vars_[k]) for s in stores) and all(
        vector_ok(s.value, vars_[k]) for s in stores)
    if k == 0:
        e = exts[0]
        if vec and not (isinstance(e, int) and e <= CHUNK):
            c = L.loop_var(S.floordiv(S.add(e, CHUNK - 1), CHUNK), "c")
            inner_ext = S.smin(CHUNK, S.add(e, S.mul(-CHUNK, c)))
            w = L.loop_var(inner_ext, "v")
            m = {vars_[0]: S.add(S.mul(CHUNK, c), w)}
            stores = [Store(s.buffer, (S.subs(s.index[0], m), s.index[1]), L.subs_expr(s.value, m), True)
                      for s in stores]
            inner = For(w, inner_ext, stores, "vector")
            outer = For(c, S.floordiv(S.add(e, CHUNK - 1), CHUNK), [inner], "parallel", work=work, grain=GRAIN)
            return pre + h.lets[-1] + [outer]
        kind = "vector" if vec else ("parallel" if opts.get("parallel", True) else "serial")
        f = For(vars_[0], e, stores, kind)
        if kind == "parallel":
            f.work, f.grain = work, GRAIN
        return pre + h.lets[-1] + [f]
    body = stores
    for lv in range(k, -1, -1):
        kind = "serial"
        if lv == k and vec:
            kind = "vector"
        f = For(vars_[lv], exts[lv], h.lets[lv] + body if lv < k else body, kind)
        if lv == 0 and opts.get("parallel", True):
            f.kind, f.work, f.grain = "parallel", work, GRAIN
        body = [f]
    return pre + h.lets[-1] + body


def schedule(kernel: Kernel, **opts) -> Kernel:
    """Apply the default schedule (a new Kernel; the input is not changed).

    opts: ``collapse=True``, ``parallel=True``, ``vector=True`` switch steps off.
    """
    if kernel.scheduled:
        return kernel
    names: set = set()
    body = []
    for s in kernel.body:
        if isinstance(s, (For, Store)):
            body.extend(_schedule_nest(s, names, opts))
        else:
            body.append(s)
    from ..ops.lowering import kernel_syms
    k = Kernel(kernel.name, list(kernel.buffers), list(kernel.syms), body, kernel.kind, True)
    k.syms = sorted(set(kernel.syms) | set(kernel_syms(k)), key=lambda s: s.name)
    return k


__all__ = ["CHUNK", "GRAIN", "coeff", "flat_offset", "schedule", "vector_ok"]
