"""What gets measured, the winner rule, and the measuring process (braze/tune/search.py,
measure.py)."""

import json

import pytest

from braze.codegen.isa import host_isa
from braze.pipeline import kernel_rules
from braze.tune import search
from braze.tune.db import Database, env_key, environment
from braze.tune.products import ProductSite
from hardware import needs_bf16_products, needs_small_m_kernel  # noqa: E402

SITE = ProductSite(128, 64, 1, True, False, 2)


def _t(**paths):
    """times: path -> {m: samples} from path={m: samples, ...}."""
    return {p: {str(m): list(xs) for m, xs in pts.items()} for p, pts in paths.items()}


def _flat(v, n=7):
    return [v + 0.1 * (i % 3) for i in range(n)]


def test_a_kernel_wins_a_bucket_only_clearly_and_at_both_ends():
    fast = _t(smallm={64: _flat(90), 127: _flat(180)}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(fast, [64, 127], ["smallm", "dnnl"]) == "smallm"
    # 2% faster: a tie, the default stays
    tie = _t(smallm={64: _flat(98), 127: _flat(196)}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(tie, [64, 127], ["smallm", "dnnl"]) == "default"
    # 5% faster at the median round, but the rounds' ratios scatter by more: noise, the default stays
    noisy = _t(smallm={64: _flat(90), 127: [160, 200, 190, 140, 210, 190, 230]}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(noisy, [64, 127], ["smallm", "dnnl"]) == "default"
    # 15% faster, rounds scattering by 10%: three standard errors of the median (7 rounds: 0.21) it is not
    noisy = _t(smallm={64: _flat(90), 127: [150, 190, 170, 150, 190, 170, 170]}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(noisy, [64, 127], ["smallm", "dnnl"]) == "default"
    # 30% faster with the same scatter: it is
    noisy = _t(smallm={64: _flat(90), 127: [120, 160, 140, 120, 160, 140, 140]}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(noisy, [64, 127], ["smallm", "dnnl"]) == "smallm"
    noisy = _t(smallm={64: _flat(90), 127: [160, 200, 190, 140, 210, 190, 230]}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(noisy, [64, 127], ["smallm", "dnnl"]) == "default"
    # faster at one end only
    half = _t(smallm={64: _flat(90), 127: _flat(210)}, dnnl={64: _flat(100), 127: _flat(200)})
    assert search.winner(half, [64, 127], ["smallm", "dnnl"]) == "default"


def test_rounds_are_compared_in_pairs():
    """A slow spell of the machine that slows one round of both kernels does not hide a clear win."""
    spell = [1, 1, 2.5, 1, 1, 3, 1]
    t = _t(smallm={64: [90 * f for f in spell], 127: [180 * f for f in spell]},
           dnnl={64: [100 * f for f in spell], 127: [200 * f for f in spell]})
    assert search.winner(t, [64, 127], ["smallm", "dnnl"]) == "smallm"


def test_a_bucket_across_the_default_switch_needs_to_beat_the_default_where_it_is_not_it():
    # [32, 63]: the default is smallm at 32, dnnl at 63
    t = _t(smallm={32: _flat(50), 63: _flat(80)}, dnnl={32: _flat(60), 63: _flat(100)})
    assert search.winner(t, [32, 63], ["smallm", "dnnl"]) == "smallm"
    t = _t(smallm={32: _flat(50), 63: _flat(100)}, dnnl={32: _flat(40), 63: _flat(100)})
    assert search.winner(t, [32, 63], ["smallm", "dnnl"]) == "dnnl"  # faster at 32, the default at 63
    assert search.winner(t, [63], ["smallm"]) == "default"
    # a 1x1 convolution's default is its convolution everywhere
    conv = _t(conv={4: _flat(120), 7: _flat(150)}, smallm={4: _flat(90), 7: _flat(70)})
    assert search.winner(conv, [4, 7], ["conv", "smallm"], ((None, "conv"),)) == "smallm"


def test_measure_records_every_bucket_and_a_failed_child_keeps_the_default(tmp_path, monkeypatch):
    db = Database(tmp_path / "db.jsonl")
    env = environment(None)
    other = ProductSite(32, 16, 0, False, False, 0)
    monkeypatch.setattr(search, "_child", lambda job, threads, timeout: ([], "Segmentation fault"))
    monkeypatch.setattr(search, "LOAD_WAIT_S", 0.0)
    assert search.measure(db, env, [(SITE, 1, 100, [(1, 1), (64, 127)]), (other, 1, 8, [(1, 1)])], "fast", 10.0) == 0
    lines = [json.loads(x) for x in (tmp_path / "db.jsonl").read_text().splitlines()]
    # the site the process failed on keeps the default, recorded; the next is left unmeasured
    assert [(r["site"], r["bucket"], r["winner"]) for r in lines] == [(SITE.key, [1, 1], "default"),
                                                                      (SITE.key, [64, 127], "default")]
    assert all("Segmentation fault" in r["error"] for r in lines)
    assert lines[1]["points"] == [64, 100]  # the bucket's ends inside the range
    # recorded: a later compile does not measure them again
    again = Database(tmp_path / "db.jsonl")
    assert search.missing(again, env_key(env), SITE, 1, 100, "fast") == [(2, 3), (4, 7), (8, 15), (16, 31), (32, 63)]
    assert search.missing(again, env_key(env), SITE, 1, 5000, "fast")[-1] == (512, 1023)  # fast stops below 1024


@needs_small_m_kernel
def test_the_measuring_process_times_and_checks_every_kernel():
    job = {"rounds": 3, "warmup": 1, "sites": [
        {"id": 0, "site": {"n": 128, "k": 64, "transposed": 1, "bias": True, "residual": True, "act": 2},
         "points": [1, 63], "paths": ["smallm", "dnnl", "dnnl_rt"]},
        {"id": 1, "site": {"n": 48, "k": 40, "transposed": 1, "bias": True, "residual": True, "act": 0,
                           "kind": "conv1x1"}, "points": [7, 64], "paths": ["conv", "smallm", "dnnl"]}]}
    lines, failure = search._child(job, 2, 120)
    assert failure == ""
    assert [r["id"] for r in lines] == [0, 1]
    for r, paths, points in ((lines[0], {"smallm", "dnnl", "dnnl_rt"}, {"1", "63"}),
                             (lines[1], {"conv", "smallm", "dnnl"}, {"7", "64"})):
        assert r["rejected"] == {} and not r["skipped"]  # each kernel matched the reference
        assert set(r["times"]) == paths
        for per_point in r["times"].values():
            assert set(per_point) == points
            assert all(len(xs) == 3 and min(xs) > 0 for xs in per_point.values())  # one sample a round


@pytest.mark.parametrize("act, residual", [(7, False), (8, False), (0x107, True)])
def test_a_product_with_relu_is_checked_against_a_relu(act, residual):
    """relu and relu6 (braze's eager ones), and relu after the residual: every kernel matches its
    reference, so each is timed (a reference without the relu had rejected them all)."""
    job = {"rounds": 3, "warmup": 1, "sites": [
        {"id": 0, "site": {"n": 64, "k": 64, "transposed": 1, "bias": True, "residual": residual, "act": act,
                           "kind": "conv1x1"}, "points": [9, 64], "paths": ["conv", "dnnl"]}]}
    (r,), failure = search._child(job, 2, 120)
    assert failure == ""
    assert r["rejected"] == {} and set(r["times"]) == {"conv", "dnnl"}


@needs_bf16_products
def test_the_measuring_process_times_16_bit_products_in_their_dtypes():
    """A bfloat16 product into a float32 result (the policy's), and a 1x1 convolution of a bfloat16
    model rounding into bfloat16 with its residual: each kernel is checked against the reference of
    the rounded operands, at the 16-bit result's tolerance, and timed."""
    job = {"rounds": 3, "warmup": 1, "sites": [
        {"id": 0, "site": {"n": 128, "k": 64, "transposed": 1, "bias": True, "residual": False, "act": 2,
                           "dtype": "bfloat16", "out_dtype": "float32", "bias_dtype": "float32"},
         "points": [1, 63], "paths": ["smallm", "dnnl", "dnnl_rt"]},
        {"id": 1, "site": {"n": 48, "k": 40, "transposed": 1, "bias": True, "residual": True, "act": 0,
                           "kind": "conv1x1", "dtype": "bfloat16", "out_dtype": "bfloat16",
                           "bias_dtype": "bfloat16"}, "points": [7, 64], "paths": ["conv", "smallm", "dnnl"]}]}
    lines, failure = search._child(job, 2, 120)
    assert failure == ""
    for r, paths in zip(lines, ({"smallm", "dnnl", "dnnl_rt"}, {"conv", "smallm", "dnnl"})):
        assert r["rejected"] == {} and set(r["times"]) == paths
        assert all(min(xs) > 0 for per_point in r["times"].values() for xs in per_point.values())


@needs_small_m_kernel
def test_the_measuring_process_does_not_time_the_small_m_path_where_onednn_would_run_it():
    """Where the small-M kernel does not take a call (an AVX2 helper's panels stop at 127 rows for a
    weight over 1024 elements; no kernel has tanh in its epilogue), ``smallm`` would run oneDNN's
    primitive: the point is recorded as pruned and not timed, and a point left with one kernel is
    not timed at all."""
    job = {"rounds": 3, "warmup": 1, "sites": [
        {"id": 0, "site": {"n": 128, "k": 64, "transposed": 1, "bias": True, "residual": False, "act": 0},
         "points": [63, 200], "paths": ["smallm", "dnnl"]},
        {"id": 1, "site": {"n": 128, "k": 64, "transposed": 1, "bias": True, "residual": False, "act": 6},
         "points": [4, 63], "paths": ["smallm", "dnnl", "dnnl_rt"]}]}
    lines, failure = search._child(job, 2, 120)
    assert failure == ""
    first, tanh = lines
    # an AVX2 helper's panels stop at 127 rows; AVX-512's kernel takes any M
    pruned = {"smallm": [200]} if kernel_rules(host_isa()) == "avx2" else {}
    assert first["pruned"] == pruned
    timed = {"63"} if pruned else {"63", "200"}
    assert set(first["times"]["smallm"]) == set(first["times"]["dnnl"]) == timed  # alone at 200: not timed
    assert "smallm" in tanh["rejected"] and set(tanh["times"]) == {"dnnl", "dnnl_rt"}


def test_a_job_the_measuring_process_cannot_read_is_a_failure_not_a_crash():
    lines, failure = search._child({"sites": [{"id": 0}]}, 2, 60)
    assert lines == [] and "KeyError" in failure


@needs_small_m_kernel
@pytest.mark.parametrize("mode", ["fast"])
def test_a_fast_compile_measures_once_then_reads_the_database(mlp, tmp_path, mode, monkeypatch):
    import braze
    import numpy as np
    import torch
    model, ex, dyn = mlp
    monkeypatch.setattr(search, "LOAD_WAIT_S", 0.0)  # the test suite's other worker keeps the load up
    opts = {"tune_db": str(tmp_path / "db.jsonl"), "tune_budget_s": 120}
    cm = braze.compile(model, ex, dyn, tune=mode, options=opts)
    assert cm.tune_measurements > 0
    lines = [json.loads(x) for x in (tmp_path / "db.jsonl").read_text().splitlines()]
    assert {tuple(r["bucket"]) for r in lines} >= {(1, 1), (256, 511)}  # batch <= 300: 9 buckets per product
    assert all(r["mode"] == mode and "times_us" in r for r in lines)
    again = braze.compile(model, ex, dyn, tune=mode, options=opts)
    assert again.tune_measurements == 0
    assert again.dispatch_tables() == cm.dispatch_tables()
    compiles = braze.stats()["native_compiles"]
    for b in (1, 50, 129, 255, 300):  # a shape in each of five buckets: no compile, no measuring
        x = torch.randn(b, 64)
        np.testing.assert_allclose(again(x).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert braze.stats()["native_compiles"] == compiles
    assert len((tmp_path / "db.jsonl").read_text().splitlines()) == len(lines)


def test_a_database_that_cannot_be_written_warns_and_the_compile_keeps_its_measurements(tmp_path):
    from braze.errors import BrazeWarning
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(BrazeWarning, match="cannot be read"):
        db = Database(blocker / "tune.jsonl")  # its directory is a file: neither read, made nor written
    rec = {"v": 1, "env": "e", "site": SITE.key, "bucket": [1, 1], "winner": "smallm"}
    with pytest.warns(BrazeWarning, match="cannot be written"):
        db.append([rec])
    assert db.buckets("e", SITE.key) == {(1, 1): rec}
