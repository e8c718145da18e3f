"""The error probe: a fitted model's relative rank-k error on all rows, estimated on a sample.

Every error estimate of the package is this one (:class:`ErrorProbe`): ``tol`` of every
estimator (grown until the one-sided upper bound meets it, :mod:`fastkpca.statistics.growth`)
and :func:`fastkpca.metrics.estimate_error`.  The quantity is ``e = ||Kc - T T^T||_F / ||Kc -
(Kc)_k||_F`` over the N training rows (1 is exact KPCA), estimated from a uniform probe of p:

* **Rows weighted as in the N x N Gram**: the probe's diagonal entries weigh ``w = (p - 1) /
  (N - 1)`` times its off-diagonal ones (a U-statistic, Hoeffding 1948).
* **The reference, cross-fitted** on two halves of m rows: the own-half optimum's residual (too
  small) and the other half's (too large) combine as ``own + (1 - m / N) / 2 (fresh - own)``
  (the covariance penalty of Efron 2004, eq. 2.6).  Each optimum is the weighted rank-k fit by
  expectation-maximization (Srebro & Jaakkola 2003, section 3; :data:`WEIGHTED_FIT_STEPS`).
* **Standard error**: a bootstrap over the probe's rows (:data:`N_BOOTSTRAP`; Efron &
  Tibshirani 1993, chapter 6) combined with the two halves' difference over :data:`SPLITS`
  halvings (:func:`bootstrap_stderr`).

:meth:`ErrorEstimate.upper` is the bound ``estimate + z stderr`` (:data:`CONFIDENCE_Z`) that
``tol`` must meet; bias and coverage measured on real data are in ``docs/auto.md``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import scipy.linalg

from .._centering import center_gram_inplace
from ..execution import map_tasks, one_blas_thread
from ..execution.arrays import take_rows, to_host
from ..solvers import eigh_topk

__all__ = [
    "CONFIDENCE_Z",
    "MAX_PROBE_ROWS",
    "N_BOOTSTRAP",
    "PROBE_ROWS",
    "ErrorEstimate",
    "ErrorProbe",
    "bootstrap_stderr",
    "probe_memory_bytes",
]

#: Training rows of the probe (an exact p x p computation: about a second at p = 2000).
PROBE_ROWS = 2000

#: A probe whose standard error is too large for tol is drawn again, once, with twice its rows,
#: up to this many.
MAX_PROBE_ROWS = 2 * PROBE_ROWS

#: Bootstrap replicates behind every standard error.
N_BOOTSTRAP = 200

#: The bound a size chosen by ``tol`` meets: ``estimate + z stderr <= 1 + tol``, z chosen from
#: the probe's measured coverage on real data (``benchmarks/bench_estimate_error.py --probes``;
#: docs/auto.md): the normal one-sided 95 % quantile, 1.645, covered too rarely.
CONFIDENCE_Z = 2.0

#: The two-sided 95 % normal quantile of the reported intervals.
INTERVAL_Z = 1.96

#: Expectation-maximization steps of each half's weighted rank-k fit (a second step changes
#: the estimates by a tenth of their standard error or less: docs/auto.md).
WEIGHTED_FIT_STEPS = 1

#: The probe is split in halves this many ways, the pairings of its quarters (module notes): the
#: estimate's spread over the halves' fits gets as many degrees of freedom.
SPLITS = 3

#: The parts' centered Grams formed at once, on threads (:meth:`ErrorProbe._split`).
PARALLEL_PARTS = 4

#: A half of the probe has at most this many rows for LAPACK's dense eigensolver (its top-k
#: eigenpairs); above, Lanczos, faster there.
DENSE_EIGH_ROWS = 250


class ErrorEstimate(NamedTuple):
    """An estimated relative rank-k error and its standard error (0: computed exactly)."""

    estimate: float
    stderr: float

    def upper(self, z: float = CONFIDENCE_Z) -> float:
        """The one-sided bound ``estimate + z stderr``."""
        return self.estimate + z * self.stderr

    def interval(self, z: float = INTERVAL_Z) -> tuple[float, float]:
        """The two-sided interval ``estimate -+ z stderr`` (95 % by default)."""
        return self.estimate - z * self.stderr, self.estimate + z * self.stderr


def probe_memory_bytes(p: int) -> int:
    """Bytes a probe of p rows takes at its peak (float64): its p x p Gram, held, and the
    kernel's temporaries while it is computed (``tracemalloc``: 16.3 p^2 bytes at p = 1000 and
    2000; held, 8 p^2 and up to :data:`PARALLEL_PARTS` parts' centered Grams, 2 p^2 each, while
    they are fitted), and its rows' small arrays."""
    return int(8 * p * p * 2.1 + 1024 * p)


