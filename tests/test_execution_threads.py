"""The execution layer's threads: ``n_jobs`` with scikit-learn's meaning on every estimator, held
for the whole call, and models that do not depend on the number of threads.

Why the tolerances are what they are: the threads split rows into contiguous groups of whole
chunks and shares whose grid depends only on the rows, each chunk and share is computed the same
way whatever the thread count (BLAS on one thread), and only the per-thread float64 totals are
added in another grouping.  That is ~1e-16 relative per sum; the eigensolvers amplify it by the
inverse relative eigengap (at most ~1e3 on these small problems), far below the 1e-8 relative
asked of every model.  The transform of every random-feature model computes in float32 (the
features and their projection, ``fastkpca.features.FOURIER_DTYPE``): a model that differs by
1e-16 can round a float32 step of it the other way, one float32 unit (6e-8 relative) in the
projections, so those are compared at 1e-5 of their largest entry.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastkpca import (
    ExactKPCA,
    KernelPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
    compress_expansion,
)
from fastkpca.datasets import make_random_noisy
from fastkpca.decomposition._base import execution_context
from fastkpca.execution import (
    CHUNK_ROWS,
    elementwise,
    map_chains,
    map_row_chunks,
    map_tasks,
    n_workers,
    resolve_n_jobs,
    sum_over_shares,
    threads,
    using_n_jobs,
    worker_index,
)
from fastkpca.metrics import estimate_error
from fastkpca.statistics.feature_sketch import SPLIT_ROWS, FeatureSketch
from fastkpca.transformers import (
    FastfoodFeatures,
    OrthogonalRandomFeatures,
    RandomFourierFeatures,
    TensorSketchFeatures,
)

RTOL64 = 1e-8
RTOL32 = 1e-5  # the float32 projections of random-feature models (module notes)
JOBS = (1, 2, 4)  # 4 threads on a 2-core machine: oversubscribed, still correct
#: The cores these tests let a call use (:func:`_eight_cores`).
CORES = 8


@pytest.fixture(autouse=True)
def _eight_cores(monkeypatch):
    """Counts up to CORES honoured on any machine: n_workers caps a count at the usable cores,
    and these tests run 3 and 4 threads on a 2-core machine too (oversubscribed), to check that
    nothing depends on the count."""
    monkeypatch.setattr(threads, "usable_cores", lambda: CORES)


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(3000, 12, signal_dim=5, random_state=0)
    return X[:2600], X[2600:]


# --- n_jobs -----------------------------------------------------------------------------------
def test_resolve_n_jobs_has_scikit_learns_meaning():
    cores = CORES
    assert resolve_n_jobs(-1) == cores
    # None: every usable core, within the limit the context gives (test_execution_nested.py)
    assert resolve_n_jobs(None) == min(cores, threads.inherited_limit() or cores)
    assert resolve_n_jobs(-2) == max(1, cores - 1)
    assert resolve_n_jobs(-10 * cores) == 1  # never fewer than one
    assert resolve_n_jobs(3) == 3 and resolve_n_jobs(np.int64(5)) == 5
    assert resolve_n_jobs(10 * cores) == cores  # never more than the usable cores
    for bad in (0, 1.5, "2", True):
        with pytest.raises(ValueError, match="n_jobs"):
            resolve_n_jobs(bad)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ExactKPCA(2, **kw),
        lambda **kw: NystromKPCA(2, n_landmarks=20, **kw),
        lambda **kw: RandomFeatureKPCA(2, n_random_features=20, **kw),
        lambda **kw: StreamingKPCA(2, n_random_features=20, **kw),
        lambda **kw: ReducedSetKPCA(2, **kw),
        lambda **kw: SparsifiedKPCA(2, **kw),
        lambda **kw: KernelPCA(2, **kw),
        lambda **kw: RandomFourierFeatures(20, **kw),
    ],
)
def test_every_estimator_takes_n_jobs_verbose_and_device_last_and_refuses_bad_ones(make, data):
    X, _ = data
    model = make()
    names = list(model.get_params())
    assert model.n_jobs is None and model.verbose == 0
    import inspect

    params = list(inspect.signature(type(model).__init__).parameters)
    # last: positional use is unchanged
    assert params[-3:] == ["n_jobs", "verbose", "device"]
    assert "n_jobs" in names and "verbose" in names
    bad_values = ((0, "n_jobs"), (2.5, "n_jobs"), (-1, "verbose"), ("x", "verbose"))
    for bad, name in (*bad_values, ("no such device", "device"), (3, "device")):
        with pytest.raises(ValueError, match=name):
            make(**{name: bad}).fit(X[:50])


def test_n_jobs_holds_for_the_whole_call(data, monkeypatch):
    # Every threaded step of a call sees the estimator's count, nested estimators with
    # n_jobs=None inherit it, and it ends with the call.
    import fastkpca.execution.feature_ops as elementwise

    seen = []
    original = elementwise.map_row_chunks

    def spy(n, fn, **kw):
        seen.append(n_workers())
        return original(n, fn, **kw)

    monkeypatch.setattr(elementwise, "map_row_chunks", spy)
    X, X_new = data
    model = RandomFeatureKPCA(2, n_random_features=32, random_state=0, n_jobs=3).fit(X)
    model.transform(X_new)
    assert seen and set(seen) == {3}
    assert n_workers() == resolve_n_jobs(None)  # the call's count ended with it
    with using_n_jobs(2):  # an enclosing context (the CLI's --jobs): None inherits it
        seen.clear()
        RandomFeatureKPCA(2, n_random_features=32, random_state=0).fit(X)
        assert set(seen) == {2}
        with execution_context(RandomFeatureKPCA(n_jobs=1)):
            assert n_workers() == 1  # an explicit count wins
    with execution_context(StreamingKPCA(n_jobs=-1)):
        assert n_workers() == CORES


def test_thread_maps_cover_every_row_once_in_share_order():
    for jobs in JOBS:
        with using_n_jobs(jobs):
            seen = np.zeros(1000, dtype=int)
            owners = {}

            def chunk(start, stop, seen=seen, owners=owners):
                seen[start:stop] += 1
                owners.setdefault(worker_index(), []).append(start)

            map_row_chunks(1000, chunk, chunk_rows=64)
            assert np.all(seen == 1)
            assert len(owners) == min(jobs, 16)
            firsts = [owners[i][0] for i in sorted(owners)]
            assert firsts == sorted(firsts) and firsts[0] == 0  # contiguous shares, in order
            assert all(s % 64 == 0 for starts in owners.values() for s in starts)  # same grid
            parts = []
            total = sum_over_shares(
                1000, lambda a, b, parts=parts: parts.append(a) or np.array([b - a]), share_rows=96
            )
            assert total[0] == 1000 and sorted(parts) == list(range(0, 1000, 96))
            assert map_tasks(lambda t: t * t, range(7)) == [t * t for t in range(7)]


def test_input_finiteness_is_checked_in_threads_entry_by_entry_where_a_sum_is_not(monkeypatch):
    # shares of 4 rows: the bad entries sit in different shares, read by different threads
    monkeypatch.setattr(elementwise, "FINITE_SHARE_BYTES", 4 * 3 * 8)
    X = np.arange(300.0).reshape(100, 3)
    huge = np.full((100, 3), np.finfo(np.float64).max)  # finite, but every share's sum overflows
    for jobs in JOBS:
        with using_n_jobs(jobs):
            assert elementwise.nonfinite(X) is None and elementwise.nonfinite(huge) is None
            bad = X.copy()
            bad[90, 1] = -np.inf
            assert elementwise.nonfinite(bad) == "infinity"
            bad[7, 2] = np.nan  # NaN is named first, whichever share finds which
            assert elementwise.nonfinite(bad) == "NaN"
            assert elementwise.nonfinite(bad.astype(np.float32)) == "NaN"
            assert elementwise.nonfinite(np.zeros((0, 3))) is None
            with pytest.raises(ValueError, match=r"Input X contains infinity\."):
                NystromKPCA(2, n_landmarks=5).fit(np.where(np.isnan(bad), 0.0, bad))
            with pytest.raises(ValueError, match=r"Input X contains NaN\."):
                RandomFeatureKPCA(2).fit(bad)


@pytest.mark.parametrize("workers", [1, 2, 4, 16, 64])
def test_balanced_maps_share_the_rows_in_fixed_contiguous_shares(workers, monkeypatch):
    """``map_row_chunks(balanced=True)``: every chunk once, in contiguous shares of decreasing
    size (guided: a quarter of the chunks first on two threads, the last ones a chunk or a few)
    or, where that would make more than MAX_BALANCED_SHARES of them, as many equal ones (at
    least one per thread); ``worker_index`` is the share, the shares depend on the chunk and
    thread counts alone, and the chunks of a share run in order, in one thread at a time."""
    import threading

    monkeypatch.setattr(threads, "n_workers", lambda: workers)
    for n_chunks in (1, 10, 391, 3907):
        n = 64 * n_chunks - 5
        owners: dict[int, list[int]] = {}
        seen = np.zeros(n, dtype=int)
        lock = threading.Lock()

        def chunk(start, stop, seen=seen, owners=owners, lock=lock):
            with lock:
                seen[start:stop] += 1
                owners.setdefault(worker_index(), []).append(start)

        map_row_chunks(n, chunk, chunk_rows=64, balanced=True)
        assert np.all(seen == 1)
        shares = threads.n_shares(n_chunks)
        assert sorted(owners) == list(range(shares))
        assert shares >= min(workers, n_chunks)
        assert shares <= max(threads.MAX_BALANCED_SHARES, min(workers, n_chunks))
        for i in range(shares):  # contiguous, in order, shares in order along the rows
            starts = owners[i]
            assert starts == list(range(starts[0], starts[-1] + 64, 64))
            if i:
                assert starts[0] == owners[i - 1][-1] + 64
        sizes = [len(owners[i]) for i in range(shares)]
        if workers == 2 and n_chunks >= 391:
            assert sizes[0] == -(-n_chunks // 4) and sizes == sorted(sizes, reverse=True)
            assert sizes[-1] <= max(1, n_chunks // 256)
        if workers == 1:
            assert shares == 1


def test_nested_maps_run_in_their_worker_and_errors_propagate():
    out = np.zeros(64)

    def outer(start, stop):
        def inner(a, b):
            out[start + a : start + b] += 1

        map_row_chunks(stop - start, inner, chunk_rows=4)  # inside a worker: serial

    with using_n_jobs(4):
        map_row_chunks(64, outer, chunk_rows=16)
        assert np.all(out == 1)

        def fail(t):
            if t == 3:
                raise ValueError("task 3 failed")
            return t

        with pytest.raises(ValueError, match="task 3"):
            map_tasks(fail, range(6))


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_one_task_chains_run_each_once_and_return_in_task_order(jobs):
    """``map_chains`` of one-task chains (the symmetric Gram's strips, the balanced shares of
    ``map_row_chunks``): whichever thread is free takes the next task; every task runs once,
    results come back in task order, a slow task does not hold back the others' thread, and a
    failing task's error reaches the caller after the others ran."""
    import threading
    import time

    runs: list[int] = []
    lock = threading.Lock()

    def task(t):
        if t == 0:
            time.sleep(0.2)  # the longest first, as the Gram's strips are ordered
        with lock:
            runs.append(t)
        return t * t

    with using_n_jobs(jobs):
        assert map_chains(task, [[t] for t in range(9)]) == [[t * t] for t in range(9)]
        assert sorted(runs) == list(range(9))
        if jobs > 1:
            assert runs[-1] == 0  # while task 0's thread slept, another took all the rest
        else:
            assert runs == list(range(9))

        def fail(t):
            if t == 4:
                raise ValueError("task 4 failed")
            return t

        with pytest.raises(ValueError, match="task 4"):
            map_chains(fail, [[t] for t in range(6)])


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_chains_run_in_order_one_task_at_a_time_on_any_thread(jobs):
    """``map_chains``: every task runs once, a chain's tasks in order and never two at once,
    results per chain in task order; a free thread takes the chain with the most work left
    (tasks left times weight), so a slow chain does not hold the others back; a failing task
    stops the chains and its error reaches the caller."""
    import threading
    import time

    lock = threading.Lock()
    order: dict[int, list[int]] = {}
    running: set[int] = set()
    overlaps: list[int] = []
    threads_of: dict[int, set] = {}

    def task(t):
        c, i = t
        with lock:
            if c in running:
                overlaps.append(c)
            running.add(c)
            order.setdefault(c, []).append(i)
            threads_of.setdefault(c, set()).add(threading.get_ident())
        time.sleep(0.02 if c == 0 else 0.002)
        with lock:
            running.discard(c)
        return 10 * c + i

    chains = [[(c, i) for i in range(n)] for c, n in enumerate([6, 3, 0, 5, 1])]
    with using_n_jobs(jobs):
        out = map_chains(task, chains, weights=[1, 1, 1, 2, 1])
        assert out == [[10 * c + i for i in range(len(chain))] for c, chain in enumerate(chains)]
        assert not overlaps
        assert all(order[c] == list(range(len(chain))) for c, chain in enumerate(chains) if chain)
        if jobs > 1:
            # chain 0's slow tasks kept one thread; the others took the rest meanwhile
            assert len(set().union(*threads_of.values())) > 1

        def fail(t):
            if t == (1, 1):
                raise ValueError("task 1 of chain 1 failed")
            return t

        with pytest.raises(ValueError, match="chain 1"):
            map_chains(fail, chains)
        assert map_chains(task, []) == [] and map_chains(task, [[]]) == [[]]


