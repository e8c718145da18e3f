"""AutoKPCA: the kernel PCA method and its size chosen from the data and the budgets.

The choice is a pipeline of cheap looks before any full fit:

1. what the rows are (:func:`profile_source`): n, d, sparsity, whether they can be read more
   than once (an array, a memory map, a list of blocks, a reader, a dask array) or once (a
   generator of blocks), their dtype;
2. a probe of the spectrum on a uniform sample of :func:`probe_size` rows (among the first
   rows of a one-pass stream): its centered Gram, top eigenvalues and the Nystrom approximations of
   uniform and randomly pivoted Cholesky landmarks at doubling sizes (:class:`SpectrumProbe`),
   whose relative rank-k errors on the sample predict the size the full fit needs and which
   landmark method gets there first;
3. the candidates in order (:func:`candidate_methods`, the rules table of ``docs/auto.md``),
   each refused up front when its memory at the predicted size exceeds the budget or its
   predicted time (a flop count over a rate measured on the probe, then on the fits themselves)
   exceeds what is left of the time budget;
4. growth: the first candidate is fitted at growing sizes from the predicted one (landmarks by
   a factor read from the estimated excess, :meth:`_Run.next_size`; features doubling) until
   the relative rank-k error on all rows, estimated on the probe (:meth:`SpectrumProbe.error`,
   cross-fitted on its two halves), is at most ``1 + tol``, or within the estimate's noise of
   1 (:data:`RESOLUTION_STDERRS`; kept with a warning); when the budget stops its growth
   first, the next candidate is tried.  An estimate whose standard error exceeds ``tol``
   draws the probe again, once, with :data:`PROBE_GROWTH` times its rows
   (:meth:`_Run.grow_probe`).

No candidate within the budgets is a ``ValueError`` that names each candidate and why it was
refused; candidates fitted but short of ``tol`` leave the most accurate one, with a
``RuntimeWarning``.  Everything considered is in ``report_``.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import sklearn
from sklearn.utils.validation import check_is_fitted

from .._centering import center_gram_inplace
from .._landmarks import rpcholesky_of_gram
from ..execution import available_memory_bytes, format_bytes, one_blas_thread
from ..execution.arrays import to_host
from ..execution.memory import MEMORY_FRACTION, parse_bytes
from ..solvers import eigh_topk
from ..source import uniform_indices
from ..statistics.growth import PROBE_ROWS, check_tol, doubling_sizes
from . import nystrom as nystrom_module
from ._base import DEFAULT_N_COMPONENTS, BaseKPCA

__all__ = [
    "AutoKPCA",
    "DataProfile",
    "SpectrumProbe",
    "candidate_methods",
    "parse_memory",
    "probe_size",
    "profile_source",
]

#: The probe has at least this many rows (all of them below).
MIN_PROBE_ROWS = 500

#: A probe whose error estimate has a standard error above ``tol`` is drawn again, once, with
#: this many times its rows (at most :data:`MAX_PROBE_ROWS`; rows taken by index only): on
#: kddcup's 494,020 rows, whose repeated rows make a 2000-row probe's estimate noisy and low
#: (0.96-0.99 +- 0.016-0.021 for Nystrom fits of true error 1.004-1.013, two seeds), 4000 rows
#: read 0.978-1.011 +- 0.003-0.007 and cost 0.6 s (8000: 4 s).
PROBE_GROWTH = 2
MAX_PROBE_ROWS = 2 * PROBE_ROWS

#: Exact KPCA is a candidate up to this many rows (if its Gram fits the memory budget): below,
#: a Gram of at most 72 MB takes a second or two and has no approximation error at all.
EXACT_MAX_ROWS = 3000

#: ... and above, whenever the probe predicts at least this fraction of n landmarks (exact KPCA
#: then costs about as much as the Nystrom fit: NystromKPCA's own exact path, class Notes).
EXACT_LANDMARK_FRACTION = 1 / 3

#: Sparse rows at least this wide with at most :data:`SPARSE_MAX_DENSITY` nonzeros are the
#: input-sparsity case: dense landmarks (c x d) would cost more than the rows themselves.
WIDE_FEATURES = 1000
SPARSE_MAX_DENSITY = 0.05

#: RPCholesky's selection (its n c kernel values and n c^2 factor updates, in rounds of
#: proposals) runs at about two thirds of the flop rate of a uniform Nystrom fit, so the cost
#: model counts its flops this many times.  Measured, ``rpcholesky_indices`` against
#: ``NystromKPCA(landmarks="uniform").fit`` at 64, 128 and 256 landmarks on cpu_act, pendigits,
#: adult, kddcup (494,020 rows) and mnist (20,000 rows), 2 cores: its flop rate was 0.47-1.6x
#: the fit's (median 0.7), and the selection alone took 0.8-2.7x that fit's time (kddcup, 128
#: landmarks: 0.72 s against 0.42 s).
RPCHOLESKY_SELECTION_COST = 1.5

#: ... but only where uniform landmarks need more than this many on the probe (the smallest
#: size it tries: nothing to save below).  A higher bar (128) kept uniform landmarks on kddcup,
#: where the probe's pivots reach tol with 64 and uniform ones need 128-256, and where the
#: error estimate of a uniform fit reads low (rare, far-apart rows: SpectrumProbe's notes).
CHEAP_LANDMARKS = 32

#: The probe's Nystrom sizes go up to this fraction of the rows they are fitted and judged on
#: (a half of the probe): beyond, the landmarks are most of those rows and the error says
#: nothing about a fit on all rows.
PROBE_MAX_LANDMARK_FRACTION = 0.25

#: A half of the probe has at most this many rows for LAPACK's dense eigensolver (its top-k
#: eigenpairs, ``syevr``); above, Lanczos.  Measured on halves of 250 to 884 rows of all six
#: benchmark sets (k = 10, one BLAS thread, 2 cores): Lanczos took 0.3-0.7x the dense time from
#: 362 rows on (pendigits 2.7 against 6.1 ms at 419 rows, 15 against 46 ms at 884; RandomNoisy,
#: the slowest to converge, 4.9 against 6.2 ms and 27 against 47 ms) and tied at 250 rows; the
#: eigenvalues agreed to 3e-15 relative.
DENSE_EIGH_ROWS = 250

#: Sparse probe rows are made dense when that copy takes at most this many bytes: the probe's
#: Gram is then a dense GEMM (adult, 1131 rows of 123: 10 ms dense, 50 ms sparse).
PROBE_DENSE_BYTES = 32 * 2**20

#: The predicted size is the first at which the probe's in-sample Nystrom error is at most
#: 1 + this fraction of tol: that error reads optimistic for a fit on all rows (RandomNoisy,
#: 10^6 rows: 1.041 at 128 landmarks where the fit on all rows has 1.067, 1.015 at 250 for
#: 1.031), so a prediction at 1 + tol starts one growth step short there.
PREDICTION_MARGIN = 0.5

#: The sizes tried start here at the least (landmarks, features).
MIN_LANDMARKS = 32
MIN_FEATURES = 128

#: Largest sizes (the estimators' own caps for sizes chosen by tolerance).
MAX_LANDMARKS = 8192
MAX_FEATURES = 2**14

#: Cost model (flops), the one of ``NystromKPCA(solver="auto")``: a kernel value costs about
#: ``2 d + KERNEL_VALUE_FLOPS``; exact KPCA's centering and eigensolver ``EXACT_EIGEN_FLOPS``
#: per Gram entry.
KERNEL_VALUE_FLOPS = 30
EXACT_EIGEN_FLOPS = 300

#: A fit whose estimate is above ``1 + tol`` by less than its standard error is kept (the probe
#: cannot tell it from one that meets tol), but by at most this fraction of tol: the estimate
#: reads large excesses low by a quarter to a half, so a stop at ``1 + 1.5 tol`` estimated
#: stays within ``1 + 2 tol``.  (Uncapped, kddcup at tol = 0.01 stopped at an estimate of
#: 1.0178 +- 0.0079 for a true 1.0248.)
STDERR_ALLOWANCE = 0.5

#: Growth also stops (with a warning) where the estimate stops falling (by less than its
#: standard error from one size to the next) within this many standard errors of 1: exact
#: KPCA's own estimate is there, and no larger size can be told apart from it by the probe.
RESOLUTION_STDERRS = 2.0

#: ... and, above that, after this many growth steps in a row in which it fell by less than its
#: standard error, keeping the most accurate fit (with a warning) rather than growing to the cap
#: (kddcup's first 20,000 rows: estimates 1.038, 1.035, 1.033 from 1128 to 4512 landmarks with
#: tol = 0.01; grown to 8192 landmarks, that fit took 11 s).
PLATEAU_STEPS = 2

#: Landmarks grow by at least this factor from one fit to the next (:meth:`_Run.next_size`).
MIN_GROWTH_FACTOR = 1.5

#: Bootstrap replicates of the probe error's standard error.
N_BOOTSTRAP = 200


# ------------------------------------------------------------------------------------------------
# budgets
# ------------------------------------------------------------------------------------------------
def parse_memory(memory) -> int | None:
    """``memory`` as bytes: None (the default budget), a number of bytes > 0, or a string with
    a K / M / G / T suffix (``"2GB"``, ``"512M"``, powers of 1024).  ValueError otherwise."""
    if memory is None:
        return None
    if isinstance(memory, str):
        parsed = parse_bytes(memory)
        if parsed is None or parsed <= 0:
            raise ValueError(
                f"memory must be a number of bytes or a size such as '2GB' or '512M', got "
                f"{memory!r}"
            )
        return parsed
    if isinstance(memory, bool) or not isinstance(memory, numbers.Real):
        raise ValueError(f"memory must be None, a number of bytes or a string, got {memory!r}")
    if not math.isfinite(float(memory)) or memory <= 0:
        raise ValueError(f"memory must be a positive number of bytes, got {memory!r}")
    return int(float(memory))


def _check_time(seconds) -> float | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise ValueError(f"time must be None or a number of seconds, got {seconds!r}")
    if not math.isfinite(float(seconds)) or seconds <= 0:
        raise ValueError(f"time must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


# ------------------------------------------------------------------------------------------------
# what the rows are
# ------------------------------------------------------------------------------------------------
class DataProfile:
    """What is known of the training rows before any pass: n (None for a stream not yet read),
    d, whether sparse and how dense, whether several passes are possible, whether rows can be
    taken by index, the dtype's item size."""

    def __init__(self, n, d, sparse, density, multi_pass, random_access, itemsize):
        self.n = n
        self.d = d
        self.sparse = sparse
        self.density = density
        self.multi_pass = multi_pass
        self.random_access = random_access
        self.itemsize = itemsize

    @property
    def sparse_wide(self) -> bool:
        """Sparse rows of the input-sparsity case (see :data:`WIDE_FEATURES`)."""
        return self.sparse and self.d >= WIDE_FEATURES and self.density <= SPARSE_MAX_DENSITY

    def describe(self) -> dict:
        return {
            "n_samples": self.n,
            "n_features": self.d,
            "sparse": self.sparse,
            "density": float(self.density),
            "passes": "several" if self.multi_pass else "one",
            "random_access": self.random_access,
            "dtype": "float32" if self.itemsize == 4 else "float64",
        }


