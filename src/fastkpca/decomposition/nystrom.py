"""NystromKPCA: exact linear PCA on the Nystrom features of c landmarks.

With landmarks L and W = k(L, L), the Nystrom feature map ``z(x) = N k(L, x)`` (N a whitening,
``N^T N = W^{-1}``) gives ``z(x) . z(y) = k(x, L) W^{-1} k(L, y)``, the Nystrom approximation
``C W^{-1} C^T`` of the Gram matrix (Williams & Seeger 2001; the NYSTROM baseline of Ghashami et
al. 2016, ``papers/004`` section 3); kernel PCA on it is linear PCA on z.  With all n points as
landmarks it is exact KPCA.

The fit is one pipeline for arrays, streams and dask arrays: the source (:mod:`fastkpca.source`)
-> landmarks (uniform rows drawn by index or by reservoir sampling; k-means, ridge leverage or
given rows, :mod:`fastkpca._landmarks`) -> the whitening of W (pivoted Cholesky) -> the moments
of the kernel rows ``k(L, x)`` (``solver="exact"``) or their one-pass sketch
(``solver="randomized"``) reduced over the blocks (:mod:`fastkpca.statistics.kernel_moments`,
never an n x c matrix) -> :func:`~fastkpca.statistics.kernel_moments.nystrom_kpca` or
:func:`~fastkpca.statistics.kernel_moments.nystrom_sketch_kpca`.  When exact KPCA is cheaper
(c close to n) ``solver="auto"`` computes it instead (the class Notes).  See the statistics
module for the rank-deficient W, the density weights of ``landmarks="kmeans"`` and the
performance notes.
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
from ..execution import budget, one_blas_thread
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
from ._base import BaseKPCA, reduce_with_diag_sum
from .compress import KernelExpansion
from .exact import GRAM_FRACTION, check_exact_fits, exact_kpca

__all__ = ["NystromKPCA", "DEFAULT_N_LANDMARKS", "LANDMARK_SUBSAMPLE"]

#: ``n_landmarks=None`` means this many, capped at n.
DEFAULT_N_LANDMARKS = 1000

#: ``landmarks="kmeans"`` / ``"rls"`` / ``"rpcholesky"`` on rows that are not in memory (a dask
#: array) run on a uniform subsample of this many rows (they need random access to the rows).
LANDMARK_SUBSAMPLE = 100_000

COVARIANCES = ("data", "landmarks")
SOLVERS = ("auto", "exact", "randomized")

#: ``sketch_size=None``: q = SKETCH_FACTOR * n_components + SKETCH_EXTRA columns (capped at the
#: rank of W); see the class docstring for the measurements behind it.
SKETCH_FACTOR = 4
SKETCH_EXTRA = 20

#: ``solver="auto"`` computes the kernel rows in float32 when independent rounding errors of
#: this rms (float32 rbf blocks, tests/test_kernels.py) in the kernel rows, amplified by the
#: whitening (:func:`~fastkpca.statistics.kernel_moments.whitening_noise_gain`), stay below
#: FLOAT32_MAX_FEATURE_NOISE relative to the features' rms (1 for a kernel with unit diagonal).
FLOAT32_KERNEL_RMS = 2e-7
FLOAT32_MAX_FEATURE_NOISE = 1e-4

#: Rows per kernel block of the sketch pass (float64 blocks of c columns in 64 MiB).
SKETCH_BLOCK_MB = 64

#: Cost model of ``solver="auto"`` (flops; GEMM-bound work and LAPACK ran at similar rates here,
#: ``benchmarks/bench_nystrom.py --near-n``): a kernel value costs about ``2 d +
#: KERNEL_VALUE_FLOPS`` (its share of the distance GEMM, the exp, the memory passes), and exact
#: KPCA's centering and block-Krylov passes about ``EXACT_EIGEN_FLOPS`` per Gram entry (at
#: n = 7438, d = 256 they took as long as filling the Gram).
KERNEL_VALUE_FLOPS = 30
EXACT_EIGEN_FLOPS = 300

#: ``solver="auto"`` sketches only when the scatter's SYRK (``n c^2 / 2`` flops) would cost at
#: least this (~0.1 s): below, the exact covariance is as fast and has no sketching error.
RANDOMIZED_MIN_FLOPS = 1e9

#: ``n_landmarks="auto"``: the sizes tried double from this (or 2 n_components) ...
TOL_START_LANDMARKS = 128
#: ... up to this many landmarks (capped at n): a 512 MiB float64 scatter matrix.
TOL_MAX_LANDMARKS = 8192


class NystromKPCA(BaseKPCA):
    """Kernel PCA on the Nystrom approximation ``C W^{-1} C^T`` of the Gram matrix.

    Linear PCA of the Nystrom features ``z(x) = N k(L, x)`` over c landmarks L (N the
    whitening of ``W = k(L, L)``, ``N^T N = W^{-1}``), computed in one pass over row blocks with
    O(c^2) memory (see the module notes); with all n points as landmarks it is exact KPCA.  Fit
    costs ``n c (2 d + c / 2)`` flops with ``solver="exact"``, ``n c (2 d + 4 q)`` with
    ``"randomized"``, plus ``2 c^3 / 3`` for the whitening and the landmark selection;
    transform ``c (d + k)`` per row.

    Accepts scipy.sparse (CSR) X (wide rows keep CSR landmarks: see ``landmarks_``).
    ``kernel="precomputed"`` is refused (ValueError): the transform needs the kernel between
    new points and the landmarks.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples, n_landmarks), a deliberate
        difference from scikit-learn's ``KernelPCA`` (all nonzero components), which here would
        be up to n_landmarks mostly-noise components.  A float keeps the smallest number whose
        ``explained_variance_ratio_`` (with respect to the estimated ``total_variance_``)
        reaches that fraction.
    kernel, gamma, degree, coef0, nu
        Kernel spec, as for every fastkpca estimator (see :func:`fastkpca.kernels.make_kernel`).
        When X is a stream of blocks, ``gamma="scale"`` / ``"median"`` are resolved on the
        landmarks (a uniform sample of the stream for ``"uniform"``).
    n_landmarks : int or None
        Number of landmarks c; None gives ``min(1000, n_samples)``.  Values above n_samples are
        capped at n_samples (as ``sklearn.kernel_approximation.Nystroem`` does).  ``"auto"``
        (or None with a ``tol``): chosen by tolerance, see ``tol``.
    landmarks : {"uniform", "kmeans", "rls", "rpcholesky"} or array of shape (c, n_features)
        ``"uniform"``: a uniformly random subset of the rows (on a stream of blocks, the same
        subset by reservoir sampling); ``"kmeans"``: k-means centres with cluster sizes as
        weights (density-weighted Nystrom, Zhang & Kwok 2009); ``"rls"``: recursive ridge
        leverage score sampling (Musco & Musco 2017), which finds small clusters and outliers
        that uniform sampling misses.  An array gives the landmarks directly (``n_landmarks``
        is then ignored) and needs a single pass over the data.  Cost beyond the covariance
        pass: none for ``"uniform"``; O(n c^2) for ``"rls"`` (measured 5-8x a uniform fit at
        n = 4e4, c = 400); k-means iterations for ``"kmeans"`` (``MiniBatchKMeans`` above
        20000 rows; measured 10x).
        ``"rpcholesky"``: randomly pivoted Cholesky (Chen, Epperly, Tropp & Webber 2024),
        accelerated by block rejection sampling (Epperly, Tropp & Webber 2024): each landmark
        is a training row drawn with probability proportional to the part of its kernel
        diagonal that the landmarks before it leave unexplained, so landmarks spread over
        clusters and outliers and never repeat; fewer than ``n_landmarks`` when the kernel
        matrix has numerical rank below that.  Cost: n c kernel evaluations, O(n c^2) flops
        and an n x c float64 factor (8 n c bytes); the selection alone measured 0.8-2.7x a
        uniform fit of the same size at 8,192 to 494,020 rows (64 to 256 landmarks, 2 cores).
        The default stays ``"uniform"``: it is the only method that works on a one-pass
        stream, it holds O(c d) instead of rpcholesky's 8 n c bytes, and rpcholesky's gain is
        in the clustered / heavy-tailed cases (trace error 1.2-2x lower on pendigits and
        cpu_act at c = 400, 3 to 30000x on kddcup, within 2 % elsewhere): choose it there.
    solver : {"auto", "exact", "randomized"}
        How the principal axes of the Nystrom features come out of the pass over the data.
        ``"exact"``: the c x c scatter of the kernel rows (a SYRK, ``c^2 / 2`` flops a row),
        then its top eigenpairs.  ``"randomized"``: one pass that never forms it -- the sketch
        ``S T`` of the scatter against a c x q test matrix (``2 c q`` flops a row) and Tropp,
        Yurtsever, Udell & Cevher's fixed-rank PSD approximation (NeurIPS 2017), with half the
        test matrix Gaussian and half the landmarks' own leading feature directions (see
        :func:`~fastkpca.statistics.kernel_moments.landmark_test_matrix`); mergeable, so streams
        and dask arrays work as with ``"exact"``.  ``"auto"`` (default) takes ``"randomized"``
        when it is at least twice cheaper (``c >= 4 q``) and the scatter would cost at least
        1e9 flops, else ``"exact"`` (always for a float ``n_components``: the sketch has at
        most q non-zero eigenvalues, too few for a share of the variance); and it computes
        exact KPCA instead when that is cheaper (see Notes).  Measured
        (``benchmarks/bench_nystrom.py``, RandomNoisy, n = 2e5, d = 100, c = 1000, k = 10,
        float64 input, the 2-core machine at a load average of 3):
        ``"randomized"`` fit in 1.3 s against 7.5 s for ``"exact"`` and 39.7 s for
        scikit-learn's Nystroem + PCA, with a held-out relative rank-k error of 1.0183 against
        1.0170 for both (0.13 % more).
        ``"randomized"`` with rbf kernels computes the kernel rows in float32 when their rounding,
        amplified by the whitening, stays below 1e-4 of the features' scale
        (``FLOAT32_MAX_FEATURE_NOISE``; ``solver_`` and ``kernel_row_dtype_`` say what ran).
    sketch_size : int or None
        Columns q of the randomized solver's test matrix; None gives ``4 n_components + 20``
        (capped at the rank of W).  Its error is that of the best rank-k approximation plus
        the scatter's tail beyond rank ~q (Tropp et al., Theorem 4.1); with q >= the rank of W
        it is exact.
    covariance : {"data", "landmarks"}
        ``"data"``: the covariance of z over all training rows (the Nystrom approximation's exact
        KPCA; landmark weights cancel).  ``"landmarks"``: over the landmarks weighted by
        ``landmark_weights_`` -- Zhang & Kwok's density-weighted eigenproblem with ``kmeans``,
        subsampled KPCA with ``uniform``; no pass over the data after landmark selection (a
        one-shot stream suffices).
    random_state : int, Generator or None
        Landmark selection and gamma heuristics.
    tol : float or None
        Size by tolerance: fit at ``n_landmarks`` = 128 (or the power of 2 above ``2
        n_components``), 256, ... up to ``min(n, 8192)`` and stop at the first whose
        relative rank-k error on all training rows (``||Kc - T T^T||_F / ||Kc -
        (Kc)_k||_F``, 1 = exact KPCA) is at most ``1 + tol`` with its standard error taken
        into account: the estimate of the error probe
        (:class:`fastkpca.statistics.probe.ErrorProbe`, a uniform sample of 2000 training
        rows, cross-fitted on its halves) plus 2 standard errors (a one-sided bound, calibrated:
        docs/auto.md) is at most ``1 + tol``. None (default) with an integer or None
        ``n_landmarks`` fits that size; ``n_landmarks="auto"`` without ``tol`` uses
        ``tol=0.05``.  The sizes share one seed, so uniform landmark sets are nested; each
        size recomputes the kernel-row moments (a pass over the data).  Needs an array or a
        re-iterable block source.
    fit_inverse_transform : bool, default False
        Learn the pre-image map of :meth:`inverse_transform` on the landmarks: kernel ridge
        regression from the landmarks' projections to the landmarks, as ``KernelPCA`` does on
        all training rows (O(c^2), like the model; with all points as landmarks it is
        ``KernelPCA``'s map).
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_jobs : int or None, default None
        Threads of each call (the kernel rows of ``fit`` and ``transform``), scikit-learn's meaning:
        -1 every core the process may use (its CPU affinity and quota), -2 all but one, a positive
        count that many, at most those cores.  None: what the context gives: the ``n_jobs`` of
        ``joblib.parallel_config``, else every usable core within the thread limit the process
        inherits (``OMP_NUM_THREADS``, threadpoolctl's ``threadpool_limits``; in a joblib worker
        process, e.g. under ``GridSearchCV(n_jobs=2)``, the worker's share of the cores).  The model
        does not depend on it, up to the rounding of sums.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` shows a progress bar (tqdm) over the rows of its pass
        over the data, where the output is a terminal or a notebook.
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live (numpy on the host,
        a PyTorch tensor on its device); ``"cuda"`` (or any PyTorch device) sends host data
        there block by block.  Fitted arrays live where the fit ran; ``transform`` returns the
        input's array type, device and dtype.  Needs PyTorch for a device.

    Attributes
    ----------
    landmarks_ : (n_landmarks_, n_features) the landmarks, in the training data's dtype; a CSR
        matrix for sparse X of more than 4096 features (``landmarks`` other than ``"kmeans"``,
        :func:`fastkpca._landmarks.keeps_sparse`): only their kernel values are needed, and a
        dense row of a LIBSVM file whose largest index is 10^6 takes 8 MB.
    landmark_weights_ : (n_landmarks_,) float64 density weights, summing to 1.
    projection_ : (n_landmarks_, n_components_) float64 ``N^T components_^T``: ``transform(X)
        = k(X, landmarks_) @ projection_ - mean_ @ components_.T``.
    normalization_ : (r, n_landmarks_) the whitening N, a property recomputed on each access
        (see Notes): the Nystrom features are ``z(x) = N k(L, x)`` (so ``Z = k(X, landmarks_)
        @ normalization_.T``), with ``N W N^T = I_r`` on the r pivots of a pivoted Cholesky
        factorisation of W (:func:`~fastkpca.statistics.kernel_moments.nystrom_whitening`; r is
        W's numerical rank, n_landmarks_ unless landmarks repeat); on a GPU
        ``diag(w)^{-1/2} U^T`` from W's eigendecomposition, the same up to a rotation of the
        features.  On the exact-KPCA path:
        ``diag(lambda)^{-1/2} alpha^T`` (r = n_components_), the scaled dual coefficients of
        exact KPCA.
    mean_ : (r,) mean of the Nystrom features z over the training data.
    components_ : (n_components_, r) principal axes in z-space (orthonormal rows; the identity
        on the exact-KPCA path).
    solver_ : str, what the fit ran: ``"exact"``, ``"randomized"`` or ``"exact_kpca"``.
    kernel_row_dtype_ : str, the precision of the kernel rows of the pass (``"float32"`` only
        with ``solver_ == "randomized"``, see ``solver``).
    eigenvalues_ : (n_components_,) eigenvalues of the centered n x n Nystrom Gram, descending.
    kernel_ : the resolved Kernel.
    n_landmarks_, n_samples_seen_, n_components_, n_features_in_ : ints.
    size_history_ : list of (n_landmarks, estimated relative rank-k error), the sizes tried
        (with ``tol`` only; ``n_landmarks_`` is the chosen size).
    total_variance_ : float
        ``tr(H K H)`` of the training Gram: ``sum_i k(x_i, x_i)`` (exact, summed in the
        covariance pass) minus ``n ||mu||^2``, the mean embedding estimated from the landmarks'
        mean kernel rows ``mean_x k(l_j, x)`` (their landmark-weighted mean; exact with all points
        as landmarks).
    total_variance_error_ : float
        One standard error of ``total_variance_`` for uniform landmarks with
        ``covariance="data"`` (the landmarks are a uniform sample of the rows); nan (not
        known) for the other landmark methods.
    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).

    Notes
    -----
    ``transform(x) = (z(x) - mean_) @ components_.T``, the projections on the principal axes, on
    the scale of ``sklearn.decomposition.KernelPCA.transform`` (and equal to
    ``make_pipeline(Nystroem(...), PCA(...))`` for the same landmarks, up to column signs).

    What the model keeps.  ``transform`` needs the c x k ``projection_``, the landmarks and the
    offset ``mean_ @ components_.T``; the c x c whitening N is not kept (in memory or in a model
    file: for c = 1000 it is 8 MB, against the 24 kB of the projection), and no other use of the
    model needs it: ``inverse_transform`` (the map learned at fit on the projections of the
    landmarks), ``compress_expansion`` (``projection_`` is the expansion's coefficients) and the
    sizes by ``tol`` use the projection.  The attribute ``normalization_`` recomputes N from the
    landmarks and the kernel when something asks for the Nystrom features themselves
    (:func:`fastkpca.metrics.method_certificates`' residual trace); a model file of an earlier
    release, which holds ``normalization_``, loads with its projection computed from it.

    The exact-KPCA path.  With ``solver="auto"``, ``covariance="data"``, an integer (or None)
    ``n_components`` and dense rows that can be taken by index (an array, not a stream or a
    sparse matrix), the fit is exact KPCA -- the Nystrom method's limit
    with all n training rows as landmarks, at least as accurate as any c -- when (a) a landmark
    method is asked for ``n_landmarks >= n`` (then it is the same model), or (b) its estimated
    cost is lower: ``n^2 (d + 15 + 300)`` flops (the symmetric Gram, centering, block Krylov)
    against the Nystrom fit's ``n c (2 d + 30 + min(c / 2, 2 q)) + 2 c^3 / 3`` (kernel rows, the
    scatter or the sketch, the pivoted Cholesky of W and its inverse); and in both cases only
    if the n x n Gram fits in memory (``ExactKPCA``'s rule).  For d ~ 100-1000 and n of a few
    thousand, (b) holds from c ~ n / 3.  Measured on a USPS-shaped set (n = 7438, d = 256,
    ``benchmarks/bench_nystrom.py --near-n``), as a multiple of ``ExactKPCA``'s 3.3 s: the
    default took 0.42x at c = n / 4 (the sketch), 0.97x, 0.89x and 0.94x at c = n / 2, 4769
    and n (the exact path); forcing the Nystrom approximation there (``"randomized"``) took
    1.7x, 2.2x and 7.6x, for the same held-out error (1.0357).  The model then has
    ``solver_ = "exact_kpca"``, ``landmarks_`` = the training rows, ``n_landmarks_ = n``,
    uniform ``landmark_weights_``, ``normalization_`` as described above (k x n), the exact
    ``eigenvalues_`` and ``total_variance_`` (error 0), and ``transform`` equal to
    ``ExactKPCA``'s.  ``solver="exact"`` or ``"randomized"`` always computes the Nystrom
    approximation on the c landmarks asked for.

    On every array namespace (numpy, PyTorch tensors, CuPy arrays, ``array_api_strict``, or
    ``device=``) the fit is the same code and gives the same model up to rounding: uniform
    landmarks are the rows of the host's draw of indices, taken where the rows live; W, the
    pass over the kernel rows (float64 chunks for ``"exact"``, the sketch's float32 or float64
    ones for ``"randomized"``, float64 accumulators, no host synchronisation per tile),
    ``N S N^T``, its top eigenpairs and ``transform`` run there, as do ``"rpcholesky"`` and
    ``"rls"``.  The whitening of W is the pivoted Cholesky factor in host memory and an
    ``eigh`` on a GPU (:func:`fastkpca.execution.linalg.whitening`).  Computed on host copies,
    their results moved: the fixed-rank solve of the sketch, ``"kmeans"`` (scikit-learn's
    k-means), the exact-KPCA path (its n x n Gram on the host) and the probe of ``tol``.

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

        Every input gives the model of the in-memory array with the same seed: the same uniform
        landmarks (drawn by index, or by reservoir sampling in one pass over a stream), the
        kernel-row moments reduced over the blocks (per chunk on the workers for a dask array).
        ``"kmeans"``, ``"rls"`` and ``"rpcholesky"`` need random access to the rows: they run on
        the array, or on a uniform subsample of at most ``LANDMARK_SUBSAMPLE`` rows of a dask
        array, and refuse a stream.  A stream must be re-iterable (a list of blocks, a reader) for
        ``landmarks="uniform"`` with ``covariance="data"`` (reservoir sampling, then the
        covariance); given landmarks or ``covariance="landmarks"`` need one pass.
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
        """Refuse, before the landmarks are chosen, a number of landmarks whose c x c arrays
        cannot fit (ValueError naming it and the memory): the landmark Gram W, its pivoted
        Cholesky factor, inverse and the landmarks' features, the kernel-row scatter and its
        merged copy and ``N S N^T`` (8 c x c float64 arrays in all); ``rpcholesky`` also holds
        an n x c factor.  (The landmark rows themselves: ``RowSource.require_dense``.)"""
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
        # Not raised to fill SGEMM's panels (gemm_width) as RandomFeatureKPCA's is: 63 columns
        # instead of 60 measured no faster here (paired fits at 10^6 rows, c = 1000).
        k = self._n_components_guess()
        q = sketch_size or SKETCH_FACTOR * k + SKETCH_EXTRA
        return int(min(q, N.shape[0]))

    def _n_components_guess(self) -> int:
        k = self.n_components
        return 10 if k is None or _is_fraction_like(k) else int(k)

    def _choose_solver(self, N, sketch_size, n) -> str:
        """``"exact"`` (the scatter, ``c^2 / 2`` flops a row) or ``"randomized"`` (the sketch,
        ``2 c q``): ``auto`` takes the sketch when it is at least twice cheaper (``c >= 4 q``)
        and the scatter would cost at least RANDOMIZED_MIN_FLOPS, and never for a fraction of
        the variance (``n_components`` a float), which needs every eigenvalue of the scatter:
        the sketch has at most q non-zero ones."""
        if self.solver != "auto" or self.covariance == "landmarks":
            return "exact" if self.solver == "auto" else self.solver
        if _is_fraction_like(self.n_components):
            return "exact"
        c = N.shape[1]
        if n is not None and n * c * c / 2 < RANDOMIZED_MIN_FLOPS:
            return "exact"
        return "randomized" if c >= 4 * self._sketch_width(N, sketch_size) else "exact"

    @staticmethod
    def _kernel_row_dtype(kernel, N):
        """float32 kernel rows where their rounding, amplified by the whitening, stays below
        FLOAT32_MAX_FEATURE_NOISE of the features' scale (the kernel's largest diagonal)."""
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
        if not n or source.sparse or _is_fraction_like(self.n_components):
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
        # On a device this n x n eigenproblem runs on the host (a documented fallback: the path
        # is taken only where the n x n Gram fits the host's memory and costs less than the
        # Nystrom pass); its (n, k) results move to the device.
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
        """Fit at ``n_landmarks`` = 128, 256, ... until the relative rank-k error bound from a
        probe of the training rows is at most ``1 + tol`` (:mod:`fastkpca.statistics.growth`).

        Every size is a fit with the same seed, so the uniform landmark sets are nested (the
        smallest uniform keys of the same draw); the kernel-row moments are recomputed.
        """
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
        """``||mu||^2`` and its standard error from the landmarks' mean kernel rows h.

        ``||mu||^2 = mean_i h(x_i)`` with ``h(x) = mean_j k(x, x_j)``, and h holds it at each
        landmark; uniform landmarks are a uniform sample of the rows, so their mean h is
        unbiased, with standard error ``std(h) / sqrt(c) sqrt(1 - c / n)`` (0 when c = n).
        """
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
        """The whitening N, ``(r, n_landmarks_)``: the Nystrom features are ``z(x) = N k(L, x)``.

        Not kept by the model (see the class Notes): recomputed from ``landmarks_`` and
        ``kernel_`` on each access (``n_landmarks_^2`` kernel values and a pivoted Cholesky,
        ``c^3 / 3`` flops, or on a GPU an ``eigh``), as the fit computed it, up to round-off;
        on the exact-KPCA path it is ``projection_.T`` (the components are the identity
        there).
        """
        check_is_fitted(self)
        if getattr(self, "solver_", None) == "exact_kpca":
            return get_namespace(self.projection_).asarray(self.projection_.T, copy=True)
        N, _ = nystrom_whitening(landmark_gram(self.kernel_, self.landmarks_))
        return N

    # --- transform ------------------------------------------------------------------------
    def kernel_expansion(self):
        """The transform as a kernel expansion over the landmarks (for ``compress_expansion``).

        ``transform(X) = k(X, landmarks_) @ coef + offset`` with ``coef = projection_``
        (c x k) and ``offset = -mean_ @ components_.T``.
        """
        check_is_fitted(self)
        return KernelExpansion(
            points=self.landmarks_,
            coef=self.projection_,
            offset=-(self.mean_ @ self.components_.T),
            kernel=self.kernel_,
        )

    def _transform_rows(self, X):
        """``(N k(L, x) - mean_) @ components_.T`` in X's float dtype: z never materialises,
        ``(N k - mean) . u = k . (N^T u) - mean . u`` with ``projection_ = N^T components_^T``
        computed once at fit.  Float64 kernel rows times ``projection_``
        (:func:`fastkpca.execution.kernel_ops.kernel_matmat`: on the host small chunks on all
        cores, on a device large tiles), by the model's copy where X lives."""
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
    """``N^T components^T`` (c x k): the kernel rows' map to the projections (before the mean),
    all ``transform`` needs of the c x c whitening N."""
    with one_blas_thread():  # a fixed summation order, whatever other threads hold the BLAS
        return N.T @ components.T


def _is_fraction_like(k) -> bool:
    return isinstance(k, float) and 0 < k < 1


def _diag_sum(blocks, kernel) -> float:
    return sum(_block_diag_sum(kernel, block) for _, block in blocks)


def _block_diag_sum(kernel, block) -> float:
    """``sum_i k(x_i, x_i)`` over a block, on the block's placement
    (:func:`fastkpca.execution.kernel_ops.kernel_diag`)."""
    diag = kernel_diag(kernel, block)
    xp = placement_of(diag).xp
    return float(xp.sum(xp.astype(diag, xp.float64)))
