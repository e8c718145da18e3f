"""The number of cores this process may run on.

The machine's core count is not it: a process confined by ``taskset``, a container's CPU quota
or a batch scheduler's allocation may use fewer, and threads beyond those only
oversubscribe them.  :func:`usable_cores` takes the smallest of: the CPU affinity set
(``os.process_cpu_count`` on Python >= 3.13, ``os.sched_getaffinity`` before), and the cgroup CPU
quota (``cpu.max`` of cgroup v2, ``cpu.cfs_quota_us / cpu.cfs_period_us`` of v1), rounded up.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

__all__ = ["usable_cores"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _affinity_cores() -> int:
    count = getattr(os, "process_cpu_count", None)  # Python >= 3.13: affinity-aware
    if count is not None:
        return max(1, count() or 1)
    if hasattr(os, "sched_getaffinity"):  # Linux and the BSDs before Python 3.13
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    # Where the platform has no per-process CPU set that the os module reads (macOS, Windows
    # before Python 3.13): joblib's count (scikit-learn's own dependency), which reads the
    # process's affinity through psutil where that is installed, honours LOKY_MAX_CPU_COUNT,
    # and is otherwise the machine's; the cgroup quota below still applies where there is one.
    from joblib import cpu_count

    return max(1, int(cpu_count(only_physical_cores=False)))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


#: The cgroup folders of this process under the system's cgroup root, found at most every
#: :data:`QUOTA_TTL` seconds (the memory check of every fit asks for them); the files in them
#: (usage, limits) are read afresh each time.
_DIRS_CACHE: dict = {"pid": None, "time": -math.inf, "dirs": []}


def _own_cgroup_dirs(root: Path) -> list[Path]:
    """The cgroup folders of this process, innermost first (``/proc/self/cgroup``); the root as
    a fallback (inside a container the process's cgroup is usually mounted at the root).
    Under the system's root the list is reused for :data:`QUOTA_TTL` seconds."""
    if root != _CGROUP_ROOT:
        return _find_cgroup_dirs(root)
    now = time.monotonic()
    cache = _DIRS_CACHE
    if cache["pid"] != os.getpid() or now - cache["time"] > QUOTA_TTL:
        cache.update(pid=os.getpid(), time=now, dirs=_find_cgroup_dirs(root))
    return list(cache["dirs"])


def _find_cgroup_dirs(root: Path) -> list[Path]:
    """:func:`_own_cgroup_dirs`, walked."""
    dirs = []
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            rel = parts[2].lstrip("/")
            for sub in ("", "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                p = root / sub / rel if sub else root / rel
                while True:
                    if p.is_dir() and p not in dirs:
                        dirs.append(p)
                    if p == root or p.parent == p:
                        break
                    p = p.parent
    for sub in ("", "cpu", "cpu,cpuacct"):
        p = root / sub if sub else root
        if p.is_dir() and p not in dirs:
            dirs.append(p)
    return dirs


def cgroup_cpu_quota(root: Path = _CGROUP_ROOT) -> float | None:
    """The tightest cgroup CPU quota over this process's cgroups, in cores, or None."""
    quotas = []
    for d in _own_cgroup_dirs(root):
        v2 = _read(d / "cpu.max")
        if v2:
            fields = v2.split()
            if len(fields) == 2 and fields[0] != "max":
                try:
                    quotas.append(int(fields[0]) / int(fields[1]))
                except (ValueError, ZeroDivisionError):
                    pass
            continue
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if quota and period:
            try:
                q, p = int(quota), int(period)
            except ValueError:
                continue
            if q > 0 and p > 0:
                quotas.append(q / p)
    return min(quotas) if quotas else None


#: Seconds for which a cgroup quota read is reused (:func:`usable_cores` is asked at every
#: threaded call).
QUOTA_TTL = 5.0
_QUOTA_CACHE: dict = {"pid": None, "time": -math.inf, "value": None}


def _cached_quota() -> float | None:
    now = time.monotonic()
    cache = _QUOTA_CACHE
    if cache["pid"] != os.getpid() or now - cache["time"] > QUOTA_TTL:
        cache.update(pid=os.getpid(), time=now, value=cgroup_cpu_quota())
    return cache["value"]


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota.

    The affinity is read at every call (``taskset`` applies at once); the quota at most every
    :data:`QUOTA_TTL` seconds.

    ``FASTKPCA_CORES`` (a positive integer), when set, lowers the count: it is how a benchmark or
    a test pins it without ``taskset``.  A larger value than the affinity and quota allow is
    taken as that many, since threads beyond the CPUs the process may use only wait for one
    another (and the memory a computation holds per thread is counted from this count).
    """
    cores = _affinity_cores()
    quota = _cached_quota()
    if quota is not None and quota > 0:
        cores = min(cores, max(1, math.ceil(quota)))
    try:
        forced = int(os.environ.get("FASTKPCA_CORES") or 0)
    except ValueError:
        forced = 0  # not a count: ignored
    return min(forced, cores) if forced >= 1 else cores
