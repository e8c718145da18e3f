"""usable_cores: the CPU set and the cgroup quota of this process, not the machine's core count."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastkpca.execution import cores
from fastkpca.execution.cores import cgroup_cpu_quota, usable_cores


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("FASTKPCA_CORES", raising=False)
    monkeypatch.setattr(cores, "_cached_quota", lambda: None)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_a_process_confined_to_one_core_sees_one():
    code = (
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
        "from fastkpca.execution.cores import usable_cores; print(usable_cores())"
    )
    env = {k: v for k, v in os.environ.items() if k != "FASTKPCA_CORES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


def test_affinity_set_is_counted(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5, 7}, raising=False)
    assert usable_cores() == 3


def test_without_a_readable_cpu_set_joblib_counts(monkeypatch):
    # No process_cpu_count, no sched_getaffinity (macOS, older Windows): joblib's count, which
    # honours LOKY_MAX_CPU_COUNT (and the affinity through psutil where installed).
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cores, "_cached_quota", lambda: None)
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "3")
    assert usable_cores() == min(3, os.cpu_count())


def test_quota_caps_the_affinity_rounded_up(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(cores, "_cached_quota", lambda: 1.5)
    assert usable_cores() == 2


def test_environment_override_lowers_the_count_within_the_process_cpus(monkeypatch):
    # FASTKPCA_CORES pins the count below what the process may use, never above its CPU set
    # (here 2 of the machine's 8): FASTKPCA_CORES=1000000 is not a million threads (nor a
    # million per-thread buffers in a memory check), nor the machine's 8.
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(cores, "_cached_quota", lambda: None)
    monkeypatch.setenv("FASTKPCA_CORES", "5")
    assert usable_cores() == 2
    monkeypatch.setenv("FASTKPCA_CORES", "1")
    assert usable_cores() == 1
    monkeypatch.setenv("FASTKPCA_CORES", "1000000")
    assert usable_cores() == 2
    monkeypatch.setattr(cores, "_cached_quota", lambda: 1.5)  # a cgroup quota caps it too
    assert usable_cores() == 2
    monkeypatch.setattr(cores, "_cached_quota", lambda: 0.5)
    assert usable_cores() == 1
    monkeypatch.setattr(cores, "_cached_quota", lambda: None)
    monkeypatch.setenv("FASTKPCA_CORES", "zero")  # not a count: ignored
    assert usable_cores() == 2


def test_cgroup_v2_and_v1_quotas_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(cores, "_read", _reader_without_proc(cores._read))
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == pytest.approx(2.5)
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no limit
    assert cgroup_cpu_quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (tmp_path / "cpu.max").unlink()
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(v1) == pytest.approx(3.0)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1")  # no limit
    assert cgroup_cpu_quota(v1) is None


def _reader_without_proc(read):
    """The module's file reader, with this machine's /proc/self/cgroup hidden (so only the
    temporary tree's root folders are consulted)."""

    def reader(path):
        return None if str(path) == "/proc/self/cgroup" else read(path)

    return reader


def test_own_cgroup_folders_are_walked_once_per_ttl(monkeypatch):
    walks = []

    def find(root):
        walks.append(root)
        return [root]

    monkeypatch.setattr(cores, "_find_cgroup_dirs", find)
    monkeypatch.setattr(cores, "_DIRS_CACHE", {"pid": None, "time": -math.inf, "dirs": []})
    assert cores._own_cgroup_dirs(cores._CGROUP_ROOT) == [cores._CGROUP_ROOT]
    assert cores._own_cgroup_dirs(cores._CGROUP_ROOT) == [cores._CGROUP_ROOT]
    assert len(walks) == 1  # reused within QUOTA_TTL
    cores._own_cgroup_dirs(Path("elsewhere"))  # another root (a test's): always walked
    assert len(walks) == 2
    monkeypatch.setattr(cores, "QUOTA_TTL", -1.0)  # expired: walked again
    cores._own_cgroup_dirs(cores._CGROUP_ROOT)
    assert len(walks) == 3
