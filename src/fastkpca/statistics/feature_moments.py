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

from .._utils import DEFAULT_BLOCK_ROWS
from ..execution import CHUNK_ROWS, SHARE_ROWS, one_blas_thread, sum_over_shares
from ..execution.arrays import HOST, is_host_array, placement_of, to_host
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

    The shift c is the mean of the first block's features.  Accumulating ``Z^T Z`` and removing
    ``n mu mu^T`` at the end cancels catastrophically when the features' mean is large next to
    their spread (it often is: for rff ``|z|^2 = 1`` while the centered eigenvalues may be 1e-3
    of that); accumulating around a shift close to the mean removes the cancellation (the
    "shifted data" variance algorithm), which is what makes float32 blocks safe.

    Each block's product ``Z_b^T Z_b`` is computed in the block's precision and added to a float64
    total.  For float32 features that is an SGEMM: 2-2.5x faster than DGEMM here, and this
    O(n m^2) product is the main cost of the fit.  Its error is about ``eps32 * sqrt(block
    rows)`` (~5e-6 for 8192 rows, pairwise-like blocked summation inside BLAS) relative to the
    block's *shifted*, i.e. nearly centered, second moment; blocks are summed in float64, so the
    relative error does not grow with n.  float64 features use DGEMM throughout.
    (``Z.T @ Z`` through numpy's matmul was measured faster than the half-flop SYRK of this
    OpenBLAS build, so the full product is used.)

    On a device (feature blocks that are PyTorch tensors or CuPy arrays) the totals live there,
    in the blocks' namespace, and move there with the first device block: the same shifted
    products (one float32 GEMM per feature chunk for float32 features), the column sums of the
    shifted chunk in its precision added to float64 totals (``sum = sum(z - c) + b c``, with c
    the shift as subtracted), and no host synchronisation until the solver reads the totals.
    :meth:`merge` moves the other part's totals to this one's placement.
    """

    def __init__(self, m: int, shift=None, placement=HOST):
        self.m = m
        self.n = 0
        self.placement = placement
        self.shift = None if shift is None else placement.asarray(shift, np.float64)
        self.sum = _zeros(placement, (m,))
        self.gram = _zeros(placement, (m, m))
        #: Unit roundoff of the block products (float32's once a float32 block was added).
        self.eps = float(np.finfo(np.float64).eps)

    def __getstate__(self) -> dict:
        # The placement holds a module (its namespace): pickled (dask) as where the totals are.
        state = dict(vars(self))
        state["placement"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.placement = placement_of(self.gram)

    def _moved(self, placement) -> FeatureMoments:
        """This statistic with its totals on ``placement`` (itself when they are there)."""
        if placement == self.placement:
            return self
        out = FeatureMoments(self.m, None if self.shift is None else to_host(self.shift), placement)
        out.n, out.eps = self.n, self.eps
        out.sum = placement.asarray(to_host(self.sum), np.float64)
        out.gram = placement.asarray(to_host(self.gram), np.float64)
        return out

    def merge(self, other: FeatureMoments) -> FeatureMoments:
        """Moments of both sets of rows (a new object).  Both must use the same shift, e.g. one
        computed from the first rows and passed to every partial accumulation (tree reductions
        over row blocks); an empty side is neutral."""
        if other.n == 0:
            return self._copy()
        if self.n == 0:
            return other._moved(self.placement)._copy()
        other = other._moved(self.placement)
        if (
            self.shift is None
            or other.shift is None
            or not np.array_equal(to_host(self.shift), to_host(other.shift))
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
        """Add a block of feature rows (Z is shifted in place: pass a block you own)."""
        if Z.shape[0] == 0:
            return self
        if not (self.placement.host and is_host_array(Z)):
            return self._update_xp(Z)
        if self.shift is None:
            self.shift = Z.mean(axis=0, dtype=np.float64)
        self.n += Z.shape[0]
        self.eps = max(self.eps, float(np.finfo(Z.dtype).eps))
        self.sum += Z.sum(axis=0, dtype=np.float64)
        Z -= self.shift.astype(Z.dtype)
        self.gram += _gram(Z)
        return self

    def _update_xp(self, Z) -> FeatureMoments:
        """:meth:`update` for a device block (the class notes); the totals move to its device
        when this is the first block."""
        placement = placement_of(Z)
        if placement != self.placement:
            if self.n:
                raise ValueError(
                    f"FeatureMoments hold rows on {self.placement.name}; merge the statistics "
                    f"instead of adding rows from {placement.name}"
                )
            self.__dict__.update(vars(self._moved(placement)))
        xp = placement.xp
        if self.shift is None:
            self.shift = xp.mean(xp.astype(Z, xp.float64), axis=0)
        b = Z.shape[0]
        self.n += b
        self.eps = max(
            self.eps, float(np.finfo(np.float32 if Z.dtype == xp.float32 else np.float64).eps)
        )
        c = xp.astype(self.shift, Z.dtype)
        Z -= c
        self.sum += xp.astype(xp.sum(Z, axis=0), xp.float64) + b * xp.astype(c, xp.float64)
        self.gram += xp.astype(xp.permute_dims(Z, (1, 0)) @ Z, xp.float64)
        return self

    def covariance(self):
        """``Zc^T Zc = sum (z - c)(z - c)^T - n (mu - c)(mu - c)^T`` (float64, symmetric; on
        the statistic's placement)."""
        if not self.placement.host:
            xp = self.placement.xp
            G = (self.gram + xp.permute_dims(self.gram, (1, 0))) / 2
            if self.n and self.shift is not None:
                delta = self.sum / self.n - self.shift
                G = G - self.n * (delta[:, None] * delta[None, :])
            return G
        G = (self.gram + self.gram.T) / 2  # exact symmetry for the eigensolver
        if self.n and self.shift is not None:
            delta = self.sum / self.n - self.shift
            G -= self.n * np.outer(delta, delta)
        return G

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)

    def rounding_scale(self) -> tuple[float, float]:
        """``(scale, eps)`` of the rounding threshold of :func:`fastkpca.solvers.postprocess_eigen`
        for :meth:`covariance`: ``eps scale`` is the size of its rounding errors.

        Two sources: float64 arithmetic relative to the uncentered second moment
        ``sum |z|^2 = trace(gram) + 2 c . (sum - n c) + n |c|^2`` (the features' own size: for
        identical rows the covariance is 0 but its computed eigenvalues are ~1e-30, not 0), and
        the block products in the features' precision (``eps``: float32's for float32 features)
        relative to the *shifted* second moment ``trace(gram)``, which they accumulate.  Returned
        as one scale at the larger eps.
        """
        eps64 = float(np.finfo(np.float64).eps)
        if self.placement.host:
            shifted = float(np.trace(self.gram))
        else:
            xp = self.placement.xp
            shifted = float(xp.sum(xp.linalg.diagonal(self.gram)))
        if self.shift is None or self.n == 0:
            return shifted, max(self.eps, eps64)
        c = self.shift
        if self.placement.host:
            uncentered = shifted + 2.0 * float(c @ (self.sum - self.n * c)) + self.n * float(c @ c)
        else:
            uncentered = (
                shifted
                + 2.0 * float(xp.sum(c * (self.sum - self.n * c)))
                + self.n * float(xp.sum(c * c))
            )
        uncentered = max(uncentered, shifted)
        eps = max(self.eps, eps64)
        return shifted + uncentered * (eps64 / eps), eps


