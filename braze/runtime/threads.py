"""How many CPUs this process may use, and so how many threads a model runs with by default.

OpenMP's default team is the CPUs in the affinity mask when its runtime loaded. Two things that
servers and containers do escape it: the mask may shrink later (``os.sched_setaffinity``,
``taskset -p``), and a cgroup CPU quota (a container's ``--cpus``, Kubernetes' CPU limit) never
changes the mask. A process allowed 2 CPUs of a 16-CPU host would then run 16 threads, each
descheduled for most of every quota period, and braze's kernels, each a parallel loop that ends
at a barrier, would wait at every barrier for the thread that is not running (issue 29).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = CGROUP) -> float | None:
    """The CPUs this process's cgroup may use per period (cgroup v2's ``cpu.max``, v1's
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), or None without a quota."""
    try:
        text = (root / "cpu.max").read_text().split()  # v2: "max 100000" or "150000 100000"
        if len(text) == 2 and text[0] != "max":
            return int(text[0]) / int(text[1])
        if text:
            return None
    except (OSError, ValueError):
        pass
    for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):  # v1
        try:
            quota = int((root / d / "cpu.cfs_quota_us").read_text())
            period = int((root / d / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cpus(root: Path = CGROUP) -> tuple[int, str]:
    """The CPUs this process may run on now (its affinity mask), at most its cgroup quota rounded
    up; and why, in words."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    why = f"{affinity} CPU{'s' if affinity != 1 else ''} in the process's affinity mask"
    quota = cgroup_cpu_quota(root)
    if quota is not None and math.ceil(quota) < affinity:
        return max(1, math.ceil(quota)), f"{why}, a cgroup CPU quota of {quota:g}"
    return affinity, why


def default_threads(root: Path = CGROUP) -> tuple[int, str]:
    """The thread count for a model compiled without ``threads``: 0 (OpenMP's own default, which
    follows OMP_NUM_THREADS and ``torch.set_num_threads``) when nothing restricts the process;
    else the CPUs it may use. And why, in words."""
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return 0, "OMP_NUM_THREADS"
    n, why = usable_cpus(root)
    if n < (os.cpu_count() or n):
        return n, why
    return 0, f"OpenMP's default: {why}"
