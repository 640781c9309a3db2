"""Shared test settings: deterministic seeds, one torch thread per xdist worker, the oneDNN helper
and the precompiled headers built once per session, tiny models."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # two workers on two cores: one intra-op thread each avoids oversubscription
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            pass


@pytest.fixture(scope="session", autouse=True)
def _built_once_per_session(tmp_path_factory):
    """Many tests give braze a compile cache of their own, and each would build the oneDNN helper
    library into it (about 7 s of a 2-core machine: most of such a test's time). The helper's cache
    key covers its source, flags and compiler, not the cache: its first build in this session, in a
    cache the xdist workers share, is copied into the other caches as they ask for it (a cache hit
    there, the same bytes). ``force`` rebuilds stay real, and so does every build in a test marked
    ``builds_helper`` (the tests of that build and its counters). The precompiled system headers
    (braze/runtime/pch.py) are built once there too, and every cache uses them."""
    from braze.extern.onednn import HELPER_FILE
    from braze.runtime import compiler, pch
    base = tmp_path_factory.getbasetemp()
    seed = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "braze-helper-seed"
    seed.mkdir(exist_ok=True)
    real = compiler._build

    def build(root, job, force):
        if job.filename != HELPER_FILE or force or Path(root) == seed or _REAL_BUILDS["on"]:
            return real(root, job, force)
        made = compiler._lookup(seed, job.key, job.filename) or real(seed, job, False)
        entry = Path(root) / job.key[:2] / job.key
        shutil.copytree(made.parent, entry, dirs_exist_ok=True)  # a copy: a test may damage its own
        return compiler._hit(job, entry / job.filename) if compiler._entry_ok(entry, job.filename) \
            else real(root, job, force)

    mp = pytest.MonkeyPatch()
    mp.setattr(compiler, "_build", build)
    mp.setattr(pch, "pch_root", lambda cache_root: seed / "pch")
    yield
    mp.undo()


_REAL_BUILDS = {"on": False}  # while a ``builds_helper`` test runs


@pytest.fixture(autouse=True)
def _builds_helper(request):
    _REAL_BUILDS["on"] = request.node.get_closest_marker("builds_helper") is not None
    yield
    _REAL_BUILDS["on"] = False


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """A compile cache of the module's own, and the host's ISA (no BRAZE_ISA): use with
    ``pytestmark = pytest.mark.usefixtures("module_cache")``."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.mktemp("braze-cache")))
    mp.delenv("BRAZE_ISA", raising=False)
    yield
    mp.undo()


def _tiny_models():
    torch = pytest.importorskip("torch")
    nn, F, Dim = torch.nn, torch.nn.functional, torch.export.Dim

    class TinyGPT(nn.Module):
        """Embeddings (gathers), layer norm, causal softmax attention, gelu-tanh MLP, argmax, log_softmax."""

        def __init__(self, vocab=50, c=16, heads=2):
            super().__init__()
            self.heads = heads
            self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(64, c)
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(approximate="tanh"), nn.Linear(4 * c, c))
            self.head = nn.Linear(c, vocab)

        def forward(self, ids):
            b, s = ids.shape
            x = self.tok(ids) + self.pos(torch.arange(s))
            c, nh = x.shape[-1], self.heads
            q, k, v = (t.reshape(b, s, nh, c // nh).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
            att = (q @ k.transpose(-2, -1)) * (c // nh) ** -0.5
            mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
            att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, c))
            logits = self.head(self.lnf(x + self.mlp(self.ln2(x))))
            return logits.argmax(-1), torch.log_softmax(logits, -1)

    class TinyCNN(nn.Module):
        """conv + batch norm + relu, max pool, hardswish, nearest resize, adaptive average pool, softmax."""

        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
            x = F.interpolate(F.hardswish(self.b2(self.c2(x))), scale_factor=2, mode="nearest")
            return torch.softmax(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), -1)

    torch.manual_seed(0)
    batch = Dim("batch", min=1, max=8)
    return {
        "gpt": (TinyGPT(), (torch.randint(0, 50, (2, 8)),), ({0: batch, 1: Dim("seq", min=2, max=64)},)),
        "cnn": (TinyCNN(), (torch.randn(2, 3, 16, 16),),
                ({0: batch, 2: 4 * Dim("h", min=1, max=16), 3: 4 * Dim("w", min=1, max=16)},)),
    }


@pytest.fixture(scope="session")
def tiny_models():
    """name -> (torch module, example inputs, dynamic_shapes): a small GPT and a small CNN that
    cover gathers, stitch kernels, attention, gemm and conv groups, and compile in seconds."""
    return _tiny_models()

