"""Landmark selection: uniform / reservoir sampling, k-means weights, ridge leverage scores."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from threadpoolctl import threadpool_limits

from fastkpca import _landmarks as lm
from fastkpca.kernels import RBF


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # The test matrices are small (<= 1000 x 1000): on a shared, loaded machine multi-threaded
    # BLAS spin-waits and makes them 100x slower, so these tests run BLAS single-threaded.
    with threadpool_limits(1):
        yield


def _split(X, sizes):
    """Row blocks of X with the given sizes (cycled)."""
    out, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= X.shape[0]:
            return out
        out.append(X[start : start + size])
        start += size


# --- uniform and reservoir -------------------------------------------------------------------
def test_uniform_indices_distinct_sorted_deterministic():
    idx = lm.uniform_indices(1000, 50, np.random.default_rng(3))
    assert idx.shape == (50,) and np.all(np.diff(idx) > 0) and idx[-1] < 1000
    np.testing.assert_array_equal(idx, lm.uniform_indices(1000, 50, np.random.default_rng(3)))
    assert not np.array_equal(idx, lm.uniform_indices(1000, 50, np.random.default_rng(4)))
    np.testing.assert_array_equal(lm.uniform_indices(7, 50, np.random.default_rng(0)), np.arange(7))


@pytest.mark.parametrize("sizes", [(1,), (7,), (100, 3, 41), (5000,)])
def test_reservoir_equals_uniform_for_any_block_partition(sizes):
    # The same keys in the same row order: the stream gives exactly the array's sample.
    X = np.arange(2000, dtype=np.float64).reshape(1000, 2)
    res = lm.ReservoirSampler(37, np.random.default_rng(11))
    for block in _split(X, sizes):
        res.update(block)
    idx = lm.uniform_indices(1000, 37, np.random.default_rng(11))
    np.testing.assert_array_equal(res.indices, idx)
    np.testing.assert_array_equal(res.sample(), X[idx])
    assert res.n_seen == 1000


def test_reservoir_sparse_blocks_and_short_streams():
    rng = np.random.default_rng(0)
    X = sp.random(300, 6, density=0.3, format="csr", random_state=1)
    dense = lm.ReservoirSampler(20, np.random.default_rng(5))
    sparse = lm.ReservoirSampler(20, np.random.default_rng(5))
    for block in _split(X, (17, 64)):
        sparse.update(block)
        dense.update(block.toarray())
    np.testing.assert_array_equal(sparse.sample(), dense.sample())
    # fewer rows than the reservoir: it keeps them all, in order
    short = lm.ReservoirSampler(50, rng)
    Y = rng.standard_normal((12, 3))
    for block in _split(Y, (5,)):
        short.update(block)
    np.testing.assert_array_equal(short.sample(), Y)
    with pytest.raises(ValueError, match="empty"):
        lm.ReservoirSampler(3, rng).sample()
    with pytest.raises(ValueError, match="size"):
        lm.ReservoirSampler(0, rng)


def test_reservoir_sample_is_uniform_chi_square():
    # Over 3000 seeds, every position of a 24-row stream (in uneven blocks) must be kept with
    # probability c / n = 1/4, and every 2-subset of a 6-row stream equally often.  Chi-square
    # goodness of fit; p > 1e-3 fails a correct sampler once in a thousand seeds-sets (the
    # seeds are fixed, so the test is deterministic).
    n, c, runs = 24, 6, 3000
    X = np.arange(n, dtype=np.float64)[:, None]
    counts = np.zeros(n)
    for seed in range(runs):
        res = lm.ReservoirSampler(c, np.random.default_rng(seed))
        for block in _split(X, (5, 1, 9)):
            res.update(block)
        counts[res.indices] += 1
    expected = np.full(n, runs * c / n)
    assert stats.chisquare(counts, expected).pvalue > 1e-3

    pairs = {pair: 0 for pair in itertools.combinations(range(6), 2)}
    Y = np.arange(6, dtype=np.float64)[:, None]
    for seed in range(runs):
        res = lm.ReservoirSampler(2, np.random.default_rng(10**6 + seed))
        for block in _split(Y, (2, 1)):
            res.update(block)
        pairs[tuple(int(i) for i in res.indices)] += 1
    observed = np.array(list(pairs.values()))
    assert stats.chisquare(observed, np.full(15, runs / 15)).pvalue > 1e-3


# --- k-means ---------------------------------------------------------------------------------
@pytest.fixture
def blobs():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    sizes = [300, 100, 20]
    X = np.vstack(
        [c + 0.3 * rng.standard_normal((m, 2)) for c, m in zip(centers, sizes, strict=True)]
    )
    return X, centers, np.array(sizes) / sum(sizes)


@pytest.mark.parametrize("minibatch", [False, True])
def test_kmeans_centres_and_cluster_weights(blobs, minibatch, monkeypatch):
    X, centers, fractions = blobs
    if minibatch:
        monkeypatch.setattr(lm, "KMEANS_FULL_MAX_ROWS", 10)
    L, w = lm.kmeans_landmarks(X.astype(np.float32), 3, np.random.default_rng(0))
    assert L.dtype == np.float32 and L.shape == (3, 2)
    order = [int(np.argmin(np.linalg.norm(L - c, axis=1))) for c in centers]
    # each true centre has its own landmark within 3 standard errors of the cluster mean
    np.testing.assert_allclose(L[order], centers, atol=0.3)
    np.testing.assert_allclose(w[order], fractions, atol=1e-12)
    assert w.sum() == pytest.approx(1.0)


# --- ridge leverage scores -------------------------------------------------------------------
def test_leverage_scores_exact_with_the_full_sample():
    # With S = all points and p = 1 the estimate is the exact ridge leverage score
    # tau_i = (K (K + lambda I)^{-1})_ii (Musco & Musco 2017, definition 1); 1e-9 is round-off
    # of one Cholesky solve with condition number ~ ||K|| / lambda = 1e3.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 3))
    k = RBF(0.4)
    lam = 0.1
    K = k(X)
    tau = np.diag(K @ np.linalg.inv(K + lam * np.eye(150)))
    est = lm.ridge_leverage_scores(X, np.arange(150), X, np.ones(150), k, lam, block_rows=40)
    np.testing.assert_allclose(est, tau, rtol=1e-9, atol=1e-12)
    # A subset sample with unit weights over-estimates every score (the Nystrom residual of a
    # subset dominates the full one in the PSD order), never under-estimates.
    sub = np.sort(rng.choice(150, 30, replace=False))
    est_sub = lm.ridge_leverage_scores(X, np.arange(150), X[sub], np.ones(30), k, lam)
    assert np.all(est_sub >= tau - 1e-10)


class CountingRBF(RBF):
    """An RBF kernel that records the shape of every Gram block it evaluates."""

    def __init__(self, gamma):
        super().__init__(gamma)
        self.shapes = []

    def _block(self, Xc, Y, ctx, out=None):
        self.shapes.append((Xc.shape[0], Y.shape[0]))
        return super()._block(Xc, Y, ctx, out)


def test_rls_cost_is_linear_in_n_and_never_forms_the_gram():
    rng = np.random.default_rng(0)
    n, c = 4000, 40
    X = rng.standard_normal((n, 4))
    kernel = CountingRBF(0.3)
    idx, inclusion = lm.rls_indices(X, c, kernel, np.random.default_rng(1))
    assert idx.shape == (c,) and np.all(np.diff(idx) > 0)
    assert np.all((inclusion > 0) & (inclusion <= 1))
    evaluations = sum(a * b for a, b in kernel.shapes)
    assert evaluations >= n * c  # it did look at every row (the counter works)
    # levels of size n, n/2, ... (2n rows in all) against samples of O(c) (here ~0.5 c):
    # measured 1.13 n c; 4 n c allows samples of 2c and rules out anything quadratic in n
    # (n^2 = 100 n c here).
    assert evaluations <= 4 * n * c
    assert max(a * b for a, b in kernel.shapes) < n * n / 10


def test_rls_finds_rare_clusters(blobs):
    # 20 of 420 points form a far cluster: uniform sampling puts 1.4 of 30 landmarks there on
    # average and none in 23% of draws; ridge leverage hits it every time and more often, as
    # the cluster's own eigen-direction makes each of its points' scores ~ 1 / 20.
    X, _, _ = blobs
    rare = X[:, 1] > 5
    hits = []
    for seed in range(5):
        idx, _ = lm.rls_indices(X, 30, RBF(0.5), np.random.default_rng(seed))
        hits.append(rare[idx].sum())
    assert min(hits) >= 1 and np.mean(hits) >= 1.5 * 30 * rare.mean()


def test_select_landmarks_weights_and_errors(blobs):
    X, _, _ = blobs
    rng = np.random.default_rng(0)
    for method in lm.LANDMARK_METHODS:
        L, w = lm.select_landmarks(X, method, 15, RBF(0.5), rng)
        assert L.shape == (15, 2) and w.shape == (15,)
        assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    L, w = lm.select_landmarks(sp.csr_matrix(X), "uniform", 5, RBF(0.5), rng)
    assert isinstance(L, np.ndarray)
    with pytest.raises(ValueError, match="unknown landmarks method 'nope'"):
        lm.select_landmarks(X, "nope", 5, RBF(0.5), rng)
