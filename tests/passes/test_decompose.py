"""decompose: scaled_dot_product_attention -> matmul, softmax, matmul; a depthwise conv2d -> direct_conv2d;
pow by 0.5 -> a square root with pow's values (same results)."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import ir
from braze.ops import Builder, tensor
from braze.passes import copy_module, decompose
from braze.passes.decompose import SCAN_BLOCK, SCAN_LOOPS_MAX, TOPK_LOOPS_MAX

ENVS = [{"b": 1, "s": 1}, {"b": 2, "s": 5}, {"b": 3, "s": 9}]


def _sdpa_module(mask=None, is_causal=False, scale=None, dtype="f32"):
    b = Builder()
    bs, s = b.sym("b", 1, 8), b.sym("s", 1, 64)
    q = b.param("q", tensor(dtype, bs, 2, s, 8))
    k = b.param("k", tensor(dtype, bs, 2, s, 8))
    v = b.param("v", tensor(dtype, bs, 2, s, 4))
    ins = [q, k, v]
    if mask == "bool":
        ins.append(b.param("mask", tensor("bool", bs, 1, s, s)))
    elif mask == "float":
        ins.append(b.param("mask", tensor(dtype, bs, 1, 1, s)))
    b.ret(b.scaled_dot_product_attention(*ins, is_causal=is_causal, scale=scale))
    return b.module


@pytest.mark.parametrize("mask,is_causal,scale", [(None, False, None), (None, True, None), ("bool", False, 0.3),
                                                  ("bool", True, None), ("float", False, None),
                                                  ("float", True, 0.5)])
def test_sdpa_decomposes(P, mask, is_causal, scale):
    before = _sdpa_module(mask, is_causal, scale)
    after = decompose(copy_module(before))
    ops = [n.op for n in after.main.nodes]
    assert "scaled_dot_product_attention" not in ops
    assert ops.count("matmul") == 2 and ops.count("softmax") == 1
    if is_causal:
        assert "arange" in ops and "less_equal" in ops
    P.check_equiv(before, after, ENVS, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_like_torch(P, kind):
    import braze.reference
    torch = pytest.importorskip("torch")
    before = _sdpa_module(kind)
    after = decompose(copy_module(before))
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 2, 5, d)).astype(np.float32) for d in (8, 8, 4))
    if kind == "bool":
        mask = rng.random((2, 1, 5, 5)) < 0.5
        mask[0, 0, 2, :] = False  # a row that attends to nothing
        dead = (0, slice(None), 2)
    else:
        mask = np.where(rng.random((2, 1, 1, 5)) < 0.5, -np.inf, 0).astype(np.float32)
        mask[1, 0, 0, :] = -np.inf  # every query of batch 1 attends to nothing
        dead = (1,)
    a = braze.reference.run(before, q, k, v, mask)
    b = braze.reference.run(after, q, k, v, mask)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in (q, k, v)), attn_mask=torch.from_numpy(mask)).numpy()
    assert np.all(b[dead] == 0) and not np.isnan(b).any()
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, want, rtol=1e-5, atol=1e-5)


def test_half_precision_computes_in_float32(P):
    before = _sdpa_module(None, True, None, dtype="f16")
    after = decompose(copy_module(before))
    assert after.main.results[0].type.dtype.name == "float16"
    P.check_equiv(before, after, ENVS, rtol=2e-3, atol=2e-3)


def test_other_ops_stay(P):
    text = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = softmax(%x) {axis=-1} : f32[n, 8]
    %1 = layer_norm(%0) {axis=-1, eps=1e-05} : f32[n, 8]
    %2 = rms_norm(%1) {axis=-1, eps=1e-06} : f32[n, 8]
    return %2
  }
}
"""
    before, after = P.run_pass(decompose, text)
    assert str(after) == str(before)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_natively(kind):
    import braze
    torch = pytest.importorskip("torch")
    m = braze.compile(_sdpa_module(kind))
    rng = np.random.default_rng(2)
    for b, s in ((1, 1), (2, 5), (3, 9)):
        q, k, v = (rng.standard_normal((b, 2, s, d)).astype(np.float32) for d in (8, 8, 4))
        if kind == "bool":
            mask = rng.random((b, 1, s, s)) < 0.5
            mask[0, 0, s // 2, :] = False
        else:
            mask = np.where(rng.random((b, 1, 1, s)) < 0.5, -np.inf, 0).astype(np.float32)
            mask[b - 1] = -np.inf
        want = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(x) for x in (q, k, v)), attn_mask=torch.from_numpy(mask)).numpy()
        got = m(q, k, v, mask)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _one_op_module(op, spec_dtype, s_lo=1, **attrs):
    b = Builder()
    bs, s = b.sym("b", 1, 8), b.sym("s", s_lo, 64)
    x = b.param("x", tensor(spec_dtype[1], *[{"b": bs, "s": s}.get(d, d) for d in spec_dtype[0]]))
    b.ret(*getattr(b, op)(x, **attrs)) if op == "topk" else b.ret(getattr(b, op)(x, **attrs))
    return b.module


