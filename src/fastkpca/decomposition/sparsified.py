"""Kernel PCA on a sampled and/or quantized Gram matrix (Achlioptas, McSherry & Schoelkopf 2001).

Section 3 of the paper replaces the Gram matrix K by a random matrix K^ with ``E[K^] = K`` that
is cheaper to build, store and multiply:

- sparsification: ``K^_ij = s K_ij`` with probability ``1 / s`` and 0 otherwise
  (``sample_prob = 1 / s``): only the kept entries are ever evaluated;
- quantization: ``K^_ij = +b`` with probability ``1/2 + K_ij / (2b)`` and ``-b`` otherwise,
  ``b = max_ij |K_ij|``: one bit per entry (its sign), one level b for all entries;
- both: quantize the kept entries, ``K^_ij = +-s b``.

The error ``E = K^ - K`` has independent, mean-zero entries, so by the Furedi-Komlos theorem
(Theorem 1) ``||E||_2 <= 4 sigma sqrt(n)`` with high probability, sigma^2 bounding the entries'
variance, and by Davis-Kahan (Theorems 2-4) the top eigenvectors of K^ are close to those of K
*when the eigen-gap stands well above that noise norm*.  KPCA then runs on the implicitly centered
K^ (``fastkpca._centering.centered_operator``) with Lanczos (the default) or orthogonal iteration
(the paper's exposition); each product costs O(nnz) instead of O(n^2).

Rows on a device (PyTorch tensors, CuPy arrays, or ``device=``): the kept entries are read off
dense kernel tiles computed on the device (:func:`fastkpca.execution.tiles.kernel_tile`), and only
the kept values come to the host.  The sampling decisions, the scipy.sparse matrix and its
eigensolver (ARPACK or orthogonal iteration) stay on the host: a sparse eigensolver on the device
is a project of its own, and the matrix holds ``sample_prob n^2 / 2`` entries, not the rows.  The
same ``random_state`` therefore gives the same model on every device, up to the rounding of the
kernel values; the (n x k) results are moved to the device, and ``transform`` runs there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._centering import CenteringStats, centered_operator
from .._utils import as_generator, check_float, require_memory_parts
from ..execution import progress_bar
from ..execution.arrays import placement_of, to_host
from ..execution.tiles import kernel_tile, tile_rows
from ..kernels import _Radial, chunk_rows
from ..solvers import TOLERANCES, eigh_topk, flip_signs, postprocess_eigen
from ._base import BaseKPCA, _is_fraction, check_solver_stopping
from .compress import (
    centered_expansion,
    fitted_arrays_to,
    inverse_sqrt_or_zero,
    kernel_diag,
    transform_on_device,
)
from .exact import ExactKPCA, resolve_eigen_solver

__all__ = ["SparsifiedKPCA", "SparsifiedGram", "sparsify_gram", "sparsified_kpca", "EIGEN_SOLVERS"]

EIGEN_SOLVERS = ("lanczos", "orthogonal")


def _pairwise_is_cheaper(sample_prob, n_features):
    """Rough cost model for evaluating the kept Gram entries (measured on a 2-core machine).

    Pair by pair, a kept entry costs about ``100 + 4 d + 0.01 d^2`` ns (gathering the kept rows
    of X, which leaves the cache for large d); read off a dense Gram row block (one BLAS product
    for all entries), every entry costs about ``100 + d / 4`` ns.  Pairs win below
    ``sample_prob ~ 0.7`` for d = 10, 0.37 for d = 50, 0.03 for d = 784.
    """
    d = n_features
    return sample_prob * (100.0 + 4.0 * d + 0.01 * d * d) <= 100.0 + 0.25 * d


@dataclass
class SparsifiedGram:
    """The random symmetric matrix ``K^ = scale * (U + U^T) + diag(d)`` of section 3.

    ``upper`` holds the kept entries strictly above the diagonal (CSR; the lower triangle is its
    mirror image, because (i, j) and (j, i) are one random decision); ``diag`` is the exact
    diagonal.  Quantized entries are stored as +-1 (float32 holds them exactly) with the level
    ``b / sample_prob`` in ``scale``.
    """

    upper: sp.csr_matrix
    diag: np.ndarray
    scale: float
    sample_prob: float = 1.0
    quantized: bool = False

    @property
    def shape(self):
        n = self.diag.shape[0]
        return (n, n)

    @property
    def n_kept(self) -> int:
        """Number of kept off-diagonal pairs i < j."""
        return int(self.upper.nnz)

    def matmat(self, V) -> np.ndarray:
        """``K^ @ V`` in float64; the stored entries are multiplied in their own dtype."""
        V = np.asarray(V, dtype=np.float64)
        Vd = V.astype(self.upper.dtype, copy=False)
        # U^T is a CSC view of the same arrays: no second copy of the matrix.
        out = np.asarray(self.upper @ Vd + self.upper.T @ Vd, dtype=np.float64)
        out *= self.scale
        out += self.diag[:, None] * V if V.ndim == 2 else self.diag * V
        return out

    def operator(self) -> LinearOperator:
        return LinearOperator(
            self.shape,
            matvec=self.matmat,
            matmat=self.matmat,
            rmatvec=self.matmat,
            dtype=np.float64,
        )

    def noise_norm(self) -> float:
        """Estimate of ``||K^ - K||_2``: ``2 sqrt(max_i sum_j Var(K^_ij))``.

        The leading term of the norm of a random symmetric matrix with independent centred
        entries (the semicircle edge ``2 sigma sqrt(n)`` when all variances equal sigma^2;
        Bandeira & van Handel 2016 for unequal ones): sharper than the Furedi-Komlos bound of
        the paper, which uses the largest variance for every entry.  Sampling has
        ``Var = (1/p - 1) K_ij^2``, estimated without bias from the kept entries; quantization
        ``Var = b^2 / p - K_ij^2``, bounded by ``b^2 / p`` (K_ij is not stored).
        """
        n = self.shape[0]
        if n < 2 or (self.sample_prob >= 1.0 and not self.quantized):
            return 0.0
        s = 1.0 / self.sample_prob
        if self.quantized:
            level = self.scale * self.sample_prob  # b
            row_var = (n - 1) * s * level**2
        else:
            U = self.upper
            kept_sq = np.zeros(n)
            for start, stop in _entry_chunks(U.indptr):
                lo, hi = U.indptr[start], U.indptr[stop]
                sq = np.square(U.data[lo:hi], dtype=np.float64)
                kept_sq += np.bincount(U.indices[lo:hi], weights=sq, minlength=n)  # columns
                rows = np.repeat(np.arange(start, stop), np.diff(U.indptr[start : stop + 1]))
                kept_sq += np.bincount(rows, weights=sq, minlength=n)  # rows
            # E[sum over kept j of s K_ij^2] = sum_j K_ij^2
            row_var = float(np.max((s - 1.0) * s * kept_sq))
        return 2.0 * float(np.sqrt(row_var))

    def total_mean_error(self) -> float:
        """Standard error of the total mean ``1^T K^ 1 / n^2`` (an unbiased estimate of
        ``||mu||^2``, the squared mean embedding).

        It is ``2 sqrt(sum_{i<j} Var(K^_ij)) / n^2``: with sampling ``Var = (1/p - 1) K_ij^2``,
        summed without bias from the kept entries; with quantization bounded by ``b^2 / p``.
        """
        n = self.shape[0]
        if n < 2 or (self.sample_prob >= 1.0 and not self.quantized):
            return 0.0
        s = 1.0 / self.sample_prob
        if self.quantized:
            level = self.scale * self.sample_prob  # b
            total_var = n * (n - 1) / 2 * s * level**2
        else:
            kept_sq = float(np.sum(np.square(self.upper.data, dtype=np.float64)))
            total_var = (s - 1.0) * s * kept_sq  # E[s kept_sq] = sum_{i<j} K_ij^2
        return 2.0 * float(np.sqrt(total_var)) / n**2

    def row_means(self) -> np.ndarray:
        """``K^ 1 / n``: unbiased estimates of the Gram row means, the centering statistics."""
        n = self.shape[0]
        return self.matmat(np.ones(n)) / n


def _entry_chunks(indptr, max_entries=1 << 20):
    """Row ranges ``(start, stop)`` of a CSR structure holding about ``max_entries`` entries
    each, so per-entry temporaries stay small next to the matrix."""
    n = indptr.size - 1
    start = 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + max_entries, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        yield start, stop
        start = stop


def _kept_columns(n, sample_prob, rng):
    """CSR structure of the kept pairs i < j: each pair is kept independently w.p. sample_prob.

    Row i keeps a Binomial(n - 1 - i, p) number of columns drawn without replacement from
    i + 1 .. n - 1, which is the same law as n - 1 - i independent coin flips, at O(kept) cost.
    """
    lengths = n - 1 - np.arange(n)
    counts = lengths if sample_prob >= 1.0 else rng.binomial(lengths, sample_prob)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    for i in range(n - 1):
        lo, hi = indptr[i], indptr[i + 1]
        if sample_prob >= 1.0:
            indices[lo:hi] = np.arange(i + 1, n)
        elif hi > lo:
            cols = rng.choice(lengths[i], hi - lo, replace=False)
            cols.sort()
            indices[lo:hi] = cols + (i + 1)
    return indptr, indices


def _kernel_at_kept(X, kernel, indptr, indices, data, pairwise):
    """Fill ``data`` with k(x_i, x_j) at the kept pairs, a row block at a time."""
    n = X.shape[0]
    if pairwise:
        # Only the kept entries are evaluated: sum of kept * n_features work in all.
        for i in range(n - 1):
            lo, hi = indptr[i], indptr[i + 1]
            if hi > lo:
                data[lo:hi] = kernel(X[i : i + 1], X[indices[lo:hi]])[0]
        return
    # A memory-budgeted row block, and never more than a quarter of the rows: no n x n array.
    step = max(1, min(chunk_rows(n), -(-n // 4)))
    with progress_bar(total=n, desc="sampled Gram") as bar:
        for start in range(0, n, step):
            stop = min(n, start + step)
            lo, hi = indptr[start], indptr[stop]
            bar.update(stop - start)
            if hi == lo:
                continue
            # Rows start..stop-1 only need columns > start: the upper part of the row block,
            # filled in small row chunks on the call's threads (Kernel.blocks).
            rows = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
            cols = indices[lo:hi] - start
            for s, e, K in kernel.blocks(X[start:stop], X[start:]):
                a, b = indptr[start + s] - lo, indptr[start + e] - lo
                data[lo + a : lo + b] = K[rows[a:b] - s, cols[a:b]]


def _host_dtype(X) -> np.dtype:
    """The numpy dtype of a device array's float dtype (float32 or float64)."""
    return np.dtype(np.float32) if str(X.dtype).endswith("float32") else np.dtype(np.float64)


