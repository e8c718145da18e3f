"""Exact kernel PCA: the reference every approximate method is measured against."""

from __future__ import annotations

import threading
from functools import partial

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .. import kernels
from .._centering import (
    CenteringStats,
    center_gram_inplace,
    center_gram_out_of_sample,
    centered_operator,
    gram_row_stats,
)
from ..execution import (
    available_memory_bytes,
    format_bytes,
    map_tasks,
    n_workers,
    one_blas_thread,
    progress_bar,
    require_memory,
    using_n_jobs,
)
from ..execution.arrays import Placement, is_host_array, output_like, placement_of
from ..execution.memory import MEMORY_FRACTION
from ..execution.tiles import CenteredGramOperator, fill_diagonal_, kernel_tiles, tile_rows
from ..kernels import chunk_rows, result_dtype
from ..solvers import SOLVERS, auto_method, auto_method_device, eigh_topk
from ._base import DEFAULT_N_COMPONENTS, BaseKPCA, _is_fraction, check_solver_stopping

__all__ = [
    "ExactKPCA",
    "PrecomputedKernel",
    "exact_kpca",
    "symmetric_gram",
    "GramOperator",
    "matrix_free_kpca",
    "check_exact_fits",
    "resolve_eigen_solver",
    "EXACT_SOLVERS",
    "EXACT_MEMORY_FRACTION",
    "centered_projection",
    "device_exact_kpca",
    "device_matrix_free_kpca",
]

#: ``eigen_solver`` names scikit-learn users type, and the fastkpca solver each one means.
EIGEN_SOLVER_ALIASES = {"arpack": "lanczos"}

#: ExactKPCA's ``eigen_solver`` names: the solvers of :func:`fastkpca.solvers.eigh_topk` on the
#: stored Gram, and ``"matrix_free"`` (block Krylov on a Gram recomputed in every pass,
#: :func:`matrix_free_kpca`), which ``"auto"`` takes when the Gram does not fit in memory.
EXACT_SOLVERS = (*SOLVERS, "matrix_free")


def resolve_eigen_solver(name, allowed=SOLVERS):
    """The fastkpca solver for ``name`` (``"arpack"`` is ``"lanczos"``); ValueError if unknown."""
    solver = EIGEN_SOLVER_ALIASES.get(name, name) if isinstance(name, str) else name
    if solver not in allowed:
        raise ValueError(
            f"eigen_solver must be one of {tuple(allowed)} (or 'arpack', an alias of "
            f"'lanczos'), got {name!r}"
        )
    return solver


class PrecomputedKernel(kernels.Kernel):
    """``kernel="precomputed"``: the rows given are already kernel values.

    At fit X is the n x n training Gram; at transform the n_new x n_train kernel between the new
    and the training points (as ``sklearn.decomposition.KernelPCA(kernel="precomputed")``).
    """

    name = "precomputed"

    def __call__(self, X, Y=None, *, out=None, working_memory_mb=None):
        K = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
        if out is None:
            return np.array(K, dtype=np.float64)
        out[...] = K
        return out

    def diag(self, X):
        return np.asarray(X.diagonal(), dtype=np.float64)


#: Working memory (MiB) of one row block of the Gram (per thread): its float64 temporaries stay
#: below the allocator's mmap threshold (32 MiB in glibc) and are reused from block to block
#: instead of being mapped and page-faulted afresh (a 20000 x 20000 RBF Gram on two threads:
#: 1.1 s with these 140-row blocks, 1.2 to 1.7 s with 280-row blocks of 45 MiB temporaries).
GRAM_BLOCK_MB = 32

#: Working memory (MiB) of one row block of centering corrections.  Blocks of a few MiB stay in
#: cache between the two passes over them, and stay below the allocator's mmap threshold (32 MiB
#: in glibc), so the temporary is reused instead of being mapped and page-faulted afresh for
#: every block: 0.8 s instead of 2 s to center a 20000 x 20000 Gram (one core).
CENTER_BLOCK_MB = 16


#: A dask (or any not yet loaded) array is computed only if its n x n Gram (X's dtype) takes at
#: most this fraction of the memory available: the fit then holds the Gram, X, and the
#: eigensolver's workspace.
EXACT_MEMORY_FRACTION = 0.25

#: Rows already in memory: the fit's peak is one Gram plus the eigensolver's workspace (at most
#: 1.35 Gram, ``tests/test_exact.py``), so the Gram may take this fraction of what is available.
GRAM_FRACTION = 1 / 1.35


def check_exact_fits(
    X, *, fraction: float | None = None, available=None, n_components: int = 0
) -> None:
    """Raise ValueError unless the n x n Gram of X (an array, dask array or row source) fits.

    The Gram, in X's dtype, must take at most ``fraction`` (default
    :data:`EXACT_MEMORY_FRACTION`) of the memory available here
    (:func:`fastkpca.execution.require_memory`, which allows
    :data:`~fastkpca.execution.memory.MEMORY_FRACTION` of it: the Gram is counted with the
    margin its fraction leaves), with ``n_components`` float64 eigenvectors of length n beside
    it (n of them for a fraction of the variance: every eigenpair).
    """
    fraction = EXACT_MEMORY_FRACTION if fraction is None else fraction
    n = int(X.shape[0])
    itemsize = 4 if X.dtype == np.float32 else 8
    gram = n * n * itemsize
    need = gram * MEMORY_FRACTION / fraction + 8 * n * int(n_components)
    available = available_memory_bytes() if available is None else available
    require_memory(
        need,
        f"ExactKPCA's {n} x {n} Gram matrix ({format_bytes(gram)}), with the eigensolver's "
        "workspace",
        hint=(
            "these data are too large for a stored Gram.  ExactKPCA(eigen_solver='matrix_free') "
            "recomputes it in each pass instead (exact, slower); the scalable methods read the "
            "rows block by block: RandomFeatureKPCA, StreamingKPCA or NystromKPCA."
        ),
        available=available,
    )


