"""RandomFeatureKPCA: exact linear PCA on random features (RNCA / RF-KPCA).

With a random feature map z (:mod:`fastkpca.features`), ``Z Z^T`` approximates the Gram matrix,
so kernel PCA becomes linear PCA of the feature rows (Lopez-Paz et al.'s RNCA, the baseline of
Ghashami, Perry & Phillips 2016, section 2); ``transform(x) = V^T (z(x) - mu)`` approximates
``KernelPCA.transform`` on the same scale (``Zc V = U sqrt(Lambda)``).

One pipeline for arrays, streams of blocks and dask arrays: the source -> the kernel and feature
map drawn from its first rows (:func:`fastkpca.features.init_feature_map`) -> a statistic reduced
over its blocks -> a solver: ``exact`` (the m x m feature Gram, O(n m^2) time, O(m^2)
memory), ``randomized`` (Tropp, Yurtsever, Udell & Cevher, NeurIPS 2017, Algorithm 3: a
one-pass sketch of the covariance, O(n m q) time, O(m q) memory) or ``countsketch`` (Musco &
Woodruff 2017, section 3.2).  None holds the n x m feature matrix.  Every solver is written once
over the array namespace; the small m x q reconstruction reads host copies and returns its
results where the rows are.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
from sklearn.base import clone

from .._input_sketch import SketchedFourierFeatureMap
from .._utils import DEFAULT_BLOCK_ROWS, check_int, require_memory_parts
from ..execution import CHUNK_ROWS, n_shares, n_workers
from ..execution.arrays import row_range, to_host
from ..features import (
    FEATURES,
    FastfoodFeatureMap,
    FourierFeatureMap,
    check_feature_spec,
    draw_feature_map,
    feature_projection,
    init_feature_map,
    resolve_features,
    resolve_n_random_features,
)
from ..statistics.covariance_sketch import ScatterSketch, gemm_width, informed_test_matrix
from ..statistics.feature_countsketch import rf_kpca_countsketch
from ..statistics.feature_moments import (
    FeatureMoments,
    feature_moments,
    feature_scatter_sketch,
    feature_shift,
    head_features,
    rf_kpca_exact,
    rf_kpca_randomized,
)
from ..statistics.growth import (
    GrowingFourierMoments,
    check_auto_size,
    check_tol,
    doubling_sizes,
    draw_probe,
    grow_estimator,
)
from ._base import (
    DEFAULT_N_COMPONENTS,
    DEFAULT_N_INVERSE_SAMPLES,
    BaseKPCA,
    _is_fraction,
    reduce_with_diag_sum,
)

__all__ = ["RandomFeatureKPCA", "SOLVERS", "feature_mean_embedding", "constant_diag_sum"]

SOLVERS = ("auto", "exact", "randomized", "countsketch")

#: ``solver="auto"`` sketches only when the exact covariance (``n m^2 / 2`` flops for its
#: SYRK) would cost at least this (~0.1 s here): below, the exact solver is as fast and has no
#: sketching error.
RANDOMIZED_MIN_FLOPS = 1e9

#: ``n_random_features="auto"``: the sizes tried double from this (or 2 n_components) ...
TOL_START_FEATURES = 256
#: ... up to this many output features (a 2 GiB float64 feature Gram).
TOL_MAX_FEATURES = 2**14


def feature_mean_embedding(fmap, mean):
    """``||mu||^2`` estimated as ``||mean of z||^2`` of random features, with its standard error.

    ``E[z(x) . z(y)] = k(x, y)``, so ``||mean_z||^2 = (1/n^2) sum_ij z(x_i) . z(x_j)`` is an
    unbiased estimate of ``||mu||^2 = (1/n^2) sum_ij k(x_i, x_j)`` (the i = j terms are exact
    for the cos / sin maps).  For the Fourier maps ``z = [cos(x W), sin(x W)] / sqrt(D)`` it is
    the mean over the D frequencies of ``t_j = |mean_x exp(i w_j . x)|^2``, whose expectation is
    ``||mu||^2``; with i.i.d. frequencies (``rff``) the standard error is ``std(t) / sqrt(D)``.
    Orthogonal frequencies (``orf``, ``fastfood``) are not independent; the same formula is used
    (calibration: benchmarks/NOTES.md).  Other maps (``tensorsketch``): error nan (not known).
    """
    mean = np.asarray(to_host(mean), dtype=np.float64)
    estimate = float(mean @ mean)
    fourier = FourierFeatureMap | FastfoodFeatureMap | SketchedFourierFeatureMap
    if not isinstance(fmap, fourier) or mean.size < 4:
        return estimate, np.nan
    D = mean.size // 2
    t = D * (mean[:D] ** 2 + mean[D:] ** 2)
    return estimate, float(np.std(t, ddof=1) / np.sqrt(D))


def _merge_sketches(a, b, T):
    """``ScatterSketch.merge`` with the fit's test matrix (picklable for dask)."""
    return ScatterSketch.merge(a, b, T)


