"""torch.compile(backend="braze") by device: a graph on cuda:0 compiles for this machine's GPU, a graph
on any other device runs in PyTorch with one warning, never on a wrong device or a crash.

Without a GPU, the CUDA path runs end to end under the fake driver (tests/codegen/cuda_emu_build.py):
BRAZE_TARGET=cuda:sm_90 sends a CPU graph's regions to the CUDA target, their kernels emulated on the
CPU, their inputs copied to the "GPU" and their outputs back, as a CUDA tensor's would not be."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from braze.testing import rel_error

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CODEGEN_TESTS = HERE.parent / "codegen"


def test_other_device_graph_runs_in_torch_with_one_warning():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU()).to("meta")
    f = torch.compile(m, backend="braze")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = f(torch.randn(2, 4, device="meta"))
        f(torch.randn(2, 4, device="meta"))
    assert y.device.type == "meta" and tuple(y.shape) == (2, 3)
    msgs = [str(x.message) for x in w if "braze" in str(x.message)]
    assert len(msgs) == 1 and "on meta" in msgs[0] and "NVIDIA GPUs" in msgs[0], msgs


def _on(*devices):
    return [SimpleNamespace(device=torch.device(d)) for d in devices]


def test_device_options():
    from braze import Options
    from braze.errors import BrazeError
    from braze.plugin.dynamo import device_options
    cpu = Options()
    assert device_options(_on("cpu", "cpu"), cpu) is cpu
    assert device_options([None, *_on("cpu")], cpu) is cpu
    gpu = cpu.replace(target="cuda:sm_80")
    assert device_options(_on("cuda:0", "cpu"), gpu) is gpu  # an arch the options name is kept
    with pytest.raises(BrazeError, match=r"(?s)on cuda:1; braze runs on cuda:0.*CUDA_VISIBLE_DEVICES"):
        device_options(_on("cuda:1"), cpu)
    with pytest.raises(BrazeError, match="cuda:0, cuda:1; braze compiles a graph for one device"):
        device_options(_on("cuda:0", "cuda:1"), cpu)


def test_cuda_graph_compiles_for_the_local_gpu(tmp_path, monkeypatch):
    """A graph on cuda:0 gets target 'cuda', the local GPU's arch (here the fake driver's sm_86); without
    a driver, that is an error naming it, so PyTorch runs the graph."""
    from braze import Options
    from braze.errors import BrazeError
    from braze.plugin.dynamo import device_options
    if shutil.which("g++") is None:
        pytest.skip("g++ builds the fake CUDA driver")
    sys.path.insert(0, str(CODEGEN_TESTS))
    from cuda_emu_build import build_fake_driver
    monkeypatch.setenv("BRAZE_LIBCUDA", str(build_fake_driver(tmp_path)))
    monkeypatch.setenv("FAKE_CUDA_CC", "86")
    assert device_options(_on("cuda:0"), Options()).target == "cuda:sm_86"
    monkeypatch.setenv("BRAZE_LIBCUDA", str(tmp_path / "no_such_libcuda.so.1"))
    with pytest.raises(BrazeError, match="no_such_libcuda"):
        device_options(_on("cuda"), Options())


# ------------------------------------------------------------------------ the CUDA path, end to end --
class Block(torch.nn.Module):
    """Attention and an MLP: GEMMs, batched matmuls, a softmax's and layer norms' row reductions."""

    def __init__(self, c=32, heads=2):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(c, 2 * c), torch.nn.GELU(), torch.nn.Linear(2 * c, c))

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(self.ln1(x)).chunk(3, -1))
        att = torch.softmax((q @ k.transpose(-1, -2)) * (c // self.heads) ** -0.5, -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, c))
        return x + self.mlp(self.ln2(x))


SHAPES = [(1, 1), (2, 7), (3, 16), (1, 33)]


def _emulate_each_compile(kernels_dir: str) -> list:
    """braze.compile, wrapped: each region's kernels are compiled for emulation as it compiles, before
    its first call loads them; returns the list the compiled targets are appended to."""
    import braze.compiler
    from cuda_emu_build import add_emulated
    real_compile, targets = braze.compiler.compile, []

    def compile_and_emulate(*args, **kwargs):
        cm = real_compile(*args, **kwargs)
        targets.append(cm._native.isa)
        add_emulated(cm, kernels_dir)
        return cm
    braze.compiler.compile = compile_and_emulate
    return targets


def _child(kernels_dir: str) -> None:
    """In a child process (the fake driver stays loaded): torch.compile at every shape of SHAPES, then
    a weight changed through .data, then a second instance of the model. Prints RESULT json."""
    targets = _emulate_each_compile(kernels_dir)
    torch.manual_seed(0)
    m = Block().eval()
    f = torch.compile(m, backend="braze", dynamic=True)
    errs, devices = [], set()
    with torch.no_grad():
        for b, s in SHAPES:
            x = torch.randn(b, s, 32)
            y, ref = f(x), m(x)
            devices.add(str(y.device))
            errs.append(rel_error(y, ref))
        m.mlp[2].weight.data.mul_(-1.5)  # a weight changed in place: read at the next call
        x = torch.randn(2, 5, 32)
        changed = rel_error(f(x), m(x))
        other = Block().eval()  # a second instance, its own weights: the same library, called with them
        g = torch.compile(other, backend="braze", dynamic=True)
        second = rel_error(g(x), other(x))
        first_again = rel_error(f(x), m(x))
    print("RESULT " + json.dumps({"errs": errs, "changed": changed, "second": second, "first_again": first_again,
                                  "targets": targets, "devices": sorted(devices)}))


class ConvBN(torch.nn.Module):
    """Convolutions each with a batch norm, a residual: on live weights, each batch norm's scale and
    shift is its convolution's epilogue (braze_conv2d_ws; bz_scale_epilogue on the GPU)."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(6, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 6, 1, bias=False), torch.nn.BatchNorm2d(6)

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)


