"""How many threads a fit takes when it runs inside someone else's parallelism: joblib's workers
(``GridSearchCV(..., n_jobs=2)``), ``joblib.parallel_config``, threadpoolctl's limits and
``OMP_NUM_THREADS`` (the rule: :mod:`fastkpca.execution.threads`, "How wide a call runs"), and
counts that are capped at the usable cores before any per-thread memory is counted.

The models never depend on the thread count (``test_execution_threads.py``): these tests only
look at the count.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from joblib import cpu_count, parallel_config
from sklearn.model_selection import GridSearchCV
from threadpoolctl import threadpool_limits

from fastkpca import RandomFeatureKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.execution import n_workers, resolve_n_jobs, threads, usable_cores, using_n_jobs


class ThreadCountingKPCA(RandomFeatureKPCA):
    """RandomFeatureKPCA that records, in ``threads_seen_``, the thread count its ``fit`` runs
    its maps with (read inside the fit's own execution context)."""

    def fit(self, X, y=None):
        self.threads_seen_ = n_workers()
        return super().fit(X, y)


def _threads_seen(estimator, X, y=None):
    """A GridSearchCV scorer: the thread count each fit recorded, reported as its score."""
    return float(estimator.threads_seen_)


def _grid_search(X, n_jobs=2):
    search = GridSearchCV(
        ThreadCountingKPCA(n_random_features=64, random_state=0),
        {"n_components": [1, 2]},
        cv=2,
        n_jobs=n_jobs,
        scoring=_threads_seen,
        refit=False,
        error_score="raise",
    )
    return search.fit(X)


@pytest.fixture(scope="module")
def X():
    return make_random_noisy(1200, 6, signal_dim=3, random_state=0)


def _joblib_worker_threads(n_jobs: int) -> int:
    """What joblib gives each of its n_jobs worker processes: ``OMP_NUM_THREADS`` (and the
    other thread variables) set to ``cpu_count() // n_jobs``, or the parent's own value."""
    inherited = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    given = int(inherited) if inherited.isdigit() else max(cpu_count() // n_jobs, 1)
    return max(1, min(given, usable_cores()))


def test_grid_search_processes_give_each_fit_its_workers_share(X):
    # loky, joblib's default: each worker process is given cpu_count() // 2 threads (1 on two
    # cores), and a fit with n_jobs=None takes that many, not every core of the machine.
    with parallel_config(backend="loky"):
        search = _grid_search(X)
    seen = search.cv_results_["mean_test_score"]
    assert set(seen) == {float(_joblib_worker_threads(2))}


def test_grid_search_threads_never_run_more_threads_than_cores(X, monkeypatch):
    # threading: the fits share the process.  Each keeps the usable cores, and their threaded
    # maps take turns, so fastkpca's pool never runs more shares at once than the cores.
    # Threads inside a share, counted once however deeply their shares nest.
    active: dict[int, int] = {}
    peak, lock = [0], threading.Lock()
    run_share = threads._run_share

    def counting(index, job):
        me = threading.get_ident()
        with lock:
            active[me] = active.get(me, 0) + 1
            peak[0] = max(peak[0], len(active))
        try:
            return run_share(index, job)
        finally:
            with lock:
                active[me] -= 1
                if not active[me]:
                    del active[me]

    monkeypatch.setattr(threads, "_run_share", counting)
    with parallel_config(backend="threading"):
        search = _grid_search(X)
    cores = usable_cores()
    assert set(search.cv_results_["mean_test_score"]) == {float(resolve_n_jobs(None))}
    assert resolve_n_jobs(None) <= cores
    assert 1 <= peak[0] <= cores


def test_parallel_config_n_jobs_sets_the_count_of_n_jobs_none(X, monkeypatch):
    # As a scikit-learn estimator's n_jobs=None defers to joblib's context; an explicit n_jobs
    # (the estimator's, or an enclosing fastkpca context's) wins over it.
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    with parallel_config(n_jobs=1):
        assert ThreadCountingKPCA(1, n_random_features=16).fit(X[:300]).threads_seen_ == 1
        assert ThreadCountingKPCA(1, n_random_features=16, n_jobs=3).fit(X[:300]).threads_seen_ == 3
        with using_n_jobs(2):
            assert n_workers() == 2
    with parallel_config(n_jobs=3):
        assert n_workers() == 3
    with parallel_config(n_jobs=-1):
        assert n_workers() == 4
    with parallel_config(n_jobs=-2):
        assert n_workers() == 3


def test_threadpool_limits_cap_n_jobs_none(X, monkeypatch):
    # threadpoolctl's limits (what scikit-learn's OpenMP loops obey) cap n_jobs=None; an
    # explicit count is taken as given.
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    if threads._sklearn_openmp_threads() is None:
        pytest.skip("scikit-learn built without OpenMP: its limits say nothing here")
    with threadpool_limits(limits=1):
        assert n_workers() == 1
        assert ThreadCountingKPCA(1, n_random_features=16).fit(X[:300]).threads_seen_ == 1
        assert ThreadCountingKPCA(1, n_random_features=16, n_jobs=2).fit(X[:300]).threads_seen_ == 2
    unlimited = threads.inherited_limit()
    with threadpool_limits(limits=1, user_api="blas"):
        # a limit on BLAS alone (fastkpca's own, around its maps, is one) is not one on these
        # threads, as it is not on scikit-learn's OpenMP loops
        assert threads.inherited_limit() == unlimited
        assert n_workers() == min(4, unlimited or 4)


def test_fastkpcas_own_blas_limit_does_not_shrink_its_threads(monkeypatch):
    # An OpenBLAS built on OpenMP applies a BLAS limit through omp_set_num_threads: while
    # fastkpca holds BLAS to one thread, the limit read before it did so counts.
    monkeypatch.setattr(threads, "_read_inherited_limit", lambda: 3)
    before = threads.inherited_limit()
    with threads.one_blas_thread():
        monkeypatch.setattr(threads, "_read_inherited_limit", lambda: 1)
        assert threads.inherited_limit() == before == 3
    assert threads.inherited_limit() == 1


def test_omp_num_threads_caps_n_jobs_none():
    # A process started with OMP_NUM_THREADS=1 (a batch job, one of joblib's worker processes)
    # runs fastkpca on one thread unless told otherwise.
    code = (
        "from fastkpca.execution import n_workers, resolve_n_jobs, usable_cores; "
        "print(n_workers(), resolve_n_jobs(-1) == usable_cores())"
    )
    env = {k: v for k, v in os.environ.items() if k != "FASTKPCA_CORES"}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "True"]


# --- counts capped before per-thread memory is counted ------------------------------------------
def test_counts_are_capped_at_the_usable_cores(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    assert resolve_n_jobs(10**6) == 4
    with using_n_jobs(10**6):
        assert n_workers() == 4
    assert resolve_n_jobs(-(10**6)) == 1


@pytest.mark.parametrize("how", ["n_jobs", "FASTKPCA_CORES"])
def test_a_huge_thread_count_does_not_inflate_the_memory_check(how, X, monkeypatch):
    # The randomized solver holds one covariance sketch per thread: with n_jobs=10**6 (or
    # FASTKPCA_CORES=1000000) counted as such, 2000 features needed ~450 GiB and the refusal
    # blamed n_random_features.  The count is the usable cores (at most the machine's CPUs).
    monkeypatch.setenv("FASTKPCA_MEMORY", "1G")
    params = dict(n_random_features=2000, solver="randomized", random_state=0)
    if how == "n_jobs":
        model = RandomFeatureKPCA(2, n_jobs=10**6, **params)
    else:
        monkeypatch.setenv("FASTKPCA_CORES", "1000000")
        assert usable_cores() <= (os.cpu_count() or 1)
        model = RandomFeatureKPCA(2, **params)
    model.fit(X[:600])
    assert model.eigenvalues_.shape == (2,) and np.all(np.isfinite(model.eigenvalues_))
