"""RandomFeatureKPCA: exact linear PCA on random features (RNCA / RF-KPCA).

With a random feature map z (``fastkpca.features``), ``Z Z^T`` approximates the Gram matrix, so
kernel PCA becomes linear PCA of the feature rows (Lopez-Paz et al.'s RNCA, the baseline of
Ghashami, Perry & Phillips 2016, section 2; RF-KPCA in Sriperumbudur & Sterge's slides).  The
centered feature matrix ``Zc = Z - 1 mu^T`` has ``Zc Zc^T = H Z Z^T H``, the approximate centered
Gram, and the same non-zero eigenvalues as the m x m ``Zc^T Zc``; its eigenvectors V give the
axes, and ``transform(x) = V^T (z(x) - mu)`` approximates ``KernelPCA.transform`` on the same
scale (``Zc V = U sqrt(Lambda)``, the Gram eigenvectors times the root eigenvalues).

Two solvers, both one streaming pass over row blocks that never holds the n x m feature matrix:

``exact``
    accumulates the m x m Gram ``Z^T Z`` (one BLAS product per block) and the feature sum:
    O(n m^2) time, O(m^2) memory, exact PCA of the features.
``countsketch``
    (Musco & Woodruff 2017, section 3.2: random Fourier features followed by an input-sparsity
    low-rank method, Clarkson & Woodruff 2013) hashes the feature rows into a t x m CountSketch
    ``S Z``: O(n m) time (O(nnz(X) m) for ``X @ W`` on CSR input), O(t m) memory.  Centering is
    exact afterwards (``S Zc = S Z - (S 1) mu^T``); the top ``k + oversamples`` right singular
    vectors of ``S Zc`` span the approximate top subspace, refined by a second pass
    (``n_passes=2``, Rayleigh-Ritz: the exact covariance of ``Zc V`` in that small subspace,
    O(n m (k + p))) or used directly (``n_passes=1``, singular values of the sketch as the
    eigenvalues).

One numerical path for arrays, streams and dask arrays
    ``fit`` is init (kernel and feature map from the first rows, :func:`init_feature_map`) ->
    statistics of row blocks -> an associative merge -> finalize.  The statistics are
    :class:`FeatureMoments` around a shift fixed by the first rows (:func:`feature_shift`; exact
    solver), and :class:`FeatureCountSketch` then the Rayleigh-Ritz scatter (countsketch solver),
    all merged by sums.  In memory one statistic accumulates all blocks of a pass; on a dask
    array (:mod:`fastkpca.dask`) each chunk's statistic is computed on a worker and the
    statistics are merged up a tree: the same model up to the order of the float64 sums.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.linalg import blas

from .._utils import DEFAULT_BLOCK_ROWS, check_block, check_int, is_block_source, is_dask_array
from ..features import FEATURES, FeatureMap, init_feature_map
from ..kernels import chunk_rows
from ..solvers import eigh_topk, flip_signs, postprocess_eigen
from ._base import BaseKPCA

__all__ = [
    "RandomFeatureKPCA",
    "FeatureMoments",
    "accumulate_moments",
    "feature_shift",
    "rf_kpca_exact",
    "FeatureCountSketch",
    "countsketch_features",
    "ritz_scatter",
    "rf_kpca_countsketch",
    "SOLVERS",
]

SOLVERS = ("exact", "countsketch")

#: Memory budget (MiB) for one block of features and its temporaries (8192 rows for m = 1000
#: in float64, 16384 in float32, capped at DEFAULT_BLOCK_ROWS).
_BLOCK_BUDGET_MB = 128


def _feature_block_rows(m: int, itemsize: int) -> int:
    """Rows per feature block: at most DEFAULT_BLOCK_ROWS, and ~2 block copies in the budget.

    Blocks of a few thousand rows keep SYRK / GEMM near peak speed; more only costs memory.
    """
    return max(
        1,
        min(
            DEFAULT_BLOCK_ROWS,
            chunk_rows(m, itemsize=itemsize, n_temporaries=2, working_memory_mb=_BLOCK_BUDGET_MB),
        ),
    )


def _feature_blocks(blocks, fmap: FeatureMap):
    """Yield ``(start, Z_block)`` feature blocks (X's float dtype) from ``(start, X_block)``.

    Input blocks are split further so that a feature block stays within the memory budget.
    """
    for start, Xb in blocks:
        itemsize = 4 if Xb.dtype == np.float32 else 8
        step = _feature_block_rows(fmap.n_output_features, itemsize)
        if sp.issparse(Xb) and not fmap.accepts_sparse:
            Xb = Xb.tocsr()
        for s in range(0, Xb.shape[0], step):
            part = Xb[s : s + step]
            if sp.issparse(part) and not fmap.accepts_sparse:
                part = part.toarray()
            yield start + s, fmap(part)


# ------------------------------------------------------------------------------------------------
# exact solver: shifted second moments
# ------------------------------------------------------------------------------------------------
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
    """

    def __init__(self, m: int, shift: np.ndarray | None = None):
        self.m = m
        self.n = 0
        self.shift = None if shift is None else np.asarray(shift, dtype=np.float64)
        self.sum = np.zeros(m)
        self.gram = np.zeros((m, m))

    def merge(self, other: FeatureMoments) -> FeatureMoments:
        """Moments of both sets of rows (a new object).  Both must use the same shift, e.g. one
        computed from the first rows and passed to every partial accumulation (tree reductions
        over row blocks); an empty side is neutral."""
        if other.n == 0:
            return self._copy()
        if self.n == 0:
            return other._copy()
        if not np.array_equal(self.shift, other.shift):
            raise ValueError("cannot merge FeatureMoments accumulated around different shifts")
        out = self._copy()
        out.n += other.n
        out.sum += other.sum
        out.gram += other.gram
        return out

    def _copy(self) -> FeatureMoments:
        out = FeatureMoments(self.m, self.shift)
        out.n, out.sum, out.gram = self.n, self.sum.copy(), self.gram.copy()
        return out

    def update(self, Z: np.ndarray) -> FeatureMoments:
        """Add a block of feature rows (Z is shifted in place: pass a block you own)."""
        if Z.shape[0] == 0:
            return self
        if self.shift is None:
            self.shift = Z.mean(axis=0, dtype=np.float64)
        self.n += Z.shape[0]
        self.sum += Z.sum(axis=0, dtype=np.float64)
        Z -= self.shift.astype(Z.dtype)
        self.gram += Z.T @ Z
        return self

    def covariance(self) -> np.ndarray:
        """``Zc^T Zc = sum (z - c)(z - c)^T - n (mu - c)(mu - c)^T`` (float64, symmetric)."""
        G = (self.gram + self.gram.T) / 2  # exact symmetry for the eigensolver
        if self.n:
            delta = self.sum / self.n - self.shift
            G -= self.n * np.outer(delta, delta)
        return G

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)


