"""Rows on a device: arrays of another namespace where they live, and host rows sent there.

Both sources give blocks in the namespace of their
:class:`~fastkpca.execution.arrays.Placement`: :class:`TensorSource`, an array already on its
device, validated there (nothing moves to the host); :class:`DeviceSource`, any host source
whose validated blocks are sent to the device one ahead of the computation (on CUDA from pinned
memory on a side stream, so transfers overlap compute and data larger than the device streams
through it).  Random draws and sampled indices stay on the host; only the rows move.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .._utils import DEFAULT_BLOCK_ROWS
from ..execution.arrays import Placement, float_dtype, row_range, take_rows, to_host
from ..kernels import entry_variance
from ._base import RowSource
from .memory import check_block

__all__ = ["TensorSource", "DeviceSource", "DEVICE_BLOCK_ROWS"]

#: Rows per block on a device: large blocks keep a GPU busy (131072 rows of 100 float32 values are
#: 50 MiB), and the statistics above chunk them further where they must.
DEVICE_BLOCK_ROWS = 131072


def _set_estimator_width(estimator, n_features, reset, name):
    if estimator is None:
        return
    if reset:
        estimator.n_features_in_ = int(n_features)
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    elif int(n_features) != estimator.n_features_in_:
        raise ValueError(
            f"{name} has {n_features} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input"
        )


class _HostRows:
    """What the kernel heuristics read of device rows (``gamma="scale"`` / ``"median"``): the
    shape, rows by sorted index as host arrays, the variance of all entries, and the rows
    themselves for the kernel's value checks (:meth:`fastkpca.kernels.Kernel.check_rows`)."""

    def __init__(self, X):
        self._X = X
        self.shape = tuple(int(s) for s in X.shape)

    def __getitem__(self, indices):
        return to_host(take_rows(self._X, indices))

    def entry_variance(self) -> float:
        return entry_variance(self._X)  # on the rows' device, in float64

    def head(self):
        return self._X


class TensorSource(RowSource):
    """An array of another namespace (a PyTorch tensor, a CuPy or ``array_api_strict`` array)
    on its device, validated there (:func:`~fastkpca.source.check_block`: float dtype,
    detached, finite, width); blocks are views."""

    resident = True

    def __init__(
        self, X, *, placement: Placement, estimator=None, reset=True, accept_sparse=False, name="X"
    ):
        expected = None if (reset or estimator is None) else estimator.n_features_in_
        X = check_block(X, n_features=expected, name=name)
        if X.shape[0] < 1:
            raise ValueError(
                f"Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is "
                "required."
            )
        _set_estimator_width(estimator, X.shape[1], reset, name)
        self.placement = placement
        self.origin = placement
        self.array = X
        self.n_samples, self.n_features = int(X.shape[0]), int(X.shape[1])
        self.dtype = float_dtype(X.dtype)

    def head(self, n_rows=DEFAULT_BLOCK_ROWS):
        return row_range(self.array, 0, n_rows)

    def blocks(self, block_rows=DEFAULT_BLOCK_ROWS):
        X = self.array
        if block_rows is None:
            yield 0, X
            return
        block_rows = max(int(block_rows), DEVICE_BLOCK_ROWS)
        for start in range(0, self.n_samples, block_rows):
            yield start, row_range(X, start, start + block_rows)

    def take(self, indices):
        return take_rows(self.array, indices)

    def in_memory(self, max_rows=None, rng=None, *, purpose=""):
        return self.array

    def map_rows(self, function, *args, n_outputs, dtype):
        return function(self.array, *args)

    def indexable(self):
        return _HostRows(self.array)

    def entry_variance(self) -> float:
        return _HostRows(self.array).entry_variance()


