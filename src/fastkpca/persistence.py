"""Model files: a fitted estimator saved as arrays plus JSON metadata, loaded without pickle.

:func:`save_model` (``model.save(path)``) and :func:`load` (``fastkpca.load(path)``) store a fitted
estimator as an ``.npz`` archive: one array per fitted array, plus a JSON metadata string
(:data:`FORMAT_NAME`, :data:`FORMAT_VERSION`, fastkpca version, estimator class, ``get_params()``,
kernel config, the fitted attributes and their kinds, a SHA-256 of every array) and a SHA-256 of
that metadata.  Loading uses ``numpy.load(allow_pickle=False)``, looks the class up in the
whitelist of saveable estimators (:data:`fastkpca.decomposition.SAVEABLE`) and the registered
state classes (:mod:`fastkpca._state`), and runs no code from the file.  The checksums detect
damage (truncation, flipped bytes, hand edits); they are not a signature against a deliberate
forger, who could recompute them, but such a file still cannot execute anything on load.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import numbers
import os
import secrets
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "save_model",
    "load",
    "load_model",
    "model_info",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

FORMAT_NAME = "fastkpca-model"
#: Version of the model-file layout; files with a larger version are refused.
FORMAT_VERSION = 1
_META_KEY = "__fastkpca__"
_CHECKSUM_KEY = "__checksum__"


def _array_digest(a: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}|{a.shape}|".encode())
    if a.size:  # hash the buffer in place: no copy of a large contiguous array
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


class _Encoder:
    """Turns attribute values into JSON trees, collecting arrays into ``self.arrays``."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _store(self, a: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        self.arrays[key] = a
        return key

    def encode(self, value, where: str):
        from ._state import state_class_name
        from .kernels import KERNELS, Kernel, kernel_from_config

        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, np.generic):
            # numpy scalars keep their exact dtype as 0-d arrays
            return {"kind": "scalar", "key": self._store(np.asarray(value))}
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, float):
            # strict JSON has no NaN / infinity
            return value if math.isfinite(value) else {"kind": "float", "value": repr(value)}
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                if all(isinstance(v, str) for v in value.flat):  # e.g. feature_names_in_
                    return {"kind": "array", "key": self._store(value.astype(str)), "object": True}
                raise ValueError(f"{where} is an object array, which model files cannot store")
            return {"kind": "array", "key": self._store(value)}
        if sp.issparse(value):
            fmt = value.format if value.format in ("csr", "csc") else "csr"
            m = value.asformat(fmt)
            return {
                "kind": "sparse",
                "format": fmt,
                "shape": list(m.shape),
                "array": not isinstance(m, sp.spmatrix),
                "data": self._store(m.data),
                "indices": self._store(m.indices),
                "indptr": self._store(m.indptr),
            }
        if isinstance(value, Kernel):
            config = value.to_config()
            if type(value) not in KERNELS.values() or kernel_from_config(config) != value:
                raise ValueError(
                    f"{where} is a custom kernel ({type(value).__name__}); model "
                    "files can store only fastkpca's built-in kernels"
                )
            return {"kind": "kernel", "config": self.encode(config, where)}
        name = state_class_name(value)
        if name is not None:
            state = value.to_state()
            if not isinstance(state, dict):
                raise ValueError(f"{where}: {name}.to_state() must return a dict")
            return {"kind": "state", "class": name, "state": self.encode(state, where)}
        if isinstance(value, list | tuple):
            return {
                "kind": type(value).__name__,
                "items": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)],
            }
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise ValueError(f"{where} is a dict with non-string keys")
            return {
                "kind": "dict",
                "items": {k: self.encode(v, f"{where}[{k!r}]") for k, v in value.items()},
            }
        if isinstance(value, np.dtype):
            return {"kind": "dtype", "value": value.str}
        if isinstance(value, type) and issubclass(value, np.generic):
            return {"kind": "dtype_type", "value": np.dtype(value).str}
        raise ValueError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}, "
            "which model files cannot store (allowed: arrays, numbers, strings, "
            "None, lists of those, a Kernel, or a class registered with "
            "fastkpca._state.register_state_class)"
        )


