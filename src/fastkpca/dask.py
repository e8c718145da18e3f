"""Dask arrays: fit by a tree reduction of per-block statistics, transform lazily.

Every estimator accepts a ``dask.array.Array`` wherever it accepts an array: a ``DaskSource``
(:mod:`fastkpca.source.dask`) reduces the estimator's statistic per row chunk on the workers
and merges up a tree, and makes ``transform`` a lazy ``map_blocks``.  The one-pass estimators
never gather the rows; the others compute the array (``ExactKPCA`` refuses one whose Gram would
not fit, :func:`fastkpca.decomposition.exact.check_exact_fits`).  Importing this module imports
dask, which ``import fastkpca`` never does.
"""

from __future__ import annotations

import dask.array  # noqa: F401  (this module is the dask side: it fails at import without dask)

from .decomposition.exact import EXACT_MEMORY_FRACTION, check_exact_fits
from .decomposition.nystrom import LANDMARK_SUBSAMPLE
from .source.dask import DEFAULT_SPLIT_EVERY, DaskSource, read_npy, tree_reduce

__all__ = [
    "DaskSource",
    "read_npy",
    "tree_reduce",
    "check_exact_fits",
    "LANDMARK_SUBSAMPLE",
    "EXACT_MEMORY_FRACTION",
    "DEFAULT_SPLIT_EVERY",
]
