"""Blocked kernel products, with one signature on every placement (Falkon's ``mmv_ops`` model).

:func:`gram` ``k(X, Y)``; :func:`symmetric_gram` from the upper block triangle, exactly
symmetric; :func:`kernel_blocks` row blocks; :func:`fold_kernel_rows` a fold over them;
:func:`kernel_matmat`, :func:`symmetric_kernel_matmat` ``k(X, Y) @ V``;
:class:`CenteredGramOperator` ``(H K H) V``, K recomputed in every product; :func:`kernel_diag`;
:func:`kernel_at_pairs` at sampled pairs of the upper triangle.

Host rows are cut into chunks of about 1 MiB (:func:`~fastkpca.execution.budget.kernel_chunk_rows`)
run on all cores with BLAS on one thread, the grid depending on the shapes alone; device rows
come in large tiles sized from free memory (:func:`~fastkpca.execution.budget.tile_rows`).  A
kernel without namespace math is evaluated on host copies.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from . import budget
from .arrays import Placement, placement_of, to_host
from .elementwise import check_finite, fill_diagonal_, float_name, store
from .progress import progress_bar
from .threads import map_chains, map_row_chunks, map_tasks, n_workers, one_blas_thread, worker_index

__all__ = [
    "Columns",
    "prepare_columns",
    "kernel_block",
    "gram",
    "symmetric_gram",
    "kernel_blocks",
    "fold_kernel_rows",
    "kernel_matmat",
    "symmetric_kernel_matmat",
    "CenteredGramOperator",
    "kernel_diag",
    "on_one_placement",
    "result_dtype",
    "kernel_at_pairs",
    "pairs_are_cheaper",
]


def result_dtype(X, Y=None) -> str:
    """``"float32"`` if every input is float32 (numpy's or a device library's), else
    ``"float64"``: the dtype of a Gram matrix of X (and Y)."""
    names = [float_name(getattr(X, "dtype", np.float64))]
    if Y is not None:
        names.append(float_name(getattr(Y, "dtype", np.float64)))
    return "float32" if all(name == "float32" for name in names) else "float64"


def on_one_placement(X, Y):
    """``(X, Y, placement)``: X and Y on one placement, and that placement.  Host rows (a
    model's, say) meeting device rows are moved to the device (made dense first when sparse)."""
    px, py = placement_of(X), placement_of(Y)
    if px.host and not py.host:
        return py.asarray(X.toarray() if sp.issparse(X) else np.asarray(X)), Y, py
    if py.host and not px.host:
        return X, px.asarray(Y.toarray() if sp.issparse(Y) else np.asarray(Y)), px
    return X, Y, px


class Columns:
    """The columns' rows Y of a kernel's blocks and what every block needs of them, computed
    once (:meth:`Kernel._prepare`), in the block dtype ``dtype``.

    ``native``: the kernel computes on Y's namespace; else (no namespace math) the context is
    that of a host copy of Y, and blocks of device rows are host blocks, moved.
    """

    def __init__(self, kernel, Y, dtype: str, placement: Placement):
        self.kernel = kernel
        self.Y = Y
        self.dtype = dtype
        self.placement = placement
        self.native = bool(getattr(kernel, "namespace_math", False))
        if self.native:
            self.context = kernel._prepare(Y, dtype)
        else:
            self.Y = to_host(Y)
            self.context = kernel._prepare(self.Y)
        self.n = int(Y.shape[0])

    def columns(self, start: int, stop: int | None = None) -> Columns:
        """These columns restricted to ``Y[start:stop]`` (views; the symmetric products)."""
        view = object.__new__(Columns)
        view.__dict__.update(self.__dict__)
        view.Y = self.Y[start:stop, :]
        view.n = int(view.Y.shape[0])
        if self.native and self.context is not None:
            view.context = self.context.columns(start, stop)
        elif not self.native:
            view.context = self.kernel._prepare(view.Y)
        return view


def prepare_columns(kernel, Y, dtype=None) -> Columns:
    """What the blocks ``k(., Y)`` need of Y (:class:`Columns`), in the block dtype ``dtype``
    (``"float32"`` or ``"float64"``, numpy's or a library's dtype; default float64)."""
    return Columns(kernel, Y, float_name(dtype or "float64"), placement_of(Y))


def kernel_block(kernel, X, Y=None, *, columns: Columns | None = None, dtype=None, out=None):
    """``k(X, Y)`` for rows X and Y of one placement, in ``dtype`` (default float64), into
    ``out`` when given; ``columns`` (:func:`prepare_columns` of Y) is computed once for many
    blocks.  A kernel without namespace math gets float64 host copies, moved back."""
    if columns is None:
        columns = prepare_columns(kernel, Y, dtype)
    if columns.native:
        return kernel._block(X, columns.Y, columns.context, out)
    K = check_finite(np.asarray(kernel._block(to_host(X), columns.Y, columns.context), float))
    if out is not None:
        return store(K, out)
    return placement_of(X).asarray(K, dtype=np.dtype(columns.dtype))


# --- the host: threads over cache-sized chunks ----------------------------------------------------
def _host_fill(kernel, X, columns: Columns, out, chunk: int | None) -> None:
    """Fill ``out`` with ``k(X, Y)``: chunks of ``chunk`` rows on all cores, or (a kernel that is
    not :attr:`~fastkpca.kernels.Kernel.parallel_safe`) the whole block in the calling thread."""
    if not getattr(kernel, "parallel_safe", False):
        kernel_block(kernel, X, columns=columns, out=out)
        return
    rows = chunk or budget.kernel_chunk_rows(columns.n, out.itemsize)

    def fill(start, stop):
        kernel_block(kernel, X[start:stop, :], columns=columns, out=out[start:stop, :])

    map_row_chunks(X.shape[0], fill, chunk_rows=rows)


def _budget_blocks(n_rows: int, n_cols: int, working_memory_mb=None) -> Iterator[tuple[int, int]]:
    step = budget.chunk_rows(n_cols, working_memory_mb=working_memory_mb)
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


def _host_fold(kernel, X, columns: Columns, step, init, rows: int | None, balanced: bool) -> list:
    """:func:`fold_kernel_rows` on the host (see there)."""
    dtype = np.dtype(columns.dtype)
    n, m = X.shape[0], columns.n
    if not getattr(kernel, "parallel_safe", False):
        state = init()
        for start, stop in _budget_blocks(n, m):
            K = kernel_block(
                kernel, X[start:stop, :], columns=columns, out=np.empty((stop - start, m), dtype)
            )
            step(state, start, stop, K)
            del K  # free this block before the next one is computed
        return [state]
    rows = rows or budget.kernel_chunk_rows(m, dtype.itemsize)
    states: dict[int, Any] = {}
    buffers: dict[int, np.ndarray] = {}

    def chunk(start, stop):
        if (worker := worker_index()) not in states:  # the i-th contiguous share of the rows
            states[worker] = init()
        buffer = buffers.get(threading.get_ident())  # one a thread, whichever shares it runs
        if buffer is None:
            buffer = buffers[threading.get_ident()] = np.empty((rows, m), dtype=dtype)
        K = kernel_block(kernel, X[start:stop, :], columns=columns, out=buffer[: stop - start, :])
        step(states[worker], start, stop, K)

    map_row_chunks(n, chunk, chunk_rows=rows, balanced=balanced)
    return [states[i] for i in sorted(states)] or [init()]


# --- the blocked products -------------------------------------------------------------------------
def gram(kernel, X, Y=None, *, out=None, rows=None, working_memory_mb=None):
    """The Gram matrix ``K[i, j] = k(X[i], Y[j])`` (Y defaults to X) on X's placement, in the
    inputs' dtype (into ``out`` when given); with Y None a unit diagonal is exactly 1.  Host:
    chunks on all cores; device: tiles from the free memory.  Blocks checked finite."""
    symmetric = Y is None
    X, Y, placement = on_one_placement(X, X if Y is None else Y)
    shape = (int(X.shape[0]), int(Y.shape[0]))
    dtype = result_dtype(X, Y)
    if out is None:
        out = placement.xp.empty(shape, dtype=getattr(placement.xp, dtype), device=placement.device)
    elif tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {shape}")
    columns = prepare_columns(kernel, Y, "float64")

    def fill(start, stop):
        rows_out = out[start:stop, :]
        check_finite(kernel_block(kernel, X[start:stop, :], columns=columns, out=rows_out))

    if placement.host and getattr(kernel, "parallel_safe", False):
        map_row_chunks(shape[0], fill, chunk_rows=rows or budget.kernel_chunk_rows(shape[1], 8))
    elif placement.host:
        for start, stop in _budget_blocks(shape[0], shape[1], working_memory_mb):
            fill(start, stop)
    else:
        for start, stop, K in _device_blocks(kernel, X, columns, placement, rows):
            out[start:stop, ...] = store(check_finite(K), None, dtype)
    if symmetric and getattr(kernel, "_exact_diag_one", False):
        out = fill_diagonal_(out, 1.0)
    return out


def symmetric_gram(kernel, X, *, rows=None):
    """The n x n Gram matrix ``k(X, X)`` in X's float dtype on X's placement, from its upper
    block triangle only: half the kernel values of :func:`gram`, exactly symmetric, strips
    checked finite.  Host: strips filled by the threads, the lower triangle mirrored in tiles of
    :data:`~fastkpca.execution.budget.RESTORE_TILE`; device: strips from the free memory."""
    placement = placement_of(X)
    xp = placement.xp
    n = int(X.shape[0])
    dtype = result_dtype(X)
    K = xp.empty((n, n), dtype=getattr(xp, dtype), device=placement.device)
    columns = prepare_columns(kernel, X, "float64")
    exact_one = getattr(kernel, "_exact_diag_one", False)

    def strip(start, stop, out=None):
        block = kernel_block(kernel, X[start:stop, :], columns=columns.columns(start), out=out)
        check_finite(block)
        return fill_diagonal_(block, 1.0) if exact_one else block  # its leading square

    with progress_bar(total=n, desc="Gram matrix") as bar:
        if not placement.host:
            step = rows or budget.tile_rows(placement, n, 8)
            for start in range(0, n, step):
                stop = min(n, start + step)
                K[start:stop, start:] = store(strip(start, stop), None, dtype)
                D = K[start:stop, start:stop]
                K[start:stop, start:stop] = xp.triu(D) + xp.permute_dims(xp.triu(D, k=1), (1, 0))
                K[stop:, start:stop] = xp.permute_dims(K[start:stop, stop:], (1, 0))
                bar.update(stop - start)
            return K
        step = rows or budget.gram_strip_rows(n, n_workers())

        def fill(start):
            stop = min(n, start + step)
            strip(start, stop, K[start:stop, start:])
            bar.update(stop - start)

        starts = range(0, n, step)
        if getattr(kernel, "parallel_safe", False):
            map_chains(fill, [[start] for start in starts])  # the upper triangle is complete ...
        else:
            for start in starts:
                fill(start)
    map_tasks(functools.partial(_mirror_tiles, K), range(0, n, budget.RESTORE_TILE))  # ... first
    return K


def _mirror_tiles(K, start: int) -> None:
    """Copy the upper triangle of the numpy array K into its lower triangle in the tile rows
    ``[start, start + RESTORE_TILE)``: the tiles left of the diagonal from their transposes
    above it, the diagonal tile from its own upper triangle."""
    tile = budget.RESTORE_TILE
    stop = min(K.shape[0], start + tile)
    for t in range(0, start, tile):
        K[start:stop, t : t + tile] = K[t : t + tile, start:stop].T
    D = K[start:stop, start:stop]
    D[...] = np.triu(D) + np.triu(D, 1).T


def _device_blocks(kernel, X, columns: Columns, placement: Placement, rows=None) -> Iterator:
    itemsize = 4 if columns.dtype == "float32" else 8
    rows = rows or budget.tile_rows(placement, columns.n, itemsize)
    for start in range(0, X.shape[0], rows):
        stop = min(X.shape[0], start + rows)
        yield start, stop, kernel_block(kernel, X[start:stop, :], columns=columns)


def kernel_blocks(
    kernel, X, Y=None, *, dtype=None, rows=None, working_memory_mb=None
) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(start, stop, K[start:stop])`` row blocks of ``k(X, Y)`` on X's placement, in
    ``dtype`` (float32: rbf computes in float32, others round float64 blocks).  Host: blocks of
    ``working_memory_mb`` filled on all cores; device: tiles of ``rows`` rows."""
    X, Y, placement = on_one_placement(X, X if Y is None else Y)
    columns = prepare_columns(kernel, Y, dtype)
    if not placement.host:
        yield from _device_blocks(kernel, X, columns, placement, rows)
        return
    block_dtype = np.dtype(columns.dtype)
    for start, stop in _budget_blocks(X.shape[0], columns.n, working_memory_mb):
        out = np.empty((stop - start, columns.n), dtype=block_dtype)
        _host_fill(kernel, X[start:stop, :], columns, out, rows)
        yield start, stop, out


def fold_kernel_rows(
    kernel, X, Y, step: Callable, init: Callable, *, dtype=None, rows=None, balanced=False
) -> list:
    """Fold ``step(state, start, stop, K)`` over row blocks of ``K = k(X, Y)`` (``dtype``, as
    :func:`kernel_blocks`); returns the states, in row order.

    Host: chunks of ``rows`` rows (default :func:`~fastkpca.execution.budget.kernel_chunk_rows`)
    in one contiguous share per worker thread (:func:`~fastkpca.execution.map_row_chunks`),
    each handed to ``step`` with its share's state while in cache (``step`` may modify it,
    write shared arrays only at its rows, and start no threaded work; ``balanced``: the balanced
    shares, for small states).  Chunks depend on the row count alone; a kernel that is not
    parallel-safe, or a device, runs one state.
    """
    X, Y, placement = on_one_placement(X, Y)
    columns = prepare_columns(kernel, Y, dtype)
    if placement.host:
        return _host_fold(kernel, X, columns, step, init, rows, balanced)
    state = init()
    for start, stop, K in _device_blocks(kernel, X, columns, placement, rows):
        step(state, start, stop, K)
    return [state]


def _matching(V, name: str):
    """V in the block dtype ``name``."""
    if float_name(V.dtype) == name and str(V.dtype).rsplit(".", 1)[-1] == name:
        return V
    xp = placement_of(V).xp
    return xp.astype(V, getattr(xp, name))


def kernel_matmat(kernel, X, Y, V, *, dtype=None, rows=None):
    """``k(X, Y) @ V`` block by block, in V's dtype (the blocks, and their products with V, in
    ``dtype``: default float64): :func:`fold_kernel_rows` with each block's product written to
    its rows."""
    X, Y, placement = on_one_placement(X, Y)
    V = placement.asarray(V)
    name = float_name(dtype or "float64")
    xp = placement.xp
    out = xp.empty((X.shape[0], V.shape[1]), dtype=V.dtype, device=placement.device)
    Vb = _matching(V, name)

    def product(state, start, stop, K):
        out[start:stop, ...] = _matching(K @ Vb, float_name(V.dtype))

    fold_kernel_rows(kernel, X, Y, product, _no_state, dtype=name, rows=rows)
    return out


def _no_state():
    return None


def symmetric_kernel_matmat(kernel, X, V, *, dtype=None, rows=None, progress=None):
    """``k(X, X) @ V`` from the upper block triangle only: strip ``[s, e)`` against ``X[s:]`` is
    applied to its own rows and (transposed) to the rows below, half the kernel values of
    :func:`kernel_matmat`.  Host: strips round robin to the threads, one accumulator each,
    added in thread order; device: tiles.  ``progress(rows)`` is called per strip."""
    placement = placement_of(X)
    xp = placement.xp
    n = int(X.shape[0])
    name = float_name(dtype or "float64")
    itemsize = 4 if name == "float32" else 8
    V = placement.asarray(V)
    Vb = _matching(V, name)
    columns = prepare_columns(kernel, X, name)
    exact_one = getattr(kernel, "_exact_diag_one", False)

    def strip(start, stop, out, acc):
        K = kernel_block(kernel, X[start:stop, :], columns=columns.columns(start), out=out)
        if exact_one:
            K = fill_diagonal_(K, 1.0)  # the leading square is the diagonal block
        acc[start:stop, ...] += K @ Vb[start:, :]
        if stop < n:
            acc[stop:, ...] += xp.permute_dims(K[:, stop - start :], (1, 0)) @ Vb[start:stop, :]
        if progress is not None:
            progress(stop - start)

    if not placement.host:
        acc = xp.zeros((n, V.shape[1]), dtype=Vb.dtype, device=placement.device)
        step = rows or budget.tile_rows(placement, n, itemsize)
        for start in range(0, n, step):
            strip(start, min(n, start + step), None, acc)
        return _matching(acc, float_name(V.dtype))
    step = rows or budget.kernel_strip_rows(n, itemsize)
    accumulators: dict[int, Any] = {}
    buffers: dict[int, np.ndarray] = {}

    def task(start):
        worker = worker_index()
        if worker not in accumulators:
            accumulators[worker] = np.zeros((n, V.shape[1]), dtype=Vb.dtype)
            buffers[worker] = np.empty(min(n, step) * n, dtype=np.dtype(name))
        stop = min(n, start + step)
        out = buffers[worker][: (stop - start) * (n - start)].reshape(stop - start, n - start)
        strip(start, stop, out, accumulators[worker])

    starts = list(range(0, n, step))
    if getattr(kernel, "parallel_safe", False):
        map_tasks(task, starts)
    else:
        for start in starts:
            task(start)
    total = None
    for worker in sorted(accumulators):
        total = accumulators[worker] if total is None else total + accumulators[worker]
    if total is None:
        total = np.zeros((n, V.shape[1]), dtype=Vb.dtype)
    return _matching(total, float_name(V.dtype))


class CenteredGramOperator(LinearOperator):
    """``V -> (H K H) V`` for the n x n Gram ``K = k(X, X)``, never stored, on X's placement.

    ``H K H V = K Vc - 1 (mean_rows(K Vc))``, ``Vc = V - 1 mean(V)`` (Schoelkopf, Smola &
    Mueller 1998): one pass of :func:`symmetric_kernel_matmat` per product, strips in
    ``tile_dtype``; the first gives :attr:`row_means`; :attr:`n_passes` counts passes.  Memory
    O(n b).  A ``LinearOperator`` whose :meth:`matmat` takes and returns float64 arrays of X's
    namespace.
    """

    def __init__(self, X, kernel, *, dtype=None, rows=None):
        self.X = X
        self.kernel = kernel
        self.placement = placement_of(X)
        n = int(X.shape[0])
        self.tile_dtype = float_name(dtype or getattr(X, "dtype", np.float64))
        # The operator's dtype is its strips' precision: the solvers' tolerances follow it.
        super().__init__(np.dtype(self.tile_dtype), (n, n))
        self.n = n
        self.rows = rows
        self.n_passes = 0
        self.row_means = None

    def matmat(self, V):
        xp = self.placement.xp
        V = self.placement.asarray(V)
        one_d = V.ndim == 1
        if one_d:
            V = xp.reshape(V, (-1, 1))
        V = _matching(V, "float64")
        Vc = V - xp.mean(V, axis=0, keepdims=True)
        first = self.row_means is None
        if first:
            ones = xp.full((self.n, 1), 1.0 / self.n, dtype=V.dtype, device=self.placement.device)
            Vc = xp.concat([Vc, ones], axis=1)
        with progress_bar(total=self.n, desc=f"Gram pass {self.n_passes + 1}") as bar:
            KV = symmetric_kernel_matmat(
                self.kernel, self.X, Vc, dtype=self.tile_dtype, rows=self.rows, progress=bar.update
            )
        self.n_passes += 1
        if first:
            self.row_means = KV[:, -1]
            KV = KV[:, :-1]
        out = KV - xp.mean(KV, axis=0, keepdims=True)
        return out[:, 0] if one_d else out

    def _matmat(self, V):
        return self.matmat(V)

    def _matvec(self, v):
        return self.matmat(v)

    def _adjoint(self):
        return self  # H K H is symmetric

    def diag_sum(self) -> float:
        """``sum_i k(x_i, x_i)`` (the trace of the uncentered Gram)."""
        d = kernel_diag(self.kernel, self.X)
        xp = placement_of(d).xp
        return float(xp.sum(xp.astype(d, xp.float64)))


def kernel_diag(kernel, X):
    """``k(x_i, x_i)`` on X's placement: :meth:`Kernel.diag` (written over the namespace for
    fastkpca's kernels); a kernel without namespace math gets a host copy of X and its diagonal
    is moved."""
    placement = placement_of(X)
    if placement.host or getattr(kernel, "namespace_math", False):
        return kernel.diag(X)
    return placement.asarray(np.asarray(kernel.diag(to_host(X))))


# --- kernel values at sampled pairs ---------------------------------------------------------------
def pairs_are_cheaper(sample_prob: float, n_features: int) -> bool:
    """Whether evaluating the kept entries of a Gram by groups of rows against their kept
    columns beats reading them off dense row blocks of the upper triangle, on the host.

    A rough cost model of the two (nanoseconds per entry, fitted to both paths): ``350 + 5.5
    d`` per kept entry by groups, ``2.5 + 0.075 d`` per entry of the triangle by dense blocks.
    """
    d = int(n_features)
    return sample_prob * (350.0 + 5.5 * d) < 2.5 + 0.075 * d


def kernel_at_pairs(kernel, X, indptr, indices, *, sample_prob: float = 1.0, pairwise=None):
    """``k(x_i, x_j)`` at the pairs of a CSR structure of the strict upper triangle of the Gram
    of X's rows, as a host array of X's float dtype; nothing n x n.  Host: rows against their
    kept columns (``pairwise``; None: :func:`pairs_are_cheaper`) or row blocks of the triangle
    read at the pairs; device: tiles, only the kept values copied to the host."""
    placement = placement_of(X)
    n = int(X.shape[0])
    dtype = np.dtype(float_name(X.dtype))
    values = np.empty(int(indptr[-1]), dtype=dtype)
    if n < 2 or values.size == 0:
        return values
    if placement.host:
        if pairwise is None:
            pairwise = pairs_are_cheaper(sample_prob, int(X.shape[1]))
        if pairwise:
            _kernel_at_pairs_by_rows(kernel, X, indptr, indices, values)
            return values
        step, block_dtype = budget.pair_block_rows(n), "float64"
    else:
        step, block_dtype = budget.tile_rows(placement, n, dtype.itemsize), dtype.name
    xp = placement.xp
    with progress_bar(total=n, desc="sampled Gram") as bar:
        for start in range(0, n, step):
            stop = min(n, start + step)
            lo, hi = int(indptr[start]), int(indptr[stop])
            bar.update(stop - start)
            if hi == lo:
                continue
            # Rows start..stop-1 need columns > start only: the upper part of the row block,
            # read at the kept (row, column) pairs through each block's flat index.
            rows = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
            cols = indices[lo:hi] - start
            width = n - start
            for s, e, K in kernel_blocks(
                kernel, X[start:stop, ...], X[start:, ...], dtype=block_dtype
            ):
                a, b = int(indptr[start + s]) - lo, int(indptr[start + e]) - lo
                if b > a:
                    flat = placement.asarray((rows[a:b] - s) * width + cols[a:b])
                    kept = xp.take(xp.reshape(K, (-1,)), flat, axis=0)
                    values[lo + a : lo + b] = to_host(kept)
                del K  # before the next block is computed
    return values


def _kernel_at_pairs_by_rows(kernel, X, indptr, indices, values) -> None:
    """:func:`kernel_at_pairs` evaluating the kept columns of a few rows at a time: each group of
    rows against the union of its kept columns, so that a block's fixed cost (the columns'
    preparation) is shared by about :data:`~fastkpca.execution.budget.PAIR_GROUP_ENTRIES`
    entries, most of them kept."""
    n = X.shape[0]
    with one_blas_thread():  # small GEMMs: a BLAS team would cost more than it saves
        _pair_groups(kernel, X, indptr, indices, values, n)


def _pair_groups(kernel, X, indptr, indices, values, n) -> None:
    start = 0
    while start < n - 1:
        lo = int(indptr[start])
        stop = start + 1
        while (
            stop < n - 1 and (stop - start) * (int(indptr[stop]) - lo) < budget.PAIR_GROUP_ENTRIES
        ):
            stop += 1
        hi = int(indptr[stop])
        if hi > lo:
            kept = indices[lo:hi]
            columns = np.unique(kept)
            K = kernel_block(kernel, X[start:stop, ...], X[columns], dtype="float64")
            rows = np.repeat(np.arange(stop - start), np.diff(indptr[start : stop + 1]))
            values[lo:hi] = K[rows, np.searchsorted(columns, kept)]
        start = stop
