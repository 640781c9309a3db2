"""Helpers for op tests: build one op over symbolically shaped params, run the
reference, and move arrays to and from torch (bfloat16 included).

Tests get them through the ``T`` fixture; ``rng`` comes from tests/conftest.py."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import braze.reference
from braze import testing
from braze.ir.sym import Sym
from braze.ir.types import DType, TensorType

# (b, s) values every symbolic test runs at: size 1, odd, just past a power of two, large
SIZES = [(1, 1), (3, 7), (2, 65), (17, 128)]

_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int8": torch.int8,
          "uint8": torch.uint8, "bool": torch.bool, "int16": torch.int16, "uint16": torch.uint16,
          "uint32": torch.uint32, "uint64": torch.uint64}


def np_dtype(name: str) -> np.dtype:
    return DType[name].numpy


def parse_dims(spec: str) -> tuple:
    """'b s 4' -> (Sym('b'), Sym('s'), 4); '' -> ()."""
    return tuple(int(t) if t.lstrip("-").isdigit() else Sym(t) for t in spec.split())


def build(op: str, specs, dtypes, **attrs):
    """A module computing ``op`` on params typed ``dtype[spec]`` (None: absent optional input).

    Returns (module, output Value or tuple)."""
    given = [i for i, spec in enumerate(specs) if spec is not None]

    def fn(b, *params):
        args = [None] * len(specs)
        for i, p in zip(given, params):
            args[i] = p
        return b.op(op, args, **attrs)

    return testing.build([TensorType(DType[dtypes[i]], parse_dims(specs[i])) for i in given], fn)


def run(module, *arrays):
    return braze.reference.run(module, *[a for a in arrays if a is not None])


def concrete(spec: str, env: dict) -> tuple:
    return testing.concrete_shape(parse_dims(spec), env)


def to_torch(a):
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a if a.flags.c_contiguous else a.copy())  # ascontiguousarray makes 0-d 1-d


def from_torch(t):
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np_dtype("bfloat16"))
    return t.detach().numpy()


def check(actual, expected_torch, dtype: str | None = None, what: str = "", rtol=None, atol=None):
    """Compare a reference result with a torch result: same dtype, then values."""
    exp = from_torch(expected_torch) if isinstance(expected_torch, torch.Tensor) else np.asarray(expected_torch)
    actual = np.asarray(actual)
    assert actual.dtype == exp.dtype, f"{what}: dtype {actual.dtype} != expected {exp.dtype}"
    testing.assert_close(actual, exp, dtype=dtype or exp.dtype.name, rtol=rtol, atol=atol, what=what)


@pytest.fixture
def T():
    """The helpers above (and braze.testing.rand), as one namespace."""
    return types.SimpleNamespace(SIZES=SIZES, TORCH=_TORCH, np_dtype=np_dtype, parse_dims=parse_dims, build=build,
                                 run=run, concrete=concrete, rand=testing.rand, to_torch=to_torch,
                                 from_torch=from_torch, check=check)