class _Decoder:
    def __init__(self, arrays):
        self.arrays = arrays

    def decode(self, node):
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, list):
            raise ValueError("malformed model metadata (bare list)")
        kind = node.get("kind")
        if kind == "array":
            a = self.arrays[node["key"]]
            return a.astype(object) if node.get("object") else a
        if kind == "scalar":
            return self.arrays[node["key"]][()]
        if kind == "float":
            return float(node["value"])
        if kind == "sparse":
            cls = {
                ("csr", False): sp.csr_matrix,
                ("csc", False): sp.csc_matrix,
                ("csr", True): sp.csr_array,
                ("csc", True): sp.csc_array,
            }[(node["format"], bool(node["array"]))]
            return cls(
                (
                    self.arrays[node["data"]],
                    self.arrays[node["indices"]],
                    self.arrays[node["indptr"]],
                ),
                shape=tuple(node["shape"]),
            )
        if kind == "kernel":
            from .kernels import kernel_from_config

            return kernel_from_config(self.decode(node["config"]))
        if kind == "state":
            cls = _state_class(node["class"])
            return cls.from_state(self.decode(node["state"]))
        if kind == "list":
            return [self.decode(v) for v in node["items"]]
        if kind == "tuple":
            return tuple(self.decode(v) for v in node["items"])
        if kind == "dict":
            return {k: self.decode(v) for k, v in node["items"].items()}
        if kind == "dtype":
            return np.dtype(node["value"])
        if kind == "dtype_type":
            return np.dtype(node["value"]).type
        raise ValueError(f"malformed model metadata: unknown value kind {kind!r}")


def _state_class(name: str):
    """A registered state class by name; fastkpca modules may be imported to register it."""
    from ._state import STATE_CLASSES

    if name not in STATE_CLASSES:
        module = name.rsplit(".", 1)[0]
        while module.startswith("fastkpca.") and name not in STATE_CLASSES:
            try:
                importlib.import_module(module)
                break
            except ImportError:
                module = module.rsplit(".", 1)[0]  # nested class: the module is a prefix
    if name not in STATE_CLASSES:
        raise ValueError(
            f"the model file holds an object of unknown class {name!r} (not a "
            "registered fastkpca state class)"
        )
    return STATE_CLASSES[name]


def _registered_class(name, module=None):
    """The class registered in the save whitelist under ``name``, or None.

    The whitelist is :data:`fastkpca.decomposition.SAVEABLE` (class name -> defining module); the
    class is looked up only in that module, and must be defined there (not re-exported).  A
    ``module`` other than the registered one gives None, so a file cannot redirect the import.
    Raises ImportError when the registered module is missing from this installation.
    """
    from .decomposition import SAVEABLE

    if not isinstance(name, str) or name not in SAVEABLE:
        return None
    registered = SAVEABLE[name]
    if module is not None and module != registered:
        return None
    cls = getattr(importlib.import_module(registered), name, None)
    if not (isinstance(cls, type) and cls.__module__ == registered and cls.__name__ == name):
        return None
    return cls


def _is_saveable(cls) -> bool:
    """Whether ``cls`` is exactly a whitelisted estimator class (a subclass of one is not)."""
    try:
        return _registered_class(cls.__name__, cls.__module__) is cls
    except ImportError:
        return False


def _saved_class(name, module=None):
    """The estimator class a model file names, imported only from the whitelisted modules."""
    from .decomposition import SAVEABLE

    try:
        cls = _registered_class(name, module)
    except ImportError as exc:
        raise ValueError(
            f"the model file needs {name} from {SAVEABLE[name]}, which this installation "
            f"of fastkpca lacks ({exc})"
        ) from None
    if cls is None:
        raise ValueError(
            f"unknown estimator class {name!r} in the model file (fastkpca "
            f"estimators: {', '.join(sorted(SAVEABLE))})"
        )
    return cls


#: Attributes every estimator may have after ``fit`` (scikit-learn's input checks set them).
_INPUT_ATTRIBUTES = frozenset({"n_features_in_", "feature_names_in_"})
_KPCA_EXPANSION = frozenset(
    {"eigenvalues_", "eigenvectors_", "gram_col_means_", "gram_total_mean_", "kernel_"}
)
_RANDOM_FEATURES = frozenset({"feature_map_", "kernel_", "n_output_features_"})
#: What every KPCA estimator's fit may add for the scikit-learn API: the trace of the centered
#: Gram (explained_variance_ratio_) and the pre-image map (fit_inverse_transform=True).
_KPCA_API = frozenset(
    {"total_variance_", "total_variance_error_", "X_transformed_fit_", "dual_coef_inverse_"}
)
#: What a size chosen by tolerance adds (``tol``): the sizes tried and the chosen size.
_TOL_SIZE = frozenset({"size_history_", "n_features_"})
_TOL_ESTIMATORS = ("NystromKPCA", "RandomFeatureKPCA", "StreamingKPCA")
_KPCA_ESTIMATORS = (
    "ExactKPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "StreamingKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
)