def accumulate_moments(feature_blocks, m: int, shift: np.ndarray | None = None) -> FeatureMoments:
    """One pass over ``(start, Z_block)`` feature blocks; see :class:`FeatureMoments`.

    ``shift`` defaults to the mean of the first block's features.
    """
    moments = FeatureMoments(m, shift)
    for _, Z in feature_blocks:
        moments.update(Z)
    return moments


def feature_shift(X_first, fmap: FeatureMap) -> np.ndarray:
    """The shift of :class:`FeatureMoments`: the mean features of the first feature block.

    That block is the first rows of ``X_first`` (the data, or its first row block) as
    :func:`_feature_blocks` splits them, so every way of reading the same data (an array, a
    stream of 8192-row blocks, the chunks of a dask array) gets the same shift, and moments
    accumulated in parts around it merge (:meth:`FeatureMoments.merge`).
    """
    _, Z = next(_feature_blocks([(0, X_first[:DEFAULT_BLOCK_ROWS])], fmap))
    return Z.mean(axis=0, dtype=np.float64)


def _moment_stats(blocks, fmap: FeatureMap, m: int, shift: np.ndarray) -> FeatureMoments:
    """The exact solver's statistic of ``(start, block)`` row blocks (all, or one dask chunk)."""
    return accumulate_moments(_feature_blocks(blocks, fmap), m, shift)


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
    # ARPACK needs O(k) products with the m x m matrix, a dense solve O(m^3): measured 0.5 s
    # against 12 s for m = 1000, k = 10 on the shared 2-core machine.  Dense for small m or k.
    method = "dense" if m <= 200 or 5 * n_components >= m else "lanczos"
    vals, vecs = eigh_topk(C, n_components, method=method, rng=rng, overwrite=True)
    return vals, vecs.T


