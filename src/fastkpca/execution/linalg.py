"""Dense linear algebra with one signature on every array namespace: the eigensolvers' primitives.

:mod:`fastkpca.solvers` is written once over the array namespace; what differs by backend is
here: on the host scipy's LAPACK (``syevr``, pivoted QR and Cholesky, triangular solves), ARPACK
and blocked products; PyTorch CPU tensors read through by the host's LAPACK; other namespaces
the standard's ``xp.linalg.eigh`` and ``qr`` (ranks from R's singular values, whitening from
``eigh``).  Start blocks are host draws, moved.  Products are float64 (float32 matrices in
float32) and checked finite (:class:`NonFiniteError`, a ``ValueError``).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.linalg import lapack
from scipy.sparse.linalg import (
    ArpackError,
    ArpackNoConvergence,
    LinearOperator,
    aslinearoperator,
    eigsh,
)
from sklearn.exceptions import ConvergenceWarning

from . import budget
from .arrays import HOST, Placement, placement_of, to_host
from .elementwise import nonfinite
from .threads import one_blas_thread

__all__ = [
    "DENSE_RULE",
    "NonFiniteError",
    "all_finite",
    "as_operator",
    "column_store",
    "dense_topk",
    "dense_topk_bytes",
    "dtype_of",
    "eigh",
    "is_explicit",
    "krylov_basis_columns",
    "lanczos",
    "lower_solver",
    "matmat",
    "operator_placement",
    "orth_against",
    "prefer_dense",
    "qr",
    "small_steps",
    "start_block",
    "warn_not_converged",
    "whitening",
]


class NonFiniteError(ValueError):
    """The matrix or operator handed to an eigensolver is not finite (a ``ValueError``)."""


_NOT_FINITE = (
    "the matrix to decompose has NaN or infinite entries{}: the kernel values {}overflowed; "
    "check the data's scale and the kernel parameters (gamma)"
)
_PRODUCTS_NOT_FINITE = _NOT_FINITE.format(" (its products are not finite)", "or features ")
_MATRIX_NOT_FINITE = _NOT_FINITE.format("", "")


# --- what an operand is -----------------------------------------------------------------------
#: Placements of arrays of other namespaces by (array type, device), and numpy dtypes by dtype:
#: the primitives ask for them several times per iteration, and reading a placement through
#: array-api-compat costs tens of microseconds.
_PLACEMENTS: dict = {}
_DTYPES: dict = {}


def operator_placement(A) -> Placement:
    """Where A computes: an operator's ``placement`` attribute, the host for numpy arrays,
    scipy.sparse matrices and ``LinearOperator`` objects, else the array's own placement."""
    if isinstance(A, np.ndarray):
        return HOST
    cls = type(A)
    if (cls, None) in _PLACEMENTS:  # a type seen before as an array with a hashable device
        placement = _PLACEMENTS.get((cls, A.device))
        if placement is not None:
            return placement
    placement = getattr(A, "placement", None)
    if isinstance(placement, Placement):
        return placement
    if sp.issparse(A) or isinstance(A, LinearOperator):
        return HOST
    placement = placement_of(A)
    try:
        _PLACEMENTS[(cls, A.device)] = placement
        _PLACEMENTS[(cls, None)] = None
    except (AttributeError, TypeError):  # no device, or an unhashable one
        pass
    return placement


def is_explicit(A) -> bool:
    """Whether A is a matrix held in memory (a dense solve can read it), not an operator."""
    return _explicit(A, operator_placement(A))


def _explicit(A, placement: Placement) -> bool:
    if placement.host:
        return isinstance(A, np.ndarray)
    return not hasattr(A, "matmat")


def small_steps(placement: Placement, flops: float = 0.0):
    """The context of a serial dense step of about ``flops`` (0: a block iteration's QR and
    ``eigh``): on the host BLAS on one thread (:func:`~fastkpca.execution.one_blas_thread`)
    below :data:`~fastkpca.execution.budget.THREADED_BLAS_MIN_FLOPS`; nothing elsewhere."""
    host = placement.host and flops < budget.THREADED_BLAS_MIN_FLOPS
    return one_blas_thread() if host else contextlib.nullcontext()


