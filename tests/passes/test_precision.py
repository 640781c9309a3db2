"""precision: casts so each GEMM / convolution runs in a dtype the library takes. This IR in, that
IR out, for the bf16 policy, a float16 model on a CPU without float16 GEMMs, a bfloat16 model on
one with them, and operands of two dtypes; results checked against the reference."""

from __future__ import annotations

import types

import numpy as np
import pytest

from braze.errors import BrazeWarning
from braze.passes import constant_fold, dce
from braze.passes.precision import (COMMUTES_WITH_ROUNDING, KEEP_FP32, LOW_PRECISION_OPS, hoist_casts, library_dtypes,
                                    module_path, precision)
from braze.pipeline import target_precision

ENVS = [{"n": 1}, {"n": 3}, {"n": 10}]


def _module(P, body: str, policy: str, library: str, consts: str = "@w : f32[2, 4] = "
            "[0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, -2.0]\n    @b : f32[2] = [0.125, -0.25]"):
    return f"""module {{
  symbols {{
    n in [1, 64]
  }}
  constants {{
    {consts}
  }}
  precision {{
    policy {policy}
    library {library}
  }}
{body}}}
"""


LINEAR = """  func @main(%x: f32[n, 4]) -> (f32[n, 2]) {
    %w = constant() {name="w"} : f32[2, 4]
    %b = constant() {name="b"} : f32[2]
    %0 = linear(%x, %w, %b) : f32[n, 2]
    %1 = layer_norm(%0) {axis=-1, eps=1e-05} : f32[n, 2]
    return %1
  }
"""


def test_bf16_policy_casts_the_operands_and_keeps_the_float32_result(P):
    before, after = P.run_pass(lambda m: dce(constant_fold(precision(m))), _module(P, LINEAR, "bf16", "f32 bf16"))
    assert P.body(after) == [
        '%b = constant() {name="b"} : f32[2]',
        '%x_bf16 = cast(%x) {dtype=#bf16} : bf16[n, 4]',
        '%cast_w_bf16 = constant() {name="cast_w_bf16"} : bf16[2, 4]',  # the weight is cast once, here
        '%0_1 = linear(%x_bf16, %cast_w_bf16, %b) {out_dtype=#f32} : f32[n, 2]',
        '%1 = layer_norm(%0_1) {axis=-1, eps=1e-05} : f32[n, 2]',  # the norm stays float32
        'return %1',
    ]
    assert after.constants["cast_w_bf16"].dtype.itemsize == 2
    P.check_equiv(before, after, ENVS, rtol=2e-2, atol=2e-2)


def test_fp32_policy_and_a_float32_model_change_nothing(P):
    before, after = P.run_pass(precision, _module(P, LINEAR, "fp32", "f32 bf16"))
    assert P.body(after) == P.body(before)


def test_a_bf16_policy_without_bf16_gemms_changes_nothing(P):
    before, after = P.run_pass(precision, _module(P, LINEAR, "bf16", "f32"))
    assert P.body(after) == P.body(before)


def test_a_float16_product_widens_where_the_library_has_no_float16(P):
    text = _module(P, """  func @main(%x: f16[n, 4], %w: f16[2, 4], %b: f16[2]) -> (f16[n, 2]) {
    %0 = linear(%x, %w, %b) : f16[n, 2]
    return %0
  }
""", "fp32", "f32 bf16")
    before, after = P.run_pass(precision, text)
    assert P.body(after) == [
        '%x_f32 = cast(%x) {dtype=#f32} : f32[n, 4]',
        '%w_f32 = cast(%w) {dtype=#f32} : f32[2, 4]',
        '%b_f32 = cast(%b) {dtype=#f32} : f32[2]',
        '%0_1 = linear(%x_f32, %w_f32, %b_f32) : f32[n, 2]',
        '%0_1_f16 = cast(%0_1) {dtype=#f16} : f16[n, 2]',  # rounded once, at the end
        'return %0_1_f16',
    ]
    P.check_equiv(before, after, ENVS, rtol=0, atol=0)  # float32 accumulation both ways


def test_a_bfloat16_model_on_a_cpu_with_bf16_gemms_is_left_as_it_is(P):
    text = _module(P, """  func @main(%a: bf16[n, 4, 8], %b: bf16[n, 8, 3]) -> (bf16[n, 4, 3]) {
    %0 = matmul(%a, %b) : bf16[n, 4, 3]
    return %0
  }
""", "bf16", "f32 bf16")
    before, after = P.run_pass(precision, text)
    assert P.body(after) == P.body(before)


