"""fuse: groups of nodes -> `fused` nodes calling @fused_N; kinds, legality, the report;
the zoo models keep their results through fusion."""

from __future__ import annotations

import numpy as np
import pytest

import braze.reference
from braze import ir
from braze.passes import fuse, group_counts
from braze.pipeline import run_pipeline
from braze.testing import assert_ir_round_trips, rel_error

HEAD = """module {
  symbols {
    n in [1, 64]
  }
"""
ENVS = [{"n": 1}, {"n": 3}, {"n": 10}]


def fused_nodes(m):
    return [nd for nd in m.main.nodes if nd.op == "fused"]


def callee_ops(m, nd):
    return [x.op for x in m.functions[nd.attrs["callee"]].nodes if x.op != "constant"]


def test_pointwise_chain_through_views_is_one_group(P):
    text = HEAD + """  constants {
    @two : f32[] = [2.0]
  }
  func @main(%x: f32[n, 4, 6]) -> (f32[6, n, 4]) {
    %two = constant() {name="two"} : f32[]
    %0 = exp(%x) : f32[n, 4, 6]
    %1 = mul(%0, %two) : f32[n, 4, 6]
    %2 = permute(%1) {perm=[2, 0, 1]} : f32[6, n, 4]
    %3 = relu(%2) : f32[6, n, 4]
    return %3
  }
}
"""
    before, after = P.run_pass(fuse, text)
    assert P.body(after) == ['%3 = fused(%x) {callee="fused_0", kind="pointwise"} : f32[6, n, 4]',
                            "return %3"]
    assert P.body(after, "fused_0") == [
        '%two = constant() {name="two"} : f32[]',  # weights enter the sub-function itself
        "%0 = exp(%x) : f32[n, 4, 6]",
        "%1 = mul(%0, %two) : f32[n, 4, 6]",
        "%2 = permute(%1) {perm=[2, 0, 1]} : f32[6, n, 4]",
        "%3 = relu(%2) : f32[6, n, 4]",
        "return %3",
    ]
    assert_ir_round_trips(after)
    P.check_equiv(before, after, ENVS)


def test_decomposed_layer_norm_is_one_stitch_group(P):
    text = HEAD + """  constants {
    @eps : f32[] = [1e-05]
    @w : f32[8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
  }
  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %eps = constant() {name="eps"} : f32[]
    %w = constant() {name="w"} : f32[8]
    %0 = reduce_mean(%x) {axes=[-1], keepdims=true} : f32[n, 1]
    %1 = sub(%x, %0) : f32[n, 8]
    %2 = mul(%1, %1) : f32[n, 8]
    %3 = reduce_mean(%2) {axes=[-1], keepdims=true} : f32[n, 1]
    %4 = add(%3, %eps) : f32[n, 1]
    %5 = rsqrt(%4) : f32[n, 1]
    %6 = mul(%1, %5) : f32[n, 8]
    %7 = mul(%6, %w) : f32[n, 8]
    return %7
  }
}
"""
    before, after = P.run_pass(fuse, text)
    (nd,) = fused_nodes(after)
    assert nd.attrs["kind"] == "stitch"
    assert callee_ops(after, nd) == ["reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul", "mul"]
    P.check_equiv(before, after, ENVS)


def test_softmax_and_a_row_sum_share_a_stitch_group(P):
    text = HEAD + """  func @main(%x: f32[n, 8]) -> (f32[n, 8], f32[n]) {
    %0 = neg(%x) : f32[n, 8]
    %1 = softmax(%0) {axis=-1} : f32[n, 8]
    %2 = reduce_sum(%0) {axes=[1], keepdims=false} : f32[n]
    return %1, %2
  }
}
"""
    before, after = P.run_pass(fuse, text)
    (nd,) = fused_nodes(after)
    assert nd.attrs["kind"] == "stitch" and len(nd.outputs) == 2
    P.check_equiv(before, after, ENVS)


def test_reduction_with_producers_and_consumers(P):
    text = HEAD + """  func @main(%x: f32[n, 8]) -> (f32[8]) {
    %0 = mul(%x, %x) : f32[n, 8]
    %1 = reduce_sum(%0) {axes=[0], keepdims=false} : f32[8]
    %2 = sqrt(%1) : f32[8]
    return %2
  }
}
"""
    before, after = P.run_pass(fuse, text)
    (nd,) = fused_nodes(after)
    assert nd.attrs["kind"] == "reduction"
    assert callee_ops(after, nd) == ["mul", "reduce_sum", "sqrt"]
    P.check_equiv(before, after, ENVS)