def _kernel_at_kept_on_device(X, kernel, indptr, indices, data):
    """:func:`_kernel_at_kept` for rows on a device: dense row tiles of the upper triangle
    computed there (sized from the device's free memory), the kept entries gathered there and
    only they copied into ``data`` on the host."""
    placement = placement_of(X)
    xp = placement.xp
    n = X.shape[0]
    dtype = _host_dtype(X)
    step = tile_rows(placement, n, dtype.itemsize)
    with progress_bar(total=n, desc="sampled Gram") as bar:
        for start in range(0, n, step):
            stop = min(n, start + step)
            lo, hi = indptr[start], indptr[stop]
            bar.update(stop - start)
            if hi == lo:
                continue
            # Rows start..stop-1 against columns start.., read at the kept (row, column) pairs
            # through the flat index of the tile.
            rows = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
            flat = rows * (n - start) + (indices[lo:hi] - start)
            K = kernel_tile(kernel, X[start:stop], X[start:], dtype=dtype.name)
            kept = xp.take(xp.reshape(K, (-1,)), placement.asarray(flat), axis=0)
            data[lo:hi] = to_host(kept)


def sparsify_gram(
    X, kernel, sample_prob=1.0, *, quantize=False, rng=None, pairwise=None
) -> SparsifiedGram:
    """Sample (and optionally 1-bit quantize) the Gram matrix of X without forming it.

    Achlioptas, McSherry & Schoelkopf (2001), section 3: kept entries ``K_ij / p`` (p =
    ``sample_prob``), or with ``quantize`` ``+-b / p`` with ``P(+) = 1/2 + K_ij / (2b)``; either
    way ``E[K^] = K``.  The diagonal is kept exactly (see :class:`SparsifiedKPCA`).

    Parameters
    ----------
    X : (n, d) array.
    kernel : fastkpca.kernels.Kernel
    sample_prob : float in (0, 1]
    quantize : bool
    rng : numpy Generator or seed
    pairwise : bool or None
        Evaluate the kernel only at the kept pairs (True) or read them off dense row blocks of
        the upper triangle (False); None picks the cheaper by a rough cost model.
        Both give the same matrix for the same seed.  Rows on a device always use dense tiles
        (the kept values gathered on the device; the matrix itself is built on the host).

    Returns
    -------
    SparsifiedGram
    """
    rng = as_generator(rng, name="rng")
    n, d = X.shape
    on_host = placement_of(X).host
    diag = np.asarray(to_host(kernel_diag(kernel, X)), dtype=np.float64)
    indptr, indices = _kept_columns(n, sample_prob, rng)
    if pairwise is None:
        pairwise = _pairwise_is_cheaper(sample_prob, d)
    values = np.empty(indices.size, dtype=X.dtype if on_host else _host_dtype(X))
    if on_host:
        _kernel_at_kept(X, kernel, indptr, indices, values, pairwise)
    else:
        _kernel_at_kept_on_device(X, kernel, indptr, indices, values)
    scale = 1.0 / sample_prob
    if quantize:
        # b = max |K_ij| = max_i K_ii for a positive-definite kernel (Cauchy-Schwarz), so it
        # costs n kernel evaluations, not n^2.  Randomized rounding to +-b keeps E = K_ij.
        b = float(np.max(np.abs(diag))) if n else 0.0
        signs = np.zeros(values.size, dtype=np.float32)
        if b > 0:
            for start, stop in _entry_chunks(indptr):
                lo, hi = indptr[start], indptr[stop]
                p_plus = np.clip(0.5 + values[lo:hi] / (2.0 * b), 0.0, 1.0)
                signs[lo:hi] = np.where(rng.random(hi - lo) < p_plus, 1.0, -1.0)
        values, scale = signs, b / sample_prob
    upper = sp.csr_matrix((values, indices, indptr), shape=(n, n))
    return SparsifiedGram(
        upper=upper, diag=diag, scale=scale, sample_prob=sample_prob, quantized=quantize
    )


