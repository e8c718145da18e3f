"""CountSketch of random features: the statistics and the solver of ``solver="countsketch"``.

Musco & Woodruff (2017, section 3): (1) m random Fourier features (Lemma 7), (2) a fast product
with the Gaussian frequencies (section 3.2.2; ``input_sketch=``, :mod:`fastkpca._input_sketch`),
(3) an input-sparsity low-rank method on the features (Clarkson & Woodruff 2013; Corollary 8).
This module is step (3): feature rows hashed into a t x m CountSketch (:class:`FeatureCountSketch`,
merged by sums, centered exactly afterwards); the top ``q = k + oversamples`` right singular
vectors of the sketch span the subspace, and with ``n_passes=2`` a second pass solves the q x q
Rayleigh-Ritz problem (:func:`ritz_scatter`).  Truncating to q directions before the second pass is
this implementation's choice.  Not implemented: m from the statistical dimension (m is
``n_random_features`` or sized by ``tol``) and t from the target error (``n_buckets``), so no (1 +
eps) guarantee is claimed (``docs/papers/countsketch.md``).
"""

from __future__ import annotations

import numpy as np

from ..execution.arrays import placement_of
from ..execution.feature_ops import bucket_sums, sum_over_row_shares
from ..execution.linalg import prefer_dense
from ..features import FeatureMap, feature_blocks
from ..sketch import CountSketch
from ..solvers import eigh_topk, flip_signs, postprocess_eigen

__all__ = [
    "FeatureCountSketch",
    "countsketch_features",
    "feature_countsketch",
    "ritz_scatter",
    "feature_ritz_scatter",
    "rf_kpca_countsketch",
]


def _sketch_subspace(SZ, S1, mean, q: int, rng, scale=None):
    """Top-q right singular pairs of the centered sketch ``S Zc = S Z - (S 1) mu^T``.

    Returns the squared singular values (eigenvalues of ``(S Zc)^T (S Zc)``) and the m x q
    right singular vectors, from the smaller of the two Gram matrices of the t x m sketch
    (O(t m min(t, m)) to form, then Lanczos for q << its size, a dense solve otherwise), on the
    sketch's placement.  ``scale``: the rounding threshold's scale
    (:func:`fastkpca.solvers.eigh_topk`).
    """
    placement = placement_of(SZ)
    xp = placement.xp
    S1 = placement.asarray(S1, np.float64)
    SZc = SZ - S1[:, None] * mean[None, :]
    t, m = SZc.shape
    small = min(t, m)
    q = min(q, small)
    dense = prefer_dense(small, q, explicit=True, placement=placement, iterative="lanczos")
    method = "dense" if dense else "lanczos"
    if m <= t:
        return eigh_topk(SZc.T @ SZc, q, method=method, rng=rng, overwrite=True, scale=scale)
    # t < m: left singular vectors from the t x t Gram, then V = (S Zc)^T U / sigma.
    vals, U = eigh_topk(SZc @ SZc.T, q, method=method, rng=rng, overwrite=True, scale=scale)
    V = SZc.T @ U
    norms = xp.linalg.vector_norm(V, axis=0)
    V /= xp.where(norms > 0, norms, xp.ones_like(norms))
    return vals, V


class FeatureCountSketch:
    """``S Z``, ``S 1``, the float64 feature sum and the count of a set of feature rows.

    S is the CountSketch of the global row index (:class:`fastkpca.sketch.CountSketch`'s hash),
    so the statistics of disjoint row ranges of one data set add up to those of all their rows
    (:meth:`merge`).  ``SZ`` and ``sum`` live with the feature rows (moved to their placement
    with the first block); ``S1``, the hash's, is a host array.
    """

    def __init__(self, n_buckets: int, m: int):
        self.SZ = np.zeros((n_buckets, m))
        self.S1 = np.zeros(n_buckets)
        self.sum = np.zeros(m)
        self.n = 0

    def merge(self, other: FeatureCountSketch) -> FeatureCountSketch:
        """The statistic of the rows of both (a new object; neither input is modified).  It
        lives where this one does (where the other does when this one is empty)."""
        home = placement_of(self.SZ if self.n or not other.n else other.SZ)
        out = FeatureCountSketch.__new__(FeatureCountSketch)
        out.SZ = home.asarray(self.SZ, np.float64) + home.asarray(other.SZ, np.float64)
        out.sum = home.asarray(self.sum, np.float64) + home.asarray(other.sum, np.float64)
        out.S1, out.n = self.S1 + other.S1, self.n + other.n
        return out

    def _add(self, S, Z) -> None:
        """Add the feature rows Z hashed by S (their columns of the sketching matrix): the
        signed rows summed into their buckets in Z's precision, then into a float64 total
        (:func:`~fastkpca.execution.feature_ops.bucket_sums`)."""
        placement = placement_of(Z)
        xp = placement.xp
        self.SZ = placement.asarray(self.SZ, np.float64)
        self.sum = placement.asarray(self.sum, np.float64)
        self.SZ += bucket_sums(S, Z)
        self.S1 += np.asarray(S.sum(axis=1)).ravel()
        self.sum += xp.sum(Z, axis=0, dtype=xp.float64)
        self.n += Z.shape[0]

    @property
    def mean(self):
        return self.sum / max(self.n, 1)


