"""Host ISA detection, lower levels (cpu-x86:LEVEL targets) and BRAZE_ISA, which only Options reads."""

import platform

import numpy as np
import pytest

from braze.codegen import isa as I
from braze.errors import BrazeError
from braze.runtime import NativeFunction, load_library

from rt_kernels import needs_cc

pytestmark = needs_cc

X86 = platform.machine().lower() in ("x86_64", "amd64")

# which ISA macros the compiled code saw
PROBE_SRC = r"""
#include "braze_abi.h"
BRAZE_EXPORT int32_t braze_probe(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                 braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    int64_t one = 1;
    int64_t *y = (int64_t *)alloc(alloc_ctx, 0, BRAZE_INT64, 1, &one);
    if (!y) return BRAZE_ERR_ALLOC;
#if defined(__AVX512F__)
    y[0] = 64;
#elif defined(__AVX2__)
    y[0] = 32;
#elif defined(__SSE4_1__)
    y[0] = 16;
#else
    y[0] = 0;
#endif
    /* use the vector width through GCC vector extensions, as codegen will */
    typedef float vf __attribute__((vector_size(64)));
    vf a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    vf b = a * a + a;
    if (b[15] != 272.0f) return BRAZE_ERR_INTERNAL;
    return BRAZE_OK;
}
"""


@pytest.fixture
def fresh_detection():
    I._host_features.cache_clear()
    I._detect.cache_clear()
    yield
    I._host_features.cache_clear()
    I._detect.cache_clear()


def _probe(isa=None):
    f = NativeFunction(load_library(PROBE_SRC, name="probe", isa=isa), "braze_probe", [], [("i64", 1)])
    return int(f()[0])


