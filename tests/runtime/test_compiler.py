"""compile_shared: the content-hash cache, its robustness, concurrency and errors."""

import json
import multiprocessing as mp
import os
import re
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.errors import BrazeError, MissingDependencyError
from braze.ir.types import DType
from braze.runtime import NativeFunction, NativeLibrary, compile_shared, load_library
from braze.runtime import loader as L

from rt_kernels import ADD1_SRC, needs_cc

pytestmark = needs_cc


def _add1(path):
    return NativeFunction(NativeLibrary(path), "braze_add1", [("f32", None)], [("f32", None)])


def _entry_files(path: Path):
    return sorted(os.listdir(path.parent))


def test_compile_then_cache_hit(braze_cache):
    p1 = compile_shared(ADD1_SRC, name="add1")
    assert braze.stats() == {"native_compiles": 1, "cache_hits": 0}
    p2 = compile_shared(ADD1_SRC, name="add1")
    assert p2 == p1
    assert braze.stats() == {"native_compiles": 1, "cache_hits": 1}
    # layout <dir>/<key[:2]>/<key>/{lib.so, source.c, meta.json}
    key = p1.parent.name
    assert p1.name == "lib.so" and p1.parent.parent == braze_cache / key[:2]
    assert _entry_files(p1) == ["lib.so", "meta.json", "source.c"]
    assert (p1.parent / "source.c").read_text() == ADD1_SRC
    meta = json.loads((p1.parent / "meta.json").read_text())
    assert meta["name"] == "add1" and meta["key"] == key and len(meta["so_sha256"]) == 64
    np.testing.assert_array_equal(_add1(p1)(np.zeros(3, np.float32)), np.ones(3, np.float32))


def test_key_covers_source_and_flags(monkeypatch):
    p1 = compile_shared(ADD1_SRC, name="add1")
    p2 = compile_shared(ADD1_SRC + "\n", name="add1")
    p3 = compile_shared(ADD1_SRC, name="add1", extra_cflags=["-DBRAZE_TEST_FLAG=1"])
    from braze.codegen.isa import isa_at
    p4 = compile_shared(ADD1_SRC, name="add1", isa=isa_at("scalar"))
    assert len({p1, p2, p3, p4}) == 4
    assert braze.stats()["native_compiles"] == 4


def test_truncated_so_is_rebuilt():
    p = compile_shared(ADD1_SRC, name="add1")
    data = p.read_bytes()
    p.write_bytes(data[:100])  # truncated in place
    p2 = compile_shared(ADD1_SRC, name="add1")
    assert p2 == p and p.stat().st_size == len(data)
    assert braze.stats() == {"native_compiles": 2, "cache_hits": 0}
    np.testing.assert_array_equal(_add1(p2)(np.zeros(2, np.float32)), [1, 1])


def test_same_size_garbage_so_is_rebuilt():
    p = compile_shared(ADD1_SRC, name="add1")
    size = p.stat().st_size
    tmp = p.with_name("garbage")
    tmp.write_bytes(b"\0" * size)
    os.replace(tmp, p)
    p2 = compile_shared(ADD1_SRC, name="add1")
    assert braze.stats()["native_compiles"] == 2
    np.testing.assert_array_equal(_add1(p2)(np.zeros(2, np.float32)), [1, 1])


def test_missing_meta_is_rebuilt():
    p = compile_shared(ADD1_SRC, name="add1")
    (p.parent / "meta.json").unlink()
    compile_shared(ADD1_SRC, name="add1")
    assert braze.stats()["native_compiles"] == 2
    assert _entry_files(p) == ["lib.so", "meta.json", "source.c"]


def test_load_library_rebuilds_unloadable_entry():
    # a corrupt library whose meta.json matches it (hash check passes) fails dlopen:
    # load_library rebuilds it instead of crashing
    p = compile_shared(ADD1_SRC, name="add1")
    garbage = b"not an ELF file" * 10
    p.write_bytes(garbage)
    meta_p = p.parent / "meta.json"
    meta = json.loads(meta_p.read_text())
    import hashlib
    meta.update(so_sha256=hashlib.sha256(garbage).hexdigest(), so_size=len(garbage))
    meta_p.write_text(json.dumps(meta))
    with pytest.raises(BrazeError, match="cannot load"):
        NativeLibrary(compile_shared(ADD1_SRC, name="add1"))
    lib = load_library(ADD1_SRC, name="add1")
    f = NativeFunction(lib, "braze_add1", [("f32", None)], [("f32", None)])
    np.testing.assert_array_equal(f(np.zeros(2, np.float32)), [1, 1])


def _worker(cache_dir, barrier, queue):
    os.environ["BRAZE_CACHE_DIR"] = cache_dir
    os.environ.pop("BRAZE_ISA", None)
    try:
        from braze.runtime import compile_shared as cs, stats
        barrier.wait(timeout=60)
        p = cs(ADD1_SRC, name="add1-concurrent")
        f = _add1(p)
        y = f(np.arange(5, dtype=np.float32))
        queue.put((str(p), y.tolist(), stats()))
    except BaseException as e:  # report, don't hang the parent
        queue.put(("error", repr(e), {}))


def test_two_processes_compile_same_source(braze_cache):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(braze_cache), barrier, queue)) for _ in range(2)]
    for pr in procs:
        pr.start()
    results = [queue.get(timeout=120) for _ in procs]
    for pr in procs:
        pr.join(timeout=60)
        assert pr.exitcode == 0
    for path, y, _ in results:
        assert path != "error", y
        assert y == [1, 2, 3, 4, 5]
    assert results[0][0] == results[1][0]
    # exactly one compiler run between them; the other waited on the lock and hit the cache
    assert sum(r[2]["native_compiles"] for r in results) == 1
    assert sum(r[2]["cache_hits"] for r in results) == 1
    libs = list(braze_cache.rglob("*.so"))
    assert len(libs) == 1
    assert _entry_files(libs[0]) == ["lib.so", "meta.json", "source.c"]
    leftovers = [p for p in braze_cache.rglob("*") if "tmp" in p.name]
    assert leftovers == []


