"""Top-k eigensolvers for symmetric positive semi-definite operators.

One entry point, :func:`eigh_topk`, for a dense (or float32, or CSR) Gram, an implicitly centered
Gram or any ``LinearOperator``, on the host or a device (an operator with a ``placement``):
``dense`` (:func:`fastkpca.execution.linalg.dense_topk`), ``lanczos`` (ARPACK ``eigsh``, host
only), ``randomized`` (block Krylov, Musco & Musco 2015, thick restarts) and ``orthogonal``
(Achlioptas, McSherry & Schoelkopf 2001, section 3).  Written once over the array namespace on
:mod:`fastkpca.execution.linalg`; host start blocks, float64 results in A's namespace,
post-processed by :func:`postprocess_eigen`.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as la
from scipy.sparse.linalg import LinearOperator
from sklearn.exceptions import ConvergenceWarning

from ._utils import as_generator
from .execution import linalg
from .execution.arrays import HOST, Placement
from .execution.linalg import NonFiniteError, warn_not_converged

__all__ = [
    "eigh_topk",
    "solve_topk",
    "auto_method",
    "postprocess_eigen",
    "flip_signs",
    "NonFiniteError",
    "SOLVERS",
    "TOLERANCES",
]

SOLVERS = ("auto", "dense", "lanczos", "randomized", "orthogonal")

#: Default convergence tolerances per working precision (the Falkon ``options.py`` idea).
#: ``lanczos`` is ARPACK's relative Ritz residual: 1e-10 bounds eigenvector errors by 1e-6 down
#: to relative gaps of 1e-4; float32 products are only good to ~1e-7, so tighter buys nothing.
TOLERANCES = {
    np.dtype(np.float64): {"iterative": 1e-8, "lanczos": 1e-10},
    np.dtype(np.float32): {"iterative": 1e-5, "lanczos": 1e-7},
}

#: ``randomized`` stops after this many iterations without a 10% drop of the residual.
STALL_ITERATIONS = 5


def flip_signs(vectors):
    """Make each column's entry of largest magnitude positive (``svd_flip``'s rule), in place."""
    if 0 in tuple(vectors.shape):
        return vectors
    xp = linalg.operator_placement(vectors).xp
    idx = xp.argmax(xp.abs(vectors), axis=0)
    picked = xp.take_along_axis(vectors, idx[None, :], axis=0)[0, :]
    ones = xp.ones_like(picked)
    vectors *= xp.where(picked < 0, -ones, ones)
    return vectors


#: Eigenvalues at most ``ROUNDING_FACTOR * eps * scale`` are rounding, and are reported as exactly
#: 0 (:func:`postprocess_eigen`).  ``scale`` is the trace of the *uncentered* PSD Gram the
#: eigenproblem comes from (``sum_i k(x_i, x_i)``; for a feature covariance ``sum_i |z_i|^2``) and
#: eps the unit roundoff of its computation.  The computed eigenvalues are exact for ``A + E``
#: and move by at most ``||E||_2 <= ||E||_F`` (Weyl); each centered entry is four rounded terms,
#: so ``||E||_F <= 4 c eps ||K||_F <= 4 c eps tr(K)`` for a PSD K; 16 covers c = 4 roundings per
#: term.  The largest eigenvalue cannot be the reference: for a zero centered Gram (identical
#: rows) it is itself rounding.
ROUNDING_FACTOR = 16.0


def rounding_threshold(scale, eps=None) -> float:
    """``ROUNDING_FACTOR * eps * scale``: eigenvalues at or below it are rounding (0 if the scale
    is unknown: None or not finite)."""
    if scale is None or not np.isfinite(scale):
        return 0.0
    eps = float(np.finfo(np.float64).eps) if eps is None else float(eps)
    return ROUNDING_FACTOR * eps * max(float(scale), 0.0)


def postprocess_eigen(values, vectors, *, scale=None, eps=None):
    """Sort descending, zero the eigenvalues that are rounding, fix the eigenvector signs.

    The one post-processing of every eigensolver's output: negatives (rounding for a PSD
    operator) and positives at most :func:`rounding_threshold` ``(scale, eps)`` become 0 (see
    :data:`ROUNDING_FACTOR`); the threshold is relative to the kernel's scale, not to the largest
    eigenvalue, which for a zero centered Gram (identical rows) is itself rounding.

    Parameters
    ----------
    values : (k,) array
    vectors : (n, k) array (of any namespace; the result is float64 in the same one)
    scale : float or None
        The trace of the uncentered Gram (``sum_i k(x_i, x_i)``, or ``sum_i |z_i|^2`` for a
        feature covariance); None (unknown): only negative values are zeroed.
    eps : float or None
        Unit roundoff of the computation of the matrix (None: float64's).
    """
    xp = linalg.operator_placement(vectors).xp
    values = xp.astype(xp.asarray(values), xp.float64, copy=False)
    order = xp.flip(xp.argsort(values), axis=0)
    values = xp.take(values, order)
    vectors = xp.astype(xp.take(vectors, order, axis=1), xp.float64, copy=False)
    values = xp.where(values <= rounding_threshold(scale, eps), xp.zeros_like(values), values)
    flip_signs(vectors)
    return values, vectors


def _warn_stalled(it: int, res: float, tol: float) -> None:
    # Reported, not silent: the eigenpairs are only as good as this residual (a flat stretch of
    # a slow convergence looks the same as the rounding floor).
    warnings.warn(
        f"eigen_solver='randomized' stopped after {it} iterations without "
        f"progress at residual {res:.2g} > tol {tol:.2g} (the rounding floor "
        "of the products, or a stall): the eigenpairs are approximate to that "
        "residual; raise tol, or use float64",
        ConvergenceWarning,
        stacklevel=4,
    )


def _randomized(A, k, rng, tol, max_iter, oversamples, *, warn=True):
    """Randomized block Krylov iteration with Rayleigh-Ritz and thick restarts.

    Musco & Musco (2015), Algorithm 2: the Rayleigh-Ritz projection of A on ``[Q, A Q, A^2 Q,
    ...]`` for a random block Q of ``b = k + oversamples`` vectors, one block product per
    iteration; passes grow like ``1 / sqrt(gap)`` (subspace iteration: ``1 / gap``).  V and
    ``A V`` are kept, so Ritz residuals cost no pass; it stops when the top k are below ``tol *
    theta_1``.  A full basis (:func:`fastkpca.execution.linalg.krylov_basis_columns`) is
    compressed to its leading Ritz vectors (a thick restart, Wu & Simon).
    """
    placement = linalg.operator_placement(A)
    xp = placement.xp
    n = A.shape[0]
    b = min(n, k + oversamples)
    max_basis = linalg.krylov_basis_columns(n, b, k, placement)
    V = linalg.column_store(n, max_basis, placement)
    AV = linalg.column_store(n, max_basis, placement)
    H = xp.zeros((max_basis, max_basis), dtype=xp.float64, device=placement.device)  # V^T A V
    with linalg.small_steps(placement):
        Q = linalg.start_block(n, b, rng, placement)
    m = 0
    best, stalled = np.inf, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        W = linalg.matmat(A, Q)  # the pass over A
        with linalg.small_steps(placement):
            p = Q.shape[1]
            V[:, m : m + p] = Q
            AV[:, m : m + p] = W
            # A symmetric: the new row block of V^T A V is the transpose of the new column block.
            C = V[:, : m + p].T @ W
            H[: m + p, m : m + p] = C
            H[m : m + p, : m + p] = C.T
            m += p
            theta, Y = linalg.eigh(H[:m, :m])
            top = max(abs(float(theta[0])), np.finfo(float).tiny)
            Yk = Y[:, :k]
            R = AV[:, :m] @ Yk - V[:, :m] @ (Yk * theta[:k])
            res = float(xp.max(xp.linalg.vector_norm(R, axis=0))) / top
            # Stagnation: the residual has hit the rounding floor of the products (about 1e-7
            # for a float32 Gram), below which a too small tol would spin until max_iter.
            best, stalled = (res, 0) if res < 0.9 * best else (best, stalled + 1)
            if m >= n or res <= tol:
                break
            if stalled >= STALL_ITERATIONS:
                if warn:
                    _warn_stalled(it, res, tol)
                break
            if it == max_iter:
                if warn:
                    warn_not_converged(
                        "randomized", max_iter, f"residual {res:.2g} > tol {tol:.2g}"
                    )
                break
            Q = linalg.orth_against(V[:, :m], W, 1e-12 * top)
            if Q.shape[1] == 0:  # span(V) is invariant under A: the Ritz pairs are exact
                break
            if m + Q.shape[1] > max_basis:
                # Thick restart: keep the leading Ritz vectors, on which A V and V^T A V are
                # known.
                keep = max_basis - Q.shape[1]
                V[:, :keep] = V[:, :m] @ Y[:, :keep]
                AV[:, :keep] = AV[:, :m] @ Y[:, :keep]
                eye = xp.eye(keep, dtype=xp.float64, device=placement.device)
                H[...] = 0.0
                H[:keep, :keep] = xp.where(eye > 0, theta[:keep], eye)  # diag(theta)
                m = keep
    with linalg.small_steps(placement):
        return theta[:k], V[:, :m] @ Yk, it


def _orthogonal(A, k, rng, tol, max_iter):
    """Orthogonal iteration Q <- orth(A Q) until sin(angle(Q_old, Q_new)) <= tol, then the
    Rayleigh-Ritz pairs of A on span(Q)."""
    placement = linalg.operator_placement(A)
    xp = placement.xp
    with linalg.small_steps(placement):
        Q = linalg.start_block(A.shape[0], k, rng, placement)
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        Z = linalg.matmat(A, Q)
        with linalg.small_steps(placement):
            Q_new = linalg.qr(Z)
            # sin of the largest principal angle = ||(I - Q Q^T) Q_new||_2
            change = float(xp.linalg.matrix_norm(Q_new - Q @ (Q.T @ Q_new), ord=2))
        Q = Q_new
        if change <= tol:
            break
    else:
        warn_not_converged("orthogonal", max_iter, f"subspace change {change:.2g} > tol {tol:.2g}")
    AQ = linalg.matmat(A, Q)
    theta, W = linalg.eigh(Q.T @ AQ)
    return theta, Q @ W, it


def auto_method(n: int, k: int, *, dense: bool, placement: Placement = HOST) -> str:
    """The solver ``method="auto"`` takes for k eigenpairs of an n x n matrix (``dense=True``)
    or operator on ``placement``: ``dense`` where
    :func:`fastkpca.execution.linalg.prefer_dense` prefers it, else ``randomized``."""
    preferred = linalg.prefer_dense(n, k, explicit=dense, placement=placement)
    return "dense" if preferred else "randomized"


def _check_arguments(A, k, method):
    if method not in SOLVERS:
        raise ValueError(f"unknown eigen_solver {method!r}; choose one of {SOLVERS}")
    n = A.shape[0]
    if tuple(A.shape) != (n, n):
        raise ValueError(f"A must be square, got shape {tuple(A.shape)}")
    if not 1 <= k <= n:
        raise ValueError(f"number of eigenpairs k={k} must be in [1, {n}]")


def eigh_topk(
    A,
    k,
    *,
    method="auto",
    rng=None,
    tol=None,
    max_iter=None,
    oversamples=10,
    overwrite=False,
    return_n_iter=False,
    scale=None,
    eps=None,
):
    """The k largest eigenpairs of a symmetric PSD matrix or operator.

    Parameters
    ----------
    A : array, sparse matrix or operator, shape (n, n)
        Symmetric, on the host or of another namespace (or an operator with a ``placement`` and
        ``matmat``).  float32 arrays are multiplied in float32, all else in float64.
    k : int
        Number of eigenpairs, ``1 <= k <= n``.
    method : {"auto", "dense", "lanczos", "randomized", "orthogonal"}
        ``auto``: :func:`auto_method`.  ``dense`` replaces every method when ``k >= n - 1``.
    rng : numpy.random.Generator or seed
        Start vectors; the same seed gives the same result on every namespace.
    tol : float, optional
        Relative residual ``||A v - lambda v|| / lambda_1`` (``randomized``), ARPACK's ``tol``
        (``lanczos``) or subspace change (``orthogonal``); None: :data:`TOLERANCES`.
    max_iter : int, optional
        Iteration cap; reaching it gives a ``ConvergenceWarning`` and the best approximation.
    oversamples : int
        Extra vectors of the randomized block.
    overwrite : bool
        Allow ``dense`` to destroy A.
    return_n_iter : bool
        Also return the work: 1 (dense), matrix-vector products (lanczos) or block iterations.
    scale : float, optional
        The uncentered Gram's trace, for the rounding threshold of :func:`postprocess_eigen`
        (None: A's trace for an array, unknown for an operator).
    eps : float, optional
        Unit roundoff of A's computation (None: A's dtype's).

    Every output is checked, and a failing method falls back (``syevr`` to ``syev``, ``lanczos``
    to ``randomized``, iterative methods on an array to ``dense``); non-finite A is a
    :class:`NonFiniteError` (ValueError).

    Returns
    -------
    eigenvalues : (k,) float64, descending, >= 0
    eigenvectors : (n, k) float64, orthonormal columns with deterministic signs
    n_iter : int, only if ``return_n_iter``
    """
    _check_arguments(A, k, method)
    dtype = linalg.dtype_of(A)
    low_precision = dtype == np.float32 and not isinstance(A, LinearOperator)
    if eps is None:
        eps = float(np.finfo(np.float32 if low_precision else np.float64).eps)
    if scale is None and linalg.is_explicit(A):
        xp = linalg.operator_placement(A).xp
        # before a dense solver overwrites A
        scale = float(xp.sum(xp.astype(xp.linalg.diagonal(A), xp.float64)))
    vals, vecs, n_iter = solve_topk(
        A,
        k,
        method=method,
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        oversamples=oversamples,
        overwrite=overwrite,
    )
    return_values = postprocess_eigen(vals, vecs, scale=scale, eps=eps)
    return (*return_values, n_iter) if return_n_iter else return_values


def solve_topk(
    A, k, *, method="auto", rng=None, tol=None, max_iter=None, oversamples=10, overwrite=False
):
    """:func:`eigh_topk` without its post-processing, for a caller that inspects the raw
    eigenvalues before :func:`postprocess_eigen` clips negatives (:class:`fastkpca.KernelPCA`'s
    PSD check).  The parameters are :func:`eigh_topk`'s.

    Returns
    -------
    eigenvalues : (k,), in no particular order, of A's namespace
    eigenvectors : (n, k), the matching columns
    n_iter : int, as :func:`eigh_topk` counts it
    """
    _check_arguments(A, k, method)
    n = A.shape[0]
    rng = as_generator(rng, name="rng")
    dtype = linalg.dtype_of(A)
    tols = TOLERANCES.get(dtype, TOLERANCES[np.dtype(np.float64)])
    placement = linalg.operator_placement(A)
    explicit = linalg.is_explicit(A)
    if method == "auto":
        method = auto_method(n, k, dense=explicit, placement=placement)
    if method != "dense" and k >= n - 1:
        # ARPACK refuses k >= n, and an iteration on k >= n - 1 vectors of an n-dimensional
        # space costs about n products anyway: form the n x n matrix with n products and solve
        # it densely (exact; this is the one-row / two-row / tiny-matrix case).
        if not explicit:
            xp = placement.xp
            A = linalg.matmat(A, xp.eye(n, dtype=xp.float64, device=placement.device))
            A = (A + A.T) / 2
            overwrite = explicit = True
        method = "dense"
    if method == "dense":
        vals, vecs = linalg.dense_topk(A, k, overwrite=overwrite)
        return vals, vecs, 1
    try:
        vals, vecs, n_iter = _iterative(A, k, method, rng, tol, max_iter, oversamples, tols)
    except la.LinAlgError as err:  # a small dense step (QR, eigh) met a broken basis
        if not explicit:
            raise ValueError(f"eigen_solver={method!r} failed on this operator ({err})") from None
        vals, vecs, n_iter = None, None, 0
    if vals is None or tuple(vals.shape) != (k,) or not linalg.all_finite(vals, vecs):
        if not explicit:
            raise NonFiniteError(
                f"eigen_solver={method!r} gave non-finite eigenpairs on this operator"
            )
        vals, vecs = linalg.dense_topk(A, k, overwrite=overwrite)  # the iterations read A only
        n_iter += 1
    return vals, vecs, n_iter


def _iterative(A, k, method, rng, tol, max_iter, oversamples, tols):
    """``lanczos``, ``randomized`` or ``orthogonal`` on A (see :func:`eigh_topk`)."""
    iterative_tol = tols["iterative"] if tol is None else tol
    if method == "lanczos":

        def krylov(arpack_tol, warn):
            krylov_tol = iterative_tol if arpack_tol is None else arpack_tol
            return _randomized(A, k, rng, krylov_tol, max_iter or 500, oversamples, warn=warn)

        lanczos_tol = tols["lanczos"] if tol is None else tol
        return linalg.lanczos(A, k, rng, lanczos_tol, max_iter, krylov=krylov)
    A = linalg.as_operator(A)
    if method == "randomized":
        return _randomized(A, k, rng, iterative_tol, max_iter or 500, oversamples)
    return _orthogonal(A, k, rng, iterative_tol, max_iter or 1000)
