"""Drop-in replacement for ``sklearn.decomposition.KernelPCA`` on fastkpca's exact machinery.

``from fastkpca import KernelPCA`` is the whole migration: the signature, defaults, fitted
attributes and errors are scikit-learn's (1.9), the numerics are fastkpca's: one Gram in X's dtype
filled by its upper triangle on all cores (:func:`fastkpca.execution.kernel_ops.symmetric_gram`),
centered in place, and eigensolvers from :mod:`fastkpca.solvers` (``arpack`` is ARPACK Lanczos,
``randomized`` is block Krylov iteration to a tolerance).

The fit is one path on every placement; the fitted attributes have the input's array type and
device, and ``transform`` returns the input's array type, device and dtype.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils.validation import check_array, check_is_fitted

from .. import solvers
from .._centering import CenteringStats, center_gram_inplace
from .._utils import as_generator
from ..execution.arrays import (
    check_device,
    get_namespace,
    is_array,
    output_like,
    placement_of,
    to_host,
)
from ..execution.budget import GRAM_FRACTION, centering_rows
from ..execution.elementwise import as_float64
from ..execution.kernel_ops import kernel_matmat, symmetric_gram
from ..kernels import Kernel, make_kernel, result_dtype
from ..source import check_block
from ._base import BaseKPCA
from .compress import inverse_sqrt_or_zero
from .exact import PrecomputedKernel, centered_projection, check_exact_fits, own_copy

__all__ = ["KernelPCA"]

#: scikit-learn's eigen_solver names -> fastkpca's solvers ("lanczos" is accepted as an alias).
EIGEN_SOLVERS = {
    "auto": "auto",
    "dense": "dense",
    "arpack": "lanczos",
    "lanczos": "lanczos",
    "randomized": "randomized",
}

#: Kernel names: scikit-learn's KernelPCA names plus "polynomial" and "laplacian".
KERNEL_NAMES = ("linear", "poly", "polynomial", "rbf", "sigmoid", "cosine", "laplacian")

#: Significant negative eigenvalues (scikit-learn's ``_check_psd_eigenvalues`` thresholds, per
#: working precision): below both ``-ratio * max`` and ``-value`` the kernel is not PSD.
NEGATIVE_EIGENVALUE = {
    np.dtype(np.float64): {"ratio": 1e-5, "value": 1e-10},
    np.dtype(np.float32): {"ratio": 5e-3, "value": 1e-6},
}


class _PairwiseKernel(Kernel):
    """A kernel evaluated by ``sklearn.metrics.pairwise.pairwise_kernels``.

    For what fastkpca's own kernels do not cover: callables with ``kernel_params``, and the
    parameters scikit-learn accepts outside their domain (``gamma=0``, a negative ``coef0`` or a
    non-integer ``degree`` for ``poly``).  Blocks are float64, as for every Kernel.
    """

    name = "pairwise"

    def __init__(self, metric, params):
        self.metric = metric
        self.params = dict(params)

    def get_params(self, deep=True):
        return {"metric": self.metric, **self.params}

    def _block(self, Xc, Y, ctx):
        K = pairwise_kernels(Xc, Y, metric=self.metric, filter_params=True, **self.params)
        return np.asarray(K, dtype=np.float64)

    def diag(self, X):
        out = [self._block(X[i : i + 1], X[i : i + 1], None)[0, 0] for i in range(X.shape[0])]
        return np.asarray(out, dtype=result_dtype(X))

    def __hash__(self):
        return id(self)


def _check_real(name, value, *, low=None, allow_none=False):
    if value is None and allow_none:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


def _check_int(name, value, *, low=None, allow_none=False):
    if value is None and allow_none:
        return
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


def _check_bool(name, value):
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a boolean, got {value!r}")


def _center_precomputed(K, block):
    """Center a given (possibly non-symmetric) training Gram in place, as scikit-learn's
    ``KernelCenterer`` (``K - 1 c^T - r 1^T + mean``); a Gram still not symmetric is replaced by
    its symmetric part ``(K + K^T) / 2``, the nearest symmetric matrix.  Row blocks of
    ``block`` rows on K's placement, means in float64."""
    placement = placement_of(K)
    xp = placement.xp
    n = K.shape[0]
    blocks = [(s, min(n, s + block)) for s in range(0, n, block)]
    col_means = xp.zeros((n,), dtype=xp.float64, device=placement.device)
    row_means = xp.empty((n,), dtype=xp.float64, device=placement.device)
    for s, e in blocks:
        Kb = as_float64(K[s:e, :])
        col_means += xp.sum(Kb, axis=0)
        row_means[s:e] = xp.mean(Kb, axis=1)
    col_means /= n
    total = float(xp.mean(col_means))
    for s, e in blocks:
        corr = row_means[s:e, None] + col_means[None, :] - total
        K[s:e, :] -= xp.astype(corr, K.dtype, copy=False)

    def transposed(A):
        return xp.permute_dims(A, (1, 0))

    if not all(bool(xp.all(K[s:e, :] == transposed(K[:, s:e]))) for s, e in blocks):
        for s, e in blocks:
            for t, u in blocks:
                if t >= s:
                    sym = (K[s:e, t:u] + transposed(K[t:u, s:e])) / 2
                    K[s:e, t:u] = sym
                    K[t:u, s:e] = transposed(sym)
    return CenteringStats(col_means=col_means, total_mean=total)


