"""An artifact ships its module and its products' tuning records; ``braze tune --artifact``
(braze/deploy/retune.py) chooses its kernels again on the CPU it runs on."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import braze
from braze.errors import BrazeError, BrazeWarning
from braze.ops import Builder, tensor
from braze.testing import one_line_error
from braze.testing import run_cli as braze_cli
from hardware import needs_small_m_kernel  # noqa: E402

pytestmark = [needs_small_m_kernel, pytest.mark.usefixtures("module_cache", "no_load_wait")]


@pytest.fixture(scope="module")
def no_load_wait():
    """Measure at once: the suite's other worker keeps the load average up (tests/tune do the same)."""
    from braze.tune import search
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search, "LOAD_WAIT_S", 0.0)
        yield


def _two_products():
    """linear 24 -> 48 with GELU, then 48 -> 24 with a residual: rows n in 1..40."""
    rng = np.random.default_rng(3)
    b = Builder()
    n = b.sym("n", 1, 40)
    x = b.param("x", tensor("f32", n, 24))
    w1 = b.constant(rng.standard_normal((48, 24)).astype(np.float32) * 0.2, "w1")
    w2 = b.constant(rng.standard_normal((24, 48)).astype(np.float32) * 0.2, "w2")
    h = b.gelu(b.op("linear", [x, w1]))
    b.ret(b.add(b.op("linear", [h, w2]), x))
    return b.module


def _opts(db, tune="fast"):
    return {"tune": tune, "tune_db": str(db), "tune_budget_s": 120}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The model tuned (fast) into a database of its own, and saved."""
    root = tmp_path_factory.mktemp("retune")
    cm = braze.compile(_two_products(), options=_opts(root / "here.jsonl"))
    assert cm.tune_measurements > 0
    cm.save(root / "art")
    return cm, root


def _x(rows):
    return np.random.default_rng(rows).standard_normal((rows, 24)).astype(np.float32)


def _lines(path):
    """A database file's records, in the order the artifact writes them."""
    records = [json.loads(ln) for ln in path.read_text().splitlines()]
    return sorted(records, key=lambda r: (r["env"], r["site"], r["bucket"]))


def test_the_artifact_ships_its_module_and_its_products_records(tuned):
    from braze.deploy.retune import read_module
    cm, root = tuned
    art = root / "art"
    meta = json.loads((art / "meta.json").read_text())
    assert {"module.braze", "tune.jsonl"} <= set(meta["files"])
    records = _lines(art / "tune.jsonl")
    assert records == _lines(root / "here.jsonl")  # this database holds only this model's products
    assert meta["tuning"] == {"mode": "fast", "measured": meta["tuning"]["measured"], "records": len(records),
                              "settings": 1}
    text = (art / "module.braze").read_text()
    assert "tuning {" not in text and str(root) not in text  # no path of the machine that compiled it
    m = read_module(art, meta)
    assert m.to_text() == text
    for name in ("w1", "w2"):
        np.testing.assert_array_equal(m.constants[name], cm.module.constants[name])


def test_with_this_machines_records_nothing_is_measured_and_the_c_is_the_same(tuned, tmp_path):
    from braze.deploy.retune import retune
    cm, root = tuned
    local = tmp_path / "empty.jsonl"
    cm2, report = retune(root / "art", tmp_path / "out", options=_opts(local))
    assert report["imported"] == len(_lines(root / "here.jsonl")) and cm2.tune_measurements == 0
    assert cm2._native.source == cm._native.source
    assert report["after"] == report["before"]
    assert _lines(local) == _lines(root / "here.jsonl")  # the shipped records joined this machine's database
    loaded = braze.load(tmp_path / "out")
    for rows in (1, 17, 40):
        np.testing.assert_array_equal(loaded(_x(rows)), cm(_x(rows)))
    # a second re-tune adds nothing and measures nothing
    _, again = retune(tmp_path / "out", tmp_path / "out2", options=_opts(local))
    assert again["imported"] == 0 and _lines(local) == _lines(root / "here.jsonl")


