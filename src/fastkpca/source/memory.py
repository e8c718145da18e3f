"""Rows held in memory (arrays, sparse matrices, memory maps) or arriving as blocks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

from .._utils import DEFAULT_BLOCK_ROWS
from ..execution.arrays import (
    detached,
    float_dtype,
    get_namespace,
    is_namespace_array,
    placement_of,
    row_range,
    take_rows,
    to_host,
)
from ..execution.elementwise import nonfinite
from ._base import RowSource

__all__ = ["ArraySource", "BlockSource", "ReservoirSampler", "check_block"]


def check_block(block, *, n_features=None, accept_sparse=False, name="X", dtype=None):
    """One validated row block: 2-D, real, finite, ``n_features`` wide, float32 or float64, in
    its own namespace (host blocks numpy or CSR; others stay on their device, detached).
    Integer, boolean, float16 and bfloat16 data become float64
    (:func:`fastkpca.execution.arrays.float_dtype`); ``dtype`` then casts.  Errors name the
    block (``name``)."""
    placement = placement_of(block)  # ValueError for a device fastkpca cannot compute on
    xp = placement.xp
    if sp.issparse(block):
        if not accept_sparse:
            raise ValueError(
                f"{name}: sparse input is not supported by this method; pass a dense array"
            )
        block = block.tocsr()
    elif is_namespace_array(block):
        block = detached(block)
        layout = getattr(block, "layout", None)
        if getattr(block, "is_sparse", False) or (
            layout is not None and str(layout) != "torch.strided"
        ):
            raise ValueError(f"{name}: sparse tensors are not supported; pass a dense tensor")
        if not xp.isdtype(block.dtype, ("real floating", "integral", "bool")):
            raise ValueError(f"{name}: expected real numeric data, got dtype {block.dtype}")
    else:
        block = np.asarray(block)
        if block.dtype.kind not in "fiub":
            raise ValueError(f"{name}: expected numeric data, got dtype {block.dtype}")
    if block.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D block of rows, got {block.ndim}-D")
    computed = float_dtype(block.dtype)
    if _dtype_name(block.dtype) != computed.name:
        block = _as_dtype(block, placement, computed)
    if dtype is not None and np.dtype(dtype) != computed:
        block = _as_dtype(block, placement, np.dtype(dtype))
    _require_finite(block, name)
    if n_features is not None and block.shape[1] != n_features:
        raise ValueError(
            f"{name} has {block.shape[1]} features, but the model is expecting "
            f"{n_features} features as input"
        )
    return block


def _require_finite(X, name: str) -> None:
    what = nonfinite(X.data if sp.issparse(X) else X)
    if what is not None:
        raise ValueError(f"Input {name} contains {what}.")


def _dtype_name(dtype) -> str:
    """``"float64"`` for numpy's, PyTorch's (``torch.float64``) or another namespace's float64."""
    return str(dtype).rsplit(".", 1)[-1]


def _as_dtype(block, placement, dtype: np.dtype):
    if sp.issparse(block):
        return block.astype(dtype)
    return placement.xp.astype(block, placement.dtype(dtype))


def _dense_rows(rows) -> np.ndarray:
    return rows.toarray() if sp.issparse(rows) else np.array(rows, copy=True)


# --- arrays ---------------------------------------------------------------------------------------
class ArraySource(RowSource):
    """An in-memory (or memory-mapped) array or CSR matrix, validated once (scikit-learn's
    ``validate_data`` with an estimator, ``check_array`` otherwise); blocks are views."""

    def __init__(self, X, *, estimator=None, reset=True, accept_sparse=False, name="X"):
        kw = dict(
            dtype=[np.float64, np.float32],
            accept_sparse="csr" if accept_sparse else False,
            ensure_min_samples=1,
            ensure_all_finite=False,  # checked in threads, as every block (check_block)
        )
        if estimator is not None:
            X = validate_data(estimator, X, reset=reset, **kw)
        else:
            X = check_array(X, input_name=name, **kw)
        _require_finite(X, name)
        self.array = X
        self.n_samples, self.n_features = X.shape
        self.dtype = X.dtype
        self.sparse = sp.issparse(X)

    def head(self, n_rows=DEFAULT_BLOCK_ROWS):
        return self.array[:n_rows]

    def blocks(self, block_rows=DEFAULT_BLOCK_ROWS):
        X = self.array
        if block_rows is None:
            yield 0, X
            return
        for start in range(0, X.shape[0], block_rows):
            yield start, X[start : start + block_rows]

    def take(self, indices):
        self.require_dense(np.size(indices), "rows taken by index")
        return _dense_rows(self.array[indices])

    def in_memory(self, max_rows=None, rng=None, *, purpose=""):
        return self.array

    def map_rows(self, function, *args, n_outputs, dtype):
        return function(self.array, *args)

    def indexable(self):
        return self.array


