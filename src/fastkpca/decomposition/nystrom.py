"""Nystrom kernel PCA: exact linear PCA on the Nystrom features of c landmarks.

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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
from sklearn.utils.validation import check_is_fitted

from .._landmarks import LANDMARK_METHODS, ReservoirSampler, one_blas_thread, select_landmarks
from .._utils import check_block, check_int, is_block_source, is_dask_array
from ..solvers import eigh_topk, flip_signs
from ._base import BaseKPCA

__all__ = [
    "NystromKPCA",
    "KernelMoments",
    "kernel_moments",
    "block_moments",
    "merged_moments",
    "weighted_landmark_moments",
    "nystrom_normalization",
    "nystrom_kpca",
    "DEFAULT_N_LANDMARKS",
    "EIGENVALUE_FLOOR",
]

#: ``n_landmarks=None`` means this many, capped at n.
DEFAULT_N_LANDMARKS = 1000

#: Eigenvalues of W below this fraction of the largest are treated as 0 (pseudo-inverse).
EIGENVALUE_FLOOR = 1e-10

COVARIANCES = ("data", "landmarks")


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


def block_moments(blocks, landmarks, kernel) -> KernelMoments:
    """:class:`KernelMoments` of ``(start, block)`` pairs: the per-chunk statistic of a Dask fit."""
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


class NystromKPCA(BaseKPCA):
    """Kernel PCA on the Nystrom approximation ``C W^{-1} C^T`` of the Gram matrix.

    Exact linear PCA of the Nystrom features ``z(x) = W^{-1/2} k(L, x)`` over c landmarks L,
    computed in one pass over row blocks with O(c^2) memory (see the module notes); with all n
    points as landmarks it is exact KPCA.  Fit costs ``n c (d + c / 2)`` flops plus the landmark
    selection; transform ``c (d + k)`` per row.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives min(10, n_samples, n_landmarks).
    kernel, gamma, degree, coef0, nu
        Kernel spec, as for every fastkpca estimator (see :func:`fastkpca.kernels.make_kernel`).
        When X is a stream of blocks, ``gamma="scale"`` / ``"median"`` are resolved on the
        landmarks (a uniform sample of the stream for ``"uniform"``).
    n_landmarks : int or None
        Number of landmarks c; None gives ``min(1000, n_samples)``.  Values above n_samples are
        capped at n_samples (as ``sklearn.kernel_approximation.Nystroem`` does).
    landmarks : {"uniform", "kmeans", "rls"} or array of shape (c, n_features)
        ``"uniform"``: a uniformly random subset of the rows (on a stream of blocks, the same
        subset by reservoir sampling); ``"kmeans"``: k-means centres with cluster sizes as
        weights (density-weighted Nystrom, Zhang & Kwok 2009); ``"rls"``: recursive ridge
        leverage score sampling (Musco & Musco 2017), which finds small clusters and outliers
        that uniform sampling misses.  An array gives the landmarks directly (``n_landmarks``
        is then ignored) and needs a single pass over the data.  Cost beyond the covariance
        pass: none for ``"uniform"``; O(n c^2) for ``"rls"`` (measured 5-8x a uniform fit at
        n = 4e4, c = 400); k-means iterations for ``"kmeans"`` (``MiniBatchKMeans`` above
        20000 rows; measured 10x).
    covariance : {"data", "landmarks"}
        ``"data"``: the covariance of z over all training rows (the Nystrom approximation's exact
        KPCA; landmark weights cancel).  ``"landmarks"``: over the landmarks weighted by
        ``landmark_weights_`` -- Zhang & Kwok's density-weighted eigenproblem with ``kmeans``,
        subsampled KPCA with ``uniform``; no pass over the data after landmark selection (a
        one-shot stream suffices).
    random_state : int, Generator or None
        Landmark selection and gamma heuristics.

    Attributes
    ----------
    landmarks_ : (n_landmarks_, n_features) the landmarks, in the training data's dtype.
    landmark_weights_ : (n_landmarks_,) float64 density weights, summing to 1.
    normalization_ : (n_landmarks_, n_landmarks_) ``W^{-1/2}`` (pseudo-inverse square root).
    mean_ : (n_landmarks_,) mean of the Nystrom features z over the training data.
    components_ : (n_components_, n_landmarks_) principal axes in z-space (orthonormal rows).
    eigenvalues_ : (n_components_,) eigenvalues of the centered n x n Nystrom Gram, descending.
    kernel_ : the resolved Kernel.
    n_landmarks_, n_samples_seen_, n_components_, n_features_in_ : ints.

    Notes
    -----
    ``transform(x) = (z(x) - mean_) @ components_.T``, the projections on the principal axes, on
    the scale of ``sklearn.decomposition.KernelPCA.transform`` (and equal to
    ``make_pipeline(Nystroem(...), PCA(...))`` for the same landmarks, up to column signs).

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import NystromKPCA
    >>> X = np.random.default_rng(0).standard_normal((500, 5))
    >>> model = NystromKPCA(3, n_landmarks=100, landmarks="rls", random_state=0).fit(X)
    >>> model.transform(X[:2]).shape
    (2, 3)
    """

    _accepts_sparse = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        n_landmarks=None,
        landmarks="uniform",
        covariance="data",
        random_state=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.n_landmarks = n_landmarks
        self.landmarks = landmarks
        self.covariance = covariance
        self.random_state = random_state

    # --- fit ------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on an array / CSR matrix, a dask array, or an iterable of row blocks.

        A dask array is fitted as the in-memory array with the same seed (same landmarks for
        ``"uniform"``; ``"kmeans"`` / ``"rls"`` on a subsample of at most
        ``fastkpca.dask.LANDMARK_SUBSAMPLE`` rows), the moments reduced over its chunks by
        :func:`merged_moments` up a tree (see :mod:`fastkpca.dask`).

        A block source must be re-iterable (a list of blocks, or a reader whose ``__iter__``
        restarts) for ``landmarks="uniform"`` with ``covariance="data"``: the first pass draws
        the landmarks by reservoir sampling, the second accumulates the covariance.  Given
        landmarks, or ``covariance="landmarks"``, need one pass, so a generator will do.
        ``"kmeans"`` and ``"rls"`` need the data in memory.
        """
        n_landmarks = check_int("n_landmarks", self.n_landmarks, low=1, allow_none=True)
        if self.covariance not in COVARIANCES:
            raise ValueError(f"covariance must be one of {COVARIANCES}, got {self.covariance!r}")
        given = not isinstance(self.landmarks, str)
        if not given and self.landmarks not in LANDMARK_METHODS:
            raise ValueError(
                f"unknown landmarks method {self.landmarks!r}; choose one of "
                f"{LANDMARK_METHODS} or pass an array of landmark rows"
            )
        rng = self._make_rng()
        # The gamma heuristics draw from their own stream, so the landmark draws do not depend
        # on whether gamma is resolved before (arrays) or after (streams) the landmarks.
        kernel_rng = np.random.default_rng(int(rng.integers(2**63)))
        if is_dask_array(X):
            self._fit_dask(X, n_landmarks, rng, kernel_rng)
        elif is_block_source(X):
            self._fit_stream(X, n_landmarks, rng, kernel_rng)
        else:
            self._fit_array(X, n_landmarks, rng, kernel_rng)
        return self

    def _check_given_landmarks(self, n_features):
        return check_block(self.landmarks, n_features=n_features, name="landmarks")

    def _fit_array(self, X, n_landmarks, rng, kernel_rng):
        X = self._validate_fit_data(X)
        n = X.shape[0]
        kernel = self._resolve_kernel(X, kernel_rng)
        if isinstance(self.landmarks, str):
            c = min(n_landmarks or DEFAULT_N_LANDMARKS, n)
            self._resolve_n_components(min(n, c), what="min(n_samples, n_landmarks)")
            L, weights = select_landmarks(
                X, self.landmarks, c, kernel, rng, target_rank=self.n_components_
            )
        else:
            L = self._check_given_landmarks(X.shape[1]).astype(X.dtype, copy=False)
            if L.shape[0] == 0:
                raise ValueError("landmarks: the landmark array has no rows")
            self._resolve_n_components(min(n, L.shape[0]), what="min(n_samples, n_landmarks)")
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
        if self.covariance == "data":
            moments = kernel_moments([X], L, kernel)
        else:
            moments = weighted_landmark_moments(kernel(L.astype(np.float64)), weights, n)
        self._store(L, weights, moments)

    def _fit_dask(self, X, n_landmarks, rng, kernel_rng):
        """The array fit on a dask array: the same draws, the moments reduced over the chunks."""
        from .. import dask as fk_dask

        data = fk_dask.DaskRowBlocks(X, accept_sparse=True)
        self.n_features_in_ = n_features = data.n_features
        n = data.n_samples
        kernel = fk_dask.resolve_kernel(self, data, kernel_rng)
        if isinstance(self.landmarks, str):
            c = min(n_landmarks or DEFAULT_N_LANDMARKS, n)
            self._resolve_n_components(min(n, c), what="min(n_samples, n_landmarks)")
            L, weights = fk_dask.select_landmarks(
                data, self.landmarks, c, kernel, rng, target_rank=self.n_components_
            )
        else:
            L = self._check_given_landmarks(n_features).astype(data.dtype, copy=False)
            if L.shape[0] == 0:
                raise ValueError("landmarks: the landmark array has no rows")
            self._resolve_n_components(min(n, L.shape[0]), what="min(n_samples, n_landmarks)")
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
        if self.covariance == "data":
            moments = data.reduce(block_moments, merged_moments, L, kernel)
        else:
            moments = weighted_landmark_moments(kernel(L.astype(np.float64)), weights, n)
        self._store(L, weights, moments)

    def _fit_stream(self, source, n_landmarks, rng, kernel_rng):
        given = not isinstance(self.landmarks, str)
        if not given and self.landmarks != "uniform":
            raise ValueError(
                f"landmarks={self.landmarks!r} needs the data in memory; from a "
                "stream of row blocks use landmarks='uniform' (reservoir sampling) "
                "or an array of landmarks"
            )
        one_pass = given or self.covariance == "landmarks"
        if not one_pass and isinstance(source, Iterator):
            raise ValueError(
                "X is a one-shot iterator (e.g. a generator), but "
                "landmarks='uniform' with covariance='data' reads the blocks twice "
                "(reservoir sampling, then the covariance); pass a re-iterable "
                "source (a list of blocks, a reader whose __iter__ restarts), an "
                "array of landmarks, or covariance='landmarks'"
            )
        blocks = _checked_blocks(source)
        if given:
            first = next(blocks, None)
            if first is None:
                raise ValueError("X: the block source yielded no rows")
            L = self._check_given_landmarks(first.shape[1]).astype(first.dtype, copy=False)
            if L.shape[0] == 0:
                raise ValueError("landmarks: the landmark array has no rows")
            self.n_features_in_ = first.shape[1]
            kernel = self._resolve_kernel(L, kernel_rng)
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
            moments = kernel_moments(_chain(first, blocks), L, kernel)
            n = moments.count
            if self.covariance == "landmarks":
                moments = weighted_landmark_moments(kernel(L.astype(np.float64)), weights, n)
        else:
            c = n_landmarks or DEFAULT_N_LANDMARKS
            reservoir = ReservoirSampler(c, rng)
            for block in blocks:
                reservoir.update(block)
            if reservoir.n_seen == 0:
                raise ValueError("X: the block source yielded no rows")
            L = reservoir.sample()
            n = reservoir.n_seen
            self.n_features_in_ = L.shape[1]
            kernel = self._resolve_kernel(L, kernel_rng)
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
            if self.covariance == "data":
                moments = kernel_moments(_checked_blocks(source, self.n_features_in_), L, kernel)
                if moments.count != n:
                    raise ValueError(
                        f"the block source gave {n} rows on the first pass and "
                        f"{moments.count} on the second; it must yield the same "
                        "rows every time it is iterated"
                    )
            else:
                moments = weighted_landmark_moments(kernel(L.astype(np.float64)), weights, n)
        self._resolve_n_components(min(n, L.shape[0]), what="min(n_samples, n_landmarks)")
        self._store(L, weights, moments, n_samples=n)

    def _store(self, L, weights, moments, n_samples=None):
        W = self.kernel_(L.astype(np.float64))
        values, vectors = nystrom_normalization(W)
        eigenvalues, components, mean, normalization = nystrom_kpca(
            moments, values, vectors, self.n_components_
        )
        self.landmarks_ = L
        self.landmark_weights_ = np.asarray(weights, dtype=np.float64)
        self.normalization_ = normalization
        self.mean_ = mean
        self.components_ = components
        self.eigenvalues_ = eigenvalues
        self.n_landmarks_ = int(L.shape[0])
        self.n_samples_seen_ = int(moments.count if n_samples is None else n_samples)

    # --- transform ------------------------------------------------------------------------
    def kernel_expansion(self):
        """The transform as a kernel expansion over the landmarks (for ``compress_expansion``).

        ``transform(X) = k(X, landmarks_) @ coef + offset`` with ``coef = normalization_ @
        components_.T`` (c x k) and ``offset = -mean_ @ components_.T``.
        """
        from .compress import KernelExpansion

        check_is_fitted(self)
        coef = self.normalization_ @ self.components_.T
        return KernelExpansion(
            points=self.landmarks_,
            coef=coef,
            offset=-(self.mean_ @ self.components_.T),
            kernel=self.kernel_,
        )

    def transform(self, X):
        """Project X on the principal axes: ``(W^{-1/2} k(L, x) - mean_) @ components_.T``.

        A dask array gives a lazy dask array, chunked by rows like X.
        """
        if is_dask_array(X):
            from ..dask import transform

            return transform(self, X)
        X = self._validate_transform_data(X)
        dtype = self._output_dtype(X)
        # z never materialises: (N k - mean) . u = k . (N u) - mean . u
        projection = self.normalization_ @ self.components_.T
        offset = self.mean_ @ self.components_.T
        out = np.empty((X.shape[0], self.n_components_), dtype=dtype)
        for start, stop, K in self.kernel_.blocks(X, self.landmarks_):
            out[start:stop] = K @ projection - offset
            del K  # free this block before the generator computes the next one
        return out


def _chain(first, rest):
    yield first
    yield from rest


def _checked_blocks(source, n_features=None):
    """Iterate a block source, validating each block (2-D, finite, one width for all)."""
    for block in source:
        block = check_block(block, n_features=n_features, accept_sparse=True, name="X")
        if block.shape[0] == 0:
            continue
        if n_features is None:
            n_features = block.shape[1]
        yield block
