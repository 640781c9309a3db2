"""Host instruction-set detection for the native CPU target.

The ISA is detected at run time, never assumed: the CPU's feature flags come
from ``/proc/cpuinfo`` (on Linux the kernel clears the AVX/AVX-512 flags when
the OS does not save that register state, so a listed flag is usable), or,
where that file does not exist, from the macros ``cc -march=native`` defines.
Then the C compiler is asked to accept the flags of the chosen level; a level
whose flags it rejects (an old compiler) falls back to the next lower one.

Flag choice: explicit feature flags (``-mavx2 -mfma -mavx512f ...``), not
``-march=native``.

- The flags go into the compile-cache key. ``-march=native`` is the same
  string on every host, so a cache directory shared between machines (NFS
  home, a container image built elsewhere) could hand an AVX-512 library to an
  AVX2-only CPU (SIGILL). Explicit flags name what the code may use.
- A lower level (a ``cpu-x86:LEVEL`` target) is just a shorter flag list; with
  ``-march=native`` it would need a long and compiler-specific ``-mno-...`` list.
- ``ISA.features`` is exactly what the compiler was allowed to use, so
  codegen can test it (``"avx512_bf16" in isa.features``) and be right.

The cost is that the code is tuned for the generic x86-64 model rather than
the exact core (no ``-mtune=native``); generated kernels use explicit vectors
(GCC vector extensions), so this matters little.

Nothing here reads the environment: the level a compile is for is its target
(``Options.target``, braze/target.py), which ``BRAZE_TARGET`` or ``BRAZE_ISA``
set through ``Options.from_env``. Asking for a level the host lacks is an error
rather than a crash later.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field

from ..errors import BrazeError
from .toolchain import find_compiler

LEVELS = ("scalar", "sse", "avx2", "avx512")  # low to high
VECTOR_BYTES = {"scalar": 0, "sse": 16, "avx2": 32, "avx512": 64}

# feature (as /proc/cpuinfo spells it) -> gcc flag
_FLAG = {
    "sse3": "-msse3", "ssse3": "-mssse3", "sse4_1": "-msse4.1", "sse4_2": "-msse4.2",
    "avx": "-mavx", "avx2": "-mavx2", "fma": "-mfma", "f16c": "-mf16c",
    "avx512f": "-mavx512f", "avx512bw": "-mavx512bw", "avx512vl": "-mavx512vl",
    "avx512dq": "-mavx512dq", "avx512cd": "-mavx512cd",
    "avx512_bf16": "-mavx512bf16", "avx512_vnni": "-mavx512vnni", "avx512_fp16": "-mavx512fp16",
}
# per level: features that must all be present, and extras used when present
_REQUIRED = {
    "sse": ("sse2",),
    "avx2": ("avx", "avx2", "fma"),
    "avx512": ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"),
}
_OPTIONAL = {
    "sse": ("sse3", "ssse3", "sse4_1", "sse4_2"),
    "avx2": ("sse3", "ssse3", "sse4_1", "sse4_2", "f16c"),
    "avx512": ("sse3", "ssse3", "sse4_1", "sse4_2", "f16c", "avx512cd",
               "avx512_bf16", "avx512_vnni", "avx512_fp16"),
}
# gcc's predefined macro for each feature (fallback detection without /proc/cpuinfo)
_MACRO = {
    "sse2": "__SSE2__", "sse3": "__SSE3__", "ssse3": "__SSSE3__", "sse4_1": "__SSE4_1__",
    "sse4_2": "__SSE4_2__", "avx": "__AVX__", "avx2": "__AVX2__", "fma": "__FMA__",
    "f16c": "__F16C__", "avx512f": "__AVX512F__", "avx512bw": "__AVX512BW__",
    "avx512vl": "__AVX512VL__", "avx512dq": "__AVX512DQ__", "avx512cd": "__AVX512CD__",
    "avx512_bf16": "__AVX512BF16__", "avx512_vnni": "__AVX512VNNI__",
    "avx512_fp16": "__AVX512FP16__",
    # run-time features only (no flag enables them in braze's C): oneDNN's AMX kernels, which the
    # default dispatch rules and the precision policy depend on
    "amx_tile": "__AMX_TILE__", "amx_bf16": "__AMX_BF16__", "amx_fp16": "__AMX_FP16__",
}


@dataclass(frozen=True)
class ISA:
    """The instruction set generated code targets.

    name: 'avx512' | 'avx2' | 'sse' | 'scalar'; vector_bytes: 64 | 32 | 16 | 0;
    cflags: the compiler flags enabling it; features: the CPU features those
    flags enable (cpuinfo spelling: avx512f, avx512_bf16, fma, ...).
    ldlibs: libraries its code links after the sources (``-lmvec``, glibc's vector
    math, when the toolchain has it for this vector width; cflags then define
    ``BZ_HAVE_MVEC``).
    host_features: every ISA feature the host has (may exceed ``features``
    at a lower level than the host's best).
    """

    kind = "cpu"  # the target's kind (codegen/host.py's HOSTS, pipeline.py's kernel stages)
    name: str
    vector_bytes: int
    cflags: list = field(default_factory=list)
    features: frozenset = frozenset()
    host_features: frozenset = frozenset()
    ldlibs: tuple = ()

    def vector_lanes(self, itemsize: int) -> int:
        """Elements of ``itemsize`` bytes per vector (1 for scalar)."""
        return max(1, self.vector_bytes // itemsize)


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else what ``platform`` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def _cpuinfo_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    if "pni" in flags:  # the kernel's name for SSE3
                        flags.add("sse3")
                    return flags
    except OSError:
        return None
    return None


def _compiler_native_flags(cc: list[str]) -> set[str]:
    """Features from the macros ``cc -march=native`` defines (no /proc/cpuinfo)."""
    try:
        r = subprocess.run([*cc, "-march=native", "-dM", "-E", "-x", "c", os.devnull],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if r.returncode != 0:
        return set()
    defined = {ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("#define ")}
    return {feat for feat, macro in _MACRO.items() if macro in defined}


@functools.lru_cache(maxsize=None)
def _host_features(cc: tuple[str, ...] | None) -> frozenset:
    if not _is_x86():
        return frozenset()
    flags = _cpuinfo_flags()
    if flags is None:
        flags = _compiler_native_flags(list(cc)) if cc else set()
    return frozenset(f for f in flags if f in _MACRO)


@functools.lru_cache(maxsize=None)
def _compiler_accepts(cc: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    src = "int braze_isa_probe(void) { return 0; }\n"
    try:
        r = subprocess.run([*cc, *flags, "-Werror", "-x", "c", "-c", "-", "-o", os.devnull],
                           input=src, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


# libmvec's name mangling per vector width (x86_64 vector function ABI)
_MVEC_PREFIX = {64: "_ZGVeN16v_", 32: "_ZGVdN8v_", 16: "_ZGVbN4v_"}


# the libmvec functions braze_vec.h calls, by their number of arguments (tanhf and expm1f need
# glibc >= 2.35, powf 2.22)
MVEC_FUNCTIONS = {"sinf": 1, "cosf": 1, "tanhf": 1, "expm1f": 1, "powf": 2}


def _links_mvec(cc: tuple[str, ...], flags: tuple[str, ...], vector_bytes: int) -> bool:
    """Whether a program calling every libmvec function braze uses at this width compiles and links."""
    prefix = _MVEC_PREFIX.get(vector_bytes)
    if prefix is None:
        return False
    # the mangled name has a "v" per argument: _ZGVeN16v_sinf, _ZGVeN16vv_powf
    names = {f: prefix[:-2] + "v" * n + "_" + f for f, n in MVEC_FUNCTIONS.items()}
    decls = "".join(f"v {names[f]}({', '.join(['v'] * n)});\n" for f, n in MVEC_FUNCTIONS.items())
    calls = " + ".join(f"{names[f]}({', '.join(['x'] * n)})[0]" for f, n in MVEC_FUNCTIONS.items())
    src = (f"typedef float v __attribute__((vector_size({vector_bytes})));\n"
           f"{decls}int main(void) {{ v x = {{0}}; return (int)({calls}); }}\n")
    with tempfile.TemporaryDirectory() as d:
        try:
            r = subprocess.run([*cc, *flags, "-x", "c", "-", "-o", os.path.join(d, "probe"), "-lmvec", "-lm"],
                               input=src, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return r.returncode == 0


def _level_for(level: str, host: frozenset, cc: tuple[str, ...]) -> ISA | None:
    """The ISA for ``level`` if the host has it and the compiler takes its flags."""
    if level == "scalar":
        return ISA("scalar", 0, [], frozenset(), host)
    if not all(f in host for f in _REQUIRED[level]):
        return None
    feats = [f for f in _REQUIRED[level] if f in _FLAG]
    opt = [f for f in _OPTIONAL[level] if f in host]
    # try with the optional extras, then with the required features only
    for chosen in (feats + opt, feats):
        flags = tuple(_FLAG[f] for f in chosen)
        if _compiler_accepts(cc, flags):
            enabled = set(chosen) | {f for f in _REQUIRED[level]}
            if _links_mvec(cc, flags, VECTOR_BYTES[level]):
                return ISA(level, VECTOR_BYTES[level], [*flags, "-DBZ_HAVE_MVEC=1"], frozenset(enabled), host,
                           ("-lmvec",))
            return ISA(level, VECTOR_BYTES[level], list(flags), frozenset(enabled), host)
    return None


@functools.lru_cache(maxsize=None)
def _detect(forced: str, cc: tuple[str, ...]) -> ISA:
    host = _host_features(cc)
    cap = LEVELS.index(forced) if forced != "auto" else len(LEVELS) - 1
    best = None
    for level in reversed(LEVELS[:cap + 1]):
        best = _level_for(level, host, cc)
        if best is not None:
            break
    assert best is not None  # scalar always succeeds
    if forced != "auto" and best.name != forced:
        raise BrazeError(
            f"the {forced} instruction set is not supported by this host (or C compiler); "
            f"the best available is {best.name}",
            where=f"host features: {', '.join(sorted(host)) or 'none'}",
            hint=f"use {best.name} or lower ({', '.join(LEVELS)})")
    return best



def level_isa(level: str, cc=None) -> ISA | None:
    """The ISA of ``level`` (one of LEVELS) on this host, or None when the host or the compiler
    lacks it: for tests of each vector width."""
    cc = _compiler(cc)
    return _level_for(level, _host_features(cc), cc)


def isa_at(level: str, cc=None) -> ISA:
    """The ISA of ``level`` ("auto": the best) on this host: an error naming the best level
    there is when the host or the compiler lacks it (a ``cpu-x86:LEVEL`` target)."""
    return _detect(level, _compiler(cc))


def host_isa(cc=None) -> ISA:
    """The best ISA this host and C compiler support: what the ``cpu`` target compiles for.

    ``cc``: the compiler command (list of str, or a string to split); default: the one
    ``braze.codegen.toolchain.find_compiler`` finds. Cached per process per compiler.
    """
    return _detect("auto", _compiler(cc))


def _compiler(cc) -> tuple[str, ...]:
    return tuple(find_compiler() if cc is None else shlex.split(cc) if isinstance(cc, str) else cc)