def test_operands_of_two_dtypes_take_their_promoted_dtype(P):
    text = _module(P, """  func @main(%x: f32[n, 4], %w: bf16[2, 4]) -> (f32[n, 2]) {
    %0 = linear(%x, %w) : f32[n, 2]
    return %0
  }
""", "fp32", "f32 bf16")
    before, after = P.run_pass(precision, text)
    assert P.body(after)[:2] == ['%w_f32 = cast(%w) {dtype=#f32} : f32[2, 4]',
                                 '%0_1 = linear(%x, %w_f32) : f32[n, 2]']
    P.check_equiv(before, after, ENVS, rtol=0, atol=0)


def test_attention_products_and_convs_run_in_bf16_under_the_policy(P):
    text = _module(P, """  func @main(%q: f32[n, 4, 8], %k: f32[n, 8, 4], %x: f32[n, 3, 6, 6]) -> (f32[n, 4, 4], f32[n, 2, 4, 4]) {
    %w = constant() {name="w"} : f32[2, 3, 3, 3]
    %0 = matmul(%q, %k) : f32[n, 4, 4]
    %1 = softmax(%0) {axis=-1} : f32[n, 4, 4]
    %2 = conv2d(%x, %w) {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1]} : f32[n, 2, 4, 4]
    return %1, %2
  }
""", "bf16", "f32 bf16", consts="@w : f32[2, 3, 3, 3] = [" + ", ".join(str(0.125 * (i % 9) - 0.5) for i in range(54)) + "]")
    before, after = P.run_pass(precision, text)
    ops = [(l.split(" = ")[1].split("(")[0], l.rsplit(": ", 1)[1]) for l in P.body(after) if " = " in l]
    assert ops == [("constant", "f32[2, 3, 3, 3]"), ("cast", "bf16[n, 4, 8]"), ("cast", "bf16[n, 8, 4]"),
                   ("matmul", "f32[n, 4, 4]"), ("softmax", "f32[n, 4, 4]"), ("cast", "bf16[n, 3, 6, 6]"),
                   ("cast", "bf16[2, 3, 3, 3]"), ("conv2d", "f32[n, 2, 4, 4]")]
    P.check_equiv(before, after, ENVS, rtol=2e-2, atol=0.15)  # |values| up to about 10


CONV_RELU_POOL = """  func @main(%x: bf16[n, 6, 6, 3], %w: bf16[4, 3, 3, 3]) -> (bf16[n, 2, 2, 4]) {
    %0 = conv2d(%x, %w) {dilation=[1, 1], groups=1, layout="nhwc", out_dtype=#f32, padding=[0, 0], stride=[1, 1]} : f32[n, 4, 4, 4]
    %1 = relu(%0) : f32[n, 4, 4, 4]
    %2 = max_pool2d(%1) {ceil_mode=false, dilation=[1, 1], kernel=[2, 2], layout="nhwc", padding=[0, 0, 0, 0], stride=[2, 2]} : f32[n, 2, 2, 4]
    %3 = cast(%2) {dtype=#bf16} : bf16[n, 2, 2, 4]
    return %3
  }
"""



def test_a_product_whose_weight_is_read_at_run_time_stays_float32(P):
    # the plug-in's live weights are inputs: a cast would run at every call (BERT-base at batch 1,
    # seq 16 took 1.4x float32's time); attention's product of two activations is still cast
    text = _module(P, """  func @main(%x: f32[n, 4], %w: f32[2, 4], %v: f32[4, 3], %q: f32[n, 4, 8], %k: f32[n, 8, 4]) -> (f32[n, 2], f32[n, 3], f32[n, 4, 4]) {
    %0 = linear(%x, %w) : f32[n, 2]
    %vt = permute(%v) {perm=[1, 0]} : f32[3, 4]
    %vv = permute(%vt) {perm=[1, 0]} : f32[4, 3]
    %1 = matmul(%x, %vv) : f32[n, 3]
    %2 = matmul(%q, %k) : f32[n, 4, 4]
    return %0, %1, %2
  }
""", "bf16", "f32 bf16", consts="@unused : f32[1] = [0.0]")
    before, after = P.run_pass(precision, text)
    assert _product_operands(P.body(after)) == ["%x, %w", "%x, %vv", "%q_bf16, %k_bf16"]
    P.check_equiv(before, after, ENVS, rtol=2e-2, atol=0.15)