class DeviceSource(RowSource):
    """A host source whose blocks are sent to a device, one ahead of the computation, keeping
    what the host source knows (length, dtype, passes, random access); sparse rows are made
    dense block by block (checked first, :meth:`RowSource.require_dense`)."""

    def __init__(self, host: RowSource, placement: Placement):
        self.host = host
        self.placement = placement
        self.origin = host.origin
        self.n_features = host.n_features
        self.dtype = host.dtype
        self.reiterable = host.reiterable
        self.random_access = host.random_access
        self.sparse = False
        self.resident = False

    @property
    def n_samples(self):  # type: ignore[override]
        return self.host.n_samples

    def _send(self, block):
        if hasattr(block, "toarray"):
            self.host.require_dense(block.shape[0], "rows sent to the device")
            block = block.toarray()
        return self.placement.asarray(np.ascontiguousarray(block))

    def head(self, n_rows=DEFAULT_BLOCK_ROWS):
        return self._send(self.host.head(n_rows))

    def blocks(self, block_rows=DEFAULT_BLOCK_ROWS) -> Iterator:
        if block_rows is not None:
            block_rows = max(int(block_rows), DEVICE_BLOCK_ROWS)
        blocks = self.host.blocks(block_rows)
        if not self.placement.is_cuda:
            for start, block in blocks:
                yield start, self._send(block)
            return
        yield from _prefetched(blocks, self.placement, self.host)

    def take(self, indices):
        return self._send(self.host.take(indices))

    def sample_rows(self, n_rows, rng):
        return self._send(self.host.sample_rows(n_rows, rng))

    def in_memory(self, max_rows=None, rng=None, *, purpose=""):
        rows = self.host.in_memory(max_rows, rng, purpose=purpose)
        return self._send(rows)

    def map_rows(self, function, *args, n_outputs, dtype):
        return self.host.map_rows(
            _computed_on, function, self.placement, *args, n_outputs=n_outputs, dtype=dtype
        )

    def indexable(self):
        return self.host.indexable()

    def entry_variance(self) -> float:
        return self.host.entry_variance()

    def require_passes(self, n_passes, why):
        self.host.require_passes(n_passes, why)

    def dense_bytes(self, n_rows):
        return self.host.dense_bytes(n_rows)


def _computed_on(rows, function, placement, *args):
    """``function`` of host rows computed on ``placement``'s device, returned to the host (what
    a host source's ``map_rows`` maps over its rows or dask chunks); sparse rows made dense."""
    out = function(placement.asarray(rows), *args)
    return to_host(out)


def _prefetched(blocks, placement: Placement, host: RowSource):
    """Yield ``(start, device block)`` with the next block's copy already queued on a side
    stream (pinned host memory, ``non_blocking``), so the copy overlaps the compute on the
    current block; the compute stream waits for a block's copy before using it."""
    import torch

    copy_stream = torch.cuda.Stream(device=placement.device)
    dtype = placement.dtype(host.dtype)

    def queue(block):
        if hasattr(block, "toarray"):
            host.require_dense(block.shape[0], "rows sent to the device")
            block = block.toarray()
        pinned = torch.from_numpy(np.ascontiguousarray(block)).pin_memory()
        with torch.cuda.stream(copy_stream):
            device_block = pinned.to(device=placement.device, dtype=dtype, non_blocking=True)
            event = torch.cuda.Event()
            event.record(copy_stream)
        return device_block, event, pinned

    it = iter(blocks)
    current = next(it, None)
    if current is None:
        return
    pending = (current[0], *queue(current[1]))
    for start, block in it:
        following = (start, *queue(block))
        first, device_block, event, _pinned = pending
        _hand_over(device_block, event, placement)
        yield first, device_block
        pending = following
    first, device_block, event, _pinned = pending
    _hand_over(device_block, event, placement)
    yield first, device_block


def _hand_over(device_block, event, placement):
    """Make the compute stream wait for the block's copy, and tell the caching allocator that
    the compute stream uses the block (it was allocated on the copy stream)."""
    import torch

    compute = torch.cuda.current_stream(placement.device)
    compute.wait_event(event)
    device_block.record_stream(compute)