def bootstrap_stderr(statistic, arrays, rng, n_boot: int = N_BOOTSTRAP) -> np.ndarray:
    """Standard deviation of ``statistic(*arrays)`` over ``n_boot`` bootstrap resamples of
    the arrays' rows (the same rows drawn for all of them)."""
    p = arrays[0].shape[0]
    drawn = []
    for _ in range(n_boot):
        i = rng.integers(0, p, size=p)
        drawn.append(statistic(*(a[i] for a in arrays)))
    reps = np.array(drawn, dtype=np.float64)
    finite = np.all(np.isfinite(reps.reshape(n_boot, -1)), axis=1)
    if np.count_nonzero(finite) < 2:
        return np.full(reps.shape[1:], np.nan)
    return np.std(reps[finite], axis=0, ddof=1)


def _ratio(num, den) -> float:
    """``sqrt(sum num / sum den)``: the relative error of summed squared residual rows."""
    total = float(np.sum(den))
    if total <= 0.0:
        return 1.0 if float(np.sum(num)) <= 0.0 else math.inf
    return math.sqrt(max(float(np.sum(num)), 0.0) / total)


def _top_eigen(G, k: int):
    """The top-k eigenpairs of a symmetric matrix, largest first, on one BLAS thread (LAPACK's
    and ARPACK's threads cost more than they save at these sizes)."""
    with one_blas_thread():
        if G.shape[0] <= DENSE_EIGH_ROWS:
            m = G.shape[0]
            vals, vecs = scipy.linalg.eigh(G, subset_by_index=[m - k, m - 1], driver="evr")
            return vals[::-1], vecs[:, ::-1]
        return eigh_topk(G, k, method="lanczos", rng=0)


def _block(gram, a: tuple, b: tuple):
    """The block of ``gram`` on the rows of the slices ``a`` and the columns of the slices
    ``b`` (a view for one slice each, else a copy assembled from views)."""
    if len(a) == 1 and len(b) == 1:
        return gram[a[0], b[0]]
    return np.block([[gram[i, j] for j in b] for i in a])


def _block_product(gram, a: tuple, b: tuple, W) -> np.ndarray:
    """``_block(gram, a, b) @ W`` from views of ``gram`` (no copy of the block)."""
    bounds = np.cumsum([0] + [j.stop - j.start for j in b])
    out: list[np.ndarray] = []
    with one_blas_thread():
        for i in a:
            acc = gram[i, b[0]] @ W[: bounds[1]]
            for t in range(1, len(b)):
                acc += gram[i, b[t]] @ W[bounds[t] : bounds[t + 1]]
            out.append(acc)
    return out[0] if len(out) == 1 else np.concatenate(out)


def _slices(quarters, size: int) -> tuple:
    """The row slices of a union of quarters of ``size`` rows (adjacent ones merged)."""
    out: list[list[int]] = []
    for q in sorted(quarters):
        if out and out[-1][1] == q * size:
            out[-1][1] = (q + 1) * size
        else:
            out.append([q * size, (q + 1) * size])
    return tuple(slice(a, b) for a, b in out)


