"""Compile options: one small frozen object carries them through the pipeline (no globals).

``Options.from_env()`` reads the environment once:

* ``BRAZE_DEBUG``: 0 (default); >= 1 verifies the IR after every pass and shows
  braze's INFO log (compile start, cache hit or miss, timings) on stderr; >= 2
  also the fusion report and rewrite-rule hit counts; >= 3 compiles per-kernel
  counters (time, bytes, flops) into the library.
* ``BRAZE_DUMP=<dir>``: write every stage's text there (``NN_<pass>.braze``,
  ``NN_<stage>.loop``, ``NN_emit.c`` = ``model.c``), ``fusion.txt`` and the
  constants (braze/dump.py).
* ``BRAZE_CACHE_DIR``: where compiled libraries are cached (None: the runtime's
  default). braze.compile hands ``cache_dir`` to the C compiler driver
  explicitly; nothing sets the environment.
* ``BRAZE_THREADS``: threads for native code (None: the runtime decides).

README.md's table lists every environment variable braze reads.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping


def _int_env(env, key, default):
    v = (env.get(key) or "").strip()
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        from .errors import BrazeError
        raise BrazeError(f"{key}={v!r} is not an integer", hint=f"unset {key} or give it a number") from None


@dataclass(frozen=True)
class Options:
    threads: int | None = None
    debug: int = 0
    dump_dir: str | None = None
    cache_dir: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> "Options":
        env = os.environ if env is None else env
        opts = cls(threads=_int_env(env, "BRAZE_THREADS", None),
                   debug=_int_env(env, "BRAZE_DEBUG", 0),
                   dump_dir=(env.get("BRAZE_DUMP") or "").strip() or None,
                   cache_dir=(env.get("BRAZE_CACHE_DIR") or "").strip() or None)
        return opts.replace(**overrides) if overrides else opts

    def replace(self, **changes) -> "Options":
        return dataclasses.replace(self, **changes)


__all__ = ["Options"]
