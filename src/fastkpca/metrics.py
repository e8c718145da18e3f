"""Error measures for approximate kernel PCA.

Gram errors compare the (centered) Gram ``HGH`` of X with ``T T^T``, ``T = model.transform(X)``,
in row blocks: :func:`gram_spectral_error` ``||HGH - T T^T||_2 / n`` (Ghashami et al. 2016
section 5), :func:`gram_frobenius_error` ``||HGH - T T^T||_F / n^2`` and
:func:`relative_rank_k_error` ``||HGH - T T^T||_F / ||HGH - (HGH)_k||_F`` (1.0: exact KPCA).
Also :func:`embedding_error`, :func:`eigenvalue_error`, :func:`subspace_distance`, :func:`mmd`,
and :func:`reconstruction_error` (Sriperumbudur & Sterge's R on held-out data).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as la
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.utils.validation import check_array

from ._centering import center_gram_inplace
from ._utils import as_generator, plain
from .decomposition._base import BaseKPCA, execution_context
from .execution.arrays import take_rows, to_host
from .kernels import Kernel, chunk_rows, make_kernel
from .solvers import eigh_topk
from .statistics.probe import ErrorProbe

__all__ = [
    "gram_spectral_error",
    "gram_frobenius_error",
    "relative_rank_k_error",
    "embedding_error",
    "eigenvalue_error",
    "subspace_distance",
    "mmd",
    "MAX_EXACT_N",
    "estimate_error",
    "eigenvalues_per_row",
    "SKLEARN_KERNELS",
    "method_certificates",
    "reconstruction_error",
]

#: Up to this n the Gram errors use one explicit n x n matrix; above, passes over row blocks.
MAX_EXACT_N = 20000


def _check_pair(X, embedding, kernel):
    if not isinstance(kernel, Kernel):
        raise ValueError(
            f"kernel must be a fastkpca.kernels.Kernel (e.g. model.kernel_), "
            f"got {type(kernel).__name__}"
        )
    T = np.asarray(embedding, dtype=np.float64)
    if T.ndim != 2 or T.shape[0] != X.shape[0]:
        raise ValueError(
            f"embedding must have shape (n_samples, k) with n_samples = {X.shape[0]}, got {T.shape}"
        )
    if X.shape[0] == 0:
        raise ValueError("X has no rows")
    return T


def _gram_row_means(X, kernel):
    """Row means of G in float64, by row blocks (one pass)."""
    means = np.empty(X.shape[0])
    for start, stop, block in kernel.blocks(X):
        means[start:stop] = block.mean(axis=1)
    return means


def _centered_blocks(X, kernel, center):
    """Yield ``(start, stop, HGH[start:stop])`` (or G) in float64; two passes when centering."""
    if center:
        r = _gram_row_means(X, kernel)
        total = r.mean()
    for start, stop, block in kernel.blocks(X):
        if center:
            block -= r[start:stop, None]
            block -= r[None, :]
            block += total
        yield start, stop, block


def _centered_gram(X, kernel, center):
    """The full (centered) Gram matrix, float64, one n x n array."""
    G = kernel(np.asarray(X, dtype=np.float64) if not hasattr(X, "tocsr") else X)
    G = np.asarray(G, dtype=np.float64)
    if center:
        center_gram_inplace(G)
    return G


def gram_frobenius_error(X, embedding, kernel, *, center=True) -> float:
    """``||HGH - T T^T||_F / n^2``, computed over Gram row blocks (any n, O(n^2 d) time)."""
    T = _check_pair(X, embedding, kernel)
    n = X.shape[0]
    total = 0.0
    for start, stop, block in _centered_blocks(X, kernel, center):
        block -= T[start:stop] @ T.T
        total += float(np.einsum("ij,ij->", block, block))
    return float(np.sqrt(total)) / n**2


def _difference_operator(X, kernel, T, center):
    """``v -> (HGH - T T^T) v`` as a LinearOperator recomputing Gram blocks on every product."""
    n = X.shape[0]

    def matmat(V):
        V = np.asarray(V, dtype=np.float64)
        one_d = V.ndim == 1
        V = V[:, None] if one_d else V
        if center:
            # HGH V = G (HV) - 1 * (r^T HV) with HV = V - mean(V)
            HV = V - V.mean(axis=0)
        else:
            HV = V
        out = np.empty_like(V)
        for start, stop, block in kernel.blocks(X):
            out[start:stop] = block @ HV
        if center:
            out -= out.mean(axis=0)
        out -= T @ (T.T @ V)
        return out[:, 0] if one_d else out

    return LinearOperator((n, n), matvec=matmat, matmat=matmat, rmatvec=matmat, dtype=np.float64)


def gram_spectral_error(
    X,
    embedding,
    kernel,
    *,
    center=True,
    max_exact_n=MAX_EXACT_N,
    random_state=0,
    rtol=1e-2,
    max_passes=30,
) -> float:
    """``||HGH - T T^T||_2 / n``: the worst-case kernel error.

    Exact (ARPACK on the formed difference) for ``n <= max_exact_n``; above, a block power
    iteration (4 start vectors) stopped at relative change ``rtol`` or ``max_passes``: a
    Rayleigh quotient, so never above the true norm.
    """
    T = _check_pair(X, embedding, kernel)
    n = X.shape[0]
    if n <= max_exact_n:
        D = _centered_gram(X, kernel, center)
        for start in range(0, n, chunk_rows(n)):
            stop = min(n, start + chunk_rows(n))
            D[start:stop] -= T[start:stop] @ T.T
        if n <= 2000:
            eig = la.eigvalsh(D, overwrite_a=True, check_finite=False)
            return float(np.max(np.abs(eig))) / n
        rng = as_generator(random_state)
        val = eigsh(D, k=1, which="LM", v0=rng.uniform(-1, 1, n), return_eigenvectors=False)
        return float(np.abs(val[0])) / n
    op = _difference_operator(X, kernel, T, center)
    rng = as_generator(random_state)
    Q, _ = la.qr(rng.standard_normal((n, 4)), mode="economic")
    estimate = 0.0
    for _ in range(max_passes):
        Z = op.matmat(Q)
        B = Q.T @ Z
        new = float(np.max(np.abs(la.eigvalsh((B + B.T) / 2))))
        Q, _ = la.qr(Z, mode="economic")
        if estimate and abs(new - estimate) <= rtol * new:
            estimate = new
            break
        estimate = new
    return estimate / n


def relative_rank_k_error(
    X, embedding, kernel, *, center=True, max_exact_n=MAX_EXACT_N, random_state=0
) -> float:
    """``||HGH - T T^T||_F / ||HGH - (HGH)_k||_F`` with k = embedding.shape[1]; 1.0 is optimal.

    The denominator is ``sqrt(||HGH||_F^2 - sum_{i<=k} lambda_i^2)`` (explicit Gram up to
    ``max_exact_n``, else the randomized solver to 1e-6); if it is 0 the result is 1.0 when the
    numerator is 0 too and inf otherwise.
    """
    T = _check_pair(X, embedding, kernel)
    n, k = T.shape
    if k >= n:
        raise ValueError(f"the embedding has {k} columns for {n} rows: a rank-k error needs k < n")
    if n <= max_exact_n:
        G = _centered_gram(X, kernel, center)
        step = chunk_rows(n)
        num2 = 0.0
        for start in range(0, n, step):
            D = G[start : start + step] - T[start : start + step] @ T.T
            num2 += float(np.einsum("ij,ij->", D, D))
        fro2 = float(np.einsum("ij,ij->", G, G))
        method = "dense" if n <= 3000 else "lanczos"
        vals, _ = eigh_topk(G, k, method=method, rng=random_state, overwrite=True)
    else:
        num2 = (gram_frobenius_error(X, T, kernel, center=center) * n**2) ** 2
        fro2 = (gram_frobenius_error(X, np.zeros((n, 1)), kernel, center=center) * n**2) ** 2
        op = _difference_operator(X, kernel, np.zeros((n, 1)), center)
        vals, _ = eigh_topk(op, k, method="randomized", rng=random_state, tol=1e-6)
    den2 = max(fro2 - float(np.sum(vals**2)), 0.0)
    scale = max(fro2, np.finfo(float).tiny)
    if den2 <= 1e-12 * scale:
        return 1.0 if num2 <= 1e-10 * scale else float("inf")
    return float(np.sqrt(num2 / den2))


def _as_2d(name, A):
    A = np.asarray(A, dtype=np.float64)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or infinity")
    return A


def embedding_error(embedding, reference, *, align="procrustes") -> float:
    """Relative Frobenius distance ``||E A - R||_F / ||R||_F`` after aligning E to R.

    align : ``"procrustes"`` (A orthogonal: solves the sign / rotation ambiguity of repeated
        eigenvalues; E and R of the same width), ``"linear"`` (A by least squares, as the
        reduced-set paper aligns embeddings; widths may differ), or ``"sign"`` (A diagonal +-1).
    """
    E = _as_2d("embedding", embedding)
    R = _as_2d("reference", reference)
    if E.shape[0] != R.shape[0]:
        raise ValueError(f"embedding has {E.shape[0]} rows, reference {R.shape[0]}")
    if align == "procrustes":
        if E.shape[1] != R.shape[1]:
            raise ValueError(
                "align='procrustes' needs embeddings of the same width; use align='linear'"
            )
        U, _, Vt = la.svd(E.T @ R, full_matrices=False)
        aligned = E @ (U @ Vt)
    elif align == "linear":
        A, *_ = la.lstsq(E, R)
        aligned = E @ A
    elif align == "sign":
        if E.shape[1] != R.shape[1]:
            raise ValueError("align='sign' needs embeddings of the same width")
        signs = np.sign(np.sum(E * R, axis=0))
        signs[signs == 0] = 1.0
        aligned = E * signs
    else:
        raise ValueError(f"align must be 'procrustes', 'linear' or 'sign', got {align!r}")
    denom = la.norm(R)
    if denom == 0:
        raise ValueError("reference embedding is all zeros")
    return float(la.norm(aligned - R) / denom)


def eigenvalue_error(eigenvalues, reference) -> float:
    """Relative l2 error ``||lambda_hat - lambda||_2 / ||lambda||_2`` over the common entries."""
    a = np.asarray(eigenvalues, dtype=np.float64).ravel()
    b = np.asarray(reference, dtype=np.float64).ravel()
    k = min(a.size, b.size)
    if k == 0:
        raise ValueError("eigenvalue arrays are empty")
    denom = np.linalg.norm(b[:k])
    if denom == 0:
        raise ValueError("reference eigenvalues are all zero")
    return float(np.linalg.norm(a[:k] - b[:k]) / denom)


def subspace_distance(U, V) -> float:
    """Sine of the largest principal angle between the column spans of U and V (0 = same span).

    Equals ``||P_U - P_V||_2`` for spans of equal dimension; the columns need not be orthonormal.
    """
    U = _as_2d("U", U)
    V = _as_2d("V", V)
    if U.shape[0] != V.shape[0]:
        raise ValueError(
            f"U and V must have the same number of rows, got {U.shape[0]} and {V.shape[0]}"
        )
    Qu = la.orth(U)
    Qv = la.orth(V)
    a = la.norm(Qv - Qu @ (Qu.T @ Qv), 2) if Qv.size else 0.0
    b = la.norm(Qu - Qv @ (Qv.T @ Qu), 2) if Qu.size else 0.0
    return float(min(1.0, max(a, b)))


def mmd(X, centers, weights, kernel) -> float:
    """Maximum mean discrepancy between the data X and a weighted set (centers, weights).

    ``MMD^2 = mean_ij k(x_i, x_j) - 2 sum_j w_j mean_i k(x_i, c_j) + w^T K_cc w``, w normalised
    to sum 1 (Kingravi et al., Theorem 5.1); O(n^2) kernel evaluations in row blocks.
    """
    if not isinstance(kernel, Kernel):
        raise ValueError("kernel must be a fastkpca.kernels.Kernel")
    C = np.asarray(centers)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if C.ndim != 2 or C.shape[0] != w.size or C.shape[1] != X.shape[1]:
        raise ValueError(f"centers {C.shape} and weights {w.shape} do not match X {X.shape}")
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be non-negative and not all zero")
    w = w / w.sum()
    n = X.shape[0]
    xx = 0.0
    for _, _, block in kernel.blocks(X):
        xx += float(block.sum())
    xx /= n * n
    xc = 0.0
    for _, _, block in kernel.blocks(X, C):
        xc += float((block @ w).sum())
    xc /= n
    cc = float(w @ np.asarray(kernel(C), dtype=np.float64) @ w)
    return float(np.sqrt(max(xx - 2 * xc + cc, 0.0)))


# --- error estimates without exact KPCA -----------------------------------------------------------
#: scikit-learn's kernel names (``sklearn.decomposition.KernelPCA(kernel=...)``, with its
#: ``gamma_``, ``degree`` and ``coef0``) -> the fastkpca kernel that computes the same function.
SKLEARN_KERNELS = {
    "rbf": "rbf",
    "laplacian": "laplacian",
    "poly": "polynomial",
    "polynomial": "polynomial",
    "linear": "linear",
    "cosine": "cosine",
    "sigmoid": "sigmoid",
}


@dataclass(frozen=True)
class _FittedKPCA:
    """What the error estimates need of a fitted kernel PCA model (or Pipeline).

    ``before_kernel``: the steps whose ``transform`` gives the kernel's rows; ``final``: the
    last step (eigenvalues and training size come from it); ``kernel_step``: the step holding
    the kernel (None when only ``kernel=`` names it).
    """

    model: Any
    before_kernel: tuple
    final: Any
    kernel_step: Any
    kernel: Kernel
    eigenvalues: np.ndarray | None
    n_train: int | None

    def kernel_rows(self, X):
        """X through the steps before the kernel's: the rows the kernel sees."""
        for step in self.before_kernel:
            X = step.transform(X)
        return X