class _Part:
    """A set of the probe's rows and residual rows of the weighted loss ``sum_{i != j} (G -
    T T^T)_ij^2 + w sum_i (G - T T^T)_ii^2`` on their centered Gram G (module notes).  G is
    not kept: products with it are the uncentered block's, centered (``G T = H K T`` for T
    centered), and G itself is formed only to fit the part's optimum (at once for the rank
    ``k`` given, while G is at hand)."""

    def __init__(self, gram, rows: tuple, weight: float, k: int | None = None):
        self.gram = gram  # the probe's uncentered Gram
        self.slices = rows  # the part's rows among the probe's: slices
        self.rows = np.concatenate([np.arange(r.start, r.stop) for r in rows])
        G = np.array(self.kernel_block(), dtype=np.float64)
        self.col_means = G.mean(axis=0)  # the uncentered rows' mean
        center_gram_inplace(G)
        self.diag = np.diagonal(G).copy()
        self.gram_rows = np.einsum("ij,ij->i", G, G)
        self.weight = weight
        self.size = G.shape[0]
        self._top: dict[int, tuple] = {}
        self._weighted: dict[int, tuple] = {}
        if k is not None and k < self.size:
            self.optimum(k, G=G)

    def kernel_block(self) -> np.ndarray:
        """The part's uncentered Gram (a view of the probe's for contiguous rows)."""
        return _block(self.gram, self.slices, self.slices)

    def centered(self) -> np.ndarray:
        """A new copy of the part's centered Gram G."""
        G = np.array(self.kernel_block(), dtype=np.float64)
        center_gram_inplace(G)
        return G

    def residual_rows(self, T) -> np.ndarray:
        """Weighted squared row norms of ``G - T T^T``, T (the part's rows) centered on it."""
        T = T - T.mean(axis=0)
        GT = _block_product(self.gram, self.slices, self.slices, T)
        GT -= GT.mean(axis=0)
        with one_blas_thread():
            TtT = T.T @ T
        rows = self.gram_rows - 2.0 * np.einsum("ij,ij->i", GT, T)
        rows += np.einsum("ij,ij->i", T @ TtT, T)
        diagonal = self.diag - np.einsum("ij,ij->i", T, T)
        return np.maximum(rows - (1.0 - self.weight) * diagonal**2, 0.0)

    def optimum(self, k: int, weighted: bool = True, G=None):
        """The rank-k minimizer of the weighted loss on the part (module notes): eigenpairs
        ``(vals, vecs)`` of G with its diagonal re-weighted, ``T = vecs sqrt(vals)``; with
        ``weighted=False`` G's own top-k eigenpairs.  Each re-weighting step starts from the
        last pairs (:func:`_rayleigh_ritz`).  Both are computed once per k (``G``: the part's
        centered Gram if at hand, overwritten)."""
        if k not in self._top:
            G = self.centered() if G is None else G
            self._top[k] = _top_eigen(G, k)
        if self.weight >= 1.0 or not weighted:
            return self._top[k]
        if k not in self._weighted:
            vals, vecs = self._top[k]
            G = self.centered() if G is None else G
            for _ in range(WEIGHTED_FIT_STEPS):
                fitted = np.einsum("ij,ij->i", vecs * np.maximum(vals, 0.0), vecs)
                np.fill_diagonal(G, self.weight * self.diag + (1.0 - self.weight) * fitted)
                vals, vecs = _rayleigh_ritz(G, vecs, k)
            self._weighted[k] = (vals, vecs)
        return self._weighted[k]

    def projections(self, other: _Part, vals, vecs):
        """``other``'s rank-k fit applied to this part's rows: ``Kc(this, other) V / sqrt(vals)``
        with the kernel rows centered in ``other``'s feature mean."""
        keep = vals > 1e-12 * max(float(vals[0]), 1e-300)
        W = vecs[:, keep] / np.sqrt(vals[keep])
        # Kc W = K W - 1 (mu^T W) - (K 1 / m) (1^T W) + mean(mu) (1^T W), mu the column means
        ones = np.full((W.shape[0], 1), 1.0 / W.shape[0])
        KW = _block_product(self.gram, self.slices, other.slices, np.hstack([W, ones]))
        total = W.sum(axis=0)
        out = KW[:, :-1] - other.col_means @ W
        out -= KW[:, -1:] * total
        out += other.col_means.mean() * total
        return out