def dtype_of(A) -> np.dtype:
    """A's dtype as a numpy dtype (an operator without one: float64)."""
    dtype = getattr(A, "dtype", None)
    if dtype is None:
        return np.dtype(np.float64)
    key = (type(dtype), dtype)  # the type first: no cross-library dtype comparison
    try:
        return _DTYPES[key]
    except KeyError:
        return _DTYPES.setdefault(key, np.dtype(str(dtype).rsplit(".", 1)[-1]))
    except TypeError:  # unhashable
        return np.dtype(str(dtype).rsplit(".", 1)[-1])


def _float32_products(A, placement: Placement) -> bool:
    """A float32 matrix (dense or sparse) is multiplied in float32, without a float64 copy."""
    return dtype_of(A) == np.float32 and (_explicit(A, placement) or sp.issparse(A))


def as_operator(A):
    """A in the form the block iterations multiply: arrays and sparse matrices as they are, any
    other host object as a ``LinearOperator`` (scipy's ``aslinearoperator``)."""
    if operator_placement(A).host and not (isinstance(A, np.ndarray) or sp.issparse(A)):
        return aslinearoperator(A)
    return A


def all_finite(*arrays) -> bool:
    """Whether every entry of every array is finite (:func:`.elementwise.nonfinite`)."""
    return all(nonfinite(a) is None for a in arrays)


# --- products -----------------------------------------------------------------------------------
def matmat(A, V):
    """``A @ V`` in float64, checked finite (:class:`NonFiniteError`); float32 A in float32; a
    dense host A in row blocks of :data:`~fastkpca.execution.budget.MATMAT_BLOCK_ROWS`; sparse
    A, ``LinearOperator`` and device operators by their own product."""
    placement = operator_placement(A)
    float32 = _float32_products(A, placement)
    if placement.host:
        out = _host_matmat(A, V, float32)
    else:
        xp = placement.xp
        if float32:
            out = A @ xp.astype(V, xp.float32)
        elif _explicit(A, placement):
            out = A @ V
        else:
            out = A.matmat(V)
        if out.dtype != xp.float64:
            out = xp.astype(out, xp.float64)
    if nonfinite(out) is not None:
        raise NonFiniteError(_PRODUCTS_NOT_FINITE)
    return out


def _host_matmat(A, V, float32):
    if float32:
        V = V.astype(np.float32)
    rows = budget.MATMAT_BLOCK_ROWS
    if isinstance(A, np.ndarray) and V.ndim == 2 and A.shape[0] > rows:
        out = np.empty((A.shape[0], V.shape[1]), dtype=np.result_type(A.dtype, V.dtype))
        for start in range(0, A.shape[0], rows):
            np.matmul(A[start : start + rows], V, out=out[start : start + rows])
    else:
        out = A @ V
    if sp.issparse(out):
        out = out.toarray()
    return np.asarray(out, dtype=np.float64)


# --- small dense problems -----------------------------------------------------------------------
def column_store(n: int, m: int, placement: Placement):
    """An n x m float64 array whose column slices are contiguous (Fortran order on the host), for
    a basis grown a block of columns at a time; its entries are unspecified until written."""
    if placement.host:
        return np.empty((n, m), order="F")
    xp = placement.xp
    return xp.zeros((n, m), dtype=xp.float64, device=placement.device)


def start_block(n: int, b: int, rng: np.random.Generator, placement: Placement):
    """An orthonormal n x b block from the host generator's normal draws, on ``placement``: the
    same draws, so the same start, on every namespace."""
    return qr(placement.asarray(rng.standard_normal((n, b)), dtype=np.float64))


def qr(A):
    """The orthonormal factor Q of the economic QR factorization of a tall A (n x b)."""
    placement = operator_placement(A)
    if placement.host:
        return la.qr(A, mode="economic")[0]
    return placement.xp.linalg.qr(A)[0]


