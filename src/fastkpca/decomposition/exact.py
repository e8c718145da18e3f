"""Exact kernel PCA (Schoelkopf, Smola & Mueller 1998): the reference of every approximation.

The n x n Gram is stored (:func:`fastkpca.execution.kernel_ops.symmetric_gram`), centered in
place and decomposed by :func:`fastkpca.solvers.eigh_topk`; or, when it does not fit, block
Krylov iteration runs on the Gram recomputed in every pass
(:class:`fastkpca.execution.kernel_ops.CenteredGramOperator`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import kernels
from .._centering import CenteringStats, center_gram_inplace, center_gram_out_of_sample
from ..execution import format_bytes, one_blas_thread, require_memory
from ..execution.arrays import get_namespace, output_like, placement_of
from ..execution.budget import (
    EXACT_MEMORY_FRACTION,
    GRAM_FRACTION,
    MATRIX_FREE_AUTO_MAX_N,
    centering_rows,
    chunk_rows,
    matrix_free_auto_max_n,
)
from ..execution.elementwise import store
from ..execution.kernel_ops import (
    CenteredGramOperator,
    fold_kernel_rows,
    kernel_diag,
    on_one_placement,
    symmetric_gram,
)
from ..execution.linalg import dense_topk_bytes
from ..execution.memory import MEMORY_FRACTION, memory_available_on
from ..kernels import result_dtype
from ..solvers import SOLVERS, auto_method, eigh_topk, rounding_threshold
from ._base import DEFAULT_N_COMPONENTS, BaseKPCA, _is_fraction, check_solver_stopping
from .compress import inverse_sqrt_or_zero

__all__ = [
    "ExactKPCA",
    "PrecomputedKernel",
    "exact_kpca",
    "matrix_free_kpca",
    "check_exact_fits",
    "check_symmetric_gram",
    "resolve_eigen_solver",
    "EXACT_SOLVERS",
    "EXACT_MEMORY_FRACTION",
    "GRAM_FRACTION",
    "MATRIX_FREE_AUTO_MAX_N",
    "SYMMETRY_TOLERANCE",
    "centered_projection",
    "own_copy",
]

#: ``eigen_solver`` names scikit-learn users type, and the fastkpca solver each one means.
EIGEN_SOLVER_ALIASES = {"arpack": "lanczos"}

#: ExactKPCA's ``eigen_solver`` names: :func:`fastkpca.solvers.eigh_topk`'s and
#: ``"matrix_free"`` (:func:`matrix_free_kpca`, ``"auto"``'s choice when the Gram does not fit).
EXACT_SOLVERS = (*SOLVERS, "matrix_free")

#: Vectors of the matrix-free block beyond ``n_components``: a wider block needs fewer passes
#: (the rate is set by the gap between lambda_k and lambda_{b+1}, Musco & Musco 2015).
MATRIX_FREE_OVERSAMPLES = 30

#: A precomputed Gram is symmetric when ``max |K - K^T| <= tolerance * max |K|`` (float64:
#: scikit-learn's ``check_symmetric`` default); far above rounding, far below a non-Gram's.
SYMMETRY_TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


def resolve_eigen_solver(name, allowed=SOLVERS):
    """The fastkpca solver for ``name`` (``"arpack"`` is ``"lanczos"``); ValueError if unknown."""
    solver = EIGEN_SOLVER_ALIASES.get(name, name) if isinstance(name, str) else name
    if solver not in allowed:
        raise ValueError(
            f"eigen_solver must be one of {tuple(allowed)} (or 'arpack', an alias of "
            f"'lanczos'), got {name!r}"
        )
    return solver


class PrecomputedKernel(kernels.Kernel):
    """``kernel="precomputed"``: the rows given are already kernel values (the n x n training
    Gram at fit, n_new x n_train at transform), as scikit-learn's."""

    name = "precomputed"
    namespace_math = True
    parallel_safe = True

    def _block(self, X, Y, ctx, out=None):
        rows = placement_of(X).asarray(X)  # sparse rows made dense
        if out is not None:
            return store(rows, out)
        xp = get_namespace(rows)
        return xp.astype(rows, xp.float64, copy=True)  # a new block: its users modify it

    def diag(self, X):
        if sp.issparse(X):
            return np.asarray(X.diagonal(), dtype=result_dtype(X))
        return get_namespace(X).linalg.diagonal(X)


