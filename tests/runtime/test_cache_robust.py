"""The compile cache under a read-only directory and with corrupted entries: used, repaired or reported.

Read-only directories are made with chmod. As root, chmod does not stop
writes (detected by trying to write), so there the same directories are made
read-only by refusing writes under them at the os level (os.open, os.mkdir,
...) with the PermissionError the kernel would give: the cache code runs
unchanged either way.
"""

import errno
import json
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.errors import BrazeError, BrazeWarning
from braze.runtime import NativeFunction, NativeLibrary, compile_shared, private_cache_dir

from rt_kernels import ADD1_SRC, needs_cc

pytestmark = needs_cc


@pytest.fixture
def cs(monkeypatch):
    """compile_shared(ADD1_SRC) into the cache at ``root`` (named by BRAZE_CACHE_DIR, as a user would)."""
    def f(root, **kw):
        monkeypatch.setenv("BRAZE_CACHE_DIR", str(root))
        return compile_shared(ADD1_SRC, name="add1", **kw)
    return f


def _run_add1(path):
    f = NativeFunction(NativeLibrary(path), "braze_add1", [("f32", None)], [("f32", None)])
    np.testing.assert_array_equal(f(np.zeros(3, np.float32)), np.ones(3, np.float32))


def _chmod_stops_writes(tmp: Path) -> bool:
    probe = tmp / "probe"
    probe.mkdir()
    os.chmod(probe, 0o555)
    try:
        (probe / "f").write_text("x")
        return False  # root (or CAP_DAC_OVERRIDE): chmod is advisory
    except PermissionError:
        return True
    finally:
        os.chmod(probe, 0o755)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The private fallback cache lives under this test's tmp dir."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.fixture
