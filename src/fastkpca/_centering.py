"""Feature-space centering of kernel matrices, in sample and out of sample, optionally weighted.

With weights w (w >= 0, sum w = 1; uniform is ordinary centering) the centered kernel is
``k~(x, y) = k(x, y) - (K w)(x) - (K w)(y) + w^T K w``, i.e. ``K~ = (I - 1 w^T) K (I - w 1^T)``
(Schoelkopf et al. 1998; weighted: Kingravi et al. Algorithm 1).  The n x n centering matrix is
never formed: K is centered in place a row block at a time, statistics in float64, over K's
array namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import LinearOperator

from .execution import linalg
from .execution.arrays import get_namespace, placement_of
from .execution.budget import chunk_rows
from .execution.elementwise import as_float64

__all__ = [
    "CenteringStats",
    "center_gram_inplace",
    "gram_row_stats",
    "center_gram_out_of_sample",
    "centered_operator",
    "normalize_weights",
]


@dataclass
class CenteringStats:
    """What out-of-sample centering needs from the training Gram K.

    ``col_means[j] = (w^T K)_j`` (float64) and ``total_mean = w^T K w``.
    """

    col_means: np.ndarray
    total_mean: float


def normalize_weights(weights, n: int):
    """Return float64 weights summing to 1, on the weights' placement (None stays None =
    uniform)."""
    if weights is None:
        return None
    xp = get_namespace(weights)
    w = xp.reshape(as_float64(xp.asarray(weights)), (-1,))
    if tuple(w.shape) != (n,):
        raise ValueError(f"weights has shape {tuple(w.shape)}, expected ({n},)")
    total = float(xp.sum(w))
    if not (bool(xp.all(xp.isfinite(w))) and not bool(xp.any(w < 0)) and total > 0):
        raise ValueError("weights must be finite, non-negative and not all zero")
    return w / total


def _block_rows(n):
    return chunk_rows(n, n_temporaries=2)


def _on_placement_of(a, K):
    """``a`` (float64; a model's statistics, host weights) where K lives."""
    return placement_of(K).asarray(a, dtype=np.float64)


def _weighted_row_means(K, w, block=None):
    """``K w`` (row means for w = None), accumulated in float64 a row block at a time (K may be
    float32)."""
    placement = placement_of(K)
    xp = placement.xp
    n = K.shape[0]
    block = block or _block_rows(n)
    out = xp.empty((n,), dtype=xp.float64, device=placement.device)
    for s in range(0, n, block):
        e = min(n, s + block)
        Kb = as_float64(K[s:e, :])
        out[s:e] = xp.mean(Kb, axis=1) if w is None else Kb @ w
    return out


def gram_row_stats(K, weights=None, *, block: int | None = None) -> CenteringStats:
    """The centering statistics of a symmetric training Gram, leaving K as it is.

    For solvers that center implicitly (:func:`centered_operator`): one read of K, where
    :func:`center_gram_inplace` reads it and writes it back.  ``col_means`` lives where K does.
    """
    w = normalize_weights(weights, K.shape[0])
    w = None if w is None else _on_placement_of(w, K)
    row_means = _weighted_row_means(K, w, block)  # K symmetric: row means = column means
    total = float(get_namespace(K).mean(row_means) if w is None else row_means @ w)
    return CenteringStats(col_means=row_means, total_mean=total)


def center_gram_inplace(K, weights=None, *, block: int | None = None) -> CenteringStats:
    """Center a symmetric training Gram matrix in place; return the statistics for new points.

    Row means are accumulated in float64 even when K is float32; K is modified a row block at a
    time, so the only extra memory is O(n) and one block.
    """
    stats = gram_row_stats(K, weights, block=block)
    xp = get_namespace(K)
    n = K.shape[0]
    block = block or _block_rows(n)
    r = stats.col_means
    for s in range(0, n, block):
        e = min(n, s + block)
        Kb = K[s:e, :]  # a view: corrected in place
        corr = r[s:e, None] + r[None, :] - stats.total_mean
        Kb -= xp.astype(corr, K.dtype, copy=False)
    return stats


def center_gram_out_of_sample(K_new, stats: CenteringStats, weights=None):
    """Center a block ``K_new[i, j] = k(x_new_i, x_train_j)`` with the training statistics.

    Modifies ``K_new`` in place and returns it; the statistics may live on the host when K_new
    is on a device.
    """
    xp = get_namespace(K_new)
    w = normalize_weights(weights, K_new.shape[1])
    w = None if w is None else _on_placement_of(w, K_new)
    Kd = as_float64(K_new)
    new_means = xp.mean(Kd, axis=1) if w is None else Kd @ w
    col_means = _on_placement_of(stats.col_means, K_new)
    corr = new_means[:, None] + col_means[None, :] - stats.total_mean
    K_new -= xp.astype(corr, K_new.dtype, copy=False)
    return K_new


def centered_operator(A, weights=None) -> LinearOperator:
    """The implicitly centered operator ``(I - 1 w^T) A (I - w 1^T)`` for a symmetric A.

    ``A`` may be a dense array, a scipy sparse matrix or a LinearOperator; each product costs one
    product with A plus O(n) work, so sparsified Grams stay sparse.  Products are in float64.
    """
    n = A.shape[0]
    w = normalize_weights(weights, n)
    if w is None:
        w = np.full(n, 1.0 / n)

    def matmat(V):
        V = np.asarray(V, dtype=np.float64)
        one_d = V.ndim == 1
        if one_d:
            V = V[:, None]
        Vc = V - np.outer(w, V.sum(axis=0))  # (I - w 1^T) V
        # A float32 Gram is multiplied in float32 (no float64 copy of A), a dense one in row
        # blocks (execution.linalg.matmat); the result is float64.
        AV = linalg.matmat(A, Vc)
        AV -= np.outer(np.ones(n), w @ AV)  # (I - 1 w^T) AV
        return AV[:, 0] if one_d else AV

    return LinearOperator((n, n), matvec=matmat, matmat=matmat, rmatvec=matmat, dtype=np.float64)
