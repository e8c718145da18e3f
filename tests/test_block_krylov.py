"""The performance paths of exact KPCA: block Krylov ``randomized`` solver, symmetric Gram fill.

Complements ``test_solvers.py`` / ``test_exact.py`` with the cases these paths add: Krylov
spaces that exhaust the matrix (small n, low rank), thick restarts, the stagnation stop, the
pass count on a flat spectrum, the threaded upper-triangle Gram, and ARPACK's default tolerance
against scikit-learn's ``tol=0``.
"""

import numpy as np
import pytest
import scipy.linalg as la
from sklearn.decomposition import KernelPCA

from fastkpca import ExactKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.execution import budget, using_n_jobs
from fastkpca.execution.kernel_ops import symmetric_gram
from fastkpca.kernels import make_kernel
from fastkpca.metrics import subspace_distance
from fastkpca.solvers import eigh_topk
from tests.conftest import rel_err, spectrum_matrix


@pytest.mark.parametrize("n", [1, 2, 5, 30])
def test_randomized_small_n_is_exact(n):
    # b = k + 10 >= n: the first block or two span R^n, the Ritz pairs are the eigenpairs
    B = np.random.default_rng(n).standard_normal((n, n))
    A = B @ B.T
    ref = la.eigh(A)[0][::-1]
    for k in sorted({1, max(1, n // 2), n}):
        w, V = eigh_topk(A, k, method="randomized", rng=0)
        np.testing.assert_allclose(w, ref[:k], rtol=1e-10, atol=1e-12 * ref[0])
        np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-12)


def test_randomized_low_rank_and_zero():
    # rank 3, k = 10: the Krylov space becomes invariant (deflated block); the remaining
    # eigenvalues are exactly 0 and the vectors stay orthonormal
    B = np.random.default_rng(0).standard_normal((200, 3))
    A = B @ B.T
    w, V = eigh_topk(A, 10, method="randomized", rng=0)
    np.testing.assert_allclose(w[:3], la.eigh(A)[0][::-1][:3], rtol=1e-12)
    assert np.all(w[3:] == 0.0)
    np.testing.assert_allclose(V.T @ V, np.eye(10), atol=1e-12)
    w, V = eigh_topk(np.zeros((50, 50)), 3, method="randomized", rng=0)
    assert np.all(w == 0.0) and V.shape == (50, 3)


def test_randomized_few_passes_on_flat_spectrum():
    # lambda_i = 0.985^i: subspace iteration with 20 vectors converges like
    # (lambda_21 / lambda_10)^t = 0.85^t, i.e. ~110 passes to a 1e-8 residual; the block Krylov
    # space converges with the square root of the gap (Musco & Musco 2015, Theorem 1).
    A, Q = spectrum_matrix(0.985 ** np.arange(600))
    w, V, n_iter = eigh_topk(A, 10, method="randomized", rng=0, return_n_iter=True)
    assert n_iter <= 25, n_iter
    np.testing.assert_allclose(w, 0.985 ** np.arange(10), rtol=1e-12)
    # eigenvector error <= residual / gap = 1e-8 / (1 - 0.985) ~ 1e-6
    assert subspace_distance(V, Q[:, :10]) < 1e-6


def test_randomized_thick_restart(monkeypatch):
    # a basis of 2 blocks forces a restart every pass; the answer must not change
    vals = np.concatenate([[50, 40, 30, 20, 10], 5 * 0.99 ** np.arange(395)])
    A, Q = spectrum_matrix(vals)
    _, _, free = eigh_topk(A, 5, method="randomized", rng=0, return_n_iter=True)
    monkeypatch.setattr(budget, "KRYLOV_MAX_BLOCKS", 2)
    w, V, restarted = eigh_topk(A, 5, method="randomized", rng=0, return_n_iter=True)
    assert restarted > free  # the restarts happened and cost passes
    np.testing.assert_allclose(w, vals[:5], rtol=1e-12)
    # sin(angle) <= residual / gap = 1e-8 * lambda_1 / (lambda_5 - lambda_6) = 1e-7
    assert subspace_distance(V, Q[:, :5]) < 1e-7


@pytest.mark.parametrize("dtype,tol,floor", [(np.float32, 1e-12, 1e-5), (np.float64, 0.0, 1e-12)])
def test_randomized_stops_at_rounding_floor(dtype, tol, floor):
    # a tolerance below what the products can resolve stops on stagnation, not at max_iter
    B = np.random.default_rng(0).standard_normal((1000, 1000)) / 30
    A = B @ B.T
    w, V, n_iter = eigh_topk(
        A.astype(dtype), 5, method="randomized", rng=0, tol=tol, max_iter=400, return_n_iter=True
    )
    assert n_iter < 150, n_iter
    res = np.linalg.norm(A @ V - V * w, axis=0).max() / w[0]
    assert res < floor


def test_randomized_max_iter_returns_consistent_pairs():
    A, _ = spectrum_matrix(0.99 ** np.arange(300))
    w, V, n_iter = eigh_topk(A, 4, method="randomized", rng=0, max_iter=2, return_n_iter=True)
    assert n_iter == 2 and w.shape == (4,) and V.shape == (300, 4)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)
    # Ritz values of a subspace never exceed the eigenvalues (Cauchy interlacing)
    assert np.all(w <= 0.99 ** np.arange(4) + 1e-12)


@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern", "polynomial", "linear", "cosine"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_symmetric_gram_matches_kernel(name, dtype):
    X = np.random.default_rng(0).standard_normal((301, 5)).astype(dtype)
    kernel = make_kernel(name, gamma=0.2, X=X)
    ref = kernel(X)
    for block_rows, n_threads in [(None, None), (7, 1), (40, 3)]:
        with using_n_jobs(n_threads or -1):
            K = symmetric_gram(kernel, X, rows=block_rows)
        assert K.dtype == ref.dtype
        assert np.array_equal(K, K.T)  # mirrored, not recomputed
        if name in ("rbf", "laplacian", "matern"):
            np.testing.assert_array_equal(np.diag(K), 1.0)  # the kernel's rule: set, not computed
        else:
            # linear / polynomial / cosine diagonals are dot products from a GEMM on a 7- or
            # 40-row tile vs on all 301 rows: the BLAS kernel (and so the summation order) depends
            # on the shape and the CPU (4e-16 apart with AVX-512); 5-term sums, round-off <= 1e-15
            np.testing.assert_allclose(
                np.diag(K), np.diag(ref), rtol=1e-6 if dtype == np.float32 else 1e-13
            )
        # the upper triangle is the same GEMM on a different row split: round-off only
        # (float32: the float64 block rounded to float32 either way, 1 ulp)
        np.testing.assert_allclose(
            K,
            ref,
            rtol=1e-6 if dtype == np.float32 else 1e-13,
            atol=1e-6 if dtype == np.float32 else 1e-13,
        )


@pytest.fixture(scope="module")
def noisy():
    X = make_random_noisy(700, 20, signal_dim=10, random_state=0)
    sk = KernelPCA(5, kernel="rbf", gamma=0.05, eigen_solver="arpack", random_state=0)
    sk.fit(X[:600])
    return X[:600], X[600:], sk


@pytest.mark.parametrize("solver", ["lanczos", "randomized", "auto"])
def test_default_tolerances_match_sklearn_tol0(noisy, solver):
    # ARPACK at tol=1e-10 (our lanczos default) and the block solver at a 1e-8 residual, against
    # scikit-learn's machine-precision ARPACK: eigenvector errors are bounded by
    # residual / relative gap (~0.1 on this RandomNoisy spectrum), i.e. 1e-9 and 1e-7, inside
    # the 1e-6 contract (measured: 5e-15 and 5e-12)
    X, Xn, sk = noisy
    model = ExactKPCA(5, gamma=0.05, eigen_solver=solver, random_state=0).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, sk.eigenvalues_, rtol=1e-9)
    assert rel_err(sk.transform(Xn), model.transform(Xn)) < 1e-6
    assert rel_err(sk.transform(X), model.fit_transform(X)) < 1e-6


def test_float32_transform_of_float64_model(noisy):
    # a float32 batch through a float64 model: float32 out, computed in float64 inside
    X, Xn, _ = noisy
    model = ExactKPCA(5, gamma=0.05, random_state=0).fit(X)
    T64 = model.transform(Xn)
    T32 = model.transform(Xn.astype(np.float32))
    assert T32.dtype == np.float32
    assert rel_err(T64, T32) < 1e-5  # float32 rounding of the inputs and output only