def profile_source(source) -> DataProfile:
    """The :class:`DataProfile` of a :class:`fastkpca.source.RowSource` (reads its first rows
    only: the density of sparse rows is that of the first block)."""
    head = source.head()
    if sp.issparse(head):
        density = head.nnz / max(1, head.shape[0] * head.shape[1])
    else:
        density = 1.0
    return DataProfile(
        n=source.n_samples,
        d=int(source.n_features),
        sparse=bool(source.sparse),
        density=float(density),
        multi_pass=bool(source.reiterable),
        random_access=bool(source.random_access) and source.n_samples is not None,
        itemsize=np.dtype(source.dtype).itemsize,
    )


# ------------------------------------------------------------------------------------------------
# the probe of the spectrum
# ------------------------------------------------------------------------------------------------
class SpectrumProbe:
    """p probe rows, their Gram and its two halves' KPCA: error estimates and size predictions.

    :meth:`error` estimates a fitted model's relative rank-k error on *all* the rows,
    ``||Kc - T T^T||_F / ||Kc - (Kc)_k||_F``, from the probe, cross-fitted.  The plain probe
    ratio ``||G - T T^T||_F / ||G - G_k||_F`` (G the probe's centered Gram) is biased up: its
    reference ``G_k`` is the probe's own KPCA, fitted to those very rows, so it sits below the
    residual of the all-rows optimum on them (in-sample optimism), and the ratio's floor,
    reached by exact KPCA itself, is well above 1 (measured 1.02-1.06 with p = 724-1131 on
    pendigits, cpu_act, adult, mnist and RandomNoisy, with T centered on the probe; 1.06 on
    kddcup).  Here the probe is split in two halves H, H' of m rows; on each half the
    reference is the mean of the half's own optimum residual (fitted on H: too small) and the
    residual of the other half's optimum (fitted on H': too large).  To first order in 1 / m
    the optimism of an m-row fit on its rows equals its excess on fresh rows, so the mean is
    the residual, on H, of the optimum of many rows; the model's residual on H (T centered on
    H) is divided by it, summed over both halves.

    Measured against the exact error on all n rows (as ``benchmarks/bench_auto.py`` evaluates
    it; Nystrom at 32 to 2048 uniform landmarks, the six sets of that benchmark at their first
    20,000 rows or fewer, one probe each): at true errors of at
    most 1.02 the estimate is within 0.007 of the truth (below 1 by at most 0.005 at exact
    KPCA's limit, 0.018 on kddcup); above, it is low by a quarter to a half of the excess
    (mnist 1.036 for 1.050, RandomNoisy 1.041 for 1.056, kddcup 1.045 for 1.093), which is
    why AutoKPCA's stated goal is ``1 + 2 tol`` for a stop at ``1 + tol``.

    The standard error combines a bootstrap over the probe's rows (the model's and the
    reference's squared residual row sums resampled together) with half the difference of the
    two halves' own ratios, as ``sqrt(bootstrap^2 + (r_1 - r_2)^2 / 4)``.  The bootstrap alone
    holds the halves' fitted references fixed and read 2-3x too small: over six probes each
    (Nystrom fits on the first 20,000 rows, p = 838-1131), the estimates of one fit spread with
    a standard deviation of 0.013 on pendigits (bootstrap 0.004-0.007) and 0.025 on kddcup
    (0.010-0.024), while the root mean square of ``|r_1 - r_2| / 2`` was 0.013 and 0.027 (on
    mnist, 0.003 spread, 0.002 bootstrap, 0.004 halves).  One difference is one degree of
    freedom, so a single probe's value is noisy; together the two are about right on average
    and conservative where the bootstrap is not small.

    :meth:`nystrom_errors` is the in-sample ratio of the KPCA of the first half's Nystrom
    approximations (landmarks among its rows), from which the size a fit on all rows needs is
    predicted.

    Parameters
    ----------
    X : array or CSR matrix (p, d)
        The probe rows (a uniform sample of the training rows, or a stream's first rows).
    kernel : Kernel
    k : int
        The number of components.
    placement : Placement, optional
        A GPU where the data are: the probe's Gram and its halves' eigendecompositions are
        computed there (the rest, O(p^2 k), stays on the host).  On an H200 with 10^6 rows of
        100 on it: a probe of 2000 rows in 0.079 s against 0.162 s on the host, AutoKPCA at
        ``tol = 0.05`` in 0.177 s against 0.243 s, the same choice and estimate.
    """

    def __init__(self, X, kernel, k: int, rng, placement=None):
        start = time.perf_counter()
        # The rows in a random order, the halves' split: each half's Gram block and the cross
        # blocks are then views of one Gram, with no reordered copy of it (19 ms at p = 2000).
        self.X = X[rng.permutation(X.shape[0])]
        self.kernel = kernel
        self.rng = rng
        on_gpu = placement is not None and not placement.in_host_memory and not sp.issparse(X)
        self.placement = placement if on_gpu else None
        if self.placement is not None:
            K = to_host(kernel(self.placement.asarray(self.X, np.float64)))
        else:
            K = np.asarray(kernel(self.X), dtype=np.float64)
        self.gram_seconds = time.perf_counter() - start
        self.uncentered = K
        self.scale = float(np.trace(K))
        p = K.shape[0]
        self.k = min(int(k), p - 1)
        self.halves = self._halves()

    def _halves(self) -> list[_Half]:
        """The two halves of the probe, each with its reference residual rows (class notes):
        the mean of its own optimum's and of the other half's optimum's.  A probe too small to
        halve for k (fewer than ``2 (2 k + 2)`` rows) is one part, with its own optimum's
        residual as reference (the in-sample ratio, biased up)."""
        p = self.n_rows
        m = p // 2
        if m < 2 * self.k + 2:
            return [_Half(self, np.arange(p), self.uncentered)]
        K = self.uncentered  # rows already in a random order (see __init__)
        first = _Half(self, np.arange(m), K[:m, :m])
        second = _Half(self, np.arange(m, 2 * m), K[m : 2 * m, m : 2 * m])
        first.cross_fit(second, K[:m, m : 2 * m])
        second.cross_fit(first, K[m : 2 * m, :m])
        return [first, second]

    @property
    def n_rows(self) -> int:
        return int(self.uncentered.shape[0])

    def error(self, model) -> tuple[float, float]:
        """(estimate, standard error) of a fitted model's relative rank-k error on all rows,
        cross-fitted on the probe's halves (class notes)."""
        T = np.asarray(to_host(model.transform(self.X)), dtype=np.float64)
        model_rows, reference_rows = [], []
        for half in self.halves:
            model_rows.append(half.residual_rows(T[half.rows]))
            reference_rows.append(half.reference)
        estimate, bootstrap = _ratio_of_rows(
            np.concatenate(model_rows), np.concatenate(reference_rows), self.scale, self.rng
        )
        if len(self.halves) < 2 or not math.isfinite(bootstrap):
            return estimate, bootstrap
        # The bootstrap holds the halves' fitted references fixed, so it misses how they move
        # with the rows drawn; the two halves' own ratios are two estimates from disjoint rows,
        # and half their difference estimates that spread too (one degree of freedom).
        first, second = (
            _ratio_of_rows(rows, reference, self.scale, None)[0]
            for rows, reference in zip(model_rows, reference_rows, strict=True)
        )
        if not (math.isfinite(first) and math.isfinite(second)):
            return estimate, bootstrap
        return estimate, math.hypot(bootstrap, 0.5 * (first - second))

    def nystrom_errors(self, sizes, method: str, stop: float = 0.0) -> dict[int, float]:
        """The relative rank-k error of Nystrom KPCA with c landmarks on the probe's first half,
        for each c of ``sizes`` in order until one is at most ``stop``: landmarks among the
        half's rows (``"uniform"``: a random order, prefixes nested; ``"rpcholesky"``: the
        pivots in order, any prefix the RPCholesky result with that many, Chen et al. 2024),
        the KPCA of their Nystrom features fitted on the half and judged on its rows against
        their own optimum.

        Fitted to the rows it is judged on, this reads optimistic as a prediction for a fit on
        all rows (measured with a 2000-row probe: RandomNoisy at 10^6 rows 1.119 / 1.079 /
        1.041 / 1.015 at 32 / 64 / 128 / 250 landmarks, where fits on all rows have 1.136 /
        1.103 / 1.067 / 1.031; mnist at 70,000 rows 1.269 / 1.140 / 1.059 / 1.011 for 1.325 /
        1.172 / 1.056 / 1.019): the growth that follows corrects it.  Judging the same fit on
        the other half instead is no better: it tends to the probe's own floor, not 1, as c
        grows (a fit of m rows, not n), which hides the advantage of pivoted landmarks on
        data with far-apart clusters (kddcup).
        """
        half = self.halves[0]
        m = half.rows.size
        K_h = half.K
        if method == "rpcholesky":
            order = rpcholesky_of_gram(K_h, min(max(sizes), m), self.rng)
        else:
            order = self.rng.permutation(m)
        errors = {}
        for c in sizes:
            idx = order[: min(c, order.size)]
            with one_blas_thread():
                w, V = np.linalg.eigh(K_h[np.ix_(idx, idx)])
            keep = w > 1e-10 * max(w[-1], 1e-300)
            F = K_h[:, idx] @ (V[:, keep] / np.sqrt(w[keep]))  # the half's Nystrom features
            Fc = F - F.mean(axis=0)
            # The KPCA of F F^T is the PCA of F: projections Fc U_k, U_k the top
            # eigenvectors of the c x c scatter (cheaper than an SVD of the m x c Fc).
            with one_blas_thread():
                s, U = np.linalg.eigh(Fc.T @ Fc)
            T = Fc @ U[:, ::-1][:, : min(self.k, s.size)]
            rows = half.residual_rows(T)
            errors[int(c)] = _ratio_of_rows(rows, half.own, self.scale, None)[0]
            if errors[int(c)] <= stop:
                break
        return errors


