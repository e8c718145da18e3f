"""Feature moments: the statistic and the solver of exact random-feature KPCA (RNCA / RF-KPCA).

With a random feature map z (:mod:`fastkpca.features`), ``Z Z^T`` approximates the Gram matrix,
so kernel PCA becomes linear PCA of the feature rows (Lopez-Paz et al.'s RNCA, the baseline of
Ghashami, Perry & Phillips 2016, section 2; RF-KPCA in Sriperumbudur & Sterge's slides).  The
centered feature matrix ``Zc = Z - 1 mu^T`` has ``Zc Zc^T = H Z Z^T H``, the approximate centered
Gram, and the same non-zero eigenvalues as the m x m ``Zc^T Zc``, which one pass over the row
blocks accumulates (:class:`FeatureMoments`, merged by sums) and :func:`rf_kpca_exact` solves:
O(n m^2) time, O(m^2) memory, exact PCA of the features.

The one-pass randomized solver (:func:`feature_scatter_sketch` -> :func:`rf_kpca_randomized`)
keeps only the sketch ``Zc^T Zc T`` of that covariance against a fixed m x q test matrix T
(:mod:`fastkpca.statistics.covariance_sketch`) and recovers its top eigenpairs by Tropp,
Yurtsever, Udell & Cevher's fixed-rank PSD approximation (NeurIPS 2017, Algorithm 3):
O(n (d m + m q)) time (the features plus two thin products per block), O(m q) memory; the
m x m covariance is never formed.
"""

from __future__ import annotations

import itertools

import numpy as np

from .._feature_map import float_type
from .._utils import DEFAULT_BLOCK_ROWS
from ..execution import one_blas_thread
from ..execution.arrays import float_dtype, placement_of, row_range
from ..execution.budget import centering_rows
from ..execution.elementwise import nonfinite
from ..execution.feature_ops import ChunkBuffers, sum_over_row_shares
from ..execution.linalg import prefer_dense
from ..features import FeatureMap, feature_blocks, reduce_feature_chunks
from ..solvers import eigh_topk
from .covariance_sketch import ScatterSketch, add_sketch_chunk, fixed_rank_psd, with_sum_column

__all__ = [
    "FeatureMoments",
    "accumulate_moments",
    "feature_moments",
    "head_features",
    "feature_shift",
    "rf_kpca_exact",
    "feature_scatter_sketch",
    "rf_kpca_randomized",
]