def test_a_cast_to_16_bits_moves_up_to_the_product_through_relu_and_pool(P):
    before, after = P.run_pass(hoist_casts, _module(P, CONV_RELU_POOL, "bf16", "f32 bf16", consts="@unused : f32[1] = [0.0]"))
    ops = [(l.split(" = ")[1].split("(")[0], l.rsplit(": ", 1)[1]) for l in P.body(after) if " = " in l]
    assert ops == [("conv2d", "f32[n, 4, 4, 4]"), ("cast", "bf16[n, 4, 4, 4]"), ("relu", "bf16[n, 4, 4, 4]"),
                   ("max_pool2d", "bf16[n, 2, 2, 4]")]
    P.check_equiv(before, after, ENVS, rtol=0, atol=0)  # exact: rounding to nearest commutes with both
    assert str(hoist_casts(after)) == str(after)


def test_a_cast_stays_where_the_float32_value_has_another_reader(P):
    body = CONV_RELU_POOL.replace("-> (bf16[n, 2, 2, 4])", "-> (bf16[n, 2, 2, 4], f32[n, 4, 4, 4])").replace(
        "return %3", "return %3, %0")
    before, after = P.run_pass(hoist_casts, _module(P, body, "bf16", "f32 bf16", consts="@unused : f32[1] = [0.0]"))
    ops = [l.split(" = ")[1].split("(")[0] for l in P.body(after) if " = " in l]
    assert ops == ["conv2d", "relu", "cast", "max_pool2d"]  # up through the pool, not past %0's other reader
    P.check_equiv(before, after, ENVS, rtol=0, atol=0)


@pytest.mark.parametrize("special", [float("nan"), float("inf"), -float("inf"), -0.0, 1e-40, -1e-40, 3.0e38])
def test_hoisting_is_exact_at_special_values(P, special):
    import ml_dtypes

    import braze
    before, after = P.run_pass(hoist_casts, _module(P, CONV_RELU_POOL, "bf16", "f32 bf16",
                                                      consts="@unused : f32[1] = [0.0]"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6, 6, 3)).astype(ml_dtypes.bfloat16)
    x[0, 0, 0, :] = special  # reaches every output channel of the first window
    w = rng.standard_normal((4, 3, 3, 3)).astype(ml_dtypes.bfloat16)
    a, b = (np.asarray(braze.reference.run(m, x, w)).astype(np.float32) for m in (before, after))
    np.testing.assert_array_equal(a, b)  # NaN where NaN
    ok = ~np.isnan(a)
    np.testing.assert_array_equal(np.signbit(a[ok]), np.signbit(b[ok]))  # and zeros of one sign


def test_the_lists_are_data_and_disjoint():
    assert set(LOW_PRECISION_OPS) == {"linear", "matmul", "conv2d"}
    assert not set(LOW_PRECISION_OPS) & set(KEEP_FP32)
    assert not set(COMMUTES_WITH_ROUNDING) & set(LOW_PRECISION_OPS)


@pytest.mark.parametrize("features, want", [
    ((), ("float32",)), (("avx512f", "avx512_bf16"), ("float32", "bfloat16")),
    (("amx_bf16", "amx_fp16"), ("float32", "bfloat16", "float16")), (("avx512_fp16",), ("float32", "float16"))])
def test_library_dtypes_follow_the_cpu(features, want):
    assert library_dtypes(features) == want


def test_a_policy_the_cpu_cannot_run_compiles_float32_with_a_warning():
    isa = types.SimpleNamespace(host_features=frozenset({"avx512f"}))
    with pytest.warns(BrazeWarning, match="no AVX512_BF16 or AMX-BF16.*compiling float32"):
        assert target_precision("bf16", isa) == {"policy": "fp32", "library": ("float32",)}
    bf16_cpu = types.SimpleNamespace(host_features=frozenset({"avx512_bf16"}))
    assert target_precision("bf16", bf16_cpu)["policy"] == "bf16"
    # AVX512_FP16 runs float16 natively (a float16 model's products), but widens it for the FMAs:
    # the policy would be no faster than float32 there
    fp16_cpu = types.SimpleNamespace(host_features=frozenset({"avx512_bf16", "avx512_fp16", "amx_bf16"}))
    with pytest.warns(BrazeWarning, match="no AMX-FP16.*not be faster than float32; compiling float32"):
        assert target_precision("fp16", fp16_cpu) == {"policy": "fp32", "library": ("float32", "bfloat16", "float16")}
    amx_fp16 = types.SimpleNamespace(host_features=frozenset({"avx512_fp16", "amx_fp16"}))
    assert target_precision("fp16", amx_fp16)["policy"] == "fp16"


