"""CountSketch of random features: the statistics and the solver of ``solver="countsketch"``.

Musco & Woodruff (2017, section 3) get kernel PCA for shift-invariant kernels in input-sparsity
time in three steps: (1) m random Fourier features, m set from the statistical dimension of the
kernel matrix (Lemma 7: then the feature matrix Z is a projection-cost-preserving sketch of the
kernelized data, so a near-best rank-k subspace of Z is one of the data, their guarantee (2));
(2) the features computed with a fast multiplication by the Gaussian frequency matrix
(section 3.2.2, after Kapralov et al. 2016), so that ``X W`` costs O(nnz(X)) plus lower-order
terms instead of O(nnz(X) m); (3) an input-sparsity low-rank method on Z (Clarkson & Woodruff
2013; their Corollary 8).

``RandomFeatureKPCA(solver="countsketch")`` implements step (3), and step (2) with
``features="rff", input_sketch=...`` (``fastkpca._input_sketch``: a CountSketch of the d
coordinates to t, then a dense Gaussian t x m/2, so ``X W`` costs O(nnz(X) + n t m / 2)); without
``input_sketch`` the features are computed exactly:

- the features ``Z = [cos(X W), sin(X W)] / sqrt(m/2)`` (``features="rff"`` draws the paper's
  i.i.d. Gaussian frequencies; the default ``"auto"`` draws orthogonal ones, ``orf``) are formed
  one row block at a time: ``X @ W`` costs O(nnz(X) m) on CSR input (O(n d m) dense), cos / sin
  O(n m), per pass; the n x m matrix Z is never held;
- the feature rows are hashed into a t x m CountSketch ``S Z`` (:class:`FeatureCountSketch`,
  merged by sums): O(n m) time, O(t m) memory; centering is exact afterwards
  (``S Zc = S Z - (S 1) mu^T``);
- the top ``q = k + oversamples`` right singular vectors V of ``S Zc`` (from the smaller Gram of
  the sketch: O(t m min(t, m)), independent of n) span the approximate top subspace; with
  ``n_passes=2`` (default) a second pass recomputes the features and solves the q x q
  eigenproblem of ``V^T Zc^T Zc V`` exactly (Rayleigh-Ritz, :func:`ritz_scatter`,
  O(n m q)); with ``n_passes=1`` the sketch's squared singular values are the eigenvalues.
  Clarkson & Woodruff project onto the whole t-dimensional row space of ``S Z``; truncating to
  its top q directions first is this implementation's choice (it keeps the second pass at
  O(n m q)).

What it does not implement:

- with exact features (no ``input_sketch``), the fast Gaussian multiplication of step (2):
  then ``X @ W`` costs O(nnz(X) m) plus O(n m) for cos / sin and O(n m) for the sketch, per
  pass, so the fit is O(nnz(X) m + n m (1 + q)), not O(nnz(X)) + n poly(k / eps).  On sparse
  data with few non-zeros per row (Adult: ~14 of 123) ``X @ W`` is the smaller part: the
  dense O(n m) feature work and the n-independent SVD of the t x m sketch dominate (measured in
  ``benchmarks/countsketch_paper.py``, ``docs/papers/countsketch.md``);
- the choice of m from the statistical dimension: m is ``n_features`` (default 1000; the
  ``tol`` search of ``n_features="auto"`` sizes m by the estimated error instead);
- sketch sizes from the target error: t is ``n_buckets`` (default ``max(2000, 50 q)``), not
  derived from eps (Clarkson & Woodruff's CountSketch bound is t = O(k^2 / eps^2)), so no
  (1 + eps) guarantee is claimed; the relative error is measured instead.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.linalg import blas

from ..execution.arrays import is_host_array, placement_of, to_host
from ..execution.linalg import prefer_dense
from ..features import FeatureMap, feature_blocks
from ..solvers import eigh_topk, flip_signs, postprocess_eigen

__all__ = [
    "FeatureCountSketch",
    "countsketch_features",
    "feature_countsketch",
    "ritz_scatter",
    "feature_ritz_scatter",
    "rf_kpca_countsketch",
]


def _sketch_subspace(SZ: np.ndarray, S1: np.ndarray, mean: np.ndarray, q: int, rng, scale=None):
    """Top-q right singular pairs of the centered sketch ``S Zc = S Z - (S 1) mu^T``.

    Returns the squared singular values (eigenvalues of ``(S Zc)^T (S Zc)``) and the m x q
    right singular vectors, from the smaller of the two Gram matrices of the t x m sketch
    (O(t m min(t, m)) to form, then Lanczos for q << its size, a dense solve otherwise).
    ``scale``: the rounding threshold's scale (:func:`fastkpca.solvers.eigh_topk`).
    """
    SZc = SZ - np.outer(S1, mean)
    t, m = SZc.shape
    small = min(t, m)
    q = min(q, small)
    dense = prefer_dense(small, q, explicit=True, iterative="lanczos")
    method = "dense" if dense else "lanczos"
    if m <= t:
        return eigh_topk(SZc.T @ SZc, q, method=method, rng=rng, overwrite=True, scale=scale)
    # t < m: left singular vectors from the t x t Gram, then V = (S Zc)^T U / sigma.
    vals, U = eigh_topk(SZc @ SZc.T, q, method=method, rng=rng, overwrite=True, scale=scale)
    V = SZc.T @ U
    norms = np.linalg.norm(V, axis=0)
    V /= np.where(norms > 0, norms, 1.0)
    return vals, V


class FeatureCountSketch:
    """``S Z``, ``S 1``, the float64 feature sum and the count of a set of feature rows.

    S is the CountSketch of the global row index (:class:`fastkpca.sketch.CountSketch`'s hash),
    so the statistics of disjoint row ranges of one data set add up to those of all their rows
    (:meth:`merge`).
    """

    def __init__(self, n_buckets: int, m: int):
        self.SZ = np.zeros((n_buckets, m))
        self.S1 = np.zeros(n_buckets)
        self.sum = np.zeros(m)
        self.n = 0

    def merge(self, other: FeatureCountSketch) -> FeatureCountSketch:
        """The statistic of the rows of both (a new object; neither input is modified).  A
        device statistic's ``SZ`` and ``sum`` stay on its device; the other's move there."""
        out = FeatureCountSketch.__new__(FeatureCountSketch)
        home = placement_of(self.SZ)
        if not home.host or not is_host_array(other.SZ):
            if home.host and other.n:
                home = placement_of(other.SZ)
            SZ_a, SZ_b, sum_a, sum_b = (
                home.asarray(to_host(a), np.float64)
                for a in (self.SZ, other.SZ, self.sum, other.sum)
            )
            out.SZ, out.sum = SZ_a + SZ_b, sum_a + sum_b
        else:
            out.SZ, out.sum = self.SZ + other.SZ, self.sum + other.sum
        out.S1, out.n = self.S1 + other.S1, self.n + other.n
        return out

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)


def countsketch_features(feature_rows, n_buckets: int, m: int, seed: int) -> FeatureCountSketch:
    """:class:`FeatureCountSketch` of ``(start, Z_block)`` feature blocks (``start``: global
    index of the block's first row)."""
    from ..sketch import CountSketch

    # The hash (bucket and sign of each global row index) is CountSketch's; the products are
    # formed here so that float32 features are hashed in float32 (S has one +-1 per column, so
    # each bucket sums ~r / t rows of a block: no precision is lost before the float64 total),
    # 2.5x faster than CountSketch.update, which works in float64.
    cs = CountSketch(n_buckets, m, random_state=seed)
    out = FeatureCountSketch(n_buckets, m)
    for start, Z in feature_rows:
        if not is_host_array(Z):
            _add_device_rows(out, cs, start, Z)
            continue
        S = cs.sketching_matrix(start, start + Z.shape[0])
        out.SZ += S.astype(Z.dtype) @ Z
        out.S1 += np.asarray(S.sum(axis=1)).ravel()
        out.sum += Z.sum(axis=0, dtype=np.float64)
        out.n += Z.shape[0]
    return out


def _add_device_rows(out: FeatureCountSketch, cs, start: int, Z) -> None:
    """Add a device feature block to ``out`` (its ``SZ`` and ``sum`` move to the device): the
    hash of the block's global row indices is computed on the host (O(b) integers, the same
    hash as for host rows) and moved; the signed rows are added into their buckets in the
    features' precision (PyTorch's ``index_add_``; a namespace without it adds the one-hot
    product ``S Z``), the bucket totals in float64."""
    placement = placement_of(Z)
    xp = placement.xp
    if is_host_array(out.SZ):
        out.SZ = placement.asarray(out.SZ, np.float64)
        out.sum = placement.asarray(out.sum, np.float64)
    S = cs.sketching_matrix(start, start + Z.shape[0]).tocsc()  # one entry per column (row)
    S.sort_indices()
    buckets = placement.asarray(S.indices.astype(np.int64), np.int64)
    signs = placement.asarray(S.data, np.float32 if Z.dtype == xp.float32 else np.float64)
    signed = Z * signs[:, None]
    if placement.is_torch:
        import torch

        SZ = torch.zeros(out.SZ.shape, dtype=Z.dtype, device=Z.device)
        SZ.index_add_(0, buckets, signed)
    else:
        SZ = placement.asarray(S.toarray(), np.float32 if Z.dtype == xp.float32 else np.float64)
        SZ = SZ @ Z
    out.SZ += xp.astype(SZ, xp.float64)
    out.S1 += np.asarray(S.sum(axis=1)).ravel()
    out.sum += xp.astype(xp.sum(Z, axis=0), xp.float64)
    out.n += Z.shape[0]


def feature_countsketch(blocks, fmap: FeatureMap, n_buckets: int, seed: int):
    """:class:`FeatureCountSketch` of the features of ``(start, block)`` row blocks (the first
    pass's statistic)."""
    return countsketch_features(
        feature_blocks(blocks, fmap), n_buckets, fmap.n_output_features, seed
    )


def ritz_scatter(feature_rows, V: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``M = V^T Zc^T Zc V = sum_b (Z_b V - 1 (mu^T V))^T (...)``, q x q in float64.

    The Rayleigh-Ritz statistic of the countsketch solver's second pass: the scatters of
    disjoint sets of rows add up.
    """
    q = V.shape[1]
    M = np.zeros((q, q), order="F")
    muV = mean @ V
    V32 = None
    feature_rows = iter(feature_rows)
    for start, Z in feature_rows:
        if not is_host_array(Z):
            rest = _ritz_scatter_xp(itertools.chain([(start, Z)], feature_rows), V, mean)
            return M + rest
        if Z.dtype == np.float32:
            V32 = V.astype(np.float32) if V32 is None else V32
            Y = (Z @ V32).astype(np.float64)
        else:
            Y = Z @ V
        Y -= muV
        # Y.T is Fortran-ordered: DSYRK reads it without a copy.  (numpy's Y.T @ Y for this
        # skinny shape went through a multi-threaded GEMM measured 100x slower here.)
        M = blas.dsyrk(1.0, Y.T, beta=1.0, c=M, trans=0, overwrite_c=1)
    return np.triu(M) + np.triu(M, 1).T  # DSYRK fills the upper triangle


def _ritz_scatter_xp(feature_rows, V, mean) -> np.ndarray:
    """:func:`ritz_scatter` of device feature blocks: ``Z V`` in the features' precision, the
    q x q scatter in float64 on the device, returned on the host (it is q x q)."""
    M = None
    cast: dict = {}
    for _, Z in feature_rows:
        placement = placement_of(Z)
        xp = placement.xp
        if Z.dtype not in cast:
            cast[Z.dtype] = (
                placement.asarray(V, np.float32 if Z.dtype == xp.float32 else np.float64),
                placement.asarray(np.asarray(mean, np.float64) @ V, np.float64),
            )
        Vz, muV = cast[Z.dtype]
        Y = xp.astype(Z @ Vz, xp.float64) - muV
        part = xp.permute_dims(Y, (1, 0)) @ Y
        M = part if M is None else M + part
    q = V.shape[1]
    return np.zeros((q, q)) if M is None else to_host(M)


def feature_ritz_scatter(blocks, fmap: FeatureMap, V: np.ndarray, mean: np.ndarray) -> np.ndarray:
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
        The rows; ``source.reduce`` makes one pass per call (two for ``n_passes=2``).
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
        feature mean.

    Notes
    -----
    ``E[(S y)^T (S y)] = y^T y`` for every vector y, so ``(S Zc)^T (S Zc)`` is an unbiased
    estimate of ``Zc^T Zc`` whose error falls like ``||Zc||_F^2 / sqrt(t)`` (CountSketch is an
    approximate-matrix-multiplication sketch, Clarkson & Woodruff 2013).  Its top right singular
    vectors V therefore nearly span the top eigenvectors of ``Zc^T Zc``.  The one-pass variant
    reports them and the squared singular values; the two-pass variant projects the data on V and
    solves the q x q eigenproblem of ``V^T Zc^T Zc V`` exactly (Rayleigh-Ritz), so its eigenvalues
    are those of the true covariance restricted to span(V) and never overestimate.
    """
    sk = source.reduce(feature_countsketch, FeatureCountSketch.merge, fmap, n_buckets, seed)
    home = placement_of(sk.SZ)
    if not home.host:
        # The t x m sketch is solved on the host (O(t m min(t, m)), independent of n): host
        # copies of it and of the mean; the results move back to the device.
        device_sk = sk
        sk = FeatureCountSketch.__new__(FeatureCountSketch)
        sk.SZ, sk.S1 = to_host(device_sk.SZ), device_sk.S1
        sk.sum, sk.n = to_host(device_sk.sum), device_sk.n
        vals, comps, n, mean = _solve_countsketch(
            source, fmap, sk, n_components, n_buckets, oversamples, n_passes, seed
        )
        return (
            home.asarray(vals, np.float64),
            home.asarray(comps, np.float64),
            n,
            home.asarray(mean, np.float64),
        )
    return _solve_countsketch(
        source, fmap, sk, n_components, n_buckets, oversamples, n_passes, seed
    )


def _solve_countsketch(source, fmap, sk, n_components, n_buckets, oversamples, n_passes, seed):
    """The solver half of :func:`rf_kpca_countsketch`, from a host sketch."""
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
    scale = float(np.einsum("ij,ij->", sk.SZ, sk.SZ))
    eps = float(np.finfo(fmap.feature_dtype(np.float64)).eps)
    sq, V = _sketch_subspace(sk.SZ, sk.S1, mean, q, np.random.default_rng(seed), scale)
    if n_passes == 1:
        vals, vecs = postprocess_eigen(sq[:n_components], V[:, :n_components], scale=scale, eps=eps)
        return vals, vecs.T, n, mean
    M = source.reduce(feature_ritz_scatter, np.add, fmap, V, mean)  # second pass
    vals, W = eigh_topk(M, n_components, method="dense", overwrite=True, scale=scale, eps=eps)
    comps = V @ W
    flip_signs(comps)  # signs fixed on the m-dimensional axes, not on the q-dimensional W
    return vals, comps.T, n, mean
