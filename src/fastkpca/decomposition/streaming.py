"""StreamingKPCA (SKPCA): random features fed into Frequent Directions.

Ghashami, Perry & Phillips (2016), Algorithm 1, with exact feature-space centering: the source's
rows are mapped to random features drawn from its first rows, sketched by Frequent Directions
into a :class:`~fastkpca.statistics.feature_sketch.FeatureSketch` (reduced in order over arrays
and streams, merged up a tree over dask chunks) and solved by
:func:`~fastkpca.statistics.feature_sketch.skpca_eigen` (centering and error bound there).
Memory is O(d m + ell m) plus one row block, independent of n.  The statistic is written once
over the array namespace: on a device the features and sketch buffers live there and the rows
reach the same sketches in the same order as on the host; the O(ell m) eigenproblems run with
the host's LAPACK.

``fit``, ``partial_fit`` and ``merge`` hold a lock of the estimator (not a parameter, not
pickled) so that two threads feeding one model take turns and no block is lost.
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from .._utils import check_int, require_memory_parts
from ..execution import track_rows
from ..features import (
    FEATURES,
    check_feature_spec,
    feature_projection,
    init_feature_map,
    resolve_n_random_features,
)
from ..source import as_source
from ..statistics.feature_sketch import (
    SPLIT_ROWS,
    FeatureSketch,
    feature_sketch,
    sketch_bytes,
    sketch_count,
    skpca_eigen,
)
from ..statistics.growth import (
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
    pass_block_rows,
    reduce_tracked,
    restores_on_failure,
)
from .random_features import constant_diag_sum, feature_mean_embedding

__all__ = ["StreamingKPCA", "DEFAULT_SKETCH_SIZE"]

#: ``sketch_size=None`` means ``max(DEFAULT_SKETCH_SIZE, 2 * n_components)`` rows: the largest
#: ell of the paper's experiments, and ell >= 2k makes the FD bound ``tail_k / (ell + 1 - k)``
#: at most ``tail_k / k``.
DEFAULT_SKETCH_SIZE = 50

#: ``tol``: the sizes tried double from this many features (or 2 n_components) ...
TOL_START_FEATURES = 256
#: ... up to this many, ...
TOL_MAX_FEATURES = 2**14
#: ... with ``sketch_size = max(default, n_random_features / TOL_FEATURES_PER_ROW)`` unless given.
TOL_FEATURES_PER_ROW = 8

#: Each estimator's lock (:func:`_serialized`), kept beside it rather than in its attributes:
#: no parameter, nothing to pickle, nothing a failed call must put back; a clone, a copy or an
#: unpickled model is another object, with a lock of its own.
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _call_lock(estimator) -> threading.RLock:
    """The estimator's lock, made on first use.  Re-entrant: a serialized call may make
    another (``fit_transform`` calls ``fit``)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(estimator)
        if lock is None:
            lock = _LOCKS[estimator] = threading.RLock()
    return lock


def _serialized(method):
    """A model-changing call run under the estimator's lock, around the whole call (the state
    saved for a failure included): ``partial_fit`` from two threads takes turns instead of
    both continuing the same sketch and keeping one of them (issue 32: 15,500 of 30,500 rows
    seen).  Marked as an estimator call already, so that ``BaseKPCA`` does not wrap it again
    with the lock inside."""
    inner = restores_on_failure(method)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with _call_lock(self):
            return inner(self, *args, **kwargs)

    call.estimator_call = True  # type: ignore[attr-defined]
    call.restores_on_failure = True  # type: ignore[attr-defined]
    return call


