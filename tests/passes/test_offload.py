"""offload: a gemm/conv group keeps what one library call does (its post_ops, named on the
node) and the rest of its epilogue becomes a pointwise group; results unchanged."""

from __future__ import annotations

import pytest

from braze.errors import UnsupportedOpError
from braze.passes import fuse
from braze.passes.offload import offload

HEAD = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @w : f32[2, 4] = [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, -2.0]
    @b : f32[2] = [0.125, -0.25]
  }
"""
ENVS = [{"n": 1}, {"n": 3}, {"n": 10}]


def fuse_then_offload(m):
    return offload(fuse(m)[0])


def groups(m):
    """(kind, post_ops, callee's ops) of each fused node of @main."""
    return [(nd.attrs["kind"], nd.attrs.get("post_ops"),
             [x.op for x in m.functions[nd.attrs["callee"]].nodes if x.op != "constant"])
            for nd in m.main.nodes if nd.op == "fused"]


def test_library_keeps_bias_activation_residual_and_the_rest_is_a_pointwise_group(P):
    text = HEAD + """  func @main(%x: f32[n, 4], %r: f32[n, 2]) -> (f32[n, 2]) {
    %w = constant() {name="w"} : f32[2, 4]
    %b = constant() {name="b"} : f32[2]
    %0 = linear(%x, %w) : f32[n, 2]
    %1 = add(%0, %b) : f32[n, 2]
    %2 = gelu(%1) {approximate="tanh"} : f32[n, 2]
    %3 = add(%2, %r) : f32[n, 2]
    %4 = exp(%3) : f32[n, 2]
    %5 = mul(%4, %3) : f32[n, 2]
    return %5
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", ["bias", "gelu_tanh", "residual"], ["linear", "add", "gelu", "add"]),
                             ("pointwise", None, ["exp", "mul"])]
    lib, epi = [nd for nd in after.main.nodes if nd.op == "fused"]
    assert epi.inputs == lib.outputs  # the epilogue reads the library's result
    assert [p.name for p in after.functions[lib.attrs["callee"]].params] == ["x", "r"]
    P.check_equiv(before, after, ENVS)
    assert str(offload(after)) == str(after)  # a second run changes nothing


def test_a_whole_epilogue_the_library_cannot_take_moves_out(P):
    # a batched product of two activations takes no post-ops: its bias add and tanh are generated code
    text = HEAD + """  func @main(%x: f32[n, 3, 4], %y: f32[n, 4, 2]) -> (f32[n, 3, 2]) {
    %b = constant() {name="b"} : f32[2]
    %0 = matmul(%x, %y) : f32[n, 3, 2]
    %1 = add(%0, %b) : f32[n, 3, 2]
    %2 = tanh(%1) : f32[n, 3, 2]
    return %2
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", [], ["matmul"]), ("pointwise", None, ["add", "tanh"])]
    P.check_equiv(before, after, ENVS)


def test_a_weight_read_at_run_time_takes_the_post_ops(P):
    # plug-in mode's live weights: a linear by an input weight and bias, a 2-D matmul by an input
    text = HEAD + """  func @main(%x: f32[n, 4], %w: f32[2, 4], %bias: f32[2], %y: f32[2, 3]) -> (f32[n, 3]) {
    %0 = linear(%x, %w, %bias) : f32[n, 2]
    %1 = gelu(%0) {approximate="none"} : f32[n, 2]
    %2 = matmul(%1, %y) : f32[n, 3]
    %3 = tanh(%2) : f32[n, 3]
    return %3
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", ["gelu"], ["linear", "gelu"]), ("gemm", ["tanh"], ["matmul", "tanh"])]
    P.check_equiv(before, after, ENVS)


def test_a_transposed_left_operand_takes_no_post_ops(P):
    # t(dy) @ x (a weight gradient) has no weight call to hang post-ops on: its epilogue is
    # generated code; x @ t(y) reads y as an [N, K] weight and keeps its activation
    text = HEAD + """  func @main(%dy: f32[n, 3], %x: f32[n, 2], %y: f32[5, 2]) -> (f32[3, 2], f32[n, 5]) {
    %0 = permute(%dy) {perm=[1, 0]} : f32[3, n]
    %1 = matmul(%0, %x) : f32[3, 2]
    %2 = tanh(%1) : f32[3, 2]
    %3 = permute(%y) {perm=[1, 0]} : f32[2, 5]
    %4 = matmul(%x, %3) : f32[n, 5]
    %5 = tanh(%4) : f32[n, 5]
    return %2, %5
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", [], ["permute", "matmul"]), ("pointwise", None, ["tanh"]),
                             ("gemm", ["tanh"], ["permute", "matmul", "tanh"])]
    P.check_equiv(before, after, ENVS)


@pytest.mark.parametrize("act, post, rest", [
    ("relu(%0)", ["relu"], []),
    ('clamp(%0) {min=0.0, max=6.0}', ["relu6"], []),  # ReLU6
    ('clamp(%0) {min=0.0}', ["relu"], []),
    ('clamp(%0) {min=0.0, max=5.0}', [], ["clamp"]),  # no post-op of the helper's
    ('clamp(%0) {min=-1.0, max=1.0}', [], ["clamp"]),
    ('clamp(%0) {min=-0.0, max=6.0}', [], ["clamp"]),  # -0 below the bound, where the helper gives +0
])
def test_relu_and_relu6_are_post_ops_the_helper_applies_itself(P, act, post, rest):
    # the helper's eager relu keeps NaN and -0 (oneDNN's would not: braze_dnnl.h); nothing is
    # absorbed after it, so the residual add stays generated code
    text = HEAD + f"""  func @main(%x: f32[n, 4], %r: f32[n, 2]) -> (f32[n, 2]) {{
    %w = constant() {{name="w"}} : f32[2, 4]
    %0 = linear(%x, %w) : f32[n, 2]
    %1 = {act} : f32[n, 2]
    %2 = add(%1, %r) : f32[n, 2]
    return %2
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    op = act.partition("(")[0]
    assert groups(after) == [("gemm", post, ["linear", op][:1 + len(post)]), ("pointwise", None, [*rest, "add"])]
    P.check_equiv(before, after, ENVS)


@pytest.mark.parametrize("act, post", [("relu(%1)", ["residual", "relu"]),
                                       ('gelu(%1) {approximate="none"}', ["residual", "gelu"])])
def test_an_activation_after_the_residual_add_is_the_calls(P, act, post):
    # relu(x @ w + b + r), ResNet's block end: the helper applies it after the residual
    # (BRAZE_ACT_AFTER_RESIDUAL), so no kernel reads the result again
    text = HEAD + f"""  func @main(%x: f32[n, 4], %r: f32[n, 2]) -> (f32[n, 2]) {{
    %w = constant() {{name="w"}} : f32[2, 4]
    %b = constant() {{name="b"}} : f32[2]
    %0 = linear(%x, %w, %b) : f32[n, 2]
    %1 = add(%0, %r) : f32[n, 2]
    %2 = {act} : f32[n, 2]
    return %2
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", post, ["linear", "add", act.partition("(")[0]])]
    P.check_equiv(before, after, ENVS)


HALF_HEAD = HEAD.replace("@w : f32[2, 4]", "@w : bf16[2, 4]") + """  precision {
    policy bf16
    library f32 bf16
  }
"""


@pytest.mark.parametrize("res, cast_to, want", [
    (False, "bf16", ["bias", "gelu", "cast"]),  # the call stores bfloat16: no kernel to round
    (True, "bf16", ["bias", "gelu", "residual"]),  # the helper reads a residual in the destination's dtype
    (False, "f16", ["bias", "gelu"]),  # not the operands' dtype: no 16-bit kernel stores it
])
def test_a_last_cast_to_the_operands_dtype_is_the_calls_destination(P, res, cast_to, want):
    text = HALF_HEAD + f"""  func @main(%x: bf16[n, 4], %r: f32[n, 2]) -> ({cast_to}[n, 2]) {{
    %w = constant() {{name="w"}} : bf16[2, 4]
    %b = constant() {{name="b"}} : f32[2]
    %0 = linear(%x, %w) {{out_dtype=#f32}} : f32[n, 2]
    %1 = add(%0, %b) : f32[n, 2]
    %2 = gelu(%1) {{approximate="none"}} : f32[n, 2]
    %3 = {"add(%2, %r)" if res else "reshape(%2) {shape=[n, 2]}"} : f32[n, 2]
    %4 = cast(%3) {{dtype=#{cast_to}}} : {cast_to}[n, 2]
    return %4
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    lib = next(nd for nd in after.main.nodes if nd.op == "fused")
    assert lib.attrs["post_ops"] == want
    assert (lib.outputs[0].dtype.short == cast_to) == (want[-1] == "cast")
    P.check_equiv(before, after, ENVS, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("out, post", [("f32", []), ("bf16", ["cast", "relu"])])
def test_relu_after_a_16_bit_product_is_the_helpers_once_it_is_rounded(P, out, post):
    # the helper's eager relu runs on the result in its dtype: after a cast, on the rounded value
    # (relu(round(x)), what hoist_casts made of a bf16 policy's ResNet); a float32 result of a
    # 16-bit product is the policy's, whose relu joins the kernel that rounds it
    cast = '%1 = cast(%0) {dtype=#bf16} : bf16[n, 2]' if out == "bf16" else '%1 = reshape(%0) {shape=[n, 2]} : f32[n, 2]'
    text = HALF_HEAD + f"""  func @main(%x: bf16[n, 4]) -> ({out}[n, 2]) {{
    %w = constant() {{name="w"}} : bf16[2, 4]
    %0 = linear(%x, %w) {{out_dtype=#f32}} : f32[n, 2]
    {cast}
    %2 = relu(%1) : {out}[n, 2]
    return %2
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    if out == "bf16":
        assert groups(after) == [("gemm", post, ["linear", "cast", "relu"])]
    else:
        assert groups(after) == [("gemm", post, ["linear", "reshape"]), ("pointwise", None, ["relu"])]
    P.check_equiv(before, after, ENVS, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("after_cast, rest", [
    ("gelu(%1) {approximate=\"none\"}", ["gelu"]),  # not an eager act: it ran on the accumulator
    ("add(%1, %r)", ["add"]),  # a residual is read in the destination's dtype, before the rounding
])
def test_only_an_eager_relu_follows_a_cast(P, after_cast, rest):
    text = HALF_HEAD + f"""  func @main(%x: bf16[n, 4], %r: bf16[n, 2]) -> (bf16[n, 2]) {{
    %w = constant() {{name="w"}} : bf16[2, 4]
    %0 = linear(%x, %w) {{out_dtype=#f32}} : f32[n, 2]
    %1 = cast(%0) {{dtype=#bf16}} : bf16[n, 2]
    %2 = {after_cast} : bf16[n, 2]
    return %2
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", ["cast"], ["linear", "cast"]), ("pointwise", None, rest)]
    P.check_equiv(before, after, ENVS, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("read_again", [True, False])
def test_a_pointwise_group_reading_only_the_epilogue_joins_it(P, read_again):
    """A bf16 policy's ResNet block end: relu(product + residual) is generated code after the call,
    and the cast of it to bfloat16 (the next product's operand) joins that kernel: the float32
    result is read once. The relu's own result stays an output while something else reads it."""
    ret = "%3, %4" if read_again else "%4"
    types = "f32[n, 2], bf16[n, 2]" if read_again else "bf16[n, 2]"
    text = HALF_HEAD + f"""  func @main(%x: bf16[n, 4], %r: f32[n, 2]) -> ({types}) {{
    %w = constant() {{name="w"}} : bf16[2, 4]
    %0 = linear(%x, %w) {{out_dtype=#f32}} : f32[n, 2]
    %2 = add(%0, %r) : f32[n, 2]
    %3 = relu(%2) : f32[n, 2]
    %4 = cast(%3) {{dtype=#bf16}} : bf16[n, 2]
    return {ret}
  }}
}}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", ["residual"], ["linear", "add"]), ("pointwise", None, ["relu", "cast"])]
    epi = [nd for nd in after.main.nodes if nd.op == "fused"][1]
    assert [v.dtype.short for v in epi.outputs] == (["f32", "bf16"] if read_again else ["bf16"])
    assert all(v.producer is nd for nd in after.main.nodes for v in nd.outputs)
    P.check_equiv(before, after, ENVS, rtol=1e-2, atol=1e-2)
    assert str(offload(P.parse(str(after)))) == str(after)  # printed, parsed and offloaded again: the same


def test_a_group_the_library_cannot_run_is_refused_here_with_its_location(P):
    text = """module {
  symbols {
    n in [1, 8]
  }
  func @main(%x: f64[n, 3, 8, 8], %w: f64[4, 3, 3, 3]) -> (f64[n, 4, 6, 6]) {
    %0 = conv2d(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1]} : f64[n, 4, 6, 6]  loc{"file":"model.py","line":7}
    return %0
  }
}
"""
    with pytest.raises(UnsupportedOpError, match="float64 and float64 operands is not supported natively") as e:
        fuse_then_offload(P.parse(text))
    assert "model.py:7" in str(e.value)


def test_a_bias_after_a_view_stays_generated_code(P):
    # a [2] add after a reshape of the [n, 4] product is not the GEMM's bias over N = 4
    text = HEAD + """  func @main(%x: f32[n, 4]) -> (f32[n, 2, 2]) {
    %0 = fused(%x) {callee="g", kind="gemm"} : f32[n, 2, 2]
    return %0
  }
  func @g(%x: f32[n, 4]) -> (f32[n, 2, 2]) {
    %w = constant() {name="w4"} : f32[4, 4]
    %b = constant() {name="b"} : f32[2]
    %0 = linear(%x, %w) : f32[n, 4]
    %1 = reshape(%0) {shape=[n, 2, 2]} : f32[n, 2, 2]
    %2 = add(%1, %b) : f32[n, 2, 2]
    return %2
  }
}
"""
    text = text.replace("  }\n  func @main", "    @w4 : f32[4, 4] = [" + ", ".join(["0.5"] * 16) + "]\n  }\n  func @main", 1)
    before, after = P.run_pass(offload, text)
    assert groups(after) == [("gemm", [], ["linear", "reshape"]), ("pointwise", None, ["add"])]
    P.check_equiv(before, after, ENVS)


def test_a_linear_with_a_computed_weight_and_a_bias_keeps_the_bias(P):
    text = HEAD + """  func @main(%x: f32[n, 4], %y: f32[2, 4]) -> (f32[n, 2]) {
    %b = constant() {name="b"} : f32[2]
    %0 = linear(%x, %y, %b) : f32[n, 2]
    return %0
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("gemm", [], ["linear"])]
    P.check_equiv(before, after, ENVS)

SCALED = """module {
  symbols {
    n in [1, 8]
  }
  constants {
    @wc : f32[4, 3, 1, 1] = [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, -2.0, 1.0, 0.125, -0.25, 0.5]
  }
  func @main(%x: f32[n, 5, 5, 3], %w: f32[4, 3, 1, 1], %s: f32[1, 1, 1, 4], %t: f32[1, 1, 1, 4], %r: f32[n, 5, 5, 4]) -> (f32[n, 5, 5, 4]) {
    %wc = constant() {name="wc"} : f32[4, 3, 1, 1]
    %0 = conv2d(%x, WEIGHT) {dilation=[1, 1], groups=1, layout="nhwc", padding=[0, 0], stride=[1, 1]} : f32[n, 5, 5, 4]
    %1 = mul(%0, %s) : f32[n, 5, 5, 4]
    %2 = add(%1, %t) : f32[n, 5, 5, 4]
    %3 = add(%2, %r) : f32[n, 5, 5, 4]
    %4 = ACT(%3) : f32[n, 5, 5, 4]
    return %4
  }
}
"""


@pytest.mark.parametrize("weight, act, post, rest", [
    ("%w", "relu", ["scale", "bias", "residual", "relu"], []),
    ("%w", "tanh", ["scale", "bias", "residual"], ["tanh"]),  # after a scale, relu and relu6 only
    ("%wc", "relu", [], ["mul", "add", "add", "relu"]),  # constant_fold folds a batch norm into a constant
], ids=["live weight", "tanh", "constant weight"])
def test_a_batch_norms_scale_on_a_live_convolution_is_a_post_op(P, weight, act, post, rest):
    """passes/layout.py's ``x * s + t`` of a batch norm on run-time weights: the scale and shift are
    the call's, before the residual and relu (conv2d then "scale" and "bias")."""
    text = SCALED.replace("WEIGHT", weight).replace("ACT", act)
    before, after = P.run_pass(fuse_then_offload, text)
    lib = groups(after)[0]
    assert lib[0] == "conv" and lib[1] == post, groups(after)
    assert [g[2] for g in groups(after)[1:]] == ([rest] if rest else [])
    P.check_equiv(before, after, [{"n": 1}, {"n": 3}])


def test_a_channels_last_weight_is_read_where_it_lies(P):
    """A one-group convolution's OIHW weight given as ``permute(w, [0, 3, 1, 2])`` of an input (the
    plug-in's channels-last weight, OHWI in memory): the permute is the group's prologue, which the
    library call reads in place; on a computed weight it stays a kernel of its own."""
    text = """module {
  symbols {
    n in [1, 8]
  }
  func @main(%x: f32[n, 5, 5, 3], %w: f32[4, 1, 1, 3]) -> (f32[n, 5, 5, 4]) {
    %0 = permute(%w) {perm=[0, 3, 1, 2]} : f32[4, 3, 1, 1]
    %1 = conv2d(%x, %0) {dilation=[1, 1], groups=1, layout="nhwc", padding=[0, 0], stride=[1, 1]} : f32[n, 5, 5, 4]
    %2 = relu(%1) : f32[n, 5, 5, 4]
    return %2
  }
}
"""
    before, after = P.run_pass(fuse_then_offload, text)
    assert groups(after) == [("conv", ["relu"], ["permute", "conv2d", "relu"])]
    P.check_equiv(before, after, [{"n": 1}, {"n": 3}])
    computed = text.replace("%0 = permute(%w)", "%9 = neg(%w) : f32[4, 1, 1, 3]\n    %0 = permute(%9)")
    _, after = P.run_pass(fuse_then_offload, computed)
    assert [g[2] for g in groups(after)][-1] == ["conv2d", "relu"], groups(after)
