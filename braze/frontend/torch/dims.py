"""The user's view of an exported program's input dims: their names, and why a dim is what it is.

- ``names_from_spec(ep, dynamic_shapes)``: torch symbol name -> the user's Dim
  name, read from a ``dynamic_shapes`` spec (torch.export's format). A
  program loaded from a ``.pt2`` file has lost the names: torch.export.save
  (torch 2.13) writes the symbols as ``s77`` and keeps no Dim name anywhere in
  the archive, so the spec given to ``torch.export.export`` is the one place
  they survive.
- ``input_notes(...)``: per input dim, why it is fixed or why its range
  starts at 2 (torch's 0/1 specialisation), with what to do; the native entry
  and the reference quote the note when they reject an input.
"""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def user_inputs(ep) -> list:
    """The placeholders of the program's user inputs, in order."""
    kinds = {s.arg.name: s.kind.name for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and kinds.get(n.name, "USER_INPUT") == "USER_INPUT"]


def _dim_name(d) -> tuple[str | None, int | None]:
    """(name, min) a dynamic_shapes entry gives a dim: a ``torch.export.Dim`` or a string (no min);
    no name for ``Dim.AUTO``/``Dim.DYNAMIC``, a derived dim (``2*batch``) or None."""
    lo = None
    if isinstance(d, str):
        name = d
    elif type(d).__name__ == "Dim":
        name = getattr(d, "__name__", None)
        lo = getattr(d, "min", None)
        lo = lo if isinstance(lo, int) else None
    else:
        return None, None
    return (name, lo) if name and _IDENT.match(name) else (None, None)


def names_from_spec(ep, dynamic_shapes) -> dict[str, tuple[str, int | None]]:
    """torch symbol name -> (user name, the Dim's min or None), from a dynamic_shapes spec: a tuple
    (by position) or a dict (by argument name) of ``{axis: Dim}`` dicts or per-axis lists (``Dim``,
    a name, or None)."""
    if dynamic_shapes is None:
        return {}
    inputs = user_inputs(ep)
    if isinstance(dynamic_shapes, dict):
        by_name = {n.name: n for n in inputs}
        pairs = [(by_name.get(k), v) for k, v in dynamic_shapes.items()]
    elif isinstance(dynamic_shapes, (tuple, list)):
        pairs = list(zip(inputs, dynamic_shapes))
    else:
        from ...errors import BrazeError
        raise BrazeError(f"dynamic_shapes is a {type(dynamic_shapes).__name__}; expected a tuple or dict "
                         "as torch.export takes it", hint="e.g. dynamic_shapes={'x': {0: torch.export.Dim('batch')}}")
    out: dict[str, tuple[str, int | None]] = {}
    for node, spec in pairs:
        shape = getattr(node.meta.get("val"), "shape", None) if node is not None else None
        if shape is None or spec is None:
            continue
        axes = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for axis, d in axes:
            name, lo = _dim_name(d)
            if name is None or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                continue
            expr = getattr(getattr(shape[axis], "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                out.setdefault(expr.name, (name, lo))
    return out


def _suggest(arg: str, axis: int) -> str:
    return f"dynamic_shapes={{'{arg}': {{{axis}: torch.export.Dim('{arg}_dim{axis}', min=1)}}}}"


def input_notes(ep, params: dict, symbols: dict, user_ranged: set[str], func_name: str = "main") -> dict:
    """{(func, param, axis): note} for the dims a user may trip over.

    ``params``: placeholder name -> braze input Value; ``symbols``: torch symbol
    name -> braze Sym; ``user_ranged``: the torch symbols whose range the user chose.
    """
    import sympy
    ranges = {k.name: v for k, v in ep.range_constraints.items() if isinstance(k, sympy.Symbol)}
    notes: dict = {}
    seen: set[str] = set()
    for node in user_inputs(ep):
        v, p = node.meta.get("val"), params.get(node.name)
        if p is None or not hasattr(v, "shape"):
            continue
        arg = node.name
        for axis, d in enumerate(v.shape):
            key = (func_name, p.name, axis)
            if isinstance(d, int):
                why = (f"torch.export fixed this dim to {d}: dynamic_shapes did not make it dynamic, so the "
                       "example input's size was baked in")
                if d in (0, 1):
                    why += (f" (torch specialises sizes 0 and 1: an example of size {d} makes a dim static "
                            "even with Dim.AUTO or Dim.DYNAMIC; use an example of size 2 or more)")
                notes[key] = f"{why}; to serve other sizes, export with {_suggest(arg, axis)}"
                continue
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is None or not getattr(expr, "is_Symbol", False) or expr.name in seen:
                continue
            seen.add(expr.name)
            vr = ranges.get(expr.name)
            s = symbols.get(expr.name)
            if vr is None or s is None or expr.name in user_ranged or str(vr.lower) != "2":
                continue
            notes[key] = (f"torch.export gave {s.name} the range {s.range_str()}: a dim torch makes dynamic by itself "
                          "(Dim.AUTO, Dim.DYNAMIC) starts at 2, because torch specialises sizes 0 and 1; "
                          f"to serve size 1, export with {_suggest(arg, axis)}")
    return notes
