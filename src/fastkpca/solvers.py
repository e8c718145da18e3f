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

import functools
import threading
import warnings
from contextlib import contextmanager

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

__all__ = ["eigh_topk", "auto_method", "postprocess_eigen", "flip_signs", "SOLVERS", "TOLERANCES"]

SOLVERS = ("auto", "dense", "lanczos", "randomized", "orthogonal")

#: Default convergence tolerances per working precision (the Falkon ``options.py`` idea).
#: ``lanczos`` is ARPACK's relative Ritz residual: 1e-10 bounds eigenvector errors by 1e-6 down
#: to relative gaps of 1e-4; float32 products are only good to ~1e-7, so tighter buys nothing.
TOLERANCES = {
    np.dtype(np.float64): {"iterative": 1e-8, "lanczos": 1e-10, "clip": 1e-12},
    np.dtype(np.float32): {"iterative": 1e-5, "lanczos": 1e-7, "clip": 2e-7},
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
    return np.asarray(out, dtype=np.float64)


def _dense(A, k, overwrite):
    n = A.shape[0]
    if not _is_dense(A):
        raise ValueError("eigen_solver='dense' needs an explicit array, not an operator")
    # LAPACK wants Fortran order; A is symmetric, so its transpose is the same matrix as a
    # Fortran-ordered view, and no n x n copy is made.
    A_f = A.T if A.flags.c_contiguous and not A.flags.f_contiguous else A
    vals, vecs = la.eigh(
        A_f, subset_by_index=[n - k, n - 1], overwrite_a=overwrite, check_finite=False, driver="evr"
    )
    return vals, vecs


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
        if "error -9:" not in str(err):
            raise
        # -9 "starting vector is zero": A v0 = 0 for a random v0, which happens (almost surely)
        # only for A = 0: the eigenvalues are exactly 0, any orthonormal k vectors eigenvectors.
        vecs, _ = la.qr(rng.standard_normal((n, k)), mode="economic")
        return np.zeros(k), vecs, n_products
    return vals, vecs, n_products


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


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # a scikit-learn dependency

    return ThreadpoolController()


_BLAS_LIMIT_LOCK = threading.Lock()
_BLAS_LIMIT: dict = {"depth": 0, "limiter": None}


@contextmanager
def one_blas_thread():
    """Context in which BLAS / LAPACK run on one thread.

    For the small steps of a block iteration (QR of n x b blocks, eigh of the m x m projected
    matrix): OpenBLAS's thread start-up and synchronisation cost more than they save at these
    sizes, ten times more on a loaded machine (measured: QR of 1500 x 20 in 0.35 ms on one
    thread, 3 ms on two).  The passes over A stay multi-threaded.

    The limit is process-wide, so it is shared: the first context to enter (in any thread) sets
    it and the last to leave restores the original, under a lock.  Threads that each hold one
    (dask worker threads running statistics, the sketch threads) neither serialise nor undo
    each other's limit.  threadpoolctl (>= 3.6) lets only one "controlling" thread change
    OpenBLAS's process-wide pool and silently ignores the others; a plain limit per thread
    was therefore void in dask worker threads once the main thread had set one (the FD shrinks
    ran with spinning BLAS threads, 3x slower), so control is released around each change.
    """
    with _BLAS_LIMIT_LOCK:
        if _BLAS_LIMIT["depth"] == 0:
            _release_blas_control()
            _BLAS_LIMIT["limiter"] = _blas_controller().limit(limits=1, user_api="blas")
            _release_blas_control()
        _BLAS_LIMIT["depth"] += 1
    try:
        yield
    finally:
        with _BLAS_LIMIT_LOCK:
            _BLAS_LIMIT["depth"] -= 1
            if _BLAS_LIMIT["depth"] == 0:
                _release_blas_control()
                _BLAS_LIMIT["limiter"].restore_original_limits()
                _release_blas_control()
                _BLAS_LIMIT["limiter"] = None


def _release_blas_control() -> None:
    """Let any thread change OpenBLAS's thread count next (threadpoolctl >= 3.6 gives that
    right to one controlling thread; older versions have no such notion)."""
    import threadpoolctl

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


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
    elif method == "lanczos":
        vals, vecs, n_iter = _lanczos(A, k, rng, tols["lanczos"] if tol is None else tol, max_iter)
    else:
        if not (_is_dense(A) or sp.issparse(A)):
            A = aslinearoperator(A)
        tol = tols["iterative"] if tol is None else tol
        if method == "randomized":
            vals, vecs, n_iter = _randomized(
                A, k, rng, tol, max_iter or 500, oversamples, low_precision
            )
        else:
            vals, vecs, n_iter = _orthogonal(A, k, rng, tol, max_iter or 1000, low_precision)
    vals, vecs = postprocess_eigen(vals, vecs, clip_ratio=tols["clip"])
    return (vals, vecs, n_iter) if return_n_iter else (vals, vecs)
