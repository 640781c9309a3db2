"""Plug-in mode: ``torch.compile(model, backend="braze")``.

dynamo hands braze FX graphs. braze lowers each to ATen with AOTAutograd
(functionalization, and torch's decompositions for the ops braze lacks),
compiles the largest regions it supports as native libraries, and leaves the
rest to PyTorch, with one warning per unsupported op (``partition.py``).
Sizes dynamo keeps symbolic stay symbols, so one library serves every shape.

The backend is registered through torch's ``torch_dynamo_backends`` entry
point: ``torch.compile(m, backend="braze")`` works without ``import braze``.
"""

from __future__ import annotations


def backend(gm, example_inputs, options: dict | None = None, **kwargs):
    """The dynamo backend (torch imports braze only when a model is compiled with it)."""
    from .dynamo import braze_backend
    return braze_backend(gm, example_inputs, options=options, **kwargs)


__all__ = ["backend"]
