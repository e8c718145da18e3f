"""NystromKPCA: exact linear PCA on the Nystrom features of c landmarks.

With W = k(L, L) and ``z(x) = N k(L, x)``, ``N^T N = W^{-1}``, ``z(x) . z(y)`` is the Nystrom
approximation ``C W^{-1} C^T`` of the Gram (Williams & Seeger 2001; Ghashami et al. 2016 section
3), so kernel PCA on it is linear PCA on z.  The fit: landmarks (:mod:`fastkpca._landmarks`),
the whitening of W, the kernel rows' moments or sketch reduced over the blocks
(:mod:`fastkpca.statistics.kernel_moments`), the eigenproblem.
"""

from __future__ import annotations

import functools
import operator

import numpy as np
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from .. import kernels
from .._landmarks import LANDMARK_METHODS, select_landmarks, uniform_landmarks
from .._utils import check_int, require_memory_parts
from ..execution import budget, linalg, one_blas_thread
from ..execution.arrays import get_namespace, placement_of, to_host
from ..execution.elementwise import as_float64, astype_name, float_name
from ..execution.kernel_ops import kernel_diag, kernel_matmat
from ..kernels import warn_if_degenerate
from ..source import check_block
from ..statistics.growth import (
    check_auto_size,
    check_tol,
    doubling_sizes,
    draw_probe,
    grow_estimator,
)
from ..statistics.kernel_moments import (
    landmark_gram,
    landmark_kernel_moments,
    landmark_kernel_sketch,
    landmark_test_matrix,
    merged_moments,
    merged_sketches,
    nystrom_from_exact,
    nystrom_kpca,
    nystrom_normalization,  # noqa: F401  (benchmarks import it from here)
    nystrom_sketch_kpca,
    nystrom_whitening,
    weighted_landmark_moments,
    whitening_noise_gain,
)
from ._base import BaseKPCA, _is_fraction, reduce_with_diag_sum
from .compress import KernelExpansion
from .exact import GRAM_FRACTION, check_exact_fits, exact_kpca

__all__ = ["NystromKPCA", "DEFAULT_N_LANDMARKS", "LANDMARK_SUBSAMPLE"]

#: ``n_landmarks=None`` means this many, capped at n.
DEFAULT_N_LANDMARKS = 1000

#: Landmark methods needing random access run on a uniform subsample this large of a dask array.
LANDMARK_SUBSAMPLE = 100_000

COVARIANCES = ("data", "landmarks")
SOLVERS = ("auto", "exact", "randomized")

#: ``sketch_size=None``: q = SKETCH_FACTOR * n_components + SKETCH_EXTRA (capped at rank W).
SKETCH_FACTOR = 4
SKETCH_EXTRA = 20

#: ``solver="auto"`` uses float32 kernel rows when their rounding (this rms), amplified by the
#: whitening (:func:`~fastkpca.statistics.kernel_moments.whitening_noise_gain`), stays below
#: FLOAT32_MAX_FEATURE_NOISE of the features' rms.
FLOAT32_KERNEL_RMS = 2e-7
FLOAT32_MAX_FEATURE_NOISE = 1e-4

#: Rows per kernel block of the sketch pass (float64 blocks of c columns in 64 MiB).
SKETCH_BLOCK_MB = 64

#: ``solver="auto"``'s cost model: a kernel value ``2 d + KERNEL_VALUE_FLOPS`` flops, exact
#: KPCA's eigensolve ``EXACT_EIGEN_FLOPS`` per Gram entry.
KERNEL_VALUE_FLOPS = 30
EXACT_EIGEN_FLOPS = 300

#: ``solver="auto"`` sketches only when the scatter (``n c^2 / 2`` flops) costs at least this.
RANDOMIZED_MIN_FLOPS = 1e9

#: ``n_landmarks="auto"``: the sizes tried double from this (or 2 n_components) ...
TOL_START_LANDMARKS = 128
#: ... up to this many landmarks (capped at n): a 512 MiB float64 scatter matrix.
TOL_MAX_LANDMARKS = 8192


