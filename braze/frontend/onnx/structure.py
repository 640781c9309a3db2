"""Sequences and optionals at a model's edges. braze's graphs hold tensors only: a sequence braze
imports has a length fixed at import, so a graph input of sequence (or optional) type becomes one
parameter per element, and a sequence output one output per element.

A *spec* says how many, and what rank each element has where the model's type does not: a sequence's
spec is the list of its elements' ranks, an optional's is its element's spec or None (empty), a
tensor's its rank. ``spec_of`` reads one from a value as an interpreter is given it (a list of
arrays, an array, or None); ``flatten`` lists that value's arrays in parameter order. An output's
*structure* ("tensor", ("seq", n), ("opt", inner or None)) is what ``group`` rebuilds the value
from, out of the module's flat outputs.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from .common import TV, Opt, Seq, onnx_dtype

STRUCTURED = ("sequence_type", "optional_type")


def structured_input(imp, vi, specs: dict):
    """The Seq or Opt of graph input ``vi``, its tensors new parameters, per ``specs[vi.name]``."""
    kind = vi.type.WhichOneof("value")
    if vi.name not in specs:
        where = f"graph input '{vi.name}'" + (f" in {imp.path}" if imp.path else "")
        raise UnsupportedOpError(
            f"graph input '{vi.name}' is {'a sequence' if kind == 'sequence_type' else 'an optional'}: braze's "
            "compiled models take tensors", where=where,
            hint="import it with sequences={name: spec} (braze.frontend.onnx.structure), or run it through the "
                 "ONNX backend (braze.frontend.onnx.backend), which imports it for the structure each call gives")
    return _build(imp, vi.type, specs[vi.name], vi.name)


def _build(imp, tp, spec, name: str):
    kind = tp.WhichOneof("value")
    if kind == "optional_type":
        return Opt(None if spec is None else _build(imp, tp.optional_type.elem_type, spec, name), name)
    if spec is None:
        raise UnsupportedOpError(f"graph input '{name}' is not optional, but no value was given")
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if not elem.HasField("tensor_type") or not isinstance(spec, (list, tuple)):
            raise UnsupportedOpError(f"graph input '{name}': a sequence of {elem.WhichOneof('value')} given "
                                     f"as {spec!r}", hint="braze takes sequences of tensors, as lists of arrays")
        dtype = onnx_dtype(elem.tensor_type.elem_type, f"graph input '{name}'")
        items = [TV(value=imp.param(f"{name}_{k}", imp.tensor_type(f"{name}_{k}", elem.tensor_type, r, element=True)),
                    name=f"{name}_{k}") for k, r in enumerate(spec)]
        return Seq(items, dtype, name)
    if kind != "tensor_type" or not isinstance(spec, int):
        raise UnsupportedOpError(f"graph input '{name}' of type {kind} given as {spec!r}")
    return TV(value=imp.param(name, imp.tensor_type(name, tp.tensor_type, spec)), name=name)


def flatten_output(t, name: str) -> tuple[list, object]:
    """``t``'s tensors as (TV, output name) pairs, and its structure."""
    if isinstance(t, Seq):
        return [(x, f"{name}_{k}") for k, x in enumerate(t.items)], ("seq", len(t.items))
    if isinstance(t, Opt):
        if t.item is None:
            return [], ("opt", None)
        inner, shape = flatten_output(t.item, name)
        return inner, ("opt", shape)
    return [(t, name)], "tensor"


def spec_of(value):
    """The spec of an input value: a list's element ranks, an array's rank, None for an empty optional."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [np.ndim(x) for x in value]
    return np.ndim(value)


def flatten(value) -> list:
    """An input value's arrays, in the order of its parameters."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def group(structure: list, flat: list) -> list:
    """The graph's outputs from the module's flat outputs, one per structure."""
    it = iter(flat)

    def one(s):
        if s == "tensor":
            return next(it)
        if s[0] == "seq":
            return [next(it) for _ in range(s[1])]
        return None if s[1] is None else one(s[1])

    return [one(s) for s in structure]
