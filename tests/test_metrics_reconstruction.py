"""reconstruction_error: exact limits, explicit references, unbiasedness (population)."""

import itertools

import numpy as np
import pytest
import scipy.linalg as la

from fastkpca import ExactKPCA, NystromKPCA, RandomFeatureKPCA
from fastkpca.metrics import (
    _reconstruction_plugin,
    _reconstruction_unbiased,
    reconstruction_error,
)


def _blobs(n, seed):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 1.0], [0.0, 3.0, -1.0]])
    return centers[rng.integers(0, 3, n)] + rng.standard_normal((n, 3))


@pytest.fixture(scope="module")
def data():
    X = _blobs(900, 0)
    return X[:300], X[300:]


@pytest.fixture(scope="module")
def exact(data):
    train, _ = data
    return ExactKPCA(20, gamma=0.3, eigen_solver="dense").fit(train)


def test_exact_on_training_sample_is_tail_of_squared_eigenvalues(data):
    # Slides' R_{n,l} with P = P_n: the top-l eigenfunctions are orthonormal in L2(P_n), so R is
    # ||Sigma_n - (Sigma_n)_l||_HS^2 = sum_{i > l} (lambda_i / n)^2 over the centered Gram.
    train, _ = data
    n = len(train)
    model = ExactKPCA(n - 1, gamma=0.3, eigen_solver="dense").fit(train)
    G = model.kernel_(train)
    H = np.eye(n) - 1.0 / n
    lam = np.clip(la.eigvalsh(H @ G @ H)[::-1], 0, None)
    for ell in (1, 5, 20):
        got = reconstruction_error(model, train, ell, estimator="plugin", batch_size=None)
        want = np.sum(lam[ell:] ** 2) / n**2
        # both sides are one dense eigendecomposition of the same Gram: agree to rounding
        assert got["estimate"] == pytest.approx(want, rel=1e-8, abs=1e-14)
        assert np.isnan(got["stderr"]) and got["n_batches"] == 1


def test_decreases_with_components(exact, data):
    _, held = data
    vals = [
        reconstruction_error(exact, held, ell, batch_size=200)["estimate"] for ell in (1, 3, 8, 20)
    ]
    # the drops are > 10x the standard errors (about 1e-4 here)
    assert all(a > b for a, b in zip(vals, vals[1:], strict=False))
    assert vals[-1] >= -1e-3


def _explicit_plugin(K, A):
    """The definition on P_N, point by point: E_X ||h_X - sum_i <h_X, a_i> a_i||^2_{L2(P_N)}."""
    N = len(K)
    H = np.eye(N) - 1.0 / N
    Kc = H @ K @ H
    Ac = H @ A
    total = 0.0
    for x in range(N):
        h = Kc[:, x]
        coef = Ac.T @ h / N
        resid = h - Ac @ coef
        total += resid @ resid / N
    return total / N


def _explicit_unbiased(K, A):
    """Brute force over distinct tuples with the same centered inputs as the closed form."""
    N = len(K)
    K0 = K.copy()
    np.fill_diagonal(K0, 0)
    r = K0.sum(axis=1) / (N - 1)
    Kb = K0 - r[:, None] - r[None, :] + r.mean()
    Ab = A - A.mean(axis=0)
    t1 = np.mean([Kb[a, b] ** 2 for a, b in itertools.permutations(range(N), 2)])
    t2 = np.mean(
        [Kb[a, b] * Kb[a, c] * Ab[b] @ Ab[c] for a, b, c in itertools.permutations(range(N), 3)]
    )
    t3 = np.mean(
        [
            Kb[a, b] * Kb[a, c] * (Ab[w] @ Ab[b]) * (Ab[w] @ Ab[c])
            for a, w, b, c in itertools.permutations(range(N), 4)
        ]
    )
    return t1 - 2 * t2 + t3


def test_batch_estimators_match_explicit_sums():
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((9, 2))
    K = np.exp(-0.5 * ((Z[:, None] - Z[None]) ** 2).sum(-1))
    A = rng.standard_normal((9, 3))
    # the same sums in a different order: rounding only
    assert _reconstruction_plugin(K, A) == pytest.approx(_explicit_plugin(K, A), rel=1e-10)
    assert _reconstruction_unbiased(K, A) == pytest.approx(_explicit_unbiased(K, A), rel=1e-9)


