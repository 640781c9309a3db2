"""Precompiled system headers (braze/runtime/pch.py): built once per compiler and flags, used for
generated model sources only, the same library bytes as without them, and any failure leaves the
compile as it was."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from braze.codegen.toolchain import compiler_version, find_compiler
from braze.runtime import compiler, pch

CC = find_compiler()
VERSION = compiler_version(tuple(CC))
pytestmark = pytest.mark.skipif(not pch._is_gcc(CC, VERSION), reason=f"the C compiler is not gcc: {VERSION[:60]}")

MODEL_SOURCE = pch.PRELUDE + """
#include "braze_vec.h"
int bz_add(const float *a, float *b, int n) {
    for (int i = 0; i < n; i++) b[i] = a[i] + 1.0f;
    return 0;
}
"""


@pytest.fixture
def own_root(monkeypatch, tmp_path):
    """This test's cache, its precompiled headers in it (not the session's shared ones)."""
    monkeypatch.setattr(pch, "pch_root", lambda root: Path(root) / "pch")
    return tmp_path


def _flags():
    from braze.codegen.isa import host_isa
    return [*compiler.BASE_CFLAGS, *host_isa(CC).cflags]


def test_built_once_per_flags_and_reused(own_root):
    inc = [str(compiler._include_dir())]
    args = pch.prelude_args(own_root, MODEL_SOURCE, CC, VERSION, _flags(), inc)
    assert args[0] == "-include" and Path(args[1]).name == pch.HEADER
    gch = Path(args[1] + ".gch")
    first = gch.stat().st_mtime_ns
    assert pch.prelude_args(own_root, MODEL_SOURCE, CC, VERSION, _flags(), inc) == args
    assert gch.stat().st_mtime_ns == first  # not built again
    other = pch.prelude_args(own_root, MODEL_SOURCE, CC, VERSION, [*_flags(), "-DBZ_OTHER=1"], inc)
    assert other and other != args  # other flags, another build
    assert not [p for p in (own_root / "pch").rglob(".*.tmp")]  # no half-written file left


@pytest.mark.parametrize("source", ["#define _GNU_SOURCE\n" + MODEL_SOURCE, "int f(void) { return 1; }\n"])
def test_only_sources_that_open_with_the_prelude(own_root, source):
    """The oneDNN helper defines _GNU_SOURCE before its first include: headers read first would
    not see it."""
    assert pch.prelude_args(own_root, source, CC, VERSION, _flags(), []) == []
    assert not (own_root / "pch").exists()


def test_other_compilers_and_wrappers_get_none(own_root):
    assert pch.prelude_args(own_root, MODEL_SOURCE, ["ccache", *CC], VERSION, _flags(), []) == []
    assert pch.prelude_args(own_root, MODEL_SOURCE, ["/usr/bin/clang"], "clang version 17", _flags(), []) == []


def test_a_failed_build_leaves_the_compile_as_it_was(own_root, monkeypatch):
    """No precompiled header, and the failure is remembered: the next compile does not run gcc again."""
    bad = [*_flags(), "-mno-such-flag"]
    assert pch.prelude_args(own_root, MODEL_SOURCE, CC, VERSION, bad, []) == []
    assert not list((own_root / "pch").rglob("*.gch")) and list((own_root / "pch").rglob("failed"))
    monkeypatch.setattr(pch.subprocess, "run", lambda *a, **k: pytest.fail("gcc ran again"))
    assert pch.prelude_args(own_root, MODEL_SOURCE, CC, VERSION, bad, []) == []


def test_the_library_is_the_same_bytes(own_root):
    """compile_shared with the precompiled headers, then gcc by hand without them, on the same
    source and flags: the same library."""
    so = compiler.compile_shared(MODEL_SOURCE, name="pch_test", cache_dir=own_root)
    meta = json.loads((so.parent / "meta.json").read_text())
    assert meta["precompiled_header"] and Path(meta["precompiled_header"]).is_file()
    plain = own_root / "plain.so"
    subprocess.run([*meta["compiler"], *meta["cflags"], *(f"-I{d}" for d in meta["include_dirs"]), "-o", str(plain),
                    str(so.parent / "source.c"), *meta["link"]], check=True)
    assert plain.read_bytes() == so.read_bytes()
