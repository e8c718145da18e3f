"""Threads over row chunks: how many run a call, the pool they run in, and BLAS held to one
thread meanwhile.

How wide a call runs
    :func:`n_workers` is the number of threads the current call may use.  Nothing passes a
    thread count through the numerical functions' signatures: they call
    :func:`map_row_chunks`, :func:`sum_over_shares`, :func:`map_tasks` or :func:`map_chains`,
    which read it here.
    The count is, in this order:

    1. the ``n_jobs`` of the innermost fastkpca call that sets one (:func:`using_n_jobs`, a
       :mod:`contextvars` context that :class:`~fastkpca.decomposition._base.BaseKPCA` enters
       around ``fit``, ``transform``, ...; the command line's ``--jobs``); an estimator with
       ``n_jobs=None`` sets none and keeps the enclosing one;
    2. else the ``n_jobs`` of ``joblib.parallel_config`` in force in this thread, as a
       scikit-learn estimator's ``n_jobs=None`` defers to it;
    3. else every core the process may use (:func:`~fastkpca.execution.usable_cores`), at most
       the thread limit that scikit-learn's own OpenMP loops obey (:func:`inherited_limit`:
       ``omp_get_max_threads()``, set by ``OMP_NUM_THREADS``, by threadpoolctl's
       ``threadpool_limits`` and, in joblib's worker processes, to the ``cpu_count() //
       n_jobs`` threads joblib gives each worker).

    ``n_jobs`` has scikit-learn's meaning (:func:`resolve_n_jobs`), except that None means the
    rule above, not joblib's one job.  Whatever its source, the count is at most the usable
    cores: threads beyond them only oversubscribe them, and the memory a call takes per thread
    (its buffers, a sketch per thread) is counted from :func:`n_workers`, so ``n_jobs=10**6``
    must not count a million buffers.

    Nested parallelism.  Under ``GridSearchCV(..., n_jobs=2)`` (or any ``joblib.Parallel``):
    in joblib's worker processes (``loky``, its default) each fit uses the share of the cores
    joblib gives the worker (3. above), as BLAS and OpenMP do there; in its worker threads
    (``threading``) the fits share one process, each with every usable core, and their
    threaded maps take turns (:func:`single_threaded_blas`), so that fastkpca's pool never
    runs more threads than the usable cores.  An explicit ``n_jobs`` on the inner estimator
    is taken as given (capped at the usable cores).  As in scikit-learn, ``n_jobs`` sets
    these threads, not those of BLAS / OpenMP in the few library calls that run outside them
    (a dense eigendecomposition, a k-means): those keep their own settings.

The pool
    One pool of threads per process, created on first use, grown when a call asks for more
    threads than it has, and created anew in a forked child (which inherits the pool object but
    not its threads).  The calling thread works beside the pool's; work that a pool thread
    starts (a nested call) runs in that thread, serially, so the pool never waits on itself.

BLAS on one thread
    The threads run numpy's element-wise steps (``exp``, ``cos``, which numpy runs on one core)
    and small GEMMs on their own chunks, so BLAS is held to one thread while they run
    (:func:`one_blas_thread`): a multi-threaded BLAS would only parallelise the products and
    synchronise on every small call, and its idle threads' spin-waits cost up to 100x on a busy
    machine.  The limit is process-wide, so callers from several threads share it (the first to
    enter sets it, the last to leave restores it), and threaded maps from several user threads
    at once (a threaded Dask scheduler) take turns (:func:`single_threaded_blas`), each with
    every core.

What the threads compute never depends on how many there are, beyond the rounding of sums,
nor on which thread runs what: work is split into contiguous shares of fixed-size chunks (the
chunk grid depends only on the rows; the shares on the rows and the thread count), every
share's state is combined in share order, and nothing random is decided per share.
"""

from __future__ import annotations

import functools
import numbers
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

import numpy as np

from .cores import usable_cores