def check_exact_fits(
    X,
    *,
    fraction: float | None = None,
    available=None,
    n_components: int = 0,
    method: str | None = None,
    placement=None,
    estimator: str = "ExactKPCA",
) -> None:
    """Raise ValueError unless the n x n Gram of X (an array, dask array or row source) fits.

    The Gram may take ``fraction`` (default :data:`EXACT_MEMORY_FRACTION`) of the memory on
    ``placement`` (default the host), beside the eigensolver's workspace
    (:func:`fastkpca.execution.linalg.dense_topk_bytes` for ``method="dense"``).
    """
    fraction = EXACT_MEMORY_FRACTION if fraction is None else fraction
    n = int(X.shape[0])
    itemsize = 4 if result_dtype(X) == np.float32 else 8
    gram = n * n * itemsize
    k = int(n_components)
    solver = 8 * n * k
    if method == "dense" and placement is not None:
        solver = dense_topk_bytes(n, k, itemsize, placement)
    need = gram * MEMORY_FRACTION / fraction + solver
    require_memory(
        need,
        f"{estimator}'s {n} x {n} Gram matrix ({format_bytes(gram)}), with the eigensolver's "
        "workspace",
        hint=(
            "these data are too large for a stored Gram.  ExactKPCA(eigen_solver='matrix_free') "
            "recomputes it in each pass instead (exact, slower); the scalable methods read the "
            "rows block by block: RandomFeatureKPCA, StreamingKPCA or NystromKPCA."
        ),
        available=memory_available_on(placement) if available is None else available,
    )


def check_symmetric_gram(K) -> None:
    """ValueError unless the square K is symmetric within :data:`SYMMETRY_TOLERANCE`, relative
    to its largest entry (row strips against column strips: no n x n copy)."""
    xp = get_namespace(K)
    n = int(K.shape[0])
    step = chunk_rows(n)  # the strip, its transposed partner's difference and its magnitude
    top = asymmetry = 0.0
    for start in range(0, n, step):
        stop = min(n, start + step)
        top = max(top, float(xp.max(xp.abs(K[start:stop, :]))))
        upper = K[start:stop, start:]
        lower = xp.permute_dims(K[start:, start:stop], (1, 0))
        asymmetry = max(asymmetry, float(xp.max(xp.abs(upper - lower))))
    tolerance = SYMMETRY_TOLERANCE[str(result_dtype(K).__name__)]
    if not asymmetry <= tolerance * top:  # a nan compares False: not symmetric either
        raise ValueError(
            f"kernel='precomputed' needs a symmetric Gram matrix: max |K - K^T| is "
            f"{asymmetry:.3g}, more than {tolerance:g} times max |K| = {top:.3g}; "
            "symmetrize it ((K + K.T) / 2) if the asymmetry is rounding"
        )


def matrix_free_kpca(
    X,
    kernel,
    n_components,
    *,
    rng=None,
    tol=None,
    max_iter=None,
    oversamples=MATRIX_FREE_OVERSAMPLES,
    rows=None,
):
    """Top eigenpairs of the centered Gram of X without storing it (memory O(n (k + b))).

    Block Krylov (:func:`fastkpca.solvers.eigh_topk`, ``randomized``, ``n_components +
    oversamples`` vectors) on the implicit ``H K H``
    (:class:`fastkpca.execution.kernel_ops.CenteredGramOperator`), one pass per iteration.
    Returns :func:`exact_kpca`'s tuple; ``n_iter`` is the number of passes.
    """
    op = CenteredGramOperator(X, kernel, dtype="float64", rows=rows)
    trace, scale = _trace_and_scale(kernel_diag(kernel, X))
    vals, vecs, _ = eigh_topk(
        op,
        n_components,
        method="randomized",
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        oversamples=oversamples,
        return_n_iter=True,
        scale=scale,
    )
    row_means = op.row_means
    stats = CenteringStats(col_means=row_means, total_mean=_mean(row_means))
    _check_spectrum(vals, trace - op.n * stats.total_mean, op.n, scale)
    return vals, vecs, stats, op.n_passes


