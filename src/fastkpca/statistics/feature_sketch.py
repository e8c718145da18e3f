"""Frequent Directions sketches of random features: the statistic and solver of streaming KPCA.

Ghashami, Perry & Phillips (2016), Algorithm 1: each row x is mapped to its random features
``z(x)`` (m columns, :mod:`fastkpca.features`) and the feature rows are sketched by Frequent
Directions (:class:`fastkpca.sketch.FrequentDirections`) into an ell x m matrix B with
``B^T B ~ Z^T Z``; the right singular vectors of B are the approximate kernel principal axes in
feature space.  Memory is O(ell m) for the sketch plus one row block, independent of n; time
O(n m (d + ell)).  :class:`FeatureSketch` (the sketch, the exact float64 feature sum and the row
count) is mergeable (the FD bound holds for the union), so a stream, ``partial_fit`` and a dask
tree reduction build the same kind of model; :func:`skpca_eigen` turns it into eigenpairs.

Centering (which the paper leaves out: its G is uncentered).  KPCA needs the eigenpairs of the
centered feature covariance ``Zc^T Zc = Z^T Z - s s^T / n`` (s the feature sum, kept exactly in
float64).  We take those of ``B^T B - s s^T / n``: this operator maps into the span of the rows of
``[B; s^T]`` (at most ell + 1 dimensions) and vanishes on its orthogonal complement, so with Q an
orthonormal basis of that span its non-zero eigenpairs are exactly those of the small
``Q^T (B^T B - s s^T / n) Q`` (:func:`skpca_eigen`).  The error is only FD's:
``||Zc^T Zc - (B^T B - s s^T / n)||_2 = ||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``,
and when the sketch is at least as large as m nothing is shrunk, so the model equals exact PCA of
the same features up to round-off.  The rows are sketched uncentered, so the feature mean takes
up (about) one of the ell directions; in exchange the sketch does not depend on a data-dependent
shift, which keeps ``partial_fit`` independent of the blocking and makes sketches of different
streams mergeable.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la

from ..features import FeatureMap, feature_blocks
from ..sketch import FrequentDirections
from ..solvers import postprocess_eigen

__all__ = ["FeatureSketch", "feature_sketch", "skpca_eigen"]


class FeatureSketch:
    """A Frequent Directions sketch of feature rows, their float64 sum and their count.

    Parameters
    ----------
    sketch : FrequentDirections
    feature_sum : (m,) float64 array, updated in place
    n : int
    """

    def __init__(self, sketch: FrequentDirections, feature_sum: np.ndarray, n: int = 0):
        self.sketch = sketch
        self.feature_sum = feature_sum
        self.n = int(n)

    @classmethod
    def empty(cls, sketch_size: int, m: int) -> FeatureSketch:
        return cls(FrequentDirections(sketch_size, m), np.zeros(m), 0)

    def update(self, Z: np.ndarray) -> FeatureSketch:
        """Add a block of feature rows."""
        self.sketch.update(Z)
        self.feature_sum += Z.sum(axis=0, dtype=np.float64)
        self.n += Z.shape[0]
        return self

    def merge(self, other: FeatureSketch) -> FeatureSketch:
        """The statistic of the rows of both (a new object; neither input is modified)."""
        return FeatureSketch(
            self.sketch.merge(other.sketch),
            self.feature_sum + other.feature_sum,
            self.n + other.n,
        )


def feature_sketch(
    blocks, fmap: FeatureMap, sketch_size: int, into: FeatureSketch | None = None
) -> FeatureSketch:
    """:class:`FeatureSketch` of the features of ``(start, block)`` row blocks (added to ``into``
    when given): the one per-block step of SKPCA (Ghashami et al. 2016, Algorithm 1)."""
    stat = FeatureSketch.empty(sketch_size, fmap.n_output_features) if into is None else into
    for _, Z in feature_blocks(blocks, fmap):
        stat.update(Z)
    return stat


def skpca_eigen(
    B: np.ndarray,
    feature_sum: np.ndarray,
    n_samples: int,
    n_components: int,
    shrinkage: float = 0.0,
):
    """Top eigenpairs of the centered sketch covariance ``B^T B + delta P_B - s s^T / n``.

    ``delta P_B`` is the compensation of Desai, Ghashami & Phillips (2016, "Improved practical
    matrix sketching with guarantees", compensative Frequent Directions): every shrink removes
    the same ``delta_t`` from each direction the sketch keeps, so a direction that stays in the
    sketch throughout -- the leading principal axes and the feature mean -- has lost exactly the
    total shrinkage ``delta = sum_t delta_t``; adding it back on the row span P_B of B makes the
    leading eigenvalue estimates (nearly) unbiased.  Without it the eigenvalues are biased low by
    up to delta, which on a flat spectrum with a small sketch is most of their size (x500 at
    n = 10^6, m = 1000, ell = 20); with it the mean direction also cancels exactly against
    ``s s^T / n``.  The axes are unaffected by the compensation when B's rows are nearly
    orthogonal, as after a shrink.

    Parameters
    ----------
    B : ndarray (ell, m), float64
        Frequent Directions sketch of the (uncentered) feature rows.
    feature_sum : ndarray (m,), float64
        s, the exact sum of the feature rows.
    n_samples : int
        n >= 1.
    n_components : int
        k <= min(ell + 1, m).
    shrinkage : float
        delta, the total Frequent Directions shrinkage (0 when nothing was shrunk: then the
        result is the exact eigenpairs of ``B^T B - s s^T / n``).

    Returns
    -------
    eigenvalues : (k,) float64, descending, >= 0
        Estimates of the top eigenvalues of ``Zc Zc^T``, the centered approximate n x n Gram
        (the scale of ``KernelPCA.eigenvalues_``), compensated for the shrinkage.
    components : (k, m) float64
        Orthonormal principal axes in feature space, signs fixed by
        :func:`fastkpca.solvers.postprocess_eigen` on the m-dimensional axes.

    Notes
    -----
    With Q an orthonormal basis of the row span of ``[B; s^T]``, the operator is zero on the
    orthogonal complement of span(Q), so the eigenpairs of
    ``M = (B Q)^T (B Q) - (Q^T s)(Q^T s)^T / n`` (size <= ell + 1) lifted by Q are the exact
    non-zero eigenpairs of the m x m operator, at O(ell^2 m) cost.  Negative eigenvalues (the
    sketch's deficit can exceed the mean's share in some direction) are clipped to 0.
    """
    B = B[np.any(B != 0.0, axis=1)]  # zero rows (fewer rows seen than ell) span nothing
    R = np.vstack([B, feature_sum[None, :]])
    Q, _ = la.qr(R.T, mode="economic", check_finite=False)
    BQ = B @ Q
    sQ = feature_sum @ Q
    M = BQ.T @ BQ - np.outer(sQ, sQ) / n_samples
    if shrinkage > 0 and B.shape[0]:
        # delta * P_B in the Q basis: P_B = V V^T over B's right singular vectors
        _, sv, Vt = la.svd(BQ, full_matrices=False, check_finite=False)
        V = Vt[sv > sv[0] * 1e-10]
        M += shrinkage * (V.T @ V)
    M = (M + M.T) / 2
    w, U = la.eigh(M, check_finite=False)
    vals, vecs = postprocess_eigen(w, Q @ U)
    # M is an uncentered difference: its round-off is about size(M) eps trace(B^T B), and
    # eigenvalues below that (e.g. ~1e-14 for identical rows, whose centered Gram is 0) are 0.
    vals[vals <= M.shape[0] * np.finfo(np.float64).eps * float(np.sum(BQ * BQ))] = 0.0
    return vals[:n_components], vecs[:, :n_components].T