def _zeros(placement, shape):
    """float64 zeros on ``placement``."""
    if placement.host:
        return np.zeros(shape)
    xp = placement.xp
    return xp.zeros(shape, dtype=xp.float64, device=placement.device)


def _copy(a):
    """An independent copy of a host or device array."""
    if isinstance(a, np.ndarray):
        return a.copy()
    return placement_of(a).xp.asarray(a, copy=True)


def _gram(Z: np.ndarray) -> np.ndarray:
    """``Z^T Z`` as float64: one product in Z's precision per share of
    :data:`~fastkpca.execution.SHARE_ROWS` rows, the shares spread over the threads with BLAS
    held to one thread in each (:func:`~fastkpca.execution.sum_over_shares`), added in float64.

    Measured on the loaded 2-core development machine (load average 7; 16384 x 1000 float32):
    numpy's two-threaded product took 0.99 s, a one-threaded one 0.47 s and two one-threaded
    halves 0.52 s; an idle machine gives the two halves both cores without BLAS's spin-waits.
    """

    def share(start, stop):
        rows = Z[start:stop]
        return rows.T @ rows

    return sum_over_shares(Z.shape[0], share, share_rows=SHARE_ROWS)


def accumulate_moments(feature_rows, m: int, shift: np.ndarray | None = None) -> FeatureMoments:
    """One pass over ``(start, Z_block)`` feature blocks; see :class:`FeatureMoments`.

    ``shift`` defaults to the mean of the first block's features.
    """
    moments = FeatureMoments(m, shift, HOST if shift is None else placement_of(shift))
    for _, Z in feature_rows:
        moments.update(Z)
    return moments


