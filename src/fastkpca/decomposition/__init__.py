"""The kernel PCA estimators, one module per method, thin wrappers over numerical functions.

kernel -> (feature map | landmarks | reduced set | sparsified Gram) -> eigensolver -> estimator

Besides the estimators this module holds the two registries other modules look estimators up in,
without importing any estimator module until one is asked for:

- :data:`METHODS`, the ``fastkpca fit --method`` names, with :func:`estimator_class` and
  :func:`available_methods` (used by the command line and the demo);
- :data:`SAVEABLE`, the whitelist of classes a model file may store (used by
  :mod:`fastkpca.persistence`); each one declares its fitted attributes in
  :data:`fastkpca._model_schema.FITTED_SCHEMAS`, against which a model file is checked at load.
"""

from __future__ import annotations

import importlib

__all__ = [
    "AutoKPCA",
    "CompressedKPCA",
    "ExactKPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
    "StreamingKPCA",
    "compress_expansion",
    "METHODS",
    "SAVEABLE",
    "available_methods",
    "estimator_class",
]

# public name -> submodule; submodules are imported on first use
_LAZY = {
    "AutoKPCA": "auto",
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

#: ``--method`` names (the command line, the demo) -> estimator class names in this package.
METHODS = {
    "exact": "ExactKPCA",
    "nystrom": "NystromKPCA",
    "random-features": "RandomFeatureKPCA",
    "rf": "RandomFeatureKPCA",
    "streaming": "StreamingKPCA",
    "reduced-set": "ReducedSetKPCA",
    "sparsified": "SparsifiedKPCA",
    "auto": "AutoKPCA",
}

#: Aliases in :data:`METHODS` that :func:`available_methods` leaves out.
_METHOD_ALIASES = {"rf"}

#: Names in :data:`METHODS` that choose among the others (``auto``): left out of
#: :func:`available_methods`, whose callers run or compare every method once.
_METHOD_CHOOSERS = {"auto"}

#: Estimator classes outside this package that model files may store (the random-feature
#: transformers): class name -> defining module.
_SAVEABLE_ELSEWHERE = {
    "RandomFourierFeatures": "fastkpca.transformers",
    "OrthogonalRandomFeatures": "fastkpca.transformers",
    "FastfoodFeatures": "fastkpca.transformers",
    "TensorSketchFeatures": "fastkpca.transformers",
}

#: The whitelist of model files: class name -> the module that defines it.  A model file may
#: store an object only when its class is exactly the class registered here under its name (not a
#: subclass, not a same-named class elsewhere); loading imports nothing outside these modules.
SAVEABLE = {
    **{name: f"{__name__}.{mod}" for name, mod in _LAZY.items() if name[0].isupper()},
    **_SAVEABLE_ELSEWHERE,
}


def estimator_class(method: str) -> type:
    """The estimator class for a ``--method`` name (a key of :data:`METHODS`).

    Raises
    ------
    ValueError
        An unknown method name, or a method whose module this installation lacks.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    name = METHODS[method]
    module = f"{__name__}.{_LAZY[name]}"
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module or module.startswith(exc.name + ".")):
            raise ValueError(
                f"method {method!r} ({name}) is not available in this version of "
                f"fastkpca ({module} is missing)"
            ) from None
        raise
    return getattr(mod, name)


def available_methods() -> dict:
    """``--method`` name -> class, for every method whose module imports (aliases left out)."""
    out = {}
    for method in METHODS:
        if method in _METHOD_ALIASES or method in _METHOD_CHOOSERS:
            continue
        try:
            out[method] = estimator_class(method)
        except Exception:  # a missing or broken module: that method is not available
            continue
    return out


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