def test_sibling_reductions_that_read_alike_are_one_group(P):
    """Batch norm's backward statistics: sum(dy) and sum(dy * (x - mean)) over the rows, each
    reading dy = where(relu <= 0, 0, g): one reduction group computes both (one pass over g,
    relu and x), and the normalized gradient is another group; a sum over other axes, or one that
    reads a sibling's result, stays apart."""
    text = HEAD + """  constants {
    @zero : f32[] = [0.0]
  }
  func @main(%g: f32[n, 8], %r: f32[n, 8], %x: f32[n, 8], %m: f32[8]) -> (f32[8], f32[8], f32[n, 8], f32[n], f32[8]) {
    %zero = constant() {name="zero"} : f32[]
    %0 = less_equal(%r, %zero) : bool[n, 8]
    %1 = where(%0, %zero, %g) : f32[n, 8]
    %2 = reduce_sum(%1) {axes=[0], keepdims=false} : f32[8]
    %3 = sub(%x, %m) : f32[n, 8]
    %4 = mul(%1, %3) : f32[n, 8]
    %5 = reduce_sum(%4) {axes=[0], keepdims=false} : f32[8]
    %6 = mul(%3, %5) : f32[n, 8]
    %7 = sub(%1, %6) : f32[n, 8]
    %8 = reduce_sum(%1) {axes=[1], keepdims=false} : f32[n]
    %9 = mul(%x, %2) : f32[n, 8]
    %10 = reduce_sum(%9) {axes=[0], keepdims=false} : f32[8]
    return %2, %5, %7, %8, %10
  }
}
"""
    before, after = P.run_pass(fuse, text)
    kinds = [(nd.attrs["kind"], sorted(v.name for v in nd.outputs)) for nd in fused_nodes(after)]
    assert ("reduction", ["2", "5"]) in kinds, kinds
    assert not any(set(outs) & {"2", "5"} and set(outs) & {"8", "10"} for _, outs in kinds), kinds
    assert_ir_round_trips(after)
    P.check_equiv(before, after, ENVS)


def test_gemm_epilogue_bias_gelu_residual(P):
    rng = np.random.default_rng(0)
    consts = {"w": rng.standard_normal((16, 8)).astype(np.float32),
              "b": rng.standard_normal(16).astype(np.float32),
              "w2": rng.standard_normal((8, 16)).astype(np.float32)}
    text = HEAD + """  constants {
    @w : f32[16, 8] = dense<sha256:x>
    @b : f32[16] = dense<sha256:x>
    @w2 : f32[8, 16] = dense<sha256:x>
  }
  func @main(%x: f32[n, 8], %r: f32[n, 16]) -> (f32[n, 8]) {
    %w = constant() {name="w"} : f32[16, 8]
    %b = constant() {name="b"} : f32[16]
    %w2 = constant() {name="w2"} : f32[8, 16]
    %0 = linear(%x, %w) : f32[n, 16]
    %1 = add(%0, %b) : f32[n, 16]
    %2 = gelu(%1) {approximate="none"} : f32[n, 16]
    %3 = add(%2, %r) : f32[n, 16]
    %4 = linear(%3, %w2) : f32[n, 8]
    %5 = sigmoid(%4) : f32[n, 8]
    return %5
  }
}
"""
    from braze.ir.graph import array_digest
    text = text.replace("dense<sha256:x>", "DIGEST")
    for k in ("w", "b", "w2"):
        text = text.replace(f"@{k} : ", f"@{k} : ", 1)
        line = next(l for l in text.splitlines() if l.strip().startswith(f"@{k} :"))
        text = text.replace(line, line.replace("DIGEST", f"dense<sha256:{array_digest(consts[k])}>"))
    before, after = P.run_pass(fuse, text, constants=consts)
    nds = fused_nodes(after)
    assert [nd.attrs["kind"] for nd in nds] == ["gemm", "gemm"]
    assert callee_ops(after, nds[0]) == ["linear", "add", "gelu", "add"]
    assert callee_ops(after, nds[1]) == ["linear", "sigmoid"]
    assert [v.name for v in nds[0].inputs] == ["x", "r"]
    P.check_equiv(before, after, ENVS, rtol=1e-5, atol=1e-5)


def test_no_cycle_through_an_outside_group(P):
    # %0 feeds %2 directly and through the opaque cumsum: %0 and %2 must not merge
    text = HEAD + """  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = exp(%x) : f32[n, 8]
    %1 = cumsum(%0) {axis=1, exclusive=false, reverse=false} : f32[n, 8]
    %2 = add(%0, %1) : f32[n, 8]
    return %2
  }
}
"""
    before, after = P.run_pass(fuse, text)
    kinds = [nd.attrs["kind"] for nd in fused_nodes(after)]
    assert kinds == ["pointwise", "opaque", "pointwise"]
    P.check_equiv(before, after, ENVS)


