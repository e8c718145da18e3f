"""Top-k eigensolvers for symmetric positive semi-definite operators.

One entry point, :func:`eigh_topk`, serves a dense Gram, a float32 Gram, a sparsified (CSR)
Gram, an implicitly centered Gram and any ``scipy.sparse.linalg.LinearOperator``:

``dense``
    ``scipy.linalg.eigh(..., subset_by_index=...)`` (LAPACK ``syevr``), overwriting the input when
    allowed so an n x n Gram is never copied.
``lanczos``
    ARPACK ``eigsh`` (implicitly restarted Lanczos) with a start vector drawn from ``rng``, to a
    relative Ritz residual of 1e-10 (float64) by default: scikit-learn's ``tol=0`` (machine
    precision) costs about a third more products for digits beyond 1e-9 on the embedding.
``randomized``
    Randomized block Krylov iteration (Musco & Musco 2015) with ``k + oversamples`` vectors per
    block, Rayleigh-Ritz on the whole Krylov basis and thick restarts; it stops when the Ritz
    residuals of the top k pairs fall below ``tol``.  One pass over the operator per *block* of
    vectors, where Lanczos makes one per vector, and about ten times fewer passes than subspace
    iteration on a flat spectrum: the reason it wins on a large dense Gram.
``orthogonal``
    Orthogonal (subspace) iteration with exactly k vectors, as in Achlioptas, McSherry &
    Schoelkopf (2001, section 3), stopping when the subspace changes by less than ``tol``
    (sine of the largest principal angle between successive iterates).

All methods return eigenvalues in descending order and eigenvectors post-processed by
:func:`postprocess_eigen` (tiny negatives clipped, deterministic signs).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.sparse.linalg import (
    ArpackError,
    ArpackNoConvergence,
    LinearOperator,
    aslinearoperator,
    eigsh,
)
from sklearn.exceptions import ConvergenceWarning

from ._utils import as_generator
from .execution import one_blas_thread

__all__ = ["eigh_topk", "auto_method", "postprocess_eigen", "flip_signs", "SOLVERS", "TOLERANCES"]

SOLVERS = ("auto", "dense", "lanczos", "randomized", "orthogonal")

#: Default convergence tolerances per working precision (the Falkon ``options.py`` idea).
#: ``lanczos`` is ARPACK's relative Ritz residual: 1e-10 bounds eigenvector errors by 1e-6 down
#: to relative gaps of 1e-4; float32 products are only good to ~1e-7, so tighter buys nothing.
TOLERANCES = {
    np.dtype(np.float64): {"iterative": 1e-8, "lanczos": 1e-10},
    np.dtype(np.float32): {"iterative": 1e-5, "lanczos": 1e-7},
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


#: Eigenvalues at most ``ROUNDING_FACTOR * eps * scale`` are rounding, and are reported as exactly
#: 0 (:func:`postprocess_eigen`).  ``scale`` is the trace of the *uncentered* PSD Gram the
#: eigenproblem comes from (``sum_i k(x_i, x_i)``; for a feature covariance ``sum_i |z_i|^2``) and
#: eps the unit roundoff of its computation.  Why that bound: the computed eigenvalues are exact
#: for a perturbed matrix ``A + E`` and move by at most ``||E||_2 <= ||E||_F`` (Weyl).  Each
#: centered entry ``K_ij - r_i - r_j + m`` is four rounded terms (the kernel value, the two row
#: means, summed in blocks, and the total mean), so with a few roundings per term ``||E||_F <= 4 c
#: eps ||K||_F``, and ``||K||_F <= tr(K)`` for a PSD K (sqrt(sum lambda^2) <= sum lambda); a
#: backward-stable solver adds ``eps ||A||_2 <= eps tr(K)`` times a small constant.  16 covers
#: ``4 c`` with c = 4 roundings per term.  The largest eigenvalue cannot be the reference: when
#: the centered Gram is exactly 0 (identical rows) it is itself rounding (measured 0.3
#: ``eps tr(K)`` for 20 identical rows, where a ratio rule keeps it).  Eigenvalues below this
#: have no correct digit in any floating-point evaluation of the Gram, so 0 loses nothing.
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

    The one post-processing of every eigensolver's output.  A PSD operator has no negative
    eigenvalues, so negatives are rounding and become 0; so do positives at most
    :func:`rounding_threshold` ``(scale, eps)`` (see :data:`ROUNDING_FACTOR`), which would
    otherwise be reported as structure and blow up when a transform divides by their square
    root.  The threshold is relative to the scale of the kernel, not to the largest eigenvalue,
    which for a zero centered Gram (identical rows) is itself rounding.

    Parameters
    ----------
    values : (k,) array
    vectors : (n, k) array
    scale : float or None
        The trace of the uncentered Gram (``sum_i k(x_i, x_i)``, or ``sum_i |z_i|^2`` for a
        feature covariance); None (unknown): only negative values are zeroed.
    eps : float or None
        Unit roundoff of the computation of the matrix (None: float64's).
    """
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values)[::-1]
    values = values[order]
    vectors = np.array(vectors[:, order], dtype=np.float64)
    values = np.where(values <= rounding_threshold(scale, eps), 0.0, values)
    flip_signs(vectors)
    return values, vectors