def noise_norm_bound(n, sample_prob, max_entry, quantize) -> float:
    """The Furedi-Komlos bound ``4 sigma sqrt(n)`` on ``||K^ - K||_2`` (paper, Theorem 1).

    sigma^2 bounds the entries' variance: ``(1/p - 1) b^2`` for sampling, ``b^2`` for
    quantization, ``b^2 / p`` for both (``b = max |K_ij|``).
    """
    s = 1.0 / sample_prob
    var = (s if quantize else s - 1.0) * max_entry**2
    return 4.0 * np.sqrt(var * n)


def _negative_shift(op, rng, tol=1e-2):
    """A shift c >= -lambda_min(op) (approximately), making ``op + c I`` positive semi-definite.

    K^ is not PSD: its noise E has a symmetric spectrum of radius about ``2 sigma sqrt(n)``.
    Orthogonal iteration converges to the eigenvalues of largest *magnitude*, so on K^ it could
    lock onto noise eigenvalues below -lambda_k; on ``K^ + c I`` the largest-magnitude
    eigenvalues are the largest ones (the paper's shift in the proof of Theorem 4).  A loose
    Lanczos run for the smallest eigenvalue gives c; its Ritz value errs towards 0, so c gets a
    5 % margin (a slightly too small shift leaves only tiny negative eigenvalues, harmless).
    """
    n = op.shape[0]
    if n < 3:
        return 0.0
    neg = LinearOperator(
        op.shape, matvec=lambda v: -op.matvec(v), matmat=lambda V: -op.matmat(V), dtype=np.float64
    )
    vals, _ = eigh_topk(neg, 1, method="lanczos", rng=rng, tol=tol)
    return 1.05 * float(vals[0])


