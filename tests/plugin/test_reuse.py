"""Reusing a symbolic library for a graph dynamo specialised: IR text in, match or no match out."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.plugin import reuse

W = np.arange(16, dtype=np.float32).reshape(4, 4) / 16

GENERAL = """
module {
  symbols {
    b in [1, inf]
    s in [1, 64]
  }
  constants {
    @w : f32[4, 4] = WEIGHT
  }
  func @main(%x: f32[b, s, 4]) -> (f32[b, s, 4]) {
    %w = constant() {name="w"} : f32[4, 4]
    %f = reshape(%x) {shape=[b * s, 4]} : f32[b * s, 4]
    %y = linear(%f, %w) : f32[b * s, 4]
    %z = reshape(%y) {shape=[b, s, 4]} : f32[b, s, 4]
    %e = expand(%z) {shape=[b, s, 4]} : f32[b, s, 4]
    return %e
  }
}
"""

# dynamo's graph at b = 1: literal sizes, and no expand (a same-shape expand vanishes in its trace)
SPECIAL = """
module {
  symbols {
    s in [1, 64]
  }
  constants {
    @w : f32[4, 4] = WEIGHT
  }
  func @main(%x: f32[1, s, 4]) -> (f32[1, s, 4]) {
    %w = constant() {name="w"} : f32[4, 4]
    %f = reshape(%x) {shape=[s, 4]} : f32[s, 4]
    %y = linear(%f, %w) : f32[s, 4]
    %z = reshape(%y) {shape=[1, s, 4]} : f32[1, s, 4]
    return %z
  }
}
"""


def parse(text):
    return braze.ir.parse(text.replace("WEIGHT", "[" + ", ".join(repr(float(v)) for v in W.ravel()) + "]"))


def test_a_specialised_graph_is_an_instance_of_the_symbolic_one():
    g, s = parse(GENERAL), parse(SPECIAL)
    env = reuse.bind_params(g, s)
    assert {k.name: v for k, v in env.items()} == {"b": 1, "s": braze.ir.sym.Sym("s")}
    weights = {"w": ("tensor", 1)}
    assert reuse.canonical(reuse.specialize(g, env), weights) == reuse.canonical(s, weights)


@pytest.mark.parametrize("edit, why", [
    (lambda t: t.replace("linear(%f, %w)", "matmul(%f, %w)"), "another op"),
    (lambda t: t.replace("s in [1, 64]", "s in [1, 128]").replace("f32[1, s, 4]) ->", "f32[1, 100, 4]) ->"),
     "a size outside the general range"),
    (lambda t: t.replace("%x: f32[1, s, 4]", "%x: f32[1, s, 4], %x2: f32[1, s, 4]"), "another signature"),
])
def test_what_is_not_an_instance(edit, why):
    g, s = parse(GENERAL), parse(edit(SPECIAL))
    env = reuse.bind_params(g, s)
    weights = {"w": ("tensor", 1)}
    same = env is not None and reuse.canonical(reuse.specialize(g, env), weights) == reuse.canonical(s, weights)
    assert not same, why


def test_a_changed_weight_is_not_an_instance():
    g, s = parse(GENERAL), parse(SPECIAL)
    env = reuse.bind_params(g, s)
    assert reuse.canonical(reuse.specialize(g, env), {"w": ("tensor", 1)}) != \
        reuse.canonical(s, {"w": ("tensor", 2)})  # the same tensor, written in place since


def test_find_returns_the_remembered_library():
    g, s = parse(GENERAL), parse(SPECIAL)
    marker = object()
    reuse.remember(g, {"w": ("test-reuse", 7)}, marker)
    assert reuse.find(s, {"w": ("test-reuse", 7)}) is marker
    assert reuse.find(s, {"w": ("test-reuse", 8)}) is None
