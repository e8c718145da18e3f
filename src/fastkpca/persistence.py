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

import hashlib
import importlib
import json
import math
import numbers
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["save_model", "load", "load_model", "model_info", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "fastkpca-model"
#: Version of the model-file layout; files with a larger version are refused.
FORMAT_VERSION = 1
_META_KEY = "__fastkpca__"
_CHECKSUM_KEY = "__checksum__"


def _array_digest(a: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}|{a.shape}|".encode())
    if a.size:  # hash the buffer in place: no copy of a large contiguous array
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
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


def _fitted_attributes(model) -> dict:
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("__")}


def save_model(model, path) -> None:
    """Write a (fitted) fastkpca estimator to ``path`` (see the module docstring for the format).

    The file is written to a temporary file beside ``path`` and renamed, so an interrupted save
    never leaves a half-written model under the final name.  ``random_state`` given as a numpy
    Generator / RandomState cannot be stored and is saved as None (it does not affect
    ``transform``).
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
    text = json.dumps(meta, allow_nan=False, sort_keys=True)
    contents = dict(enc.arrays)
    contents[_META_KEY] = np.array(text)
    contents[_CHECKSUM_KEY] = np.array(hashlib.sha256(text.encode()).hexdigest())
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"folder not found: {path.parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **contents)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
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


def _read_verified(path):
    """Open a model file, check format, version and checksums; return (metadata, arrays)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    try:
        npz = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        if zipfile.is_zipfile(path):
            raise _damaged(path, exc) from None
        with open(path, "rb") as f:
            head = f.read(4)
        if head.startswith(b"PK"):
            raise _damaged(path, exc) from None
        raise ValueError(f"{path} is not a fastkpca model file (not an .npz archive)") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not a fastkpca model file (a plain .npy array)")
    with npz:
        try:
            if _META_KEY not in npz.files:
                raise ValueError(f"{path} is not a fastkpca model file (no {_META_KEY} entry)")
            text = str(npz[_META_KEY][()])
            try:
                meta = json.loads(text)
            except json.JSONDecodeError as exc:
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
            if _CHECKSUM_KEY not in npz.files:
                raise _damaged(path, "no metadata checksum")
            if str(npz[_CHECKSUM_KEY][()]) != hashlib.sha256(text.encode()).hexdigest():
                raise _damaged(path, "metadata checksum mismatch")
            arrays = {}
            for key, info in meta["arrays"].items():
                if key not in npz.files:
                    raise _damaged(path, f"array {key} is missing")
                a = npz[key]
                if _array_digest(a) != info["sha256"]:
                    raise _damaged(path, f"checksum mismatch in array {key}")
                arrays[key] = a
        except (zipfile.BadZipFile, EOFError, OSError, KeyError, TypeError) as exc:
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
    meta, arrays = _read_verified(path)
    cls = _saved_class(meta.get("estimator"), meta.get("module"))
    dec = _Decoder(arrays)
    try:
        params = {k: dec.decode(v) for k, v in meta["params"].items()}
        model = cls(**params)
        for name, node in meta["fitted"].items():
            if not name.endswith("_"):
                raise ValueError(f"fitted attribute name {name!r} does not end with '_'")
            setattr(model, name, dec.decode(node))
    except (KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: malformed model metadata ({type(exc).__name__}: {exc})"
        ) from None
    return model


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
