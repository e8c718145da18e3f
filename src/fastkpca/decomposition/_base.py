"""What every fastkpca estimator shares: the data path in and out, kernel, n_components, tags.

A subclass's ``__init__`` only stores arguments; its ``fit`` reads as a pipeline: check
parameters, make the source (:meth:`BaseKPCA._fit_source`), draw what is random, reduce a
statistic over its blocks, a pure solver function, store fitted attributes.  ``transform`` is
shared (``_transform_rows`` on an in-memory array, or per chunk of a dask array), and so are the
total variance and pre-image map (:meth:`BaseKPCA._finish_fit`).

Every public call (:data:`ESTIMATOR_CALLS`) runs in :func:`estimator_call`, holding ``n_jobs``
and ``verbose`` in the execution context; a failed mutating call (:data:`MUTATING_METHODS`)
restores the model's attributes (:func:`restores_on_failure`).

Where fitted attributes live (scikit-learn's array-API rule): **the public fitted arrays have the
array type and device of the data given to fit**.  The work runs where ``device`` says
(:func:`fastkpca.execution.arrays.placement_for`) and the model as computed is cached for its
placement (:meth:`BaseKPCA._placed`); ``transform`` returns the input's array type, device and
float dtype; model files hold host arrays.  Inputs go through the one edge of
:mod:`fastkpca.source`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import numbers
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import scipy.linalg as la
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array, check_is_fitted

from .._utils import DEFAULT_BLOCK_ROWS, as_generator, check_float, check_int
from ..execution import (
    CHUNK_ROWS,
    check_n_jobs,
    n_workers,
    track_rows,
    using_n_jobs,
    using_verbose,
    verbosity,
)
from ..execution.arrays import (
    Placement,
    check_device,
    data_placement,
    get_namespace,
    is_array,
    output_like,
    placement_for,
    placement_of,
    take_rows,
    to_host,
)
from ..execution.progress import check_verbose
from ..kernels import (
    DEGENERATE_CHECK_ROWS,
    Kernel,
    first_rows_gram,
    make_kernel,
    may_be_degenerate,
    scaled_gram,
    warn_if_degenerate,
)
from ..persistence import save_model
from ..source import (
    INPUT_PLACEMENT,
    TRAINING_SOURCE,
    ArraySource,
    RowSource,
    as_source,
    check_block,
)

__all__ = [
    "BaseKPCA",
    "ESTIMATOR_CALLS",
    "check_n_components",
    "check_solver_stopping",
    "MUTATING_METHODS",
    "DEFAULT_N_COMPONENTS",
    "DEFAULT_N_INVERSE_SAMPLES",
    "DEFAULT_N_PROBE",
    "mean_embedding_probe",
    "reduce_with_diag_sum",
    "reduce_tracked",
    "pass_block_rows",
    "estimator_call",
    "execution_context",
    "restores_on_failure",
]

#: ``n_components=None`` means this many, capped to what the data allows (scikit-learn's
#: ``KernelPCA`` keeps every nonzero component; ``fastkpca.KernelPCA`` is that drop-in).
DEFAULT_N_COMPONENTS = 10

#: Rows drawn for the mean-embedding probe of ``total_variance_`` where the model has no exact
#: value (see :func:`mean_embedding_probe`).
DEFAULT_N_PROBE = 1000

#: ``n_inverse_samples=None``: pre-image anchors drawn from the training rows by the models that
#: keep no rows (RandomFeatureKPCA, StreamingKPCA).
DEFAULT_N_INVERSE_SAMPLES = 1000

#: The public calls that change a model; each leaves it as it was when it raises
#: (:func:`restores_on_failure`, applied by :meth:`BaseKPCA.__init_subclass__`).  ``set_params``
#: is not among them: it only stores parameters, checked by the next ``fit``.
MUTATING_METHODS = ("fit", "fit_transform", "partial_fit", "merge")

#: The public calls that run under the estimator's ``n_jobs`` and ``verbose``
#: (:func:`estimator_call`, applied by :meth:`BaseKPCA.__init_subclass__`).
ESTIMATOR_CALLS = (*MUTATING_METHODS, "transform", "inverse_transform")


@contextmanager
def execution_context(estimator) -> Iterator[None]:
    """The estimator's ``n_jobs`` and ``verbose`` as the execution layer's context
    (:func:`fastkpca.execution.using_n_jobs`, :func:`fastkpca.execution.using_verbose`).
    ``n_jobs=None`` keeps the enclosing context's count, else what joblib's context gives.  A
    bad value raises ValueError naming the parameter, before any work."""
    n_jobs = check_n_jobs(getattr(estimator, "n_jobs", None))
    with (
        contextlib.nullcontext() if n_jobs is None else using_n_jobs(n_jobs),
        using_verbose(getattr(estimator, "verbose", 0)),
    ):
        yield


#: The estimators (by ``id``) inside a mutating call in this context: a call nested in another
#: call of the same estimator (``fit`` calling ``partial_fit``) is not its outermost one.
_IN_CALL: ContextVar[frozenset[int]] = ContextVar("fastkpca_in_call", default=frozenset())


def estimator_call(method, *, mutating: bool):
    """Wrap a public method: it runs in the estimator's :func:`execution_context` after the
    ``device`` check, and if ``mutating`` a failure (``KeyboardInterrupt`` included) restores
    the attributes it saw; the outermost mutating call starts from the model as computed
    (:meth:`BaseKPCA._computed`) and ends with :meth:`BaseKPCA._settle`."""
    if getattr(method, "estimator_call", False):
        return method

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with execution_context(self):
            device = getattr(self, "device", None)
            if device is not None:
                placement_for(None, device)  # a device that cannot compute: before any work
            if not mutating:
                return method(self, *args, **kwargs)
            active = _IN_CALL.get()
            outermost = id(self) not in active
            token = _IN_CALL.set(active | {id(self)})
            saved = dict(vars(self))
            try:
                if outermost:
                    vars(self).update(self._computed_attributes())
                    args = tuple(_computed(a) for a in args)
                    previous = vars(self).pop(INPUT_PLACEMENT, None)
                result = method(self, *args, **kwargs)
                vars(self).pop(_PLACED, None)  # the model changed: its copies elsewhere too
                if outermost:
                    vars(self).pop(TRAINING_SOURCE, None)  # it holds the data
                    origin = (
                        vars(self).get(INPUT_PLACEMENT)
                        or (data_placement(args[0]) if args else None)
                        or previous
                    )
                    if origin is not None:
                        vars(self)[INPUT_PLACEMENT] = origin
                    self._settle(origin)
                    if isinstance(result, BaseKPCA) and result is not self:
                        result._settle(origin)
            except BaseException:
                state = vars(self)
                state.clear()
                state.update(saved)
                raise
            finally:
                _IN_CALL.reset(token)
            return result

    call.estimator_call = True  # type: ignore[attr-defined]
    call.restores_on_failure = mutating  # type: ignore[attr-defined]
    return call


def restores_on_failure(method):
    """:func:`estimator_call` of a call that changes the model: if it raises, the estimator's
    attributes are put back as they were before the call."""
    return estimator_call(method, mutating=True)


class BaseKPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Mixin of the shared machinery; not an estimator by itself."""

    def __init_subclass__(cls, **kwargs):
        """Run each call of :data:`ESTIMATOR_CALLS` that ``cls`` defines through
        :func:`estimator_call`: under the estimator's ``n_jobs`` and ``verbose``, and, for
        :data:`MUTATING_METHODS`, restoring the model when it fails."""
        super().__init_subclass__(**kwargs)
        for name in ESTIMATOR_CALLS:
            method = cls.__dict__.get(name)
            if callable(method):
                setattr(cls, name, estimator_call(method, mutating=name in MUTATING_METHODS))

    @restores_on_failure
    def fit_transform(self, X, y=None, **params):
        """Fit to X and return ``transform(X)`` (scikit-learn's ``fit_transform``); if either
        step fails, the model is left as it was before the call."""
        return super().fit_transform(X, y, **params)

    #: Whether ``fit`` / ``transform`` accept scipy.sparse input.
    _accepts_sparse = False

    #: Whether ``fit_inverse_transform`` draws anchor rows in a pass of their own (the models
    #: that keep no rows, landmarks or centres).
    _draws_inverse_anchors = False

    #: Whether ``kernel="precomputed"`` (the training Gram as input) is accepted.
    _accepts_precomputed_kernel = False

    # --- parameter checks -----------------------------------------------------------------
    def _check_params(self):
        """Check the parameters every estimator shares, from their values alone (ValueError
        naming the parameter), before ``fit`` reads a row and when a model file loads
        (:func:`fastkpca._model_schema.check_params`): ``n_components``, the kernel spec,
        ``random_state``, ``fit_inverse_transform``, ``alpha``, ``n_inverse_samples``."""
        names = set(self._get_param_names())
        if "n_components" in names:
            check_n_components(self.n_components)
        if _KERNEL_SPEC <= names:
            self._check_kernel_spec()
        if "random_state" in names:
            self._make_rng()
        if "fit_inverse_transform" in names and not isinstance(
            self.fit_inverse_transform, bool | np.bool_
        ):
            raise ValueError(
                f"fit_inverse_transform must be True or False, got {self.fit_inverse_transform!r}"
            )
        if "alpha" in names:
            check_float("alpha", self.alpha, low=0.0)
        if "n_inverse_samples" in names:
            check_int("n_inverse_samples", self.n_inverse_samples, low=1, allow_none=True)
        if "n_jobs" in names:
            check_n_jobs(self.n_jobs)
        if "verbose" in names:
            check_verbose(self.verbose)
        if "device" in names:
            check_device(self.device)

    def _check_kernel_spec(self) -> Kernel | None:
        """The kernel of the spec resolved on two zero rows (the string forms of gamma need rows,
        their spelling does not), so that a bad kernel name or parameter is refused before any
        data (ValueError); None for an accepted ``kernel="precomputed"``."""
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            if not self._accepts_precomputed_kernel:
                raise ValueError(_refuse_precomputed(type(self).__name__))
            return None
        try:
            return make_kernel(
                self.kernel,
                gamma=self.gamma,
                degree=self.degree,
                coef0=self.coef0,
                nu=self.nu,
                X=_PARAMETER_PROBE,
                rng=0,
            )
        except TypeError as exc:  # a value of the wrong type deep in a kernel's constructor
            raise ValueError(
                f"invalid kernel parameters for kernel={self.kernel!r}: {exc}"
            ) from None

    # --- kernel and randomness ------------------------------------------------------------
    def _make_rng(self) -> np.random.Generator:
        return as_generator(self.random_state)

    def _resolve_kernel(self, X, rng=None) -> Kernel:
        """Set ``kernel_`` from the kernel spec, a numeric gamma resolved on X (``gamma`` kept).

        X is an array of rows (e.g. a source's first rows) or a :class:`RowSource` (all its rows,
        sampled by index for ``gamma="median"``).
        """
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError(_refuse_precomputed(type(self).__name__))
        if isinstance(X, RowSource):
            X = X.indexable()
        seed = None if rng is None else int(rng.integers(2**31))
        self.kernel_ = make_kernel(
            self.kernel,
            gamma=self.gamma,
            degree=self.degree,
            coef0=self.coef0,
            nu=self.nu,
            X=X,
            rng=seed,
        )
        return self.kernel_

    def _resolve_n_components(self, max_components: int, what: str = "n_samples") -> int:
        """Set ``n_components_``: the requested number, or the capped default for None.

        A float in (0, 1) (a fraction of the variance) gives ``max_components``: the solver then
        computes every component the method can give, and :meth:`_finish_fit` keeps the
        smallest number that explains the fraction.
        """
        if max_components < 1:
            raise ValueError(f"this method can give no component ({what} = {max_components})")
        if self.n_components is None:
            self.n_components_ = min(DEFAULT_N_COMPONENTS, max_components)
            return self.n_components_
        if _is_fraction(self.n_components):
            self.n_components_ = int(max_components)
            return self.n_components_
        k = check_n_components(self.n_components)
        if k > max_components:
            raise ValueError(
                f"n_components={k} is larger than this method can give ({what} = {max_components})"
            )
        self.n_components_ = int(k)
        return self.n_components_

    # --- after the solver: variance, fraction, pre-images -----------------------------------
    def _finish_fit(self, diag_sum, mean_sq, mean_sq_error, anchors=None):
        """Store the total variance, apply a float ``n_components``, learn the pre-image map.

        Parameters
        ----------
        diag_sum : float
            ``sum_i k(x_i, x_i)`` over the training rows (exact: one pass).
        mean_sq : float
            ``||mu||^2 = (1/n^2) sum_ij k(x_i, x_j)``, the squared norm of the mean embedding
            (exact, or an estimate).
        mean_sq_error : float
            One standard error of ``mean_sq`` (0 when exact, nan when unknown).
        anchors : array, callable or None
            The rows the pre-image map is learned on (a callable drawing them is called only
            when ``fit_inverse_transform=True``).
        """
        self._set_total_variance(diag_sum, mean_sq, mean_sq_error)
        if _is_fraction(self.n_components):
            self._keep_fraction(float(self.n_components))
        if getattr(self, "fit_inverse_transform", False):
            self._fit_inverse(anchors() if callable(anchors) else anchors)

    def _set_total_variance(self, diag_sum, mean_sq, mean_sq_error) -> None:
        """``total_variance_ = tr(H K H) = sum_i k(x_i, x_i) - n ||mu||^2`` and its standard error
        (unset when a term is nan); warns (:class:`fastkpca.kernels.DegenerateKernelWarning`)
        when the training kernel matrix is numerically the identity or constant, from exact
        numbers where it can (:data:`~fastkpca.kernels.DEGENERATE_CHECK_ROWS` first rows), else
        from the estimate within three standard errors."""
        for name in ("total_variance_", "total_variance_error_"):
            if name in vars(self):
                delattr(self, name)
        source = vars(self).get(TRAINING_SOURCE)
        if source is not None:  # a fit's own rows: what earlier rows gave no longer applies
            self.__dict__.pop(_FIRST_ROWS_GRAM, None)
        if not (np.isfinite(diag_sum) and np.isfinite(mean_sq)):
            return
        n = self._n_train
        kernel = self.kernel_
        statistics = (diag_sum, mean_sq, mean_sq_error)
        if mean_sq_error != 0 and may_be_degenerate(kernel, n, *statistics):
            if source is not None:
                means = _first_rows_gram_means(kernel, source)
                if means is not None:
                    self.__dict__[_FIRST_ROWS_GRAM] = means
            means = vars(self).get(_FIRST_ROWS_GRAM)
            if means is not None:
                statistics = (*scaled_gram(n, *means), 0.0)
        warn_if_degenerate(kernel, n, *statistics)
        self.total_variance_ = float(diag_sum - n * mean_sq)
        self.total_variance_error_ = float(n * mean_sq_error)

    @property
    def _n_train(self) -> int:
        for name in ("n_samples_seen_", "n_samples_fit_"):
            if hasattr(self, name):
                return int(getattr(self, name))
        return int(self.eigenvectors_.shape[0])

    @property
    def explained_variance_ratio_(self):
        """Fraction of the total variance ``tr(H K H)`` of the training Gram per component.

        ``eigenvalues_ / total_variance_``.  For the approximate methods both are estimates: the
        numerator the model's eigenvalues, the denominator ``total_variance_`` with one standard
        error ``total_variance_error_`` (see each estimator's notes).
        """
        check_is_fitted(self)
        if not hasattr(self, "total_variance_"):
            raise AttributeError(
                f"{type(self).__name__} has no total variance for this model (see its notes)"
            )
        return np.asarray(to_host(self.eigenvalues_), dtype=np.float64) / self.total_variance_

    def _keep_fraction(self, fraction: float) -> None:
        """Keep the smallest k whose cumulative ratio reaches ``fraction``; when none does, the
        components with a non-zero eigenvalue (at least one), never those the model cannot
        give."""
        if not hasattr(self, "total_variance_"):
            raise ValueError(
                f"n_components={fraction} (a fraction of the variance) needs the total variance, "
                f"which {type(self).__name__} cannot estimate here; pass an integer"
            )
        ratio = np.cumsum(self.explained_variance_ratio_)
        reached = np.flatnonzero(ratio >= fraction)
        if reached.size:
            k = int(reached[0]) + 1
        else:
            k = max(int(np.count_nonzero(self.explained_variance_ratio_ > 0)), 1)
            warnings.warn(
                f"the {k} components this model can give explain {ratio[-1]:.3g} of the "
                f"(estimated) variance, less than n_components={fraction}; keeping all {k}",
                stacklevel=3,
            )
        self._truncate_components(k)

    def _truncate_components(self, k: int) -> None:
        self.n_components_ = int(k)
        for name in ("eigenvalues_", "components_"):
            if hasattr(self, name):
                setattr(self, name, getattr(self, name)[:k, ...])
        for name in ("eigenvectors_", "dual_coef_", "eigenvalue_bounds_"):
            if hasattr(self, name):
                setattr(self, name, getattr(self, name)[:, :k])

    def _fit_inverse(self, anchors) -> None:
        """Kernel ridge regression from projections to rows on the anchor rows.

        As ``sklearn.decomposition.KernelPCA(fit_inverse_transform=True)``: with T the anchors'
        projections and the same kernel, ``dual_coef_ = (k(T, T) + alpha I)^{-1} X_anchors``.
        """
        if getattr(self, "kernel", None) == "precomputed":
            raise ValueError("cannot fit_inverse_transform with a precomputed kernel")
        alpha = float(self.alpha)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha!r}")
        # The anchors' projections where the anchors live (sparse ones made dense), the small
        # solve on the host, the map stored where the anchors live.
        placement = placement_of(anchors)
        rows = placement.asarray(anchors, dtype=np.float64)
        T = np.asarray(to_host(self._transform_rows(rows)), dtype=np.float64)
        rows = np.asarray(to_host(rows), dtype=np.float64)
        K = np.asarray(self.kernel_(T), dtype=np.float64)
        K.flat[:: K.shape[0] + 1] += alpha
        self.X_transformed_fit_ = placement.asarray(T)
        self.dual_coef_inverse_ = placement.asarray(
            la.solve(K, rows, assume_a="pos", overwrite_a=True)
        )

    @functools.partial(estimator_call, mutating=False)
    def inverse_transform(self, X):
        """Pre-images of projections X, shape ``(n_samples, n_features_in_)``: kernel ridge
        regression learned at fit (``fit_inverse_transform=True``), ``k(X, X_transformed_fit_)
        @ dual_coef_inverse_``, O(anchors); rows of another namespace stay on their device."""
        check_is_fitted(self)
        if not hasattr(self, "dual_coef_inverse_"):
            raise NotFittedError(
                "the inverse transform was not fitted: set fit_inverse_transform=True and fit"
            )
        if not is_array(X):
            X = check_array(X, dtype=[np.float64, np.float32])
        rows = check_block(X, name="X")  # float, detached, finite, on X's device
        if rows.shape[1] != self.n_components_:
            raise ValueError(
                f"X has {rows.shape[1]} columns, but the model has {self.n_components_} components"
            )
        placement = placement_of(rows)
        model = self._placed(placement)  # the map's arrays where X lives
        rows = placement.asarray(rows, dtype=np.float64)
        out = model.kernel_(rows, model.X_transformed_fit_) @ model.dual_coef_inverse_
        return output_like(out, X)

    def _inverse_anchor_sampler(self, source):
        """A callable drawing ``n_inverse_samples`` uniform rows of ``source`` (for the models
        that keep no rows); its generator is separate from the model's, so the model does not
        depend on ``fit_inverse_transform``."""

        def draw():
            n_rows = self.n_inverse_samples
            if n_rows is None:
                n_rows = DEFAULT_N_INVERSE_SAMPLES
            if not isinstance(n_rows, numbers.Integral) or isinstance(n_rows, bool) or n_rows < 1:
                raise ValueError(f"n_inverse_samples must be a positive integer, got {n_rows!r}")
            source.require_passes(2, "fit_inverse_transform=True (drawing pre-image anchors)")
            return source.sample_rows(int(n_rows), as_generator(self.random_state))

        return draw

    # --- data in and out -------------------------------------------------------------------
    def _fit_source(self, X) -> RowSource:
        """The training rows as a validated :class:`RowSource`; sets ``n_features_in_``."""
        for name in ("X_transformed_fit_", "dual_coef_inverse_"):  # a refit's own map only
            self.__dict__.pop(name, None)
        source = as_source(
            X,
            estimator=self,
            reset=True,
            accept_sparse=self._accepts_sparse,
            placement=self._placement(X),
        )
        if self._draws_inverse_anchors and getattr(self, "fit_inverse_transform", False):
            # Refuse a one-shot stream before the fit's pass, not after it.
            source.require_passes(2, "fit_inverse_transform=True (drawing pre-image anchors)")
        return source

    @functools.partial(estimator_call, mutating=False)
    def transform(self, X):
        """Project X on the principal axes, shape ``(n_samples, n_components_)``.

        Approximates (``ExactKPCA``: equals, up to column signs)
        ``sklearn.decomposition.KernelPCA(...).transform(X)``; float32 X gives float32, other
        dtypes float64, with X's array type and device; a dask array gives a lazy dask array.
        """
        check_is_fitted(self)
        placement = self._placement(X)
        source = as_source(
            X,
            estimator=self,
            reset=False,
            accept_sparse=self._accepts_sparse,
            placement=placement,
        )
        dtype = np.float32 if source.dtype == np.float32 else np.float64
        out = source.map_rows(
            _transform_rows, self._placed(placement), n_outputs=self._n_features_out, dtype=dtype
        )
        return output_like(out, X)

    # --- where the work runs ---------------------------------------------------------------
    def _placement(self, X) -> Placement:
        """Where a call on X computes: X's device, or ``device`` (host data sent there)."""
        return placement_for(X, getattr(self, "device", None))

    def _placed(self, placement: Placement):
        """This model with its fitted arrays on ``placement`` (itself when they are there): a
        shallow copy with the fitted arrays moved (``placement.carry``), cached per placement
        until the model changes; on the host registered state objects are rebuilt from host
        copies.  The model as computed on another device is this cache's entry (:meth:`_settle`).
        """
        home = self._fitted_placement()
        if home is None or home == placement:
            return self
        cache = self.__dict__.setdefault(_PLACED, {})
        key = placement.name
        if key not in cache:
            model = copy.copy(self)
            model.__dict__.pop(_PLACED, None)
            for name, value in _fitted_items(self):
                setattr(model, name, placement.carry(value))
            cache[key] = model
        return cache[key]

    def _fitted_placement(self) -> Placement | None:
        """Where the fitted arrays live (the first array attribute's placement), or None."""
        for _, value in _fitted_items(self):
            if is_array(value):
                return placement_of(value)
        return None

    def _settle(self, origin: Placement | None) -> None:
        """Move the public fitted arrays to ``origin`` (the placement of the data given to fit),
        keeping the model as computed as the cached copy for its own placement (the rule in the
        module docstring); nothing to do when they are there already."""
        home = self._fitted_placement()
        if origin is None or home is None or home == origin:
            return
        computed = copy.copy(self)
        computed.__dict__.pop(_PLACED, None)
        settled = {name: origin.carry(value) for name, value in _fitted_items(self)}
        self.__dict__.update(settled)
        self.__dict__[_PLACED] = {home.name: computed, _COMPUTED: computed}

    def _computed_attributes(self) -> dict:
        """The public fitted attributes of the model as computed (:meth:`_settle`), which a
        call that continues the model (``partial_fit``, ``merge``) starts from; empty when the
        fitted arrays are where they were computed."""
        computed = (vars(self).get(_PLACED) or {}).get(_COMPUTED)
        return {} if computed is None else dict(_fitted_items(computed))

    def _transform_rows(self, X):
        """The projections of a validated in-memory array or CSR matrix X (X's float dtype)."""
        raise NotImplementedError

    @property
    def _n_features_out(self):
        return self.n_components_

    # --- persistence ----------------------------------------------------------------------
    def save(self, path):
        """Save the fitted model to ``path`` (arrays + JSON metadata; loads without pickle)."""
        save_model(self, path)

    # --- scikit-learn tags ----------------------------------------------------------------
    def __getstate__(self):
        # A pickle (joblib, a Dask task) holds the model, not its copies on other devices:
        # they are rebuilt where they are used (:meth:`_placed`).
        state = dict(super().__getstate__())  # object's is the instance dict itself
        state.pop(_PLACED, None)
        state.pop(TRAINING_SOURCE, None)
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = self._accepts_sparse
        return tags


