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

On a device (a PyTorch tensor or CuPy array, or an operator with a ``placement`` on one, such as
:class:`fastkpca.execution.kernel_ops.CenteredGramOperator`) the same methods run in the arrays'
namespace (:func:`_eigh_topk_xp`): ``dense`` is the library's full ``eigh``, ``randomized`` and
``orthogonal`` are the algorithms below written once in ``xp``, and ``lanczos`` (ARPACK, host only)
is block Krylov.  ``auto`` there follows :data:`DEVICE_AUTO_DENSE`.  Start blocks are drawn from
the host generator and moved, so a device and the host start from the same vectors.
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
from .execution.arrays import HOST, Placement, placement_of

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
                    _warn_stalled(it, res, tol)
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
    if tuple(A.shape) != (n, n):
        raise ValueError(f"A must be square, got shape {tuple(A.shape)}")
    if not 1 <= k <= n:
        raise ValueError(f"number of eigenpairs k={k} must be in [1, {n}]")
    rng = as_generator(rng, name="rng")
    placement = operator_placement(A)
    if not placement.host:
        vals, vecs, n_iter = _eigh_topk_xp(
            A, k, placement, method, rng, tol, max_iter, oversamples, scale, eps
        )
        return (vals, vecs, n_iter) if return_n_iter else (vals, vecs)
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


# --- on a device ----------------------------------------------------------------------------------
#: ``method="auto"`` on a device: ``dense`` (the library's full ``eigh``) for an explicit matrix
#: when ``n <= max_n`` or ``k >= min_fraction * n``, else block Krylov (``randomized``).  A full
#: dense eigh costs O(n^3) whatever k, block Krylov a few passes of O(n^2 (k + oversamples)):
#: measured on an H100, float64, n = 20000, k = 10: 6.8 s for the dense eigh against 0.12 s for
#: block Krylov.  Scaled by n^3, the dense eigh takes about 7 ms at n = 2000, which is what the
#: ten-odd passes of block Krylov cost there in kernel launches and synchronisations (its time
#: stops shrinking with n): the crossover, taken as ``max_n``.  ``min_fraction`` is the host's
#: k >= n / 5 (:func:`auto_method`), where the Krylov basis nears the whole space.  One table,
#: for a GPU benchmark to retune.
DEVICE_AUTO_DENSE = {"max_n": 2000, "min_fraction": 0.2}


def auto_method_device(n: int, k: int, *, dense: bool) -> str:
    """The solver ``method="auto"`` takes on a device (:data:`DEVICE_AUTO_DENSE`)."""
    small = n <= DEVICE_AUTO_DENSE["max_n"] or k >= DEVICE_AUTO_DENSE["min_fraction"] * n
    return "dense" if dense and small else "randomized"


def operator_placement(A) -> Placement:
    """Where A computes: a device array's placement, an operator's ``placement`` attribute, or
    the host (numpy, scipy.sparse, a LinearOperator)."""
    placement = getattr(A, "placement", None)
    if isinstance(placement, Placement):
        return placement
    if isinstance(A, np.ndarray) or sp.issparse(A) or isinstance(A, LinearOperator):
        return HOST
    return placement_of(A)


def _xp_is_dense(A) -> bool:
    return not hasattr(A, "matmat")


def _dtype_name(a) -> str:
    return str(a.dtype).rsplit(".", 1)[-1]


def _xp_matmat(A, V, xp):
    """``A @ V`` in float64 for a device matrix (a float32 one in float32) or operator, checked
    finite (one scalar read per pass)."""
    if _xp_is_dense(A):
        if _dtype_name(A) == "float32":
            out = xp.astype(A @ xp.astype(V, xp.float32), xp.float64)
        else:
            out = A @ V
    else:
        out = A.matmat(V)
        if _dtype_name(out) != "float64":
            out = xp.astype(out, xp.float64)
    if not bool(xp.all(xp.isfinite(out))):
        raise NonFiniteError(
            "the matrix to decompose has NaN or infinite entries (its products are not finite): "
            "the kernel values or features overflowed; check the data's scale and the kernel "
            "parameters (gamma)"
        )
    return out


def _xp_start_block(n, b, rng, placement):
    """An orthonormal n x b block from the host generator's normal draws (the host path's
    draws), moved to the device and orthonormalised there."""
    xp = placement.xp
    Q, _ = xp.linalg.qr(placement.asarray(rng.standard_normal((n, b)), dtype=np.float64))
    return Q


def _xp_eigh_small(H, xp):
    """Eigenpairs of a small symmetric matrix, descending."""
    vals, vecs = xp.linalg.eigh((H + xp.permute_dims(H, (1, 0))) / 2)
    return xp.flip(vals, axis=0), xp.flip(vecs, axis=1)