class _Half:
    """One half H of the probe: its rows, centered Gram G_H, its own top-k KPCA and squared
    residual row norms ``own``, and (after :meth:`cross_fit`) ``reference``, the mean of
    ``own`` and of the residual of the other half's KPCA on H."""

    def __init__(self, probe: SpectrumProbe, rows, K_h):
        self.rows = rows
        self.K = K_h  # the half's uncentered Gram (a view of the probe's)
        G = np.array(K_h, dtype=np.float64)
        center_gram_inplace(G)
        self.G = G
        self.gram_rows = np.einsum("ij,ij->i", G, G)
        self.vals, self.vecs = _top_eigen(G, probe.k, probe.placement)
        self.own = self.residual_rows(self.vecs * np.sqrt(np.maximum(self.vals, 0)))
        self.reference = self.own

    def residual_rows(self, T) -> np.ndarray:
        """Squared row norms of ``G_H - T T^T`` with T (H's rows) centered on H."""
        T = T - T.mean(axis=0)
        return np.maximum(_residual_rows(self.G, self.gram_rows, T), 0.0)

    def cross_fit(self, other: _Half, K_ho) -> None:
        """``reference``: the mean of H's own optimum residual and that of ``other``'s KPCA
        projections of H's rows (``K_ho = k(H, other)``, centered in ``other``'s feature
        mean, then on H)."""
        keep = other.vals > 1e-12 * max(float(other.vals[0]), 1e-300)
        means = other.K.mean(axis=0)
        Kc_ho = K_ho - means
        Kc_ho -= K_ho.mean(axis=1)[:, None]
        Kc_ho += means.mean()
        fresh = self.residual_rows(Kc_ho @ (other.vecs[:, keep] / np.sqrt(other.vals[keep])))
        self.reference = 0.5 * (self.own + fresh)


