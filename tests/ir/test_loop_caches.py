"""What loop-IR expressions keep on their nodes (hash, loop vars, Let vars, symbols): the same answers as
walking the tree, in time linear in its distinct nodes, and never carried into a pickle or a copy."""

from __future__ import annotations

import copy
import pickle

import numpy as np

from braze.ir import loop as L
from braze.ir import sym as S
from braze.ir.types import DType

F32 = DType.float32
N = S.Sym("n", 1, None)


def _random_expr(rng, depth: int, lvs: list, buf):
    """A random tree over loop vars, Let vars, loads and a Reduce (which binds a loop var of its own)."""
    if depth == 0 or rng.random() < 0.2:
        k = rng.integers(4)
        if k == 0:
            return L.Const(float(rng.integers(5)), F32)
        if k == 1:
            return L.Var(f"t{rng.integers(4)}", F32)
        if k == 2:
            return L.Cast(L.IndexValue(lvs[rng.integers(len(lvs))] * 2 + N), F32)
        return L.Load(buf, (lvs[rng.integers(len(lvs))] + N,))
    k = rng.integers(4)
    if k == 0:
        return L.Unary("exp", _random_expr(rng, depth - 1, lvs, buf), F32)
    if k == 1:
        return L.Binary("add", _random_expr(rng, depth - 1, lvs, buf), _random_expr(rng, depth - 1, lvs, buf), F32)
    if k == 2:
        return L.Select(L.Compare("lt", _random_expr(rng, depth - 1, lvs, buf), L.Const(0.0, F32)),
                        _random_expr(rng, depth - 1, lvs, buf), _random_expr(rng, depth - 1, lvs, buf), F32)
    r = L.LoopVar(f"_r{rng.integers(1000)}", N)
    return L.Reduce("sum", _random_expr(rng, depth - 1, [*lvs, r], buf), ((r, N * 2),), F32)


def _walked(e, bound=frozenset()):
    """(loop vars, Let vars, symbols) by walking every path of the tree: the definitions."""
    lv, names, syms = set(), set(), set()
    if isinstance(e, L.Var):
        names.add(e.name)
    if isinstance(e, L.IndexValue):
        syms |= S.free_syms(e.value)
        lv |= {s for s in S.free_syms(e.value) if L.is_loop_var(s)}
    if isinstance(e, L.Load):
        for i in e.index:
            if not isinstance(i, L.Expr):
                syms |= S.free_syms(i)
                lv |= {s for s in S.free_syms(i) if L.is_loop_var(s)}
    own = set()
    if isinstance(e, L.Reduce):
        own = {v for v, _ in e.loops}
        for _, ext in e.loops:
            syms |= S.free_syms(ext)
            lv |= {s for s in S.free_syms(ext) if L.is_loop_var(s)}
    for c in L.children(e):
        a, b, s = _walked(c)
        lv |= a - own
        names |= b
        syms |= s
    return lv, names, syms


def test_cached_answers_are_the_walked_ones():
    rng = np.random.default_rng(0)
    buf = L.Buffer("x", F32, (N * 3,), "in")
    i, j = L.LoopVar("_i1", N), L.LoopVar("_i2", N)
    for _ in range(300):
        e = _random_expr(rng, 6, [i, j], buf)
        lv, names, syms = _walked(e)
        assert L.free_loop_vars(e) == lv
        assert L.vars_used(e) == names
        assert L.int_syms(e) == syms
        twin = _random_expr(np.random.default_rng(rng.integers(1 << 30)), 0, [i], buf)
        assert (hash(e) == hash(copy.copy(e))) and (e == copy.copy(e)) and (e != twin or hash(e) == hash(twin))


def test_a_shared_dag_costs_its_distinct_nodes(monkeypatch):
    """x = x * x, twelve times: 4096 paths, 14 nodes. Walking paths visits thousands of nodes (at forty
    times it would never end); each cached answer visits each node twice (down, then up)."""
    e = L.Binary("add", L.Var("t0", F32), L.IndexValue(L.LoopVar("_i1", N) + N), F32)
    for _ in range(12):
        e = L.Binary("mul", e, e, F32)
    visits = []
    real_children = L.children
    monkeypatch.setattr(L, "children", lambda x: visits.append(x) or real_children(x))
    assert L.free_loop_vars(e) == {L.LoopVar("_i1", N)} and L.vars_used(e) == {"t0"} and N in L.int_syms(e)
    hash(e)
    assert len(visits) <= 3 * 2 * 16, len(visits)  # three answers, 14 nodes and the leaves' two


def test_cached_values_stay_out_of_pickles_and_copies():
    e = L.Binary("add", L.Var("t0", F32), L.Const(1.0, F32), F32)
    h = hash(e)
    L.free_loop_vars(e), L.vars_used(e), L.int_syms(e)
    assert {"_hash", "_free_loop_vars", "_vars_used", "_int_syms"} <= set(e.__dict__)
    for twin in (pickle.loads(pickle.dumps(e)), copy.copy(e), copy.deepcopy(e)):
        assert not [k for k in twin.__dict__ if k.startswith("_")]
        assert twin == e and hash(twin) == h