def _fitted_kpca(model, kernel=None) -> _FittedKPCA:
    """Describe a fitted kernel PCA transformer for :func:`estimate_error`.

    The kernel is ``kernel``, else that of the last step naming one (``kernel_``, or
    scikit-learn's name and parameters, :data:`SKLEARN_KERNELS`), on the rows that step
    receives.  ValueError if not fitted or the kernel cannot be known.
    """
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    name = type(model).__name__
    if not callable(getattr(model, "transform", None)):
        raise ValueError(f"model must be a fitted transformer with a transform method, got {name}")
    if callable(getattr(model, "fit", None)):
        try:
            check_is_fitted(model)
        except NotFittedError:
            raise ValueError(f"model {name} is not fitted; fit it first") from None
    if kernel is not None and not isinstance(kernel, Kernel):
        raise ValueError(
            "kernel must be a fastkpca.kernels.Kernel (e.g. fastkpca.kernels.RBF(gamma=0.5)), "
            f"got {type(kernel).__name__}"
        )
    steps = _leaf_steps(model)
    at = max((i for i, step in enumerate(steps) if _names_kernel(step)), default=None)
    if kernel is None:
        if at is None:
            raise ValueError(
                f"cannot tell the kernel of {name}: pass kernel=, a fastkpca.kernels.Kernel "
                "(e.g. fastkpca.kernels.RBF(gamma=0.5))"
            )
        kernel = _model_kernel(steps[at])
    final = steps[-1]
    eigenvalues, n_train = _model_spectrum(final)
    return _FittedKPCA(
        model=model,
        before_kernel=tuple(steps[: at or 0]),
        final=final,
        kernel_step=None if at is None else steps[at],
        kernel=kernel,
        eigenvalues=eigenvalues,
        n_train=n_train,
    )