def _is_dense(A) -> bool:
    return isinstance(A, np.ndarray)


#: Rows per GEMM call of a block product with a dense matrix (see :func:`_matmat`).
MATMAT_BLOCK_ROWS = 512


def _matmat(A, V, low_precision):
    """``A @ V`` in float64 (a float32 A is multiplied in float32, without a float64 copy).

    A dense A times a block V is computed in row blocks of :data:`MATMAT_BLOCK_ROWS`: OpenBLAS
    runs a tall 20000 x 20000 by 20 product a third slower in one call than in 512-row pieces
    (0.41 s against 0.27 s on two cores; 30-35% for 10 to 30 columns, float32 and float64).
    """
    if low_precision:
        V = V.astype(np.float32)
    if _is_dense(A) and V.ndim == 2 and A.shape[0] > MATMAT_BLOCK_ROWS:
        out = np.empty((A.shape[0], V.shape[1]), dtype=np.result_type(A.dtype, V.dtype))
        for start in range(0, A.shape[0], MATMAT_BLOCK_ROWS):
            stop = start + MATMAT_BLOCK_ROWS
            np.matmul(A[start:stop], V, out=out[start:stop])
    else:
        out = A @ V
    if sp.issparse(out):
        out = out.toarray()
    out = np.asarray(out, dtype=np.float64)
    if not np.isfinite(out).all():  # O(n b), next to the product's O(n^2 b) or O(nnz b)
        raise NonFiniteError(
            "the matrix to decompose has NaN or infinite entries (its products are not finite): "
            "the kernel values or features overflowed; check the data's scale and the kernel "
            "parameters (gamma)"
        )
    return out


class NonFiniteError(ValueError):
    """The matrix or operator handed to an eigensolver is not finite (a ``ValueError``)."""