class StreamingKPCA(BaseKPCA):
    """Streaming kernel PCA: random features sketched by Frequent Directions (SKPCA).

    Ghashami, Perry & Phillips (2016), Algorithm 1, with exact feature-space centering (see the
    module docstring).  ``fit`` is a loop of ``partial_fit`` over row blocks (like
    ``sklearn.decomposition.IncrementalPCA``) and accepts an array, a CSR matrix or an iterable
    of row blocks; memory is O(d m + ell m) plus one block, whatever n.  Frequent Directions
    shrinks after fixed row counts, so ``partial_fit`` over any blocking gives the same sketch
    as ``fit`` up to the round-off of computing features on blocks of other shapes (a
    data-dependent ``gamma`` is resolved on the first block, which then must be the same).

    ``transform(X) = (z(X) - mean_) @ components_.T`` approximates
    ``sklearn.decomposition.KernelPCA(...).transform(X)`` (same scale, deterministic column
    signs).  With ``sketch_size >= n_output_features_`` it equals ``RandomFeatureKPCA`` with the
    same ``n_random_features``, ``features`` and ``random_state`` up to round-off.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives min(10, n_samples_seen, sketch rows).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"`` (``rff``; ``orf`` and ``fastfood`` take rbf and
        matern) or ``"polynomial"`` (``tensorsketch``); others raise ValueError.
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features_in as in ``KernelPCA``.  The string forms are
        resolved on the first row block (at most 8192 rows) the model sees.
    degree, coef0 : polynomial kernel parameters.  nu : Matern smoothness.
    n_random_features : int or None
        Number m of random features (None: 1000, as ``RandomFeatureKPCA``); the Fourier maps
        round an odd m up to even.  ``"auto"`` (or None with a ``tol``): chosen by tolerance.
    sketch_size : int or None
        ell, the rows Frequent Directions keeps after each shrink (None:
        ``max(50, 2 n_components)``), the ell of the bound
        ``||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``.  Each sketch's buffer holds
        ``3 ell`` rows, shrunk back to ell by one eigendecomposition when full
        (:func:`fastkpca.sketch.default_batch_size`); the paper's ell (Algorithm 1) is the
        buffer, so ``sketch_size=ell`` has the guarantee of the paper's 2 ell.  Rows are dealt,
        in runs of 1024 by row index, between up to 32 sketches
        (:func:`~fastkpca.statistics.feature_sketch.sketch_count`) updated by parallel threads
        and merged up a fixed tree (same bound); sketches that cannot fit in memory are refused
        up front (ValueError).  ``ell >= n_output_features_`` never shrinks (exact model).
    features : {"auto", "rff", "orf", "qmc", "fastfood", "tensorsketch"}
        The feature map, see :mod:`fastkpca.features` (``auto``:
        :func:`fastkpca.features.resolve_features`).
    random_state : int, Generator or None
        Draws the features.  Models to be merged need the same (fixed) seed.
    tol : float or None
        Size by tolerance (needs ``n_random_features`` None or ``"auto"``): as
        ``RandomFeatureKPCA``'s ``tol``, with ``sketch_size`` = ``max(default,
        n_random_features / 8)`` unless given.  Each size re-sketches (a pass over the data), so
        ``fit`` needs an array or a re-iterable block source; ``partial_fit`` refuses it.
    fit_inverse_transform : bool, default False
        ``fit`` learns the pre-image map of :meth:`inverse_transform` (kernel ridge regression
        as ``KernelPCA``) on ``n_inverse_samples`` training rows; ``partial_fit`` and ``merge``
        do not update it.
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_inverse_samples : int or None
        Pre-image anchors (None: 1000, capped at n); too many to fit in memory: ValueError.
    n_jobs : int or None, default None
        Threads of each call, as ``RandomFeatureKPCA``'s.  The model does not depend on it (the
        rows each sketch sees are fixed by their index), up to the rounding of float sums.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` and ``partial_fit`` show a progress bar (tqdm).
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute, as ``RandomFeatureKPCA``'s.

    Attributes
    ----------
    eigenvalues_ : (n_components,) estimated top eigenvalues of the centered training Gram
        (of the features): the sketch plus its tracked loss, within ``eigenvalue_bounds_``
        (:func:`skpca_eigen`; exact when nothing was shrunk).
    eigenvalue_bounds_ : (2, n_components) lower and upper bounds on the exact eigenvalues
        of the same features' centered covariance (RandomFeatureKPCA's): the uncompensated
        sketch's eigenvalues and those plus ``min(total_shrinkage, missing energy)``.
    components_ : (n_components, n_output_features_) principal axes in feature space.
    mean_ : (n_output_features_,) the mean of the training features.
    feature_sum_ : (n_output_features_,) float64 sum of the training features.
    sketch_ : :class:`fastkpca.sketch.FrequentDirections` of the feature rows.
    feature_map_, kernel_, n_output_features_, n_random_features_, size_history_ : as
        ``RandomFeatureKPCA``'s.
    n_samples_seen_, n_components_, n_features_in_ : int.
    total_variance_, total_variance_error_ : float
        ``tr(H K H)`` of the training Gram, as ``RandomFeatureKPCA``'s (shift-invariant kernels
        only; unset for the polynomial kernel, whose diagonal ``partial_fit`` does not sum).
    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.

    Notes
    -----
    ``n_components=None`` gives at most 10 components (scikit-learn's ``KernelPCA`` keeps all
    nonzero ones); a float ``n_components`` keeps the fewest of the sketch's top eigenpairs (at
    most ``sketch_size``) whose estimated variance reaches that fraction of ``total_variance_``.

    References
    ----------
    M. Ghashami, D. J. Perry, J. M. Phillips, "Streaming kernel principal component analysis",
    AISTATS 2016.

    See Also
    --------
    RandomFeatureKPCA : the same features with their exact m x m covariance.
    fastkpca.sketch.FrequentDirections : the sketch.
    NystromKPCA : more accurate per unit of model size when the rows can be read twice.

    Examples
    --------
    Fit block by block, as rows arrive:

    >>> import numpy as np
    >>> from fastkpca import StreamingKPCA
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> model = StreamingKPCA(n_components=3, gamma=0.1, n_random_features=200, sketch_size=20,
    ...                       random_state=0)
    >>> for block in np.array_split(X, 3):
    ...     model = model.partial_fit(block)
    >>> model.n_samples_seen_
    300
    >>> lower, upper = model.eigenvalue_bounds_  # rigorous bounds on each eigenvalue
    >>> bool(np.all(lower <= upper))
    True
    >>> model.transform(X[:2]).shape
    (2, 3)
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
        sketch_size=None,
        features="auto",
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
        self.sketch_size = sketch_size
        self.features = features
        self.random_state = random_state
        self.tol = tol
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_inverse_samples = n_inverse_samples
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    # --- parameters -----------------------------------------------------------------------
    def _check_params(self):
        """The shared checks, then this estimator's parameters (ValueError naming each), the
        feature map's last (:func:`fastkpca.features.check_feature_spec`)."""
        super()._check_params()
        if self.features != "auto" and self.features not in FEATURES:
            raise ValueError(f"features must be 'auto' or one of {FEATURES}, got {self.features!r}")
        check_int("sketch_size", self.sketch_size, low=1, allow_none=True)
        if self.n_components is not None and not _is_fraction(self.n_components):
            check_int("n_components", self.n_components, low=1)
        check_feature_spec(self)

    def _require_fit_memory(self, d: int, n, *, inverse: bool = True) -> None:
        """Refuse, before the pass over the data, a ``sketch_size`` or ``n_inverse_samples``
        whose arrays cannot fit (ValueError naming the parameter and the memory): the Frequent
        Directions sketches (one per run of 1024 rows up to :func:`sketch_count`, each with its
        buffer, shrink workspace and loss, and as much again while they are merged when read)
        and the pre-image anchors (rows and their Gram).  The frequencies are sized, and refused,
        where they are drawn just before (:func:`fastkpca.features.draw_feature_map`)."""
        m_asked = resolve_n_random_features(self.n_random_features)
        m = 2 * -(-m_asked // 2)  # the Fourier maps' cos / sin pairs (tensorsketch: m_asked)
        ell = self._sketch_rows()
        count = sketch_count(ell, m)
        used = count if n is None else max(1, min(count, -(-n // SPLIT_ROWS)))
        parts = [
            (
                2 * used * sketch_bytes(ell, m),
                f"sketch_size={ell} with n_random_features={m_asked}: {used} Frequent Directions "
                f"sketches of {ell} rows by {m} features (each with its buffer of up to "
                f"{3 * ell} rows) and their merge",
            )
        ]
        if inverse and self.fit_inverse_transform:
            a = check_int("n_inverse_samples", self.n_inverse_samples, low=1, allow_none=True)
            a = DEFAULT_N_INVERSE_SAMPLES if a is None else a
            a = a if n is None else min(a, n)
            parts.append(
                (
                    8 * a * (2 * d + 2 * a),
                    f"n_inverse_samples={a}: the pre-image anchors and their {a} x {a} Gram",
                )
            )
        require_memory_parts(parts, hint="lower these sizes")

    def _sketch_rows(self) -> int:
        if self.sketch_size is not None:
            return int(self.sketch_size)
        k = self.n_components
        k = k if isinstance(k, int | np.integer) and not isinstance(k, bool) else None
        return max(DEFAULT_SKETCH_SIZE, 2 * (k or DEFAULT_N_COMPONENTS))

    # --- fitting --------------------------------------------------------------------------
    def _reset(self):
        for name in (
            "feature_map_",
            "sketch_",
            "feature_sum_",
            "n_samples_seen_",
            "kernel_",
            "components_",
            "eigenvalues_",
            "eigenvalue_bounds_",
            "mean_",
            "n_components_",
            "n_output_features_",
            "n_features_in_",
            "n_random_features_",
            "size_history_",
            "_sketch_parts",
        ):
            if hasattr(self, name):
                delattr(self, name)

    @_serialized
    def fit(self, X, y=None):
        """Fit on an array / CSR matrix (n_samples, n_features), an iterable of row blocks or a
        ``dask.array.Array``.

        Equivalent to ``partial_fit`` over the row blocks (blocks of 8192 rows for an array),
        starting from scratch; the kernel and the features are drawn from the first 8192 rows.
        A dask array is sketched chunk by chunk on the workers and the sketches merged.
        """
        self._reset()
        self._check_params()
        if check_auto_size("n_random_features", self.n_random_features, self.tol):
            return self._fit_by_tolerance(X)  # size chosen by tolerance (statistics/growth.py)
        source = self._fit_source(X)
        first = source.head()
        self._draw(first)  # refuses frequencies that cannot fit (draw_feature_map)
        self._require_fit_memory(first.shape[1], source.n_samples)
        stat = reduce_tracked(
            source,
            feature_sketch,
            FeatureSketch.merge,
            self.feature_map_,
            self._sketch_rows(),
            desc="sketching",
        )
        self._store(stat)
        if self.fit_inverse_transform:
            self._fit_inverse(self._inverse_anchor_sampler(source)())
        return self

    @_serialized
    def partial_fit(self, X, y=None):
        """Add rows (an array, CSR matrix, iterable of blocks or dask array) to the model.

        The first call resolves the kernel and draws the features; rows are dealt to the
        sketches by row index, as ``fit`` deals them, so any blocking gives ``fit``'s sketch up
        to round-off (a model read from a file continues from its merged sketch).  A failing
        call leaves the model as it was (the rows go into a copy of the sketches); calls from
        several threads take turns.  Returns self.
        """
        first = not hasattr(self, "sketch_")
        if first:
            self._check_params()
            if check_auto_size("n_random_features", self.n_random_features, self.tol):
                raise ValueError(
                    "partial_fit cannot choose n_random_features by tolerance (tol / "
                    "n_random_features='auto'): it sees each row once; use fit on an array or a "
                    "re-iterable block source"
                )
        source = as_source(
            X, estimator=self, reset=first, accept_sparse=True, placement=self._placement(X)
        )
        seen = 0 if first else self.n_samples_seen_
        if (
            isinstance(self.n_components, int)
            and source.n_samples is not None
            and seen + source.n_samples < self.n_components
        ):
            # Checked before sketching, so a refused block leaves the model unchanged (the
            # IncrementalPCA rule: the first batch must hold at least n_components rows).
            raise ValueError(
                f"n_components={self.n_components} is larger than the number of "
                f"samples seen ({seen + source.n_samples}); pass a larger first block"
            )
        if first:
            head = source.head()
            self._draw(head)
            # a stream, which may go on; partial_fit learns no pre-image map
            self._require_fit_memory(head.shape[1], None, inverse=False)
            stat = FeatureSketch.empty(self._sketch_rows(), self.n_output_features_)
        else:
            # The rows go into a copy (its sketches copied as rows reach them): a block that
            # fails half-way (NaN, wrong width) must not leave its first rows in the model's
            # sketches (see BaseKPCA).
            stat = self._statistic().copy()
        blocks = track_rows(
            source.blocks(pass_block_rows(source)), total=source.n_samples, desc="sketching"
        )
        self._store(feature_sketch(blocks, self.feature_map_, stat.sketch_size, into=stat))
        return self

    # --- size chosen by tolerance ---------------------------------------------------------
    def _fit_by_tolerance(self, X):
        """Fit at ``n_random_features`` = 256, 512, ... (and ``sketch_size`` = ``max(default,
        n_random_features / 8)`` unless given) until the relative rank-k error bound from a probe of
        the training rows is at most ``1 + tol`` (:mod:`fastkpca.statistics.growth`).

        A Frequent Directions sketch of m features cannot be extended by new feature columns,
        so each size re-sketches (a pass over the data); the probe and the seed are shared.
        """
        tol = check_tol(self.tol, auto=True)
        source = self._fit_source(X)
        source.require_passes(2, f"tol={tol} (a pass per model size)")
        rng = self._make_rng()
        seed = int(rng.integers(2**31))
        probe = draw_probe(source, rng)
        k = self.n_components or DEFAULT_N_COMPONENTS
        start = max(TOL_START_FEATURES, 1 << int(np.ceil(np.log2(2 * k))))
        sizes = doubling_sizes(start, max(start, TOL_MAX_FEATURES))

        def fit_at(m):
            ell = self.sketch_size or max(self._sketch_rows(), m // TOL_FEATURES_PER_ROW)
            return (
                clone(self)
                .set_params(n_random_features=m, sketch_size=ell, tol=None, random_state=seed)
                .fit(X)
            )

        grow_estimator(self, source, probe, fit_at, sizes, "n_random_features")
        self.n_random_features_ = self.n_output_features_
        return self

    def _draw(self, X_first):
        """Resolve the kernel and draw the features from the first rows."""
        self.feature_map_, _ = init_feature_map(self, X_first)
        self.n_output_features_ = self.feature_map_.n_output_features

    def _store(self, stat: FeatureSketch):
        self.sketch_ = stat.sketch
        # The statistic's parallel sketches, so that partial_fit continues each of them (the
        # same sketch as fit over the same rows); a loaded model continues from sketch_.
        self._sketch_parts = (stat.parts, self.sketch_)
        self.feature_sum_ = stat.feature_sum
        self.n_samples_seen_ = stat.n
        self._finalize()
        self._set_total_variance(
            constant_diag_sum(self.kernel_, self.n_samples_seen_, self.n_features_in_),
            *feature_mean_embedding(self.feature_map_, self.mean_),
        )
        if _is_fraction(self.n_components):
            # of the sketch's top eigenpairs (at most sketch_size), against the estimated trace
            self._keep_fraction(float(self.n_components))

    def _finalize(self):
        """Eigenpairs, eigenvalue bounds, mean from the sketch (cheap: O(ell^2 m)).

        The buffer (up to 3 ell rows) is used as it is rather than shrunk once more: it holds
        strictly more of the stream, and its loss is at most ``total_shrinkage`` per direction.
        """
        B = self.sketch_.rows()
        feature_sum = self.feature_sum_
        n = self.n_samples_seen_
        k = self._resolve_n_components(
            min(n, self.sketch_.sketch_size, B.shape[1]),
            what="min(n_samples_seen, sketch_size, n_random_features)",
        )
        sketch = self.sketch_
        self.eigenvalues_, self.components_, self.eigenvalue_bounds_ = skpca_eigen(
            B,
            feature_sum,
            n,
            k,
            shrinkage=sketch.total_shrinkage,
            loss=sketch.loss_model(),
            missing_energy=sketch.missing_energy,
            return_bounds=True,
        )
        self.mean_ = feature_sum / n

    # --- merging --------------------------------------------------------------------------
    @_serialized
    def merge(self, other: StreamingKPCA) -> StreamingKPCA:
        """A new model fitted on the rows of both models (neither is modified): the Frequent
        Directions sketches merged (:meth:`fastkpca.sketch.FrequentDirections.merge`) and the
        feature sums added.  Needs the same parameters and drawn features; otherwise ValueError
        before anything is computed."""
        if not isinstance(other, StreamingKPCA):
            raise ValueError(f"can only merge with a StreamingKPCA, got {type(other).__name__}")
        check_is_fitted(self)
        check_is_fitted(other)
        mine, theirs = self.get_params(), other.get_params()
        # the threads and the progress bars do not change a model: models fitted with other
        # n_jobs or verbose merge (the result keeps this model's)
        diff = sorted(
            k
            for k in mine
            if k not in ("n_jobs", "verbose") and not _same_param(mine[k], theirs[k])
        )
        if diff:
            raise ValueError(f"cannot merge StreamingKPCA models with different parameters: {diff}")
        if self.n_features_in_ != other.n_features_in_:
            raise ValueError(
                f"cannot merge models fitted on {self.n_features_in_} and "
                f"{other.n_features_in_} input features"
            )
        if self.kernel_ != other.kernel_ or not _same_feature_map(
            self.feature_map_, other.feature_map_
        ):
            raise ValueError(
                "cannot merge StreamingKPCA models with different random features: "
                "fit both with the same integer random_state (and a numeric gamma "
                "or gamma=None, so the kernel does not depend on the data)"
            )
        out = clone(self)
        out.n_features_in_ = self.n_features_in_
        out.kernel_ = self.kernel_
        out.feature_map_ = self.feature_map_
        out.n_output_features_ = self.n_output_features_
        out._store(self._statistic().merge(other._statistic()))
        return out

    def _statistic(self) -> FeatureSketch:
        parts, merged = getattr(self, "_sketch_parts", (None, None))
        if merged is not self.sketch_:
            parts = [self.sketch_]  # a loaded or replaced sketch: continue from it
        return FeatureSketch(parts, self.feature_sum_, self.n_samples_seen_)

    def _transform_rows(self, X):
        """``(z(X) - mean_) @ components_.T``, in feature blocks."""
        return feature_projection(X, self.feature_map_, self.mean_, self.components_)


def _same_param(a, b) -> bool:
    if isinstance(a, np.random.Generator) or isinstance(b, np.random.Generator):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # e.g. objects without a boolean comparison
        return a is b


def _same_feature_map(a, b) -> bool:
    """Same class and the same drawn parameters (compared through their state)."""
    if type(a) is not type(b):
        return False
    sa, sb = a.to_state(), b.to_state()
    if sa.keys() != sb.keys():
        return False
    return all(np.array_equal(np.asarray(sa[k]), np.asarray(sb[k])) for k in sa)
