"""Dask arrays: fit by tree reduction equals the in-memory fit; lazy transform; a real cluster.

Tolerances
----------
``RandomFeatureKPCA`` and ``NystromKPCA`` on a dask array compute the same statistics as in
memory, only summed in a different order (per chunk, then up the merge tree), so they agree to
float64 round-off; 1e-6 relative is the contract (issue 7) and leaves orders of magnitude to spare.
``StreamingKPCA`` merges Frequent Directions sketches, which depend on how rows are grouped: it is
checked against the FD bound itself, and against the exact model when ``sketch_size >= m`` (no
shrinking, so again round-off only).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.decomposition.exact import ExactKPCA  # noqa: E402
from fastkpca.decomposition.nystrom import NystromKPCA  # noqa: E402
from fastkpca.decomposition.random_features import RandomFeatureKPCA  # noqa: E402
from fastkpca.decomposition.streaming import StreamingKPCA  # noqa: E402

RTOL = 1e-6  # see the module docstring
GAMMA = 0.05


def rel(a, b):
    """max |a - b| / max |b| (no sign alignment: signs are deterministic)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def X():
    # RandomNoisy (the streaming paper's synthetic set): 2500 rows, 12 dims, 4-dim signal.
    return make_random_noisy(2500, 12, signal_dim=4, random_state=0)


@pytest.fixture(autouse=True)
def synchronous_scheduler():
    # Single-threaded by default (fast and deterministic on the 2-core CI machine); the cluster
    # tests below override it with their Client.
    with dask.config.set(scheduler="sync"):
        yield


def assert_same_model(ours, ref, X_new, rtol=RTOL):
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=rtol)
    assert rel(ours.components_, ref.components_) < rtol  # deterministic signs: no alignment
    assert rel(ours.transform(X_new), ref.transform(X_new)) < rtol
    assert ours.n_samples_seen_ == ref.n_samples_seen_
    assert ours.n_features_in_ == ref.n_features_in_


# ------------------------------------------------------------------------------------------------
# dask stays optional
# ------------------------------------------------------------------------------------------------
def test_importing_fastkpca_does_not_import_dask():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import fastkpca, fastkpca.decomposition, fastkpca.cli, fastkpca.io
        from fastkpca import (ExactKPCA, NystromKPCA, RandomFeatureKPCA, StreamingKPCA)
        X = np.random.default_rng(0).standard_normal((300, 4))
        for cls in (ExactKPCA, NystromKPCA, RandomFeatureKPCA, StreamingKPCA):
            cls(n_components=2, random_state=0).fit(X).transform(X)
        bad = [m for m in ("dask", "dask.array", "distributed") if m in sys.modules]
        assert not bad, bad
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


# ------------------------------------------------------------------------------------------------
# RandomFeatureKPCA: equals the in-memory fit
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", [(700, 12), (2500, 12), (300, 5)])
def test_random_features_exact_solver_equals_in_memory(X, chunks):
    # (300, 5) also splits the columns: they are rechunked to one column block.
    params = dict(n_components=5, gamma=GAMMA, n_random_features=200, random_state=3)
    ref = RandomFeatureKPCA(**params).fit(X)
    ours = RandomFeatureKPCA(**params).fit(da.from_array(X, chunks=chunks))
    # float32 features (fastkpca.features) whose rounding depends on the row chunks: ~1e-7.
    assert_same_model(ours, ref, X[:300], rtol=1e-6)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=0, atol=1e-6 * np.abs(ref.mean_).max())


@pytest.mark.parametrize("n_passes", [1, 2])
def test_random_features_countsketch_equals_in_memory(X, n_passes):
    # The CountSketch hashes the global row index, so per-chunk sketches add up to the
    # in-memory one; the Rayleigh-Ritz pass is a second reduction.
    params = dict(
        n_components=4,
        gamma=GAMMA,
        n_random_features=120,
        solver="countsketch",
        n_buckets=300,
        n_passes=n_passes,
        random_state=1,
    )
    ref = RandomFeatureKPCA(**params).fit(X)
    ours = RandomFeatureKPCA(**params).fit(da.from_array(X, chunks=(600, 12)))
    assert_same_model(ours, ref, X[:300])


def test_random_features_float32_and_gamma_heuristics(X):
    # gamma="median" draws rows of the first 8192 (here: all) rows, as in memory.  Chunks of
    # 8192 rows make the float32 feature blocks those of the in-memory fit, so even the float32
    # per-block products agree and only their float64 sums are reordered.
    X32 = np.vstack([X, X[::-1], X, X[::-1]]).astype(np.float32)  # 10000 rows
    params = dict(n_components=3, gamma="median", n_random_features=100, random_state=0)
    ref = RandomFeatureKPCA(**params).fit(X32)
    ours = RandomFeatureKPCA(**params).fit(da.from_array(X32, chunks=(8192, 12)))
    assert ours.kernel_ == ref.kernel_
    assert_same_model(ours, ref, X32[:200])
    T = ours.transform(da.from_array(X32[:200], chunks=(64, 12)))
    assert T.dtype == np.float32 and T.compute().dtype == np.float32


