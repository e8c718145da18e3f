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

A source knows ``n_features``, its ``dtype``, whether it can be read more than once
(``reiterable``) and whether rows can be taken by index (``random_access``); it gives the first
rows (:meth:`RowSource.head`), validated row blocks per pass (:meth:`RowSource.blocks`), rows by
index (:meth:`RowSource.take`), a uniform sample (:meth:`RowSource.sample_rows`) and reduces
per-block statistics with an associative merge (:meth:`RowSource.reduce`, the ``chunk ->
combine`` shape of ``dask.array.reduction``).  Validation happens here and nowhere else.

This is the edge where inputs are converted once (:func:`as_source`, :func:`check_block`):
integer, boolean, float16 and bfloat16 rows become float64 (float32 stays float32); PyTorch
tensors that require grad are detached; arrays of another namespace stay in it, on their device
(a list or iterator of them is a :class:`BlockSource` there); host rows with a ``device`` are
sent there block by block; a device fastkpca cannot compute on is one ``ValueError``.  Every
source knows the placement of the data as given (``origin``), which the estimators' fitted
attributes follow.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

from ..execution.arrays import (
    Placement,
    is_dask_array,
    is_namespace_array,
    placement_of,
    to_host,
)
from ._base import RowSource, uniform_indices
from .dask import DaskSource
from .device import DeviceSource, TensorSource
from .memory import ArraySource, BlockSource, ReservoirSampler, check_block

__all__ = [
    "as_source",
    "is_dask_array",
    "is_block_iterable",
    "INPUT_PLACEMENT",
    "TRAINING_SOURCE",
    "RowSource",
    "ArraySource",
    "BlockSource",
    "DaskSource",
    "DeviceSource",
    "TensorSource",
    "ReservoirSampler",
    "check_block",
    "uniform_indices",
]

#: The private estimator attribute :func:`as_source` sets, with ``n_features_in_``, from the
#: training data: the placement of the data as given (the source's ``origin``).
INPUT_PLACEMENT = "_input_placement"
#: ... and the training rows' source itself, for the end of a fit that reads its first rows
#: again; the estimator's outermost call removes it.
TRAINING_SOURCE = "_training_source"


def _is_block(b) -> bool:
    if sp.issparse(b):
        return True
    return (isinstance(b, np.ndarray) or is_namespace_array(b)) and b.ndim == 2


def is_block_iterable(X) -> bool:
    """True for an iterable of row blocks (generator, reader, list of 2-D arrays of any
    namespace or sparse matrices), not an array."""
    if isinstance(X, np.ndarray) or sp.issparse(X) or is_namespace_array(X) or is_dask_array(X):
        return False
    if isinstance(X, list | tuple):
        return len(X) > 0 and all(_is_block(b) for b in X)
    if hasattr(X, "__array__"):
        return False
    return isinstance(X, Iterable) and not isinstance(X, str | bytes | dict)


def as_source(
    X, *, estimator=None, reset=True, accept_sparse=False, name="X", placement=None
) -> RowSource:
    """The :class:`RowSource` of any accepted input, validated.

    Parameters
    ----------
    X : array-like, scipy.sparse matrix, array of another namespace, iterable of row blocks or
        dask array
        The rows.
    estimator : scikit-learn estimator, optional
        With ``reset=True`` its ``n_features_in_`` (and ``feature_names_in_`` for a DataFrame) are
        set from X, as ``sklearn.utils.validation.validate_data`` does, the placement of X as
        given (:data:`INPUT_PLACEMENT`) and the source (:data:`TRAINING_SOURCE`); with
        ``reset=False`` X must match them (the error names both widths).
    reset : bool
        Whether X is training data (sets the estimator's input attributes) or new data.
    accept_sparse : bool
        Whether scipy.sparse rows (CSR) are accepted; otherwise they raise ValueError.  Sparse
        rows sent to a device are accepted by every method: they are made dense block by block.
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
        An :class:`ArraySource`, a :class:`BlockSource`, a ``DaskSource``, a ``TensorSource``,
        or a host source sent to a device.
    """
    source = (
        X
        if isinstance(X, RowSource)
        else _new_source(X, estimator, reset, accept_sparse, name, placement)
    )
    if estimator is not None and reset:
        setattr(estimator, INPUT_PLACEMENT, source.origin)
        setattr(estimator, TRAINING_SOURCE, source)
    return source


def _new_source(X, estimator, reset, accept_sparse, name, placement: Placement | None) -> RowSource:
    options = dict(estimator=estimator, reset=reset, name=name)
    origin = None
    source: RowSource
    if is_namespace_array(X):
        origin = placement_of(X)  # ValueError for a device fastkpca cannot compute on
        target = origin if placement is None else placement
        if not target.host:
            X = X if target == origin else target.asarray(X)
            source = TensorSource(X, placement=target, **options)
            source.origin = origin
            return source
        X = to_host(X)
    device = None if placement is None or placement.host else placement
    options["accept_sparse"] = accept_sparse or device is not None  # a device: dense blocks
    if is_dask_array(X):
        source = DaskSource(X, **options)
    elif is_block_iterable(X):
        source = BlockSource(X, placement=placement, **options)
    else:
        source = ArraySource(X, **options)
    if origin is not None:
        source.origin = origin
    if device is not None and source.placement.host:
        source = DeviceSource(source, device)
    return source
