"""Tests for ``fastkpca.metrics.estimate_error`` against exact errors (ExactKPCA, the metrics)."""

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca import (
    ExactKPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
)
from fastkpca.metrics import eigenvalue_error, estimate_error, relative_rank_k_error

K = 5
GAMMA = 0.1


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """The exact references (dense eigh of ~1000 x 1000) on one BLAS thread: on a busy machine
    idle threads' spin-waits made them 3-6x slower."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _data(n, d=6, seed=0):
    """Gaussian clusters: a spectrum with a few large eigenvalues and a long tail."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(6, d))
    return centers[rng.integers(0, 6, n)] + rng.normal(size=(n, d))


def _truth(model, X):
    exact = ExactKPCA(K, gamma=model.kernel_.gamma).fit(X)
    T = model.transform(X)
    err = relative_rank_k_error(X, T, model.kernel_)
    return err, eigenvalue_error(model.eigenvalues_, exact.eigenvalues_), exact.eigenvalues_


@pytest.fixture(scope="module")
def probe_problem():
    X = _data(1000)
    model = RandomFeatureKPCA(K, gamma=GAMMA, n_features=60, random_state=0).fit(X)
    return X, model, _truth(model, X)


def test_exact_when_n_at_most_n_probe():
    X = _data(300)
    model = NystromKPCA(K, gamma=GAMMA, n_landmarks=30, random_state=0).fit(X)
    err, eig_err, lam = _truth(model, X)
    out = estimate_error(model, X, n_probe=300)
    # Same formula on the same explicit Gram, eigenvalues by a dense solver: round-off only.
    assert out["relative_rank_k_error"]["method"] == "exact"
    assert out["relative_rank_k_error"]["estimate"] == pytest.approx(err, rel=1e-8)
    assert out["excess_error"]["estimate"] == pytest.approx(err - 1, rel=1e-6)
    assert out["eigenvalue_error"]["estimate"] == pytest.approx(eig_err, rel=1e-8)
    np.testing.assert_allclose(out["eigenvalues"]["estimate"], lam, rtol=1e-8)
    assert out["relative_rank_k_error"]["stderr"] == 0.0


def test_probe_estimate_unbiased_with_covering_stderr(probe_problem):
    X, model, (err, eig_err, lam) = probe_problem
    excess = err - 1
    est, se, eig_est, theta = [], [], [], []
    for seed in range(10):
        out = estimate_error(model, X, n_probe=300, random_state=seed)
        assert out["excess_error"]["method"] == "probe"
        est.append(out["excess_error"]["estimate"])
        se.append(out["excess_error"]["stderr"])
        eig_est.append(out["eigenvalue_error"]["estimate"])
        theta.append(out["eigenvalues"]["estimate"])
    est, se = np.array(est), np.array(se)
    # Over 10 probes the mean is within 3 standard errors of the mean of the truth: no bias
    # beyond the sampling noise (the reference subspace's own bias is far below it here).
    assert abs(est.mean() - excess) <= 3 * se.mean() / np.sqrt(len(est)) + 1e-3 * excess
    # The stated stderr is the spread of the estimate: 95 % intervals (2 se) cover the truth in
    # at least 8 of 10 probes, and the stated se matches the spread over probes within 2x.
    assert np.sum(np.abs(est - excess) <= 2 * se) >= 8
    assert 0.5 <= se.mean() / est.std(ddof=1) <= 2.0
    # Eigenvalues: Ritz values on span(T, Nystrom vectors) within 0.5 % of the exact ones.
    np.testing.assert_allclose(np.mean(theta, axis=0), lam, rtol=5e-3)
    assert np.mean(eig_est) == pytest.approx(eig_err, rel=0.05, abs=1e-3)


def test_interval_and_structure(probe_problem):
    X, model, _ = probe_problem
    out = estimate_error(model, X, n_probe=300, random_state=0)
    for key in ("relative_rank_k_error", "excess_error", "eigenvalue_error"):
        entry = out[key]
        assert set(entry) == {"estimate", "stderr", "interval", "method"}
        lo, hi = entry["interval"]
        assert lo <= entry["estimate"] <= hi
        assert entry["stderr"] >= 0
    rel, exc = out["relative_rank_k_error"], out["excess_error"]
    assert rel["estimate"] == pytest.approx(1 + exc["estimate"])
    assert out["eigenvalues"]["estimate"].shape == (K,)
    assert out["n_samples"] == 1000 and out["n_probe"] == 300
    # Same seed, same result.
    again = estimate_error(model, X, n_probe=300, random_state=0)
    assert again["excess_error"]["estimate"] == pytest.approx(exc["estimate"], rel=1e-12)


ESTIMATORS = [
    lambda: NystromKPCA(K, gamma=GAMMA, n_landmarks=40, random_state=0),
    lambda: RandomFeatureKPCA(K, gamma=GAMMA, n_features=100, random_state=0),
    lambda: StreamingKPCA(K, gamma=GAMMA, n_features=100, sketch_size=12, random_state=0),
    lambda: ReducedSetKPCA(K, gamma=GAMMA, density="kmeans", n_centers=40, random_state=0),
    lambda: SparsifiedKPCA(K, gamma=GAMMA, sample_prob=0.3, random_state=0),
]


