"""The acceptance of a dump as a repro on the zoo models (slow: each compiles a large model and
resumes it from every stage, and its final module from stage dispatch): the same C byte for
byte, the same results."""

from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.codegen.isa import host_isa
from braze.options import Options
from braze.passes import copy_module
from braze.pipeline import compile_to_c, recompile_c, resume_c, stage_names

ISA = host_isa()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "bert", "gpt2", "resnet50"])
def test_zoo_model_resumes_from_every_stage(zoo_cache, name, tmp_path):
    from braze import zoo
    module = zoo_cache.torch_imported(name)
    native, final = compile_to_c(module, ISA, options=Options(dump_dir=str(tmp_path)))
    # an artifact's module compiled again from its dispatch stage (braze tune --artifact)
    assert recompile_c(copy_module(final), "dispatch", ISA, Options())[0].source == native.source
    files = sorted(f.name for f in tmp_path.iterdir() if f.name[:2].isdigit() and f.suffix in (".braze", ".loop"))
    assert len(files) == len(stage_names())  # 00_input and every stage but emit
    for f in files:
        assert resume_c(tmp_path / f, ISA)[0].source == native.source, f"resuming from {f} gives other C"
    zm = zoo_cache.model(name)
    x = [t.numpy() for t in zm.make_inputs(**zm.test_shapes[1])]
    a = braze.compile(module)(*x)
    last_graph_stage = next(f for f in files if f.endswith("_assign_memory.braze"))  # numbered by the stage list
    b = braze.resume(tmp_path / last_graph_stage)(*x)
    np.testing.assert_array_equal(zoo.first_output(a), zoo.first_output(b))