# --- iterables of row blocks ----------------------------------------------------------------------
class BlockSource(RowSource):
    """An iterable of row blocks: a list of arrays, a generator, a file reader.

    The first block fixes ``n_features`` and ``dtype``; :meth:`head` reads ahead and the first
    pass replays it, so a one-shot generator loses nothing.  Further passes call ``iter()``
    again (a re-iterable is needed) and must give the same rows.  Empty blocks are skipped.
    Blocks of another namespace are validated there and the source lives where the first block
    does, or on ``placement``; host blocks reach a device through
    :class:`~fastkpca.source.device.DeviceSource`.
    """

    random_access = False

    def __init__(
        self,
        blocks: Iterable,
        *,
        estimator=None,
        reset=True,
        accept_sparse=False,
        name="X",
        placement=None,
    ):
        self._iterable = blocks
        self._name = name
        self._accept_sparse = accept_sparse
        it = iter(blocks)
        self.reiterable = it is not blocks
        expected = None if (reset or estimator is None) else estimator.n_features_in_
        first = next(it, None)
        if first is None:
            raise ValueError(f"{name} is an empty iterable of row blocks: it yielded no rows")
        self.origin = placement_of(first)
        if not self.origin.host and placement is not None:
            self.placement = placement
        elif not self.origin.host:
            self.placement = self.origin
        first = self._moved(
            check_block(
                first, n_features=expected, accept_sparse=accept_sparse, name=f"{name} (block 0)"
            )
        )
        if first.shape[0] == 0:
            raise ValueError(f"the first row block of {name} is empty")
        self.n_features = int(first.shape[1])
        self.dtype = float_dtype(first.dtype)
        self.sparse = sp.issparse(first)
        known = getattr(blocks, "n_samples", None)
        self.n_samples = known if isinstance(known, int) else None
        if estimator is not None and reset:
            estimator.n_features_in_ = self.n_features
            if hasattr(estimator, "feature_names_in_"):
                del estimator.feature_names_in_
        self._read_ahead = [first]  # blocks read before the first pass, replayed by it
        self._pending: Iterator | None = it  # the iterator the first pass continues
        self._head = None
        self._head_rows = 0

    def _moved(self, block):
        """A validated block where this source computes (itself when it is there)."""
        if self.placement == placement_of(block):
            return block
        return self.placement.asarray(block)

    def _checked(self, blocks, first_index=0):
        for i, block in enumerate(blocks, start=first_index):
            block = check_block(
                block,
                n_features=self.n_features,
                accept_sparse=self._accept_sparse,
                name=f"{self._name} (block {i})",
                dtype=self.dtype,
            )
            if block.shape[0]:
                yield self._moved(block)

    def head(self, n_rows=DEFAULT_BLOCK_ROWS):
        if self._pending is not None:  # before the first pass: read ahead as far as needed
            have = sum(int(b.shape[0]) for b in self._read_ahead)
            more = self._checked(self._pending, first_index=len(self._read_ahead))
            while have < n_rows and (block := next(more, None)) is not None:
                self._read_ahead.append(block)
                have += block.shape[0]
            rows = self._read_ahead
        elif self._head is not None and n_rows <= self._head_rows:
            return row_range(self._head, 0, n_rows)
        else:
            self.require_passes(2, "reading its first rows after a pass")
            rows, have = [], 0
            for block in self._checked(iter(self._iterable)):
                rows.append(block)
                have += block.shape[0]
                if have >= n_rows:
                    break
        if any(sp.issparse(b) for b in rows):
            head = sp.vstack(rows, format="csr")
        else:
            head = self.placement.xp.concat(rows, axis=0)
        self._head, self._head_rows = row_range(head, 0, n_rows), n_rows
        return self._head

    def blocks(self, block_rows=DEFAULT_BLOCK_ROWS):
        if self._pending is not None:
            pending, self._pending = self._pending, None
            read_ahead, self._read_ahead = self._read_ahead, []
            chunks = itertools.chain(
                read_ahead, self._checked(pending, first_index=len(read_ahead))
            )
        else:
            self.require_passes(2, "this fit")
            chunks = self._checked(iter(self._iterable))
        start = 0
        for block in chunks:
            yield start, block
            start += block.shape[0]
        if self.n_samples is not None and start != self.n_samples:
            raise ValueError(
                f"the block source gave {self.n_samples} rows on one pass and {start} on the "
                "next; it must yield the same rows every time it is iterated"
            )
        self.n_samples = start

    def sample_rows(self, n_rows, rng):
        """A uniform sample by reservoir sampling in one pass (:class:`ReservoirSampler`): the
        rows an array with the same rows would give."""
        n = self.n_samples
        # the reservoir keeps sparse rows sparse; the sample it returns is dense
        self.require_dense(n_rows if n is None else min(n_rows, n), f"a sample of {n_rows} rows")
        reservoir = ReservoirSampler(n_rows, rng)
        for _, block in self.blocks():
            reservoir.update(block)
        return self.placement.asarray(reservoir.sample())

    def in_memory(self, max_rows=None, rng=None, *, purpose="this method"):
        raise ValueError(
            f"{purpose} needs the data in memory (random access to its rows), which an "
            "iterable of row blocks does not give; pass an array or a dask array"
        )

    def map_rows(self, function, *args, n_outputs, dtype):
        parts = [function(block, *args) for _, block in self.blocks()]
        return get_namespace(parts[0]).concat(parts, axis=0)