#: The private attribute holding the mean diagonal and off-diagonal kernel values of the first
#: training rows (:meth:`BaseKPCA._set_total_variance`).
_FIRST_ROWS_GRAM = "_first_rows_gram"


def _first_rows_gram_means(kernel, source) -> tuple[float, float] | None:
    """:func:`fastkpca.kernels.first_rows_gram` of the source's first rows; None when they
    cannot be had (a one-shot stream past its head, values the kernel cannot compute)."""
    try:
        return first_rows_gram(kernel, source.head(DEGENERATE_CHECK_ROWS))
    except ValueError:
        return None


def _is_fraction(k) -> bool:
    return bool(isinstance(k, float | np.floating) and 0.0 < k < 1.0)


#: The parameters of the kernel spec every fastkpca estimator takes.
_KERNEL_SPEC = frozenset({"kernel", "gamma", "degree", "coef0", "nu"})

#: The rows a kernel spec is resolved on when it is checked before any data.
_PARAMETER_PROBE = np.zeros((2, 1))


def check_n_components(k):
    """``n_components`` checked for its form (ValueError otherwise): a positive integer, a float
    in (0, 1) (a fraction of the variance) or None; returned as it is (an int for an integer)."""
    if k is None or _is_fraction(k):
        return k
    if not isinstance(k, int | np.integer) or isinstance(k, bool) or k < 1:
        raise ValueError(
            "n_components must be a positive integer, a float in (0, 1) (a fraction of the "
            f"variance) or None, got {k!r}"
        )
    return int(k)