def make_readonly(tmp_path, monkeypatch):
    """make_readonly(dir): writes under dir fail with EACCES from now on (chmod, or simulated as root)."""
    chmod_mode = _chmod_stops_writes(tmp_path)
    made: list[Path] = []
    ro_roots: list[str] = []

    def under(p) -> bool:
        try:
            s = os.path.abspath(os.fsdecode(p))
        except TypeError:  # a file descriptor
            return False
        return any(s == r or s.startswith(r + os.sep) for r in ro_roots)

    def deny(p):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(p))

    if not chmod_mode:
        real = {k: getattr(os, k) for k in ("open", "mkdir", "unlink", "remove", "rmdir", "replace", "rename",
                                            "chmod")}
        write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

        def fake_open(path, flags, mode=0o777, *, dir_fd=None):
            if dir_fd is None and flags & write_flags and under(path):
                deny(path)
            return real["open"](path, flags, mode, dir_fd=dir_fd)

        def fake_mkdir(path, mode=0o777, *, dir_fd=None):
            if dir_fd is None and under(path):
                if os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(path))
                deny(path)
            return real["mkdir"](path, mode, dir_fd=dir_fd)

        def guard(name):
            def f(path, *args, **kw):
                if kw.get("dir_fd") is None and (under(path) or (args and isinstance(args[0], (str, Path))
                                                                   and under(args[0]))):
                    deny(path)
                return real[name](path, *args, **kw)
            return f

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "mkdir", fake_mkdir)
        for name in ("unlink", "remove", "rmdir", "replace", "rename", "chmod"):
            monkeypatch.setattr(os, name, guard(name))

    def ro(d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        if chmod_mode:
            for dirpath, dirnames, _ in os.walk(d):
                made.append(Path(dirpath))
            for p in made:
                os.chmod(p, 0o555)
        else:
            ro_roots.append(os.path.abspath(d))
        return d

    ro.simulated = not chmod_mode
    yield ro
    for p in made:
        os.chmod(p, 0o755)
    ro_roots.clear()


def test_readonly_cache_with_the_entry_is_used_as_is(tmp_path, make_readonly, private_tmp, cs):
    root = tmp_path / "shared"
    p = cs(root)
    before = sorted(x.name for x in root.rglob("*"))
    make_readonly(root)
    braze.runtime.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback, no warning
        p2 = cs(root)
    assert p2 == p and braze.stats() == {"native_compiles": 0, "cache_hits": 1}
    assert sorted(x.name for x in root.rglob("*")) == before  # no lock file, nothing written
    assert not private_cache_dir().exists()
    _run_add1(p2)


def test_readonly_cache_without_the_entry_falls_back_with_one_warning(tmp_path, make_readonly, private_tmp, cs):
    root = make_readonly(tmp_path / "ro")
    with pytest.warns(BrazeWarning, match="BRAZE_CACHE_DIR") as rec:
        p = cs(root)
    assert len([w for w in rec if issubclass(w.category, BrazeWarning)]) == 1
    assert str(rec[0].message).count(str(root)) == 1 and str(private_cache_dir()) in str(rec[0].message)
    assert private_cache_dir() in p.parents and root not in p.parents
    assert (private_cache_dir().stat().st_mode & 0o777) == 0o700
    assert not list(root.iterdir())
    _run_add1(p)
    # the next compile of the same source hits the private cache
    braze.runtime.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cs(root) == p
    assert braze.stats() == {"native_compiles": 0, "cache_hits": 1}


def test_readonly_cache_with_an_incomplete_entry_falls_back(tmp_path, make_readonly, private_tmp, cs):
    # the entry's directory exists but meta.json is missing: this used to leak a PermissionError
    # from opening <key>.lock
    root = tmp_path / "ro"
    p = cs(root)
    (p.parent / "meta.json").unlink()
    make_readonly(root)
    with pytest.warns(BrazeWarning, match="cannot write its compile cache"):
        p2 = cs(root)
    assert private_cache_dir() in p2.parents
    _run_add1(p2)


def test_unwritable_fallback_is_a_clear_error(tmp_path, make_readonly, private_tmp, cs):
    root = make_readonly(tmp_path / "ro")
    make_readonly(private_tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an error, not a warning and then an error
        with pytest.raises(BrazeError, match="BRAZE_CACHE_DIR") as ei:
            cs(root)
    assert str(root) in str(ei.value) and str(private_cache_dir()) in str(ei.value)


def test_private_cache_owned_by_someone_else_is_refused(tmp_path, private_tmp, monkeypatch, cs):
    root = tmp_path / "ro"
    root.mkdir()
    (private_tmp / f"braze-cache-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(private_tmp / f"braze-cache-{os.getuid()}", 0o777)  # writable by anyone: not trusted
    from braze.runtime import compiler as C

    def refuse(*a, **k):
        raise C._NotWritable("test")
    monkeypatch.setattr(C, "_build", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BrazeError, match="owned by this user"):
            cs(root)


@pytest.mark.parametrize("damage", ["lib.so is a directory", "meta.json is a directory", "meta.json is garbage",
                                    "meta.json is a JSON list", "the entry is a file"])
def test_corrupted_entry_is_rebuilt(tmp_path, damage, cs):
    root = tmp_path / "c"
    p = cs(root)
    entry = p.parent
    if damage == "the entry is a file":
        import shutil
        shutil.rmtree(entry)
        entry.write_text("not a directory")
    else:
        fname = damage.split()[0]
        (entry / fname).unlink()
        if damage.endswith("directory"):
            (entry / fname).mkdir()
            (entry / fname / "junk").write_text("x")
        elif damage.endswith("garbage"):
            (entry / fname).write_bytes(b"\x00{not json")
        else:
            (entry / fname).write_text(json.dumps([1, 2, 3]))
    braze.runtime.reset_stats()
    p2 = cs(root)
    assert p2 == p and braze.stats() == {"native_compiles": 1, "cache_hits": 0}
    assert sorted(x.name for x in entry.iterdir()) == ["lib.so", "meta.json", "source.c"]
    assert all((entry / f).is_file() for f in ("lib.so", "meta.json", "source.c"))
    _run_add1(p2)


def test_forced_rebuild_clears_a_directory_in_place_of_the_source(tmp_path, cs):
    # the library is valid (a hit), but a rebuild (load_library after a failed dlopen) must not trip
    # over the directory where source.c belongs
    root = tmp_path / "c"
    p = cs(root)
    (p.parent / "source.c").unlink()
    (p.parent / "source.c").mkdir()
    braze.runtime.reset_stats()
    assert cs(root) == p
    assert braze.stats() == {"native_compiles": 0, "cache_hits": 1}
    p2 = cs(root, force=True)
    assert p2 == p and (p.parent / "source.c").read_text() == ADD1_SRC
    assert braze.stats() == {"native_compiles": 1, "cache_hits": 1}
    _run_add1(p2)


def test_corrupted_entry_that_cannot_be_repaired_is_reported(tmp_path, make_readonly, private_tmp, cs):
    # a directory in place of lib.so inside a read-only cache: braze falls back, and says so
    root = tmp_path / "c"
    p = cs(root)
    p.unlink()
    p.mkdir()
    make_readonly(root)
    with pytest.warns(BrazeWarning):
        p2 = cs(root)
    assert private_cache_dir() in p2.parents
    _run_add1(p2)


def test_cache_dir_argument_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "env"))
    p = compile_shared(ADD1_SRC, name="add1", cache_dir=tmp_path / "arg")
    assert (tmp_path / "arg") in p.parents and not (tmp_path / "env").exists()
