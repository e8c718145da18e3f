"""Landmark selection for the Nystrom method: uniform, reservoir, k-means and ridge leverage.

Every selector returns landmark rows (or indices) and weights summing to 1: ``uniform`` (the c
smallest of n uniform keys, as :class:`ReservoirSampler` draws them from a stream; weights
``1 / c``); ``kmeans`` (centres weighted by cluster sizes, Zhang & Kwok 2009); ``rls``
(recursive ridge-leverage-score sampling, Musco & Musco 2017; weights ``1 / p_i``, normalized);
``rpcholesky`` (randomly pivoted Cholesky, Chen, Epperly, Tropp & Webber 2024, block rejection
form of Epperly, Tropp & Webber 2024; the residual diagonal certifies ``tr(K - C W^+ C^T)``;
weights ``1 / c``).  Written once over the rows' namespace with host random draws; ``kmeans``
runs on a host copy; wide sparse rows stay sparse (:func:`keeps_sparse`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from .execution import budget, one_blas_thread
from .execution.arrays import placement_of, take_rows, to_host
from .execution.elementwise import as_float64, put_, row_sq_norms
from .execution.kernel_ops import fold_kernel_rows, gram, kernel_blocks, kernel_diag
from .execution.linalg import lower_solver
from .kernels import Kernel, chunk_rows
from .solvers import eigh_topk
from .source import ReservoirSampler, uniform_indices

__all__ = [
    "LANDMARK_METHODS",
    "uniform_indices",
    "ReservoirSampler",
    "kmeans_landmarks",
    "rls_indices",
    "ridge_leverage_scores",
    "RPCholeskyResult",
    "rpcholesky_indices",
    "rpcholesky_of_gram",
    "select_landmarks",
    "keeps_sparse",
    "uniform_landmarks",
]

LANDMARK_METHODS = ("uniform", "kmeans", "rls", "rpcholesky")

#: Above this many rows ``kmeans`` uses ``MiniBatchKMeans`` (full Lloyd passes get too slow).
KMEANS_FULL_MAX_ROWS = 20000

#: Proposals per round of accelerated RPCholesky (one n x (accepted) kernel block per round).
RPCHOLESKY_BLOCK_SIZE = 100

#: Residual diagonal entries at most this fraction of the kernel's diagonal entry are round-off.
RESIDUAL_FLOOR = 1e-12


def keeps_sparse(X) -> bool:
    """Whether sparse rows of X (an array, a CSR matrix or a row source) taken as landmarks stay
    a CSR matrix: when they have more than
    :data:`~fastkpca.execution.budget.SPARSE_LANDMARKS_MIN_FEATURES` features.  Narrower ones are
    made dense, which makes the kernel rows sparse x dense products, faster at those widths."""
    sparse = getattr(X, "sparse", None)
    sparse = sp.issparse(X) if sparse is None else sparse
    n_features = getattr(X, "n_features", None) or X.shape[1]
    return bool(sparse) and n_features > budget.SPARSE_LANDMARKS_MIN_FEATURES


def _take_rows(X, idx):
    """The rows ``X[idx]`` on X's placement: a copy, dense unless X is sparse and
    :func:`keeps_sparse` keeps them CSR."""
    rows = take_rows(X, np.asarray(idx, dtype=np.int64))
    if sp.issparse(rows):
        rows = rows.tocsr() if keeps_sparse(rows) else rows.toarray()
    return rows


def uniform_landmarks(source, n_rows: int, rng: np.random.Generator):
    """``source.sample_rows(n_rows, rng)``: the uniform landmarks of a row source, the same rows
    kept CSR where :func:`keeps_sparse` says (then by index from the matrix in memory, or by
    reservoir sampling from a stream of blocks, with the same draws)."""
    n = source.n_samples
    if not keeps_sparse(source):
        c = n_rows if n is None else min(n_rows, n)
        source.require_dense(c, f"n_landmarks={n_rows} landmarks")
        return source.sample_rows(n_rows, rng)
    if source.random_access:
        X = source.in_memory(purpose="sparse landmarks")
        return take_rows(X, uniform_indices(n, n_rows, rng)).tocsr()
    reservoir = ReservoirSampler(n_rows, rng)
    for _, block in source.blocks():
        reservoir.update(block)
    return reservoir.sample(dense=False)


def kmeans_landmarks(X, n_landmarks: int, rng: np.random.Generator):
    """k-means centres and the fraction of the data in each cluster.

    Zhang & Kwok (2009) take the k-means centres as Nystrom landmarks and the cluster sizes as
    the density weights of the landmark eigenproblem.  ``KMeans`` (one k-means++ start) is used up
    to :data:`KMEANS_FULL_MAX_ROWS` rows, ``MiniBatchKMeans`` above.

    Returns
    -------
    centers : (c, d) dense array in X's floating dtype
    weights : (c,) float64, cluster sizes / n (an empty cluster gets 0)
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    n = X.shape[0]
    c = min(n_landmarks, n)
    seed = int(rng.integers(2**31))
    if n <= KMEANS_FULL_MAX_ROWS:
        km = KMeans(n_clusters=c, n_init=1, random_state=seed)
    else:
        km = MiniBatchKMeans(n_clusters=c, n_init=1, batch_size=max(1024, 3 * c), random_state=seed)
    labels = km.fit_predict(X)
    counts = np.bincount(labels, minlength=c).astype(np.float64)
    centers = np.asarray(km.cluster_centers_, dtype=X.dtype)
    return centers, counts / counts.sum()


