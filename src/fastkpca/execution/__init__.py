"""Where work runs: the cores the process may use, the memory it may take, the threads over row
chunks, and (with an array namespace) the device.

Everything that decides *where* and *how wide* a computation runs lives here, below the
numerical modules (:mod:`fastkpca.kernels`, :mod:`fastkpca.features`, :mod:`fastkpca.sketch`,
:mod:`fastkpca.statistics`, :mod:`fastkpca.solvers`), which call it and never count cores or
memory themselves.  Falkon's ``mmv_ops`` is the model: one layer that knows the machine, the
same algorithms above it on every machine.
"""

from __future__ import annotations

from .cores import usable_cores
from .memory import available_memory_bytes, format_bytes, require_memory

__all__ = ["available_memory_bytes", "format_bytes", "require_memory", "usable_cores"]
