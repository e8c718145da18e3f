"""What a fitted model holds: the declared fitted state of every class a model file may store.

A model file is checked against these declarations when it is loaded
(:func:`fastkpca.persistence.load`), so that an edited file whose checksums were recomputed still
cannot give a model that ``transform`` would trip over or run with quietly:

- :data:`FITTED_SCHEMAS`: for each saveable class, every fitted attribute ``fit`` may set, with
  its kind, whether every fitted model has it, and the checks that tie attributes together.
  Array shapes use dimension names: an integer attribute's name (``n_components_``) stands for
  its value, any other name for the size its first use has; later uses must agree.
- :data:`STATE_SCHEMAS`: the same for the ``to_state()`` dict of each registered state class.
- :func:`check_params`: the constructor parameters, through the estimator's own checks.

Each check raises ``ValueError`` naming the attribute (or parameter) and what is wrong.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._state import state_class_name
from .execution import require_memory
from .kernels import KERNELS, Polynomial

__all__ = [
    "Array",
    "FITTED_SCHEMAS",
    "Schema",
    "STATE_SCHEMAS",
    "check_fitted",
    "check_params",
    "check_state",
    "legacy_fitted_names",
    "upgrade_fitted",
    "upgrade_params",
]

#: The largest integer a model file may hold where a count or a size is expected: far above any
#: real size or count, and every integer up to it is exact as a float (as JSON readers hold it).
MAX_INT = 2**53

# --- kinds of values -------------------------------------------------------------------------


def _describe(value) -> str:
    """A short description of a value for an error message (never the value of a big one)."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    if sp.issparse(value):
        return f"a sparse {value.dtype} matrix of shape {value.shape}"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if value is None or isinstance(value, bool | numbers.Number):
        return repr(value)
    return f"a {type(value).__name__}"


#: Entries checked for finiteness at a time: the temporary is at most this many booleans.
_FINITE_CHUNK = 2**20


def _all_finite(a: np.ndarray, finite) -> bool:
    """No NaN (and, unless ``finite == "no_nan"``, no infinity) in ``a``, checked in chunks."""
    flat = a.reshape(-1, order="A")  # a view of a C- or Fortran-ordered array
    test = np.isnan if finite == "no_nan" else (lambda x: ~np.isfinite(x))
    return not any(
        test(flat[i : i + _FINITE_CHUNK]).any() for i in range(0, flat.size, _FINITE_CHUNK)
    )


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