def head_features(X_first, fmap: FeatureMap) -> np.ndarray:
    """The features of the first feature block: the first rows of ``X_first`` (the data, or its
    first row block) as :func:`~fastkpca.features.feature_blocks` splits them, so every way of
    reading the same data (an array, a stream of 8192-row blocks, the chunks of a dask array)
    gets the same rows, and the shift and test matrix drawn from them are the same."""
    _, Z = next(feature_blocks([(0, X_first[:DEFAULT_BLOCK_ROWS])], fmap))
    return Z


def feature_shift(X_first, fmap: FeatureMap, Z_first: np.ndarray | None = None) -> np.ndarray:
    """The shift of :class:`FeatureMoments`: the mean of :func:`head_features` (``Z_first``
    when already computed), so that moments accumulated in parts around it merge
    (:meth:`FeatureMoments.merge`)."""
    Z = head_features(X_first, fmap) if Z_first is None else Z_first
    if not is_host_array(Z):
        xp = placement_of(Z).xp
        return xp.mean(xp.astype(Z, xp.float64), axis=0)
    return Z.mean(axis=0, dtype=np.float64)


def feature_moments(blocks, fmap: FeatureMap, shift: np.ndarray) -> FeatureMoments:
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
    # One BLAS thread: k + a few dozen m x m products or a dense m x m eigh, where idle
    # threads' spin-waits cost more than they save (1.7 s against ~0.1 s measured, m = 1000,
    # k = 10, on the loaded 2-core development machine).
    with one_blas_thread():
        vals, vecs = eigh_topk(
            C, n_components, method=method, rng=rng, overwrite=True, scale=scale, eps=eps
        )
    return vals, vecs.T


def feature_scatter_sketch(blocks, fmap: FeatureMap, T: np.ndarray, shift: np.ndarray):
    """:class:`~fastkpca.statistics.covariance_sketch.ScatterSketch` of the features of
    ``(start, block)`` row blocks: the statistic of ``solver="randomized"``, which
    ``RowSource.reduce`` computes over all blocks (or once per dask chunk) and merges with
    :meth:`ScatterSketch.merge <fastkpca.statistics.covariance_sketch.ScatterSketch.merge>`.

    The features are reduced chunk by chunk while in cache
    (:func:`~fastkpca.features.reduce_feature_chunks`), on every core: each chunk Z (float32
    for the Fourier maps) is shifted by ``shift`` (the first block's mean features, as for
    :class:`FeatureMoments`), and its sketch product ``(Zc T)^T Zc`` and column sums are added
    to its thread's float64 totals, both from one product
    (:func:`~fastkpca.statistics.covariance_sketch.add_sketch_chunk`, SGEMMs in the features'
    precision).
    With ``s`` the sum of the shifted rows, the scatter about their mean is
    ``sum Zc^T Zc - s s^T / n``, so the sketch is ``Y = sum Zc^T (Zc T) - n delta (delta^T T)``
    with ``delta = s / n``, and the mean is ``shift + delta`` (float32 rounding relative to the
    features' spread, not their offset: the "shifted data" algorithm).
    """
    m, q = T.shape
    blocks = iter(blocks)
    first = next(blocks, None)
    if first is None:
        return ScatterSketch.empty(m, q)
    blocks = itertools.chain([first], blocks)
    if not is_host_array(first[1]):
        return _feature_scatter_sketch_xp(blocks, fmap, T, shift, placement_of(first[1]))
    dtype = np.dtype(fmap.feature_dtype(np.float64))
    c = np.asarray(shift, dtype=np.float64).astype(dtype)
    T_sum = with_sum_column(T, dtype)

    def new():
        return _SketchTotals(m, q + 1, dtype)

    def add(totals, Z):
        Z -= c
        totals.n += Z.shape[0]
        add_sketch_chunk(totals.YT, totals.P, Z, T_sum)

    parts = reduce_feature_chunks(blocks, fmap, new, add)
    n = sum(part.n for part in parts)
    if n == 0:
        return ScatterSketch.empty(m, q)
    YT = sum(part.YT for part in parts)
    delta = YT[q] / n  # the mean of the shifted rows (their sum: P's ones column)
    Y = YT[:q].T
    Y -= n * np.outer(delta, delta @ T)
    mean = c.astype(np.float64) + delta
    return ScatterSketch(int(n), mean, Y, float(np.finfo(dtype).eps))