def exact_kpca(X, kernel, n_components, *, eigen_solver="auto", rng=None, tol=None, max_iter=None):
    """Top eigenpairs of the centered Gram matrix of X, on X's placement: one n x n Gram
    (:func:`check_symmetric_gram` for a :class:`PrecomputedKernel`), centered in place and
    overwritten by :func:`fastkpca.solvers.eigh_topk`; a Gram not PSD is a ValueError.
    ``eigen_solver="matrix_free"`` stores none: :func:`matrix_free_kpca`.

    Returns
    -------
    eigenvalues : (k,) float64, descending, of the centered Gram ``H K H``
    eigenvectors : (n, k) float64, unit norm (the dual coefficients alpha)
    stats : CenteringStats for out-of-sample centering
    n_iter : work done by the eigensolver (see ``eigh_topk(return_n_iter=True)``)
    """
    if eigen_solver == "matrix_free":
        return matrix_free_kpca(X, kernel, n_components, rng=rng, tol=tol, max_iter=max_iter)
    if isinstance(kernel, PrecomputedKernel):
        K = kernel(X)  # a copy, in X's float dtype
        check_symmetric_gram(K)
    else:
        K = symmetric_gram(kernel, X)
    placement = placement_of(K)
    n = int(K.shape[0])
    # sum_i k(x_i, x_i) scales the rounding threshold of eigh_topk (the centered Gram's own
    # trace is no scale: it is 0 for identical rows)
    trace, scale = _trace_and_scale(placement.xp.linalg.diagonal(K))
    method = eigen_solver
    if eigen_solver == "auto":
        method = auto_method(n, n_components, dense=True, placement=placement)
    stats = center_gram_inplace(K, block=centering_rows(placement, n))
    vals, vecs, n_iter = eigh_topk(
        K,
        n_components,
        method=method,
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        overwrite=True,
        return_n_iter=True,
        scale=scale,
    )
    del K
    _check_spectrum(vals, trace - n * stats.total_mean, n, scale)
    return vals, vecs, stats, n_iter


def _trace_and_scale(diagonal) -> tuple[float, float]:
    """``sum_i K_ii`` and ``sum_i |K_ii|`` (the rounding threshold's scale) in float64."""
    xp = get_namespace(diagonal)
    d = xp.astype(diagonal, xp.float64)
    return float(xp.sum(d)), float(xp.sum(xp.abs(d)))


def _mean(values) -> float:
    return float(get_namespace(values).mean(values))


def _check_spectrum(values, total_variance: float, n: int, scale: float) -> None:
    """ValueError when the centered Gram has no positive eigenvalue and a trace below ``-n``
    rounding thresholds: not PSD (scikit-learn's ``KernelPCA`` raises too)."""
    top = float(get_namespace(values).max(values)) if values.shape[0] else 0.0
    if top <= 0.0 and total_variance < -n * rounding_threshold(scale):
        raise ValueError(
            "All eigenvalues of the centered kernel matrix are <= 0 (their sum is "
            f"{total_variance:.4g}): the matrix is not positive semi-definite.  A precomputed "
            "Gram must be the matrix k(x_i, x_j) of a positive semi-definite kernel"
        )


def _check_fraction_solver(eigen_solver, n_components) -> None:
    if eigen_solver == "matrix_free" and _is_fraction(n_components):
        raise ValueError(
            "a float n_components (a fraction of the variance) needs all n eigenpairs, "
            "which eigen_solver='matrix_free' (a Gram too large to store) does not compute; "
            "give an int"
        )