def test_cheap_producer_is_duplicated_into_its_consumers(P):
    text = HEAD + """  func @main(%x: f32[n, 8]) -> (f32[n, 3], f32[n, 5]) {
    %0, %1 = split(%x) {axis=1, sizes=[3, 5]} : f32[n, 3], f32[n, 5]
    %2 = exp(%0) : f32[n, 3]
    %3 = tanh(%1) : f32[n, 5]
    return %2, %3
  }
}
"""
    before, after = P.run_pass(fuse, text)
    nds = fused_nodes(after)
    assert [callee_ops(after, nd) for nd in nds] == [["split", "exp"], ["split", "tanh"]]
    assert "duplicated" in str(fuse(P.parse(text))[1])  # the decision is in the fusion log
    P.check_equiv(before, after, ENVS)


def test_a_matmul_reads_a_transposed_operand_in_place(P):
    # a weight gradient t(dy) @ x: the transpose joins the gemm (the library reads it
    # transposed), so no kernel writes it; so does a batched one. A transpose read twice, or
    # one of other axes, stays a kernel of its own.
    text = HEAD + """  func @main(%dy: f32[n, 6], %x: f32[n, 4], %a: f32[2, n, 3]) -> (f32[6, 4], f32[n, n], f32[6, 6], f32[2, 3, 3], f32[n, 2, 2]) {
    %0 = silu(%dy) : f32[n, 6]
    %1 = permute(%0) {perm=[1, 0]} : f32[6, n]
    %2 = matmul(%1, %x) : f32[6, 4]
    %3 = permute(%0) {perm=[1, 0]} : f32[6, n]
    %4 = matmul(%0, %3) : f32[n, n]
    %5 = matmul(%3, %0) : f32[6, 6]
    %6 = permute(%a) {perm=[0, 2, 1]} : f32[2, 3, n]
    %7 = matmul(%6, %a) : f32[2, 3, 3]
    %8 = permute(%a) {perm=[1, 0, 2]} : f32[n, 2, 3]
    %9 = permute(%a) {perm=[1, 2, 0]} : f32[n, 3, 2]
    %10 = matmul(%8, %9) : f32[n, 2, 2]
    return %2, %4, %5, %7, %10
  }
}
"""
    before, after = P.run_pass(fuse, text)
    ops = [(nd.attrs["kind"], callee_ops(after, nd)) for nd in fused_nodes(after)]
    assert [o for k, o in ops if k == "gemm"].count(["permute", "matmul"]) == 2  # %2 and %7
    assert ("pointwise", ["silu", "permute"]) in ops  # %3, read twice: written transposed once
    assert ops.count(("pointwise", ["permute"])) == 2  # %8, %9
    P.check_equiv(before, after, ENVS, rtol=1e-5, atol=1e-5)


def test_a_result_re_laid_out_is_computed_again_in_the_new_layout(P):
    # a training forward saves relu(bn(conv)) in NCHW and permutes it back to NHWC for the next
    # convolution: the permute group computes relu from the NHWC input in its own order instead
    # of reading the saved result across its layout; the result is still written once
    text = HEAD + """  func @main(%x: f32[n, 5, 5, 3], %s: f32[1, 3, 1, 1]) -> (f32[n, 3, 5, 5], f32[n, 5, 5, 3]) {
    %0 = permute(%x) {perm=[0, 3, 1, 2]} : f32[n, 3, 5, 5]
    %1 = mul(%0, %s) : f32[n, 3, 5, 5]
    %2 = relu(%1) : f32[n, 3, 5, 5]
    %3 = permute(%2) {perm=[0, 2, 3, 1]} : f32[n, 5, 5, 3]
    return %2, %3
  }
}
"""
    before, after = P.run_pass(fuse, text)
    assert [callee_ops(after, nd) for nd in fused_nodes(after)] == [
        ["permute", "mul", "relu"], ["permute", "mul", "relu", "permute"]]
    assert "duplicated %2" in str(fuse(P.parse(text))[1])
    P.check_equiv(before, after, ENVS)


