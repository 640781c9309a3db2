"""The reference interpreter: runs any graph function on NumPy arrays.

It is the test oracle for every pass and kernel. Symbols are bound from the
input shapes and checked against their ranges and the module's constraints
before anything runs; each node's output is checked against its inferred
type, so a wrong shape rule cannot pass silently.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .errors import BrazeError, InputError
from .ir import sym as S
from .ir.graph import Function, Module, input_count_message, require_constant_data
from .ir.types import DType, TensorType


def _to_numpy(x, i: int, fname: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    if isinstance(x, (int, float, bool, np.generic, list, tuple)):
        return np.asarray(x)
    raise InputError(f"input {i} of @{fname} is a {type(x).__name__}; expected a numpy array or torch tensor")


def bind_symbols(module: Module, func: Function, arrays) -> dict[str, int]:
    """Symbol values from input shapes; raises InputError on any mismatch."""
    if len(arrays) != len(func.params):
        raise InputError(f"{input_count_message(func)}; got {len(arrays)}")
    notes = module.input_notes
    env: dict[str, int] = {}
    bound_at: dict[str, tuple[str, int]] = {}
    pending = []
    for p, a in zip(func.params, arrays):
        where = f"input %{p.name} of @{func.name}, declared {p.type}"
        if a.ndim != p.rank:
            raise InputError(f"input %{p.name} has rank {a.ndim}, expected rank {p.rank}",
                             where=where)
        got = DType.from_numpy(a.dtype) if a.dtype.name in _NP_OK else None
        if got != p.dtype:
            got_name = got.name if got else str(a.dtype)
            raise InputError(f"input %{p.name} has dtype {got_name}, expected {p.dtype.name}", where=where,
                             hint=f"convert it to {p.dtype.name}")
        for axis, (d, n) in enumerate(zip(p.shape, a.shape)):
            if isinstance(d, int):
                if d != n:
                    raise InputError(f"input %{p.name} dim {axis} is {n}, expected {d}", where=where,
                                     hint=notes.get((func.name, p.name, axis)))
            elif isinstance(d, S.Sym):
                if d.name in env and env[d.name] != n:
                    raise InputError(f"input %{p.name} dim {axis} is {n}, but symbol '{d.name}' was already "
                                     f"bound to {env[d.name]} by an earlier dim", where=where,
                                     hint=f"every dim named '{d.name}' must have the same size")
                env[d.name] = int(n)
                bound_at.setdefault(d.name, (p.name, axis))
            else:
                pending.append((p, axis, d, int(n), where))
    by_name = {p.name: (p, a) for p, a in zip(func.params, arrays)}
    for (fn, pname, idx), sname in sorted(module.value_symbols.items()):
        if fn != func.name:
            continue
        p, a = by_name[pname]
        v = a.reshape(-1)[idx]
        if p.dtype.is_float:  # truncated; NaN and what int64 cannot hold saturate, as the C entry's bz_ftoi64
            v = -2 ** 63 if np.isnan(v) else int(np.clip(np.trunc(v), -2 ** 63, 2 ** 63 - 1))
        v = int(v)
        if sname in env and env[sname] != v:
            raise InputError(f"input %{pname} element {idx} is {v}, but symbol '{sname}' was already bound to "
                             f"{env[sname]}", where=f"input %{pname} of @{func.name}, declared {p.type}")
        env[sname] = v
    for p, axis, d, n, where in pending:
        try:
            v = S.evaluate(d, env)
        except KeyError as e:
            raise InputError(f"input %{p.name} dim {axis} is the expression {d}, whose symbols are not all bound "
                             f"by plain dims ({e})", where=where) from None
        if v != n:
            raise InputError(f"input %{p.name} dim {axis} is {n}, but must equal {d} = {v}", where=where)
    bad = module.constraints.violations(env)
    if bad:
        out_of_range = [k for k, s in module.symbols.items()
                        if k in env and (env[k] < s.lo or (s.hi is not None and env[k] > s.hi))]
        hints = [notes[(func.name, *bound_at[k])] for k in out_of_range
                 if k in bound_at and (func.name, *bound_at[k]) in notes]
        raise InputError(f"inputs of @{func.name} break the model's shape constraints: " + "; ".join(bad),
                         where=f"@{func.name} with {', '.join(f'{k}={v}' for k, v in sorted(env.items()))}",
                         hint="; ".join(hints) or None)
    return env


_NP_OK = {d.name for d in DType}  # numpy's names (bfloat16: ml_dtypes', imported only when one comes)


def run(module: Module, *arrays, func: str | None = None, check_types: bool = True):
    """Run ``func`` (default: the main function) on NumPy arrays or torch tensors.

    Returns one array, or a tuple when the function has several results.
    """
    f = module.functions[func] if func else module.main
    require_constant_data(module, "run the reference")
    arrays = [_to_numpy(a, i, f.name) for i, a in enumerate(arrays)]
    env = bind_symbols(module, f, arrays)
    res = run_function(module, f, arrays, env, check_types)
    return res[0] if len(res) == 1 else res


def run_function(module: Module, f: Function, arrays, env: Mapping[str, int], check_types: bool = True) -> tuple:
    """Run ``f``'s nodes on ``arrays`` with the symbols already bound in ``env``; all results, as a tuple.

    ``run`` binds the symbols from the inputs first; the ``fused`` op calls this (through ``RefCtx.run``)
    with its caller's symbols.
    """
    from .ops.registry import RefCtx, get_op

    env = dict(env)  # and the sizes its nodes decide (Module.data_symbols), bound as they run
    ctx = RefCtx(env, module.constants, module=module,
                 run=lambda g, xs: run_function(module, g, xs, env, check_types))
    vals: dict[int, np.ndarray] = {id(p): a for p, a in zip(f.params, arrays)}
    for node in f.nodes:
        opdef = get_op(node.op)
        ins = [None if v is None else vals[id(v)] for v in node.inputs]
        attrs = {k: _eval_attr(opdef.attrs[k].kind, v, env) for k, v in node.attrs.items()}
        try:
            out = opdef.reference(ctx, *ins, **attrs)
        except BrazeError:
            raise
        except Exception as e:
            raise BrazeError(f"reference of op '{node.op}' failed: {type(e).__name__}: {e}",
                             where=str(node.loc) if node.loc else None) from e
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(node.outputs):
            raise BrazeError(f"reference of op '{node.op}' returned {len(outs)} outputs, expected "
                             f"{len(node.outputs)}")
        for v, a in zip(node.outputs, outs):
            a = np.asarray(a)
            if module.data_symbols and a.ndim == v.rank:
                for d, k in zip(v.type.shape, a.shape):
                    if isinstance(d, S.Sym) and d.name in module.data_symbols:
                        env.setdefault(d.name, int(k))
            if check_types:
                _check(node, v.type, a, env)
            vals[id(v)] = a
    return tuple(vals[id(v)] for v in f.results)


def _eval_attr(kind: str, v, env: Mapping[str, int]):
    if kind == "intlike" and v is not None:
        return S.evaluate(v, env)
    if kind == "intlikes" and v is not None:
        return tuple(S.evaluate(x, env) for x in v)
    if kind == "any" and isinstance(v, S.SymExpr):
        return S.evaluate(v, env)
    return v


def _check(node, t: TensorType, a: np.ndarray, env):
    want = t.concrete_shape(env)
    if tuple(a.shape) != want or a.dtype != t.dtype.numpy:
        raise BrazeError(
            f"op '{node.op}' produced {a.dtype}{list(a.shape)} but its type says {t} = {t.dtype.numpy}{list(want)}",
            where=str(node.loc) if node.loc else None,
            hint="this is a bug in the op's shape inference or reference; please report it")
