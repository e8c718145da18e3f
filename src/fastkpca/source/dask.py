"""Rows of a ``dask.array.Array``: statistics per chunk on the workers, merged up a tree.

The dask counterpart of :class:`fastkpca.source.ArraySource` (dask is imported only by the
functions that build graphs).  The statistic of an in-memory fit is computed once per row chunk
on its worker and merged pairwise up a tree (``split_every`` at a time, as
``dask.array.reduction``), so the model is the in-memory one up to the order of sums.  First
rows, rows by index and samples are drawn as the in-memory source draws them.  Statistics are
pure functions of their chunk, so a lost worker's are recomputed elsewhere unchanged.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import numpy as np

from .._utils import DEFAULT_BLOCK_ROWS
from ._base import RowSource, uniform_indices
from .memory import check_block

__all__ = ["DaskSource", "tree_reduce", "read_npy", "DEFAULT_SPLIT_EVERY"]

#: Statistics merged per task on the way up the tree (dask's own reductions default to 8 too;
#: each merge holds ``split_every`` statistics, e.g. m x m Grams, at once).
DEFAULT_SPLIT_EVERY = 8


def _is_plain(value) -> bool:
    return isinstance(value, int | float | str | bool | type(None))


def _merge_all(merge, *parts):
    """Merge ``parts`` left to right (one task of the tree)."""
    out = parts[0]
    for part in parts[1:]:
        out = merge(out, part)
    return out


def tree_reduce(parts: list, merge: Callable, *, split_every: int = DEFAULT_SPLIT_EVERY):
    """One delayed value merging a list of delayed statistics, ``split_every`` per task.

    ``merge(a, b)`` must be associative (up to round-off) and must not modify its arguments:
    a statistic may be held by the scheduler for a retry, or shared by the threaded scheduler.
    """
    if not parts:
        raise ValueError("nothing to reduce: the array has no row blocks")
    if split_every < 2:
        raise ValueError(f"split_every must be at least 2, got {split_every}")
    import dask

    merge_all = dask.delayed(_merge_all, pure=True)
    while len(parts) > 1:
        groups = [parts[i : i + split_every] for i in range(0, len(parts), split_every)]
        parts = [merge_all(merge, *group) if len(group) > 1 else group[0] for group in groups]
    return parts[0]


def _checked_chunk(block, offset, n_features, accept_sparse, name):
    stop = offset + block.shape[0]
    return check_block(
        block,
        n_features=n_features,
        accept_sparse=accept_sparse,
        name=f"{name} (rows {offset} to {stop - 1})",
    )


def _chunk_statistic(block, offset, n_features, accept_sparse, name, statistic, *args):
    """The statistic of one chunk (on a worker): validate it, then ``statistic`` of it."""
    block = _checked_chunk(block, offset, n_features, accept_sparse, name)
    return statistic(iter([(offset, block)]), *args)


def _chunk_map(
    block, n_features, accept_sparse, name, n_outputs, dtype, function, *args, block_info=None
):
    """``function`` of one validated chunk (on a worker); ``block_info`` names its rows."""
    if block.shape[0] == 0:
        return np.empty((0, n_outputs), dtype=dtype)
    offset = block_info[0]["array-location"][0][0] if block_info else 0
    block = _checked_chunk(block, offset, n_features, accept_sparse, name)
    return function(block, *args)


class DaskSource(RowSource):
    """A 2-D dask array seen as row chunks (rechunked to one chunk across the columns, non-float
    data cast to float64); chunks are validated on the workers."""

    def __init__(
        self,
        X,
        *,
        estimator=None,
        reset=True,
        accept_sparse=False,
        name="X",
        split_every=DEFAULT_SPLIT_EVERY,
    ):
        if X.ndim != 2:
            raise ValueError(
                f"Expected a 2-D dask array (n_samples, n_features), got {X.ndim}-D with shape "
                f"{X.shape}"
            )
        if any(np.isnan(s) for s in X.shape):
            raise ValueError(
                "the dask array has unknown chunk sizes (NaN in its shape); call "
                "X.compute_chunk_sizes() first, or build it with known lengths "
                "(e.g. dask.dataframe's to_dask_array(lengths=True))"
            )
        n, d = (int(s) for s in X.shape)
        if n < 1:
            raise ValueError(
                f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required."
            )
        if d < 1:
            raise ValueError(
                f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
            )
        if X.dtype.kind not in "fiub":
            raise ValueError(f"{name}: expected numeric data, got dtype {X.dtype}")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        if estimator is not None:
            if reset:
                estimator.n_features_in_ = d
                if hasattr(estimator, "feature_names_in_"):
                    del estimator.feature_names_in_
            elif d != estimator.n_features_in_:
                raise ValueError(
                    f"X has {d} features, but {type(estimator).__name__} is expecting "
                    f"{estimator.n_features_in_} features as input."
                )
        self.X = X
        self.n_samples, self.n_features = n, d
        self.dtype = X.dtype
        self.accept_sparse = accept_sparse
        self.name = name
        self.split_every = split_every

    @property
    def offsets(self) -> list[int]:
        """Global index of each row chunk's first row."""
        return [int(s) for s in np.cumsum((0,) + self.X.chunks[0][:-1])]

    def _check(self, rows, what):
        return check_block(
            rows,
            n_features=self.n_features,
            accept_sparse=self.accept_sparse,
            name=f"{self.name} ({what})",
        )

    def head(self, n_rows=DEFAULT_BLOCK_ROWS):
        return self._check(self.X[:n_rows].compute(), "first rows")

    def blocks(self, block_rows=DEFAULT_BLOCK_ROWS):
        """The chunks, computed one at a time on the client (the reductions do not use this)."""
        for block, offset in zip(self.X.to_delayed().ravel(), self.offsets, strict=True):
            yield (
                offset,
                _checked_chunk(
                    block.compute(), offset, self.n_features, self.accept_sparse, self.name
                ),
            )

    def take(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        self.require_dense(indices.size, "rows taken by index")
        rows = self.X[indices].compute()
        rows = self._check(rows, "sampled rows")
        return rows.toarray() if hasattr(rows, "toarray") else rows

    def in_memory(self, max_rows=None, rng=None, *, purpose=""):
        if max_rows is None or self.n_samples <= max_rows:
            return self._check(self.X.compute(), "all rows")
        return self.take(uniform_indices(self.n_samples, max_rows, rng))

    def entry_variance(self) -> float:
        return float(self.X.astype(np.float64).var().compute())

    def reduce(self, statistic, merge, *args, block_rows=DEFAULT_BLOCK_ROWS):
        return self.reduce_delayed(statistic, merge, *args).compute()

    def reduce_delayed(self, statistic: Callable, merge: Callable, *args):
        """The merged statistic as a dask delayed value (see :meth:`reduce`).

        Arrays and objects in ``args`` become one graph key each, so they are sent to a worker
        once, not once per chunk.
        """
        import dask

        args_d = [a if _is_plain(a) else dask.delayed(a, pure=True) for a in args]
        chunk = dask.delayed(_chunk_statistic, pure=True)
        parts = [
            chunk(block, offset, self.n_features, self.accept_sparse, self.name, statistic, *args_d)
            for block, offset in zip(self.X.to_delayed().ravel(), self.offsets, strict=True)
        ]
        return tree_reduce(parts, merge, split_every=self.split_every)

    def map_rows(self, function, *args, n_outputs, dtype):
        """A lazy dask array of ``function(chunk, *args)`` per row chunk; ``args`` are
        deep-copied into one graph key each (later changes do not leak in)."""
        import dask
        import dask.array as da

        dtype = np.dtype(dtype)
        args_d = [a if _is_plain(a) else dask.delayed(copy.deepcopy(a), pure=True) for a in args]
        return da.map_blocks(
            _chunk_map,
            self.X,
            self.n_features,
            self.accept_sparse,
            self.name,
            n_outputs,
            dtype,
            function,
            *args_d,
            dtype=dtype,
            chunks=(self.X.chunks[0], (n_outputs,)),
            meta=np.empty((0, 0), dtype=dtype),
        )


# --- reading a .npy file as a dask array ----------------------------------------------------------
def _read_npy_rows(path, offset, dtype, n_columns, start, stop):
    """Rows ``start:stop`` of a C-ordered .npy file, read without a memory map."""
    with open(path, "rb") as f:
        f.seek(offset + start * n_columns * dtype.itemsize)
        out = np.fromfile(f, dtype=dtype, count=(stop - start) * n_columns)
    if out.size != (stop - start) * n_columns:
        raise ValueError(f"{path}: the file is truncated (rows {start} to {stop - 1})")
    return out.reshape(stop - start, n_columns)


def read_npy(path, *, chunk_rows: int = 100_000):
    """A 2-D ``.npy`` file as a dask array of row chunks, each read by the task that needs it
    (``from_array`` of a memory map would pickle the whole file into the graph); every worker
    must see the file at the same path."""
    path = os.fspath(path)
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{path}: a Fortran-ordered array cannot be read by rows")
    n, d = arr.shape
    dtype, offset = arr.dtype, int(arr.offset)
    del arr
    chunk_rows = max(1, int(chunk_rows))
    import dask
    import dask.array as da

    read = dask.delayed(_read_npy_rows, pure=True)
    blocks = [
        da.from_delayed(
            read(path, offset, dtype, d, s, min(s + chunk_rows, n)),
            shape=(min(s + chunk_rows, n) - s, d),
            dtype=dtype,
        )
        for s in range(0, n, chunk_rows)
    ]
    return da.concatenate(blocks, axis=0)
