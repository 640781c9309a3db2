"""The dispatch stage: tables from the default rule or the tuning database, into the IR and the C."""

import json
import warnings

import numpy as np
import pytest

from braze.codegen.isa import host_isa
from braze.errors import BrazeError, BrazeWarning
from braze.ir.parser import parse_module
from braze.options import Options
from braze.pipeline import compile_to_c
from braze.tune.buckets import override
from braze.tune.db import env_key, environment
from braze.pipeline import kernel_rules
from braze.tune.products import DEFAULT, default_rule, library_call

RULES = kernel_rules(host_isa())  # this host's helper's default rules ("avx2", "amx" or none)
RULE = default_rule("gemm", RULES)  # the MLP's products' default (neither weight is tiny)


def _imported(model, ex, dyn):
    from braze.compiler import _to_module
    return _to_module(model, ex, {}, dynamic_shapes=dyn)


def _tables(m):
    return [n.attrs["dispatch"] for n in m.main.nodes if n.attrs.get("dispatch") is not None]


def _site_keys(module):
    """The GEMM sites' database keys, in call order, of an imported module."""
    from braze.pipeline import run_pipeline
    m = run_pipeline(module, options=Options(tune="off"))
    return [c.site.key for n in m.main.nodes if (c := library_call(m, n)) is not None]


def _record(site, bucket, winner, threads=None, **env_changes):
    env = dict(environment(threads), **env_changes)
    return {"v": 1, "env": env_key(env), "env_info": env, "site": site, "bucket": list(bucket), "winner": winner,
            "points": list(bucket)}


def _write(path, records, extra=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + extra)


def test_every_gemm_gets_the_default_rule_without_tuning(module_of):
    native, m = compile_to_c(module_of(), host_isa(), options=Options(tune="off"))
    assert _tables(m) == [RULE, RULE]
    assert m.tuning == ({"rules": RULES} if RULES else {})
    assert f"(sym_batch <= {RULE[0][0]} ? BRAZE_PATH(1) : BRAZE_PATH(2))" in native.source


def test_the_helpers_rules_come_from_the_target():
    """An AVX2 helper's kernels have their own default rules, named in the tuning block whatever
    the mode; every other target has none (braze/tune/products.py)."""
    from braze.codegen.isa import ISA
    from braze.pipeline import kernel_rules, tuning_block
    avx2 = ISA("avx2", 32, features=frozenset({"avx", "avx2", "fma"}))
    assert kernel_rules(avx2) == "avx2"
    assert kernel_rules(ISA("avx2", 32, features=frozenset({"avx", "avx2"}))) == ""  # no FMA: no AVX2 kernels
    for other in (ISA("avx512", 64, features=frozenset({"avx2", "fma", "avx512f"})), ISA("sse", 16), ISA("scalar", 0)):
        assert kernel_rules(other) == ""
    assert tuning_block(Options(tune="off"), avx2) == {"rules": "avx2"}
    # oneDNN's bfloat16 products run on AMX tiles where the CPU has them, whatever braze's C uses
    amx = ISA("avx512", 64, features=frozenset({"avx2", "fma", "avx512f"}), host_features=frozenset({"amx_bf16"}))
    assert kernel_rules(amx) == "amx"
    assert kernel_rules(ISA("avx2", 32, features=frozenset({"avx", "avx2", "fma"}),
                            host_features=frozenset({"amx_bf16"}))) == "avx2"


