"""One-pass sketch of a centered scatter matrix, and its fixed-rank PSD reconstruction.

The centered scatter ``S = sum_i (r_i - mean)(r_i - mean)^T`` (p x p) of rows in R^p is recovered
to a fixed rank from the sketch ``Y = S T`` against a p x q test matrix (Tropp, Yurtsever, Udell
& Cevher, NeurIPS 2017, section 3): O(n p q) time, O(p q) memory, S never formed.

:class:`ScatterSketch` holds count, mean and Y; a block's sketch is ``Rc^T (Rc T)`` and two sets
pool by Chan, Golub & LeVeque's update, ``Y = Y_a + Y_b + (n_a n_b / n) d (d^T T)``, ``d =
mean_a - mean_b``, so sketches merge in any order.  :func:`fixed_rank_psd` is the paper's
Algorithm 3; its eigenvalues never exceed S's, are exact for rank S <= q, and otherwise err by
S's tail beyond rank ~q (Theorem 4.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la

from .._utils import as_generator
from ..execution import one_blas_thread
from ..execution.arrays import float_dtype, placement_of, to_host
from ..execution.elementwise import matmul
from ..execution.feature_ops import sum_over_row_shares
from ..execution.linalg import eigh
from ..solvers import flip_signs, postprocess_eigen

__all__ = [
    "ScatterSketch",
    "scatter_sketch",
    "merged",
    "test_matrix",
    "informed_test_matrix",
    "fixed_rank_psd",
    "gemm_width",
    "with_sum_column",
    "add_sketch_chunk",
]


@dataclass
class ScatterSketch:
    """Count, mean and sketch ``Y = S T`` of the centered scatter S of a set of rows (float64).

    ``S = sum_i (r_i - mean)(r_i - mean)^T`` over the ``n`` rows seen; T is the fixed
    (p, q) test matrix that every partial sketch of one fit shares (:func:`test_matrix`).

    Attributes
    ----------
    n : int
    mean : (p,) float64, of the rows' namespace
    Y : (p, q) float64, of the rows' namespace
    eps : float
        Unit roundoff of the products that formed Y (float32's if any block was float32): the
        precision :func:`fixed_rank_psd` must allow for.
    """

    n: int
    mean: np.ndarray
    Y: np.ndarray
    eps: float = float(np.finfo(np.float64).eps)

    @classmethod
    def empty(cls, p: int, q: int) -> ScatterSketch:
        """The sketch of no rows (neutral for :meth:`merge`)."""
        return cls(0, np.zeros(p), np.zeros((p, q)))

    def merge(self, other: ScatterSketch, T: np.ndarray) -> ScatterSketch:
        """Both sets of rows pooled, as a new object: Chan, Golub & LeVeque's ``S = S_a + S_b +
        (n_a n_b / n) d d^T`` (``d = mean_a - mean_b``) times T; where this one lives."""
        if other.n == 0:
            return ScatterSketch(self.n, _copy(self.mean), _copy(self.Y), self.eps)
        if self.n == 0:
            return ScatterSketch(other.n, _copy(other.mean), _copy(other.Y), other.eps)
        placement = placement_of(self.Y)
        other = ScatterSketch(
            other.n,
            placement.asarray(other.mean, np.float64),
            placement.asarray(other.Y, np.float64),
            other.eps,
        )
        if self.Y.shape != other.Y.shape or self.Y.shape != T.shape:
            raise ValueError(
                f"cannot merge scatter sketches of shapes {self.Y.shape} and {other.Y.shape} "
                f"with a test matrix of shape {T.shape}"
            )
        n = self.n + other.n
        d = self.mean - other.mean
        Y = self.Y + other.Y
        T = placement.asarray(T, np.float64)
        Y += (self.n * other.n / n) * (d[:, None] * (d @ T)[None, :])
        mean = self.mean - d * (other.n / n)
        return ScatterSketch(n, mean, Y, max(self.eps, other.eps))


def _copy(a):
    """An independent copy of an array of any namespace."""
    return placement_of(a).xp.asarray(a, copy=True)


def merged(a: ScatterSketch, b: ScatterSketch, T: np.ndarray) -> ScatterSketch:
    """``a`` and ``b`` pooled into a new object: :meth:`ScatterSketch.merge` as a function."""
    return a.merge(b, T)


def scatter_sketch(rows, T: np.ndarray, shift=None, *, overwrite: bool = False) -> ScatterSketch:
    """:class:`ScatterSketch` of one block of rows.

    Parameters
    ----------
    rows : (b, p) float32 or float64 array, of any namespace
        The products run in the rows' precision, the mean and correction in float64.
    T : (p, q) array
        The test matrix.
    shift : (p,) array or None
        A point near the rows' mean, subtracted before the products (float32 rounding then
        relative to the spread); the exact correction ``- b (mean - c)(mean - c)^T T`` makes the
        result independent of it.  None: the block's own mean.
    overwrite : bool
        Shift ``rows`` in place instead of copying it.

    Returns
    -------
    ScatterSketch
    """
    placement = placement_of(rows)
    rows = placement.asarray(rows)
    xp = placement.xp
    if rows.ndim != 2 or rows.shape[1] != T.shape[0]:
        raise ValueError(
            f"rows of shape {rows.shape} do not match a test matrix with {T.shape[0]} rows"
        )
    b, p = rows.shape
    if b == 0:
        return ScatterSketch.empty(p, T.shape[1])
    dtype = float_dtype(rows.dtype)
    if rows.dtype != placement.dtype(dtype):
        rows, overwrite = placement.asarray(rows, dtype), True
    if shift is None:
        shift = xp.sum(rows, axis=0, dtype=xp.float64) / b
    # The shift actually subtracted is its rounding to the rows' dtype; the correction uses it.
    c = placement.asarray(placement.asarray(shift, np.float64), dtype)
    # The mean from the rows as given (the shifted rows are rounded in their dtype) ...
    mean = xp.sum(rows, axis=0, dtype=xp.float64) / b
    R = rows if overwrite else xp.asarray(rows, copy=True)
    R -= c
    # ... and the correction from the mean of the shifted rows actually multiplied, so that it
    # cancels exactly what they carry: sum (r - rbar)(r - rbar)^T = R^T R - b rbar rbar^T.
    delta = xp.sum(R, axis=0, dtype=xp.float64) / b
    T64 = placement.asarray(T, np.float64)
    Y = _sketch_products(R, placement.asarray(T, dtype))
    Y -= b * (delta[:, None] * (delta @ T64)[None, :])
    return ScatterSketch(b, mean, Y, float(np.finfo(dtype).eps))


def _sketch_products(R, T):
    """``R^T (R T)`` as a float64 (p, q) array of R's namespace: the transposed product ``(R_s
    T)^T R_s`` for fixed shares of the rows, in their precision, added in float64
    (:func:`~fastkpca.execution.feature_ops.sum_over_row_shares`)."""
    return sum_over_row_shares(R, lambda rows: (rows @ T).T @ rows).T


def gemm_width(q: int, limit: int) -> int:
    """q raised so that ``q + 1`` is a multiple of 8, at most ``limit``: the chunk products of
    :func:`add_sketch_chunk` run with ``q + 1`` columns on OpenBLAS's SGEMM kernels, which work
    on panels of 8 columns; the extra directions only add accuracy."""
    return int(min(limit, -(-(q + 1) // 8) * 8 - 1))


def with_sum_column(T: np.ndarray, dtype) -> np.ndarray:
    """``[T, 0]`` in ``dtype``: the test matrix of :func:`add_sketch_chunk`, one column wider."""
    p, q = T.shape
    out = np.zeros((p, q + 1), dtype)
    out[:, :q] = T
    return out


def add_sketch_chunk(totals, buffer, R, T_sum):
    """``totals += [R T, 1]^T R``: a chunk's sketch rows and its column sums from one product
    (``T_sum = with_sum_column(T, R.dtype)``; ``buffer``, if given, is overwritten), the
    ``totals`` in float64.  Both one-pass randomized solvers add their chunks here."""
    q = T_sum.shape[1] - 1
    A = matmul(R, T_sum, out=None if buffer is None else buffer[: R.shape[0], ...])
    A[:, q] = 1.0
    totals += A.T @ R


def test_matrix(p: int, q: int, rng) -> np.ndarray:
    """A (p, q) test matrix with orthonormal columns: the Q factor of a standard Gaussian matrix
    (Tropp et al. 2017, section 3; ``T^T T = I`` makes :func:`fixed_rank_psd`'s shift exact).

    Parameters
    ----------
    p : int
        Rows (the dimension of the rows being sketched).
    q : int
        Columns, the sketch width; ``1 <= q <= p``.
    rng : numpy.random.Generator or seed
    """
    if not 1 <= q <= p:
        raise ValueError(f"the sketch width q must be between 1 and p = {p}, got {q}")
    rng = as_generator(rng, name="rng")
    G = rng.standard_normal((p, q))
    with one_blas_thread():  # a thin QR: on a loaded machine idle BLAS threads cost 100x
        Q, _ = np.linalg.qr(G)
    return Q


test_matrix.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported


def informed_test_matrix(
    rows, q: int, rng, *, power_iterations: int = 6, overwrite_rows: bool = False
) -> np.ndarray:
    """A (p, q) test matrix with orthonormal columns: half Gaussian, half the leading principal
    axes of a sample of the rows being sketched.

    Enlarging T's range keeps the guarantee of Tropp et al.'s Gaussian half (``q // 2``
    columns); the other half, the sample's leading right singular vectors (Halko, Martinsson &
    Tropp 2011, Alg. 4.4, ``power_iterations`` subspace iterations), approximate S's top
    eigenvectors where the sample is representative, removing most of a Gaussian sketch's bias
    on kernel spectra.

    Parameters
    ----------
    rows : (b, p) float32 or float64 array
        The sample; centered here, in its precision.
    q : int
        Columns, ``1 <= q <= p``.
    rng : numpy.random.Generator or seed
    power_iterations : int
    overwrite_rows : bool, default False
        Center float ``rows`` in place, not in a copy (whose new memory costs more to touch).
    """
    placement = placement_of(rows)
    floats = placement.asarray(rows)
    if floats.dtype not in (placement.xp.float32, placement.xp.float64):
        floats = placement.asarray(floats, np.float64)
    overwrite_rows, rows = overwrite_rows and floats is rows, floats
    p = rows.shape[1]
    if not 1 <= q <= p:
        raise ValueError(f"the sketch width q must be between 1 and p = {p}, got {q}")
    rng = as_generator(rng, name="rng")
    n_data = min(q - q // 2, rows.shape[0])
    columns = [rng.standard_normal((p, q - n_data))]
    if n_data > 0:
        columns.insert(0, _leading_axes(rows, n_data, rng, power_iterations, overwrite_rows))
    with one_blas_thread():
        T, _ = np.linalg.qr(np.hstack(columns))
    return T


def _leading_axes(rows, n_data: int, rng, power_iterations: int, overwrite: bool) -> np.ndarray:
    """:func:`informed_test_matrix`'s leading axes of the rows, where they are, in their
    precision (directions, not results): the range finder's products summed over shares of the
    rows (:func:`~fastkpca.execution.feature_ops.sum_over_row_shares`; with ``overwrite`` the
    first centers each share in place), its start from the host ``rng``, then Rayleigh-Ritz
    (:func:`~fastkpca.execution.linalg.eigh`) on ``(A Q)^T (A Q)``, summed over the shares."""
    placement = placement_of(rows)
    xp = placement.xp
    p = rows.shape[1]
    dtype = float_dtype(rows.dtype)
    mean = placement.asarray(xp.sum(rows, axis=0, dtype=xp.float64) / rows.shape[0], dtype)
    A = rows if overwrite else rows - mean
    Q = placement.asarray(rng.standard_normal((p, min(p, n_data + 10))), dtype)

    def gram_times(share):
        return share.T @ (share @ Q)

    def center_then_gram_times(share):
        share -= mean  # a view of the rows: centered where they are
        return gram_times(share)

    def ritz_gram(share):
        B = xp.astype(share @ Q, xp.float64)
        return B.T @ B

    # Thin QRs, a small eigh: BLAS threads' wake-ups cost 100x, their spin-waits slow the pass
    with one_blas_thread():
        for i in range(power_iterations + 1):
            first = overwrite and i == 0
            Y = sum_over_row_shares(A, center_then_gram_times if first else gram_times)
            Q, _ = xp.linalg.qr(xp.astype(Y, A.dtype))
        _, V = eigh(sum_over_row_shares(A, ritz_gram))
        return to_host(xp.astype(Q, xp.float64) @ V[:, :n_data])


def fixed_rank_psd(Y, T, rank: int, *, eps: float | None = None, scale=None):
    """Top-``rank`` eigenpairs of the PSD matrix S from its sketch ``Y = S T``.

    Tropp, Yurtsever, Udell & Cevher (NeurIPS 2017), Algorithm 3: shift ``Y_nu = Y + nu T`` with
    ``nu = sqrt(p) eps ||Y||_2`` (the authors' code), Cholesky ``T^T Y_nu = C^T C``, thin SVD of
    ``Y_nu C^{-1} = U Sigma V^T``, then ``Lambda = max(Sigma^2 - nu, 0)`` truncated to ``rank``
    (section 3.3).  ``eps`` is the unit roundoff of Y's products (:attr:`ScatterSketch.eps`); if
    the Cholesky still fails, nu becomes twice the most negative eigenvalue of ``T^T Y``.

    Parameters
    ----------
    Y : (p, q) array, the sketch, of any namespace (solved with the host's LAPACK, returned on Y's
        placement)
    T : (p, q) array with orthonormal columns (:func:`test_matrix`)
    rank : int, ``1 <= rank <= q``
    eps : float or None
        Unit roundoff of Y's products (None: float64's).
    scale : float or None
        The uncentered Gram's trace, for :func:`fastkpca.solvers.postprocess_eigen`.

    Returns
    -------
    eigenvalues : (rank,) float64, descending, >= 0, at most S's (exact when rank(S) <= q)
    eigenvectors : (p, rank) float64, orthonormal columns, signs fixed (largest entry positive)
    """
    placement = placement_of(Y)
    Y = np.asarray(to_host(Y), dtype=np.float64)
    T = np.asarray(to_host(T), dtype=np.float64)
    if Y.shape != T.shape or Y.ndim != 2:
        raise ValueError(f"the sketch {Y.shape} and the test matrix {T.shape} must match")
    p, q = Y.shape
    if not 1 <= rank <= q:
        raise ValueError(f"rank must be between 1 and the sketch width q = {q}, got {rank}")
    if not np.isfinite(Y).all():
        raise ValueError("the sketch contains NaN or infinite values")
    eps = np.finfo(np.float64).eps if eps is None else float(eps)
    # Small dense LAPACK (p x q, q x q): one thread (idle BLAS threads' spin-waits dominate).
    with one_blas_thread():
        norm = float(np.linalg.norm(Y, 2))
        if norm == 0.0:
            return placement.asarray(np.zeros(rank)), placement.asarray(flip_signs(np.eye(p, rank)))
        if not np.isfinite(norm):
            raise ValueError("the sketch is too large to decompose (its norm overflows)")
        nu = np.sqrt(p) * eps * norm
        core = T.T @ Y
        core = (core + core.T) / 2
        for _ in range(3):
            try:
                C = la.cholesky(core + nu * np.eye(q), lower=False, check_finite=False)
                break
            except la.LinAlgError:
                lowest = float(la.eigvalsh(core, subset_by_index=[0, 0], check_finite=False)[0])
                nu = max(2 * nu, -2 * lowest)
        else:  # pragma: no cover - the raised shift makes ``core + nu I`` positive definite
            raise ValueError("the sketch's core matrix is not positive definite")
        # E = Y_nu C^{-1}: a triangular solve with C^T from the left on E^T.
        E = la.solve_triangular(C, (Y + nu * T).T, trans="T", lower=False, check_finite=False).T
        try:
            U, sigma, _ = la.svd(E, full_matrices=False, check_finite=False)
        except la.LinAlgError:  # gesdd's divide and conquer failed: the QR-iteration SVD
            U, sigma, _ = la.svd(E, full_matrices=False, check_finite=False, lapack_driver="gesvd")
    values, vectors = postprocess_eigen(
        np.maximum(sigma[:rank] ** 2 - nu, 0.0), U[:, :rank], scale=scale, eps=eps
    )
    return placement.asarray(values), placement.asarray(vectors)
