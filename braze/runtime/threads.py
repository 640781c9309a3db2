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


def _own_cgroups(proc_cgroup: str) -> tuple[str, dict[str, str]]:
    """This process's cgroup path in the v2 hierarchy, and per v1 controller list, from the text
    of /proc/self/cgroup ("0::/a/b", "4:cpu,cpuacct:/a/b")."""
    v2, v1 = "/", {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpu" in parts[1].split(","):
            v1[parts[1]] = parts[2]
    return v2, v1


def _up(path: str) -> list[str]:
    """A cgroup path and its ancestors, innermost first: a parent's quota limits its children."""
    parts = [p for p in path.split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_cpu_quota(root: Path = CGROUP, proc_cgroup: str | None = None) -> float | None:
    """The CPUs this process's cgroup may use per period, the least along its path from the
    root (cgroup v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), or None
    without a quota. Inside a container the path is "/" and the container's limit is the root's."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            proc_cgroup = ""
    v2, v1 = _own_cgroups(proc_cgroup)
    found = []
    for d in _up(v2):
        try:
            text = (root / d / "cpu.max").read_text().split()  # "max 100000" or "150000 100000"
            if len(text) == 2 and text[0] != "max":
                found.append(int(text[0]) / int(text[1]))
        except (OSError, ValueError):
            continue
    for name in {"cpu", "cpu,cpuacct", "cpuacct,cpu", *v1}:
        for d in _up(v1.get(name, "/")):
            try:
                quota = int((root / name / d / "cpu.cfs_quota_us").read_text())
                period = int((root / name / d / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if quota > 0 and period > 0:
                found.append(quota / period)
    return min(found) if found else None


def usable_cpus(root: Path = CGROUP, proc_cgroup: str | None = None) -> tuple[int, str]:
    """The CPUs this process may run on now (its affinity mask), at most its cgroup quota rounded
    up; and why, in words."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    why = f"{affinity} CPU{'s' if affinity != 1 else ''} in the process's affinity mask"
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None and math.ceil(quota) < affinity:
        return max(1, math.ceil(quota)), f"{why}, a cgroup CPU quota of {quota:g}"
    return affinity, why


def default_threads(root: Path = CGROUP, proc_cgroup: str | None = None) -> tuple[int, str]:
    """The thread count for a model compiled without ``threads``: 0 (OpenMP's own default, which
    follows OMP_NUM_THREADS and ``torch.set_num_threads``) when nothing restricts the process;
    else the CPUs it may use. And why, in words."""
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return 0, "OMP_NUM_THREADS"
    n, why = usable_cpus(root, proc_cgroup)
    if n < (os.cpu_count() or n):
        return n, why
    return 0, f"OpenMP's default: {why}"
