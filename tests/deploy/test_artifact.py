"""Artifacts (braze/deploy): CompiledModel.save, braze.load with numpy alone, the C API from a
C program with an empty environment, and a clear refusal of every damaged artifact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.codegen.isa import host_isa
from braze.deploy.artifact import helper_name
from braze.errors import BrazeError, InputError
from braze.ops import Builder, tensor

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "c_app"
pytestmark = pytest.mark.usefixtures("module_cache")


def _mlp_block(seed=0):
    """linear (oneDNN, or the small-M kernel), GELU, a residual add and a log_softmax: rows n."""
    rng = np.random.default_rng(seed)
    b = Builder()
    n = b.sym("n", 1, 64)
    x = b.param("x", tensor("f32", n, 24))
    w = b.constant(rng.standard_normal((24, 24)).astype(np.float32) * 0.3, "w")
    bias = b.constant(rng.standard_normal(24).astype(np.float32), "bias")
    h = b.gelu(b.op("linear", [x, w, bias]))
    b.ret(b.log_softmax(b.add(h, x), axis=-1))
    return b.module


def _no_library():
    """No GEMM: the artifact needs no oneDNN."""
    b = Builder()
    n = b.sym("n", 1, 100)
    x = b.param("x", tensor("f32", n, 5))
    b.ret(b.tanh(b.mul(x, b.constant(np.linspace(-2, 2, 5).astype(np.float32), "scale"))))
    return b.module


def _inputs(cm_inputs, **dims):
    """The example app's inputs: input i, element j = sin(i + j / 1000)."""
    out = []
    for i, spec in enumerate(cm_inputs):
        shape = [d if isinstance(d, int) else dims[d] for d in spec["shape"]]  # meta.json's form
        out.append(np.sin(i + np.arange(int(np.prod(shape))) / 1000.0).astype(np.float32).reshape(shape))
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cm = braze.compile(_mlp_block())
    path = tmp_path_factory.mktemp("art") / "mlp_block"
    cm.save(path)
    return cm, path