@pytest.mark.parametrize("dims,groups", [(("b", 6, "s"), 3), (("b", 4, 2, "s"), 4), (("b", 6), 2)])
def test_group_norm_decomposes_to_layer_norm(P, dims, groups):
    before = _one_op_module("group_norm", (dims, "f32"), groups=groups, eps=1e-4)
    after = decompose(copy_module(before))
    ops = [n.op for n in after.main.nodes]
    assert "group_norm" not in ops and ops.count("layer_norm") == 1
    P.check_equiv(before, after, ENVS[:2] + [{"b": 3, "s": 9}], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups", [1, 2])
def test_group_norm_with_a_symbolic_channel_count_decomposes(P, groups):
    """Found by the fuzzer: a symbolic C stayed group_norm, which has no kernel (a crash in codegen)."""
    before = _one_op_module("group_norm", (("b", "s", 3), "f32"), groups=groups)
    after = decompose(copy_module(before))
    ops = [n.op for n in after.main.nodes]
    assert "group_norm" not in ops and ops.count("layer_norm") == 1
    P.check_equiv(before, after, [{"b": 1, "s": 2}, {"b": 3, "s": 6}, {"b": 2, "s": 10}], rtol=1e-5, atol=1e-5)


def test_group_norm_with_float32_parameters_keeps_a_16_bit_dtype():
    """Found by the fuzzer: float32 weight and bias on a float16 input made the epilogue's mul and
    add float32, and the graph's result with them (the op's type is the input's)."""
    b = Builder()
    x = b.param("x", tensor("f16", b.sym("b", 1, 8), 4, 5))
    w = b.param("w", tensor("f32", 4))
    b.ret(b.group_norm(x, w, w, groups=2))
    after = decompose(copy_module(b.module))
    assert after.main.results[0].dtype == b.module.main.results[0].dtype == ir.DType.float16
    assert after.main.nodes[-1].op == "cast"


@pytest.mark.parametrize("dtype", ["f32", "i64"])
@pytest.mark.parametrize("axis,largest", [(-1, True), (1, False), (0, True)])
def test_topk_decomposes_to_compares_and_sums(P, dtype, axis, largest):
    before = _one_op_module("topk", (("b", "s", 5), dtype), s_lo=3, k=1 if axis == 0 else 3, axis=axis, largest=largest)
    after = decompose(copy_module(before))
    ops = [n.op for n in after.main.nodes]
    assert "topk" not in ops and ops.count("reduce_sum") == 2 and "gather_elements" in ops
    # integer inputs in [0, 3) tie often: the order of equal values is checked too
    P.check_equiv(before, after, [{"b": 1, "s": 3}, {"b": 2, "s": 7}, {"b": 3, "s": 12}], rtol=0, atol=0)


@pytest.mark.parametrize("hi", [64, 65])
def test_topk_needs_k_at_most_the_dim(hi):
    """A dim that may be smaller than k gets k as its lower bound (an input error, as in torch),
    whether the row becomes loops (at most TOPK_LOOPS_MAX long) or stays topk for braze_select.h."""
    assert TOPK_LOOPS_MAX == 64
    b = Builder()
    n = b.sym("n", 1, hi)
    x = b.param("x", tensor("f32", 2, n))
    b.ret(*b.topk(x, k=5))
    after = decompose(copy_module(b.module))
    assert ("topk" in [m.op for m in after.main.nodes]) == (hi > TOPK_LOOPS_MAX)
    assert after.constraints.symbols["n"].lo == 5 and after.constraints.symbols["n"].hi == hi
    b = Builder()
    n = b.sym("n", 1, 128)
    x = b.param("x", tensor("f32", 2, n))
    b.ret(*b.topk(b.slice(x, axis=1, start=1, end=2 ** 62, step=2), k=5))  # an expression: n // 2 >= 5
    after = decompose(copy_module(b.module))  # (found by the fuzzer: it stayed topk, which has no kernel)
    assert "topk" not in [m.op for m in after.main.nodes]
    assert after.constraints.symbols["n"].lo == 1
    assert after.constraints.violations({"n": 10}) == [] and after.constraints.violations({"n": 9})
    assert ir.parse(after.to_text(), constants=after.constants).to_text() == after.to_text()


@pytest.mark.parametrize("dtype", ["f32", "f64", "i32", "i64", "bf16", "f16"])
def test_a_long_row_stays_topk_for_braze_select(dtype):
    """A vocabulary-long row made n^2 compares a row (half a second per call at 2x50257)."""
    b = Builder()
    x = b.param("x", tensor(dtype, b.sym("b", 1, 8), 50257))
    b.ret(*b.topk(x, k=50))
    ops = [m.op for m in decompose(copy_module(b.module)).main.nodes]
    assert "topk" in ops and "reduce_sum" not in ops


def test_empty_contraction_becomes_zeros(P):
    """oneDNN refuses a weight with a dim of 0: matmul / linear with K = 0 (or an empty output)
    become full(0) (+ bias)."""
    b = Builder()
    n = b.sym("n", 1, 8)
    x = b.param("x", tensor("f32", n, 0))
    w = b.constant(np.ones((0, 3), np.float32), name="w")
    lw = b.constant(np.ones((4, 0), np.float32), name="lw")
    bias = b.constant(np.arange(4, dtype=np.float32), name="bias")
    y = b.param("y", tensor("f32", n, 5))
    w0 = b.constant(np.ones((5, 0), np.float32), name="w0")
    b.ret(b.matmul(x, w), b.linear(x, lw, bias), b.matmul(y, w0))
    before = b.module
    after = decompose(copy_module(before))
    ops = [nd.op for nd in after.main.nodes]
    assert "matmul" not in ops and "linear" not in ops and ops.count("full") == 3
    P.check_equiv(before, after, [{"n": 1}, {"n": 3}])


@pytest.mark.parametrize("mask", [None, "float"])
def test_all_minus_inf_rows_give_zeros_and_nan_rows_stay_nan(P, mask):
    """torch's _safe_softmax: a row of scores that is all -inf gives zeros, with or without a
    mask (here -inf scores from an infinite query); a row with a NaN score gives NaN."""
    import braze
    import braze.reference
    torch = pytest.importorskip("torch")
    before = _sdpa_module(mask)
    after = decompose(copy_module(before))
    native = braze.compile(before)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    k = -np.abs(rng.standard_normal((2, 2, 5, 8))).astype(np.float32) - 0.1  # all negative
    v = rng.standard_normal((2, 2, 5, 4)).astype(np.float32)
    q[0, 1, 3, :] = np.inf  # every score of this row is -inf
    q[1, 0, 2, 4] = np.nan  # every score of this row is NaN
    ins = [q, k, v]
    if mask:
        ins.append(np.zeros((2, 1, 1, 5), np.float32))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in ins[:3]), attn_mask=torch.from_numpy(ins[3]) if mask else None).numpy()
    assert np.all(want[0, 1, 3] == 0) and np.all(np.isnan(want[1, 0, 2]))
    for what, got in (("reference", braze.reference.run(before, *ins)), ("decomposed", braze.reference.run(after, *ins)),
                      ("native", native(*ins))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)  # NaN where torch has NaN