# ------------------------------------------------------------------------------------------------
# NystromKPCA: equals the in-memory fit
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        dict(landmarks="uniform", n_landmarks=150, gamma=GAMMA),
        dict(landmarks="uniform", n_landmarks=150, gamma="scale"),
        dict(landmarks="uniform", n_landmarks=100, gamma="median", covariance="landmarks"),
        # at most LANDMARK_SUBSAMPLE rows: k-means / rls run on all of them, as in memory
        dict(landmarks="kmeans", n_landmarks=40, gamma=GAMMA),
        dict(landmarks="rls", n_landmarks=60, gamma=GAMMA),
    ],
)
def test_nystrom_equals_in_memory(X, params):
    ref = NystromKPCA(n_components=5, random_state=2, **params).fit(X)
    ours = NystromKPCA(n_components=5, random_state=2, **params).fit(
        da.from_array(X, chunks=(450, 12))
    )
    if params["landmarks"] == "kmeans":
        # k-means on the same rows, but scikit-learn sums its per-thread centre partials in the
        # order the OpenMP threads finish (3+ threads): centres a few ulps apart, run to run
        np.testing.assert_allclose(ours.landmarks_, ref.landmarks_, rtol=1e-12, atol=1e-12)
    else:
        # uniform: rows drawn by index; rls: the same selector on the same rows: bit-identical
        np.testing.assert_array_equal(ours.landmarks_, ref.landmarks_)
    assert_same_model(ours, ref, X[:300])


def test_nystrom_given_landmarks_equals_in_memory(X):
    L = X[::50]
    ref = NystromKPCA(n_components=4, landmarks=L, gamma=GAMMA).fit(X)
    ours = NystromKPCA(n_components=4, landmarks=L, gamma=GAMMA).fit(
        da.from_array(X, chunks=(1000, 12))
    )
    assert_same_model(ours, ref, X[:300])


def test_nystrom_large_array_subsamples_for_kmeans(X, monkeypatch):
    import fastkpca.decomposition.nystrom as nystrom

    monkeypatch.setattr(nystrom, "LANDMARK_SUBSAMPLE", 1000)
    model = NystromKPCA(
        n_components=3, landmarks="kmeans", n_landmarks=30, gamma=GAMMA, random_state=0
    ).fit(da.from_array(X, chunks=(500, 12)))
    # landmarks from a 1000-row subsample, covariance over all 2500 rows
    assert model.landmarks_.shape == (30, 12) and model.n_samples_seen_ == 2500
    ref = ExactKPCA(n_components=3, gamma=GAMMA).fit(X)
    # 30 k-means landmarks on a 4-dim signal capture the top eigenvalues to a few percent
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=0.1)


# ------------------------------------------------------------------------------------------------
# StreamingKPCA: within the Frequent Directions bound
# ------------------------------------------------------------------------------------------------
def test_streaming_exact_limit_equals_in_memory(X):
    # sketch_size >= m: nothing is shrunk, merged or not, so the model is exact PCA of the
    # features either way.
    params = dict(n_components=4, gamma=GAMMA, n_random_features=60, sketch_size=60, random_state=5)
    ref = StreamingKPCA(**params).fit(X)
    ours = StreamingKPCA(**params).fit(da.from_array(X, chunks=(400, 12)))
    assert_same_model(ours, ref, X[:300])
    # float32 features whose rounding depends on the row chunks (~1e-7 each).
    scale = np.abs(ref.feature_sum_).max()
    np.testing.assert_allclose(ours.feature_sum_, ref.feature_sum_, rtol=0, atol=1e-6 * scale)


