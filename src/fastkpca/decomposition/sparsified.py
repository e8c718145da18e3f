"""Kernel PCA on a sampled and/or quantized Gram matrix (Achlioptas, McSherry & Schoelkopf 2001).

Section 3 replaces the Gram K by a random K^ with ``E[K^] = K``: sparsification keeps
``K^_ij = s K_ij`` with probability ``1 / s`` (``sample_prob``); quantization rounds to ``+-b``
with ``P(+) = 1/2 + K_ij / (2b)``, ``b = max |K_ij|``; both give ``+-s b``.  The error has
independent mean-zero entries, so ``||E||_2 <= 4 sigma sqrt(n)`` (Furedi-Komlos, Theorem 1) and
the top eigenvectors survive when the eigen-gap stands well above that (Davis-Kahan, Theorems
2-4).  KPCA runs on the implicitly centered K^ at O(nnz) per product; the noise biases the
eigenvalues up, removed by :func:`debiased_eigenvalues`.  The kept entries are computed where the
rows live (:func:`fastkpca.execution.kernel_ops.kernel_at_pairs`); the sparse matrix and its
eigensolver stay on the host, so a ``random_state`` gives the same model on every namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.sparse.linalg import LinearOperator
from sklearn.utils.validation import check_is_fitted

from .._centering import CenteringStats, centered_operator
from .._utils import as_generator, check_float, require_memory_parts
from ..execution.arrays import float_dtype, get_namespace, row_range, to_host
from ..execution.kernel_ops import kernel_at_pairs, kernel_diag
from ..kernels import _Radial
from ..solvers import TOLERANCES, eigh_topk, flip_signs, postprocess_eigen
from ._base import BaseKPCA, _is_fraction, check_solver_stopping
from .compress import centered_expansion, fitted_arrays_to, inverse_sqrt_or_zero
from .exact import centered_projection, own_copy, resolve_eigen_solver

__all__ = [
    "SparsifiedKPCA",
    "SparsifiedGram",
    "sparsify_gram",
    "sparsified_kpca",
    "debiased_eigenvalues",
    "EIGEN_SOLVERS",
]

EIGEN_SOLVERS = ("lanczos", "orthogonal")


@dataclass
class SparsifiedGram:
    """The random symmetric matrix ``K^ = scale * (U + U^T) + diag(d)`` of section 3.

    ``upper``: kept entries above the diagonal (CSR), quantized ones as +-1 with the level in
    ``scale``; ``diag``: exact.  ``kept_sq[i]``: sum of kept ``K_ij^2`` of row i (before
    quantization), ``kept_quartic``: sum of kept ``K_ij^4``, i < j (the noise estimates' input).
    """

    upper: sp.csr_matrix
    diag: np.ndarray
    scale: float
    sample_prob: float = 1.0
    quantized: bool = False
    kept_sq: np.ndarray | None = None
    kept_quartic: float | None = None

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

    def _kept_sq(self) -> np.ndarray:
        if self.kept_sq is None:  # a matrix built by hand: from the stored (unquantized) values
            U = self.upper
            self.kept_sq, self.kept_quartic = _row_sums_of_squares(
                U.indptr, U.indices, U.data, self.shape[0]
            )
        return self.kept_sq

    def noise_norm(self) -> float:
        """Estimate of ``||K^ - K||_2``: ``2 sqrt(max_i sum_j Var(K^_ij))``.

        The semicircle edge (Bandeira & van Handel 2016), sharper than Furedi-Komlos.  Sampling:
        ``Var = (1/p - 1) K_ij^2``; quantization: bounded by ``b^2 / p``.
        """
        n = self.shape[0]
        if n < 2 or (self.sample_prob >= 1.0 and not self.quantized):
            return 0.0
        s = 1.0 / self.sample_prob
        if self.quantized:
            level = self.scale * self.sample_prob  # b
            row_var = (n - 1) * s * level**2
        else:
            # E[sum over kept j of s K_ij^2] = sum_j K_ij^2
            row_var = float(np.max((s - 1.0) * s * self._kept_sq()))
        return 2.0 * float(np.sqrt(row_var))

    def row_noise_variances(self) -> np.ndarray:
        """Unbiased ``v_i = sum_j Var(K^_ij)``: ``(1/p - 1) sum_j K_ij^2`` (sampling) or
        ``(n - 1) b^2 / p - sum_j K_ij^2`` (quantizing)."""
        n = self.shape[0]
        if n < 2 or (self.sample_prob >= 1.0 and not self.quantized):
            return np.zeros(n)
        s = 1.0 / self.sample_prob
        row_sq = s * self._kept_sq()
        if self.quantized:
            level = self.scale * self.sample_prob  # b
            return np.maximum((n - 1) * s * level**2 - row_sq, 0.0)
        return (s - 1.0) * row_sq

    def centered_frobenius_sq(self, row_means=None) -> float:
        """An unbiased O(n) estimate of ``||H K H||_F^2`` (K the exact Gram).

        ``||K||_F^2 - 2 ||K 1||^2 / n + (1^T K 1)^2 / n^2``, with ``E ||K^ 1||^2 = ||K 1||^2 +
        sum_i v_i`` and ``E (1^T K^ 1)^2 = (1^T K 1)^2 + 2 sum_i v_i`` corrected.
        """
        n = self.shape[0]
        noise = float(np.sum(self.row_noise_variances()))
        frob = float(self.diag @ self.diag) + float(np.sum(self._kept_sq())) / self.sample_prob
        sums = (self.row_means() if row_means is None else row_means) * n
        rows_sq = float(sums @ sums) - noise
        total_sq = float(np.sum(sums)) ** 2 - 2.0 * noise
        return frob - 2.0 / n * rows_sq + total_sq / n**2

    def centered_frobenius_sq_error(self, row_means=None) -> float:
        """First-order standard error of :meth:`centered_frobenius_sq` (sampling of ``sum
        K_ij^2`` and the noise of ``K^ 1`` and its total)."""
        n = self.shape[0]
        if n < 2 or (self.sample_prob >= 1.0 and not self.quantized):
            return 0.0
        s = 1.0 / self.sample_prob
        self._kept_sq()
        sampled = 4.0 * s * s * (1.0 - self.sample_prob) * float(self.kept_quartic or 0.0)
        v = self.row_noise_variances()
        sums = (self.row_means() if row_means is None else row_means) * n
        rows = float(np.sum(4.0 * sums**2 * v + 2.0 * v**2)) * 4.0 / n**2
        total = 8.0 * float(np.sum(sums)) ** 2 * float(np.sum(v)) * 4.0 / n**4
        return float(np.sqrt(sampled + rows + total))

    def total_mean_error(self) -> float:
        """Standard error ``2 sqrt(sum_{i<j} Var(K^_ij)) / n^2`` of the total mean
        ``1^T K^ 1 / n^2`` (unbiased for ``||mu||^2``)."""
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
    """Row ranges ``(start, stop)`` of a CSR structure of about ``max_entries`` entries each."""
    n = indptr.size - 1
    start = 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + max_entries, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        yield start, stop
        start = stop


def _row_sums_of_squares(indptr, indices, values, n) -> tuple[np.ndarray, float]:
    """Per-row ``sum_j K_ij^2`` of the symmetric matrix whose strict upper triangle is the CSR
    ``(values, indices, indptr)``, and the sum of its stored ``K_ij^4``."""
    out, quartic = np.zeros(n), 0.0
    for start, stop in _entry_chunks(indptr):
        lo, hi = indptr[start], indptr[stop]
        sq = np.square(values[lo:hi], dtype=np.float64)
        out += np.bincount(indices[lo:hi], weights=sq, minlength=n)  # columns
        rows = np.repeat(np.arange(start, stop), np.diff(indptr[start : stop + 1]))
        out += np.bincount(rows, weights=sq, minlength=n)  # rows
        quartic += float(sq @ sq)
    return out, quartic


def _kept_columns(n, sample_prob, rng):
    """CSR structure of the kept pairs i < j, each kept independently w.p. sample_prob.

    Row i draws Binomial(n - 1 - i, p) columns without replacement: the coin flips' law at
    O(kept) cost.
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


def sparsify_gram(
    X, kernel, sample_prob=1.0, *, quantize=False, rng=None, pairwise=None
) -> SparsifiedGram:
    """Sample (and optionally 1-bit quantize) the Gram matrix of X without forming it.

    Achlioptas, McSherry & Schoelkopf (2001), section 3; the diagonal is kept exactly.

    Parameters
    ----------
    X : (n, d) array.
    kernel : fastkpca.kernels.Kernel
    sample_prob : float in (0, 1]
    quantize : bool
    rng : numpy Generator or seed
    pairwise : bool or None
        Evaluate only the kept pairs (True) or dense row blocks (False); None: the cheaper
        (:func:`fastkpca.execution.kernel_ops.kernel_at_pairs`).  Same matrix either way.

    Returns
    -------
    SparsifiedGram
    """
    rng = as_generator(rng, name="rng")
    n = X.shape[0]
    diag = np.asarray(to_host(kernel_diag(kernel, X)), dtype=np.float64)
    indptr, indices = _kept_columns(n, sample_prob, rng)
    values = kernel_at_pairs(kernel, X, indptr, indices, sample_prob=sample_prob, pairwise=pairwise)
    kept_sq, kept_quartic = _row_sums_of_squares(indptr, indices, values, n)
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
        upper=upper,
        diag=diag,
        scale=scale,
        sample_prob=sample_prob,
        quantized=quantize,
        kept_sq=kept_sq,
        kept_quartic=kept_quartic,
    )