#: The whitelist of fitted attributes, per saveable class: what ``fit`` of that class sets (in
#: every configuration; tests/test_persistence.py fits each class and checks).  Loading sets
#: nothing else, so a file cannot put a value where the class has a method or a property
#: (``transform``, ``__dict__``, ``__class__``), nor an attribute the class never reads.  A new
#: estimator class, or a new fitted attribute, is added here.
FITTED_ATTRIBUTES: dict[str, frozenset[str]] = {
    name: _INPUT_ATTRIBUTES
    | names
    | (_KPCA_API if name in _KPCA_ESTIMATORS else frozenset())
    | (_TOL_SIZE if name in _TOL_ESTIMATORS else frozenset())
    for name, names in {
        "ExactKPCA": _KPCA_EXPANSION | {"X_fit_", "n_components_", "n_iter_"},
        "KernelPCA": _KPCA_EXPANSION
        | {"X_fit_", "X_transformed_fit_", "dual_coef_", "gamma_", "n_iter_"},
        "NystromKPCA": frozenset(
            {
                "components_",
                "eigenvalues_",
                "kernel_",
                "landmark_weights_",
                "landmarks_",
                "mean_",
                "n_components_",
                "n_landmarks_",
                "n_samples_seen_",
                "normalization_",
                "solver_",
                "kernel_row_dtype_",
            }
        ),
        "RandomFeatureKPCA": _RANDOM_FEATURES
        | {"components_", "eigenvalues_", "mean_", "n_components_", "n_samples_seen_", "solver_"},
        "StreamingKPCA": _RANDOM_FEATURES
        | {
            "components_",
            "eigenvalue_bounds_",
            "eigenvalues_",
            "feature_sum_",
            "mean_",
            "n_components_",
            "n_samples_seen_",
            "sketch_",
        },
        "ReducedSetKPCA": _KPCA_EXPANSION
        | {
            "centers_",
            "dual_coef_",
            "n_centers_",
            "n_components_",
            "n_samples_fit_",
            "radius_",
            "weights_",
        },
        "SparsifiedKPCA": _KPCA_EXPANSION
        | {
            "X_fit_",
            "max_entry_",
            "n_components_",
            "n_iter_",
            "n_kept_",
            "noise_norm_",
            "noise_norm_bound_",
        },
        "CompressedKPCA": frozenset(
            {
                "coef_",
                "eigenvalues_",
                "kernel_",
                "n_components_",
                "n_terms_",
                "n_terms_source_",
                "offset_",
                "points_",
                "projection_",
                "rounding_s_",
                "source_model_",
            }
        ),
        "RandomFourierFeatures": _RANDOM_FEATURES,
        "OrthogonalRandomFeatures": _RANDOM_FEATURES,
        "FastfoodFeatures": _RANDOM_FEATURES,
        "TensorSketchFeatures": _RANDOM_FEATURES,
    }.items()
}


def fitted_attribute_names(cls) -> frozenset[str]:
    """The fitted attributes a model file of ``cls`` may hold (:data:`FITTED_ATTRIBUTES`).

    Names that start with ``_``, do not end with ``_``, or name a member of the class (a method,
    a property, a class attribute) or a constructor parameter are never included, whatever the
    registry says.
    """
    names = FITTED_ATTRIBUTES.get(cls.__name__)
    if names is None:
        raise ValueError(
            f"{cls.__name__} has no list of fitted attributes in fastkpca.persistence."
            "FITTED_ATTRIBUTES; model files cannot store it"
        )
    params = set(cls._get_param_names()) if hasattr(cls, "_get_param_names") else set()
    return frozenset(
        n
        for n in names
        if n.endswith("_") and not n.startswith("_") and not hasattr(cls, n) and n not in params
    )


def _fitted_attributes(model) -> dict:
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("__")}


