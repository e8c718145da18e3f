"""Landmark selection for the Nystrom method: uniform, reservoir, k-means and ridge leverage.

Every selector returns landmark *rows* (or row indices) plus per-landmark weights that describe
how much of the data each landmark stands for (non-negative, summing to 1):

``uniform``
    A uniformly random subset without replacement, drawn as the rows with the ``c`` smallest of
    n i.i.d. uniform keys.  :class:`ReservoirSampler` draws the *same* keys one row block at a time,
    so it gives the same subset from a stream of blocks of any sizes, in one pass and O(c) memory
    (reservoir sampling with random priorities).  Weights ``1 / c``.
``kmeans``
    k-means centres (scikit-learn's ``KMeans`` / ``MiniBatchKMeans``) with the cluster sizes as
    weights: the density-weighted Nystrom landmarks of Zhang & Kwok (2009); Kingravi et al.
    (``papers/003``) use the same centres-plus-sizes pair as a reduced-set density estimate.
``rls``
    Recursive ridge-leverage-score sampling (Musco & Musco 2017, "Recursive sampling for the
    Nystrom method", cited as the general-kernel method in ``papers/002``): nested uniform halvings
    of the data, with the leverage scores of each level estimated from the Nystrom sample of the
    level below.  O(n c) kernel evaluations in row blocks; the n x n Gram is never formed.
    Weights ``1 / p_i`` (the inverse inclusion probabilities), normalized.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from .kernels import Kernel, chunk_rows
from .solvers import eigh_topk, one_blas_thread
from .source import ReservoirSampler, uniform_indices

__all__ = [
    "LANDMARK_METHODS",
    "uniform_indices",
    "ReservoirSampler",
    "kmeans_landmarks",
    "rls_indices",
    "ridge_leverage_scores",
    "select_landmarks",
]

LANDMARK_METHODS = ("uniform", "kmeans", "rls")

#: Above this many rows ``kmeans`` uses ``MiniBatchKMeans`` (full Lloyd passes get too slow).
KMEANS_FULL_MAX_ROWS = 20000


def _take_rows(X, idx) -> np.ndarray:
    """Dense copy of the rows ``X[idx]`` (X dense or sparse)."""
    rows = X[idx]
    return rows.toarray() if sp.issparse(rows) else np.array(rows, copy=True)


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
    """Approximate lambda-ridge leverage scores of ``X[rows]`` from a weighted Nystrom sample.

    ``l_i = (K_ii - K_iS (K_SS + lambda diag(p))^{-1} K_Si) / lambda`` (Musco & Musco 2017,
    eq. 3 with ``S^T K S = D K_SS D``, D = diag(p)^{-1/2}): an over-estimate of the true score that
    tightens as the sample improves.  Kernel rows are evaluated ``block_rows`` at a time, so the
    memory is O(block_rows * |S|).  ``K_SS = k(sample, sample)`` may be passed if already known.
    """
    if K_SS is None:
        K_SS = np.asarray(kernel(sample), dtype=np.float64)
    A = K_SS + lam * np.diag(prob)
    with one_blas_thread():
        chol = la.cholesky(A, lower=True, check_finite=False)
    step = block_rows or chunk_rows(sample.shape[0])
    scores = np.empty(len(rows))
    for start in range(0, len(rows), step):
        positions = np.arange(start, min(start + step, len(rows)))
        positions = positions[np.argsort(rows[positions])]  # read X in row order
        Xb = X[rows[positions]]
        diag = np.asarray(kernel.diag(Xb), dtype=np.float64)
        for b0, b1, Kb in kernel.blocks(Xb, sample):
            T = la.solve_triangular(chol, Kb.T, lower=True, check_finite=False)
            quad = np.einsum("ij,ij->j", T, T)
            scores[positions[b0:b1]] = (diag[b0:b1] - quad) / lam
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

    The practical fixed-size form of their RECURSIVE-RLS-NYSTROM: nested uniform halvings
    ``S_0 = [n] > S_1 > ... > S_L`` with ``|S_L| <= c``; the deepest level is kept whole; each
    level above re-samples its points independently with probability ``min(1, log(c) * l_i)``
    where ``l_i`` are the ridge leverage scores estimated from the sample of the level below,
    with lambda set for target rank ``k = max(target_rank, c / (4 log c))``: Musco & Musco's
    ``c / (4 log c)`` keeps the expected level samples O(c); ``target_rank`` (the number of
    principal components wanted) lowers lambda to the rank-k setting of their guarantee, so
    that every structure among the top k eigenvectors gets a high score even when c is small.
    The top level draws exactly c distinct rows with probabilities proportional to the scores
    (successive sampling, via exponential keys).  Kernel evaluations: sum over levels of
    ``|S_l| * |sample|`` = O(n c); only O(c^2 + block * c) memory.

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
        sample = _take_rows(X, sel).astype(np.float64, copy=False)
        K_SS = np.asarray(kernel(sample), dtype=np.float64)
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


def select_landmarks(
    X, method: str, n_landmarks: int, kernel: Kernel, rng: np.random.Generator, *, target_rank=None
):
    """Landmark rows and weights from an in-memory X with one of :data:`LANDMARK_METHODS`.

    ``target_rank`` (the number of components wanted) only informs ``rls``.

    Returns
    -------
    landmarks : (c, d) dense array in X's dtype, c = min(n_landmarks, n)
    weights : (c,) float64, non-negative, summing to 1
    """
    n = X.shape[0]
    c = min(n_landmarks, n)
    if method == "uniform":
        idx = uniform_indices(n, c, rng)
        return _take_rows(X, idx), np.full(c, 1.0 / c)
    if method == "kmeans":
        return kmeans_landmarks(X, c, rng)
    if method == "rls":
        idx, inclusion = rls_indices(X, c, kernel, rng, target_rank=target_rank)
        weights = 1.0 / inclusion
        return _take_rows(X, idx), weights / weights.sum()
    raise ValueError(
        f"unknown landmarks method {method!r}; choose one of {LANDMARK_METHODS} "
        "or pass an array of landmark rows"
    )