# ------------------------------------------------------------------------------------------------
# countsketch solver
# ------------------------------------------------------------------------------------------------
def _sketch_subspace(SZ: np.ndarray, S1: np.ndarray, mean: np.ndarray, q: int, rng):
    """Top-q right singular pairs of the centered sketch ``S Zc = S Z - (S 1) mu^T``.

    Returns the squared singular values (eigenvalues of ``(S Zc)^T (S Zc)``) and the m x q
    right singular vectors, from the smaller of the two Gram matrices of the t x m sketch
    (O(t m min(t, m)) to form, then Lanczos for q << its size, a dense solve otherwise).
    """
    SZc = SZ - np.outer(S1, mean)
    t, m = SZc.shape
    small = min(t, m)
    q = min(q, small)
    method = "dense" if small <= 200 or 5 * q >= small else "lanczos"
    if m <= t:
        return eigh_topk(SZc.T @ SZc, q, method=method, rng=rng, overwrite=True)
    # t < m: left singular vectors from the t x t Gram, then V = (S Zc)^T U / sigma.
    vals, U = eigh_topk(SZc @ SZc.T, q, method=method, rng=rng, overwrite=True)
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
        """The statistic of the rows of both (a new object; neither input is modified)."""
        out = FeatureCountSketch.__new__(FeatureCountSketch)
        out.SZ, out.S1 = self.SZ + other.SZ, self.S1 + other.S1
        out.sum, out.n = self.sum + other.sum, self.n + other.n
        return out

    @property
    def mean(self) -> np.ndarray:
        return self.sum / max(self.n, 1)


def countsketch_features(feature_blocks, n_buckets: int, m: int, seed: int) -> FeatureCountSketch:
    """:class:`FeatureCountSketch` of ``(start, Z_block)`` feature blocks (``start``: global
    index of the block's first row)."""
    from ..sketch import CountSketch

    # The hash (bucket and sign of each global row index) is CountSketch's; the products are
    # formed here so that float32 features are hashed in float32 (S has one +-1 per column, so
    # each bucket sums ~r / t rows of a block: no precision is lost before the float64 total),
    # 2.5x faster than CountSketch.update, which works in float64.
    cs = CountSketch(n_buckets, m, random_state=seed)
    out = FeatureCountSketch(n_buckets, m)
    for start, Z in feature_blocks:
        S = cs.sketching_matrix(start, start + Z.shape[0])
        out.SZ += S.astype(Z.dtype) @ Z
        out.S1 += np.asarray(S.sum(axis=1)).ravel()
        out.sum += Z.sum(axis=0, dtype=np.float64)
        out.n += Z.shape[0]
    return out


def _countsketch_stats(blocks, fmap: FeatureMap, n_buckets: int, m: int, seed: int):
    """The countsketch solver's first-pass statistic of ``(start, block)`` row blocks."""
    return countsketch_features(_feature_blocks(blocks, fmap), n_buckets, m, seed)


