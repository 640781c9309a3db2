"""plan_memory: liveness, symbolic sizes, slot reuse; no two live buffers overlap."""

from __future__ import annotations


import pytest

from braze.ir import sym as S
from braze.passes import plan_memory
from braze.pipeline import run_pipeline

CHAIN = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = fused(%x) {callee="f0", kind="pointwise"} : f32[n, 8]
    %1 = fused(%0) {callee="f0", kind="pointwise"} : f32[n, 8]
    %2 = fused(%1) {callee="f0", kind="pointwise"} : f32[n, 8]
    %3 = fused(%2) {callee="f0", kind="pointwise"} : f32[n, 8]
    return %3
  }
  func @f0(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = softmax(%x) {axis=-1} : f32[n, 8]
    return %0
  }
}
"""


def test_chain_reuses_two_slots(P):
    m = P.parse(CHAIN)
    plan = plan_memory(m)
    assert [b.name for b in plan.buffers] == ["0", "1", "2"]  # %3 is a result: not in the arena
    assert [b.size for b in plan.buffers] == [S.mul(32, m.symbols["n"])] * 3
    assert [(b.start, b.end) for b in plan.buffers] == [(0, 1), (1, 2), (2, 3)]
    # %0 dies after node 1 reads it, so %2 takes its slot; %1 needs a second one
    assert [b.slot for b in plan.buffers] == [0, 1, 0]
    assert plan.arena_size == 2 * S.mul(64, S.floordiv(S.add(S.mul(32, m.symbols["n"]), 63), 64))
    for n in (1, 2, 7, 64):
        plan.check({"n": n})


def test_an_elementwise_group_writes_over_the_input_it_reads_last(P):
    """Each element of an elementwise group reads its input at its own index in the iteration that
    stores it, so the output takes a dying input's memory: the chain runs in one slot. A group whose
    input is read again later (or that is not elementwise) keeps its own."""
    m = P.parse(CHAIN.replace("softmax(%x) {axis=-1}", "exp(%x)"))
    plan = plan_memory(m)
    assert [b.slot for b in plan.buffers] == [0, 0, 0]
    assert [b.over.name if b.over else None for b in plan.buffers] == [None, "0", "1"]
    for n in (1, 7):
        plan.check({"n": n})
    again = P.parse(READ_AGAIN)
    plan = plan_memory(again)
    assert [b.over for b in plan.buffers] == [None, None]  # %0 is read again by %2
    assert plan.buffers[0].slot != plan.buffers[1].slot


TWO_OUTPUTS = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = fused(%x) {callee="f0", kind="pointwise"} : f32[n, 8]
    %1, %2 = fused(%0) {callee="f1", kind="pointwise"} : f32[n, 8], bf16[n, 8]
    %3 = fused(%1, %2) {callee="f2", kind="pointwise"} : f32[n, 8]
    return %3
  }
  func @f0(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = exp(%x) : f32[n, 8]
    return %0
  }
  func @f1(%x: f32[n, 8]) -> (f32[n, 8], bf16[n, 8]) {
    %0 = relu(%x) : f32[n, 8]
    %1 = cast(%0) {dtype=#bf16} : bf16[n, 8]
    return %0, %1
  }
  func @f2(%x: f32[n, 8], %y: bf16[n, 8]) -> (f32[n, 8]) {
    %0 = cast(%y) {dtype=#f32} : f32[n, 8]
    %1 = add(%x, %0) : f32[n, 8]
    return %1
  }
}
"""


def test_a_two_output_elementwise_group_writes_one_output_over_its_input(P):
    """The output of the input's type takes the dying input's memory; the other has its own."""
    m = P.parse(TWO_OUTPUTS)
    plan = plan_memory(m)
    over = {b.value.name: b.over.name if b.over else None for b in plan.buffers}
    assert over["1"] == "0" and over["2"] is None, over
    for n in (1, 7):
        plan.check({"n": n})


READ_AGAIN = """module {
  symbols {
    n in [1, 64]
  }
  func @main(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = fused(%x) {callee="f0", kind="pointwise"} : f32[n, 8]
    %1 = fused(%0) {callee="f0", kind="pointwise"} : f32[n, 8]
    %2 = fused(%1, %0) {callee="f1", kind="pointwise"} : f32[n, 8]
    return %2
  }
  func @f0(%x: f32[n, 8]) -> (f32[n, 8]) {
    %0 = exp(%x) : f32[n, 8]
    return %0
  }
  func @f1(%x: f32[n, 8], %y: f32[n, 8]) -> (f32[n, 8]) {
    %0 = add(%x, %y) : f32[n, 8]
    return %0
  }
}
"""


