"""Reduced-set density estimates: shadow (Algorithm 2), kmeans, paring, herding, uniform."""

import numpy as np
import pytest

from fastkpca._density import (
    herding_density,
    kernel_bandwidth,
    kmeans_density,
    paring_density,
    shadow_density,
    uniform_density,
)
from fastkpca.kernels import RBF, Cosine, Laplacian, Linear, Matern, Polynomial, squared_euclidean
from fastkpca.metrics import mmd


def clusters(seed=0, n=600, d=4, k=5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, d)) * 3
    X = np.vstack([c + rng.standard_normal((n // k, d)) for c in centers])
    return X[rng.permutation(len(X))].astype(dtype)


def naive_shadow(X, radius, metric="euclidean"):
    """Algorithm 2 as written: take the first remaining point, remove its shadow set, repeat."""
    remaining = list(range(len(X)))
    labels = np.full(len(X), -1)
    firsts = []
    while remaining:
        c = remaining[0]
        diff = X[remaining] - X[c]
        dist = np.sqrt((diff**2).sum(1)) if metric == "euclidean" else np.abs(diff).sum(1)
        members = [i for i, dd in zip(remaining, dist, strict=True) if dd <= radius]
        labels[members] = len(firsts)
        firsts.append(c)
        remaining = [i for i in remaining if labels[i] < 0]
    return np.array(firsts), labels


# --- shadow ---------------------------------------------------------------------------------
@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
@pytest.mark.parametrize("block_rows", [7, 64, 1024])
def test_shadow_is_algorithm_2(metric, block_rows):
    # The blocked single pass must give exactly the sets of the literal Algorithm 2, whatever
    # the block size (7 rows forces many centres to be found in earlier blocks).
    X = clusters(n=300)
    radius = 1.5 if metric == "euclidean" else 3.0
    firsts, labels = naive_shadow(X, radius, metric)
    rs = shadow_density(X, radius, metric=metric, center="first", block_rows=block_rows)
    np.testing.assert_array_equal(rs.labels, labels)
    np.testing.assert_array_equal(rs.centers, X[firsts])
    np.testing.assert_array_equal(rs.weights, np.bincount(labels))


def test_shadow_weights_and_centroids():
    X = clusters()
    rs = shadow_density(X, 1.0, center="centroid")
    n = X.shape[0]
    # weights are the shadow-set sizes: integers summing to n
    assert rs.weights.sum() == n
    np.testing.assert_array_equal(rs.weights, np.round(rs.weights))
    np.testing.assert_array_equal(rs.weights, np.bincount(rs.labels))
    # each centroid is the mean of its set
    for j in [0, 7, rs.n_centers - 1]:
        np.testing.assert_allclose(rs.centers[j], X[rs.labels == j].mean(0), rtol=1e-12)
    # the partition does not depend on the representative
    first = shadow_density(X, 1.0, center="first")
    np.testing.assert_array_equal(first.labels, rs.labels)


def test_shadow_geometry():
    X = clusters()
    radius = 1.2
    rs = shadow_density(X, radius, center="first")
    # every point lies in the shadow of its centre ...
    d2 = ((X - rs.centers[rs.labels]) ** 2).sum(1)
    assert np.all(d2 <= radius**2 * (1 + 1e-12))
    # ... and no centre lies in the shadow of an earlier one (it would have been taken)
    D = squared_euclidean(rs.centers, rs.centers)
    assert np.all(D[np.triu_indices(rs.n_centers, 1)] > radius**2)


def test_shadow_limits():
    X = clusters(n=200)
    # a radius larger than the data's diameter: one centre carrying every point
    one = shadow_density(X, 1e6)
    assert one.n_centers == 1 and one.weights[0] == 200
    np.testing.assert_allclose(one.centers[0], X.mean(0), rtol=1e-12)
    # a tiny radius: exact duplicates merge, nothing else does
    Xd = np.vstack([X, X[:50], X[:10]])
    tiny = shadow_density(Xd, 1e-9)
    assert tiny.n_centers == 200
    np.testing.assert_array_equal(np.sort(tiny.weights)[::-1][:10], np.full(10, 3.0))


def test_shadow_block_source_and_dtype():
    X = clusters(dtype=np.float32)
    rs = shadow_density(X, 1.0)
    assert rs.centers.dtype == np.float32
    streamed = shadow_density((X[s : s + 100] for s in range(0, len(X), 100)), 1.0)
    np.testing.assert_array_equal(streamed.labels, rs.labels)
    np.testing.assert_allclose(streamed.centers, rs.centers, rtol=1e-6)


@pytest.mark.parametrize("ell", [2.0, 3.0, 5.0])
def test_theorem_5_1_mmd_bound(ell):
    # Theorem 5.1: every point is within eps = sigma / ell of its shadow centre, so
    # MMD(X, C~) <= max_i ||phi(x_i) - phi(c_a(i))|| <= sqrt(2 (1 - exp(-1 / (2 ell^2)))) for rbf.
    X = clusters()
    kernel = RBF(gamma=0.1)
    sigma, metric = kernel_bandwidth(kernel)
    rs = shadow_density(X, sigma / ell, metric=metric, center="first")
    bound = np.sqrt(2 * (1 - np.exp(-1 / (2 * ell**2))))
    value = mmd(X, rs.centers, rs.weights, kernel)
    # the chain of the proof: MMD <= mean_i ||phi(x_i) - phi(c_a(i))|| (triangle inequality)
    # <= the worst case; 1e-12 allows for the round-off of the two computations
    k_xc = np.exp(-0.1 * ((X - rs.centers[rs.labels]) ** 2).sum(1))
    mean_dist = np.mean(np.sqrt(np.maximum(2 - 2 * k_xc, 0)))
    assert value <= mean_dist + 1e-12
    assert mean_dist <= bound


def test_kernel_bandwidth():
    assert kernel_bandwidth(RBF(gamma=0.125)) == (2.0, "euclidean")
    assert kernel_bandwidth(Matern(gamma=0.125, nu=1.5)) == (2.0, "euclidean")
    assert kernel_bandwidth(Laplacian(gamma=0.25)) == (4.0, "manhattan")
    for k in (Polynomial(), Linear(), Cosine()):
        with pytest.raises(ValueError, match="radial kernel"):
            kernel_bandwidth(k)


def test_shadow_bad_input():
    X = clusters(n=50)
    with pytest.raises(ValueError, match="radius"):
        shadow_density(X, 0.0)
    with pytest.raises(ValueError, match="metric"):
        shadow_density(X, 1.0, metric="cosine")
    with pytest.raises(ValueError, match="center"):
        shadow_density(X, 1.0, center="median")


# --- the densities that take m --------------------------------------------------------------
def test_kmeans_density():
    X = clusters()
    rs = kmeans_density(X, 20, rng=np.random.default_rng(0))
    assert rs.n_centers == 20 and rs.weights.sum() == X.shape[0]
    np.testing.assert_array_equal(rs.weights, np.bincount(rs.labels))
    np.testing.assert_allclose(rs.centers[3], X[rs.labels == 3].mean(0), rtol=1e-10)
    # fewer distinct points than clusters: empty clusters are dropped
    Xd = np.repeat(X[:5], 4, axis=0)
    few = kmeans_density(Xd, 10, rng=np.random.default_rng(0))
    assert few.n_centers == 5 and few.weights.sum() == 20


def test_uniform_density():
    X = clusters()
    rs = uniform_density(X, 60, rng=np.random.default_rng(0))
    assert rs.n_centers == 60
    np.testing.assert_allclose(rs.weights, 10.0)
    # distinct rows of X
    assert len({tuple(r) for r in rs.centers}) == 60
    assert all((X == c).all(1).any() for c in rs.centers)


def test_paring_density():
    X = clusters()
    n = X.shape[0]
    rs = paring_density(X, 100, rng=np.random.default_rng(0))
    # with replacement: rows of X, multiplicities as weights (multiples of n / m), sum n
    assert rs.n_centers < 100
    np.testing.assert_allclose(rs.weights.sum(), n)
    np.testing.assert_allclose(rs.weights / (n / 100), np.round(rs.weights / (n / 100)))
    assert all((X == c).all(1).any() for c in rs.centers)
    # unbiased: over many draws each row's expected weight is n / n = 1
    total = np.zeros(n)
    for s in range(200):
        r = paring_density(X, 100, rng=np.random.default_rng(s))
        idx = [int(np.flatnonzero((X == c).all(1))[0]) for c in r.centers]
        total[idx] += r.weights
    # mean weight 1 per row; the average over 200 draws has standard error 1 / sqrt(200 * 100
    # / 600) per row, so the mean over all rows is 1 to well within 1e-9 (it is exact: each
    # draw puts weight n in total) and single rows within 6 standard errors of 1
    np.testing.assert_allclose(total.mean() / 200, 1.0, rtol=1e-9)
    assert np.max(np.abs(total / 200 - 1)) < 6 / np.sqrt(200 * 100 / n)
    # F&K's point sampling with noise: distinct, noisy centres with equal weights
    noisy = paring_density(X, 50, rng=np.random.default_rng(0), bandwidth=0.5)
    assert noisy.n_centers == 50
    np.testing.assert_allclose(noisy.weights, n / 50)


def test_herding_density():
    X = clusters()
    kernel = RBF(gamma=0.1)
    n = X.shape[0]
    rs = herding_density(X, 30, kernel, rng=np.random.default_rng(0))
    assert rs.n_centers <= 30
    np.testing.assert_allclose(rs.weights.sum(), n)
    # the first herding point maximises the data's mean embedding mu_p (eq. 7 with T = 0)
    mu = kernel(X).mean(1)
    assert any((c == X[np.argmax(mu)]).all() for c in rs.centers)
    # herding tracks the mean embedding: far smaller MMD than a uniform subsample of the same
    # size (mean over 5 seeds; measured ratio about 4, asserted 2)
    m_h, m_u = [], []
    for s in range(5):
        h = herding_density(X, 30, kernel, rng=np.random.default_rng(s))
        u = uniform_density(X, h.n_centers, rng=np.random.default_rng(s))
        m_h.append(mmd(X, h.centers, h.weights, kernel))
        m_u.append(mmd(X, u.centers, u.weights, kernel))
    assert np.mean(m_h) < np.mean(m_u) / 2
    # and more herding points give a smaller MMD
    big = herding_density(X, 120, kernel, rng=np.random.default_rng(0))
    assert mmd(X, big.centers, big.weights, kernel) < mmd(X, rs.centers, rs.weights, kernel)


@pytest.mark.parametrize("fn", [kmeans_density, uniform_density, paring_density])
def test_m_densities_bad_n_centers(fn):
    X = clusters(n=50)
    for bad in (0, 51, 2.5):
        with pytest.raises(ValueError, match="n_centers"):
            fn(X, bad, rng=np.random.default_rng(0))


def test_same_seed_same_result():
    X = clusters()
    kernel = RBF(gamma=0.1)
    for fn in (kmeans_density, uniform_density, paring_density):
        a, b = fn(X, 20, rng=np.random.default_rng(3)), fn(X, 20, rng=np.random.default_rng(3))
        if fn is kmeans_density:
            # scikit-learn's KMeans adds its per-thread centre sums in the order its 3+ OpenMP
            # threads finish: centres (|c| < 10) a few ulps apart run to run
            np.testing.assert_allclose(a.centers, b.centers, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(a.centers, b.centers)  # index draws (+ noise): no BLAS
    a = herding_density(X, 20, kernel, rng=np.random.default_rng(3), n_candidates=300)
    b = herding_density(X, 20, kernel, rng=np.random.default_rng(3), n_candidates=300)
    np.testing.assert_array_equal(a.centers, b.centers)