def _feature_scatter_sketch_xp(blocks, fmap: FeatureMap, T, shift, placement) -> ScatterSketch:
    """:func:`feature_scatter_sketch` of device blocks: the same shifted products on large
    feature chunks (``(Zc T)^T Zc`` and the column sums in the features' precision, float64
    totals on the device)."""
    xp = placement.xp
    m, q = T.shape
    T64 = placement.asarray(to_host(T), np.float64)
    shift64 = placement.asarray(to_host(shift), np.float64)
    YT = xp.zeros((q, m), dtype=xp.float64, device=placement.device)
    total = xp.zeros((m,), dtype=xp.float64, device=placement.device)
    n, eps, cast = 0, float(np.finfo(np.float64).eps), {}
    for _, Z in feature_blocks(blocks, fmap):
        if Z.dtype not in cast:
            cast[Z.dtype] = (xp.astype(shift64, Z.dtype), xp.astype(T64, Z.dtype))
            eps = max(eps, float(np.finfo(np.float32 if Z.dtype == xp.float32 else np.float64).eps))
        c, Tz = cast[Z.dtype]
        Z -= c
        n += Z.shape[0]
        YT += xp.astype(xp.permute_dims(Z @ Tz, (1, 0)) @ Z, xp.float64)
        total += xp.astype(xp.sum(Z, axis=0), xp.float64)
    if n == 0:
        return ScatterSketch.empty(m, q)
    # the shift as subtracted: that of the features' dtype (float32 for the Fourier maps)
    c64 = xp.astype(next(iter(cast.values()))[0], xp.float64)
    delta = total / n
    Y = xp.permute_dims(YT, (1, 0)) - n * (delta[:, None] * (delta @ T64)[None, :])
    return ScatterSketch(int(n), c64 + delta, Y, eps)


class _SketchTotals:
    """One thread's float64 totals of :func:`feature_scatter_sketch` (the sketch rows and, last,
    the column sums) and its product buffer for one chunk."""

    def __init__(self, m: int, width: int, dtype):
        self.n = 0
        self.YT = np.zeros((width, m))
        self.P = np.empty((CHUNK_ROWS, width), dtype)


def rf_kpca_randomized(sketch: ScatterSketch, T: np.ndarray, n_components: int, *, scale=None):
    """Top eigenpairs of the centered feature covariance ``Zc^T Zc`` from its sketch.

    Tropp et al.'s fixed-rank PSD approximation
    (:func:`~fastkpca.statistics.covariance_sketch.fixed_rank_psd`): the eigenpairs of the
    rank-k truncation of the Nystrom approximation ``Y (T^T Y)^+ Y^T`` of the covariance.  Its
    eigenvalues are at most the exact solver's (the approximation is dominated by the
    covariance) and approach them as the sketch width q grows past k; see
    ``RandomFeatureKPCA``'s ``oversamples`` for the measured gap.

    ``scale``: the trace of the uncentered feature Gram, ``sum_i |z_i|^2`` (e.g. the kernel's
    ``sum_i k(x_i, x_i)``), for the rounding threshold (None: unknown).

    Returns
    -------
    eigenvalues : (k,) float64, descending
    components : (k, m) float64, orthonormal rows
    """
    if not is_host_array(sketch.Y):
        # The reconstruction is small (m x q): on the host, from host copies, moved back.
        placement = placement_of(sketch.Y)
        Y = to_host(sketch.Y)
        if not np.isfinite(Y).all():
            raise ValueError(
                "the random-feature sketch is not finite: the phases w . x overflow float32 "
                "(scale the data or lower gamma)"
            )
        vals, vecs = fixed_rank_psd(Y, to_host(T), n_components, eps=sketch.eps, scale=scale)
        return placement.asarray(vals, np.float64), placement.asarray(vecs.T, np.float64)
    vals, vecs = fixed_rank_psd(sketch.Y, T, n_components, eps=sketch.eps, scale=scale)
    return vals, vecs.T
