"""Mergeable per-block statistics, and the pure functions that turn each into a KPCA model.

Each one-pass estimator is ``source.reduce(statistic, merge, ...)`` followed by a solver: the
statistic of a set of row blocks is a small object with ``update`` / ``merge`` (the shape of
``IncrementalPCA``'s moments and of DataSketches' sketches), so the same code serves an array,
a stream of blocks, ``partial_fit`` and a dask tree reduction (:mod:`fastkpca.source`).

=============================== ============================================== ================
module                          statistic of a set of rows -> solver           merge
=============================== ============================================== ================
:mod:`.feature_moments`         count, feature sum, shifted feature Gram       sums (exact)
(``RandomFeatureKPCA``)         ``sum (z - c)(z - c)^T`` -> ``rf_kpca_exact``
:mod:`.feature_countsketch`     CountSketch ``S Z`` hashed by global row       sums (exact)
(``solver="countsketch"``)      index, ``S 1``, feature sum; then the
                                Rayleigh-Ritz scatter of ``Z V``
                                -> ``rf_kpca_countsketch``
:mod:`.kernel_moments`          count, mean, centered scatter of ``k(L, x)``   Chan et al.'s
(``NystromKPCA``)               -> ``nystrom_kpca``                            pairwise update
:mod:`.feature_sketch`          Frequent Directions sketch of the features,    FD merge (the
(``StreamingKPCA``)             feature sum, count -> ``skpca_eigen``          bound holds)
=============================== ============================================== ================
"""