def _copy(path: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(path, dst)
    return dst


def test_saved_files_and_meta(saved):
    cm, path = saved
    names = sorted(p.name for p in path.iterdir())
    helper = helper_name(host_isa())
    assert names == sorted(["braze_abi.h", "braze_model.h", helper, "libbraze_model.so", "libdnnl.so.3",
                            "meta.json", "module.braze", "tune.jsonl", "weights.safetensors"])
    meta = json.loads((path / "meta.json").read_text())
    assert meta["abi_version"] == 1 and meta["braze_version"] == braze.__version__
    assert meta["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["n", 24], "ranges": {"n": [1, 64]}}]
    assert meta["symbols"] == {"n": {"min": 1, "max": 64}}
    assert set(meta["files"]) == set(names) - {"meta.json"}
    assert "avx2" in meta["isa"]["features"] or meta["isa"]["name"] != "avx512"
    # no pickle anywhere: the weights are safetensors, readable without braze
    from safetensors.numpy import load_file
    w = load_file(str(path / "weights.safetensors"))
    assert sorted(w) == [f"c{i}" for i in range(len(meta["constants"]))]


def test_load_matches_the_compiled_model_after_a_move(saved, tmp_path):
    cm, path = saved
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(path, moved)
    m = braze.load(moved)
    for rows in (1, 7, 64):
        x = np.random.default_rng(rows).standard_normal((rows, 24)).astype(np.float32)
        np.testing.assert_array_equal(m(x), cm(x))
    with pytest.raises(InputError, match="n"):
        m(np.zeros((65, 24), np.float32))  # out of the symbol's range
    x = np.ones((3, 24), np.float32)
    np.testing.assert_array_equal(m(x), cm(x))  # still works after the refusal


def test_model_without_a_library(tmp_path):
    cm = braze.compile(_no_library())
    cm.save(tmp_path / "a")
    assert not (tmp_path / "a" / "libdnnl.so.3").exists()
    x = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    np.testing.assert_array_equal(braze.load(tmp_path / "a")(x), cm(x))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_a_16_bit_model_saves_its_weights_in_16_bits_and_loads(dt, tmp_path):
    """bfloat16 / float16 constants are stored as BF16 / F16 safetensors (half of float32's
    bytes), and the loaded model gives the compiled one's bits."""
    import ml_dtypes
    np16 = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[dt]
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("n", 1, 100)
    x = b.param("x", tensor(dt, n, 64))
    w = b.constant(rng.standard_normal(64).astype(np16), "w")
    b.ret(b.mul(b.layer_norm(x, axis=-1, eps=1e-5), w))
    cm = braze.compile(b.module)
    cm.save(tmp_path / "a")
    raw = (tmp_path / "a" / "weights.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {dt.upper()}
    xs = rng.standard_normal((7, 64)).astype(np16)
    got, want = braze.load(tmp_path / "a")(xs), cm(xs)
    assert got.dtype == want.dtype == np.dtype(np16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_load_needs_neither_torch_onnx_nor_a_compiler(saved, tmp_path):
    """A fresh interpreter where importing torch or onnx fails and no C compiler is on PATH."""
    cm, path = saved
    x = np.random.default_rng(3).standard_normal((5, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None; sys.modules["onnx"] = None
        import numpy as np, braze
        m = braze.load({str(path)!r})
        np.save({str(tmp_path / 'y.npy')!r}, m(np.load({str(tmp_path / 'x.npy')!r})))
        bad = [k for k in sys.modules if k.startswith(("braze.frontend", "braze.passes", "braze.codegen.host"))]
        assert not bad, bad
    """)
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path), "BRAZE_CACHE_DIR": str(tmp_path / "no-cache")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), cm(x))
    assert not (tmp_path / "no-cache").exists()


_BLOCK_ALL_BUT_NUMPY = """
import sys


class _OnlyNumpy:
    \"\"\"Refuses every package outside the standard library, numpy and braze.\"\"\"

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in ("numpy", "braze") or top.startswith("_"):
            return None
        raise ImportError(f"{name}: blocked, braze.load must need numpy alone")


sys.meta_path.insert(0, _OnlyNumpy())
"""


def test_load_in_a_virtualenv_where_only_numpy_imports(saved, tmp_path):
    """A virtualenv over this environment's packages (no network needed) whose sitecustomize
    refuses every package but numpy and braze: no torch, onnx, oneDNN wheels, safetensors or
    ml_dtypes, no compiler on PATH. braze.load runs the artifact there."""
    cm, path = saved
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "sitecustomize.py").write_text(_BLOCK_ALL_BUT_NUMPY)
    x = np.random.default_rng(4).standard_normal((6, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = textwrap.dedent(f"""
        import sys
        before = set(sys.modules)  # what the environment's .pth files imported at start-up
        import numpy as np
        for blocked in ("torch", "onnx", "safetensors", "ml_dtypes"):
            try:
                __import__(blocked)
            except ImportError:
                pass
            else:
                raise SystemExit(f"{{blocked}} imported: the blocker is not active")
        import braze
        m = braze.load({str(path)!r})
        np.save({str(tmp_path / 'y.npy')!r}, m(np.load({str(tmp_path / 'x.npy')!r})))
        added = {{k.partition(".")[0] for k in set(sys.modules) - before}}
        other = sorted(added - set(sys.stdlib_module_names) - {{"numpy", "braze"}})
        assert all(k.startswith("_") for k in other), other
    """)
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1",
           "BRAZE_CACHE_DIR": str(tmp_path / "no-cache")}
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), cm(x))
    assert not (tmp_path / "no-cache").exists()


def _flip(f: Path, at: int | None = None) -> None:
    data = bytearray(f.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x01
    f.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def app(saved, tmp_path_factory):
    """The example C program, built against the artifact with its Makefile."""
    cm, path = saved
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make and cc are needed to build the example")
    build = tmp_path_factory.mktemp("app")
    shutil.copy(EXAMPLE / "app.c", build)
    shutil.copy(EXAMPLE / "Makefile", build)
    r = subprocess.run(["make", "-C", str(build), f"ARTIFACT={path}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return build / "app"


def _run_app(app, artifact, *args, out=None):
    cmd = [str(app), str(artifact), *args] + (["--out", str(out)] if out else [])
    return subprocess.run(cmd, env={}, capture_output=True, text=True, timeout=120)


def test_c_program_with_an_empty_environment_after_a_move(saved, app, tmp_path):
    cm, path = saved
    moved = _copy(path, tmp_path)  # the binary's rpath names the original; the artifact dir is an argument
    meta = json.loads((path / "meta.json").read_text())
    for rows in (1, 5, 33):
        r = _run_app(app, moved, f"n={rows}", out=tmp_path / f"r{rows}_")
        assert r.returncode == 0, r.stderr
        assert f"input 0 x f32 [{rows}, 24]" in r.stdout
        got = np.fromfile(tmp_path / f"r{rows}_0.bin", np.float32).reshape(rows, 24)
        (x,) = _inputs(meta["inputs"], n=rows)
        np.testing.assert_allclose(got, cm(x), rtol=1e-6, atol=1e-6)


def test_c_program_reports_a_bad_shape_and_keeps_working(saved, tmp_path):
    """Through the C API: a wrong input shape returns an error code and message, and the next
    call with a good shape succeeds (a small C program of its own)."""
    cm, path = saved
    src = tmp_path / "bad.c"
    src.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include "braze_model.h"
        int main(int argc, char **argv) {
            char err[512];
            braze_model *m = braze_model_load(argv[1], err, sizeof err);
            if (!m) { printf("load: %s\\n", err); return 1; }
            float x[3 * 25] = {0};
            int64_t bad[2] = {3, 25}, good[2] = {3, 24};
            braze_tensor in = {x, BRAZE_FLOAT32, 2, bad}, out;
            int rc = braze_model_run(m, &in, 1, &out, 1, err, sizeof err);
            printf("bad rc=%d msg=%s\\n", rc, err);
            in.shape = good;
            rc = braze_model_run(m, &in, 1, &out, 1, err, sizeof err);
            printf("good rc=%d shape=%lld,%lld\\n", rc, (long long)out.shape[0], (long long)out.shape[1]);
            braze_tensor_release(&out);
            printf("wrong count rc=%d\\n", braze_model_run(m, &in, 2, &out, 1, err, sizeof err));
            braze_model_free(m);
            return 0;
        }
    """))
    exe = tmp_path / "bad"
    subprocess.run(["cc", str(src), "-I", str(path), str(path / "libbraze_model.so"), f"-Wl,-rpath,{path}",
                    "-o", str(exe)], check=True, timeout=120)
    r = subprocess.run([str(exe), str(path)], env={}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.startswith("bad rc=3 ") and "25" in out and "declared f32[n, 24]" in out, out
    assert "\ngood rc=0 shape=3,24\n" in out and "\nwrong count rc=1" in out, out


@pytest.mark.parametrize("victim", ["weights.safetensors", "libbraze_dnnl.so", "braze_model.h"])
def test_a_flipped_byte_is_refused_by_python_and_c(saved, app, tmp_path, victim):
    cm, path = saved
    bad = _copy(path, tmp_path)
    if victim == "libbraze_dnnl.so":
        victim = helper_name(host_isa())
    _flip(bad / victim)
    with pytest.raises(BrazeError, match=f"{victim}: its SHA-256 does not match"):
        braze.load(bad)
    if not victim.startswith("libbraze_dnnl"):  # a damaged library may not even load into the C program
        r = _run_app(app, bad, "n=2")
        assert r.returncode == 1 and f"{victim}: its SHA-256 does not match" in r.stderr, r.stderr


def test_a_damaged_model_library_is_refused_before_loading(saved, tmp_path):
    cm, path = saved
    bad = _copy(path, tmp_path)
    _flip(bad / "libbraze_model.so", at=100)
    with pytest.raises(BrazeError, match="libbraze_model.so: its SHA-256 does not match"):
        braze.load(bad)


@pytest.mark.parametrize("victim", ["weights.safetensors", "meta.json", "libdnnl.so.3"])
def test_a_missing_file_is_named(saved, app, tmp_path, victim):
    cm, path = saved
    bad = _copy(path, tmp_path)
    (bad / victim).unlink()
    with pytest.raises(BrazeError, match=f"{victim}: the file is missing"):
        braze.load(bad)
    if victim != "libdnnl.so.3":  # the dynamic loader itself refuses that one
        r = _run_app(app, bad, "n=2")
        assert r.returncode == 1 and victim in r.stderr and "missing" in r.stderr, r.stderr


def test_an_abi_mismatch_is_refused(saved, app, tmp_path):
    cm, path = saved
    bad = _copy(path, tmp_path)
    meta = json.loads((bad / "meta.json").read_text())
    meta["abi_version"] = 99
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BrazeError, match="ABI version 99"):
        braze.load(bad)
    r = _run_app(app, bad, "n=2")
    assert r.returncode == 1 and "ABI version 99" in r.stderr, r.stderr


def test_a_cpu_without_the_isa_is_refused_at_load(tmp_path, monkeypatch):
    """An artifact that asks for a feature this CPU lacks fails in braze_model_load, before
    any instruction of that ISA runs (no SIGILL)."""
    import dataclasses

    from braze.codegen import isa as isa_mod
    real = isa_mod.host_isa()
    lacking = next((f for f in ("avx512_4fmaps", "avx512_vp2intersect") if f not in real.host_features), None)
    if lacking is None:
        pytest.skip("this CPU has every feature the test could ask for")
    fake = dataclasses.replace(real, features=frozenset(real.features | {lacking}))
    cm = braze.compile(_no_library())
    monkeypatch.setattr(isa_mod, "isa_at", lambda *a, **k: fake)
    cm.save(tmp_path / "a")
    monkeypatch.undo()
    with pytest.raises(BrazeError, match=f"this CPU lacks {lacking}"):
        braze.load(tmp_path / "a")


def test_threads_calling_one_loaded_model_at_mixed_shapes(saved):
    from braze.testing import run_threads
    cm, path = saved
    m = braze.load(path)
    xs = {r: np.random.default_rng(r).standard_normal((r, 24)).astype(np.float32) for r in (1, 3, 16, 49, 64)}
    want = {r: m(x) for r, x in xs.items()}

    def work(t):
        for r in list(xs)[t % 5:] + list(xs)[:t % 5]:
            assert np.array_equal(m(xs[r]), want[r])
    assert run_threads(work, 8) == []


def test_save_refuses_a_non_empty_directory_that_is_not_an_artifact(tmp_path):
    cm = braze.compile(_no_library())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    with pytest.raises(BrazeError, match="not empty"):
        cm.save(tmp_path / "d")
    cm.save(tmp_path / "e")
    cm.save(tmp_path / "e")  # an existing artifact is replaced


def test_load_of_a_directory_that_is_not_an_artifact(tmp_path):
    with pytest.raises(BrazeError, match="no such directory"):
        braze.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BrazeError, match="meta.json: the file is missing"):
        braze.load(tmp_path / "empty")


def test_example_readme_builds_from_its_makefile():
    assert (EXAMPLE / "Makefile").exists() and "libbraze_model.so" in (EXAMPLE / "Makefile").read_text()
    assert os.access(EXAMPLE / "app.c", os.R_OK)


class _DLPackOnly:
    """A producer that offers only the DLPack protocol (as JAX or TensorFlow arrays do)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_inputs_from_any_dlpack_producer_zero_copy(saved):
    from braze.runtime.loader import as_host_array
    cm, path = saved
    x = np.random.default_rng(5).standard_normal((4, 24)).astype(np.float32)
    view = as_host_array(_DLPackOnly(x))
    assert np.shares_memory(view, x)  # no copy on the way in
    m = braze.load(path)
    np.testing.assert_array_equal(m(_DLPackOnly(x)), cm(x))
    np.testing.assert_array_equal(cm(_DLPackOnly(x)), cm(x))


def test_c_api_from_eight_threads_at_mixed_shapes(saved, tmp_path):
    """pthreads calling braze_model_run on one loaded model at once: every result has the bits
    of the same call made alone."""
    cm, path = saved
    src = tmp_path / "threads.c"
    src.write_text(textwrap.dedent("""
        #include <pthread.h>
        #include <stdio.h>
        #include <string.h>
        #include "braze_model.h"
        static braze_model *m;
        static float x[64 * 24], ref[5][64 * 24];
        static const int64_t rows[5] = {1, 3, 17, 48, 64};
        static int bad = 0;
        static void *work(void *arg) {
            long t = (long)arg;
            for (int i = 0; i < 40; i++) {
                int k = (int)((t + i) % 5);
                char err[256];
                int64_t shape[2] = {rows[k], 24};
                braze_tensor in = {x, BRAZE_FLOAT32, 2, shape}, out;
                if (braze_model_run(m, &in, 1, &out, 1, err, sizeof err) != BRAZE_OK ||
                    memcmp(ref[k], out.data, sizeof(float) * rows[k] * 24) != 0)
                    __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
                braze_tensor_release(&out);
            }
            return NULL;
        }
        int main(int argc, char **argv) {
            char err[256];
            m = braze_model_load(argv[1], err, sizeof err);
            if (!m) { puts(err); return 1; }
            for (int i = 0; i < 64 * 24; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
            for (int k = 0; k < 5; k++) {
                char e2[256];
                int64_t shape[2] = {rows[k], 24};
                braze_tensor in = {x, BRAZE_FLOAT32, 2, shape}, out;
                if (braze_model_run(m, &in, 1, &out, 1, e2, sizeof e2) != BRAZE_OK) { puts(e2); return 1; }
                memcpy(ref[k], out.data, sizeof(float) * rows[k] * 24);
                braze_tensor_release(&out);
            }
            pthread_t th[8];
            for (long t = 0; t < 8; t++) pthread_create(&th[t], NULL, work, (void *)t);
            for (int t = 0; t < 8; t++) pthread_join(th[t], NULL);
            printf("mismatches %d\\n", bad);
            braze_model_free(m);
            return bad != 0;
        }
    """))
    exe = tmp_path / "threads"
    subprocess.run(["cc", str(src), "-I", str(path), str(path / "libbraze_model.so"), f"-Wl,-rpath,{path}",
                    "-lpthread", "-o", str(exe)], check=True, timeout=120)
    r = subprocess.run([str(exe), str(path)], env={}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "mismatches 0" in r.stdout, r.stdout + r.stderr


def test_model_without_constants(tmp_path):
    b = Builder()
    n = b.sym("n", 1, 8)
    b.ret(b.relu(b.param("x", tensor("f32", n, 4))))
    braze.compile(b.module).save(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["constants"] == []
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(braze.load(tmp_path / "a")(x), np.maximum(x, 0))