def debiased_eigenvalues(vals, vecs, gram: SparsifiedGram, row_means) -> np.ndarray:
    """Estimates of the exact centered Gram's eigenvalues from the top eigenpairs of centered K^.

    An eigenvalue lambda whose eigenvector carries noise variance ``v = sum_i u_i^2 v_i``
    (:meth:`SparsifiedGram.row_noise_variances`) shows in K^ as ``lambda + v / lambda`` above
    the bulk edge ``2 sqrt(v)`` (BBP transition: Feral & Peche 2007; Benaych-Georges &
    Nadakuditi 2011, Theorem 2.1).  Leading components above it (with non-increasing estimates)
    are resolved, ``lambda = (lambda^ + sqrt(lambda^2 - 4 v)) / 2``; the variance left (trace
    and ``||K~||_F^2``, :meth:`SparsifiedGram.centered_frobenius_sq`) is spread over the rest
    by :func:`_tail_model`.  The estimates sum to at most ``tr(K~)``; without noise they are
    the eigenvalues themselves.
    """
    vals = np.asarray(vals, dtype=np.float64)
    k, n = vals.size, int(gram.shape[0])
    out = np.zeros(k)
    total = float(np.sum(gram.diag)) - n * float(np.mean(row_means)) if n else 0.0
    if k == 0 or not total > 0:
        return out
    v_rows = gram.row_noise_variances()
    v = np.square(np.asarray(vecs, dtype=np.float64)).T @ v_rows
    root = np.sqrt(np.maximum(vals * vals - 4.0 * v, 0.0))
    estimates = np.where(v > 0, (vals + root) / 2.0, vals)
    # The resolved run ends at the first component below its noise edge, or whose estimate
    # exceeds the one before (a noise direction whose own variance happens to be low).
    previous = np.concatenate([[np.inf], estimates[:-1]])
    resolved = (vals > 2.0 * np.sqrt(v)) & (estimates <= previous)
    r = k if resolved.all() else int(np.argmin(resolved))
    out[:r] = estimates[:r]
    rest = total - float(np.sum(out[:r]))
    if r == k or rest <= 0:
        return out
    span = max(1, n - 1 - r)  # the centered Gram has rank n - 1 at most
    # The tail's sum of squares, at least its standard error: the Frobenius estimate's, and
    # each resolved estimate's fluctuation sigma_j^2 ~ 2 v_j sum_i u_ij^4 (the variance of
    # u^T E u) carried into its square.
    second = gram.centered_frobenius_sq(row_means) - float(np.sum(out[:r] ** 2))
    fluctuation = 2.0 * v[:r] * np.sum(np.asarray(vecs[:, :r], dtype=np.float64) ** 4, axis=0)
    error = np.hypot(
        gram.centered_frobenius_sq_error(row_means),
        float(np.sqrt(np.sum(4.0 * out[:r] ** 2 * fluctuation))),
    )
    second = max(second, float(error))
    cap = float(np.sqrt(v[r])) if v[r] > 0 else rest
    if r:
        cap = min(cap, float(out[r - 1]))
    tail = _tail_model(rest, second, span, cap)[: k - r]
    out[r : r + tail.size] = tail
    return out


