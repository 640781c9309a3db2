"""Compile targets: ``cpu`` (the host, its ISA detected), ``cpu-x86:LEVEL`` (the host at one
instruction-set level, no higher than it has) or ``cuda:sm_XX`` (an NVIDIA GPU).

    parse_target("cuda:sm_90")     -> CudaTarget("sm_90")
    parse_target("cuda")           -> the local GPU's arch (needs a driver)
    parse_target("cpu-x86:avx2")   -> the host's ISA at the avx2 level (codegen/isa.py)
    parse_target(None | "cpu")     -> the host's ISA at its best level

What a compile is for is always one of these values, from ``Options.target``: nothing below
reads the environment (``BRAZE_TARGET`` and ``BRAZE_ISA`` feed ``Options.from_env``).

A CUDA target cross-compiles anywhere: the kernels go through NVRTC (no GPU needed), the host
code through the C compiler with baseline x86-64 flags, since it runs on the GPU machine's CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import BrazeError

# NVRTC 13.0's archs (nvrtcGetSupportedArchs); checked against the installed NVRTC when it is there
KNOWN_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110",
               "sm_120", "sm_121")


class TargetError(BrazeError):
    """A target string braze cannot compile for (a usage error: the CLI exits 2)."""


@dataclass(frozen=True)
class CudaTarget:
    kind = "cuda"  # the target's kind (codegen/host.py's HOSTS, pipeline.py's kernel stages)
    arch: str  # "sm_90"

    @property
    def name(self) -> str:
        return f"cuda:{self.arch}"

    # what the CPU-side code reads of a target: no SIMD, no 16-bit library (float32 only for now)
    vector_bytes = 0
    host_features: frozenset = frozenset()

    def __str__(self):
        return self.name


def is_cuda(target) -> bool:
    """Whether what the pipeline compiles for (a CudaTarget, or a CPU's ISA) is a GPU."""
    return isinstance(target, CudaTarget)


def _archs() -> tuple[str, ...]:
    try:
        from .codegen.nvrtc import supported_archs
        return tuple(supported_archs())
    except BrazeError:
        return KNOWN_ARCHS


def _cpu_level(spec, level: str):
    from .codegen.isa import LEVELS, isa_at
    if level not in LEVELS:
        raise TargetError(f"target {spec!r}: {level!r} is not an instruction-set level",
                          hint=f"use cpu-x86:LEVEL with one of {', '.join(LEVELS)}, or 'cpu' for the best one")
    try:
        return isa_at(level)
    except BrazeError as e:
        best = isa_at("auto").name
        raise TargetError(f"target {spec!r}: this host (or its C compiler) has no {level}; its best level is {best}",
                          where=e.where, hint=f"use cpu-x86:{best} or a lower level (BRAZE_ISA={best}), or 'cpu' "
                                                  "for the best") from None


def parse_target(spec):
    from .codegen.isa import ISA
    if isinstance(spec, (CudaTarget, ISA)):  # a target already
        return spec
    s = "" if spec is None else str(spec).strip().lower()
    if s in ("", "cpu", "cpu-x86"):
        from .codegen.isa import host_isa
        return host_isa()
    m = re.fullmatch(r"cpu(?:-x86)?:(\w+)", s)
    if m:
        return _cpu_level(spec, m.group(1))
    if s == "cuda":
        from .runtime.cuda import local_arch
        return CudaTarget(local_arch())
    m = re.fullmatch(r"cuda:(sm_\d+[a-z]?)", s)
    if not m:
        raise TargetError(f"unknown target {spec!r}", hint="use 'cpu', 'cpu-x86:LEVEL' (avx512, avx2, sse, scalar), "
                                                           "'cuda' (this machine's GPU) or 'cuda:sm_XX', e.g. cuda:sm_90 "
                                                           "for an H100 or H200")
    arch = m.group(1)
    archs = _archs()
    if arch not in archs:
        raise TargetError(f"target {spec!r}: NVRTC cannot compile for {arch}",
                          hint=f"it compiles for {', '.join(archs)}")
    return CudaTarget(arch)


__all__ = ["CudaTarget", "KNOWN_ARCHS", "TargetError", "is_cuda", "parse_target"]
