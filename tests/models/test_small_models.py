"""Tiny random-weight versions of model families that needed fmod/roll, F.interpolate,
group_norm and weight_norm: each compiled ONCE with braze.compile at symbolic dims and run
against eager at several shapes (odd ones included) with no recompile."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.testing import MODEL_REL_TOL, rel_error  # noqa: E402

nn = torch.nn
F = torch.nn.functional
Dim = torch.export.Dim


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "small_models_cache"))


def compile_and_compare(model, example, dynamic_shapes, inputs):
    torch.manual_seed(0)
    model = model.eval()
    m = braze.compile(model, example, dynamic_shapes=dynamic_shapes)
    compiles = braze.stats()["native_compiles"]
    for ins in inputs:
        with torch.no_grad():
            want = model(*ins)
        got = m(*ins)
        assert tuple(got.shape) == tuple(want.shape)
        err = rel_error(got.numpy(), want.numpy())
        assert err <= MODEL_REL_TOL, f"at {[tuple(i.shape) for i in ins]}: rel error {err:.3g}"
    assert braze.stats()["native_compiles"] == compiles, "a new shape triggered a recompile"


class ShiftedWindowBlock(nn.Module):
    """A Swin-style block: cyclic shift (torch.roll), window attention, shift back, MLP."""

    def __init__(self, c=16, ws=4, heads=2):
        super().__init__()
        self.ws, self.heads = ws, heads
        self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.mlp = nn.Sequential(nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c))

    def forward(self, x):  # [B, H, W, C], H and W multiples of the window
        b, h, w, c = x.shape
        ws, nh, s = self.ws, self.heads, self.ws // 2
        y = torch.roll(self.norm1(x), shifts=(-s, -s), dims=(1, 2))
        y = y.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        q, k, v = (t.reshape(-1, ws * ws, nh, c // nh).transpose(1, 2) for t in self.qkv(y).chunk(3, dim=-1))
        a = torch.softmax((q * (c // nh) ** -0.5) @ k.transpose(-2, -1), dim=-1)
        y = self.proj((a @ v).transpose(1, 2).reshape(-1, ws * ws, c))
        y = y.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        x = x + torch.roll(y, shifts=(s, s), dims=(1, 2))
        return x + self.mlp(self.norm2(x))


def test_shifted_window_block_with_roll():
    """H and W are derived dims (4 * windows); torch gives the window counts a minimum of 2."""
    hb, wb = Dim("hb", min=2, max=16), Dim("wb", min=2, max=16)
    dyn = ({0: Dim("batch", min=1, max=8), 1: 4 * hb, 2: 4 * wb},)
    inputs = [(torch.randn(b, 4 * i, 4 * j, 16),) for b, i, j in [(1, 2, 2), (2, 3, 5), (3, 7, 2)]]
    compile_and_compare(ShiftedWindowBlock(), (torch.randn(2, 8, 12, 16),), dyn, inputs)


class TinyViT(nn.Module):
    """Patch embedding, class token, position embeddings interpolated (bicubic, as timm / HF
    ViT do) to the image's patch grid, one attention layer with its output projection (a
    residual add right after the attention's matmul would be a batched matmul epilogue, which
    the native backend does not take yet), pooled head."""

    def __init__(self, c=16, patch=4, grid=4):
        super().__init__()
        self.patch, self.grid = patch, grid
        self.embed = nn.Conv2d(3, c, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, c) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, c) * 0.5)
        self.norm, self.qkv, self.out = nn.LayerNorm(c), nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.head = nn.Linear(c, 5)

    def forward(self, img):
        x = self.embed(img)  # [B, C, h, w]
        b, c, h, w = x.shape
        x = x.flatten(2).transpose(1, 2)
        pos = self.pos[:, 1:].reshape(1, self.grid, self.grid, c).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(h, w), mode="bicubic", align_corners=False)
        pos = torch.cat([self.pos[:, :1], pos.permute(0, 2, 3, 1).reshape(1, h * w, c)], dim=1)
        x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1) + pos
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v))
        return self.head(x.mean(1))


def test_vit_interpolating_position_embeddings():
    dyn = ({0: Dim("batch", min=1, max=8), 2: Dim("height", min=8, max=128), 3: Dim("width", min=8, max=128)},)
    inputs = [(torch.randn(b, 3, h, w),) for b, h, w in [(1, 8, 8), (2, 13, 21), (1, 31, 16)]]
    compile_and_compare(TinyViT(), (torch.randn(2, 3, 16, 20),), dyn, inputs)


class TinyFeatureEncoder(nn.Module):
    """wav2vec2's feature encoder: conv1d + group_norm + GELU, conv1d + GELU, feature
    projection, and the weight-normed grouped positional conv (SamePad drops one frame)."""

    def __init__(self, c=16):
        super().__init__()
        self.conv0 = nn.Conv1d(1, c, 10, stride=5, bias=False)
        self.gn = nn.GroupNorm(c, c)
        self.conv1 = nn.Conv1d(c, c, 3, stride=2, bias=False)
        self.ln, self.proj = nn.LayerNorm(c), nn.Linear(c, c)
        self.pos = nn.utils.parametrizations.weight_norm(nn.Conv1d(c, c, 4, padding=2, groups=4), name="weight",
                                                         dim=2)

    def forward(self, wav):  # [B, T]
        h = F.gelu(self.gn(self.conv0(wav.unsqueeze(1))))
        h = F.gelu(self.conv1(h))
        h = self.proj(self.ln(h.transpose(1, 2)))  # [B, frames, C]
        p = F.gelu(self.pos(h.transpose(1, 2))[:, :, :-1])
        return h + p.transpose(1, 2)


def test_wav2vec2_feature_encoder_weight_norm_group_norm():
    dyn = ({0: Dim("batch", min=1, max=8), 1: Dim("samples", min=40, max=100000)},)
    inputs = [(torch.randn(b, t),) for b, t in [(1, 40), (2, 157), (3, 1001)]]
    compile_and_compare(TinyFeatureEncoder(), (torch.randn(2, 400),), dyn, inputs)