class FeatureMoments:
    """Running ``n``, feature sum and shifted Gram ``sum (z - c)(z - c)^T`` (float64 totals).

    The shift c is the mean of the first block's features: ``Z^T Z - n mu mu^T`` cancels
    catastrophically when the mean is large next to the spread (rff: ``|z|^2 = 1``), and the
    "shifted data" algorithm removes that, which makes float32 blocks safe.  Each block's
    product is computed in its precision and added to float64 totals
    (:func:`~fastkpca.execution.feature_ops.sum_over_row_shares`), on the blocks' namespace and
    device; :meth:`merge` moves the other part's totals here.
    """

    def __init__(self, m: int, shift=None):
        self.m = m
        self.n = 0
        self.shift = shift
        self.sum = np.zeros(m)
        self.gram = np.zeros((m, m))
        #: Unit roundoff of the block products (float32's once a float32 block was added).
        self.eps = float(np.finfo(np.float64).eps)

    @property
    def placement(self):
        """Where the totals live (:class:`~fastkpca.execution.arrays.Placement`)."""
        return placement_of(self.gram)

    def _moved(self, placement) -> FeatureMoments:
        """This statistic with its totals (and shift) on ``placement`` (a new object)."""
        out = FeatureMoments.__new__(FeatureMoments)
        out.__dict__.update(vars(self))
        out.sum = placement.asarray(self.sum, np.float64)
        out.gram = placement.asarray(self.gram, np.float64)
        if self.shift is not None:
            out.shift = placement.asarray(self.shift, np.float64)
        return out

    def merge(self, other: FeatureMoments) -> FeatureMoments:
        """Moments of both sets of rows (a new object).  Both must use the same shift, e.g. one
        computed from the first rows and passed to every partial accumulation (tree reductions
        over row blocks); an empty side is neutral."""
        placement = self.placement
        if other.n == 0:
            return self._copy()
        other = other._moved(placement)
        if self.n == 0:
            return other._copy()
        xp = placement.xp
        if (
            self.shift is None
            or other.shift is None
            or not bool(xp.all(placement.asarray(self.shift, np.float64) == other.shift))
        ):
            raise ValueError("cannot merge FeatureMoments accumulated around different shifts")
        out = self._copy()
        out.n += other.n
        out.sum += other.sum
        out.gram += other.gram
        out.eps = max(self.eps, other.eps)
        return out

    def _copy(self) -> FeatureMoments:
        out = FeatureMoments.__new__(FeatureMoments)
        out.__dict__.update(vars(self))
        out.sum, out.gram = _copy(self.sum), _copy(self.gram)
        return out

    def update(self, Z) -> FeatureMoments:
        """Add a block of feature rows (Z is shifted in place: pass a block you own); the totals
        move to Z's placement with the first block."""
        if Z.shape[0] == 0:
            return self
        placement = placement_of(Z)
        if placement != self.placement:
            if self.n:
                raise ValueError(
                    f"FeatureMoments hold rows on {self.placement.name}; merge the statistics "
                    f"instead of adding rows from {placement.name}"
                )
            self.__dict__.update(vars(self._moved(placement)))
        xp = placement.xp
        b = Z.shape[0]
        if self.shift is None:
            self.shift = xp.sum(Z, axis=0, dtype=xp.float64) / b
        else:
            self.shift = placement.asarray(self.shift, np.float64)
        c = xp.astype(self.shift, Z.dtype)  # the shift as subtracted: in the block's precision
        self.n += b
        self.eps = max(self.eps, float(np.finfo(float_dtype(Z.dtype)).eps))
        self.sum += xp.sum(Z, axis=0, dtype=xp.float64)
        Z -= c
        self.gram += sum_over_row_shares(Z, _gram_part)
        return self

    def covariance(self):
        """``Zc^T Zc = sum (z - c)(z - c)^T - n (mu - c)(mu - c)^T`` (float64, symmetric; on
        the statistic's placement)."""
        G = self.gram + self.gram.T  # exact symmetry for the eigensolver; one m x m temporary
        G *= 0.5
        if self.n and self.shift is not None:
            delta = self.sum / self.n - self.shift
            m = G.shape[0]
            step = centering_rows(self.placement, m)  # row blocks: no m x m temporary
            for a in range(0, m, step):
                b = min(a + step, m)
                G[a:b, ...] -= (self.n * delta[a:b])[:, None] * delta[None, :]
        return G

    @property
    def mean(self):
        return self.sum / max(self.n, 1)

    def rounding_scale(self) -> tuple[float, float]:
        """``(scale, eps)`` of the rounding threshold of :func:`fastkpca.solvers.postprocess_eigen`
        for :meth:`covariance`: the larger of float64 arithmetic relative to the uncentered
        ``sum |z|^2 = trace(gram) + 2 c . (sum - n c) + n |c|^2`` and the blocks' precision
        relative to the shifted ``trace(gram)``, as one scale at the larger eps."""
        xp = self.placement.xp
        eps64 = float(np.finfo(np.float64).eps)
        shifted = float(xp.sum(xp.linalg.diagonal(self.gram)))
        if self.shift is None or self.n == 0:
            return shifted, max(self.eps, eps64)
        c = self.shift
        uncentered = (
            shifted
            + 2.0 * float(xp.sum(c * (self.sum - self.n * c)))
            + self.n * float(xp.sum(c * c))
        )
        uncentered = max(uncentered, shifted)
        eps = max(self.eps, eps64)
        return shifted + uncentered * (eps64 / eps), eps


def _copy(a):
    """An independent copy of an array of any namespace."""
    return placement_of(a).xp.asarray(a, copy=True)


def _gram_part(rows):
    """``rows^T rows`` in the rows' precision: :class:`FeatureMoments`' product of a share."""
    return rows.T @ rows


def accumulate_moments(feature_rows, m: int, shift=None) -> FeatureMoments:
    """One pass over ``(start, Z_block)`` feature blocks; see :class:`FeatureMoments`.

    ``shift`` defaults to the mean of the first block's features.
    """
    moments = FeatureMoments(m, shift)
    for _, Z in feature_rows:
        moments.update(Z)
    return moments


def head_features(X_first, fmap: FeatureMap):
    """The features of the first feature block: the first rows of ``X_first`` (the data, or its
    first row block) as :func:`~fastkpca.features.feature_blocks` splits them, so every way of
    reading the same data (an array, a stream of 8192-row blocks, the chunks of a dask array)
    gets the same rows, and the shift and test matrix drawn from them are the same."""
    _, Z = next(feature_blocks([(0, row_range(X_first, 0, DEFAULT_BLOCK_ROWS))], fmap))
    return Z


def feature_shift(X_first, fmap: FeatureMap, Z_first=None):
    """The shift of :class:`FeatureMoments`: the float64 mean of :func:`head_features`
    (``Z_first`` when already computed), in its namespace, so that moments accumulated in
    parts around it merge (:meth:`FeatureMoments.merge`)."""
    Z = head_features(X_first, fmap) if Z_first is None else Z_first
    xp = placement_of(Z).xp
    return xp.sum(Z, axis=0, dtype=xp.float64) / Z.shape[0]


def feature_moments(blocks, fmap: FeatureMap, shift) -> FeatureMoments:
    """:class:`FeatureMoments` of the features of ``(start, block)`` row blocks: the statistic
    that ``RowSource.reduce`` computes over all blocks (or once per dask chunk)."""
    return accumulate_moments(feature_blocks(blocks, fmap), fmap.n_output_features, shift)