def _shift_and_test_matrix(X_first, fmap, q, rng):
    """The randomized solver's shift and (m, q) test matrix, both from the first feature block
    (:func:`~fastkpca.statistics.feature_moments.head_features`), which is freed before the
    pass: the feature mean, and half Gaussian, half that block's leading principal axes
    (:func:`~fastkpca.statistics.covariance_sketch.informed_test_matrix`)."""
    Z_first = head_features(X_first, fmap)
    shift = feature_shift(X_first, fmap, Z_first)
    # On a device the block's leading axes are computed there, from the host generator's
    # draws, as on every placement; the block is not needed after (centered in place).
    return shift, informed_test_matrix(Z_first, q, rng, overwrite_rows=True)


def constant_diag_sum(kernel, n_samples, n_features):
    """``sum_i k(x_i, x_i) = n k(0)`` for a shift-invariant kernel (no pass needed); nan else."""
    if not getattr(kernel, "shift_invariant", False):
        return np.nan
    return float(n_samples * kernel.diag(np.zeros((1, n_features)))[0])


class RandomFeatureKPCA(BaseKPCA):
    """Kernel PCA as exact linear PCA on random features (RNCA / RF-KPCA).

    ``fit`` makes one pass over X in row blocks (or over an iterable of row blocks) and never
    holds the n x m feature matrix; ``transform(X) = (z(X) - mean_) @ components_.T``
    approximates ``sklearn.decomposition.KernelPCA(...).transform(X)`` (same scale, column signs
    deterministic), better as ``n_random_features`` grows.

    Accepts scipy.sparse (CSR) X.  ``kernel="precomputed"`` is refused (ValueError): random
    features need the rows themselves.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples, n_output_features), a deliberate
        difference from scikit-learn's ``KernelPCA`` (all nonzero components), which here would
        be up to m (``n_random_features``) mostly-noise components.  A float
        (``solver="exact"`` only) keeps the smallest number whose ``explained_variance_ratio_``
        (with respect to the estimated ``total_variance_``) reaches that fraction.
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"`` (``rff``; ``orf`` and ``fastfood`` take rbf and
        matern) or ``"polynomial"`` (``tensorsketch``); other kernels raise ValueError.
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features_in as in ``KernelPCA``.  The string forms are
        resolved on the first 8192 rows (the first block of a stream).
    degree, coef0 : polynomial kernel parameters.  nu : Matern smoothness.
    n_random_features : int or None
        Number m of random features (None: 1000,
        :data:`fastkpca.features.DEFAULT_N_RANDOM_FEATURES`; it does not depend on n).  The
        Fourier maps output cos / sin pairs, so an odd m is rounded up to even
        (``n_output_features_``).
        ``"auto"`` (or None with a ``tol``): chosen by tolerance, see ``tol``.
    features : {"auto", "rff", "orf", "qmc", "fastfood", "tensorsketch"}
        The feature map, see :mod:`fastkpca.features`.  ``auto`` (default): ``qmc`` (quasi-Monte
        Carlo) for shift-invariant kernels on at most 8 input columns, else ``orf`` for rbf and
        matern, ``rff`` for laplacian, ``tensorsketch`` for polynomial
        (:func:`fastkpca.features.resolve_features`).
    solver : {"auto", "exact", "randomized", "countsketch"}
        ``exact``: PCA of the accumulated m x m feature covariance, O(n m^2) time.
        ``randomized``: one pass, Tropp et al.'s fixed-rank PSD approximation of that covariance
        from its sketch against q = min(m, 2 k + oversamples) directions (see
        :meth:`_sketch_width`), O(n m q) time.  Half the directions are Gaussian (the paper's
        test matrix), half the leading principal axes of the first block's features
        (:func:`~fastkpca.statistics.covariance_sketch.informed_test_matrix`), which assumes the
        first block is like the rest: ask for ``exact`` when the order of the rows carries a
        trend.  Its eigenvalues (of a Nystrom approximation) are never above the exact solver's,
        and ``explained_variance_ratio_`` is biased low by the same factor.
        ``auto`` (default): ``randomized`` when ``m >= 4 q`` and the covariance would cost at
        least 1e9 flops (``n m^2 / 2``; a stream of unknown length counts as large), else
        ``exact``; a float ``n_components`` always takes ``exact``.  ``solver_`` says which ran.
        ``countsketch``: a CountSketch of the random features then Rayleigh-Ritz (Musco &
        Woodruff 2017, section 3.2), O(nnz(X) m + n m) per pass, O(nnz(X) + n t m) with
        ``input_sketch``.
    input_sketch : None, "auto" or int, default None
        With ``features="rff"`` and the rbf or matern kernel: CountSketch each row to t
        coordinates before the product with the Gaussian frequencies (Musco & Woodruff 2017,
        section 3.2.2; Kapralov et al.'s "fake Gaussian" ``W = S^T G``), so a row's features
        cost O(nnz(x) + t m) instead of O(nnz(x) m); see :mod:`fastkpca._input_sketch`.
        ``"auto"``: t = ceil(n_random_features / 2), where the added variance of every kernel
        entry is at most the features' own (no sketch unless that is below the input width).
        An integer: that t.  None (default): the exact ``X W``.  Host rows only.
    n_buckets : int or None
        CountSketch rows t for ``solver="countsketch"`` (None: :meth:`_default_buckets`).
    oversamples : int
        Extra sketch directions p: for the Rayleigh-Ritz step (countsketch); the sketch width
        q = 2 k + p for ``solver="randomized"``.
    n_passes : {1, 2}
        Passes over the data for ``solver="countsketch"``; 2 (default) needs an array or a
        re-iterable block source, not a one-shot generator.
    random_state : int, Generator or None
        Draws the features (and the CountSketch hash); the same seed gives the same features as
        ``StreamingKPCA`` with equal parameters.
    tol : float or None
        Size by tolerance: fit at ``n_random_features`` = 256 (or the power of 2 above ``2
        n_components``), 512, ... up to 2^14 and stop at the first whose relative rank-k error
        (``||Kc - T T^T||_F / ||Kc - (Kc)_k||_F``, 1 = exact KPCA) is at most ``1 + tol``: the
        error probe's estimate (:class:`fastkpca.statistics.probe.ErrorProbe`) plus 2 standard
        errors (calibrated: docs/auto.md).  None (default) with an integer
        ``n_random_features`` fits that size; ``n_random_features="auto"`` without ``tol`` uses
        ``tol=0.05``.  ``rff`` / ``orf`` with the exact solver reuse the features drawn at each
        doubling.  Needs an array or a re-iterable block source (a pass per size).
    fit_inverse_transform : bool, default False
        Learn the pre-image map of :meth:`inverse_transform` (kernel ridge regression, as
        ``KernelPCA``, from ``n_inverse_samples`` training rows drawn at fit).
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_inverse_samples : int or None
        Pre-image anchors (None: 1000, capped at n); the map costs O(n_inverse_samples^2).
    n_jobs : int or None, default None
        Threads of each call, scikit-learn's meaning (-1 every usable core, -2 all but one);
        None: joblib's ``parallel_config``, else every usable core within the inherited thread
        limit.  The model does not depend on it, up to the rounding of sums.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` shows a progress bar (tqdm) on a terminal or notebook.
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live; ``"cuda"`` (or any
        PyTorch device) sends host data there block by block.  ``transform`` returns the
        input's array type, device and dtype.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered approximate Gram ``Zc Zc^T``.
    components_ : (n_components, n_output_features_) principal axes in feature space.
    mean_ : (n_output_features_,) the training features' mean.
    solver_ : str, the solver that ran (``solver="auto"`` resolved).
    feature_map_ : the drawn :class:`fastkpca.features.FeatureMap`.
    kernel_ : the resolved Kernel.
    n_output_features_ : int, m.
    n_samples_seen_, n_components_, n_features_in_ : int.
    n_random_features_ : int, the chosen number of output features (with ``tol`` only).
    size_history_ : list of (n_random_features, estimated relative rank-k error) (``tol`` only).
    total_variance_ : float
        ``tr(H K H)`` of the training Gram: ``sum_i k(x_i, x_i)`` minus ``n ||mean_||^2``, an
        unbiased random-feature estimate of the mean-embedding term
        (:func:`feature_mean_embedding`).
    total_variance_error_ : float, its standard error (nan where not known: ``tensorsketch``).
    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).

    See Also
    --------
    StreamingKPCA : the same features with a fixed-size Frequent Directions sketch.
    NystromKPCA : more accurate per unit of model size.
    fastkpca.features : the random feature maps.
    fastkpca.metrics.estimate_error : how close a fitted model is to exact KPCA.

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import ExactKPCA, RandomFeatureKPCA
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> model = RandomFeatureKPCA(n_components=3, gamma=0.1, n_random_features=500,
    ...                           random_state=0).fit(X)
    >>> model.transform(X[:2]).shape
    (2, 3)
    >>> exact = ExactKPCA(n_components=3, gamma=0.1).fit(X)
    >>> relative = abs(model.eigenvalues_ - exact.eigenvalues_) / exact.eigenvalues_
    >>> bool(relative.max() < 0.1)
    True
    """

    _accepts_sparse = True
    _draws_inverse_anchors = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        n_random_features=None,
        features="auto",
        input_sketch=None,
        solver="auto",
        n_buckets=None,
        oversamples=10,
        n_passes=2,
        random_state=None,
        tol=None,
        fit_inverse_transform=False,
        alpha=1.0,
        n_inverse_samples=None,
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
        self.n_random_features = n_random_features
        self.features = features
        self.input_sketch = input_sketch
        self.solver = solver
        self.n_buckets = n_buckets
        self.oversamples = oversamples
        self.n_passes = n_passes
        self.random_state = random_state
        self.tol = tol
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_inverse_samples = n_inverse_samples
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    # --- parameter checks -----------------------------------------------------------------
    def _check_params(self):
        """The shared checks, then this estimator's parameters (ValueError naming each), the
        feature map's last (:func:`fastkpca.features.check_feature_spec`)."""
        super()._check_params()
        if self.features != "auto" and self.features not in FEATURES:
            raise ValueError(f"features must be 'auto' or one of {FEATURES}, got {self.features!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        check_int("n_buckets", self.n_buckets, low=1, allow_none=True)
        check_int("oversamples", self.oversamples, low=0)
        if self.n_passes not in (1, 2) or isinstance(self.n_passes, bool):
            raise ValueError(f"n_passes must be 1 or 2, got {self.n_passes!r}")
        if self.solver not in ("exact", "auto") and _is_fraction(self.n_components):
            raise ValueError(
                "a float n_components (a fraction of the variance) needs solver='exact'"
            )
        check_feature_spec(self)

    def _choose_solver(self, n, m: int) -> str:
        """``solver="auto"``: ``"randomized"`` when its sketch is at least twice cheaper than
        the exact covariance (``m >= 4 q``: ``2 m q`` against ``m^2 / 2`` flops a row) and that
        would cost at least RANDOMIZED_MIN_FLOPS (n unknown, a stream: assumed large), else
        ``"exact"`` (always for a float ``n_components``, which needs every eigenvalue)."""
        if self.solver != "auto":
            return self.solver
        if _is_fraction(self.n_components):
            return "exact"
        if n is not None and n * m * m / 2 < RANDOMIZED_MIN_FLOPS:
            return "exact"
        k = self._resolve_n_components(m, what="n_output_features")
        return "randomized" if m >= 4 * self._sketch_width(k, m) else "exact"

    def _sketch_width(self, k: int, m: int) -> int:
        """q columns of the randomized solver's test matrix: ``2 k + oversamples``, raised so
        that q + 1 fills SGEMM's 8-column panels, at most m
        (:func:`~fastkpca.statistics.covariance_sketch.gemm_width`)."""
        return gemm_width(2 * k + self.oversamples, m)

    def _default_buckets(self, k: int) -> int:
        """t = max(2000, 50 q) with q = k + oversamples: the sketch costs O(t m) memory and
        O(t m min(t, m)) for its Gram, small next to the O(n m) passes, and its error falls like
        1/sqrt(t) (``benchmarks/NOTES.md``)."""
        if self.n_buckets is not None:
            return int(self.n_buckets)
        return max(2000, 50 * (k + self.oversamples))

    def _require_fit_memory(self, d: int, n) -> None:
        """Refuse, before anything is drawn, sizes whose arrays cannot fit (ValueError naming
        the parameter and the memory): the solver's statistic (per thread that can get rows)
        and the pre-image anchors; the frequencies are sized in
        :func:`fastkpca.features.draw_feature_map`."""
        m_asked = resolve_n_random_features(self.n_random_features)
        m = 2 * -(-m_asked // 2)  # the Fourier maps' cos / sin pairs (tensorsketch: m_asked)
        solver = self._choose_solver(n, m)
        parts = []
        if solver == "exact":
            parts.append(
                (3 * 8 * m * m, f"n_random_features={m_asked}: the {m} x {m} feature covariance")
            )
        elif solver == "randomized":
            q = self._sketch_width(self._resolve_n_components(m, what="n_output_features"), m)
            # one sketch per share of the rows (reduce_feature_chunks, balanced), and the
            # merged ones
            shares = n_shares(n_workers() if n is None else -(-n // CHUNK_ROWS))
            parts.append(
                (
                    8 * m * (q + 1) * (shares + 3),
                    f"n_random_features={m_asked}: a {m} x {q + 1} covariance sketch per share "
                    f"of the rows ({shares} shares)",
                )
            )
        else:
            t = self._default_buckets(self._resolve_n_components(m, what="n_output_features"))
            parts.append(
                (
                    8 * (2 * t * m + 2 * min(t, m) ** 2),
                    f"n_buckets={t} and n_random_features={m_asked}: the {t} x {m} CountSketch "
                    "of the features",
                )
            )
        if self.fit_inverse_transform:
            a = self.n_inverse_samples or DEFAULT_N_INVERSE_SAMPLES
            a = a if n is None else min(a, n)
            parts.append(
                (
                    8 * a * (2 * d + 2 * a),
                    f"n_inverse_samples={a}: the pre-image anchors and their {a} x {a} Gram",
                )
            )
        require_memory_parts(parts, hint="lower these sizes")

    # --- fit / transform ------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on an array / CSR matrix (n_samples, n_features), an iterable of row blocks, or a
        ``dask.array.Array`` (per-chunk statistics on the workers, merged up a tree).

        Every input gives the model of the in-memory array with the same ``random_state`` (up to
        the order of float64 sums): the kernel and the features are drawn from the first 8192
        rows, and the statistics of all blocks are merged.
        """
        self._check_params()
        if check_auto_size("n_random_features", self.n_random_features, self.tol):
            return self._fit_by_tolerance(X)  # size chosen by tolerance (statistics/growth.py)
        source = self._fit_source(X)
        first = source.head()
        self._require_fit_memory(first.shape[1], source.n_samples)
        fmap, rng = init_feature_map(self, first)
        m = fmap.n_output_features
        solver = self._choose_solver(source.n_samples, m)
        if solver == "exact":
            shift = feature_shift(first, fmap)
            moments, diag_sum = reduce_with_diag_sum(
                source,
                self.kernel_,
                feature_moments,
                FeatureMoments.merge,
                fmap,
                shift,
                desc="random features",
            )
            n, mean = moments.n, moments.mean
            k = self._resolve_n_components(min(n, m), what="min(n_samples, n_output_features)")
            vals, comps = rf_kpca_exact(moments, k, rng=rng)
        elif solver == "randomized":
            # The test matrix is drawn after the features (as the countsketch hash), so the
            # features stay those of StreamingKPCA / solver="exact" for the same random_state.
            k = self._resolve_n_components(m, what="n_output_features")
            shift, T = _shift_and_test_matrix(first, fmap, self._sketch_width(k, m), rng)
            sketch, diag_sum = reduce_with_diag_sum(
                source,
                self.kernel_,
                feature_scatter_sketch,
                functools.partial(_merge_sketches, T=T),
                fmap,
                T,
                shift,
                desc="random features",
            )
            n, mean = sketch.n, sketch.mean
            k = self._resolve_n_components(min(n, m), what="min(n_samples, n_output_features)")
            vals, comps = rf_kpca_randomized(sketch, T, k, scale=diag_sum)
        else:
            source.require_passes(
                self.n_passes, f"solver='countsketch' with n_passes={self.n_passes}"
            )
            # The hash seed is drawn after the features, so the features stay those of
            # StreamingKPCA / solver="exact" for the same random_state.
            seed = int(rng.integers(2**31))
            t = self._default_buckets(self._resolve_n_components(m, what="n_output_features"))
            k = self._resolve_n_components(min(m, t), what="min(n_output_features, n_buckets)")
            vals, comps, n, mean = rf_kpca_countsketch(
                source,
                fmap,
                k,
                n_buckets=t,
                oversamples=self.oversamples,
                n_passes=self.n_passes,
                seed=seed,
            )
            k = self._resolve_n_components(
                min(n, m, t), what="min(n_samples, n_output_features, n_buckets)"
            )
            vals, comps = vals[:k], comps[:k, ...]
            diag_sum = constant_diag_sum(self.kernel_, n, self.n_features_in_)
        self.solver_ = solver
        self.feature_map_ = fmap
        self.n_output_features_ = m
        self.n_samples_seen_ = int(n)
        self.mean_ = mean
        self.components_ = comps
        self.eigenvalues_ = vals
        self._finish_fit(
            diag_sum, *feature_mean_embedding(fmap, mean), self._inverse_anchor_sampler(source)
        )
        return self

    # --- size chosen by tolerance ---------------------------------------------------------
    def _fit_by_tolerance(self, X):
        """Fit at ``n_random_features`` = 256, 512, ... until the relative rank-k error bound
        from a probe is at most ``1 + tol`` (:mod:`fastkpca.statistics.growth`); ``rff`` /
        ``orf`` with ``solver="exact"`` keep the moments of the features already drawn
        (:class:`~fastkpca.statistics.growth.GrowingFourierMoments`), others refit."""
        tol = check_tol(self.tol, auto=True)
        source = self._fit_source(X)
        source.require_passes(2, f"tol={tol} (a pass per model size)")
        first = source.head()
        rng = self._make_rng()
        probe_rng = np.random.default_rng(int(rng.integers(2**63)))
        kernel = self._resolve_kernel(row_range(first, 0, DEFAULT_BLOCK_ROWS), rng)
        kind = resolve_features(self.features, kernel, first.shape[1])
        probe = draw_probe(source, probe_rng, kernel=kernel)
        k = self.n_components or DEFAULT_N_COMPONENTS
        start = max(TOL_START_FEATURES, 1 << int(np.ceil(np.log2(2 * k))))
        sizes = doubling_sizes(start, max(start, TOL_MAX_FEATURES))
        grows = (
            kind in ("rff", "orf")
            and self.solver in ("exact", "auto")
            and self.input_sketch is None  # the sketched map draws all its frequencies at once
        )
        if grows:
            grown = GrowingFourierMoments(kind)

            def fit_at(m):
                # its peak: the grown moments, their copy in the map's order and the covariance
                clone(self).set_params(n_random_features=m, solver="exact")._require_fit_memory(
                    first.shape[1], source.n_samples
                )
                extra = draw_feature_map(kind, kernel, m - grown.sum.shape[0], first.shape[1], rng)
                grown.extend(source, extra.frequencies, first)
                moments = grown.moments()
                fmap = grown.feature_map()
                k = self._resolve_n_components(
                    min(moments.n, fmap.n_output_features),
                    what="min(n_samples, n_output_features)",
                )
                vals, comps = rf_kpca_exact(moments, k, rng=rng)
                self.feature_map_ = fmap
                self.n_output_features_ = fmap.n_output_features
                self.n_samples_seen_ = int(moments.n)
                self.mean_ = moments.mean
                self.components_ = comps
                self.eigenvalues_ = vals
                return copy.copy(self)  # this size's fitted attributes (later sizes rebind them)
        else:
            seed = int(rng.integers(2**31))

            def fit_at(m):
                return (
                    clone(self).set_params(n_random_features=m, tol=None, random_state=seed).fit(X)
                )

        grow_estimator(self, source, probe, fit_at, sizes, "n_random_features")
        if grows:
            # The grown moments are small (m x m) host totals of features computed where the
            # rows live: the model's arrays move there, as a fit's.
            for name in ("mean_", "components_", "eigenvalues_"):
                setattr(self, name, source.placement.asarray(getattr(self, name), np.float64))
            self.solver_ = "exact"
            # What fit does after its solver, once for the chosen size (rff / orf kernels are
            # shift-invariant: the diagonal sum is n k(0)).
            self._finish_fit(
                constant_diag_sum(self.kernel_, self.n_samples_seen_, self.n_features_in_),
                *feature_mean_embedding(self.feature_map_, self.mean_),
                self._inverse_anchor_sampler(source),
            )
        self.n_random_features_ = self.n_output_features_
        return self

    def _transform_rows(self, X):
        """``(z(X) - mean_) @ components_.T``, in feature blocks."""
        return feature_projection(X, self.feature_map_, self.mean_, self.components_)