def _leaf_steps(model) -> list:
    """A Pipeline's steps in order, nested Pipelines flattened (the model itself if not one)."""
    from sklearn.pipeline import Pipeline

    if not isinstance(model, Pipeline):
        return [model]
    out = []
    for _, step in model.steps:
        if step is not None and not (isinstance(step, str) and step == "passthrough"):
            out += _leaf_steps(step)
    return out


def _names_kernel(step) -> bool:
    return isinstance(getattr(step, "kernel_", None), Kernel) or (
        getattr(step, "kernel", None) is not None
    )


def _model_kernel(model) -> Kernel:
    """The kernel of a fitted step: fastkpca's ``kernel_`` or scikit-learn's parameters."""
    name = type(model).__name__
    fitted = getattr(model, "kernel_", None)
    if isinstance(fitted, Kernel):
        return fitted
    spec = getattr(model, "kernel", None)
    if isinstance(spec, Kernel):
        return spec
    if isinstance(spec, str) and spec == "precomputed":
        raise ValueError(
            f"{name} was fitted on a precomputed Gram matrix: its transform takes kernel values, "
            "not rows, and its kernel is unknown; fit it on rows with a named kernel"
        )
    if isinstance(spec, str) and spec in SKLEARN_KERNELS:
        gamma = getattr(model, "gamma_", None)
        if gamma is None:
            gamma = getattr(model, "gamma", None)
        n_in = getattr(model, "n_features_in_", None)
        if gamma is None and n_in:
            gamma = 1.0 / n_in  # scikit-learn's default gamma
        # scikit-learn's defaults where a step leaves them None (Nystroem's degree, coef0)
        degree = getattr(model, "degree", None)
        coef0 = getattr(model, "coef0", None)
        return make_kernel(
            SKLEARN_KERNELS[spec],
            gamma=gamma,
            degree=3 if degree is None else degree,
            coef0=1.0 if coef0 is None else coef0,
        )
    raise ValueError(
        f"cannot tell the kernel of {name} (kernel={spec!r}): pass kernel=, a "
        "fastkpca.kernels.Kernel that computes it (e.g. fastkpca.kernels.RBF(gamma=0.5))"
    )


