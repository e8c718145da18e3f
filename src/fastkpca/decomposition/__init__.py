"""The kernel PCA estimators, one module per method, thin wrappers over numerical functions.

kernel -> (feature map | landmarks | reduced set | sparsified Gram) -> eigensolver -> estimator
"""

from __future__ import annotations

import importlib

# public name -> submodule; submodules are imported on first use
_LAZY = {
    "ExactKPCA": "exact",
    "KernelPCA": "kernel_pca",
    "NystromKPCA": "nystrom",
    "RandomFeatureKPCA": "random_features",
    "StreamingKPCA": "streaming",
    "ReducedSetKPCA": "reduced_set",
    "SparsifiedKPCA": "sparsified",
    "compress_expansion": "compress",
    "CompressedKPCA": "compress",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