def test_the_precision_block_round_trips(P):
    m = P.parse(_module(P, LINEAR, "bf16", "f32 bf16"))
    assert m.precision == {"policy": "bf16", "library": ("float32", "bfloat16")}
    assert "policy bf16" in str(m) and "library f32 bf16" in str(m)
    assert np.array_equal(P.parse(str(m)).constants["w"], m.constants["w"])


TWO_LAYERS = """  func @main(%x: f32[n, 4], %q: f32[n, 4, 8], %k: f32[n, 8, 4]) -> (f32[n, 2], f32[n, 4, 4]) {
    %w1 = constant() {name="w1"} : f32[4, 4]
    %w2 = constant() {name="w2"} : f32[2, 4]
    %0 = linear(%x, %w1) : f32[n, 4]  loc{"name":"L['self'].encoder.layer[0].dense"}
    %1 = linear(%0, %w2) : f32[n, 2]  loc{"name":"lm_head"}
    %2 = matmul(%q, %k) : f32[n, 4, 4]  loc{"name":"encoder.layer.1.attn"}
    return %1, %2
  }
"""


TWO_LAYERS_CONSTS = ("@w1 : f32[4, 4] = [" + ", ".join(str(0.25 * (i % 7) - 0.75) for i in range(16)) + "]\n"
                     "    @w2 : f32[2, 4] = [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, -2.0]")


def _product_operands(body) -> list[str]:
    """Each product's operand list, in order."""
    return [l.split("(")[1].split(")")[0] for l in body if l.split(" = ")[-1].startswith(("linear(", "matmul("))]


@pytest.mark.parametrize("keep, want", [
    ((), ["%x_bf16, %w1_bf16", "%0_1_bf16, %w2_bf16", "%q_bf16, %k_bf16"]),
    (("lm_head",), ["%x_bf16, %w1_bf16", "%0_1, %w2", "%q_bf16, %k_bf16"]),
    (("encoder",), ["%x, %w1", "%0_bf16, %w2_bf16", "%q, %k"]),
    (("encoder.layer.0",), ["%x, %w1", "%0_bf16, %w2_bf16", "%q_bf16, %k_bf16"]),
    (("matmul",), ["%x_bf16, %w1_bf16", "%0_1_bf16, %w2_bf16", "%q, %k"]),
    (("encoder.lay",), ["%x_bf16, %w1_bf16", "%0_1_bf16, %w2_bf16", "%q_bf16, %k_bf16"]),  # a path, not a prefix
])
def test_keep_names_ops_and_module_paths_that_stay_float32(P, keep, want):
    text = _module(P, TWO_LAYERS, "bf16", "f32 bf16", consts=TWO_LAYERS_CONSTS)
    if keep:
        text = text.replace("library f32 bf16", "library f32 bf16\n    keep " + " ".join(f'"{k}"' for k in keep))
    before, after = P.run_pass(precision, text)
    assert _product_operands(P.body(after)) == want
    P.check_equiv(before, after, ENVS, rtol=2e-2, atol=0.15)


def test_the_keep_line_round_trips(P):
    text = _module(P, LINEAR, "bf16", "f32 bf16").replace("library f32 bf16",
                                                          'library f32 bf16\n    keep "lm_head" "matmul"')
    m = P.parse(text)
    assert m.precision["keep"] == ("lm_head", "matmul")
    assert 'keep "lm_head" "matmul"' in str(m)
    assert P.parse(str(m)).precision == m.precision


@pytest.mark.parametrize("name, path", [
    ("L['self'].encoder.layer[0].dense", "encoder.layer.0.dense"), ("encoder.layer.0.dense", "encoder.layer.0.dense"),
    ("L['s'].head", "head"), (None, ""), ("L['self']", "")])
def test_module_paths_read_the_same_from_export_and_dynamo(name, path):
    assert module_path(name) == path


def test_keep_reaches_the_module_through_the_options():
    from braze.options import Options
    bf16_cpu = types.SimpleNamespace(host_features=frozenset({"avx512_bf16"}))
    opts = Options(precision="bf16", precision_keep=("lm_head",))
    assert target_precision(opts.precision, bf16_cpu, opts.precision_keep)["keep"] == ("lm_head",)
    assert Options.from_env({"BRAZE_PRECISION": "bf16", "BRAZE_PRECISION_KEEP": "lm_head, matmul"}).precision_keep \
        == ("lm_head", "matmul")
    from braze.errors import BrazeError
    with pytest.raises(BrazeError, match="list of op names or module paths"):
        Options(precision_keep="lm_head")
