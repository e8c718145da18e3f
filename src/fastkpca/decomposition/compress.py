"""Fast evaluation of kernel expansions (Achlioptas, McSherry & Schoelkopf 2001, sections 4-5).

An expansion-based model projects ``transform(x) = k(x, Z) @ coef + offset`` over m points
(KPCA's centering folded in, :func:`centered_expansion`).  :func:`compress_expansion` shrinks
both factors at random, without bias:

- ``rounding`` (section 4): point i kept with probability ``pi_i = min(1, s rho_i)`` (one coin
  per point, shared by the components) and its coefficients divided by ``pi_i``;
- ``projection_dim`` (section 5): distances from ``x P``, P d x q of +-1 / sqrt(q) entries
  (Theorem 6), so a kernel evaluation costs O(q) instead of O(d).

A model is expansion-based when :func:`kernel_expansion` can read it: a ``kernel_expansion()``
method returning a :class:`KernelExpansion`, or the :data:`DUAL_EXPANSION` attributes of
:class:`~fastkpca.ExactKPCA` and :class:`~fastkpca.KernelPCA`.  Expansions are compressed and
evaluated where they live (:func:`evaluate_expansion`), with host random draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted

from .._centering import normalize_weights
from .._utils import as_generator, check_float, check_int, require_memory_parts
from ..execution import one_blas_thread
from ..execution.arrays import Placement, placement_of, row_range, take_rows, to_host
from ..execution.budget import chunk_rows
from ..execution.elementwise import as_float64, astype_name, float_name, matmul
from ..execution.feature_ops import block_rows
from ..execution.kernel_ops import fold_kernel_rows
from ..kernels import RBF, Cosine, Kernel, Linear, Matern, Polynomial
from ._base import BaseKPCA

__all__ = [
    "compress_expansion",
    "CompressedKPCA",
    "KernelExpansion",
    "kernel_expansion",
    "centered_expansion",
    "round_coefficients",
    "sign_projection",
    "evaluate_expansion",
    "inverse_sqrt_or_zero",
    "fitted_arrays_to",
]

#: The fitted attributes of a dual expansion over the training rows (ExactKPCA, KernelPCA): the
#: centered ``k(x, X_fit_) @ eigenvectors_ / sqrt(eigenvalues_)``.
DUAL_EXPANSION = (
    "X_fit_",
    "eigenvectors_",
    "eigenvalues_",
    "gram_col_means_",
    "gram_total_mean_",
    "kernel_",
)

#: Kernels that depend on the inputs only through Euclidean distances and dot products, which
#: random projections preserve (section 5).  The Laplacian kernel (L1 distance) is not one.
PROJECTABLE_KERNELS = (RBF, Matern, Polynomial, Linear, Cosine)


@dataclass
class KernelExpansion:
    """``transform(X) = kernel(X, points) @ coef + offset``.

    points : (m, d) expansion points (an array, or a scipy.sparse matrix for a model fitted on
    sparse rows); coef : (m, k) float64; offset : (k,) float64; kernel : the model's Kernel.
    """

    points: np.ndarray
    coef: np.ndarray
    offset: np.ndarray
    kernel: Kernel


def centered_expansion(points, alphas, col_means, total_mean, kernel, weights=None):
    """Fold feature-space centering into the coefficients of a dual expansion.

    A centered expansion ``T(x) = k~(x, Z) @ A`` with ``k~(x, z_i) = k(x, z_i) - k(x, Z) w -
    c_i + t`` (``c = w^T K``, ``t = w^T K w``, w uniform by default; the out-of-sample centering
    of Schoelkopf et al. 1998) equals ``k(x, Z) @ (A - w 1^T A) + (t 1^T A - c^T A)``.

    Parameters
    ----------
    points : (m, d) array or scipy.sparse matrix (kept as it is: the training rows of a model
    fitted on CSR input); alphas : (m, k) scaled dual coefficients (alpha / sqrt(lambda));
    col_means : (m,) c; total_mean : t; kernel : Kernel; weights : (m,) or None.
    """
    placement = placement_of(alphas)
    xp = placement.xp
    A = as_float64(alphas)
    m = A.shape[0]
    w = normalize_weights(weights, m)
    if w is None:
        w = xp.full((m,), 1.0 / m, dtype=xp.float64, device=placement.device)
    else:
        w = placement.asarray(w, dtype=np.float64)
    colsum = xp.sum(A, axis=0)
    coef = A - w[:, None] * colsum[None, :]
    col_means = placement.asarray(col_means, dtype=np.float64)
    offset = float(total_mean) * colsum - col_means @ A
    return KernelExpansion(points=points, coef=coef, offset=offset, kernel=kernel)


def inverse_sqrt_or_zero(values):
    """``1 / sqrt(v)`` where ``v > 0`` and 0 elsewhere, in the values' namespace: the scaling of
    dual coefficients ``alpha / sqrt(lambda)`` (a component with lambda <= 0 projects to 0)."""
    xp = placement_of(values).xp
    positive = values > 0
    return xp.where(positive, 1.0 / xp.sqrt(xp.where(positive, values, 1.0)), 0.0)


def fitted_arrays_to(model, placement: Placement) -> None:
    """Move a model's fitted numpy arrays (public attributes ending in ``_``; scipy.sparse
    matrices stay as they are) to the placement: what a fit computed on the host (the solver's
    small results, a pre-image map) joins the model where its rows live."""
    for name, value in list(vars(model).items()):
        if name.endswith("_") and not name.startswith("_") and isinstance(value, np.ndarray):
            setattr(model, name, placement.asarray(value))


def evaluate_expansion(X, points, coef, offset, kernel, projection=None):
    """``kernel(X P, points) @ coef + offset`` for rows X of any placement, an ``(len(X), k)``
    float64 array there (P = ``projection``, or none), kernel rows projected while in cache
    (:func:`fastkpca.execution.kernel_ops.fold_kernel_rows`), BLAS on one thread."""
    placement = placement_of(X)
    xp = placement.xp
    n, k = int(X.shape[0]), int(coef.shape[1])
    points = astype_name(points, float_name(X.dtype))
    coef, offset = as_float64(coef), as_float64(offset)
    out = xp.empty((n, k), dtype=xp.float64, device=placement.device)
    step = block_rows(X, chunk_rows(max(1, int(points.shape[0]))), int(points.shape[0]), 8)
    with one_blas_thread():
        for start in range(0, n, step):
            rows = row_range(X, start, start + step)
            if projection is not None:
                rows = astype_name(matmul(as_float64(rows), projection), float_name(X.dtype))

            def project(state, lo, hi, K, base=start):
                out[base + lo : base + hi, ...] = K @ coef + offset

            fold_kernel_rows(kernel, rows, points, project, _no_state)
    return out


def kernel_expansion(model) -> KernelExpansion:
    """Read the kernel expansion of a fitted model (see the module's protocol)."""
    check_is_fitted(model)
    if callable(getattr(model, "kernel_expansion", None)):
        return model.kernel_expansion()
    if all(hasattr(model, name) for name in DUAL_EXPANSION):
        return centered_expansion(
            model.X_fit_,
            model.eigenvectors_ * inverse_sqrt_or_zero(model.eigenvalues_),
            model.gram_col_means_,
            model.gram_total_mean_,
            model.kernel_,
        )
    raise ValueError(
        f"{type(model).__name__} is not an expansion-based model: "
        "compress_expansion needs ExactKPCA (or fastkpca.KernelPCA) or a model with a "
        "kernel_expansion() method (NystromKPCA, ReducedSetKPCA, SparsifiedKPCA)"
    )


def _solve_rounding_s(rho, target):
    """The s with ``sum_i min(1, s rho_i) = target`` (0 < target < #{rho > 0}).

    With rho sorted descending, if the first j terms are saturated the sum is ``j + s T_j``
    (``T_j`` the sum of the rest): s_j = (target - j) / T_j, valid for the first j with
    ``s_j rho_(j+1) <= 1``.  The sum is continuous and increasing in s, so that j is unique.
    """
    r = np.sort(rho[rho > 0])[::-1]
    tails = np.cumsum(r[::-1])[::-1]  # tails[j] = sum_{i >= j} r_i
    j = np.arange(r.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (target - j) / tails
    ok = (target - j > 0) & (s * r <= 1.0)
    return float(s[np.argmax(ok)])


def round_coefficients(coef, rounding, rng):
    """Randomized rounding of expansion coefficients (section 4), one coin per point.

    Parameters
    ----------
    coef : (m, k) coefficients; rounding : expected fraction of points kept; rng : Generator.

    Returns
    -------
    keep : indices of the kept points; new_coef : (len(keep), k) with ``E`` equal to coef
        (kept rows divided by their keep probability); s : the paper's s (None if nothing was
        rounded); probs : (m,) keep probabilities pi_i.
    """
    coef = np.asarray(coef, dtype=np.float64)
    m = coef.shape[0]
    norms = np.linalg.norm(coef, axis=0)
    live = norms > 0
    # rho_i: row i of the coefficients with unit-norm columns, so every component counts alike;
    # sum_i rho_i^2 = 1 (for one component, rho_i = |alpha_i| of the unit vector alpha).
    rho = np.zeros(m)
    if live.any():
        rho = np.sqrt(np.mean((coef[:, live] / norms[live]) ** 2, axis=1))
    target = rounding * m
    n_live = int(np.count_nonzero(rho))
    if target >= n_live:
        probs = (rho > 0).astype(np.float64)  # keep every useful term: the exact expansion
        s = None
    else:
        s = _solve_rounding_s(rho, target)
        probs = np.minimum(1.0, s * rho)
    kept = rng.random(m) < probs  # probs == 1 always kept, probs == 0 never
    keep = np.flatnonzero(kept)
    return keep, coef[keep] / probs[keep, None], s, probs


def sign_projection(n_features, projection_dim, rng):
    """A (d, q) matrix of i.i.d. +-1 / sqrt(q) entries (Achlioptas 2001, as used in section 5)."""
    signs = rng.integers(0, 2, size=(n_features, projection_dim), dtype=np.int8)
    return (2.0 * signs - 1.0) / np.sqrt(projection_dim)


class CompressedKPCA(BaseKPCA):
    """A compressed kernel expansion: what :func:`compress_expansion` returns.

    ``transform(X) = kernel_(X P, points_) @ coef_ + offset_`` (P = ``projection_``, or none),
    an unbiased estimate of the source model's transform for the rounding part (and for kernels
    linear in dot products, the projection part).  It has no ``fit``.

    Parameters (recorded for ``get_params``)
    ----------------------------------------
    rounding, projection_dim, random_state : as given to :func:`compress_expansion`.
    n_jobs, device : int or None, str or None
        Where and with how many threads ``transform`` computes; :func:`compress_expansion`
        takes the source model's.
    verbose : int, default 0
        Kept for the shared estimator interface.

    Attributes
    ----------
    points_ : (n_terms_, d or projection_dim) kept (projected) expansion points.
    coef_ : (n_terms_, n_components) rounded coefficients; offset_ : (n_components,).
    projection_ : (n_features_in_, projection_dim) +-1 / sqrt(projection_dim), or None.
    kernel_, eigenvalues_, n_components_, n_features_in_ : copied from the source model.
    n_terms_ : number of kept points; n_terms_source_ : number in the source expansion.
    rounding_s_ : the paper's s (None when no term was rounded).
    source_model_ : class name of the source model.

    See Also
    --------
    compress_expansion : builds it from a fitted model.
    ExactKPCA, SparsifiedKPCA, NystromKPCA, ReducedSetKPCA : the models it compresses.

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import ExactKPCA, compress_expansion
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> model = ExactKPCA(n_components=3, gamma=0.1).fit(X)
    >>> small = compress_expansion(model, rounding=0.5, random_state=0)
    >>> small.n_terms_source_, bool(small.n_terms_ < small.n_terms_source_)
    (300, True)
    >>> small.transform(X[:2]).shape
    (2, 3)
    """

    #: like the source models (Nystrom, random features) that take scipy.sparse rows
    _accepts_sparse = True

    def __init__(
        self,
        rounding=None,
        projection_dim=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        self.rounding = rounding
        self.projection_dim = projection_dim
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    def _check_params(self):
        """``rounding`` in (0, 1] or None, ``projection_dim`` a positive integer or None,
        ``random_state`` (ValueError naming the parameter): what :func:`compress_expansion`
        checks before it reads the model, and a model file's loader before it builds one."""
        super()._check_params()
        if self.rounding is not None:
            check_float("rounding", self.rounding, low=0.0, high=1.0, low_open=True)
        check_int("projection_dim", self.projection_dim, low=1, allow_none=True)

    def fit(self, X=None, y=None):
        raise ValueError(
            "CompressedKPCA has no fit: build it from a fitted model with "
            "fastkpca.compress_expansion(model, rounding=..., projection_dim=...)"
        )

    def _transform_rows(self, X):
        """The compressed expansion, an unbiased estimate of the source model's projections,
        where X lives (:func:`evaluate_expansion`), in X's float dtype."""
        out = evaluate_expansion(
            X, self.points_, self.coef_, self.offset_, self.kernel_, self.projection_
        )
        return astype_name(out, float_name(X.dtype))


def compress_expansion(model, rounding=None, projection_dim=None, random_state=None):
    """A cheaper-to-evaluate, unbiased copy of a fitted expansion-based model's transform.

    Achlioptas, McSherry & Schoelkopf (2001), sections 4 (randomized rounding, the Hoeffding bound
    of eq. 1) and 5 (random +-1 projections, Theorem 6).

    Parameters
    ----------
    model : fitted ExactKPCA, SparsifiedKPCA, or any model with ``kernel_expansion()``
    rounding : float in (0, 1] or None
        Expected fraction of expansion terms kept (1: all, exact; None: no rounding).
    projection_dim : int >= 1 or None
        Evaluate the kernel on inputs projected to this many random +-1 combinations (kernels of
        distances / dot products only); distances within ``1 +- eps`` for ``projection_dim ~ 4 (2
        + beta) ln(n) / eps^2`` (Theorem 6).
    random_state : int, Generator or None

    Returns
    -------
    CompressedKPCA
        On the device of the model's expansion (host draws: every device gets the same terms);
        unbiased in the coefficients, and for one component ``P(|T~_j(x) - T_j(x)| >= t) <= 2
        exp(-2 t^2 / sum_i w_i^2)``, ``w_i = |coef_ij k(x, z_i)| / pi_i`` (Hoeffding).
    """
    out = CompressedKPCA(
        rounding=rounding,
        projection_dim=projection_dim,
        random_state=random_state if not isinstance(random_state, np.random.Generator) else None,
        n_jobs=getattr(model, "n_jobs", None),
        verbose=getattr(model, "verbose", 0),
        device=getattr(model, "device", None),
    )
    out._check_params()  # before the model is read: a bad value costs nothing
    if rounding is not None:
        rounding = out.rounding = float(rounding)
    rng = as_generator(random_state)
    expansion = kernel_expansion(model)
    if expansion.kernel is None or getattr(expansion.kernel, "name", None) == "precomputed":
        raise ValueError(
            "compress_expansion needs a model that evaluates its kernel at new points; a "
            "kernel='precomputed' model is given kernel values against all training points"
        )
    # The random draws are made on the host from copies of the m x k coefficients; the kept
    # points are gathered (and sparse training rows densified) only then, where they live.
    points = expansion.points
    placement = placement_of(points)
    kernel = expansion.kernel
    if projection_dim is not None and not isinstance(kernel, PROJECTABLE_KERNELS):
        raise ValueError(
            f"projection_dim needs a kernel of Euclidean distances or dot products "
            f"(rbf, matern, polynomial, linear, cosine); got {kernel!r}"
        )
    coef = np.asarray(to_host(expansion.coef), dtype=np.float64)
    m, d = points.shape
    if projection_dim is not None:
        require_memory_parts(
            [
                (
                    9 * d * projection_dim + 16 * m * projection_dim,
                    f"projection_dim={projection_dim}: the {d} x {projection_dim} random "
                    f"projection and the {m} projected expansion points",
                )
            ],
            hint="lower projection_dim",
        )
    s = None
    if rounding is not None:
        keep, coef, s, _ = round_coefficients(coef, rounding, rng)
        points = take_rows(points, keep)
    projection = None
    if projection_dim is not None:
        projection = sign_projection(d, projection_dim, rng)
        points = matmul(as_float64(points), placement.asarray(projection))
    elif sp.issparse(points):
        kept = points.shape[0]
        require_memory_parts(
            [
                (
                    kept * d * points.dtype.itemsize,
                    f"the {kept} expansion points of the sparse training rows, made dense "
                    f"({kept} x {d})",
                )
            ],
            hint="give rounding < 1 (fewer points) or projection_dim (narrower points)",
        )
        points = points.toarray()
    out.points_ = points
    out.coef_ = np.ascontiguousarray(coef)
    out.offset_ = np.asarray(to_host(expansion.offset), dtype=np.float64)
    out.projection_ = projection
    out.kernel_ = kernel
    out.eigenvalues_ = np.array(to_host(model.eigenvalues_), dtype=np.float64, copy=True)
    fitted_arrays_to(out, placement)  # the compressed model lives where its source does
    out.n_components_ = int(coef.shape[1])
    out.n_features_in_ = int(model.n_features_in_)
    out.n_terms_ = int(points.shape[0])
    out.n_terms_source_ = int(m)
    out.rounding_s_ = s
    out.source_model_ = type(model).__name__
    return out


def _no_state():
    return None
