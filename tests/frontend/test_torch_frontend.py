"""The torch frontend: each op family against eager PyTorch at several shapes,
symbol names and ranges, source locations in errors, and run-time input checks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.errors import InputError, UnsupportedOpError  # noqa: E402
from braze.ir import sym as S  # noqa: E402
from braze.testing import assert_close, flatten_outputs, torch_module  # noqa: E402

Dim = torch.export.Dim
nn = torch.nn
F = torch.nn.functional


def export(mod, example, dyn):
    mod = mod.eval()
    if type(mod).__name__ == "FnModule" and dyn is not None:
        dyn = (tuple(dyn),)  # Fn.forward(*xs): one varargs entry
    with torch.no_grad():
        return torch.export.export(mod, example, dynamic_shapes=dyn, strict=False)


def check(mod, make, dyn, shapes, example=None, rtol=1e-4, atol=1e-5):
    """Export at ``example`` dims, import, and compare with eager at every shape."""
    torch.manual_seed(0)
    mod = mod.eval()
    ep = export(mod, make(**(example or shapes[-1])), dyn)
    m = braze.import_torch(ep)
    for sh in shapes:
        ins = make(**sh)
        with torch.no_grad():
            ref = mod(*ins)
        ref = tuple(flatten_outputs(ref))
        out = braze.reference.run(m, *ins)
        out = out if isinstance(out, tuple) else (out,)
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            r = r.detach().numpy()
            assert o.dtype == r.dtype, (sh, o.dtype, r.dtype)
            if r.dtype.kind == "f":
                assert_close(o, r, rtol=rtol, atol=atol, what=str(sh))
            else:
                np.testing.assert_array_equal(o, r, err_msg=str(sh))
    return m


Fn = torch_module


def rnd(*shape, seed=0):
    g = torch.Generator().manual_seed(seed + 31 * sum(shape))
    return torch.randn(*shape, generator=g)


B = lambda: Dim("batch", min=1, max=64)  # noqa: E731
BATCHES = [{"b": 1}, {"b": 3}, {"b": 8}]
BS = [{"b": 1, "s": 1}, {"b": 2, "s": 7}, {"b": 3, "s": 12}]


# ---------------------------------------------------------------------------
# op families
# ---------------------------------------------------------------------------


def test_elementwise_and_scalars():
    def f(self, x, y):
        a = torch.relu(x) * 2.0 + 1 - y / 3
        a = a + torch.sigmoid(x) * torch.tanh(y) - torch.exp(-x.abs()) + torch.sqrt(x.abs() + 1)
        a = a + F.gelu(x) + F.gelu(y, approximate="tanh") + F.silu(x) + 1 - x  # rsub via 1 - x
        a = a + torch.pow(x, 2) + y ** 3 + torch.clamp(x, -0.5, 0.5) + torch.rsqrt(y * y + 1)
        a = torch.where(x > 0, a, y) + torch.maximum(x, y) + F.leaky_relu(x, 0.2) + F.hardtanh(y)
        a = a.masked_fill(y < -1.0, -3.0) + torch.erf(x) + torch.log(x.abs() + 1) + F.softplus(y)
        return a, (x >= y), (x != 0) & (y == y), torch.floor_divide(x, 0.3)

    check(Fn(f), lambda b: (rnd(b, 5), rnd(b, 5, seed=1)), ({0: B()}, {0: B()}), BATCHES)


def test_int_arithmetic_and_casts():
    def f(self, x, i):
        j = i * 3 + 2
        k = torch.div(j, 2, rounding_mode="floor") + torch.div(-j, 2, rounding_mode="trunc") + j % 5
        return x * k.float(), k, (x.to(torch.float64) + 1).sum(-1), x.long()

    check(Fn(f), lambda b: (rnd(b, 4) * 4, torch.arange(b * 4).reshape(b, 4) - 5),
          ({0: B()}, {0: B()}), BATCHES)


def test_linear_matmul_family():
    def f(self, x, y):
        h = self.lin(x)
        h = h @ self.w + torch.addmm(self.bias, x[0], self.w2).sum()
        return torch.bmm(h, y), torch.matmul(h, y), torch.mm(x[:, 0, :], self.w2)

    m = Fn(f, lin=nn.Linear(6, 4))
    m.w = nn.Parameter(torch.randn(4, 4))
    m.w2 = nn.Parameter(torch.randn(6, 3))
    m.register_buffer("bias", torch.randn(3))
    check(m, lambda b, s: (rnd(b, s, 6), rnd(b, 4, 5, seed=2)),
          ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)}, {0: Dim("batch", min=1, max=64)}),
          BS)


def test_mm_by_a_transposed_weight_reads_it_in_place():
    """``a @ t(W)`` is ``linear(a, W)`` and ``a @ t(t(V))`` (a training backward's ``grad @ W``)
    is ``matmul(a, V)``: either way the GEMM reads the weight as it is, with no transpose copy."""
    class F(nn.Module):
        def forward(self, a, v, w):
            return torch.mm(a, v.t().t()), torch.mm(a, w.t())

    ins = (rnd(3, 4), rnd(4, 5, seed=2), rnd(6, 4, seed=3))
    m = braze.import_torch(export(F(), ins, None))
    from braze.passes import canonicalize
    m = canonicalize(m)  # the two permutes cancel
    ops = [n.op for n in m.functions["main"].nodes]
    assert "permute" not in ops and ops.count("matmul") == 1 and ops.count("linear") == 1, ops
    for got, want in zip(braze.reference.run(m, *[t.numpy() for t in ins]), F()(*ins)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_shape_ops():
    def f(self, x):
        b, s, d = x.shape
        v = x.view(b, s, 2, -1).permute(0, 2, 1, 3).transpose(-1, -2)
        r = v.reshape(b * 2, -1)
        e = x[:, :1].expand(b, s, d)
        c = torch.cat([x, e, x * 2], dim=1)
        p1, p2 = torch.split(x, [2, 4], dim=2)
        q = torch.chunk(x, 3, dim=-1)
        u = torch.unbind(x[:, :, :2], dim=2)
        st = torch.stack([x, -x], dim=1)
        sl = x[:, 1:, ::2]
        sel = x[:, -1] + x[:, 0]
        sq = x.unsqueeze(1).unsqueeze(-1).squeeze(-1).flatten(1)
        pad = F.pad(x, (1, 2))
        rep = x[:, :1].repeat(1, 2, 3)
        nar = x.narrow(2, 1, 3)
        return v, r, c, p1, p2, q[2], u[1], st, sl, sel, sq, pad, rep, nar, x.t() if x.dim() == 2 else x.mT

    check(Fn(f), lambda b, s: (rnd(b, s, 6),),
          ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=3, max=128)},),
          [{"b": 1, "s": 3}, {"b": 2, "s": 7}, {"b": 3, "s": 12}])


def test_reductions():
    def f(self, x):
        return (x.mean(-1), x.sum(dim=(0, 2), keepdim=True), x.amax(1), torch.max(x, dim=1), x.argmax(-1),
                x.var(-1), x.std(dim=1, unbiased=False), x.prod(-1), torch.cumsum(x, 1), (x > 0).any(-1),
                (x > -5).all(1), x.min(), x.sum(), torch.softmax(x, 1), F.log_softmax(x, -1))

    check(Fn(f), lambda b, s: (rnd(b, s, 5),),
          ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)},), BS)


def test_norms_embedding_attention():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.ln = nn.LayerNorm(16)
            self.qkv = nn.Linear(16, 48)

        def forward(self, ids, mask):
            h = self.ln(self.emb(ids))
            b, s, _ = h.shape
            q, k, v = self.qkv(h).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
            bias = mask[:, None, None, :].bool()
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            c = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            fm = torch.zeros(b, 1, s, s).masked_fill(~bias, -1e4)
            d = F.scaled_dot_product_attention(q, k, v, attn_mask=fm, scale=0.3)
            r = F.rms_norm(h, (16,), eps=1e-6)
            return a, c, d, r, torch.index_select(h, 2, torch.tensor([0, 3, 5])), \
                torch.gather(h, 2, ids[:, :, None] % 16)

    def make(b, s):
        g = torch.Generator().manual_seed(b * 100 + s)
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s // 2 + 1:] = 0
        return torch.randint(0, 50, (b, s), generator=g), mask

    dyn = ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)},) * 2
    check(M(), make, dyn, BS)


def test_index_tensor_triu_creation():
    def f(self, x):
        b, s, _ = x.shape
        rows = torch.arange(b)[:, None]
        cols = torch.arange(s)[None, :]
        g = x[rows, cols]  # aten.index.Tensor with two index tensors
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        up = torch.triu(x[:, :, :3], diagonal=1)
        full = torch.full((b, s), 2.5) + torch.zeros(b, 1) + x.new_ones(b, s)
        pos = torch.arange(0, s, 1) + s
        return g, causal, up, full, pos, torch.ones_like(x) * x.sum()

    check(Fn(f), lambda b, s: (rnd(b, s, 4),),
          ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)},), BS)


def test_conv_bn_pool():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
            self.c1 = nn.Conv1d(8, 4, 3, padding=1)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 1.5)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            y = self.dw(y)
            a = F.max_pool2d(y, 3, stride=2, padding=1)
            p = F.avg_pool2d(y, 2)
            g = F.adaptive_avg_pool2d(y, 1).flatten(1)
            t = self.c1(y.mean(-1))
            return a, p, g, t

    dims = {0: Dim("batch", min=1, max=8), 2: Dim("height", min=8, max=128), 3: Dim("width", min=8, max=128)}
    check(M(), lambda b, h, w: (rnd(b, 3, h, w),), (dims,),
          [{"b": 1, "h": 8, "w": 8}, {"b": 2, "h": 13, "w": 9}, {"b": 3, "h": 16, "w": 21}])


def test_inplace_ops():
    def f(self, x):
        y = x * 1
        y.relu_()
        y.add_(1.0)
        return y, x

    check(Fn(f), lambda b: (rnd(b, 4),), ({0: B()},), BATCHES)


def test_static_shapes():
    check(Fn(lambda self, x: F.gelu(x) @ x.T), lambda: (rnd(3, 5),), None, [{}])


def check_native(mod, make, dyn, shapes, example=None):
    """check(), then the same model compiled natively against eager at every shape."""
    m = check(mod, make, dyn, shapes, example)
    cm = braze.compile(m)
    for sh in shapes:
        ins = make(**sh)
        with torch.no_grad():
            ref = tuple(flatten_outputs(mod(*ins)))
        out = cm(*[t.numpy() for t in ins])
        out = out if isinstance(out, tuple) else (out,)
        for o, r in zip(out, ref):
            assert_close(o, r.numpy(), rtol=1e-4, atol=1e-5, what=f"native {sh}")


def test_linear_conv_with_a_runtime_bias():
    # the bias is an input, not a weight: a separate add (libraries take constant biases only)
    def f(self, x, b, img, cb):
        return (F.linear(x, self.w, b), F.conv2d(img, self.cw, cb, padding=1),
                F.conv1d(img[:, :, 0], self.cw[..., 0], cb))

    m = Fn(f)
    m.w = nn.Parameter(torch.randn(4, 6))
    m.cw = nn.Parameter(torch.randn(5, 3, 3, 3))
    check_native(m, lambda b: (rnd(b, 6), rnd(4, seed=1), rnd(b, 3, 5, 7, seed=2), rnd(5, seed=3)),
                 ({0: B()}, None, {0: B()}, None), BATCHES)


def test_replicate_and_reflect_pad_with_negative_pads():
    # torch: out[i] = x[j(i - begin)], j a clamp or a reflection, also when the crop leaves less
    # than the pad reads (cropping first, as ONNX does, differs there)
    def f(self, x):
        return (F.pad(x, (-2, 3), mode="replicate"), F.pad(x, (0, 0, -3, 2), mode="replicate"),
                F.pad(x.unsqueeze(1), (1, -1, -1, 2), mode="replicate"),
                F.pad(x, (-3, 2), mode="reflect"), F.pad(x, (0, 0, 2, -2), mode="reflect"))

    check_native(Fn(f), lambda b, w: (rnd(b, 3, w),), ({0: B(), 2: Dim("w", min=4, max=64)},),
                 [{"b": 1, "w": 4}, {"b": 2, "w": 9}, {"b": 3, "w": 13}])


def test_reflect_pad_of_an_empty_dim_by_zero():
    check_native(Fn(lambda self, x: F.pad(x, (1, 2), mode="reflect")), lambda b: (rnd(0, b, 5),),
                 ({1: B()},), BATCHES)


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # torch, when n <= correction
def test_var_std_with_fractional_and_negative_corrections():
    def f(self, x):
        return (torch.var(x, dim=1, correction=1.5), torch.std(x, correction=-1, keepdim=True),
                *torch.var_mean(x, dim=(0, 2), correction=0.5), torch.var(x[:, :1], dim=1, correction=2.5))

    check_native(Fn(f), lambda: (rnd(4, 5, 3),), None, [{}])


def test_instance_norm_uses_batch_statistics():
    def f(self, x):
        return F.instance_norm(x, weight=self.w, bias=self.b, eps=1e-3), F.instance_norm(x)

    m = Fn(f)
    m.w, m.b = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
    check_native(m, lambda b: (rnd(b, 3, 6, 5) * 3 + 1,), ({0: B()},), BATCHES)


def test_softmax_of_an_empty_tensor():
    check_native(Fn(lambda self, x: (torch.softmax(x, -1), torch.log_softmax(x, 0))), lambda b: (rnd(b, 0),),
                 ({0: B()},), BATCHES)


def test_log1p_expm1_of_ints_give_float():
    def f(self, i):
        return torch.log1p(i), torch.expm1(i)

    check_native(Fn(f), lambda b: (torch.arange(b * 3).reshape(b, 3) - 2,), ({0: B()},), BATCHES)


def test_int_convolution_and_average_pooling_are_unsupported():
    x = torch.arange(2 * 3 * 6 * 6).reshape(2, 3, 6, 6)
    for f in (lambda self, x: F.conv2d(x, torch.ones(2, 3, 3, 3, dtype=torch.int64)),
              lambda self, x: F.avg_pool2d(x, 2), lambda self, x: F.adaptive_avg_pool2d(x, 2)):
        with pytest.raises(UnsupportedOpError, match="int64"):
            braze.import_torch(export(Fn(f), (x,), None))


# ---------------------------------------------------------------------------
# symbols, ranges, constants
# ---------------------------------------------------------------------------


def test_symbol_names_ranges_and_printing():
    def f(self, x, y):
        return torch.cat([x, y], 0) * self.scale

    m = Fn(f)
    m.register_buffer("scale", torch.full((5,), 2.0))
    b = Dim("batch", min=2, max=40)
    ep = export(m, (rnd(4, 5), rnd(8, 5)), ({0: b}, {0: 2 * b}))
    mod = braze.import_torch(ep)
    assert set(mod.symbols) == {"batch"}
    s = mod.symbols["batch"]
    assert (s.lo, s.hi) == (2, 40)
    text = str(mod)
    assert "batch" in text and "2*batch" in text and "3*batch" in text
    assert "scale" in mod.constants
    x_t, y_t = (p.type for p in mod.main.params)
    assert x_t.shape[0] == S.Sym("batch") and y_t.shape[0] == 2 * S.Sym("batch")
    out = braze.reference.run(mod, rnd(3, 5), rnd(6, 5))
    assert out.shape == (9, 5)
    with pytest.raises(InputError):  # y's dim must be 2*batch
        braze.reference.run(mod, rnd(3, 5), rnd(7, 5))
    with pytest.raises(InputError, match="range"):  # batch = 1 is below its range
        braze.reference.run(mod, rnd(1, 5), rnd(2, 5))


def test_weights_named_by_fqn():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.ModuleList([Inner(), Inner()])

        def forward(self, x):
            return self.block[1].proj(self.block[0].proj(x))

    ep = export(Outer(), (rnd(2, 4),), ({0: B()},))
    mod = braze.import_torch(ep)
    assert {"block.0.proj.weight", "block.1.proj.bias"} <= set(mod.constants)
    assert "block.0.proj" in str(mod)  # source locations carry the module path


def test_bad_inputs_raise_input_error():
    def f(self, x, y):
        return x + y

    dyn = ({0: Dim("batch", min=1, max=16), 1: Dim("n", min=1, max=32)},
           {0: Dim("batch", min=1, max=16), 1: Dim("n", min=1, max=32)})
    mod = braze.import_torch(export(Fn(f), (rnd(2, 3), rnd(2, 3)), dyn))
    assert set(mod.symbols) == {"batch", "n"}
    braze.reference.run(mod, rnd(5, 7), rnd(5, 7))
    with pytest.raises(InputError, match="rank"):
        braze.reference.run(mod, rnd(5, 7, 1), rnd(5, 7))
    with pytest.raises(InputError, match="range"):
        braze.reference.run(mod, rnd(17, 7), rnd(17, 7))
    with pytest.raises(InputError, match="'n'|n"):
        braze.reference.run(mod, rnd(5, 7), rnd(5, 6))
    with pytest.raises(InputError, match="dtype"):
        braze.reference.run(mod, rnd(5, 7).double(), rnd(5, 7))


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


class _Det(nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.linalg.det(y)  # MARKER-unsupported


def test_unsupported_op_names_op_and_source_line():
    ep = export(_Det(), (rnd(2, 3, 3),), ({0: B()},))
    with pytest.raises(UnsupportedOpError) as ei:
        braze.import_torch(ep)
    msg = str(ei.value)
    assert "linalg_det" in msg or "det" in msg
    assert "aten." in msg
    assert "test_torch_frontend.py" in msg and "MARKER-unsupported" in msg
    assert "hint" in msg


def test_unsupported_dtype():
    def f(self, x):
        return x.to(torch.complex64) * 2

    ep = export(Fn(f), (rnd(2, 3),), ({0: B()},))
    with pytest.raises(UnsupportedOpError, match="complex64"):
        braze.import_torch(ep)


def test_16_bit_and_unsigned_integers():
    def f(self, x):
        i = (x * 1000).to(torch.int16)
        return i * 3 + 7, (x * 100).abs().to(torch.uint16)  # torch has few uint16 kernels

    ep = export(Fn(f), (rnd(2, 3),), ({0: B()},))
    m = braze.compile(ep)
    for n in (1, 5):
        x = rnd(n, 3) * 40
        for g, w in zip(m(x), f(None, x)):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("dt", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_bitwise_ops_shifts_and_view_as_another_dtype(dt):
    # shift amounts from -70 to 139 take in the out-of-range cases (negative, the width and beyond)
    def f(self, a, b, x):
        return (a & b, a | 3, a ^ b, ~a, a << b, a >> b, torch.bitwise_left_shift(a, 2),
                torch.logical_and(a, b), ~(x > 0), (x > 0) & (x < 1), x.view(torch.int32), a.view(a.dtype))

    lo = -128 if dt.is_signed else 0

    def ints(n, lo, hi, seed):
        return torch.randint(lo, hi, (n, 5), generator=torch.Generator().manual_seed(seed)).to(dt)

    ep = export(Fn(f), (ints(2, lo, 127, 0), ints(2, 0, 9, 1), rnd(2, 5)), ({0: B()},) * 3)
    m = braze.compile(ep)
    for n in (1, 4, 9):
        a, b, x = ints(n, lo, 127, n), ints(n, -70 if dt.is_signed else 0, 140 if dt != torch.int8 else 127, n + 1), \
            rnd(n, 5)
        for i, (g, w) in enumerate(zip(m(a, b, x), f(None, a, b, x))):
            assert g.dtype == w.dtype and torch.equal(g, w), (n, i, g, w)


def test_view_as_a_dtype_of_another_width_is_refused_not_misread():
    def f(self, x):
        return x.view(torch.uint8) + 1

    ep = export(Fn(f), (rnd(2, 3),), ({0: B()},))
    with pytest.raises(UnsupportedOpError, match="float32 to uint8, which changes the shape"):
        braze.import_torch(ep)


def test_not_an_exported_program():
    with pytest.raises(braze.ModelFormatError, match="ExportedProgram"):
        braze.import_torch(nn.Linear(2, 2))


def test_core_aten_decomposed_program():
    """``ep.run_decompositions()`` output (addmm, bmm, native_layer_norm, _softmax...) imports too."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.ln = nn.LayerNorm(8)

        def forward(self, x):
            h = self.ln(self.lin(x))
            a = torch.softmax(h @ h.transpose(1, 2) / 3.0, dim=-1)
            return F.gelu(a @ h).mean(1)

    dyn = ({0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=128)},)
    ep = export(M(), (rnd(2, 5, 8),), dyn).run_decompositions()
    mod = braze.import_torch(ep)
    assert set(mod.symbols) == {"batch", "seq"}
    for b, s in [(1, 1), (2, 7), (3, 12)]:
        x = rnd(b, s, 8)
        with torch.no_grad():
            ref = ep.module()(x)
        assert_close(braze.reference.run(mod, x), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_int_arange_truncates_float_bounds_and_step():
    def f(self, x):
        return (x + torch.arange(0.1, -7.9, -4.0, dtype=torch.int64),
                torch.arange(0.9, 5.5, 1.5, dtype=torch.int64), torch.arange(-0.9, 5, 2.9, dtype=torch.int64))

    check_native(Fn(f), lambda: (torch.arange(2),), None, [{}])


def test_gather_with_an_empty_index():
    # torch lets an empty index have another rank than the input
    check_native(Fn(lambda self, x: torch.gather(x, 0, torch.zeros(2, 0, dtype=torch.int64)) + 1),
                 lambda: (rnd(5),), None, [{}])
