"""Where rows come from: one way in for data, whatever the input.

Every estimator reads its training rows (and ``transform`` its new rows) through
:func:`as_source`, which turns any accepted input into a :class:`RowSource`:

=========================================== ==================== =================================
input                                       source               reduction
=========================================== ==================== =================================
numpy array, memory-mapped ``.npy``,        :class:`ArraySource` the statistic of all blocks, in
scipy.sparse matrix, pandas DataFrame                            one sequential loop
iterable of row blocks (a list of arrays,   :class:`BlockSource` the same loop over the blocks as
a generator, a reader of                                         they arrive
:mod:`fastkpca.source.files`)
``dask.array.Array``                        ``DaskSource``       per-chunk statistics on the
                                            (:mod:`.dask`)       workers, merged up a tree
=========================================== ==================== =================================

A source knows ``n_features``, its ``dtype`` (float32 stays float32, anything else becomes
float64), whether it can be read more than once (``reiterable``) and whether rows can be taken by
index (``random_access``); it gives the first rows (:meth:`RowSource.head`, from which the kernel
heuristics and the random features are drawn), validated row blocks per pass
(:meth:`RowSource.blocks`), rows by index (:meth:`RowSource.take`), a uniform sample of rows
(:meth:`RowSource.sample_rows`) and reduces per-block statistics with an associative merge
(:meth:`RowSource.reduce`, the ``chunk -> combine`` shape of ``dask.array.reduction``).
Validation (NaN / infinity, width, dtype, sparse acceptance, the block or rows named in the
error) happens here and nowhere else.

The statistics themselves (feature moments, kernel moments, Frequent Directions sketches,
CountSketches) live in :mod:`fastkpca.statistics`, next to the solvers they feed.
"""

from __future__ import annotations

from ._base import RowSource, uniform_indices
from .memory import ArraySource, BlockSource, ReservoirSampler, check_block

__all__ = [
    "as_source",
    "is_dask_array",
    "is_block_iterable",
    "RowSource",
    "ArraySource",
    "BlockSource",
    "ReservoirSampler",
    "check_block",
    "uniform_indices",
]


def is_dask_array(X) -> bool:
    """True for a ``dask.array.Array``, told from its type's module so dask is never imported."""
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "dask")


def is_block_iterable(X) -> bool:
    """True for an iterable of row blocks (generator, reader, list of 2-D arrays), not an array."""
    import numpy as np
    import scipy.sparse as sp

    if isinstance(X, np.ndarray) or sp.issparse(X) or hasattr(X, "__array__"):
        return False
    if is_dask_array(X):
        return False
    if isinstance(X, list | tuple):
        return len(X) > 0 and all(
            (isinstance(b, np.ndarray) and b.ndim == 2) or sp.issparse(b) for b in X
        )
    from collections.abc import Iterable

    return isinstance(X, Iterable) and not isinstance(X, str | bytes | dict)


def as_source(
    X, *, estimator=None, reset=True, accept_sparse=False, name="X", placement=None
) -> RowSource:
    """The :class:`RowSource` of any accepted input, validated.

    Parameters
    ----------
    X : array-like, scipy.sparse matrix, iterable of row blocks or dask array
        The rows.
    estimator : scikit-learn estimator, optional
        With ``reset=True`` its ``n_features_in_`` (and ``feature_names_in_`` for a DataFrame) are
        set from X, as ``sklearn.utils.validation.validate_data`` does; with ``reset=False`` X must
        match them (the error names both widths).
    reset : bool
        Whether X is training data (sets the estimator's input attributes) or new data.
    accept_sparse : bool
        Whether scipy.sparse rows (CSR) are accepted; otherwise they raise ValueError.
    name : str
        How errors name the input.
    placement : fastkpca.execution.arrays.Placement, optional
        Where the blocks are computed on (default: where X lives).  A tensor on its device gives
        a :class:`~fastkpca.source.device.TensorSource`; host rows placed on a device give a
        :class:`~fastkpca.source.device.DeviceSource` over their host source; a tensor placed on
        the host is copied there.

    Returns
    -------
    RowSource
        An :class:`ArraySource`, a :class:`BlockSource`, a ``DaskSource``, or one of them sent
        to a device.
    """
    if isinstance(X, RowSource):
        return X
    from ..execution.arrays import is_host_array, placement_of, to_host

    if not is_host_array(X):
        own = placement_of(X)
        if placement is None or not placement.host:
            from .device import TensorSource

            if placement is not None and placement != own:
                X = placement.asarray(X)
                own = placement
            return TensorSource(X, placement=own, estimator=estimator, reset=reset, name=name)
        X = to_host(X)
    if placement is not None and not placement.host:
        from .device import DeviceSource

        host = as_source(
            X, estimator=estimator, reset=reset, accept_sparse=accept_sparse, name=name
        )
        return DeviceSource(host, placement)
    if is_dask_array(X):
        from .dask import DaskSource

        return DaskSource(
            X, estimator=estimator, reset=reset, accept_sparse=accept_sparse, name=name
        )
    if is_block_iterable(X):
        return BlockSource(
            X, estimator=estimator, reset=reset, accept_sparse=accept_sparse, name=name
        )
    return ArraySource(X, estimator=estimator, reset=reset, accept_sparse=accept_sparse, name=name)
