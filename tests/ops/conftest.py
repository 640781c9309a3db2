"""Helpers for op tests: build one op over symbolically shaped params, run the
reference, and move arrays to and from torch (bfloat16 included).

Tests get them through the ``T`` fixture; ``rng`` comes from tests/conftest.py."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import braze.reference
from braze.ir.sym import Sym
from braze.ir.types import DType, TensorType
from braze.ops.builder import Builder

# (b, s) values every symbolic test runs at: size 1, odd, just past a power of two, large
SIZES = [(1, 1), (3, 7), (2, 65), (17, 128)]

_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "int8": torch.int8,
          "uint8": torch.uint8, "bool": torch.bool}


def np_dtype(name: str) -> np.dtype:
    return DType[name].numpy


def parse_dims(spec: str) -> tuple:
    """'b s 4' -> (Sym('b'), Sym('s'), 4); '' -> ()."""
    return tuple(int(t) if t.lstrip("-").isdigit() else Sym(t) for t in spec.split())


def build(op: str, specs, dtypes, **attrs):
    """A module computing ``op`` on params typed ``dtype[spec]`` (None: absent optional input).

    Returns (module, output Value or tuple)."""
    b = Builder()
    params = []
    for i, (spec, dt) in enumerate(zip(specs, dtypes)):
        if spec is None:
            params.append(None)
            continue
        params.append(b.param(f"x{i}", TensorType(DType[dt], parse_dims(spec))))
    out = b.op(op, params, **attrs)
    b.ret(*(out if isinstance(out, tuple) else (out,)))
    return b.module, out


def run(module, *arrays):
    return braze.reference.run(module, *[a for a in arrays if a is not None])


def concrete(spec: str, env: dict) -> tuple:
    return tuple(d if isinstance(d, int) else env[d.name] for d in parse_dims(spec))


def rand(rng, shape, dtype: str, scale=1.0, low=None, high=None):
    """Random array of ``dtype``: normal*scale for floats, [low, high) ints, coin flips for bool."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if DType[dtype].is_int:
        return rng.integers(-5 if low is None else low, 6 if high is None else high, size=shape).astype(dtype)
    if low is not None:
        x = rng.uniform(low, high, size=shape)
    else:
        x = rng.standard_normal(shape) * scale
    return x.astype(np_dtype(dtype))


def to_torch(a):
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def from_torch(t):
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np_dtype("bfloat16"))
    return t.detach().numpy()


def check(actual, expected_torch, dtype: str | None = None, what: str = "", rtol=None, atol=None):
    """Compare a reference result with a torch result: same dtype, then values."""
    from braze.testing import assert_close

    exp = from_torch(expected_torch) if isinstance(expected_torch, torch.Tensor) else np.asarray(expected_torch)
    actual = np.asarray(actual)
    assert actual.dtype == exp.dtype, f"{what}: dtype {actual.dtype} != expected {exp.dtype}"
    assert_close(actual, exp, dtype=dtype or exp.dtype.name, rtol=rtol, atol=atol, what=what)


@pytest.fixture
def T():
    """The helpers above, as one namespace."""
    return types.SimpleNamespace(SIZES=SIZES, TORCH=_TORCH, np_dtype=np_dtype, parse_dims=parse_dims, build=build,
                                 run=run, concrete=concrete, rand=rand, to_torch=to_torch, from_torch=from_torch,
                                 check=check)
