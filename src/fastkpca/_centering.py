"""Feature-space centering of kernel matrices, in sample and out of sample, optionally weighted.

With weights w (w >= 0, sum w = 1; uniform w = 1/n is ordinary centering) the feature-space mean
is mu = sum_i w_i phi(x_i), and the centered kernel is

    k~(x, y) = k(x, y) - (K w)(x) - (K w)(y) + w^T K w,

i.e. ``K~ = (I - 1 w^T) K (I - w 1^T)`` (Schoelkopf et al. 1998; the weighted form is the one the
reduced-set method needs, Kingravi et al. Algorithm 1).  Nothing here forms the n x n centering
matrix H: the in-sample version works in place on K, the implicit version is a LinearOperator.

Device arrays (PyTorch, CuPy) are centered on their device, in their namespace, with the same
float64 statistics (:func:`center_gram_inplace`, :func:`gram_row_stats`,
:func:`center_gram_out_of_sample` check where K lives; ``col_means`` then lives there too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import LinearOperator

from .execution import linalg
from .execution.arrays import is_host_array, placement_of

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


def normalize_weights(weights, n: int) -> np.ndarray | None:
    """Return float64 weights summing to 1 (None stays None = uniform)."""
    if weights is None:
        return None
    if not is_host_array(weights):
        return _normalize_weights_xp(weights, n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.shape != (n,):
        raise ValueError(f"weights has shape {w.shape}, expected ({n},)")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    return w / w.sum()


def _block_rows(n):
    from .kernels import chunk_rows

    return chunk_rows(n, n_temporaries=2)


def _weighted_row_means(K, w, block=None):
    """(K w) accumulated in float64, a row block at a time (K may be float32)."""
    n = K.shape[0]
    block = block or _block_rows(n)
    out = np.empty(n)
    for s in range(0, n, block):
        Kb = np.asarray(K[s : s + block], dtype=np.float64)
        out[s : s + block] = Kb.mean(axis=1) if w is None else Kb @ w
    return out


def gram_row_stats(K: np.ndarray, weights=None, *, block: int | None = None) -> CenteringStats:
    """The centering statistics of a symmetric training Gram, leaving K as it is.

    For solvers that center implicitly (:func:`centered_operator`): one read of K, where
    :func:`center_gram_inplace` reads it and writes it back.
    """
    if not is_host_array(K):
        return _row_stats_xp(K, weights, block)[0]
    w = normalize_weights(weights, K.shape[0])
    row_means = _weighted_row_means(K, w, block)  # K symmetric: row means = column means
    total = float(row_means.mean() if w is None else row_means @ w)
    return CenteringStats(col_means=row_means, total_mean=total)


def center_gram_inplace(K: np.ndarray, weights=None, *, block: int | None = None) -> CenteringStats:
    """Center a symmetric training Gram matrix in place; return the statistics for new points.

    Row means are accumulated in float64 even when K is float32; K is modified a row block at a
    time, so the only extra memory is O(n).
    """
    if not is_host_array(K):
        return _center_gram_inplace_xp(K, weights, block)
    n = K.shape[0]
    w = normalize_weights(weights, n)
    block = block or _block_rows(n)
    row_means = _weighted_row_means(K, w, block)  # K symmetric: row means = column means
    total = float(row_means.mean() if w is None else row_means @ w)
    for s in range(0, n, block):
        Kb = K[s : s + block]
        corr = row_means[s : s + block, None] + row_means[None, :] - total
        Kb -= corr.astype(K.dtype, copy=False)
    return CenteringStats(col_means=row_means, total_mean=total)


def center_gram_out_of_sample(K_new: np.ndarray, stats: CenteringStats, weights=None) -> np.ndarray:
    """Center a block ``K_new[i, j] = k(x_new_i, x_train_j)`` with the training statistics.

    Modifies ``K_new`` in place and returns it (a device K_new: returns the centered block, in
    place for a float64 one).
    """
    if not is_host_array(K_new):
        return _center_out_of_sample_xp(K_new, stats, weights)
    w = normalize_weights(weights, K_new.shape[1])
    Kd = np.asarray(K_new, dtype=np.float64)
    new_means = Kd.mean(axis=1) if w is None else Kd @ w
    corr = new_means[:, None] + stats.col_means[None, :] - stats.total_mean
    K_new -= corr.astype(K_new.dtype, copy=False)
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


# --- device arrays ------------------------------------------------------------------------------
def _f64(A):
    xp = placement_of(A).xp
    return A if str(A.dtype).endswith("float64") else xp.astype(A, xp.float64)


def _normalize_weights_xp(weights, n):
    placement = placement_of(weights)
    xp = placement.xp
    w = xp.reshape(_f64(weights), (-1,))
    if tuple(w.shape) != (n,):
        raise ValueError(f"weights has shape {tuple(w.shape)}, expected ({n},)")
    total = float(xp.sum(w))
    if not (bool(xp.all(xp.isfinite(w))) and not bool(xp.any(w < 0)) and total > 0):
        raise ValueError("weights must be finite, non-negative and not all zero")
    return w / total


def _on_placement(a, like):
    """A host array (a model's statistics) moved to the placement of ``like``."""
    return placement_of(like).asarray(a, dtype=np.float64) if is_host_array(a) else a


def _row_means_xp(K, w, block):
    """``K w`` (row means for w = None) in float64, a row block at a time (K may be float32)."""
    placement = placement_of(K)
    xp = placement.xp
    n = K.shape[0]
    block = block or _block_rows(n)
    out = xp.empty((n,), dtype=xp.float64, device=placement.device)
    for s in range(0, n, block):
        Kb = _f64(K[s : s + block])
        out[s : s + block] = xp.mean(Kb, axis=1) if w is None else Kb @ w
    return out


def _row_stats_xp(K, weights, block):
    w = normalize_weights(weights, K.shape[0])
    w = None if w is None else _on_placement(w, K)
    row_means = _row_means_xp(K, w, block)
    xp = placement_of(K).xp
    total = float(xp.mean(row_means) if w is None else xp.sum(row_means * w))
    return CenteringStats(col_means=row_means, total_mean=total), w


def _center_gram_inplace_xp(K, weights, block):
    """:func:`center_gram_inplace` on a device: float64 statistics, K corrected block by block."""
    stats, _ = _row_stats_xp(K, weights, block)
    xp = placement_of(K).xp
    n = K.shape[0]
    block = block or _block_rows(n)
    r = stats.col_means
    for s in range(0, n, block):
        corr = r[s : s + block, None] + r[None, :] - stats.total_mean
        K[s : s + block, ...] -= xp.astype(corr, K.dtype)
    return stats


def _center_out_of_sample_xp(K_new, stats, weights):
    xp = placement_of(K_new).xp
    w = normalize_weights(weights, K_new.shape[1])
    w = None if w is None else _on_placement(w, K_new)
    Kd = _f64(K_new)
    new_means = xp.mean(Kd, axis=1) if w is None else Kd @ w
    col_means = _on_placement(stats.col_means, K_new)
    corr = new_means[:, None] + col_means[None, :] - stats.total_mean
    if Kd is K_new:
        K_new -= corr
        return K_new
    return K_new - xp.astype(corr, K_new.dtype)
