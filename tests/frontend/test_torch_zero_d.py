"""0-d tensors and 0-sized dims through the torch frontend: every model runs through the
reference interpreter AND natively (braze.compile, one compile per model), against eager.

Each model returns many outputs so that one C compile covers a whole family. The
comparison checks shape and dtype exactly (a 0-d result must not come back as [1])."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.testing import assert_close, flatten_outputs, torch_module  # noqa: E402

Dim = torch.export.Dim
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "braze_cache"))


Fn = torch_module


def _compare(got, want, what):
    got = np.asarray(got.numpy() if isinstance(got, torch.Tensor) else got)
    want = want.detach().numpy()
    assert got.shape == want.shape, f"{what}: shape {got.shape} != eager {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != eager {want.dtype}"
    if want.dtype.kind == "f":
        assert_close(got, want, rtol=1e-5, atol=1e-6, what=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check(fn, example, inputs_list=None, dynamic_shapes=None, **mods):
    """Export ``fn`` at ``example``; reference and native results equal eager at every inputs."""
    mod = Fn(fn, **mods).eval()
    if dynamic_shapes is not None:
        dynamic_shapes = (tuple(dynamic_shapes),)
    with torch.no_grad():
        ep = torch.export.export(mod, example, dynamic_shapes=dynamic_shapes, strict=False)
    m = braze.import_torch(ep)
    native = braze.compile(ep)
    for ins in inputs_list or [example]:
        with torch.no_grad():
            want = tuple(flatten_outputs(mod(*ins)))
        ref = braze.reference.run(m, *[x.numpy() for x in ins])
        ref = ref if isinstance(ref, tuple) else (ref,)
        got = native(*ins)
        got = got if isinstance(got, tuple) else (got,)
        assert len(ref) == len(got) == len(want)
        shapes = [tuple(x.shape) for x in ins]
        for i, (r, g, w) in enumerate(zip(ref, got, want)):
            _compare(r, w, f"reference output {i} at {shapes}")
            _compare(g, w, f"native output {i} at {shapes}")


def scalar(v=0.75):
    return torch.tensor(v)


# ---------------------------------------------------------------------------
# 0-d inputs
# ---------------------------------------------------------------------------


def test_reductions_of_0d():
    def f(self, x):
        return (x.sum(), x.sum(0), x.sum(-1, keepdim=True), x.amax(), x.amin(0), x.mean(), x.std(),
                x.var(correction=0), x.prod(), x.max(), x.min(), *x.max(0), *x.min(-1, keepdim=True),
                x.argmax(), x.argmax(0), x.argmin(-1, keepdim=True), torch.logsumexp(x, 0),
                (x > 0).any(), (x > 0).all(), (x * 3).long().sum(), (x * 3).long().amax())

    check(f, (scalar(),), [(scalar(0.75),), (scalar(-2.5),)])


def test_scans_and_softmax_of_0d():
    def f(self, x):
        return (x.cumsum(0), (x * 4).long().cumsum(-1), (x > 0).cumsum(0), torch.softmax(x, 0),
                torch.log_softmax(x, -1), x.unsqueeze(0).cumsum(0))

    check(f, (scalar(),), [(scalar(1.5),), (scalar(-3.0),)])


def test_creation_ops_give_0d():
    def f(self, x):
        return (x.new_zeros(()), x.new_ones(()), x.new_full((), 2.5), torch.full((), 3.0), torch.zeros_like(x),
                torch.ones_like(x) + x, torch.scalar_tensor(1.5) * x, torch.full((), 7, dtype=torch.int64),
                x.new_zeros(()) + x.sum())

    check(f, (torch.randn(5),), [(torch.randn(5),)])
    check(f, (scalar(),), [(scalar(2.0),)])


def test_empty_gives_0d():
    """new_empty / empty: values are undefined, shapes and dtypes are not."""
    mod = Fn(lambda self, x: (x.new_empty(()), torch.empty((), dtype=torch.int64), x.new_empty((0,)).sum())).eval()
    ep = torch.export.export(mod, (torch.randn(3),), strict=False)
    want = mod(torch.randn(3))
    for got in (braze.compile(ep)(torch.randn(3)), braze.reference.run(braze.import_torch(ep), np.ones(3, np.float32))):
        assert [(tuple(g.shape), str(g.dtype).split(".")[-1]) for g in got] == \
            [(tuple(w.shape), str(w.dtype).split(".")[-1]) for w in want]


def test_elementwise_chain_and_views_of_0d():
    def f(self, x):
        y = ((x * 2).exp() - x).tanh() * x.sigmoid() + F.gelu(x) - torch.where(x > 0, x, -x).clamp(-0.5, 0.5)
        return (y, x.reshape(1, 1) + 1, x.unsqueeze(0) * 2, x.squeeze() + 1, x.squeeze(0), x.flatten() * 2,
                x.expand(3, 2) + 0, torch.stack([x, y]), x == x, x.long() + 1, x * x.sum())

    check(f, (scalar(),), [(scalar(0.3),), (scalar(-1.7),)])


def test_constant_folded_0d_values():
    """A 0-d constant expression folds to a 0-d constant (it became shape [1] and failed to lower)."""
    def f(self, x):
        a = x / torch.sqrt(torch.tensor(16.0) * 3)
        b = x + torch.tensor(3.0).exp().log() * torch.tensor(2.0)
        c = torch.tensor(5) * 2
        return a, b, c, torch.tensor(2.0) * torch.tensor(4.0), x.sum() / torch.sqrt(torch.tensor(4.0))

    n = Dim("n", min=1, max=64)
    check(f, (torch.randn(4),), [(torch.randn(1),), (torch.randn(7),)], dynamic_shapes=[{0: n}])


def test_0d_model_inputs_and_outputs():
    def f(self, x, t):
        return x * t, t + 1, t, x.sum(), x.sum(-1) * t, (x * t).amax(-1).sum()

    b = Dim("batch", min=1, max=64)
    check(f, (torch.randn(3, 4), scalar()), [(torch.randn(1, 4), scalar(2.0)), (torch.randn(5, 4), scalar(-1.0))],
          dynamic_shapes=[{0: b}, None])


# ---------------------------------------------------------------------------
# 0-sized dims
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_0_sized_dims(shape):
    def f(self, x):
        return (x + 1, (x * 2).exp(), x.sum(), x.sum(-1), x.mean(0), x.prod(), x.cumsum(-1), torch.softmax(x, 0),
                torch.log_softmax(x, -1), (x > 0).any(), (x > 0).all(), (x > 0).any(-1), x.reshape(-1) * 2,
                torch.cat([x, x]), x.long().sum(0))

    check(f, (torch.randn(shape),))


def test_empty_gemm_and_conv():
    """K = 0 gives zeros (+ bias); an output dim of 0 gives an empty result; an empty batch
    runs through the library calls (whose data pointers may then be NULL)."""
    def f(self, x, y, z):
        return (x @ torch.ones(0, 2), self.lin0(x), x.t() @ torch.ones(2, 3), torch.ones(3, 4) @ torch.ones(4, 0),
                F.max_pool2d(self.conv(y).relu(), 2), self.lin(z).relu(), z @ z.transpose(-1, -2))

    check(f, (torch.randn(2, 0), torch.randn(0, 3, 8, 8), torch.randn(2, 0, 5)),
          lin0=torch.nn.Linear(0, 4), conv=torch.nn.Conv2d(3, 4, 3), lin=torch.nn.Linear(5, 6))


def test_index_select_and_gather_of_a_0d_tensor():
    # index_select gives 0-d whatever the index; gather gives the index's shape
    def f(self, x, i):
        return (torch.index_select(x, 0, i) * 2, torch.gather(x, 0, i.reshape(())) + 1,
                torch.gather(x, 0, i) - 1, torch.gather(x, 0, i.expand(3)))

    check(f, (scalar(5.0), torch.tensor([0])))