class ExactKPCA(BaseKPCA):
    """Exact kernel PCA on the full centered Gram matrix.

    ``sklearn.decomposition.KernelPCA``'s projections (deterministic signs), from one n x n
    Gram in X's dtype, or recomputed in each pass (``eigen_solver="matrix_free"``).  Accepts CSR.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples) (``fastkpca.KernelPCA`` keeps
        scikit-learn's default).  A float: the fewest whose ``explained_variance_ratio_``
        reaches it (all n eigenpairs: moderate n).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"``, ``"linear"``, ``"cosine"``,
        a :class:`fastkpca.kernels.Kernel`, or ``"precomputed"`` (a symmetric PSD n x n Gram at
        fit, n_new x n_train at transform; not saved, compressed or inverted).
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features as in ``KernelPCA``.
    degree, coef0 : polynomial kernel parameters.
    nu : Matern smoothness.
    eigen_solver : {"auto", "dense", "lanczos", "randomized", "orthogonal", "matrix_free", \
"arpack"}
        See :func:`fastkpca.solvers.eigh_topk`.  ``auto``: ``dense`` or ``randomized``
        (:data:`fastkpca.execution.linalg.DENSE_RULE`), or ``matrix_free``
        (:func:`matrix_free_kpca`, the Gram recomputed in every pass) when the Gram does not fit
        (:func:`check_exact_fits`).  ``"arpack"`` is ``"lanczos"``.
    eigen_tol, max_iter : iterative-solver stopping parameters (None: per-dtype defaults).
    random_state : int, Generator or None
        Start vectors of the iterative solvers.
    fit_inverse_transform : bool, default False
        Learn the pre-image map of :meth:`inverse_transform` (kernel ridge regression from the
        training projections to the training rows, as ``KernelPCA``).
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_jobs : int or None, default None
        Threads of each call, scikit-learn's meaning (-1 every usable core, -2 all but one);
        None: ``joblib.parallel_config``'s, else the usable cores within the inherited thread
        limit.  The model does not depend on it, up to rounding.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` shows a progress bar (tqdm) where the output is a terminal.
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live; ``"cuda"`` (or any
        PyTorch device) sends host data there block by block.  ``transform`` returns the
        input's array type, device and dtype.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered training Gram, descending.
    eigenvectors_ : (n_samples, n_components) unit-norm dual coefficients.
    X_fit_ : the training data (needed to evaluate the kernel for new points).
    kernel_ : the resolved Kernel.
    n_components_ : the number of components used.
    n_iter_ : eigensolver work (see ``eigh_topk(return_n_iter=True)``).
    total_variance_ : float, ``tr(H K H)``; total_variance_error_ : 0 (exact).
    explained_variance_ratio_ : (n_components,) ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).

    See Also
    --------
    KernelPCA : the same computation with scikit-learn's signature and defaults.
    NystromKPCA, RandomFeatureKPCA : approximations for more rows than the Gram can hold.
    AutoKPCA : chooses between exact KPCA and the approximations.

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import ExactKPCA
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> model = ExactKPCA(n_components=3, kernel="rbf", gamma=0.1).fit(X)
    >>> model.eigenvalues_.round(2)
    array([23.77, 21.76, 19.58])
    >>> model.transform(X[:2]).shape
    (2, 3)
    """

    _accepts_sparse = True
    _accepts_precomputed_kernel = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        eigen_solver="auto",
        eigen_tol=None,
        max_iter=None,
        random_state=None,
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
        self.eigen_solver = eigen_solver
        self.eigen_tol = eigen_tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    def fit(self, X, y=None):
        """Fit on X of shape (n_samples, n_features)."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit and return the training projections ``alpha * sqrt(lambda)`` (no second Gram)."""
        rows = self._fit(X)
        xp = get_namespace(self.eigenvectors_)
        out = self.eigenvectors_ * xp.sqrt(self.eigenvalues_)[None, :]
        return output_like(xp.astype(out, getattr(xp, result_dtype(rows).__name__)), X)

    def _check_params(self):
        """The shared checks and this estimator's; returns the resolved eigensolver."""
        super()._check_params()
        eigen_solver = resolve_eigen_solver(self.eigen_solver, EXACT_SOLVERS)
        check_solver_stopping(self.eigen_tol, self.max_iter)
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            if eigen_solver == "matrix_free":
                raise ValueError(
                    "eigen_solver='matrix_free' recomputes the Gram from the rows in every pass; "
                    "with kernel='precomputed' the Gram is the input: use another eigen_solver"
                )
            if self.fit_inverse_transform:
                raise ValueError(
                    "fit_inverse_transform=True with kernel='precomputed': the pre-image map "
                    "needs the kernel between new projections, which a precomputed Gram does "
                    "not give"
                )
        return eigen_solver

    def _fit(self, X):
        eigen_solver = self._check_params()
        source = self._fit_source(X)
        if eigen_solver != "matrix_free" and source.n_samples is not None:
            # The stored Gram must fit where the fit runs: checked before computing anything.
            eigen_solver = self._stored_or_matrix_free(source, eigen_solver)
        X = source.in_memory(purpose="ExactKPCA")
        rng = self._make_rng()
        # gamma heuristics read the rows by index (host copies of device rows)
        kernel = self._resolve_kernel(source, rng)
        _check_fraction_solver(eigen_solver, self.n_components)
        k = self._resolve_n_components(X.shape[0])
        vals, vecs, stats, n_iter = exact_kpca(
            X,
            kernel,
            k,
            eigen_solver=eigen_solver,
            rng=rng,
            tol=self.eigen_tol,
            max_iter=self.max_iter,
        )
        self.X_fit_ = own_copy(X)  # the caller's rows (a CSR matrix too) are copied
        self.eigenvalues_ = vals
        self.eigenvectors_ = vecs
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        self.n_iter_ = n_iter
        # Exact total variance: the diagonal (n kernel evaluations) and the Gram's mean.
        diagonal = kernel_diag(kernel, X)
        self._finish_fit(_trace_and_scale(diagonal)[0], stats.total_mean, 0.0, X)
        return X

    def _stored_or_matrix_free(self, source, eigen_solver: str) -> str:
        """``eigen_solver``, or for ``auto`` ``"matrix_free"`` when the stored Gram does not fit
        (:func:`check_exact_fits`) and n is within ``matrix_free_auto_max_n``; else ValueError."""
        n = source.n_samples
        placement = source.placement
        fraction = _is_fraction(self.n_components)
        if fraction:
            n_vectors = n  # every eigenpair
        elif isinstance(self.n_components, int | np.integer):
            n_vectors = min(int(self.n_components), n)
        else:
            n_vectors = min(DEFAULT_N_COMPONENTS, n)
        method = eigen_solver
        if eigen_solver == "auto":
            method = auto_method(n, n_vectors, dense=True, placement=placement)
        try:
            check_exact_fits(
                source,
                fraction=GRAM_FRACTION if source.resident else None,
                n_components=n_vectors,
                method=method,
                placement=placement,
            )
        except ValueError:
            largest = matrix_free_auto_max_n(placement)
            if (
                eigen_solver != "auto"
                or fraction
                or (isinstance(self.kernel, str) and self.kernel == "precomputed")
                or (largest is not None and n > largest)
            ):
                raise
            return "matrix_free"  # recompute the Gram in each pass instead
        return eigen_solver

    def _resolve_kernel(self, X, rng=None):
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError(
                    f"kernel='precomputed' needs the square n x n training Gram, got {X.shape}"
                )
            self.kernel_ = PrecomputedKernel()
            return self.kernel_
        return super()._resolve_kernel(X, rng)

    @property
    def _scaled_alphas(self):
        """``alpha / sqrt(lambda)``, 0 for a component with lambda <= 0."""
        return self.eigenvectors_ * inverse_sqrt_or_zero(self.eigenvalues_)[None, :]

    def _transform_rows(self, X):
        """Centered ``k(X, X_fit) @ alpha / sqrt(lambda)`` (:func:`centered_projection`)."""
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        return centered_projection(
            X, self.X_fit_, self.kernel_, stats, self._scaled_alphas, result_dtype(X)
        )


def centered_projection(X, points, kernel, stats, coef, dtype, weights=None):
    """``k~(X, points) @ coef``, the kernel rows centered with the training statistics
    (:func:`~fastkpca._centering.center_gram_out_of_sample`), in ``dtype``, where the points are.

    Block by block in float64 (:func:`fastkpca.execution.kernel_ops.fold_kernel_rows`), BLAS on
    one thread throughout so the result does not depend on other threads.
    """

    X, points, placement = on_one_placement(X, points)
    xp = placement.xp
    coef = placement.asarray(coef, dtype=np.float64)
    out = xp.empty(
        (X.shape[0], coef.shape[1]), dtype=placement.dtype(np.dtype(dtype)), device=placement.device
    )

    def project(state, start, stop, K):
        K = center_gram_out_of_sample(K, stats, weights=weights)
        out[start:stop, ...] = xp.astype(K @ coef, out.dtype, copy=False)

    with one_blas_thread():
        fold_kernel_rows(kernel, X, points, project, _no_state)
    return out


def _no_state():
    return None


def own_copy(X):
    """A copy of the rows X (an array of any namespace, or a CSR matrix)."""
    if sp.issparse(X):
        return X.copy()
    return get_namespace(X).asarray(X, copy=True)