def _tail_shape(rate: float, span: int) -> np.ndarray:
    return np.exp(-rate * np.sqrt(np.arange(span)))


def _tail_model(total: float, second: float, span: int, cap: float) -> np.ndarray:
    """``span`` values ``a exp(-c sqrt(j))`` summing to ``total``, with sum of squares
    ``second`` where possible and a first value at most ``cap`` (between geometric and
    ``exp(-c j^(1/d))`` decay, Widom 1963)."""
    # The participation ratio (sum w)^2 / sum w^2 falls from span (c = 0) towards 1 as c grows.
    target = total**2 / second if second > 0 else float(span)
    if target >= span:
        shape = np.ones(span)
    elif target <= 1.0:
        shape = np.eye(1, span)[0]
    else:

        def excess(log_rate):
            w = _tail_shape(np.exp(log_rate), span)
            return float(np.sum(w) ** 2 / np.sum(w * w)) - target

        shape = _tail_shape(float(np.exp(brentq(excess, -30.0, 10.0))), span)
    values = total * shape / np.sum(shape)
    if values[0] <= cap:
        return values
    if total / cap >= span:  # too steep for the cap: the flattest shape under it, same sum
        return np.full(span, total / span)

    def short(log_rate):
        return float(np.sum(_tail_shape(np.exp(log_rate), span))) - total / cap

    return cap * _tail_shape(float(np.exp(brentq(short, -30.0, 10.0))), span)