def check_solver_stopping(eigen_tol, max_iter) -> None:
    """An iterative eigensolver's ``eigen_tol`` (a number >= 0, or None: the solver's default
    for the dtype) and ``max_iter`` (a positive integer, or None); ValueError naming the
    parameter."""
    if eigen_tol is not None:
        check_float("eigen_tol", eigen_tol, low=0.0)
    check_int("max_iter", max_iter, low=1, allow_none=True)


def _refuse_precomputed(name: str) -> str:
    return (
        f"{name} cannot use kernel='precomputed': it evaluates the kernel between new points "
        "and its own landmarks / centres / random features, which a precomputed Gram does not "
        "give; use ExactKPCA (or fastkpca.KernelPCA) instead"
    )


def mean_embedding_probe(X, kernel, n_probe=DEFAULT_N_PROBE, rng=None):
    """``||mu||^2 = (1/n^2) sum_ij k(x_i, x_j)`` from ``n_probe`` uniform probe rows, with its
    standard error: the mean of ``h_i = (1/n) sum_j k(x_i, x_j)`` over the probe rows (O(n_probe
    n) kernel values), error ``std(h) / sqrt(s) * sqrt(1 - s / n)``; exact when ``n_probe >= n``.

    Returns
    -------
    estimate, standard_error : float
    """
    n = X.shape[0]
    if n_probe >= n:
        idx = np.arange(n)
    else:
        idx = np.sort(as_generator(rng).choice(n, size=n_probe, replace=False))
    h = np.zeros(idx.size)
    probes = take_rows(X, idx)
    for start, stop, K in kernel.blocks(probes, X):
        h[start:stop] = to_host(get_namespace(K).sum(K, axis=1)) / n  # on the tiles' device
    s = idx.size
    if s >= n or s < 2:
        return float(h.mean()), 0.0
    se = float(np.std(h, ddof=1) / np.sqrt(s) * np.sqrt(1.0 - s / n))
    return float(h.mean()), se


