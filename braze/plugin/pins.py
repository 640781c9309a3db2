"""Integer arguments of the user's: dynamo makes them symbols (GPT-2's ``logits_to_keep``, a
decoder's ``start_pos``). braze reads sizes from shapes only, so where no tensor shape carries one,
the region takes it as a 0-d tensor of its own (``size_arguments``), made at each call;
one it cannot take so is pinned: the library is built for the value at hand, and every call
checks that the arguments agree (``pinned_symbols``, ``pin_check``)."""

from __future__ import annotations


def size_arguments(places, shape_env, read: set) -> list[int]:
    """Positions of the region's integer arguments that are the user's (not a size from another
    graph) and a plain symbol no tensor input's shape gives (``read``): the region takes each as
    a 0-d int64 tensor whose value the entry reads as the symbol's (``as_sizes``), so one library
    serves every value. Symbols are sizes, from 0 up: a negative value fails the entry's range
    check and that call runs in PyTorch; an argument dynamo knows is negative is pinned instead."""
    import sympy
    import torch
    ranges = getattr(shape_env, "var_to_range", {})
    out = []
    for i, p in enumerate(places):
        v = p.meta.get("val")
        e = v.node.expr if isinstance(v, torch.SymInt) else None
        if isinstance(e, sympy.Symbol) and e not in read and _users_argument(shape_env, e) and \
                not (e in ranges and ranges[e].upper < 0):
            out.append(i)
    return out


def _users_argument(shape_env, sym) -> bool:
    """``sym`` is an integer argument of the user's function, not a size from another graph."""
    sources = getattr(shape_env, "var_to_sources", {}).get(sym)
    return bool(sources) and all(type(src).__name__ == "LocalSource" for src in sources)


def as_sizes(main, positions: tuple[int, ...]):
    """``main`` taking the integers at ``positions`` of its arguments as 0-d int64 arrays (NumPy's:
    2 us a call less each than torch.tensor, at every decode step)."""
    import numpy as np

    def call(*args):
        args = list(args)
        for k in positions:
            args[k] = np.array(args[k], np.int64)
        return main(*args)
    return call


def pinned_symbols(places, shape_env, read: set) -> dict:
    """Integer arguments of the user's function that dynamo made symbols (GPT-2's ``logits_to_keep``)
    and no tensor input's shape gives (``read``: the symbols those shapes give): sympy symbol -> the
    value it has at this call. braze reads sizes only from shapes, so the library is built for that
    value (``pin_check``). A size from another graph is not an argument of the user's and is never
    pinned: it changes with the shapes."""
    import sympy
    # torch 2.13 renamed var_to_val, and reading the old name warns the user
    hints = shape_env.backed_var_to_val if hasattr(shape_env, "backed_var_to_val") else \
        getattr(shape_env, "var_to_val", {})
    out = {}
    for p in places:
        for _, d in _symbolic_sizes(p.meta.get("val")):
            for sym in d.node.expr.free_symbols:
                if sym not in read and sym in hints and _users_argument(shape_env, sym):
                    out[sym] = sympy.Integer(int(hints[sym]))
    return out


def pin_check(places, arg_index, pinned: dict):
    """A test of the region's arguments that passes when they agree with the ``pinned`` values:
    every integer argument and tensor dim whose expression uses a pinned symbol equals that
    expression, the pinned values put in and the other symbols read from the tensors' shapes.
    None when some expression is not sums and products (then nothing is pinned)."""
    import torch

    from ..frontend.torch.importer import linear_form
    readers = {}  # symbol -> (argument, dim, a, b): the dim, the pinned values put in, is a*s + b
    for i in arg_index:
        for d, dim in enumerate(places[i].meta["val"].shape):
            form = linear_form(dim.node.expr.xreplace(pinned)) if isinstance(dim, torch.SymInt) else None
            if form is not None:
                readers.setdefault(form[0], (i, d, form[1], form[2]))
    checks = []
    for i, p in enumerate(places):
        for d, dim in _symbolic_sizes(p.meta.get("val")):
            e = dim.node.expr
            if e.free_symbols & pinned.keys():
                f = _evaluator(e.xreplace(pinned), readers)
                if f is None:
                    return None
                checks.append((i, d, f))

    def agrees(args) -> bool:
        return all((args[i] if d is None else args[i].shape[d]) == f(args) for i, d, f in checks)
    return agrees


def _symbolic_sizes(val) -> list:
    """(dim, SymInt) of ``val``'s symbolic sizes: (None, val) for an integer, (d, size) for a
    tensor's dim d."""
    import torch
    if isinstance(val, torch.SymInt):
        return [(None, val)]
    if isinstance(val, torch.Tensor):
        return [(d, n) for d, n in enumerate(val.shape) if isinstance(n, torch.SymInt)]
    return []


def _evaluator(e, readers):
    """``e`` (integers, symbols, + and *) as a function of the region's arguments, or None."""
    import math
    if e.is_Integer:
        c = int(e)
        return lambda args: c
    if e.is_Symbol:
        if e not in readers:
            return None
        i, d, a, b = readers[e]
        return lambda args: (args[i].shape[d] - b) // a
    if e.is_Add or e.is_Mul:
        fs = [_evaluator(x, readers) for x in e.args]
        if any(f is None for f in fs):
            return None
        if e.is_Add:
            return lambda args: sum(f(args) for f in fs)
        return lambda args: math.prod(f(args) for f in fs)
    return None


__all__ = ["as_sizes", "pin_check", "pinned_symbols", "size_arguments"]