def _center_block_rows(n):
    # The kernels' global budget still caps the block (tests shrink it to bound peak memory).
    return min(
        chunk_rows(n, n_temporaries=2),
        chunk_rows(n, n_temporaries=2, working_memory_mb=CENTER_BLOCK_MB),
    )


def _rbf_factors(X, kernel):
    """``(L, R)`` with ``L[i] . R[j] = -gamma ||x_i - x_j||^2`` for the RBF kernel, else None.

    ``L = [s X, -gamma |x|^2, 1]`` and ``R = [s X, 1, -gamma |x|^2]`` with s = sqrt(2 gamma): a
    Gram block's exponent is then one GEMM of width d + 2, written straight into the block, with
    no elementwise passes for the norms and the scaling (the kernel's own blocks make six over a
    temporary, then copy it): only the clipping and the exp remain.  Float64, dense X only.
    """
    if type(kernel) is not kernels.RBF or not isinstance(X, np.ndarray):
        return None
    X = np.asarray(X, dtype=np.float64)
    sq = np.einsum("ij,ij->i", X, X)
    if not np.all(np.isfinite(sq)):
        # As the kernel's own blocks (kernels.squared_euclidean): |x|^2 beyond float64 would give
        # inf - inf = nan exponents, a silent nan or all-zero Gram.
        raise ValueError(
            "X has values too large for the kernel: squared distances overflow float64"
        )
    scaled = np.sqrt(2.0 * kernel.gamma) * X
    ones = np.ones((X.shape[0], 1))
    g = (-kernel.gamma * sq)[:, None]
    return np.hstack([scaled, g, ones]), np.hstack([scaled, ones, g])


def _rbf_fill(left, right, out, *, diagonal):
    """``out = exp(min(left @ right.T, 0))``, the RBF block of :func:`_rbf_factors`' rows.

    ``diagonal``: ``left`` and the first rows of ``right`` are the same points, whose kernel value
    is set to exactly 1, as the kernel's own Gram does.
    """
    np.matmul(left, right.T, out=out)
    np.minimum(out, 0.0, out=out)  # squared distances are >= 0 (round-off can say < 0)
    np.exp(out, out=out)
    if diagonal:
        np.fill_diagonal(out, 1.0)  # fills the leading square only
    return out


