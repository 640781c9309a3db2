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

Not an option: ``BRAZE_OMP=openmp`` is read by the native code itself, once per process (as
libgomp reads ``OMP_*``): libgomp runs its parallel regions instead of braze's own teams
(codegen/include/braze_omp.h, docs/threads.md). A compiled library serves every process, so the
choice cannot live in its options.
* ``BRAZE_THREADS``: threads for native code (None: runtime/threads.py's default_threads decides).
* ``BRAZE_ADAPT_THREADS``: 1: a call runs with fewer threads while other processes take the
  process's cores (codegen/include/braze_team.h); 0 (default): always ``threads``. Off since
  braze's own teams (braze_omp.h) measured as well without it, and its signal counts their wake-ups
  (docs/threads.md).
* ``BRAZE_TARGET``: ``cpu`` (default: the host at its best ISA), ``cpu-x86:LEVEL`` or ``cuda:sm_XX``
  (braze/target.py; ``cuda``: this machine's GPU). ``BRAZE_ISA=LEVEL`` is short for
  ``BRAZE_TARGET=cpu-x86:LEVEL``; nothing else reads it.
* ``BRAZE_PRECISION``: ``fp32`` (default), ``bf16`` or ``fp16``: the dtype GEMMs, batched
  matmuls and convolutions of a float32 model compute in (passes/precision.py; docs/precision.md).
* ``BRAZE_TUNE``: ``cached`` (default), ``off``, ``fast`` or ``full``: where each product's kernel per
  range of M comes from (braze/tune; docs/tuning.md). ``cached`` reads the tuning database and never
  measures; ``fast`` / ``full`` measure what it lacks first, within ``tune_budget_s``
  (``BRAZE_TUNE_BUDGET``, seconds; default 600). ``BRAZE_TUNE_DB``: the tuning database's file
  (default: ``tune/tune.jsonl`` in the compile cache). ``BRAZE_TUNE_SHAPES``: a shape histogram
  (JSON; braze/tune/shapes.py): measure only the buckets its shapes reach, the most called products first.
* ``BRAZE_PRECISION_KEEP``: comma-separated op names (``matmul``) or module paths (``lm_head``,
  ``encoder.layer.0``) whose products stay float32 under a 16-bit policy.

README.md's table lists every environment variable braze reads.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping

from .errors import BrazeError


PRECISIONS = ("fp32", "bf16", "fp16")
TUNE_MODES = ("off", "cached", "fast", "full")


def _int_env(env, key, default):
    v = (env.get(key) or "").strip()
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        raise BrazeError(f"{key}={v!r} is not an integer", hint=f"unset {key} or give it a number") from None


def _target_env(env) -> str:
    """BRAZE_TARGET, or BRAZE_ISA's level as the ``cpu-x86:LEVEL`` target it stands for (the
    older, shorter spelling); the two together must say the same."""
    target = (env.get("BRAZE_TARGET") or "").strip().lower() or "cpu"
    from .codegen.isa import LEVELS
    level = (env.get("BRAZE_ISA") or "").strip().lower()
    if level in ("", "auto", "native"):
        return target
    if level not in LEVELS:
        raise BrazeError(f"BRAZE_ISA={level!r} is not an instruction-set level",
                         hint=f"use one of {', '.join(LEVELS)}, or unset it for the host's best")
    if target in ("cpu", "cpu-x86", f"cpu-x86:{level}", f"cpu:{level}"):
        return f"cpu-x86:{level}"
    raise BrazeError(f"BRAZE_ISA={level} and BRAZE_TARGET={target} name different targets",
                     hint=f"unset BRAZE_ISA (it is short for BRAZE_TARGET=cpu-x86:{level}), or set BRAZE_TARGET alone")


@dataclass(frozen=True)
class Options:
    threads: int | None = None
    # fewer threads per call while other processes take the cores (braze_team.h); off by default
    adapt_threads: bool = False
    debug: int = 0
    dump_dir: str | None = None
    cache_dir: str | None = None
    precision: str = "fp32"
    # op names or module paths whose GEMMs / convolutions stay float32 under a 16-bit policy
    precision_keep: tuple[str, ...] = ()
    # a large output the caller has dropped is handed to the next call again (no page faults on
    # fresh memory), so that memory stays held between calls; the plug-in turns it off in
    # training, where a graph's dropped outputs would stay held through the other graph
    reuse_outputs: bool = True
    # a GEMM whose weight is an input keeps packed copies while the kernel sees the weight unwritten
    # (braze_dnnl_live.c); the plug-in turns it off in training, where every step writes the weights
    weight_copies: bool = True
    # "cpu" (this host, its ISA detected), "cpu-x86:LEVEL" (this host at avx512, avx2, sse or scalar:
    # an artifact for CPUs with that level) or "cuda:sm_XX" (braze/target.py); BRAZE_TARGET
    target: str = "cpu"
    # each product's (GEMM, 1x1 convolution) kernel per range of M: "off" (the default rules),
    # "cached" (the tuning database's choices, no measuring), "fast" / "full" (measure what the
    # database lacks first, at most tune_budget_s seconds); braze/tune
    tune: str = "cached"
    tune_budget_s: float = 600.0
    # the tuning database's file (None: tune/tune.jsonl in the compile cache); BRAZE_TUNE_DB
    tune_db: str | None = None
    # a shape histogram (braze/tune/shapes.py): fast / full measure only the buckets its shapes
    # reach, the most called products first; BRAZE_TUNE_SHAPES
    tune_shapes: str | None = None

    def __post_init__(self):
        if self.tune not in TUNE_MODES:
            raise BrazeError(f"tune={self.tune!r} is not one of {', '.join(TUNE_MODES)}",
                             hint="cached (default) uses measured choices without measuring; fast or full measure "
                                  "what the tuning database lacks; off uses the default rules (docs/tuning.md)")
        if not (isinstance(self.tune_budget_s, (int, float)) and self.tune_budget_s > 0):
            raise BrazeError(f"tune_budget_s={self.tune_budget_s!r} must be a positive number of seconds",
                             hint="for example tune_budget_s=600")
        if self.precision not in PRECISIONS:
            raise BrazeError(f"precision={self.precision!r} is not one of {', '.join(PRECISIONS)}",
                             hint="fp32 computes everything in float32; bf16 / fp16 run GEMMs, batched matmuls and "
                                  "convolutions in 16 bits (docs/precision.md)")
        keep = self.precision_keep
        if isinstance(keep, str) or not all(isinstance(k, str) and k.strip() for k in keep):
            raise BrazeError(f"precision_keep={keep!r} must be a list of op names or module paths",
                             hint='for example precision_keep=("lm_head", "matmul")')
        object.__setattr__(self, "precision_keep", tuple(k.strip() for k in keep))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> "Options":
        env = os.environ if env is None else env
        opts = cls(threads=_int_env(env, "BRAZE_THREADS", None),
                   adapt_threads=bool(_int_env(env, "BRAZE_ADAPT_THREADS", 0)),
                   debug=_int_env(env, "BRAZE_DEBUG", 0),
                   dump_dir=(env.get("BRAZE_DUMP") or "").strip() or None,
                   cache_dir=(env.get("BRAZE_CACHE_DIR") or "").strip() or None,
                   precision=(env.get("BRAZE_PRECISION") or "").strip().lower() or "fp32",
                   precision_keep=tuple(k for k in (env.get("BRAZE_PRECISION_KEEP") or "").split(",") if k.strip()),
                   target=_target_env(env),
                   tune=(env.get("BRAZE_TUNE") or "").strip().lower() or "cached",
                   tune_budget_s=float(_int_env(env, "BRAZE_TUNE_BUDGET", 600)),
                   tune_db=(env.get("BRAZE_TUNE_DB") or "").strip() or None,
                   tune_shapes=(env.get("BRAZE_TUNE_SHAPES") or "").strip() or None)
        return opts.replace(**overrides) if overrides else opts

    def replace(self, **changes) -> "Options":
        names = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise BrazeError(f"unknown braze option{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}",
                             hint=f"the options are {', '.join(names)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: "Options | Mapping[str, object] | None") -> "Options":
        """``options`` as given to ``braze.compile``: an Options, a dict of changes to the
        environment's settings (``{"threads": 2}``), or None for the environment's."""
        if options is None:
            return cls.from_env()
        if isinstance(options, cls):
            return options
        if isinstance(options, Mapping):
            return cls.from_env().replace(**options)
        raise BrazeError(f"options must be a dict or a braze.Options, got {type(options).__name__}",
                         hint="options={'threads': 2}")


__all__ = ["Options"]
