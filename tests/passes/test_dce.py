"""dce: unused nodes, unused constants, uncalled fused sub-functions."""

from __future__ import annotations

from braze.passes import dce


def test_dead_nodes_and_constants_go(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @c : f32[] = [2.0]
    @unused : f32[] = [3.0]
  }
  func @main(%x: f32[n]) -> (f32[n]) {
    %c = constant() {name="c"} : f32[]
    %0 = mul(%x, %c) : f32[n]
    %1 = exp(%0) : f32[n]
    %2 = neg(%x) : f32[n]
    return %2
  }
}
"""
    before, after = P.run_pass(dce, text)
    assert P.body(after) == ["%2 = neg(%x) : f32[n]", "return %2"]
    assert not after.constants
    P.check_equiv(before, after, [{"n": 3}])


def test_uncalled_fused_function_goes(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n]) -> (f32[n]) {
    %0 = fused(%x) {callee="fused_0", kind="pointwise"} : f32[n]
    return %0
  }
  func @fused_0(%x: f32[n]) -> (f32[n]) {
    %0 = neg(%x) : f32[n]
    return %0
  }
  func @fused_1(%x: f32[n]) -> (f32[n]) {
    %0 = exp(%x) : f32[n]
    return %0
  }
}
"""
    before, after = P.run_pass(dce, text)
    assert list(after.functions) == ["main", "fused_0"]
    P.check_equiv(before, after, [{"n": 1}, {"n": 4}])