def test_unbiased_against_population_value_linear_kernel():
    # Linear kernel on Gaussian data: H = R^d, Sigma = C is known, and the slides' R_{n,l} =
    # ||C - C^{1/2} g C^{3/2}||_F^2 with g = sum_{i<=l} w_i w_i^T / lambda_i (w_i, lambda_i the
    # fitted eigenpairs) is a closed form.  The estimate on fresh held-out rows must match it
    # within 4 standard errors (the centering bias is O(||C||_F^2 / batch) = 5e-4 relative here).
    rng = np.random.default_rng(7)
    d = 6
    spec = np.array([3.0, 2.0, 1.0, 0.5, 0.3, 0.2])
    Q = la.qr(rng.standard_normal((d, d)))[0]
    C = Q @ np.diag(spec) @ Q.T
    root = Q @ np.diag(np.sqrt(spec)) @ Q.T
    train = rng.standard_normal((200, d)) @ root
    model = ExactKPCA(3, kernel="linear", eigen_solver="dense").fit(train)
    Xc = train - train.mean(axis=0)
    lam, W = la.eigh(Xc.T @ Xc / len(train))
    lam, W = lam[::-1][:3], W[:, ::-1][:, :3]
    g = W @ np.diag(1 / lam) @ W.T
    M = C - root @ g @ root @ C
    want = np.sum(M * M)
    held = rng.standard_normal((20000, d)) @ root
    got = reconstruction_error(model, held, batch_size=1000, random_state=0)
    assert abs(got["estimate"] - want) < 4 * got["stderr"]
    # the plug-in carries the diagonal's bias E kbar(X, X)^2 / N ~ tr(C)^2 / N: visibly higher
    plug = reconstruction_error(model, held, batch_size=1000, estimator="plugin")
    assert plug["estimate"] - want > 4 * got["stderr"]


def test_random_features_approach_exact(exact, data):
    train, held = data
    r_exact = reconstruction_error(exact, held, 5, batch_size=200)
    gaps = []
    for m in (20, 2000):
        rf = RandomFeatureKPCA(5, n_random_features=m, gamma=0.3, random_state=0).fit(train)
        r = reconstruction_error(rf, held, 5, batch_size=200)
        gaps.append(r["estimate"] - r_exact["estimate"])
    # with 20 features the eigenspace is visibly worse; with 2000 within 3 standard errors
    # (same held-out batches, so the errors are correlated: the bound is loose, not tight)
    assert gaps[0] > 5 * gaps[1]
    assert abs(gaps[1]) < 3 * (r_exact["stderr"] + r["stderr"])


def test_nystrom_all_landmarks_is_exact(exact, data):
    train, held = data
    ny = NystromKPCA(5, n_landmarks=len(train), gamma=0.3, random_state=0).fit(train)
    a = reconstruction_error(exact, held, 5, batch_size=200)["estimate"]
    b = reconstruction_error(ny, held, 5, batch_size=200)["estimate"]
    # the same eigenspace up to the landmark solve's rounding
    assert b == pytest.approx(a, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": 21}, "n_components"),
        ({"estimator": "jackknife"}, "estimator"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 3}, "fewer than 4 rows"),
    ],
)
def test_bad_arguments(exact, data, kwargs, match):
    _, held = data
    with pytest.raises(ValueError, match=match):
        reconstruction_error(exact, held[:10], **kwargs)


def test_bad_inputs(exact, data):
    _, held = data
    with pytest.raises(ValueError, match="features"):
        reconstruction_error(exact, held[:, :2])
    bad = held.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        reconstruction_error(exact, bad)
    with pytest.raises(ValueError, match="fitted"):
        reconstruction_error(ExactKPCA(2), held)


def test_kernel_pca_matches_exact(exact, data):
    from fastkpca import KernelPCA

    train, held = data
    kp = KernelPCA(5, kernel="rbf", gamma=0.3, eigen_solver="dense").fit(train)
    a = reconstruction_error(exact, held, 5, batch_size=200)["estimate"]
    b = reconstruction_error(kp, held, 5, batch_size=200)["estimate"]
    # two dense eigensolvers on the same Gram: the eigenspaces agree to rounding
    assert b == pytest.approx(a, rel=1e-8)
