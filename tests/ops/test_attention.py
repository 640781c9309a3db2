"""scaled_dot_product_attention against torch, with symbolic batch and sequence dims."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import braze.reference as R
from braze.errors import InputError, ShapeError
from braze.ir.sym import Sym
from braze.ops import tensor
from braze.testing import assert_close, build, rand

B, L, S_, H = Sym("b"), Sym("l"), Sym("s"), Sym("h")
RNG = np.random.default_rng(4)
SIZES = ((1, 1, 1), (2, 5, 7), (1, 9, 4), (2, 33, 33))


def T(a):
    return torch.from_numpy(a)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_basic(is_causal, scale):
    m, out = build([tensor("f32", B, 3, L, 8), tensor("f32", B, 3, S_, 8), tensor("f32", B, 3, S_, 6)],
                   lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale))
    assert out.type.shape == (B, 3, L, 6)
    for bb, ll, ss in SIZES:
        q, k, v = rand(RNG, (bb, 3, ll, 8)), rand(RNG, (bb, 3, ss, 8)), rand(RNG, (bb, 3, ss, 6))
        want = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=is_causal, scale=scale).numpy()
        assert_close(R.run(m, q, k, v), want, rtol=1e-5, atol=1e-5)


def test_sdpa_bool_mask_with_fully_masked_rows():
    m, out = build([tensor("f32", B, 2, L, 4), tensor("f32", B, 2, S_, 4), tensor("f32", B, 2, S_, 4),
                    tensor("bool", L, S_)],
                   lambda b, q, k, v, mk: b.scaled_dot_product_attention(q, k, v, mk))
    assert out.type.shape == (B, 2, L, 4)
    for bb, ll, ss in SIZES:
        q, k, v = rand(RNG, (bb, 2, ll, 4)), rand(RNG, (bb, 2, ss, 4)), rand(RNG, (bb, 2, ss, 4))
        mk = RNG.random((ll, ss)) > 0.4
        mk[0] = False  # a fully masked row: torch gives zeros
        want = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mk)).numpy()
        got = R.run(m, q, k, v, mk)
        assert not np.isnan(got).any()
        assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_sdpa_float_mask_broadcast_and_causal():
    m, out = build([tensor("f32", B, H, L, 4), tensor("f32", B, H, S_, 4), tensor("f32", B, H, S_, 4),
                    tensor("f32", B, 1, L, S_)],
                   lambda b, q, k, v, mk: b.scaled_dot_product_attention(q, k, v, mk))
    assert out.type.shape == (B, H, L, 4)
    for bb, ll, ss in SIZES:
        q, k, v = rand(RNG, (bb, 2, ll, 4)), rand(RNG, (bb, 2, ss, 4)), rand(RNG, (bb, 2, ss, 4))
        mk = np.where(RNG.random((bb, 1, ll, ss)) > 0.3, 0.0, -np.inf).astype(np.float32) + rand(RNG, (bb, 1, ll, ss))
        want = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mk)).numpy()
        assert_close(R.run(m, q, k, v, mk), want, rtol=1e-5, atol=1e-5)


def test_sdpa_batch_broadcast_and_3d():
    # k/v shared across heads (broadcast over dim 1)
    m, out = build([tensor("f32", B, H, L, 8), tensor("f32", B, 1, S_, 8), tensor("f32", B, 1, S_, 8)],
                   lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert out.type.shape == (B, H, L, 8)
    q, k, v = rand(RNG, (2, 4, 6, 8)), rand(RNG, (2, 1, 6, 8)), rand(RNG, (2, 1, 6, 8))
    want = F.scaled_dot_product_attention(T(q), T(k).expand(2, 4, 6, 8), T(v).expand(2, 4, 6, 8), is_causal=True)
    assert_close(R.run(m, q, k, v), want.numpy(), rtol=1e-5, atol=1e-5)
    m, out = build([tensor("f32", L, 8), tensor("f32", S_, 8), tensor("f32", S_, 3)],
                   lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    assert out.type.shape == (L, 3)
    q, k, v = rand(RNG, (5, 8)), rand(RNG, (7, 8)), rand(RNG, (7, 3))
    assert_close(R.run(m, q, k, v), F.scaled_dot_product_attention(T(q), T(k), T(v)).numpy(), rtol=1e-5, atol=1e-5)


def test_sdpa_float64_and_float16():
    m, _ = build([tensor("f64", B, L, 8)] * 3, lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    q = rand(RNG, (2, 5, 8), "float64")
    assert_close(R.run(m, q, q, q), F.scaled_dot_product_attention(T(q), T(q), T(q)).numpy())
    m, _ = build([tensor("f16", B, L, 8)] * 3, lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    q = rand(RNG, (2, 5, 8), "float16")
    got = R.run(m, q, q, q)
    assert got.dtype == np.float16
    want = F.scaled_dot_product_attention(T(q).float(), T(q).float(), T(q).float()).half().numpy()
    assert_close(got, want, "float16")


def test_sdpa_errors():
    with pytest.raises(ShapeError, match="embedding dims 8 and 4 differ"):
        build([tensor("f32", B, L, 8), tensor("f32", B, S_, 4), tensor("f32", B, S_, 4)],
              lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    with pytest.raises(ShapeError, match="sequence lengths"):
        build([tensor("f32", B, L, 8), tensor("f32", B, 5, 8), tensor("f32", B, 6, 8)],
              lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    with pytest.raises(ShapeError, match="mask"):
        build([tensor("f32", L, 8), tensor("f32", S_, 8), tensor("f32", S_, 8), tensor("i64", L, S_)],
              lambda b, q, k, v, mk: b.scaled_dot_product_attention(q, k, v, mk))
    m, _ = build([tensor("f32", L, 8), tensor("f32", S_, 8), tensor("f32", Sym("t"), 8)],
                 lambda b, q, k, v: b.scaled_dot_product_attention(q, k, v))
    with pytest.raises(InputError):
        R.run(m, rand(RNG, (3, 8)), rand(RNG, (4, 8)), rand(RNG, (5, 8)))


# ---------------------------------------------------------------------------------------------
# training pieces (braze.ops.attention): the logsumexp the forward saves and the backward from it,
# against torch's CPU flash kernels (one head size for q, k and v), natively compiled
# ---------------------------------------------------------------------------------------------

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
TRAIN_CASES = [(False, None, None), (True, None, None), (False, 0.3, "float"), (True, None, "float")]


def _emit(b):
    from braze.ir.types import DType
    return (lambda op, *ins, name=None, **attrs: b.op(op, list(ins), name=name, **attrs)), \
        (lambda array, hint: b.constant(array)), DType.float32


def _float_mask(ll, ss):
    """-inf on the last key and on every key of row 0 (a row that attends to nothing), else 0"""
    m = np.zeros((ll, ss), np.float32)
    m[:, -1] = -np.inf
    m[0] = -np.inf
    return m


def _train_inputs(bb, ll, ss, mask):
    q, k, v = rand(RNG, (bb, 2, ll, 8)), rand(RNG, (bb, 2, ss, 8)), rand(RNG, (bb, 2, ss, 8))
    return q, k, v, (_float_mask(ll, ss) if mask else None)


@pytest.mark.parametrize("is_causal, scale, mask", TRAIN_CASES)
def test_logsumexp_matches_torch_flash_and_shares_the_scores(is_causal, scale, mask):
    import braze
    from braze.ops.attention import attention_logsumexp, attention_scores, default_scale
    from braze.passes import copy_module, cse, decompose

    types = [tensor("f32", B, 2, L, 8), tensor("f32", B, 2, S_, 8), tensor("f32", B, 2, S_, 8)]
    types += [tensor("f32", L, S_)] if mask else []

    def fn(b, q, k, v, mk=None):
        emit, const, acc = _emit(b)
        out = b.scaled_dot_product_attention(*([q, k, v] + ([mk] if mk is not None else [])),
                                             is_causal=is_causal, scale=scale)
        s = attention_scores(emit, const, q, k, mk, is_causal, scale or default_scale(8), acc)
        return out, attention_logsumexp(emit, const, s, acc)

    m, (_, lse) = build(types, fn)
    assert lse.type.shape == (B, 2, L)
    # the decomposed attention and the logsumexp compute the scores once
    after = cse(decompose(copy_module(m)))
    assert [n.op for n in after.main.nodes].count("matmul") == 2
    lib = braze.compile(m)
    for bb, ll, ss in SIZES:
        q, k, v, mk = _train_inputs(bb, ll, ss, mask)
        want_o, want_l = FLASH(T(q), T(k), T(v), is_causal=is_causal, attn_mask=None if mk is None else T(mk),
                               scale=scale)
        got_o, got_l = lib(q, k, v, *([mk] if mask else []))
        assert_close(got_l, want_l.numpy(), rtol=1e-5, atol=1e-5)
        assert_close(got_o, want_o.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("is_causal, scale, mask", TRAIN_CASES)
def test_backward_matches_torch_flash_backward(is_causal, scale, mask):
    import braze
    from braze.ops.attention import attention_backward, default_scale, sdpa_backward_numpy

    types = [tensor("f32", B, 2, L, 8), tensor("f32", B, 2, S_, 8), tensor("f32", B, 2, S_, 8),
             tensor("f32", B, 2, L, 8), tensor("f32", B, 2, L, 8), tensor("f32", B, 2, L)]
    types += [tensor("f32", L, S_)] if mask else []

    def fn(b, q, k, v, out, dout, lse, mk=None):
        emit, const, acc = _emit(b)
        return attention_backward(emit, const, q, k, v, out, dout, lse, mk, is_causal, scale or default_scale(8),
                                  acc)

    m, grads = build(types, fn)
    assert [g.type.shape for g in grads] == [(B, 2, L, 8), (B, 2, S_, 8), (B, 2, S_, 8)]
    lib = braze.compile(m)
    for bb, ll, ss in SIZES:
        q, k, v, mk = _train_inputs(bb, ll, ss, mask)
        tmk = None if mk is None else T(mk)
        out, lse = FLASH(T(q), T(k), T(v), is_causal=is_causal, attn_mask=tmk, scale=scale)
        dout = rand(RNG, out.shape)
        want = FLASH_BACKWARD(T(dout), T(q), T(k), T(v), out, lse, 0.0, is_causal, attn_mask=tmk, scale=scale)
        ref = sdpa_backward_numpy(q, k, v, out.numpy(), dout, lse.numpy(), mk, is_causal, scale)
        got = lib(q, k, v, out.numpy(), dout, lse.numpy(), *([mk] if mask else []))
        for g, w, r in zip(got, want, ref):
            assert_close(r, w.numpy(), rtol=1e-4, atol=1e-5)  # the oracle agrees with torch
            assert_close(g, w.numpy(), rtol=1e-4, atol=1e-5)


GQA_CASES = [(4, 4, False, None), (4, 2, True, None), (2, 1, False, "bool"), (2, 2, True, "float"),
             (4, 1, False, "bool")]
BIG_SIZES = SIZES + ((1, 70, 130), (2, 64, 64), (1, 129, 65))


def _gqa_inputs(bb, hq, hk, ll, ss, mask, ev=16):
    q, k, v = rand(RNG, (bb, hq, ll, 16)), rand(RNG, (bb, hk, ss, 16)), rand(RNG, (bb, hk, ss, ev))
    if mask == "bool":  # padding: the last key of the second sequence dropped, every other key kept
        mk = np.ones((bb, 1, 1, ss), bool)
        mk[1:, ..., -1] = ss == 1
    else:
        mk = _float_mask(ll, ss) if mask else None
    return q, k, v, mk


def _math_forward(q, k, v, tmk, is_causal):
    """torch's attention output and its logsumexp (0 for a row that attends to nothing) by its
    math path, with shared key/value heads repeated."""
    g = q.shape[1] // k.shape[1]
    sc = torch.einsum("bhle,bhse->bhls", T(q), T(k).repeat_interleave(g, 1)) * 0.3
    ll, ss = sc.shape[-2:]
    sc = sc.masked_fill(~torch.ones(ll, ss, dtype=torch.bool).tril(), -torch.inf) if is_causal else sc
    sc = sc if tmk is None else sc.masked_fill(~tmk, -torch.inf) if tmk.dtype == torch.bool else sc + tmk
    lse = torch.logsumexp(sc, -1).nan_to_num(posinf=0.0, neginf=0.0)
    return torch.softmax(sc, -1).nan_to_num() @ T(v).repeat_interleave(g, 1), lse


@pytest.mark.parametrize("hq, hk, is_causal, mask", GQA_CASES)
@pytest.mark.parametrize("ev", [16, 72])
def test_attention_backward_is_torch_flash_backward(hq, hk, is_causal, mask, ev, module_cache):
    """The fused op (tile by tile, key/value heads shared by groups of query heads) against torch's
    CPU flash backward, for the reference and the native code: the sizes cross its 64-key and
    64-query blocks, and include 1 and odd sizes. torch's kernel needs v's head size to be q's
    and a float mask: another head size (72, more than one block of 64 columns) and a bool
    padding mask check the native code against the reference, which the others check against
    torch."""
    import braze
    types = [tensor("f32", B, hq, L, 16), tensor("f32", B, hk, S_, 16), tensor("f32", B, hk, S_, ev),
             tensor("f32", B, hq, L, ev), tensor("f32", B, hq, L, ev), tensor("f32", B, hq, L)]
    types += [tensor("bool", B, 1, 1, S_)] if mask == "bool" else [tensor("f32", L, S_)] if mask else []
    m, grads = build(types, lambda b, *xs: b.attention_backward(*xs, is_causal=is_causal, scale=0.3))
    assert [g.type.shape for g in grads] == [tuple(t.shape) for t in types[:3]]
    lib = braze.compile(m)
    for bb, ll, ss in BIG_SIZES:
        q, k, v, mk = _gqa_inputs(max(bb, 2) if mask == "bool" else bb, hq, hk, ll, ss, mask, ev)
        tmk = None if mk is None else T(mk)
        flash = ev == 16 and mask != "bool"  # torch's CPU flash kernel: one head size, float masks
        if flash:
            out, lse = FLASH(T(q), T(k), T(v), is_causal=is_causal, attn_mask=tmk, scale=0.3)
        else:
            out, lse = _math_forward(q, k, v, tmk, is_causal)
        dout = rand(RNG, out.shape)
        args = (q, k, v, out.numpy(), dout, lse.numpy()) + ((mk,) if mask else ())
        ref = R.run(m, *args)
        if flash:
            want = FLASH_BACKWARD(T(dout), T(q), T(k), T(v), out, lse, 0.0, is_causal, attn_mask=tmk, scale=0.3)
            for r, w in zip(ref, want):
                assert_close(r, w.numpy(), rtol=1e-4, atol=1e-5, what=f"reference at {(bb, ll, ss)}")
        for g, r in zip(lib(*args), ref):
            assert_close(g, r, rtol=1e-4, atol=1e-5, what=f"native at {(bb, ll, ss)}")


def test_attention_backward_errors():
    f32 = lambda *s: tensor("f32", *s)  # noqa: E731
    ok = [f32(B, 4, L, 8), f32(B, 2, S_, 8), f32(B, 2, S_, 8), f32(B, 4, L, 8), f32(B, 4, L, 8), f32(B, 4, L)]
    with pytest.raises(ShapeError, match="static multiple"):
        build([f32(B, 3, L, 8)] + ok[1:3] + [f32(B, 3, L, 8)] * 2 + [f32(B, 3, L)],
              lambda b, *xs: b.attention_backward(*xs, scale=0.3))
    with pytest.raises(ShapeError, match="should be"):
        build(ok[:5] + [f32(B, 4)], lambda b, *xs: b.attention_backward(*xs, scale=0.3))
    with pytest.raises(ShapeError, match="bool or float32"):
        build(ok + [tensor("i64", L, S_)], lambda b, *xs: b.attention_backward(*xs, scale=0.3))


@pytest.mark.parametrize("keep", [(0,), (1, 2), (0, 2)])
def test_attention_backward_with_unread_gradients(keep, module_cache):
    """A model that reads only some of dq, dk, dv (fuzz seed 29014: dv unread) compiles, and the
    gradients it reads are the reference's."""
    import braze
    types = [tensor("f32", B, 4, L, 16), tensor("f32", B, 2, S_, 16), tensor("f32", B, 2, S_, 8),
             tensor("f32", B, 4, L, 8), tensor("f32", B, 4, L, 8), tensor("f32", B, 4, L)]

    def fn(b, *xs):
        grads = b.attention_backward(*xs, is_causal=True, scale=0.3)
        return tuple(grads[i] for i in keep)
    m, _ = build(types, fn)
    lib = braze.compile(m)
    for bb, ll, ss in ((1, 1, 1), (2, 5, 9), (1, 70, 130)):
        q, k, v, _ = _gqa_inputs(bb, 4, 2, ll, ss, None, 8)
        out, lse = _math_forward(q, k, v, None, True)
        args = (q, k, v, out.numpy(), rand(RNG, (bb, 4, ll, 8)), lse.numpy())
        got, want = lib(*args), R.run(m, *args)
        got, want = (got if isinstance(got, (list, tuple)) else [got]), (want if isinstance(want, (list, tuple))
                                                                       else [want])
        assert len(got) == len(keep)
        for g, r in zip(got, want):
            assert_close(g, r, rtol=1e-4, atol=1e-5, what=f"gradients {keep} at {(bb, ll, ss)}")