def _top_eigen(G, k: int, placement=None):
    """The top-k eigenpairs of a probe's (symmetric, centered) Gram, largest first (on the
    host; with a GPU ``placement``, a dense ``eigh`` there)."""
    if placement is not None:
        vals, vecs = eigh_topk(placement.asarray(G, np.float64), k, method="dense", rng=0)
        return to_host(vals), to_host(vecs)
    if G.shape[0] <= DENSE_EIGH_ROWS:
        with one_blas_thread():  # LAPACK's threads cost more than they save at this size
            vals, vecs = scipy.linalg.eigh(
                G, subset_by_index=[G.shape[0] - k, G.shape[0] - 1], driver="evr"
            )
        return vals[::-1], vecs[:, ::-1]
    # No ``scale``: its round-off clean-up of tiny eigenvalues is not needed here, and with it
    # the check of the Ritz pairs took 2-2.5x as long (mnist and RandomNoisy, 1000 rows).
    with one_blas_thread():  # ARPACK's matrix-vector products and Ritz vectors: small BLAS-2
        return eigh_topk(G.copy(), k, method="lanczos", rng=0, overwrite=True)


def _residual_rows(G, gram_rows, T) -> np.ndarray:
    """Squared row norms of ``G - T T^T``: ``||g_i||^2 - 2 (G T)_i . t_i + t_i (T^T T)
    t_i^T``, O(p^2 k) without forming the p x p residual."""
    with one_blas_thread():
        GT = G @ T
    return gram_rows - 2.0 * np.einsum("ij,ij->i", GT, T) + np.einsum("ij,ij->i", T @ (T.T @ T), T)


def _ratio_of_rows(rows, reference, scale, rng) -> tuple[float, float]:
    """``sqrt(sum rows / sum reference)`` and, with ``rng``, its bootstrap standard error over
    the rows (the two resampled together; nan without ``rng``)."""
    total = float(reference.sum())
    if total <= 0.0:
        return (1.0 if rows.sum() <= 1e-12 * scale**2 else math.inf), 0.0
    estimate = math.sqrt(rows.sum() / total)
    if rng is None:
        return float(estimate), math.nan
    p = rows.size
    idx = rng.integers(0, p, size=(N_BOOTSTRAP, p))
    boot = np.sqrt(rows[idx].sum(axis=1) / np.maximum(reference[idx].sum(axis=1), 1e-300))
    return float(estimate), float(np.std(boot, ddof=1))


def probe_size(n) -> int:
    """Probe rows for n training rows: ``8 sqrt(n)`` within [MIN_PROBE_ROWS, PROBE_ROWS].

    The probe's Gram (p^2 kernel values) then costs as much as the kernel rows of a fit with
    64 landmarks: the probe stays a small part of the fit it chooses (its p^2 k eigenvectors
    too), and reaches the growth machinery's 2000 rows from n = 62500.
    """
    if n is None:
        return PROBE_ROWS
    return int(min(PROBE_ROWS, max(MIN_PROBE_ROWS, 8 * math.sqrt(n))))


def _probe_rows(source, profile: DataProfile, rng, p: int | None = None):
    """Uniform probe rows on the host (``p``, default :func:`probe_size`, of them; sparse rows
    stay sparse unless a dense copy takes at most :data:`PROBE_DENSE_BYTES`), and for a stream
    read once (then uniform among its first rows) its first rows, on which the size is piloted
    (None for several passes)."""
    p = probe_size(profile.n) if p is None else p
    if profile.random_access or profile.multi_pass:
        if profile.sparse and profile.random_access:
            X = source.indexable()
            idx = uniform_indices(X.shape[0], p, rng)
            rows = sp.csr_matrix(X[idx])
            if rows.shape[0] * rows.shape[1] * 8 <= PROBE_DENSE_BYTES:
                return rows.toarray(), None
            return rows, None
        return to_host(source.sample_rows(p, rng)), None
    head = to_host(source.head())
    idx = uniform_indices(head.shape[0], p, rng)
    return head[idx], head


# ------------------------------------------------------------------------------------------------
# candidates
# ------------------------------------------------------------------------------------------------
def candidate_methods(profile: DataProfile, kernel) -> list[tuple[str, str]]:
    """The methods to try, in order, each with the rule that put it there (docs/auto.md).

    ``exact`` is always last when the rows can be taken by index: the fallback when the
    approximations cannot get there within the budgets (its own memory check then decides).
    """
    fourier = bool(getattr(kernel, "shift_invariant", False))
    features = fourier or kernel.name == "polynomial"
    n = profile.n
    out: list[tuple[str, str]] = []
    if profile.random_access and n is not None and n <= EXACT_MAX_ROWS:
        out.append(("exact", f"n = {n} <= {EXACT_MAX_ROWS}: the exact Gram is cheap"))
    if not profile.multi_pass:
        if features:
            out.append(("random-features", "one pass over a stream: random features"))
            out.append(("streaming", "one pass over a stream in less memory: Frequent Directions"))
        out.append(("nystrom", "one pass over a stream: landmarks from its first rows"))
        return out
    if profile.sparse_wide and fourier:
        out.append(
            (
                "random-features",
                f"sparse ({profile.density:.2g} nonzero) and wide (d = {profile.d}): random "
                "features at input-sparsity cost",
            )
        )
    out.append(("nystrom", "several passes possible: Nystrom, landmarks chosen by the probe"))
    if features and not profile.sparse_wide:
        out.append(("random-features", "fallback: random features"))
    if features:
        out.append(("streaming", "fallback in less memory: random features + Frequent Directions"))
    if profile.random_access and n is not None and n > EXACT_MAX_ROWS:
        out.append(("exact", "fallback: exact KPCA, if its Gram fits"))
    return out


