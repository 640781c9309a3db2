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
    from braze.codegen.isa import host_isa
    assert parse_target(None) == parse_target("cpu") == host_isa()
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


def test_grid_spans_a_nest_that_scalar_lets_separate():
    """hoist's index arithmetic between the loops of a [b, s, s] mask moves back in: the grid spans all
    three loops (on the outer one alone, an H200 took 1.5 ms a call on BERT's mask, 2 threads busy)."""
    from braze.ir.loop import Let, Store
    from braze.ir.loop_parser import parse_kernel
    from braze.schedule.gpu import grid, grid_loops
    k = parse_kernel("kernel k(in m: i64[b, s], out y: bool[b, s, s]); syms b in [1, 64], s in [1, 512]  [pointwise]\n"
                     "  for _i1 in 0..b:\n    let t1: i64 = (idx(_i1) * idx(s))\n    for _i3 in 0..s:\n"
                     "      let t0: bool = (idx(_i3) >= 0)\n      for _i4 in 0..s:\n"
                     "        y[[_i1*s*s + _i3*s + _i4]] = (t0 & bool(m[[{(t1 + idx(_i4))}]]))\n")
    g = grid(k)
    loops = grid_loops(g)
    assert [(f.kind, str(f.extent)) for f in loops] == [("grid", "b"), ("grid", "s"), ("grid", "s")]
    assert [type(x) for x in loops[-1].body] == [Let, Let, Store]
    text = str(g)
    assert str(parse_kernel(text)) == text
    # a load moves in too, unless the kernel writes its buffer (a later iteration would read another value)
    nest = ("  for _i1 in 0..n:\n    let t1: f32 = {src}[[8*_i1]]\n    for _i2 in 0..8:\n"
            "      y[[8*_i1 + _i2]] = (x[[8*_i1 + _i2]] + t1)\n")
    head = "kernel k(in x: f32[n, 8], out y: f32[n, 8]); syms n  [pointwise]\n"
    assert len(grid_loops(grid(parse_kernel(head + nest.format(src="x"))))) == 2
    assert len(grid_loops(grid(parse_kernel(head + nest.format(src="y"))))) == 1
    # a row's reduction is no scalar Let: it stays at the row's level, once per block
    k = parse_kernel("kernel k(in x: f32[n, 64], out y: f32[n, 64]); syms n  [stitch]\n  for _i1 in 0..n:\n"
                     "    let r1: f32 = sum(_r4 < 64: x[[64*_i1 + _r4]])\n    for _i2 in 0..64:\n"
                     "      y[[64*_i1 + _i2]] = (x[[64*_i1 + _i2]] - (r1 / 64.0))\n")
    loops = grid_loops(grid(k))
    assert [f.kind for f in loops] == ["block"] and isinstance(loops[0].body[0], Let)
    assert loops[0].body[1].kind == "thread"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["gpt", "cnn"])
def test_models_cross_compile_within_limits(tiny_models, name, arch, tmp_path):
    import braze
    model, example, dyn = tiny_models[name]
    _check_binary(braze.compile(model, example, dyn, target=f"cuda:{arch}"), arch, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "resnet50"])
def test_zoo_models_cross_compile_within_limits(name, arch, tmp_path):
    import braze
    from braze import zoo
    _check_binary(braze.compile(zoo.export(zoo.get(name)), target=f"cuda:{arch}"), arch, tmp_path)


def _check_binary(cm, arch, tmp_path):
    """Every kernel is in the PTX; ptxas -v: 0 spill bytes, static shared memory within 48 KiB."""
    ptxas = _nvrtc()
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