@pytest.mark.parametrize("make", ESTIMATORS, ids=lambda f: type(f()).__name__)
def test_every_estimator_within_criterion(make):
    X = _data(600, seed=1)
    model = make().fit(X)
    err, eig_err, _ = _truth(model, X)
    out = estimate_error(model, X, n_probe=250, random_state=0)
    est = out["excess_error"]["estimate"]
    # The acceptance criterion of the calibration benchmark: factor 2 of err - 1, or 0.01.
    assert abs(est - (err - 1)) <= 0.01 or 0.5 <= est / (err - 1) <= 2
    assert out["eigenvalue_error"]["estimate"] == pytest.approx(eig_err, rel=0.5, abs=0.01)


def test_exact_model_gives_one_and_zero():
    X = _data(600, seed=2)
    model = ExactKPCA(K, gamma=GAMMA).fit(X)
    out = estimate_error(model, X, n_probe=300, random_state=0)
    # Exact KPCA: err - 1 and the eigenvalue error are 0 up to the probe noise (a few 1e-4 for
    # 300 probe rows on this spectrum).
    assert out["relative_rank_k_error"]["estimate"] == pytest.approx(1.0, abs=2e-3)
    assert out["eigenvalue_error"]["estimate"] == pytest.approx(0.0, abs=1e-2)


def test_float32_and_sparse_input():
    X = _data(700, seed=3)
    model = NystromKPCA(K, gamma=GAMMA, n_landmarks=40, random_state=0).fit(X)
    ref = estimate_error(model, X, n_probe=300, random_state=0)["excess_error"]["estimate"]
    out32 = estimate_error(model, X.astype(np.float32), n_probe=300, random_state=0)
    outsp = estimate_error(model, sp.csr_matrix(X), n_probe=300, random_state=0)
    # float32 data round the kernel entries to ~1e-7; err - 1 is ~1e-2 here.
    assert out32["excess_error"]["estimate"] == pytest.approx(ref, rel=1e-3)
    assert outsp["excess_error"]["estimate"] == pytest.approx(ref, rel=1e-8)


def test_bad_input():
    X = _data(400)
    model = NystromKPCA(K, gamma=GAMMA, n_landmarks=30, random_state=0).fit(X)
    with pytest.raises(ValueError, match="fitted"):
        estimate_error(NystromKPCA(K), X)
    with pytest.raises(ValueError, match="features"):
        estimate_error(model, X[:, :3])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        estimate_error(model, bad)
    for n_probe in (0, 1, 2.5, True, "100"):
        with pytest.raises(ValueError, match="n_probe"):
            estimate_error(model, X, n_probe=n_probe)
    with pytest.raises(ValueError, match="n_probe"):
        estimate_error(model, X, n_probe=8)  # probe path, too few landmarks for k = 5
    with pytest.raises(ValueError, match="components"):
        estimate_error(model, X[:5], n_probe=100)  # k = 5 >= n = 5


def test_method_certificates_against_explicit_references():
    """Nystrom residual trace = tr(K - C W^+ C^T); FD bounds contain RNCA's eigenvalues; the
    features' Gram error falls as m grows."""
    from fastkpca import NystromKPCA, RandomFeatureKPCA, StreamingKPCA
    from fastkpca.metrics import method_certificates

    X = np.random.default_rng(1).standard_normal((400, 6))
    ny = NystromKPCA(4, n_landmarks=30, gamma=0.2, random_state=0).fit(X)
    cert = method_certificates(ny, X)["nystrom_residual_trace"]
    K = ny.kernel_(X)
    C = ny.kernel_(X, ny.landmarks_)
    W = ny.kernel_(ny.landmarks_)
    explicit = np.trace(K - C @ np.linalg.pinv(W, rcond=1e-10, hermitian=True) @ C.T)
    # the model's W^{-1/2} floors eigenvalues below 1e-10 of the largest, as pinv's rcond
    assert cert["value"] == pytest.approx(explicit, rel=1e-6, abs=1e-8 * np.trace(K))
    assert cert["relative"] == pytest.approx(explicit / np.trace(K), rel=1e-6, abs=1e-8)

    # With all rows as landmarks NystromKPCA takes the exact-KPCA path: there is no Nystrom
    # residual to certify, and none is reported (its whitening keeps only the top k rows).
    full = NystromKPCA(4, n_landmarks=400, gamma=0.2, random_state=0).fit(X)
    assert full.solver_ == "exact_kpca"
    assert "nystrom_residual_trace" not in method_certificates(full, X)

    sk = StreamingKPCA(4, n_features=200, sketch_size=8, gamma=0.2, random_state=0).fit(X)
    rf = RandomFeatureKPCA(4, n_features=200, gamma=0.2, random_state=0).fit(X)
    fd = method_certificates(sk, X)["fd_eigenvalue_bounds"]
    # the exact eigenvalues of the same features' centered covariance lie in the bounds
    # (1e-9 relative: round-off of two eigensolvers)
    tol = 1e-9 * rf.eigenvalues_
    assert np.all(fd["lower"] <= rf.eigenvalues_ + tol)
    assert np.all(rf.eigenvalues_ <= fd["upper"] + tol)
    assert fd["max_relative_width"] >= 0

    errors = [
        method_certificates(
            RandomFeatureKPCA(4, n_features=m, gamma=0.2, random_state=0).fit(X), X
        )["feature_gram_error"]["value"]
        for m in (50, 800)
    ]
    # Monte-Carlo error ~ 1/sqrt(m): 16x the features, ~4x smaller (at least 2x)
    assert errors[1] < errors[0] / 2