class _Context:
    """The dimensions bound so far (name -> size, and what gave it) and the values checked."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values
        self.dims: dict[str, int] = {}
        self.sources: dict[str, str] = {}

    def bind(self, name: str, size: int, source: str) -> None:
        """Bind dimension ``name`` to ``size`` (``source`` says what has it), or check it
        against its earlier binding."""
        if name not in self.dims:
            self.dims[name] = int(size)
            self.sources[name] = source
        elif self.dims[name] != size:
            raise ValueError(f"{source}, but {self.sources[name]}")


@dataclass(frozen=True)
class Int:
    """An integer in ``[low, high]`` (a numpy integer scalar too; not a bool)."""

    low: int = 0
    high: int = MAX_INT
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if not _is_int(value):
            raise ValueError(f"{where} must be an integer, got {_describe(value)}")
        if not self.low <= value <= self.high:
            raise ValueError(f"{where} = {value} is out of range [{self.low}, {self.high}]")


@dataclass(frozen=True)
class Real:
    """A real number, finite unless ``nan`` / ``inf`` allow those, at least ``low``."""

    low: float | None = None
    nan: bool = False
    inf: bool = False
    none: bool = False
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if value is None and self.none:
            return
        if not _is_real(value):
            raise ValueError(f"{where} must be a number, got {_describe(value)}")
        if math.isnan(value):
            if not self.nan:
                raise ValueError(f"{where} is NaN")
            return
        if math.isinf(value) and not self.inf:
            raise ValueError(f"{where} is {value}, not a finite number")
        if self.low is not None and value < self.low:
            raise ValueError(f"{where} = {value} is below {self.low}")


@dataclass(frozen=True)
class OneOf:
    """One of the given values (strings)."""

    values: tuple
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if not isinstance(value, str) or value not in self.values:
            raise ValueError(f"{where} must be one of {self.values}, got {_describe(value)}")


#: dtype classes of arrays: name -> the dtypes allowed.
_DTYPES = {
    "float": (np.dtype(np.float32), np.dtype(np.float64)),
    "int": (np.dtype(np.int32), np.dtype(np.int64)),
}


@dataclass(frozen=True)
class Array:
    """An array of the given shape (dimension names or ints) and dtype class.

    ``dtype``: a key of :data:`_DTYPES`, or ``"str"`` (an object array of strings, as
    scikit-learn's ``feature_names_in_``).  ``finite``: no NaN or infinity (``"no_nan"``:
    infinities allowed).  ``sparse``: a scipy.sparse CSR / CSC matrix is allowed too.
    ``none``: None is allowed.
    """

    shape: tuple
    dtype: str = "float"
    finite: bool | str = True
    sparse: bool = False
    none: bool = False
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if value is None and self.none:
            return
        if sp.issparse(value) and self.sparse:
            data = value.data
        elif isinstance(value, np.ndarray):
            data = value
        else:
            kind = "an array" + (" or a sparse matrix" if self.sparse else "")
            raise ValueError(f"{where} must be {kind}, got {_describe(value)}")
        self._check_dtype(value, data, where)
        if value.ndim != len(self.shape):
            raise ValueError(
                f"{where} has shape {value.shape}, expected {len(self.shape)} dimensions "
                f"({', '.join(map(str, self.shape))})"
            )
        for dim, size in zip(self.shape, value.shape, strict=True):
            if isinstance(dim, int):
                if size != dim:
                    raise ValueError(f"{where} has shape {value.shape}, expected {self.shape}")
            else:
                ctx.bind(dim, size, f"{where} has shape {value.shape} ({dim} = {size})")
        if self.finite and data.dtype.kind == "f" and not _all_finite(data, self.finite):
            raise ValueError(f"{where} holds NaN{'' if self.finite == 'no_nan' else ' or inf'}")

    def _check_dtype(self, value, data, where) -> None:
        if self.dtype == "str":
            ok = data.dtype.kind == "U" or (
                data.dtype == object and all(isinstance(v, str) for v in data.flat)
            )
        else:
            ok = data.dtype in _DTYPES[self.dtype]
        if not ok:
            allowed = "strings" if self.dtype == "str" else "/".join(map(str, _DTYPES[self.dtype]))
            raise ValueError(f"{where} has dtype {data.dtype}, expected {allowed}")
        if sp.issparse(value):
            if value.format not in ("csr", "csc"):
                raise ValueError(f"{where} is a sparse {value.format} matrix, expected csr or csc")
            # indices out of range would make the compiled sparse kernels read out of bounds
            try:
                value.check_format(full_check=True)
            except ValueError as exc:
                raise ValueError(f"{where} is not a valid sparse matrix ({exc})") from None


@dataclass(frozen=True)
class KernelValue:
    """A fastkpca kernel (:data:`fastkpca.kernels.KERNELS`); None only when ``none``."""

    none: bool = False
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if value is None and self.none:
            return
        if type(value) not in KERNELS.values():
            raise ValueError(f"{where} must be a fastkpca kernel, got {_describe(value)}")


@dataclass(frozen=True)
class State:
    """An instance of one of the registered state ``classes`` (qualified names), whose integer
    attributes named in ``dims`` equal those dimensions."""

    classes: tuple
    dims: tuple = ()
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        name = state_class_name(value)
        if name not in self.classes:
            short = ", ".join(c.rsplit(".", 1)[1] for c in self.classes)
            raise ValueError(f"{where} must be a {short}, got {_describe(value)}")
        for attribute, dim in self.dims:
            size = getattr(value, attribute)
            ctx.bind(dim, size, f"{where} has {attribute} = {size} ({dim})")


@dataclass(frozen=True)
class SizeHistory:
    """The sizes tried by a fit by tolerance: a list of (size >= 1, estimated error) pairs."""

    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if not isinstance(value, list):
            raise ValueError(f"{where} must be a list, got {_describe(value)}")
        for i, pair in enumerate(value):
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise ValueError(f"{where}[{i}] must be a (size, error) pair")
            Int(low=1).check(pair[0], f"{where}[{i}][0]", ctx)
            Real(nan=True, inf=True).check(pair[1], f"{where}[{i}][1]", ctx)


@dataclass(frozen=True)
class IntList:
    """A list of ``length`` integers in [low, high]."""

    length: int
    low: int = 0
    high: int = MAX_INT
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if not isinstance(value, list | tuple) or len(value) != self.length:
            raise ValueError(f"{where} must be a list of {self.length} integers")
        for i, v in enumerate(value):
            Int(self.low, self.high).check(v, f"{where}[{i}]", ctx)


@dataclass(frozen=True)
class Estimator:
    """A fitted estimator of one of the given ``classes`` (class names), nested in a model (its
    own parameters and fitted attributes were checked against its declaration when it was
    decoded, and when it was encoded)."""

    classes: tuple
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        name = type(value).__name__
        if name not in self.classes or not hasattr(value, "get_params"):
            raise ValueError(f"{where} must be one of {self.classes}, got {_describe(value)}")
        if "n_features_in_" not in vars(value):
            raise ValueError(f"{where} is not a fitted {name}")
        ctx.bind("n_features_in_", value.n_features_in_, f"{where} has n_features_in_")


#: Keys every entry of AutoKPCA's ``report_`` has.
_REPORT_KEYS = ("method", "status", "why")


@dataclass(frozen=True)
class Report:
    """A list of at most ``max_entries`` dicts of plain values (the candidates AutoKPCA
    considered), each with string ``method``, ``status`` and ``why``."""

    max_entries: int = 1000
    optional: bool = False

    def check(self, value, where, ctx) -> None:
        if not isinstance(value, list) or len(value) > self.max_entries:
            raise ValueError(f"{where} must be a list of at most {self.max_entries} entries")
        for i, entry in enumerate(value):
            if not isinstance(entry, dict) or not all(isinstance(k, str) for k in entry):
                raise ValueError(f"{where}[{i}] must be a dict with string keys")
            for key in _REPORT_KEYS:
                if not isinstance(entry.get(key), str):
                    raise ValueError(f"{where}[{i}][{key!r}] must be a string")


@dataclass(frozen=True)
class Schema:
    """The declared attributes of a class, and checks across them.

    ``attributes``: name -> kind (``Int``, ``Real``, ``OneOf``, ``Array``, ``KernelValue``,
    ``State``, ...); one with ``optional=True`` may be absent.  ``together``: groups of
    attributes that are present together or not at all.  ``checks``: functions
    ``check(values, dims)`` run after every attribute passed, raising ``ValueError`` naming the
    attribute that disagrees.
    """

    attributes: Mapping[str, Any]
    together: tuple = ()
    checks: tuple[Callable[[Mapping[str, Any], dict], None], ...] = field(default=())


def _check_against(
    schema: Schema, values: Mapping[str, Any], what: Callable[[str], str]
) -> dict[str, int]:
    """Check ``values`` against ``schema``; the bound dimensions.  ``what(name)`` -> label."""
    unknown = sorted(set(values) - set(schema.attributes))
    if unknown:
        raise ValueError(f"{what(unknown[0])} is not declared")
    missing = [n for n, s in schema.attributes.items() if not s.optional and n not in values]
    if missing:
        raise ValueError(f"{what(missing[0])} is missing")
    for group in schema.together:
        present = [n for n in group if n in values]
        if present and len(present) != len(group):
            absent = next(n for n in group if n not in values)
            raise ValueError(f"{what(absent)} is missing (it goes with {present[0]!r})")
    ctx = _Context(values)
    # integer attributes first: they bind the dimensions the arrays are checked against
    ordered = sorted(values, key=lambda n: not isinstance(schema.attributes[n], Int))
    for name in ordered:
        schema.attributes[name].check(values[name], what(name), ctx)
        if isinstance(schema.attributes[name], Int):
            ctx.bind(name, values[name], f"{what(name)} is {values[name]}")
    for check in schema.checks:
        check(values, ctx.dims)
    return ctx.dims


def _fitted(name: str) -> str:
    return f"fitted attribute {name!r}"


# --- checks across attributes ----------------------------------------------------------------


#: AutoKPCA's ``method_`` -> the class of its ``estimator_``.
_AUTO_METHODS = {
    "exact": "ExactKPCA",
    "nystrom": "NystromKPCA",
    "random-features": "RandomFeatureKPCA",
    "streaming": "StreamingKPCA",
}


def _auto_consistent(values, dims) -> None:
    """AutoKPCA: the estimator is of the method named, and the report chose that method once."""
    method, inner = values["method_"], values["estimator_"]
    if type(inner).__name__ != _AUTO_METHODS[method]:
        raise ValueError(
            f"{_fitted('estimator_')} is a {type(inner).__name__}, but {_fitted('method_')} "
            f"is {method!r} ({_AUTO_METHODS[method]})"
        )
    chosen = [e for e in values["report_"] if e["status"] == "chosen"]
    if len(chosen) != 1 or chosen[0]["method"] != method:
        raise ValueError(
            f"{_fitted('report_')} must hold exactly one chosen entry, of method {method!r}"
        )


def _feature_map_matches_kernel(values, dims) -> None:
    """The feature map was drawn for the model's kernel: TensorSketch for the polynomial kernel
    with the same parameters, the Fourier maps for a shift-invariant kernel."""
    fmap, kernel = values.get("feature_map_"), values.get("kernel_")
    if fmap is None or kernel is None:
        return
    if fmap.kind == "tensorsketch":
        same = getattr(kernel, "name", None) == "polynomial" and (
            kernel.degree,
            kernel.gamma,
            kernel.coef0,
        ) == (fmap.degree, fmap.gamma, fmap.coef0)
    elif hasattr(fmap, "n_buckets"):  # input_sketch: isotropic kernels only
        same = getattr(kernel, "name", None) in ("rbf", "matern")
    else:
        same = bool(getattr(kernel, "shift_invariant", False))
    if not same:
        raise ValueError(
            f"{_fitted('feature_map_')} ({fmap.kind}) was not drawn for {_fitted('kernel_')} "
            f"({kernel!r})"
        )


def _precomputed_gram(values, dims) -> None:
    """KernelPCA without a kernel (``kernel="precomputed"``): X_fit_ is the square training
    Gram, and new rows are kernel values against every training point."""
    if values["kernel_"] is None and dims["n_samples"] != dims["n_features_in_"]:
        raise ValueError(
            f"{_fitted('kernel_')} is None (a precomputed kernel), but {_fitted('X_fit_')} of "
            f"shape {values['X_fit_'].shape} is not a square Gram"
        )


def _points_match_projection(values, dims) -> None:
    """CompressedKPCA: the points live in the projected space, or the input space."""
    if values.get("projection_") is None and dims.get("point_dim") != dims.get("n_features_in_"):
        raise ValueError(
            f"{_fitted('points_')} has {dims.get('point_dim')} columns, but without a "
            f"projection_ they must have n_features_in_ = {dims.get('n_features_in_')}"
        )
    if values["n_terms_"] > values["n_terms_source_"]:
        raise ValueError(
            f"{_fitted('n_terms_')} = {values['n_terms_']} is more than "
            f"n_terms_source_ = {values['n_terms_source_']}"
        )


# --- the declarations ------------------------------------------------------------------------

#: What every estimator may have after fit (scikit-learn's input checks).
_INPUT = {
    "n_features_in_": Int(low=1),
    "feature_names_in_": Array(("n_features_in_",), dtype="str", optional=True),
}
#: The trace of the centered Gram (explained_variance_ratio_); unset when unknown.
_TOTAL_VARIANCE = {
    "total_variance_": Real(optional=True),
    "total_variance_error_": Real(low=0.0, nan=True, optional=True),
}
#: The pre-image map of fit_inverse_transform=True.
_INVERSE = {
    "X_transformed_fit_": Array(("n_anchors", "n_components_"), optional=True),
    "dual_coef_inverse_": Array(("n_anchors", "n_features_in_"), optional=True),
}
_INVERSE_PAIR = (("X_transformed_fit_", "dual_coef_inverse_"),)
#: What a size chosen by tolerance adds: the sizes tried (and, for random features, the chosen
#: number of them; NystromKPCA always has ``n_landmarks_``).
_TOL_SIZE = {"size_history_": SizeHistory(optional=True)}
_TOL_FEATURES = {**_TOL_SIZE, "n_random_features_": Int(1, optional=True)}
_KPCA = {**_INPUT, **_TOTAL_VARIANCE, **_INVERSE}
#: A dual expansion over the training rows (exact KPCA and the sparsified Gram).
_DUAL = {
    "X_fit_": Array(("n_samples", "n_features_in_"), sparse=True),
    "eigenvalues_": Array(("n_components_",)),
    "eigenvectors_": Array(("n_samples", "n_components_")),
    "gram_col_means_": Array(("n_samples",)),
    "gram_total_mean_": Real(),
    "kernel_": KernelValue(),
    "n_components_": Int(low=1),
    "n_iter_": Int(),
}
_FEATURE_MAPS = (
    "fastkpca.features.FourierFeatureMap",
    "fastkpca.features.FastfoodFeatureMap",
    "fastkpca.features.TensorSketchFeatureMap",
    "fastkpca._input_sketch.SketchedFourierFeatureMap",
)
_FEATURE_MAP = State(
    _FEATURE_MAPS,
    dims=(("n_input_features", "n_features_in_"), ("n_output_features", "n_output_features_")),
)
_RANDOM_FEATURES = {
    "feature_map_": _FEATURE_MAP,
    "kernel_": KernelValue(),
    "n_output_features_": Int(low=1),
}
_PRINCIPAL_AXES = {
    "components_": Array(("n_components_", "n_output_features_")),
    "eigenvalues_": Array(("n_components_",)),
    "mean_": Array(("n_output_features_",)),
    "n_components_": Int(low=1),
    "n_samples_seen_": Int(low=1),
}
_TRANSFORMER = Schema({**_INPUT, **_RANDOM_FEATURES}, checks=(_feature_map_matches_kernel,))
_NYSTROM = {
    **_KPCA,
    **_TOL_SIZE,
    "components_": Array(("n_components_", "rank")),
    "eigenvalues_": Array(("n_components_",)),
    "kernel_": KernelValue(),
    "landmark_weights_": Array(("n_landmarks_",)),
    "landmarks_": Array(("n_landmarks_", "n_features_in_"), sparse=True),
    "mean_": Array(("rank",)),
    "n_components_": Int(low=1),
    "n_landmarks_": Int(low=1),
    "n_samples_seen_": Int(low=1),
    "solver_": OneOf(("exact", "randomized", "exact_kpca"), optional=True),
    "kernel_row_dtype_": OneOf(("float32", "float64"), optional=True),
}

#: The declared fitted attributes of every class in :data:`fastkpca.decomposition.SAVEABLE`.
FITTED_SCHEMAS: dict[str, Schema] = {
    "ExactKPCA": Schema({**_KPCA, **_DUAL}, together=_INVERSE_PAIR),
    "KernelPCA": Schema(
        {
            **_INPUT,
            "X_fit_": Array(("n_samples", "n_features_in_"), sparse=True),
            "eigenvalues_": Array(("n_components",)),
            "eigenvectors_": Array(("n_samples", "n_components")),
            "gamma_": Real(low=0.0),
            "gram_col_means_": Array(("n_samples",)),
            "gram_total_mean_": Real(),
            # None for kernel="precomputed"
            "kernel_": KernelValue(none=True),
            "n_iter_": Int(),
            "X_transformed_fit_": Array(("n_samples", "n_components"), optional=True),
            "dual_coef_": Array(("n_samples", "n_features_in_"), optional=True),
        },
        together=(("X_transformed_fit_", "dual_coef_"),),
        checks=(_precomputed_gram,),
    ),
    "NystromKPCA": Schema(
        {**_NYSTROM, "projection_": Array(("n_landmarks_", "n_components_"))},
        together=_INVERSE_PAIR,
    ),
    "RandomFeatureKPCA": Schema(
        {
            **_KPCA,
            **_TOL_FEATURES,
            **_RANDOM_FEATURES,
            **_PRINCIPAL_AXES,
            "solver_": OneOf(("exact", "randomized", "countsketch"), optional=True),
        },
        together=_INVERSE_PAIR,
        checks=(_feature_map_matches_kernel,),
    ),
    "StreamingKPCA": Schema(
        {
            **_KPCA,
            **_TOL_FEATURES,
            **_RANDOM_FEATURES,
            **_PRINCIPAL_AXES,
            # an upper bound may be infinite (the sketch's energy not known)
            "eigenvalue_bounds_": Array((2, "n_components_"), finite="no_nan"),
            "feature_sum_": Array(("n_output_features_",)),
            "sketch_": State(
                ("fastkpca.sketch.FrequentDirections",),
                dims=(("n_columns", "n_output_features_"),),
            ),
        },
        together=_INVERSE_PAIR,
        checks=(_feature_map_matches_kernel,),
    ),
    "ReducedSetKPCA": Schema(
        {
            **_KPCA,
            "centers_": Array(("n_centers_", "n_features_in_")),
            "dual_coef_": Array(("n_centers_", "n_components_")),
            "eigenvalues_": Array(("n_components_",)),
            "eigenvectors_": Array(("n_centers_", "n_components_")),
            "gram_col_means_": Array(("n_centers_",)),
            "gram_total_mean_": Real(),
            "kernel_": KernelValue(),
            "n_centers_": Int(low=1),
            "n_components_": Int(low=1),
            "n_samples_fit_": Int(low=1),
            # the shadow density's radius; None for the other densities
            "radius_": Real(low=0.0, none=True),
            "weights_": Array(("n_centers_",)),
        },
        together=_INVERSE_PAIR,
    ),
    "SparsifiedKPCA": Schema(
        {
            **_KPCA,
            **_DUAL,
            # estimates of exact KPCA's eigenvalues (files written before them load without)
            "debiased_eigenvalues_": Array(("n_components_",), optional=True),
            "max_entry_": Real(low=0.0),
            "n_kept_": Int(),
            "noise_norm_": Real(low=0.0),
            "noise_norm_bound_": Real(low=0.0, inf=True),
        },
        together=_INVERSE_PAIR,
    ),
    "CompressedKPCA": Schema(
        {
            **_INPUT,
            "coef_": Array(("n_terms_", "n_components_")),
            "eigenvalues_": Array(("n_components_",)),
            "kernel_": KernelValue(),
            "n_components_": Int(low=1),
            "n_terms_": Int(),
            "n_terms_source_": Int(low=1),
            "offset_": Array(("n_components_",)),
            "points_": Array(("n_terms_", "point_dim")),
            "projection_": Array(("n_features_in_", "point_dim"), none=True),
            "rounding_s_": Real(low=0.0, none=True),
            "source_model_": OneOf(
                ("ExactKPCA", "KernelPCA", "NystromKPCA", "ReducedSetKPCA", "SparsifiedKPCA")
            ),
        },
        checks=(_points_match_projection,),
    ),
    "AutoKPCA": Schema(
        {
            **_INPUT,
            "method_": OneOf(tuple(_AUTO_METHODS)),
            "estimator_": Estimator(tuple(_AUTO_METHODS.values())),
            "report_": Report(),
        },
        checks=(_auto_consistent,),
    ),
    "RandomFourierFeatures": _TRANSFORMER,
    "OrthogonalRandomFeatures": _TRANSFORMER,
    "FastfoodFeatures": _TRANSFORMER,
    "TensorSketchFeatures": _TRANSFORMER,
}


# --- model files of earlier versions -------------------------------------------------------------


def _nystrom_projection(values: dict) -> dict:
    """A NystromKPCA file that holds the whitening ``normalization_`` (r x n_landmarks_; files
    written before the model kept only ``projection_``): checked against that declaration, then
    turned into ``projection_ = normalization_^T components_^T``, what the model keeps now."""
    if "projection_" in values:
        raise ValueError(
            f"{_fitted('normalization_')} (of earlier model files) and {_fitted('projection_')} "
            "are both present"
        )
    _check_against(_LEGACY_NYSTROM, values, _fitted)
    values = dict(values)
    N = np.asarray(values.pop("normalization_"), dtype=np.float64)
    values["projection_"] = N.T @ np.asarray(values["components_"], dtype=np.float64).T
    return values


def _random_features_count(values: dict) -> dict:
    """A RandomFeatureKPCA / StreamingKPCA file that holds ``n_features_`` (the number of random
    features chosen by ``tol``; files written before it was renamed ``n_random_features_``, so
    that ``n_features`` always means the input width)."""
    if "n_random_features_" in values:
        raise ValueError(
            f"{_fitted('n_features_')} (of earlier model files) and "
            f"{_fitted('n_random_features_')} are both present"
        )
    values = dict(values)
    values["n_random_features_"] = values.pop("n_features_")
    return values


_LEGACY_NYSTROM = Schema(
    {**_NYSTROM, "normalization_": Array(("rank", "n_landmarks_"))}, together=_INVERSE_PAIR
)

#: Fitted attributes that earlier model files hold and the current classes no longer keep:
#: class name -> (those names, the function that turns such a file's fitted attributes into
#: the current ones).  :func:`upgrade_fitted` applies it before :func:`check_fitted`.
LEGACY_FITTED: dict[str, tuple[frozenset, Callable[[dict], dict]]] = {
    "NystromKPCA": (frozenset({"normalization_"}), _nystrom_projection),
    "RandomFeatureKPCA": (frozenset({"n_features_"}), _random_features_count),
    "StreamingKPCA": (frozenset({"n_features_"}), _random_features_count),
}


def legacy_fitted_names(cls) -> frozenset:
    """The fitted attributes of earlier model files of ``cls`` that :func:`upgrade_fitted`
    turns into current ones (empty for most classes)."""
    return LEGACY_FITTED.get(cls.__name__, (frozenset(), None))[0]


def upgrade_fitted(cls, fitted: Mapping[str, Any]) -> dict:
    """The fitted attributes of a ``cls`` model file in the current form: a file of an earlier
    version (one that holds a name of :data:`LEGACY_FITTED`) is checked against its own
    declaration and converted; others are returned as they are."""
    names, upgrade = LEGACY_FITTED.get(cls.__name__, (frozenset(), None))
    if upgrade is None or not names & set(fitted):
        return dict(fitted)
    return upgrade(dict(fitted))


#: Parameters that earlier model files name differently: (class name, name in those files) ->
#: the name now.  The eigensolver's tolerance of ExactKPCA and SparsifiedKPCA was ``tol``; it is
#: ``eigen_tol`` (scikit-learn's ``SpectralEmbedding`` name), ``tol`` meaning only an error
#: target.  The number of random features was ``n_features``; as in scikit-learn, that name now
#: means only the input width: ``n_random_features`` for the estimators, ``n_components`` (the
#: name of ``RBFSampler``) for the transformers.  AutoKPCA's budgets were ``memory`` (which
#: scikit-learn uses for a cache) and ``time``.  :func:`upgrade_params` applies it before
#: :func:`check_params`.
RENAMED_PARAMS: dict[tuple[str, str], str] = {
    ("ExactKPCA", "tol"): "eigen_tol",
    ("SparsifiedKPCA", "tol"): "eigen_tol",
    ("RandomFeatureKPCA", "n_features"): "n_random_features",
    ("StreamingKPCA", "n_features"): "n_random_features",
    ("RandomFourierFeatures", "n_features"): "n_components",
    ("OrthogonalRandomFeatures", "n_features"): "n_components",
    ("FastfoodFeatures", "n_features"): "n_components",
    ("TensorSketchFeatures", "n_features"): "n_components",
    ("AutoKPCA", "memory"): "memory_budget",
    ("AutoKPCA", "time"): "time_budget",
}


def upgrade_params(cls, params: Mapping[str, Any]) -> dict:
    """The parameters of a ``cls`` model file under the class's current names: a name of
    :data:`RENAMED_PARAMS` is renamed only where the class has the new name and the file does
    not give it, so a file loads whichever names this version of ``cls`` takes."""
    current = set(cls._get_param_names())
    out = dict(params)
    for (owner, old), new in RENAMED_PARAMS.items():
        if owner == cls.__name__ and old in out and new in current and new not in out:
            out[new] = out.pop(old)
    return out


# --- registered state classes ----------------------------------------------------------------


def _fastfood_blocks(values, dims) -> None:
    """Fastfood pads the input to D = 2^ceil(log2 d) and stacks ceil(n_frequencies / D) blocks
    of D frequencies (the Walsh-Hadamard transform needs D a power of 2); each block's
    permutation is one of 0..D-1 and its signs are +-1."""
    d, nf = values["n_input_features"], values["n_frequencies"]
    blocks, D = dims["n_blocks"], dims["padded_dim"]
    if D != 1 << max(0, (d - 1).bit_length()) or blocks != -(-nf // D):
        raise ValueError(
            f"state 'signs' has shape {(blocks, D)}, but n_input_features = {d} and "
            f"n_frequencies = {nf} give {(-(-nf // (1 << max(0, (d - 1).bit_length()))), D)}"
        )
    perms = values["permutations"]
    if not np.array_equal(np.sort(perms, axis=1), np.broadcast_to(np.arange(D), perms.shape)):
        raise ValueError("state 'permutations' holds rows that are not permutations of 0..D-1")
    if not np.all(np.abs(values["signs"]) == 1.0):
        raise ValueError("state 'signs' holds values other than +-1")


def _tensorsketch_hashes(values, dims) -> None:
    """TensorSketch: a polynomial kernel's parameters; for each of the ``degree`` sketches one
    bucket in [0, m) and one sign +-1 per input coordinate and the constant one."""
    Polynomial(values["degree"], values["gamma"], values["coef0"])  # the kernel's own checks
    buckets, m, d = values["buckets"], values["n_output_features"], values["n_input_features"]
    if dims["n_inputs_and_one"] != d + 1:
        raise ValueError(
            f"state 'buckets' has shape {buckets.shape}, expected (degree, n_input_features + 1)"
            f" = {(values['degree'], d + 1)}"
        )
    if buckets.size and (buckets.min() < 0 or buckets.max() >= m):
        raise ValueError(f"state 'buckets' holds buckets outside [0, n_output_features = {m})")
    if not np.all(np.abs(values["signs"]) == 1.0):
        raise ValueError("state 'signs' holds values other than +-1")


def _fourier_output(values, dims) -> None:
    if values["frequencies"].shape[0] < 1:
        raise ValueError("state 'frequencies' has no rows (n_input_features = 0)")


def _input_sketch_hashes(values, dims) -> None:
    """The CountSketch of the inputs: a bucket in [0, t) and a sign +-1 per input column, t
    the rows of the sketched-space frequencies."""
    hashes, t = values["hashes"], dims["n_buckets"]
    if min(hashes.size, t, dims["n_frequencies"]) < 1:
        raise ValueError(
            f"state of shapes hashes {hashes.shape} and frequencies "
            f"{values['frequencies'].shape} is empty"
        )
    if hashes.size and (hashes.min() < 0 or hashes.max() >= t):
        raise ValueError(f"state 'hashes' holds buckets outside [0, n_buckets = {t})")
    if not np.all(np.abs(values["signs"]) == 1.0):
        raise ValueError("state 'signs' holds values other than +-1")


def _frequent_directions_memory(values, dims) -> None:
    """The sketch's buffer of ``ell + batch`` rows (both capped at n_columns) and its ell x ell
    loss matrix are allocated by ``from_state`` whatever the saved buffer holds: refused up
    front when they cannot fit in memory, as ``fit`` would have been."""
    m = values["n_columns"]
    ell = min(values["sketch_size"], m)
    batch = min(values.get("batch_size") or values["sketch_size"], m)
    require_memory(
        8.0 * ((ell + batch) * m + ell * ell),
        f"state sketch_size={values['sketch_size']}, n_columns={m}: the sketch's buffer",
    )


#: The declared ``to_state()`` dicts of the registered state classes, by qualified name.
STATE_SCHEMAS: dict[str, Schema] = {
    "fastkpca.features.FourierFeatureMap": Schema(
        {
            "frequencies": Array(("n_input_features", "n_frequencies")),
            "kind": OneOf(("rff", "orf", "qmc")),
        },
        checks=(_fourier_output,),
    ),
    "fastkpca.features.FastfoodFeatureMap": Schema(
        {
            "n_input_features": Int(low=1),
            "n_frequencies": Int(low=1),
            "signs": Array(("n_blocks", "padded_dim")),
            "permutations": Array(("n_blocks", "padded_dim"), dtype="int"),
            "gaussians": Array(("n_blocks", "padded_dim")),
            "scales": Array(("n_blocks", "padded_dim")),
        },
        checks=(_fastfood_blocks,),
    ),
    "fastkpca.features.TensorSketchFeatureMap": Schema(
        {
            "n_input_features": Int(low=1),
            "n_output_features": Int(low=1),
            "degree": Int(low=1),
            "gamma": Real(),
            "coef0": Real(),
            "buckets": Array(("degree", "n_inputs_and_one"), dtype="int"),
            "signs": Array(("degree", "n_inputs_and_one")),
        },
        checks=(_tensorsketch_hashes,),
    ),
    "fastkpca._input_sketch.SketchedFourierFeatureMap": Schema(
        {
            "hashes": Array(("n_input_features",), dtype="int"),
            "signs": Array(("n_input_features",)),
            "frequencies": Array(("n_buckets", "n_frequencies")),
        },
        checks=(_input_sketch_hashes,),
    ),
    "fastkpca.sketch.FrequentDirections": Schema(
        {
            "sketch_size": Int(low=1),
            "n_columns": Int(low=1),
            "batch_size": Int(low=1, optional=True),
            "n_rows_seen": Int(),
            "total_shrinkage": Real(low=0.0),
            # infinite: a sketch saved before the exact energy was tracked
            "squared_norm": Real(low=0.0, inf=True, optional=True),
            "buffer": Array(("n_filled", "n_columns"), none=True),
            "loss": Array(("n_kept", "n_kept"), none=True, optional=True),
        },
        checks=(_frequent_directions_memory,),
    ),
    "fastkpca.sketch.CountSketch": Schema(
        {
            "n_buckets": Int(low=1),
            "n_columns": Int(low=1),
            "bucket_coefs": IntList(2),
            "sign_coefs": IntList(4),
            "sketch": Array(("n_buckets", "n_columns")),
            "signs_sum": Array(("n_buckets",)),
            "n_rows_seen": Int(),
        }
    ),
}


# --- entry points ----------------------------------------------------------------------------


def check_state(class_name: str, state) -> None:
    """Check a registered state class's ``to_state()`` dict against :data:`STATE_SCHEMAS`."""
    schema = STATE_SCHEMAS.get(class_name)
    if schema is None:
        raise ValueError(f"{class_name} declares no state that model files can hold")
    if not isinstance(state, dict):
        raise ValueError(f"the state of a {class_name} must be a dict, got {_describe(state)}")
    _check_against(schema, state, lambda name: f"state {name!r}")


