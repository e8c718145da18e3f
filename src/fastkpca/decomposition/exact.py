"""Exact kernel PCA: the reference every approximate method is measured against."""

from __future__ import annotations

import numpy as np

from .._centering import CenteringStats, center_gram_inplace, center_gram_out_of_sample
from ..kernels import chunk_rows, result_dtype
from ..solvers import SOLVERS, eigh_topk
from ._base import BaseKPCA

__all__ = ["ExactKPCA", "exact_kpca", "symmetric_gram"]

#: Working memory (MiB) of one row block while filling or centering the Gram matrix.  Blocks of
#: a few MiB stay in cache for the elementwise passes (exp, centering corrections), and their
#: temporaries stay below the allocator's mmap threshold (32 MiB in glibc), so they are reused
#: instead of being mapped and page-faulted afresh for every block, which on a 20000 x 20000
#: Gram costs more than the kernel arithmetic itself.
BLOCK_MB = 16


def _block_rows(n_cols, n_temporaries):
    # The kernels' global budget still caps the block (tests shrink it to bound peak memory).
    return min(chunk_rows(n_cols, n_temporaries=n_temporaries),
               chunk_rows(n_cols, n_temporaries=n_temporaries, working_memory_mb=BLOCK_MB))


def symmetric_gram(X, kernel, *, block_rows=None):
    """The n x n Gram matrix of X in X's dtype, computing only its upper block triangle.

    Row block ``[s, e)`` evaluates the kernel against ``X[s:]`` only (the diagonal tile with
    ``kernel(X[s:e])``, so the kernel's own rule for exact diagonals applies); the lower triangle
    is then copied tile by tile from the upper one.  That halves the kernel evaluations (the
    distance GEMM and the elementwise exp) of filling every row, and the result is exactly
    symmetric.  Extra memory: one row block of float64 temporaries.
    """
    n = X.shape[0]
    K = np.empty((n, n), dtype=result_dtype(X))
    step = block_rows or _block_rows(n, n_temporaries=3)
    for s in range(0, n, step):
        e = min(n, s + step)
        kernel(X[s:e], out=K[s:e, s:e])
        if e < n:
            kernel(X[s:e], X[e:], out=K[s:e, e:])
    # Mirror with square tiles small enough for the transposed reads to stay in cache.
    tile = 256
    for s in range(0, n, tile):
        e = min(n, s + tile)
        for t in range(0, s, tile):
            K[s:e, t:t + tile] = K[t:t + tile, s:e].T
        K[s:e, s:e] = np.triu(K[s:e, s:e]) + np.triu(K[s:e, s:e], 1).T
    return K


def exact_kpca(X, kernel, n_components, *, eigen_solver="auto", rng=None, tol=None,
               max_iter=None):
    """Top eigenpairs of the centered Gram matrix of X.

    Holds exactly one n x n Gram (X's dtype): it is filled in row chunks, centered in place and
    handed to the eigensolver, which may overwrite it (Schoelkopf, Smola & Mueller 1998).

    Returns
    -------
    eigenvalues : (k,) float64, descending, of the centered Gram ``H K H``
    eigenvectors : (n, k) float64, unit norm (the dual coefficients alpha)
    stats : CenteringStats for out-of-sample centering
    n_iter : work done by the eigensolver (see ``eigh_topk(return_n_iter=True)``)
    """
    K = symmetric_gram(X, kernel)
    stats = center_gram_inplace(K, block=_block_rows(X.shape[0], n_temporaries=2))
    vals, vecs, n_iter = eigh_topk(K, n_components, method=eigen_solver, rng=rng, tol=tol,
                                   max_iter=max_iter, overwrite=True, return_n_iter=True)
    del K
    return vals, vecs, stats, n_iter


class ExactKPCA(BaseKPCA):
    """Exact kernel PCA on the full centered Gram matrix.

    The same projections as ``sklearn.decomposition.KernelPCA`` (up to column signs, which are
    deterministic here), with one n x n Gram in memory instead of several, and block eigensolvers.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives min(10, n_samples).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"``, ``"linear"``, ``"cosine"``
        or a :class:`fastkpca.kernels.Kernel`.
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features as in ``KernelPCA``.
    degree, coef0 : polynomial kernel parameters.
    nu : Matern smoothness.
    eigen_solver : {"auto", "dense", "lanczos", "randomized", "orthogonal"}
        See :func:`fastkpca.solvers.eigh_topk`.  ``auto`` uses ``dense`` up to n = 1000 (or when
        n_components >= n / 5) and ``randomized`` above.
    tol, max_iter : iterative-solver stopping parameters (None: per-dtype defaults).
    random_state : int, Generator or None
        Start vectors of the iterative solvers.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered training Gram, descending.
    eigenvectors_ : (n_samples, n_components) unit-norm dual coefficients.
    X_fit_ : the training data (needed to evaluate the kernel for new points).
    kernel_ : the resolved Kernel.
    n_components_ : the number of components used.
    n_iter_ : eigensolver work: 1 (dense), matrix-vector products (lanczos) or block
        iterations (randomized, orthogonal).
    """

    def __init__(self, n_components=None, *, kernel="rbf", gamma=None, degree=3, coef0=1.0,
                 nu=1.5, eigen_solver="auto", tol=None, max_iter=None, random_state=None):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, y=None):
        """Fit on X of shape (n_samples, n_features)."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit and return the training projections ``alpha * sqrt(lambda)`` (no second Gram)."""
        X = self._fit(X)
        out = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        return out.astype(self._output_dtype(X), copy=False)

    def _fit(self, X):
        X = self._validate_fit_data(X)
        if self.eigen_solver not in SOLVERS:
            raise ValueError(f"eigen_solver must be one of {SOLVERS}, got {self.eigen_solver!r}")
        rng = self._make_rng()
        kernel = self._resolve_kernel(X, rng)
        k = self._resolve_n_components(X.shape[0])
        vals, vecs, stats, n_iter = exact_kpca(X, kernel, k, eigen_solver=self.eigen_solver, rng=rng,
                                       tol=self.tol, max_iter=self.max_iter)
        self.X_fit_ = np.array(X, copy=True)
        self.eigenvalues_ = vals
        self.eigenvectors_ = vecs
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        self.n_iter_ = n_iter
        return X

    @property
    def _scaled_alphas(self):
        scale = np.zeros_like(self.eigenvalues_)
        nz = self.eigenvalues_ > 0
        scale[nz] = 1.0 / np.sqrt(self.eigenvalues_[nz])
        return self.eigenvectors_ * scale

    def transform(self, X):
        """Project X on the principal axes: centered ``k(X, X_fit) @ alpha / sqrt(lambda)``."""
        X = self._validate_transform_data(X)
        dtype = self._output_dtype(X)
        alphas = self._scaled_alphas.astype(dtype)
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        out = np.empty((X.shape[0], self.n_components_), dtype=dtype)
        step = _block_rows(self.X_fit_.shape[0], n_temporaries=3)
        for start in range(0, X.shape[0], step):
            Kb = self.kernel_(X[start:start + step], self.X_fit_.astype(X.dtype, copy=False))
            center_gram_out_of_sample(Kb, stats)
            out[start:start + step] = Kb @ alphas
        return out
