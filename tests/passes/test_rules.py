"""Named rewrite rules: exact hit counts per (pass, rule), only inside a collector, per thread."""

from __future__ import annotations

import math
import threading

import numpy as np

import braze.passes as passes
from braze.ops import Builder, tensor
from braze.passes import (RuleStats, all_rules, canonicalize, channels_last, collect_rule_stats, constant_fold, cse,
                          decompose, recognize_patterns)
from braze.passes.rules import _active
from braze.pipeline import RuleCounter, run_pipeline

CANON = """module {
  symbols {
    n in [1, 64]
  }
  constants {
    @one : f32[] = [1.0]
    @nz : f32[] = [-0.0]
    @pz : f32[] = [0.0]
  }
  func @main(%x: f32[n, 4], %y: f32[n, 4, 6]) -> (f32[n, 4], f32[n, 6, 4], f32[n, 24]) {
    %one = constant() {name="one"} : f32[]
    %nz = constant() {name="nz"} : f32[]
    %pz = constant() {name="pz"} : f32[]
    %0 = mul(%one, %x) : f32[n, 4]
    %1 = cast(%0) {dtype=#f32} : f32[n, 4]
    %2 = add(%nz, %1) : f32[n, 4]
    %3 = sub(%2, %pz) : f32[n, 4]
    %4 = div(%3, %one) : f32[n, 4]
    %5 = unsqueeze(%4) {axes=[0]} : f32[1, n, 4]
    %6 = squeeze(%5) {axes=[0]} : f32[n, 4]
    %7 = permute(%y) {perm=[0, 2, 1]} : f32[n, 6, 4]
    %8 = permute(%7) {perm=[0, 2, 1]} : f32[n, 4, 6]
    %9 = permute(%8) {perm=[0, 2, 1]} : f32[n, 6, 4]
    %10 = reshape(%y) {shape=[n, 4, 2, 3]} : f32[n, 4, 2, 3]
    %11 = reshape(%10) {shape=[n, 24]} : f32[n, 24]
    return %6, %9, %11
  }
}
"""
CANON_HITS = {"mul_one": 1, "identity_cast": 1, "add_neg_zero": 1, "sub_zero": 1, "div_one": 1,
              "view_chain": 2, "permute_chain": 1}  # %8 cancels %7, which leaves %9 = permute(%y) alone


def _canon_module(P):
    return P.parse(CANON)


def test_canonicalize_hits(P):
    m = _canon_module(P)
    with collect_rule_stats() as stats:
        canonicalize(m)
    assert P.body(m) == ["%9 = permute(%y) {perm=[0, 2, 1]} : f32[n, 6, 4]",
                         "%11 = reshape(%y) {shape=[n, 24]} : f32[n, 24]", "return %x, %9, %11"]
    assert stats.by_pass("canonicalize") == CANON_HITS
    assert stats["canonicalize", "mul_one"] == 1 and stats["canonicalize", "identity_slice"] == 0


def _other_passes_module():
    """conv (an RGB stem: braze's loops) + batch_norm + relu, a constant exp, a duplicate add, the
    hand-written tanh GELU, sdpa."""
    rng = np.random.default_rng(0)
    b = Builder()
    n = b.sym("n", 1, 8)
    c = lambda v: b.constant(np.array(v, np.float32))  # noqa: E731
    img = b.param("img", tensor("f32", n, 3, 6, 6))
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bn = [b.constant(rng.uniform(0.5, 2, 4).astype(np.float32), k) for k in ("g", "beta", "mean", "var")]
    conv = b.relu(b.batch_norm(b.conv2d(img, w, padding=(1, 1, 1, 1)), *bn, eps=1e-5))
    x = b.param("x", tensor("f32", n, 8))
    e = b.exp(b.constant(np.arange(8, dtype=np.float32), "e"))
    twice = b.mul(b.add(x, e), b.add(x, e))
    inner = b.mul(b.add(x, b.mul(b.pow(x, c(3.0)), c(0.044715))), c(math.sqrt(2 / math.pi)))
    gelu = b.mul(b.mul(x, c(0.5)), b.add(b.tanh(inner), c(1.0)))
    q = b.reshape(x, shape=(1, n, 8))
    b.ret(conv, twice, gelu, b.scaled_dot_product_attention(q, q, q))
    return b.module


