"""C compiler driver with a content-addressed, process-safe cache of shared libraries.

``compile_shared(source, name=...)`` returns the path of a ``.so`` built from
``source``. The cache key is the sha256 of the source, every compiler flag
(ISA flags included), the compiler command and its ``--version`` output, the
braze version and the bundled headers; entries live under ``BRAZE_CACHE_DIR``
(default ``~/.cache/braze``) as ``<dir>/<key[:2]>/<key>/{lib.so, source.c, meta.json}``.

Concurrency: a process that misses takes an exclusive ``fcntl.flock`` on
``<dir>/<key[:2]>/<key>.lock``, looks again (another process may have built
the entry meanwhile), compiles into a temporary file in the entry directory
and ``os.replace``s it onto ``lib.so`` (atomic; a library already mapped by
another process keeps its old inode). ``meta.json`` holds the sha256 of the
library and is written last, so an entry is complete exactly when meta.json
exists and matches; a corrupt or truncated ``lib.so`` fails that check and is
rebuilt.

Flags: ``-O3 -fPIC -shared -fopenmp -std=gnu11 -ffp-contract=off
-fno-math-errno`` plus the ISA flags. Not ``-ffast-math``: it assumes no NaN
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
instructions.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import BrazeError, MissingDependencyError

BASE_CFLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-std=gnu11",
               "-ffp-contract=off", "-fno-math-errno")

_STATS = {"native_compiles": 0, "cache_hits": 0}
_VERIFIED: dict[str, tuple] = {}  # lib.so path -> (ino, size, mtime_ns) verified in this process


def stats() -> dict:
    """Counters for this process: native_compiles (compiler runs), cache_hits."""
    return dict(_STATS)


def reset_stats() -> None:
    for k in _STATS:
        _STATS[k] = 0


# --------------------------------------------------------------------------- compiler


def find_compiler() -> list[str]:
    """The C compiler command: ``$CC`` (may hold arguments, e.g. 'ccache gcc'), else cc, else gcc."""
    env = os.environ.get("CC", "").strip()
    if env:
        cmd = shlex.split(env)
        exe = shutil.which(cmd[0])
        if exe is None:
            raise MissingDependencyError(
                f"no C compiler found: CC={env!r} does not name an executable",
                hint="install gcc (apt-get install gcc) or set CC to a C compiler")
        return [exe, *cmd[1:]]
    for cand in ("cc", "gcc"):
        exe = shutil.which(cand)
        if exe:
            return [exe]
    raise MissingDependencyError(
        "no C compiler found; install gcc (apt-get install gcc) or set CC",
        hint="braze compiles models to native code and needs a C compiler with OpenMP (gcc)")


@functools.lru_cache(maxsize=None)
def compiler_version(cc: tuple[str, ...]) -> str:
    try:
        r = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MissingDependencyError(f"the C compiler {' '.join(cc)!r} does not run ({e})",
                                     hint="install gcc (apt-get install gcc) or set CC") from None
    if r.returncode != 0:
        raise MissingDependencyError(
            f"the C compiler {' '.join(cc)!r} fails on --version: {r.stderr.strip()[:500]}",
            hint="install gcc (apt-get install gcc) or set CC")
    return r.stdout.strip()


def cache_dir() -> Path:
    d = os.environ.get("BRAZE_CACHE_DIR", "").strip()
    return Path(d).expanduser().resolve() if d else Path.home() / ".cache" / "braze"


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


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _entry_ok(entry: Path) -> bool:
    """True when the entry is complete: meta.json present and lib.so matches its hash."""
    so, meta_p = entry / "lib.so", entry / "meta.json"
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
        ok = _sha256_file(so) == meta.get("so_sha256")
    except OSError:
        return False
    if ok:
        _VERIFIED[str(so)] = ident
    return ok


@contextlib.contextmanager
def _locked(lock_path: Path):
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
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
    """All compile flags for the detected ISA (without -I/-L/-l/-o)."""
    from ..codegen.isa import detect_isa
    cc = find_compiler()
    return [*BASE_CFLAGS, *detect_isa(cc).cflags, *extra_cflags]


def compile_shared(source: str, *, name: str, extra_cflags=(), include_dirs=(),
                   library_dirs=(), libraries=(), rpaths=(), force: bool = False) -> Path:
    """Compile C ``source`` to a shared library (cached by content) and return its path.

    ``name`` labels the library in messages and meta.json. ``braze/codegen/include``
    (braze_abi.h, braze_vec.h) is always on the include path. ``force`` rebuilds
    even when a valid cache entry exists (used when a cached library fails to load).
    Raises MissingDependencyError without a C compiler, BrazeError on a compile
    error (naming the kept source file).
    """
    from .. import __version__
    from ..codegen.isa import detect_isa

    cc = find_compiler()
    version = compiler_version(tuple(cc))
    isa = detect_isa(cc)
    inc = [str(_include_dir()), *(str(p) for p in include_dirs)]
    cflags = [*BASE_CFLAGS, *isa.cflags, *extra_cflags]
    link = ([f"-L{d}" for d in library_dirs] + [f"-l{lib}" for lib in libraries]
            + [f"-Wl,-rpath,{r}" for r in rpaths] + ["-lm"])

    h = hashlib.sha256()
    for part in (source, "\0".join(cc), "\0".join(cflags), "\0".join(inc), "\0".join(link),
                 version, __version__, _headers_digest(_include_dir())):
        h.update(part.encode("utf-8", "surrogateescape"))
        h.update(b"\0\1\0")
    key = h.hexdigest()

    root = cache_dir()
    shard = root / key[:2]
    entry = shard / key
    so = entry / "lib.so"
    if not force and _entry_ok(entry):
        _STATS["cache_hits"] += 1
        return so

    try:
        entry.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BrazeError(f"cannot create the compile cache directory {entry} ({e})",
                         hint="set BRAZE_CACHE_DIR to a writable directory") from None

    with _locked(shard / f"{key}.lock"):
        if not force and _entry_ok(entry):
            _STATS["cache_hits"] += 1
            return so
        src_path = entry / "source.c"
        _write_atomic(src_path, source)
        with contextlib.suppress(FileNotFoundError):
            (entry / "meta.json").unlink()  # the entry is incomplete until meta.json is back
        fd, tmp = tempfile.mkstemp(dir=entry, prefix=".lib.", suffix=".so.tmp")
        os.close(fd)
        try:
            cmd = [*cc, *cflags, *(f"-I{d}" for d in inc), "-o", tmp, str(src_path), *link]
            t0 = time.perf_counter()
            _STATS["native_compiles"] += 1
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
            seconds = time.perf_counter() - t0
            log = entry / "compile.log"
            if r.returncode != 0:
                _write_atomic(log, shlex.join(cmd) + "\n\n" + r.stderr)
                raise BrazeError(
                    f"the C compiler failed on {name!r} (exit {r.returncode}):\n"
                    f"{_first_errors(r.stderr)}",
                    where=f"generated source kept at {src_path} (full log: {log})",
                    hint="this is a braze bug in code generation; please report it with the source file")
            with contextlib.suppress(FileNotFoundError):
                log.unlink()
            digest = _sha256_file(Path(tmp))
            size = os.path.getsize(tmp)
            os.chmod(tmp, 0o755)
            os.replace(tmp, so)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        meta = {
            "name": name, "key": key, "so_sha256": digest, "so_size": size,
            "compiler": cc, "compiler_version": version.splitlines()[0] if version else "",
            "cflags": cflags, "include_dirs": inc, "link": link, "isa": isa.name,
            "braze_version": __version__, "compile_seconds": round(seconds, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _write_atomic(entry / "meta.json", json.dumps(meta, indent=1))
        st = so.stat()
        _VERIFIED[str(so)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return so