def _rayleigh_ritz(G, V, k: int):
    """The top-k Ritz pairs of G on the Krylov space ``span(V, G V, G^2 V)``: G's top-k
    eigenpairs from those of a matrix that differs from it on the diagonal (a step of the
    weighted fit, :meth:`_Part.optimum`), for two products instead of a Lanczos run."""
    with one_blas_thread():
        blocks = [V]
        for _ in range(2):
            blocks.append(G @ blocks[-1])
        Q, _ = scipy.linalg.qr(np.hstack(blocks), mode="economic")
        vals, W = scipy.linalg.eigh(Q.T @ G @ Q)
    return vals[::-1][:k], (Q @ W[:, ::-1])[:, :k]


def _cross_fitted(own, fresh, share):
    """The reference rows ``own + share (fresh - own)`` (module notes)."""
    return own + share * (fresh - own)


class _Reference:
    """Per rank k and split of the probe in halves: the reference residual rows (module notes)
    on the probe's rows (0 on rows of no part), and each part's own-optimum residual rows."""

    def __init__(self, probe: ErrorProbe, k: int):
        rows = probe.used_rows
        self.own: list[list[np.ndarray]] = []
        self.rows: list[np.ndarray] = []
        # Each part's optimum and own residuals, then each part's residuals under the other
        # half's optimum: independent per part, on threads (map_tasks: results in part order).
        parts = [part for split in probe.splits for part in split]
        fits = map_tasks(lambda part: part.optimum(k), parts)
        own = map_tasks(
            lambda i: parts[i].residual_rows(fits[i][1] * np.sqrt(np.maximum(fits[i][0], 0.0))),
            range(len(parts)),
        )
        halves = len(probe.splits[0]) == 2
        # the other half of part i is part i ^ 1 (parts come in pairs, split by split)
        fresh = (
            map_tasks(
                lambda i: parts[i].residual_rows(parts[i].projections(parts[i ^ 1], *fits[i ^ 1])),
                range(len(parts)),
            )
            if halves
            else []
        )
        for s, split in enumerate(probe.splits):
            ref = np.zeros(rows)
            if not halves:
                ref[split[0].rows] = own[s]
                self.own.append([own[s]])
            else:
                share = 0.5 * (1.0 - probe.sampled_fraction(split[0].size))
                for j, part in enumerate(split):
                    ref[part.rows] = _cross_fitted(own[2 * s + j], fresh[2 * s + j], share)
                self.own.append(own[2 * s : 2 * s + 2])
            self.rows.append(ref)