def _check_psd(values, dtype):
    """Raise if the eigenvalues show a significantly non-PSD kernel (scikit-learn's rule)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return
    thr = NEGATIVE_EIGENVALUE.get(np.dtype(dtype), NEGATIVE_EIGENVALUE[np.dtype(np.float64)])
    top, low = values.max(), values.min()
    if top < 0:
        raise ValueError(
            f"All eigenvalues are negative (maximum is {top:g}). Either the matrix is not PSD, "
            "or there was an issue while computing the eigendecomposition of the matrix."
        )
    if low < -thr["ratio"] * top and low < -thr["value"]:
        raise ValueError(
            f"There are significant negative eigenvalues ({-low / top:g} of the maximum "
            "positive). Either the matrix is not PSD, or there was an issue while computing "
            "the eigendecomposition of the matrix."
        )


class KernelPCA(BaseKPCA):
    """Kernel PCA with scikit-learn's ``KernelPCA`` interface, computed by fastkpca.

    A drop-in for ``sklearn.decomposition.KernelPCA``: same parameters, defaults, fitted
    attributes, errors and outputs (columns up to sign, fixed by ``svd_flip``'s rule).  It
    differs in how it computes: one n x n Gram in X's dtype, centered in place;
    ``eigen_solver="randomized"`` is block Krylov (Musco & Musco 2015) to a residual tolerance,
    returning the largest eigenvalues; ``"auto"`` runs block Krylov where scikit-learn would
    pick ARPACK, or dense for n > 1000 with n_components < n / 5.  :meth:`save` works (not for
    a callable kernel).

    Parameters
    ----------
    n_components : int or None, default=None
        Number of components; None keeps all components with non-zero eigenvalue.  Values above
        n_samples are capped to n_samples.
    kernel : {"linear", "poly", "rbf", "sigmoid", "cosine", "precomputed"}, callable or Kernel, \
            default="linear"
        Also ``"polynomial"`` (= ``"poly"``), ``"laplacian"`` and a
        :class:`fastkpca.kernels.Kernel`.  A callable takes two rows (and ``kernel_params``) and
        returns a number, as in ``sklearn.metrics.pairwise.pairwise_kernels``.
    gamma : float or None, default=None
        Kernel coefficient of rbf, poly, sigmoid and laplacian; None is 1 / n_features.
    degree : float, default=3
        Degree of the poly kernel.
    coef0 : float, default=1
        Independent term of the poly and sigmoid kernels.
    kernel_params : dict or None, default=None
        Keyword arguments of a callable kernel (ignored by the named kernels).
    alpha : float, default=1.0
        Ridge parameter of the kernel ridge regression learned for ``inverse_transform``.
    fit_inverse_transform : bool, default=False
        Learn pre-images (Bakir, Weston & Schoelkopf 2004) for ``inverse_transform``.
    eigen_solver : {"auto", "dense", "arpack", "randomized"}, default="auto"
        ``"dense"``: LAPACK ``syevr``; ``"arpack"`` (or ``"lanczos"``): ARPACK (block Krylov on
        a device); ``"randomized"``: block Krylov iteration.
    tol : float, default=0
        ARPACK's tolerance (0: machine precision, as scikit-learn); for ``randomized`` the
        relative Ritz residual at which it stops (0: 1e-8 in float64, 1e-5 in float32).
    max_iter : int or None, default=None
        Iteration cap of ARPACK, and of the block Krylov passes (default 500).
    iterated_power : int >= 0 or "auto", default="auto"
        ``randomized`` only: an int caps the passes at ``iterated_power + 2`` (a Krylov space
        containing scikit-learn's subspace); ``"auto"`` iterates to ``tol``.
    remove_zero_eig : bool, default=False
        Drop components with zero eigenvalue (always done when n_components is None).
    random_state : int, RandomState, Generator or None, default=None
        Start vectors of ``arpack`` and ``randomized``.
    copy_X : bool, default=True
        Store a copy of X in ``X_fit_``; with False, ``X_fit_`` is X itself (and a precomputed
        Gram is centered in place, as in scikit-learn).
    n_jobs, verbose, device :
        As for :class:`~fastkpca.ExactKPCA` (scikit-learn's ``n_jobs=None`` is one job; here
        the usable cores).

    Attributes
    ----------
    eigenvalues_ : ndarray (n_components,)
        Eigenvalues of the centered training Gram, descending, in X's float dtype.
    eigenvectors_ : ndarray (n_samples, n_components)
        The unit-norm eigenvectors (dual coefficients), in X's float dtype.
    dual_coef_ : ndarray (n_samples, n_features)
        Kernel ridge coefficients of the inverse transform (``fit_inverse_transform=True``).
    X_transformed_fit_ : ndarray (n_samples, n_components)
        Training projections (``fit_inverse_transform=True``).
    X_fit_ : ndarray or sparse matrix (n_samples, n_features)
        The training data (for ``kernel="precomputed"``: the centered training Gram, as
        scikit-learn stores it).
    gamma_ : float
        The kernel coefficient used (``1 / n_features`` when gamma is None).
    kernel_ : Kernel or None
        The resolved fastkpca kernel (None for ``"precomputed"``).
    n_iter_ : int
        Eigensolver work (see :func:`fastkpca.solvers.eigh_topk`).

    n_features_in_, feature_names_in_ : as every scikit-learn estimator.

    See Also
    --------
    sklearn.decomposition.KernelPCA : the estimator this one replaces.
    ExactKPCA : the same computation with fastkpca's defaults and solvers.
    NystromKPCA, RandomFeatureKPCA : approximations for more rows than the Gram can hold.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.decomposition import KernelPCA as SklearnKernelPCA
    >>> from fastkpca import KernelPCA
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> ours = KernelPCA(n_components=3, kernel="rbf", gamma=0.1).fit(X)
    >>> theirs = SklearnKernelPCA(n_components=3, kernel="rbf", gamma=0.1).fit(X)
    >>> np.allclose(ours.eigenvalues_, theirs.eigenvalues_)
    True
    >>> ours.transform(X[:2]).shape
    (2, 3)
    """

    def __init__(
        self,
        n_components=None,
        *,
        kernel="linear",
        gamma=None,
        degree=3,
        coef0=1,
        kernel_params=None,
        alpha=1.0,
        fit_inverse_transform=False,
        eigen_solver="auto",
        tol=0,
        max_iter=None,
        iterated_power="auto",
        remove_zero_eig=False,
        random_state=None,
        copy_X=True,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.kernel_params = kernel_params
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.iterated_power = iterated_power
        self.remove_zero_eig = remove_zero_eig
        self.random_state = random_state
        self.copy_X = copy_X
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    # --- fit ----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit the model on X of shape (n_samples, n_features) (a Gram for "precomputed")."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None, **params):
        """Fit and return the training projections ``eigenvectors_ * sqrt(eigenvalues_)``."""
        self._fit(X)
        xp = get_namespace(self.eigenvectors_)
        return output_like(self.eigenvectors_ * xp.sqrt(self.eigenvalues_)[None, :], X)

    def _fit(self, X):
        self._check_params()
        precomputed = isinstance(self.kernel, str) and self.kernel == "precomputed"
        if self.fit_inverse_transform and precomputed:
            raise ValueError("Cannot fit_inverse_transform with a precomputed kernel.")
        self._check_sparse_indices(X)
        self.__dict__.pop("dual_coef_", None)  # a refit's own pre-image map only
        source = self._fit_source(X)
        placement = source.placement
        X = source.in_memory(purpose="KernelPCA")
        if self.copy_X:
            X = own_copy(X)
        xp = placement.xp
        n = X.shape[0]
        dtype = result_dtype(X)
        self.gamma_ = 1 / X.shape[1] if self.gamma is None else self.gamma
        rng = as_generator(self.random_state)
        k = n if self.n_components is None else min(n, self.n_components)
        solver = self._solver(n, k, placement)
        block = centering_rows(placement, n)
        if precomputed:
            if sp.issparse(X):
                raise ValueError("a precomputed kernel must be a dense array, got a sparse matrix")
            if X.shape[0] != X.shape[1]:
                raise ValueError(f"a precomputed kernel must be square, got shape {X.shape}")
            if not getattr(getattr(X, "flags", None), "writeable", True):
                X = own_copy(X)
            self.kernel_ = None
            K = X  # centered in place: a copy unless copy_X=False, as in scikit-learn
            stats = _center_precomputed(K, block)
        else:
            self.kernel_ = self._make_kernel()
            check_exact_fits(
                X,
                fraction=GRAM_FRACTION,
                n_components=k,
                method=solver,
                placement=placement,
                estimator="KernelPCA",
            )
            K = symmetric_gram(self.kernel_, X)
        # The trace of the uncentered Gram scales the rounding threshold of the eigenvalues (for a
        # precomputed Gram, scikit-learn's centered one: its trace after centering).
        scale = float(xp.sum(xp.astype(xp.linalg.diagonal(K), xp.float64)))
        if not precomputed:
            stats = center_gram_inplace(K, block=block)
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        # X_fit_ of a precomputed kernel is that Gram: the dense solver must not overwrite it.
        vals, vecs = self._eigh(
            K, k, solver, rng, overwrite=not precomputed, scale=scale, dtype=np.dtype(dtype)
        )
        del K
        if self.remove_zero_eig or self.n_components is None:
            kept = int(xp.sum(xp.astype(vals > 0, xp.int64)))  # descending: the leading ones
            vals, vecs = vals[:kept], vecs[:, :kept]
        self.eigenvalues_ = xp.astype(vals, placement.dtype(dtype))
        self.eigenvectors_ = xp.astype(vecs, placement.dtype(dtype))
        self.X_fit_ = X  # a copy when copy_X
        if self.fit_inverse_transform:
            self._fit_inverse(self.eigenvectors_ * xp.sqrt(self.eigenvalues_)[None, :], X)

    def _check_params(self):
        _check_int("n_components", self.n_components, low=1, allow_none=True)
        self._make_rng()  # random_state
        kernel = self.kernel
        if not (isinstance(kernel, Kernel) or callable(kernel)) and (
            not isinstance(kernel, str) or kernel not in KERNEL_NAMES + ("precomputed",)
        ):
            raise ValueError(
                f"kernel must be one of {KERNEL_NAMES + ('precomputed',)}, a callable or a "
                f"fastkpca.kernels.Kernel, got {kernel!r}"
            )
        _check_real("gamma", self.gamma, low=0, allow_none=True)
        _check_real("degree", self.degree, low=0)
        _check_real("coef0", self.coef0)
        if self.kernel_params is not None and not isinstance(self.kernel_params, dict):
            raise ValueError(f"kernel_params must be a dict or None, got {self.kernel_params!r}")
        _check_real("alpha", self.alpha, low=0)
        _check_bool("fit_inverse_transform", self.fit_inverse_transform)
        if not isinstance(self.eigen_solver, str) or self.eigen_solver not in EIGEN_SOLVERS:
            raise ValueError(
                f"eigen_solver must be one of {tuple(EIGEN_SOLVERS)}, got {self.eigen_solver!r}"
            )
        _check_real("tol", self.tol, low=0)
        _check_int("max_iter", self.max_iter, low=1, allow_none=True)
        if not (isinstance(self.iterated_power, str) and self.iterated_power == "auto"):
            _check_int("iterated_power", self.iterated_power, low=0)
        _check_bool("remove_zero_eig", self.remove_zero_eig)
        _check_bool("copy_X", self.copy_X)
        check_device(self.device)

    def _make_kernel(self):
        """fastkpca's kernel for the spec, or pairwise_kernels where fastkpca has none."""
        if isinstance(self.kernel, Kernel):
            return self.kernel
        if callable(self.kernel):
            return _PairwiseKernel(self.kernel, self.kernel_params or {})
        degree = self.degree
        if isinstance(degree, numbers.Real) and float(degree).is_integer() and degree >= 1:
            degree = int(degree)  # fastkpca's Polynomial takes an integer degree
        try:
            return make_kernel(self.kernel, gamma=self.gamma_, degree=degree, coef0=self.coef0)
        except ValueError:
            # Parameters scikit-learn accepts outside fastkpca's kernels' domain (gamma = 0, a
            # negative coef0 or a fractional degree for poly): its own pairwise kernel.
            params = {"gamma": self.gamma_, "degree": self.degree, "coef0": self.coef0}
            return _PairwiseKernel(self.kernel, params)

    def _solver(self, n, k, placement):
        """scikit-learn's ``eigen_solver="auto"`` takes ARPACK for n > 200 and n_components < 10,
        dense otherwise; here its ARPACK choice, and its dense choice where fastkpca's rule for
        ``placement`` (:func:`fastkpca.solvers.auto_method`) prefers Krylov, go to block Krylov,
        which makes several times fewer passes over the Gram."""
        solver = EIGEN_SOLVERS[self.eigen_solver]
        if solver != "auto":
            return solver
        sklearn_dense = n <= 200 or k >= 10
        if sklearn_dense and solvers.auto_method(n, k, dense=True, placement=placement) == "dense":
            return "dense"
        return "randomized"

    def _eigh(self, K, k, solver, rng, *, overwrite, scale, dtype):
        """Top-k eigenpairs of the centered Gram K: fastkpca's solvers, scikit-learn's checks.

        The pairs of :func:`fastkpca.solvers.solve_topk` are checked before
        :func:`fastkpca.solvers.postprocess_eigen` clips negative eigenvalues: a significantly
        negative one raises (not PSD), as in scikit-learn; those at the rounding level of the
        uncentered Gram (``scale``) are 0.  ``tol=0`` is ARPACK's machine precision and block
        Krylov's per-dtype default (``fastkpca.solvers.TOLERANCES``).
        """
        tol, max_iter = self.tol, self.max_iter
        if solver == "randomized":
            tol = self.tol or None
            max_iter = self.max_iter or 500
            if self.iterated_power != "auto":
                max_iter = min(max_iter, self.iterated_power + 2)
        vals, vecs, n_iter = solvers.solve_topk(
            K, k, method=solver, rng=rng, tol=tol, max_iter=max_iter, overwrite=overwrite
        )
        _check_psd(to_host(vals), dtype)
        self.n_iter_ = n_iter
        return solvers.postprocess_eigen(vals, vecs, scale=scale, eps=np.finfo(dtype).eps)

    def _fit_inverse(self, X_transformed, X):
        """Kernel ridge regression from the projections back to X (Bakir et al. 2004).

        The same kernel (and gamma_) on the embedding, as scikit-learn's KernelPCA; the ridge
        system is solved on the host by LAPACK's Cholesky solve (as the shared pre-image map of
        :meth:`BaseKPCA._fit_inverse`), ``dual_coef_`` stored where X is.
        """
        if sp.issparse(X):
            raise ValueError("fit_inverse_transform is not implemented for sparse input X")
        Z = to_host(X_transformed)
        n = Z.shape[0]
        K = symmetric_gram(self.kernel_, Z)
        K.flat[:: n + 1] += self.alpha
        dual = la.solve(K, to_host(X), assume_a="pos", overwrite_a=True)
        self.dual_coef_ = placement_of(X_transformed).asarray(dual)
        self.X_transformed_fit_ = X_transformed

    # --- transform ----------------------------------------------------------------------------
    def transform(self, X):
        """Project X on the principal axes: centered ``k(X, X_fit_) @ alphas / sqrt(lambda)``.

        For ``kernel="precomputed"``, X is the kernel between new points and the training
        points, of shape (n_new, n_samples_fit).  The work runs where ``device`` says (X's
        device by default); the result has X's array type, device and float dtype.
        """
        check_is_fitted(self)
        self._check_sparse_indices(X)
        return super().transform(X)

    def _check_sparse_indices(self, X):
        """scikit-learn's refusal of sparse rows with 64-bit indices where the kernel's compiled
        loop takes 32-bit ones (:attr:`_accept_large_sparse`)."""
        if sp.issparse(X) and not self._accept_large_sparse:
            check_array(X, accept_sparse="csr", accept_large_sparse=False, dtype=None)

    def _transform_rows(self, X):
        """Centered ``k(X, X_fit_) @ alphas / sqrt(lambda)`` (:func:`centered_projection`) on
        the rows' placement, in float64, cast to the rows' and the model's float dtype."""
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        kernel = PrecomputedKernel() if self.kernel_ is None else self.kernel_
        xp = get_namespace(self.eigenvectors_)
        vals = xp.astype(self.eigenvalues_, xp.float64)
        alphas = xp.astype(self.eigenvectors_, xp.float64) * inverse_sqrt_or_zero(vals)[None, :]
        dtype = result_dtype(X, self.eigenvectors_)
        return centered_projection(X, self.X_fit_, kernel, stats, alphas, dtype)

    def inverse_transform(self, X):
        """Pre-images of projections X by the learned kernel ridge regression.

        As in scikit-learn, the mean removed by centering is not restored.  Rows of another
        namespace are mapped on their device and give the same array type.
        """
        if not self.fit_inverse_transform:
            raise NotFittedError(
                "The fit_inverse_transform parameter was not set to True when instantiating "
                "and hence the inverse transform is not available."
            )
        check_is_fitted(self, "dual_coef_")
        if not is_array(X):
            X = check_array(X, dtype=[np.float64, np.float32])
        rows = check_block(X, name="X")  # float, detached, finite, on X's device
        width = self.X_transformed_fit_.shape[1]
        if rows.shape[1] != width:
            raise ValueError(f"X has {rows.shape[1]} columns, but the model has {width} components")
        model = self._placed(placement_of(rows))  # the map's arrays where X lives
        # k(X, X_transformed_fit_) @ dual_coef_ in float64 blocks, in dual_coef_'s dtype
        return kernel_matmat(model.kernel_, rows, model.X_transformed_fit_, model.dual_coef_)

    # --- scikit-learn plumbing ----------------------------------------------------------------
    _accepts_sparse = True

    @property
    def _accept_large_sparse(self):
        # The L1 distances of sparse rows go through scikit-learn's manhattan_distances, whose
        # compiled loop takes 32-bit indices only.
        return not (isinstance(self.kernel, str) and self.kernel == "laplacian")

    @property
    def _n_features_out(self):
        return self.eigenvalues_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Pre-images are not learned from sparse X, nor is a Gram taken sparse (scikit-learn
        # raises on both too, but still sets the tag).
        precomputed = isinstance(self.kernel, str) and self.kernel == "precomputed"
        tags.input_tags.sparse = not (self.fit_inverse_transform or precomputed)
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.pairwise = precomputed
        return tags