def _dense(A, k, overwrite):
    """The top k eigenpairs of a dense symmetric A by LAPACK, ascending; never fewer than k.

    ``syevr`` for the index range first (``O(n^2 k)`` after the tridiagonal reduction).  For
    an index subset it finds the eigenvectors by inverse iteration (``stebz`` + ``stein``),
    which can fail on a tight cluster of eigenvalues: it returned no eigenpair at all for the
    centered Gram of rows far apart next to the bandwidth (K = I: the eigenvalue 1, n - 1
    times), and raised "Internal Error" for that of identical rows (all eigenvalues rounding).
    Then the whole spectrum comes from ``syev`` (implicit QR on the tridiagonal matrix, no
    inverse iteration: it does not fail on clusters, and works in place).  An overwritten A is
    restored for it first: LAPACK destroys only the triangle it reads, the diagonal included,
    and the other triangle still holds the symmetric matrix.
    """
    n = A.shape[0]
    if not _is_dense(A):
        raise ValueError("eigen_solver='dense' needs an explicit array, not an operator")
    # LAPACK wants Fortran order; A is symmetric, so its transpose is the same matrix as a
    # Fortran-ordered view, and no n x n copy is made.
    A_f = A.T if A.flags.c_contiguous and not A.flags.f_contiguous else A
    diagonal = np.diagonal(A_f).copy() if overwrite else None
    try:
        vals, vecs = la.eigh(
            A_f,
            subset_by_index=[n - k, n - 1],
            overwrite_a=overwrite,
            check_finite=False,
            driver="evr",
        )
        if vals.shape == (k,) and np.isfinite(vals).all() and np.isfinite(vecs).all():
            return vals, vecs
    except la.LinAlgError:
        pass
    if overwrite:
        _restore_lower_triangle(A_f, diagonal)
    try:
        vals, vecs = la.eigh(A_f, overwrite_a=overwrite, check_finite=False, driver="ev")
    except la.LinAlgError as err:
        if not np.isfinite(A_f).all():  # only on this path: an n x n check
            raise NonFiniteError(
                "the matrix to decompose has NaN or infinite entries: the kernel values "
                "overflowed; check the data's scale and the kernel parameters (gamma)"
            ) from None
        raise ValueError(f"the dense eigensolver failed on this matrix ({err})") from None
    if not (np.isfinite(vals).all() and np.isfinite(vecs).all()):
        raise NonFiniteError(
            "the matrix to decompose has NaN or infinite entries: the kernel values overflowed; "
            "check the data's scale and the kernel parameters (gamma)"
        )
    return vals[n - k :], np.array(vecs[:, n - k :])


def _restore_lower_triangle(A_f, diagonal, tile=256):
    """Rebuild the lower triangle and diagonal of a Fortran-ordered symmetric matrix in place
    from its strict upper triangle and the saved diagonal (tile by tile: the reads stay in
    cache)."""
    n = A_f.shape[0]
    for s in range(0, n, tile):
        e = min(n, s + tile)
        A_f[e:, s:e] = A_f[s:e, e:].T
        block = A_f[s:e, s:e]
        block[...] = np.triu(block, 1) + np.triu(block, 1).T
    np.fill_diagonal(A_f, diagonal)


def _lanczos(A, k, rng, tol, max_iter):
    n = A.shape[0]
    if k >= n:
        raise ValueError(
            f"eigen_solver='lanczos' needs n_components < n ({k} >= {n}); use eigen_solver='dense'"
        )
    v0 = rng.uniform(-1.0, 1.0, n)
    low_precision = getattr(A, "dtype", None) == np.float32 and not isinstance(A, LinearOperator)
    n_products = 0

    def matvec(v):
        # A float32 matrix is multiplied in float32 (no float64 copy); ARPACK runs in float64.
        nonlocal n_products
        n_products += 1
        return _matmat(A, v, low_precision)

    op = LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
    try:
        vals, vecs = eigsh(op, k=k, which="LA", v0=v0, tol=tol, maxiter=max_iter)
    except ArpackNoConvergence:
        _warn_not_converged("lanczos", max_iter, "fewer than k Ritz pairs met tol")
        # ARPACK hands back only the pairs that converged; the block Krylov solver always has k
        # Ritz pairs, so it gives the best approximation for the same number of iterations.
        vals, vecs, it = _randomized(A, k, rng, tol, max_iter or 500, 10, low_precision, warn=False)
        return vals, vecs, n_products + it
    except ArpackError as err:
        if "error -9:" in str(err):
            # -9 "starting vector is zero": A v0 = 0 for a random v0, which happens (almost
            # surely) only for A = 0: the eigenvalues are exactly 0, any orthonormal k vectors
            # eigenvectors.
            vecs, _ = la.qr(rng.standard_normal((n, k)), mode="economic")
            return np.zeros(k), vecs, n_products
        # Any other ARPACK failure (e.g. -9999, no Arnoldi factorization could be built): the
        # block Krylov solver needs no factorization of that kind and always has k Ritz pairs.
        vals, vecs, it = _randomized(A, k, rng, tol, max_iter or 500, 10, low_precision, warn=True)
        return vals, vecs, n_products + it
    if vals.shape != (k,) or not _residuals_ok(A, vals, vecs, tol, low_precision):
        vals, vecs, it = _randomized(A, k, rng, tol, max_iter or 500, 10, low_precision, warn=True)
        return vals, vecs, n_products + k + it
    return vals, vecs, n_products + k  # the residual check is k more products