#: Chunks per worker thread in one block of a pass over an in-memory array when a progress bar
#: counts the blocks (:func:`pass_block_rows`).
IN_MEMORY_BLOCK_CHUNKS = 64


def pass_block_rows(source) -> int | None:
    """Rows per block of a pass whose statistic is computed chunk by chunk in threads: a dense
    in-memory array is one block (None), or with a progress bar blocks of
    :data:`IN_MEMORY_BLOCK_CHUNKS` chunks per worker (only the grouping of sums changes); other
    sources DEFAULT_BLOCK_ROWS."""
    if isinstance(source, ArraySource) and not source.sparse:
        if verbosity() <= 0:
            return None
        return max(DEFAULT_BLOCK_ROWS, IN_MEMORY_BLOCK_CHUNKS * CHUNK_ROWS * n_workers())
    return DEFAULT_BLOCK_ROWS


def reduce_tracked(source, statistic, merge, *args, desc: str | None = None):
    """``source.reduce(statistic, merge, *args)`` in blocks of :func:`pass_block_rows`, with a
    progress bar over the rows (:func:`fastkpca.execution.track_rows`, shown when the running
    estimator's ``verbose > 0``) where the source reduces in one loop in this process (arrays,
    streams; a dask array reduces on its workers)."""
    if type(source).reduce is RowSource.reduce:
        statistic = functools.partial(_tracked_statistic, statistic, source.n_samples, desc)
    return source.reduce(statistic, merge, *args, block_rows=pass_block_rows(source))