def test_artifact_cross_compiled_through_the_cli(tiny_models, tmp_path):
    """`braze compile x.onnx -o DIR --target cuda:sm_90` on a GPU-less machine: the library holds the
    kernels; kernels.cubin (sm_90 ELF) and kernels.ptx (no NUL) lie beside it; meta.json says the target."""
    import json

    import torch
    _nvrtc()
    model, example, dyn = tiny_models["cnn"]
    onnx_path = tmp_path / "cnn.onnx"
    from braze.frontend.quiet import quiet_exporters
    with torch.no_grad(), quiet_exporters():
        torch.onnx.export(model, example, str(onnx_path), dynamo=True, dynamic_shapes=dyn, input_names=["x"],
                          opset_version=18, external_data=False, verbose=False)
    out = tmp_path / "art"
    r = subprocess.run([sys.executable, "-m", "braze", "compile", str(onnx_path), "-o", str(out),
                        "--target", "cuda:sm_90"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["target"] == "cuda:sm_90" and meta["cuda"]["arch"] == "sm_90" and meta["isa"]["name"] == "scalar"
    cubin, ptx = (out / "kernels.cubin").read_bytes(), (out / "kernels.ptx").read_bytes()
    assert cubin[:4] == b"\x7fELF" and b".target sm_90" in ptx and b"\0" not in ptx
    assert {"kernels.cubin", "kernels.ptx"} <= set(meta["files"])
    r = subprocess.run([sys.executable, "-m", "braze", "inspect", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "target cuda:sm_90" in r.stdout, r.stdout + r.stderr


def test_dump_resumes_from_every_gpu_stage(tiny_models, tmp_path, monkeypatch):
    """BRAZE_DUMP of a CUDA compile: its loop stages are the GPU's, model.cu is the kernels, and a
    resume from any kernel stage gives the same host C and .cu."""
    import braze
    from braze.options import Options
    from braze.pipeline import resume_c
    from braze.target import CudaTarget
    _nvrtc()
    model, example, dyn = tiny_models["gpt"]
    dump = tmp_path / "dump"
    cm = braze.compile(model, example, dyn, target="cuda:sm_90", options=Options(dump_dir=str(dump)))
    assert (dump / "model.cu").read_text() == cm._native.cuda_source
    stages = sorted(dump.glob("*.loop"))
    assert [p.stem.split("_", 1)[1] for p in stages] == ["lower", "flatten", "collapse", "materialize", "hoist",
                                                         "widen", "grid"]
    text = stages[-1].read_text()
    assert "block for" in text and "thread for" in text and "grid for" in text
    for p in stages:
        native, _ = resume_c(p, CudaTarget("sm_90"), options=Options())
        assert native.cuda_source == cm._native.cuda_source and native.source == cm._native.source, p.name


def test_missing_nvrtc_says_what_to_install(monkeypatch):
    from braze.codegen import nvrtc
    monkeypatch.setattr(nvrtc, "_lib_dirs", lambda: [])
    nvrtc._nvrtc.cache_clear()
    try:
        with pytest.raises(MissingDependencyError) as e:
            nvrtc.compile_cuda("extern \"C\" __global__ void k() {}", "sm_90")
        assert "braze[cuda]" in str(e.value) and "NVRTC" in str(e.value)
        assert parse_target("cuda:sm_90") == CudaTarget("sm_90")  # the archs NVRTC 13.0 knows, without it
    finally:
        nvrtc._nvrtc.cache_clear()


def test_a_scatter_add_is_refused_for_cuda_by_name():
    """braze_scatter.h runs on the CPU: a CUDA compile with an index_add says so, not a crash at
    the call."""
    import braze
    from braze.errors import UnsupportedOpError
    from braze.ops import Builder, tensor
    b = Builder()
    n = b.sym("N")
    b.ret(b.index_add(b.param("x", tensor("f32", 5, 3)), b.param("i", tensor("i64", n)),
                      b.param("s", tensor("f32", n, 3))))
    with pytest.raises(UnsupportedOpError, match="CUDA target has no index_add"):
        braze.compile(b.module, target="cuda:sm_90")


def test_a_long_topk_row_is_refused_for_cuda_by_name_and_a_short_one_compiles():
    """A topk row that may be longer than 64 runs braze_select.h on the CPU (passes/decompose.py);
    a shorter one is compares and sums, which the GPU schedule takes."""
    import braze
    from braze.errors import UnsupportedOpError
    from braze.ops import Builder, tensor
    for n, refused in ((1000, True), (64, False)):
        b = Builder()
        b.ret(*b.topk(b.param("x", tensor("f32", b.sym("b", 1, 8), n)), k=5))
        if refused:
            with pytest.raises(UnsupportedOpError, match="CUDA target has no topk"):
                braze.compile(b.module, target="cuda:sm_90")
        else:
            braze.compile(b.module, target="cuda:sm_90")
