"""Metrics: exact values on the exact embedding, explicit references, the estimated branch."""

import numpy as np
import pytest
import scipy.linalg as la

from fastkpca import ExactKPCA
from fastkpca.kernels import RBF
from fastkpca.metrics import (
    eigenvalue_error,
    embedding_error,
    gram_frobenius_error,
    gram_spectral_error,
    mmd,
    relative_rank_k_error,
    subspace_distance,
)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = np.vstack([c + rng.standard_normal((120, 4)) for c in rng.standard_normal((3, 4)) * 3])
    k = 4
    model = ExactKPCA(k + 1, gamma=0.2, eigen_solver="dense").fit(X)
    T = model.transform(X)[:, :k]
    kernel = model.kernel_
    G = kernel(X)
    n = len(X)
    H = np.eye(n) - 1 / n
    return X, T, kernel, H @ G @ H, G, model.eigenvalues_


def test_exact_embedding_is_optimal(fitted):
    X, T, kernel, HGH, _, vals = fitted
    n = len(X)
    assert relative_rank_k_error(X, T, kernel) == pytest.approx(1.0, abs=1e-9)
    # Eckart-Young: the residual's spectral norm is the (k+1)-th eigenvalue
    assert gram_spectral_error(X, T, kernel) == pytest.approx(vals[4] / n, rel=1e-9)


def test_against_explicit_matrices(fitted):
    X, T, kernel, HGH, G, _ = fitted
    n = len(X)
    D = HGH - T @ T.T
    assert gram_frobenius_error(X, T, kernel) == pytest.approx(la.norm(D) / n**2, rel=1e-10)
    assert gram_spectral_error(X, T, kernel) == pytest.approx(la.norm(D, 2) / n, rel=1e-10)
    U = G - T @ T.T
    assert gram_frobenius_error(X, T, kernel, center=False) == pytest.approx(
        la.norm(U) / n**2, rel=1e-10
    )
    assert gram_spectral_error(X, T, kernel, center=False) == pytest.approx(
        la.norm(U, 2) / n, rel=1e-10
    )
    # a worse embedding: ratio to the optimal residual
    T2 = T[:, :2]
    w = np.sort(la.eigvalsh(HGH))[::-1]
    ref = la.norm(HGH - T2 @ T2.T) / np.sqrt(np.sum(w[2:] ** 2))
    assert relative_rank_k_error(X, T2, kernel) == pytest.approx(ref, rel=1e-8)
    noisy = T2 + 0.05 * np.random.default_rng(1).standard_normal(T2.shape)
    assert relative_rank_k_error(X, noisy, kernel) > 1.0


def test_estimated_branch_above_threshold(fitted):
    # Forced onto the block-pass estimates: the spectral estimate is a Rayleigh quotient (never
    # above the truth) within its documented rtol=1e-2; the rank-k error uses a randomized
    # eigensolver with residual 1e-6.
    X, T, kernel, *_ = fitted
    noisy = T + 0.05 * np.random.default_rng(1).standard_normal(T.shape)
    exact = gram_spectral_error(X, noisy, kernel)
    est = gram_spectral_error(X, noisy, kernel, max_exact_n=10)
    assert exact * (1 - 1e-2) <= est <= exact * (1 + 1e-9)
    assert relative_rank_k_error(X, noisy, kernel, max_exact_n=10) == pytest.approx(
        relative_rank_k_error(X, noisy, kernel), rel=1e-6
    )


def test_embedding_error_alignments():
    rng = np.random.default_rng(0)
    R = rng.standard_normal((50, 3))
    Q, _ = la.qr(rng.standard_normal((3, 3)))
    assert embedding_error(R @ Q, R) == pytest.approx(0, abs=1e-12)
    assert embedding_error(R * [1, -1, 1], R, align="sign") == pytest.approx(0, abs=1e-12)
    assert embedding_error(R @ rng.standard_normal((3, 3)), R, align="linear") == pytest.approx(
        0, abs=1e-10
    )
    assert embedding_error(R @ Q, R, align="sign") > 0.1
    E = R + 0.1 * rng.standard_normal(R.shape)
    assert embedding_error(E, R, align="sign") == pytest.approx(la.norm(E - R) / la.norm(R))
    with pytest.raises(ValueError, match="same width"):
        embedding_error(R[:, :2], R)
    with pytest.raises(ValueError, match="align"):
        embedding_error(R, R, align="affine")


def test_eigenvalue_and_subspace():
    assert eigenvalue_error([3.0, 2.0], [3.0, 2.0, 1.0]) == 0.0
    assert eigenvalue_error([4.0, 0.0], [3.0, 4.0]) == pytest.approx(np.sqrt(17) / 5)
    theta = 0.3
    U = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    V = np.array([[1.0, 0.0], [0.0, np.cos(theta)], [0.0, np.sin(theta)]])
    assert subspace_distance(U, V) == pytest.approx(np.sin(theta))
    assert subspace_distance(U, 5 * U @ np.array([[1.0, 2.0], [0.0, 1.0]])) == pytest.approx(
        0, abs=1e-12
    )


def test_mmd():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    kernel = RBF(0.5)
    assert mmd(X, X, np.ones(200), kernel) == pytest.approx(0, abs=1e-7)
    C, w = X[:20], rng.uniform(0.5, 1, 20)
    wn = w / w.sum()
    ref = kernel(X).mean() - 2 * (kernel(X, C) @ wn).mean() + wn @ kernel(C) @ wn
    assert mmd(X, C, w, kernel) == pytest.approx(np.sqrt(ref), rel=1e-10)
    assert mmd(X, C + 3, w, kernel) > mmd(X, C, w, kernel)


def test_bad_inputs(fitted):
    X, T, kernel, *_ = fitted
    with pytest.raises(ValueError, match="Kernel"):
        gram_frobenius_error(X, T, "rbf")
    with pytest.raises(ValueError, match="shape"):
        gram_spectral_error(X, T[:10], kernel)
    with pytest.raises(ValueError, match="NaN"):
        embedding_error(np.full((3, 2), np.nan), np.ones((3, 2)))