# ------------------------------------------------------------------------------------------------
# the estimator
# ------------------------------------------------------------------------------------------------
class AutoKPCA(BaseKPCA):
    """Kernel PCA with the method and its size chosen from the data and the budgets.

    Looks at the rows (n, d, sparsity, one pass or several), probes the kernel's spectrum on a
    uniform sample of rows (``8 sqrt(n)``, 500 to 2000), picks the method (exact KPCA, Nystrom
    with uniform or randomly pivoted Cholesky landmarks, random features, or random features
    with Frequent Directions)
    and grows its size until the relative rank-k error estimated on the probe is at most
    ``1 + tol``, within the memory and time budgets; ``report_`` says what was considered,
    tried and chosen, and why.  See the module notes and ``docs/auto.md`` for the rules.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives 10 (capped by the data).
    kernel, gamma, degree, coef0, nu
        Kernel spec, as for every fastkpca estimator.  The kernel is resolved once, on the
        rows (the first rows of a stream), and the same resolved kernel is given to the
        method chosen.
    tol : float, default 0.05
        The allowed relative excess of the rank-k error over exact KPCA's optimum.
    memory : int, str or None
        Memory budget of the fit in bytes (or ``"2GB"``, ``"512M"``); None: 80 % of what is
        available (:func:`fastkpca.execution.available_memory_bytes`).  A method whose arrays
        at the size needed exceed it is not tried.
    time : float or None
        Time budget of the fit in seconds; None: no limit.  A method whose fit is predicted
        (flops over a measured rate) to end past it is not tried, and growth stops there.
    device, n_jobs, verbose, random_state
        Forwarded to the method chosen (see any fastkpca estimator).
    fit_inverse_transform : bool, default False
        Forwarded: the method chosen learns its pre-image map.
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.

    Attributes
    ----------
    method_ : str
        The method chosen, a ``fastkpca fit --method`` name (``"exact"``, ``"nystrom"``,
        ``"random-features"``, ``"streaming"``).
    estimator_ : the fitted estimator of that method; ``transform`` is its transform.
    report_ : list of dict
        One entry per candidate, in the order considered, with plain values:
        ``method``, ``size`` (rows for exact, landmarks, output features) and ``size_name``,
        ``params`` (the estimator's parameters that were chosen), ``reason`` (the rule that
        made it a candidate), ``error`` and ``error_stderr`` (the relative rank-k error
        estimated on the probe and its standard error, :class:`SpectrumProbe`; None when not
        fitted),
        ``fit_seconds``, ``memory_bytes`` (needed at that size, by the cost model),
        ``predicted_seconds``, ``status`` (``"chosen"``, ``"tried"`` for a size or method
        given up, ``"rejected"`` when not fitted) and ``why``.
        The first entry (``method = "probe"``) describes the data and the probe.
    n_features_in_ : int
    eigenvalues_, n_components_, kernel_, explained_variance_ratio_, ... :
        The chosen estimator's fitted attributes, delegated.

    See Also
    --------
    ExactKPCA : the exact method, and the reference of the error estimate.
    NystromKPCA, RandomFeatureKPCA, StreamingKPCA : the approximate methods it chooses among.
    fastkpca.metrics.estimate_error : the same kind of error estimate for any fitted model.

    Examples
    --------
    >>> from fastkpca import AutoKPCA
    >>> from fastkpca.datasets import load_demo
    >>> X, _ = load_demo()
    >>> auto = AutoKPCA(n_components=5, gamma="median", tol=0.1, random_state=0)
    >>> auto = auto.fit(X[:1000])
    >>> auto.method_ in ("exact", "nystrom", "random-features", "streaming")
    True
    >>> chosen = [entry for entry in auto.report_ if entry["status"] == "chosen"]
    >>> len(chosen), chosen[0]["method"] == auto.method_
    (1, True)
    >>> auto.transform(X[1000:1003]).shape
    (3, 5)
    """

    _accepts_sparse = True

    def __init__(
        self,
        n_components=DEFAULT_N_COMPONENTS,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        tol=0.05,
        memory=None,
        time=None,
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
        self.tol = tol
        self.memory = memory
        self.time = time
        self.device = device
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose

    # --- delegation -------------------------------------------------------------------------
    def __getattr__(self, name):
        # Fitted attributes of the chosen estimator (eigenvalues_, kernel_, ...), read through.
        if name.endswith("_") and not name.startswith("_"):
            inner = self.__dict__.get("estimator_")
            if inner is not None:
                return getattr(inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- parameter checks -------------------------------------------------------------------
    def _check_params(self):
        """The shared checks, then ``tol``, ``memory`` and ``time`` (ValueError naming each)."""
        super()._check_params()
        if self.n_components is not None and not (
            isinstance(self.n_components, numbers.Integral)
            and not isinstance(self.n_components, bool)
        ):
            raise ValueError(
                f"AutoKPCA needs an integer n_components (the rank k of its error), got "
                f"{self.n_components!r}"
            )
        if self.tol is None:
            raise ValueError("tol must be a positive number (the allowed relative excess error)")
        check_tol(self.tol, auto=False)
        parse_memory(self.memory)
        _check_time(self.time)
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError("AutoKPCA cannot use kernel='precomputed'; use ExactKPCA")

    # --- fit ----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Choose the method and its size, and fit it on X (array, CSR matrix, iterable of row
        blocks, dask array, tensor).  ValueError when no method fits the budgets."""
        self._check_params()
        started = time.perf_counter()
        tol = float(self.tol)
        budget = parse_memory(self.memory)
        if budget is None:
            budget = int(MEMORY_FRACTION * available_memory_bytes())
        deadline = _check_time(self.time)
        rng = self._make_rng()
        seed = int(rng.integers(2**31))
        probe_rng = np.random.default_rng(int(rng.integers(2**63)))
        source = self._fit_source(X)
        profile = profile_source(source)
        # The kernel, resolved once: on all rows where they can be taken by index, else on the
        # first rows; the methods tried all get this very kernel.
        kernel = self._resolve_kernel(
            source if profile.random_access else to_host(source.head()), rng
        )
        k = int(self.n_components or DEFAULT_N_COMPONENTS)
        probe_rows, pilot_rows = _probe_rows(source, profile, probe_rng)
        probe = SpectrumProbe(probe_rows, kernel, k, probe_rng, self._placement(X))
        if probe.n_rows <= k:
            raise ValueError(
                f"n_components={k} needs more than {probe.n_rows} rows to choose a method"
            )
        run = _Run(
            self,
            X if profile.multi_pass else source,
            profile,
            probe,
            tol,
            budget,
            deadline,
            started,
            seed,
            kernel,
            k,
        )
        run.pilot_rows = pilot_rows
        run.source = source
        run.probe_rng = probe_rng
        run.describe_probe()
        model = run.choose()
        # The kernel is the estimator's (the same object): read through, not kept twice.
        del self.kernel_
        self.estimator_ = model
        self.method_ = run.chosen_method
        self.report_ = run.report
        return self

    # --- transform ----------------------------------------------------------------------------
    def transform(self, X):
        """Project X with the chosen estimator (its ``transform``)."""
        check_is_fitted(self)
        return self.estimator_.transform(X)

    def inverse_transform(self, X):
        """Pre-images by the chosen estimator's ``inverse_transform``
        (``fit_inverse_transform=True``)."""
        check_is_fitted(self)
        return self.estimator_.inverse_transform(X)

    @property
    def _n_features_out(self):
        return self.estimator_.n_components_


class _Run:
    """One AutoKPCA fit: the candidates, their growth and the report."""

    def __init__(self, auto, X, profile, probe, tol, budget, deadline, started, seed, kernel, k):
        self.auto = auto
        self.X = X
        self.profile = profile
        self.probe = probe
        self.tol = tol
        self.budget = budget
        self.deadline = deadline
        self.started = started
        self.seed = seed
        self.kernel = kernel
        self.k = k
        self.report: list[dict] = []
        self.chosen_method: str | None = None
        # flops per second: first from the probe's Gram, then from each fit
        d = profile.d if not profile.sparse else max(1.0, profile.d * profile.density)
        self.d_eff = float(d)
        flops = probe.n_rows**2 * (2 * self.d_eff + KERNEL_VALUE_FLOPS)
        self.rate = flops / max(probe.gram_seconds, 1e-4)
        self.probe_sizes: dict[str, dict[int, float]] = {}
        self.pilot_rows = None
        self._best: tuple | None = None
        self._chosen_entry: dict | None = None
        self._warned = False  # a stop that warned already (resolution, plateau, one pass)
        self.source = None  # the data's source and the probe's generator, to grow the probe
        self.probe_rng = None
        self._probe_grown = False

    # --- clock and memory -----------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - self.elapsed()

    def describe_probe(self, reason=None, seconds=None) -> None:
        entry = {
            "method": "probe",
            "size": self.probe.n_rows,
            "size_name": "rows",
            "params": {
                "kernel": self.kernel.to_config() if hasattr(self.kernel, "to_config") else None
            },
            "reason": reason or "what the data are, and the spectrum on a uniform sample of rows",
            "data": self.profile.describe(),
            "error": None,
            "error_stderr": None,
            "fit_seconds": round(self.elapsed() if seconds is None else seconds, 4),
            "memory_bytes": int(8 * 2 * self.probe.n_rows**2),
            "predicted_seconds": None,
            "status": "done",
            "why": "",
        }
        self.report.append(_plain(entry))

    # --- the cost model -------------------------------------------------------------------------
    def flops(self, method: str, size: int, params: dict) -> float:
        n = self.profile.n or 10 * PROBE_ROWS
        d = self.d_eff
        per_value = 2 * d + KERNEL_VALUE_FLOPS
        if method == "exact":
            return n * n * (per_value / 2 + EXACT_EIGEN_FLOPS)
        if method == "nystrom":
            c = size
            if self.nystrom_solver(c) == "randomized":
                # float32 kernel rows (rbf: about twice as fast) and the q-column sketch
                q = nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA
                work = n * c * (per_value / 2 + q) + 2 * c**3 / 3
            else:
                work = n * c * (per_value + c / 2) + 2 * c**3 / 3
            if params.get("landmarks") == "rpcholesky":
                work += RPCHOLESKY_SELECTION_COST * (n * c * per_value + n * c * c)
            return work
        m = size
        if method == "random-features":
            if params.get("input_sketch") == "auto":
                per_value = 2 * m / 2 + KERNEL_VALUE_FLOPS
            if params.get("solver") == "countsketch":
                return n * m * per_value / 2 + n * m * 4
            return n * m * per_value / 2 + n * m * m / 2
        ell = params.get("sketch_size", 50)
        return n * m * per_value / 2 + 4 * n * m * ell

    def nystrom_solver(self, c: int) -> str:
        """The solver ``NystromKPCA(solver="auto")`` runs at c landmarks (its rule): the
        one-pass sketch where the scatter's SYRK would cost at least RANDOMIZED_MIN_FLOPS and
        c is at least 4 sketch columns, else the exact scatter."""
        n = self.profile.n
        q = nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA
        if n is not None and n * c * c / 2 < nystrom_module.RANDOMIZED_MIN_FLOPS:
            return "exact"
        return "randomized" if c >= 4 * q else "exact"

    def cheapest_landmarks(self, c: int, cap: int, params: dict) -> int:
        """c, or more landmarks where they cost less: the size at which ``NystromKPCA``
        switches to its sketch (float32 rows, no SYRK) when the cost model prices it below c
        landmarks on the exact scatter (10^6 x 100 rows: 192 landmarks took 1.30 s exact,
        256 took 0.76 s sketched)."""
        switch = 4 * (nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA)
        if c < switch <= cap and self.flops("nystrom", switch, params) <= self.flops(
            "nystrom", c, params
        ):
            return switch
        return c

    def memory(self, method: str, size: int, params: dict) -> int:
        n = self.profile.n
        d = self.profile.d
        if method == "exact":
            n = int(n or 0)
            return int(n * n * self.profile.itemsize * 1.35 + 8 * n * self.k)
        if method == "nystrom":
            c = size
            need = 64 * c * c + 8 * c * d
            if params.get("landmarks") == "rpcholesky":
                need += 8 * int(n or 0) * c
            return int(need)
        m = size
        width = m // 2 if params.get("input_sketch") == "auto" else d
        frequencies = 8 * width * (m // 2)
        if method == "random-features":
            if params.get("solver") == "countsketch":
                t = max(2000, 50 * (self.k + 10))
                return int(frequencies + 8 * (2 * t * m + 2 * min(t, m) ** 2))
            return int(frequencies + 24 * m * m)
        ell = params.get("sketch_size", 50)
        return int(frequencies + 2 * 8 * 8 * ell * m)

    # --- the choice -----------------------------------------------------------------------------
    def choose(self):
        candidates = candidate_methods(self.profile, self.kernel)
        n = self.profile.n
        names = [m for m, _ in candidates]
        if (
            "nystrom" in names
            and "exact" in names[names.index("nystrom") :]
            and self.profile.random_access
            and self.profile.multi_pass
        ):
            c = self.predicted_size(self.landmark_method())
            if c >= EXACT_LANDMARK_FRACTION * n:
                candidates.remove(candidates[names.index("exact")])
                reason = (
                    f"the probe predicts {c} landmarks, at least n / 3: exact KPCA costs about "
                    "as much and has no error"
                )
                candidates.insert(0, ("exact", reason))
        failures = []
        best = None
        for method, reason in candidates:
            model, why = self.try_method(method, reason)
            if model is not None:
                self.chosen_method = method
                self._chosen_entry["status"] = "chosen"
                if not self._warned:
                    self.warn_if_unresolved(self._chosen_entry)
                return model
            failures.append(f"{method}: {why}")
            if self._best is not None and (best is None or self._best[0] < best[0]):
                best = self._best
        if best is not None:
            # Nothing met tol within the budgets: the most accurate fit is kept, and said so.
            err, model, method, entry = best
            warnings.warn(
                f"tol={self.tol}: no method reached it within the budgets; the most accurate "
                f"fit ({method}, estimated relative rank-k error {err:.4f}) is kept",
                RuntimeWarning,
                stacklevel=4,
            )
            entry["status"] = "chosen"
            entry["why"] = f"estimated error {err:.4f} > 1 + tol, the best within the budgets"
            self.chosen_method = method
            return model
        raise ValueError(
            "AutoKPCA: no method fits the budgets (memory "
            f"{format_bytes(self.budget)}"
            + ("" if self.deadline is None else f", time {self.deadline:g} s")
            + f", tol={self.tol}): "
            + "; ".join(failures)
        )

    def try_method(self, method, reason):
        """Fit ``method`` at growing sizes; (model, "") when it reaches tol, else (None, why)."""
        self._best = None
        self._chosen_entry = None
        params = self.base_params(method)
        sizes = self.sizes(method, params)
        if not sizes:
            why = self.reject(method, None, params, reason, "no size fits the memory budget")
            return None, why
        last_err = None
        previous = None
        level_steps = 0
        size = sizes[0]
        while True:
            need = self.memory(method, size, params)
            predicted = self.flops(method, size, params) / self.rate
            if need > self.budget:
                why = self.reject(
                    method,
                    size,
                    params,
                    reason,
                    f"needs {format_bytes(need)} > memory budget {format_bytes(self.budget)}",
                )
                return None, why if last_err is None else f"{why} (reached {last_err:.4f})"
            if predicted > self.left():
                why = self.reject(
                    method,
                    size,
                    params,
                    reason,
                    f"predicted {predicted:.3g} s > {max(self.left(), 0):.3g} s "
                    "left of the time budget",
                )
                return None, why if last_err is None else f"{why} (reached {last_err:.4f})"
            model, seconds = self.fit_at(method, size, params)
            self.rate = max(self.flops(method, size, params) / max(seconds, 1e-4), 1.0)
            err, stderr = self.probe.error(model)
            if math.isfinite(stderr) and stderr > self.tol and self.grow_probe(stderr):
                err, stderr = self.probe.error(model)
            entry = self.entry(method, size, params, reason, err, stderr, seconds, need, predicted)
            last_err = err
            if self._best is None or err < self._best[0]:
                self._best = (err, model, method, entry)
            if method == "exact" or getattr(model, "solver_", None) == "exact_kpca":
                # NystromKPCA computes exact KPCA itself where that is cheaper (c near n)
                entry["why"] = "exact KPCA: the optimum itself (error 1 on all rows)"
                self._chosen_entry = entry
                return model, ""
            # A standard error above tol (the probe grown already) cannot vouch for tol: an
            # estimate below 1 + tol is then not taken as met while a larger size can be fitted,
            # and growth goes on until the estimate levels off (the rules below: one more fit,
            # in practice).  kddcup's first 20,000 rows, tol = 0.01: 64 pivoted landmarks read
            # 0.995 +- 0.026 for a true error of 1.028; 128 have 1.002.
            unresolved = (
                self.profile.multi_pass
                and math.isfinite(stderr)
                and stderr > self.tol
                and size < sizes[-1]
            )
            if err <= 1.0 + self.tol and not unresolved:
                entry["why"] = f"estimated error {err:.4f} <= 1 + tol"
                self._chosen_entry = entry
                return model, ""
            allowance = min(stderr, STDERR_ALLOWANCE * self.tol)
            if not unresolved and math.isfinite(stderr) and err <= 1.0 + self.tol + allowance:
                # Above 1 + tol by less than its standard error: the probe cannot tell it from
                # a fit that meets tol, and a larger one would cost another 1.5x.
                entry["why"] = (
                    f"estimated error {err:.4f} within one standard error ({stderr:.4f}, at "
                    f"most {STDERR_ALLOWANCE:g} tol) of 1 + tol"
                )
                self._chosen_entry = entry
                return model, ""
            level = previous is not None and previous[0] - err < max(previous[1], stderr)
            level_steps = level_steps + 1 if level else 0
            if level and err <= 1.0 + RESOLUTION_STDERRS * stderr:
                # The estimate stopped falling within its noise of exact KPCA's optimum: no
                # larger size can be told apart from this one by the probe, so growth stops
                # here (tol is finer than the probe resolves), and says so.
                entry["why"] = (
                    f"estimated error {err:.4f}, level with the last size's "
                    f"{previous[0]:.4f} and within {RESOLUTION_STDERRS:g} standard errors "
                    f"({stderr:.4f}) of 1: the finest the probe resolves"
                )
                self._chosen_entry = entry
                self._warned = True
                warnings.warn(
                    f"tol={self.tol} is finer than the probe resolves: the estimated relative "
                    f"rank-k error of {method} at size {size}, {err:.4f}, is within "
                    f"{RESOLUTION_STDERRS:g} standard errors ({stderr:.4f}) of exact KPCA's; "
                    "that fit is kept",
                    RuntimeWarning,
                    stacklevel=5,
                )
                return model, ""
            if level_steps >= PLATEAU_STEPS:
                # Level for PLATEAU_STEPS growth steps in a row above 1 + tol: a plateau of the
                # estimate (far-apart repeated rows make it noisy) that larger sizes are not
                # seen to leave; the most accurate fit is kept rather than growing to the cap.
                return self.keep_best_on_plateau(err), ""
            previous = (err, stderr)
            if not self.profile.multi_pass:
                # One pass: no second fit.  Kept, and said so.
                entry["why"] = (
                    f"estimated error {err:.4f} > 1 + tol on the first rows; a one-pass stream "
                    "allows no larger refit"
                )
                self._chosen_entry = entry
                self._warned = True
                warnings.warn(
                    f"tol={self.tol}: the one-pass fit ({method}, size {size}) has an estimated "
                    f"relative rank-k error of {err:.4f}; it is kept",
                    RuntimeWarning,
                    stacklevel=5,
                )
                return model, ""
            entry["status"] = "tried"
            if size >= sizes[-1]:
                entry["why"] = f"estimated error {err:.4f} > 1 + tol at the largest size"
                break
            size = self.next_size(method, size, sizes, err)
            entry["why"] = (
                f"estimated error {err:.4f} +- {stderr:.4f}: a standard error above tol, grow "
                f"to {size}"
                if unresolved and err <= 1.0 + self.tol
                else f"estimated error {err:.4f} > 1 + tol: grow to {size}"
            )
        return None, f"reached {last_err:.4f} at the largest size ({sizes[-1]})"

    def next_size(self, method, size, sizes, err) -> int:
        """The size after ``size``: the next of ``sizes``, except for Nystrom landmarks, grown
        by a factor from the estimated excess: ``(err - 1) / tol`` within
        [:data:`MIN_GROWTH_FACTOR`, 2].

        Where the excess rank-k error falls as 1 / c (faster on a fast-decaying spectrum),
        ``c (err - 1) / tol`` landmarks suffice; the factor is capped at the doubling (the
        1 / c rate is a bound, not a law) and at least 1.5 (the estimate reads large excesses
        low, :class:`SpectrumProbe`), so an excess just above ``tol`` costs a step of 1.5x.
        """
        later = [s for s in sizes if s > size]
        if method != "nystrom" or not self.profile.multi_pass:
            return later[0]
        factor = min(2.0, max(MIN_GROWTH_FACTOR, (err - 1.0) / self.tol))
        grown = int(min(sizes[-1], max(size + 1, math.ceil(size * factor))))
        return self.cheapest_landmarks(grown, sizes[-1], {"landmarks": self.landmark_method()})

    def grow_probe(self, stderr: float) -> bool:
        """Draw the probe again with :data:`PROBE_GROWTH` times its rows (once, at most
        :data:`MAX_PROBE_ROWS`, from rows taken by index); whether it grew.  The estimates from
        here on, the one that asked included, are the larger probe's."""
        p = min(MAX_PROBE_ROWS, PROBE_GROWTH * self.probe.n_rows)
        n = self.profile.n
        if self._probe_grown or not self.profile.random_access or n is None or p > n // 2:
            return False
        if p <= self.probe.n_rows or 16 * p * p > self.budget:  # its Gram and a centred copy
            return False
        self._probe_grown = True
        start = time.perf_counter()
        rows, _ = _probe_rows(self.source, self.profile, self.probe_rng, p)
        self.probe = SpectrumProbe(rows, self.kernel, self.k, self.probe_rng, self.probe.placement)
        self.probe_sizes = {}  # size predictions from the larger probe, if asked again
        self.describe_probe(
            f"the estimate's standard error ({stderr:.4f}) exceeded tol: the probe drawn "
            f"again with {p} rows",
            time.perf_counter() - start,
        )
        return True

    def warn_if_unresolved(self, entry) -> None:
        """A ``RuntimeWarning`` when the chosen fit's estimate has a standard error above
        ``tol``: the probe cannot vouch for tol there (rows repeated across its halves, far
        apart, make the estimate noisy and can bias it low: kddcup's full 494,020 rows read
        0.971 +- 0.020 for a true 1.025)."""
        stderr = entry.get("error_stderr")
        if stderr is not None and math.isfinite(stderr) and stderr > self.tol:
            warnings.warn(
                f"tol={self.tol}: the estimated relative rank-k error of the fit kept, "
                f"{entry['error']:.4f}, has a standard error of {stderr:.4f}, more than tol: "
                "the probe cannot resolve tol on these rows, and the true error may be larger",
                RuntimeWarning,
                stacklevel=4,
            )

    def keep_best_on_plateau(self, err) -> object:
        """The most accurate fit so far, with a ``RuntimeWarning``: the estimate stopped
        falling above ``1 + tol`` (:data:`PLATEAU_STEPS`)."""
        assert self._best is not None
        best_err, best_model, method, best_entry = self._best
        best_entry["why"] = (
            f"estimated error {best_err:.4f} > 1 + tol, the lowest: the estimate stopped "
            f"falling ({PLATEAU_STEPS} sizes in a row within its standard error, last {err:.4f})"
        )
        self._chosen_entry = best_entry
        self._warned = True
        warnings.warn(
            f"tol={self.tol}: the estimated relative rank-k error of {method} stopped falling "
            f"at {best_err:.4f} > 1 + tol; the most accurate fit is kept",
            RuntimeWarning,
            stacklevel=5,
        )
        return best_model

    def reject(self, method, size, params, reason, why) -> str:
        entry = self.entry(
            method,
            size,
            params,
            reason,
            None,
            None,
            None,
            None if size is None else self.memory(method, size, params),
            None if size is None else self.flops(method, size, params) / self.rate,
        )
        entry["status"] = "rejected"
        entry["why"] = why
        return why

    def entry(self, method, size, params, reason, err, stderr, seconds, need, predicted):
        names = {"exact": "rows", "nystrom": "n_landmarks"}
        entry = {
            "method": method,
            "size": None if size is None else int(size),
            "size_name": names.get(method, "n_features"),
            "params": _plain(dict(params)),
            "reason": reason,
            "error": None if err is None else float(err),
            "error_stderr": None if stderr is None else float(stderr),
            "fit_seconds": None if seconds is None else round(float(seconds), 4),
            "memory_bytes": None if need is None else int(need),
            "predicted_seconds": None if predicted is None else float(f"{predicted:.4g}"),
            "status": "tried",
            "why": "",
        }
        self.report.append(entry)
        return entry

    # --- per method ---------------------------------------------------------------------------
    def base_params(self, method) -> dict:
        params: dict = {}
        if method == "nystrom":
            params["landmarks"] = self.landmark_method()
        elif method == "random-features":
            if self.profile.sparse_wide:
                params.update(self.input_sparsity_params())
            elif self.profile.d > 512 and self.kernel.name != "polynomial":
                params["features"] = "rff"  # orf's d x d blocks cost O(d^3) on wide rows
        elif method == "streaming":
            params["sketch_size"] = max(50, 2 * self.k + 10)
        return params

    def input_sparsity_params(self) -> dict:
        """The random-feature parameters for sparse, wide rows: the input sketch of the
        Gaussian frequencies (``input_sketch="auto"``: features in O(nnz(x) + t m) a row) for
        rbf and matern kernels, else the CountSketch solver (Musco & Woodruff)."""
        from .random_features import RandomFeatureKPCA

        if "input_sketch" in RandomFeatureKPCA._get_param_names() and self.kernel.name in (
            "rbf",
            "matern",
        ):
            return {"features": "rff", "input_sketch": "auto"}
        return {"features": "rff", "solver": "countsketch"}

    def landmark_method(self) -> str:
        """``"rpcholesky"`` when, on the probe, it reaches tol at a size whose fit the cost model
        prices below the uniform landmarks' fit at theirs (and the rows can be taken by index),
        else ``"uniform"``.  Pivoted landmarks need fewer of them on data with far-apart
        clusters or outliers (kddcup: 64 where uniform ones need 1024), but their selection
        costs 0.8-2.7x a uniform fit of the same size (:data:`RPCHOLESKY_SELECTION_COST`)."""
        if not (self.profile.random_access and self.profile.multi_pass):
            return "uniform"
        uniform = self.predicted_size("uniform")
        if uniform <= CHEAP_LANDMARKS:
            return "uniform"
        pivoted = self.predicted_size("rpcholesky")
        n = self.profile.n
        cap = MAX_LANDMARKS if n is None else min(MAX_LANDMARKS, n)
        plain = {"landmarks": "uniform"}
        uniform = self.cheapest_landmarks(min(uniform, cap), cap, plain)
        if self.flops("nystrom", min(pivoted, cap), {"landmarks": "rpcholesky"}) < self.flops(
            "nystrom", uniform, plain
        ):
            return "rpcholesky"
        return "uniform"

    def probe_landmark_sizes(self) -> list[int]:
        half = self.probe.halves[0].rows.size
        top = max(MIN_LANDMARKS, int(PROBE_MAX_LANDMARK_FRACTION * half))
        start = max(MIN_LANDMARKS, 1 << math.ceil(math.log2(2 * self.k)))
        return [s for s in doubling_sizes(start, top) if s <= top]

    def predicted_size(self, landmarks: str) -> int:
        """The smallest probe size whose Nystrom error on the probe is at most ``1 +
        PREDICTION_MARGIN tol`` (the doubling above the probe's largest when none is)."""
        target = 1.0 + PREDICTION_MARGIN * self.tol
        if landmarks not in self.probe_sizes:
            self.probe_sizes[landmarks] = self.probe.nystrom_errors(
                self.probe_landmark_sizes(), landmarks, stop=target
            )
        errors = self.probe_sizes[landmarks]
        for c in sorted(errors):
            if errors[c] <= target:
                return c
        return 2 * max(errors)

    def sizes(self, method, params) -> list[int]:
        n = self.profile.n
        if method == "exact":
            return [int(n)] if n else []
        if method == "nystrom":
            start = self.predicted_size(params["landmarks"])
            cap = MAX_LANDMARKS if n is None else min(MAX_LANDMARKS, n)
            if not self.profile.multi_pass:
                # landmarks from the first rows, one size (see fit_at)
                return [min(start, self.probe.n_rows)]
            return doubling_sizes(self.cheapest_landmarks(min(start, cap), cap, params), cap)
        start = max(MIN_FEATURES, 1 << math.ceil(math.log2(4 * self.k)))
        if not self.profile.multi_pass:
            return [self.pilot_features(method, params, start)]
        start = max(start, self.feature_start())
        return doubling_sizes(start, max(start, MAX_FEATURES))

    def feature_start(self) -> int:
        """Random features need more columns than Nystrom landmarks for the same error
        (no data-adapted basis): start at twice the landmarks the probe predicts."""
        if self.profile.sparse_wide:
            return 256
        return 2 * self.predicted_size("uniform")

    def pilot_features(self, method, params, start) -> int:
        """A one-pass stream: the size by growth on the probe rows alone (fits of the probe,
        cheap), then one fit of the stream at that size."""
        from .random_features import RandomFeatureKPCA

        size = start
        for size in doubling_sizes(start, MAX_FEATURES):
            if self.memory(method, size, params) > self.budget:
                break
            pilot = RandomFeatureKPCA(
                self.k,
                kernel=self.kernel,
                n_features=size,
                random_state=self.seed,
                features=params.get("features", "auto"),
            ).fit(self.pilot_rows)
            err, _ = self.probe.error(pilot)
            if err <= 1.0 + self.tol:
                break
        return size

    def fit_at(self, method, size, params):
        from . import estimator_class

        cls = estimator_class(method)
        auto = self.auto
        common = {
            "n_components": self.k,
            "kernel": self.kernel,
            "random_state": self.seed,
            "fit_inverse_transform": auto.fit_inverse_transform,
            "alpha": auto.alpha,
            "n_jobs": auto.n_jobs,
            "verbose": auto.verbose,
            "device": auto.device,
        }
        if method == "nystrom":
            own = dict(params, n_landmarks=int(size))
            if not self.profile.multi_pass:
                # one pass: given landmarks, uniform among the first rows
                rows = self.probe.X[: int(size)]
                own = {"landmarks": rows.toarray() if sp.issparse(rows) else np.asarray(rows)}
        elif method == "exact":
            own = {}
        else:
            own = dict(params, n_features=int(size))
        model = cls(**common, **own)
        start = time.perf_counter()
        # In-memory rows were checked whole by AutoKPCA's own validation (finite values
        # included): each fit skips that scan (20-40 ms at 70,000 x 784).  Rows read from
        # memory maps, blocks or files are checked as each fit reads them.
        checked = type(self.X) is np.ndarray or sp.issparse(self.X)
        with sklearn.config_context(assume_finite=checked or None):
            model.fit(self.X)
        seconds = time.perf_counter() - start
        if not hasattr(model, "n_features_in_"):  # fitted on the source itself (a stream)
            model.n_features_in_ = self.auto.n_features_in_
        return model, seconds


def _plain(value):
    """A report value as plain Python (JSON-ready) values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)