OTHER_HITS = {("constant_fold", "conv_batch_norm"): 1, ("constant_fold", "fold_node"): 1,
              ("cse", "same_node"): 1, ("recognize_patterns", "gelu_tanh"): 1,
              ("channels_last", "to_nhwc"): 1, ("channels_last", "sink_permute"): 1,
              ("decompose", "scaled_dot_product_attention"): 1, ("decompose", "conv2d"): 1}


def test_other_passes_hits():
    m = _other_passes_module()
    with collect_rule_stats() as stats:
        for p in (constant_fold, cse, recognize_patterns, channels_last, decompose):
            m = p(m)
    assert dict(stats.hits) == OTHER_HITS


def test_nothing_counted_without_a_collector(P):
    m = _canon_module(P)
    assert _active.get() == ()
    canonicalize(m)  # no collector: nowhere to count (no global counter either)
    with collect_rule_stats() as stats:
        pass
    canonicalize(_canon_module(P))  # after the block: not into its stats
    assert not stats.hits and _active.get() == ()


def test_nested_collectors_each_count_once(P):
    with collect_rule_stats() as outer:
        with collect_rule_stats() as inner, collect_rule_stats(outer):  # outer twice: still one count
            canonicalize(_canon_module(P))
        canonicalize(_canon_module(P))
    assert inner.by_pass("canonicalize") == CANON_HITS
    assert outer.by_pass("canonicalize") == {k: 2 * v for k, v in CANON_HITS.items()}


def test_threads_count_their_own(P):
    texts = {"canon": CANON, "plain": CANON.replace("%0 = mul(%one, %x)", "%0 = add(%x, %x)")}
    go = threading.Barrier(len(texts))
    got, errors = {}, []

    def work(key):
        try:
            with collect_rule_stats() as stats:
                go.wait()  # both collectors are open at once
                for _ in range(5):
                    canonicalize(P.parse(texts[key]))
            got[key] = stats.by_pass("canonicalize")
        except BaseException as e:  # noqa: BLE001 (reported in the main thread)
            errors.append(e)

    with collect_rule_stats() as main:
        threads = [threading.Thread(target=work, args=(k,)) for k in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert got["canon"] == {k: 5 * v for k, v in CANON_HITS.items()}
    assert got["plain"] == {k: 5 * v for k, v in CANON_HITS.items() if k != "mul_one"}
    assert not main.hits  # a thread does not report into the collector of the one that started it


def test_rule_names_are_unique_and_name_a_pass():
    keys = [r.key for r in all_rules()]
    assert len(keys) == len(set(keys))
    assert {p for p, _ in keys} <= set(passes.__all__)
    assert {r for p, r in keys if p == "canonicalize"} >= set(CANON_HITS)


def test_report_is_a_sorted_table():
    stats = RuleStats()
    stats.hits.update({("decompose", "topk"): 3, ("canonicalize", "view_chain"): 12, ("canonicalize", "mul_one"): 1,
                       ("cse", "same_node"): 0})
    assert stats.report() == ("pass          rule        hits\n"
                              "canonicalize  mul_one        1\n"
                              "canonicalize  view_chain    12\n"
                              "decompose     topk           3\n")
    assert RuleStats().report() == "no rewrite rule fired\n"


def test_pipeline_instrument(P):
    rc = RuleCounter()
    run_pipeline(_canon_module(P), passes=[canonicalize, cse, canonicalize], instruments=[rc])
    assert dict(rc.stats.hits) == {("canonicalize", k): v for k, v in CANON_HITS.items()}
    assert _active.get() == ()
    assert rc.stats.report().splitlines()[0].split() == ["pass", "rule", "hits"]