__all__ = [
    "CHUNK_ROWS",
    "SHARE_ROWS",
    "MAX_BALANCED_SHARES",
    "n_shares",
    "resolve_n_jobs",
    "check_n_jobs",
    "using_n_jobs",
    "n_workers",
    "inherited_limit",
    "worker_index",
    "map_row_chunks",
    "sum_over_shares",
    "map_tasks",
    "map_chains",
    "one_blas_thread",
    "single_threaded_blas",
]

#: Rows per chunk of :func:`map_row_chunks` by default: a 512 x 1024 float32 chunk is 2 MiB, in
#: the L2 cache of most cores, and each chunk's numpy steps hand the interpreter lock over
#: half as often as with 256 rows (``benchmarks/NOTES.md``).
CHUNK_ROWS = 512

#: Rows per share of the products :func:`sum_over_shares` spreads over the threads (``Z^T Z`` of
#: feature blocks, sketch products): two chunks, enough rows for a GEMM near peak speed, and
#: fixed, so that every share's product is computed alike whatever the thread count.
SHARE_ROWS = 1024

#: Shares of :func:`map_row_chunks` with ``balanced=True`` at most (each has its accumulator).
MAX_BALANCED_SHARES = 32

T = TypeVar("T")

# ------------------------------------------------------------------------------------------------
# how many threads
# ------------------------------------------------------------------------------------------------
#: The validated ``n_jobs`` of the estimator call running in this context (unset: none).
_N_JOBS: ContextVar[int | None] = ContextVar("fastkpca_n_jobs")


def check_n_jobs(n_jobs, name: str = "n_jobs") -> int | None:
    """``n_jobs`` as scikit-learn takes it: None, a positive count, or -1, -2, ... (all usable
    cores, all but one, ...); ValueError naming ``name`` for 0, a bool or a non-integer."""
    if n_jobs is None:
        return None
    if not isinstance(n_jobs, numbers.Integral) or isinstance(n_jobs, bool | np.bool_):
        raise ValueError(
            f"{name} must be None, a positive integer or a negative one (-1: all cores), "
            f"got {n_jobs!r}"
        )
    if n_jobs == 0:
        raise ValueError(
            f"{name}=0 means no thread at all; use None or -1 (all cores the process may use) "
            "or a positive count"
        )
    return int(n_jobs)


def resolve_n_jobs(n_jobs) -> int:
    """The number of threads ``n_jobs`` gives (scikit-learn's convention), at most the usable
    cores.

    None: what the context gives (module notes: ``joblib.parallel_config``'s ``n_jobs``, else
    every core this process may use, :func:`~fastkpca.execution.usable_cores`, within the
    OpenMP thread limit :func:`inherited_limit`); -1: every usable core; -2: all but one;
    ``-k``: ``usable_cores() + 1 - k``, at least 1; a positive count: that many threads, at most
    the usable cores (more would only oversubscribe them; the results would not change).  0,
    bools and non-integers raise ValueError.
    """
    n_jobs = check_n_jobs(n_jobs)
    cores = usable_cores()
    if n_jobs is None:
        n_jobs = _joblib_n_jobs()
    if n_jobs is None:
        limit = inherited_limit()
        return cores if limit is None else max(1, min(cores, limit))
    if n_jobs < 0:
        return max(1, cores + 1 + n_jobs)
    return min(n_jobs, cores)


def _joblib_n_jobs() -> int | None:
    """The ``n_jobs`` of ``joblib.parallel_config`` in force in this thread (None: unset, or
    not a valid count).  joblib's worker threads and processes run their tasks with it unset."""
    _, n_jobs = _joblib_active_backend()()
    try:
        return check_n_jobs(n_jobs)
    except ValueError:
        return None


