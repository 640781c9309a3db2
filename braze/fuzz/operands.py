"""Operand picking shared by the proposers (braze/fuzz/proposers.py): choosing the next op,
reading a value's dtype and shape, broadcasting partners, axes and integer bounds."""

from __future__ import annotations

import numpy as np

from ..ir import sym as S
from ..ops import all_ops
from .common import BOOL, GVal, New, Reject

INT_LIMIT = 2.0 ** 30  # integer values stay below this (no overflow in int32 or int64 arithmetic)

# op kind -> weight when choosing what to build next
KIND_WEIGHTS = {"elementwise": 36, "injective": 18, "broadcast": 3, "reduction": 12, "normalization": 8,
                "gemm": 9, "conv": 4, "pool": 3, "attention": 1.5, "creation": 2, "opaque": 2}


def choose_op(gen, ops):
    by_kind: dict[str, list[str]] = {}
    reg = all_ops()
    for o in ops:
        by_kind.setdefault(reg[o].kind, []).append(o)
    kinds = sorted(by_kind)
    w = np.array([KIND_WEIGHTS.get(k, 1.0) for k in kinds])
    k = kinds[int(gen.rng.choice(len(kinds), p=w / w.sum()))]
    return gen.choice(by_kind[k])


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def props(gen, x):
    """(exact, special, ibound) of an operand, new or built."""
    if isinstance(x, GVal):
        return x.exact, x.special, x.ibound
    if x.const:
        return True, False, float(np.abs(x.data).max(initial=0)) if x.data.size else 0.0
    special = gen.special and x.type.dtype.is_float and x.index_dim is None
    if x.index_dim is not None:
        return True, False, float(max(gen.evals(x.index_dim)))
    return True, special, float(max(abs(x.low if x.low is not None else 5), abs(x.high if x.high is not None else 6)))


def dtype_of(x):
    return x.type.dtype if isinstance(x, New) else x.dtype


def shape_of(x):
    return x.type.shape if isinstance(x, New) else x.shape


def bcast_ok(gen, a, b) -> bool:
    """Shapes that broadcast without an assumption: dims equal (provably) or 1."""
    store = gen.module.constraints
    for p, q in zip(reversed(a), reversed(b)):
        if (isinstance(p, int) and p == 1) or (isinstance(q, int) and q == 1):
            continue
        if store.equal(p, q) is not True:
            return False
    return True


def bcast_to_ok(gen, target, shape) -> bool:
    """``shape`` broadcasts *to* ``target`` (its dims are 1 or equal to the target's)."""
    return len(shape) <= len(target) and bcast_ok(gen, target, shape) and all(
        not (isinstance(t, int) and t == 1) or (isinstance(d, int) and d == 1)
        for t, d in zip(reversed(target), reversed(shape)))


def numeric(g) -> bool:
    return g.dtype is not BOOL


def check_int_bound(b: float):
    if b > INT_LIMIT:
        raise Reject("integer bound")


def random_axes(gen, rank):
    if rank == 0 or gen.rng.random() < 0.2:
        return None
    k = int(gen.rng.integers(1, rank + 1))
    axes = sorted(gen.rng.choice(rank, size=k, replace=False).tolist())
    return tuple(a - rank if gen.rng.random() < 0.3 else a for a in axes)


def reduced_count(gen, shape, axes) -> list[int]:
    """Elements reduced per output element, at each run shape."""
    ax = range(len(shape)) if axes is None else [a % max(len(shape), 1) for a in axes]
    return [int(np.prod([S.evaluate(shape[a], e) for a in ax])) for e in gen.envs]


def partner(gen, a, dtype=None, exact=False, const=None, allow_bool=False):
    """A second operand that broadcasts with ``a``: from the graph, or new."""
    dt = dtype or dtype_of(a)

    def fits(g):
        if exact and not g.exact:
            return False
        if (g.dtype is BOOL) != (dt is BOOL) and not allow_bool:
            return False
        if dt.is_float != g.dtype.is_float:
            return False
        return bcast_ok(gen, shape_of(a), g.shape)

    if gen.rng.random() < 0.5:
        got = gen.pick(fits, fresh_ok=False)
        if got is not None:
            return got
    return gen.like(shape_of(a), dt, const=const)