def symmetric_gram(X, kernel, *, block_rows=None, n_threads=None):
    """The n x n Gram matrix of X in X's dtype, computing only its upper block triangle.

    Row block ``[s, e)`` evaluates the kernel against ``X[s:]`` only (the diagonal tile with
    ``kernel(X[s:e])``, so the kernel's own rule for exact diagonals applies); the lower triangle
    is then copied tile by tile from the upper one.  That halves the kernel evaluations (the
    distance GEMM and the elementwise exp) of filling every row, and the result is exactly
    symmetric.

    Row blocks are filled by ``n_threads`` threads (default: those of the running call,
    :func:`fastkpca.execution.n_workers`), each with single-threaded BLAS
    (:func:`fastkpca.execution.map_tasks`): numpy releases the GIL in the GEMM, the exp and the
    copies, which are otherwise single-threaded, and so are the first writes to the fresh n x n
    array (its page faults, a large part of the cost on a 3 GB Gram).  The threads share the
    kernels' working memory budget, and each block's temporaries stay below
    :data:`GRAM_BLOCK_MB`.
    """
    n = X.shape[0]
    K = np.empty((n, n), dtype=result_dtype(X))
    X = X.astype(np.float64, copy=False)  # kernels evaluate in float64: convert once, not per block
    workers = max(1, min(n_threads or n_workers(), -(-n // 64)))
    budget = min(kernels.WORKING_MEMORY_MB / workers, GRAM_BLOCK_MB)
    step = block_rows or chunk_rows(n, working_memory_mb=budget)
    tile = 256  # mirror tiles: the transposed reads stay in cache

    factors = _rbf_factors(X, kernel) if K.dtype == np.float64 else None

    def fill(s):
        e = min(n, s + step)
        if factors is not None:
            left, right = factors
            _rbf_fill(left[s:e], right[s:], K[s:e, s:], diagonal=True)
            return
        kernel(X[s:e], out=K[s:e, s:e])
        if e < n:
            kernel(X[s:e], X[e:], out=K[s:e, e:])

    def mirror(s):
        e = min(n, s + tile)
        for t in range(0, s, tile):
            K[s:e, t : t + tile] = K[t : t + tile, s:e].T
        K[s:e, s:e] = np.triu(K[s:e, s:e]) + np.triu(K[s:e, s:e], 1).T

    with using_n_jobs(workers), progress_bar(total=n, desc="Gram matrix") as bar:

        def fill_rows(s):
            fill(s)
            bar.update(min(n, s + step) - s)

        map_tasks(fill_rows, range(0, n, step))  # the upper triangle is complete ...
        map_tasks(mirror, range(0, n, tile))  # ... before any tile is mirrored
    return K


#: Working memory (MiB) of one square tile of the matrix-free Gram, per thread: the tile is one
#: reused buffer (below the allocator's mmap threshold, as :data:`GRAM_BLOCK_MB`), large enough
#: that its three GEMMs (the kernel's inner products and the two products with the block of
#: vectors) run near peak.
TILE_MB = 32

#: Vectors of the matrix-free solver's block beyond ``n_components``.  Each pass recomputes the
#: Gram (about n^2 (d + 2) flops: half the tiles, 2 (d + 2) flops an entry) and applies it to the
#: block (2 n^2 b flops), so a wider block costs more per pass but needs fewer passes: block
#: Krylov converges at a rate set by the gap between lambda_k and lambda_{b+1} (Musco & Musco
#: 2015).  On RandomNoisy (n = 3000, d = 100, k = 10) 10 / 30 / 60 extra vectors took 8 / 6 / 5
#: passes, about the same flops for d = 100; 30 keeps the passes (and the exps) few.
MATRIX_FREE_OVERSAMPLES = 30

#: Largest n for which ``eigen_solver="auto"`` recomputes a Gram too large to store: a pass costs
#: about n^2 (d + 2 + 2 b) flops (symmetric tiles of width-(d + 2) inner products, both triangles
#: applied to b vectors), some 7e12 at n = 2e5, d = 100, b = 41: minutes per pass on two cores.
#: Beyond, ``auto`` refuses (pointing to the scalable methods) rather than start hours of work;
#: an explicit ``eigen_solver="matrix_free"`` still runs.
MATRIX_FREE_AUTO_MAX_N = 200_000


class GramOperator(LinearOperator):
    """The n x n Gram matrix of X as an operator: ``K @ V`` recomputed tile by tile, never stored.

    Each product is one pass over the upper block triangle of K in square tiles of ``tile``
    rows: tile ``(I, J)``, ``J >= I``, is evaluated once and applied as ``K[I, J] @ V[J]`` and,
    off the diagonal, as ``K[I, J]^T @ V[I]``, which halves the kernel evaluations.  Tiles are
    shared out to ``n_threads`` threads (default: those of the running call,
    :func:`fastkpca.execution.n_workers`), each with single-threaded BLAS, its own tile buffer
    and its own n x b accumulator; numpy releases the GIL in the GEMMs and the exp.  Memory: X
    (float64, plus an augmented copy for the RBF kernel), one tile and one n x b accumulator
    per thread.

    All arithmetic is float64 whatever X's dtype (the kernels evaluate in float64): a float32
    tile would perturb each entry by ~1e-7 relative, the eigenvectors by about that over the
    relative eigengap, which misses a 1e-6 agreement with the stored Gram on flat spectra.

    The first product also returns, for free, the Gram's row means (one more column of ones in
    the block), kept in :attr:`row_means` for out-of-sample centering.  :attr:`n_passes` counts
    the passes.
    """

    def __init__(self, X, kernel, *, tile=None, n_threads=None):
        n = X.shape[0]
        super().__init__(np.float64, (n, n))
        self.X = X.astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        self.kernel = kernel
        self.tile = int(tile or max(64, np.sqrt(TILE_MB * 2**20 / 8)))
        self.n_threads = n_threads
        self.row_means = None
        self.n_passes = 0
        # RBF tiles: one GEMM of width d + 2 and an exp (see _rbf_factors)
        self._rbf = _rbf_factors(self.X, kernel)

    def _tile_into(self, i, j, buf):
        """Fill and return ``K[i:i+t, j:j+t]`` (a view of ``buf``)."""
        n, t = self.shape[0], self.tile
        ie, je = min(n, i + t), min(n, j + t)
        T = buf[: (ie - i) * (je - j)].reshape(ie - i, je - j)
        if self._rbf is not None:
            left, right = self._rbf
            _rbf_fill(left[i:ie], right[j:je], T, diagonal=i == j)
        elif i == j:
            self.kernel(self.X[i:ie], out=T)
        else:
            self.kernel(self.X[i:ie], self.X[j:je], out=T)
        return T

    def _matmat(self, V):
        V = np.asarray(V, dtype=np.float64)
        n, t = self.shape[0], self.tile
        first = self.row_means is None
        if first:
            V = np.hstack([V, np.full((n, 1), 1.0 / n)])
        V = np.ascontiguousarray(V)
        starts = range(0, n, t)
        # Longest tile rows first, so that the threads finish together.
        n_tiles = len(starts) * (len(starts) + 1) // 2
        tiles = iter([(i, j) for i in starts for j in starts if j >= i])
        lock = threading.Lock()
        bar = progress_bar(total=n_tiles, desc=f"Gram pass {self.n_passes + 1}", unit="tiles")

        def work(_):
            acc = np.zeros((n, V.shape[1]))
            buf = np.empty(min(n, t) ** 2)
            while True:
                with lock:
                    ij = next(tiles, None)
                if ij is None:
                    return acc
                i, j = ij
                T = self._tile_into(i, j, buf)
                acc[i : i + t] += T @ V[j : j + t]
                if j != i:
                    acc[j : j + t] += T.T @ V[i : i + t]
                bar.update(1)

        workers = min(self.n_threads or n_workers(), n_tiles)
        with bar, using_n_jobs(workers):
            out = sum(map_tasks(work, range(workers)))
        self.n_passes += 1
        if first:
            self.row_means = out[:, -1].copy()
            out = out[:, :-1]
        return out

    def _matvec(self, v):
        return self._matmat(np.reshape(v, (-1, 1)))[:, 0]

    def _adjoint(self):
        return self  # K is symmetric


def matrix_free_kpca(
    X,
    kernel,
    n_components,
    *,
    rng=None,
    tol=None,
    max_iter=None,
    oversamples=MATRIX_FREE_OVERSAMPLES,
    tile=None,
    n_threads=None,
):
    """Top eigenpairs of the centered Gram of X without storing it (memory O(n (k + b) + tile^2)).

    Block Krylov iteration (:func:`fastkpca.solvers.eigh_topk`, ``randomized``, with a block of
    ``n_components + oversamples`` vectors) on ``H K H`` applied implicitly
    (:func:`fastkpca._centering.centered_operator`: center the block, multiply, center the
    result), with K a :class:`GramOperator`.  Each iteration is one pass that recomputes the
    Gram; the iteration stops when the Ritz residuals ``||H K H v - lambda v|| / lambda_1`` of the
    top pairs are below ``tol`` (default 1e-8), the same criterion and eigenpairs as the
    ``randomized`` solver on the stored Gram, and warns (ConvergenceWarning) at ``max_iter``.

    Returns the same tuple as :func:`exact_kpca`; ``n_iter`` is the number of passes.

    Measured (``benchmarks/bench_exact.py --matrix-free-n 100000``, RandomNoisy, d = 100, k = 10,
    rbf gamma = 1 / (2 d), two shared cores): 6 passes, 536 s of CPU (632 s wall at load
    average 4 to 7), 1.15 GB peak RSS, residuals <= 6e-10 relative; at n = 20000 the eigenvalues
    and embedding equal scikit-learn's ARPACK (tol=0) to 4e-15 and 4e-12.
    """
    K = GramOperator(X, kernel, tile=tile, n_threads=n_threads)
    vals, vecs, _ = eigh_topk(
        centered_operator(K),
        n_components,
        method="randomized",
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        oversamples=oversamples,
        return_n_iter=True,
        scale=float(np.sum(kernel.diag(X), dtype=np.float64)),  # the rounding threshold's scale
    )
    stats = CenteringStats(col_means=K.row_means, total_mean=float(K.row_means.mean()))
    return vals, vecs, stats, K.n_passes


def exact_kpca(X, kernel, n_components, *, eigen_solver="auto", rng=None, tol=None, max_iter=None):
    """Top eigenpairs of the centered Gram matrix of X.

    Holds exactly one n x n Gram (X's dtype): its upper triangle is filled in row blocks by
    threads (:func:`symmetric_gram`), it is centered (in place for ``dense``, implicitly in each
    product for the iterative solvers) and handed to the eigensolver, which may overwrite it
    (Schoelkopf, Smola & Mueller 1998).

    Returns
    -------
    eigenvalues : (k,) float64, descending, of the centered Gram ``H K H``
    eigenvectors : (n, k) float64, unit norm (the dual coefficients alpha)
    stats : CenteringStats for out-of-sample centering
    n_iter : work done by the eigensolver (see ``eigh_topk(return_n_iter=True)``)

    ``eigen_solver="matrix_free"`` stores no Gram: :func:`matrix_free_kpca`.
    """
    if eigen_solver == "matrix_free":
        return matrix_free_kpca(X, kernel, n_components, rng=rng, tol=tol, max_iter=max_iter)
    if isinstance(kernel, PrecomputedKernel):
        K = np.array(X.toarray() if hasattr(X, "toarray") else X, dtype=result_dtype(X))
    else:
        K = symmetric_gram(X, kernel)
    n = K.shape[0]
    # tr(K) = sum_i k(x_i, x_i), the scale of the rounding threshold of eigh_topk (the centered
    # Gram's own trace is no scale: it is 0 for identical rows)
    scale = float(np.trace(K, dtype=np.float64))
    method = auto_method(n, n_components, dense=True) if eigen_solver == "auto" else eigen_solver
    if method == "dense" or n_components >= n - 1 or K.dtype != np.float64:
        stats = center_gram_inplace(K, block=_center_block_rows(n))
        A = K
    else:
        # The iterative solvers get H K H as an operator (center the block, multiply, center
        # the result): one read of K for its row means instead of centering it in place (a
        # read and a write).  A float32 Gram is centered in place, so that the solvers see a
        # float32 array and use its tolerances.
        stats = gram_row_stats(K, block=_center_block_rows(n))
        A = centered_operator(K)
    vals, vecs, n_iter = eigh_topk(
        A,
        n_components,
        method=method,
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        overwrite=True,
        return_n_iter=True,
        scale=scale,
    )
    del K, A
    return vals, vecs, stats, n_iter


def _check_fraction_solver(eigen_solver, n_components) -> None:
    if eigen_solver == "matrix_free" and _is_fraction(n_components):
        raise ValueError(
            "a float n_components (a fraction of the variance) needs all n eigenpairs, "
            "which eigen_solver='matrix_free' (a Gram too large to store) does not compute; "
            "give an int"
        )


def refuse_host_only_options(precomputed: bool, fit_inverse_transform: bool) -> None:
    """ValueError for the options that a fit on a device does not offer (they are learned on
    the host): a precomputed Gram and the pre-image map."""
    if precomputed:
        raise ValueError(
            "kernel='precomputed' is fitted on the host: pass the Gram as a numpy array "
            "(device=None)"
        )
    if fit_inverse_transform:
        raise ValueError(
            "fit_inverse_transform=True is learned on the host: fit on numpy rows "
            "(device=None), or set fit_inverse_transform=False on a device"
        )


class ExactKPCA(BaseKPCA):
    """Exact kernel PCA on the full centered Gram matrix.

    The same projections as ``sklearn.decomposition.KernelPCA`` (up to column signs, which are
    deterministic here).  One n x n Gram in memory, in X's dtype (float32 input halves it), filled
    by its upper triangle on all cores and centered in place; for n > 1000 the default solver is
    block Krylov (``randomized``), which makes about ten times fewer passes over the Gram than
    ARPACK makes matrix-vector products (``benchmarks/bench_exact.py``).  A Gram too large for
    memory is not stored but recomputed in each pass (``eigen_solver="matrix_free"``).

    Accepts scipy.sparse (CSR) X: the kernels evaluate sparse rows directly (the Gram is dense).

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples) (scikit-learn's ``KernelPCA``
        keeps all nonzero components; ``fastkpca.KernelPCA`` is the drop-in with that default).
        A float keeps the smallest number of components whose ``explained_variance_ratio_``
        sums to at least that fraction (all n eigenpairs are computed: dense, for moderate n).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"``, ``"linear"``, ``"cosine"``,
        a :class:`fastkpca.kernels.Kernel`, or ``"precomputed"``: ``fit`` takes the n x n
        training Gram and ``transform`` the n_new x n_train kernel against the training points
        (such a model cannot be saved, compressed, or fit an inverse transform).
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features as in ``KernelPCA``.
    degree, coef0 : polynomial kernel parameters.
    nu : Matern smoothness.
    eigen_solver : {"auto", "dense", "lanczos", "randomized", "orthogonal", "matrix_free", \
"arpack"}
        See :func:`fastkpca.solvers.eigh_topk`.  ``auto`` uses ``dense`` up to n = 1000 (or when
        n_components >= n / 5) and ``randomized`` above; when the Gram does not fit in memory
        (:func:`check_exact_fits`) and n <= :data:`MATRIX_FREE_AUTO_MAX_N`, ``matrix_free``.
        ``"matrix_free"`` stores no Gram: block Krylov iteration on ``H K H`` with K recomputed
        tile by tile in every pass (:func:`matrix_free_kpca`; memory O(n (k + 40)), time a few
        Gram computations), the same eigenpairs to the same tolerance.  ``"arpack"``
        (scikit-learn's name) is ``"lanczos"``.  Every solver's output is checked (k finite
        eigenpairs; Lanczos residuals) and a failing one falls back (LAPACK's index-range
        driver, which fails on a cluster of equal eigenvalues such as a Gram that is nearly
        the identity, to the whole spectrum; ARPACK to block Krylov; see ``eigh_topk``).
        Eigenvalues at the rounding level of the Gram (``16 eps sum_i k(x_i, x_i)``) are 0.
        On a device (tensors, or ``device="cuda"``) the Gram is stored on it when it fits its
        free memory, and ``auto`` takes the device's full ``eigh`` for n <= 2000 (or
        n_components >= n / 5) and block Krylov above
        (:data:`fastkpca.solvers.DEVICE_AUTO_DENSE`); a Gram that does not fit is recomputed
        in every pass (``matrix_free``, over the upper block triangle of tiles sized from the
        free memory: n = 10^6 needs O(n (k + 40)) vectors, no n x n array).  ``lanczos``
        (ARPACK, host-only) is block Krylov there.
    eigen_tol, max_iter : iterative-solver stopping parameters (None: per-dtype defaults;
        scikit-learn's ``SpectralEmbedding`` name: ``tol`` is, in fastkpca, only an error target).
    random_state : int, Generator or None
        Start vectors of the iterative solvers.
    fit_inverse_transform : bool, default False
        Learn the pre-image map of :meth:`inverse_transform` (kernel ridge regression from the
        training projections to the training rows, exactly as ``KernelPCA``; O(n^2) memory, like
        the model).
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_jobs : int or None, default None
        Threads of each call (the Gram's row blocks and the matrix-free passes in ``fit``, the
        kernel rows of ``transform``), scikit-learn's meaning: None or -1 every core the process
        may use (its CPU affinity and quota), -2 all but one, a positive count that many.  The
        model does not depend on it, up to the rounding of sums.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` shows a progress bar (tqdm) over the Gram's rows (over
        the tiles of each pass with ``eigen_solver="matrix_free"``), where the output is a
        terminal or a notebook.
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live (numpy on the host,
        a PyTorch tensor on its device); ``"cuda"`` (or any PyTorch device) sends host data
        there block by block.  Fitted arrays live where the fit ran; ``transform`` returns the
        input's array type, device and dtype.  Needs PyTorch for a device.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered training Gram, descending.
    eigenvectors_ : (n_samples, n_components) unit-norm dual coefficients.
    X_fit_ : the training data (needed to evaluate the kernel for new points).
    kernel_ : the resolved Kernel.
    n_components_ : the number of components used.
    n_iter_ : eigensolver work: 1 (dense), matrix-vector products (lanczos) or block
        iterations (randomized, orthogonal).
    total_variance_ : float
        ``tr(H K H)``, the total variance of the centered training Gram (exact).
    total_variance_error_ : float, 0 (exact).
    explained_variance_ratio_ : (n_components,) ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).
    """

    _accepts_sparse = True
    _accepts_precomputed_kernel = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        eigen_solver="auto",
        eigen_tol=None,
        max_iter=None,
        random_state=None,
        fit_inverse_transform=False,
        alpha=1.0,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.eigen_solver = eigen_solver
        self.eigen_tol = eigen_tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    def fit(self, X, y=None):
        """Fit on X of shape (n_samples, n_features)."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit and return the training projections ``alpha * sqrt(lambda)`` (no second Gram)."""
        rows = self._fit(X)
        if not is_host_array(self.eigenvectors_):  # fitted on a device
            xp = placement_of(self.eigenvectors_).xp
            return output_like(self.eigenvectors_ * xp.sqrt(self.eigenvalues_)[None, :], X)
        out = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        return out.astype(np.float32 if rows.dtype == np.float32 else np.float64, copy=False)

    def _check_params(self):
        """The shared checks, the eigensolver, its ``eigen_tol`` and ``max_iter``, and what a
        precomputed kernel cannot do; returns the resolved eigensolver."""
        super()._check_params()
        eigen_solver = resolve_eigen_solver(self.eigen_solver, EXACT_SOLVERS)
        check_solver_stopping(self.eigen_tol, self.max_iter)
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            if eigen_solver == "matrix_free":
                raise ValueError(
                    "eigen_solver='matrix_free' recomputes the Gram from the rows in every pass; "
                    "with kernel='precomputed' the Gram is the input: use another eigen_solver"
                )
            if self.fit_inverse_transform:
                raise ValueError(
                    "fit_inverse_transform=True with kernel='precomputed': the pre-image map "
                    "needs the kernel between new projections, which a precomputed Gram does "
                    "not give"
                )
        return eigen_solver

    def _fit(self, X):
        eigen_solver = self._check_params()
        precomputed = isinstance(self.kernel, str) and self.kernel == "precomputed"
        source = self._fit_source(X)
        placement = source.placement
        if not placement.host:
            # A device stores the Gram when it fits its free memory, else goes matrix-free
            # (device_exact_kpca decides); what is learned on the host is refused up front.
            refuse_host_only_options(precomputed, self.fit_inverse_transform)
        elif eigen_solver != "matrix_free" and source.n_samples is not None:
            # The stored Gram must fit in this process: check before computing anything.
            n = source.n_samples
            if _is_fraction(self.n_components):
                n_vectors = n  # every eigenpair
            elif isinstance(self.n_components, int | np.integer):
                n_vectors = min(int(self.n_components), n)
            else:
                n_vectors = min(DEFAULT_N_COMPONENTS, n)
            try:
                check_exact_fits(
                    source,
                    fraction=GRAM_FRACTION if source.resident else None,
                    n_components=n_vectors,
                )
            except ValueError:
                if (
                    eigen_solver != "auto"
                    or precomputed
                    or source.n_samples > MATRIX_FREE_AUTO_MAX_N
                ):
                    raise
                eigen_solver = "matrix_free"  # recompute the Gram in each pass instead
        X = source.in_memory(purpose="ExactKPCA")
        rng = self._make_rng()
        # gamma heuristics read host rows: a device source gives them by index
        kernel = self._resolve_kernel(X if placement.host else source, rng)
        _check_fraction_solver(eigen_solver, self.n_components)
        k = self._resolve_n_components(X.shape[0])
        if placement.host:
            solve = exact_kpca
        else:
            solve = partial(device_exact_kpca, every_pair=_is_fraction(self.n_components))
        vals, vecs, stats, n_iter = solve(
            X,
            kernel,
            k,
            eigen_solver=eigen_solver,
            rng=rng,
            tol=self.eigen_tol,
            max_iter=self.max_iter,
        )
        xp = placement.xp
        # The caller's rows are copied (a CSR matrix too, on the host); rows a device source
        # sent from the host are the model's own already.
        if placement.host:
            self.X_fit_ = X.copy()
        else:
            self.X_fit_ = xp.asarray(X, copy=True) if source.resident else X
        self.eigenvalues_ = vals
        self.eigenvectors_ = vecs
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        self.n_iter_ = n_iter
        # Exact total variance: the diagonal (n kernel evaluations) and the Gram's mean.
        diag_sum = float(xp.sum(xp.astype(kernel.diag(X), xp.float64)))
        self._finish_fit(diag_sum, stats.total_mean, 0.0, X)
        return X

    def _resolve_kernel(self, X, rng=None):
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            if X.shape[0] != X.shape[1]:
                raise ValueError(
                    f"kernel='precomputed' needs the square n x n training Gram, got {X.shape}"
                )
            self.kernel_ = PrecomputedKernel()
            return self.kernel_
        return super()._resolve_kernel(X, rng)

    @property
    def _scaled_alphas(self):
        if not is_host_array(self.eigenvalues_):
            return self.eigenvectors_ * inverse_sqrt_or_zero_xp(self.eigenvalues_)[None, :]
        scale = np.zeros_like(self.eigenvalues_)
        nz = self.eigenvalues_ > 0
        scale[nz] = 1.0 / np.sqrt(self.eigenvalues_[nz])
        return self.eigenvectors_ * scale

    def _transform_rows(self, X):
        """Centered ``k(X, X_fit) @ alpha / sqrt(lambda)`` (:func:`centered_projection`)."""
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        return centered_projection(X, self.X_fit_, self.kernel_, stats, self._scaled_alphas, dtype)


def centered_projection(X, points, kernel, stats, coef, dtype, weights=None):
    """``k~(X, points) @ coef``: the kernel rows of X against the expansion points, centered
    with the training statistics (:func:`~fastkpca._centering.center_gram_out_of_sample`,
    optionally weighted), projected on ``coef``; shape ``(len(X), coef.shape[1])`` in ``dtype``.

    The kernel rows are computed and projected chunk by chunk in threads
    (:meth:`~fastkpca.kernels.Kernel.fold_rows`), in float64 whatever X's dtype (the points
    converted once); only the output is cast.  Every product runs with BLAS held to one thread:
    the limit is process-wide, so a product outside it would sum in another order whenever
    another thread holds it, and a transform would depend on what other threads do.
    """
    if not (is_host_array(X) and is_host_array(points)):
        return _centered_projection_xp(X, points, kernel, stats, coef, dtype, weights)
    out = np.empty((X.shape[0], coef.shape[1]), dtype=dtype)
    coef = np.asarray(coef, dtype=np.float64)

    def project(state, start, stop, K):
        center_gram_out_of_sample(K, stats, weights=weights)
        out[start:stop] = K @ coef

    with one_blas_thread():
        if isinstance(kernel, PrecomputedKernel):  # the rows given are the kernel rows
            step = chunk_rows(
                points.shape[0], working_memory_mb=min(kernels.WORKING_MEMORY_MB, GRAM_BLOCK_MB)
            )
            for start in range(0, X.shape[0], step):
                project(None, start, start + step, kernel(X[start : start + step], points))
        else:
            kernel.fold_rows(X, points.astype(np.float64, copy=False), project, _no_state)
    return out


def _no_state():
    return None


# --- on a device ----------------------------------------------------------------------------------
def inverse_sqrt_or_zero_xp(values):
    """``1 / sqrt(values)`` where positive, 0 elsewhere (device arrays)."""
    xp = placement_of(values).xp
    positive = values > 0
    safe = xp.where(positive, values, xp.ones_like(values))
    return xp.where(positive, 1.0 / xp.sqrt(safe), xp.zeros_like(values))


def _centered_projection_xp(X, points, kernel, stats, coef, dtype, weights=None):
    """:func:`centered_projection` on a device: the kernel rows in float64 tiles
    (:meth:`Kernel.fold_rows` dispatches them there), centered and projected tile by tile."""
    if isinstance(kernel, PrecomputedKernel):
        raise ValueError(
            "a kernel='precomputed' model transforms numpy kernel rows (the rows are the kernel "
            "values against the training points)"
        )
    device_side = X if not is_host_array(X) else points
    placement = placement_of(device_side)
    xp = placement.xp
    X, points = placement.asarray(X), placement.asarray(points)
    coef = placement.asarray(coef, dtype=np.float64)
    if str(coef.dtype).rsplit(".", 1)[-1] != "float64":
        coef = xp.astype(coef, xp.float64)
    out = xp.empty(
        (X.shape[0], coef.shape[1]), dtype=placement.dtype(np.dtype(dtype)), device=placement.device
    )

    def project(state, start, stop, K):
        K = center_gram_out_of_sample(K, stats, weights=weights)
        out[start:stop, ...] = xp.astype(K @ coef, out.dtype)

    kernel.fold_rows(X, points, project, _no_state)
    return out


#: The stored Gram on a device takes at most this fraction of its free memory, counted with the
#: dense eigensolver's workspace: ``eigh`` of the whole Gram writes its n x n eigenvectors and a
#: workspace of about the Gram's size again (three Grams); block Krylov on it needs O(n b) more.
DEVICE_GRAM_FRACTION = 0.8


def device_gram_fits(n: int, itemsize: int, method: str, placement: Placement) -> bool:
    """Whether the n x n Gram (``itemsize`` bytes an entry) and the eigensolver ``method``'s
    workspace fit :data:`DEVICE_GRAM_FRACTION` of the device's free memory (for a CPU tensor,
    the memory available to the process)."""
    free = placement.free_memory_bytes()
    if free is None:
        free = available_memory_bytes()
    gram = n * n * itemsize
    # the dense eigh: the Gram in float64, its eigenvectors and LAPACK's workspace
    need = 3 * n * n * 8 if method == "dense" else gram
    return need <= DEVICE_GRAM_FRACTION * free


def device_gram(X, kernel):
    """The n x n Gram of device rows, in X's dtype (float64 tiles, rounded for float32 X, as
    :func:`symmetric_gram` rounds float64 blocks); exact ones on the diagonal where the kernel
    has them."""
    placement = placement_of(X)
    xp = placement.xp
    n = X.shape[0]
    dtype = "float32" if result_dtype(X) == np.float32 else "float64"
    K = xp.empty((n, n), dtype=placement.dtype(dtype), device=placement.device)
    rows = tile_rows(placement, n, 8)
    for start, stop, T in kernel_tiles(kernel, X, X, dtype="float64", rows=rows):
        K[start:stop, ...] = T if dtype == "float64" else xp.astype(T, K.dtype)
    if kernel._exact_diag_one:
        K = fill_diagonal_(K, 1.0)
    return K


def device_exact_kpca(
    X,
    kernel,
    n_components,
    *,
    eigen_solver="auto",
    rng=None,
    tol=None,
    max_iter=None,
    every_pair=False,
):
    """:func:`exact_kpca` for device rows (PyTorch, CuPy): the same tuple, arrays on the device.

    ``auto`` stores the Gram on the device when it fits its free memory
    (:func:`device_gram_fits`) and solves it with the device's ``auto``
    (:func:`fastkpca.solvers.auto_method_device`: the dense ``eigh`` for small n, block Krylov
    for k small next to n); otherwise, and for ``eigen_solver="matrix_free"``, it stores no Gram
    (:func:`device_matrix_free_kpca`).  An explicit stored-Gram solver that does not fit is a
    ValueError naming the memory.  ``every_pair``: a fraction of the variance, all n pairs.
    """
    placement = placement_of(X)
    n = int(X.shape[0])
    itemsize = 4 if result_dtype(X) == np.float32 else 8
    # float32 rows: float32 tiles, as a stored Gram is in X's dtype (the documented option).
    tile_dtype = "float32" if itemsize == 4 else "float64"
    if eigen_solver == "matrix_free":
        return device_matrix_free_kpca(
            X, kernel, n_components, rng=rng, tol=tol, max_iter=max_iter, tile_dtype=tile_dtype
        )
    method = (
        auto_method_device(n, n_components, dense=True) if eigen_solver == "auto" else eigen_solver
    )
    if every_pair:
        method = "dense"
    if not device_gram_fits(n, itemsize, method, placement):
        if eigen_solver == "auto" and not every_pair:
            return device_matrix_free_kpca(
                X, kernel, n_components, rng=rng, tol=tol, max_iter=max_iter, tile_dtype=tile_dtype
            )
        free = placement.free_memory_bytes() or available_memory_bytes()
        raise ValueError(
            f"ExactKPCA's {n} x {n} Gram matrix ({format_bytes(n * n * itemsize)}) with the "
            f"eigen_solver={method!r} workspace does not fit the free memory of {placement.name} "
            f"({format_bytes(free)}); use eigen_solver='matrix_free' (or 'auto'), which "
            "recomputes the Gram in each pass"
        )
    K = device_gram(X, kernel)
    xp = placement.xp
    scale = float(xp.sum(xp.astype(xp.linalg.diagonal(K), xp.float64)))
    stats = center_gram_inplace(K, block=tile_rows(placement, n, 8))
    vals, vecs, n_iter = eigh_topk(
        K,
        n_components,
        method=method,
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        overwrite=True,
        return_n_iter=True,
        scale=scale,
    )
    del K
    return vals, vecs, stats, n_iter


def device_matrix_free_kpca(
    X,
    kernel,
    n_components,
    *,
    rng=None,
    tol=None,
    max_iter=None,
    oversamples=MATRIX_FREE_OVERSAMPLES,
    tile_dtype="float64",
    rows=None,
):
    """:func:`matrix_free_kpca` on a device: block Krylov on ``H K H`` with K recomputed tile by
    tile in every pass (:class:`fastkpca.execution.tiles.CenteredGramOperator`), tiles sized
    from the device's free memory; memory O(n (k + b)) vectors plus one tile, no n x n array.

    ``tile_dtype="float32"`` computes the tiles (rbf: its GEMM; the other kernels: rounded) and
    their products in float32, about twice as fast on a GPU.  Measured on CPU torch (RandomNoisy,
    n = 5000, d = 10, rbf gamma = 0.05, k = 10, against float64 tiles): with float32's default
    tol (1e-5) the eigenvalues agree to 1.0e-8 relative and the embedding (``eigenvectors *
    sqrt(eigenvalues)``, relative in Frobenius norm) to 1.6e-5, the stopping tolerance's share;
    with tol=1e-6 or 1e-7, the floor of float32 tiles: 1.8e-8 and 3.5e-7.  float64 (the default)
    meets the 1e-8 residuals of exact KPCA.

    Returns the tuple of :func:`exact_kpca`; ``n_iter`` is the number of passes.
    """
    op = CenteredGramOperator(X, kernel, dtype=tile_dtype, rows=rows)
    vals, vecs, _ = eigh_topk(
        op,
        n_components,
        method="randomized",
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        oversamples=oversamples,
        return_n_iter=True,
        scale=op.diag_sum(),
    )
    xp = placement_of(X).xp
    row_means = op.row_means
    stats = CenteringStats(col_means=row_means, total_mean=float(xp.mean(row_means)))
    return vals, vecs, stats, op.n_passes
