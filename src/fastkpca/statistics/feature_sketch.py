"""Frequent Directions sketches of random features: the statistic and solver of streaming KPCA.

Ghashami, Perry & Phillips (2016), Algorithm 1: each row x is mapped to its random features
``z(x)`` (m columns, :mod:`fastkpca.features`) and the feature rows are sketched by Frequent
Directions (:class:`fastkpca.sketch.FrequentDirections`) into an ell x m matrix B with
``B^T B ~ Z^T Z``; the right singular vectors of B are the approximate kernel principal axes in
feature space.  Memory is O(ell m) for the sketch plus one row block, independent of n; time
O(n m (d + ell)).  :class:`FeatureSketch` (the sketch, the exact float64 feature sum and the row
count) is mergeable (the FD bound holds for the union), so a stream, ``partial_fit`` and a dask
tree reduction build the same kind of model; :func:`skpca_eigen` turns it into eigenpairs.
Inside one statistic the rows are dealt by index between a fixed number of sketches
(:data:`MAX_SKETCHES` = 32 unless they are large, :func:`sketch_count`) updated by the threads of
the execution layer and merged up a fixed tree when read, which spreads the shrinks (small
eigendecompositions, serial in LAPACK) over the cores; each thread computes the features of the
rows of its sketches, 512 at a time, right before a sketch takes them
(:meth:`FeatureSketch.update_rows`), so no block of features is ever formed.  Neither the
number of threads nor the blocking changes which rows a sketch sees.

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

The same on every namespace (:meth:`FeatureSketch.update_rows`): the sketches' buffers and the
feature sum live with the rows (:class:`fastkpca.sketch.FrequentDirections`), and the same rows
go to the same sketch whatever the placement, so the same model up to rounding (a different
assignment would give a different FD sketch, not a rounding of this one).  The sketches that
get runs of equal lengths take them in lockstep (:func:`~fastkpca.sketch.extend_in_lockstep`:
their shrinks batched, the same arithmetic per sketch); what the execution layer decides is how
many go together (:func:`~fastkpca.execution.feature_ops.lockstep_width`): on the host a share
per worker thread, each computing its sketches' features 512 rows at a time in cache; on a
device all of them, one batched shrink per round.
"""

from __future__ import annotations

import functools

import numpy as np

from .._feature_map import float_type
from ..execution import CHUNK_ROWS, map_chains, map_tasks, n_workers
from ..execution.arrays import HOST, placement_of, to_host
from ..execution.budget import SKETCHES_MEMORY_MB
from ..execution.feature_ops import ChunkBuffers, lockstep_chunk_rows, lockstep_width
from ..execution.linalg import eigh, qr, small_steps
from ..features import FeatureMap, column_sums
from ..sketch import FrequentDirections, default_batch_size, extend_in_lockstep
from ..solvers import postprocess_eigen

__all__ = [
    "FeatureSketch",
    "feature_sketch",
    "skpca_eigen",
    "sketch_count",
    "sketch_bytes",
    "MAX_SKETCHES",
    "SPLIT_ROWS",
]


#: Independent Frequent Directions sketches a :class:`FeatureSketch` deals its rows to (merged
#: when read): a constant of the method, so that the model never depends on the machine, large
#: enough that a pass keeps many threads busy (each thread updates sketches of its own).
MAX_SKETCHES = 32
#: ... unless that many sketches would take more memory than
#: :data:`~fastkpca.execution.budget.SKETCHES_MEMORY_MB`: then as many as fit, at least this
#: many (:func:`sketch_count`, a function of ``sketch_size`` and the number of features only).
MIN_SKETCHES = 2
#: Rows are dealt to the sketches in runs of this many consecutive rows, by row index (run j
#: to sketch j mod the number of sketches): the assignment depends only on the row order, never
#: on the blocking or on the threads.  A few shrink batches long, so a run costs one update
#: call per sketch, and short enough that a block of 8192 rows is split between 8 sketches.
SPLIT_ROWS = 1024