def check_fitted(cls, fitted: Mapping[str, Any]) -> None:
    """Check the fitted attributes of a ``cls`` model against :data:`FITTED_SCHEMAS`.

    Raises ``ValueError`` naming the first attribute that is undeclared, missing, of the wrong
    kind, shape or dtype, non-finite, or inconsistent with the others.
    """
    schema = FITTED_SCHEMAS.get(cls.__name__)
    if schema is None:
        raise ValueError(f"{cls.__name__} declares no fitted attributes that model files can hold")
    _check_against(schema, fitted, _fitted)
    features = getattr(cls, "features", None)
    fmap = fitted.get("feature_map_")
    if fmap is not None and isinstance(features, str) and features not in ("auto", fmap.kind):
        raise ValueError(
            f"{_fitted('feature_map_')} is a {fmap.kind!r} map, but {cls.__name__} draws "
            f"{features!r} maps"
        )


#: Rows of the probe on which a kernel spec is resolved at load (gamma "scale" / "median" need
#: rows; the gamma found is not compared with anything, only whether the spec is valid).
_PROBE_ROWS = 2
#: The kernel spec every fastkpca estimator takes (``fastkpca.KernelPCA`` takes scikit-learn's,
#: which its ``_check_params`` checks).
_KERNEL_SPEC = frozenset({"kernel", "gamma", "degree", "coef0", "nu"})
#: Classes whose ``fit`` does not learn from rows (a compressed expansion is built from a model).
_NOT_FITTED_ON_ROWS = frozenset({"CompressedKPCA"})


