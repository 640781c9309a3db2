"""Precompiled system headers for gcc.

A generated model's C opens with the same system headers: stdlib, string and omp, then, through
braze_vec.h, stdint, math, float and, with SSE or AVX flags, immintrin. gcc read them again for
every library: a small model's compile took 0.85 s here, 0.52-0.69 s with them precompiled, and
the library's bytes were the same. ``prelude_args`` gives ``["-include", .../braze_sys.h]`` for
a source that opens with ``PRELUDE`` when gcc has, or can build, a precompiled copy of those
headers for the same flags (``braze_sys.h.gch`` beside it, in the compile cache under ``pch/``).
Other sources (the oneDNN helper defines _GNU_SOURCE before its first include, which headers
read first would not see) and other compilers get ``[]``, as does a failed build (remembered
beside it, so not tried again): the compile then reads the headers itself. The library's cache key leaves this out, since the library is the
same; ``meta.json`` records the header used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from .. import log as _logging

_log = _logging.get("cache")

# how generated model sources open (codegen/host.py): headers read before these lines see no
# macro of the source's own
PRELUDE = "#include <stdlib.h>\n#include <string.h>\n#include <omp.h>\n"
HEADERS = ("stdlib.h", "string.h", "omp.h", "stdint.h", "math.h", "float.h")
X86_HEADERS = ("immintrin.h",)  # braze_vec.h includes it when the flags enable SSE or AVX
HEADER = "braze_sys.h"


def pch_root(cache_root: Path) -> Path:
    """Where the precompiled headers of a compile cache live (tests share one across caches)."""
    return Path(cache_root) / "pch"


def _is_gcc(cc: list, version: str) -> bool:
    # ccache and other wrappers would compile without the precompiled header or refuse it
    v = version.lower()
    return len(cc) == 1 and "clang" not in v and ("gcc" in v or "free software foundation" in v)


def prelude_args(cache_root: Path, source: str, cc: list, version: str, cflags: list, inc: list) -> list[str]:
    """``["-include", header]`` with its precompiled copy ready for these flags, or ``[]``."""
    if not source.startswith(PRELUDE) or not _is_gcc(cc, version):
        return []
    flags = [f for f in cflags if f != "-shared"]
    x86 = any(f.startswith(("-msse", "-mavx")) for f in flags)
    text = "".join(f"#include <{h}>\n" for h in HEADERS + (X86_HEADERS if x86 else ()))
    key = hashlib.sha256("\0".join([*cc, version, *flags, *inc, text]).encode()).hexdigest()[:24]
    d = pch_root(cache_root) / key
    header, gch, failed = d / HEADER, d / (HEADER + ".gch"), d / "failed"
    if gch.is_file() and header.is_file():
        return ["-include", str(header)]
    if failed.exists():  # tried for these flags before: not again at every compile
        return []
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not header.is_file():
            _replace_with(header, lambda p: Path(p).write_text(text))
        _replace_with(gch, lambda p: subprocess.run(
            [*cc, *flags, *(f"-I{i}" for i in inc), "-x", "c-header", str(header), "-o", p],
            check=True, capture_output=True, timeout=300))
    except (OSError, subprocess.SubprocessError) as e:
        _log.debug("no precompiled headers in %s: %s", d, e)
        with contextlib.suppress(OSError):
            failed.touch()
        return []
    _log.info("precompiled the system headers into %s", gch)
    return ["-include", str(header)]


def _replace_with(path: Path, write) -> None:
    """``write(tmp)`` then rename tmp to ``path``: a reader sees the whole file or none."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # as readable as the libraries: a cache may be shared
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


__all__ = ["HEADER", "PRELUDE", "pch_root", "prelude_args"]