#: With several threads a lockstep piece (few and long) takes its runs in about this many slices,
#: each on the next free thread (:func:`~fastkpca.execution.map_chains`), each costing little.
SLICES_PER_PIECE = 8


def sketch_bytes(sketch_size: int, m: int) -> int:
    """Memory of one :class:`~fastkpca.sketch.FrequentDirections` sketch of ``m`` columns: its
    buffer (``ell + batch`` rows, the batch at most m), the rows and the Gram of a shrink and
    the tracked loss, float64."""
    ell = min(int(sketch_size), int(m))
    capacity = ell + min(default_batch_size(int(sketch_size)), int(m))
    return 8 * ((capacity + ell) * int(m) + capacity * capacity + ell * ell)


def sketch_count(sketch_size: int, m: int) -> int:
    """The number of sketches a :class:`FeatureSketch` of ``m`` feature columns splits its rows
    between: :data:`MAX_SKETCHES`, fewer (at least :data:`MIN_SKETCHES`) where their buffers
    would exceed :data:`SKETCHES_MEMORY_MB`."""
    fits = SKETCHES_MEMORY_MB * 2**20 // max(1, sketch_bytes(sketch_size, m))
    return int(min(MAX_SKETCHES, max(MIN_SKETCHES, fits)))


class FeatureSketch:
    """Frequent Directions sketches of feature rows, their float64 sum and their count.

    The rows are dealt, in runs of :data:`SPLIT_ROWS` by row index, to :func:`sketch_count`
    independent sketches (32 unless they are large), updated by up to
    :func:`~fastkpca.execution.n_workers` threads (each call shares out the sketches that get
    rows to the threads; a sketch's rows are always added in row order, one BLAS thread each:
    the shrinks are small eigendecompositions, where more BLAS threads only spin), and merged
    up a fixed binary tree (sketch 2i with 2i + 1, then the results pairwise, ...) when
    :attr:`sketch` is read.  Which rows a sketch sees, and the order of every computation on
    them, depend only on the rows, so the merged sketch is the same whatever the number of
    threads and the blocking (up to the rounding of features computed on blocks of other
    shapes).  A sketch that gets no rows is never allocated.  Frequent Directions is mergeable
    (Agarwal et al. 2013; Ghashami et al. 2016, section 3.2): the merged sketch of the parts
    keeps the FD bound of the whole stream,
    ``||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``.

    A FeatureSketch never modifies a sketch it was given (a fitted model's): it copies one
    before adding rows to it, so a failed update loses nothing.

    Parameters
    ----------
    sketches : FrequentDirections or list of (FrequentDirections or None)
        The parts (one: a sketch to continue, e.g. a loaded model's merged sketch, which becomes
        part 0; the others start empty).
    feature_sum : (m,) float64 array of any namespace (copied, where it is)
    n : int
    """

    def __init__(self, sketches, feature_sum: np.ndarray, n: int = 0):
        parts = [sketches] if isinstance(sketches, FrequentDirections) else list(sketches)
        first = next((p for p in parts if p is not None), None)
        if first is None:
            raise ValueError("a FeatureSketch needs a sketch to continue (or FeatureSketch.empty)")
        m = first.n_columns if first.n_columns is not None else feature_sum.shape[0]
        self._setup(parts, first.sketch_size, m, first.batch_size, feature_sum, n)

    def _setup(self, parts, sketch_size, m, batch_size, feature_sum, n) -> None:
        self.sketch_size, self.n_columns, self.batch_size = int(sketch_size), int(m), batch_size
        count = max(len(parts), sketch_count(self.sketch_size, self.n_columns))
        self.parts: list[FrequentDirections | None] = parts + [None] * (count - len(parts))
        placement = placement_of(feature_sum)
        self.feature_sum = placement.xp.asarray(
            placement.asarray(feature_sum, np.float64), copy=True
        )
        self.n = int(n)
        self._owned: set[int] = set()  # parts this object made or copied (free to update)
        self._merged: FrequentDirections | None = None

    @classmethod
    def empty(cls, sketch_size: int, m: int) -> FeatureSketch:
        """The statistic of no rows (no sketch allocated yet)."""
        out = cls.__new__(cls)
        out._setup([], sketch_size, m, default_batch_size(int(sketch_size)), np.zeros(m), 0)
        return out

    def copy(self) -> FeatureSketch:
        """An independent copy: updating it leaves this one as it is (its sketches are copied
        when rows are first added to them), so a failed update of the copy loses nothing."""
        return FeatureSketch(self.parts, self.feature_sum, self.n)

    @property
    def sketch(self) -> FrequentDirections:
        """The sketch of all rows: the parts merged up a fixed binary tree
        (:meth:`FrequentDirections.merge`, the merges of one level in parallel threads)."""
        if self._merged is None:
            level = [p for p in self.parts if p is not None and p.n_rows_seen]
            if not level:
                level = [FrequentDirections(self.sketch_size, self.n_columns, self.batch_size)]
            while len(level) > 1:
                pairs = [(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
                merged = map_tasks(_merge_pair, pairs)
                level = merged + level[len(pairs) * 2 :]
            self._merged = level[0]
        return self._merged

    def _part(self, j: int) -> FrequentDirections:
        """Sketch j, ready to take rows: created, or copied if it is not this object's own."""
        part = self.parts[j]
        if j not in self._owned:
            if part is None:
                part = FrequentDirections(self.sketch_size, self.n_columns, self.batch_size)
            else:
                part = part.copy()
            self.parts[j] = part
            self._owned.add(j)
        assert part is not None
        return part

    def update(self, Z) -> FeatureSketch:
        """Add a block of feature rows (finite: the features of validated input)."""
        self._take_sum_to(Z)
        self._add(Z, _copy_rows(Z), Z.dtype, Z.shape[1])
        return self._added(Z.shape[0])

    def update_rows(self, X, fmap: FeatureMap) -> FeatureSketch:
        """Add the features of a block of input rows, each sketch's rows computed right before
        it takes them (:meth:`FeatureMap._chunk <fastkpca.features.FeatureMap>`: on the host in
        the thread that updates the sketch, chunks of 512 rows in cache, so no feature block is
        formed).  The same rows go to the same sketch as with ``update(fmap(X))``; the features
        agree to their float32 rounding.

        The sketches that get rows go in lockstep groups (:meth:`_add`), each group's features
        computed chunk by chunk as its sketches take them.
        """
        X = fmap._rows(X)  # dense float rows of their namespace, or CSR; width checked
        self._take_sum_to(X)
        dtype = fmap.feature_dtype(float_type(X))

        def write(start, stop, out):
            return fmap._chunk(X[start:stop, ...], out)

        self._add(X, write, dtype, fmap.n_output_features)
        return self._added(X.shape[0])

    def _take_sum_to(self, X) -> None:
        """Move the feature sum to the placement of the rows X, which are about to be added."""
        placement = placement_of(X)
        if placement_of(self.feature_sum) != placement:
            self.feature_sum = placement.asarray(self.feature_sum, np.float64)

    def _add(self, X, write, dtype, m: int) -> None:
        """Add the rows of the block X to the sketches its runs are dealt to.

        ``write(start, stop, out)`` gives the feature rows ``start:stop`` of the block (written
        into ``out`` when it is not None).  The sketches that get rows are grouped: those in one
        state (rows buffered, shrunk or not) that get runs of the same lengths go in lockstep
        (:func:`~fastkpca.sketch.extend_in_lockstep`, their shrinks batched), in pieces of
        :func:`~fastkpca.execution.feature_ops.lockstep_width` sketches (on the host a share of
        them per worker thread; on a device all of them), the pieces run on the worker threads
        in slices of their runs (:data:`SLICES_PER_PIECE`, :func:`~fastkpca.execution.map_chains`,
        BLAS on one thread).  Each sketch's features are computed in chunks of its runs
        (:func:`~fastkpca.execution.feature_ops.lockstep_chunk_rows`: 512 rows on the host),
        whose rows depend on the rows and the blocking only, and neither grouping changes what a
        sketch computes: the model does not depend on the number of threads.
        """
        placement = placement_of(X)
        groups: dict = {}
        for j, spans in self._deal_range(0, X.shape[0]):
            part = self._part(j)
            if not (part.n_rows_seen or part._filled):
                part._moved_to(placement)  # an empty sketch lives where its rows come from
            if part._buffer is None:
                part._allocate(m)
            key = (
                part._filled,
                part._n_kept,
                part._placement.name,
                tuple(hi - lo for lo, hi in spans),
            )
            groups.setdefault(key, []).append((part, spans))
        itemsize = np.dtype(dtype).itemsize
        pieces = []
        for group in groups.values():
            # pieces of at most the lockstep width, their sizes as equal as can be (27 sketches
            # at width 8: 7, 7, 7 and 6, not 8, 8, 8 and 3)
            count = -(-len(group) // lockstep_width(X, len(group)))
            bounds = [len(group) * i // count for i in range(count + 1)]
            pieces += [group[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        if not pieces:
            return
        width = max(len(piece) for piece in pieces)
        chunk = lockstep_chunk_rows(X, width, m, itemsize, CHUNK_ROWS)
        buffers = ChunkBuffers(X)
        # one slice a piece with one thread, or on a device (its state stays there meanwhile)
        slices = SLICES_PER_PIECE if placement.host and n_workers() > 1 else 1
        chains = []
        for piece in pieces:
            n_runs = len(piece[0][1])
            step = -(-n_runs // slices)
            runs = [range(a, min(n_runs, a + step)) for a in range(0, n_runs, step)]
            chains.append([(piece, r, write, chunk, buffers) for r in runs])
        extend = functools.partial(_extend_runs, dtype=dtype, m=m)  # work: sketches x runs
        for sums in map_chains(extend, chains, weights=[len(piece) for piece in pieces]):
            for part_sum in sums:
                self.feature_sum += part_sum

    def _deal_range(self, start: int, stop: int) -> list:
        """``(j, [(lo, hi), ...])`` for each sketch j that gets some of the rows ``start:stop``
        of the block being added (the next rows of the stream): runs of :data:`SPLIT_ROWS` by
        global row index, run r to sketch r mod the number of sketches (offsets lo:hi into the
        block)."""
        spans: list[list[tuple[int, int]]] = [[] for _ in self.parts]
        pos = start
        while pos < stop:
            row = self.n + pos
            end = min(stop, pos + SPLIT_ROWS - row % SPLIT_ROWS)
            spans[(row // SPLIT_ROWS) % len(self.parts)].append((pos, end))
            pos = end
        return [(j, own) for j, own in enumerate(spans) if own]

    def _added(self, n_rows: int) -> FeatureSketch:
        """Count ``n_rows`` rows added (the merged sketch is then out of date); returns self."""
        self._merged = None
        self.n += n_rows
        return self

    def merge(self, other: FeatureSketch) -> FeatureSketch:
        """The statistic of the rows of both (a new object; neither input is modified).  It
        lives where the merged sketch does (:meth:`FrequentDirections.merge
        <fastkpca.sketch.FrequentDirections.merge>`: this one's placement, the other's when
        this one is empty); the feature sums are added there."""
        sketch = self.sketch.merge(other.sketch)
        home = sketch._placement
        return FeatureSketch(
            sketch,
            home.asarray(self.feature_sum, np.float64)
            + home.asarray(other.feature_sum, np.float64),
            self.n + other.n,
        )


def _merge_pair(pair) -> FrequentDirections:
    return pair[0].merge(pair[1])


def _copy_rows(Z):
    """``write`` of :meth:`FeatureSketch._add` for feature rows already computed: rows of Z."""

    def write(start, stop, out):
        rows = Z[start:stop, ...]
        if out is None:
            return rows
        out[...] = rows
        return out

    return write


def _extend_runs(job, *, dtype, m: int):
    """Add the rows of the next runs to the sketches of a lockstep piece (``job``: its ``(sketch,
    spans)`` pairs, the runs' indices, ``write``, rows per chunk, the threads' buffers), a chunk
    of each sketch at a time: their features written by ``write`` (on the host into this
    thread's buffer), then taken at once (:func:`~fastkpca.sketch.extend_in_lockstep`).  Returns
    their float64 column sum (chunks summed as :func:`~fastkpca.features.column_sums` does)."""
    piece, runs, write, chunk, buffers = job
    sketches = [part for part, _ in piece]
    spans = [own for _, own in piece]
    J = len(piece)
    lengths = [hi - lo for lo, hi in spans[0]]
    work = buffers.get("features", J * chunk, m, dtype)
    stack = None if work is None else work.reshape(J, chunk, m)
    totals: list = []

    def chunks():
        for k in runs:
            length = lengths[k]
            for a in range(0, length, chunk):
                c = min(chunk, length - a)
                starts = [own[k][0] + a for own in spans]
                if stack is None:
                    rows = [write(start, start + c, None) for start in starts]
                    block = placement_of(rows[0]).xp.stack(rows)
                else:
                    block = stack[:, :c, :]
                    rows = [write(start, start + c, block[j]) for j, start in enumerate(starts)]
                totals.extend(column_sums(r) for r in rows)
                yield block

    extend_in_lockstep(sketches, chunks())
    total = totals[0]
    for part in totals[1:]:
        total = total + part
    return total


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
    larger).  ``delta`` added on B's whole row span (compensative FD, Desai et al. 2016) is the
    upper bound whenever the top directions did not stay in the sketch.

    Parameters
    ----------
    B : array (r, m), float64, of any namespace
        Frequent Directions sketch (or buffer) of the (uncentered) feature rows.  The problem
        is small (O(r^2 m)) and is solved with the host's LAPACK; the results are returned on
        B's placement.
    feature_sum : array (m,), float64
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
    placement = placement_of(B)
    B = np.asarray(to_host(B), dtype=np.float64)
    feature_sum = np.asarray(to_host(feature_sum), dtype=np.float64)
    m = B.shape[1]
    k = n_components
    B = B[np.any(B != 0.0, axis=1)]  # zero rows (fewer rows seen than ell) span nothing
    with small_steps(HOST):  # O(r^2 m): BLAS's threads would only spin-wait after it
        R = np.vstack([B, feature_sum[None, :]])
        Q = qr(R.T)
        BQ = B @ Q
        sQ = feature_sum @ Q
        M = BQ.T @ BQ - np.outer(sQ, sQ) / n_samples
        M = (M + M.T) / 2
        rest = m - Q.shape[1]  # dimension of the complement of span(Q)
        k = min(k, Q.shape[1])  # as many eigenvalues as axes (rank-deficient rows give fewer)

        def top(values, fill):
            values = np.concatenate([values, np.full(min(rest, k), fill)])
            return np.maximum(np.sort(values)[::-1][:k], 0.0)

        # M is an uncentered difference of products over m columns, its round-off about
        # (size(M) + sqrt(m)) eps trace(B^T B) (Higham's probabilistic bound of B Q's m-term
        # sums): eigenvalues below that (identical rows: centered Gram 0) are 0.
        floor = (M.shape[0] + np.sqrt(m)) * np.finfo(np.float64).eps * float(np.sum(BQ * BQ))
        lower = top(eigh(M)[0], 0.0)
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
        w, U = eigh(M)
        vals, vecs = postprocess_eigen(w, Q @ U)
        vals[vals <= floor] = 0.0
        estimate = np.clip(top(vals, rho), lower, upper)
        estimate[estimate <= floor] = 0.0  # a rounding-size shrinkage (rho) is rounding too
        if not np.isfinite(estimate).all():
            raise ValueError(
                "the random-feature sketch is not finite: the phases w . x overflow float32 "
                "(scale the data or lower gamma)"
            )
        out = (estimate, vecs[:, :k].T) + ((np.vstack([lower, upper]),) if return_bounds else ())
    return tuple(placement.asarray(a, np.float64) for a in out)
