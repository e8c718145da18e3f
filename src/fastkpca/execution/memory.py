"""The memory a computation may take, and the up-front refusal of sizes that cannot fit:
:func:`require_memory` runs before an allocation whose size follows from the parameters, so a
size that cannot fit is a ``ValueError`` naming the parameter, not a late ``MemoryError``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cores import _own_cgroup_dirs, _read

__all__ = [
    "available_memory_bytes",
    "memory_available_on",
    "format_bytes",
    "require_memory",
    "MemoryLimitError",
    "MEMORY_FRACTION",
]

#: A single up-front size check refuses what would take more than this fraction of the memory
#: available: the computation also holds its inputs, temporaries and the caller's arrays.
MEMORY_FRACTION = 0.8


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """``memory.max - memory.current`` of this process's cgroup (v2), or None if unlimited."""
    best = None
    for d in _own_cgroup_dirs(root):
        limit = _read(d / "memory.max")
        current = _read(d / "memory.current")
        if not limit or limit == "max" or current is None:
            continue
        try:
            headroom = max(0, int(limit) - int(current))
        except ValueError:
            continue
        best = headroom if best is None else min(best, headroom)
    return best


def available_memory_bytes() -> int:
    """Memory available to a new allocation here, in bytes.

    The machine's ``MemAvailable``, capped by the headroom of a cgroup memory limit;
    ``FASTKPCA_MEMORY`` (bytes, or with a K / M / G suffix), when set, takes precedence.
    """
    forced = os.environ.get("FASTKPCA_MEMORY")
    if forced:
        parsed = parse_bytes(forced)
        if parsed is not None:
            return parsed
    available = _meminfo_available()
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not on this platform
            available = 8 * 2**30
    headroom = _cgroup_headroom()
    if headroom is not None:
        available = min(available, headroom)
    return int(available)


def memory_available_on(placement=None) -> int:
    """Memory available to a new allocation on ``placement``, in bytes: the device's free
    memory where it can say (a GPU), else this process's (:func:`available_memory_bytes`: the
    host, PyTorch CPU tensors, ``array_api_strict`` arrays)."""
    free = None if placement is None else placement.free_memory_bytes()
    return available_memory_bytes() if free is None else int(free)


def parse_bytes(text: str) -> int | None:
    """``"512M"`` -> 536870912; None for text that is not a size."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    for suffix, factor in (("K", 2**10), ("M", 2**20), ("G", 2**30), ("T", 2**40)):
        if text.endswith(suffix):
            text, scale = text[:-1], factor
            break
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value * scale) if value >= 0 else None


def format_bytes(n: float) -> str:
    """A byte count for people: ``"3.7 GiB"``."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{int(n)} bytes"


class MemoryLimitError(ValueError):
    """A size :func:`require_memory` refused; a growth by ``tol`` keeps its best fit before it."""


def require_memory(nbytes: float, what: str, *, hint: str = "", available=None) -> None:
    """Raise :class:`MemoryLimitError` unless ``nbytes`` fits in :data:`MEMORY_FRACTION` of what
    is available.

    Parameters
    ----------
    nbytes : number
        The size of what is about to be allocated.
    what : str
        What it is, naming the parameter that decides it.
    hint : str
        What to do instead, appended to the message.
    available : int, optional
        The memory available (default :func:`available_memory_bytes`).
    """
    available = available_memory_bytes() if available is None else int(available)
    if nbytes > MEMORY_FRACTION * available:
        message = (
            f"{what} needs {format_bytes(nbytes)}, more than the {format_bytes(available)} of "
            "memory available here"
        )
        raise MemoryLimitError(f"{message}; {hint}" if hint else message)
