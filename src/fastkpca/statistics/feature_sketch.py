"""Frequent Directions sketches of random features: the statistic and solver of streaming KPCA.

Ghashami, Perry & Phillips (2016), Algorithm 1: each row x is mapped to its random features
``z(x)`` (m columns, :mod:`fastkpca.features`) and the feature rows are sketched by Frequent
Directions (:class:`fastkpca.sketch.FrequentDirections`) into an ell x m matrix B with
``B^T B ~ Z^T Z``; the right singular vectors of B are the approximate kernel principal axes in
feature space.  Memory is O(ell m) for the sketch plus one row block, independent of n; time
O(n m (d + ell)).  :class:`FeatureSketch` (the sketch, the exact float64 feature sum and the row
count) is mergeable (the FD bound holds for the union), so a stream, ``partial_fit`` and a dask
tree reduction build the same kind of model; :func:`skpca_eigen` turns it into eigenpairs.
Inside one statistic the rows are dealt by index between :data:`PARALLEL_SKETCHES` sketches
updated in parallel threads and merged when read, which uses both cores of a small machine for
the shrinks (small eigendecompositions, serial in LAPACK); each thread computes the features of
its own rows, 256 at a time, right before its sketch takes them
(:meth:`FeatureSketch.update_rows`), so no block of features is ever formed.

Centering (which the paper leaves out: its G is uncentered).  KPCA needs the eigenpairs of the
centered feature covariance ``Zc^T Zc = Z^T Z - s s^T / n`` (s the feature sum, kept exactly in
float64).  We take those of ``B^T B - s s^T / n``: this operator maps into the span of the rows of
``[B; s^T]`` (at most ell + 1 dimensions) and vanishes on its orthogonal complement, so with Q an
orthonormal basis of that span its non-zero eigenpairs are exactly those of the small
``Q^T (B^T B - s s^T / n) Q`` (:func:`skpca_eigen`).  The error is only FD's:
``||Zc^T Zc - (B^T B - s s^T / n)||_2 = ||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``,
and when the sketch is at least as large as m nothing is shrunk, so the model equals exact PCA of
the same features up to round-off.  The rows are sketched uncentered, so the feature mean takes
up (about) one of the ell directions; in exchange the sketch does not depend on a data-dependent
shift, which keeps ``partial_fit`` independent of the blocking and makes sketches of different
streams mergeable.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from ..features import _CHUNK_ROWS, FeatureMap, column_sums
from ..sketch import FrequentDirections
from ..solvers import one_blas_thread, postprocess_eigen

__all__ = ["FeatureSketch", "feature_sketch", "skpca_eigen"]


#: Independent Frequent Directions sketches a :class:`FeatureSketch` splits its rows between
#: (merged when read).  Fixed, so that a model never depends on the machine: the threads that
#: update them are ``min(PARALLEL_SKETCHES, os.cpu_count())``.
PARALLEL_SKETCHES = 2
#: Rows are dealt to the sketches in runs of this many consecutive rows, by row index (run j
#: to sketch j mod PARALLEL_SKETCHES): the assignment depends only on the row order, never on
#: the blocking or on thread timing.  A few shrink batches long, so a run costs one update
#: call per sketch, and short enough that a block of 8192 rows is split evenly.
SPLIT_ROWS = 1024

_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_PID = 0


def _threads() -> int:
    return max(1, min(PARALLEL_SKETCHES, os.cpu_count() or 1))


def _executor() -> ThreadPoolExecutor:
    """The module's thread pool, created on first use (again in a forked child, which
    inherits the pool object but not its threads)."""
    global _EXECUTOR, _EXECUTOR_PID
    if _EXECUTOR is None or _EXECUTOR_PID != os.getpid():
        _EXECUTOR = ThreadPoolExecutor(_threads(), thread_name_prefix="fastkpca-fd")
        _EXECUTOR_PID = os.getpid()
    return _EXECUTOR


class FeatureSketch:
    """Frequent Directions sketches of feature rows, their float64 sum and their count.

    The rows are dealt, in runs of :data:`SPLIT_ROWS` by row index, to
    :data:`PARALLEL_SKETCHES` independent sketches updated in parallel threads (one BLAS thread
    each: the shrinks are small eigendecompositions, where more BLAS threads only spin) and
    merged when :attr:`sketch` is read.  Frequent Directions is mergeable (Agarwal et al.
    2013; Ghashami et al. 2016, section 3.2): the merged sketch of the parts keeps the FD
    bound of the whole stream, ``||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``.

    Parameters
    ----------
    sketches : FrequentDirections or list of FrequentDirections
        The parts (one: a sketch to continue, e.g. a fitted model's; the others are then
        created empty).
    feature_sum : (m,) float64 array, updated in place
    n : int
    """

    def __init__(self, sketches, feature_sum: np.ndarray, n: int = 0):
        parts = [sketches] if isinstance(sketches, FrequentDirections) else list(sketches)
        first = parts[0]
        while len(parts) < PARALLEL_SKETCHES:
            parts.append(FrequentDirections(first.sketch_size, first.n_columns, first.batch_size))
        self.parts = parts
        self.feature_sum = feature_sum
        self.n = int(n)
        self._merged: FrequentDirections | None = None

    @classmethod
    def empty(cls, sketch_size: int, m: int) -> FeatureSketch:
        return cls(FrequentDirections(sketch_size, m), np.zeros(m), 0)

    def copy(self) -> FeatureSketch:
        """An independent copy (the sketches and the sum): updating it leaves this one as it
        is, so a failed update of the copy loses nothing; O(ell m) time."""
        return FeatureSketch([part.copy() for part in self.parts], self.feature_sum.copy(), self.n)

    @property
    def sketch(self) -> FrequentDirections:
        """The sketch of all rows, the parts merged by :meth:`FrequentDirections.merge`."""
        if self._merged is None:
            merged = self.parts[0]
            for part in self.parts[1:]:
                if part.n_rows_seen:
                    merged = merged.merge(part)
            self._merged = merged
        return self._merged

    def update(self, Z: np.ndarray) -> FeatureSketch:
        """Add a block of feature rows (finite: the features of validated input)."""
        runs = self._deal(Z.shape[0])
        jobs = [(part, [Z[lo:hi] for lo, hi in spans]) for part, spans in runs]
        shrinks = any(_shrinks(part, sum(p.shape[0] for p in pieces)) for part, pieces in jobs)
        return self._run(_extend, jobs, Z.shape[0], limit=shrinks)

    def update_rows(self, X, fmap: FeatureMap) -> FeatureSketch:
        """Add the features of a block of input rows, each sketch's rows computed in its own
        thread right before it takes them (:meth:`FeatureMap.row_writer`, chunks of 256 rows in
        cache): no feature block is formed.  The same rows go to the same sketch as with
        ``update(fmap(X))``; the features agree to their float32 rounding."""
        if sp.issparse(X):
            X = X.tocsr()  # row slices
        write = fmap.row_writer(X)
        dtype = fmap.feature_dtype(np.float32 if X.dtype == np.float32 else np.float64)
        jobs = [
            (part, write, spans, fmap.n_output_features, dtype)
            for part, spans in self._deal(X.shape[0])
        ]
        return self._run(_extend_features, jobs, X.shape[0], limit=True)

    def _deal(self, n_rows: int) -> list:
        """``(sketch, [(lo, hi), ...])`` for each sketch that gets some of the next n_rows rows:
        runs of :data:`SPLIT_ROWS` by global row index, run j to sketch j mod the number of
        sketches (block offsets lo:hi into the new rows)."""
        spans: list[list[tuple[int, int]]] = [[] for _ in self.parts]
        pos = 0
        while pos < n_rows:
            row = self.n + pos
            stop = min(n_rows, pos + SPLIT_ROWS - row % SPLIT_ROWS)
            spans[(row // SPLIT_ROWS) % len(self.parts)].append((pos, stop))
            pos = stop
        return [(part, own) for part, own in zip(self.parts, spans, strict=True) if own]

    def _run(self, extend, jobs: list, n_rows: int, limit: bool) -> FeatureSketch:
        """``extend(*job)`` for each sketch's job, in parallel threads when there are several
        (from the main thread only), under one BLAS thread when ``limit``: the shrinks are small
        eigendecompositions and the feature products small GEMMs, where more BLAS threads only
        spin (see FrequentDirections.update); it is set only when needed (entering costs
        ~1 ms) and shared with the other threads that hold it
        (:func:`~fastkpca.solvers.one_blas_thread`: dask worker threads run several statistics
        at once, each with its jobs one after the other).  Adds the column sums the jobs
        return, in sketch order."""
        with one_blas_thread() if limit else nullcontext():
            if len(jobs) > 1 and _threads() > 1 and _in_main_thread():
                futures = [_executor().submit(extend, *job) for job in jobs]
                sums = [future.result() for future in futures]
            else:
                sums = [extend(*job) for job in jobs]
        self._merged = None
        for part_sum in sums:  # the column sums, taken in the threads
            self.feature_sum += part_sum
        self.n += n_rows
        return self

    def merge(self, other: FeatureSketch) -> FeatureSketch:
        """The statistic of the rows of both (a new object; neither input is modified)."""
        return FeatureSketch(
            self.sketch.merge(other.sketch),
            self.feature_sum + other.feature_sum,
            self.n + other.n,
        )


def _shrinks(sketch: FrequentDirections, rows: int) -> bool:
    """Whether adding this many rows to the sketch makes it shrink."""
    return sketch._buffer is None or sketch._filled + rows >= sketch._buffer.shape[0]


def _extend(sketch: FrequentDirections, pieces: list) -> np.ndarray:
    """Add the pieces to the sketch; returns their float64 column sum (summed here, in the
    sketch's thread: a float32 -> float64 sum of a whole block took ~0.5 us per row on one
    core, 0.5 s of a 10^6-row fit)."""
    total = np.zeros(pieces[0].shape[1])
    for rows in pieces:
        sketch._extend(rows)
        total += column_sums(rows)
    return total


def _extend_features(sketch: FrequentDirections, write, spans: list, m: int, dtype) -> np.ndarray:
    """Compute the features of the rows ``lo:hi`` of each span chunk by chunk (``write``, a
    :meth:`FeatureMap.row_writer`) into one chunk buffer and add them to the sketch; returns
    their float64 column sum.  Runs in the sketch's thread."""
    chunk = _CHUNK_ROWS
    Z = np.empty((chunk, m), dtype)
    total = np.zeros(m)
    for lo, hi in spans:
        for start in range(lo, hi, chunk):
            stop = min(hi, start + chunk)
            rows = Z[: stop - start]
            write(start, stop, rows)
            sketch._extend(rows)
            total += column_sums(rows)
    return total


