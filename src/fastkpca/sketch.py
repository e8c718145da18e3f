"""Mergeable matrix sketches: Frequent Directions and CountSketch.

Both summarise a stream of rows of a tall matrix ``A`` (n x m, n unknown in advance) in memory
independent of n, accept rows a block at a time, and merge, so that per-block (or per-worker)
sketches can be tree-reduced (Dask) into the sketch of the whole stream.

:class:`FrequentDirections`
    Deterministic covariance sketch (Liberty 2013; Ghashami, Liberty, Phillips & Woodruff 2016,
    "Frequent Directions: simple and deterministic matrix sketching", Algorithm 3.1 with a
    buffer of ell + batch rows): an ell x m matrix B with ``B^T B <= A^T A`` and
    ``||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell + 1 - k)`` for every k <= ell (hence the
    usual ``/ (ell - k)`` bound).  The matrix-sketching half of SKPCA (Ghashami, Perry & Phillips
    2016, Algorithm 1).
:class:`CountSketch`
    The sparse random projection ``S A`` with ``S`` a t x n CountSketch matrix (one +-1 per
    column; Clarkson & Woodruff 2013), the input-sparsity-time low-rank tool used with random
    features by Musco & Woodruff (2017, section 3.2).  ``S`` is defined by hashing the *global*
    row index, so the sketch does not depend on how the rows are split into blocks.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._state import register_state_class
from ._utils import as_generator, check_int
from .execution import one_blas_thread
from .execution.arrays import HOST, placement_of, to_host
from .execution.feature_ops import (
    row_sums_of_squares,
    sketch_grams,
    stack_sums_of_squares,
    stacked_eigh,
    stacked_eigh_placement,
    sum_of_squares,
)
from .execution.linalg import eigh
from .source.memory import check_block

__all__ = [
    "FrequentDirections",
    "CountSketch",
    "fd_shrink",
    "default_batch_size",
    "extend_in_lockstep",
]


def _fd_eigh(C: np.ndarray):
    """Descending eigenvalues (clipped at 0) and vectors of the smaller Gram of a host C, and
    the squared row norms of C when that Gram is ``C C^T`` (its diagonal; else None).

    The eigendecomposition is :func:`fastkpca.execution.linalg.eigh` (numpy's LAPACK, which
    releases the GIL: sketches shrink in parallel threads).
    """
    r, m = C.shape
    wide = r <= m
    gram = C @ C.T if wide else C.T @ C
    lam, U = eigh(gram)
    lam = np.maximum(lam, 0.0)
    return wide, lam, U, (np.diagonal(gram) if wide else None)


def fd_shrink(C: np.ndarray, ell: int) -> tuple[np.ndarray, float]:
    """One Frequent Directions shrink: the ell-row matrix B and the shrinkage delta.

    With ``C = U diag(s) V^T``, ``delta = s_(ell+1)^2`` (the (ell+1)-th largest squared singular
    value, 0 if C has at most ell of them) and ``B = diag(sqrt(max(s_i^2 - delta, 0))) V^T`` for
    the top ell singular values.  Then ``0 <= C^T C - B^T B <= delta I`` and
    ``||C||_F^2 - ||B||_F^2 >= (ell + 1) delta``: the two facts the FD error bound rests on
    (Ghashami et al. 2016, Lemma 3.1 / Theorem 3.1 with ell + 1 in place of ell).

    Shrinking by the (ell+1)-th value rather than the ell-th (Liberty 2013) keeps ell non-zero
    rows instead of ell - 1, which makes a sketch with ``ell >= rank(C)`` exact.

    The SVD is taken through the smaller Gram.  A wide C (r <= m, the usual case: r = ell + batch
    rows) uses ``C C^T = U diag(s^2) U^T`` (several times faster than a LAPACK SVD of C) and
    ``B = diag(sqrt(1 - delta / s_i^2)) U^T C``, which never divides by a small s_i; with
    delta = 0 this is an orthogonal rotation of C, so an unshrunk sketch is exact to round-off.
    A tall C (r > m, when ell >= m / 2) uses ``C^T C = V diag(s^2) V^T`` and
    ``B = diag(sqrt(s_i^2 - delta)) V^T``: O(r m^2) instead of O(r^2 m).

    Parameters
    ----------
    C : array (r, m), float64 (numpy, or a device array: see :func:`_shrink`)
    ell : int, 1 <= ell

    Returns
    -------
    B : array (ell, m), float64, C's namespace and device
    delta : float
    """
    B, delta, _ = _shrink(C, ell)
    return B, delta


def _untracked_loss(missing: float, tracked: float, free: int, shrinkage: float) -> float:
    """rho of :meth:`FrequentDirections.loss_model` from the exact missing energy, the trace of
    the tracked loss, the number of untracked directions and the total shrinkage."""
    average = (missing - tracked) / free if free else 0.0
    return math.sqrt(min(max(average, 0.0), shrinkage) * shrinkage)


def _directions(rows: np.ndarray):
    """Norms of sketch rows and the mask of those long enough to define a direction."""
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    top = norms.max(initial=0.0)
    return norms, norms > _DIRECTION_TOL * top if top > 0 else np.zeros(norms.shape, bool)


def _shrink(C, ell: int, history=()):
    """:func:`fd_shrink` that also carries the estimated per-direction loss forward.

    ``history`` lists one ``(start, stop, H, energy, shrinkage)`` per merged part: rows
    ``start:stop`` of C are that part's buffer, whose first ``len(H)`` rows are orthogonal
    sketch rows (directions ``v_i = C_i / ||C_i||``) with tracked loss H; ``energy`` and
    ``shrinkage`` are the part's ``squared_norm`` and ``total_shrinkage``.  Its estimated past
    loss is ``sum_ij H_ij v_i v_j^T + rho (I - sum_i v_i v_i^T)`` (see
    :meth:`FrequentDirections.loss_model`).  Returns ``(B, delta, H_new)`` with ``H_new`` the
    estimated loss, past plus this shrink's, in the directions of B's rows: the past loss
    operators projected on them (``P^T H P + rho (I - P^T P)`` with ``P_ij = v_i . w_j``) plus
    ``delta`` on each, the exact loss of this shrink in every kept direction (their squared
    singular values are all >= delta).  Zero rows of B get zero rows and columns.

    It runs on the host: a device buffer is copied there and B moved back to it.  That is the
    first shrink of a sketch, a merge or a tall buffer: O(r m) numbers, rare next to the
    streamed shrinks (:func:`_shrink_factors`).
    """
    placement = placement_of(C)
    C = to_host(C)
    r, m = C.shape
    wide, lam, U, row_sq = _fd_eigh(C)
    delta = float(lam[ell]) if lam.size > ell else 0.0
    kept = min(ell, lam.size)
    B = np.zeros((ell, m))
    live = lam[:kept] > delta
    if wide:
        # B = diag(sqrt(1 - delta / s_i^2)) U^T C: the scale folded into the small factor, so
        # the one (ell x r) @ (r x m) product writes B
        scale = np.zeros(kept)
        scale[live] = np.sqrt(1.0 - delta / lam[:kept][live])
        np.matmul((U[:, :kept] * scale).T, C, out=B[:kept])
    else:
        B[:kept] = np.sqrt(lam[:kept] - delta)[:, None] * U[:, :kept].T
    # Few numpy calls: this runs once per ell rows, on ell x ell matrices, so call overhead,
    # not arithmetic, is its cost.
    H_kept = np.zeros((kept, kept))
    shift = delta  # added to the diagonal at the end
    root = np.sqrt(lam[:kept]) if wide and history else None
    for start, stop, H, energy, shrinkage in history:
        n_dir = H.shape[0]
        rows = C[start : start + n_dir]
        sq = row_sq[start : start + n_dir] if wide else np.einsum("ij,ij->i", rows, rows)
        # Sketch rows come sorted by norm (those of a shrink); min / max kept general anyway.
        all_ok = bool(sq.min() > _DIRECTION_TOL**2 * sq.max())
        if all_ok:
            norms = np.sqrt(sq)
        else:
            norms, ok = _directions(rows)
            H = np.where(ok[:, None] & ok[None, :], H, 0.0)
            norms = np.where(ok, norms, 1.0)
        # The part's exact missing energy: ||A_part||_F^2 minus its buffer's (sum(lam) when
        # the part is all of C, as for a single stream).
        if stop - start == r:
            buffered = float(lam.sum())
        else:
            part = C[start:stop]
            buffered = float(np.einsum("ij,ij->", part, part))
        n_ok = n_dir if all_ok else int(ok.sum())
        rho = _untracked_loss(energy - buffered, float(H.trace()), m - n_ok, shrinkage)
        if wide:
            # v_i . w_j = (C C^T u_j)_i / (||C_i|| s_j) = s_j u_ij / ||C_i||: no m-long work
            P = U[start : start + n_dir, :kept] * root
        else:
            P = rows @ U[:, :kept]
        P /= norms[:, None]
        if not all_ok:
            P[~ok] = 0.0
        # P^T H P + rho (I - P^T P) = P^T (H - rho I) P + rho I (H symmetric, so is this up
        # to round-off: symmetrised where it is read, in loss_model)
        shifted = H.copy()
        shifted.flat[:: n_dir + 1] -= rho
        H_kept += P.T @ shifted @ P
        shift += rho
    H_kept.flat[:: kept + 1] += shift
    if lam[kept - 1] <= delta:  # rows of B that are zero (descending lam: the last ones)
        live = lam[:kept] > delta
        H_kept[~live] = 0.0
        H_kept[:, ~live] = 0.0
    if kept == ell:
        return placement.asarray(B, np.float64), delta, H_kept
    H_new = np.zeros((ell, ell))
    H_new[:kept, :kept] = H_kept
    return placement.asarray(B, np.float64), delta, H_new


def _buffer_grams(block, row_sq, ell: int):
    """The Grams ``C C^T`` of full buffers ``(J, r, r)``, symmetric, from the new rows' block
    ``(J, r - ell, r)`` (:func:`~fastkpca.execution.feature_ops.sketch_grams`) and the squared
    norms ``(J, ell)`` of the orthogonal sketch rows, whose Gram is ``diag(row_sq)``."""
    xp = placement_of(block).xp
    eye = xp.eye(ell, dtype=xp.float64, device=placement_of(block).device)
    upper = xp.concat(
        [row_sq[:, :, None] * eye, xp.permute_dims(block[:, :, :ell], (0, 2, 1))], axis=2
    )
    return xp.concat([upper, block], axis=1)


def _shrink_factors(grams, ell, row_sq, loss, energy, shrinkage, m):
    """The small half of the streamed shrinks of J full buffers at once (stacks of one namespace).

    Buffer j (r x m, ell < r <= m) holds the ell sketch rows of its last shrink (orthogonal,
    squared norms ``row_sq[j]``) and ``r - ell`` new rows; ``grams[j]`` is its Gram ``C C^T``
    (lower triangle read; :func:`_buffer_grams`), ``loss[j]`` the tracked loss of its sketch
    rows, ``energy[j]`` and ``shrinkage[j]`` the sketch's ``squared_norm`` (these rows included)
    and ``total_shrinkage``.  Returns ``(W, delta, H, new_sq)``: the shrunk rows are ``B_j = W_j
    C_j`` (W is ``(J, ell, r)``), ``delta`` the shrinkages, ``H`` the tracked losses in the
    directions of B's rows and ``new_sq`` their squared norms ``lambda_i - delta`` (equal in
    exact arithmetic: row i is ``sqrt(1 - delta / lambda_i) u_i^T C`` and ``u_i^T C C^T u_i =
    lambda_i``), which spares a pass over B.

    The arithmetic of :func:`_shrink` with the buffer as its one history part, batched: one
    stacked eigendecomposition (:func:`~fastkpca.execution.feature_ops.stacked_eigh`) and a
    few stacked products for all J sketches, written over the stacks' namespace with masks
    rather than branches (nothing is read back from a device).  A sketch row too short to
    define a direction (:data:`_DIRECTION_TOL`) carries no tracked loss and counts among the
    untracked ones, as in :func:`_shrink`; a direction at or below delta gets a zero row.
    """
    placement = placement_of(grams)
    xp = placement.xp
    lam, U = stacked_eigh(grams)
    lam = xp.where(lam > 0.0, lam, 0.0)
    delta = lam[:, ell]  # the (ell+1)-th largest
    top = lam[:, :ell]  # the ell largest, descending
    U_top = U[:, :, :ell]
    live = top > delta[:, None]
    # B = diag(sqrt(1 - delta / s_i^2)) U^T C, 0 for the directions at or below delta
    ratio = xp.where(live, delta[:, None] / xp.where(live, top, 1.0), 1.0)
    W = xp.permute_dims(U_top * xp.sqrt(1.0 - ratio)[:, None, :], (0, 2, 1))
    # Tracked loss (see _shrink): v_i . w_j = s_j u_ij / ||C_i|| for the sketch rows i < ell.
    ok = row_sq > _DIRECTION_TOL**2 * xp.max(row_sq, axis=1, keepdims=True)
    both = ok[:, :, None] & ok[:, None, :]
    loss = xp.where(both, loss, 0.0)
    eye = xp.eye(ell, dtype=xp.float64, device=placement.device)
    tracked = xp.sum(xp.sum(loss * eye, axis=2), axis=1)
    missing = energy - xp.sum(lam, axis=1)
    free = m - xp.sum(xp.astype(ok, xp.float64), axis=1)
    average = xp.where(free > 0, (missing - tracked) / xp.where(free > 0, free, 1.0), 0.0)
    P = U_top[:, :ell, :] * xp.sqrt(top)[:, None, :]
    P = xp.where(ok[:, :, None], P / xp.sqrt(xp.where(ok, row_sq, 1.0))[:, :, None], 0.0)
    rho = xp.sqrt(xp.minimum(xp.where(average > 0, average, 0.0), shrinkage) * shrinkage)
    # P^T H P + rho (I - P^T P) = P^T (H - rho I) P + rho I
    H = xp.permute_dims(P, (0, 2, 1)) @ (loss - rho[:, None, None] * eye) @ P
    H = H + (delta + rho)[:, None, None] * eye
    H = xp.where(live[:, :, None] & live[:, None, :], H, 0.0)
    return W, delta, H, xp.where(live, top - delta[:, None], 0.0)


def _copy(a):
    """An independent copy of an array of any namespace."""
    return placement_of(a).xp.asarray(a, copy=True)


def default_batch_size(sketch_size: int) -> int:
    """Rows added to the buffer between two shrinks when not given: ``2 ell``.

    The CPU time per row was lowest at a batch of 2 to 3 ell (larger batches make the
    eigendecomposition, cubic in ell + batch, dominate again); 2 ell rather than more because
    the tracked-loss eigenvalue estimate (:meth:`FrequentDirections.loss_model`), calibrated
    with a batch of ell, drifts with the batch where the top directions churn
    (``benchmarks/NOTES.md``).  The bounds hold for any batch.
    """
    return 2 * sketch_size


#: A sketch row shorter than this times the longest is treated as no direction (its loss moves
#: to the isotropic remainder): dividing by its norm would amplify round-off.
_DIRECTION_TOL = 1e-7


@register_state_class
class FrequentDirections:
    """Frequent Directions sketch of a stream of rows (Liberty 2013; Ghashami et al. 2016).

    Keeps a buffer of ``ell + batch_size`` rows (float64).  Rows are copied into it until it is
    full; then one SVD shrinks it to ``ell`` rows (:func:`fd_shrink`: all squared singular values
    reduced by the (ell+1)-th one) and filling resumes.  The shrink points depend only on the
    number of rows seen, never on how the stream is split into blocks, so ``update`` over any
    blocking gives the same sketch (bitwise, for the same rows).  One SVD of an
    ``(ell + batch) x m`` matrix per batch of rows: O(n m (ell + batch)^2 / batch) time,
    O((ell + batch) m) memory.

    The guarantee below does not depend on the batch: each shrink loses at most delta in every
    direction and removes at least ``(ell + 1) delta`` of squared Frobenius norm whatever the
    number of rows it shrinks (Ghashami et al. 2016, Lemma 3.1 / Theorem 3.1 hold for any
    buffer of more than ell rows; Liberty 2013 shrinks after every row, their Algorithm 3.1
    after ell).  The batch only trades the cost of a shrink, an ``(ell + batch)``-square
    eigendecomposition dominated by LAPACK's per-call cost at these sizes, against how often it
    runs (:func:`default_batch_size`).

    Guarantee (for the stream A of all rows seen, and every ``0 <= k <= ell``)::

        0 <= x^T (A^T A - B^T B) x <= total_shrinkage <= ||A - A_k||_F^2 / (ell + 1 - k)

    for unit x, where ``B = sketch()``.  This implies the usual FD bound
    ``||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell - k)``.  When ``ell >= n_columns`` (or more
    generally ``ell >= rank(A)``) nothing is ever shrunk and ``B^T B = A^T A`` up to round-off;
    the buffer is then capped at ``2 n_columns`` rows (a batch is at most ``n_columns`` rows).

    Parameters
    ----------
    sketch_size : int
        ell, the number of rows of the sketch (kept after each shrink), the ell of the bound
        below.  In the streaming KPCA paper (Ghashami, Perry & Phillips 2016, Algorithm 1) ell
        is the buffer, shrunk to ell / 2, so with ``batch_size=sketch_size`` ours is the
        paper's 2 ell.
    n_columns : int, optional
        m; taken from the first block when None.
    batch_size : int, optional
        Rows added between two shrinks (the buffer holds ``ell + batch_size`` rows); None:
        :func:`default_batch_size`.  Changes the sketch (the shrink points), not its guarantee.

    Attributes
    ----------
    n_rows_seen : int
        Rows seen so far (merges add them up).
    total_shrinkage : float
        Sum of the shrinkages delta applied so far: an a-posteriori bound on
        ``||A^T A - B^T B||_2`` for the buffer (``sketch()`` may shrink once more).
    squared_norm : float
        ``||A||_F^2``, accumulated exactly (float64) as rows arrive; merges add it.  With the
        buffer it gives :attr:`missing_energy`, the exact total loss.

    The sketch also tracks an estimate of the loss in each of its directions (an ell x ell
    matrix, see :meth:`loss_model`), from which ``StreamingKPCA`` estimates eigenvalues.
    """

    def __init__(
        self, sketch_size: int, n_columns: int | None = None, batch_size: int | None = None
    ):
        self.sketch_size = check_int("sketch_size", sketch_size, low=1)
        self.n_columns = check_int("n_columns", n_columns, low=1, allow_none=True)
        self.batch_size = check_int("batch_size", batch_size, low=1, allow_none=True)
        if self.batch_size is None:
            self.batch_size = default_batch_size(self.sketch_size)
        self.n_rows_seen = 0
        self.total_shrinkage = 0.0
        # Device rows' energy not yet moved to the host (a device scalar, or None; see
        # squared_norm).
        self._energy_pending: Any = None
        self.squared_norm = 0.0
        self._buffer: Any = None  # (ell + batch, m) float64 once the width is known
        self._filled = 0
        # Estimated loss in the directions of the first _n_kept buffer rows (the sketch rows
        # after a shrink; 0 before the first one): see loss_model().
        self._loss: Any = None  # (ell, ell) float64 once the width is known
        self._n_kept = 0
        # Squared norms of the kept rows (a host array; None: not known, computed at the next
        # streamed shrink).
        self._row_sq: Any = None
        #: Where the buffer lives (:mod:`fastkpca.execution.arrays`): the host, or the device
        #: of the first device rows added (see :meth:`_extend`).
        self._placement = HOST
        if self.n_columns is not None:
            self._allocate(self.n_columns)

    @property
    def squared_norm(self) -> float:
        """``||A||_F^2`` of the rows seen, float64 (see the class notes).  Device rows' energy
        is summed on the device and moved with the next shrink's Gram (one transfer), or here
        when read first."""
        self._settle_energy()
        return self._squared_norm

    @squared_norm.setter
    def squared_norm(self, value: float) -> None:
        self._squared_norm = float(value)

    def _settle_energy(self) -> None:
        """Move the pending device energy to :attr:`squared_norm` (a no-op on the host)."""
        if self._energy_pending is not None:
            self._flush_energy(to_host(self._energy_pending))

    def _add_pending_energy(self, energy) -> None:
        """Count a device scalar of row energy (moved to the host with the next shrink)."""
        pending = self._energy_pending
        self._energy_pending = energy if pending is None else pending + energy

    def _flush_energy(self, value) -> None:
        """Add the pending device energy (its host value); a non-finite one means a non-finite
        row was added (refused, as on the host)."""
        self._energy_pending = None
        energy = float(value)
        if not math.isfinite(energy):
            raise ValueError("rows: Input contains NaN or infinity.")
        self._squared_norm += energy

    # --- sizes --------------------------------------------------------------------------------
    @property
    def _ell(self) -> int:
        """Rows kept after a shrink: ell, capped at m (ell >= m cannot lose anything)."""
        return min(self.sketch_size, self.n_columns)

    @property
    def _capacity(self) -> int:
        """Buffer rows: the ell kept rows plus a batch of new ones (the batch capped at m:
        a buffer of more than ell + m rows has no more directions to offer a shrink)."""
        return self._ell + min(self.batch_size, self.n_columns)

    def _allocate(self, m: int) -> None:
        self.n_columns = m
        placement = self._placement
        xp = placement.xp
        self._buffer = xp.zeros((self._capacity, m), dtype=xp.float64, device=placement.device)
        self._filled = 0
        self._loss = np.zeros((self._ell, self._ell))
        self._n_kept = 0
        self._row_sq = None

    # --- streaming ----------------------------------------------------------------------------
    def update(self, rows) -> FrequentDirections:
        """Add a block of rows (2-D array or scipy.sparse matrix); returns self.

        The block is copied into the buffer in slices of at most ``batch_size`` rows, each
        followed by one shrink when the buffer is full (no Python loop over single rows).
        """
        rows = check_block(rows, n_features=self.n_columns, accept_sparse=True, name="rows")
        if self._buffer is None:
            self._allocate(rows.shape[1])
        # The shrinks are many small eigendecompositions, which BLAS threads spin-waiting after
        # a threaded product slow down several times: one thread while a shrink happens.
        shrinks = self._filled + rows.shape[0] >= self._buffer.shape[0]
        with one_blas_thread() if shrinks else nullcontext():
            self._extend(rows)
        return self

    def _extend(self, rows) -> None:
        """:meth:`update` without the validation and the BLAS thread limit, for callers that
        made the rows themselves (finite, ``n_columns`` wide) and set the thread limit once
        for several sketches (:func:`one_blas_thread` is process-wide, so it must not be entered
        from two threads at once).  A non-finite row is still refused: it makes the exact
        squared norm, summed anyway, non-finite (at the next shrink, or when it is read).

        The buffer lives with the rows (:mod:`fastkpca.execution.arrays`): a sketch that holds
        no rows yet moves to the placement of the rows it is given (:meth:`_moved_to`), later
        rows are moved to it.  The rows go through :func:`extend_in_lockstep` (a lockstep of this
        one sketch): on a device they are copied in and the streamed shrinks' products run
        there, while the small eigendecomposition and the loss tracking of each shrink run on
        the host from the buffer's Gram (one transfer of at most (ell + batch)^2 numbers each
        way): the same shrink points and the same arithmetic, so the same sketch as the host's
        up to rounding.  The rows' energy is summed where they are and read with the next
        shrink."""
        placement = placement_of(rows)
        if placement != self._placement and not (self.n_rows_seen or self._filled):
            self._moved_to(placement)
        if self._buffer is None:
            self._allocate(rows.shape[1])
        home = self._placement
        cap = self._buffer.shape[0]

        def chunks():
            for start in range(0, rows.shape[0], cap):
                part = rows[start : min(rows.shape[0], start + cap), ...]
                part = home.asarray(part.toarray() if sp.issparse(part) else part)
                yield home.xp.reshape(part, (1, *part.shape))

        extend_in_lockstep([self], chunks())

    def _moved_to(self, placement) -> FrequentDirections:
        """Move the buffer (the only array of this sketch that grows with m) to ``placement``,
        in place; returns self."""
        if placement == self._placement:
            return self
        self._settle_energy()
        self._placement = placement
        if self._buffer is not None:
            self._buffer = placement.asarray(to_host(self._buffer), np.float64)
        return self

    def _on(self, placement) -> FrequentDirections:
        """This sketch with its buffer on ``placement``: itself, or a moved copy."""
        if placement == self._placement:
            return self
        return self.copy()._moved_to(placement)

    def _compress(self) -> None:
        """Shrink the full buffer to ell rows by the general update (:func:`_shrink`): the first
        shrink of a sketch (no tracked loss yet) and a buffer taller than it is wide.  The
        streamed shrinks of a sketch that has shrunk before are batched
        (:func:`extend_in_lockstep`).  (The rest of the buffer is not zeroed: only its first
        ``_filled`` rows are ever read.)"""
        C = self._buffer[: self._filled, :]
        self._settle_energy()  # before the shrink: a non-finite row is refused
        self._set_shrunk(*_shrink(C, self._ell, self._history()))

    def _set_shrunk(self, B: np.ndarray, delta: float, H: np.ndarray) -> None:
        ell = self._ell
        self._buffer[:ell, :] = B
        self._buffer[ell:, :] = 0.0
        self._filled = ell
        self.total_shrinkage += delta
        self._loss = H
        self._n_kept = ell
        self._row_sq = None

    def _history(self, start: int = 0) -> list:
        """This sketch's entry of :func:`_shrink`'s ``history`` (empty before a shrink), for a
        buffer placed at row ``start``."""
        if not self._n_kept:
            return []
        stop = start + self._filled
        return [(start, stop, self._loss, self.squared_norm, self.total_shrinkage)]

    @property
    def missing_energy(self) -> float:
        """``||A||_F^2 - ||rows()||_F^2 = trace(A^T A - R^T R)``: the exact total loss (>= 0).

        Every direction's loss ``x^T (A^T A - R^T R) x`` is at most ``min(total_shrinkage,
        missing_energy)``, and the losses over any orthonormal basis sum to this.
        """
        if self._buffer is None:
            return 0.0
        kept = float(to_host(sum_of_squares(self._buffer[: self._filled, :])))
        return max(self.squared_norm - kept, 0.0)

    def loss_model(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Estimate of the loss ``E = A^T A - R^T R`` of the buffer R (:meth:`rows`).

        Returns ``(V, H, rho)`` for ``E ~ V^T H V + rho (I - V^T V)``: V (r x m) has orthonormal
        rows, the directions of the sketch rows kept at the last shrink; H (r x r) their
        tracked loss; rho the estimated loss of any other direction (untracked).

        Tracked loss.  A shrink removes exactly ``delta`` from every direction it keeps
        (:func:`fd_shrink`), so a direction that stays in the sketch has lost exactly the sum
        of the deltas since it entered.  At each shrink the estimate before it is projected on
        the new sketch directions and ``delta`` added (:func:`_shrink`).  On directions that
        stayed in the sketch throughout -- the leading principal directions of a decaying
        spectrum, and the feature mean -- H is exact.

        Untracked loss.  What a direction lost before it entered the sketch (its energy, while
        it was out) is not known.  It is at most ``total_shrinkage`` (the FD bound), and on
        average over the ``m - r`` directions outside the tracked span it is
        ``rho_0 = (missing_energy - trace H) / (m - r)`` (``missing_energy`` is exact).  A
        direction that enters the sketch, or competes for the top eigenvalues, is selected for
        its energy, so its loss is above the average; we take the geometric mean
        ``rho = sqrt(rho_0 * total_shrinkage)`` of the two ends, which minimises the worst-case
        ratio error over ``[rho_0, total_shrinkage]``.  Measured
        (``benchmarks/bench_fd_eigenvalues.py``), the true loss of churning top directions
        lies between the middle of that range on a log scale (flat spectrum, ell = 10) and
        its top (ell near the number of comparable eigenvalues), so rho is low by at most
        ``sqrt(total_shrinkage / rho_0)`` there.

        Both H and rho lie in ``[0, total_shrinkage]``, the range the true loss of any
        direction is known to lie in; merges add the two parts' estimates (:meth:`merge`).
        """
        if self._buffer is None:
            raise ValueError("the sketch has seen no rows and n_columns is unknown")
        m, r = self.n_columns, self._n_kept
        rows = to_host(self._buffer[:r, :])  # small (ell x m): the loss model is read on the host
        norms, ok = _directions(rows)
        V = rows[ok] / norms[ok, None]
        H = self._loss[:r, :r][np.ix_(ok, ok)]
        H = (H + H.T) / 2
        rho = _untracked_loss(
            self.missing_energy, float(np.trace(H)), m - V.shape[0], self.total_shrinkage
        )
        return V, H, rho

    def sketch(self) -> np.ndarray:
        """The current sketch B, shape ``(min(ell, n_columns), n_columns)``, float64.

        If the buffer holds more than ell rows, a shrunk copy is returned (the state is not
        changed, so later updates are unaffected); rows beyond the rank are zero.
        """
        if self._buffer is None:
            raise ValueError("the sketch has seen no rows and n_columns is unknown")
        ell = self._ell
        if self._filled <= ell:
            return _copy(self._buffer[:ell, :])
        return fd_shrink(self._buffer[: self._filled, :], ell)[0]

    def rows(self) -> np.ndarray:
        """The buffered rows as they are (up to ell + batch, no final shrink), float64 copy.

        ``rows().T @ rows()`` is between ``sketch().T @ sketch()`` and ``A^T A``, and
        ``A^T A - rows().T @ rows()`` is bounded by :attr:`total_shrinkage` alone.
        """
        if self._buffer is None:
            raise ValueError("the sketch has seen no rows and n_columns is unknown")
        return _copy(self._buffer[: self._filled, :])

    def merge(self, other: FrequentDirections) -> FrequentDirections:
        """A new sketch of the concatenated streams (neither input is modified).

        If neither has shrunk, their buffers (exact rows) are fed, as a stream, into a fresh
        sketch.  If only one has shrunk and both buffers fit, they are stacked, the shrunk one
        first (its rows carry the loss estimate).  Otherwise both buffers are shrunk together
        once, to ell rows, and each part's loss estimate is carried onto the merged directions
        and added (:func:`_shrink`).  The bound holds for the merged stream: the shrinkages of
        the parts and of the merge add up, and so do the Frobenius-norm losses they cause
        (mergeability of FD: Agarwal et al. 2013; Ghashami et al. 2016, section 3.2), so a tree
        of merges keeps ``||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell + 1 - k)``;
        ``squared_norm`` adds exactly.
        """
        if not isinstance(other, FrequentDirections):
            raise ValueError(
                f"can only merge with a FrequentDirections, got {type(other).__name__}"
            )
        if other.sketch_size != self.sketch_size:
            raise ValueError(
                f"cannot merge sketches of different sizes "
                f"({self.sketch_size} and {other.sketch_size})"
            )
        if (
            self.n_columns is not None
            and other.n_columns is not None
            and self.n_columns != other.n_columns
        ):
            raise ValueError(
                f"cannot merge sketches with different numbers of columns "
                f"({self.n_columns} and {other.n_columns})"
            )
        # The merged sketch lives where this one does (where the other does, when this one is
        # empty); the other's buffer is moved there (O(ell m) numbers).
        home = self._placement if self._buffer is not None else other._placement
        out = FrequentDirections(self.sketch_size, None, self.batch_size)._moved_to(home)
        m = self.n_columns or other.n_columns
        if m is not None:
            out._allocate(m)
        parts = [p._on(home) for p in (self, other) if p._buffer is not None and p._filled]
        tracked = [p for p in parts if p._n_kept]
        if not tracked:
            # Neither has shrunk: their buffers are exact rows, fed as a stream.
            for part in parts:
                out._extend(part._buffer[: part._filled, :])
        elif len(tracked) == 1 and sum(p._filled for p in parts) < out._buffer.shape[0]:
            # Room for both buffers: the shrunk one first (its rows carry the loss estimate),
            # then the other's exact rows.
            first = tracked[0]
            pos = 0
            for part in [first] + [p for p in parts if p is not first]:
                out._buffer[pos : pos + part._filled, :] = part._buffer[: part._filled, :]
                pos += part._filled
            out._filled = pos
            out._loss = first._loss.copy()
            out._n_kept = first._n_kept
        else:
            # One shrink of both buffers: each part's loss estimate is carried onto the
            # merged directions and the two are added (the true losses add up).
            rows = home.xp.concat([p._buffer[: p._filled, :] for p in parts], axis=0)
            history, pos = [], 0
            for part in parts:
                history += part._history(pos)
                pos += part._filled
            out._set_shrunk(*_shrink(rows, out._ell, history))
        out.n_rows_seen = self.n_rows_seen + other.n_rows_seen
        out._energy_pending = None  # the rows fed in above: counted in the parts' energies
        out.squared_norm = self.squared_norm + other.squared_norm
        out.total_shrinkage += self.total_shrinkage + other.total_shrinkage
        return out

    def copy(self) -> FrequentDirections:
        """An independent copy, equal to this sketch in every respect (updates of the copy give
        bitwise the same sketch as the same updates of the original); O(buffer) time."""
        out = object.__new__(FrequentDirections)
        out.__dict__.update(vars(self))
        for name in ("_buffer", "_loss", "_row_sq"):
            value = getattr(self, name)
            if value is not None:
                setattr(out, name, _copy(value))
        return out

    def __getstate__(self) -> dict:
        # The placement holds a module (its namespace): pickled as where the buffer is.
        state = dict(vars(self))
        state["_placement"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._placement = placement_of(self._buffer)

    # --- persistence --------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Plain values (ints, floats, one array) that :meth:`from_state` turns back into self."""
        buffer = None if self._buffer is None else to_host(_copy(self._buffer[: self._filled, :]))
        return {
            "sketch_size": self.sketch_size,
            "n_columns": self.n_columns,
            "batch_size": self.batch_size,
            "n_rows_seen": int(self.n_rows_seen),
            "total_shrinkage": float(self.total_shrinkage),
            "squared_norm": float(self.squared_norm),
            "buffer": buffer,
            "loss": None
            if self._loss is None
            else self._loss[: self._n_kept, : self._n_kept].copy(),
        }

    @classmethod
    def from_state(cls, state: dict) -> FrequentDirections:
        # A state saved before batch_size existed had a 2 ell buffer: batch ell.
        out = cls(
            int(state["sketch_size"]),
            state["n_columns"],
            int(state.get("batch_size", state["sketch_size"])),
        )
        buffer = state["buffer"]
        if buffer is not None:
            buffer = np.asarray(buffer, dtype=np.float64)
            if (
                buffer.ndim != 2
                or buffer.shape[1] != out.n_columns
                or buffer.shape[0] > out._capacity
            ):
                raise ValueError(
                    f"FrequentDirections state has a buffer of shape {buffer.shape}, "
                    f"inconsistent with sketch_size={out.sketch_size}, "
                    f"n_columns={out.n_columns}"
                )
            out._buffer[: buffer.shape[0]] = buffer
            out._filled = buffer.shape[0]
        out.n_rows_seen = int(state["n_rows_seen"])
        out.total_shrinkage = float(state["total_shrinkage"])
        # A state saved before the loss was tracked has neither the exact energy nor the
        # loss: the energy is then unknown (infinite: only the FD bound limits the loss) and
        # nothing is tracked, which gives the former compensated estimate (rho = delta).
        out.squared_norm = float(state.get("squared_norm", math.inf))
        loss = state.get("loss")
        if loss is not None:
            loss = np.asarray(loss, dtype=np.float64)
            r = loss.shape[0] if loss.ndim == 2 else -1
            if out._buffer is None or loss.shape != (r, r) or r not in (0, out._ell):
                raise ValueError(
                    f"FrequentDirections state has a loss matrix of shape {loss.shape}, "
                    f"inconsistent with sketch_size={out.sketch_size}, n_columns={out.n_columns}"
                )
            out._loss[:r, :r] = loss
            out._n_kept = r
        return out

    def __repr__(self):
        return (
            f"FrequentDirections(sketch_size={self.sketch_size}, n_columns={self.n_columns}, "
            f"n_rows_seen={self.n_rows_seen})"
        )


#: Mersenne prime 2^31 - 1: products of two residues fit in uint64, so the hash is vectorised.
_PRIME = 2**31 - 1


def extend_in_lockstep(sketches: list, chunks) -> None:
    """Add rows to every sketch of ``sketches`` at once, their streamed shrinks batched.

    ``chunks`` yields ``(J, t, m)`` arrays (any float dtype, on the sketches' placement): chunk
    ``[j]`` holds the next t rows of ``sketches[j]``.  The J sketches are in one state (rows
    buffered, shrunk or not, width, placement) and take the same number of rows, so that their
    buffers fill up together: they are stacked into one ``(J, ell + batch, m)`` array (each
    sketch's buffer a view of it meanwhile, copied back at the end) and every round copies the
    next rows of all of them in one operation and shrinks all the full buffers at once: the new
    rows' Gram blocks in one batched product
    (:func:`~fastkpca.execution.feature_ops.sketch_grams`, on the host with the rows' pending
    energies), one stacked eigendecomposition and the loss tracking of all of them
    (:func:`_shrink_factors`), and the new sketch rows in one batched product where the buffers
    are.  That is the same arithmetic, per sketch, as shrinking each by itself (:func:`_shrink`
    with the buffer as its one history part), so which sketches go together changes nothing: a
    lockstep of one sketch is :meth:`FrequentDirections._extend`.  The few Python steps of a
    round are shared by J sketches, and a round's work between two of them is J times larger,
    which is what lets the threads that run lockstep groups side by side scale (their steps hold
    the interpreter lock; the products and LAPACK release it).

    A shrink that needs the general update (a sketch's first shrink, a buffer taller than it
    is wide) runs sketch by sketch (:meth:`FrequentDirections._compress`).  Non-finite rows are
    refused (ValueError) at the next shrink or when the energy is read, as by
    :meth:`FrequentDirections._extend`.
    """
    first = sketches[0]
    placement = first._placement
    xp = placement.xp
    J = len(sketches)
    ell, cap, m = first._ell, first._buffer.shape[0], first.n_columns
    own = [s._buffer for s in sketches]
    if J == 1:
        stacked = xp.reshape(first._buffer, (1, cap, m))  # a view: no copy of one buffer
    else:  # the rows buffered only: the others are written before they are read
        stacked = xp.empty((J, cap, m), dtype=own[0].dtype, device=placement.device)
        for j, buffer in enumerate(own):
            stacked[j, : first._filled, ...] = buffer[: first._filled, ...]
    for j, s in enumerate(sketches):
        s._buffer = stacked[j, ...]
    state = _LockstepState(sketches)
    filled, added = first._filled, 0
    for chunk in chunks:
        chunk = placement.asarray(chunk)  # rows from elsewhere are moved to the buffers
        t, pos = chunk.shape[1], 0
        while pos < t:
            take = min(cap - filled, t - pos)
            block = stacked[:, filled : filled + take, ...]
            block[...] = chunk[:, pos : pos + take, ...]
            # ||A||_F^2 in float64 as the rows arrive, so the total loss is known exactly
            state.add_energy(stack_sums_of_squares(block))
            filled += take
            pos += take
            if filled == cap:
                state.shrink(stacked, sketches)
                filled = ell
        added += t
    state.store(sketches, filled, added)
    if J > 1:
        # back into each sketch's own buffer: a view of the stack would keep all J buffers
        # alive for as long as any one of the sketches is (J times their memory)
        for j, s in enumerate(sketches):
            own[j][:filled, ...] = stacked[j, :filled, ...]
            s._buffer = own[j]


class _LockstepState:
    """The per-sketch state of :func:`extend_in_lockstep` as stacks where the shrinks' small
    steps run (:func:`~fastkpca.execution.feature_ops.stacked_eigh_placement`: the host, or a
    CUDA device): tracked losses ``(J, ell, ell)``, squared norms of the sketch rows ``(J,
    ell)`` (None until known), total shrinkages and exact energies ``(J,)``, and the energy of
    rows not yet counted (``(J,)`` of the rows' namespace: a device's moves to the host with the
    next shrink's Grams, or stays on the device with the shrinks)."""

    def __init__(self, sketches: list):
        self.pending = None
        self.work = stacked_eigh_placement(sketches[0]._placement)
        self.load(sketches)

    def load(self, sketches: list) -> None:
        first, work = sketches[0], self.work
        self.n_kept = first._n_kept

        def stack(values):
            return work.asarray(
                np.stack([np.asarray(to_host(v), dtype=np.float64) for v in values])
            )

        self.loss = stack([s._loss for s in sketches])
        self.row_sq = (
            None
            if any(s._row_sq is None for s in sketches)
            else stack([s._row_sq for s in sketches])
        )
        self.shrinkage = stack([s.total_shrinkage for s in sketches])
        self.energy = stack([s._squared_norm for s in sketches])
        # the sketches' pending energies, stacked where they are (no transfer per sketch)
        values = [s._energy_pending for s in sketches]
        if any(v is not None for v in values):
            placement = first._placement
            if placement.host:
                stacked = np.array([0.0 if v is None else float(v) for v in values])
            else:
                xp = placement.xp
                zero = xp.zeros((), dtype=xp.float64, device=placement.device)
                stacked = xp.stack([zero if v is None else v for v in values])
            for s in sketches:
                s._energy_pending = None
            self.add_energy(stacked)

    def add_energy(self, energy) -> None:
        self.pending = energy if self.pending is None else self.pending + energy

    def _count(self, pending) -> None:
        """Add the pending energies (on the placement of the small steps).  A non-finite one
        means a non-finite row: refused here where they are host values, or by :meth:`store`
        (device values are not read back each round)."""
        self.pending = None
        if pending is None:
            return
        if isinstance(pending, np.ndarray) and not np.isfinite(pending).all():
            raise ValueError("rows: Input contains NaN or infinity.")
        self.energy = self.energy + pending

    def shrink(self, stacked, sketches: list) -> None:
        """Shrink every (full) buffer of ``stacked`` to its ell sketch rows."""
        first = sketches[0]
        ell, (_, r, m) = first._ell, stacked.shape
        if not self.n_kept or r > m:
            # the general update, sketch by sketch (its first shrink; a tall buffer)
            self.store(sketches, r, 0)
            for s in sketches:
                s._compress()
            self.load(sketches)
            return
        work = self.work
        if self.row_sq is None:
            self.row_sq = work.asarray(row_sums_of_squares(stacked[:, :ell, ...]), np.float64)
        block, pending = sketch_grams(stacked, ell, self.pending, on=work)
        self._count(pending)
        W, delta, H, new_sq = _shrink_factors(
            _buffer_grams(block, self.row_sq, ell),
            ell,
            self.row_sq,
            self.loss,
            self.energy,
            self.shrinkage,
            m,
        )
        stacked[:, :ell, ...] = first._placement.asarray(W, np.float64) @ stacked
        self.shrinkage = self.shrinkage + delta
        self.loss, self.row_sq = H, new_sq

    def store(self, sketches: list, filled: int, added: int) -> None:
        """Write the state back into the sketches (``filled`` rows buffered, ``added`` rows
        more seen); pending energy stays pending (a device's, until it is read)."""
        pending, self.pending = self.pending, None
        energy = np.asarray(to_host(self.energy), dtype=np.float64)
        if not np.isfinite(energy).all():
            raise ValueError("rows: Input contains NaN or infinity.")
        loss = np.asarray(to_host(self.loss), dtype=np.float64)
        row_sq = None if self.row_sq is None else np.asarray(to_host(self.row_sq), np.float64)
        shrinkage = np.asarray(to_host(self.shrinkage), dtype=np.float64)
        for j, s in enumerate(sketches):
            s._filled = filled
            s.n_rows_seen += added
            s._loss = loss[j]
            s._row_sq = None if row_sq is None else row_sq[j]
            s.total_shrinkage = float(shrinkage[j])
            s._energy_pending = None
            s.squared_norm = float(energy[j])
            if pending is not None:
                s._add_pending_energy(pending[j])


def _poly_hash(coefs, x: np.ndarray) -> np.ndarray:
    """``(c_0 x^(d-1) + ... + c_(d-1)) mod p`` by Horner's rule, in uint64 without overflow.

    A random polynomial of degree d - 1 over Z_p is a d-wise independent hash family
    (Carter & Wegman 1979; Wegman & Carter 1981).
    """
    acc = np.full(x.shape, np.uint64(coefs[0]), dtype=np.uint64)
    for c in coefs[1:]:
        acc = (acc * x + np.uint64(c)) % np.uint64(_PRIME)
    return acc


@register_state_class
class CountSketch:
    """CountSketch ``S A`` of a stream of rows, with S hashed from the global row index.

    ``S`` is t x n with one non-zero per column: ``S[h(i), i] = s(i)``, where the bucket
    ``h(i) = ((a i + b) mod p) mod t`` comes from a pairwise-independent hash and the sign
    ``s(i) = +-1`` from the parity of a 4-wise independent polynomial hash, both over the prime
    ``p = 2^31 - 1`` with coefficients drawn from ``random_state`` (Clarkson & Woodruff 2013,
    who need exactly these independence levels; Musco & Woodruff 2017, section 3.2).  Row
    indices are reduced mod p, so the family is independent for streams of fewer than
    2^31 - 1 rows; the parity of a uniform residue mod an odd p is biased by 1 / (2 p) ~ 2e-10.

    ``E[(S A)^T (S A)] = A^T A`` (up to that bias), and because S depends only on the global
    index, the sketch does not depend on how rows are split into blocks or in which order the
    blocks arrive.

    Parameters
    ----------
    n_buckets : int
        t, the number of rows of the sketch.
    n_columns : int
        m, the width of the rows.
    random_state : int, Generator or None
        Draws the hash coefficients; sketches can only be merged when they share them.

    Attributes
    ----------
    n_rows_seen : int
    """

    def __init__(self, n_buckets: int, n_columns: int, random_state=None):
        self.n_buckets = check_int("n_buckets", n_buckets, low=1)
        self.n_columns = check_int("n_columns", n_columns, low=1)
        rng = as_generator(random_state)
        # Leading coefficients non-zero so the polynomials have full degree.
        self._bucket_coefs = [int(rng.integers(1, _PRIME)), int(rng.integers(0, _PRIME))]
        self._sign_coefs = [int(rng.integers(1, _PRIME))] + [
            int(c) for c in rng.integers(0, _PRIME, size=3)
        ]
        self._sketch = np.zeros((self.n_buckets, self.n_columns))
        self._signs_sum = np.zeros(self.n_buckets)
        self.n_rows_seen = 0

    def hash_rows(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """Buckets (int64 in [0, t)) and signs (float64 +-1) of the given global row indices."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and idx.min() < 0:
            raise ValueError("row indices must be non-negative")
        x = (idx % _PRIME).astype(np.uint64)
        buckets = (_poly_hash(self._bucket_coefs, x) % np.uint64(self.n_buckets)).astype(np.int64)
        signs = 1.0 - 2.0 * (_poly_hash(self._sign_coefs, x) & np.uint64(1)).astype(np.float64)
        return buckets, signs

    def sketching_matrix(self, start: int, stop: int) -> sp.csr_matrix:
        """The columns ``start:stop`` of S as a t x (stop - start) CSR matrix."""
        buckets, signs = self.hash_rows(np.arange(start, stop))
        cols = np.arange(stop - start)
        return sp.csr_matrix((signs, (buckets, cols)), shape=(self.n_buckets, stop - start))

    def update(self, rows, start: int | None = None) -> CountSketch:
        """Add ``S[:, start:start + r] @ rows`` for a block of r rows (dense or CSR); returns self.

        ``start`` is the global index of the block's first row; by default the number of rows
        seen so far (blocks given in stream order).
        """
        rows = check_block(rows, n_features=self.n_columns, accept_sparse=True, name="rows")
        start = self.n_rows_seen if start is None else check_int("start", start, low=0)
        r = rows.shape[0]
        if r:
            S = self.sketching_matrix(start, start + r)
            SA = S @ rows
            self._sketch += SA.toarray() if sp.issparse(SA) else SA
            self._signs_sum += np.asarray(S.sum(axis=1)).ravel()
        self.n_rows_seen += r
        return self

    def sketch(self) -> np.ndarray:
        """``S A``, shape (t, m), float64 (a copy)."""
        return self._sketch.copy()

    def bucket_signs_sum(self) -> np.ndarray:
        """``S 1`` for the rows seen, shape (t,): exact centering afterwards, since
        ``S (A - 1 mu^T) = S A - (S 1) mu^T``."""
        return self._signs_sum.copy()

    def merge(self, other: CountSketch) -> CountSketch:
        """A new sketch of both streams (``S A_1 + S A_2``); needs the same hash and shape.

        The two streams must hold disjoint global row indices (e.g. the blocks of one matrix
        given with their ``start``), as in a tree reduction over row blocks.
        """
        if not isinstance(other, CountSketch):
            raise ValueError(f"can only merge with a CountSketch, got {type(other).__name__}")
        if (other.n_buckets, other.n_columns) != (self.n_buckets, self.n_columns):
            raise ValueError(
                "cannot merge CountSketches of shapes "
                f"{(self.n_buckets, self.n_columns)} and "
                f"{(other.n_buckets, other.n_columns)}"
            )
        if (other._bucket_coefs, other._sign_coefs) != (self._bucket_coefs, self._sign_coefs):
            raise ValueError(
                "cannot merge CountSketches with different hash functions "
                "(create them with the same random_state)"
            )
        out = CountSketch.from_state(self.to_state())
        out._sketch += other._sketch
        out._signs_sum += other._signs_sum
        out.n_rows_seen += other.n_rows_seen
        return out

    # --- persistence --------------------------------------------------------------------------
    def to_state(self) -> dict:
        """Plain values: shapes, hash coefficients (ints), the sketch and S 1 (arrays)."""
        return {
            "n_buckets": self.n_buckets,
            "n_columns": self.n_columns,
            "bucket_coefs": list(self._bucket_coefs),
            "sign_coefs": list(self._sign_coefs),
            "sketch": self._sketch.copy(),
            "signs_sum": self._signs_sum.copy(),
            "n_rows_seen": int(self.n_rows_seen),
        }

    @classmethod
    def from_state(cls, state: dict) -> CountSketch:
        out = cls.__new__(cls)
        out.n_buckets = check_int("n_buckets", state["n_buckets"], low=1)
        out.n_columns = check_int("n_columns", state["n_columns"], low=1)
        out._bucket_coefs = [int(c) for c in state["bucket_coefs"]]
        out._sign_coefs = [int(c) for c in state["sign_coefs"]]
        if (
            len(out._bucket_coefs) != 2
            or len(out._sign_coefs) != 4
            or not all(0 <= c < _PRIME for c in out._bucket_coefs + out._sign_coefs)
        ):
            raise ValueError("CountSketch state has invalid hash coefficients")
        out._sketch = np.array(state["sketch"], dtype=np.float64)
        out._signs_sum = np.array(state["signs_sum"], dtype=np.float64)
        if out._sketch.shape != (out.n_buckets, out.n_columns) or out._signs_sum.shape != (
            out.n_buckets,
        ):
            raise ValueError("CountSketch state arrays do not match n_buckets / n_columns")
        out.n_rows_seen = int(state["n_rows_seen"])
        return out

    def __repr__(self):
        return (
            f"CountSketch(n_buckets={self.n_buckets}, n_columns={self.n_columns}, "
            f"n_rows_seen={self.n_rows_seen})"
        )
