"""The CUDA target without a GPU: target strings, the grid schedule's IR, and a transformer and a conv
net cross-compiled for sm_80 and sm_90 with every kernel through ptxas (0 spills, smem in limits)."""

import re
import subprocess
import sys

import pytest

from braze.errors import BrazeError, MissingDependencyError
from braze.target import CudaTarget, TargetError, parse_target

pytestmark = pytest.mark.usefixtures("module_cache")


def test_parse_target():
    assert parse_target(None) is None and parse_target("cpu") is None
    assert parse_target("cuda:sm_90") == CudaTarget("sm_90")
    assert parse_target("CUDA:SM_80").name == "cuda:sm_80"


@pytest.mark.parametrize("spec,words", [("cuda:sm_70", ["sm_70", "sm_75", "sm_90"]),
                                        ("gpu", ["unknown target", "cuda:sm_XX"])])
def test_bad_target_names_what_works(spec, words):
    with pytest.raises(TargetError) as e:
        parse_target(spec)
    for w in words:
        assert w in str(e.value)


def test_bad_target_is_a_usage_error_in_the_cli(tmp_path):
    r = subprocess.run([sys.executable, "-m", "braze", "compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o"),
                        "--target", "cuda:sm_70"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "sm_70" in r.stderr and "sm_90" in r.stderr


def _nvrtc():
    try:
        from braze.codegen.nvrtc import find_ptxas, nvrtc_version
        nvrtc_version()
    except MissingDependencyError as e:
        pytest.skip(f"NVRTC is not installed ({e}); pip install 'braze[cuda]'")
    return find_ptxas()


def test_grid_stage_ir_round_trips():
    from braze.ir.loop_parser import parse_kernel
    from braze.schedule.gpu import grid, grid_loops
    k = parse_kernel("kernel k(in x: f32[n, 8], out y: f32[n, 8]); syms n  [pointwise]\n"
                     "  for _i1 in 0..n:\n    for _i2 in 0..8:\n      y[_i1, _i2] = (x[_i1, _i2] * 2.0)\n")
    g = grid(k)
    assert [str(f.extent) for f in grid_loops(g)] == ["n", "8"]
    text = str(g)
    assert "grid for _i1 in 0..n" in text and "grid for _i2 in 0..8" in text
    assert str(parse_kernel(text)) == text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["gpt", "cnn"])
def test_models_cross_compile_within_limits(tiny_models, name, arch, tmp_path):
    import braze
    ptxas = _nvrtc()
    model, example, dyn = tiny_models[name]
    cm = braze.compile(model, example, dyn, target=f"cuda:{arch}")
    binary = cm._native.cuda_binary
    assert binary.cubin[:4] == b"\x7fELF" and binary.ptx.startswith(b"//") and b"\0" not in binary.ptx
    kernels = re.findall(r'extern "C" __global__ void (\w+)\(', cm._native.cuda_source)
    assert kernels and all(f".entry {k}(" in binary.ptx.decode() for k in kernels)
    if ptxas is None:
        pytest.skip("ptxas (the nvidia-cuda-nvcc wheel) is not installed: NVRTC's output was not checked")
    (tmp_path / "k.ptx").write_bytes(binary.ptx)
    r = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert spills and all(s == ("0", "0") for s in spills), r.stderr
    smem = [int(x) for x in re.findall(r"(\d+) bytes smem", r.stderr)]
    assert max(smem, default=0) <= 48 * 1024


def test_compiles_without_a_gpu_and_says_so_at_the_call(tiny_models, tmp_path):
    """Compiling needs no driver; the first call names the missing driver and the target."""
    _nvrtc()
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, torch, braze\nsys.path.insert(0, %r)\nfrom conftest import _tiny_models\n"
        "m, ex, dyn = _tiny_models()['gpt']\ncm = braze.compile(m, ex, dyn, target='cuda:sm_90')\n"
        "try:\n    cm(ex[0].numpy())\nexcept braze.BrazeError as e:\n    print('ERR', e)\n" % str(
            __import__("pathlib").Path(__file__).parent.parent))
    env = dict(__import__("os").environ, BRAZE_LIBCUDA=str(tmp_path / "no-libcuda.so.1"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ERR" in r.stdout and "cuda:sm_90" in r.stdout and "no-libcuda.so.1" in r.stdout, r.stdout


def test_target_option():
    import braze
    from braze.options import Options
    assert Options.from_env({}).target == "cpu"
    assert Options.from_env({"BRAZE_TARGET": "cuda:sm_90"}).target == "cuda:sm_90"
    with pytest.raises(TargetError):  # checked before the model is read
        braze.compile("not-a-model.onnx", target="cuda:sm_1")
