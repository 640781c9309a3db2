"""Functions -> loop-IR kernels: ``lower_function`` (unscheduled; the first stage of a
kernel's compile) and ``build_kernel`` (``lower_function`` then ``braze.schedule.schedule``)."""

from __future__ import annotations

import numpy as np

from ..errors import BrazeError
from ..ir import loop as L
from ..ir.graph import ConstantRef, Function, Module
from ..ir.loop import Buffer, For, Kernel, Load, Store, kernel_syms
from ..schedule import schedule
from ..ops.builder import sanitize
from ..ops.registry import get_op
from .core import LOWERINGS, LowerCtx, TensorFn, _State, cast, const
from .index_math import _deq


def _unique(name: str, used: set) -> str:
    base = sanitize(name)
    n, i = base, 1
    while n in used:
        n = f"{base}_{i}"
        i += 1
    used.add(n)
    return n


def _empty(t) -> bool:
    """A tensor with a dim of static size 0: no element of it is ever read for real."""
    return any(isinstance(d, int) and d == 0 for d in t.shape) and not t.dtype.is_narrow


def _nothing(t) -> TensorFn:
    """An empty tensor's elements as 0. A consumer that chooses between tensors (pad, concat, a
    window's padding) still builds the read it does not take: from an empty buffer that read would
    be memory outside it, and an index or a divisor read there would fail the call (fuzz seed 24563:
    an empty topk padded)."""
    e = const(0, t.dtype)
    return TensorFn(lambda idx: e, t)


def _const_fn(module, node, bufs, used):
    cname = node.attrs["name"]
    t = node.outputs[0].type
    c = module.constants.get(cname) if module is not None else None
    if c is not None and not isinstance(c, ConstantRef) and np.asarray(c).size == 1:
        v = np.asarray(c).reshape(()).item()
        e = const(v, t.dtype)
        return lambda idx: e
    buf = Buffer(_unique("c_" + cname, used), t.dtype, t.shape, "in", const_name=cname)
    bufs.append(buf)
    return lambda idx: Load(buf, tuple(idx))


def lower_function(func: Function, module: Module | None = None, name: str | None = None) -> Kernel:
    """One loop-IR Kernel computing every result of ``func`` (unscheduled).

    Buffers: one ``in`` per parameter (in order), then one ``in`` per module
    constant that is not a scalar (``const_name`` set), then one ``out`` per
    result (in order). ``kernel.syms``: the symbols the kernel needs, by name.
    """
    from ..ops.registry import _load_all
    _load_all()
    used: set = set()
    bufs: list = []
    env: dict = {}
    for p in func.params:
        b = Buffer(_unique(p.name, used), p.dtype, p.shape, "in")
        bufs.append(b)
        env[id(p)] = _nothing(p.type) if _empty(p.type) else TensorFn(lambda idx, b=b: Load(b, tuple(idx)), p.type)
    state = _State()
    n_red = 0
    kinds = set()
    for node in func.nodes:
        opdef = get_op(node.op)
        kinds.add(opdef.kind)
        if node.op == "constant":
            t = node.outputs[0].type
            env[id(node.outputs[0])] = _nothing(t) if _empty(t) else TensorFn(_const_fn(module, node, bufs, used), t)
            continue
        lower = LOWERINGS.get(node.op)
        if lower is None:
            raise BrazeError(f"op '{node.op}' has no loop lowering (kind {opdef.kind})",
                             where=str(node.loc) if node.loc else None,
                             hint="fusion must keep it out of generated kernels (extern call)")
        ins = []
        for v in node.inputs:
            ins.append(None if v is None else env[id(v)])
        while ins and ins[-1] is None:
            ins.pop()
        ctx = LowerCtx(node, module, state)
        out = lower(ctx, *ins, **node.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(node.outputs):
            raise BrazeError(f"lowering of '{node.op}' gave {len(outs)} results, expected {len(node.outputs)}")
        for v, o in zip(node.outputs, outs):
            f = o.fn if isinstance(o, TensorFn) and o.type != v.type else o
            env[id(v)] = _nothing(v.type) if _empty(v.type) else \
                o if isinstance(o, TensorFn) and o.type == v.type else TensorFn(f, v.type)
        if opdef.kind in ("reduction", "normalization"):
            n_red += 1
    # results, grouped by iteration space
    groups: list = []
    for i, r in enumerate(func.results):
        b = Buffer(_unique(r.name if r.name not in {x.name for x in bufs} else f"out_{r.name}", used),
                   r.dtype, r.shape, "out")
        bufs.append(b)
        for g in groups:
            if len(g[0]) == r.rank and all(_deq(a, c) for a, c in zip(g[0], r.shape)):
                g[1].append((b, env[id(r)]))
                break
        else:
            groups.append((r.shape, [(b, env[id(r)])]))
    body = []
    for shape, members in groups:
        vs = [L.loop_var(d, "i") for d in shape]
        stmts = [Store(b, tuple(vs), cast(f(tuple(vs)), b.dtype)) for b, f in members]
        for v, d in reversed(list(zip(vs, shape))):
            stmts = [For(v, d, stmts)]
        body.extend(stmts)
    kind = "pointwise"
    if n_red:
        kind = "stitch" if ("normalization" in kinds or n_red > 1) else "reduction"
    k = Kernel(name or "kernel_" + sanitize(func.name), bufs, [], body, kind)
    k.syms = kernel_syms(k)
    return k


def build_kernel(func: Function, module: Module | None = None, name: str | None = None) -> Kernel:
    """``lower_function`` then ``schedule`` (every stage of ``KERNEL_STAGES``), in one
    ``kernel_names`` block: loop variables are numbered per kernel."""
    with L.kernel_names():
        return schedule(lower_function(func, module, name))
