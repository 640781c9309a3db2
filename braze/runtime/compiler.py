"""C compiler driver with a content-addressed, process-safe cache of shared libraries.

``compile_shared(source, name=...)`` returns the path of a ``.so`` built from
``source``. The cache key is the sha256 of the source, every compiler flag
(ISA flags included), the compiler command and its ``--version`` output, the
braze version and the bundled headers; entries live under ``BRAZE_CACHE_DIR``
(default ``~/.cache/braze``) as ``<dir>/<key[:2]>/<key>/{lib.so, source.c, meta.json}``
(``lib.so``, or the ``filename`` the caller names: the oneDNN helper's ``libbraze_dnnl.so``).

Concurrency: a process that misses takes an exclusive ``fcntl.flock`` on
``<dir>/<key[:2]>/<key>.lock``, looks again (another process may have built
the entry meanwhile), compiles into a temporary file in the entry directory
and ``os.replace``s it onto ``lib.so`` (atomic; a library already mapped by
another process keeps its old inode). ``meta.json`` holds the sha256 of the
library and is written last, so an entry is complete exactly when meta.json
exists and matches; a corrupt or truncated ``lib.so``, a garbage meta.json,
or a directory where one of the entry's files belongs fails that check and is
rebuilt (or, when it cannot be removed, is a BrazeError naming it).

A cache braze cannot write (read-only mount, another user's directory) is
still used for the entries it holds: a valid entry is read without taking
the lock. A missing entry is then built in a private per-user cache under
the temp directory (``braze-cache-<uid>``, mode 0700), with one BrazeWarning
that says to set ``BRAZE_CACHE_DIR``; if that fails too, a BrazeError does.
The cache's root is passed explicitly (``cache_dir=``; braze.compile passes
its Options' one), or read from ``BRAZE_CACHE_DIR``; braze never sets it.

Flags: ``-O3 -fPIC -shared -fopenmp -std=gnu11 -ffp-contract=off
-fno-math-errno -Werror=implicit-function-declaration`` plus the ISA flags. Not ``-ffast-math``: it assumes no NaN
or infinity (attention masks use -inf; isnan checks vanish), reassociates
reductions so results differ between ISAs, and, linked into a shared
library, its crtfastmath.o sets flush-to-zero/denormals-are-zero in the MXCSR
of the whole Python process when the library loads, changing numpy's and
torch's results too. ``-ffp-contract=off``: the C compiler never fuses a*b+c
into an FMA on its own. Where it did, it fused one evaluation of an
expression and not another (a stitch kernel's mean pass and its normalize
pass both compute x*y; x*y - mean was not 0 for a constant row). Fusion is the
code generator's choice: the math in braze_vmath.h calls bz_fmaf/bz_vfma
explicitly, identically in its vector and scalar forms; kernel expressions
round every operation, as the reference does. ``-fno-math-errno`` only stops
libm calls setting errno, which lets sqrt and friends become single
instructions. With gcc, a generated model's system headers come precompiled
(``-include`` of runtime/pch.py's header): the same library, 0.3 s less a compile.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import log as _logging
from ..codegen.toolchain import compiler_version, find_compiler
from ..errors import BrazeError, BrazeWarning
from . import pch
from .digest import sha256_file
from .threads import usable_cpus

_log = _logging.get("cache")

# an undeclared function is an error, not an implicit int f(...): called that way, a float
# argument travels as a double and the callee reads garbage
BASE_CFLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-std=gnu11",
               "-ffp-contract=off", "-fno-math-errno", "-Werror=implicit-function-declaration")

_STATS = {"native_compiles": 0, "cache_hits": 0}
_VERIFIED: dict[str, tuple] = {}  # lib.so path -> (ino, size, mtime_ns) verified in this process


def stats() -> dict:
    """Counters for this process: native_compiles (compiler runs), cache_hits."""
    return dict(_STATS)


def reset_stats() -> None:
    for k in _STATS:
        _STATS[k] = 0


def resolve_cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The compile cache's root: ``explicit``, else ``BRAZE_CACHE_DIR``, else ``~/.cache/braze``."""
    d = str(explicit).strip() if explicit is not None else os.environ.get("BRAZE_CACHE_DIR", "").strip()
    return Path(d).expanduser().resolve() if d else Path.home() / ".cache" / "braze"


cache_dir = resolve_cache_dir


def _include_dir() -> Path:
    from ..codegen import INCLUDE_DIR
    return Path(INCLUDE_DIR)


