"""Kernel-row moments: the statistic and the solver of Nystrom kernel PCA.

With landmarks L = (l_1, ..., l_c) and W = k(L, L), the Nystrom feature map is

    z(x) = W^{-1/2} k(L, x)                                   (c-dimensional)

so that ``z(x) . z(y) = k(x, L) W^{-1} k(L, y)`` is the Nystrom approximation ``C W^{-1} C^T`` of
the Gram matrix (Williams & Seeger 2001; the NYSTROM baseline of Ghashami et al. 2016,
``papers/004`` section 3).  Kernel PCA on that approximate Gram is linear PCA on z: the top
eigenvectors of the c x c centered covariance of z over the n training points.  With all n
points as landmarks ``C W^{-1} C^T = K`` and the method is exact KPCA.

Working in one pass over row blocks, and never with an n x c matrix
    z is linear in k, so the covariance of z is ``W^{-1/2} S W^{-1/2}`` with S the centered
    scatter of the kernel rows ``k(L, x_i)``.  Each block accumulates S by one SYRK of its
    kernel block (``c^2 / 2`` flops per row) and merges it into the running total by Chan et al.'s
    pairwise update (block means subtracted first, so nothing cancels catastrophically); z itself
    is never formed, which saves the ``c^2`` flops per row of ``k @ W^{-1/2}``.  S, the mean and
    the count are mergeable statistics (:class:`KernelMoments`), so a tree reduction over blocks
    gives the same model.

Rank-deficient W (duplicate or nearly collinear landmarks)
    ``W^{-1/2}`` is the pseudo-inverse square root over the eigenvalues of W above
    :data:`EIGENVALUE_FLOOR` times the largest.  Dropped directions carry at most that fraction of
    W's spectrum, far below any component KPCA can resolve, while the floor bounds how much the
    float64 round-off in S is amplified (by at most 1 / floor relative to ``||W||``).

Density weights (``landmarks="kmeans"``, Zhang & Kwok 2009)
    Scaling the landmarks by any positive weights leaves ``C W^{-1} C^T`` unchanged
    (``C D (D W D)^{-1} D C^T = C W^{-1} C^T``), so with the covariance taken over all n points
    (``covariance="data"``, the default) the cluster-size weights cannot matter: k-means only
    chooses *where* the landmarks are.  The weights matter when the data covariance is replaced by
    the weighted landmark measure ``sum_j w_j delta(l_j)`` (``covariance="landmarks"``): that is
    Zhang & Kwok's density-weighted eigenproblem ``S^{1/2} W S^{1/2}`` (S = diag(cluster sizes)),
    here as the covariance ``W^{1/2} diag(w) W^{1/2}`` of z over the landmarks, and it needs no
    pass over the data after the landmarks are chosen.  Every landmark method stores its weights
    in ``landmark_weights_`` (uniform: 1/c; rls: inverse inclusion probabilities).

Performance notes (c = 1000, d = 100, float64, one 11,000-row block, one core)
    The SYRK takes 0.59 s, the kernel block 0.19 s (0.12 s the ``x . l`` GEMM, 0.07 s the
    distance / exp passes), the block mean and merge 0.07 s: the covariance pass is ~70% SYRK.
    numpy's ``K.T @ K`` already calls SYRK (1.7x faster than the full GEMM; blocked GEMMs over
    the upper triangle were no faster).  Computing the cross term in float32 for float32 input
    would save 0.04 s of 0.85 s (4%) while adding float32 round-off to the kernel values, which
    ``W^{-1/2}`` amplifies, so the kernels module's float64 blocks are used as they are; a float32
    SYRK is ruled out for the same reason (its round-off in S is amplified by up to 1 / floor).
    The two c x c eigendecompositions run with one BLAS thread: LAPACK's tridiagonal reduction
    is memory-bound level-2 BLAS, and on a busy machine idle threads' spin-waits made a
    1000 x 1000 ``eigh`` 15x slower (4 s instead of 0.27 s, measured on the 2-core development
    machine under load).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la

from ..solvers import eigh_topk, flip_signs, one_blas_thread

__all__ = [
    "KernelMoments",
    "kernel_moments",
    "landmark_kernel_moments",
    "merged_moments",
    "weighted_landmark_moments",
    "nystrom_normalization",
    "nystrom_kpca",
    "EIGENVALUE_FLOOR",
]

#: Eigenvalues of W below this fraction of the largest are treated as 0 (pseudo-inverse).
EIGENVALUE_FLOOR = 1e-10


@dataclass
class KernelMoments:
    """Count, mean and centered scatter of kernel rows ``k(L, x)``, in float64; mergeable.

    ``scatter = sum_i (k_i - mean)(k_i - mean)^T`` over the ``count`` rows seen.
    """

    count: int
    mean: np.ndarray
    scatter: np.ndarray

    @classmethod
    def empty(cls, n_landmarks: int) -> KernelMoments:
        return cls(0, np.zeros(n_landmarks), np.zeros((n_landmarks, n_landmarks)))

    def merge(self, other: KernelMoments) -> KernelMoments:
        """Pool two sets of rows (Chan, Golub & LeVeque's pairwise update); returns self."""
        if other.count == 0:
            return self
        if self.count == 0:
            self.count = other.count
            self.mean, self.scatter = other.mean.copy(), other.scatter.copy()
            return self
        n1, n2 = self.count, other.count
        delta = other.mean - self.mean
        self.scatter += other.scatter
        self.scatter += (n1 * n2 / (n1 + n2)) * np.outer(delta, delta)
        self.mean += delta * (n2 / (n1 + n2))
        self.count = n1 + n2
        return self

    def update(self, K: np.ndarray) -> KernelMoments:
        """Add the rows of a float64 kernel block ``K = k(X_block, L)``, which is overwritten."""
        m = K.shape[0]
        if m == 0:
            return self
        block_mean = K.mean(axis=0)
        K -= block_mean
        # K.T @ K on the same buffer is a BLAS SYRK in numpy: c^2 / 2 flops per row.
        return self.merge(KernelMoments(m, block_mean, K.T @ K))


def kernel_moments(blocks, landmarks, kernel, moments: KernelMoments | None = None):
    """Accumulate :class:`KernelMoments` of ``k(L, x)`` over an iterable of row blocks.

    Each block is split further by the kernel's memory budget, so only one float64 kernel block
    of ``chunk_rows(c)`` rows by c columns is alive at a time.
    """
    moments = KernelMoments.empty(landmarks.shape[0]) if moments is None else moments
    for block in blocks:
        for _, _, K in kernel.blocks(block, landmarks):
            moments.update(K)
            del K  # free this block before the generator computes the next one
    return moments


def landmark_kernel_moments(blocks, landmarks, kernel) -> KernelMoments:
    """:class:`KernelMoments` of ``k(L, x)`` over ``(start, block)`` row blocks: the statistic
    ``RowSource.reduce`` computes over all blocks (or once per dask chunk)."""
    return kernel_moments((block for _, block in blocks), landmarks, kernel)


def merged_moments(a: KernelMoments, b: KernelMoments) -> KernelMoments:
    """``a`` and ``b`` pooled into a new object (neither is modified, as a Dask tree needs)."""
    return KernelMoments(a.count, a.mean.copy(), a.scatter.copy()).merge(b)


def weighted_landmark_moments(W: np.ndarray, weights: np.ndarray, n_samples: int):
    """Moments of ``k(L, x)`` under the weighted landmark measure ``sum_j w_j delta(l_j)``.

    The rows are the columns of W, so the mean is ``W w`` and the scatter, scaled to stand for
    ``n_samples`` points, is ``n (W diag(w) W - W w w^T W)``: with it :func:`nystrom_kpca` solves
    Zhang & Kwok's density-weighted eigenproblem.
    """
    w = np.asarray(weights, dtype=np.float64)
    mean = W @ w
    scatter = (W * w) @ W - np.outer(mean, mean)
    scatter = n_samples * (scatter + scatter.T) / 2
    return KernelMoments(int(n_samples), mean, scatter)


def nystrom_normalization(W: np.ndarray, floor: float = EIGENVALUE_FLOOR):
    """Eigenpairs of W kept for ``W^{-1/2}``: those above ``floor`` times the largest.

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


def nystrom_kpca(moments: KernelMoments, values, vectors, n_components: int):
    """Top principal axes of the Nystrom features from the kernel-row moments.

    With ``W = V diag(values) V^T`` (kept part), the features in W's eigenbasis are
    ``y = diag(values)^{-1/2} V^T k`` and their scatter is ``B^T S B`` (B = V diag(values)^{-1/2}),
    an r x r matrix whose eigenvalues are those of the centered n x n Nystrom Gram.

    Returns
    -------
    eigenvalues : (n_components,) float64, descending (0 beyond the rank of W)
    components : (n_components, c) float64, orthonormal principal axes in z-space
    mean : (c,) float64, the mean of z over the training data
    normalization : (c, c) float64, ``W^{-1/2}`` (pseudo-inverse square root)
    """
    B = vectors / np.sqrt(values)
    scatter_y = B.T @ moments.scatter @ B
    scatter_y = (scatter_y + scatter_y.T) / 2
    r = scatter_y.shape[0]
    k = min(n_components, r)
    with one_blas_thread():
        evals, U = eigh_topk(scatter_y, k, method="dense")
    # Axes in z-space (z = V y); signs fixed on the axes themselves.
    axes = flip_signs(vectors @ U)
    eigenvalues = np.zeros(n_components)
    eigenvalues[:k] = evals
    components = np.zeros((n_components, vectors.shape[0]))
    components[:k] = axes.T
    normalization = B @ vectors.T
    return eigenvalues, components, normalization @ moments.mean, normalization