def _child_conv_bn(kernels_dir: str) -> None:
    """ConvBN at two shapes, then its running statistics changed through .data. Prints RESULT json."""
    targets = _emulate_each_compile(kernels_dir)
    torch.manual_seed(0)
    m = ConvBN().eval()
    with torch.no_grad():
        for bn in (m.b1, m.b2):
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        f = torch.compile(m, backend="braze", dynamic=True)
        errs = [rel_error(f(x), m(x)) for x in (torch.randn(1, 6, 5, 7), torch.randn(2, 6, 4, 3))]
        m.b1.running_var.data.mul_(3.0)
        x = torch.randn(2, 6, 4, 3)
        errs.append(rel_error(f(x), m(x)))
    print("RESULT " + json.dumps({"errs": errs, "targets": targets}))


def _child_training(kernels_dir: str) -> None:
    """A training step's gradients at two shapes: the forward and backward graphs compile for the GPU."""
    import copy
    targets = _emulate_each_compile(kernels_dir)
    torch.manual_seed(0)
    eager = Block().train()
    model = copy.deepcopy(eager)
    step = torch.compile(lambda mod, x: mod(x).square().mean(), backend="braze", dynamic=True)
    grad_errs = []
    for b, s in ((2, 3), (3, 9)):
        x = torch.randn(b, s, 32)
        eager(x).square().mean().backward()
        step(model, x).backward()
        grad_errs.append(max(rel_error(p.grad, q.grad) for p, q in zip(model.parameters(), eager.parameters())))
        for mod in (eager, model):
            mod.zero_grad()
    print("RESULT " + json.dumps({"targets": targets, "grad_errs": grad_errs}))


def _run_child(fn: str, tmp_path) -> tuple[dict, str]:
    if shutil.which("g++") is None:
        pytest.skip("g++ is needed to emulate the CUDA kernels")
    sys.path.insert(0, str(CODEGEN_TESTS))
    from cuda_emu_build import build_fake_cublas, build_fake_driver, require_emulation
    require_emulation()
    kernels = tmp_path / "kernels"
    env = {**os.environ, "BRAZE_TARGET": "cuda:sm_90", "BRAZE_LIBCUDA": str(build_fake_driver(tmp_path)),
           "BRAZE_LIBCUBLAS": str(build_fake_cublas(tmp_path)), "BRAZE_EMU_KERNELS": str(kernels)}
    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}, {str(CODEGEN_TESTS)!r}]\n"
            f"import test_device as t\nt.{fn}({str(kernels)!r})\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(REPO), capture_output=True, text=True,
                       timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"child failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    res = json.loads(lines[-1][len("RESULT "):])
    assert res["targets"] and set(res["targets"]) == {"cuda:sm_90"}, res
    assert "braze: " not in r.stderr, r.stderr[-3000:]  # no region fell back to PyTorch
    return res, r.stderr


def test_cuda_plugin_matches_eager(tmp_path):
    res, _ = _run_child("_child", tmp_path)
    assert res["devices"] == ["cpu"], res  # CPU tensors in: copied to the GPU and back
    assert all(e <= 1e-5 for e in res["errs"]), res
    assert res["changed"] <= 1e-5, res
    assert res["second"] <= 1e-5 and res["first_again"] <= 1e-5, res


def test_cuda_plugin_batch_norms_on_live_weights(tmp_path):
    res, _ = _run_child("_child_conv_bn", tmp_path)
    assert len(res["errs"]) == 3 and all(e <= 1e-5 for e in res["errs"]), res


@pytest.mark.slow  # its forward and backward libraries, built and emulated: 27 s alone on 2 cores
def test_cuda_plugin_trains_as_eager(tmp_path):
    res, _ = _run_child("_child_training", tmp_path)
    assert len(res["grad_errs"]) == 2 and all(e <= 1e-4 for e in res["grad_errs"]), res
