"""The interface every row source implements, and the one sampling rule they share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._utils import DEFAULT_BLOCK_ROWS
from ..execution import require_memory
from ..execution.arrays import HOST

__all__ = ["RowSource", "uniform_indices"]


def uniform_indices(n_samples: int, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a uniformly random ``n_rows``-subset of ``range(n_samples)``: those of
    the smallest of ``n_samples`` i.i.d. U(0, 1) keys in row order, as
    :class:`fastkpca.source.ReservoirSampler` computes block by block."""
    c = min(n_rows, n_samples)
    keys = rng.random(n_samples)
    if c == n_samples:
        return np.arange(n_samples)
    return np.sort(np.argpartition(keys, c - 1)[:c])


class RowSource:
    """Validated rows from somewhere: first rows, blocks per pass, rows by index, reductions.

    Attributes
    ----------
    n_features : int
        The width of every row.
    n_samples : int or None
        The number of rows, None while unknown (a stream not yet read to its end).
    dtype : numpy.dtype
        float32 or float64: the dtype of every block.
    reiterable : bool
        Whether :meth:`blocks` may be called more than once (False for a one-shot generator).
    random_access : bool
        Whether rows can be taken by index without a pass over the data.
    sparse : bool
        Whether blocks are scipy.sparse CSR matrices.
    resident : bool
        Whether the rows are already held in this process's memory (an array, a memory map).
    """

    n_features: int
    n_samples: int | None
    dtype: np.dtype
    reiterable: bool = True
    random_access: bool = True
    sparse: bool = False
    resident: bool = False
    #: Where the blocks live (:class:`fastkpca.execution.arrays.Placement`); the host for every
    #: numpy source, a device for :mod:`fastkpca.source.device`'s.
    placement = HOST
    #: Where the data given to the estimator live (the host for numpy rows, files and Dask
    #: arrays; a tensor's device for tensors or blocks of tensors), whatever ``placement`` they
    #: are computed on: what fitted attributes follow (:mod:`fastkpca.decomposition._base`).
    origin = HOST

    # --- reading ---------------------------------------------------------------------------
    def head(self, n_rows: int = DEFAULT_BLOCK_ROWS):
        """The first ``min(n_rows, n_samples)`` rows (what kernel heuristics and feature draws use,
        so that an array, its dask chunks and any blocking of it draw the same model)."""
        raise NotImplementedError

    def blocks(self, block_rows: int | None = DEFAULT_BLOCK_ROWS) -> Iterator[tuple[int, Any]]:
        """One pass: ``(start, block)`` pairs, ``start`` the global index of the block's first row.

        ``block_rows`` sizes the blocks of an in-memory array (None: the whole array as one
        block); streams and dask arrays yield their own blocks.
        """
        raise NotImplementedError

    def take(self, indices):
        """The rows at sorted global ``indices``, as a dense array (:meth:`require_dense`
        checked first)."""
        raise ValueError(
            f"{type(self).__name__} cannot take rows by index: pass an array or a dask array"
        )

    def sample_rows(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random subset of ``min(n_rows, n_samples)`` rows (dense, in row order):
        the rows of :func:`uniform_indices` with the same generator."""
        n = self.n_samples
        assert n is not None  # random-access sources know their length
        self.require_dense(min(n_rows, n), f"a uniform sample of {n_rows} rows")
        return self.take(uniform_indices(n, n_rows, rng))

    def in_memory(self, max_rows: int | None = None, rng: np.random.Generator | None = None):
        """The rows as one in-memory array (dense or CSR), for methods that need random access.

        A source whose rows are not in memory yet and number more than ``max_rows`` gives a
        uniform sample of ``max_rows`` of them instead (drawn with ``rng``).
        """
        raise NotImplementedError

    # --- reductions ------------------------------------------------------------------------
    def reduce(
        self,
        statistic: Callable,
        merge: Callable,
        *args,
        block_rows: int | None = DEFAULT_BLOCK_ROWS,
    ):
        """``statistic(blocks, *args)`` of the rows, its parts merged with ``merge``.

        ``statistic`` takes an iterator of ``(start, block)`` pairs; ``merge(a, b)`` combines
        the statistics of disjoint rows (associative up to round-off).  One call over a pass in
        memory and from streams; one per chunk on a dask array, merged up a tree.
        """
        return statistic(self.blocks(block_rows), *args)

    def map_rows(self, function: Callable, *args, n_outputs: int, dtype):
        """``function(rows, *args)`` over all rows: in memory at once, lazily per dask chunk."""
        raise NotImplementedError

    # --- what the kernel heuristics read ---------------------------------------------------
    def indexable(self):
        """What ``gamma="scale"`` / ``"median"`` read: ``.shape``, rows by sorted index
        (``[indices]``) and, where it is not an array, ``entry_variance()``.  An in-memory
        source gives its array; others give themselves."""
        return self

    @property
    def shape(self) -> tuple[int, int]:
        if self.n_samples is None:
            raise ValueError("the number of rows of this stream is not known before reading it")
        return self.n_samples, self.n_features

    def __getitem__(self, indices):
        return self.take(indices)

    def entry_variance(self) -> float:
        """The variance of all entries (``gamma="scale"``)."""
        raise ValueError(f"{type(self).__name__} cannot compute the variance of its entries")

    # --- memory of dense rows ----------------------------------------------------------------
    def dense_bytes(self, n_rows: int) -> int:
        """Bytes of ``n_rows`` rows of this source as a dense array (``n_features`` wide, in
        :attr:`dtype`): what densifying them (``take``, a sample, a CSR block's ``toarray``)
        allocates, whatever the rows' own storage."""
        return int(n_rows) * int(self.n_features) * np.dtype(self.dtype).itemsize

    def require_dense(self, n_rows: int, what: str, *, hint: str = "") -> None:
        """Raise ValueError up front unless ``n_rows`` dense rows of this source fit in memory
        (``what`` names the parameter that decides ``n_rows``), before rows are densified: see
        :func:`fastkpca.execution.require_memory`."""
        n_rows = int(n_rows)
        d = self.n_features
        stored = " (the data is sparse, this step needs them dense)" if self.sparse else ""
        require_memory(
            self.dense_bytes(n_rows),
            f"{what} as dense rows ({n_rows} x {d} {np.dtype(self.dtype).name})",
            hint=hint
            or f"the rows are {d} features wide{stored}: use fewer rows for this step, or "
            "fewer features (a LIBSVM file's largest feature index sets the width)",
        )

    def require_passes(self, n_passes: int, why: str) -> None:
        """Raise ValueError up front when ``n_passes > 1`` and the source is read-once."""
        if n_passes > 1 and not self.reiterable:
            raise ValueError(
                f"X is a one-shot iterator of row blocks (e.g. a generator), but {why} reads "
                "the data more than once; pass an array, a list of blocks or a reader whose "
                "__iter__ restarts"
            )
