"""Dask arrays: fit by a tree reduction of per-block statistics, transform lazily.

Every estimator accepts a ``dask.array.Array`` wherever it accepts an array: the data path of
:mod:`fastkpca.source` turns it into a ``DaskSource`` (:mod:`fastkpca.source.dask`), whose
``reduce`` computes the estimator's statistic (:mod:`fastkpca.statistics`) once per row chunk on
the workers and merges the results up a tree, and whose ``map_rows`` makes ``transform`` a lazy
``map_blocks``.  The one-pass estimators (``RandomFeatureKPCA``, ``NystromKPCA``,
``StreamingKPCA``) never gather the rows; the others need them in memory and compute the array
(``ExactKPCA`` refuses one whose n x n Gram would not fit, see
:func:`fastkpca.decomposition.exact.check_exact_fits`).

This module gathers the public dask-side helpers; importing it imports dask, which
``import fastkpca`` never does.
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