def _model_spectrum(model) -> tuple[np.ndarray | None, int | None]:
    """A fitted model's centered-Gram eigenvalues and training size (None where unknown)."""
    eigenvalues = getattr(model, "eigenvalues_", None)
    if eigenvalues is None:
        eigenvalues = getattr(model, "lambdas_", None)  # scikit-learn before 1.0
    if eigenvalues is not None:
        eigenvalues = np.asarray(eigenvalues, dtype=np.float64).ravel()
    n_train = None
    for name in ("n_samples_seen_", "n_samples_fit_"):
        value = getattr(model, name, None)
        if isinstance(value, int | np.integer) and not isinstance(value, bool) and value > 0:
            n_train = int(value)
            break
    else:
        for name in ("eigenvectors_", "X_fit_"):  # (n_train, k), (n_train, d): exact KPCA
            shape = tuple(getattr(getattr(model, name, None), "shape", ()))
            if len(shape) == 2 and shape[0] > 0:
                n_train = int(shape[0])
                break
    return eigenvalues, n_train


def eigenvalues_per_row(model) -> np.ndarray:
    """A fitted model's eigenvalues per training row, ``eigenvalues_ / n_train``.

    The eigenvalues of the centered kernel covariance, which do not grow with n (compared by
    :func:`estimate_error`).  ``model`` may be a Pipeline.  ValueError if it has no
    eigenvalues or training size.
    """
    final = _leaf_steps(model)[-1]
    eigenvalues, n_train = _model_spectrum(final)
    if eigenvalues is None or n_train is None:
        what = "eigenvalues_" if eigenvalues is None else "number of training rows"
        raise ValueError(f"{type(final).__name__} has no {what}")
    return eigenvalues / n_train


