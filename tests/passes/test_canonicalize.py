"""canonicalize: this IR in, that IR out; and the reference gives the same results."""

from __future__ import annotations

import numpy as np

from braze.passes import canonicalize

HEAD = """module {
  symbols {
    n in [1, 64]
  }
"""
ENVS = [{"n": 1}, {"n": 3}, {"n": 8}]


def test_identities_vanish(P):
    text = HEAD + """  constants {
    @one : f32[] = [1.0]
  }
  func @main(%x: f32[n, 4]) -> (f32[n, 4]) {
    %one = constant() {name="one"} : f32[]
    %0 = mul(%x, %one) : f32[n, 4]
    %1 = cast(%0) {dtype=#f32} : f32[n, 4]
    %2 = reshape(%1) {shape=[n, 4]} : f32[n, 4]
    %3 = permute(%2) {perm=[0, 1]} : f32[n, 4]
    %4 = expand(%3) {shape=[n, 4]} : f32[n, 4]
    %5 = slice(%4) {axis=0, start=0, end=n, step=1} : f32[n, 4]
    %6 = unsqueeze(%5) {axes=[0]} : f32[1, n, 4]
    %7 = squeeze(%6) {axes=[0]} : f32[n, 4]
    return %7
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    assert P.body(after) == ["return %x"]
    assert not after.constants  # the unused constant is dropped
    P.check_equiv(before, after, ENVS)


def test_view_chains_and_permutes_compose(P):
    text = HEAD + """  func @main(%x: f32[n, 4, 6]) -> (f32[n, 24], f32[6, n, 4]) {
    %0 = reshape(%x) {shape=[n, 4, 2, 3]} : f32[n, 4, 2, 3]
    %1 = reshape(%0) {shape=[n, 24]} : f32[n, 24]
    %2 = permute(%x) {perm=[1, 0, 2]} : f32[4, n, 6]
    %3 = permute(%2) {perm=[2, 1, 0]} : f32[6, n, 4]
    return %1, %3
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    assert P.body(after) == [
        "%1 = reshape(%x) {shape=[n, 24]} : f32[n, 24]",
        "%3 = permute(%x) {perm=[2, 0, 1]} : f32[6, n, 4]",
        "return %1, %3",
    ]
    P.check_equiv(before, after, ENVS)


def test_inverse_permutes_cancel(P):
    text = HEAD + """  func @main(%x: f32[n, 4, 6]) -> (f32[n, 4, 6]) {
    %0 = permute(%x) {perm=[0, 2, 1]} : f32[n, 6, 4]
    %1 = permute(%0) {perm=[0, 2, 1]} : f32[n, 4, 6]
    return %1
  }
}
"""
    _, after = P.run_pass(canonicalize, text)
    assert P.body(after) == ["return %x"]


def test_plus_zero_respects_signed_zero(P):
    # x + 0.0 is not the identity (-0.0 + 0.0 == +0.0): kept. x + (-0.0) and x - 0.0 are: dropped.
    text = HEAD + """  constants {
    @pz : f32[] = [0.0]
    @nz : f32[] = [-0.0]
  }
  func @main(%x: f32[n]) -> (f32[n], f32[n], f32[n]) {
    %pz = constant() {name="pz"} : f32[]
    %nz = constant() {name="nz"} : f32[]
    %0 = add(%x, %pz) : f32[n]
    %1 = add(%nz, %x) : f32[n]
    %2 = sub(%x, %pz) : f32[n]
    return %0, %1, %2
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    assert P.body(after) == [
        '%pz = constant() {name="pz"} : f32[]',
        "%0 = add(%x, %pz) : f32[n]",
        "return %0, %x, %x",
    ]
    x = np.array([-0.0, 0.0, 1.5, -np.inf, np.nan], dtype=np.float32)
    import braze.reference
    a = braze.reference.run(before, x)
    b = braze.reference.run(after, x)
    for u, v in zip(a, b):
        assert u.tobytes() == v.tobytes()  # bit for bit, signed zeros and NaN included


def test_mul_by_one_that_broadcasts_or_promotes_is_kept(P):
    text = HEAD + """  constants {
    @ones : f32[2, 1] = [1.0, 1.0]
    @one : f32[] = [1.0]
  }
  func @main(%x: f32[n], %i: i32[n]) -> (f32[2, n], f32[n]) {
    %ones = constant() {name="ones"} : f32[2, 1]
    %one = constant() {name="one"} : f32[]
    %0 = mul(%x, %ones) : f32[2, n]
    %1 = mul(%i, %one) : f32[n]
    return %0, %1
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    assert [l.split(" = ")[1].split("(")[0] for l in P.body(after)[:-1]].count("mul") == 2
    P.check_equiv(before, after, ENVS)


def test_idempotent_on_zoo_like_graph(P):
    text = HEAD + """  func @main(%x: f32[n, 8]) -> (f32[n, 2, 4]) {
    %0 = unsqueeze(%x) {axes=[0]} : f32[1, n, 8]
    %1 = reshape(%0) {shape=[n, 2, 4]} : f32[n, 2, 4]
    %2 = relu(%1) : f32[n, 2, 4]
    return %2
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    assert P.body(after)[0] == "%1 = reshape(%x) {shape=[n, 2, 4]} : f32[n, 2, 4]"
    again = canonicalize(P.parse(str(after)))
    assert str(again) == str(after)
    P.check_equiv(before, after, ENVS)


def test_a_constant_kn_weight_becomes_a_linear_weight(P):
    """matmul(x, C) by a float32 [K, N] constant read once -> linear(x, C transposed), a new [N, K]
    constant (the old one dropped): the layout every GEMM kernel reads. A constant another node
    also reads, and a float64 one, stay as they are."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5
    vals = ", ".join(f"{v:.1f}" for v in w.ravel())
    text = HEAD + f"""  constants {{
    @w : f32[4, 3] = [{vals}]
    @s : f32[4, 3] = [{vals}]
    @d : f64[4, 3] = [{vals}]
  }}
""" + """  func @main(%x: f32[n, 2, 4], %y: f64[n, 4]) -> (f32[n, 2, 3], f32[n, 3], f32[4, 3], f64[n, 3]) {
    %w = constant() {name="w"} : f32[4, 3]
    %s = constant() {name="s"} : f32[4, 3]
    %d = constant() {name="d"} : f64[4, 3]
    %0 = matmul(%x, %w) : f32[n, 2, 3]
    %1 = reshape(%x) {shape=[n, 8]} : f32[n, 8]
    %2 = slice(%1) {axis=1, start=0, end=4, step=1} : f32[n, 4]
    %3 = matmul(%2, %s) : f32[n, 3]
    %4 = matmul(%y, %d) : f64[n, 3]
    return %0, %3, %s, %4
  }
}
"""
    before, after = P.run_pass(canonicalize, text)
    lines = P.body(after)
    assert any(line.startswith("%0 = linear(%x, %") for line in lines), lines
    assert any(line.startswith("%3 = matmul(") for line in lines) and any(line.startswith("%4 = matmul(") for line in lines)
    assert "w" not in after.constants
    (name,) = [k for k in after.constants if k.startswith("w_t")]
    np.testing.assert_array_equal(after.constants[name], w.T)
    assert after.constants[name].flags["C_CONTIGUOUS"]
    P.check_equiv(before, after, ENVS)