# --- uniform samples from a stream ----------------------------------------------------------------
class ReservoirSampler:
    """A uniform sample of ``size`` rows from a stream of row blocks, in one pass.

    Each row gets a U(0, 1) key and the reservoir keeps the ``size`` smallest, a uniform subset
    of any prefix whatever the blocking (Ghashami et al. 2016, section 3); the keys are those of
    :func:`fastkpca.source.uniform_indices`, so an array gives the same rows.  Memory: ``size``
    rows; an expected ``size * log(n / size)`` rows are copied.

    Parameters
    ----------
    size : int
        Number of rows to keep.
    rng : numpy.random.Generator
        Source of the keys (one double per row, drawn in row order).

    Attributes
    ----------
    n_seen : int
        Rows seen so far.
    """

    def __init__(self, size: int, rng: np.random.Generator):
        if size < 1:
            raise ValueError(f"reservoir size must be >= 1, got {size}")
        self.size = int(size)
        self.rng = rng
        self.n_seen = 0
        self._keys = np.empty(0)
        self._index = np.empty(0, dtype=np.int64)
        self._rows: Any = None

    def update(self, block) -> ReservoirSampler:
        """Offer the rows of one block (dense or sparse, of any namespace: the rows kept are
        copied to the host) to the reservoir."""
        m = int(block.shape[0])
        keys = self.rng.random(m)
        if self._keys.size == self.size:
            candidates = np.flatnonzero(keys < self._keys.max())
        else:
            candidates = np.arange(m)
        if candidates.size:
            rows = take_rows(block, candidates)
            rows = rows.tocsr() if sp.issparse(rows) else np.asarray(to_host(rows))
            if self._rows is None:
                all_rows = rows
            elif sp.issparse(rows) or sp.issparse(self._rows):
                all_rows = sp.vstack([sp.csr_matrix(self._rows), sp.csr_matrix(rows)]).tocsr()
            else:
                all_rows = np.concatenate([self._rows, rows])
            all_keys = np.concatenate([self._keys, keys[candidates]])
            all_index = np.concatenate([self._index, self.n_seen + candidates])
            if all_keys.size > self.size:
                keep = np.argpartition(all_keys, self.size - 1)[: self.size]
                all_rows, all_keys, all_index = all_rows[keep], all_keys[keep], all_index[keep]
            self._rows, self._keys, self._index = all_rows, all_keys, all_index
        self.n_seen += m
        return self

    @property
    def indices(self) -> np.ndarray:
        """Stream positions of the sampled rows, ascending."""
        return np.sort(self._index)

    def sample(self, *, dense: bool = True):
        """The sampled rows in stream order: a dense array, or with ``dense=False`` as they were
        offered (sparse rows stay a CSR matrix)."""
        if self._rows is None:
            raise ValueError("the reservoir is empty: no rows were offered")
        order = np.argsort(self._index)
        return _dense_rows(self._rows[order]) if dense else self._rows[order]