def _check_fitted_model(model) -> None:
    """ValueError unless ``model`` is a fitted fastkpca estimator with a fastkpca kernel."""
    for name in ("transform", "kernel_", "eigenvalues_", "n_features_in_"):
        if not hasattr(model, name):
            raise ValueError(
                f"model must be a fitted fastkpca estimator (it has no {name!r}); fit it first"
            )
    if not isinstance(model.kernel_, Kernel):
        raise ValueError("model.kernel_ is not a fastkpca.kernels.Kernel")


def _check_rows(fitted: _FittedKPCA, X, n_probe):
    """Validated host rows X (float, finite, the model's width) and ``n_probe``."""
    if not isinstance(n_probe, int | np.integer) or isinstance(n_probe, bool) or n_probe < 2:
        raise ValueError(f"n_probe must be an integer >= 2, got {n_probe!r}")
    # Rows on a device (a PyTorch tensor): the estimate runs on a host copy of X.
    X = to_host(X)
    n_in = getattr(fitted.model, "n_features_in_", None)
    if not fitted.before_kernel:
        X = check_array(
            X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_min_samples=2
        )
        if n_in is not None and X.shape[1] != n_in:
            raise ValueError(f"X has {X.shape[1]} features, but the model was fitted on {n_in}")
    return X


def _as_rows(X):
    """Kernel rows as float64 (dense) or float64 CSR."""
    return X.astype(np.float64) if hasattr(X, "tocsr") else np.asarray(X, dtype=np.float64)


def _eigenvalue_estimates(fitted: _FittedKPCA, per_row, se, method):
    """The eigenvalue entries of :func:`estimate_error`: ``per_row`` (stderr ``se``) against
    the model's ``eigenvalues_ / n_train``."""
    out: dict = {
        "eigenvalues_per_row": {"estimate": per_row, "stderr": se, "method": method},
        "eigenvalue_error": None,
        "model_eigenvalues_per_row": None,
    }
    if fitted.eigenvalues is None or fitted.n_train is None:
        return out
    mine = (fitted.eigenvalues / fitted.n_train)[: per_row.size]
    j = mine.size
    out["model_eigenvalues_per_row"] = mine
    estimate = eigenvalue_error(mine, per_row[:j])
    # |err(ref_hat) - err(ref)| <= (1 + err) ||ref_hat - ref|| / ||ref_hat|| (triangle
    # inequality, to first order), and E ||ref_hat - ref||^2 = sum se^2: a root-mean-square
    # bound on the estimate's error, whatever the (unknown) direction of the reference's.
    stderr = (1.0 + estimate) * float(np.sqrt(np.sum(se[:j] ** 2)) / np.linalg.norm(per_row[:j]))
    out["eigenvalue_error"] = {
        "estimate": estimate,
        "stderr": stderr,
        "interval": [max(0.0, estimate - 2 * stderr), estimate + 2 * stderr],
        "method": method,
    }
    return out