def save_model(model, path, *, data=None) -> None:
    """Write a (fitted) fastkpca estimator to ``path`` (see the module docstring for the format).

    The file is written to a temporary file beside ``path`` and renamed, so an interrupted save
    never leaves a half-written model under the final name (:func:`atomic_output`).  ``data``
    optionally describes the training file (``columns``: the feature column names,
    ``label_column``, ``format``); it is kept in the metadata (``load_with_info``) so that the
    command line can select the same columns by name at ``transform``.  ``random_state`` given
    as a numpy Generator / RandomState cannot be stored and is saved as None (it does not
    affect ``transform``).
    """
    from . import __version__

    cls = type(model)
    if not _is_saveable(cls):
        if any(_is_saveable(base) for base in cls.__mro__[1:]):
            raise ValueError(f"{cls.__name__} is not a fastkpca estimator class; cannot save it")
        raise ValueError(f"can only save fastkpca estimators, got {cls.__name__}")
    enc = _Encoder()
    params = {}
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, np.random.Generator | np.random.RandomState):
            value = None  # the generator's state is not part of the fitted model
        params[name] = enc.encode(value, f"parameter {name!r}")
    allowed = fitted_attribute_names(cls)
    unknown = sorted(set(_fitted_attributes(model)) - allowed)
    if unknown:
        raise ValueError(
            f"{cls.__name__} has fitted attribute(s) {', '.join(unknown)} that model files do "
            "not list (fastkpca.persistence.FITTED_ATTRIBUTES); cannot save it"
        )
    fitted = {
        name: enc.encode(value, f"fitted attribute {name!r}")
        for name, value in _fitted_attributes(model).items()
    }
    kernel = getattr(model, "kernel_", None)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "fastkpca_version": __version__,
        "numpy_version": np.__version__,
        "estimator": cls.__name__,
        "module": cls.__module__,
        "params": params,
        "kernel": kernel.to_config()
        if kernel is not None and hasattr(kernel, "to_config")
        else None,
        "fitted": fitted,
        "fitted_kinds": {name: _kind(value) for name, value in _fitted_attributes(model).items()},
        "arrays": {
            key: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _array_digest(a)}
            for key, a in enc.arrays.items()
        },
    }
    if data is not None:
        meta["data"] = _encode_data_info(data)
    text = json.dumps(meta, allow_nan=False, sort_keys=True)
    contents: dict[str, Any] = dict(enc.arrays)
    contents[_META_KEY] = np.array(text)
    contents[_CHECKSUM_KEY] = np.array(hashlib.sha256(text.encode()).hexdigest())
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **contents)


def _encode_data_info(data: dict) -> dict:
    """The description of the training file kept in the metadata (plain JSON values only)."""
    out = {}
    for key in ("columns", "label_column", "format"):
        value = data.get(key)
        if isinstance(value, tuple | list | np.ndarray):
            value = [v if isinstance(v, int | str) else str(v) for v in list(value)]
        elif isinstance(value, np.integer):
            value = int(value)
        if value is not None:
            out[key] = value
    return out


@contextlib.contextmanager
def atomic_output(path) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces ``path`` when the block succeeds.

    On any error (or interruption) the temporary file is removed and ``path`` is left as it
    was: an existing file keeps its content, a missing one stays missing.  A symbolic link is
    followed (its target is replaced, the link kept); the new file gets the mode of the file it
    replaces, or the usual mode of a new file (0666 less the umask).
    """
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder not found: {Path(path).parent}")
    while True:
        tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            # os.open applies the umask to 0o666, as open() does for a new file
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    os.close(fd)
    try:
        yield tmp
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def _kind(value) -> str:
    """A short description of a fitted value for the metadata and ``fastkpca info``."""
    from ._state import state_class_name
    from .kernels import Kernel

    if isinstance(value, np.ndarray):
        return f"array {value.dtype} {tuple(value.shape)}"
    if sp.issparse(value):
        return f"sparse {value.format} {value.dtype} {tuple(value.shape)}"
    if isinstance(value, Kernel):
        return "kernel"
    if state_class_name(value):
        return f"state {state_class_name(value)}"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


def _damaged(path, detail) -> ValueError:
    return ValueError(f"{path}: damaged or truncated fastkpca model file ({detail})")


#: The metadata is small JSON (arrays are stored apart); a larger metadata entry is refused
#: before it is read.
_MAX_META_BYTES = 64 * 2**20
#: The arrays may expand at most this many times the file's size, plus :data:`_EXPANSION_SLACK`.
#: fastkpca writes them uncompressed (ratio 1), and compressing float arrays gains less than 2:1;
#: deflate can reach about 1000:1 on constant data, which only a crafted file holds.
_MAX_EXPANSION = 64
_EXPANSION_SLACK = 16 * 2**20
#: Array dtypes a model file may hold: booleans, integers, floats, complex, unicode strings.
_ARRAY_KINDS = "biufcU"


def _npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, header bytes) of an archive member from its .npy header alone."""
    fmt = np.lib.format
    with zf.open(info) as f:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"member {info.filename}: unknown .npy version {version}")
        return shape, dtype, f.tell()


