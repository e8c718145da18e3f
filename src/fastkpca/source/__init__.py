"""Where rows come from: one way in for data, whatever the input.

Every estimator reads its rows through :func:`as_source`, which turns any accepted input into a
:class:`RowSource`: an :class:`ArraySource` (numpy, memory-mapped ``.npy``, scipy.sparse,
pandas), a :class:`BlockSource` (an iterable of row blocks, a reader of
:mod:`fastkpca.source.files`) or a ``DaskSource`` (:mod:`.dask`, per-chunk statistics merged up
a tree).  A source gives the first rows (:meth:`RowSource.head`), validated blocks per pass
(:meth:`RowSource.blocks`), rows by index (:meth:`RowSource.take`), a uniform sample
(:meth:`RowSource.sample_rows`), and reduces per-block statistics with an associative merge
(:meth:`RowSource.reduce`, the ``chunk -> combine`` shape of ``dask.array.reduction``).

This is the one edge where inputs are validated and converted: integer, boolean, float16 and
bfloat16 rows become float64; tensors that require grad are detached; arrays of another
namespace stay on their device; host rows with a ``device`` are sent there block by block; a
device fastkpca cannot compute on is one ``ValueError``.  ``origin`` is the placement of the
data as given, which the fitted attributes follow.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

from ..execution.arrays import Placement, is_dask_array, is_namespace_array, placement_of, to_host
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
        With ``reset=True`` its ``n_features_in_`` (and ``feature_names_in_``), the placement of
        X (:data:`INPUT_PLACEMENT`) and the source (:data:`TRAINING_SOURCE`) are set from X;
        with ``reset=False`` X must match them.
    reset : bool
        Whether X is training data or new data.
    accept_sparse : bool
        Whether scipy.sparse rows (CSR) are accepted (made dense block by block on a device).
    name : str
        How errors name the input.
    placement : fastkpca.execution.arrays.Placement, optional
        Where the blocks are computed (default: where X lives): a
        :class:`~fastkpca.source.device.TensorSource` or a
        :class:`~fastkpca.source.device.DeviceSource` on a device.

    Returns
    -------
    RowSource
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