@pytest.mark.parametrize("dtype", ["i64", "i32", "f64"])
def test_matmul_the_library_does_not_take_becomes_products_summed(P, dtype):
    """oneDNN takes float32 only: integer and float64 matmul / linear become a broadcast
    product and a sum over k (numpy.matmul's 1-D and batch rules kept)."""
    b = Builder()
    n, k = b.sym("n", 1, 8), b.sym("k", 1, 8)
    a = b.param("a", tensor(dtype, 2, n, k))
    m2 = b.param("m2", tensor(dtype, k, 3))
    v = b.param("v", tensor(dtype, k))
    w = b.param("w", tensor(dtype, 5, k))
    bias = b.param("bias", tensor(dtype, 5))
    b.ret(b.matmul(a, m2), b.matmul(v, m2), b.matmul(a, v), b.matmul(v, v), b.matmul(m2, b.param("bb", tensor(dtype, 2, 3, n))),
          b.linear(a, w, bias), b.linear(v, w))
    before = b.module
    after = decompose(copy_module(before))
    ops = [nd.op for nd in after.main.nodes]
    assert "matmul" not in ops and "linear" not in ops and ops.count("reduce_sum") == 7
    P.check_equiv(before, after, [{"n": 1, "k": 1}, {"n": 3, "k": 5}, {"n": 8, "k": 2}])


def _nhwc_conv(cg: int, groups: int, k: int, weight_const: bool = True, precision: str = "fp32"):
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("n", 1, 8)
    x = b.param("x", tensor("f32", n, 9, 9, cg * groups))
    wshape = (2 * groups, cg, k, k)
    w = b.constant(rng.standard_normal(wshape).astype(np.float32), "w") if weight_const else \
        b.param("w", tensor("f32", *wshape))
    b.ret(b.op("conv2d", [x, w], stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups,
               layout="nhwc"))
    b.module.precision = {"policy": precision}
    return b.module