@functools.cache
def _joblib_active_backend() -> Callable[[], tuple[Any, Any]]:
    # Imported on first use: joblib (a scikit-learn dependency) takes 0.2 s to import, which
    # commands that never fit (``fastkpca --help``) should not pay.
    from joblib.parallel import get_active_backend

    return get_active_backend


def inherited_limit() -> int | None:
    """The thread limit this thread inherits from its surroundings, or None if none is known.

    The limit that scikit-learn's OpenMP loops obey (``n_threads=None``): its OpenMP runtime's
    ``omp_get_max_threads()`` in the calling thread, which ``OMP_NUM_THREADS``, threadpoolctl's
    ``threadpool_limits`` (without ``user_api``, or with ``"openmp"``) and joblib's worker
    processes (``cpu_count() // n_jobs`` each, through ``OMP_NUM_THREADS``) set.  Where
    scikit-learn has no OpenMP runtime: ``OMP_NUM_THREADS`` itself.  While fastkpca holds BLAS
    to one thread (:func:`one_blas_thread`), the value read before it did so: an OpenBLAS
    built on OpenMP applies its limit through ``omp_set_num_threads``.
    """
    if _BLAS_LIMIT["depth"] > 0:
        return _BLAS_LIMIT["inherited"]
    return _read_inherited_limit()


def _read_inherited_limit() -> int | None:
    read = _sklearn_openmp_threads()
    if read is not None:
        try:
            return max(1, int(read(only_physical_cores=False)))
        except (TypeError, ValueError):
            pass
    text = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 1 else None


@functools.cache
def _sklearn_openmp_threads() -> Callable[..., int] | None:
    """scikit-learn's count of the threads its OpenMP loops would use, or None where
    scikit-learn was built without OpenMP (it would then say 1: one thread, not a limit)."""
    try:
        from sklearn.utils import _openmp_helpers as helpers
    except ImportError:  # a scikit-learn that no longer has it
        return None
    enabled = getattr(helpers, "_openmp_parallelism_enabled", None)
    read = getattr(helpers, "_openmp_effective_n_threads", None)
    if read is None or enabled is None or not enabled():
        return None
    return read


@contextmanager
def using_n_jobs(n_jobs) -> Iterator[None]:
    """Context in which :func:`n_workers` gives ``resolve_n_jobs(n_jobs)`` (checked on entry:
    ValueError for a bad value).  What an estimator call enters; contexts nest, the innermost
    wins, and leaving restores the outer one (:mod:`contextvars`: per thread and per task)."""
    token = _N_JOBS.set(check_n_jobs(n_jobs))
    try:
        yield
    finally:
        _N_JOBS.reset(token)


def n_workers() -> int:
    """Threads the current call may use, at most the usable cores: its ``n_jobs``
    (:func:`using_n_jobs`), else what its context gives (module notes)."""
    return resolve_n_jobs(_N_JOBS.get(None))


# ------------------------------------------------------------------------------------------------
# the pool
# ------------------------------------------------------------------------------------------------
_WORKER = threading.local()


def worker_index() -> int:
    """Which share of :func:`map_row_chunks` (or task group of :func:`map_tasks`) the calling
    thread runs: 0 outside one.  The key of per-worker accumulators (worker i never runs
    concurrently with itself)."""
    return getattr(_WORKER, "index", 0)


def _in_worker() -> bool:
    return getattr(_WORKER, "active", False)