def _ridge_regularizer(K_SS, prob, rank):
    """Musco & Musco's lambda = (1/k) sum_{i > k} sigma_i(K), estimated on the weighted sample.

    The weighted sample ``D K_SS D`` with ``D = diag(1 / sqrt(p))`` is the sketch ``S^T K S``
    whose spectrum stands in for K's; its tail mass beyond the top ``rank`` eigenvalues, divided
    by ``rank``, is the ridge that makes the leverage scores sum to O(rank).
    """
    d = 1.0 / np.sqrt(prob)
    sketch = K_SS * d[:, None] * d[None, :]
    m = sketch.shape[0]
    if rank >= m:
        # Fewer points than the target rank: keep a tiny ridge for a stable solve.
        return 1e-6 * max(float(np.trace(sketch)) / m, np.finfo(float).tiny)
    with one_blas_thread():
        if rank <= m // 4:
            # A few top eigenvalues of a large sketch: Lanczos (fixed start vector, so the
            # result is deterministic and the sampling stream untouched) beats a dense solve.
            vals, _ = eigh_topk(sketch, rank, method="lanczos", rng=0, tol=1e-6)
        else:
            vals = la.eigvalsh(sketch, subset_by_index=[m - rank, m - 1])
    tail = float(np.trace(sketch)) - float(np.sum(np.maximum(vals, 0.0)))
    floor = 1e-6 * float(np.trace(sketch)) / m
    return max(tail / rank, floor)