def test_conv2d_with_few_channels_per_group_becomes_loops(P):
    """A depthwise convolution (1 channel per group, multiplier 2) on a constant weight:
    direct_conv2d on the weight permuted to [kh, kw, in/groups, out], the same results."""
    before = _nhwc_conv(1, 4, 3)
    after = decompose(copy_module(before))
    assert P.body(after) == [
        '%w = constant() {name="w"} : f32[8, 1, 3, 3]',
        "%weight_hwio = permute(%w) {perm=[2, 3, 1, 0]} : f32[3, 3, 1, 8]",
        "%0_1 = direct_conv2d(%x, %weight_hwio) {dilation=[1, 1], groups=4, padding=[1, 1, 1, 1], "
        "stride=[1, 1]} : f32[n, 9, 9, 8]", "return %0_1"]
    x = np.random.default_rng(1).standard_normal((2, 9, 9, 4)).astype(np.float32)
    import braze.reference
    np.testing.assert_allclose(braze.reference.run(after, x), braze.reference.run(before, x), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("cg,groups,k,const,precision", [
    (8, 1, 3, True, "fp32"),     # 8 channels per group: oneDNN's
    (1, 4, 9, True, "fp32"),     # 81 taps
    (1, 4, 3, False, "fp32"),    # a weight read at run time (training)
    (1, 4, 3, True, "bf16"),     # a 16-bit policy's convolutions store 16 bits
])
def test_conv2d_rule_leaves_the_rest_to_onednn(cg, groups, k, const, precision):
    after = decompose(copy_module(_nhwc_conv(cg, groups, k, const, precision)))
    assert [n.op for n in after.main.nodes if n.op != "constant"] == ["conv2d"]


POW_TEXT = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @e : DT[] = [EXP]
  }
  func @main(%x: DT[n]) -> (DT[n]) {
    %e = constant() {name="e"} : DT[]
    %0 = pow(%x, %e) : DT[n]
    return %0
  }
}
"""


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_pow_by_a_half_becomes_a_square_root_that_keeps_ieee_pow_values(P, dt):
    before, after = P.run_pass(decompose, POW_TEXT.replace("DT", dt).replace("EXP", "0.5"))
    assert [n.op for n in after.main.nodes if n.op != "constant"] == ["add", "sqrt", "equal", "where"]
    special = np.array([-np.inf, -0.0, -4.0, 0.0, 2.0, np.inf, np.nan, 1e-30], dtype=np.dtype(dt.replace("f", "float")))
    with np.errstate(invalid="ignore"):  # a full exponent array: IEEE pow, not numpy's sqrt shortcut
        want = np.power(special, np.full(special.shape, 0.5, special.dtype))
    for m in (before, after):
        got = braze.reference.run(m, special)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
    np.testing.assert_array_equal(braze.compile(after)(special), want)


@pytest.mark.parametrize("dt,exp", [("f32", "1.5"), ("f16", "0.5")])
def test_pow_by_other_exponents_or_in_16_bits_stays(P, dt, exp):
    before, after = P.run_pass(decompose, POW_TEXT.replace("DT", dt).replace("EXP", exp))
    assert str(after) == str(before)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ["f32", "i32", "bf16"])
def test_a_long_scan_is_summed_in_blocks(P, op, dtype):
    """A row that may be longer than SCAN_LOOPS_MAX: the scan in blocks of SCAN_BLOCK plus the
    exclusive scan of the blocks' totals, equal to the op at rows of 1, a partial block and
    several blocks; a short row, an exclusive or a reverse scan stay as they are."""
    assert (SCAN_LOOPS_MAX, SCAN_BLOCK) == (256, 64)
    b = Builder()
    x = b.param("x", tensor(dtype, b.sym("b", 1, 4), b.sym("s", 1, 1000), 3))
    b.ret(getattr(b, op)(x, axis=1), getattr(b, op)(x, axis=1, exclusive=True),
          getattr(b, op)(b.slice(x, axis=1, start=0, end=256, step=1), axis=1))
    after = decompose(copy_module(b.module))
    ops = [m.op for m in after.main.nodes]
    assert ops.count(op) == 2 + 2 and "pad" in ops and ("reduce_sum" if op == "cumsum" else "reduce_prod") in ops
    if dtype == "bf16":  # computed in float32, rounded once: no more than the op's own rounding
        pad = next(m for m in after.main.nodes if m.op == "pad")
        assert pad.outputs[0].dtype is ir.DType.float32 and after.main.results[0].producer.op == "cast"
    P.check_equiv(b.module, after, [{"b": 1, "s": 1}, {"b": 2, "s": 63}, {"b": 3, "s": 300}, {"b": 1, "s": 1000}],
                  rtol=1e-5 if dtype != "bf16" else 1e-2, atol=1e-4 if dtype != "bf16" else 1e-2)
    assert ir.parse(after.to_text(), constants=after.constants).to_text() == after.to_text()