class _Pool:
    """The process's thread pool (see the module notes)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.size = 0
        self.pid = os.getpid()

    def get(self, size: int) -> ThreadPoolExecutor:
        """A pool of at least ``size`` threads (created or grown here)."""
        with self.lock:
            if self.pid != os.getpid():  # a forked child: the threads stayed in the parent
                self.executor, self.size, self.pid = None, 0, os.getpid()
            if self.executor is None or self.size < size:
                old = self.executor
                self.executor = ThreadPoolExecutor(size, thread_name_prefix="fastkpca")
                self.size = size
                if old is not None:
                    old.shutdown(wait=False)  # its threads finish what they run, then exit
            return self.executor


_POOL = _Pool()


def _run_share(index: int, job: Callable[[], T]) -> T:
    """``job()`` as worker ``index``: nested threaded calls inside run serially in this thread."""
    outer = (getattr(_WORKER, "index", 0), getattr(_WORKER, "active", False))
    _WORKER.index, _WORKER.active = index, True
    try:
        return job()
    finally:
        _WORKER.index, _WORKER.active = outer


def _run_all(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``jobs[i]`` as worker i, the first in the calling thread and the others in the pool;
    their results in order.  If any raises, every job is still waited for and the first error
    (in job order) is raised."""
    if len(jobs) == 1:
        # One job occupies no pool thread: threaded calls inside it may use the pool (marking
        # it a worker would run them serially, e.g. a device fit's stacked eigendecompositions).
        return [jobs[0]()]
    pool = _POOL.get(len(jobs) - 1)
    futures = [pool.submit(_run_share, i, job) for i, job in enumerate(jobs) if i]
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)
    try:
        results[0] = _run_share(0, jobs[0])
    except BaseException as exc:  # wait for the others before raising
        errors[0] = exc
    for i, future in enumerate(futures, start=1):
        try:
            results[i] = future.result()
        except BaseException as exc:
            errors[i] = exc
    for error in errors:
        if error is not None:
            raise error
    return results