def _in_main_thread() -> bool:
    """Threads only from the main thread: a dask worker thread runs one chunk's statistic
    while others run theirs (dask parallelises over chunks), and the BLAS limit, which is
    process-wide, must not be entered concurrently."""
    return threading.current_thread() is threading.main_thread()


def feature_sketch(
    blocks, fmap: FeatureMap, sketch_size: int, into: FeatureSketch | None = None
) -> FeatureSketch:
    """:class:`FeatureSketch` of the features of ``(start, block)`` row blocks (added to ``into``
    when given): the one per-block step of SKPCA (Ghashami et al. 2016, Algorithm 1)."""
    stat = FeatureSketch.empty(sketch_size, fmap.n_output_features) if into is None else into
    for _, Xb in blocks:
        stat.update_rows(Xb, fmap)
    return stat


def skpca_eigen(
    B: np.ndarray,
    feature_sum: np.ndarray,
    n_samples: int,
    n_components: int,
    shrinkage: float = 0.0,
    loss=None,
    missing_energy: float | None = None,
    return_bounds: bool = False,
):
    """Top eigenpairs of the centered feature covariance estimated from a FD sketch.

    With ``Zc^T Zc = B^T B - s s^T / n + E`` (exact: the centering term is known exactly, and
    ``E = Z^T Z - B^T B`` is the sketch's loss, ``0 <= E <= delta I``, ``trace E = F``), Weyl's
    inequalities bound every true eigenvalue::

        mu_i <= lambda_i(Zc^T Zc) <= mu_i + min(delta, F),    mu_i = lambda_i(B^T B - s s^T / n)

    (clipped at 0; the ``mu_i`` are the uncompensated, paper's estimates).  The estimate is
    ``lambda_i(B^T B - s s^T / n + E_est)`` clipped to those bounds, with ``E_est = V^T H V +
    rho (I - V^T V)`` the sketch's tracked loss
    (:meth:`fastkpca.sketch.FrequentDirections.loss_model`): exact in directions that stayed
    in the sketch, elsewhere the geometric mean of the average loss and ``delta`` (every
    direction's loss is at most ``delta``; the estimated operator is also ``rho`` on the
    complement of the sketch's span, so ``rho`` can be reported where the sketch has nothing
    larger).  The former estimate, ``delta`` added
    on B's whole row span (compensative FD, Desai et al. 2016), is the upper bound whenever
    the top directions did not stay in the sketch: 3x the truth on RandomNoisy, ell = 10.

    Parameters
    ----------
    B : ndarray (r, m), float64
        Frequent Directions sketch (or buffer) of the (uncentered) feature rows.
    feature_sum : ndarray (m,), float64
        s, the exact sum of the feature rows.
    n_samples : int
        n >= 1.
    n_components : int
        k <= min(r + 1, m).
    shrinkage : float
        delta, the total Frequent Directions shrinkage (0 when nothing was shrunk: then the
        result is the exact eigenpairs of ``B^T B - s s^T / n`` and the bounds coincide).
    loss : (V, H, rho) or None
        The loss estimate of :meth:`~fastkpca.sketch.FrequentDirections.loss_model` (rows of V
        in the row span of B); None: no compensation (the lower bounds).
    missing_energy : float or None
        F, the exact ``trace E``; None: not used in the upper bound.
    return_bounds : bool
        Also return the ``(2, k)`` lower / upper bounds.

    Returns
    -------
    eigenvalues : (k,) float64, descending, >= 0
        Estimates of the top eigenvalues of ``Zc Zc^T``, the centered approximate n x n Gram
        (the scale of ``KernelPCA.eigenvalues_``), within the bounds.
    components : (k, m) float64
        Orthonormal principal axes in feature space (eigenvectors of the estimated operator),
        signs fixed by :func:`fastkpca.solvers.postprocess_eigen` on the m-dimensional axes.
    bounds : (2, k) float64, only with ``return_bounds``
        Lower and upper bounds on the true eigenvalues (rigorous, up to round-off).

    Notes
    -----
    With Q an orthonormal basis of the row span of ``[B; s^T]``, ``B^T B - s s^T / n`` and
    ``V^T H V`` vanish on the complement of span(Q), where the estimated operator is ``rho I``;
    so its eigenpairs are those of the small ``Q^T (...) Q`` (size <= r + 1), at O(r^2 m) cost,
    together with ``rho`` (multiplicity ``m - dim Q``).  Negative values are clipped to 0.
    """
    m = B.shape[1]
    k = n_components
    B = B[np.any(B != 0.0, axis=1)]  # zero rows (fewer rows seen than ell) span nothing
    R = np.vstack([B, feature_sum[None, :]])
    Q, _ = la.qr(R.T, mode="economic", check_finite=False)
    BQ = B @ Q
    sQ = feature_sum @ Q
    M = BQ.T @ BQ - np.outer(sQ, sQ) / n_samples
    M = (M + M.T) / 2
    rest = m - Q.shape[1]  # dimension of the complement of span(Q)
    k = min(k, Q.shape[1])  # as many eigenvalues as axes (rank-deficient rows give fewer)

    def top(values, fill):
        values = np.concatenate([values, np.full(min(rest, k), fill)])
        return np.maximum(np.sort(values)[::-1][:k], 0.0)

    # M is an uncentered difference: its round-off is about size(M) eps trace(B^T B), and
    # eigenvalues below that (e.g. ~1e-14 for identical rows, whose centered Gram is 0) are 0.
    floor = M.shape[0] * np.finfo(np.float64).eps * float(np.sum(BQ * BQ))
    lower = top(la.eigvalsh(M, check_finite=False), 0.0)
    lower[lower <= floor] = 0.0
    slack = float(shrinkage)
    if missing_energy is not None:
        slack = min(slack, max(float(missing_energy), 0.0))
    upper = lower + slack
    rho = 0.0
    if loss is not None and slack > 0:
        V, H, rho = loss
        VQ = V @ Q
        M = M + VQ.T @ H @ VQ + rho * (np.eye(Q.shape[1]) - VQ.T @ VQ)
        M = (M + M.T) / 2
    w, U = la.eigh(M, check_finite=False)
    vals, vecs = postprocess_eigen(w, Q @ U)
    vals[vals <= floor] = 0.0
    estimate = np.clip(top(vals, rho), lower, upper)
    estimate[estimate <= floor] = 0.0  # a rounding-size shrinkage (rho) is rounding too
    out = (estimate, vecs[:, :k].T)
    return out + (np.vstack([lower, upper]),) if return_bounds else out