@pytest.mark.skipif(not X86, reason="x86 host")
def test_detects_features_on_this_host():
    isa = I.host_isa()
    assert isa.name in ("avx512", "avx2", "sse")
    assert isa.features and isa.host_features >= isa.features
    assert isa.vector_bytes == I.VECTOR_BYTES[isa.name]
    if isa.name == "avx512":
        assert {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "avx2"} <= isa.features
        assert "-mavx512f" in isa.cflags
    assert isa.vector_lanes(4) == max(1, isa.vector_bytes // 4)
    assert I.host_isa() is isa  # cached
    # the compiled code sees the detected level
    assert _probe() == isa.vector_bytes


def test_scalar_level(monkeypatch):
    monkeypatch.setenv("BRAZE_ISA", "avx512")  # read by Options.from_env only, never here
    isa = I.isa_at("scalar")
    assert (isa.name, isa.vector_bytes, isa.cflags, isa.features) == ("scalar", 0, [], frozenset())
    assert I.host_isa() == I.isa_at("auto")
    if X86:
        assert _probe(isa) in (0, 16)  # x86-64 baseline SSE2 remains; no SSE4/AVX flags


@pytest.mark.skipif(not X86, reason="x86 host")
def test_avx2_level_when_available():
    if "avx2" not in I.host_isa().host_features:
        pytest.skip("host has no AVX2")
    isa = I.isa_at("avx2")
    assert isa.name == "avx2" and isa.vector_bytes == 32
    assert "-mavx2" in isa.cflags and not any("avx512" in f for f in isa.cflags)
    assert not any(f.startswith("avx512") for f in isa.features)
    assert _probe(isa) == 32


def test_braze_isa_is_a_cpu_level_target():
    """BRAZE_ISA=LEVEL is BRAZE_TARGET=cpu-x86:LEVEL, read once by Options.from_env."""
    from braze.options import Options
    assert Options.from_env({"BRAZE_ISA": "scalar"}).target == "cpu-x86:scalar"
    assert Options.from_env({"BRAZE_ISA": " AVX2 ", "BRAZE_TARGET": "cpu"}).target == "cpu-x86:avx2"
    assert Options.from_env({"BRAZE_ISA": "avx2", "BRAZE_TARGET": "cpu-x86:avx2"}).target == "cpu-x86:avx2"
    for auto in ("", "auto", "native"):
        assert Options.from_env({"BRAZE_ISA": auto}).target == "cpu"
    with pytest.raises(BrazeError, match="BRAZE_ISA='avx9000' is not an instruction-set level"):
        Options.from_env({"BRAZE_ISA": "avx9000"})
    with pytest.raises(BrazeError, match="BRAZE_ISA=avx2 and BRAZE_TARGET=cuda:sm_90 name different targets"):
        Options.from_env({"BRAZE_ISA": "avx2", "BRAZE_TARGET": "cuda:sm_90"})
    assert Options(target="cpu").target == "cpu"  # an explicit Options never reads the environment


@pytest.mark.skipif(not X86, reason="x86 host")
def test_lower_host_and_asking_higher(monkeypatch, fresh_detection):
    monkeypatch.setattr(I, "_cpuinfo_flags", lambda: {"sse", "sse2", "sse3", "sse4_1", "sse4_2"})
    isa = I.host_isa()
    assert isa.name == "sse" and isa.vector_bytes == 16 and "-msse4.2" in isa.cflags
    with pytest.raises(BrazeError, match="best available is sse"):
        I.isa_at("avx512")


@pytest.mark.skipif(not X86, reason="x86 host")
def test_amx_is_a_host_feature_no_flag_enables(monkeypatch, fresh_detection):
    """AMX's tiles are oneDNN's to use (the default dispatch rules depend on them), never braze's C."""
    avx2 = {"sse2", "sse3", "avx", "avx2", "fma"}
    monkeypatch.setattr(I, "_cpuinfo_flags", lambda: avx2 | {"amx_tile", "amx_bf16", "frobnicate"})
    isa = I.host_isa()
    assert {"amx_tile", "amx_bf16"} <= isa.host_features and "frobnicate" not in isa.host_features
    assert not {"amx_tile", "amx_bf16"} & isa.features and not any("amx" in f for f in isa.cflags)


@pytest.mark.skipif(not X86, reason="x86 host")
def test_compiler_rejecting_flags_falls_back(monkeypatch, fresh_detection):
    real = I._compiler_accepts.__wrapped__

    def accepts(cc, flags):
        return not any("avx512" in f for f in flags) and real(cc, flags)

    monkeypatch.setattr(I, "_compiler_accepts", accepts)
    isa = I.host_isa()
    if "avx2" in isa.host_features:
        assert isa.name == "avx2"
    assert not any("avx512" in f for f in isa.cflags)


def test_scalar_build_runs():
    from rt_kernels import ADD1_SRC
    lib = load_library(ADD1_SRC, name="add1", isa=I.isa_at("scalar"))
    f = NativeFunction(lib, "braze_add1", [("f32", None)], [("f32", None)])
    np.testing.assert_array_equal(f(np.zeros((3, 3), np.float32)), np.ones((3, 3)))


@pytest.mark.skipif(not X86, reason="x86 host")
def test_a_cpu_level_target_compiles_and_saves_for_that_level(tmp_path):
    """target="cpu-x86:avx2" on a host with more: the kernels are generated for 32-byte vectors, the
    C compiler gets AVX2's flags and none of AVX-512's, and a saved artifact asks its host for AVX2
    only; the results are the reference's. Without a level, the target is the host's best."""
    import json
    from pathlib import Path

    import braze
    from braze.ops import Builder, tensor
    if "avx2" not in I.host_isa().host_features:
        pytest.skip("host has no AVX2")
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n, 37))
    w = b.constant(np.random.default_rng(1).standard_normal((37, 37)).astype(np.float32))
    b.ret(b.exp(b.mul(b.matmul(x, w), x)))  # a GEMM: the oneDNN helper is built for the level too
    a = np.random.default_rng(0).standard_normal((3, 37)).astype(np.float32)
    m = braze.compile(b.module, target="cpu-x86:avx2", options={"cache_dir": str(tmp_path / "cache")})
    assert m._native.isa == "avx2" and m._native.uses_library
    meta = json.loads((m.library.path.parent / "meta.json").read_text())
    helper = next(f for f in meta["link"] if f.endswith(".so") and "braze_dnnl" in f)
    helper_meta = json.loads((Path(helper).parent / "meta.json").read_text())
    for flags in (meta["cflags"], helper_meta["cflags"]):
        assert "-mavx2" in flags and not any("avx512" in f for f in flags), flags
    np.testing.assert_allclose(m(a), braze.reference.run(b.module, a), rtol=1e-5)
    m.save(tmp_path / "art")
    saved = json.loads((tmp_path / "art" / "meta.json").read_text())["isa"]
    assert saved["name"] == "avx2" and not any(f.startswith("avx512") for f in saved["features"])
    # the host's best level in the same process: a second helper build, loaded beside the first
    best = braze.compile(b.module, target="cpu", options={"cache_dir": str(tmp_path / "cache")})
    assert best._native.isa == I.host_isa().name
    np.testing.assert_allclose(best(a), m(a), rtol=1e-5)
    # each artifact runs its own helper's kernels, whichever was loaded first (a helper of one name
    # for every level ran the first one's for both: other bits than the model it was saved from)
    best.save(tmp_path / "best")
    np.testing.assert_array_equal(braze.load(tmp_path / "best")(a), best(a))
    np.testing.assert_array_equal(braze.load(tmp_path / "art")(a), m(a))
    # the tuning database measures this host's kernels: a lower level keeps the default rules
    # (the AVX2 helper's own default rules, named whatever the level's host)
    assert ("mode" not in m.module.tuning) == (best._native.isa != "avx2") and best.module.tuning["mode"] == "cached"
    assert m.module.tuning["rules"] == "avx2"


@pytest.mark.skipif(not X86, reason="x86 host")
def test_a_cpu_level_the_host_lacks_or_no_level_is_an_error(monkeypatch, fresh_detection):
    from braze.target import TargetError, parse_target
    with pytest.raises(TargetError, match="'avx1024' is not an instruction-set level"):
        parse_target("cpu-x86:avx1024")
    monkeypatch.setattr(I, "_cpuinfo_flags", lambda: {"sse", "sse2", "sse3", "sse4_1", "sse4_2"})
    with pytest.raises(TargetError, match="has no avx512; its best level is sse") as e:
        parse_target("cpu-x86:avx512")
    assert "cpu-x86:sse" in str(e.value)
    assert parse_target("cpu-x86:sse").name == "sse"
    assert parse_target("cpu") == parse_target(None) == I.host_isa() and I.host_isa().name == "sse"