def map_row_chunks(
    n: int, fn: Callable[[int, int], Any], *, chunk_rows: int = CHUNK_ROWS, balanced: bool = False
) -> None:
    """Call ``fn(start, stop)`` over the row chunks ``[0, n)`` of ``chunk_rows`` rows, spread over
    :func:`n_workers` threads with BLAS held to one thread.

    Each thread takes contiguous shares of whole chunks (the chunk grid, so every chunk's
    computation, is the same whatever the thread count), one each, or with ``balanced``
    :func:`n_shares` of decreasing size, each taken by the next free thread, so uneven threads
    finish together; :func:`worker_index` in ``fn`` is the share's index (per-share
    accumulators group the same chunks in every run).  numpy releases the GIL in the chunks'
    GEMMs and element-wise steps.  Inside a worker, it runs in that thread.
    """
    if n <= 0:
        return
    chunk_rows = max(1, int(chunk_rows))
    n_chunks = -(-n // chunk_rows)

    def share(lo: int, hi: int) -> None:
        for start in range(lo, hi, chunk_rows):
            fn(start, min(hi, start + chunk_rows))

    if _in_worker():
        share(0, n)
        return
    bounds = [b * chunk_rows for b in _share_bounds(n_chunks, balanced)[:-1]] + [n]
    jobs = [
        functools.partial(share, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    if len(jobs) == 1:
        with single_threaded_blas():
            jobs[0]()
        return
    map_chains(lambda i: _run_share(i, jobs[i]), [[i] for i in range(len(jobs))])


def n_shares(n_chunks: int, balanced: bool = True) -> int:
    """The shares (and per-share accumulators) of ``n_chunks`` chunks in :func:`map_row_chunks`."""
    return len(_share_bounds(n_chunks, balanced)) - 1


def _share_bounds(n_chunks: int, balanced: bool) -> list[int]:
    """Each share's first chunk, and ``n_chunks``: w equal shares; ``balanced``, each ``1 / (2 w)``
    of the chunks left (at least 1/256), or if too many, MAX_BALANCED_SHARES (or w) equal ones."""
    n_chunks = max(1, int(n_chunks))
    workers = max(1, min(n_workers(), n_chunks))
    if balanced and workers > 1:
        bounds, start, least = [0], 0, max(1, n_chunks // 256)
        while start < n_chunks:
            start = min(n_chunks, start + max(least, -(-(n_chunks - start) // (2 * workers))))
            bounds.append(start)
        if len(bounds) - 1 <= MAX_BALANCED_SHARES:
            return bounds
        workers = max(workers, min(MAX_BALANCED_SHARES, n_chunks))
    return [n_chunks * i // workers for i in range(workers + 1)]


def sum_over_shares(n: int, part: Callable[[int, int], np.ndarray], *, share_rows: int):
    """``sum part(start, stop)`` over the shares ``[s, s + share_rows)`` of ``[0, n)``, as float64.

    The shares are fixed by n and ``share_rows`` alone; each worker thread (BLAS held to one
    thread) computes a contiguous group of them and adds their parts to its own float64 total,
    and the totals are added in worker order.  So every part is computed the same way whatever
    the thread count (a float32 product over a share rounds alike), and the thread count
    changes only the grouping of the float64 sums.  For products over many rows (``Z^T Z``,
    ``A^T (A Q)``): on a loaded machine one-threaded products on shares beat one
    multi-threaded BLAS call on these shapes, whose idle threads' spin-waits cost up to 5x.
    """
    if n <= 0:
        return np.array(part(0, 0), dtype=np.float64)
    totals: dict[int, np.ndarray] = {}

    def share(start, stop):
        value = part(start, stop)
        index = worker_index()
        if index in totals:
            totals[index] += value
        else:
            totals[index] = np.array(value, dtype=np.float64)

    map_row_chunks(n, share, chunk_rows=max(1, int(share_rows)))
    order = sorted(totals)
    total = totals[order[0]]
    for i in order[1:]:
        total += totals[i]
    return total


def map_tasks(fn: Callable[[T], Any], tasks: Sequence[T]) -> list:
    """``[fn(task) for task in tasks]`` on up to :func:`n_workers` threads, BLAS on one thread.

    The tasks are dealt in rounds of w threads, forwards in even rounds and backwards in odd
    ones (tasks of decreasing cost, such as a triangle's strips, come out even), so per-worker
    accumulators (:func:`worker_index`) group the same tasks in every run.  Results in task
    order; inside a worker, serially.
    """
    tasks = list(tasks)
    if not tasks:
        return []
    workers = max(1, min(n_workers(), len(tasks)))
    results: list[Any] = [None] * len(tasks)
    groups: list[list[int]] = [[] for _ in range(workers)]
    for i in range(len(tasks)):
        turn, j = divmod(i, workers)
        groups[j if turn % 2 == 0 else workers - 1 - j].append(i)

    def run(group):
        for i in group:
            results[i] = fn(tasks[i])

    if _in_worker():
        for group in groups:
            run(group)
        return results
    with single_threaded_blas():
        _run_all([functools.partial(run, g) for g in groups])
    return results


def map_chains(
    fn: Callable[[T], Any], chains: Sequence[Sequence[T]], *, weights: Sequence[float] | None = None
) -> list[list]:
    """``[[fn(task) for task in chain] for chain in chains]`` on up to :func:`n_workers`
    threads, BLAS on one thread, a chain's tasks in order and one at a time, each on the next
    free thread, which takes the chain with the most work left (tasks left times weight; ties:
    the first): sequential jobs stay balanced to within about a task.  Nothing is accumulated
    per thread.  After a failed task no other starts; the first error (in chain order) is
    raised when the running ones end.  Inside a worker the chains run in this thread."""
    chains = [list(chain) for chain in chains]
    weights = [1.0] * len(chains) if weights is None else [float(w) for w in weights]
    results: list[list] = [[None] * len(chain) for chain in chains]
    errors: list[BaseException | None] = [None] * len(chains)
    workers = max(1, min(n_workers(), len(chains)))
    if workers == 1 or _in_worker():
        with nullcontext() if _in_worker() else single_threaded_blas():
            return [[fn(task) for task in chain] for chain in chains]
    state = threading.Condition()
    taken = [0] * len(chains)  # tasks of each chain started
    busy = [False] * len(chains)

    def pick() -> tuple[int, int] | None:
        """The next (chain, task) to run, or None when nothing is left to start."""
        with state:
            while not any(errors):
                left = [(len(chain) - taken[c]) * weights[c] for c, chain in enumerate(chains)]
                free = [c for c in range(len(chains)) if left[c] > 0 and not busy[c]]
                if free:
                    c = max(free, key=lambda c: (left[c], -c))
                    busy[c], taken[c] = True, taken[c] + 1
                    return c, taken[c] - 1
                if not any(left):
                    break
                state.wait()  # the chains left are running: wait for one to be free
        return None

    def run() -> None:
        while (job := pick()) is not None:
            c, i = job
            try:
                results[c][i] = fn(chains[c][i])
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in chain order
                errors[c] = exc
            with state:
                busy[c] = False
                state.notify_all()

    with single_threaded_blas():
        _run_all([run] * workers)
    for error in filter(None, errors):
        raise error
    return results


# ------------------------------------------------------------------------------------------------
# BLAS on one thread
# ------------------------------------------------------------------------------------------------
@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # a scikit-learn dependency

    return ThreadpoolController()


_BLAS_LIMIT_LOCK = threading.Lock()
_BLAS_LIMIT: dict = {"depth": 0, "limiter": None, "inherited": None}
#: Held by a threaded map while its threads run: maps from several user threads take turns.
_MAP_LOCK = threading.RLock()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Context in which BLAS / LAPACK run on one thread.

    For the small steps of a block iteration (QR of n x b blocks, eigh of the m x m projected
    matrix) and the products inside threads over chunks: OpenBLAS's thread start-up and
    synchronisation cost more than they save at these sizes, ten times more on a loaded machine.

    The limit is process-wide, so it is shared: the first context to enter (in any thread) sets
    it and the last to leave restores the original, under a lock.  Threads that each hold one
    (dask worker threads running statistics, the chunk threads) neither serialise nor undo each
    other's limit.  threadpoolctl (>= 3.6) lets only one "controlling" thread change OpenBLAS's
    process-wide pool and silently ignores the others; a plain limit per thread was therefore
    void in dask worker threads once the main thread had set one, so control is released around
    each change.
    """
    with _BLAS_LIMIT_LOCK:
        if _BLAS_LIMIT["depth"] == 0:
            _BLAS_LIMIT["inherited"] = _read_inherited_limit()
            _release_blas_control()
            _BLAS_LIMIT["limiter"] = _blas_controller().limit(limits=1, user_api="blas")
            _release_blas_control()
        _BLAS_LIMIT["depth"] += 1
    try:
        yield
    finally:
        with _BLAS_LIMIT_LOCK:
            _BLAS_LIMIT["depth"] -= 1
            if _BLAS_LIMIT["depth"] == 0:
                _release_blas_control()
                _BLAS_LIMIT["limiter"].restore_original_limits()
                _release_blas_control()
                _BLAS_LIMIT["limiter"] = None


def _release_blas_control() -> None:
    """Let any thread change OpenBLAS's thread count next (threadpoolctl >= 3.6 gives that
    right to one controlling thread; older versions have no such notion)."""
    import threadpoolctl

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS held to one thread (:func:`one_blas_thread`) while a threaded map runs; maps started
    from several threads at once take turns, which costs nothing since each already uses every
    core it was given."""
    with _MAP_LOCK, one_blas_thread():
        yield


def _after_fork_in_child() -> None:
    """A forked child starts with unlocked locks (a lock another thread held at the fork would
    stay locked forever) and no pool (its threads stayed in the parent)."""
    global _BLAS_LIMIT_LOCK, _MAP_LOCK
    _BLAS_LIMIT_LOCK = threading.Lock()
    _MAP_LOCK = threading.RLock()
    _POOL.lock = threading.Lock()
    _POOL.executor, _POOL.size, _POOL.pid = None, 0, os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