def test_larger_buffer_does_not_take_a_smaller_slot(P):
    text = CHAIN.replace("%2 = fused(%1) {callee=\"f0\", kind=\"pointwise\"} : f32[n, 8]",
                         "%2 = fused(%1) {callee=\"f1\", kind=\"pointwise\"} : f32[n, 16]") \
        .replace("%3 = fused(%2) {callee=\"f0\", kind=\"pointwise\"} : f32[n, 8]",
                 "%3 = fused(%2) {callee=\"f2\", kind=\"pointwise\"} : f32[n, 8]")
    text = text.replace("  func @f0(", """  func @f1(%x: f32[n, 8]) -> (f32[n, 16]) {
    %0 = concat(%x, %x) {axis=1} : f32[n, 16]
    return %0
  }
  func @f2(%x: f32[n, 16]) -> (f32[n, 8]) {
    %0, %1 = split(%x) {axis=1, sizes=[8, 8]} : f32[n, 8], f32[n, 8]
    return %0
  }
  func @f0(""")
    m = P.parse(text)
    plan = plan_memory(m)
    slots = {b.name: b.slot for b in plan.buffers}
    assert slots["2"] not in (slots["0"], slots["1"])  # f32[n, 16] > f32[n, 8]: a new slot
    for n in (1, 5):
        plan.check({"n": n})


@pytest.mark.parametrize("name,envs", [
    ("bert", [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 13}, {"batch": 4, "seq": 128}]),
    ("resnet50", [{"batch": 1, "height": 33, "width": 64}, {"batch": 3, "height": 224, "width": 224}]),
])
def test_zoo_plan_has_no_overlap_and_reuses(zoo_modules, name, envs):
    m = run_pipeline(zoo_modules.module(name), debug=0)
    plan = plan_memory(m)
    assert plan.function == "main"
    # the pipeline wrote this plan into the IR: each node's arena offsets and the arena size
    offsets = plan.offsets
    for nd in m.main.nodes:
        if nd.op != "constant":
            assert list(nd.attrs["arena"]) == [offsets.get(v, -1) for v in nd.outputs]
    assert m.arena_sizes["main"] == plan.arena_size
    assert len(plan.slot_sizes) < len(plan.buffers)
    for env in envs:
        plan.check(env)
        total = S.evaluate(plan.total_intermediate_size, env)
        assert plan.arena_bytes(env) < total, (env, plan.arena_bytes(env), total)
        if name == "bert":
            assert plan.arena_bytes(env) * 4 < total  # reuse across the 12 layers
    # offsets and sizes are symbolic over the model's dims only
    for b in plan.buffers:
        assert {s.name for s in S.free_syms(b.offset) | S.free_syms(b.size)} <= set(m.symbols)


def test_a_conv_writes_over_the_residual_it_reads_last(tmp_path, monkeypatch):
    """oneDNN's sum post-op adds into the destination: a residual read last by its conv is
    written over (no copy); one read again later keeps its memory. Same values as torch, at
    several shapes."""
    import numpy as np
    import torch

    import braze
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c, self.d, self.e = (torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(5))

        def forward(self, x):
            y = self.a(x)
            z = torch.relu(self.c(self.b(y)) + y)  # y is read last here: written over
            w = torch.relu(self.e(self.d(z)) + z)  # z is read again after this conv
            return w + z + torch.relu(self.a(w) + w)  # w is the conv's input too: never written over

    net = Net().eval()
    h = torch.export.Dim("h", min=1, max=64)
    cm = braze.compile(net, example_inputs=(torch.randn(2, 8, 9, 9),), dynamic_shapes=({2: h, 3: h},))
    plan = plan_memory(cm.module)
    convs = {id(v) for n in cm.module.main.nodes if n.attrs.get("kind") == "conv" for v in n.outputs}
    over = [b for b in plan.buffers if b.over is not None and id(b.value) in convs]
    assert len(over) == 1, str(plan)
    under = plan.buffer(over[0].over)
    assert under.end == over[0].start and under.slot == over[0].slot
    for n in (1, 5, 16):
        plan.check({"h": n})
        x = torch.randn(2, 8, n, n)
        with torch.no_grad():
            want = net(x).numpy()
        np.testing.assert_allclose(cm(x).numpy(), want, rtol=1e-5, atol=1e-5)