def test_another_machines_records_choose_nothing_and_this_ones_are_measured(tuned, tmp_path):
    """An artifact tuned elsewhere: its records are another setting's, so this machine's
    buckets are measured, and the artifact then ships both."""
    from braze.deploy.retune import retune
    cm, root = tuned
    elsewhere = tmp_path / "elsewhere.jsonl"
    foreign = []
    for r in _lines(root / "here.jsonl"):
        info = dict(r["env_info"], cpu="another CPU")
        foreign.append(dict(r, env="f" * 16, env_info=info, winner="smallm"))
    elsewhere.write_text("".join(json.dumps(r) + "\n" for r in foreign))
    with pytest.warns(BrazeWarning, match="another setting only"):
        there = braze.compile(_two_products(), options=_opts(elsewhere, "cached"))
    there.save(tmp_path / "art")
    local = tmp_path / "local.jsonl"
    cm2, report = retune(tmp_path / "art", options=_opts(local))  # in place
    assert report["imported"] == len(foreign) and cm2.tune_measurements > 0
    meta = json.loads((tmp_path / "art" / "meta.json").read_text())
    assert meta["tuning"]["settings"] == 2 and meta["tuning"]["records"] == 2 * len(foreign)
    loaded = braze.load(tmp_path / "art")
    for rows in (1, 17, 40):
        np.testing.assert_allclose(loaded(_x(rows)), cm(_x(rows)), rtol=1e-5, atol=1e-5)


def _copy(tuned, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(tuned[1] / "art", dst)
    return dst


def test_an_artifact_saved_without_its_module_is_refused_with_a_hint(tuned, tmp_path):
    from braze.deploy.retune import retune
    art = _copy(tuned, tmp_path)
    meta = json.loads((art / "meta.json").read_text())
    del meta["files"]["module.braze"]
    (art / "module.braze").unlink()
    (art / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BrazeError, match="without its module") as e:
        retune(art, options=_opts(tmp_path / "db.jsonl"))
    assert "save the model again" in e.value.hint


def test_weights_that_are_not_the_modules_are_refused(tuned, tmp_path):
    from braze.deploy.retune import retune
    art = _copy(tuned, tmp_path)
    data = bytearray((art / "weights.safetensors").read_bytes())
    data[-3] ^= 0x40  # a byte of the last constant's data
    (art / "weights.safetensors").write_bytes(bytes(data))
    with pytest.raises(BrazeError, match=r"constant @w\d is not the one in weights.safetensors"):
        retune(art, options=_opts(tmp_path / "db.jsonl"))


def test_a_changed_module_or_record_file_is_refused(tuned, tmp_path):
    from braze.deploy.retune import retune
    art = _copy(tuned, tmp_path)
    with open(art / "tune.jsonl", "a") as fh:
        fh.write("{}\n")
    with pytest.raises(BrazeError, match="tune.jsonl: its SHA-256 does not match"):
        retune(art, options=_opts(tmp_path / "db.jsonl"))
    with pytest.raises(BrazeError, match="tune.jsonl: its SHA-256 does not match"):
        braze.load(art)


def test_a_cuda_artifact_has_nothing_to_tune(tuned, tmp_path):
    from braze.deploy.retune import retune
    art = _copy(tuned, tmp_path)
    meta = json.loads((art / "meta.json").read_text())
    (art / "meta.json").write_text(json.dumps(dict(meta, target="cuda:sm_90")))
    with pytest.raises(BrazeError, match="cuda:sm_90 artifact"):
        retune(art, options=_opts(tmp_path / "db.jsonl"))


def test_the_command_line(tuned, tmp_path):
    art = tuned[1] / "art"
    env = {"BRAZE_TUNE_DB": str(tmp_path / "db.jsonl")}
    r = braze_cli("tune", "--artifact", art, "-o", tmp_path / "out", env=env)
    assert r.returncode == 0, r.stderr
    assert "re-tuned" in r.stdout and "0 measurement(s)" in r.stdout and "0 of 2 dispatch table(s) changed" \
        in r.stdout, r.stdout
    r = braze_cli("inspect", tmp_path / "out")
    assert "tune.jsonl: " in r.stdout and "1 machine setting(s)" in r.stdout, r.stdout
    one_line_error(braze_cli("tune", "model.onnx", "--artifact", art, env=env), 2, "--artifact", "no MODEL")
    one_line_error(braze_cli("tune", "--artifact", tmp_path, env=env), 2, "not a braze artifact")
    one_line_error(braze_cli("tune", "--artifact", art, "-o", tuned[1] / "here.jsonl", env=env), 2, "-o:")
    one_line_error(braze_cli("tune", env=env), 2, "MODEL", "--artifact")


def test_only_the_stages_from_dispatch_on_run_again(tuned):
    from braze.codegen.isa import host_isa
    from braze.options import Options
    from braze.passes import copy_module
    from braze.pipeline import recompile_c
    cm, _ = tuned
    with pytest.raises(BrazeError, match="'fuse' cannot run again") as e:
        recompile_c(copy_module(cm.module), "fuse", host_isa(), Options(tune="off"))
    assert "dispatch, dce, assign_memory" in e.value.hint
    native, _ = recompile_c(copy_module(cm.module), "assign_memory", host_isa(), Options(tune="off"))
    assert native.source == cm._native.source  # the tables stay as the tuned compile made them