def estimate_error(model, X, *, n_probe=2000, random_state=None, kernel=None) -> dict:
    """Estimate a fitted model's relative rank-k error and eigenvalue error without exact KPCA.

    The probe that sizes by ``tol`` use (:class:`fastkpca.statistics.probe.ErrorProbe`).  X is
    the training rows or a uniform sample; every number refers to the N training rows, with
    ``T = model.transform``, ``Kc`` their centered Gram and ``lambda_i`` its eigenvalues:
    ``relative_rank_k_error`` = ``||Kc - T T^T||_F / ||Kc - (Kc)_k||_F`` (1.0 is optimal) and
    ``eigenvalue_error`` = ``||m - l||_2 / ||l||_2``, ``m = model.eigenvalues_[:k] / n_train``,
    ``l = lambda_{1..k} / N``.  Exact when X holds all N rows and ``N <= n_probe``; otherwise
    from a uniform probe cross-fitted on its halves, with a bootstrap standard error.

    Parameters
    ----------
    model : fitted transformer
        A fastkpca estimator, ``sklearn.decomposition.KernelPCA`` or ``Pipeline``; the kernel
        is that of the last step naming one (:data:`SKLEARN_KERNELS`), on the rows that step
        receives.  The eigenvalue entries need the last step's ``eigenvalues_`` and training size.
    X : array, CSR matrix or tensor of shape (n_samples, n_features)
        The training rows or a uniform sample of them (device rows are copied to the host).
    n_probe : int
        Probe rows p (at least ``2 k + 2``): ``O(p^2 (d + k))`` time, ``O(p^2)`` memory.
    random_state : int, Generator or None
        Draws the probe (and the bootstrap).
    kernel : fastkpca.kernels.Kernel or None
        The kernel, when the model cannot tell it (precomputed, callable or unknown).

    Returns
    -------
    dict
        Plain Python values (``json.dumps`` writes it).  Error entries are ``{"estimate",
        "stderr", "interval", "method": "exact" | "probe"}``: ``"relative_rank_k_error"``
        (interval +- 1.96 stderr; ``"bound"``: ``estimate + 2 stderr``, what ``tol`` meets),
        ``"excess_error"`` (it minus 1), ``"eigenvalue_error"`` (or None; stderr
        ``(1 + estimate) ||stderr(l)|| / ||l||``, interval +- 2 stderr clipped at 0).  Also
        ``"eigenvalues_per_row"`` (l with stderr), ``"model_eigenvalues_per_row"`` (m or None),
        ``"n_samples"``, ``"n_probe"``, ``"n_train"`` and ``"certificates"``
        (:func:`method_certificates`).
    """
    with _model_threads(model):
        fitted = _fitted_kpca(model, kernel)
        X = _check_rows(fitted, X, n_probe)
        n = X.shape[0]
        N = fitted.n_train if fitted.n_train is not None and n <= fitted.n_train else n
        rng = as_generator(random_state)
        p = min(int(n_probe), n)
        rows = np.sort(rng.choice(n, size=p, replace=False)) if p < n else np.arange(n)
        XP = take_rows(X, rows)
        probe = ErrorProbe(_as_rows(fitted.kernel_rows(XP)), fitted.kernel, rng, n_rows=N)
        T = np.asarray(to_host(fitted.model.transform(XP)), dtype=np.float64)
        if T.ndim != 2 or T.shape[0] != p:
            raise ValueError(f"model.transform(X) has shape {T.shape}, expected ({p}, k)")
        k = T.shape[1]
        if k >= n:
            raise ValueError(
                f"the model has {k} components for {n} rows: a rank-k error needs k < n_samples"
            )
        if not probe.exact and p < 2 * k + 2:
            raise ValueError(
                f"n_probe={n_probe} is too small for {k} components: it needs {2 * k + 2} or "
                "more rows"
            )
        estimate = probe.error_of(T[probe.order])
        method = "exact" if probe.exact else "probe"
        lo, hi = estimate.interval()
        rel = {
            "estimate": estimate.estimate,
            "stderr": estimate.stderr,
            "interval": [lo, hi],
            "bound": estimate.upper(),
            "method": method,
        }
        excess = {
            "estimate": estimate.estimate - 1.0,
            "stderr": estimate.stderr,
            "interval": [lo - 1.0, hi - 1.0],
            "bound": estimate.upper() - 1.0,
            "method": method,
        }
        per_row, se = probe.eigenvalues(k)
        result = {
            "relative_rank_k_error": rel,
            "excess_error": excess,
            **_eigenvalue_estimates(fitted, per_row, se, method),
            "n_samples": n,
            "n_probe": p,
            "n_train": fitted.n_train,
        }
        result["certificates"] = (
            method_certificates(
                fitted.final, X, n_probe=n_probe, random_state=rng, kernel=fitted.kernel
            )
            if fitted.kernel_step is fitted.final
            else {}  # the certificates read the kernel step's fitted attributes
        )
    return plain(result)


def _model_threads(model):
    """A fastkpca model's ``execution_context`` (``n_jobs``, ``verbose``); else a no-op."""
    return execution_context(model) if isinstance(model, BaseKPCA) else contextlib.nullcontext()


def method_certificates(model, X, *, n_probe=2000, random_state=None, kernel=None) -> dict:
    """The error certificates a fitted model gives for free, on the rows X.

    ``NystromKPCA`` (``landmarks_``, ``normalization_``; not on the exact-KPCA path)
        ``"nystrom_residual_trace"``: ``tr(K - K~)``, ``K~ = C W^+ C^T``, which bounds
        ``||K - K~||_2`` and ``||K - K~||_F`` (``K - K~`` is PSD); ``"relative"``: over ``tr(K)``.
    ``StreamingKPCA``
        ``"fd_eigenvalue_bounds"``: ``eigenvalue_bounds_`` and ``"max_relative_width"``, against
        exact PCA of the features, not exact KPCA.
    random-feature models (``feature_map_``)
        ``"feature_gram_error"``: ``||K_PP - Z_P Z_P^T||_F / ||K_PP||_F`` on at most
        ``min(n_probe, 1000)`` rows.

    Other models give ``{}``.  ``kernel`` None: the model's ``kernel_``.  Plain Python values.
    """
    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32])
    rng = as_generator(random_state)
    out: dict = {}
    if kernel is None:
        kernel = getattr(model, "kernel_", None)
    if not isinstance(kernel, Kernel):
        raise ValueError("model must be a fitted fastkpca estimator with a kernel_")
    # A NystromKPCA that took the exact-KPCA path (``solver_ == "exact_kpca"``) keeps only the
    # top-k rows of its whitening, so ``||N k||^2`` is not the Nystrom approximation's diagonal.
    exact_path = getattr(model, "solver_", None) == "exact_kpca"
    # NystromKPCA recomputes its whitening on each access of normalization_: read it once
    nystrom = hasattr(model, "landmarks_") and not exact_path
    N = getattr(model, "normalization_", None) if nystrom else None
    if N is not None:
        diag = 0.0
        explained = 0.0
        for start, stop, K in kernel.blocks(X, model.landmarks_):
            Z = K @ N.T
            explained += float(np.einsum("ij,ij->", Z, Z))
            diag += float(np.sum(kernel.diag(X[start:stop]), dtype=np.float64))
        residual = max(diag - explained, 0.0)
        out["nystrom_residual_trace"] = {
            "value": residual,
            "relative": residual / diag if diag > 0 else 0.0,
        }
    bounds = getattr(model, "eigenvalue_bounds_", None)
    if bounds is not None:
        est = np.asarray(model.eigenvalues_, dtype=np.float64)
        width = (bounds[1] - bounds[0]) / np.where(est > 0, est, np.inf)
        out["fd_eigenvalue_bounds"] = {
            "lower": np.asarray(bounds[0]),
            "upper": np.asarray(bounds[1]),
            "max_relative_width": float(np.max(width, initial=0.0)),
        }
    fmap = getattr(model, "feature_map_", None)
    if fmap is not None:
        p = min(int(n_probe), 1000, X.shape[0])
        idx = np.sort(rng.choice(X.shape[0], size=p, replace=False))
        XP = take_rows(X, idx)
        KP = np.asarray(kernel(XP.toarray() if hasattr(XP, "toarray") else XP), np.float64)
        Z = np.asarray(
            fmap(XP if fmap.accepts_sparse or not hasattr(XP, "toarray") else XP.toarray()),
            dtype=np.float64,
        )
        norm = float(np.linalg.norm(KP))
        out["feature_gram_error"] = {
            "value": float(np.linalg.norm(KP - Z @ Z.T)) / norm if norm > 0 else 0.0,
            "n_probe": p,
        }
    return plain(out)


