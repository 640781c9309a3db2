"""A dump is a repro: every stage's text in a BRAZE_DUMP directory parses back, and compiling
on from it gives the direct compile's C byte for byte, and the same results; so does a second
compile in the same process."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import braze
from braze.codegen.isa import host_isa
from braze.errors import BrazeError
from braze.options import Options
from braze.pipeline import DUMP_SUFFIX, compile_to_c, pipeline_for, resume_c, stage_names

ISA = host_isa()


def stage(name: str, ext: str = ".braze", index: int | None = None) -> str:
    """The dump file of the pipeline stage called ``name`` (its first one), numbered as the
    pipeline numbers it, so the tests do not break when a pass joins the list; ``index``: another
    number, for the tests that make a wrong file."""
    n = stage_names().index(name) + 1 if index is None else index
    return f"{n:02d}_{name}{ext}"


def stage_files(d) -> list[str]:
    return sorted(f for f in os.listdir(d) if f[:2].isdigit() and f.endswith((".braze", ".loop")))


def dump_and_resume_everywhere(module, d) -> str:
    """Compile with a dump, then resume from every stage file; returns the direct C."""
    native, _ = compile_to_c(module, ISA, options=Options(dump_dir=str(d)))
    assert (d / "model.c").read_text() == native.source
    files = stage_files(d)
    # the input, every graph pass and every kernel stage (emit's file is the C itself)
    assert [f.split("_", 1)[1].rsplit(".", 1)[0] for f in files] == ["input"] + stage_names()[:-1]
    # each stage's file holds what its kind makes: graph IR, or the loop IR of every kernel
    kinds = [st.kind for st in pipeline_for(ISA)]
    assert [f.rsplit(".", 1)[1] for f in files[1:]] == [DUMP_SUFFIX[k] for k in kinds[:-1]]
    for f in files:
        resumed, _ = resume_c(d / f, ISA)
        assert resumed.source == native.source, f"resuming from {f} gives other C"
    return native.source


@pytest.fixture(scope="module")
def tiny(tiny_models):
    import torch
    out = {}
    for name, (model, example, dyn) in tiny_models.items():
        ep = torch.export.export(model.eval(), example, dynamic_shapes=dyn)
        out[name] = (braze.import_torch(ep), example)
    return out


@pytest.mark.parametrize("name", ["gpt", "cnn"])
def test_every_stage_resumes_to_the_same_c_and_results(tiny, name, tmp_path):
    module, example = tiny[name]
    src = dump_and_resume_everywhere(module, tmp_path)
    direct = braze.compile(module)
    x = [t.numpy() for t in example]
    want = direct(*x)
    for f in (stage("assign_memory"), stage("collapse", ".loop")):  # through the Python API, built and run
        got = braze.resume(tmp_path / f)(*x)
        for a, b in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            np.testing.assert_array_equal(a, b)
    again, _ = compile_to_c(module, ISA)
    assert again.source == src  # a second compile in one process: the same C


def test_a_dump_directory_holds_only_the_last_compile_s_stage_files(tiny, tmp_path):
    (tmp_path / "20_vectorize.loop").write_text("from a compile with another stage list\n")
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    compile_to_c(tiny["cnn"][0], ISA, options=Options(dump_dir=str(tmp_path)))
    files = stage_files(tmp_path)
    assert "20_vectorize.loop" not in files and len(files) == len(stage_names())
    assert (tmp_path / "notes.txt").exists()


def test_cli_resume_checks_against_the_dumped_c(tiny, tmp_path):
    module, _ = tiny["gpt"]
    compile_to_c(module, ISA, options=Options(dump_dir=str(tmp_path)))
    run = lambda *a: subprocess.run([sys.executable, "-m", "braze.cli", "resume", *a], capture_output=True,
                                    text=True)
    r = run(str(tmp_path / stage("offload")), "--check", str(tmp_path / "model.c"), "-o", str(tmp_path / "x.c"))
    assert r.returncode == 0, r.stderr
    assert "ran dispatch, dce, assign_memory, lower" in r.stdout and "identical to" in r.stdout
    assert (tmp_path / "x.c").read_text() == (tmp_path / "model.c").read_text()
    # an edited stage is a new repro: take the vector loops out and the C changes
    loop = tmp_path / stage("vectorize", ".loop")
    loop.write_text(loop.read_text().replace("vector for", "for"))
    r = run(str(loop), "--check", str(tmp_path / "model.c"))
    assert r.returncode == 1 and "DIFFERS" in r.stdout


def test_bad_stage_files_are_clear_errors(tiny, tmp_path):
    module, _ = tiny["cnn"]
    compile_to_c(module, ISA, options=Options(dump_dir=str(tmp_path)))
    with pytest.raises(BrazeError, match="not a stage file"):
        resume_c(tmp_path / "fusion.txt", ISA)
    off = stage_names().index("offload") + 1
    wrong = tmp_path / stage("fuse", index=off)  # that number is offload's: a dump of another braze
    wrong.write_text((tmp_path / stage("fuse")).read_text())
    with pytest.raises(BrazeError, match=f"stage {off} is '{stage('offload')}'"):
        resume_c(wrong, ISA)
    wrong = tmp_path / stage("lower")  # lower's output is loop IR
    wrong.write_text((tmp_path / stage("assign_memory")).read_text())
    with pytest.raises(BrazeError, match=f"stage {stage_names().index('lower') + 1} is '{stage('lower', '.loop')}'"):
        resume_c(wrong, ISA)
    for f in (tmp_path / "constants").iterdir():
        f.unlink()
    with pytest.raises(BrazeError, match="is not in the dump") as e:
        resume_c(tmp_path / stage("assign_memory"), ISA)
    assert "constants/" in e.value.hint


def test_resuming_into_its_own_dump_directory_leaves_it_alone(tiny, tmp_path):
    module, _ = tiny["cnn"]
    native, _ = compile_to_c(module, ISA, options=Options(dump_dir=str(tmp_path)))
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()}
    resume_c(tmp_path / stage("offload"), ISA, options=Options(dump_dir=str(tmp_path)))
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()} == before


def test_a_dump_records_its_target_and_a_resume_for_another_says_so(tiny, tmp_path):
    import json
    from braze.errors import BrazeWarning
    module, _ = tiny["cnn"]
    compile_to_c(module, ISA, options=Options(dump_dir=str(tmp_path), debug=3))
    target = json.loads((tmp_path / "target.json").read_text())
    assert target == {"isa": ISA.name, "profile": True}
    # per-kernel counters were compiled in: the resume does so too, and matches
    assert resume_c(tmp_path / stage("assign_memory"), ISA, options=Options())[0].source == \
        (tmp_path / "model.c").read_text()
    (tmp_path / "target.json").write_text(json.dumps({"isa": "other", "profile": True}))
    with pytest.warns(BrazeWarning, match="compiled for the other ISA"):
        resume_c(tmp_path / stage("assign_memory"), ISA, options=Options())


def test_a_dump_at_a_cpu_level_resumes_at_that_level_when_asked(tiny, tmp_path):
    """A dump of a cpu-x86:LEVEL compile, resumed for the host's best level, warns and names the
    target that matches; braze.resume with that target gives the dumped C, with no warning."""
    import warnings

    from braze.errors import BrazeWarning
    if ISA.name == "scalar":
        pytest.skip("the host has no level below its best to compile for")
    module, _ = tiny["cnn"]
    braze.compile(module, target="cpu-x86:scalar", options={"dump_dir": str(tmp_path)})
    with pytest.warns(BrazeWarning, match="resume with target='cpu-x86:scalar'"):
        resume_c(tmp_path / stage("assign_memory"), ISA, options=Options())
    with warnings.catch_warnings():
        warnings.simplefilter("error", BrazeWarning)
        again = braze.resume(tmp_path / stage("assign_memory"), options={"target": "cpu-x86:scalar"})
    assert again._native.source == (tmp_path / "model.c").read_text()


def test_a_bfloat16_constant_resumes(tmp_path):
    """NumPy saves ml_dtypes' bfloat16 as raw 2-byte records; a resume reads them back as
    bfloat16 (a bf16 policy's dump once failed to resume at every stage)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from braze.ops import Builder, tensor
    b = Builder()
    n = b.sym("n", 1, 8)
    w = b.constant(np.linspace(-2, 2, 4096).reshape(64, 64).astype(ml_dtypes.bfloat16), "w")
    b.ret(b.add(b.param("x", tensor("f32", n, 64, 64)), b.op("cast", [w], dtype="float32")))
    dump_and_resume_everywhere(b.module, tmp_path)  # every stage: the same C
