"""What every fastkpca estimator shares: the data path in and out, kernel, n_components, tags.

Subclasses write their own ``__init__`` (scikit-learn reads the signature for ``get_params``) that
only stores arguments, and a ``fit`` that reads as a pipeline: check parameters -> make the source
(:meth:`BaseKPCA._fit_source`) -> draw what is random from its first rows -> reduce a statistic
over its blocks (``source.reduce``) -> a pure solver function -> store fitted attributes.
``transform`` is shared: it validates the new rows through the same source mechanism and calls the
estimator's ``_transform_rows`` on an in-memory array, or lazily on each chunk of a dask array.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._utils import as_generator
from ..kernels import Kernel, make_kernel
from ..source import RowSource, as_source

__all__ = ["BaseKPCA", "DEFAULT_N_COMPONENTS"]

#: ``n_components=None`` means this many, capped to what the data allows.
DEFAULT_N_COMPONENTS = 10


class BaseKPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Mixin of the shared machinery; not an estimator by itself."""

    #: Whether ``fit`` / ``transform`` accept scipy.sparse input.
    _accepts_sparse = False

    # --- kernel and randomness ------------------------------------------------------------
    def _make_rng(self) -> np.random.Generator:
        return as_generator(self.random_state)

    def _resolve_kernel(self, X, rng=None) -> Kernel:
        """Set ``kernel_`` from the kernel spec, a numeric gamma resolved on X (``gamma`` kept).

        X is an array of rows (e.g. a source's first rows) or a :class:`RowSource` (all its rows,
        sampled by index for ``gamma="median"``).
        """
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
        """Set ``n_components_``: the requested number, or the capped default for None."""
        if max_components < 1:
            raise ValueError(f"this method can give no component ({what} = {max_components})")
        if self.n_components is None:
            self.n_components_ = min(DEFAULT_N_COMPONENTS, max_components)
            return self.n_components_
        k = self.n_components
        if not isinstance(k, int | np.integer) or isinstance(k, bool) or k < 1:
            raise ValueError(f"n_components must be a positive integer or None, got {k!r}")
        if k > max_components:
            raise ValueError(
                f"n_components={k} is larger than this method can give ({what} = {max_components})"
            )
        self.n_components_ = int(k)
        return self.n_components_

    # --- data in and out -------------------------------------------------------------------
    def _fit_source(self, X) -> RowSource:
        """The training rows as a validated :class:`RowSource`; sets ``n_features_in_``."""
        return as_source(X, estimator=self, reset=True, accept_sparse=self._accepts_sparse)

    def transform(self, X):
        """Project X on the principal axes, shape ``(n_samples, n_components_)``.

        The projections approximate (for ``ExactKPCA``: equal, up to column signs)
        ``sklearn.decomposition.KernelPCA(...).transform(X)``; float32 X gives float32.  A dask
        array gives a lazy dask array chunked by rows like X.
        """
        check_is_fitted(self)
        source = as_source(X, estimator=self, reset=False, accept_sparse=self._accepts_sparse)
        dtype = np.float32 if source.dtype == np.float32 else np.float64
        return source.map_rows(_transform_rows, self, n_outputs=self._n_features_out, dtype=dtype)

    def _transform_rows(self, X):
        """The projections of a validated in-memory array or CSR matrix X (X's float dtype)."""
        raise NotImplementedError

    @property
    def _n_features_out(self):
        return self.n_components_

    # --- persistence ----------------------------------------------------------------------
    def save(self, path):
        """Save the fitted model to ``path`` (arrays + JSON metadata; loads without pickle)."""
        from ..persistence import save_model

        save_model(self, path)

    # --- scikit-learn tags ----------------------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = self._accepts_sparse
        return tags


def _transform_rows(rows, model):
    """``model._transform_rows(rows)``: the function a source maps over its rows (picklable, so
    a dask worker receives the model once as an argument)."""
    return model._transform_rows(rows)