def test_streaming_merged_sketch_within_fd_bound(X):
    params = dict(
        n_components=4, gamma=GAMMA, n_random_features=160, sketch_size=20, random_state=5
    )
    ours = StreamingKPCA(**params).fit(da.from_array(X, chunks=(300, 12)))
    ref = StreamingKPCA(**params).fit(X)
    Z = ours.feature_map_(X)  # small n: the exact feature matrix for the check
    # float32 features whose rounding depends on the row chunks (~1e-7 each).
    scale = np.abs(Z.sum(axis=0)).max()
    np.testing.assert_allclose(ours.feature_sum_, Z.sum(axis=0), rtol=0, atol=1e-6 * scale)
    assert ours.n_samples_seen_ == ref.n_samples_seen_ == 2500
    sketch = ours.sketch_
    delta = sketch.total_shrinkage  # shrinkage of the chunks' sketches and of their merges
    assert delta > 0  # ell = 20 < m = 160: the merged sketch really did shrink
    s = np.linalg.svd(Z, compute_uv=False)
    for B in (sketch.rows(), sketch.sketch()):
        gap_eigs = np.linalg.eigvalsh(Z.T @ Z - B.T @ B)
        # FD guarantee for the merged stream, every k <= ell:
        # 0 <= Z'Z - B'B <= tail_k / (ell + 1 - k); for the buffer rows also <= total shrinkage
        assert gap_eigs.min() > -1e-9 * s[0] ** 2
        for k in range(0, 20):
            assert gap_eigs.max() <= np.sum(s[k:] ** 2) / (20 + 1 - k) * (1 + 1e-9)
    assert np.linalg.eigvalsh(Z.T @ Z - sketch.rows().T @ sketch.rows()).max() <= delta * (1 + 1e-9)
    # The model's eigenvalues are those of B'B + delta P_B - s s'/n (compensated FD); as
    # 0 <= Z'Z - B'B <= delta I, that operator is within delta of Zc'Zc (Weyl).
    Zc = Z - Z.mean(axis=0)
    exact = np.linalg.eigvalsh(Zc.T @ Zc)[::-1][:4]
    assert np.all(np.abs(ours.eigenvalues_ - exact) <= delta * (1 + 1e-9))


# ------------------------------------------------------------------------------------------------
# transform: lazy, chunked like X
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cls, params",
    [
        (RandomFeatureKPCA, dict(n_random_features=80)),
        (StreamingKPCA, dict(n_random_features=80, sketch_size=20)),
        (NystromKPCA, dict(n_landmarks=80)),
        (ExactKPCA, dict()),
    ],
)
def test_transform_is_lazy_and_equals_numpy(X, cls, params):
    model = cls(n_components=3, gamma=GAMMA, random_state=0, **params).fit(X[:600])
    Xd = da.from_array(X, chunks=(700, 12))
    T = model.transform(Xd)
    assert isinstance(T, da.Array)
    assert T.chunks == ((700, 700, 700, 400), (3,))
    # the same computation on other row blocks: BLAS may round differently, and the random
    # features are float32 whose rounding depends on the row chunks (fastkpca.features)
    assert rel(T.compute(), model.transform(X)) < 1e-6
    with pytest.raises(ValueError, match="features"):
        model.transform(da.from_array(X[:, :5], chunks=(700, 5)))


def test_transform_uses_a_snapshot_of_the_model(X):
    model = RandomFeatureKPCA(n_components=2, n_random_features=40, random_state=0).fit(X)
    T = model.transform(da.from_array(X[:100], chunks=(50, 12)))
    expected = model.transform(X[:100])
    model.fit(X[:500] * 2)  # refitting afterwards does not change the lazy result
    # 50-row chunks vs one 100-row product: another GEMM shape and other float32 feature chunks
    # round differently (~1e-7); the refit model is O(1) away, so 1e-6 relative still tells the
    # snapshot from it
    assert rel(T.compute(), expected) < 1e-6


# ------------------------------------------------------------------------------------------------
# ExactKPCA: small arrays are computed, large ones refused
# ------------------------------------------------------------------------------------------------
def _never(block):
    raise AssertionError("the array was computed")


def test_exact_small_dask_array_equals_in_memory(X):
    ref = ExactKPCA(n_components=3, gamma=GAMMA).fit(X[:800])
    ours = ExactKPCA(n_components=3, gamma=GAMMA).fit(da.from_array(X[:800], chunks=(300, 12)))
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-12)
    T = ExactKPCA(n_components=3, gamma=GAMMA).fit_transform(
        da.from_array(X[:800], chunks=(300, 12))
    )
    assert rel(np.asarray(T), ref.transform(X[:800])) < 1e-8


def test_exact_refuses_a_dask_array_too_large():
    # 10^6 rows: an 8 TB Gram.  The refusal must come before anything is computed.
    big = da.zeros((1_000_000, 3), chunks=(100_000, 3)).map_blocks(_never, dtype=np.float64)
    with pytest.raises(ValueError, match="RandomFeatureKPCA, StreamingKPCA or NystromKPCA"):
        ExactKPCA(n_components=2).fit(big)


def test_check_exact_fits_threshold():
    from fastkpca.dask import check_exact_fits

    X = da.zeros((10_000, 2), chunks=(5000, 2))  # Gram: 800 MB in float64, 400 MB in float32
    check_exact_fits(X, available=4 * 800e6)
    with pytest.raises(ValueError, match="10000 x 10000 Gram"):
        check_exact_fits(X, available=4 * 800e6 - 1)
    check_exact_fits(X.astype(np.float32), available=4 * 400e6)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------