def ridge_leverage_scores(
    X, rows, sample, prob, kernel: Kernel, lam: float, *, block_rows=None, K_SS=None
) -> np.ndarray:
    """Approximate lambda-ridge leverage scores of ``X[rows]`` from a weighted Nystrom sample:
    ``l_i = (K_ii - K_iS (K_SS + lambda diag(p))^{-1} K_Si) / lambda`` (Musco & Musco 2017, eq.
    3), an over-estimate; O(block_rows |S|) memory.  ``K_SS`` may be passed if known."""
    if K_SS is None:
        K_SS = to_host(gram(kernel, as_float64(sample)))
    A = K_SS + lam * np.diag(prob)
    with one_blas_thread():
        try:
            chol = la.cholesky(A, lower=True, check_finite=False)
        except la.LinAlgError:
            # K_SS is PSD only to rounding (or the kernel is not PSD, e.g. sigmoid): shift by
            # twice its most negative eigenvalue, which the ridge already tolerates in kind.
            lowest = float(la.eigvalsh(A, subset_by_index=[0, 0], check_finite=False)[0])
            shift = 2.0 * abs(lowest) + np.finfo(float).eps * float(np.trace(np.abs(A)))
            try:
                chol = la.cholesky(A + shift * np.eye(A.shape[0]), lower=True, check_finite=False)
            except la.LinAlgError:
                raise ValueError(
                    "landmarks='rls' needs a positive semi-definite kernel: the regularised "
                    "kernel matrix of its sample has no Cholesky factor"
                ) from None
    scores = np.empty(len(rows))
    # ``K_iS chol^{-T}``: a triangular solve per block on the host, a product elsewhere
    solve = lower_solver(chol, placement_of(X))
    sample = as_float64(sample)
    step = block_rows or chunk_rows(sample.shape[0])
    for start in range(0, len(rows), step):
        positions = np.arange(start, min(start + step, len(rows)))
        positions = positions[np.argsort(rows[positions])]  # read X in row order
        Xb = take_rows(X, rows[positions])
        diag = _kernel_diag(kernel, Xb)
        for b0, b1, Kb in kernel_blocks(kernel, Xb, sample, dtype="float64"):
            quad = row_sq_norms(solve(Kb))
            scores[positions[b0:b1]] = to_host((diag[b0:b1, ...] - quad) / lam)
    return np.maximum(scores, 0.0)


