"""Random feature maps as scikit-learn transformers.

:class:`RandomFourierFeatures` (rbf, laplacian, matern), :class:`OrthogonalRandomFeatures` and
:class:`FastfoodFeatures` (rbf, matern) and :class:`TensorSketchFeatures` (polynomial): ``fit``
draws the map of :mod:`fastkpca.features` for the data's width (the same map, for the same
``random_state``, as ``RandomFeatureKPCA`` and ``StreamingKPCA`` draw: :func:`fastkpca.features.
init_feature_map`), ``transform`` applies it.  Estimators built on the building blocks, so they
live here and not in :mod:`fastkpca.features`.
"""

from __future__ import annotations

import scipy.sparse as sp

from .decomposition._base import BaseKPCA
from .features import DEFAULT_N_RANDOM_FEATURES, check_feature_spec, init_feature_map

__all__ = [
    "RandomFourierFeatures",
    "OrthogonalRandomFeatures",
    "FastfoodFeatures",
    "TensorSketchFeatures",
]


class _RandomFeatures(BaseKPCA):
    """Base transformer: ``fit`` draws the map, ``transform`` applies it (float32 preserved)."""

    _accepts_sparse = True
    features = "rff"

    def _check_params(self):
        super()._check_params()
        check_feature_spec(self, "n_components")

    def fit(self, X, y=None):
        """Draw the feature map for X's width (and gamma resolved on X's first rows)."""
        self._check_params()
        self.feature_map_, _ = init_feature_map(
            self, self._fit_source(X).head(), count="n_components"
        )
        self.n_output_features_ = self.feature_map_.n_output_features
        return self

    def _transform_rows(self, X):
        """The random features of X, shape ``(n_samples, n_output_features_)``."""
        if sp.issparse(X) and not self.feature_map_.accepts_sparse:
            X = X.toarray()
        return self.feature_map_(X)

    @property
    def _n_features_out(self):
        return self.n_output_features_


def _transformer_doc(summary, features, kernel_note):
    return f"""{summary}

    Parameters
    ----------
    n_components : int or None
        Number of output columns (None: {DEFAULT_N_RANDOM_FEATURES}){kernel_note}; scikit-learn's
        ``RBFSampler`` name (``RandomFeatureKPCA`` calls it ``n_random_features``).
    input_sketch : None, "auto" or int, default None
        ``rff`` with the rbf or matern kernel only: CountSketch the inputs to t coordinates
        first, O(nnz(x) + t m) a row (Musco & Woodruff 2017, section 3.2.2; see
        ``RandomFeatureKPCA`` and :mod:`fastkpca._input_sketch`); others refuse it.
    kernel : str or Kernel
    gamma, degree, coef0, nu : kernel parameters as in every fastkpca estimator.
    random_state : int, Generator or None
    n_jobs : int or None, default None
        Threads of ``transform`` (scikit-learn's meaning: None or -1 every core the process may
        use, -2 all but one, a positive count that many); the features do not depend on it.
    verbose : int, default 0
        Kept for the shared estimator interface (these maps show no progress bar).
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live; ``"cuda"`` (or any
        PyTorch device) sends host data there.  ``transform`` returns the input's array type.

    Attributes
    ----------
    feature_map_ : FeatureMap (``features={features!r}``), drawn in ``fit``.
    kernel_ : the resolved Kernel.
    n_output_features_ : int
    """


class RandomFourierFeatures(_RandomFeatures):
    __doc__ = _transformer_doc(
        "Random Fourier features with cos / sin pairs (rbf, laplacian, matern kernels).",
        "rff",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "rff"

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        input_sketch=None,
        random_state=None,
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
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device
        self.input_sketch = input_sketch


class OrthogonalRandomFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "Orthogonal random features (Yu et al. 2016) for the rbf and matern kernels.",
        "orf",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "orf"


class FastfoodFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "Fastfood random features (Le, Sarlos & Smola 2013) for the rbf and matern kernels.",
        "fastfood",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "fastfood"


class TensorSketchFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "TensorSketch features (Pham & Pagh 2013) for the polynomial kernel.", "tensorsketch", ""
    )
    features = "tensorsketch"

    def __init__(
        self,
        n_components=None,
        *,
        kernel="polynomial",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        random_state=None,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        super().__init__(
            n_components,
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            nu=nu,
            random_state=random_state,
            n_jobs=n_jobs,
            verbose=verbose,
            device=device,
        )