@functools.lru_cache(maxsize=None)
def _headers_digest(include_dir: Path) -> str:
    h = hashlib.sha256()
    if include_dir.is_dir():
        for p in sorted(include_dir.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(include_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _entry_ok(entry: Path, filename: str = "lib.so") -> bool:
    """True when the entry is complete: meta.json present and the library matches its hash."""
    so, meta_p = entry / filename, entry / "meta.json"
    try:
        meta = json.loads(meta_p.read_text())
        st = so.stat()
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or st.st_size != meta.get("so_size"):
        return False
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(str(so)) == ident:
        return True
    try:
        ok = sha256_file(so) == meta.get("so_sha256")
    except OSError:
        return False
    if ok:
        _VERIFIED[str(so)] = ident
    return ok


class _LockError(Exception):
    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def _locked(lock_path: Path):
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise _LockError(e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_atomic(path: Path, data: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _first_errors(stderr: str, n: int = 20) -> str:
    lines = stderr.splitlines()
    idx = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), 0)
    start = max(0, idx - 2)
    out = lines[start:start + n]
    if len(lines) > start + n:
        out.append(f"... ({len(lines) - start - n} more lines)")
    return "\n".join("    " + ln for ln in out)


# --------------------------------------------------------------------------- compile


def compile_flags(extra_cflags=()) -> list[str]:
    """All compile flags for the host's best ISA (without -I/-L/-l/-o)."""
    from ..codegen.isa import host_isa
    cc = find_compiler()
    return [*BASE_CFLAGS, *host_isa(cc).cflags, *extra_cflags]


def compile_shared(source: str, *, name: str, extra_cflags=(), include_dirs=(),
                   library_dirs=(), libraries=(), rpaths=(), link_inputs=(), force: bool = False,
                   cache_dir: str | os.PathLike | None = None, filename: str = "lib.so",
                   counters: dict | None = None, log_channel: str = "cache", units: int = 1,
                   isa=None) -> Path:
    """Compile C ``source`` to a shared library (cached by content) and return its path.

    ``name`` labels the library in messages and meta.json. ``braze/codegen/include``
    (braze_abi.h, braze_vec.h) is always on the include path. ``link_inputs``: files
    (shared libraries) put on the link line after the source, as they are; a library
    without a SONAME linked by its absolute path is recorded by that path, so the
    loader binds exactly that file. ``filename``: the library's name in its entry
    (another name is part of the key). ``counters``, ``log_channel``: where this call
    counts and logs its compile or hit (default: ``stats()`` and ``braze.cache``; a
    library that models link rather than braze loads keeps its own). ``force`` rebuilds
    even when a valid cache entry exists (used when a cached library fails to load).
    ``cache_dir``: the cache's root (default: ``BRAZE_CACHE_DIR``, else
    ``~/.cache/braze``); a cache braze cannot write is still read, and a missing
    entry is then built in a private per-user cache (one BrazeWarning).
    ``units``: how many translation units the source can be compiled as
    (``BRAZE_UNIT``/``BRAZE_UNITS``, codegen/c_kernel.py's UNITS_C); a large source is
    compiled as up to that many, in parallel on the CPUs this process may use.
    ``isa``: the ISA to compile for instead of the host's best (a CUDA target's host code is
    ``level_isa("scalar")``: it runs on another machine's CPU).
    Raises MissingDependencyError without a C compiler, BrazeError on a compile
    error (naming the kept source file).
    """
    from .. import __version__
    from ..codegen.isa import host_isa

    cc = find_compiler()
    version = compiler_version(tuple(cc))
    isa = host_isa(cc) if isa is None else isa
    inc = [str(_include_dir()), *(str(p) for p in include_dirs)]
    cflags = [*BASE_CFLAGS, *isa.cflags, *extra_cflags]
    link = ([str(p) for p in link_inputs] + [f"-L{d}" for d in library_dirs] + [f"-l{lib}" for lib in libraries]
            + [f"-Wl,-rpath,{r}" for r in rpaths] + [*isa.ldlibs, "-lm"])

    h = hashlib.sha256()
    for part in (source, "\0".join(cc), "\0".join(cflags), "\0".join(inc), "\0".join(link),
                 version, __version__, _headers_digest(_include_dir()),
                 *([filename] if filename != "lib.so" else [])):
        h.update(part.encode("utf-8", "surrogateescape"))
        h.update(b"\0\1\0")
    key = h.hexdigest()
    job = _Job(source, name, key, cc, version, cflags, inc, link, isa.name, __version__, filename,
               _STATS if counters is None else counters, _logging.get(log_channel), units)

    root = resolve_cache_dir(cache_dir)
    if not force and (so := _lookup(root, key, filename)) is not None:
        return _hit(job, so)
    try:
        return _build(root, job, force)
    except _NotWritable as e:
        reason = e.reason
    private = private_cache_dir()
    if private == root:
        raise BrazeError(f"cannot write the compile cache {root} ({reason})",
                         hint="set BRAZE_CACHE_DIR to a writable directory")
    problem = _private_dir_problem(private)
    if problem:
        raise BrazeError(f"cannot write the compile cache {root} ({reason}), and the private fallback "
                         f"{private} {problem}", hint="set BRAZE_CACHE_DIR to a writable directory")
    warnings.warn(BrazeWarning(
        f"braze cannot write its compile cache {root} ({reason}); compiled libraries go to "
        f"{private} instead. Set BRAZE_CACHE_DIR to a writable directory to choose the cache."),
        stacklevel=3)
    _log.info("cache %s is not writable (%s); using %s", root, reason, private)
    if not force and (so := _lookup(private, key, filename)) is not None:
        return _hit(job, so)
    try:
        return _build(private, job, force)
    except _NotWritable as e:
        raise BrazeError(f"cannot write the compile cache {root} ({reason}), nor the private "
                         f"fallback {private} ({e.reason})", hint="set BRAZE_CACHE_DIR to a writable directory") from None


class _NotWritable(Exception):
    """The cache directory refuses writes (permissions, read-only file system)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


@dataclass(frozen=True)
class _Job:
    source: str
    name: str
    key: str
    cc: list
    version: str
    cflags: list
    inc: list
    link: list
    isa: str
    braze_version: str
    filename: str
    counters: dict
    log: object  # logging.Logger
    units: int = 1


def private_cache_dir() -> Path:
    """The per-user fallback cache under the temp directory (used when the cache is read-only)."""
    return Path(tempfile.gettempdir()) / f"braze-cache-{os.getuid()}"


def _private_dir_problem(d: Path) -> str | None:
    """Create the private cache (mode 0700); what is wrong with it, or None. One that another
    user could have planted (not ours, or writable by others) is refused."""
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return "is not a directory owned by this user and writable by it alone"
    return None


def _lookup(root: Path, key: str, filename: str = "lib.so") -> Path | None:
    """The entry's library when it is complete and valid (reads only: works on a read-only cache)."""
    entry = root / key[:2] / key
    return entry / filename if _entry_ok(entry, filename) else None


def _hit(job: _Job, so: Path) -> Path:
    job.counters["cache_hits"] += 1
    job.log.info("cache hit for %r: %s", job.name, so)
    return so


def _check_writable(e: OSError, what: Path) -> None:
    if e.errno in _READ_ONLY_ERRNOS:
        _log.debug("not writable: %s (%s)", what, e.strerror)
        raise _NotWritable(e.strerror or str(e)) from None


def _make_entry(entry: Path) -> None:
    try:
        entry.mkdir(parents=True, exist_ok=True)
        return
    except FileExistsError:  # a file where the entry directory should be: clear it, below
        pass
    except OSError as e:
        _check_writable(e, entry)
        raise BrazeError(f"cannot create the compile cache directory {entry} ({e.strerror or e})",
                         hint="set BRAZE_CACHE_DIR to a writable directory") from None
    try:
        entry.unlink()
        entry.mkdir()
    except OSError as e:
        _check_writable(e, entry)
        raise BrazeError(f"the compile cache entry {entry} is not a directory and cannot be replaced "
                         f"({e.strerror or e})", hint=f"delete {entry}; deleting the cache is always safe") from None


def _clear_corrupt(entry: Path, filename: str = "lib.so") -> None:
    """Remove directories (or other non-files) where the entry's files belong."""
    for fname in (filename, "meta.json", "source.c", "compile.log"):
        p = entry / fname
        if p.is_symlink() or not p.exists() or p.is_file():
            continue
        _log.info("cache entry %s: %s is not a file; removing it", entry, fname)
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        except OSError as e:
            _check_writable(e, p)
            raise BrazeError(f"the compile cache entry {entry} is corrupt ({fname} is not a file) and "
                             f"cannot be repaired ({e.strerror or e})",
                             hint=f"delete {entry}; deleting the cache is always safe") from None


def _build(root: Path, job: _Job, force: bool) -> Path:
    """Compile ``job`` into its entry under ``root`` (under the entry's lock); _NotWritable if it can't."""
    shard = root / job.key[:2]
    entry = shard / job.key
    so = entry / job.filename
    _make_entry(entry)
    lock = shard / f"{job.key}.lock"
    try:
        with _locked(lock):
            if not force and _entry_ok(entry, job.filename):
                return _hit(job, so)
            _clear_corrupt(entry, job.filename)
            try:
                _compile_into(entry, job)
            except OSError as e:
                _check_writable(e, entry)
                raise BrazeError(f"cannot write the compile cache entry {entry} ({e.strerror or e})",
                                 hint="free some space, or set BRAZE_CACHE_DIR to another directory") from None
    except _LockError as e:
        _check_writable(e.error, lock)
        raise BrazeError(f"cannot lock the compile cache entry ({e.error.strerror or e.error}): {lock}",
                         hint=f"delete {lock}; deleting the cache is always safe") from None
    return so


# the least C per translation unit worth a process of its own: each unit parses the headers again
UNIT_SOURCE_BYTES = 96 * 1024


def _unit_count(job: _Job) -> int:
    return max(1, min(job.units, usable_cpus()[0], len(job.source) // UNIT_SOURCE_BYTES))


def _run_compiler(cmds: list[list[str]]) -> tuple[int, str, list[str]]:
    """Run the commands in parallel: (the first failure's exit code or 0, its stderr, its command)."""
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
             for c in cmds]
    results = [(p.communicate()[1], p.returncode) for p in procs]
    for c, (err, rc) in zip(cmds, results):
        if rc != 0:
            return rc, err, c
    return 0, "", cmds[0]


def _compile_into(entry: Path, job: _Job) -> None:
    so = entry / job.filename
    src_path = entry / "source.c"
    _write_atomic(src_path, job.source)
    with contextlib.suppress(FileNotFoundError):
        (entry / "meta.json").unlink()  # the entry is incomplete until meta.json is back
    fd, tmp = tempfile.mkstemp(dir=entry, prefix=".lib.", suffix=".so.tmp")
    os.close(fd)
    units = _unit_count(job)
    objs = [f"{tmp}.{i}.o" for i in range(units)] if units > 1 else []
    try:
        inc = [f"-I{d}" for d in job.inc]
        pre = pch.prelude_args(entry.parent.parent, job.source, job.cc, job.version, job.cflags, job.inc)
        if units == 1:
            steps = [[[*job.cc, *job.cflags, *inc, *pre, "-o", tmp, str(src_path), *job.link]]]
        else:  # the units in parallel, then one link
            unit_flags = [f for f in job.cflags if f != "-shared"]
            steps = [[[*job.cc, *unit_flags, f"-DBRAZE_UNITS={units}", f"-DBRAZE_UNIT={i}", *inc, *pre, "-c", "-o",
                       o, str(src_path)] for i, o in enumerate(objs)],
                     [[*job.cc, "-shared", "-fopenmp", "-o", tmp, *objs, *job.link]]]
        job.log.info("cache miss for %r: running the C compiler into %s%s", job.name, entry,
                     f" ({units} translation units in parallel)" if units > 1 else "")
        t0 = time.perf_counter()
        job.counters["native_compiles"] += 1
        for cmds in steps:
            rc, stderr, cmd = _run_compiler(cmds)
            if rc:
                break
        seconds = time.perf_counter() - t0
        log = entry / "compile.log"
        if rc != 0:
            _write_atomic(log, shlex.join(cmd) + "\n\n" + stderr)
            raise BrazeError(
                f"the C compiler failed on {job.name!r} (exit {rc}):\n"
                f"{_first_errors(stderr)}",
                where=f"generated source kept at {src_path} (full log: {log})",
                hint="this is a braze bug in code generation; please report it with the source file")
        with contextlib.suppress(FileNotFoundError):
            log.unlink()
        digest = sha256_file(Path(tmp))
        size = os.path.getsize(tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, so)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        for o in objs:
            with contextlib.suppress(OSError):
                os.unlink(o)
    job.log.info("compiled %r in %.1f s", job.name, seconds)
    meta = {
        "name": job.name, "key": job.key, "so_sha256": digest, "so_size": size,
        "compiler": job.cc, "compiler_version": job.version.splitlines()[0] if job.version else "",
        "cflags": job.cflags, "include_dirs": job.inc, "link": job.link, "isa": job.isa,
        "braze_version": job.braze_version, "compile_seconds": round(seconds, 3), "units": units,
        "precompiled_header": pre[1] if pre else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_atomic(entry / "meta.json", json.dumps(meta, indent=1))
    st = so.stat()
    _VERIFIED[str(so)] = (st.st_ino, st.st_size, st.st_mtime_ns)
