"""fastkpca: kernel PCA for data far larger than exact kernel PCA can hold.

Estimators (scikit-learn compatible): :class:`AutoKPCA` (chooses among the others),
:class:`ExactKPCA`, :class:`NystromKPCA`,
:class:`RandomFeatureKPCA`, :class:`StreamingKPCA`, :class:`ReducedSetKPCA`,
:class:`SparsifiedKPCA`.  Random feature maps as scikit-learn transformers
(:mod:`fastkpca.transformers`): :class:`RandomFourierFeatures`, :class:`OrthogonalRandomFeatures`,
:class:`FastfoodFeatures`, :class:`TensorSketchFeatures`.  Building blocks:
:mod:`fastkpca.kernels`, :mod:`fastkpca.features`, :mod:`fastkpca.sketch`,
:mod:`fastkpca.solvers`, :mod:`fastkpca.metrics`.

``fastkpca.show_versions()`` prints the versions of Python, fastkpca, its dependencies and the
BLAS in use, for bug reports.

Names and submodules are imported lazily, on first attribute access (``fastkpca.metrics``
works after a plain ``import fastkpca``), so ``import fastkpca`` stays cheap and never imports
dask.
"""

from __future__ import annotations

import importlib

# The one place the version is written: pyproject.toml reads it (setuptools dynamic version).
__version__ = "0.2.0"

# public name -> module that defines it
_LAZY = {
    "AutoKPCA": "fastkpca.decomposition",
    "ExactKPCA": "fastkpca.decomposition",
    "KernelPCA": "fastkpca.decomposition",
    "NystromKPCA": "fastkpca.decomposition",
    "RandomFeatureKPCA": "fastkpca.decomposition",
    "StreamingKPCA": "fastkpca.decomposition",
    "ReducedSetKPCA": "fastkpca.decomposition",
    "SparsifiedKPCA": "fastkpca.decomposition",
    "compress_expansion": "fastkpca.decomposition",
    "CompressedKPCA": "fastkpca.decomposition",
    "RandomFourierFeatures": "fastkpca.transformers",
    "OrthogonalRandomFeatures": "fastkpca.transformers",
    "FastfoodFeatures": "fastkpca.transformers",
    "TensorSketchFeatures": "fastkpca.transformers",
    "load": "fastkpca.persistence",
    "make_kernel": "fastkpca.kernels",
    "show_versions": "fastkpca._show_versions",
}

#: Submodules imported on first access as attributes of the package.
_SUBMODULES = (
    "datasets",
    "decomposition",
    "features",
    "io",
    "kernels",
    "metrics",
    "persistence",
    "sketch",
    "solvers",
    "source",
    "statistics",
    "transformers",
)

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"fastkpca.{name}")
    raise AttributeError(f"module 'fastkpca' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