def noise_norm_bound(n, sample_prob, max_entry, quantize) -> float:
    """The Furedi-Komlos bound ``4 sigma sqrt(n)`` on ``||K^ - K||_2`` (paper, Theorem 1).

    sigma^2 bounds the entries' variance: ``(1/p - 1) b^2`` for sampling, ``b^2`` for
    quantization, ``b^2 / p`` for both (``b = max |K_ij|``).
    """
    s = 1.0 / sample_prob
    var = (s if quantize else s - 1.0) * max_entry**2
    return 4.0 * np.sqrt(var * n)


def _negative_shift(op, rng, tol=1e-2):
    """A shift c >= -lambda_min(op) (roughly) making ``op + c I`` PSD, so orthogonal iteration
    finds the largest, not largest-magnitude, eigenvalues (the paper's proof of Theorem 4); a
    loose Lanczos estimate with a 5 % margin."""
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
    """True if the Gram of X is constant in float64: rows equal, or (radial kernels) all
    squared differences underflow to 0."""
    if X.shape[0] <= 1:
        return True
    if sp.issparse(X):
        lo, hi = X.min(axis=0).toarray(), X.max(axis=0).toarray()
    else:  # the column ranges where the rows live, two d-vectors to the host
        xp = get_namespace(X)
        lo, hi = to_host(xp.min(X, axis=0)), to_host(xp.max(X, axis=0))
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if np.array_equal(lo, hi):
        return True
    # max_i ||x_i - x_0||^2 <= ||hi - lo||^2: a bound without an n x d difference array.
    with np.errstate(over="ignore"):  # an inf spread is simply not 0
        spread = float(np.sum(np.square(hi - lo)))
    return isinstance(kernel, _Radial) and spread == 0.0


def _constant_gram_kpca(X, kernel, n_components, rng):
    """The exact answer of :func:`sparsified_kpca` for a constant Gram ``K = c 1 1^T``.

    Sampling would report its noise as structure; the eigenvalues are 0 and the dual
    coefficients orthonormal vectors orthogonal to 1.
    """
    n = X.shape[0]
    c = float(np.asarray(to_host(kernel_diag(kernel, row_range(X, 0, 1))), dtype=np.float64)[0])
    # A zero matrix has every vector as eigenvector; 1 / sqrt(n) comes last (only if k = n).
    basis = np.column_stack([np.ones(n), rng.standard_normal((n, n_components))])
    Q = la.qr(basis, mode="economic")[0]
    vecs = np.roll(Q, -1, axis=1)[:, :n_components]
    vals = np.zeros(n_components)
    stats = CenteringStats(col_means=np.full(n, c), total_mean=c)
    info = {
        "n_kept": 0,
        "n_iter": 0,
        "max_entry": abs(c),
        "noise_norm": 0.0,
        "mean_sq_error": 0.0,
        "debiased_eigenvalues": np.zeros(n_components),
    }
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
    info : dict with ``n_kept``, ``n_iter``, ``max_entry`` (b), ``noise_norm``,
        ``mean_sq_error`` and ``debiased_eigenvalues`` (:func:`debiased_eigenvalues`)
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
        "debiased_eigenvalues": debiased_eigenvalues(vals, vecs, gram, row_means),
    }
    return vals, vecs, stats, info