# --- reconstruction error (Sriperumbudur & Sterge) -------------------------------------------

RECONSTRUCTION_ESTIMATORS = ("unbiased", "plugin")


def reconstruction_error(
    model, X, n_components=None, *, estimator="unbiased", batch_size=1000, random_state=0
) -> dict:
    """Estimate the reconstruction error R of a fitted model's eigenspace on held-out data.

    Sriperumbudur & Sterge, "Approximate kernel PCA: computational vs statistical trade-off"
    (slides "Embedding to L2(P)", "Reconstruction Error"): with ``J f = f - E_P f`` and
    ``a_i = (J phi_i) / sqrt(lambda_i)``::

        R = E_X || J k~(., X) - sum_{i <= l} <J k~(., X), a_i>_{L2(P)} a_i ||^2_{L2(P)}

    (their ``R_{n,l}`` for exact KPCA, ``R_{m,n,l}`` for random features), computed from the
    projections, ``a_i(x) = model.transform(x)_i / sqrt(lambda_i)`` with ``lambda_i =
    eigenvalues_[i] / n_train``.  For the population eigenspace ``R = sum_{i > l} lambda_i^2``.

    Parameters
    ----------
    model : fitted fastkpca estimator
        Anything with ``transform``, ``kernel_`` (a :class:`fastkpca.kernels.Kernel`),
        ``eigenvalues_`` and ``n_features_in_``.
    X : array of shape (n_samples, n_features)
        Held-out rows drawn from P (the training rows with ``"plugin"`` give exact KPCA's
        ``sum_{i > l} eigenvalues_i^2 / n^2``).
    n_components : int or None
        ``l``, the number of leading components (default: all of the model's).
    estimator : {"unbiased", "plugin"}
        ``"unbiased"``: U-statistics over distinct rows of each batch (Notes).  ``"plugin"``:
        the batch's empirical measure, ``||(I - A A^T / N) Kc||_F^2 / N^2``; biased up by about
        ``E kbar(X, X)^2 / N``.
    batch_size : int or None
        Rows per batch (``max(2, n_samples // batch_size)`` random batches); None: one batch.
    random_state : int, Generator or None
        The permutation that forms the batches.

    Returns
    -------
    dict
        ``"estimate"`` (mean over batches), ``"stderr"`` (nan for one batch), ``"method"``,
        ``"n_components"``, ``"n_batches"``, ``"batch_size"`` (the largest batch).

    Raises
    ------
    ValueError
        Not a fitted estimator with a kernel, bad X, batches under 4 (``"unbiased"``) or 2
        rows, ``n_components`` out of range, or a kept eigenvalue not positive.

    Notes
    -----
    With ``B = sum_i a_i (x) a_i`` on L2(P) and ``L`` the integral operator of ``kbar``,
    ``R = tr(L^2) - 2 tr(B L^2) + tr(B^2 L^2)``, i.e. with ``c(x) = E_Y kbar(x, Y) a(Y)``::

        R = E kbar(X, Y)^2 - 2 E ||c(X)||^2 + E_{X, W} (a(W)^T c(X))^2,

    The "unbiased" estimator averages each term over distinct index tuples of a batch, in
    closed form with O(N^2 l) products; the means inside ``kbar`` and ``a`` are the batch's,
    leaving a bias ``O(||Sigma||_HS^2 / N)`` (plug-in: ``E kbar(X, X)^2 / N``).  Cost
    ``n_samples * batch_size * (d + l)`` flops, ``O(batch_size^2 + n_samples l)`` memory.
    """
    _check_fitted_model(model)
    if estimator not in RECONSTRUCTION_ESTIMATORS:
        raise ValueError(f"estimator must be one of {RECONSTRUCTION_ESTIMATORS}, got {estimator!r}")
    X = check_array(X, dtype=[np.float64, np.float32], ensure_min_samples=2)
    if X.shape[1] != model.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but the model was fitted on {model.n_features_in_}"
        )
    vals = np.asarray(model.eigenvalues_, dtype=np.float64)
    if n_components is None:
        n_components = vals.size
    if (
        not isinstance(n_components, int | np.integer)
        or isinstance(n_components, bool)
        or not 1 <= n_components <= vals.size
    ):
        raise ValueError(
            f"n_components must be an integer in [1, {vals.size}], got {n_components!r}"
        )
    ell = int(n_components)
    if not np.all(vals[:ell] > 0):
        raise ValueError(
            f"the model's leading {ell} eigenvalues must be positive to normalize its "
            f"eigenfunctions, got {vals[:ell]}"
        )
    n = X.shape[0]
    n_batches = 1 if batch_size is None else max(2, n // _positive_int("batch_size", batch_size))
    min_rows = 4 if estimator == "unbiased" else 2
    if n // n_batches < min_rows:
        raise ValueError(
            f"{n} held-out rows in {n_batches} batches leave fewer than {min_rows} rows per batch "
            f"(estimator={estimator!r}); pass more rows or batch_size=None"
        )
    # lambda_i of the covariance operator: the centered Gram's eigenvalues over n_train.
    lam = vals[:ell] / model._n_train
    A = np.asarray(model.transform(X), dtype=np.float64)[:, :ell] / np.sqrt(lam)
    order = as_generator(random_state).permutation(n)
    batch_fn = _reconstruction_unbiased if estimator == "unbiased" else _reconstruction_plugin
    estimates = np.empty(n_batches)
    for b, idx in enumerate(np.array_split(order, n_batches)):
        idx = np.sort(idx)
        K = np.asarray(model.kernel_(X[idx]), dtype=np.float64)
        estimates[b] = batch_fn(K, A[idx])
    stderr = float(np.std(estimates, ddof=1) / np.sqrt(n_batches)) if n_batches > 1 else np.nan
    return {
        "estimate": float(estimates.mean()),
        "stderr": stderr,
        "method": estimator,
        "n_components": ell,
        "n_batches": n_batches,
        "batch_size": int(-(-n // n_batches)),
    }


def _positive_int(name, value) -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


def _reconstruction_plugin(K, A) -> float:
    """R with P the batch's empirical measure: ``||(I - Ac Ac^T / N) Kc||_F^2 / N^2``."""
    N = K.shape[0]
    r = K.mean(axis=1)
    Kc = K - r[:, None] - r[None, :] + r.mean()
    Ac = A - A.mean(axis=0)
    resid = Kc - Ac @ (Ac.T @ Kc) / N
    return float(np.sum(resid * resid) / N**2)


def _reconstruction_unbiased(K, A) -> float:
    """``T1 - 2 T2 + T3`` (reconstruction_error's Notes) over distinct rows of one batch.

    ``Kb`` has a zero diagonal, so sums over ``b`` skip ``b = a``; other coincidences are
    subtracted.
    """

    N = K.shape[0]
    K = K.copy()
    np.fill_diagonal(K, 0.0)
    r = K.sum(axis=1) / (N - 1)
    Kb = K - r[:, None] - r[None, :] + r.mean()
    np.fill_diagonal(Kb, 0.0)
    Ab = A - A.mean(axis=0)
    Kb2 = Kb * Kb
    S = Ab @ Ab.T  # S_ab = a_a . a_b
    s = np.diag(S).copy()  # ||a_b||^2
    V = Kb @ Ab  # v_a = sum_b kbar_ab a_b
    Gam = Ab.T @ Ab
    t1 = Kb2.sum() / (N * (N - 1))
    # E ||c(X)||^2: sum over b != b' of kbar_ab kbar_ab' a_b . a_b'
    q2 = np.einsum("ij,ij->i", V, V) - Kb2 @ s
    t2 = q2.sum() / (N * (N - 1) * (N - 2))
    # E (a(W) . c(X))^2 over distinct (X, W, Y, Y') = (a, w, b, b')
    P = V @ Ab.T  # P_ab = v_a . a_b
    agb = np.einsum("ij,jk,ik->i", Ab, Gam, Ab)  # a_b^T Gam a_b
    va = np.einsum("ij,ij->i", V, Ab)  # v_a . a_a
    q3 = (
        np.einsum("ij,jk,ik->i", V, Gam, V)
        - Kb2 @ agb
        - (va**2 - np.sum(Kb2 * S * S, axis=1))
        - 2.0 * ((Kb * P) @ s - Kb2 @ (s * s))
    )
    t3 = q3.sum() / (N * (N - 1) * (N - 2) * (N - 3))
    return float(t1 - 2.0 * t2 + t3)
