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
from .progress import progress_bar, track_rows, using_verbose, verbosity
from .threads import (
    CHUNK_ROWS,
    SHARE_ROWS,
    check_n_jobs,
    map_chains,
    map_row_chunks,
    map_tasks,
    n_shares,
    n_workers,
    one_blas_thread,
    resolve_n_jobs,
    single_threaded_blas,
    sum_over_shares,
    using_n_jobs,
    worker_index,
)

__all__ = [
    "CHUNK_ROWS",
    "SHARE_ROWS",
    "available_memory_bytes",
    "check_n_jobs",
    "format_bytes",
    "map_chains",
    "map_row_chunks",
    "map_tasks",
    "n_shares",
    "n_workers",
    "one_blas_thread",
    "progress_bar",
    "require_memory",
    "resolve_n_jobs",
    "single_threaded_blas",
    "sum_over_shares",
    "track_rows",
    "usable_cores",
    "using_n_jobs",
    "using_verbose",
    "verbosity",
    "worker_index",
]