def test_an_activation_after_a_convolution_runs_in_place_and_keeps_nan(tmp_path, monkeypatch):
    """An activation no library call applies (a leaky ReLU) runs as braze's own kernel after the
    convolution, over the convolution's result: its loop kernel says so (``in_place``), and its C
    declares no restrict pointers. NaN and infinities come out as torch's."""
    import numpy as np
    import torch

    import braze
    from braze.ir.loop_parser import parse_kernels
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.LeakyReLU(0.1),
                              torch.nn.Conv2d(16, 8, 3, padding=1)).eval()
    h = torch.export.Dim("h", min=2, max=64)
    dump = tmp_path / "dump"
    monkeypatch.setenv("BRAZE_DUMP", str(dump))
    cm = braze.compile(net, example_inputs=(torch.randn(2, 8, 9, 9),), dynamic_shapes=({2: h, 3: h},))
    (act,) = [k for k in parse_kernels((dump / "30_jam.loop").read_text()) if k.in_place]
    assert str(act).splitlines()[0].endswith("[pointwise, in_place, stream 50331648]")
    assert f"int {act.name}(const float * b_" in cm._native.source
    plan = plan_memory(cm.module)
    assert sum(b.over is not None for b in plan.buffers) == 1
    for n in (2, 9, 31):
        x = torch.randn(2, 8, n, n)
        x[0, 0, 0, 0], x[1, 3, n - 1, 1] = float("nan"), float("inf")
        with torch.no_grad():
            want = net(x).numpy()
        np.testing.assert_allclose(cm(x).numpy(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_size_a_node_decides_is_planned_at_its_bound_and_a_decided_result_lives_to_the_end():
    from braze.ir import Sym
    from braze.ops import Builder, tensor
    from braze.passes.memory import plan_memory
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n))
    u = b.size_sym(n)
    first, inverse, counts = b.unique(x, axis=0, sorted=True, size=u)
    b.ret(b.gather(x, first, axis=0), counts)
    plan = plan_memory(b.module)
    sizes = {bf.value.name: bf.size for bf in plan.buffers}
    assert all(Sym("u0") not in getattr(s, "free_syms", lambda: ())() for s in sizes.values())
    assert plan.buffer(counts).end == len(b.func.nodes)  # copied out after the last node
    assert plan.buffer(first).size == 8 * n
    env = {"n": 5}
    plan.check(env)
    assert len({plan.evaluate(env)[v.name][0] for v in (counts, first, b.func.results[0])}) == 3



def _donated(reduce="none", other="src"):
    """A scatter group writing rows of %src into %cache, which the caller donates for result 0, and
    an elementwise group over ``other`` (the second result)."""
    t = "f32[2, n, 4]" if other == "src" else "f32[2, 8, 4]"
    return f"""module {{
  symbols {{
    n in [1, 8]
  }}
  donated {{
    @main %cache 0
  }}
  func @main(%cache: f32[2, 8, 4], %idx: i64[n], %src: f32[2, n, 4]) -> (f32[2, 8, 4], {t}) {{
    %0 = fused(%cache, %idx, %src) {{callee="f0", kind="scatter"}} : f32[2, 8, 4]
    %1 = fused(%{other}) {{callee="f1", kind="pointwise"}} : {t}
    return %0, %1
  }}
  func @f0(%cache: f32[2, 8, 4], %idx: i64[n], %src: f32[2, n, 4]) -> (f32[2, 8, 4]) {{
    %0 = index_put(%cache, %idx, %src) {{axis=1, reduce="{reduce}"}} : f32[2, 8, 4]
    return %0
  }}
  func @f1(%x: {t}) -> ({t}) {{
    %0 = exp(%x) : {t}
    return %0
  }}
}}
"""


def test_a_donated_input_takes_the_rows_its_scatter_writes(P, tmp_path):
    """An input the caller donated for a result (the ``donated`` block) that a scatter group writing
    rows makes: the rows are written into the input, which the call returns as that result, with
    the reference's values; the block prints and parses back. An input read by another group too,
    or rows maxed in rather than written, make a new result; an artifact is refused (its caller
    allocates every output)."""
    import numpy as np

    import braze
    from braze.passes.memory import donated_results
    m = P.parse(_donated())
    assert donated_results(m, m.main) == {0: 0}
    assert "  donated {\n    @main %cache 0\n  }" in m.to_text()
    assert P.parse(m.to_text()).donated == {"main": {"cache": 0}}
    for other in (P.parse(_donated(reduce="max")), P.parse(_donated(other="cache"))):
        assert donated_results(other, other.main) == {}

    cm = braze.compile(P.parse(_donated()), options={"cache_dir": str(tmp_path)})
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((2, 8, 4), dtype=np.float32)
    for rows in ([3], [0, 7, 2]):
        idx, src = np.array(rows, np.int64), rng.standard_normal((2, len(rows), 4), dtype=np.float32)
        want = cache.copy()
        want[:, idx] = src
        out, e = cm(cache, idx, src)
        assert out is cache
        np.testing.assert_array_equal(cache, want)
        np.testing.assert_allclose(e, np.exp(src), rtol=1e-6)
    with pytest.raises(braze.BrazeError, match="donated"):
        cm.save(tmp_path / "artifact")
