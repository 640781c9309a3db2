"""Issue 14's acceptance, as a new user would try it (slow: ``pytest -m slow tests/deploy``):
BERT-base and ResNet-50 exported to ONNX with dynamic dims, ``braze compile`` to an artifact,
the directory moved, the example C program run with an empty environment at 3 shapes against
PyTorch eager; and ``braze.load`` in a fresh virtualenv with braze and numpy but no torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from braze import zoo
from braze.testing import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_cache")]
REPO = Path(__file__).resolve().parents[2]
SHAPES = {
    "bert": [{"batch": 1, "seq": 8}, {"batch": 2, "seq": 13}, {"batch": 3, "seq": 33}],
    "resnet50": [{"batch": 1, "height": 64, "width": 64}, {"batch": 2, "height": 35, "width": 47},
                 {"batch": 1, "height": 96, "width": 80}],
}
RTOL = 1e-4  # float32, relative to the output's largest magnitude


def _eager(zm, inputs):
    import torch
    with torch.no_grad():
        out = zm.module(*inputs)
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


def _close(got, want, what):
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    assert err <= RTOL, f"{what}: relative error {err:.2e}"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    out = {}
    for name in SHAPES:
        zm = zoo.get(name)
        d = tmp_path_factory.mktemp(name)
        onnx_file = zoo.export_onnx(zm, d / f"{name}.onnx")
        dims = [f"--dim={k}={lo}:{hi}" for k, (lo, hi) in zm.dims.items()]
        r = run_cli("compile", onnx_file, "-o", d / "built", *dims)
        assert r.returncode == 0, r.stderr
        moved = d / "moved" / "artifact"
        shutil.move(str(d / "built"), str(moved))
        out[name] = (zm, moved)
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_c_program_with_an_empty_environment_matches_eager(artifacts, name, tmp_path):
    zm, art = artifacts[name]
    shutil.copy(REPO / "examples" / "c_app" / "app.c", tmp_path)
    shutil.copy(REPO / "examples" / "c_app" / "Makefile", tmp_path)
    r = subprocess.run(["make", "-C", str(tmp_path), f"ARTIFACT={art}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((art / "meta.json").read_text())
    for dims in SHAPES[name]:
        inputs = zm.make_inputs(**dims)
        for i, x in enumerate(inputs):
            x.numpy().tofile(tmp_path / f"in_{i}.bin")
        syms = [f"{s}={dims[s]}" for i in meta["inputs"] for s in i["ranges"]]
        r = subprocess.run([str(tmp_path / "app"), str(art), *sorted(set(syms)), "--in", str(tmp_path / "in_"),
                            "--out", str(tmp_path / "out_")], env={}, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        for k, want in enumerate(_eager(zm, inputs)):
            got = np.fromfile(tmp_path / f"out_{k}.bin", want.dtype).reshape(want.shape)
            _close(got, want, f"{name} {dims} output {k}")


def test_braze_load_in_a_fresh_virtualenv_without_torch(artifacts, tmp_path):
    """A new venv with numpy and braze alone (no torch, no onnx, no oneDNN wheels)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "numpy"], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        pytest.skip(f"pip cannot install numpy here: {r.stderr[-300:]}")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(REPO)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for name, (zm, art) in artifacts.items():
        dims = SHAPES[name][1]
        inputs = zm.make_inputs(**dims)
        for i, x in enumerate(inputs):
            np.save(tmp_path / f"{name}_in_{i}.npy", x.numpy())
        code = (
            "import sys, numpy as np, braze\n"
            "assert 'torch' not in sys.modules\n"
            f"m = braze.load({str(art)!r})\n"
            f"xs = [np.load({str(tmp_path)!r} + f'/{name}_in_{{i}}.npy') for i in range({len(inputs)})]\n"
            "out = m(*xs)\n"
            "out = out if isinstance(out, tuple) else (out,)\n"
            f"np.savez({str(tmp_path / (name + '_out.npz'))!r}, *out)\n")
        r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=600,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert r.returncode == 0, r.stderr[-3000:]
        r = subprocess.run([str(py), "-c", "import torch"], capture_output=True, text=True)
        assert r.returncode != 0  # really no torch there
        got = np.load(tmp_path / f"{name}_out.npz")
        for k, want in enumerate(_eager(zm, inputs)):
            _close(got[f"arr_{k}"], want, f"{name} {dims} output {k} (venv)")


def test_eight_threads_on_one_loaded_bert_at_mixed_shapes(artifacts):
    import braze
    from braze.testing import run_threads
    zm, art = artifacts["bert"]
    m = braze.load(art)
    assert [o.name for o in m.outputs] == ["layer_norm_24", "tanh"]  # the ONNX graph's output names
    cases = [tuple(x.numpy() for x in zm.make_inputs(**d)) for d in SHAPES["bert"]]
    alone = [m(*c) for c in cases]

    def work(t):
        for k in [(t + j) % len(cases) for j in range(len(cases))]:
            got = m(*cases[k])
            assert all(np.array_equal(a, b) for a, b in zip(got, alone[k]))
    assert run_threads(work, 8) == []