class SparsifiedKPCA(BaseKPCA):
    """Kernel PCA on a randomly sampled and/or 1-bit quantized Gram matrix.

    Achlioptas, McSherry & Schoelkopf, "Sampling techniques for kernel methods" (NIPS 2001),
    section 3.  Each pair i < j is kept with probability ``sample_prob`` and scaled by its
    inverse; only kept entries are evaluated and stored (CSR), about ``sample_prob * n^2 / 2``.
    ``quantize=True`` rounds each kept entry at random to ``+-b`` (``b = max |K_ij|``), stored
    as a sign.  The diagonal is kept exactly.

    It works when the leading eigenvalues and the gap after them stand well above the noise
    norm ``||K^ - K||_2`` (Davis-Kahan, Theorems 2-4; ``noise_norm_``, and the Furedi-Komlos
    bound of Theorem 1, ``noise_norm_bound_``); components below it are noise.  Quantization
    needs a larger margin; for slowly decaying spectra use :class:`~fastkpca.NystromKPCA`.
    ``explained_variance_ratio_`` uses ``debiased_eigenvalues_`` (:func:`debiased_eigenvalues`).
    ``transform`` is the exact kernel expansion with the dual coefficients found on K^;
    ``fit_transform(X)`` equals ``fit(X).transform(X)``.  Accepts CSR X; no
    ``kernel="precomputed"``.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None
        Number of components; None gives min(10, n_samples).  A float: the fewest reaching
        that ``explained_variance_ratio_`` (all n eigenpairs of K^: moderate n only).
    kernel, gamma, degree, coef0, nu :
        Kernel spec, as for :class:`~fastkpca.ExactKPCA`.
    sample_prob : float in (0, 1], default 0.1
        Probability ``1 / s`` of keeping each off-diagonal Gram entry (1 keeps all); the noise
        norm grows like ``sqrt(1 / sample_prob)``.
    quantize : bool, default False
        Round kept entries at random to ``+-b`` (1 bit each).
    eigen_solver : {"lanczos", "orthogonal", "arpack"}, default "lanczos"
        ARPACK Lanczos (``"arpack"``: scikit-learn's name), or orthogonal iteration on the
        shifted ``K^ + c I`` (the paper's exposition; exact for ``n_components >= n_samples``).
    eigen_tol, max_iter :
        Eigensolver stopping rule (None: per-dtype defaults of :func:`fastkpca.solvers.eigh_topk`).
    random_state : int, Generator or None
        Sampling, quantization and solver start vectors.
    fit_inverse_transform, alpha :
        The pre-image map of :meth:`inverse_transform`, as for :class:`~fastkpca.ExactKPCA`.
    n_jobs, verbose, device :
        As for :class:`~fastkpca.ExactKPCA`; the sampled matrix and its eigensolver stay on the
        host.

    Attributes
    ----------
    eigenvalues_ : (n_components,) eigenvalues of the centered K^ (biased up by the noise).
    debiased_eigenvalues_ : (n_components,) estimates of exact KPCA's eigenvalues
        (:func:`debiased_eigenvalues`).
    eigenvectors_ : (n_samples, n_components) unit-norm dual coefficients.
    X_fit_ : training data; gram_col_means_, gram_total_mean_ : centering statistics.
    kernel_, n_components_ : resolved kernel and number of components.
    n_kept_ : number of kept pairs i < j (out of n (n - 1) / 2).
    max_entry_ : b = max |K_ij| (the quantization level before scaling).
    noise_norm_ : estimate ``2 sqrt(max_i sum_j Var E_ij)`` of ``||K^ - K||_2``.
    noise_norm_bound_ : Furedi-Komlos bound ``4 sigma sqrt(n)`` on ``||K^ - K||_2``.
    n_iter_ : eigensolver work (block iterations or matrix-vector products).
    total_variance_, total_variance_error_ : float
        Unbiased ``tr(H K H)`` estimate and its standard error
        (:meth:`SparsifiedGram.total_mean_error`).
    explained_variance_ratio_ : ``debiased_eigenvalues_ / total_variance_``.
    X_transformed_fit_, dual_coef_inverse_ : the pre-image map (``fit_inverse_transform``).

    See Also
    --------
    ExactKPCA : the same eigenproblem on the full Gram.
    compress_expansion : makes the fitted model's transform cheaper.
    NystromKPCA : when the Gram's n x n entries cannot all be computed.

    Examples
    --------
    >>> import numpy as np
    >>> from fastkpca import SparsifiedKPCA
    >>> X = np.random.default_rng(0).standard_normal((300, 5))
    >>> model = SparsifiedKPCA(n_components=3, gamma=0.1, sample_prob=0.5,
    ...                        random_state=0).fit(X)
    >>> model.transform(X[:2]).shape
    (2, 3)
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
        """The shared checks, then this estimator's; returns the resolved eigensolver."""
        super()._check_params()
        check_float("sample_prob", self.sample_prob, low=0.0, high=1.0, low_open=True)
        if not isinstance(self.quantize, bool | np.bool_):
            raise ValueError(f"quantize must be True or False, got {self.quantize!r}")
        check_solver_stopping(self.eigen_tol, self.max_iter)
        return resolve_eigen_solver(self.eigen_solver, EIGEN_SOLVERS)

    def _require_fit_memory(self, n, dtype) -> None:
        """ValueError, before sampling, if the kept entries (index, value, sign) or the
        eigensolver's n x k blocks cannot fit."""
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
        kernel = self._resolve_kernel(source, rng)
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
        self.X_fit_ = own_copy(X)
        # The solver's (host) results where the rows live: the model is computed there.
        self.eigenvalues_ = placement.asarray(vals)
        self.eigenvectors_ = placement.asarray(vecs)
        self.debiased_eigenvalues_ = placement.asarray(info["debiased_eigenvalues"])
        self.gram_col_means_ = placement.asarray(stats.col_means)
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
        diag_sum = float(np.sum(to_host(kernel_diag(kernel, X)), dtype=np.float64))
        self._finish_fit(diag_sum, stats.total_mean, info["mean_sq_error"], self.X_fit_)
        fitted_arrays_to(self, placement)  # the pre-image map, solved on the host
        return self

    @property
    def explained_variance_ratio_(self):
        """``debiased_eigenvalues_ / total_variance_``: exact KPCA's estimated explained
        fraction (older model files: ``eigenvalues_ / total_variance_``)."""

        check_is_fitted(self)
        if not hasattr(self, "total_variance_"):
            raise AttributeError("SparsifiedKPCA has no total variance for this model")
        values = getattr(self, "debiased_eigenvalues_", self.eigenvalues_)
        return np.asarray(to_host(values), dtype=np.float64) / self.total_variance_

    def _truncate_components(self, k: int) -> None:
        super()._truncate_components(k)
        if hasattr(self, "debiased_eigenvalues_"):
            self.debiased_eigenvalues_ = self.debiased_eigenvalues_[:k, ...]

    @property
    def _scaled_alphas(self):
        """The dual coefficients ``alpha / sqrt(lambda)`` (0 where lambda <= 0)."""
        return self.eigenvectors_ * inverse_sqrt_or_zero(self.eigenvalues_)

    def _transform_rows(self, X):
        """Centered ``k(X, X_fit_) @ alpha / sqrt(lambda)`` where X lives
        (:func:`~fastkpca.decomposition.exact.centered_projection`, as ExactKPCA's)."""
        stats = CenteringStats(self.gram_col_means_, self.gram_total_mean_)
        return centered_projection(
            X, self.X_fit_, self.kernel_, stats, self._scaled_alphas, float_dtype(X.dtype)
        )

    def kernel_expansion(self):
        """``transform(X) = kernel_(X, points) @ coef + offset``: see :mod:`.compress`."""
        return centered_expansion(
            self.X_fit_,
            self._scaled_alphas,
            self.gram_col_means_,
            self.gram_total_mean_,
            self.kernel_,
        )
