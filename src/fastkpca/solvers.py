"""Top-k eigensolvers for symmetric positive semi-definite operators.

One entry point, :func:`eigh_topk`, serves a dense Gram, a float32 Gram, a sparsified (CSR)
Gram, an implicitly centered Gram and any ``scipy.sparse.linalg.LinearOperator``:

``dense``
    ``scipy.linalg.eigh(..., subset_by_index=...)`` (LAPACK ``syevr``), overwriting the input when
    allowed so an n x n Gram is never copied.
``lanczos``
    ARPACK ``eigsh`` (implicitly restarted Lanczos) with a start vector drawn from ``rng``.
``randomized``
    Randomized subspace iteration (Halko, Martinsson & Tropp 2011, Algorithm 4.4) with ``k +
    oversamples`` vectors and a Rayleigh-Ritz step each iteration; it stops when the Ritz residuals
    of the top k pairs fall below ``tol``.  One pass over the operator per *block* of vectors,
    where Lanczos makes one per vector: the reason it wins on a large dense Gram.
``orthogonal``
    Orthogonal (subspace) iteration with exactly k vectors, as in Achlioptas, McSherry &
    Schoelkopf (2001, section 3), stopping when the subspace changes by less than ``tol``
    (sine of the largest principal angle between successive iterates).

All methods return eigenvalues in descending order and eigenvectors post-processed by
:func:`postprocess_eigen` (tiny negatives clipped, deterministic signs).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator, eigsh

__all__ = ["eigh_topk", "postprocess_eigen", "flip_signs", "SOLVERS", "TOLERANCES"]

SOLVERS = ("auto", "dense", "lanczos", "randomized", "orthogonal")

#: Default convergence tolerances per working precision (the Falkon ``options.py`` idea).
TOLERANCES = {
    np.dtype(np.float64): {"iterative": 1e-8, "clip": 1e-12},
    np.dtype(np.float32): {"iterative": 1e-5, "clip": 2e-7},
}


def flip_signs(vectors: np.ndarray) -> np.ndarray:
    """Make each column's entry of largest magnitude positive (``svd_flip``'s rule), in place."""
    if vectors.size == 0:
        return vectors
    idx = np.argmax(np.abs(vectors), axis=0)
    signs = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    vectors *= signs
    return vectors


def postprocess_eigen(values, vectors, *, clip_ratio=1e-12):
    """Sort descending, zero the round-off eigenvalues, fix the eigenvector signs.

    A PSD operator has no negative eigenvalues, so negatives are round-off and become 0; so do
    positives below ``clip_ratio`` times the largest (scikit-learn's ``_check_psd_eigenvalues``
    rule), which would otherwise blow up when a transform divides by their square root.
    """
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values)[::-1]
    values = values[order]
    vectors = np.array(vectors[:, order], dtype=np.float64)
    top = values[0] if values.size else 0.0
    values = np.where(values < clip_ratio * max(top, 0.0), 0.0, values)
    flip_signs(vectors)
    return values, vectors


def _is_dense(A) -> bool:
    return isinstance(A, np.ndarray)


def _matmat(A, V, low_precision):
    if low_precision:
        out = A @ V.astype(np.float32)
    else:
        out = A @ V
    if sp.issparse(out):
        out = out.toarray()
    return np.asarray(out, dtype=np.float64)


def _dense(A, k, overwrite):
    n = A.shape[0]
    if not _is_dense(A):
        raise ValueError("eigen_solver='dense' needs an explicit array, not an operator")
    # LAPACK wants Fortran order; A is symmetric, so its transpose is the same matrix as a
    # Fortran-ordered view, and no n x n copy is made.
    A_f = A.T if A.flags.c_contiguous and not A.flags.f_contiguous else A
    vals, vecs = la.eigh(A_f, subset_by_index=[n - k, n - 1], overwrite_a=overwrite,
                         check_finite=False, driver="evr")
    return vals, vecs


def _lanczos(A, k, rng, tol, max_iter):
    n = A.shape[0]
    if k >= n:
        raise ValueError(f"eigen_solver='lanczos' needs n_components < n ({k} >= {n}); "
                         "use eigen_solver='dense'")
    v0 = rng.uniform(-1.0, 1.0, n)
    low_precision = getattr(A, "dtype", None) == np.float32 and not isinstance(A, LinearOperator)
    n_products = 0

    def matvec(v):
        # A float32 matrix is multiplied in float32 (no float64 copy); ARPACK runs in float64.
        nonlocal n_products
        n_products += 1
        return _matmat(A, v, low_precision)

    op = LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
    vals, vecs = eigsh(op, k=k, which="LA", v0=v0, tol=tol, maxiter=max_iter)
    return vals, vecs, n_products


def _ritz(A, Q, low_precision):
    AQ = _matmat(A, Q, low_precision)
    B = Q.T @ AQ
    B = (B + B.T) / 2
    vals, W = la.eigh(B)
    return vals[::-1], Q @ W[:, ::-1], AQ @ W[:, ::-1]


def _randomized(A, k, rng, tol, max_iter, oversamples, low_precision):
    """Randomized subspace iteration with Rayleigh-Ritz and a residual stopping rule."""
    n = A.shape[0]
    b = min(n, k + oversamples)
    Q, _ = la.qr(rng.standard_normal((n, b)), mode="economic")
    vals = vecs = None
    for it in range(1, max_iter + 1):
        vals, vecs, AV = _ritz(A, Q, low_precision)
        # Residual ||A v - lambda v|| of the top-k Ritz pairs, relative to the largest eigenvalue.
        res = np.linalg.norm(AV[:, :k] - vecs[:, :k] * vals[:k], axis=0)
        if np.max(res) <= tol * max(abs(vals[0]), np.finfo(float).tiny):
            break
        # Next iterate: the span of A V (one pass over A for all b vectors).
        Q, _ = la.qr(AV, mode="economic")
    return vals[:k], vecs[:, :k], it


def _orthogonal(A, k, rng, tol, max_iter, low_precision):
    """Orthogonal iteration Q <- orth(A Q) until sin(angle(Q_old, Q_new)) <= tol."""
    n = A.shape[0]
    Q, _ = la.qr(rng.standard_normal((n, k)), mode="economic")
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        Z = _matmat(A, Q, low_precision)
        Q_new, _ = la.qr(Z, mode="economic")
        # sin of the largest principal angle = ||(I - Q Q^T) Q_new||_2
        change = np.linalg.norm(Q_new - Q @ (Q.T @ Q_new), 2)
        Q = Q_new
        if change <= tol:
            break
    vals, vecs, _ = _ritz(A, Q, low_precision)
    return vals, vecs, it


def eigh_topk(A, k, *, method="auto", rng=None, tol=None, max_iter=None, oversamples=10,
              overwrite=False, return_n_iter=False):
    """The k largest eigenpairs of a symmetric PSD matrix or operator.

    Parameters
    ----------
    A : ndarray, sparse matrix or LinearOperator, shape (n, n)
        Symmetric; float32 arrays are multiplied in float32, all else in float64.
    k : int
        Number of eigenpairs, ``1 <= k <= n``.
    method : {"auto", "dense", "lanczos", "randomized", "orthogonal"}
        ``auto`` picks ``dense`` for small n or large k / n, else ``randomized``.
    rng : numpy.random.Generator or seed
        Start vectors; the same seed gives the same result.
    tol : float, optional
        Stopping tolerance (per-dtype default from :data:`TOLERANCES`; ARPACK's default 0 means
        machine precision for ``lanczos``).
    max_iter : int, optional
        Iteration cap for the iterative methods.
    oversamples : int
        Extra vectors of the randomized block.
    overwrite : bool
        Allow ``dense`` to destroy A (saves one n x n copy).
    return_n_iter : bool
        Also return the work done: 1 for ``dense``, the number of matrix-vector products for
        ``lanczos``, the number of block iterations (passes over A) for the others.

    Returns
    -------
    eigenvalues : ndarray (k,), float64, descending, >= 0
    eigenvectors : ndarray (n, k), float64, orthonormal columns with deterministic signs
    n_iter : int, only if ``return_n_iter``
    """
    if method not in SOLVERS:
        raise ValueError(f"unknown eigen_solver {method!r}; choose one of {SOLVERS}")
    n = A.shape[0]
    if A.shape != (n, n):
        raise ValueError(f"A must be square, got shape {A.shape}")
    if not 1 <= k <= n:
        raise ValueError(f"number of eigenpairs k={k} must be in [1, {n}]")
    rng = np.random.default_rng(rng)
    dtype = np.dtype(getattr(A, "dtype", np.float64))
    low_precision = dtype == np.float32 and not isinstance(A, LinearOperator)
    tols = TOLERANCES.get(dtype, TOLERANCES[np.dtype(np.float64)])
    if method == "auto":
        if _is_dense(A) and (n <= 1000 or k >= n // 5):
            method = "dense"
        else:
            method = "randomized"
    if method == "dense":
        vals, vecs = _dense(A, k, overwrite)
        n_iter = 1
    elif method == "lanczos":
        vals, vecs, n_iter = _lanczos(A, k, rng, 0.0 if tol is None else tol, max_iter)
    else:
        if not (_is_dense(A) or sp.issparse(A)):
            A = aslinearoperator(A)
        tol = tols["iterative"] if tol is None else tol
        if method == "randomized":
            vals, vecs, n_iter = _randomized(A, k, rng, tol, max_iter or 500, oversamples,
                                             low_precision)
        else:
            vals, vecs, n_iter = _orthogonal(A, k, rng, tol, max_iter or 1000, low_precision)
    vals, vecs = postprocess_eigen(vals, vecs, clip_ratio=tols["clip"])
    return (vals, vecs, n_iter) if return_n_iter else (vals, vecs)