def rf_kpca_exact(moments: FeatureMoments, n_components: int, *, rng=None):
    """Top eigenpairs of the centered feature covariance ``Zc^T Zc`` (RNCA).

    Returns
    -------
    eigenvalues : (k,) float64, descending: eigenvalues of ``Zc Zc^T``, the approximate
        centered n x n Gram (the scale of ``KernelPCA.eigenvalues_``)
    components : (k, m) float64, orthonormal rows (the principal axes in feature space)
    """
    C = moments.covariance()
    m = C.shape[0]
    # ARPACK needs O(k) products with the m x m matrix, a dense solve O(m^3): dense for small m
    # or large k (the ``host_arpack`` row of fastkpca.execution.linalg.DENSE_RULE; on a GPU, its
    # full eigh up to the ``device`` row, block Krylov above).
    explicit_dense = prefer_dense(
        m, n_components, explicit=True, placement=moments.placement, iterative="lanczos"
    )
    method = "dense" if explicit_dense else "lanczos"
    scale, eps = moments.rounding_scale()
    # One BLAS thread: idle threads' spin-waits cost more than they save at these sizes.
    with one_blas_thread():
        vals, vecs = eigh_topk(
            C, n_components, method=method, rng=rng, overwrite=True, scale=scale, eps=eps
        )
    return vals, vecs.T


def feature_scatter_sketch(blocks, fmap: FeatureMap, T: np.ndarray, shift):
    """:class:`~fastkpca.statistics.covariance_sketch.ScatterSketch` of the features of
    ``(start, block)`` row blocks: the statistic of ``solver="randomized"``, reduced by
    ``RowSource.reduce`` and merged with :meth:`ScatterSketch.merge
    <fastkpca.statistics.covariance_sketch.ScatterSketch.merge>`.

    Chunk by chunk as computed (:func:`~fastkpca.features.reduce_feature_chunks`), each chunk is
    shifted by ``shift`` and its sketch product and column sums added to its thread's float64
    totals (:func:`~fastkpca.statistics.covariance_sketch.add_sketch_chunk`); with ``delta`` the
    mean of the shifted rows, ``Y = sum Zc^T (Zc T) - n delta (delta^T T)`` and the mean is
    ``shift + delta``.  The sketch lives with the rows.
    """
    m, q = T.shape
    blocks = iter(blocks)
    first = next(blocks, None)
    if first is None:
        return ScatterSketch.empty(m, q)
    X_first = first[1]
    placement = placement_of(X_first)
    dtype = fmap.feature_dtype(float_type(X_first))
    c = placement.asarray(placement.asarray(shift, np.float64), dtype)
    T_sum = placement.asarray(with_sum_column(T, dtype))
    buffers = ChunkBuffers(X_first)

    def new():
        return _SketchTotals(m, q + 1, placement)

    def add(totals, Z):
        Z -= c
        totals.n += Z.shape[0]
        buffer = buffers.get("products", Z.shape[0], q + 1, dtype)
        add_sketch_chunk(totals.YT, buffer, Z, T_sum)

    parts = reduce_feature_chunks(itertools.chain([first], blocks), fmap, new, add, balanced=True)
    n = sum(part.n for part in parts)
    if n == 0:
        return ScatterSketch.empty(m, q)
    YT = parts[0].YT
    for part in parts[1:]:
        YT = YT + part.YT
    xp = placement.xp
    T64 = placement.asarray(T, np.float64)
    delta = YT[q, :] / n  # the mean of the shifted rows (their sum: the products' ones column)
    Y = YT[:q, :].T - n * (delta[:, None] * (delta @ T64)[None, :])
    mean = xp.astype(c, xp.float64) + delta
    return ScatterSketch(int(n), mean, Y, float(np.finfo(dtype).eps))


class _SketchTotals:
    """One thread's float64 totals of :func:`feature_scatter_sketch`: its row count and
    ``[Z T, 1]^T Z`` (the sketch rows and, last, the column sums), on the rows' placement."""

    def __init__(self, m: int, width: int, placement):
        xp = placement.xp
        self.n = 0
        self.YT = xp.zeros((width, m), dtype=xp.float64, device=placement.device)


def rf_kpca_randomized(sketch: ScatterSketch, T: np.ndarray, n_components: int, *, scale=None):
    """Top eigenpairs of the centered feature covariance ``Zc^T Zc`` from its sketch: Tropp et
    al.'s :func:`~fastkpca.statistics.covariance_sketch.fixed_rank_psd`, eigenvalues at most the
    exact solver's, approaching them as q grows past k.  ``scale``: ``sum_i |z_i|^2``, for the
    rounding threshold (None: unknown).

    Returns
    -------
    eigenvalues : (k,) float64, descending
    components : (k, m) float64, orthonormal rows
    (on the sketch's placement)
    """
    if nonfinite(sketch.Y):
        raise ValueError(
            "the random-feature sketch is not finite: the phases w . x overflow float32 "
            "(scale the data or lower gamma)"
        )
    vals, vecs = fixed_rank_psd(sketch.Y, T, n_components, eps=sketch.eps, scale=scale)
    return vals, vecs.T
