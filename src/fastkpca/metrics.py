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