@pytest.mark.parametrize("isa", ["sse", "scalar"])
def test_attention_backward_at_every_vector_width(isa, module_cache, monkeypatch):
    """braze_attention.h's kernels for 4-float vectors (16 of them a row of 64) and for plain
    floats give what the host's widest do (the test above), across the 64-column blocks."""
    import braze
    monkeypatch.setenv("BRAZE_ISA", isa)
    types = [tensor("f32", B, 4, L, 16), tensor("f32", B, 2, S_, 16), tensor("f32", B, 2, S_, 72),
             tensor("f32", B, 4, L, 72), tensor("f32", B, 4, L, 72), tensor("f32", B, 4, L), tensor("f32", L, S_)]
    m, _ = build(types, lambda b, *xs: b.attention_backward(*xs, is_causal=True, scale=0.3))
    lib = braze.compile(m)
    for bb, ll, ss in ((1, 1, 1), (2, 70, 130)):
        q, k, v, mk = _gqa_inputs(bb, 4, 2, ll, ss, "float", 72)
        out, lse = _math_forward(q, k, v, T(mk), True)
        args = (q, k, v, out.numpy(), rand(RNG, (bb, 4, ll, 72)), lse.numpy(), mk)
        for g, r in zip(lib(*args), R.run(m, *args)):
            assert_close(g, r, rtol=1e-4, atol=1e-5, what=f"{isa} at {(bb, ll, ss)}")
