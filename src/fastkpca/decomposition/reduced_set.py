"""Reduced-set KPCA: kernel PCA on a weighted m x m Gram matrix of a few centres.

Kingravi, Vela & Gray, "Reduced set KPCA".  A reduced-set density estimate
(:mod:`fastkpca._density`) replaces the n points by m centres with probability weights p; KPCA
runs on their weighted m x m Gram (Algorithm 1), so a point transforms with O(m) kernel
evaluations.  With ``S = diag(sqrt(p))`` and the weighted-centered ``K~_c``, an eigenpair
``S K~_c S u = mu u`` (eq. 13, ``W K^c W``) gives the eigenvalue ``lambda = n mu`` of the n x n
centered Gram of the quantised data, and a new point projects as
``t(x) = sum_j k~(x, c_j) sqrt(p_j) u_j / sqrt(mu)``.  With every point its own centre this is
exact KPCA.  The density and the m x m eigenproblem run on host copies; the kernel passes over
all rows and ``transform`` run where the rows live.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._centering import CenteringStats, center_gram_inplace
from .._density import (
    DENSITIES,
    SHADOW_CENTERS,
    herding_density,
    kernel_bandwidth,
    kmeans_density,
    paring_density,
    shadow_density,
    uniform_density,
)
from .._utils import check_float, check_int, require_memory_parts
from ..execution.arrays import float_dtype, to_host
from ..execution.kernel_ops import kernel_diag
from ..solvers import SOLVERS, eigh_topk, flip_signs
from ._base import DEFAULT_N_PROBE, BaseKPCA, mean_embedding_probe
from .compress import centered_expansion, fitted_arrays_to
from .exact import centered_projection, resolve_eigen_solver

__all__ = ["ReducedSetKPCA", "reduced_set_kpca"]

#: ``n_centers=None`` means this many centres (capped to n_samples) for the densities that take m.
DEFAULT_N_CENTERS = 500


def reduced_set_kpca(centers, weights, kernel, n_components, *, eigen_solver="auto", rng=None):
    """KPCA on the weighted Gram of a reduced set (Kingravi et al., Algorithm 1).

    Parameters
    ----------
    centers : array (m, n_features)
    weights : array (m,)
        Non-negative; normalised here to probability weights p (only ratios matter).
    kernel : Kernel
    n_components : int
        At most m.
    eigen_solver, rng : passed to :func:`fastkpca.solvers.eigh_topk`.

    Returns
    -------
    mu : (k,) float64, the eigenvalues of ``S K~_c S`` (KPCA's eigenvalues / n).
    vectors : (m, k) float64, its unit eigenvectors u (ExactKPCA's sign rule).
    dual_coef : (m, k) float64, ``sqrt(p_j) u_j / sqrt(mu)`` (0 where mu = 0).
    stats : CenteringStats, weighted, of the centres' Gram.
    """
    p = np.asarray(weights, dtype=np.float64)
    p = p / p.sum()
    # The m x m Gram in float64: it is small, and its eigenvalues set every output.
    Kc = np.asarray(kernel(np.asarray(centers, dtype=np.float64)), dtype=np.float64)
    # The rounding threshold's scale: the trace of the uncentered weighted Gram, sum_j p_j
    # k(c_j, c_j) (the centered one's trace is 0 when every centre is the same point).
    scale = float(np.diagonal(Kc) @ p)
    stats = center_gram_inplace(Kc, weights=p)
    s = np.sqrt(p)
    Kc *= s[:, None]
    Kc *= s[None, :]
    mu, U = eigh_topk(Kc, n_components, method=eigen_solver, rng=rng, overwrite=True, scale=scale)
    # Signs: the projection of centre j on axis l is sqrt(mu_l) u_jl / sqrt(p_j); make the
    # largest of them positive, as ExactKPCA does on its training projections.
    pos = p > 0
    proj = np.zeros_like(U)
    proj[pos] = U[pos] / s[pos, None]
    flip_signs(proj)
    U = proj * s[:, None]
    scale = np.zeros_like(mu)
    scale[mu > 0] = 1.0 / np.sqrt(mu[mu > 0])
    dual_coef = U * s[:, None] * scale
    return mu, U, dual_coef, stats


class ReducedSetKPCA(BaseKPCA):
    """Reduced-set kernel PCA: exact KPCA on a weighted set of m << n centres.

    Kingravi, Vela & Gray, "Reduced set KPCA" (Algorithm 1; module notes): only the m centres
    are kept, so ``transform`` costs O(m) kernel evaluations.  No ``kernel="precomputed"``.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_centers_).  A float: the fewest whose
        ``explained_variance_ratio_`` reaches it.
    kernel, gamma, degree, coef0, nu :
        Kernel spec, as for :class:`~fastkpca.ExactKPCA`; ``density="shadow"`` needs rbf,
        laplacian or matern.
    density : {"shadow", "kmeans", "paring", "herding", "uniform"}
        The reduced-set density estimate (:mod:`fastkpca._density`):

        - ``"shadow"``: the single-pass shadow density (Algorithm 2): each point farther than
          sigma / ell from every earlier centre opens a set, weighted by its size.
        - ``"kmeans"``: centroids weighted by cluster sizes (Zhang & Kwok).
        - ``"paring"``: KDE paring (Freedman & Kisilev 2010), components drawn with replacement.
        - ``"herding"``: kernel herding (Chen, Welling & Smola 2010) over random candidates.
        - ``"uniform"``: random rows, equal weights (the paper's "subsampled KPCA").
    ell : float
        Shadow parameter (radius sigma / ell; larger gives more centres); 4 is the paper's.
    n_centers : int or None
        m for the densities other than ``"shadow"``; None gives min(500, n_samples).
    center : {"centroid", "first"}
        A shadow set's representative: its mean (closer to exact KPCA) or the paper's first.
    eigen_solver : {"auto", "dense", "lanczos", "randomized", "orthogonal", "arpack"}
        Solver for the m x m problem (:func:`fastkpca.solvers.eigh_topk`).
    random_state : int, Generator or None
        Randomness of the densities (not shadow's) and of the iterative eigensolvers.
    fit_inverse_transform, alpha :
        The pre-image map of :meth:`inverse_transform`, learnt on the centres.
    n_jobs, verbose, device :
        As for :class:`~fastkpca.ExactKPCA`; the density and the m x m eigenproblem run on
        host copies.

    Attributes
    ----------
    centers_ : ndarray (n_centers_, n_features), the reduced set; n_centers_ : int, m.
    weights_ : ndarray (n_centers_,), probability weights of the centres.
    eigenvalues_ : ndarray (n_components_,)
        Estimated eigenvalues of the centered n x n training Gram (n mu).
    eigenvectors_ : ndarray (n_centers_, n_components_), the unit eigenvectors u.
    dual_coef_ : ndarray (n_centers_, n_components_)
        ``transform(X) = k~(X, centers_) @ dual_coef_``.
    gram_col_means_, gram_total_mean_ : weighted centering statistics of the centres' Gram.
    radius_ : float or None, the shadow radius sigma / ell.
    n_samples_fit_ : int
    total_variance_, total_variance_error_ : float
        ``tr(H K H)`` with the mean embedding estimated by a probe
        (:func:`fastkpca.decomposition._base.mean_embedding_probe`), and its standard error.

    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).
    kernel_ : the resolved Kernel.  n_components_ : int.  n_features_in_ : int.

    See Also
    --------
    NystromKPCA : landmarks without a density model; usually as accurate and faster.
    compress_expansion : makes the fitted model's transform cheaper still.

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import ReducedSetKPCA
    >>> X = np.repeat(np.random.default_rng(0).standard_normal((100, 4)), 5, axis=0)
    >>> model = ReducedSetKPCA(3, gamma=0.5, ell=4.0).fit(X)
    >>> model.n_centers_ <= 100, model.transform(X[:2]).shape
    (True, (2, 3))
    """

    #: CSR rows are read block by block (shadow density) or by index (the other densities); the
    #: centres are dense, so the model and its transform are the dense ones.
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
        density="shadow",
        ell=4.0,
        n_centers=None,
        center="centroid",
        eigen_solver="auto",
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
        self.density = density
        self.ell = ell
        self.n_centers = n_centers
        self.center = center
        self.eigen_solver = eigen_solver
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    def _check_params(self):
        """The shared checks, then this estimator's parameters (ValueError naming each);
        returns the resolved eigensolver."""
        super()._check_params()
        if self.density not in DENSITIES:
            raise ValueError(f"density must be one of {DENSITIES}, got {self.density!r}")
        if self.center not in SHADOW_CENTERS:
            raise ValueError(f"center must be one of {SHADOW_CENTERS}, got {self.center!r}")
        check_float("ell", self.ell, low=0.0, low_open=True)
        check_int("n_centers", self.n_centers, low=1, allow_none=True)
        if self.density == "shadow":
            kernel_bandwidth(self._check_kernel_spec())  # the shadow radius needs a bandwidth
        return resolve_eigen_solver(self.eigen_solver, SOLVERS)

    def _reduced_set(self, X, kernel, rng):
        """Run the chosen density estimate; sets ``radius_``."""
        self.radius_ = None
        if self.density == "shadow":
            sigma, metric = kernel_bandwidth(kernel)
            self.radius_ = float(sigma / self.ell)
            return shadow_density(X, self.radius_, metric=metric, center=self.center)
        n = X.shape[0]
        if self.n_centers is None:
            m = min(DEFAULT_N_CENTERS, n)
        elif self.n_centers > n:
            raise ValueError(f"n_centers={self.n_centers} is larger than n_samples={n}")
        else:
            m = int(self.n_centers)
        if self.density == "kmeans":
            return kmeans_density(X, m, rng=rng)
        if self.density == "paring":
            return paring_density(X, m, kernel, rng=rng)
        if self.density == "herding":
            return herding_density(X, m, kernel, rng=rng)
        return uniform_density(X, m, rng=rng)

    def fit(self, X, y=None):
        """Fit on X of shape (n_samples, n_features): reduced set, then Algorithm 1."""
        eigen_solver = self._check_params()
        source = self._fit_source(X)
        X = source.in_memory(purpose="ReducedSetKPCA")
        placement = source.placement
        # every density keeps its centres (and shadow its blocks of rows) as dense rows
        m = min(X.shape[0], self.n_centers or DEFAULT_N_CENTERS)
        source.require_dense(m, f"ReducedSetKPCA(density={self.density!r}) centres")
        if self.density != "shadow":
            # The m x m weighted Gram of the centres, centered in place, and the eigensolver's
            # copy and vectors (shadow: m follows from the data, not from a parameter).
            require_memory_parts(
                [(3 * 8 * m * m, f"n_centers={m}: the {m} x {m} Gram of the centres")],
                hint="lower n_centers",
            )
        rng = self._make_rng()
        kernel = self._resolve_kernel(source, rng)
        # The density estimates are host algorithms (sequential shadow sets, k-means, herding):
        # they read host rows (a copy of rows of another namespace; see the module notes).
        rs = self._reduced_set(to_host(X), kernel, rng)
        m = rs.n_centers
        if (
            self.density == "shadow"
            and self.n_components is not None
            and isinstance(self.n_components, int | np.integer)
            and self.n_components > m
        ):
            raise ValueError(
                f"n_components={self.n_components} is larger than the "
                f"{m} shadow centres found with ell={self.ell}; increase ell"
            )
        k = self._resolve_n_components(m, what="n_centers_")
        mu, U, dual_coef, stats = reduced_set_kpca(
            rs.centers, rs.weights, kernel, k, eigen_solver=eigen_solver, rng=rng
        )
        n = X.shape[0]
        self.centers_ = rs.centers
        self.weights_ = rs.weights / rs.weights.sum()
        self.n_centers_ = m
        self.n_samples_fit_ = n
        self.eigenvalues_ = n * mu
        self.eigenvectors_ = U
        self.dual_coef_ = dual_coef
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        # The probe draws from its own generator: the model does not depend on it.
        mean_sq = mean_embedding_probe(X, kernel, DEFAULT_N_PROBE, self._make_rng())
        diag_sum = float(np.sum(to_host(kernel_diag(kernel, X)), dtype=np.float64))
        # The (host) results join the rows before the model is finished, so the pre-image map
        # projects its anchors there; the map's own arrays (solved on the host) follow.
        fitted_arrays_to(self, placement)
        self._finish_fit(diag_sum, *mean_sq, self.centers_)
        fitted_arrays_to(self, placement)
        return self

    def kernel_expansion(self):
        """The transform as a kernel expansion over the centres (for ``compress_expansion``).

        ``transform(X) = k(X, centers_) @ coef + offset``: the weighted centering folded into
        the coefficients (:func:`fastkpca.decomposition.compress.centered_expansion`).
        """
        check_is_fitted(self)
        return centered_expansion(
            self.centers_,
            self.dual_coef_,
            self.gram_col_means_,
            self.gram_total_mean_,
            self.kernel_,
            weights=self.weights_,
        )

    def _transform_rows(self, X):
        """``k~(X, centers_) @ dual_coef_`` (weighted centering), O(m) per row, where X lives."""
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        return centered_projection(
            X,
            self.centers_,
            self.kernel_,
            stats,
            self.dual_coef_,
            float_dtype(X.dtype),
            weights=self.weights_,
        )
