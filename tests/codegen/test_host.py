"""The host generator translates: IR text in (after offload and assign_memory), C out. Every
decision it emits (post-ops, memory) is read from the IR; a module without them is refused."""

from __future__ import annotations

import re

import pytest

from braze import ir
from braze.codegen.host import HostGen
from braze.codegen.isa import host_isa
from braze.errors import BrazeError

MODULE = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @w : f32[2, 4] = [0.5, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, -2.0]
    @b : f32[2] = [0.125, -0.25]
    @v : f32[2, 2] = [1.0, 2.0, 3.0, 4.0]
  }
  memory {
    @main arena 64*((8*n + 63) // 64)
  }
  func @main(%x: f32[n, 4], %r: f32[n, 2]) -> (f32[n, 2]) {
    %3 = fused(%x, %r) {ARENA0callee="g0", kind="gemm", POSTOPS} : f32[n, 2]
    %4 = fused(%3) {arena=[-1], callee="g1", kind="gemm", post_ops=[]} : f32[n, 2]
    return %4
  }
  func @g0(%x: f32[n, 4], %r: f32[n, 2]) -> (f32[n, 2]) {
    %w = constant() {name="w"} : f32[2, 4]
    %b = constant() {name="b"} : f32[2]
    %0 = linear(%x, %w) : f32[n, 2]
    %1 = add(%0, %b) : f32[n, 2]
    %2 = gelu(%1) {approximate="tanh"} : f32[n, 2]
    %3 = add(%2, %r) : f32[n, 2]
    return %3
  }
  func @g1(%3: f32[n, 2]) -> (f32[n, 2]) {
    %v = constant() {name="v"} : f32[2, 2]
    %4 = linear(%3, %v) : f32[n, 2]
    return %4
  }
}
"""


def emit(arena='arena=[0], ', post_ops='post_ops=["bias", "gelu_tanh", "residual"]') -> str:
    m = ir.parse(MODULE.replace("ARENA0", arena).replace("POSTOPS", post_ops))
    ir.verify(m)
    return HostGen(m, {}, host_isa()).generate().source


def test_library_calls_take_their_post_ops_and_memory_from_the_ir():
    src = emit()
    body = src[src.index("static int32_t braze_main_body"):]
    assert "size_t arena_bytes = (size_t)((64*bz_floordiv((8*sym_n + 63), 64)));" in body
    # the intermediate's place in the arena, named once before the call that writes it
    tmp = re.search(r"char \*const (a_\d+) = arena \+ 0;", body).group(1)
    # bias (constant 1), tanh GELU (code 3) and the residual (input 1) in one call, into the arena
    assert ("braze_matmul(sym_n, 2, 4, (const float *)((char *)inputs[0].data), M->pb[0], "
            "(const float *)((char *)M->c[1]), (const float *)((char *)inputs[1].data), 3, "
            f"(float *){tmp}, err, errlen)") in body
    assert (f"braze_matmul(sym_n, 2, 2, (const float *){tmp}, M->pb[1], NULL, NULL, 0, "
            "(float *)out_0, err, errlen)") in body


def test_a_new_shape_prepares_every_library_call_in_parallel_first():
    """Before the first library call, at symbols this thread has not run with this model, the
    entry creates every call's primitive in one OpenMP loop: each prepare mirrors its call's
    shape, weight and epilogue."""
    src = emit()
    body = src[src.index("static int32_t braze_main_body"):]
    prep = body.index("#pragma omp parallel for schedule(dynamic, 1)")
    assert prep < body.index("braze_matmul(sym_n")
    assert "const int64_t now_syms[1] = {sym_n};" in body
    assert "case 0: (void)braze_matmul_prepare(sym_n, M->pb[0], 1, 1, 3); break;" in body
    assert "case 1: (void)braze_matmul_prepare(sym_n, M->pb[1], 0, 0, 0); break;" in body
    assert "if (seen_model != M || memcmp(seen_syms, now_syms, sizeof now_syms))" in body


def test_every_post_op_activation_has_its_library_code():
    from braze.codegen.host_library import ACTIVATION_CODES
    from braze.passes.offload import ACTIVATIONS
    assert set(ACTIVATION_CODES) == set(ACTIVATIONS)


def test_an_activation_after_the_residual_add_is_flagged_so():
    from braze.codegen.host_library import AFTER_RESIDUAL, act_code
    assert act_code(["bias", "gelu_tanh", "residual"]) == 3  # act(x + b) + r
    assert act_code(["residual", "relu"]) == 7 | AFTER_RESIDUAL == 0x107  # relu(x + r): ResNet's block end
    assert act_code(["cast", "relu"]) == 7 and act_code(["bias"]) == act_code([]) == 0


def test_the_same_ir_gives_the_same_c():
    assert emit() == emit()


def test_no_memory_plan_is_refused():
    with pytest.raises(BrazeError, match="no arena offsets") as e:
        emit(arena="")
    assert "assign_memory" in e.value.hint


def test_a_group_not_offloaded_is_refused():
    with pytest.raises(BrazeError, match="was not offloaded") as e:
        emit(post_ops="post_ops=none")
    assert "offload" in e.value.hint


def test_post_ops_that_do_not_match_the_callee_are_a_bug_report():
    with pytest.raises(BrazeError, match="does not match its post_ops"):
        emit(post_ops='post_ops=["bias"]')
    with pytest.raises(BrazeError, match="lacks the nodes"):
        emit(post_ops='post_ops=["bias", "gelu_tanh", "residual", "tanh"]')


def test_a_transposed_operand_is_read_in_place():
    # the prologue permute is a flag of the call, not a copy: A's memory is [K, M] (a weight
    # gradient), B's [N, K] (a live weight read as linear's)
    m = ir.parse("""module {
  symbols {
    n in [1, 64]
  }
  memory {
    @main arena 0
  }
  func @main(%dy: f32[n, 3], %x: f32[n, 2], %y: f32[5, 2]) -> (f32[3, 2], f32[n, 5]) {
    %1 = fused(%dy, %x) {arena=[-1], callee="g0", kind="gemm", post_ops=[]} : f32[3, 2]
    %4 = fused(%x, %y) {arena=[-1], callee="g1", kind="gemm", post_ops=["tanh"]} : f32[n, 5]
    return %1, %4
  }
  func @g0(%dy: f32[n, 3], %x: f32[n, 2]) -> (f32[3, 2]) {
    %0 = permute(%dy) {perm=[1, 0]} : f32[3, n]
    %1 = matmul(%0, %x) : f32[3, 2]
    return %1
  }
  func @g1(%x: f32[n, 2], %y: f32[5, 2]) -> (f32[n, 5]) {
    %3 = permute(%y) {perm=[1, 0]} : f32[2, 5]
    %4 = matmul(%x, %3) : f32[n, 5]
    %5 = tanh(%4) : f32[n, 5]
    return %5
  }
}
""")
    ir.verify(m)
    body = HostGen(m, {}, host_isa()).generate().source
    assert ("braze_batch_matmul(1, 3, 2, sym_n, (const float *)((char *)inputs[0].data), 1, "
            "(const float *)((char *)inputs[1].data), 0, 1.0f, (float *)out_0, err, errlen)") in body
    # %y is an input, a live weight: a GEMM site that keeps it packed while the call's check at
    # entry finds its pages unwritten (braze_dnnl_live.c)
    assert "M->lb[0] = braze_live_b_new(5, 2, 1, 0, err, errlen); if (!M->lb[0]) goto fail;" in body
    assert "const void *lw_ptr[1] = {((char *)inputs[2].data)};" in body
    assert "static const size_t lw_bytes[1] = {40};" in body
    assert body.index("braze_live_check(1, lw_ptr, lw_bytes, lw_gen);") < body.index("braze_matmul_lw(")
    assert ("braze_matmul_lw(M->lb[0], lw_gen[0], sym_n, (const float *)((char *)inputs[1].data), "
            "(const float *)((char *)inputs[2].data), NULL, NULL, 6, (float *)out_1, err, errlen)") in body
    assert "braze_live_b_free(M->lb[0]);" in body
