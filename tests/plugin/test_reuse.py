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


class Model:  # what the table holds weakly: any object a region keeps alive
    pass


@pytest.fixture
def empty_table():
    reuse.clear()
    yield
    reuse.clear()


def test_find_returns_the_remembered_library(empty_table):
    g, s = parse(GENERAL), parse(SPECIAL)
    model = Model()
    reuse.remember(g, {"w": ("test-reuse", 7)}, model)
    assert reuse.find(s, {"w": ("test-reuse", 7)}).model is model
    assert reuse.find(s, {"w": ("test-reuse", 8)}) is None


def test_why_a_graph_is_not_an_instance_is_logged(empty_table, caplog):
    import logging
    g = parse(GENERAL)
    model = Model()
    reuse.remember(g, {"w": ("k", 1)}, model)
    with caplog.at_level(logging.INFO, logger="braze.plugin"):
        other = SPECIAL.replace("%z = reshape(%y)", "%n = neg(%y) : f32[s, 4]\n    %z = reshape(%n)")
        assert reuse.find(parse(other), {"w": ("k", 1)}, "fused_3") is None
    text = caplog.text
    assert "fused_3 is not an instance" in text and "the IR differs at line" in text


def test_the_table_holds_libraries_weakly_and_is_bounded(empty_table, monkeypatch):
    import gc
    g, s = parse(GENERAL), parse(SPECIAL)
    model = Model()
    reuse.remember(g, {"w": ("k", 1)}, model)
    assert reuse.size() == 1
    del model
    gc.collect()
    assert reuse.size() == 0 and reuse.find(s, {"w": ("k", 1)}) is None  # no compiled function holds it
    monkeypatch.setattr(reuse, "MAX_ENTRIES", 3)
    models = [Model() for _ in range(5)]
    for i, m in enumerate(models):
        reuse.remember(g, {"w": ("k", i)}, m)
    assert reuse.size() == 3
    assert reuse.find(s, {"w": ("k", 0)}) is None and reuse.find(s, {"w": ("k", 4)}).model is models[4]


# a backward's region: the gradient, and its sum over the batch (a bias's, a position table's)
GRAD_GENERAL = """
module {
  symbols {
    b in [1, inf]
  }
  func @main(%g: f32[b, 4]) -> (f32[b, 4], f32[1, 4]) {
    %t = tanh(%g) : f32[b, 4]
    %s = reduce_sum(%t) {axes=[0], keepdims=true} : f32[1, 4]
    return %t, %s
  }
}
"""

# torch's at a batch of 1: the sum over the batch is the gradient itself, returned once
GRAD_SPECIAL = """
module {
  func @main(%g: f32[1, 4]) -> (f32[1, 4]) {
    %t = tanh(%g) : f32[1, 4]
    return %t
  }
}
"""


def test_a_backward_at_batch_1_takes_the_general_library_s_outputs_it_needs(empty_table):
    """Fewer results than the library: the instance picks its outputs. A sum over dims of 1 is the
    value summed only in a backward's region (a -0.0 would come back +0.0)."""
    model = Model()
    reuse.remember(parse(GRAD_GENERAL), {}, model)
    special = parse(GRAD_SPECIAL)
    match = reuse.find(special, {}, grad_sums=True)
    assert match is not None and match.model is model and match.pick == (0,)
    assert reuse.find(special, {}) is None
    twice = parse(GRAD_SPECIAL.replace("-> (f32[1, 4])", "-> (f32[1, 4], f32[1, 4])").replace(
        "return %t", "return %t, %t"))
    assert reuse.find(twice, {}, grad_sums=True).pick is None  # the library's two outputs are its two
    wide = GRAD_GENERAL.replace("b in [1, inf]", "b in [1, inf]\n    n in [1, inf]").replace(
        "f32[b, 4]", "f32[b, n]").replace("f32[1, 4]", "f32[1, n]")
    across = wide.replace("axes=[0]", "axes=[1]").replace("f32[1, n]", "f32[b, 1]")  # a sum over n
    for general, found in ((wide, (0,)), (across, None)):
        reuse.clear()
        reuse.remember(parse(general), {}, model)
        match = reuse.find(parse(GRAD_SPECIAL.replace("f32[1, 4]", "f32[1, 2]")), {}, grad_sums=True)
        assert (match and match.pick) == found, general  # n = 2: only a sum over b = 1 is the value


def test_dynamo_reset_empties_the_table(empty_table):
    torch = pytest.importorskip("torch")
    model = Model()
    reuse.remember(parse(GENERAL), {"w": ("k", 1)}, model)
    assert reuse.size() == 1
    torch._dynamo.reset()
    assert reuse.size() == 0


def test_weights_compare_by_content_or_identity_never_by_address():
    torch = pytest.importorskip("torch")
    a = torch.arange(6.0)
    # a tensor the graph holds: by its bytes, whichever object carries them
    assert reuse.weight_key(a, frozen=False) == reuse.weight_key(a.clone(), frozen=False)
    assert reuse.weight_key(a, frozen=False) != reuse.weight_key(a + 1, frozen=False)
    # a frozen weight: the same tensor at the same version
    k = reuse.weight_key(a, frozen=True)
    assert k == reuse.weight_key(a, frozen=True)
    assert k != reuse.weight_key(a.clone(), frozen=True)
    a.mul_(2)
    assert k != reuse.weight_key(a, frozen=True)
    assert reuse.weight_key(torch.tensor(0.5), frozen=True) == ("value", 0.5, "torch.float32")