#: ``lanczos`` results are accepted when each Ritz residual ``||A v - theta v||`` is at most
#: ``RESIDUAL_SLACK`` times ARPACK's own criterion ``tol |theta|``, or at most
#: ``RESIDUAL_FLOOR`` times the largest Ritz value: ARPACK's residual estimates are those of the
#: Lanczos recurrence, and the check recomputes them to catch pairs that are no eigenpairs at
#: all, not to hold an operator to more digits than its products have (a float32 product, as
#: in the sparsified Gram's, leaves ~1e-7 relative, above a float64 tol of 1e-10).
RESIDUAL_SLACK = 1e3
RESIDUAL_FLOOR = 1e-4


def _residuals_ok(A, vals, vecs, tol, low_precision) -> bool:
    """Whether every Ritz pair's residual is within :data:`RESIDUAL_SLACK` / :data:`RESIDUAL_FLOOR`:
    one block product, next to the O(k) to O(100 k) products of the Lanczos run."""
    AV = _matmat(A, vecs, low_precision)
    residuals = np.linalg.norm(AV - vecs * vals, axis=0)
    top = float(np.max(np.abs(vals), initial=0.0))
    allowed = np.maximum(RESIDUAL_SLACK * tol * np.abs(vals), RESIDUAL_FLOOR * top)
    return bool(np.all(residuals <= allowed))


def _warn_not_converged(method, max_iter, why):
    warnings.warn(
        f"eigen_solver={method!r} stopped at max_iter={max_iter} before converging ({why}); "
        "the eigenpairs are approximate: raise max_iter or tol",
        ConvergenceWarning,
        stacklevel=4,
    )


def _ritz(A, Q, low_precision):
    AQ = _matmat(A, Q, low_precision)
    B = Q.T @ AQ
    B = (B + B.T) / 2
    vals, W = la.eigh(B)
    return vals[::-1], Q @ W[:, ::-1], AQ @ W[:, ::-1]


#: Largest Krylov basis of the ``randomized`` solver, in blocks (before a thick restart), and the
#: memory (MiB) that V and A V may take together; the basis never gets smaller than k + 2 blocks.
KRYLOV_MAX_BLOCKS = 6
KRYLOV_MEMORY_MB = 512
#: ``randomized`` stops after this many iterations without a 10% drop of the residual.
STALL_ITERATIONS = 5


def _orth_against(V, Z, drop_tol):
    """Orthonormal basis of ``(I - V V^T) Z``, dropping directions already in span(V).

    Classical Gram-Schmidt twice ("twice is enough", Giraud et al. 2005) then a pivoted QR, whose
    diagonal reveals the directions that are numerically in span(V) (an invariant subspace was
    found) so that they can be dropped instead of amplified into noise.
    """
    for _ in range(2):
        Z -= V @ (V.T @ Z)
    Q, R, _ = la.qr(Z, mode="economic", pivoting=True)
    rank = int(np.sum(np.abs(np.diag(R)) > drop_tol))
    Q = Q[:, :rank]
    Q -= V @ (V.T @ Q)  # the QR of a nearly rank-deficient Z can reintroduce span(V)
    Q, _ = la.qr(Q, mode="economic")
    return Q


