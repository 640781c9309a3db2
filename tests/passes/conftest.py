"""Helpers for pass tests (through the ``P`` fixture): parse IR text, run a pass, check the
result's text and that the reference interpreter gives the same results before and after
at several symbol values; zoo models imported once per session (``zoo_modules``)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import braze.reference
from braze import ir
from braze.ir import sym as S
from braze.passes import copy_module
from braze.testing import assert_close, rand


def parse(text: str, constants=None):
    m = ir.parse(text, constants=constants)
    ir.verify(m)
    return m


def random_inputs(module, env, rng, func=None):
    f = module.functions[func] if func else module.main
    out = []
    for p in f.params:
        shape = tuple(S.evaluate(d, env) for d in p.type.shape)
        dt = p.type.dtype.name
        is_int = dt.startswith("int")
        out.append(rand(rng, shape, dt, low=0 if is_int else None, high=3 if is_int else None))
    return out


def check_equiv(before, after, envs, rng=None, rtol=None, atol=None):
    """reference.run(before) == reference.run(after) at every env (symbol name -> value)."""
    rng = rng or np.random.default_rng(0)
    for env in envs:
        xs = random_inputs(before, env, rng)
        a = braze.reference.run(before, *xs)
        b = braze.reference.run(after, *xs)
        a = a if isinstance(a, tuple) else (a,)
        b = b if isinstance(b, tuple) else (b,)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_close(y, x, rtol=rtol, atol=atol, what=f"at {env}")


def run_pass(p, text: str, constants=None):
    """(module before, module after ``p``): the pass runs on a copy; both verify."""
    before = parse(text, constants)
    after = p(copy_module(before))
    if isinstance(after, tuple):  # fuse: (module, its log)
        after = after[0]
    ir.verify(after)
    return before, after


def body(module, func="main") -> list[str]:
    """The node lines of a function, without locations, stripped (for "this IR out" checks)."""
    text = str(module)
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().startswith(f"func @{func}("))
    out = []
    for l in lines[start + 1:]:
        s = l.strip()
        if s == "}":
            break
        out.append(s.split("  loc{")[0])
    return out


@pytest.fixture
def P():
    return types.SimpleNamespace(parse=parse, check_equiv=check_equiv, run_pass=run_pass, body=body,
                                 random_inputs=random_inputs)


class _Zoo:
    def __init__(self):
        self._m = {}
        self._zm = {}

    def model(self, name):
        if name not in self._zm:
            from braze import zoo
            self._zm[name] = zoo.get(name)
        return self._zm[name]

    def module(self, name):
        """The braze Module imported from the model's torch.export program (do not mutate)."""
        if name not in self._m:
            import braze
            from braze import zoo
            self._m[name] = braze.import_torch(zoo.export(self.model(name)))
        return self._m[name]


@pytest.fixture(scope="session")
def zoo_modules():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return _Zoo()