def _shifted(op, shift):
    return LinearOperator(
        op.shape,
        matvec=lambda v: op.matvec(v) + shift * v,
        matmat=lambda V: op.matmat(V) + shift * V,
        rmatvec=lambda v: op.matvec(v) + shift * v,
        dtype=np.float64,
    )


def _gram_is_constant(X, kernel) -> bool:
    """True if the Gram matrix of X is constant in float64: all rows equal, or (for kernels of
    the squared distance) all squared differences to the first row underflow to 0 (entries of
    ~1e-300), so that every distance the kernel computes is below its rounding."""
    if X.shape[0] <= 1:
        return True
    placement = placement_of(X)
    if placement.host:
        lo, hi = X.min(axis=0), X.max(axis=0)
    else:  # the column ranges on the device, two d-vectors to the host
        lo = to_host(placement.xp.min(X, axis=0))
        hi = to_host(placement.xp.max(X, axis=0))
    if sp.issparse(lo):
        lo, hi = lo.toarray(), hi.toarray()
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if np.array_equal(lo, hi):
        return True
    # max_i ||x_i - x_0||^2 <= ||hi - lo||^2: a bound without an n x d difference array.
    with np.errstate(over="ignore"):  # an inf spread is simply not 0
        spread = float(np.sum(np.square(hi - lo)))
    return isinstance(kernel, _Radial) and spread == 0.0


