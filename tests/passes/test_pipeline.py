"""run_pipeline: passes in order, verify after each (debug >= 1), dumps; Options from the environment."""

from __future__ import annotations

import os

import numpy as np
import pytest

import braze.reference
from braze.errors import VerifyError
from braze.options import Options
from braze.pipeline import GRAPH_PASSES, run_pipeline
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
        [f"{p.__name__}.braze" for p in GRAPH_PASSES]
    assert "fusion:" in capsys.readouterr().err
    ops = [nd.op for nd in out.main.nodes]
    assert set(ops) == {"fused"}
    kinds = [nd.attrs["kind"] for nd in out.main.nodes]
    assert "gemm" in kinds and "stitch" in kinds
    P.check_equiv(m, out, [{"n": 1}, {"n": 3}], rtol=1e-5, atol=1e-6)
    assert "main" in out.arena_sizes and all("arena" in nd.attrs for nd in out.main.nodes)


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


def test_instruments_see_every_pass_in_order(P):
    from braze.pipeline import Instrument, PassTimer

    class Recorder(Instrument):
        def __init__(self):
            self.events = []

        def start(self, module):
            self.events.append(("start", len(module.main.nodes)))

        def before(self, index, name, module):
            self.events.append(("before", index, name))

        def after(self, index, name, module):
            self.events.append(("after", index, name))

    rec, timer = Recorder(), PassTimer()
    run_pipeline(P.parse(TEXT), options=Options(), instruments=[rec, timer])
    names = [p.__name__ for p in GRAPH_PASSES]
    assert rec.events[0][0] == "start"
    assert rec.events[1:] == [e for i, n in enumerate(names, 1) for e in (("before", i, n), ("after", i, n))]
    assert [n for n, _ in timer.times] == names and all(t >= 0 for _, t in timer.times)
    assert all(f"{n} " in timer.report_text() for n in names)


def test_print_after_prints_the_named_passes(P):
    import io

    from braze.pipeline import PrintAfter
    out = io.StringIO()
    run_pipeline(P.parse(TEXT), options=Options(), instruments=[PrintAfter({"fuse"}, out)])
    text = out.getvalue()
    assert text.count("// after stage") == 1 and "// after stage 'fuse'" in text
    assert braze.ir.parse(text.split("\n", 1)[1]).main.nodes  # the printed IR parses back


def test_compile_logs_the_time_of_every_pass(caplog):
    import logging

    import numpy as np
    from braze.ir.graph import Module
    from braze.ops.builder import Builder
    from braze.ir.types import DType, TensorType
    m = Module()
    b = Builder(m)
    n = m.constraints.add_symbol(braze.ir.sym.Sym("n", 1, None))
    x = b.param("x", TensorType(DType.float32, (n, 4)))
    b.ret(b.op("relu", [x]))
    with caplog.at_level(logging.INFO, logger="braze.compile"):
        cm = braze.compile(m)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("stages: "))
    assert "canonicalize " in line and "fuse " in line and "ms" in line
    np.testing.assert_array_equal(cm(np.array([[-1, 2, -3, 4]], np.float32)), [[0, 2, 0, 4]])


def test_a_pass_that_raises_leaves_no_rule_collector_open(P):
    from braze.passes import canonicalize
    from braze.passes.rules import RuleStats, collect_rule_stats
    from braze.pipeline import RuleCounter

    def broken(module):
        raise RuntimeError("boom")

    counter = RuleCounter()
    with pytest.raises(RuntimeError, match="boom"):
        run_pipeline(P.parse(TEXT), passes=[canonicalize, broken], options=Options(), instruments=[counter])
    seen = dict(counter.stats.hits)
    with collect_rule_stats(RuleStats()):  # a later block in this thread counts into its own stats only
        run_pipeline(P.parse(TEXT), passes=[canonicalize], options=Options())
    assert dict(counter.stats.hits) == seen


def test_each_target_has_one_stage_list():
    """pipeline_for(target): the graph passes, lower, the target's kernel stages, emit, each stage
    a name, a kind and a function; stage_names reads the same list."""
    from braze.codegen.isa import host_isa
    from braze.pipeline import kernel_stages, pipeline_for, stage_names
    from braze.target import parse_target
    for target in (host_isa(), parse_target("cuda:sm_90")):
        stages = pipeline_for(target)
        n = len(GRAPH_PASSES)
        assert [st.kind for st in stages] == ["graph"] * n + ["lower"] + ["kernel"] * len(kernel_stages(target)) + \
            ["emit"]
        assert [st.fn for st in stages[:n]] == GRAPH_PASSES and [st.fn for st in stages[n + 1:-1]] == \
            kernel_stages(target)
        assert stage_names(target) == [st.name for st in stages]
    assert "grid" in stage_names(parse_target("cuda:sm_90")) and "grid" not in stage_names(host_isa())


def test_each_target_kind_is_one_entry_in_each_table():
    """A target's kind picks its schedule (KERNEL_STAGES_OF) and its host part (HOSTS); every kind
    has both, and every host part answers the same questions of the shared entry."""
    from braze.codegen.host import HOSTS
    from braze.codegen.isa import host_isa
    from braze.pipeline import KERNEL_STAGES_OF
    from braze.target import parse_target
    assert set(HOSTS) == set(KERNEL_STAGES_OF) == {host_isa().kind, parse_target("cuda:sm_90").kind}
    asks = ("kind", "timers", "picks_kernels", "copy", "links_helper", "input_ptr", "output_lines", "begin", "prepare", "end",
            "entry", "instance", "source")
    for kind, part in HOSTS.items():
        assert part.kind == kind and all(hasattr(part, a) for a in asks), kind