def eigh(H):
    """Eigenpairs of a small symmetric matrix (its symmetric part), eigenvalues descending.

    The namespace's ``linalg.eigh`` on every placement; on the host numpy's LAPACK (``syevd``),
    not scipy's wrappers, which hold the GIL (Frequent Directions shrinks sketches in threads)."""
    placement = operator_placement(H)
    vals, vecs = placement.xp.linalg.eigh((H + H.T) / 2)
    if placement.host:  # reversed views: np.flip's call costs count at a sketch's shrink sizes
        return vals[::-1], vecs[:, ::-1]
    return placement.xp.flip(vals, axis=0), placement.xp.flip(vecs, axis=1)


def orth_against(V, Z, drop_tol: float):
    """Orthonormal basis of ``(I - V V^T) Z`` without the directions already in span(V):
    classical Gram-Schmidt twice (Giraud et al. 2005), then a rank-revealing factorization
    (host: scipy's pivoted QR; elsewhere QR and the SVD of R) whose small diagonal entries are
    dropped.  Z is not modified."""
    placement = operator_placement(V)
    if placement.host:
        Z = Z.copy()
        for _ in range(2):
            Z -= V @ (V.T @ Z)
        Q, R, _ = la.qr(Z, mode="economic", pivoting=True)
        rank = int(np.sum(np.abs(np.diag(R)) > drop_tol))
        Q = Q[:, :rank]
    else:
        xp = placement.xp
        for _ in range(2):
            Z = Z - V @ (V.T @ Z)
        Q, R = xp.linalg.qr(Z)
        U, sigma, _ = xp.linalg.svd(R)
        rank = int(xp.sum(xp.astype(sigma > drop_tol, xp.int64)))
        Q = Q @ U[:, :rank]
    Q = Q - V @ (V.T @ Q)  # the QR of a nearly rank-deficient Z can reintroduce span(V)
    return qr(Q)


