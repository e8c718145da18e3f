"""What every fastkpca estimator shares: kernel resolution, validation, n_components, tags.

Subclasses write their own ``__init__`` (scikit-learn reads the signature for ``get_params``) that
only stores arguments, and a ``fit`` that reads as: validate -> derive trailing-underscore values
-> call a pure numerical function -> store fitted attributes.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import as_generator
from ..kernels import Kernel, make_kernel

__all__ = ["BaseKPCA", "DEFAULT_N_COMPONENTS"]

#: ``n_components=None`` means this many, capped to what the data allows.
DEFAULT_N_COMPONENTS = 10


class BaseKPCA(TransformerMixin, BaseEstimator):
    """Mixin of the shared machinery; not an estimator by itself."""

    #: Whether ``fit`` / ``transform`` accept scipy.sparse input.
    _accepts_sparse = False

    # --- kernel and randomness ------------------------------------------------------------
    def _make_rng(self) -> np.random.Generator:
        return as_generator(self.random_state)

    def _resolve_kernel(self, X, rng=None) -> Kernel:
        """Set ``kernel_`` from the kernel spec, a numeric gamma resolved on X (``gamma`` kept)."""
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

    # --- validation -----------------------------------------------------------------------
    def _validate_fit_data(self, X):
        return validate_data(
            self,
            X,
            reset=True,
            dtype=[np.float64, np.float32],
            accept_sparse="csr" if self._accepts_sparse else False,
            ensure_min_samples=1,
        )

    def _validate_transform_data(self, X):
        check_is_fitted(self)
        return validate_data(
            self,
            X,
            reset=False,
            dtype=[np.float64, np.float32],
            accept_sparse="csr" if self._accepts_sparse else False,
        )

    def _output_dtype(self, X):
        return np.float32 if X.dtype == np.float32 else np.float64

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