def test_bad_dask_input(X):
    Xbad = X.copy()
    Xbad[1234, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RandomFeatureKPCA(n_components=2, n_random_features=20).fit(da.from_array(Xbad, chunks=500))
    with pytest.raises(ValueError, match="NaN"):
        NystromKPCA(n_components=2, n_landmarks=20).fit(da.from_array(Xbad, chunks=500))
    with pytest.raises(ValueError, match="2-D"):
        StreamingKPCA(n_components=2).fit(da.from_array(X[:, 0], chunks=500))
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        Xd = da.from_array(X, chunks=500)
        StreamingKPCA(n_components=2).fit(Xd[Xd[:, 0] > 0])
    with pytest.raises(ValueError, match="n_components=50 is larger"):
        RandomFeatureKPCA(n_components=50, n_random_features=20).fit(da.from_array(X, chunks=500))


def test_tree_reduce_merges_in_groups():
    from fastkpca.dask import tree_reduce

    parts = [dask.delayed(np.array)([i]) for i in range(20)]
    total = tree_reduce(parts, lambda a, b: np.concatenate([a, b]), split_every=3)
    # associative merge of 20 leaves through a tree of fan-in 3 keeps the order
    np.testing.assert_array_equal(total.compute(), np.arange(20))


def test_read_npy_reads_rows_lazily(tmp_path, X):
    from fastkpca.dask import read_npy

    np.save(tmp_path / "x.npy", X.astype(np.float32))
    Xd = read_npy(tmp_path / "x.npy", chunk_rows=999)
    assert Xd.chunks[0] == (999, 999, 502) and Xd.dtype == np.float32
    np.testing.assert_array_equal(Xd.compute(), X.astype(np.float32))


# ------------------------------------------------------------------------------------------------
# a real scheduler: LocalCluster with two worker processes
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    client = Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def on_cluster(client):
    """Run dask computations on ``client``.  Naming the scheduler by string, not by the Client
    object, matters: the nannies pickle dask's config into each worker process they (re)start,
    and a Client in the config cannot be pickled, so a killed worker would not come back."""
    from contextlib import ExitStack

    stack = ExitStack()
    stack.enter_context(client.as_current())
    stack.enter_context(dask.config.set(scheduler="dask.distributed"))
    return stack


def test_cluster_fit_and_transform_equal_in_memory(X, client):
    Xd = da.from_array(X, chunks=(400, 12))
    with on_cluster(client):
        rf = RandomFeatureKPCA(n_components=4, gamma=GAMMA, n_random_features=100, random_state=7)
        ny = NystromKPCA(n_components=4, gamma=GAMMA, n_landmarks=100, random_state=7)
        sk = StreamingKPCA(
            n_components=4, gamma=GAMMA, n_random_features=100, sketch_size=100, random_state=7
        )
        fitted = [m.fit(Xd) for m in (rf, ny, sk)]
        T = [np.asarray(m.transform(Xd).compute()) for m in fitted]
    for model, T_cluster in zip(fitted, T, strict=True):
        ref = type(model)(**model.get_params()).fit(X)
        assert_same_model(model, ref, X[:300])
        assert rel(T_cluster, ref.transform(X)) < RTOL


def _kill_worker_once(block, marker, block_id=None):
    """On the first attempt at the last chunk, kill the worker process running it."""
    if block_id[0] == 9:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return block
        os.close(fd)
        os._exit(1)  # the worker process dies mid-fit; its nanny starts a new one
    return block


def test_cluster_fit_survives_a_killed_worker(X, client, tmp_path):
    import cloudpickle

    # The workers cannot import this test module: ship _kill_worker_once by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        marker = str(tmp_path / "killed")
        # 10 chunks of 1000 rows; the fit reads the first 8192 rows on the client first, so the
        # last chunk is first computed by the tree reduction on the workers.
        X4 = np.vstack([X, X[::-1], X, X[::-1]])
        Xd = da.from_array(X4, chunks=(1000, 12)).map_blocks(
            _kill_worker_once, marker, dtype=X.dtype
        )
        params = dict(n_components=4, gamma=GAMMA, n_random_features=100, random_state=11)
        pids_before = set(client.run(os.getpid).values())
        with on_cluster(client):
            model = RandomFeatureKPCA(**params).fit(Xd)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    # a worker process really died (and its nanny started a new one)
    assert os.path.exists(marker)
    client.wait_for_workers(2, timeout=60)
    assert set(client.run(os.getpid).values()) != pids_before
    ref = RandomFeatureKPCA(**params).fit(X4)
    assert_same_model(model, ref, X[:300])