def ritz_scatter(feature_blocks, V: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``M = V^T Zc^T Zc V = sum_b (Z_b V - 1 (mu^T V))^T (...)``, q x q in float64.

    The Rayleigh-Ritz statistic of the countsketch solver's second pass: the scatters of
    disjoint sets of rows add up.
    """
    q = V.shape[1]
    M = np.zeros((q, q), order="F")
    muV = mean @ V
    V32 = None
    for _, Z in feature_blocks:
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


def _ritz_stats(blocks, fmap: FeatureMap, V: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """The countsketch solver's second-pass statistic of ``(start, block)`` row blocks."""
    return ritz_scatter(_feature_blocks(blocks, fmap), V, mean)


def rf_kpca_countsketch(
    passes,
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
    passes : object
        ``passes.reduce(stats, merge, *args)`` makes one pass over the data's ``(start, block)``
        row blocks (it is called once per pass) and returns ``stats(blocks, *args)``: of all
        blocks at once in memory (:class:`_SequentialPasses`), or of each dask chunk merged by
        ``merge`` (:class:`fastkpca.dask.DaskRowBlocks`).
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
    m = fmap.n_output_features
    sk = passes.reduce(_countsketch_stats, FeatureCountSketch.merge, fmap, n_buckets, m, seed)
    n, mean = sk.n, sk.mean
    q = min(n_components + oversamples, n_buckets, m)
    if q < n_components:
        raise ValueError(
            f"n_buckets={n_buckets} gives at most {q} components, fewer than "
            f"n_components={n_components}"
        )
    sq, V = _sketch_subspace(sk.SZ, sk.S1, mean, q, np.random.default_rng(seed))
    if n_passes == 1:
        vals, vecs = postprocess_eigen(sq[:n_components], V[:, :n_components])
        return vals, vecs.T, n, mean
    M = passes.reduce(_ritz_stats, np.add, fmap, V, mean)  # second pass
    w, U = la.eigh(M, check_finite=False)
    vals, W = postprocess_eigen(w[::-1][:n_components], U[:, ::-1][:, :n_components])
    comps = V @ W
    flip_signs(comps)  # signs fixed on the m-dimensional axes, not on the q-dimensional W
    return vals, comps.T, n, mean


class _SequentialPasses:
    """Passes over in-memory or streamed row blocks: each pass is one statistic of all blocks."""

    def __init__(self, data_pass):
        self._data_pass = data_pass

    def reduce(self, stats, merge, *args):
        return stats(self._data_pass(), *args)


# ------------------------------------------------------------------------------------------------
# estimator
# ------------------------------------------------------------------------------------------------
class RandomFeatureKPCA(BaseKPCA):
    """Kernel PCA as exact linear PCA on random features (RNCA / RF-KPCA).

    ``fit`` makes one pass over X in row blocks (or over an iterable of row blocks) and never
    holds the n x m feature matrix; ``transform(X) = (z(X) - mean_) @ components_.T``
    approximates ``sklearn.decomposition.KernelPCA(...).transform(X)`` (same scale, column signs
    deterministic), better as ``n_features`` grows.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives min(10, n_samples, n_output_features).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"`` (``rff``; ``orf`` and ``fastfood`` take rbf and
        matern) or ``"polynomial"`` (``tensorsketch``); other kernels raise ValueError.
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features_in as in ``KernelPCA``.  The string forms are
        resolved on the first 8192 rows (the first block of a stream).
    degree, coef0 : polynomial kernel parameters.  nu : Matern smoothness.
    n_features : int or None
        Number m of random features (None: 1000, :data:`fastkpca.features.DEFAULT_N_FEATURES`;
        it does not depend on n).  The Fourier maps output cos / sin pairs, so an odd m is
        rounded up to even (``n_output_features_``).
    features : {"auto", "rff", "orf", "fastfood", "tensorsketch"}
        The feature map, see :mod:`fastkpca.features`.  ``auto`` (default): ``orf`` for rbf and
        matern, ``rff`` for laplacian, ``tensorsketch`` for polynomial
        (:func:`fastkpca.features.resolve_features`).
    solver : {"exact", "countsketch"}
        ``exact``: PCA of the accumulated m x m feature covariance, O(n m^2) time.
        ``countsketch``: Musco & Woodruff's input-sparsity method, O(n m) time plus
        O(n m (k + oversamples)) for the second pass; see the module docstring.
    n_buckets : int or None
        CountSketch rows t for ``solver="countsketch"`` (None: ``max(2000, 50 (k +
        oversamples))``, see :meth:`_default_buckets`).
    oversamples : int
        Extra sketch directions p kept for the Rayleigh-Ritz step (countsketch).
    n_passes : {1, 2}
        Passes over the data for ``solver="countsketch"``; 2 (default) needs X to be an array or
        a re-iterable block source (e.g. a list of blocks), not a one-shot generator.
    random_state : int, Generator or None
        Draws the features (and the CountSketch hash); the same seed gives the same model, and
        the same features as ``StreamingKPCA`` with equal parameters.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered approximate Gram ``Zc Zc^T``.
    components_ : (n_components, n_output_features_) principal axes in feature space.
    mean_ : (n_output_features_,) the training features' mean.
    feature_map_ : the drawn :class:`fastkpca.features.FeatureMap`.
    kernel_ : the resolved Kernel.
    n_output_features_ : int, m.
    n_samples_seen_ : int.
    n_components_, n_features_in_.
    """

    _accepts_sparse = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        n_features=None,
        features="auto",
        solver="exact",
        n_buckets=None,
        oversamples=10,
        n_passes=2,
        random_state=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.n_features = n_features
        self.features = features
        self.solver = solver
        self.n_buckets = n_buckets
        self.oversamples = oversamples
        self.n_passes = n_passes
        self.random_state = random_state

    # --- parameter checks -----------------------------------------------------------------
    def _check_params(self):
        if self.features != "auto" and self.features not in FEATURES:
            raise ValueError(f"features must be 'auto' or one of {FEATURES}, got {self.features!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        check_int("n_buckets", self.n_buckets, low=1, allow_none=True)
        check_int("oversamples", self.oversamples, low=0)
        if self.n_passes not in (1, 2) or isinstance(self.n_passes, bool):
            raise ValueError(f"n_passes must be 1 or 2, got {self.n_passes!r}")

    def _default_buckets(self, k: int) -> int:
        """t = max(2000, 50 q) with q = k + oversamples: the sketch costs O(t m) memory and
        O(t m min(t, m)) for its Gram, small next to the O(n m) passes, and its error falls like
        1/sqrt(t) (measured on RandomNoisy, n = 2e5, m = 1000: eigenvalues within 2% of the
        exact solver's, held-out accuracy equal to it)."""
        if self.n_buckets is not None:
            return int(self.n_buckets)
        return max(2000, 50 * (k + self.oversamples))

    # --- data -----------------------------------------------------------------------------
    def _block_passes(self, X):
        """``(first, passes)``: the validated first block (or the whole array) and a function
        returning a fresh iterator of validated ``(start, block)`` pairs, one per data pass."""
        if not is_block_source(X):
            X = self._validate_fit_data(X)

            def array_pass():
                for start in range(0, X.shape[0], DEFAULT_BLOCK_ROWS):
                    yield start, X[start : start + DEFAULT_BLOCK_ROWS]

            return X, array_pass
        one_shot = iter(X) is X
        it = iter(X)
        first = next(it, None)
        if first is None:
            raise ValueError("X is an empty iterable of row blocks")
        first = self._check_block(first, 0, reset=True)
        pending = [it]  # the first pass continues the iterator that gave the first block

        def source_pass():
            if pending:
                return self._validated(_chain_first(first, pending.pop()), skip_first=True)
            if one_shot:
                raise ValueError(
                    "solver='countsketch' with n_passes=2 reads the data twice, but X is a "
                    "one-shot iterator of blocks; pass an array or a list of blocks, or use "
                    "n_passes=1"
                )
            return self._validated(iter(X))

        return first, source_pass

    def _check_block(self, block, index, *, reset=False):
        block = check_block(
            block,
            n_features=None if reset else self.n_features_in_,
            accept_sparse=True,
            name=f"X (block {index})",
        )
        if block.dtype not in (np.float32, np.float64):
            block = block.astype(np.float64)
        if reset:
            if block.shape[0] == 0:
                raise ValueError("the first row block of X is empty")
            self.n_features_in_ = block.shape[1]
        return block

    def _validated(self, blocks, skip_first=False):
        start = 0
        for i, block in enumerate(blocks):
            if not (skip_first and i == 0):
                block = self._check_block(block, i)
            yield start, block
            start += block.shape[0]

    # --- fit / transform ------------------------------------------------------------------
    def fit(self, X, y=None):
        """Fit on an array / CSR matrix (n_samples, n_features), an iterable of row blocks, or a
        ``dask.array.Array`` (per-chunk statistics on the workers, see :mod:`fastkpca.dask`).

        A dask array gives the model of the in-memory array with the same ``random_state`` (up
        to the order of float64 sums): the kernel and the features are drawn from its first
        8192 rows, as here, and the statistics of its chunks are merged up a tree.
        """
        self._check_params()
        if is_dask_array(X):
            from ..dask import DaskRowBlocks

            passes = DaskRowBlocks(X, accept_sparse=True)
            first = passes.head()
            self.n_features_in_ = passes.n_features
        else:
            first, data_pass = self._block_passes(X)
            passes = _SequentialPasses(data_pass)
        fmap, rng = init_feature_map(self, first)
        m = fmap.n_output_features

        if self.solver == "exact":
            moments = passes.reduce(
                _moment_stats, FeatureMoments.merge, fmap, m, feature_shift(first, fmap)
            )
            n, mean = moments.n, moments.mean
            k = self._resolve_n_components(min(n, m), what="min(n_samples, n_output_features)")
            vals, comps = rf_kpca_exact(moments, k, rng=rng)
        else:
            # The hash seed is drawn after the features, so the features stay those of
            # StreamingKPCA / solver="exact" for the same random_state.
            seed = int(rng.integers(2**31))
            t = self._default_buckets(self._resolve_n_components(m, what="n_output_features"))
            k = self._resolve_n_components(min(m, t), what="min(n_output_features, n_buckets)")
            vals, comps, n, mean = rf_kpca_countsketch(
                passes,
                fmap,
                k,
                n_buckets=t,
                oversamples=self.oversamples,
                n_passes=self.n_passes,
                seed=seed,
            )
            k = self._resolve_n_components(
                min(n, m, t), what="min(n_samples, n_output_features, n_buckets)"
            )
            vals, comps = vals[:k], comps[:k]
        self.feature_map_ = fmap
        self.n_output_features_ = m
        self.n_samples_seen_ = int(n)
        self.mean_ = mean
        self.components_ = comps
        self.eigenvalues_ = vals
        return self

    def transform(self, X):
        """Project X on the principal axes: ``(z(X) - mean_) @ components_.T``, in row blocks.

        A dask array gives a lazy dask array, chunked by rows like X
        (:func:`fastkpca.dask.transform`).
        """
        if is_dask_array(X):
            from ..dask import transform

            return transform(self, X)
        X = self._validate_transform_data(X)
        dtype = self._output_dtype(X)
        comps = self.components_.T.astype(dtype)
        mean_proj = (self.mean_ @ self.components_.T).astype(dtype)
        out = np.empty((X.shape[0], self.n_components_), dtype=dtype)
        for start, Z in _feature_blocks([(0, X)], self.feature_map_):
            np.matmul(Z, comps, out=out[start : start + Z.shape[0]])
        out -= mean_proj
        return out


def _chain_first(first, rest):
    yield first
    yield from rest