def test_no_compiler(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(MissingDependencyError, match="no C compiler found") as ei:
        compile_shared(ADD1_SRC, name="add1")
    assert "apt-get install gcc" in str(ei.value)
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrazeError, match="no C compiler found; install gcc"):
        compile_shared(ADD1_SRC, name="add1")


def test_compile_error_names_source(braze_cache):
    bad = ADD1_SRC + "\nint broken(void) { return undeclared_thing; }\n"
    with pytest.raises(BrazeError) as ei:
        compile_shared(bad, name="broken")
    msg = str(ei.value)
    m = re.search(r"generated source kept at (\S+source\.c)", msg)
    assert m, msg
    src = Path(m.group(1))
    assert src.read_text() == bad
    assert "undeclared_thing" in msg and "error" in msg
    assert "'broken'" in msg
    entry = src.parent
    assert not (entry / "lib.so").exists()
    assert sorted(os.listdir(entry)) == ["compile.log", "source.c"]
    # fixed source compiles fine afterwards; the process keeps working
    assert compile_shared(ADD1_SRC, name="add1").exists()


def test_header_codes_match_python():
    from braze.codegen import INCLUDE_DIR
    text = (Path(INCLUDE_DIR) / "braze_abi.h").read_text()
    defines = dict(re.findall(r"#define (BRAZE_\w+) (\d+)", text))
    for i, d in enumerate(DType):
        assert int(defines[f"BRAZE_{d.name.upper()}"]) == i
    assert int(defines["BRAZE_NUM_DTYPES"]) == len(DType)
    for code, name in L.ERROR_NAMES.items():
        assert int(defines[f"BRAZE_ERR_{name.upper()}"]) == code
    assert int(defines["BRAZE_OK"]) == 0


def test_header_compiles_strict():
    # the header is warning-free under -Wall -Wextra -pedantic and usable from C++-free C11
    src = '#include "braze_abi.h"\nint32_t f(char *e, int32_t n) { return braze_fail(e, n, BRAZE_ERR_SHAPE, "x=%d", 3); }\n'
    p = compile_shared(src, name="header", extra_cflags=["-Wall", "-Wextra", "-Werror"])
    assert p.exists()


_DEP_SRC = "int braze_test_dep(int x) { return 3 * x + 1; }\n"
_USER_SRC = r"""
#include "braze_abi.h"
int braze_test_dep(int x);
BRAZE_EXPORT int braze_test_user(int x) { return braze_test_dep(x) + 1; }
"""


def test_a_library_linked_by_path_with_its_own_name_and_counters(braze_cache):
    """What the oneDNN helper uses: a dependency with its own file name and counters (not
    braze.stats(), which counts the libraries braze loads), linked into another by its path."""
    import ctypes
    counts = {"native_compiles": 0, "cache_hits": 0}
    dep = compile_shared(_DEP_SRC, name="dep", filename="libdep.so", counters=counts)
    assert dep.name == "libdep.so" and _entry_files(dep) == ["libdep.so", "meta.json", "source.c"]
    assert compile_shared(_DEP_SRC, name="dep", filename="libdep.so", counters=counts) == dep
    assert dep.parent != compile_shared(_DEP_SRC, name="dep").parent  # the name is in the key
    assert counts == {"native_compiles": 1, "cache_hits": 1}
    assert braze.stats() == {"native_compiles": 1, "cache_hits": 0}
    user = compile_shared(_USER_SRC, name="user", link_inputs=[str(dep)])
    assert ctypes.CDLL(str(user)).braze_test_user(2) == 8
    assert str(dep) in json.loads((user.parent / "meta.json").read_text())["link"]
    dep.unlink()  # a missing entry file is rebuilt, in place
    assert compile_shared(_DEP_SRC, name="dep", filename="libdep.so", counters=counts) == dep
    assert counts["native_compiles"] == 2 and dep.exists()


def test_a_large_source_compiles_as_units_in_parallel(monkeypatch):
    """A model's C built as 3 translation units (kernels split among them, the host code in unit
    0) gives the library built as one: the same results, bit for bit; meta.json says how."""
    from braze.runtime import compiler as C
    from braze.testing import build
    from braze.ops import tensor

    def model(b, x, w):
        h = b.gelu(b.matmul(x, w))
        return b.softmax(b.add(b.layer_norm(h, axis=-1), b.exp(b.neg(h))), axis=-1), b.reduce_sum(h, axes=(0,))

    from braze.ir.sym import Sym
    from braze.options import Options
    m, _ = build([tensor("f32", Sym("n"), 24), tensor("f32", 24, 40)], model)
    x = np.random.default_rng(0).standard_normal((7, 24)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((24, 40)).astype(np.float32)
    one = braze.compile(m)
    monkeypatch.setattr(C, "UNIT_SOURCE_BYTES", 1)
    monkeypatch.setattr(C, "usable_cpus", lambda: (3, "three CPUs"))
    split = braze.compile(m, options=Options(cache_dir=str(C.resolve_cache_dir()) + "-units"))
    assert json.loads((Path(split.library.path).parent / "meta.json").read_text())["units"] == 3
    assert json.loads((Path(one.library.path).parent / "meta.json").read_text())["units"] == 1
    for a, b in zip(one(x, w), split(x, w)):
        np.testing.assert_array_equal(a, b)