def _forked_child(queue):
    with using_n_jobs(3):
        total = sum_over_shares(9000, lambda a, b: np.array([float(b - a)]), share_rows=100)
    queue.put(float(total[0]))


def test_pool_is_made_anew_in_a_forked_child():
    import multiprocessing as mp

    with using_n_jobs(3):
        map_tasks(lambda t: t, range(6))  # the parent's pool exists
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_forked_child, args=(queue,))
    child.start()
    assert queue.get(timeout=120) == 9000.0
    child.join(timeout=60)
    assert child.exitcode == 0


# --- the same model on any number of threads --------------------------------------------------
def _arrays(model, X_new):
    out = {"transform": np.asarray(model.transform(X_new), dtype=np.float64)}
    for name in ("eigenvalues_", "components_", "mean_", "eigenvectors_", "eigenvalue_bounds_"):
        value = getattr(model, name, None)
        if isinstance(value, np.ndarray):
            out[name] = np.asarray(value, dtype=np.float64)
    return out


def _assert_same(got, ref, rtol, what, transform_rtol=None):
    for key, value in ref.items():
        scale = max(float(np.max(np.abs(value), initial=0.0)), 1e-300)
        tol = transform_rtol if key == "transform" and transform_rtol else rtol
        np.testing.assert_allclose(
            got[key], value, rtol=0, atol=tol * scale, err_msg=f"{what}: {key}"
        )