def test_a_transcendental_is_not_recomputed_per_element_of_a_broadcast(P):
    # a RoPE-like table: cos and sin of arange(s) * f over [s, 4], read by two consumers over
    # [b, 3, s, 4]. Fused into them, each would evaluate cos and sin b * 3 times per table
    # element; the table is computed once, in its own group (a cheap mask still duplicates).
    text = """module {
  symbols {
    b in [1, 8]
    s in [1, 64]
  }
  constants {
    @f : f32[4] = [1.0, 0.5, 0.25, 0.125]
  }
  func @main(%q: f32[b, 3, s, 4], %k: f32[b, 3, s, 4]) -> (f32[b, 3, s, 4], f32[b, 3, s, 4]) {
    %f = constant() {name="f"} : f32[4]
    %0 = arange() {dtype=#i64, end=s, start=0, step=1} : i64[s]
    %1 = cast(%0) {dtype=#f32} : f32[s]
    %2 = reshape(%1) {shape=[s, 1]} : f32[s, 1]
    %3 = mul(%2, %f) : f32[s, 4]
    %4 = cos(%3) : f32[s, 4]
    %5 = sin(%3) : f32[s, 4]
    %6 = mul(%q, %4) : f32[b, 3, s, 4]
    %7 = add(%6, %5) : f32[b, 3, s, 4]
    %8 = mul(%k, %4) : f32[b, 3, s, 4]
    %9 = sub(%8, %5) : f32[b, 3, s, 4]
    return %7, %9
  }
}
"""
    before, after = P.run_pass(fuse, text)
    groups = [callee_ops(after, nd) for nd in fused_nodes(after)]
    with_cos = [g for g in groups if "cos" in g]
    assert len(with_cos) == 1 and "sin" in with_cos[0] and "add" not in with_cos[0], groups
    P.check_equiv(before, after, [{"b": 1, "s": 1}, {"b": 2, "s": 5}, {"b": 3, "s": 17}])


def test_symbolic_dims_known_equal_fuse(P):
    # a and b are different symbols, but the constraint a == b makes the iteration spaces agree
    text = """module {
  symbols {
    a in [1, 64]
    b in [1, 64]
  }
  constraints {
    b == a
  }
  func @main(%x: f32[a, 4], %y: f32[b, 4]) -> (f32[a, 4], f32[a, 4]) {
    %0 = exp(%x) : f32[a, 4]
    %1 = add(%0, %y) : f32[a, 4]
    %2 = neg(%0) : f32[a, 4]
    return %1, %2
  }
}
"""
    before, after = P.run_pass(fuse, text)
    (nd,) = fused_nodes(after)
    assert nd.attrs["kind"] == "pointwise" and len(nd.outputs) == 2
    P.check_equiv(before, after, [{"a": 2, "b": 2}, {"a": 7, "b": 7}])


def test_fused_op_checks_its_callee(P):
    text = HEAD + """  func @main(%x: f32[n]) -> (f32[n]) {
    %0 = fused(%x) {callee="fused_0", kind="pointwise"} : f32[n]
    return %0
  }
  func @fused_0(%x: f32[n, 2]) -> (f32[n, 2]) {
    %0 = neg(%x) : f32[n, 2]
    return %0
  }
}
"""
    with pytest.raises(Exception, match="declares"):
        ir.verify(ir.parse(text))


# --- zoo models through the whole CPU pipeline ------------------------------------------------

ZOO_SHAPES = {"mlp": [{"batch": 1}, {"batch": 3}],
              "bert": [{"batch": 1, "seq": 5}, {"batch": 2, "seq": 13}],
              "gpt2": [{"batch": 1, "seq": 4}, {"batch": 2, "seq": 9}],
              "resnet50": [{"batch": 1, "height": 40, "width": 40}, {"batch": 2, "height": 37, "width": 45}]}


@pytest.mark.parametrize("name", list(ZOO_SHAPES))
def test_zoo_model_fuses_and_keeps_its_results(zoo_modules, name):
    torch = pytest.importorskip("torch")
    zm = zoo_modules.model(name)
    mod = zoo_modules.module(name)
    fused = run_pipeline(mod, debug=1)
    counts = group_counts(fused)
    print(name, counts)
    assert "opaque" not in counts or name == "resnet50"  # resnet: max_pool2d
    if name == "mlp":
        assert counts == {"gemm": 3}
    if name == "resnet50":
        # the average pool is a mean over H and W of the NHWC value (channels_last's pool_in_nhwc)
        assert counts.get("conv") == 53 and counts.get("opaque") == 1 and counts.get("reduction") == 1
    if name in ("bert", "gpt2"):
        assert counts["stitch"] >= 25 + 12  # layer norms + softmaxes
        assert counts["gemm"] >= 72
    # every non-constant node of main is a fused call
    assert all(nd.op in ("fused", "constant") for nd in fused.main.nodes)
    assert_ir_round_trips(fused)
    for dims in ZOO_SHAPES[name]:
        inputs = [t.numpy() for t in zm.make_inputs(**dims)]
        want = braze.reference.run(mod, *inputs)
        got = braze.reference.run(fused, *inputs)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for a, b in zip(got, want):
            assert a.shape == b.shape
            assert rel_error(a, b) <= 1e-5, (name, dims, rel_error(a, b))
    del torch