class _RowsReached(Exception):
    """``fit`` looked at its rows: every check of the parameters alone is behind it."""


class _Unread:
    """Stands for the training rows when ``fit`` runs to check parameters: any look at it
    (an attribute, ``isinstance``, conversion to an array, iteration, length, indexing) raises
    :class:`_RowsReached`, so ``fit`` stops before it does any work."""

    def __getattribute__(self, name):
        raise _RowsReached

    def __array__(self, *args, **kwargs):
        raise _RowsReached

    def __iter__(self):
        raise _RowsReached

    def __len__(self):
        raise _RowsReached

    def __getitem__(self, key):
        raise _RowsReached


def check_params(cls, params: Mapping[str, Any]):
    """An unfitted ``cls(**params)``, once the parameters passed the estimator's own checks:
    the constructor and a ``get_params`` round trip, ``_validate_params``, ``fit`` on a
    stand-in for the rows that stops at its first look at them (:class:`_Unread`), the kernel
    spec, ``n_components`` and ``random_state``.  Unnamed parameters keep their default."""
    names = set(cls._get_param_names())
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(f"parameter {unknown[0]!r} is not a parameter of {cls.__name__}")
    try:
        model = cls(**params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the parameters do not build a {cls.__name__} ({exc})") from None
    stored = model.get_params(deep=False)
    for name, value in params.items():
        if stored[name] is not value:
            raise ValueError(f"parameter {name!r}: the constructor changed the stored value")
    probe = cls(**params)
    try:
        if getattr(cls, "_parameter_constraints", None):
            probe._validate_params()
        if cls.__name__ not in _NOT_FITTED_ON_ROWS:
            try:
                probe.fit(_Unread())
            except _RowsReached:
                pass
            probe = cls(**params)
        elif hasattr(probe, "_check_params"):  # the checks its builder runs before any work
            probe._check_params()
        if _KERNEL_SPEC <= names and hasattr(probe, "_resolve_kernel"):
            probe._resolve_kernel(np.zeros((_PROBE_ROWS, 1)))
        if "n_components" in names and hasattr(probe, "_resolve_n_components"):
            probe._resolve_n_components(MAX_INT)
        if "random_state" in names and hasattr(probe, "_make_rng"):
            probe._make_rng()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid parameters: {exc}") from None
    return model