def _randomized(A, k, rng, tol, max_iter, oversamples, low_precision, *, warn=True):
    """Randomized block Krylov iteration with Rayleigh-Ritz and thick restarts.

    Musco & Musco (2015, "Randomized block Krylov methods for stronger and faster approximate
    singular value decomposition", Algorithm 2): the Rayleigh-Ritz projection of A on the Krylov
    space ``[Q, A Q, A^2 Q, ...]`` of a random block Q of ``b = k + oversamples`` vectors.
    Each iteration is one block product ``A Q`` (one pass over A for b vectors).  The passes
    needed grow like ``1 / sqrt(gap)`` with the relative gap ``(lambda_k - lambda_{b+1}) /
    lambda_k`` (the Krylov space contains the Chebyshev polynomials of A), instead of
    ``1 / gap`` for subspace iteration (Halko et al. 2011, Algorithm 4.4): on a flat kernel
    spectrum that cuts the passes about tenfold (8 instead of 69 on RandomNoisy, n = 5000).

    The basis V and its image ``A V`` are kept (2 n x m floats), so the residuals
    ``||A u_i - theta_i u_i||`` of the Ritz pairs cost no extra pass; the iteration stops when the
    top k are below ``tol * theta_1``.  When the basis would exceed ``KRYLOV_MAX_BLOCKS`` blocks
    it is compressed to its leading Ritz vectors (a thick restart, as in Wu & Simon's restarted
    Lanczos); the next block ``(I - V V^T) A Q`` is unchanged by that, so no pass is lost.
    """
    n = A.shape[0]
    b = min(n, k + oversamples)
    fits = int(KRYLOV_MEMORY_MB * 2**20 // (16 * n))
    max_basis = min(n, max(min(KRYLOV_MAX_BLOCKS * b, fits), k + 2 * b))
    V = np.empty((n, max_basis), order="F")  # column slices of Fortran arrays are contiguous
    AV = np.empty((n, max_basis), order="F")
    H = np.zeros((max_basis, max_basis))  # V^T A V
    with one_blas_thread():
        Q, _ = la.qr(rng.standard_normal((n, b)), mode="economic")
    m = 0
    best, stalled = np.inf, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        W = _matmat(A, Q, low_precision)  # the pass over A
        with one_blas_thread():
            p = Q.shape[1]
            V[:, m : m + p] = Q
            AV[:, m : m + p] = W
            # A symmetric: the new row block of V^T A V is the transpose of the new column block.
            C = V[:, : m + p].T @ W
            H[: m + p, m : m + p] = C
            H[m : m + p, : m + p] = C.T
            m += p
            theta, Y = la.eigh((H[:m, :m] + H[:m, :m].T) / 2)
            theta, Y = theta[::-1], Y[:, ::-1]
            top = max(abs(theta[0]), np.finfo(float).tiny)
            Yk = Y[:, :k]
            R = AV[:, :m] @ Yk - V[:, :m] @ (Yk * theta[:k])
            res = np.max(np.linalg.norm(R, axis=0)) / top
            # Stagnation: the residual has hit the rounding floor of the products (about 1e-7
            # for a float32 Gram), below which a too small tol would spin until max_iter.
            best, stalled = (res, 0) if res < 0.9 * best else (best, stalled + 1)
            if m >= n or res <= tol:
                break
            if stalled >= STALL_ITERATIONS:
                if warn:
                    # Reported, not silent: the eigenpairs are only as good as this residual
                    # (a flat stretch of a slow convergence looks the same as the floor).
                    warnings.warn(
                        f"eigen_solver='randomized' stopped after {it} iterations without "
                        f"progress at residual {res:.2g} > tol {tol:.2g} (the rounding floor "
                        "of the products, or a stall): the eigenpairs are approximate to that "
                        "residual; raise tol, or use float64",
                        ConvergenceWarning,
                        stacklevel=3,
                    )
                break
            if it == max_iter:
                if warn:
                    _warn_not_converged(
                        "randomized", max_iter, f"residual {res:.2g} > tol {tol:.2g}"
                    )
                break
            Q = _orth_against(V[:, :m], W.copy(), drop_tol=1e-12 * top)
            if Q.shape[1] == 0:  # span(V) is invariant under A: the Ritz pairs are exact
                break
            if m + Q.shape[1] > max_basis:
                # Thick restart: keep the leading Ritz vectors, on which A V and V^T A V are
                # known.
                keep = max_basis - Q.shape[1]
                V[:, :keep] = V[:, :m] @ Y[:, :keep]
                AV[:, :keep] = AV[:, :m] @ Y[:, :keep]
                H[:] = 0.0
                H[:keep, :keep] = np.diag(theta[:keep])
                m = keep
    return theta[:k], V[:, :m] @ Yk, it


def _orthogonal(A, k, rng, tol, max_iter, low_precision):
    """Orthogonal iteration Q <- orth(A Q) until sin(angle(Q_old, Q_new)) <= tol."""
    n = A.shape[0]
    with one_blas_thread():
        Q, _ = la.qr(rng.standard_normal((n, k)), mode="economic")
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        Z = _matmat(A, Q, low_precision)
        with one_blas_thread():
            Q_new, _ = la.qr(Z, mode="economic")
            # sin of the largest principal angle = ||(I - Q Q^T) Q_new||_2
            change = np.linalg.norm(Q_new - Q @ (Q.T @ Q_new), 2)
        Q = Q_new
        if change <= tol:
            break
    else:
        _warn_not_converged("orthogonal", max_iter, f"subspace change {change:.2g} > tol {tol:.2g}")
    vals, vecs, _ = _ritz(A, Q, low_precision)
    return vals, vecs, it


def auto_method(n: int, k: int, *, dense: bool) -> str:
    """The solver ``method="auto"`` takes for k eigenpairs of an n x n matrix or operator.

    ``dense`` for an array (``dense=True``) with n <= 1000 or k >= n / 5, else ``randomized``.
    """
    return "dense" if dense and (n <= 1000 or k >= n // 5) else "randomized"


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
    A : ndarray, sparse matrix or LinearOperator, shape (n, n)
        Symmetric; float32 arrays are multiplied in float32, all else in float64.
    k : int
        Number of eigenpairs, ``1 <= k <= n``.
    method : {"auto", "dense", "lanczos", "randomized", "orthogonal"}
        ``auto`` picks ``dense`` for small n or large k / n, else ``randomized``.  Every method
        is replaced by ``dense`` when ``k >= n - 1`` (an operator is then formed with n
        products); a zero operator gives eigenvalues exactly 0.
    rng : numpy.random.Generator or seed
        Start vectors; the same seed gives the same result.
    tol : float, optional
        Stopping tolerance: relative residual ``||A v - lambda v|| / lambda_1`` for
        ``randomized``, ARPACK's ``tol`` for ``lanczos`` (0 = machine precision), subspace change
        for ``orthogonal``.  None takes the per-dtype default from :data:`TOLERANCES`.
    max_iter : int, optional
        Iteration cap for the iterative methods; stopping there before ``tol`` is met gives a
        ``sklearn.exceptions.ConvergenceWarning`` (and the best approximation found).
    oversamples : int
        Extra vectors of the randomized block (block size ``k + oversamples``).
    overwrite : bool
        Allow ``dense`` to destroy A (saves one n x n copy).
    return_n_iter : bool
        Also return the work done: 1 for ``dense``, the number of matrix-vector products for
        ``lanczos``, the number of block iterations (passes over A) for the others.
    scale : float, optional
        The scale of the kernel behind A for the rounding threshold of
        :func:`postprocess_eigen`: the trace of the *uncentered* Gram (``sum_i k(x_i, x_i)``).
        None: the trace of A for an array (right for an uncentered PSD matrix; a centered Gram's
        own trace is not a scale: 0 when its rows are identical), unknown for an operator.
    eps : float, optional
        Unit roundoff of A's computation (None: that of A's dtype; float64 for an operator).

    Every method's output is checked: k eigenpairs, all finite, and for ``lanczos`` the Ritz
    residuals, recomputed with one block product.  A method that fails falls back: ``dense``
    (LAPACK ``syevr``) to ``syev`` on the whole spectrum (:func:`_dense`), ``lanczos`` (any
    ARPACK error, or residuals far above its tol) to ``randomized``, the iterative methods on
    an array to ``dense``.  An A with NaN or infinite entries gives a ``ValueError``
    (:class:`NonFiniteError`); no ``ArpackError`` or ``LinAlgError`` reaches the caller.

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
    rng = as_generator(rng, name="rng")
    dtype = np.dtype(getattr(A, "dtype", np.float64))
    low_precision = dtype == np.float32 and not isinstance(A, LinearOperator)
    tols = TOLERANCES.get(dtype, TOLERANCES[np.dtype(np.float64)])
    if eps is None:
        eps = float(np.finfo(np.float32 if low_precision else np.float64).eps)
    if scale is None and _is_dense(A):
        scale = float(np.trace(A, dtype=np.float64))  # before a dense solver overwrites A
    if method == "auto":
        method = auto_method(n, k, dense=_is_dense(A))
    if method != "dense" and k >= n - 1:
        # ARPACK refuses k >= n, and an iteration on k >= n - 1 vectors of an n-dimensional
        # space costs about n products anyway: form the n x n matrix with n products and solve
        # it densely (exact; this is the one-row / two-row / tiny-matrix case).
        if not _is_dense(A):
            A = _matmat(A, np.eye(n), low_precision)
            A = (A + A.T) / 2
            overwrite = True
        method = "dense"
    if method == "dense":
        vals, vecs = _dense(A, k, overwrite)
        n_iter = 1
    else:
        try:
            vals, vecs, n_iter = _iterative(A, k, method, rng, tol, max_iter, oversamples, tols)
        except la.LinAlgError as err:  # a small dense step (QR, eigh) met a broken basis
            if not _is_dense(A):
                raise ValueError(
                    f"eigen_solver={method!r} failed on this operator ({err})"
                ) from None
            vals, vecs, n_iter = None, None, 0
        if vals is None or vals.shape != (k,) or not _finite(vals, vecs):
            if not _is_dense(A):
                raise NonFiniteError(
                    f"eigen_solver={method!r} gave non-finite eigenpairs on this operator"
                )
            vals, vecs = _dense(A, k, overwrite)  # an array is intact: the iterations read it
            n_iter += 1
    return_values = postprocess_eigen(vals, vecs, scale=scale, eps=eps)
    return (*return_values, n_iter) if return_n_iter else return_values


def _finite(vals, vecs) -> bool:
    return bool(np.isfinite(vals).all() and np.isfinite(vecs).all())


def _iterative(A, k, method, rng, tol, max_iter, oversamples, tols):
    """``lanczos``, ``randomized`` or ``orthogonal`` on A (see :func:`eigh_topk`)."""
    low_precision = getattr(A, "dtype", None) == np.float32 and not isinstance(A, LinearOperator)
    if method == "lanczos":
        return _lanczos(A, k, rng, tols["lanczos"] if tol is None else tol, max_iter)
    if not (_is_dense(A) or sp.issparse(A)):
        A = aslinearoperator(A)
    tol = tols["iterative"] if tol is None else tol
    if method == "randomized":
        return _randomized(A, k, rng, tol, max_iter or 500, oversamples, low_precision)
    return _orthogonal(A, k, rng, tol, max_iter or 1000, low_precision)