def krylov_basis_columns(n: int, b: int, k: int, placement: Placement) -> int:
    """Largest Krylov basis (columns) for blocks of b vectors:
    :data:`~fastkpca.execution.budget.KRYLOV_MAX_BLOCKS` blocks within the memory of V and A V
    (:data:`~fastkpca.execution.budget.KRYLOV_FREE_FRACTION` of a device's free memory, else
    :data:`~fastkpca.execution.budget.KRYLOV_MEMORY_MB`), at least k + 2 blocks, at most n."""
    free = placement.free_memory_bytes()
    if free is None:
        allowed = budget.KRYLOV_MEMORY_MB * 2**20
    else:
        allowed = int(free * budget.KRYLOV_FREE_FRACTION)
    fits = int(allowed // (16 * n))
    return min(n, max(min(budget.KRYLOV_MAX_BLOCKS * b, fits), k + 2 * b))


# --- whitening and triangular solves -------------------------------------------------------------
def whitening(A, tol: float):
    """A whitening N of a symmetric PSD matrix A (c x c) and the factor ``Z = N A``:
    ``N A N^T = I_r`` over the r directions kept above ``tol``.

    The pivoted Cholesky ``P^T A P = R^T R`` (LAPACK ``dpstrf``) stopped at the first pivot at
    most ``tol``: ``N = R_11^{-T} P_r^T``, ``Z = R P^T``, on the host whatever A's placement up
    to :data:`~fastkpca.execution.budget.HOST_WHITENING_MAX` (no array library has a pivoted
    Cholesky): every placement then gets the same N, which a randomized solver's test matrix,
    drawn in the whitened coordinates, needs for the same model.  Larger A on a device: ``A =
    U diag(w) U^T``, ``N = diag(w_r)^{-1/2} U_r^T``, ``Z = diag(w_r)^{1/2} U_r^T``, the host's N
    up to a rotation.  At full rank both give ``N^T N = A^{-1}``.

    Returns
    -------
    N : (r, c) float64, r >= 1, on A's placement
    Z : (r, c) float64
    """
    placement = operator_placement(A)
    if not placement.in_host_memory and A.shape[0] > budget.HOST_WHITENING_MAX:
        return _eigh_whitening(A, tol, placement)
    N, Z = _cholesky_whitening(np.asarray(to_host(A), dtype=np.float64), tol)
    return placement.asarray(N), placement.asarray(Z)


def _cholesky_whitening(A: np.ndarray, tol: float):
    # In place where it can be: each new c x c array is a first touch of fresh memory (NOTES).
    c = A.shape[0]
    with one_blas_thread():  # pivoted Cholesky: no faster on BLAS threads (NOTES)
        R, piv, rank, _ = lapack.dpstrf(A, tol=tol, lower=0)  # a copy of A, Fortran order
    rank = max(int(rank), 1)
    for j in range(rank):  # the strictly lower triangle is left over: zeroed, column by column
        R[j + 1 :, j] = 0.0
    R = R[:rank]
    Z = np.take(R, np.argsort(piv - 1), axis=1)  # column i of A is pivot inverse[i]
    with small_steps(HOST, rank**3 / 3.0):  # in place at full rank (R Fortran-contiguous)
        R_inv, _ = lapack.dtrtri(R[:, :rank], lower=0, overwrite_c=True)
    N_T = np.zeros((c, rank))
    N_T[piv[:rank] - 1] = R_inv
    return N_T.T, Z


def _eigh_whitening(A, tol: float, placement: Placement):
    xp = placement.xp
    w, U = xp.linalg.eigh(A)  # ascending
    rank = max(int(xp.sum(xp.astype(w > tol, xp.int64))), 1)
    w, U = w[-rank:], U[:, -rank:]
    root = xp.sqrt(xp.clip(w, tol, None))
    return (U / root).T, (U * root).T


def lower_solver(L, placement: Placement):
    """``G -> G L^{-T}`` for a small lower-triangular host L (l x l) and tall G (m x l) of
    ``placement`` (Chen, Epperly, Tropp & Webber 2024, eq. 2.2): a LAPACK triangular solve on
    the host, elsewhere a product with ``L^{-T}`` formed once on the host."""
    L = np.asarray(L, dtype=np.float64)
    if placement.host:

        def solve(G):
            return la.solve_triangular(L, G.T, lower=True, check_finite=False).T

        return solve
    inverse_T = la.solve_triangular(L, np.eye(L.shape[0]), lower=True, check_finite=False).T
    inverse_T = placement.asarray(np.ascontiguousarray(inverse_T))

    def product(G):
        return G @ inverse_T

    return product


# --- the dense top-k solve ----------------------------------------------------------------------
def dense_topk(A, k: int, *, overwrite: bool = False):
    """The top k eigenpairs of an explicit symmetric matrix, eigenvalues ascending; never fewer
    than k, :class:`NonFiniteError` for a non-finite A.  In host memory LAPACK
    (:func:`_lapack_topk`, overwriting A when ``overwrite``), elsewhere the namespace's
    ``eigh``."""
    if not is_explicit(A):
        raise ValueError("eigen_solver='dense' needs an explicit array, not an operator")
    placement = operator_placement(A)
    if placement.in_host_memory:
        vals, vecs = _lapack_topk(to_host(A), k, overwrite)
        return placement.asarray(vals), placement.asarray(vecs)
    xp = placement.xp
    A64 = xp.astype(A, xp.float64, copy=False)
    if not all_finite(A64):
        raise NonFiniteError(_MATRIX_NOT_FINITE)
    vals, vecs = xp.linalg.eigh(A64)
    n = A.shape[0]
    vals, vecs = vals[n - k :], vecs[:, n - k :]
    if not all_finite(vals, vecs):
        raise NonFiniteError(_MATRIX_NOT_FINITE)
    return vals, vecs


def dense_topk_bytes(n: int, k: int, itemsize: int, placement: Placement) -> int:
    """Memory (bytes) that :func:`dense_topk` of an n x n matrix of ``itemsize``-byte entries
    takes beside the matrix, when it may overwrite it: in host memory LAPACK's index-range solve
    works in place and writes k float64 eigenvectors (8 n k); a device's full ``eigh`` writes all
    n eigenvectors and a workspace about the size of the matrix again (2 x 8 n^2, float64), from
    a float64 copy of a float32 matrix."""
    if placement.in_host_memory:
        return 8 * n * k
    copy = 8 * n * n if itemsize < 8 else 0
    return 2 * 8 * n * n + copy


def _lapack_topk(A, k, overwrite):
    """The top k eigenpairs of a symmetric numpy array by LAPACK, ascending: ``syevr`` for the
    index range; where its inverse iteration fails (tight clusters, K = I), ``syev`` on the
    whole spectrum, an overwritten A first restored from its other triangle."""
    n = A.shape[0]
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
            raise NonFiniteError(_MATRIX_NOT_FINITE) from None
        raise ValueError(f"the dense eigensolver failed on this matrix ({err})") from None
    if not (np.isfinite(vals).all() and np.isfinite(vecs).all()):
        raise NonFiniteError(_MATRIX_NOT_FINITE)
    return vals[n - k :], np.array(vecs[:, n - k :])


def _restore_lower_triangle(A_f, diagonal):
    """Rebuild the lower triangle and diagonal of a Fortran-ordered symmetric matrix in place
    from its strict upper triangle and the saved diagonal (tile by tile: the reads stay in
    cache)."""
    n = A_f.shape[0]
    tile = budget.RESTORE_TILE
    for s in range(0, n, tile):
        e = min(n, s + tile)
        A_f[e:, s:e] = A_f[s:e, e:].T
        block = A_f[s:e, s:e]
        block[...] = np.triu(block, 1) + np.triu(block, 1).T
    np.fill_diagonal(A_f, diagonal)


# --- ARPACK -------------------------------------------------------------------------------------
#: ``lanczos`` results are accepted when each Ritz residual ``||A v - theta v||`` is at most
#: ``RESIDUAL_SLACK`` times ARPACK's own criterion ``tol |theta|``, or at most
#: ``RESIDUAL_FLOOR`` times the largest Ritz value: the check catches pairs that are no
#: eigenpairs, not operators whose products have fewer digits than ``tol``.
RESIDUAL_SLACK = 1e3
RESIDUAL_FLOOR = 1e-4


def lanczos(A, k: int, rng: np.random.Generator, tol: float, max_iter, *, krylov):
    """The top k eigenpairs of A by ARPACK ``eigsh``, or by the block Krylov solver ``krylov``
    where ARPACK cannot serve.

    ARPACK runs on the host from a start vector drawn from ``rng``, to ``tol`` with ``max_iter``
    restarts; its k residuals are checked (:data:`RESIDUAL_SLACK`, :data:`RESIDUAL_FLOOR`).
    ``krylov(tol, warn)`` returns ``(values, vectors, n_iter)``: called with ``tol=None`` on
    other namespaces, and with ARPACK's ``tol`` where ARPACK fails (no convergence, an
    ``ArpackError`` other than a zero start vector, or residuals that are no eigenpairs).

    Returns
    -------
    values : (k,) ascending or as ``krylov`` returns them
    vectors : (n, k)
    n_products : int
        Products with A (ARPACK's, the check's k, and ``krylov``'s passes).
    """
    if not operator_placement(A).host:
        return krylov(None, True)
    n = A.shape[0]
    if k >= n:
        raise ValueError(
            f"eigen_solver='lanczos' needs n_components < n ({k} >= {n}); use eigen_solver='dense'"
        )
    v0 = rng.uniform(-1.0, 1.0, n)
    n_products = 0

    def matvec(v):
        # A float32 matrix is multiplied in float32 (no float64 copy); ARPACK runs in float64.
        nonlocal n_products
        n_products += 1
        return matmat(A, v)

    op = LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
    try:
        vals, vecs = eigsh(op, k=k, which="LA", v0=v0, tol=tol, maxiter=max_iter)
    except ArpackNoConvergence:
        warn_not_converged("lanczos", max_iter, "fewer than k Ritz pairs met tol")
        vals, vecs, it = krylov(tol, False)
        return vals, vecs, n_products + it
    except ArpackError as err:
        if "error -9:" in str(err):
            # -9 "starting vector is zero": A v0 = 0 for a random v0, which happens (almost
            # surely) only for A = 0: the eigenvalues are exactly 0, any orthonormal k vectors
            # eigenvectors.
            return np.zeros(k), qr(rng.standard_normal((n, k))), n_products
        # Any other ARPACK failure (e.g. -9999, no Arnoldi factorization could be built): the
        # block Krylov solver needs no factorization of that kind and always has k Ritz pairs.
        vals, vecs, it = krylov(tol, True)
        return vals, vecs, n_products + it
    if vals.shape != (k,) or not _residuals_ok(A, vals, vecs, tol):
        vals, vecs, it = krylov(tol, True)
        return vals, vecs, n_products + k + it
    return vals, vecs, n_products + k  # the residual check is k more products


def _residuals_ok(A, vals, vecs, tol) -> bool:
    """Whether every Ritz pair's residual is within :data:`RESIDUAL_SLACK` / :data:`RESIDUAL_FLOOR`:
    one block product, next to the O(k) to O(100 k) products of the Lanczos run."""
    AV = matmat(A, vecs)
    residuals = np.linalg.norm(AV - vecs * vals, axis=0)
    top = float(np.max(np.abs(vals), initial=0.0))
    allowed = np.maximum(RESIDUAL_SLACK * tol * np.abs(vals), RESIDUAL_FLOOR * top)
    return bool(np.all(residuals <= allowed))


def warn_not_converged(method: str, max_iter, why: str) -> None:
    """The ConvergenceWarning of an eigensolver stopped at ``max_iter``."""
    warnings.warn(
        f"eigen_solver={method!r} stopped at max_iter={max_iter} before converging ({why}); "
        "the eigenpairs are approximate: raise max_iter or tol",
        ConvergenceWarning,
        stacklevel=4,
    )


# --- dense or Krylov ----------------------------------------------------------------------------
#: When a dense solve of an explicit n x n matrix beats an iterative one for k eigenpairs:
#: ``n <= max_n`` or ``k >= int(min_fraction * n)`` (a dense solve costs O(n^3) whatever k, an
#: iterative one a few passes of O(n^2 (k + oversamples))).  Rows: ``host`` (LAPACK against block
#: Krylov), ``host_arpack`` (LAPACK against ARPACK on a small matrix, whose cheap products make
#: ARPACK win from a few hundred rows), ``device`` (a GPU's full ``eigh`` against block Krylov,
#: whose passes cost launches and synchronisations that stop shrinking with n).
DENSE_RULE = {
    "host": {"max_n": 1000, "min_fraction": 0.2},
    "host_arpack": {"max_n": 200, "min_fraction": 0.2},
    "device": {"max_n": 2000, "min_fraction": 0.2},
}


def prefer_dense(
    n: int, k: int, *, explicit: bool, placement: Placement = HOST, iterative: str = "randomized"
) -> bool:
    """Whether k eigenpairs of an n x n symmetric matrix are best found by a dense solve
    (:data:`DENSE_RULE`) rather than by ``iterative`` (``"randomized"`` or ``"lanczos"``).

    An operator (``explicit=False``) has no dense solve.  The row follows where the dense solve
    runs (:func:`dense_topk`: host memory or a device) and, in host memory, what competes.
    """
    if not explicit:
        return False
    if not placement.in_host_memory:
        rule = DENSE_RULE["device"]
    else:
        rule = DENSE_RULE["host_arpack" if iterative == "lanczos" else "host"]
    return n <= rule["max_n"] or k >= int(rule["min_fraction"] * n)