def test_the_avx2_rules_in_the_ir():
    """This IR in (``rules "avx2"`` in its tuning block), these tables out: the small-M kernel up to
    127 rows, and up to 16383 for a weight of at most 1024 elements; an unknown name is an error."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from braze.pipeline import run_pipeline
    from braze.tune.dispatch import dispatch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()
    m = run_pipeline(_imported(model, (torch.randn(3, 64),), {"input": {0: Dim("batch", min=1, max=300)}}),
                     options=Options(tune="off"))
    m.tuning = {"rules": "avx2"}
    assert _tables(dispatch(m)) == [((127, "smallm"), (None, "dnnl")), ((16383, "smallm"), (None, "dnnl"))]  # 8x128
    m.tuning = {}
    assert _tables(dispatch(m)) == [DEFAULT, DEFAULT]
    m.tuning = {"rules": "avx2"}
    text = str(dispatch(parse_module(str(m))))  # the rules print and parse back
    assert 'dispatch=[[16383, "smallm"], [none, "dnnl"]]' in text and 'rules "avx2"' in text
    m.tuning = {"rules": "avx3"}
    with pytest.raises(BrazeError, match="default rules 'avx3'"):
        dispatch(m)


def test_the_amx_rules_in_the_ir():
    """This IR in (``rules "amx"``), these tables out: a bfloat16 product takes the small-M kernel
    up to 4 rows only (AMX's tiles are faster from 8), a float32 one the usual 48."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from braze.pipeline import run_pipeline
    from braze.tune.dispatch import dispatch
    from braze.tune.products import AMX_BF16_SMALL_M_MAX
    torch.manual_seed(0)
    for dtype, table in ((torch.bfloat16, ((AMX_BF16_SMALL_M_MAX, "smallm"), (None, "dnnl"))),
                         (torch.float32, DEFAULT)):
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()
        mod = _imported(model.to(dtype), (torch.randn(3, 64, dtype=dtype),),
                        {"input": {0: Dim("batch", min=1, max=300)}})
        mod.precision = {"policy": "fp32", "library": ("float32", "bfloat16")}  # bf16 products stay bf16
        m = run_pipeline(mod, options=Options(tune="off"))
        m.tuning = {"rules": "amx"}
        assert _tables(dispatch(parse_module(str(m)))) == [table, table]
        m.tuning = {}
        assert _tables(dispatch(m)) == [DEFAULT, DEFAULT]


def test_a_16_bit_product_is_a_site_of_its_own_dtypes():
    """Under the bf16 policy a product multiplies bfloat16 operands into a float32 result, or rounds
    it into bfloat16 as it stores where the next product reads it; in a bfloat16 model into
    bfloat16, with a bfloat16 bias. Each is a site of its own, whose key names
    the dtypes and whose default is its dtype's rule; a float32 product keeps the key the database
    has always had."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from braze.pipeline import run_pipeline
    torch.manual_seed(0)
    keys, defaults = {}, {}
    for name, dtype, policy in (("f32", torch.float32, "fp32"), ("policy", torch.float32, "bf16"),
                                ("model", torch.bfloat16, "fp32")):
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8)).eval()
        mod = _imported(model.to(dtype), (torch.randn(3, 64, dtype=dtype),),
                        {"input": {0: Dim("batch", min=1, max=300)}})
        mod.precision = {"policy": policy, "library": ("float32", "bfloat16")}
        m = run_pipeline(mod, options=Options(tune="off"))
        m.tuning = {"rules": "amx"}
        calls = [c for n in m.main.nodes if (c := library_call(m, n)) is not None]
        keys[name] = [c.site.key for c in calls]
        defaults[name] = [c.default for c in calls]
    assert keys["f32"] == ["gemm n=128 k=64 transposed=1 bias=1 residual=0 act=2 float32",
                           "gemm n=8 k=128 transposed=1 bias=1 residual=0 act=0 float32"]
    assert keys["policy"] == ["gemm n=128 k=64 transposed=1 bias=1 residual=0 act=2 bfloat16 out=bfloat16 "
                              "bias_dtype=float32",
                              "gemm n=8 k=128 transposed=1 bias=1 residual=0 act=0 bfloat16 out=float32 "
                              "bias_dtype=float32"]
    assert [k.rsplit(" ", 3)[1:] for k in keys["model"]] == [["bfloat16", "out=bfloat16", "bias_dtype=bfloat16"]] * 2
    assert defaults["f32"] == [DEFAULT] * 2
    assert defaults["policy"] == defaults["model"] == [default_rule("gemm", "amx", dtype="bfloat16")] * 2


def test_a_product_whose_activation_no_small_m_kernel_applies_gets_onednn_everywhere():
    """BERT's pooler (a linear, then tanh): the small-M kernels have no tanh, so its default table
    names the oneDNN primitives the helper ran for ``smallm`` there (run-time M up to 2 rows, then
    one per M), under either rules; GELU keeps the small-M rows."""
    torch = pytest.importorskip("torch")
    from torch.export import Dim

    from braze.pipeline import run_pipeline
    from braze.tune.dispatch import dispatch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 96),
                                torch.nn.GELU()).eval()
    m = run_pipeline(_imported(model, (torch.randn(3, 64),), {"input": {0: Dim("batch", min=1, max=300)}}),
                     options=Options(tune="off"))
    for rules, gelu in (("", DEFAULT), ("avx2", ((127, "smallm"), (None, "dnnl")))):
        m.tuning = {"rules": rules} if rules else {}
        assert _tables(dispatch(m)) == [((2, "dnnl_rt"), (None, "dnnl")), gelu]


def test_relu_after_the_residual_keeps_the_small_m_rows():
    """relu(x @ w.T + b + r): the small-M kernels apply the relu after the residual
    (BRAZE_ACT_AFTER_RESIDUAL, act 0x107), so its default table is a plain residual product's."""
    from braze.tune.products import default_rule
    for rules in ("", "avx2"):
        assert default_rule("gemm", rules, 64, 64, 0x107, True) == default_rule("gemm", rules, 64, 64, 0, True)
        assert default_rule("gemm", rules, 64, 64, 0x106, True) == ((None, "dnnl"),)  # tanh: oneDNN's only


def test_a_database_choice_reaches_the_table_and_the_c(module_of, tmp_path):
    db = tmp_path / "tune.jsonl"
    first = _site_keys(module_of())[0]
    _write(db, [_record(first, (64, 127), "smallm"), _record(first, (1, 1), "dnnl_rt"),
                _record(first, (128, 255), "default")])
    opts = Options(tune="cached", tune_db=str(db))
    native, m = compile_to_c(module_of(), host_isa(), options=opts)
    assert m.tuning["mode"] == "cached" and m.tuning["db"] == str(db)
    assert m.tune_measurements == 0
    if RULES == "avx2":  # smallm to 127 is its default rule already
        assert _tables(m) == [((1, "dnnl_rt"), (127, "smallm"), (None, "dnnl")), RULE]
        assert "(sym_batch <= 1 ? BRAZE_PATH(3) : (sym_batch <= 127 ? BRAZE_PATH(1) : BRAZE_PATH(2)))" in native.source
    else:
        assert _tables(m) == [((1, "dnnl_rt"), (48, "smallm"), (63, "dnnl"), (127, "smallm"), (None, "dnnl")), DEFAULT]
        assert ("(sym_batch <= 1 ? BRAZE_PATH(3) : (sym_batch <= 48 ? BRAZE_PATH(1) : (sym_batch <= 63 ? "
                "BRAZE_PATH(2) : (sym_batch <= 127 ? BRAZE_PATH(1) : BRAZE_PATH(2)))))") in native.source
    again, _ = compile_to_c(module_of(), host_isa(), options=opts)
    assert again.source == native.source  # the same database, byte for byte the same C
    text = str(m)
    assert str(parse_module(text)) == text  # the tables and the tuning block print and parse back


def test_a_tuned_model_computes_the_same_at_every_bucket(mlp, tmp_path):
    import braze
    import torch
    model, ex, dyn = mlp
    db = tmp_path / "tune.jsonl"
    cm0 = braze.compile(model, ex, dyn, tune="off")
    first = library_call(cm0.module, next(n for n in cm0.module.main.nodes if n.attrs.get("dispatch"))).site.key
    _write(db, [_record(first, b, w) for b, w in (((1, 1), "dnnl"), ((2, 3), "dnnl_rt"), ((4, 7), "dnnl"),
                                                 ((64, 127), "smallm"), ((128, 255), "dnnl_rt"))])
    cm = braze.compile(model, ex, dyn, options={"tune_db": str(db)})
    assert cm.dispatch_tables()[0][2] != RULE
    for b in (1, 2, 3, 5, 48, 49, 64, 127, 128, 255, 300):
        x = torch.randn(b, 64)
        np.testing.assert_allclose(cm(x).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=str(b))


def test_lines_that_are_not_records_are_skipped_with_one_warning(module_of, tmp_path):
    db = tmp_path / "tune.jsonl"
    first = _site_keys(module_of())[0]
    _write(db, [_record(first, (64, 127), "smallm")], extra='{"v": 1, "env": "x"\nnot json at all\n')
    with pytest.warns(BrazeWarning, match="2 line"):
        _, m = compile_to_c(module_of(), host_isa(), options=Options(tune_db=str(db)))
    assert _tables(m)[0] == override(RULE, 64, 127, "smallm")


@pytest.mark.parametrize("change, says", [({"cpu": "Some Other CPU"}, "cpu 'Some Other CPU'"),
                                          ({"measure": 1}, "measure 1")])  # an older measuring process's
def test_another_machines_database_gives_the_default_rule_with_one_warning(module_of, tmp_path, change, says):
    db = tmp_path / "tune.jsonl"
    first = _site_keys(module_of())[0]
    _write(db, [_record(first, (64, 127), "smallm", **change)])
    from braze.tune import dispatch
    dispatch._WARNED.discard(db.as_posix())
    with pytest.warns(BrazeWarning, match=f"another setting only: {says}"):
        _, m = compile_to_c(module_of(), host_isa(), options=Options(tune_db=str(db)))
    assert _tables(m) == [RULE, RULE]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_to_c(module_of(), host_isa(), options=Options(tune_db=str(db)))  # once per file


def test_options_name_the_modes():
    with pytest.raises(BrazeError, match="tune='sometimes' is not one of off, cached, fast, full"):
        Options(tune="sometimes")
    with pytest.raises(BrazeError, match="tune_budget_s"):
        Options(tune_budget_s=0)
    opts = Options.from_env({"BRAZE_TUNE": "Full", "BRAZE_TUNE_BUDGET": "30", "BRAZE_TUNE_DB": "/x/db.jsonl"})
    assert (opts.tune, opts.tune_budget_s, opts.tune_db) == ("full", 30.0, "/x/db.jsonl")
    assert Options.from_env({}).tune == "cached"


def test_a_hand_written_table_the_host_cannot_read_is_an_error(module_of):
    from braze.pipeline import GRAPH_PASSES, emit, lower_kernels, run_pipeline
    m = run_pipeline(module_of(), options=Options(tune="off"))
    node = next(n for n in m.main.nodes if n.attrs.get("dispatch"))
    for bad in (((48, "smallm"),), ((48, "fastest"), (None, "dnnl")), ((48, "smallm"), (8, "dnnl"), (None, "dnnl"))):
        node.attrs["dispatch"] = bad
        with pytest.raises(BrazeError, match="not a dispatch table of this call"):
            emit(m, lower_kernels(m), host_isa())
    assert GRAPH_PASSES  # the module went through every graph pass


def test_a_1x1_convolution_runs_as_a_gemm_where_its_table_says(tmp_path):
    """A pointwise convolution's table may pick a GEMM kernel by M = N*H*W: the same results at every
    bucket, NaN kept; without a table entry for it, the C calls the convolution alone, as before."""
    import braze
    import torch
    from torch.export import Dim
    torch.manual_seed(0)
    # 48 -> 32: over the 1024 elements an AVX2 helper's kernel takes at every M
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 48, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(48, 32, 1),
                            torch.nn.GELU(), torch.nn.Conv2d(32, 32, 1, stride=2)).eval()
    dims = {"input": {0: Dim("b", min=1, max=8), 2: Dim("h", min=3, max=40), 3: Dim("w", min=3, max=40)}}
    ex = (torch.randn(2, 8, 5, 6),)
    plain = braze.compile(m, ex, dims, tune="off")
    assert "braze_matmul" not in plain._native.source  # no table picks a GEMM: convolutions only
    calls = [c for n in plain.module.main.nodes if (c := library_call(plain.module, n)) is not None]
    assert [c.kind for c in calls] == ["conv1x1"]  # not the 3x3 one, nor the strided 1x1
    key = calls[0].site.key
    assert key.startswith("conv1x1 n=32 k=48 ")
    db = tmp_path / "tune.jsonl"
    _write(db, [_record(key, b, w) for b, w in (((1, 1), "smallm"), ((2, 3), "dnnl"), ((16, 31), "smallm"),
                                               ((32, 63), "dnnl_rt"), ((64, 127), "smallm"))])
    cm = braze.compile(m, ex, dims, options={"tune_db": str(db)})
    assert [t for _, p, t in cm.dispatch_tables() if p.startswith("1x1 conv")] == [
        ((1, "smallm"), (3, "dnnl"), (15, "conv"), (31, "smallm"), (63, "dnnl_rt"), (127, "smallm"), (None, "conv"))]
    # a table that names a GEMM kernel for a convolution that is not a product is refused
    from braze.pipeline import emit, lower_kernels, run_pipeline
    mod = run_pipeline(_imported(m, ex, dims), options=Options(tune="off"))
    conv3 = next(n for n in mod.main.nodes if n.attrs.get("kind") == "conv" and library_call(mod, n) is None)
    conv3.attrs["dispatch"] = ((4, "smallm"), (None, "conv"))
    with pytest.raises(BrazeError, match="not a product"):
        emit(mod, lower_kernels(mod), host_isa())
    for b, h, w in ((1, 3, 3), (2, 3, 3), (1, 3, 5), (2, 4, 3), (1, 7, 9), (2, 8, 6), (8, 40, 40)):
        x = torch.randn(b, 8, h, w)
        x[0, 0, 0, 0] = float("nan")
        np.testing.assert_allclose(cm(x).numpy(), m(x).detach().numpy(), rtol=2e-5, atol=2e-5, err_msg=str((b, h, w)))