def _constant_gram_kpca(X, kernel, n_components, rng):
    """The exact answer of :func:`sparsified_kpca` for a constant Gram ``K = c 1 1^T``.

    Its centered Gram is exactly 0, but a sparsified (or quantized) K^ is not constant, and its
    centering leaves the sampling noise, whose eigenvalues (of order ``c sqrt(n / p)``) would be
    reported as structure.  Identical rows are detected in O(n d), so no entry is sampled: the
    eigenvalues are 0, the dual coefficients any orthonormal vectors orthogonal to 1.
    """
    n = X.shape[0]
    c = float(np.asarray(kernel.diag(to_host(X[:1])), dtype=np.float64)[0])
    # A zero matrix has every vector as eigenvector; 1 / sqrt(n) comes last (only if k = n).
    basis = np.column_stack([np.ones(n), rng.standard_normal((n, n_components))])
    Q = la.qr(basis, mode="economic")[0]
    vecs = np.roll(Q, -1, axis=1)[:, :n_components]
    vals = np.zeros(n_components)
    stats = CenteringStats(col_means=np.full(n, c), total_mean=c)
    info = {"n_kept": 0, "n_iter": 0, "max_entry": abs(c), "noise_norm": 0.0, "mean_sq_error": 0.0}
    return vals, flip_signs(vecs), stats, info


def sparsified_kpca(
    X,
    kernel,
    n_components,
    *,
    sample_prob=0.1,
    quantize=False,
    eigen_solver="lanczos",
    rng=None,
    tol=None,
    max_iter=None,
):
    """Top eigenpairs of the centered sparsified / quantized Gram matrix of X.

    Returns
    -------
    eigenvalues : (k,) float64, descending
    eigenvectors : (n, k) float64, orthonormal (dual coefficients)
    stats : CenteringStats of K^ (unbiased estimates of the Gram row means)
    info : dict with ``n_kept`` (pairs i < j kept), ``n_iter`` (eigensolver work),
        ``max_entry`` (b) and ``noise_norm`` (estimate of ``||K^ - K||_2``)
    """
    rng = as_generator(rng, name="rng")
    if _gram_is_constant(X, kernel):
        return _constant_gram_kpca(X, kernel, n_components, rng)
    gram = sparsify_gram(X, kernel, sample_prob, quantize=quantize, rng=rng)
    row_means = gram.row_means()
    stats = CenteringStats(col_means=row_means, total_mean=float(row_means.mean()))
    op = centered_operator(gram.operator())
    if eigen_solver == "lanczos" and n_components >= X.shape[0]:
        # ARPACK needs k < n; with k = n orthogonal iteration spans everything: exact.
        eigen_solver = "orthogonal"
    shift = 0.0
    if eigen_solver == "orthogonal":
        if tol is None:
            # Products are only as precise as the stored entries (float32 for quantized signs).
            tol = TOLERANCES[np.dtype(gram.upper.dtype)]["iterative"]
        if sample_prob < 1.0 or quantize:
            shift = _negative_shift(op, rng)
            op = _shifted(op, shift)
    # The rounding threshold's scale: the exact trace sum_i k(x_i, x_i) of the Gram.
    scale = float(np.sum(gram.diag))
    vals, vecs, n_iter = eigh_topk(
        op,
        n_components,
        method=eigen_solver,
        rng=rng,
        tol=tol,
        max_iter=max_iter,
        return_n_iter=True,
        scale=scale,
    )
    if shift:
        vals, vecs = postprocess_eigen(vals - shift, vecs, scale=scale)
    max_entry = float(np.max(np.abs(gram.diag))) if gram.diag.size else 0.0
    info = {
        "mean_sq_error": gram.total_mean_error(),
        "n_kept": gram.n_kept,
        "n_iter": n_iter,
        "max_entry": max_entry,
        "noise_norm": gram.noise_norm(),
    }
    return vals, vecs, stats, info


