"""Kernel-row moments: the statistic and the solver of Nystrom kernel PCA.

With landmarks L = (l_1, ..., l_c) and W = k(L, L), the Nystrom feature map is

    z(x) = N k(L, x),      N a whitening of W: N^T N = W^{-1}   (r <= c dimensional)

so that ``z(x) . z(y) = k(x, L) W^{-1} k(L, y)`` is the Nystrom approximation ``C W^{-1} C^T`` of
the Gram matrix (Williams & Seeger 2001; the NYSTROM baseline of Ghashami et al. 2016,
``papers/004`` section 3).  Kernel PCA on that approximate Gram is linear PCA on z: the top
eigenvectors of the centered covariance of z over the n training points.  With all n points as
landmarks ``C W^{-1} C^T = K`` and the method is exact KPCA.

The whitening (:func:`nystrom_whitening`)
    Any N with ``N^T N = W^{-1}`` gives the same Nystrom Gram, so the cheapest is taken: the
    inverse transposed pivoted Cholesky factor, ``N = R^{-T} P^T`` (``c^3 / 3`` flops for the
    factor, as many for the triangular inverse), not ``W^{-1/2}`` from a full ``eigh`` (about 9
    c^3 flops, and memory-bound: 52 s against 2.9 s for the factor at c = 4769 on this
    machine).  The landmarks' own features ``N W`` are the columns of R, for free.

Rank-deficient W (duplicate or nearly collinear landmarks)
    The pivoted Cholesky stops at the first pivot below :data:`EIGENVALUE_FLOOR` times W's
    largest diagonal entry; the r landmarks factored so far (the pivots) span the others to
    that accuracy, and z has r coordinates.  The floor bounds how much round-off in the kernel
    rows N amplifies (by at most ``1 / sqrt(floor)`` relative to ``||W||``, up to the
    pivoting's growth).

Two solvers for the covariance of z (the estimator's ``solver``)
    ``"exact"``: z is linear in k, so the covariance of z is ``N S N^T`` with S the centered
    scatter of the kernel rows ``k(L, x_i)``.  Each block accumulates S by one SYRK of its
    kernel block (``c^2 / 2`` flops per row) and merges it into the running total by Chan et
    al.'s pairwise update (block means subtracted first, so nothing cancels catastrophically);
    S, the mean and the count are mergeable statistics (:class:`KernelMoments`), so a tree
    reduction over blocks gives the same model.
    ``"randomized"``: S is never formed.  The sketch ``S T`` against ``T = N^T Omega`` (Omega
    r x q with orthonormal columns) costs ``2 c q`` flops per row and merges the same way
    (:mod:`.covariance_sketch`); ``N S T = (N S N^T) Omega`` is then the sketch of z's
    covariance, from which Tropp, Yurtsever, Udell & Cevher's fixed-rank PSD approximation
    (NeurIPS 2017) gives the top eigenpairs (:func:`nystrom_sketch_kpca`).  Half of Omega is
    Gaussian, half the leading directions of the landmarks' own features
    (:func:`landmark_test_matrix`): with a Gaussian Omega alone the one-pass approximation
    underestimates the top eigenvalues on the slowly decaying spectra of kernel matrices (6 %
    at q = 36 on three Gaussian clusters, n = c = 270), with the landmark directions added the
    top four are within 0.2 %.

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

Performance notes (c = 1000, d = 100, q = 60, float64 input, 2-core AVX2 machine)
    The randomized pass is one :meth:`~fastkpca.kernels.Kernel.fold_rows` per row block: each
    core takes a contiguous share of 256-row chunks and, while a chunk (1 MiB of float32 kernel
    rows) is in cache, runs the distance GEMM (2.4 us a row on one core), ``exp`` (1.4 us; numpy
    runs it on one core, hence threads over chunks rather than a threaded BLAS), the row
    preparation and the shift (0.5 us) and the sketch's two products (3.3 us): about 7.6 us a
    row per core, the GEMMs near the single-thread SGEMM rate (~80 GFLOP/s).  At n = 10^6 the
    fit took 8.7-10.5 s of CPU (9.5 s wall with other processes on the machine) where kernel
    blocks with a one-threaded ``exp`` and element-wise passes over 44 MB blocks, then the
    sketch, took 25.5 s.  The c x c work (W, its pivoted Cholesky and inverse, the test matrix,
    the fixed-rank solve) took 0.2 s together.  float32 kernel rows are used by
    ``"randomized"`` when their rounding (rms ``2e-7``), amplified by the whitening (``||N||_F``,
    100-120 on RandomNoisy with c = 1000, 2e3 on the USPS-shaped set with c = 4769), stays
    below 1e-4 of the features' scale; the held-out accuracy was the same to 5 digits either
    way.  ``"exact"`` keeps float64 rows (threaded :meth:`~fastkpca.kernels.Kernel.blocks`,
    then a SYRK per block, which dominates: 0.92 s per 11,000-row block on one core); a
    float32 SYRK's round-off in S would be amplified by up to ``1 / floor``.  The small dense
    LAPACK calls run with one BLAS thread: on a busy machine idle threads' spin-waits made a
    1000 x 1000 ``eigh`` 15x slower, and a 4769 x 30 QR took 1.1 s instead of milliseconds.

On a device (PyTorch tensors, CuPy arrays; :mod:`fastkpca.execution.arrays`)
    The same statistics hold arrays of the rows' namespace and device: the pass over the data
    folds large kernel tiles (:func:`fastkpca.execution.kernel_ops.fold_kernel_rows`, the radial
    kernels' exponent from one GEMM) into float64 accumulators on the device, with no host
    synchronisation per tile (counts are Python integers).  ``"exact"`` adds each float64
    tile's centered scatter by Chan et al.'s update, as the host does per block;
    ``"randomized"`` multiplies the shifted float32 (or float64) tiles by ``[T, 0]`` and adds
    ``[R T, 1]^T R`` to one float64 total, the shift shared by all tiles, so the sketch is
    formed once at the end (:func:`kernel_sketch`).  The c x c algebra (W, ``N S N^T``,
    ``N Y``) runs on the device in float64.  Host fallbacks, each on a c x c or c x q array
    copied once (8 MB at c = 1000): the pivoted Cholesky whitening (LAPACK ``dpstrf`` /
    ``dtrtri``; no array library offers a pivoted Cholesky), the top eigenpairs of ``N S N^T``
    (:func:`fastkpca.solvers.eigh_topk`), the fixed-rank solve of the sketch and the test
    matrix (drawn from the host generator, as on the host): their results move to the device.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
from scipy.linalg import lapack

from ..execution import one_blas_thread
from ..execution.arrays import HOST, Placement, placement_of, to_host
from ..execution.kernel_ops import fold_kernel_rows, kernel_block
from ..solvers import eigh_topk, flip_signs
from .covariance_sketch import (
    ScatterSketch,
    add_sketch_chunk,
    fixed_rank_psd,
    merged,
    with_sum_column,
)

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
        if placement.host:
            return cls(0, np.zeros(n_landmarks), np.zeros((n_landmarks, n_landmarks)))
        xp, dtype, device = placement.xp, placement.xp.float64, placement.device
        return cls(
            0,
            xp.zeros(n_landmarks, dtype=dtype, device=device),
            xp.zeros((n_landmarks, n_landmarks), dtype=dtype, device=device),
        )

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
        """Add the rows of a float64 kernel block ``K = k(X_block, L)``, which is overwritten
        (a numpy array, or a tile of the moments' device)."""
        m = K.shape[0]
        if m == 0:
            return self
        block_mean = K.mean(axis=0) if isinstance(K, np.ndarray) else _xp(K).mean(K, axis=0)
        K -= block_mean
        # K.T @ K on the same buffer is a BLAS SYRK in numpy: c^2 / 2 flops per row.
        return self.merge(KernelMoments(m, block_mean, K.T @ K))


def _xp(a):
    return placement_of(a).xp


def _copy(a):
    """A copy of a numpy or device array."""
    if isinstance(a, np.ndarray):
        return a.copy()
    return _xp(a).asarray(a, copy=True)


def _outer(a, b):
    """``outer(a, b)`` of two vectors, numpy's on the host."""
    if isinstance(a, np.ndarray):
        return np.outer(a, b)
    return a[:, None] * b[None, :]


def landmark_gram(kernel, landmarks):
    """``W = k(L, L)`` in float64, on the landmarks' device (its diagonal exact for kernels
    with a unit diagonal, as :meth:`~fastkpca.kernels.Kernel.__call__` on the host)."""
    placement = placement_of(landmarks)
    if placement.host:
        return kernel(np.asarray(landmarks, dtype=np.float64))
    xp = placement.xp
    L64 = xp.astype(landmarks, xp.float64)
    W = kernel_block(kernel, L64, L64, dtype="float64")
    if getattr(kernel, "_exact_diag_one", False):
        index = xp.arange(W.shape[0], device=placement.device)
        W[index, index] = 1.0
    return W


def _fold_device_rows(kernel, X, Y, step, init, dtype):
    """``step(state, start, stop, K)`` over the row tiles of ``k(X, Y)`` for device rows, K in
    ``dtype`` (a numpy dtype): the device half of :meth:`~fastkpca.kernels.Kernel.fold_rows`."""
    return fold_kernel_rows(kernel, X, Y, step, init, dtype=np.dtype(dtype).name)


#: :func:`kernel_moments` folds per worker thread (c x c float64 moments each: 8 MiB at 1024
#: landmarks) up to this many landmarks; above, one scatter for all threads.
FOLD_MAX_LANDMARKS = 1024


def kernel_moments(blocks, landmarks, kernel, moments: KernelMoments | None = None):
    """Accumulate :class:`KernelMoments` of ``k(L, x)`` over an iterable of row blocks.

    On the host each block is folded in small row chunks over the worker threads
    (:meth:`fastkpca.kernels.Kernel.fold_rows`), each thread holding one float64 chunk and
    c x c moments of its own (up to :data:`FOLD_MAX_LANDMARKS` landmarks; above, each block is
    split by the kernel's memory budget and added to one scatter); on a device, in large tiles.
    """
    placement = placement_of(landmarks)
    if moments is None:
        moments = KernelMoments.empty(landmarks.shape[0], placement)
    if not placement.host:  # large float64 tiles on the device, each a SYRK and a merge
        for block in blocks:
            _fold_device_rows(kernel, block, landmarks, _add_tile, lambda: moments, np.float64)
        return moments
    c = landmarks.shape[0]
    if c > FOLD_MAX_LANDMARKS:
        # c x c moments per thread would cost more memory than they save time: one scatter,
        # each block's SYRK on all of BLAS's threads.
        for block in blocks:
            for _, _, K in kernel.blocks(block, landmarks):
                moments.update(K)
                del K  # free this block before the generator computes the next one
        return moments
    for block in blocks:
        # Each worker thread folds its share of small row chunks into moments of its own (the
        # chunk's SYRK while it is in cache, BLAS on one thread), merged in row order: the
        # chunk grid depends on the rows alone, the thread count only groups the merges.
        # One-threaded SYRKs of 10^6 x 128 float64 rows after each block took 1.0 s of a
        # 1.55 s fit (2 cores); folded, the SYRKs run on every core beside the kernel values.
        for share in kernel.fold_rows(block, landmarks, _add_tile, lambda: KernelMoments.empty(c)):
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
    return KernelMoments(a.count, a.mean.copy(), a.scatter.copy()).merge(b)


def weighted_landmark_moments(W: np.ndarray, weights: np.ndarray, n_samples: int):
    """Moments of ``k(L, x)`` under the weighted landmark measure ``sum_j w_j delta(l_j)``.

    The rows are the columns of W, so the mean is ``W w`` and the scatter, scaled to stand for
    ``n_samples`` points, is ``n (W diag(w) W - W w w^T W)``: with it :func:`nystrom_kpca` solves
    Zhang & Kwok's density-weighted eigenproblem.
    """
    w = placement_of(W).asarray(to_host(weights), dtype=np.float64)
    mean = W @ w
    scatter = (W * w) @ W - _outer(mean, mean)
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


def nystrom_whitening(W: np.ndarray, floor: float = EIGENVALUE_FLOOR):
    """The whitening N of the landmark Gram W: ``z(x) = N k(L, x)`` are the Nystrom features.

    Pivoted Cholesky (LAPACK ``dpstrf``, ``c^3 / 3`` flops, a twentieth of a full ``eigh``):
    ``P^T W P = R^T R``, stopped at the first pivot below ``floor`` times W's largest diagonal
    entry, which leaves r <= c landmarks L_r (the pivots).  ``N = R_11^{-T} P_r^T`` (r x c,
    zero in the columns of the other landmarks) gives ``z(x) . z(y) = k(x, L_r) W_rr^{-1}
    k(L_r, y)``: the Nystrom approximation on the pivots, which differs from ``C W^+ C^T`` on
    all landmarks by at most the Schur complement left (every diagonal entry below the floor:
    those landmarks are numerically in the span of the pivots, e.g. duplicates).  The floor
    also bounds how much round-off in the kernel rows N amplifies (``||N||_2^2 <= 1 / r_rr^2``
    up to the pivoting's growth).

    A W in host memory (PyTorch CPU tensors) is factored by the host's LAPACK and N, Z are
    returned as tensors.  On a GPU, where no array library has a pivoted Cholesky and the host
    is the slow side (c = 1000: 67 ms for the copies and the host factor against 11 ms for a
    device ``eigh``, measured on an H200 machine), N comes from ``W = U diag(w) U^T`` on the
    device instead: ``N = diag(w_r)^{-1/2} U_r^T`` and ``Z = diag(w_r)^{1/2} U_r^T`` over the r
    eigenvalues above the same floor.  Any N with ``N^T N = W^+`` gives the same Nystrom
    Gram, so the model is the same up to rounding (its features are those of the host's N
    rotated) wherever no landmark falls between the two rules' floors.

    Returns
    -------
    N : (r, c) float64, ``N W N^T = I_r`` on the pivots (r >= 1 unless W = 0: ValueError)
    Z : (r, c) float64, the landmarks' own features ``N W`` (columns of R, un-permuted: free)
    """
    placement = placement_of(W)
    if not placement.in_host_memory:
        return _whitening_by_eigh(W, floor, placement)
    if not placement.host:
        N, Z = nystrom_whitening(to_host(W), floor)
        return placement.asarray(N), placement.asarray(Z)
    W = np.asarray(W, dtype=np.float64)
    c = W.shape[0]
    top = float(np.max(np.diag(W), initial=0.0))
    if not top > 0:
        raise ValueError(
            "the landmark Gram matrix k(L, L) is zero; the kernel sees no structure "
            "in the landmarks"
        )
    with one_blas_thread():  # small dense LAPACK: see the module notes
        R, piv, rank, _ = lapack.dpstrf(W, tol=floor * top, lower=0)
        rank = max(int(rank), 1)
        R = np.triu(R[:rank])
        R_inv, _ = lapack.dtrtri(R[:, :rank], lower=0)
    order = piv - 1
    N = np.zeros((rank, c))
    N[:, order[:rank]] = np.triu(R_inv).T
    Z = np.empty((rank, c))
    Z[:, order] = R
    return N, Z


def _whitening_by_eigh(W, floor: float, placement: Placement):
    """:func:`nystrom_whitening` of a GPU array, from its ``eigh`` on the device."""
    xp = placement.xp
    top = float(xp.max(xp.linalg.diagonal(W)))
    if not top > 0:
        raise ValueError(
            "the landmark Gram matrix k(L, L) is zero; the kernel sees no structure "
            "in the landmarks"
        )
    w, U = xp.linalg.eigh(W)  # ascending
    rank = max(int(xp.sum(w > floor * top)), 1)
    w, U = w[-rank:], U[:, -rank:]
    root = xp.sqrt(xp.clip(w, floor * top, None))
    return (U / root).T, (U * root).T


def whitening_noise_gain(N: np.ndarray) -> float:
    """``||N||_F``: independent errors of rms sigma in the kernel rows become errors of rms
    ``sigma ||N||_F`` in the Nystrom features (``E ||N e||^2 = sigma^2 ||N||_F^2``)."""
    if isinstance(N, np.ndarray):
        return float(np.linalg.norm(N))
    xp = _xp(N)
    return float(xp.sqrt(xp.sum(N * N)))


def nystrom_kpca(moments: KernelMoments, N: np.ndarray, n_components: int):
    """Top principal axes of the Nystrom features ``z = N k`` from the kernel-row moments.

    The scatter of z is ``N S N^T`` (r x r, S the kernel-row scatter); its eigenvalues are those
    of the centered n x n Nystrom Gram.  Its top eigenpairs come from
    :func:`fastkpca.solvers.eigh_topk` (``auto``: dense LAPACK up to r = 1000, block Krylov
    above; never a full eigendecomposition).

    Returns
    -------
    eigenvalues : (n_components,) float64, descending (0 beyond the rank r)
    components : (n_components, r) float64, orthonormal principal axes in z-space
    mean : (r,) float64, the mean of z over the training data

    On a device ``N S N^T`` is formed there (float64) and its top eigenpairs are computed on a
    host copy (r x r), then moved back.
    """
    placement = placement_of(N)
    scatter_z = N @ moments.scatter @ N.T
    scatter_z = (scatter_z + scatter_z.T) / 2
    r = scatter_z.shape[0]
    k = min(n_components, r)
    mean_z = N @ moments.mean
    # The rounding threshold's scale: the trace of the uncentered Nystrom Gram, sum_i |z_i|^2
    # (the centered scatter's own trace is 0 for identical rows).
    trace = (
        np.trace(scatter_z)
        if placement.host
        else placement.xp.sum(placement.xp.linalg.diagonal(scatter_z))
    )
    scale = float(trace) + moments.count * float(mean_z @ mean_z)
    with one_blas_thread():
        evals, U = eigh_topk(
            to_host(scatter_z), k, method="auto", rng=0, overwrite=True, scale=scale
        )
    return _padded(evals, U, n_components, placement) + (mean_z,)


def _padded(evals, U, n_components, placement: Placement = HOST):
    """Eigenpairs padded with zeros to ``n_components`` (beyond the rank), signs fixed; on
    ``placement``'s device."""
    k = evals.shape[0]
    eigenvalues = np.zeros(n_components)
    eigenvalues[:k] = evals
    components = np.zeros((n_components, U.shape[0]))
    components[:k] = flip_signs(U).T
    if placement.host:
        return eigenvalues, components
    return placement.asarray(eigenvalues), placement.asarray(components)


# --- the one-pass randomized solver ---------------------------------------------------------
def kernel_sketch(blocks, landmarks, kernel, T, shift, dtype=np.float64, working_memory_mb=None):
    """:class:`~fastkpca.statistics.covariance_sketch.ScatterSketch` ``S T`` of the kernel rows
    ``k(L, x)`` over an iterable of row blocks, S their centered scatter (never formed).

    Each row block is one :meth:`~fastkpca.kernels.Kernel.fold_rows` pass: every thread computes
    small chunks of kernel rows (``dtype``: float32 rows are computed and multiplied in float32)
    and, while a chunk is in cache, adds its products to its own float64 sketch
    (:func:`_sketch_chunk`), ``2 c q`` flops a row against the ``c^2 / 2`` of the scatter's
    SYRK; the threads' sketches and block sketches then merge exactly (:func:`_block_sketch`).
    ``shift`` (a point near the rows' mean, shared by every block) keeps float32 products
    relative to the rows' spread.  ``working_memory_mb`` is not used (the chunks are about
    1 MiB, :func:`fastkpca.kernels.kernel_chunk_rows`); it stays for callers that pass it.
    """
    p, q = T.shape
    low = dtype is not None and np.dtype(dtype) == np.float32
    row_dtype = np.float32 if low else np.float64
    if not placement_of(T).host:
        return _device_kernel_sketch(blocks, landmarks, kernel, T, shift, row_dtype)
    # The shift actually subtracted is its rounding to the rows' dtype; the correction uses it.
    c = np.asarray(shift, dtype=np.float64).astype(row_dtype)
    step = functools.partial(_sketch_chunk, c, with_sum_column(T, row_dtype))
    sketch = ScatterSketch.empty(p, q)
    for block in blocks:
        parts = kernel.fold_rows(
            block, landmarks, step, functools.partial(_SketchPart, p, q), dtype=row_dtype
        )
        part = _block_sketch(parts, block.shape[0], c, T, float(np.finfo(row_dtype).eps))
        sketch = sketch.merge(part, T)
    return sketch


def _device_kernel_sketch(blocks, landmarks, kernel, T, shift, row_dtype) -> ScatterSketch:
    """:func:`kernel_sketch` on a device: every tile of shifted kernel rows ``R`` (``row_dtype``)
    adds ``[R T, 1]^T R`` (one product with ``[T, 0]``, then one with R, in ``row_dtype``) to a
    float64 total on the device; the shift is shared by all tiles, so the totals of all blocks
    add up and the sketch is formed once (:func:`_block_sketch`), with no host synchronisation
    per tile."""
    placement = placement_of(T)
    xp = placement.xp
    p, q = T.shape
    dtype = placement.dtype(row_dtype)
    # The shift actually subtracted is its rounding to the rows' dtype; the correction uses it.
    c = xp.astype(placement.asarray(shift, dtype=np.float64), dtype)
    T_sum = xp.zeros((p, q + 1), dtype=dtype, device=placement.device)
    T_sum[:, :q] = xp.astype(T, dtype)
    totals = xp.zeros((q + 1, p), dtype=xp.float64, device=placement.device)
    count = [0]

    def add(state, start, stop, K):
        K -= c  # the tile is this step's to overwrite
        A = K @ T_sum
        A[:, q] = 1.0
        totals[...] += xp.astype(A.T @ K, xp.float64)
        count[0] += stop - start

    for block in blocks:
        _fold_device_rows(kernel, block, landmarks, add, _no_state, row_dtype)
    return _block_sketch([totals], count[0], c, T, float(np.finfo(row_dtype).eps))


def _no_state():
    return None


class _SketchPart:
    """One thread's share of a block sketch: ``[R^T (R T); 1^T R]`` transposed, in float64
    (``totals``: ``q + 1`` rows of c), over the shifted kernel rows ``R = K - shift`` it saw."""

    def __init__(self, p, q):
        self.totals = np.zeros((q + 1, p))
        self.products = None  # its (rows, q + 1) buffer [R T, 1], made on the first chunk


def _sketch_chunk(c, T_sum, part: _SketchPart, start, stop, K):
    """Add a chunk of kernel rows K (overwritten: shifted by c) to a thread's
    :class:`_SketchPart`: its sketch rows and column sums from one product
    (:func:`~fastkpca.statistics.covariance_sketch.add_sketch_chunk`, ``T_sum = [T, 0]``)."""
    b = K.shape[0]
    if part.products is None or part.products.shape[0] < b:
        part.products = np.empty((b, T_sum.shape[1]), dtype=K.dtype)
    K -= c
    add_sketch_chunk(part.totals, part.products, K, T_sum)


def _block_sketch(parts, b, c, T, eps) -> ScatterSketch:
    """The :class:`ScatterSketch` of a block of b rows from its threads' parts.

    With ``R`` the rows shifted by c and ``delta`` their mean, ``sum (r - rbar)(r - rbar)^T =
    R^T R - b delta delta^T``: the correction uses the sums of the very rows multiplied, so it
    cancels what they carry (as :func:`~fastkpca.statistics.covariance_sketch.scatter_sketch`).
    """
    p, q = T.shape
    placement = placement_of(T)
    if b == 0:
        empty = ScatterSketch.empty(p, q)
        if placement.host:
            return empty
        return ScatterSketch(0, placement.asarray(empty.mean), placement.asarray(empty.Y), eps)
    totals = functools.reduce(operator.add, (getattr(part, "totals", part) for part in parts))
    delta = totals[q] / b
    if not placement.host:
        xp = placement.xp
        Y = totals[:q].T - b * _outer(delta, delta @ T)
        return ScatterSketch(b, xp.astype(c, xp.float64) + delta, Y, eps)
    Y = np.ascontiguousarray(totals[:q].T)
    Y -= b * np.outer(delta, delta @ T)
    return ScatterSketch(b, c.astype(np.float64) + delta, Y, eps)


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
    if placement_of(T).host:
        return merged(a, b, T)
    # Chan et al.'s update of ScatterSketch.merge, in the device's namespace.
    if b.n == 0 or a.n == 0:
        kept = a if b.n == 0 else b
        return ScatterSketch(kept.n, _copy(kept.mean), _copy(kept.Y), kept.eps)
    n = a.n + b.n
    d = a.mean - b.mean
    Y = a.Y + b.Y + (a.n * b.n / n) * _outer(d, d @ T)
    return ScatterSketch(n, a.mean - d * (b.n / n), Y, max(a.eps, b.eps))


def landmark_test_matrix(Z: np.ndarray, q: int, rng, *, power_iterations: int = 2):
    """A (r, q) test matrix with orthonormal columns for the sketch of the features' scatter.

    Half its columns are Gaussian (Tropp et al.'s test matrix, whose guarantee they keep:
    enlarging the range of the test matrix only improves the Nystrom approximation
    ``Y (Omega^T Y)^+ Y^T``, which is monotone in that range and dominated by the matrix), the
    other half the leading left singular directions of the landmarks' centered features Z
    (a randomized range finder with ``power_iterations``, ``O(r c q)``): the landmarks are a
    sample of the rows, so these directions approximate the top principal axes, and a one-pass
    sketch against them recovers the axes where a Gaussian one, on the slowly decaying spectra
    of kernel matrices, leaves a bias (measured in ``benchmarks/bench_nystrom.py``).
    """
    placement = placement_of(Z)
    if not placement.host and placement.in_host_memory:  # r x c, small: the host's LAPACK
        return placement.asarray(
            landmark_test_matrix(to_host(Z), q, rng, power_iterations=power_iterations)
        )
    # On a GPU the products and QRs run there; the draws are the host generator's, as on the
    # host.
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


def nystrom_sketch_kpca(
    sketch: ScatterSketch, N: np.ndarray, Omega: np.ndarray, n_components, *, scale=None
):
    """Top principal axes of the Nystrom features from a sketch of the kernel-row scatter.

    The scatter of ``z = N k`` is ``C = N S N^T``.  Sketching S against ``T = N^T Omega``
    (Omega r x q with orthonormal columns) gives ``N Y = C Omega``, the sketch of C itself, from
    which Tropp, Yurtsever, Udell & Cevher's fixed-rank PSD approximation (NeurIPS 2017, Alg. 3;
    :func:`~fastkpca.statistics.covariance_sketch.fixed_rank_psd`) recovers the top
    ``n_components`` eigenpairs; it never exceeds C's eigenvalues, and is exact when C has rank
    at most q.  ``scale`` (the kernel's ``sum_i k(x_i, x_i)``, None: unknown) sets the rounding
    threshold of the eigenvalues (:func:`fastkpca.solvers.postprocess_eigen`).

    Returns
    -------
    eigenvalues, components, mean : as :func:`nystrom_kpca`
    """
    q = Omega.shape[1]
    k = min(n_components, q)
    placement = placement_of(N)
    # On a device ``N Y`` is formed there and the (r, q) solve runs on host copies.
    NY, Omega_host = to_host(N @ sketch.Y), to_host(Omega)
    with one_blas_thread():  # (r, q) products, QR and SVD
        evals, U = fixed_rank_psd(NY, Omega_host, k, eps=sketch.eps, scale=scale)
    return _padded(evals, U, n_components, placement) + (N @ sketch.mean,)


def nystrom_from_exact(eigenvalues, eigenvectors, col_means):
    """Nystrom attributes of exact KPCA (all n rows as landmarks) from its dual solution.

    With alpha the unit eigenvectors of the centered Gram and lambda their eigenvalues,
    ``N = diag(lambda)^{-1/2} alpha^T`` (k x n), identity components and ``mean = N K 1 / n``
    give ``(N k(X, x) - mean)`` = exact KPCA's centered projections (alpha is orthogonal to the
    constant vector, so the other centering terms vanish); zero eigenvalues give zero rows.

    Returns
    -------
    normalization : (k, n) float64
    components : (k, k) float64, the identity
    mean : (k,) float64
    """
    placement = placement_of(eigenvectors)
    values = np.asarray(to_host(eigenvalues), dtype=np.float64)
    scale = np.zeros_like(values)
    scale[values > 0] = 1.0 / np.sqrt(values[values > 0])
    if not placement.host:
        N = (placement.asarray(eigenvectors, dtype=np.float64) * placement.asarray(scale)).T
        identity = placement.asarray(np.eye(values.shape[0]))
        return N, identity, N @ placement.asarray(to_host(col_means), dtype=np.float64)
    N = (np.asarray(eigenvectors, dtype=np.float64) * scale).T
    return N, np.eye(values.shape[0]), N @ np.asarray(col_means, dtype=np.float64)
