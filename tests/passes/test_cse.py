"""cse: same op, same inputs, same attributes -> one node."""

from __future__ import annotations

from braze.passes import cse

ENVS = [{"n": 1}, {"n": 6}]


def test_duplicates_merge(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @c : f32[] = [2.0]
    @d : f32[] = [2.0]
  }
  func @main(%x: f32[n]) -> (f32[n]) {
    %c = constant() {name="c"} : f32[]
    %d = constant() {name="d"} : f32[]
    %0 = mul(%x, %c) : f32[n]
    %1 = mul(%x, %d) : f32[n]
    %2 = exp(%0) : f32[n]
    %3 = exp(%1) : f32[n]
    %4 = add(%2, %3) : f32[n]
    return %4
  }
}
"""
    before, after = P.run_pass(cse, text)
    assert P.body(after) == [
        '%c = constant() {name="c"} : f32[]',
        "%0 = mul(%x, %c) : f32[n]",
        "%2 = exp(%0) : f32[n]",
        "%4 = add(%2, %2) : f32[n]",
        "return %4",
    ]
    assert set(after.constants) == {"c"}
    P.check_equiv(before, after, ENVS)


def test_different_attrs_stay_apart(P):
    # 0.0 and -0.0 are different attributes; so are different axes
    text = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n, 4]) -> (f32[n, 4], f32[n, 4], f32[n], f32[4]) {
    %0 = clamp(%x) {max=none, min=0.0} : f32[n, 4]
    %1 = clamp(%x) {max=none, min=-0.0} : f32[n, 4]
    %2 = reduce_sum(%x) {axes=[1], keepdims=false} : f32[n]
    %3 = reduce_sum(%x) {axes=[0], keepdims=false} : f32[4]
    return %0, %1, %2, %3
  }
}
"""
    before, after = P.run_pass(cse, text)
    assert len(after.main.nodes) == 4
    P.check_equiv(before, after, ENVS)
