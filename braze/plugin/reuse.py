"""Reusing a symbolic library for a graph dynamo specialised.

dynamo specialises sizes 0 and 1, and its automatic-dynamic mode traces a first graph with every
size fixed. Each such graph reaches braze as a new graph. When a region's IR equals the IR of a
region braze compiled before with symbols, once those symbols are bound to the sizes this graph
fixes, the symbolic library serves it and no C compiler runs. Both sides are compared in
canonical form (after canonicalize, constant folding, CSE and DCE, which drop what a size of 1 makes trivial, such
as an expand to the same shape), with value names normalised and weights compared as the same
torch tensors in the same state. Equal IR computes the same values, so a reuse never changes an
answer.
"""

from __future__ import annotations

import json
import re
import threading

import numpy as np

from ..ir import sym as S
from ..ir.graph import Module
from ..ir.types import TensorType

_lock = threading.Lock()
_libraries: dict[tuple, list] = {}  # input dtypes and ranks -> [(module, weights, model)]
_VALUE_RE = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[\w.]+)')
_CONST_RE = re.compile(r'constant\(\) \{name=("(?:[^"\\]|\\.)*")\}')
_LOC_RE = re.compile(r"  loc\{.*$", re.M)


def _signature(m: Module) -> tuple:
    f = m.main
    return tuple((p.type.dtype, p.type.rank) for p in f.params), len(f.results)


def is_symbolic(m: Module) -> bool:
    return any(not p.type.is_static() for p in m.main.params)


def remember(m: Module, weights: dict, model) -> None:
    """Keep a symbolic region (as imported) for later graphs; ``weights``: constant -> fingerprint.
    The weights' data is dropped: they compare by fingerprint, and the library holds its own."""
    from ..passes.common import copy_module
    if is_symbolic(m):
        kept = copy_module(m)
        for name in weights:
            kept.constants[name] = None
        with _lock:
            _libraries.setdefault(_signature(m), []).append((kept, weights, model))


def find(m: Module, weights: dict):
    """A compiled model whose symbolic IR, with symbols bound, is ``m``; or None."""
    with _lock:
        candidates = list(_libraries.get(_signature(m), ()))
    mine = None
    for general, gweights, model in candidates:
        env = bind_params(general, m)
        if env is None:
            continue
        if mine is None:
            mine = canonical(m, weights)
        if canonical(specialize(general, env), gweights) == mine:
            return model
    return None


def bind_params(general: Module, special: Module) -> dict | None:
    """symbol -> size, binding the general inputs' symbolic dims to the special inputs' dims."""
    env: dict = {}
    store = general.constraints
    for p, q in zip(general.main.params, special.main.params):
        if p.type.dtype != q.type.dtype or p.type.rank != q.type.rank:
            return None
        for a, b in zip(p.type.shape, q.type.shape):
            if isinstance(a, S.Sym) and isinstance(b, S.Sym):  # the special range must lie inside
                ga, sb = store.symbol(a.name), special.constraints.symbol(b.name)
                ga, sb = (a if ga is None else ga), (b if sb is None else sb)
                if sb.lo < max(1, ga.lo) or (ga.hi is not None and (sb.hi is None or sb.hi > ga.hi)):
                    return None
            if isinstance(a, S.Sym):
                if a in env and S.as_intlike(env[a]) != S.as_intlike(b):
                    return None
                sym = store.symbol(a.name)
                sym = a if sym is None else sym
                if isinstance(b, int) and (b < max(1, sym.lo) or (sym.hi is not None and b > sym.hi)):
                    return None
                env[a] = b
            elif S.is_symbolic(a):
                if not S.free_syms(a) <= env.keys() or S.as_intlike(S.subs(a, env)) != S.as_intlike(b):
                    return None
            elif S.is_symbolic(b) or a != b:
                return None
    return env


def _subs(x, env):
    if isinstance(x, S.SymExpr):
        return S.subs(x, env)
    if isinstance(x, list):
        return [_subs(v, env) for v in x]
    if isinstance(x, tuple):
        return tuple(_subs(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _subs(v, env) for k, v in x.items()}
    return x


def specialize(m: Module, env: dict) -> Module:
    """A copy of ``m`` with the symbols in ``env`` replaced by their values, in every type and attribute."""
    from ..passes.common import copy_module
    out = copy_module(m)
    for f in out.functions.values():
        for v in [*f.params, *(o for n in f.nodes for o in n.outputs)]:
            v.type = TensorType(v.type.dtype, tuple(S.subs(d, env) for d in v.type.shape))
        for n in f.nodes:
            n.attrs = _subs(n.attrs, env)
    return out


def canonical(m: Module, weights: dict) -> tuple:
    """The main function's text after canonicalize, constant folding (weights left alone), CSE and
    DCE, with names numbered in order of appearance, and each constant it uses as a weight
    fingerprint or its bytes."""
    from ..ir.printer import print_function
    from ..passes import canonicalize, constant_fold, cse, dce
    from ..passes.common import copy_module
    c = copy_module(m)
    for name in weights:  # opaque: folding never copies a weight, and weights compare by fingerprint
        c.constants[name] = None
    for p in (canonicalize, constant_fold, cse, dce):
        c = p(c) or c
    text = _LOC_RE.sub("", print_function(c, c.main))
    consts: list = []
    cids: dict[str, str] = {}

    def const(mt):
        name = json.loads(mt.group(1))
        if name not in cids:
            cids[name] = f"k{len(cids)}"
            if name in weights:
                consts.append(weights[name])
            else:
                arr = np.asarray(c.constants[name])
                consts.append((str(arr.dtype), arr.shape, arr.tobytes()))
        return f"constant() {{{cids[name]}}}"

    ids: dict[str, str] = {}

    def value(mt):
        return ids.setdefault(mt.group(0), f"%{len(ids)}")

    text = _CONST_RE.sub(const, text)
    return _VALUE_RE.sub(value, text), tuple(consts)
