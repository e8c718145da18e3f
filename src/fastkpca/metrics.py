"""Error measures for approximate kernel PCA.

Gram errors compare the (centered) Gram matrix ``HGH`` of X with the Gram ``T T^T`` of an
embedding ``T = model.transform(X)``; they are computed in row blocks and never hold more than
one n x n matrix:

- :func:`gram_spectral_error`: ``||HGH - T T^T||_2 / n`` (the streaming paper's kernel spectral
  error, Ghashami et al. 2016 section 5; ``center=False`` gives their uncentered G),
- :func:`gram_frobenius_error`: ``||HGH - T T^T||_F / n^2``,
- :func:`relative_rank_k_error`: ``||HGH - T T^T||_F / ||HGH - (HGH)_k||_F`` with k the
  embedding's width (1.0 is optimal: the exact rank-k KPCA embedding),

and embedding-space measures: :func:`embedding_error`, :func:`eigenvalue_error`,
:func:`subspace_distance`, plus :func:`mmd` for reduced-set density estimates.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
from scipy.sparse.linalg import LinearOperator, eigsh

from ._utils import as_generator
from .kernels import Kernel, chunk_rows
from .solvers import eigh_topk

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
]

#: Up to this n the Gram errors are computed from one explicit n x n matrix (n = 20000 in
#: float64 is 3.2 GB); above it they are estimated with passes over Gram row blocks.
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
        from ._centering import center_gram_inplace

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

    For ``n <= max_exact_n`` the difference matrix is formed once (one n x n array) and its
    largest-magnitude eigenvalue found by ARPACK to machine precision.  Above that it is
    *estimated* by block power iteration (4 random start vectors, one pass over the Gram row
    blocks per iteration) stopped when the estimate changes by less than ``rtol`` relative or
    after ``max_passes`` passes.  The estimate is a Rayleigh quotient, so it never exceeds the
    true norm; with a random start it is within a relative ``rtol`` of it in practice unless
    the top two singular values of the difference are closer than that.
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

    The denominator is ``sqrt(||HGH||_F^2 - sum_{i<=k} lambda_i^2)``.  For ``n <= max_exact_n``
    the top-k eigenvalues come from the explicit centered Gram (ARPACK to machine precision);
    above, from the randomized block solver on the implicit operator (relative residual 1e-6).
    If HGH has rank <= k the denominator is 0: the result is 1.0 when the numerator is 0 too
    (up to round-off) and inf otherwise.
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
    """Relative l2 error ``||lambda_hat - lambda||_2 / ||lambda||_2``.

    Over the leading entries the two arrays have in common.
    """
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

    ``MMD^2 = mean_ij k(x_i, x_j) - 2 sum_j w_j mean_i k(x_i, c_j) + w^T K_cc w`` with w
    normalised to sum to 1: the distance in the RKHS between the kernel mean embeddings of the
    empirical distribution and the reduced-set density estimate (Kingravi et al., Theorem 5.1).
    The first term needs O(n^2) kernel evaluations, done in row blocks.
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


# ------------------------------------------------------------------------------------------------
# error estimates without exact KPCA
# ------------------------------------------------------------------------------------------------
#: Fraction of the probe rows used as Nystrom landmarks for the reference eigenspace; the rest
#: estimate the Nystrom residual (see :func:`estimate_error`).
PROBE_LANDMARK_FRACTION = 0.75

#: Bootstrap replicates behind the stated uncertainties (each costs two small eigenproblems).
N_BOOTSTRAP = 200

#: Nystrom eigenvectors added to the model's k axes for Rayleigh-Ritz, per component.
REFERENCE_VECTORS = 2

#: Eigenvalues of ``k(L, L)`` below this fraction of the largest are dropped (pseudo-inverse).
_W_FLOOR = 1e-10


def _check_model_and_data(model, X, n_probe):
    """Validated ``(X, T)``: the data and ``model.transform(X)`` in float64; ValueError if not."""
    from sklearn.utils.validation import check_array

    for name in ("transform", "kernel_", "eigenvalues_", "n_features_in_"):
        if not hasattr(model, name):
            raise ValueError(
                f"model must be a fitted fastkpca estimator (it has no {name!r}); fit it first"
            )
    if not isinstance(model.kernel_, Kernel):
        raise ValueError("model.kernel_ is not a fastkpca.kernels.Kernel")
    if not isinstance(n_probe, int | np.integer) or isinstance(n_probe, bool) or n_probe < 2:
        raise ValueError(f"n_probe must be an integer >= 2, got {n_probe!r}")
    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_min_samples=2)
    if X.shape[1] != model.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but the model was fitted on {model.n_features_in_}"
        )
    T = np.asarray(model.transform(X), dtype=np.float64)
    if T.ndim != 2 or T.shape[0] != X.shape[0]:
        raise ValueError(f"model.transform(X) has shape {T.shape}, expected ({X.shape[0]}, k)")
    if T.shape[1] >= X.shape[0]:
        raise ValueError(
            f"the model has {T.shape[1]} components for {X.shape[0]} rows: a rank-k error "
            "needs k < n_samples"
        )
    return X, T


def _summary(estimate, replicates, method):
    """``{"estimate", "stderr", "interval", "method"}`` from bootstrap replicates."""
    reps = np.asarray(replicates, dtype=np.float64)
    finite = reps[np.isfinite(reps)]
    if finite.size < 2:
        return {
            "estimate": float(estimate),
            "stderr": float("nan"),
            "interval": (float("nan"), float("nan")),
            "method": method,
        }
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return {
        "estimate": float(estimate),
        "stderr": float(np.std(finite, ddof=1)),
        "interval": (float(min(lo, estimate)), float(max(hi, estimate))),
        "method": method,
    }


def _excess(num_minus_den, den):
    """``sqrt(1 + x) - 1`` for ``x = num_minus_den / den``, without cancellation."""
    if den <= 0:
        return float("inf") if num_minus_den > 0 else 0.0
    x = max(num_minus_den / den, 0.0)
    return x / (np.sqrt(1.0 + x) + 1.0)


def _exact_errors(model, X, T):
    """The exact relative rank-k error and eigenvalue error (one explicit n x n Gram)."""
    n, k = T.shape
    G = _centered_gram(X, model.kernel_, True)
    num2 = 0.0
    step = chunk_rows(n)
    for start in range(0, n, step):
        D = G[start : start + step] - T[start : start + step] @ T.T
        num2 += float(np.einsum("ij,ij->", D, D))
    fro2 = float(np.einsum("ij,ij->", G, G))
    vals, _ = eigh_topk(G, k, method="dense" if n <= 3000 else "lanczos", rng=0, overwrite=True)
    den2 = max(fro2 - float(np.sum(vals**2)), 0.0)
    excess = _excess(num2 - den2, den2)
    eig_err = eigenvalue_error(model.eigenvalues_, vals)
    exact = {"stderr": 0.0, "method": "exact"}
    return {
        "relative_rank_k_error": {
            "estimate": 1.0 + excess,
            "interval": (1.0 + excess,) * 2,
            **exact,
        },
        "excess_error": {"estimate": excess, "interval": (excess, excess), **exact},
        "eigenvalue_error": {"estimate": eig_err, "interval": (eig_err, eig_err), **exact},
        "eigenvalues": {"estimate": vals, "stderr": np.zeros(k), "method": "exact"},
        "n_samples": n,
        "n_probe": n,
    }


def _probe_pass(X, kernel, XP, Tc):
    """One pass over Gram column blocks ``K[:, P]``: ``K[P,:] K[:,P]``, row means, ``K[P,:] Tc``.

    Costs ``n p (d + p / 2 + k)`` flops and O(p^2 + p k) memory (the p x n block is never held).
    """
    n, k = Tc.shape
    p = XP.shape[0]
    gram2 = np.zeros((p, p))
    row_sums = np.zeros(p)
    KT = np.zeros((p, k))
    for start, stop, Kb in kernel.blocks(X, XP):
        Kb = np.asarray(Kb, dtype=np.float64)
        gram2 += Kb.T @ Kb
        row_sums += Kb.sum(axis=0)
        KT += Kb.T @ Tc[start:stop]
    return (gram2 + gram2.T) / 2, row_sums / n, KT


def _ritz(H, YtY, k):
    """Top-k Ritz values of the pencil ``(H, YtY)`` and the k x k block trace ``tr(H[:k, :k])``."""
    s, Q = la.eigh(YtY)
    keep = s > 1e-12 * s[-1]
    R = Q[:, keep] / np.sqrt(s[keep])
    theta = la.eigvalsh(R.T @ H @ R)[::-1]
    theta = np.maximum(theta[:k], 0.0)
    if theta.size < k:
        theta = np.concatenate([theta, np.zeros(k - theta.size)])
    return theta


def estimate_error(model, X, *, n_probe=2000, random_state=None) -> dict:
    """Estimate a fitted model's relative rank-k error and eigenvalue error without exact KPCA.

    With ``T = model.transform(X)``, ``Kc = H K H`` the centered Gram of X and ``lambda_i`` its
    eigenvalues, the targets are ``relative_rank_k_error`` (``||Kc - T T^T||_F /
    ||Kc - (Kc)_k||_F``, 1.0 is exact KPCA's optimum) and ``eigenvalue_error`` (the relative l2
    error of ``model.eigenvalues_`` against ``lambda_1..lambda_k``).  For ``n <= n_probe`` both
    are computed exactly; above, from a uniform probe of ``n_probe`` rows in one pass over Gram
    column blocks (never n x n).

    Parameters
    ----------
    model : fitted fastkpca estimator
        Anything with ``transform``, ``kernel_``, ``eigenvalues_`` and ``n_features_in_``.
    X : array or CSR matrix of shape (n_samples, n_features)
        The data the errors refer to (normally the training data).
    n_probe : int
        Probe rows p; cost ``O(n p (d + p + k))`` time, ``O(n k + p^2)`` memory.  At least
        ``max(40, (2 k + 1) / 0.75)``.
    random_state : int, Generator or None
        Draws the probe (and the bootstrap).

    Returns
    -------
    dict
        ``"relative_rank_k_error"``, ``"excess_error"`` (``relative_rank_k_error - 1``) and
        ``"eigenvalue_error"``: each a dict with ``"estimate"``, ``"stderr"`` (bootstrap standard
        error over probe rows), ``"interval"`` (95 % bootstrap percentile interval, widened to
        contain the estimate) and ``"method"`` (``"exact"`` or ``"probe"``);
        ``"eigenvalues"``: ``{"estimate": (k,) array, "stderr": (k,) array, "method"}``, the
        estimated top-k eigenvalues of ``Kc``; ``"n_samples"``, ``"n_probe"``.

    Notes
    -----
    With ``Tc`` the column-centered T (``T = Tc + 1 t^T``) and ``F = ||Kc||_F^2``,

        ``N = ||Kc - T T^T||_F^2 = F - 2 tr(Tc^T K Tc) + ||Tc^T Tc||_F^2 + c_t``,
        ``D = ||Kc - (Kc)_k||_F^2 = F - sum_{i<=k} lambda_i^2``,

    (``c_t = 2 n ||Tc t||^2 + n^2 ||t||^4``, exact), so ``N - D = sum lambda_i^2 - 2 tr(Tc^T K
    Tc) + ||Tc^T Tc||^2 + c_t`` does not involve F, and ``err - 1 = sqrt(1 + (N - D) / D) - 1``
    needs F only to the relative accuracy wanted for ``err - 1``.  The probe P (uniform, without
    replacement) is split into landmarks S (:data:`PROBE_LANDMARK_FRACTION` of it) and residual
    rows R; one pass over Gram column blocks gives ``K[P,:] K[:,P]``, the row means ``r_P`` and
    ``K[P,:] Tc``.  ``K~ = K[:, S] W^+ K[S, :]`` (W = K[S, S]) is the Nystrom approximation with
    S as landmarks (``K~ <= K``); its centered top-2k eigenvectors V are exact functions of
    those statistics.  On the basis ``Y = [Tc, V]`` (centered, so ``Y^T Kc Y = Y^T K Y``),
    ``Y^T K Y = Y^T K~ Y + Y^T E Y`` with ``E = K - K~ >= 0``: the first term is exact, the
    second vanishes on the rows of S and is estimated without bias from the rows R
    (``(n - |S|) / |R| sum_{i in R} Y_i^T (E Y)_i``).  Rayleigh-Ritz on span(Y) gives
    ``theta_1..theta_k``, the eigenvalue estimates, and the block ``tr(Tc^T K Tc)``.  F uses
    the Nystrom Gram as a control variate: ``F = sum_j h_j + n^2 rbar^2`` with ``h_j =
    ||K_j||^2 - 2 n r_j^2``; the same sum for ``K~`` is exact (its eigenvalues), and ``h -
    h~``, ``r - r~`` vanish on S, so only these small differences are estimated from R.

    Uncertainty: ``"stderr"`` and ``"interval"`` come from a bootstrap over the residual rows R
    (:data:`N_BOOTSTRAP` replicates), the landmarks held fixed.  They cover the sampling noise,
    not the one-sided bias of the reference subspace: Ritz values are lower bounds of the
    ``lambda_i``, which makes ``err - 1`` too small by about ``sum (lambda_i^2 - theta_i^2) /
    (2 D)`` (noticeable only when the model is about as good as a Nystrom model on
    ``3/4 n_probe`` landmarks; see ``benchmarks/bench_estimate_error.py``).

    Cost: ``n p (d + p / 2 + k)`` flops for the pass (kernel evaluations plus the p x p
    product), ``O(p^3)`` for the p x p eigenproblems, plus ``model.transform(X)``; memory
    ``O(n k + p^2)``.
    """
    X, T = _check_model_and_data(model, X, n_probe)
    n, k = T.shape
    if n <= n_probe:
        return _exact_errors(model, X, T)
    rng = as_generator(random_state)
    kernel = model.kernel_
    p = int(n_probe)
    p1 = int(round(PROBE_LANDMARK_FRACTION * p))
    p2 = p - p1
    # At least 2k + 1 landmarks (k reference vectors beyond the model's k) and 10 residual rows.
    need = max(40, int(np.ceil((2 * k + 1) / PROBE_LANDMARK_FRACTION)))
    if p < need:
        raise ValueError(
            f"n_probe={n_probe} is too small for {k} components: it needs {need} or more rows"
        )
    probe = rng.choice(n, size=p, replace=False)
    XP = X[probe]
    XP = XP.astype(np.float64) if hasattr(XP, "tocsr") else np.asarray(XP, dtype=np.float64)

    tbar = T.mean(axis=0)
    Tc = T - tbar
    TtT = Tc.T @ Tc
    extra = 2 * n * float(tbar @ TtT @ tbar) + n**2 * float(tbar @ tbar) ** 2

    gram2, r, KT = _probe_pass(X, kernel, XP, Tc)
    KPP = np.asarray(kernel(XP), dtype=np.float64)
    from ._landmarks import one_blas_thread

    # p x p factorizations and many tiny eigenproblems: latency-bound, and on a busy machine
    # idle BLAS threads' spin-waits made them 10x slower (see fastkpca._landmarks).
    with one_blas_thread():
        return _probe_estimates(model, n, k, p1, p2, probe, Tc, TtT, extra, gram2, r, KT, KPP, rng)


def _probe_estimates(model, n, k, p1, p2, probe, Tc, TtT, extra, gram2, r, KT, KPP, rng):
    """The estimates of :func:`estimate_error` from the probe pass's statistics."""
    p = p1 + p2
    S, R = slice(0, p1), slice(p1, p)

    # Nystrom on the landmarks S: W^{-1/2} = Bw Bw^T-style factor over W's kept eigenpairs.
    w, Vw = la.eigh(KPP[S, S])
    keep = w > _W_FLOOR * max(w[-1], 0.0)
    Bw = Vw[:, keep] / np.sqrt(w[keep])
    C1HC1 = gram2[S, S] - n * np.outer(r[S], r[S])  # K[S,:] H K[:,S]
    M_ny = Bw.T @ C1HC1 @ Bw  # the centered Nystrom Gram in its r x r feature form
    lam_ny, U = la.eigh(M_ny)
    q = min(REFERENCE_VECTORS * k, int(np.sum(lam_ny > 1e-12 * max(lam_ny[-1], 1e-300))))
    lam_ny, U = lam_ny[::-1][:q], U[:, ::-1][:, :q]
    A = Bw @ U / np.sqrt(lam_ny)  # V = H K[:, S] A, orthonormal columns

    # Y = [Tc, V]; the pieces of Y^T Y, Y^T K~ Y and (E Y) on the residual rows.
    VtT = A.T @ KT[S]
    YtY = np.block([[TtT, VtT.T], [VtT, np.eye(q)]])
    C1tY = np.hstack([KT[S], C1HC1 @ A])
    Z = Bw.T @ C1tY
    H_ny = Z.T @ Z
    Y_R = np.hstack([Tc[probe[R]], (KPP[R, S] - r[S]) @ A])
    KY_R = np.hstack([KT[R], (gram2[R, S] - n * np.outer(r[R], r[S])) @ A])
    EY_R = KY_R - (KPP[R, S] @ Bw) @ Z
    scale_R = (n - p1) / p2

    # F = ||Kc||_F^2 = sum_j h_j + n^2 rbar^2 with h_j = ||K_j||^2 - 2 n r_j^2; the same sum for
    # K~ is known exactly (its eigenvalues), and h - h~, r - r~ vanish on the landmarks, so only
    # the (small) differences are estimated from the residual rows: a control variate.
    F_ny = float(np.sum(M_ny**2))
    b = Bw.T @ r[S]
    rbar_ny = float(b @ b)  # mean of K~ = r_S^T W^+ r_S
    a_R = KPP[R, S] @ Bw
    G_ny = Bw.T @ gram2[S, S] @ Bw
    h_R = np.diag(gram2)[R] - 2 * n * r[R] ** 2
    r_ny_R = a_R @ b
    h_ny_R = np.sum((a_R @ G_ny) * a_R, axis=1) - 2 * n * r_ny_R**2
    dh_R = h_R - h_ny_R
    dr_R = r[R] - r_ny_R

    def estimate(idx_res):
        E_hat = scale_R * (Y_R[idx_res].T @ EY_R[idx_res])
        H = H_ny + (E_hat + E_hat.T) / 2
        theta = _ritz(H, YtY, k)
        trace = float(np.trace(H[:k, :k]))
        delta = float(np.sum(theta**2)) - 2 * trace + float(np.sum(TtT**2)) + extra
        rbar = rbar_ny + (n - p1) / n * float(dr_R[idx_res].mean())
        F = F_ny + (n - p1) * float(dh_R[idx_res].mean()) + n**2 * (rbar**2 - rbar_ny**2)
        den = F - float(np.sum(theta**2))
        return _excess(delta, den), theta, den

    excess, theta, den = estimate(np.arange(p2))
    boot_rng = np.random.default_rng(rng.integers(2**63))
    reps_ex, reps_eig, reps_theta = [], [], []
    for _ in range(N_BOOTSTRAP):
        idx_r = boot_rng.integers(0, p2, p2)
        ex_b, th_b, _ = estimate(idx_r)
        reps_ex.append(ex_b)
        reps_theta.append(th_b)
        reps_eig.append(eigenvalue_error(model.eigenvalues_, th_b) if th_b[0] > 0 else np.nan)
    eig_err = eigenvalue_error(model.eigenvalues_, theta)
    excess_summary = _summary(excess, reps_ex, "probe")
    rel = dict(excess_summary)
    rel["estimate"] = 1.0 + excess
    rel["interval"] = tuple(1.0 + v for v in excess_summary["interval"])
    return {
        "relative_rank_k_error": rel,
        "excess_error": excess_summary,
        "eigenvalue_error": _summary(eig_err, reps_eig, "probe"),
        "eigenvalues": {
            "estimate": theta,
            "stderr": np.std(np.asarray(reps_theta), axis=0, ddof=1),
            "method": "probe",
        },
        "n_samples": n,
        "n_probe": p,
    }
