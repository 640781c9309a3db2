"""The oneDNN helper is built once per cache into its own library (``libbraze_dnnl.so``) and every
model that calls oneDNN links it: one file, one instance per process, found again by a new
process, rebuilt when it was deleted from the cache."""

from __future__ import annotations

import ctypes as C
import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.extern import onednn
from braze.ops import Builder, tensor
from braze.options import Options
from braze.testing import run_threads

pytestmark = pytest.mark.builds_helper  # its subject: the helper built once per cache, and its counters

if not onednn.available():
    pytest.skip(f"oneDNN is not installed ({onednn.PIP_INSTALL})", allow_module_level=True)


def _weights(seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal(32).astype(np.float32)


def _model(seed: int, softmax: bool):
    """relu(x @ W.T + b), then a softmax in one of the two: two libraries whose GEMM calls
    differ only in the weight (the same primitive key but for the weight's owner)."""
    w, bias = _weights(seed)
    b = Builder()
    n = b.sym("n", 1, 256)
    x = b.param("x", tensor("f32", n, 16))
    y = b.relu(b.op("linear", [x, b.constant(w, "w"), b.constant(bias, "b")]))
    b.ret(b.softmax(y, axis=-1) if softmax else y)
    return b.module


def _want(seed: int, softmax: bool, x):
    w, bias = _weights(seed)
    y = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + bias, 0)
    if softmax:
        e = np.exp(y - y.max(-1, keepdims=True))
        y = e / e.sum(-1, keepdims=True)
    return y


def _check(m, seed, softmax, rows):
    x = np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)
    np.testing.assert_allclose(m(x), _want(seed, softmax, x), rtol=1e-4, atol=1e-5)


def _meta(lib_path: Path) -> dict:
    return json.loads((lib_path.parent / "meta.json").read_text())


def _helpers(cache: Path) -> list[Path]:
    return sorted(cache.rglob(onednn.HELPER_FILE))


def test_two_models_share_one_helper_file_and_instance(tmp_path, caplog):
    import logging
    caplog.set_level(logging.INFO, logger="braze")
    cache = tmp_path / "cache"
    opts = Options(cache_dir=str(cache))
    h0, s0 = onednn.helper_stats(), braze.stats()
    a = braze.compile(_model(1, False), options=opts)
    b = braze.compile(_model(2, True), options=opts)
    h1, s1 = onednn.helper_stats(), braze.stats()
    assert h1["native_compiles"] - h0["native_compiles"] == 1  # built once, then a hit
    assert s1["native_compiles"] - s0["native_compiles"] == 2  # braze.stats(): the model libraries
    assert [r.name for r in caplog.records if "'braze_dnnl'" in r.getMessage()] == ["braze.cache.helper"] * 3
    assert a.library.path != b.library.path
    (helper,) = _helpers(cache)
    for m in (a, b):  # linked by its absolute path, which is in the model's cache key
        assert str(helper) in _meta(m.library.path)["link"]
    # the helper got the models' ISA flags (so its key, and path, follow the ISA)
    isa = [f for f in _meta(a.library.path)["cflags"] if f.startswith("-m")]
    assert isa and [f for f in _meta(helper)["cflags"] if f.startswith("-m")] == isa
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert str(helper) in maps.read_text()

    # one instance: a handle on the same file sees the models' primitives being created
    lib = onednn.load_standalone(cache_dir=str(cache))
    small_m = lib.braze_dnnl_small_m()
    lib.braze_dnnl_set_small_m(0)  # every row count through oneDNN's primitives
    created, hits = C.c_int64(), C.c_int64()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    c0 = created.value
    for rows in (1, 5, 37, 5):  # interleaved: each model's primitives are its own
        _check(a, 1, False, rows)
        _check(b, 2, True, rows)
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    assert created.value - c0 == 6  # 3 distinct row counts x 2 weights, none shared

    # freeing one model's weights drops only its entries; the other keeps its primitives
    del a
    gc.collect()
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    c0 = created.value
    for rows in (5, 37, 64):
        _check(b, 2, True, rows)
    lib.braze_dnnl_stats(C.byref(created), C.byref(hits))
    lib.braze_dnnl_set_small_m(small_m)
    assert created.value - c0 == 1  # only the new row count


def test_models_called_from_several_threads_at_once(tmp_path):
    """Concurrent first calls of two models (primitive creation under the helper's one lock)."""
    opts = Options(cache_dir=str(tmp_path / "cache"))
    models = [(braze.compile(_model(3, False), options=opts), 3, False),
              (braze.compile(_model(4, True), options=opts), 4, True)]

    def work(t):
        for j in range(12):
            m, seed, softmax = models[(t + j) % 2]
            _check(m, seed, softmax, 1 + (t * 7 + j * 5) % 40)

    errors = run_threads(work, 4)
    assert not errors, errors


_SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {here!r})
    import braze
    from braze.extern import onednn
    from braze.options import Options
    from test_onednn_shared import _check, _model
    m = braze.compile(_model(5, True), options=Options(cache_dir={cache!r}))
    for rows in (1, 9, 100):
        _check(m, 5, True, rows)
    print(json.dumps({{"models": braze.stats(), "helper": onednn.helper_stats(), "lib": str(m.library.path)}}))
""")


def _in_a_new_process(cache: Path) -> dict:
    script = _SCRIPT.format(here=str(Path(__file__).parent), cache=str(cache))
    env = {k: v for k, v in os.environ.items() if k != "BRAZE_CACHE_DIR"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_model_and_helper_from_a_warm_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _in_a_new_process(cache)
    assert first["models"]["native_compiles"] == 1 and first["helper"]["native_compiles"] == 1
    second = _in_a_new_process(cache)  # the model finds the helper by its recorded path
    assert second["models"] == {"native_compiles": 0, "cache_hits": 1}
    assert second["helper"] == {"native_compiles": 0, "cache_hits": 1}
    assert second["lib"] == first["lib"]


@pytest.mark.parametrize("what", ["file", "entry"])
def test_a_helper_deleted_from_the_cache_is_rebuilt_before_the_model_loads(tmp_path, what):
    import shutil
    cache = tmp_path / "cache"
    first = _in_a_new_process(cache)
    (helper,) = _helpers(cache)
    if what == "file":
        helper.unlink()
    else:
        shutil.rmtree(helper.parent)
    again = _in_a_new_process(cache)
    assert again["helper"]["native_compiles"] == 1  # rebuilt at the same path ...
    assert again["models"] == {"native_compiles": 0, "cache_hits": 1}  # ... so the model is reused
    assert again["lib"] == first["lib"] and _helpers(cache) == [helper]
