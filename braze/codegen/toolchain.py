"""The C compiler braze runs: which one (``$CC``, else cc, else gcc) and what it says it is.

Below both its users: ISA detection (``codegen.isa``) probes it, and the compile driver
(``runtime.compiler``) runs it and keys its cache by its version.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess

from ..errors import MissingDependencyError


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