def countsketch_features(feature_rows, n_buckets: int, m: int, seed: int) -> FeatureCountSketch:
    """:class:`FeatureCountSketch` of ``(start, Z_block)`` feature blocks (``start``: global
    index of the block's first row); the hash (bucket and sign of each global row index) is
    :class:`~fastkpca.sketch.CountSketch`'s, on the host, whatever the rows' placement."""
    cs = CountSketch(n_buckets, m, random_state=seed)
    out = FeatureCountSketch(n_buckets, m)
    for start, Z in feature_rows:
        out._add(cs.sketching_matrix(start, start + Z.shape[0]), Z)
    return out


def feature_countsketch(blocks, fmap: FeatureMap, n_buckets: int, seed: int):
    """:class:`FeatureCountSketch` of the features of ``(start, block)`` row blocks (the first
    pass's statistic)."""
    return countsketch_features(
        feature_blocks(blocks, fmap), n_buckets, fmap.n_output_features, seed
    )


def ritz_scatter(feature_rows, V, mean):
    """``M = V^T Zc^T Zc V = sum_b (Z_b V - 1 (mu^T V))^T (...)``, q x q in float64.

    The Rayleigh-Ritz statistic of the countsketch solver's second pass: the scatters of
    disjoint sets of rows add up.  ``Z_b V`` in the features' precision; the scatter of the
    projections over shares of rows, in float64
    (:func:`~fastkpca.execution.feature_ops.sum_over_row_shares`); on V's placement.
    """
    placement = placement_of(V)
    xp = placement.xp
    q = V.shape[1]
    M = xp.zeros((q, q), dtype=xp.float64, device=placement.device)
    muV = placement.asarray(mean, np.float64) @ V
    cast: dict = {}
    for _, Z in feature_rows:
        if Z.dtype not in cast:
            cast[Z.dtype] = placement.asarray(V, Z.dtype)
        Y = xp.astype(Z @ cast[Z.dtype], xp.float64) - muV
        M += sum_over_row_shares(Y, _scatter_part)
    return (M + M.T) / 2


def _scatter_part(rows):
    """``rows^T rows`` (a SYRK: numpy reads ``rows.T @ rows`` as one)."""
    return rows.T @ rows


def feature_ritz_scatter(blocks, fmap: FeatureMap, V, mean):
    """:func:`ritz_scatter` of the features of ``(start, block)`` row blocks (the second pass's
    statistic)."""
    return ritz_scatter(feature_blocks(blocks, fmap), V, mean)


def rf_kpca_countsketch(
    source,
    fmap: FeatureMap,
    n_components: int,
    *,
    n_buckets: int,
    oversamples: int,
    n_passes: int,
    seed: int,
):
    """Top eigenpairs of ``Zc^T Zc`` from a CountSketch of Z (Musco & Woodruff 2017, sec. 3.2).

    Parameters
    ----------
    source : fastkpca.source.RowSource
        The rows; one pass per ``source.reduce`` (two for ``n_passes=2``).
    fmap : FeatureMap
        The feature map; m = ``fmap.n_output_features``.
    n_components : k.
    n_buckets : t, the CountSketch rows.
    oversamples : p; the sketch subspace has q = min(k + p, t, m) vectors.
    n_passes : 1 (sketch only) or 2 (sketch, then Rayleigh-Ritz on a second pass).
    seed : hash seed of the CountSketch.

    Returns
    -------
    eigenvalues, components, n, mean : as :func:`rf_kpca_exact`, plus the sample count and the
        feature mean (on the placement of the features).

    Notes
    -----
    ``(S Zc)^T (S Zc)`` is unbiased for ``Zc^T Zc`` with error ``~ ||Zc||_F^2 / sqrt(t)`` (Clarkson
    & Woodruff 2013), so its top right singular vectors V nearly span the top eigenvectors; the
    two-pass variant's Rayleigh-Ritz eigenvalues never overestimate.
    """
    sk = source.reduce(feature_countsketch, FeatureCountSketch.merge, fmap, n_buckets, seed)
    xp = placement_of(sk.SZ).xp
    m = fmap.n_output_features
    n, mean = sk.n, sk.mean
    q = min(n_components + oversamples, n_buckets, m)
    if q < n_components:
        raise ValueError(
            f"n_buckets={n_buckets} gives at most {q} components, fewer than "
            f"n_components={n_components}"
        )
    # The rounding threshold's scale: sum_i |z_i|^2, estimated without bias by the uncentered
    # sketch's ||S Z||_F^2 (the centered one's trace is 0 for identical rows); the features'
    # precision is the products' (float32 for the Fourier maps).
    scale = float(xp.sum(sk.SZ * sk.SZ))
    eps = float(np.finfo(fmap.feature_dtype(np.float64)).eps)
    sq, V = _sketch_subspace(sk.SZ, sk.S1, mean, q, np.random.default_rng(seed), scale)
    if n_passes == 1:
        vals, vecs = postprocess_eigen(sq[:n_components], V[:, :n_components], scale=scale, eps=eps)
        return vals, vecs.T, n, mean
    M = source.reduce(feature_ritz_scatter, _added, fmap, V, mean)  # second pass
    vals, W = eigh_topk(M, n_components, method="dense", overwrite=True, scale=scale, eps=eps)
    comps = V @ W
    flip_signs(comps)  # signs fixed on the m-dimensional axes, not on the q-dimensional W
    return vals, comps.T, n, mean


def _added(a, b):
    """The sum of two Rayleigh-Ritz scatters (the merge of :func:`feature_ritz_scatter`), on
    a's placement."""
    return a + placement_of(a).asarray(b, np.float64)