def _xp_orth_against(V, Z, drop_tol, xp):
    """Orthonormal basis of ``(I - V V^T) Z`` without the directions already in span(V): the
    host's :func:`_orth_against` with the pivoted QR (not in the array API) replaced by a QR and
    the SVD of its small R, whose singular values reveal the rank."""
    Vt = xp.permute_dims(V, (1, 0))
    for _ in range(2):
        Z = Z - V @ (Vt @ Z)
    Q, R = xp.linalg.qr(Z)
    U, sigma, _ = xp.linalg.svd(R)
    rank = int(xp.sum(xp.astype(sigma > drop_tol, xp.int64)))
    Q = Q @ U[:, :rank]
    Q = Q - V @ (Vt @ Q)
    Q, _ = xp.linalg.qr(Q)
    return Q


def _krylov_basis_columns(n, b, k, placement) -> int:
    """Largest Krylov basis of :func:`_xp_randomized`: :data:`KRYLOV_MAX_BLOCKS` blocks, within a
    quarter of the device's free memory (V and A V, float64) or :data:`KRYLOV_MEMORY_MB` where it
    has no free-memory query, and never below k + 2 blocks."""
    free = placement.free_memory_bytes()
    budget = KRYLOV_MEMORY_MB * 2**20 if free is None else free // 4
    fits = int(budget // (16 * n))
    return min(n, max(min(KRYLOV_MAX_BLOCKS * b, fits), k + 2 * b))


def _xp_randomized(A, k, rng, tol, max_iter, oversamples, placement, *, warn=True):
    """:func:`_randomized` (block Krylov, Rayleigh-Ritz, thick restarts) in the device's
    namespace: the same iteration, stopping rule and warnings; the small (basis-sized) Gram and
    eigenproblems on the device too."""
    xp = placement.xp
    n = A.shape[0]
    b = min(n, k + oversamples)
    max_basis = _krylov_basis_columns(n, b, k, placement)
    V = xp.zeros((n, max_basis), dtype=xp.float64, device=placement.device)
    AV = xp.zeros((n, max_basis), dtype=xp.float64, device=placement.device)
    H = xp.zeros((max_basis, max_basis), dtype=xp.float64, device=placement.device)
    Q = _xp_start_block(n, b, rng, placement)
    m = 0
    best, stalled = np.inf, 0
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        W = _xp_matmat(A, Q, xp)  # the pass over A
        p = Q.shape[1]
        V[:, m : m + p] = Q
        AV[:, m : m + p] = W
        C = xp.permute_dims(V[:, : m + p], (1, 0)) @ W
        H[: m + p, m : m + p] = C
        H[m : m + p, : m + p] = xp.permute_dims(C, (1, 0))
        m += p
        theta, Y = _xp_eigh_small(H[:m, :m], xp)
        top = max(abs(float(theta[0])), np.finfo(float).tiny)
        Yk = Y[:, :k]
        R = AV[:, :m] @ Yk - V[:, :m] @ (Yk * theta[:k])
        res = float(xp.max(xp.linalg.vector_norm(R, axis=0))) / top
        best, stalled = (res, 0) if res < 0.9 * best else (best, stalled + 1)
        if m >= n or res <= tol:
            break
        if stalled >= STALL_ITERATIONS:
            if warn:
                _warn_stalled(it, res, tol)
            break
        if it == max_iter:
            if warn:
                _warn_not_converged("randomized", max_iter, f"residual {res:.2g} > tol {tol:.2g}")
            break
        Q = _xp_orth_against(V[:, :m], W, 1e-12 * top, xp)
        if Q.shape[1] == 0:
            break
        if m + Q.shape[1] > max_basis:
            keep = max_basis - Q.shape[1]
            V[:, :keep] = V[:, :m] @ Y[:, :keep]
            AV[:, :keep] = AV[:, :m] @ Y[:, :keep]
            H[...] = 0.0
            eye = xp.eye(keep, dtype=xp.float64, device=placement.device)
            H[:keep, :keep] = eye * theta[:keep][None, :]
            m = keep
    return theta[:k], V[:, :m] @ Yk, it


def _xp_orthogonal(A, k, rng, tol, max_iter, placement):
    """:func:`_orthogonal` (subspace iteration, then Rayleigh-Ritz) in the device's namespace."""
    xp = placement.xp
    Q = _xp_start_block(A.shape[0], k, rng, placement)
    change = np.inf
    for it in range(1, max_iter + 1):  # noqa: B007 - it is returned
        Q_new, _ = xp.linalg.qr(_xp_matmat(A, Q, xp))
        # sin of the largest principal angle = ||(I - Q Q^T) Q_new||_2
        D = Q_new - Q @ (xp.permute_dims(Q, (1, 0)) @ Q_new)
        change = float(xp.linalg.matrix_norm(D, ord=2))
        Q = Q_new
        if change <= tol:
            break
    else:
        _warn_not_converged("orthogonal", max_iter, f"subspace change {change:.2g} > tol {tol:.2g}")
    AQ = _xp_matmat(A, Q, xp)
    theta, W = _xp_eigh_small(xp.permute_dims(Q, (1, 0)) @ AQ, xp)
    return theta, Q @ W, it


def _xp_dense(A, k, xp):
    """The top k eigenpairs of a device matrix by the library's full ``eigh`` (descending)."""
    if not _xp_is_dense(A):
        raise ValueError("eigen_solver='dense' needs an explicit array, not an operator")
    A64 = A if _dtype_name(A) == "float64" else xp.astype(A, xp.float64)
    if not bool(xp.all(xp.isfinite(A64))):
        raise NonFiniteError(
            "the matrix to decompose has NaN or infinite entries: the kernel values overflowed; "
            "check the data's scale and the kernel parameters (gamma)"
        )
    vals, vecs = xp.linalg.eigh(A64)
    n = A.shape[0]
    return xp.flip(vals[n - k :], axis=0), xp.flip(vecs[:, n - k :], axis=1)


def _eigh_topk_xp(A, k, placement, method, rng, tol, max_iter, oversamples, scale, eps):
    """:func:`eigh_topk` on a device matrix or operator (see the module notes)."""
    xp = placement.xp
    n = A.shape[0]
    dense = _xp_is_dense(A)
    # An operator's dtype (CenteredGramOperator's tiles) sets the tolerances as an array's does.
    dtype = np.dtype(_dtype_name(A)) if hasattr(A, "dtype") else np.dtype(np.float64)
    low_precision = dtype == np.float32
    tols = TOLERANCES.get(dtype, TOLERANCES[np.dtype(np.float64)])
    if eps is None:
        eps = float(np.finfo(np.float32 if low_precision else np.float64).eps)
    if scale is None and dense:
        scale = float(xp.sum(xp.astype(xp.linalg.diagonal(A), xp.float64)))
    if method == "auto":
        method = auto_method_device(n, k, dense=dense)
    if method != "dense" and k >= n - 1:
        if not dense:  # n products form the matrix (the tiny-matrix case, as on the host)
            A = _xp_matmat(A, xp.eye(n, dtype=xp.float64, device=placement.device), xp)
            A = (A + xp.permute_dims(A, (1, 0))) / 2
            dense = True
        method = "dense"
    if method == "dense":
        vals, vecs = _xp_dense(A, k, xp)
        n_iter = 1
    else:
        # lanczos (ARPACK, host only) is block Krylov here, to the iterative methods' tolerance
        # unless one is given: its residual criterion is relative to the largest Ritz value.
        tol = tols["iterative"] if tol is None else tol
        if method == "orthogonal":
            vals, vecs, n_iter = _xp_orthogonal(A, k, rng, tol, max_iter or 1000, placement)
        else:
            vals, vecs, n_iter = _xp_randomized(
                A, k, rng, tol, max_iter or 500, oversamples, placement
            )
        if not _xp_finite(vals, vecs, xp):
            if not dense:
                raise NonFiniteError(
                    f"eigen_solver={method!r} gave non-finite eigenpairs on this operator"
                )
            vals, vecs = _xp_dense(A, k, xp)
            n_iter += 1
    vals, vecs = postprocess_eigen_xp(vals, vecs, scale=scale, eps=eps)
    return vals, vecs, n_iter


def _xp_finite(vals, vecs, xp) -> bool:
    return bool(xp.all(xp.isfinite(vals))) and bool(xp.all(xp.isfinite(vecs)))


def postprocess_eigen_xp(values, vectors, *, scale=None, eps=None):
    """:func:`postprocess_eigen` for device arrays: descending, rounding-level eigenvalues 0,
    each column's entry of largest magnitude positive; float64, on the arrays' device."""
    placement = placement_of(vectors)
    xp = placement.xp
    values = xp.astype(values, xp.float64)
    vectors = xp.astype(vectors, xp.float64)
    order = xp.flip(xp.argsort(values), axis=0)
    values = xp.take(values, order)
    vectors = xp.take(vectors, order, axis=1)
    zero = xp.zeros_like(values)
    values = xp.where(values <= rounding_threshold(scale, eps), zero, values)
    if vectors.shape[1]:
        idx = xp.argmax(xp.abs(vectors), axis=0)
        cols = xp.arange(vectors.shape[1], device=placement.device)
        picked = vectors[idx, cols]
        signs = xp.where(picked < 0, -xp.ones_like(picked), xp.ones_like(picked))
        vectors = vectors * signs[None, :]
    return values, vectors