def rls_indices(
    X,
    n_landmarks: int,
    kernel: Kernel,
    rng: np.random.Generator,
    *,
    target_rank=None,
    block_rows=None,
):
    """Recursive ridge-leverage-score sampling of ``n_landmarks`` rows (Musco & Musco 2017).

    The fixed-size form of RECURSIVE-RLS-NYSTROM: nested uniform halvings down to c rows, each
    level above re-sampling with probability ``min(1, log(c) l_i)`` from the scores of the level
    below (target rank ``max(target_rank, c / (4 log c))``); the top level draws exactly c rows
    proportionally to the scores.  O(n c) kernel values, O(c^2 + block c) memory.

    Returns
    -------
    indices : (c,) sorted row indices
    inclusion : (c,) approximate inclusion probabilities ``min(1, c * l_i / sum l)``
    """
    n = X.shape[0]
    c = min(n_landmarks, n)
    if c == n:
        return np.arange(n), np.ones(n)
    perm = rng.permutation(n)
    sizes = [n]
    while sizes[-1] > c:
        sizes.append((sizes[-1] + 1) // 2)
    sel = perm[: sizes[-1]]
    prob = np.ones(sel.size)
    oversample = max(1.0, float(np.log(c)))
    rank = min(c, max(1, int(c / (4.0 * oversample)), int(target_rank or 0)))
    for level in range(len(sizes) - 2, -1, -1):
        current = perm[: sizes[level]]
        # float64 landmarks make every kernel block below float64 (float32 X included)
        sample = as_float64(_take_rows(X, sel))
        K_SS = to_host(_proposal_kernel(X, sel, kernel))
        lam = _ridge_regularizer(K_SS, prob, rank)
        scores = ridge_leverage_scores(
            X, current, sample, prob, kernel, lam, block_rows=block_rows, K_SS=K_SS
        )
        if level > 0:
            p = np.minimum(1.0, oversample * scores)
            keep = rng.random(current.size) < p
            if not keep.any():  # vanishingly rare: fall back to a uniform sample of size c
                keep = np.zeros(current.size, dtype=bool)
                keep[rng.choice(current.size, size=c, replace=False)] = True
                p = np.full(current.size, c / current.size)
            sel, prob = current[keep], p[keep]
        else:
            # Successive sampling without replacement with probabilities proportional to the
            # scores: the c smallest Exp(1) / w keys (Efraimidis & Spirakis 2006).
            w = scores + 1e-12 * max(float(scores.max()), np.finfo(float).tiny)
            keys = rng.exponential(size=current.size) / w
            pick = np.argpartition(keys, c - 1)[:c]
            inclusion = np.minimum(1.0, c * w / w.sum())
            order = np.argsort(current[pick])
            return current[pick][order], inclusion[pick][order]
    raise AssertionError("unreachable: the top level always returns")  # pragma: no cover


@dataclass
class RPCholeskyResult:
    """Pivots of randomly pivoted Cholesky and the Nystrom approximation they define.

    With S the pivots, C = K[:, S] and W = K[S, S], the factor satisfies
    ``F F^T = C W^{-1} C^T`` (the Nystrom approximation on the landmarks ``X[S]``), and
    ``residual_diag = diag(K - F F^T)``.

    Attributes
    ----------
    indices : (c,) int64
        Row indices of the pivots, in the order they were chosen (any prefix is itself the
        RPCholesky result with that many pivots).  Fewer than requested when the residual
        vanished first (a kernel of rank < c) or ``tol`` was met.
    factor : (n, c) float64
        The Cholesky factor F (columns in pivot order).
    residual_diag : (n,) float64
        ``diag(K - F F^T)``, non-negative (entries at most :data:`RESIDUAL_FLOOR` times the
        kernel diagonal are round-off and set to 0); 0 at the pivots.
    trace : float
        ``tr(K)``.
    n_proposals : int
        Pivots proposed (accelerated) or drawn (plain): the sampling work.
    """

    indices: np.ndarray
    factor: np.ndarray
    residual_diag: np.ndarray
    trace: float
    n_proposals: int

    @property
    def residual_trace(self) -> float:
        """``tr(K - C W^+ C^T)``, the trace-norm error of the Nystrom approximation: it bounds
        the total by which NystromKPCA's eigenvalues on these landmarks are low."""
        return float(placement_of(self.residual_diag).xp.sum(self.residual_diag))

    @property
    def relative_residual(self) -> float:
        """``tr(K - C W^+ C^T) / tr(K)``, between 0 and 1."""
        return self.residual_trace / self.trace


def _sample_from_diagonal(d: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` i.i.d. indices drawn with probability ``d_i / sum(d)`` (d >= 0, not all 0)."""
    positive = np.flatnonzero(d > 0)
    cumulative = np.cumsum(d[positive])
    draws = np.searchsorted(cumulative, rng.random(size) * cumulative[-1], side="right")
    return positive[np.minimum(draws, positive.size - 1)]


def _kernel_columns(X, idx, kernel: Kernel) -> np.ndarray:
    """``K[:, idx]`` as an (n, len(idx)) float64 array, evaluated in row blocks of X (device
    rows: in float64 tiles on their device)."""
    Y = as_float64(_take_rows(X, idx))
    out = _empty_factor(placement_of(X), X.shape[0], len(idx))
    for start, stop, K in kernel_blocks(kernel, X, Y, dtype="float64"):
        out[start:stop, ...] = K
    return out


def _proposal_kernel(X, proposals, kernel: Kernel):
    """``k(X[p], X[p])`` of the proposals in float64 (on X's device), the diagonal exact for
    kernels with a unit diagonal as :meth:`Kernel.__call__` gives it."""
    return gram(kernel, as_float64(_take_rows(X, proposals)))


def _append_pivot_columns(X, new, kernel: Kernel, F, i: int, L, d, floor):
    """Append the accepted pivots' columns to the factor F in one pass over X; returns the
    updated residual diagonal: ``F[:, i:i+l] = (K[:, new] - F[:, :i] F[new, :i]^T) L^{-T}``
    (CETW eq. 2.2) and ``d -= |F[:, i:i+l]|^2``, chunk by chunk while in cache."""
    placement = placement_of(F)
    xp = placement.xp
    Y = as_float64(_take_rows(X, new))
    F_new = take_rows(F[:, :i], new)
    width = new.size
    with one_blas_thread():  # a threaded solve's spin-waits would slow the pass below
        L_inv_T = la.solve_triangular(L, np.eye(width), lower=True, check_finite=False).T
    L_inv_T = placement.asarray(np.ascontiguousarray(L_inv_T))

    def step(state, start, stop, K):
        if i:
            K -= F[start:stop, :i] @ F_new.T
        cols = K @ L_inv_T
        F[start:stop, i : i + width] = cols
        rows = d[start:stop] - row_sq_norms(cols)
        d[start:stop] = xp.where(rows <= floor[start:stop], 0.0, rows)

    fold_kernel_rows(kernel, X, Y, step, _no_state, dtype="float64")
    return put_(d, new, 0.0)


def _no_state():
    return None


def _rejection_cholesky(H, proposal_diag, floor, max_accept, rng):
    """Accept/reject a block of proposals so that the accepted ones follow RPCholesky.

    Proposal j (drawn from the residual diagonal d) is accepted with probability ``r_j / d_j``,
    ``r_j`` its residual after the proposals accepted before it (Epperly, Tropp & Webber 2024,
    Alg. 2); Schur complements are formed left-looking, so a rejection costs one dot product.

    Returns
    -------
    accepted : (l,) positions in the block, in order
    L : (l, l) lower Cholesky factor of ``H[accepted][:, accepted]``
    explained : (b,) bool, proposals whose residual is round-off (at most ``floor``)
    """
    b = H.shape[0]
    width = min(b, max_accept)
    L = np.zeros((b, width))
    accepted: list[int] = []
    explained = np.zeros(b, dtype=bool)
    # One uniform per proposal, drawn up front: the stream does not depend on the outcomes.
    u = rng.random(b)
    for j in range(b):
        m = len(accepted)
        r = H[j, j] - L[j, :m] @ L[j, :m]
        if r <= floor[j]:
            explained[j] = True
            continue
        if u[j] * proposal_diag[j] > r:
            continue
        L[j:, m] = (H[j:, j] - L[j:, :m] @ L[j, :m]) / np.sqrt(r)
        accepted.append(j)
        if len(accepted) == max_accept:
            break
    return np.asarray(accepted, dtype=np.int64), L[accepted, : len(accepted)], explained


def rpcholesky_indices(
    X,
    n_landmarks: int,
    kernel: Kernel,
    rng: np.random.Generator,
    *,
    block_size: int = RPCHOLESKY_BLOCK_SIZE,
    accelerated: bool = True,
    tol: float | None = None,
) -> RPCholeskyResult:
    """Landmark rows by randomly pivoted Cholesky (Chen, Epperly, Tropp & Webber 2024, Alg. 1).

    Pivots are drawn with probability ``d_s / sum(d)``, d the residual diagonal of ``K - F F^T``.
    The accelerated form (Epperly, Tropp & Webber 2024) proposes ``block_size`` pivots at once and
    accepts a subset by rejection sampling (:func:`_rejection_cholesky`): the same distribution with
    BLAS-3 work.

    Parameters
    ----------
    X : (n, d) array or CSR matrix
    n_landmarks : int
        Maximum number of pivots c (capped at n).
    kernel : Kernel
    rng : numpy.random.Generator
    block_size : int
        Proposals per round (accelerated only).
    accelerated : bool
        Block rejection sampling (True) or one pivot per kernel column (False).
    tol : float in (0, 1), optional
        Stop once ``tr(K - F F^T) <= tol * tr(K)``.

    Returns
    -------
    RPCholeskyResult
        Pivots, factor, residual diagonal (its sum certifies ``tr(K - C W^+ C^T)``) and ``tr(K)``;
        ``n (c + 1)`` kernel evaluations, ``n c`` float64 for F.
    """
    n = X.shape[0]
    if n == 0:
        raise ValueError("X has no rows")
    if isinstance(n_landmarks, bool) or not isinstance(n_landmarks, int | np.integer):
        raise ValueError(f"n_landmarks must be an int >= 1, got {n_landmarks!r}")
    if n_landmarks < 1:
        raise ValueError(f"n_landmarks must be >= 1, got {n_landmarks}")
    if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer):
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if tol is not None and not (0.0 < float(tol) < 1.0):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    c = min(int(n_landmarks), n)
    # The factor, the diagonals and the kernel columns on X's placement; each round's draws
    # from a host copy of the residual diagonal (see the module notes).
    placement = placement_of(X)
    xp = placement.xp
    diag = _kernel_diag(kernel, X)
    diag_host = to_host(diag)
    if not np.all(np.isfinite(diag_host)) or np.any(diag_host < 0):
        raise ValueError("the kernel diagonal k(x, x) must be finite and non-negative")
    trace = float(diag_host.sum())
    if trace <= 0:
        raise ValueError("the kernel diagonal is zero: k(x, x) = 0 for every row of X")
    floor = RESIDUAL_FLOOR * diag
    floor_host = to_host(floor)
    d = xp.asarray(diag, copy=True)
    target = 0.0 if tol is None else float(tol) * trace
    # F grows by doubling when a tolerance may stop it early, so a large cap costs nothing.
    capacity = c if tol is None else min(c, max(2 * block_size, 64))
    F = _empty_factor(placement, n, capacity)
    pivots: list[int] = []
    n_proposals = 0
    while len(pivots) < c:
        d_now = to_host(d)  # d itself on the host
        total = float(d_now.sum())
        if total <= target or not np.any(d_now > 0):
            break
        i = len(pivots)
        if accelerated:
            proposals = _sample_from_diagonal(d_now, block_size, rng)
            n_proposals += proposals.size
            Fp = take_rows(F[:, :i], proposals)
            H = _proposal_kernel(X, proposals, kernel)
            with one_blas_thread():  # a threaded product's spin-waits would slow the next pass
                H -= Fp @ Fp.T
                accepted, L, explained = _rejection_cholesky(
                    to_host(H), d_now[proposals], floor_host[proposals], c - i, rng
                )
            # A fresh residual at round-off level: the point is explained (this also ends the
            # loop when the running d and the recomputed residuals disagree by round-off).
            d = put_(d, proposals[explained], 0.0)
            if accepted.size == 0:
                continue
            new = proposals[accepted]
            if tol is None:
                # (with a tolerance, the prefix kept is read from the new columns' masses before
                # they are appended: the general steps below)
                d = _append_pivot_columns(X, new, kernel, F, i, L, d, floor)
                pivots.extend(int(s) for s in new)
                continue
            G = _kernel_columns(X, new, kernel)
            G -= F[:, :i] @ take_rows(F[:, :i], new).T
            # New columns G L^{-T}: the Cholesky factor of the accepted block (CETW eq. 2.2).
            new_cols = lower_solver(L, placement)(G)
        else:
            new = _sample_from_diagonal(d_now, 1, rng)
            n_proposals += 1
            s = int(new[0])
            g = _kernel_columns(X, new, kernel)[:, 0] - F[:, :i] @ F[s, :i]
            pivot = float(g[s])
            if pivot <= floor_host[s]:  # round-off residual: the point is already explained
                d = put_(d, new, 0.0)
                continue
            new_cols = xp.reshape(g / math.sqrt(pivot), (-1, 1))
        if tol is not None:
            mass = to_host(xp.sum(new_cols * new_cols, axis=0))
            # Each prefix of the new columns is the factor of that prefix of pivots, so keep the
            # shortest prefix that meets the tolerance.
            met = np.flatnonzero(total - np.cumsum(mass) <= target)
            if met.size:
                new, new_cols = new[: met[0] + 1], new_cols[:, : met[0] + 1]
        m = new.size
        if i + m > F.shape[1]:
            grown = _empty_factor(placement, n, min(c, max(2 * F.shape[1], i + m)))
            grown[:, :i] = F[:, :i]
            F = grown
        F[:, i : i + m] = new_cols
        d = d - row_sq_norms(new_cols)
        d = put_(d, new, 0.0)
        d = xp.where(d <= floor, 0.0, d)
        pivots.extend(int(s) for s in new)
    k = len(pivots)
    factor = F if F.shape[1] == k else xp.asarray(F[:, :k], copy=True)
    return RPCholeskyResult(np.asarray(pivots, dtype=np.int64), factor, d, trace, n_proposals)


def rpcholesky_of_gram(K: np.ndarray, n_landmarks: int, rng: np.random.Generator) -> np.ndarray:
    """RPCholesky pivots (in the order chosen) of a Gram matrix already held: plain CETW
    Alg. 1 on its columns, as :func:`rpcholesky_indices` runs it on kernel rows.  Each step
    draws a pivot s with probability ``d_s / sum(d)``, ``d = diag(K - F F^T)``, and appends
    ``(K[:, s] - F F[s]^T) / sqrt(d_s)`` to F.  For small explicit Grams (AutoKPCA's probe),
    where the rows' kernel evaluations and the accelerated form's rejection rounds would cost
    more than the m c^2 of the plain loop.  Fewer pivots when the residual vanishes first."""
    K = np.asarray(K, dtype=np.float64)
    m = K.shape[0]
    c = min(int(n_landmarks), m)
    d = np.diagonal(K).copy()
    floor = RESIDUAL_FLOOR * d
    F = np.zeros((m, c))
    pivots: list[int] = []
    while len(pivots) < c:
        d[d <= floor] = 0.0
        if not np.any(d > 0):
            break
        i = len(pivots)
        s = int(_sample_from_diagonal(d, 1, rng)[0])
        g = K[:, s] - F[:, :i] @ F[s, :i]
        if g[s] <= floor[s]:  # round-off residual: the point is already explained
            d[s] = 0.0
            continue
        F[:, i] = g / np.sqrt(g[s])
        d -= F[:, i] ** 2
        d[s] = 0.0
        pivots.append(s)
    return np.asarray(pivots, dtype=np.int64)


def _kernel_diag(kernel: Kernel, X):
    """``k(x_i, x_i)`` in float64, on X's placement."""
    return as_float64(kernel_diag(kernel, X))


def _empty_factor(placement, n: int, width: int):
    xp = placement.xp
    return xp.empty((n, width), dtype=xp.float64, device=placement.device)


def select_landmarks(
    X, method: str, n_landmarks: int, kernel: Kernel, rng: np.random.Generator, *, target_rank=None
):
    """Landmark rows and weights from an in-memory X with one of :data:`LANDMARK_METHODS`.

    ``target_rank`` (the number of components wanted) only informs ``rls``.

    Returns
    -------
    landmarks : (c, d) array in X's dtype and placement, c = min(n_landmarks, n), dense unless
        X is sparse and wide (:func:`keeps_sparse`: then CSR; not ``kmeans``, whose centres
        are dense); ``rpcholesky`` gives fewer (in pivot order) when the kernel matrix has
        numerical rank < c
    weights : (c,) float64, non-negative, summing to 1
    """
    n = X.shape[0]
    c = min(n_landmarks, n)
    if method == "uniform":
        idx = uniform_indices(n, c, rng)
        return _take_rows(X, idx), np.full(c, 1.0 / c)
    if method == "kmeans":  # scikit-learn's, on a host copy of the rows
        centers, weights = kmeans_landmarks(to_host(X), c, rng)
        return placement_of(X).asarray(centers), weights
    if method == "rls":
        idx, inclusion = rls_indices(X, c, kernel, rng, target_rank=target_rank)
        weights = 1.0 / inclusion
        return _take_rows(X, idx), weights / weights.sum()
    if method == "rpcholesky":
        idx = rpcholesky_indices(X, c, kernel, rng).indices
        return _take_rows(X, idx), np.full(idx.size, 1.0 / idx.size)
    raise ValueError(
        f"unknown landmarks method {method!r}; choose one of {LANDMARK_METHODS} "
        "or pass an array of landmark rows"
    )
