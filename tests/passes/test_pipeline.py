"""run_pipeline: passes in order, verify after each (debug >= 1), dumps; Options from the environment."""

from __future__ import annotations

import os

import numpy as np
import pytest

import braze.reference
from braze.errors import VerifyError
from braze.options import Options
from braze.pipeline import CPU_PASSES, run_pipeline
from braze.passes import fuse

TEXT = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @one : f32[] = [1.0]
  }
  func @main(%q: f32[n, 2, 6, 4], %k: f32[n, 2, 6, 4], %v: f32[n, 2, 6, 4]) -> (f32[n, 2, 6, 4]) {
    %one = constant() {name="one"} : f32[]
    %0 = mul(%q, %one) : f32[n, 2, 6, 4]
    %1 = scaled_dot_product_attention(%0, %k, %v) {is_causal=true, scale=none} : f32[n, 2, 6, 4]
    %2 = relu(%1) : f32[n, 2, 6, 4]
    return %2
  }
}
"""


def test_options_from_env():
    o = Options.from_env({"BRAZE_DEBUG": "2", "BRAZE_DUMP": "/tmp/x", "BRAZE_CACHE_DIR": "/c", "BRAZE_THREADS": "3"})
    assert o == Options(threads=3, debug=2, dump_dir="/tmp/x", cache_dir="/c")
    assert Options.from_env({}) == Options()
    assert Options.from_env({}, debug=1).debug == 1
    with pytest.raises(Exception):
        o.debug = 3  # frozen


def test_pipeline_runs_dumps_and_keeps_results(P, tmp_path, capsys):
    m = P.parse(TEXT)
    before = str(m)
    out = run_pipeline(m, options=Options(debug=2, dump_dir=str(tmp_path)))
    assert str(m) == before  # the input is not touched
    names = sorted(os.listdir(tmp_path))
    assert names[0] == "00_input.braze" and "fusion.txt" in names
    assert [n.split("_", 1)[1] for n in names if n[:2].isdigit() and n != "00_input.braze"] == \
        [f"{p.__name__}.braze" for p in CPU_PASSES]
    assert "fusion:" in capsys.readouterr().err
    ops = [nd.op for nd in out.main.nodes]
    assert set(ops) == {"fused"}
    kinds = [nd.attrs["kind"] for nd in out.main.nodes]
    assert "gemm" in kinds and "stitch" in kinds
    P.check_equiv(m, out, [{"n": 1}, {"n": 3}], rtol=1e-5, atol=1e-6)
    assert out.memory_plan is not None


def test_debug_verifies_after_each_pass(P):
    def broken(module):
        module.main.results = [module.main.params[0]] * 2  # types no longer match... and a bad node:
        module.main.nodes[0].outputs[0].type = module.main.nodes[0].outputs[0].type.with_shape((7,))
        return module

    with pytest.raises(VerifyError, match="after pass 'broken'"):
        run_pipeline(P.parse(TEXT), passes=[broken], debug=1)
    run_pipeline(P.parse(TEXT), passes=[broken], debug=0)  # not verified: no error


def test_custom_pass_list(P):
    out = run_pipeline(P.parse(TEXT), passes=[fuse], debug=1)
    assert [nd.attrs["kind"] for nd in out.main.nodes if nd.op == "fused"].count("opaque") == 1  # sdpa kept
    q, k, v = (np.random.default_rng(0).standard_normal((2, 2, 6, 4)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(braze.reference.run(out, q, k, v), braze.reference.run(P.parse(TEXT), q, k, v),
                               rtol=1e-6)