def _check_member(zf, info, *, dtype, shape, what) -> None:
    """Check an archive member's .npy header and its stored size against the expected ones.

    Only the member's first bytes (its header) are decompressed; the size check uses the
    archive's directory, and ``zipfile`` never yields more bytes than that size, so the data
    read afterwards is bounded by what the metadata declares.
    """
    got_shape, got_dtype, header = _npy_header(zf, info)
    if got_dtype.kind not in _ARRAY_KINDS or got_dtype.hasobject:
        raise ValueError(f"{what} has dtype {got_dtype}, which model files do not hold")
    if got_dtype != dtype or tuple(got_shape) != tuple(shape):
        raise ValueError(
            f"{what} holds a {got_dtype} array of shape {tuple(got_shape)}, the metadata "
            f"declares {dtype} {tuple(shape)}"
        )
    expected = header + math.prod(shape) * dtype.itemsize
    if info.file_size != expected:
        raise ValueError(
            f"{what} is {info.file_size} bytes uncompressed, its header and the metadata "
            f"declare {expected}"
        )


def _declared_array(info) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of an entry of the metadata's ``arrays`` table, validated."""
    if not isinstance(info, dict) or not isinstance(info.get("dtype"), str):
        raise ValueError("malformed array entry in the metadata")
    dtype = np.dtype(info["dtype"])
    shape = info.get("shape")
    if (
        dtype.kind not in _ARRAY_KINDS
        or not isinstance(shape, list)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise ValueError(f"malformed array entry in the metadata ({info['dtype']}, {shape})")
    return dtype, tuple(shape)


def _read_member(zf, info) -> np.ndarray:
    with zf.open(info) as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def _read_string(zf, info, *, max_bytes, what) -> str:
    """A 0-d unicode member (the metadata, its checksum), its size checked before reading."""
    shape, dtype, header = _npy_header(zf, info)
    if dtype.kind != "U" or tuple(shape) != () or info.file_size != header + dtype.itemsize:
        raise ValueError(f"{what} is not a string")
    if dtype.itemsize > max_bytes:
        raise ValueError(f"{what} is {dtype.itemsize} bytes, more than a model file holds")
    return str(_read_member(zf, info)[()])


def _read_verified(path):
    """Open a model file, check format, version, sizes and checksums; return (metadata, arrays).

    Nothing is decompressed before it is checked: the metadata entry's size, then every array
    member's .npy header and stored size against the metadata's dtype and shape, and the total
    against the file's size (:data:`_MAX_EXPANSION`); only then are the arrays read.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    file_bytes = path.stat().st_size
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        with open(path, "rb") as f:
            head = f.read(6)
        if head == b"\x93NUMPY":
            raise ValueError(f"{path} is not a fastkpca model file (a plain .npy array)") from None
        if head.startswith(b"PK"):
            raise _damaged(path, exc) from None
        raise ValueError(f"{path} is not a fastkpca model file (not an .npz archive)") from None
    with zf:
        try:
            members = {info.filename: info for info in zf.infolist()}
            meta_member = members.get(f"{_META_KEY}.npy")
            if meta_member is None:
                raise ValueError(f"{path} is not a fastkpca model file (no {_META_KEY} entry)")
            try:
                text = _read_string(zf, meta_member, max_bytes=_MAX_META_BYTES, what="metadata")
            except ValueError as exc:
                if "not a string" in str(exc) and meta_member.file_size < 4096:
                    raise ValueError(f"{path} is not a fastkpca model file ({exc})") from None
                raise
            try:
                meta = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise _damaged(path, f"unreadable metadata: {exc}") from None
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                raise ValueError(
                    f"{path} is not a fastkpca model file (format "
                    f"{meta.get('format') if isinstance(meta, dict) else None!r})"
                )
            version = meta.get("format_version")
            if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
                raise ValueError(
                    f"{path}: unknown model file format version {version!r} (this "
                    f"fastkpca {_version()} reads versions 1 to {FORMAT_VERSION}; "
                    f"the file was written by fastkpca "
                    f"{meta.get('fastkpca_version', '?')})"
                )
            checksum_member = members.get(f"{_CHECKSUM_KEY}.npy")
            if checksum_member is None:
                raise _damaged(path, "no metadata checksum")
            checksum = _read_string(zf, checksum_member, max_bytes=1024, what="checksum")
            if checksum != hashlib.sha256(text.encode()).hexdigest():
                raise _damaged(path, "metadata checksum mismatch")
            table = meta.get("arrays")
            if not isinstance(table, dict):
                raise _damaged(path, "no array table in the metadata")
            expected = {f"{_META_KEY}.npy", f"{_CHECKSUM_KEY}.npy"}
            declared = 0
            for key, info in table.items():
                member = members.get(f"{key}.npy")
                if member is None:
                    raise _damaged(path, f"array {key} is missing")
                dtype, shape = _declared_array(info)
                _check_member(zf, member, dtype=dtype, shape=shape, what=f"array {key}")
                expected.add(member.filename)
                declared += member.file_size
            extra = sorted(set(members) - expected)
            if extra:
                raise _damaged(path, f"unexpected member(s) {', '.join(extra[:5])}")
            limit = _MAX_EXPANSION * file_bytes + _EXPANSION_SLACK
            if declared > limit:
                raise ValueError(
                    f"{path}: refusing a model file whose arrays expand to {declared} bytes "
                    f"from {file_bytes} bytes on disk (more than {_MAX_EXPANSION}-fold; "
                    "fastkpca writes arrays uncompressed)"
                )
            arrays = {}
            for key, info in table.items():
                a = _read_member(zf, members[f"{key}.npy"])
                if _array_digest(a) != info.get("sha256"):
                    raise _damaged(path, f"checksum mismatch in array {key}")
                arrays[key] = a
        except (zipfile.BadZipFile, EOFError, OSError, KeyError, TypeError, zlib.error) as exc:
            raise _damaged(path, f"{type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            if str(exc).startswith(str(path)):
                raise
            raise _damaged(path, exc) from None
    return meta, arrays


def _version():
    from . import __version__

    return __version__


def load(path):
    """Load a model saved by ``model.save(path)`` / :func:`save_model`.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Not a fastkpca model file, a damaged or truncated one (checksum mismatch), one from an
        unknown format version, or one naming an estimator or state class fastkpca does not have.
    """
    return load_with_info(path)[0]


def load_with_info(path):
    """``(model, metadata)`` of a model file: :func:`load`'s model and the verified metadata.

    The metadata's ``"data"`` entry (when the file has one) describes the training file: its
    feature ``columns`` (names) and its ``label_column``.
    """
    meta, arrays = _read_verified(path)
    cls = _saved_class(meta.get("estimator"), meta.get("module"))
    dec = _Decoder(arrays)
    try:
        if not isinstance(meta["params"], dict) or not isinstance(meta["fitted"], dict):
            raise TypeError("params and fitted must be objects")
        allowed = fitted_attribute_names(cls)
        unknown = sorted(set(meta["fitted"]) - allowed)
        if unknown:
            raise ValueError(
                f"{path}: the model file sets {', '.join(map(repr, unknown[:5]))}, not a fitted "
                f"attribute of {cls.__name__} (allowed: {', '.join(sorted(allowed))})"
            )
        params = {k: dec.decode(v) for k, v in meta["params"].items()}
        model = cls(**params)
        for name, node in meta["fitted"].items():
            setattr(model, name, dec.decode(node))
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(
            f"{path}: malformed model metadata ({type(exc).__name__}: {exc})"
        ) from None
    return model, meta


#: Alias of :func:`load`.
load_model = load


def model_info(path) -> dict:
    """The verified metadata of a model file (without building the estimator)."""
    meta, arrays = _read_verified(path)
    meta = dict(meta)
    meta["file_bytes"] = Path(path).stat().st_size
    meta["array_bytes"] = int(sum(a.nbytes for a in arrays.values()))
    eig = meta.get("fitted", {}).get("eigenvalues_")
    if isinstance(eig, dict) and eig.get("kind") == "array":
        meta["eigenvalues"] = arrays[eig["key"]].tolist()
    return meta