class SparsifiedKPCA(BaseKPCA):
    """Kernel PCA on a randomly sampled and/or 1-bit quantized Gram matrix.

    Achlioptas, McSherry & Schoelkopf, "Sampling techniques for kernel methods" (NIPS 2001),
    section 3.  Each pair (i, j), i < j, is kept with probability ``sample_prob`` and scaled by
    ``1 / sample_prob`` (one decision for (i, j) and (j, i), so the matrix stays symmetric);
    only kept entries are evaluated and stored (CSR, upper triangle), so building the matrix
    costs about ``sample_prob * n^2 / 2`` kernel evaluations and memory, and each product in the
    eigensolver ``sample_prob * n^2`` operations.  With ``quantize=True`` each kept entry is
    rounded at random to ``+-b`` (``b = max_ij |K_ij|``) so that its expectation is unchanged;
    it is then stored as a sign.

    When it works: the perturbation ``E = K^ - K`` has independent mean-zero entries, so its
    norm is at most ``4 sigma sqrt(n)`` (Furedi-Komlos, the paper's Theorem 1, sigma^2 the
    largest entry variance: ``noise_norm_bound_`` after fit) and in practice about
    ``2 sqrt(max_i sum_j Var E_ij)`` (``noise_norm_``, estimated from the kept entries).  The
    leading eigenvectors are recovered when the eigenvalues kept, and the gap after the last one,
    stand well above that norm (Davis-Kahan, Theorems 2-4): e.g. well-separated clusters, whose
    eigenvalues grow like n while the noise grows like ``sqrt(n / sample_prob)``.  Compare
    ``eigenvalues_`` with ``noise_norm_``: components below it are noise.  When the spectrum
    decays slowly (no dominant structure) use :class:`~fastkpca.NystromKPCA` or random features.
    Quantization adds variance ``b^2 / p - K_ij^2`` even where ``K_ij ~ 0`` (sampling adds
    ``(1/p - 1) K_ij^2``, nothing there), so it needs a larger margin.

    The diagonal is kept exactly: it is only n kernel evaluations (``Kernel.diag``), whereas
    sampling it would add a diagonal error of norm up to ``(1/p - 1) max_i K_ii`` that, unlike the
    off-diagonal noise, is not averaged out over a row (n entries are too few), and which acts on
    each point's own weight ``||phi(x_i)||^2``; for a unit-diagonal kernel quantization would
    leave it unchanged anyway.

    ``transform`` is the exact kernel expansion over the training points with the dual
    coefficients found on K^ (like :class:`~fastkpca.ExactKPCA`), centred with the row means of
    K^ (unbiased estimates of those of K).  ``fit_transform(X)`` equals ``fit(X).transform(X)``:
    evaluating the exact kernel rows once more costs n^2 kernel evaluations (in row blocks), but
    cancels the first-order effect of E outside the leading subspace, so it is more accurate than
    the eigenvectors of K^ scaled by the root eigenvalues.  :func:`fastkpca.compress_expansion`
    makes that transform cheaper.

    Accepts scipy.sparse (CSR) X (the kernels evaluate sparse rows directly).
    ``kernel="precomputed"`` is not offered: the kept entries would be read off an n x n Gram
    the caller already holds, which saves nothing over :class:`~fastkpca.ExactKPCA`.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples) (scikit-learn's ``KernelPCA``
        keeps all nonzero components).  A float keeps the smallest number whose
        ``explained_variance_ratio_`` reaches that fraction; it computes all n eigenpairs of K^
        (orthogonal iteration with n vectors), so use it for moderate n only.
    kernel, gamma, degree, coef0, nu :
        Kernel spec, as for :class:`~fastkpca.ExactKPCA`.
    sample_prob : float in (0, 1], default 0.1
        Probability ``1 / s`` of keeping each off-diagonal Gram entry (1 keeps all: exact KPCA
        unless ``quantize``).  0.1 stores a tenth of the Gram matrix; the noise norm grows like
        ``sqrt(1 / sample_prob)``.
    quantize : bool, default False
        Round kept entries at random to ``+-b`` (1 bit each).
    eigen_solver : {"lanczos", "orthogonal", "arpack"}, default "lanczos"
        (``"arpack"``, scikit-learn's name, is ``"lanczos"``.)  ARPACK Lanczos, which the paper
        notes is often preferable, or orthogonal iteration with
        ``n_components`` vectors (the paper's exposition).  K^ is indefinite (its noise has
        negative eigenvalues), so orthogonal iteration runs on ``K^ + c I`` with c from a loose
        Lanczos estimate of the smallest eigenvalue; its rate ``(lambda_{k+1} + c) /
        (lambda_k + c)`` then makes it several times slower than Lanczos (measured: 139 block
        iterations of 10 vectors against 74 Lanczos products for the same answer).  For
        ``n_components >= n_samples``, where ARPACK cannot run, orthogonal iteration is used,
        which is then exact.
    eigen_tol, max_iter :
        Eigensolver stopping rule (None: per-dtype defaults of :func:`fastkpca.solvers.eigh_topk`;
        scikit-learn's ``SpectralEmbedding`` name: ``tol`` is, in fastkpca, only an error target).
    random_state : int, Generator or None
        Sampling, quantization and solver start vectors.
    fit_inverse_transform : bool, default False
        Learn the pre-image map of :meth:`inverse_transform` on the training rows (kernel ridge
        regression from their projections, as ``KernelPCA``; the model is O(n) already).
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.
    n_jobs : int or None, default None
        Threads of each call (kernel rows), scikit-learn's meaning: None or -1 every core the
        process may use (its CPU affinity and quota), -2 all but one, a positive count that
        many.  The model does not depend on it, up to the rounding of sums.
    verbose : int, default 0
        With ``verbose > 0``, ``fit`` shows progress bars (tqdm) where it has long passes,
        where the output is a terminal or a notebook.
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live (numpy on the host,
        a PyTorch tensor on its device); ``"cuda"`` (or any PyTorch device) sends host data
        there block by block.  Fitted arrays live where the fit ran; ``transform`` returns the
        input's array type, device and dtype.  Needs PyTorch for a device.  On a device the
        kept Gram entries are computed there, while the sampled matrix (scipy.sparse) and its
        eigensolver stay on the host (see the module notes): the same model as numpy.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered K^, estimates of those of the
        centered training Gram.
    eigenvectors_ : (n_samples, n_components) unit-norm dual coefficients.
    X_fit_ : training data; gram_col_means_, gram_total_mean_ : centering statistics.
    kernel_, n_components_ : resolved kernel and number of components.
    n_kept_ : number of kept pairs i < j (out of n (n - 1) / 2).
    max_entry_ : b = max |K_ij| (the quantization level before scaling).
    noise_norm_ : estimate ``2 sqrt(max_i sum_j Var E_ij)`` of ``||K^ - K||_2``.
    noise_norm_bound_ : Furedi-Komlos bound ``4 sigma sqrt(n)`` on ``||K^ - K||_2``.
    n_iter_ : eigensolver work (block iterations or matrix-vector products).
    total_variance_ : float
        ``tr(H K H)`` estimated as ``sum_i K_ii - n * 1^T K^ 1 / n^2`` (the diagonal exact, the
        mean embedding term unbiased from K^).
    total_variance_error_ : float
        Its standard error (see :meth:`SparsifiedGram.total_mean_error`).
    explained_variance_ratio_ : ``eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).
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
        sample_prob=0.1,
        quantize=False,
        eigen_solver="lanczos",
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
        self.sample_prob = sample_prob
        self.quantize = quantize
        self.eigen_solver = eigen_solver
        self.eigen_tol = eigen_tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device

    def _check_params(self):
        """The shared checks, then this estimator's parameters (ValueError naming each);
        returns the resolved eigensolver."""
        super()._check_params()
        check_float("sample_prob", self.sample_prob, low=0.0, high=1.0, low_open=True)
        if not isinstance(self.quantize, bool | np.bool_):
            raise ValueError(f"quantize must be True or False, got {self.quantize!r}")
        check_solver_stopping(self.eigen_tol, self.max_iter)
        return resolve_eigen_solver(self.eigen_solver, EIGEN_SOLVERS)

    def _require_fit_memory(self, n, dtype) -> None:
        """Refuse, before any entry is sampled, a ``sample_prob`` whose kept Gram entries cannot
        fit (ValueError naming it and the memory): about ``sample_prob n (n - 1) / 2`` of them,
        each a column index (int32) and a value (X's dtype; a float32 sign more with
        ``quantize``), and the CSR row pointers; and the eigensolver's n x k blocks (k = n for
        a fraction of the variance); ``dtype`` is the rows' (numpy) dtype."""
        p = float(self.sample_prob)
        kept = p * n * (n - 1) / 2
        per_entry = 4 + np.dtype(dtype).itemsize + (4 if self.quantize else 0)
        k = self.n_components
        k = n if _is_fraction(k) else min(n, k if isinstance(k, int | np.integer) else 10)
        require_memory_parts(
            [
                (
                    kept * per_entry + 8 * (n + 1),
                    f"sample_prob={p}: the sampled Gram's {kept:.3g} kept entries of {n} rows",
                ),
                (  # the iteration's block, its product and the Ritz vectors
                    4 * 8 * n * int(k),
                    f"n_components={self.n_components}: {int(k)} eigenvectors of length {n}",
                ),
            ],
            hint="lower sample_prob or n_components",
        )

    def fit(self, X, y=None):
        """Fit on X of shape (n_samples, n_features)."""
        eigen_solver = self._check_params()
        source = self._fit_source(X)
        X = source.in_memory(purpose="SparsifiedKPCA")
        placement = source.placement
        self._require_fit_memory(X.shape[0], source.dtype)
        rng = self._make_rng()
        kernel = self._resolve_kernel(X if placement.host else source, rng)
        k = self._resolve_n_components(X.shape[0])
        vals, vecs, stats, info = sparsified_kpca(
            X,
            kernel,
            k,
            sample_prob=float(self.sample_prob),
            quantize=bool(self.quantize),
            eigen_solver=eigen_solver,
            rng=rng,
            tol=self.eigen_tol,
            max_iter=self.max_iter,
        )
        self.X_fit_ = X.copy() if placement.host else placement.xp.asarray(X, copy=True)
        self.eigenvalues_ = vals
        self.eigenvectors_ = vecs
        self.gram_col_means_ = stats.col_means
        self.gram_total_mean_ = stats.total_mean
        self.n_kept_ = info["n_kept"]
        self.n_iter_ = info["n_iter"]
        self.max_entry_ = info["max_entry"]
        self.noise_norm_ = info["noise_norm"]
        self.noise_norm_bound_ = float(
            noise_norm_bound(
                X.shape[0], float(self.sample_prob), info["max_entry"], bool(self.quantize)
            )
        )
        diag_sum = to_host(kernel_diag(kernel, X)).sum(dtype=np.float64)
        # On a device the solver's (host) results move there before the model is finished, so
        # the pre-image map projects its anchors there; the map's own arrays follow.
        fitted_arrays_to(self, placement)
        self._finish_fit(diag_sum, stats.total_mean, info["mean_sq_error"], self.X_fit_)
        fitted_arrays_to(self, placement)
        return self

    # The fitted model is a kernel expansion over X_fit_ exactly like ExactKPCA's (same fitted
    # attributes), so the out-of-sample transform is shared rather than repeated.
    _scaled_alphas = ExactKPCA._scaled_alphas

    def _transform_rows(self, X):
        """Centered ``k(X, X_fit_) @ alpha / sqrt(lambda)``: ExactKPCA's on the host; on a
        device the same expansion with the centering folded into its coefficients
        (:meth:`kernel_expansion`), evaluated in float64 tiles there."""
        if placement_of(X).host:
            return ExactKPCA._transform_rows(self, X)
        return transform_on_device(self.kernel_expansion(), X)

    def kernel_expansion(self):
        """``transform(X) = kernel_(X, points) @ coef + offset``: see :mod:`.compress`."""
        return centered_expansion(
            self.X_fit_,
            self.eigenvectors_ * inverse_sqrt_or_zero(self.eigenvalues_),
            self.gram_col_means_,
            self.gram_total_mean_,
            self.kernel_,
        )