def _tracked_statistic(statistic, total, desc, blocks, *args):
    return statistic(track_rows(blocks, total=total, desc=desc), *args)


def reduce_with_diag_sum(source, kernel, statistic, merge, *args, desc: str | None = None):
    """:func:`reduce_tracked` of ``statistic`` that also sums ``k(x_i, x_i)`` in the same pass.

    Returns ``(statistic, diag_sum)``: the blocks are read once (a one-shot stream stays
    one-shot) and the sums merge by addition, so a dask tree reduction gives the same total.
    """
    return reduce_tracked(
        source,
        _traced_statistic,
        functools.partial(_traced_merge, merge),
        kernel,
        statistic,
        *args,
        desc=desc,
    )


def _traced_statistic(blocks, kernel, statistic, *args):
    total = [0.0]

    def tee():
        for start, block in blocks:
            diag = kernel.diag(block)  # on the rows' device
            # summed there: one host synchronisation per pass, not per block
            xp = get_namespace(diag)
            total[0] = total[0] + xp.sum(diag, dtype=xp.float64)
            yield start, block

    stat = statistic(tee(), *args)
    return stat, float(total[0])


def _traced_merge(merge, a, b):
    return merge(a[0], b[0]), a[1] + b[1]


def _transform_rows(rows, model):
    """``model._transform_rows(rows)``: the function a source maps over its rows (picklable, so
    a dask worker receives the model once as an argument)."""
    return model._transform_rows(rows)


#: Where a model keeps its copies on other placements (:meth:`BaseKPCA._placed`): a private
#: attribute, never saved, dropped whenever the model changes.
_PLACED = "_placed_models"

#: The key, in that cache, of the model as computed when its fitted arrays were moved to the
#: data's placement (:meth:`BaseKPCA._settle`).
_COMPUTED = "computed"


def _fitted_items(model):
    """The public fitted attributes (trailing underscore, no leading one) and their values."""
    return [
        (name, value)
        for name, value in vars(model).items()
        if name.endswith("_") and not name.startswith("_")
    ]


def _computed(value):
    """An estimator given to a call (``merge``'s ``other``) as it was computed (a shallow copy
    with its fitted attributes from :meth:`BaseKPCA._computed_attributes`); anything else as
    it is."""
    if not issubclass(type(value), BaseKPCA):  # the type only: rows are not looked at here
        return value
    attributes = value._computed_attributes()
    if not attributes:
        return value
    out = copy.copy(value)
    out.__dict__.pop(_PLACED, None)
    vars(out).update(attributes)
    return out