class NystromKPCA(BaseKPCA):
    """Kernel PCA on the Nystrom approximation ``C W^{-1} C^T`` of the Gram matrix.

    Linear PCA of the Nystrom features ``z(x) = N k(L, x)`` over c landmarks L (``N^T N =
    W^{-1}``, ``W = k(L, L)``), one pass over row blocks, O(c^2) memory.  Fit costs ``n c (2 d
    + c / 2)`` flops (``"exact"``) or ``n c (2 d + 4 q)`` (``"randomized"``) plus ``2 c^3 / 3``;
    transform ``c (d + k)`` a row.  Accepts CSR X; ``kernel="precomputed"`` is refused.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples, n_landmarks).  A float: the fewest
        whose ``explained_variance_ratio_`` reaches it.
    kernel, gamma, degree, coef0, nu
        Kernel spec (:func:`fastkpca.kernels.make_kernel`); on a stream ``gamma="scale"`` /
        ``"median"`` are resolved on the landmarks.
    n_landmarks : int or None
        Number of landmarks c (capped at n_samples); None gives ``min(1000, n_samples)``.
        ``"auto"`` (or None with a ``tol``): chosen by tolerance, see ``tol``.
    landmarks : {"uniform", "kmeans", "rls", "rpcholesky"} or array of shape (c, n_features)
        ``"uniform"``: a random subset (reservoir sampling on a stream, the only method for
        one); ``"kmeans"``: centres weighted by cluster sizes (Zhang & Kwok 2009); ``"rls"``:
        recursive ridge leverage scores (Musco & Musco 2017); ``"rpcholesky"``: randomly pivoted
        Cholesky (Chen, Epperly, Tropp & Webber 2024, Alg. 2.1) with block rejection sampling
        (Epperly, Tropp & Webber 2024).  An array gives the landmarks.
    solver : {"auto", "exact", "randomized"}
        ``"exact"``: the c x c scatter of the kernel rows, then its top eigenpairs.
        ``"randomized"``: a c x q sketch of the scatter and the fixed-rank PSD approximation of
        Tropp, Yurtsever, Udell & Cevher (NeurIPS 2017, Alg. 3)
        (:func:`~fastkpca.statistics.kernel_moments.landmark_test_matrix`), rbf rows in float32
        where safe.  ``"auto"``: ``"randomized"`` when ``c >= 4 q`` and the scatter costs at
        least ``RANDOMIZED_MIN_FLOPS`` (not for a float ``n_components``), else ``"exact"``; or
        exact KPCA when cheaper (Notes).
    sketch_size : int or None
        Columns q of the sketch; None gives ``4 n_components + 20``.  Error: the best rank-k one
        plus the scatter's tail beyond rank ~q (Tropp et al. 2017, Theorem 4.1).
    covariance : {"data", "landmarks"}
        ``"data"``: the covariance of z over all rows.  ``"landmarks"``: over the landmarks
        weighted by ``landmark_weights_`` (Zhang & Kwok's density-weighted eigenproblem); no
        pass after landmark selection.
    random_state : int, Generator or None
        Landmark selection and gamma heuristics.
    tol : float or None
        Size by tolerance: fit at ``n_landmarks`` = 128 (or the power of 2 above ``2
        n_components``), 256, ... up to ``min(n, 8192)``, stopping at the first whose relative
        rank-k error bound (:class:`fastkpca.statistics.probe.ErrorProbe`, estimate plus 2
        standard errors) is at most ``1 + tol``.  ``n_landmarks="auto"`` alone: ``tol=0.05``.
        Each size is a pass over the data.
    fit_inverse_transform, alpha :
        The pre-image map of :meth:`inverse_transform`, learnt on the landmarks.
    n_jobs, verbose, device :
        As for :class:`~fastkpca.ExactKPCA`.

    Attributes
    ----------
    landmarks_ : (n_landmarks_, n_features) the landmarks (CSR for wide sparse X,
        :func:`fastkpca._landmarks.keeps_sparse`).
    landmark_weights_ : (n_landmarks_,) float64 density weights, summing to 1.
    projection_ : (n_landmarks_, n_components_) float64 ``N^T components_^T``: ``transform(X)
        = k(X, landmarks_) @ projection_ - mean_ @ components_.T``.
    normalization_ : (r, n_landmarks_) the whitening N, recomputed on each access
        (:func:`~fastkpca.statistics.kernel_moments.nystrom_whitening`).
    mean_ : (r,) mean of the Nystrom features z over the training data.
    components_ : (n_components_, r) principal axes in z-space (orthonormal rows).
    solver_ : str, ``"exact"``, ``"randomized"`` or ``"exact_kpca"``.
    kernel_row_dtype_ : str, the precision of the kernel rows of the pass.
    eigenvalues_ : (n_components_,) eigenvalues of the centered n x n Nystrom Gram, descending.
    kernel_ : the resolved Kernel.
    n_landmarks_, n_samples_seen_, n_components_, n_features_in_ : ints.
    size_history_ : list of (n_landmarks, estimated error), the sizes tried (``tol`` only).
    total_variance_, total_variance_error_ : float
        ``tr(H K H)``, the mean embedding estimated from the landmarks, and its standard error
        (uniform landmarks, ``covariance="data"``; else nan).
    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).

    Notes
    -----
    ``transform(x) = (z(x) - mean_) @ components_.T`` (``make_pipeline(Nystroem(...),
    PCA(...))`` for the same landmarks, up to signs); only ``projection_`` is kept, not N.

    The exact-KPCA path: with ``solver="auto"``, ``covariance="data"``, an integer (or None)
    ``n_components`` and dense rows taken by index, the fit is exact KPCA when ``n_landmarks >=
    n`` or when it costs fewer flops, and the Gram fits (``ExactKPCA``'s rule):
    ``solver_ = "exact_kpca"``, ``landmarks_`` the training rows.

    See Also
    --------
    RandomFeatureKPCA : one pass, no landmarks; less accurate per unit of model size.
    ExactKPCA : the reference, for up to tens of thousands of rows.
    fastkpca.metrics.estimate_error : how close a fitted model is to exact KPCA.

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
        solver="auto",
        sketch_size=None,
        random_state=None,
        tol=None,
        fit_inverse_transform=False,
        alpha=1.0,
        n_jobs=None,
        verbose=0,
        device=None,
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
        self.solver = solver
        self.sketch_size = sketch_size
        self.random_state = random_state
        self.tol = tol
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    # --- parameter checks -----------------------------------------------------------------
    def _check_params(self):
        """The shared checks, then this estimator's parameters (ValueError naming each)."""
        super()._check_params()
        auto = check_auto_size("n_landmarks", self.n_landmarks, self.tol)  # checks tol too
        if not auto:
            check_int("n_landmarks", self.n_landmarks, low=1, allow_none=True)
        if self.covariance not in COVARIANCES:
            raise ValueError(f"covariance must be one of {COVARIANCES}, got {self.covariance!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        check_int("sketch_size", self.sketch_size, low=1, allow_none=True)
        if isinstance(self.landmarks, str):
            if self.landmarks not in LANDMARK_METHODS:
                raise ValueError(
                    f"unknown landmarks method {self.landmarks!r}; choose one of "
                    f"{LANDMARK_METHODS} or pass an array of landmark rows"
                )
        elif np.ndim(self.landmarks) != 2:
            raise ValueError(
                f"landmarks must be one of {LANDMARK_METHODS} or a 2-D array of landmark rows, "
                f"got {_describe(self.landmarks)}"
            )
        elif auto:
            raise ValueError(
                "n_landmarks='auto' / tol choose how many landmarks to draw; with given landmark "
                "rows there is nothing to choose: pass landmarks='uniform' (or another method)"
            )

    # --- fit ------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on an array / CSR matrix, an iterable of row blocks or a dask array.

        Every input gives the in-memory array's model for the same seed.  ``"kmeans"``,
        ``"rls"`` and ``"rpcholesky"`` need random access (a dask array: a subsample of
        ``LANDMARK_SUBSAMPLE`` rows); ``"uniform"`` with ``covariance="data"`` needs two passes.
        """
        self._check_params()
        if check_auto_size("n_landmarks", self.n_landmarks, self.tol):
            return self._fit_by_tolerance(X)  # size chosen by tolerance (statistics/growth.py)
        n_landmarks = check_int("n_landmarks", self.n_landmarks, low=1, allow_none=True)
        sketch_size = check_int("sketch_size", self.sketch_size, low=1, allow_none=True)
        method = self.landmarks if isinstance(self.landmarks, str) else None  # None: given rows
        rng = self._make_rng()
        # The gamma heuristics draw from their own stream, so the landmark draws do not depend
        # on whether gamma is resolved before (rows by index) or after (streams) the landmarks.
        kernel_rng = np.random.default_rng(int(rng.integers(2**63)))
        source = self._fit_source(X)
        if method == "uniform" and self.covariance == "data":
            source.require_passes(
                2,
                "landmarks='uniform' with covariance='data' (reservoir "
                "sampling, then the covariance)",
            )
        n = source.n_samples
        # gamma strings are resolved on all rows where rows can be taken by index, else (a
        # stream) on the landmarks.
        kernel = self._resolve_kernel(source, kernel_rng) if source.random_access else None
        c = n_landmarks or DEFAULT_N_LANDMARKS
        if self._exact_kpca_is_cheaper(source, c if method is not None else len(self.landmarks)):
            return self._fit_exact_kpca(source, kernel, rng)
        if method == "kmeans":  # k-means centres are dense rows, whatever the data's storage
            source.require_dense(c if n is None else min(c, n), f"n_landmarks={c} landmarks")
        self._require_fit_memory(c if method is not None else len(self.landmarks), n, method)
        placement = source.placement
        if method is None:
            L = check_block(to_host(self.landmarks), n_features=source.n_features, name="landmarks")
            L = placement.asarray(L.astype(source.dtype, copy=False))
            if L.shape[0] == 0:
                raise ValueError("landmarks: the landmark array has no rows")
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
        elif method == "uniform":
            # The rows of the host's draw of indices, taken on the source's device (wide sparse
            # rows kept CSR: only their kernel values count).
            L = uniform_landmarks(source, c if n is None else min(c, n), rng)
            weights = np.full(L.shape[0], 1.0 / L.shape[0])
        else:
            # random access to the rows (or a subsample of a dask array's); k-means runs on a
            # host copy of them (scikit-learn's)
            purpose = f"landmarks={method!r}"
            rows = source.in_memory(LANDMARK_SUBSAMPLE, rng, purpose=purpose)
            n = source.n_samples
            c = min(c, n)
            k = self._resolve_n_components(min(n, c), what="min(n_samples, n_landmarks)")
            L, weights = select_landmarks(rows, method, c, kernel, rng, target_rank=k)
        if kernel is None:
            kernel = self._resolve_kernel(to_host(L), kernel_rng)
        # A selector may return fewer landmarks than asked for (rpcholesky on a kernel of lower
        # rank): the components beyond the rank are then zero, as for exact KPCA.
        asked = L.shape[0] if method is None else (min(c, n) if n is not None else L.shape[0])
        L64 = as_float64(L)
        W = landmark_gram(kernel, L64)
        N, Z_landmarks = nystrom_whitening(W)
        solver = self._choose_solver(N, sketch_size, source.n_samples)
        self.solver_ = solver
        self.kernel_row_dtype_ = "float64"
        if self.covariance == "landmarks":
            diag_sum = np.nan  # a one-shot stream already read: no pass left for the diagonal
            if source.n_samples is None or source.reiterable:
                diag_sum = source.reduce(_diag_sum, operator.add, kernel)
            moments = weighted_landmark_moments(W, weights, source.n_samples)
            # This model sees the data only through the landmarks, whose mean kernel rows (the
            # total variance's estimate) include their self-similarity: check W itself.
            W_host = to_host(W)
            warn_if_degenerate(
                kernel,
                W.shape[0],
                float(np.trace(W_host)),
                float(W_host.mean()),
                0.0,
                constant=False,
            )
        elif solver == "exact":
            moments, diag_sum = reduce_with_diag_sum(
                source,
                kernel,
                landmark_kernel_moments,
                merged_moments,
                L64,
                kernel,
                desc="kernel rows",
            )
        else:
            q = self._sketch_width(N, sketch_size)
            Omega = landmark_test_matrix(Z_landmarks, q, rng)
            with linalg.small_steps(placement, 2.0 * N.shape[0] * N.shape[1] * q):
                T = N.T @ Omega
            dtype = self._kernel_row_dtype(kernel, N)
            self.kernel_row_dtype_ = np.dtype(dtype).name
            # The landmarks' mean kernel row is close to the data's (uniform landmarks are a
            # sample of them): a shared shift for the float32 products.
            moments, diag_sum = reduce_with_diag_sum(
                source,
                kernel,
                landmark_kernel_sketch,
                merged_sketches(T),
                L64,
                kernel,
                T,
                placement.xp.mean(W, axis=0),
                dtype,
                min(SKETCH_BLOCK_MB, budget.WORKING_MEMORY_MB),
                desc="kernel rows",
            )
        n = moments.count if solver == "exact" or self.covariance == "landmarks" else moments.n
        self._resolve_n_components(min(n, asked), what="min(n_samples, n_landmarks)")
        if solver == "randomized" and self.covariance == "data":
            eigenvalues, components, mean = nystrom_sketch_kpca(
                moments, N, Omega, self.n_components_, scale=diag_sum
            )
        else:
            eigenvalues, components, mean = nystrom_kpca(moments, N, self.n_components_)
        self.landmarks_ = L
        self.landmark_weights_ = placement.asarray(np.asarray(weights, dtype=np.float64))
        self.projection_ = _projection(N, components)
        self.mean_ = mean
        self.components_ = components
        self.eigenvalues_ = eigenvalues
        self.n_landmarks_ = int(L.shape[0])
        self.n_samples_seen_ = int(n)
        anchors = functools.partial(to_host, L)  # the pre-image map's rows, on the host
        self._finish_fit(diag_sum, *self._mean_embedding(moments.mean, method), anchors)
        return self

    def _require_fit_memory(self, c, n, method) -> None:
        """ValueError, before landmark selection, if the 8 c x c float64 arrays (and
        ``rpcholesky``'s n x c factor) cannot fit."""
        c = int(c if n is None else min(c, n))
        name = f"n_landmarks={c}" if method is not None else f"landmarks ({c} rows)"
        parts = [
            (
                8 * 8 * c * c,
                f"{name}: the {c} x {c} landmark Gram, its whitening and the kernel-row scatter",
            )
        ]
        if method == "rpcholesky" and n:
            parts.append((8 * n * c, f"{name} with landmarks='rpcholesky': its {n} x {c} factor"))
        require_memory_parts(parts, hint="lower n_landmarks")

    # --- the solver -----------------------------------------------------------------------
    def _sketch_width(self, N, sketch_size) -> int:
        # Not raised to fill SGEMM's panels (gemm_width): no faster here (benchmarks/NOTES.md).
        k = self._n_components_guess()
        q = sketch_size or SKETCH_FACTOR * k + SKETCH_EXTRA
        return int(min(q, N.shape[0]))

    def _n_components_guess(self) -> int:
        k = self.n_components
        return 10 if k is None or _is_fraction(k) else int(k)

    def _choose_solver(self, N, sketch_size, n) -> str:
        """``"exact"`` or ``"randomized"`` (see the ``solver`` parameter)."""
        if self.solver != "auto" or self.covariance == "landmarks":
            return "exact" if self.solver == "auto" else self.solver
        if _is_fraction(self.n_components):
            return "exact"
        c = N.shape[1]
        if n is not None and n * c * c / 2 < RANDOMIZED_MIN_FLOPS:
            return "exact"
        return "randomized" if c >= 4 * self._sketch_width(N, sketch_size) else "exact"

    @staticmethod
    def _kernel_row_dtype(kernel, N):
        """float32 rbf kernel rows where FLOAT32_MAX_FEATURE_NOISE allows, else float64."""
        if not isinstance(kernel, kernels.RBF):
            return np.float64
        noise = FLOAT32_KERNEL_RMS * whitening_noise_gain(N)
        return np.float32 if noise <= FLOAT32_MAX_FEATURE_NOISE else np.float64

    def _exact_kpca_is_cheaper(self, source, c) -> bool:
        """Whether ``solver="auto"`` computes exact KPCA instead (see the class Notes)."""
        n = source.n_samples
        if self.solver != "auto" or self.covariance != "data" or not source.random_access:
            return False
        # Not for: unknown n, sparse rows (landmarks_ would be all of X, densified), a float
        # n_components (exact KPCA would compute and store every eigenpair).
        if not n or source.sparse or _is_fraction(self.n_components):
            return False
        all_rows = isinstance(self.landmarks, str) and c >= n
        c = min(int(c), n)
        d = source.n_features
        k = self._n_components_guess()
        per_value = 2 * d + KERNEL_VALUE_FLOPS
        q = min(SKETCH_FACTOR * k + SKETCH_EXTRA, c)
        per_row = min(c / 2, 2 * q)  # the cheaper of the scatter and the sketch, per value
        nystrom = n * c * (per_value + per_row) + 2 * c**3 / 3
        exact = n * n * (per_value / 2 + EXACT_EIGEN_FLOPS)
        if not all_rows and exact >= nystrom:
            return False
        try:
            check_exact_fits(source, fraction=GRAM_FRACTION if source.resident else None)
        except ValueError:
            return False
        return True

    def _fit_exact_kpca(self, source, kernel, rng):
        """Exact KPCA, the Nystrom method with all n training rows as landmarks."""
        placement = source.placement
        X = to_host(source.in_memory(purpose="NystromKPCA's exact path"))
        n = X.shape[0]
        k = self._resolve_n_components(n, what="min(n_samples, n_landmarks)")
        # On the host (the Gram fits there); the (n, k) results move to the device.
        vals, vecs, stats, _ = exact_kpca(X, kernel, k, eigen_solver="auto", rng=rng)
        N, components, mean = nystrom_from_exact(vals, vecs, stats.col_means)
        self.solver_ = "exact_kpca"
        self.kernel_row_dtype_ = "float32" if X.dtype == np.float32 else "float64"
        self.landmarks_ = placement.asarray(X.copy())
        self.landmark_weights_ = placement.asarray(np.full(n, 1.0 / n))
        self.projection_ = placement.asarray(_projection(N, components))
        self.mean_ = placement.asarray(mean)
        self.components_ = placement.asarray(components)
        self.eigenvalues_ = placement.asarray(vals)
        self.n_landmarks_ = n
        self.n_samples_seen_ = n
        diag_sum = float(np.sum(kernel.diag(X), dtype=np.float64))
        self._finish_fit(diag_sum, float(stats.total_mean), 0.0, X)
        return self

    # --- size chosen by tolerance ---------------------------------------------------------
    def _fit_by_tolerance(self, X):
        """Fit at ``n_landmarks`` = 128, 256, ... until the error bound is at most ``1 + tol``
        (:mod:`fastkpca.statistics.growth`); one seed, so uniform landmark sets are nested."""
        tol = check_tol(self.tol, auto=True)
        source = self._fit_source(X)
        source.require_passes(2, f"tol={tol} (a pass per model size)")
        rng = self._make_rng()
        seed = int(rng.integers(2**31))
        probe = draw_probe(source, rng)
        n = source.n_samples
        k = self.n_components or 1
        start = max(TOL_START_LANDMARKS, 1 << int(np.ceil(np.log2(2 * k))))
        sizes = doubling_sizes(min(start, n), min(n, TOL_MAX_LANDMARKS))

        def fit_at(c):
            return clone(self).set_params(n_landmarks=c, tol=None, random_state=seed).fit(X)

        grow_estimator(self, source, probe, fit_at, sizes, "n_landmarks")
        return self

    def _mean_embedding(self, h, method):
        """``||mu||^2 = mean_i h(x_i)`` from the landmarks' mean kernel rows h, and its standard
        error ``std(h) / sqrt(c) sqrt(1 - c / n)`` (uniform landmarks only; else nan)."""
        estimate = float(self.landmark_weights_ @ h)
        c, n = int(h.shape[0]), self.n_samples_seen_
        if method != "uniform" or self.covariance != "data":
            return estimate, np.nan
        if c >= n or c < 2:
            return estimate, 0.0
        return estimate, float(np.std(to_host(h), ddof=1) / np.sqrt(c) * np.sqrt(1.0 - c / n))

    # --- what the model keeps -------------------------------------------------------------
    def _truncate_components(self, k: int) -> None:
        super()._truncate_components(k)
        self.projection_ = self.projection_[:, :k]  # column j is N^T components_[j]

    @property
    def normalization_(self):
        """The whitening N, ``(r, n_landmarks_)``, ``z(x) = N k(L, x)``: recomputed on each
        access (``projection_.T`` on the exact-KPCA path)."""
        check_is_fitted(self)
        if getattr(self, "solver_", None) == "exact_kpca":
            return get_namespace(self.projection_).asarray(self.projection_.T, copy=True)
        N, _ = nystrom_whitening(landmark_gram(self.kernel_, self.landmarks_))
        return N

    # --- transform ------------------------------------------------------------------------
    def kernel_expansion(self):
        """``transform(X) = k(X, landmarks_) @ projection_ - mean_ @ components_.T``."""
        check_is_fitted(self)
        return KernelExpansion(
            points=self.landmarks_,
            coef=self.projection_,
            offset=-(self.mean_ @ self.components_.T),
            kernel=self.kernel_,
        )

    def _transform_rows(self, X):
        """``k(X, L) @ projection_ - mean_ @ components_.T`` in X's float dtype (z never
        materialises; :func:`fastkpca.execution.kernel_ops.kernel_matmat`)."""
        model = self._placed(placement_of(X))
        with one_blas_thread():  # the summation order of a product does not depend on threads
            offset = model.mean_ @ model.components_.T
        out = kernel_matmat(model.kernel_, X, model.landmarks_, model.projection_, dtype="float64")
        out -= offset
        return astype_name(out, float_name(X.dtype))


def _describe(value) -> str:
    """A value for an error message, never a large one in full."""
    if hasattr(value, "shape"):
        return f"a {type(value).__name__} of shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def _projection(N, components):
    """``N^T components^T`` (c x k): all ``transform`` needs of the whitening N.

    The whitening is unique only up to a rotation of its rows (pivoted Cholesky in host memory,
    ``eigh`` on a GPU), the projection is not: each column's sign is fixed on it (its entry of
    largest magnitude positive, ``svd_flip``'s rule), the component's row flipped with it, so
    every placement gives the same model.
    """
    with one_blas_thread():  # a fixed summation order, whatever other threads hold the BLAS
        P = N.T @ components.T
    xp = placement_of(P).xp
    if 0 in tuple(P.shape):
        return P
    picked = xp.take_along_axis(P, xp.argmax(xp.abs(P), axis=0)[None, :], axis=0)[0, :]
    signs = xp.where(picked < 0, -xp.ones_like(picked), xp.ones_like(picked))
    P *= signs
    components *= signs[:, None]
    return P


def _diag_sum(blocks, kernel) -> float:
    return sum(_block_diag_sum(kernel, block) for _, block in blocks)


def _block_diag_sum(kernel, block) -> float:
    """``sum_i k(x_i, x_i)`` over a block, on its placement."""

    diag = kernel_diag(kernel, block)
    xp = placement_of(diag).xp
    return float(xp.sum(xp.astype(diag, xp.float64)))