CASES = {
    "exact_dense": (lambda j: ExactKPCA(4, eigen_solver="dense", n_jobs=j), RTOL64),
    "exact_randomized": (
        lambda j: ExactKPCA(4, eigen_solver="randomized", random_state=0, n_jobs=j),
        RTOL64,
    ),
    "exact_matrix_free": (
        lambda j: ExactKPCA(4, eigen_solver="matrix_free", random_state=0, n_jobs=j),
        RTOL64,
    ),
    "kernel_pca": (
        lambda j: KernelPCA(4, kernel="rbf", gamma=0.05, random_state=0, n_jobs=j),
        RTOL64,
    ),
    "nystrom_randomized": (
        lambda j: NystromKPCA(4, n_landmarks=200, solver="randomized", random_state=0, n_jobs=j),
        RTOL64,
    ),
    "nystrom_exact": (
        lambda j: NystromKPCA(4, n_landmarks=200, solver="exact", random_state=0, n_jobs=j),
        RTOL64,
    ),
    "rf_exact": (
        lambda j: RandomFeatureKPCA(
            4, n_random_features=300, solver="exact", random_state=0, n_jobs=j
        ),
        RTOL64,
    ),
    "rf_randomized": (
        lambda j: RandomFeatureKPCA(
            4, n_random_features=300, solver="randomized", random_state=0, n_jobs=j
        ),
        RTOL64,
    ),
    "rf_countsketch": (
        lambda j: RandomFeatureKPCA(
            4, n_random_features=300, solver="countsketch", random_state=0, n_jobs=j
        ),
        RTOL64,
    ),
    "rf_fastfood": (
        lambda j: RandomFeatureKPCA(
            4,
            n_random_features=256,
            features="fastfood",
            solver="randomized",
            random_state=0,
            n_jobs=j,
        ),
        RTOL64,
    ),
    "streaming": (
        lambda j: StreamingKPCA(4, n_random_features=200, sketch_size=12, random_state=0, n_jobs=j),
        RTOL64,
    ),
    "reduced_set": (lambda j: ReducedSetKPCA(4, random_state=0, n_jobs=j), RTOL64),
    "reduced_set_kmeans": (
        lambda j: ReducedSetKPCA(4, density="kmeans", n_centers=100, random_state=0, n_jobs=j),
        RTOL64,
    ),
    "sparsified": (
        lambda j: SparsifiedKPCA(4, sample_prob=0.3, random_state=0, n_jobs=j),
        RTOL64,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_model_and_transform_on_1_2_and_4_threads(name, data):
    make, rtol = CASES[name]
    float32_transform = name.startswith(("rf_", "streaming"))  # see the module notes
    X, X_new = data
    if name.startswith(("exact", "kernel_pca", "sparsified")):
        X = X[:900]  # n x n Grams
    ref = None
    for jobs in JOBS:
        model = make(jobs).fit(X)
        got = _arrays(model, X_new)
        if ref is None:
            ref = got
            continue
        _assert_same(
            got, ref, rtol, f"{name}, n_jobs={jobs}", RTOL32 if float32_transform else None
        )


@pytest.mark.parametrize("name", ["rf_randomized", "nystrom_randomized", "streaming"])
def test_one_pass_models_on_16_threads_equal_one_threads(name, monkeypatch):
    """Issue 33's thread-count invariance at 16 threads (oversubscribed here): enough rows for
    16 threads to share (24 feature chunks, each its own balanced share; 47 kernel-row chunks),
    the model of one thread to rounding."""
    monkeypatch.setattr(threads, "usable_cores", lambda: 16)
    make, rtol = CASES[name]
    X = make_random_noisy(12000, 12, signal_dim=5, random_state=1)
    ref = _arrays(make(1).fit(X), X[:300])
    with using_n_jobs(16):
        assert threads.n_workers() == 16 and threads.n_shares(-(-12000 // CHUNK_ROWS)) == 24
    got = _arrays(make(16).fit(X), X[:300])
    _assert_same(got, ref, rtol, f"{name}, n_jobs=16", RTOL32)


@pytest.mark.parametrize("cls", [RandomFourierFeatures, OrthogonalRandomFeatures, FastfoodFeatures])
def test_feature_transformers_on_any_number_of_threads(cls, data):
    X, X_new = data
    ref = cls(128, random_state=0, n_jobs=1).fit(X).transform(X_new)
    for jobs in JOBS[1:]:
        got = cls(128, random_state=0, n_jobs=jobs).fit(X).transform(X_new)
        # each 512-row chunk's features are computed alike whatever the threads
        np.testing.assert_allclose(got, ref, rtol=0, atol=RTOL64 * np.abs(ref).max())
    poly = TensorSketchFeatures(64, random_state=0, n_jobs=2).fit(X).transform(X_new)
    assert poly.shape == (X_new.shape[0], 64)


def test_compressed_transform_and_estimate_error_on_any_number_of_threads(data):
    X, X_new = data
    model = NystromKPCA(4, n_landmarks=150, random_state=0).fit(X)
    fast = compress_expansion(model, rounding=0.5, random_state=0)
    refs = None
    for jobs in JOBS:
        model.set_params(n_jobs=jobs)
        fast.set_params(n_jobs=jobs)
        est = estimate_error(model, X, n_probe=400, random_state=0)
        got = (
            fast.transform(X_new),
            est["relative_rank_k_error"]["estimate"],
            np.asarray(est["eigenvalues_per_row"]["estimate"]),
        )
        if refs is None:
            refs = got
            continue
        np.testing.assert_allclose(got[0], refs[0], rtol=0, atol=RTOL64 * np.abs(refs[0]).max())
        assert got[1] == pytest.approx(refs[1], rel=RTOL64)
        np.testing.assert_allclose(got[2], refs[2], rtol=RTOL64)


def test_matrix_free_gram_pass_on_any_number_of_threads():
    from fastkpca.execution.kernel_ops import CenteredGramOperator
    from fastkpca.kernels import RBF

    rng = np.random.default_rng(3)
    X, V = rng.standard_normal((700, 6)), rng.standard_normal((700, 5))
    with using_n_jobs(1):
        ref = CenteredGramOperator(X, RBF(0.1), rows=128) @ V
    for jobs in JOBS[1:]:
        with using_n_jobs(jobs):
            got = CenteredGramOperator(X, RBF(0.1), rows=128) @ V
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_streaming_rows_reach_the_same_sketches_whatever_the_blocks_and_threads(data):
    # Which rows a sketch sees is fixed by their index: the exact energy of each sketch is
    # that of its rows, for any blocking and thread count (features in float32: rtol 1e-6).
    X, _ = data
    X = np.vstack([X, X])[:5000]
    params = dict(n_random_features=64, sketch_size=6, random_state=1)
    fmap = StreamingKPCA(2, **params).fit(X[:10]).feature_map_
    Z = fmap(X).astype(np.float64)
    owner = (np.arange(5000) // SPLIT_ROWS) % len(FeatureSketch.empty(6, 64).parts)
    for jobs in JOBS:
        for blocks in (None, 777, 1024):
            model = StreamingKPCA(2, n_jobs=jobs, **params)
            if blocks is None:
                model.fit(X)
            else:
                for s in range(0, 5000, blocks):
                    model.partial_fit(X[s : s + blocks])
            parts, _ = model._sketch_parts
            for j, part in enumerate(parts):
                rows = owner == j
                if not rows.any():
                    assert part is None
                    continue
                assert part.n_rows_seen == rows.sum()
                np.testing.assert_allclose(part.squared_norm, np.sum(Z[rows] ** 2), rtol=1e-6)


# --- the command line, progress bars, old model files -----------------------------------------
def test_cli_jobs_option(data, tmp_path, capsys, monkeypatch):
    # --jobs N runs the command's estimators with N threads (and a loaded model's own n_jobs
    # gives way to it); 0 is refused in one line.
    import fastkpca.execution.feature_ops as elementwise
    from fastkpca.cli import main

    X, X_new = data
    np.save(tmp_path / "x.npy", X[:600])
    seen = []
    original = elementwise.map_row_chunks
    monkeypatch.setattr(
        elementwise,
        "map_row_chunks",
        lambda *a, **k: seen.append(n_workers()) or original(*a, **k),
    )
    model = str(tmp_path / "m.npz")
    args = ["fit", str(tmp_path / "x.npy"), "--method", "rf", "-k", "2", "-o", model]
    assert main([*args, "--jobs", "3", "-q"]) == 0
    assert seen and set(seen) == {3}
    seen.clear()
    out = str(tmp_path / "t.npy")
    assert main(["transform", model, str(tmp_path / "x.npy"), "-o", out, "-j", "2", "-q"]) == 0
    assert set(seen) == {2}
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([*args, "--jobs", "0", "--force"])
    assert "--jobs" in capsys.readouterr().err


class _Bar:
    """Stands for tqdm: records what a progress bar was asked to show."""

    made: list = []

    def __init__(self, total=None, desc=None, **kwargs):
        self.total, self.desc, self.kwargs, self.n = total, desc, kwargs, 0
        _Bar.made.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.parametrize(
    "make",
    [
        lambda v: RandomFeatureKPCA(2, n_random_features=64, random_state=0, verbose=v),
        lambda v: StreamingKPCA(2, n_random_features=64, random_state=0, verbose=v),
        lambda v: NystromKPCA(2, n_landmarks=50, random_state=0, verbose=v),
    ],
)
def test_verbose_shows_a_bar_over_the_rows_of_the_pass(make, data, monkeypatch):
    # verbose > 0: on a terminal, a tqdm.auto bar counts every row of the pass, with the total
    # known up front, and stays when done (elsewhere lines: tests/test_cli_progress.py);
    # verbose=0: none.
    import tqdm.auto

    from fastkpca.execution import progress

    X, _ = data
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    _Bar.made = []
    make(0).fit(X)
    assert _Bar.made == []
    make(1).fit(X)
    assert len(_Bar.made) == 1
    bar = _Bar.made[0]
    assert bar.total == bar.n == X.shape[0] and bar.kwargs["leave"] is True


def test_verbose_matrix_free_and_blocks(data, monkeypatch):
    import tqdm.auto

    from fastkpca.execution import progress

    X, _ = data
    monkeypatch.setattr(tqdm.auto, "tqdm", _Bar)
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    _Bar.made = []
    model = ExactKPCA(2, eigen_solver="matrix_free", random_state=0, verbose=1).fit(X[:500])
    assert len(_Bar.made) == model.n_iter_ and all(b.n == b.total for b in _Bar.made)
    _Bar.made = []
    blocks = [X[s : s + 700] for s in range(0, X.shape[0], 700)]
    StreamingKPCA(2, n_random_features=32, random_state=0, verbose=2).partial_fit(blocks)
    assert [b.n for b in _Bar.made] == [X.shape[0]] and _Bar.made[0].total is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: StreamingKPCA(2, n_random_features=32, random_state=0, n_jobs=2, verbose=1),
        lambda: NystromKPCA(2, n_landmarks=30, random_state=0, n_jobs=-1),
        lambda: KernelPCA(2, kernel="rbf", n_jobs=1),
    ],
)
def test_model_files_without_n_jobs_and_verbose_still_load(make, data, tmp_path):
    # Files written before these parameters existed name neither: they load with the defaults.
    import hashlib
    import json

    from fastkpca import load

    X, X_new = data
    model = make().fit(X[:400])
    path = tmp_path / "m.npz"
    model.save(path)
    with np.load(path, allow_pickle=False) as f:
        contents = {k: f[k] for k in f.files}
    meta = json.loads(str(contents["__fastkpca__"][()]))
    assert {"n_jobs", "verbose"} <= set(meta["params"])
    del meta["params"]["n_jobs"], meta["params"]["verbose"]
    text = json.dumps(meta, sort_keys=True)
    contents["__fastkpca__"] = np.array(text)
    contents["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with open(path, "wb") as f:
        np.savez(f, **contents)
    loaded = load(path)
    assert loaded.n_jobs is None and loaded.verbose == 0
    # the same arrays through the same code: equal by construction
    np.testing.assert_allclose(loaded.transform(X_new), model.transform(X_new), rtol=0, atol=0)


# --- StreamingKPCA: sketches that cannot fit, the FD bound over all of them ---------------------
def test_streaming_refuses_sketches_and_anchors_that_cannot_fit(data, monkeypatch):
    # Up front (before the pass), naming the parameter and the memory: 2 sketches of a 5000-row
    # sketch of 20000 features are ~10 GB; 2600 pre-image anchors of 12 columns with their Gram
    # ~110 MB.
    X, _ = data
    monkeypatch.setenv("FASTKPCA_MEMORY", "1G")
    big = StreamingKPCA(2, n_random_features=20000, sketch_size=5000, random_state=0)
    with pytest.raises(ValueError, match=r"sketch_size=5000 .* needs .* GiB"):
        big.fit(X)
    assert not hasattr(big, "sketch_")  # nothing was fitted
    with pytest.raises(ValueError, match="sketch_size=5000"):
        big.partial_fit(X[:100])
    monkeypatch.setenv("FASTKPCA_MEMORY", "64M")
    anchors = StreamingKPCA(
        2, n_random_features=20, fit_inverse_transform=True, n_inverse_samples=5000
    )
    with pytest.raises(ValueError, match=r"n_inverse_samples=2600: .* needs .* MiB"):
        anchors.fit(X)
    StreamingKPCA(2, n_random_features=20, sketch_size=5000).fit(X[:300])  # capped at m: small
    with pytest.raises(ValueError, match="n_inverse_samples"):
        StreamingKPCA(2, fit_inverse_transform=True, n_inverse_samples=0).fit(X[:300])


def test_fd_bound_holds_for_the_tree_merge_of_all_sketches(rng):
    # Rows dealt to all 32 sketches (and two runs to sketch 0): the merged sketch keeps
    # 0 <= Z^T Z - B^T B and ||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k) for every k,
    # whatever the number of threads, with round-off room eps-sized next to ||Z||_F^2.
    n, m, ell = 32 * SPLIT_ROWS + 500, 24, 6
    Z = rng.standard_normal((n, 4)) @ rng.standard_normal((4, m)) + 0.3 * rng.standard_normal(
        (n, m)
    )
    Z *= np.linspace(0.5, 2.0, n)[:, None]
    s2 = np.linalg.svd(Z, compute_uv=False) ** 2
    tails = np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])
    fro2 = float(np.sum(Z * Z))
    grams = []
    for jobs in (1, 3):
        with using_n_jobs(jobs):
            stat = FeatureSketch.empty(ell, m).update(Z)
            B = stat.sketch.sketch()
        assert sum(p is not None for p in stat.parts) == 32
        D = Z.T @ Z - B.T @ B
        w = np.linalg.eigvalsh((D + D.T) / 2)
        assert w[0] >= -1e-10 * fro2
        assert all(w[-1] <= tails[k] / (ell + 1 - k) + 1e-10 * fro2 for k in range(ell))
        grams.append(B.T @ B)
    # the same computations on any number of threads: rounding only
    np.testing.assert_allclose(grams[1], grams[0], rtol=0, atol=1e-12 * fro2)


def test_streaming_models_fitted_with_other_n_jobs_merge(data):
    X, X_new = data
    params = dict(n_random_features=64, sketch_size=8, random_state=3)
    a = StreamingKPCA(2, n_jobs=1, **params).fit(X[:1500])
    b = StreamingKPCA(2, n_jobs=2, verbose=1, **params).fit(X[1500:])
    merged = a.merge(b)
    assert merged.n_jobs == 1 and merged.n_samples_seen_ == X.shape[0]
    with pytest.raises(ValueError, match="sketch_size"):
        a.merge(StreamingKPCA(2, n_random_features=64, sketch_size=9, random_state=3).fit(X[:300]))
