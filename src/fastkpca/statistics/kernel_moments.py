"""Kernel-row moments: the statistic and the solver of Nystrom kernel PCA.

With landmarks L, W = k(L, L) and ``z(x) = N k(L, x)``, ``N^T N = W^{-1}``, ``z(x) . z(y)`` is the
Nystrom approximation ``C W^{-1} C^T`` of the Gram (Williams & Seeger 2001; Ghashami et al. 2016
section 3), so kernel PCA on it is linear PCA on z.  The whitening (:func:`nystrom_whitening`)
stops at the first pivot below :data:`EIGENVALUE_FLOOR` times W's largest diagonal, bounding
N's amplification of round-off.  ``solver="exact"``: z's covariance ``N S N^T``, S the centered
scatter of the kernel rows (:class:`KernelMoments`, Chan et al.'s pairwise merge).
``"randomized"``: the sketch ``S T``, ``T = N^T Omega`` (:mod:`.covariance_sketch`), then
Tropp, Yurtsever, Udell & Cevher's fixed-rank PSD approximation (:func:`nystrom_sketch_kpca`,
:func:`landmark_test_matrix`), kernel rows in float32 where the whitening allows.  Density
weights (Zhang & Kwok 2009) matter only for ``covariance="landmarks"``, the covariance ``W^{1/2}
diag(w) W^{1/2}``.  Accumulators are float64 on the rows' namespace; the fixed-rank solve uses
host copies.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as la

from ..execution import linalg, one_blas_thread
from ..execution.arrays import HOST, Placement, placement_of, to_host
from ..execution.elementwise import as_float64, with_columns
from ..execution.kernel_ops import fold_kernel_rows, gram, kernel_blocks
from ..solvers import eigh_topk, flip_signs
from .covariance_sketch import ScatterSketch, add_sketch_chunk, fixed_rank_psd, merged

__all__ = [
    "KernelMoments",
    "kernel_moments",
    "landmark_kernel_moments",
    "merged_moments",
    "weighted_landmark_moments",
    "nystrom_normalization",
    "nystrom_whitening",
    "whitening_noise_gain",
    "nystrom_kpca",
    "kernel_sketch",
    "landmark_kernel_sketch",
    "merged_sketches",
    "nystrom_sketch_kpca",
    "landmark_test_matrix",
    "nystrom_from_exact",
    "landmark_gram",
    "EIGENVALUE_FLOOR",
]

#: Eigenvalues of W below this fraction of the largest are treated as 0 (pseudo-inverse).
EIGENVALUE_FLOOR = 1e-10


def _zeros(placement: Placement, shape):
    xp = placement.xp
    return xp.zeros(shape, dtype=xp.float64, device=placement.device)


@dataclass
class KernelMoments:
    """Count, mean and centered scatter of kernel rows ``k(L, x)``, in float64; mergeable.

    ``scatter = sum_i (k_i - mean)(k_i - mean)^T`` over the ``count`` rows seen.
    """

    count: int
    mean: np.ndarray
    scatter: np.ndarray

    @classmethod
    def empty(cls, n_landmarks: int, placement: Placement = HOST) -> KernelMoments:
        """The moments of no rows, in the arrays of ``placement`` (float64)."""
        return cls(0, _zeros(placement, (n_landmarks,)), _zeros(placement, (n_landmarks,) * 2))

    def merge(self, other: KernelMoments) -> KernelMoments:
        """Pool two sets of rows (Chan, Golub & LeVeque's pairwise update); returns self."""
        if other.count == 0:
            return self
        if self.count == 0:
            self.count = other.count
            self.mean, self.scatter = _copy(other.mean), _copy(other.scatter)
            return self
        n1, n2 = self.count, other.count
        delta = other.mean - self.mean
        self.scatter += other.scatter
        self.scatter += (n1 * n2 / (n1 + n2)) * _outer(delta, delta)
        self.mean += delta * (n2 / (n1 + n2))
        self.count = n1 + n2
        return self

    def update(self, K) -> KernelMoments:
        """Add the rows of a float64 kernel block ``K = k(X_block, L)``, which is overwritten."""
        m = K.shape[0]
        if m == 0:
            return self
        block_mean = placement_of(K).xp.mean(K, axis=0)
        K -= block_mean
        # K.T @ K on the same buffer is a BLAS SYRK in numpy: c^2 / 2 flops per row.
        return self.merge(KernelMoments(m, block_mean, K.T @ K))


def _copy(a):
    return placement_of(a).xp.asarray(a, copy=True)


def _outer(a, b):
    """``outer(a, b)`` of two vectors (numpy's ``outer`` computes it the same way)."""
    return a[:, None] * b[None, :]


def landmark_gram(kernel, landmarks):
    """``W = k(L, L)`` in float64, on the landmarks' placement, its diagonal exact for kernels
    with a unit diagonal (:func:`fastkpca.execution.kernel_ops.gram`); CSR landmarks give a
    dense W."""
    return gram(kernel, as_float64(landmarks))


#: :func:`kernel_moments` folds per worker thread (c x c float64 moments each: 8 MiB at 1024
#: landmarks) up to this many landmarks; above, one scatter for all threads.
FOLD_MAX_LANDMARKS = 1024


def kernel_moments(blocks, landmarks, kernel, moments: KernelMoments | None = None):
    """Accumulate :class:`KernelMoments` of ``k(L, x)`` over an iterable of row blocks.

    Each block is folded in row chunks (:func:`fastkpca.execution.kernel_ops.fold_kernel_rows`,
    moments per worker thread) up to :data:`FOLD_MAX_LANDMARKS` landmarks; above, kernel blocks
    are added to one scatter by a SYRK on all of BLAS's threads.
    """
    placement = placement_of(landmarks)
    c = landmarks.shape[0]
    if moments is None:
        moments = KernelMoments.empty(c, placement)
    new = functools.partial(KernelMoments.empty, c, placement)
    for block in blocks:
        if c > FOLD_MAX_LANDMARKS:
            # c x c moments per thread would cost more memory than they save time.
            for _, _, K in kernel_blocks(kernel, block, landmarks, dtype="float64"):
                moments.update(K)
                del K  # free this block before the generator computes the next one
            continue
        # Each worker thread folds its share of small row chunks into moments of its own (the
        # chunk's SYRK while it is in cache, BLAS on one thread), merged in row order: the
        # chunk grid depends on the rows alone, the thread count only groups the merges.
        for share in fold_kernel_rows(kernel, block, landmarks, _add_tile, new, dtype="float64"):
            moments.merge(share)
    return moments


def _add_tile(moments: KernelMoments, start, stop, K) -> None:
    moments.update(K)


def landmark_kernel_moments(blocks, landmarks, kernel) -> KernelMoments:
    """:class:`KernelMoments` of ``k(L, x)`` over ``(start, block)`` row blocks: the statistic
    ``RowSource.reduce`` computes over all blocks (or once per dask chunk)."""
    return kernel_moments((block for _, block in blocks), landmarks, kernel)


def merged_moments(a: KernelMoments, b: KernelMoments) -> KernelMoments:
    """``a`` and ``b`` pooled into a new object (neither is modified, as a Dask tree needs)."""
    return KernelMoments(a.count, _copy(a.mean), _copy(a.scatter)).merge(b)


def weighted_landmark_moments(W, weights, n_samples: int):
    """Moments of ``k(L, x)`` under the weighted landmark measure ``sum_j w_j delta(l_j)``.

    The rows are the columns of W, so the mean is ``W w`` and the scatter, scaled to stand for
    ``n_samples`` points, is ``n (W diag(w) W - W w w^T W)``: with it :func:`nystrom_kpca` solves
    Zhang & Kwok's density-weighted eigenproblem.
    """
    w = placement_of(W).asarray(weights, dtype=np.float64)
    mean = W @ w
    scatter = (W * w) @ W - _outer(mean, mean)
    scatter = n_samples * (scatter + scatter.T) / 2
    return KernelMoments(int(n_samples), mean, scatter)


def nystrom_normalization(W: np.ndarray, floor: float = EIGENVALUE_FLOOR):
    """Eigenpairs of a host W kept for ``W^{-1/2}``: those above ``floor`` times the largest.

    Returns
    -------
    values : (r,) float64, the kept eigenvalues (r >= 1 unless W = 0)
    vectors : (c, r) float64, orthonormal
    """
    W = np.asarray(W, dtype=np.float64)
    with one_blas_thread():  # small dense LAPACK: see the module notes
        vals, vecs = la.eigh(W, check_finite=False)
    top = max(float(vals[-1]), 0.0)
    keep = vals > floor * top
    if not keep.any():
        raise ValueError(
            "the landmark Gram matrix k(L, L) is zero; the kernel sees no structure "
            "in the landmarks"
        )
    return vals[keep], vecs[:, keep]


def nystrom_whitening(W, floor: float = EIGENVALUE_FLOOR):
    """The whitening N of the landmark Gram W: ``z(x) = N k(L, x)`` are the Nystrom features.

    :func:`fastkpca.execution.linalg.whitening` with the threshold ``floor`` times W's largest
    diagonal entry (pivoted Cholesky in host memory, ``eigh`` on a GPU: the same Nystrom Gram).

    Returns
    -------
    N : (r, c) float64, ``N W N^T = I_r`` (r >= 1 unless W = 0: ValueError)
    Z : (r, c) float64, the landmarks' own features ``N W``
    """
    xp = placement_of(W).xp
    top = float(xp.max(xp.linalg.diagonal(W))) if W.shape[0] else 0.0
    if not top > 0:
        raise ValueError(
            "the landmark Gram matrix k(L, L) is zero; the kernel sees no structure "
            "in the landmarks"
        )
    return linalg.whitening(W, floor * top)


def whitening_noise_gain(N) -> float:
    """``||N||_F``: independent errors of rms sigma in the kernel rows become errors of rms
    ``sigma ||N||_F`` in the Nystrom features (``E ||N e||^2 = sigma^2 ||N||_F^2``)."""
    xp = placement_of(N).xp
    return float(xp.sqrt(xp.sum(N * N)))


def nystrom_kpca(moments: KernelMoments, N, n_components: int):
    """Top principal axes of the Nystrom features ``z = N k`` from the kernel-row moments: the
    top eigenpairs (:func:`fastkpca.solvers.eigh_topk`) of the scatter ``N S N^T``, whose
    eigenvalues are those of the centered n x n Nystrom Gram.

    Returns
    -------
    eigenvalues : (n_components,) float64, descending (0 beyond the rank r)
    components : (n_components, r) float64, orthonormal principal axes in z-space
    mean : (r,) float64, the mean of z over the training data
    """
    xp = placement_of(N).xp
    scatter_z = N @ moments.scatter @ N.T
    scatter_z = (scatter_z + scatter_z.T) / 2
    r = scatter_z.shape[0]
    k = min(n_components, r)
    mean_z = N @ moments.mean
    # The rounding threshold's scale: the trace of the uncentered Nystrom Gram, sum_i |z_i|^2
    # (the centered scatter's own trace is 0 for identical rows).
    trace = xp.sum(xp.linalg.diagonal(scatter_z))
    scale = float(trace) + moments.count * float(xp.sum(mean_z * mean_z))
    with one_blas_thread():
        evals, U = eigh_topk(scatter_z, k, method="auto", rng=0, overwrite=True, scale=scale)
    return _padded(evals, U, n_components) + (mean_z,)


def _padded(evals, U, n_components):
    """Eigenpairs padded with zeros to ``n_components`` (beyond the rank), signs fixed."""
    placement = placement_of(U)
    xp = placement.xp
    k = evals.shape[0]
    eigenvalues = xp.concat([evals, _zeros(placement, (n_components - k,))])
    components = xp.concat(
        [flip_signs(U).T, _zeros(placement, (n_components - k, U.shape[0]))], axis=0
    )
    return eigenvalues, components


# --- the one-pass randomized solver ---------------------------------------------------------
def kernel_sketch(blocks, landmarks, kernel, T, shift, dtype=np.float64, working_memory_mb=None):
    """:class:`~fastkpca.statistics.covariance_sketch.ScatterSketch` ``S T`` of the kernel rows
    ``k(L, x)`` over row blocks (S never formed): one
    :func:`~fastkpca.execution.kernel_ops.fold_kernel_rows` pass a block, each chunk's products
    added to its share's float64 sketch while in cache.  ``shift`` keeps float32 products
    relative to the rows' spread; ``working_memory_mb`` is unused (kept for callers)."""
    p, q = T.shape
    placement = placement_of(T)
    low = dtype is not None and np.dtype(dtype) == np.float32
    row_dtype = "float32" if low else "float64"
    # The shift actually subtracted is its rounding to the rows' dtype; the correction uses it.
    c = placement.xp.astype(placement.asarray(shift, dtype=np.float64), placement.dtype(row_dtype))
    step = functools.partial(_sketch_chunk, c, with_columns(T, 0.0, dtype=row_dtype))
    new = functools.partial(_SketchPart, p, q, placement)
    eps = float(np.finfo(row_dtype).eps)
    sketch = _empty_sketch(p, q, placement)
    for block in blocks:
        parts = fold_kernel_rows(
            kernel, block, landmarks, step, new, dtype=row_dtype, balanced=True
        )
        sketch = sketch.merge(_block_sketch(parts, block.shape[0], c, T, eps), T)
    return sketch


def _empty_sketch(p: int, q: int, placement: Placement, eps=None) -> ScatterSketch:
    eps = float(np.finfo(np.float64).eps) if eps is None else eps
    return ScatterSketch(0, _zeros(placement, (p,)), _zeros(placement, (p, q)), eps)


class _SketchPart:
    """One share's part of a block sketch: ``[R^T (R T); 1^T R]`` transposed, in float64
    (``totals``: ``q + 1`` rows of c), over the shifted kernel rows ``R = K - shift`` it saw."""

    def __init__(self, p, q, placement: Placement):
        self.totals = _zeros(placement, (q + 1, p))
        self.products: Any = None  # its (rows, q + 1) buffer [R T, 1], made on the first chunk


def _sketch_chunk(c, T_sum, part: _SketchPart, start, stop, K):
    """Add a chunk of kernel rows K (overwritten: shifted by c) to a share's
    :class:`_SketchPart`: its sketch rows and column sums from one product
    (:func:`~fastkpca.statistics.covariance_sketch.add_sketch_chunk`, ``T_sum = [T, 0]``)."""
    b = K.shape[0]
    if part.products is None or part.products.shape[0] < b:
        placement = placement_of(K)
        part.products = placement.xp.empty(
            (b, T_sum.shape[1]), dtype=K.dtype, device=placement.device
        )
    K -= c
    add_sketch_chunk(part.totals, part.products, K, T_sum)


def _block_sketch(parts, b, c, T, eps) -> ScatterSketch:
    """The :class:`ScatterSketch` of a block of b rows from its shares' parts.

    With ``R`` the rows shifted by c and ``delta`` their mean, ``sum (r - rbar)(r - rbar)^T =
    R^T R - b delta delta^T``: the correction uses the sums of the very rows multiplied, so it
    cancels what they carry (as :func:`~fastkpca.statistics.covariance_sketch.scatter_sketch`).
    """
    p, q = T.shape
    if b == 0:
        return _empty_sketch(p, q, placement_of(T))
    totals = functools.reduce(operator.add, (part.totals for part in parts))
    delta = totals[q, :] / b
    Y = totals[:q, :].T - b * _outer(delta, delta @ T)
    return ScatterSketch(b, as_float64(c) + delta, Y, eps)


def landmark_kernel_sketch(blocks, landmarks, kernel, T, shift, dtype, working_memory_mb=None):
    """:func:`kernel_sketch` over ``(start, block)`` row blocks: the statistic
    ``RowSource.reduce`` computes over all blocks (or once per dask chunk)."""
    return kernel_sketch(
        (block for _, block in blocks), landmarks, kernel, T, shift, dtype, working_memory_mb
    )


def merged_sketches(T):
    """The merge of two kernel-row sketches against test matrix T (a picklable callable)."""
    return functools.partial(_merged_with, T)


def _merged_with(T, a, b):
    return merged(a, b, T)


def landmark_test_matrix(Z, q: int, rng, *, power_iterations: int = 2):
    """A (r, q) test matrix with orthonormal columns for the sketch of the features' scatter:
    half Gaussian (Tropp et al.'s), half the leading directions of the landmarks' centered
    features (a randomized range finder), which approximate the top principal axes."""
    placement = placement_of(Z)
    xp = placement.xp
    r = Z.shape[0]
    q = min(q, r)
    q_data = q - q // 2
    A = Z - xp.mean(Z, axis=1, keepdims=True)
    with one_blas_thread():  # thin products and QR: threads cost more than they save
        Y = A @ placement.asarray(rng.standard_normal((A.shape[1], q_data)), np.float64)
        for _ in range(power_iterations):
            Y, _ = xp.linalg.qr(Y)
            Y = A @ (A.T @ Y)
        # [Y, Gaussian]: the Gaussian columns drawn after Y's, Y written into the first ones
        M = placement.asarray(
            np.hstack([np.zeros((r, q_data)), rng.standard_normal((r, q - q_data))]), np.float64
        )
        M[:, :q_data] = Y
        Q, _ = xp.linalg.qr(M)
    return Q


def nystrom_sketch_kpca(sketch: ScatterSketch, N, Omega, n_components, *, scale=None):
    """Top principal axes of the Nystrom features from a sketch of the kernel-row scatter.

    Sketching S against ``T = N^T Omega`` gives ``N Y = C Omega``, the sketch of ``C = N S N^T``,
    from which :func:`~fastkpca.statistics.covariance_sketch.fixed_rank_psd` (Tropp et al. 2017,
    Alg. 3) recovers the top eigenpairs, never above C's.  ``scale`` (``sum_i k(x_i, x_i)``)
    sets the rounding threshold (:func:`fastkpca.solvers.postprocess_eigen`).

    Returns
    -------
    eigenvalues, components, mean : as :func:`nystrom_kpca`
    """
    k = min(n_components, Omega.shape[1])
    placement = placement_of(N)
    with one_blas_thread():  # (r, q) products, QR and SVD
        NY, Omega_host = to_host(N @ sketch.Y), to_host(Omega)
        evals, U = fixed_rank_psd(NY, Omega_host, k, eps=sketch.eps, scale=scale)
    evals, U = placement.asarray(evals), placement.asarray(U)
    return _padded(evals, U, n_components) + (N @ sketch.mean,)


def nystrom_from_exact(eigenvalues, eigenvectors, col_means):
    """Nystrom attributes of exact KPCA (all n rows as landmarks) from its dual solution:
    ``N = diag(lambda)^{-1/2} alpha^T``, identity components, ``mean = N K 1 / n`` give exact
    KPCA's projections (zero eigenvalues give zero rows), in the eigenvectors' namespace.

    Returns
    -------
    normalization : (k, n) float64
    components : (k, k) float64, the identity
    mean : (k,) float64
    """
    placement = placement_of(eigenvectors)
    xp = placement.xp
    values = placement.asarray(eigenvalues, dtype=np.float64)
    positive = values > 0
    scale = xp.where(positive, 1.0 / xp.sqrt(xp.where(positive, values, 1.0)), 0.0)
    N = (as_float64(eigenvectors) * scale).T
    identity = xp.eye(values.shape[0], dtype=xp.float64, device=placement.device)
    return N, identity, N @ placement.asarray(col_means, dtype=np.float64)