class ErrorProbe:
    """A uniform probe of the rows a model refers to: its relative rank-k error estimated.

    Parameters
    ----------
    X : array, CSR matrix or tensor (p, d)
        The probe rows, a uniform sample of the N rows the errors refer to (or a stream's first
        rows); their Gram is computed where they are and kept on the host.
    kernel : Kernel or None
        None: the kernel of the first model estimated.
    rng : numpy.random.Generator
        The halves' splits and the bootstrap.
    n_rows : int or None
        N (None: an unlimited population).  With ``p >= N`` the errors are exact.

    Notes
    -----
    The probe is halved :data:`SPLITS` ways (the pairings of its quarters), residuals summed and
    spreads pooled over the splits.  Cost: p^2 kernel values and ``2 SPLITS`` top-k eigenproblems of
    ``p / 2`` rows per rank, then ``O(SPLITS p^2 k)`` per model, the parts' shares on threads
    (:func:`~fastkpca.execution.map_tasks`: the same numbers on any number of them); memory
    :func:`probe_memory_bytes`.
    """

    def __init__(self, X, kernel, rng, n_rows: int | None = None):
        p = X.shape[0]
        if p < 2:
            raise ValueError(f"the error probe needs at least 2 rows, got {p}")
        self.order = rng.permutation(p)  # the probe's rows are X[order]
        self._rows = take_rows(X, self.order)
        self.X = to_host(self._rows)
        self.kernel = kernel
        self.rng = rng
        self.n_rows = None if n_rows is None else int(n_rows)
        self.exact = self.n_rows is not None and p >= self.n_rows
        self._references: dict[int, _Reference] = {}
        self.splits: list[list[_Part]] = []
        self.used_rows = p
        if kernel is not None:
            self._compute_gram(kernel)

    def _compute_gram(self, kernel) -> None:
        """The probe's Gram (where its rows are; kept on the host)."""
        self.kernel = kernel
        self.gram = np.asarray(to_host(kernel(self._rows)), dtype=np.float64)
        del self._rows

    def _split(self, halves: bool, k: int | None = None) -> None:
        """The parts: the :data:`SPLITS` ways of pairing the probe's quarters into halves (the
        first: its first and second half), or one part of all the rows."""
        p = self.size
        if not halves:
            self.used_rows = p
            self.splits = [[_Part(self.gram, (slice(0, p),), self._diagonal_weight(p), k)]]
        else:
            q = p // 4
            self.used_rows = 4 * q
            weight = self._diagonal_weight(2 * q)
            rows = [
                _slices(half, q)
                for first in ((0, 1), (0, 2), (0, 3))[:SPLITS]
                for half in (first, tuple({0, 1, 2, 3} - set(first)))
            ]
            # On threads, at most PARALLEL_PARTS centered Grams of p / 2 rows at once beside
            # the probe's (their 8 p^2 / 4 bytes each stay within probe_memory_bytes' peak).
            parts = []
            for start in range(0, len(rows), PARALLEL_PARTS):
                batch = rows[start : start + PARALLEL_PARTS]
                parts += map_tasks(lambda r: _Part(self.gram, r, weight, k), batch)
            self.splits = [parts[i : i + 2] for i in range(0, len(parts), 2)]
        self._references = {}

    def _diagonal_weight(self, m: int) -> float:
        """The weight of a part's diagonal entries against its off-diagonal ones: ``(m - 1) /
        (N - 1)`` (module notes); 1 when the probe is all the rows, 0 for an unlimited N."""
        if self.exact:
            return 1.0
        if self.n_rows is None:
            return 0.0
        return min(1.0, (m - 1) / max(self.n_rows - 1, 1))

    def sampled_fraction(self, m: int) -> float:
        """``m / N``: the fraction of the N rows that m probe rows are (0 for an unlimited N)."""
        return 0.0 if self.n_rows is None else min(1.0, m / self.n_rows)

    @property
    def size(self) -> int:
        """p, the probe's rows."""
        return int(self.X.shape[0])

    @property
    def parts(self) -> list[_Part]:
        """The first split's parts (halves, or the whole probe)."""
        return self.splits[0]

    def reference(self, k: int) -> _Reference:
        """The reference residuals for rank k (computed once per k).  All rows, or halves too
        small for a rank-k fit of each (fewer than ``2 k + 2`` rows), are one part: exact for
        all rows, else the probe's own optimum (the in-sample ratio, which reads high)."""
        if k not in self._references:
            halves = not self.exact and 2 * (self.size // 4) >= 2 * k + 2
            if not self.splits or (len(self.parts) == 2) != halves:
                self._split(halves, k)
            if k >= self.parts[0].size:
                raise ValueError(
                    f"{k} components need more than {self.parts[0].size} probe rows to "
                    "estimate a rank-k error"
                )
            self._references[k] = _Reference(self, k)
        return self._references[k]

    def error(self, model) -> ErrorEstimate:
        """The relative rank-k error of a fitted model on the N rows (k its output width)."""
        if self.kernel is None:
            self._compute_gram(model.kernel_)
        T = np.asarray(to_host(model.transform(self.X)), dtype=np.float64)
        return self.error_of(T)

    def error_of(self, T) -> ErrorEstimate:
        """:meth:`error` from the projections T of the probe rows (in :attr:`X`'s order)."""
        if T.ndim != 2 or T.shape[0] != self.size:
            raise ValueError(f"projections of shape {T.shape}, expected ({self.size}, k)")
        ref = self.reference(T.shape[1])
        num = np.zeros(self.used_rows)
        den = np.zeros(self.used_rows)
        halves = []
        every_part = [part for split in self.splits for part in split]
        residuals = iter(map_tasks(lambda part: part.residual_rows(T[part.rows]), every_part))
        for parts, ref_rows in zip(self.splits, ref.rows, strict=True):
            model_rows = np.zeros(self.used_rows)
            for part in parts:
                model_rows[part.rows] = next(residuals)
            num += model_rows
            den += ref_rows
            if len(parts) == 2:
                halves.append([_ratio(model_rows[q.rows], ref_rows[q.rows]) for q in parts])
        estimate = _ratio(num, den)
        if self.exact or not math.isfinite(estimate):
            return ErrorEstimate(estimate, 0.0 if self.exact else math.nan)
        stderr = float(bootstrap_stderr(_ratio, (num, den), self.rng))
        spread = [0.25 * (a - b) ** 2 for a, b in halves if math.isfinite(a) and math.isfinite(b)]
        if spread and math.isfinite(stderr):
            # The bootstrap holds the halves' fitted references fixed; each split's two halves'
            # own ratios are two estimates from disjoint rows: half their difference adds the
            # spread of those fits (one degree of freedom per split), taken at least as large
            # as the bootstrap's (the fits vary with their rows as much as the rows do; with
            # few degrees of freedom the difference alone is often far too small).
            stderr = math.hypot(stderr, max(math.sqrt(float(np.mean(spread))), stderr))
        return ErrorEstimate(estimate, stderr)

    def eigenvalues(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top-k eigenvalues per row, ``lambda_i / N`` of the N rows' centered Gram, and
        their standard errors (0 when exact).

        Each half's own eigenvalues over its rows read high (fitted to them), the variances of
        its rows along the other half's top-k subspace (its principal values there) read low
        (fitted elsewhere): they are combined over both halves and the splits as the error's
        reference is (module notes), and bootstrapped over each half's rows."""
        self.reference(k)  # the parts for rank k
        if len(self.parts) == 1:
            vals = np.sort(np.maximum(self.parts[0].optimum(k, weighted=False)[0], 0.0))[::-1]
            return vals / self.size, np.zeros(k) if self.exact else np.full(k, np.nan)
        scores = []  # per part: its rows' own and fresh component scores, and the mix
        for a, b in self.splits:
            fits = [a.optimum(k, weighted=False), b.optimum(k, weighted=False)]
            share = 0.5 * (1.0 - self.sampled_fraction(a.size))
            for this, other, (vals, vecs), fit in ((a, b, fits[0], fits[1]), (b, a, *fits[::-1])):
                fresh = this.projections(other, *fit)
                scores.append((vecs * np.sqrt(np.maximum(vals, 0.0)), fresh, share))

        def estimate(parts) -> tuple[np.ndarray, list]:
            per_part = [
                _principal(own, k) + share * (_principal(fresh, k) - _principal(own, k))
                for own, fresh, share in parts
            ]
            return np.mean(per_part, axis=0), per_part

        value, per_part = estimate(scores)
        reps = []
        for _ in range(N_BOOTSTRAP):
            drawn = []
            for own, fresh, share in scores:
                i = self.rng.integers(0, own.shape[0], size=own.shape[0])
                drawn.append((own[i], fresh[i], share))
            reps.append(estimate(drawn)[0])
        boot = np.std(reps, axis=0, ddof=1)
        spread = np.mean(
            [0.25 * (per_part[2 * s] - per_part[2 * s + 1]) ** 2 for s in range(len(self.splits))],
            axis=0,
        )
        # The halves' spread, at least the bootstrap's (as for the error) and at least the
        # first-order sampling spread of the rows' squared scores (Anderson 1963), whose
        # heavy tails (clusters of few rows) a bootstrap of m rows underrates.
        own = np.concatenate([t**2 for t, _, _ in scores[:2]])
        sampling = np.var(own, axis=0, ddof=1) / own.shape[0]
        return value, np.sqrt(boot**2 + np.maximum(np.maximum(spread, boot**2), sampling))


def _principal(scores, k: int) -> np.ndarray:
    """The variances per row along the principal axes of rows of scores (centered), the
    largest k first (zeros beyond the scores' width)."""
    S = scores - scores.mean(axis=0)
    vals = np.zeros(k)
    top = np.linalg.eigvalsh(S.T @ S / S.shape[0])[::-1][:k]
    vals[: top.size] = np.maximum(top, 0.0)
    return vals
