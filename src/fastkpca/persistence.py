"""Model files: a fitted estimator saved as arrays plus JSON metadata, loaded without pickle.

:func:`save_model` (``model.save(path)``) and :func:`load` (``fastkpca.load(path)``) store a fitted
estimator as an ``.npz`` archive: one array per fitted array, a JSON metadata string
(:data:`FORMAT_NAME`, :data:`FORMAT_VERSION`, versions, class, ``get_params()``, kernel, fitted
attributes and their kinds, a SHA-256 of every array) and a SHA-256 of that metadata.  The
checksums detect damage, not a forger, so :func:`load` treats every file as untrusted and
checks, before any estimator exists: the zip directory (at most :data:`MAX_MEMBERS` plain
``name.npy`` members, stored or deflated); the metadata (at most :data:`MAX_METADATA_BYTES`,
:data:`MAX_DEPTH` deep, strings at most :data:`MAX_STRING`); each array's header (at most
:data:`MAX_NPY_HEADER` bytes) and size, all together at most :data:`MAX_EXPANSION` times the
file plus :data:`EXPANSION_SLACK`, then each checksum; and the model: a whitelisted class
(:data:`fastkpca.decomposition.SAVEABLE`, :data:`fastkpca._model_schema.STATE_SCHEMAS`),
parameters that pass :func:`fastkpca._model_schema.check_params`, the fitted attributes
:data:`fastkpca._model_schema.FITTED_SCHEMAS` declares, kernels fastkpca's own.  Files of
earlier releases are converted (:data:`fastkpca._model_schema.LEGACY_FITTED`,
:data:`fastkpca._model_schema.RENAMED_PARAMS`).  Any failure is one ``ValueError`` naming the
file; nothing in it is executed.  :func:`save_model` runs the same model checks;
:func:`is_model_file` tells a model file from any other cheaply.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
import json
import math
import numbers
import os
import re
import secrets
import stat
import struct
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import __version__
from ._model_schema import (
    FITTED_SCHEMAS,
    STATE_SCHEMAS,
    check_fitted,
    check_params,
    check_state,
    legacy_fitted_names,
    upgrade_fitted,
    upgrade_params,
)
from ._state import STATE_CLASSES, state_class_name
from .decomposition import SAVEABLE
from .execution.arrays import HOST, check_device, device_available, is_namespace_array, to_host
from .kernels import KERNELS, Kernel, kernel_from_config

__all__ = [
    "save_model",
    "load",
    "load_model",
    "model_info",
    "is_model_file",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

FORMAT_NAME = "fastkpca-model"
#: Version of the model-file layout; files with a larger version are refused.
FORMAT_VERSION = 1
_META_KEY = "__fastkpca__"
_CHECKSUM_KEY = "__checksum__"

#: The metadata is small JSON (arrays are stored apart); a larger metadata member is refused
#: before it is read.
MAX_METADATA_BYTES = 64 * 2**20
#: Members of a model file: one per array plus the metadata and its checksum.  A fitted model
#: has a few dozen; the zip directory is refused, before it is parsed, when it could list more.
MAX_MEMBERS = 4096
#: Bytes of the zip directory per member (a 46-byte record, the name, zip64 sizes): with
#: :data:`MAX_MEMBERS`, the largest directory that is parsed.
_DIRECTORY_BYTES_PER_MEMBER = 256
#: A ``.npy`` header of a model file is about 128 bytes; a larger one is refused unread.
MAX_NPY_HEADER = 4096
#: Value trees in the metadata (parameters, fitted attributes, states) nest a few levels.
MAX_DEPTH = 32
#: Longest string in the metadata (a column name, a version, a class name), in characters.
MAX_STRING = 4096
#: The members may expand at most this many times the file's size, plus :data:`EXPANSION_SLACK`.
#: fastkpca writes them uncompressed (ratio 1), and compressing float arrays gains less than 2:1;
#: deflate can reach about 1000:1 on constant data, which only a crafted file holds.
MAX_EXPANSION = 64
EXPANSION_SLACK = 16 * 2**20
#: Array dtypes a model file may hold: booleans, integers, floats, complex, unicode strings
#: (what an attribute may hold is then narrower: see its declaration).
_ARRAY_KINDS = "biufcU"
#: Member names: a plain file name, as ``numpy.savez`` writes for the keys model files use.
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_]{1,64}\.npy")
_ARRAY_KEY = re.compile(r"a[0-9]{1,9}")
_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


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
        if value is None or isinstance(value, bool | str):
            return value
        if is_namespace_array(value):  # fitted on a device: the file holds host arrays
            value = to_host(value)
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
        if not isinstance(value, type) and _is_saveable(type(value)):
            return self._estimator(value, where)
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

    def _estimator(self, model, where: str) -> dict:
        """A fitted estimator nested in a model (AutoKPCA's ``estimator_``): its parameters and
        fitted attributes, checked as :func:`save_model` checks a model it writes."""
        cls = type(model)
        if hasattr(model, "_placed"):  # fitted on a device: the file holds host arrays
            model = model._placed(HOST)
        params = {}
        for name, value in model.get_params(deep=False).items():
            if isinstance(value, np.random.Generator | np.random.RandomState):
                value = None  # the generator's state is not part of the fitted model
            params[name] = self.encode(value, f"{where} parameter {name!r}")
        attributes = _fitted_attributes(model)
        unknown = sorted(set(attributes) - fitted_attribute_names(cls))
        if unknown:
            raise ValueError(
                f"{where}: {cls.__name__} has fitted attribute(s) {', '.join(unknown)} that "
                "model files do not list"
            )
        try:
            check_fitted(cls, attributes)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return {
            "kind": "estimator",
            "class": cls.__name__,
            "params": params,
            "fitted": {
                name: self.encode(value, f"{where}.{name}") for name, value in attributes.items()
            },
        }


class _Decoder:
    """Turns the metadata's value trees (checked by :class:`_TreeChecker`) into values.

    ``where`` names the parameter or attribute being decoded, for error messages.  A state
    object is built only after its state passed its declaration
    (:func:`fastkpca._model_schema.check_state`).
    """

    def __init__(self, arrays):
        self.arrays = arrays

    def decode(self, node, where: str, *, states: bool = True):
        try:
            return self._decode(node, where, states)
        except ValueError as exc:
            message = str(exc)
            raise ValueError(
                message if message.startswith(where) else f"{where}: {message}"
            ) from None
        except (TypeError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
            raise ValueError(f"{where}: {type(exc).__name__}: {exc}") from None

    def _decode(self, node, where, states):
        if node is None or isinstance(node, bool | int | float | str):
            return node
        kind = node["kind"]
        if kind == "array":
            a = self.arrays[node["key"]]
            return a.astype(object) if node.get("object") else a
        if kind == "scalar":
            return self.arrays[node["key"]][()]
        if kind == "float":
            return float(node["value"])
        if kind == "sparse":
            return _sparse_matrix(node, self.arrays)
        if kind == "kernel":
            return _kernel(self._decode(node["config"], where, False))
        if kind == "state":
            if not states:
                raise ValueError("a state object is not a parameter value")
            cls = _state_class(node["class"])
            state = self._decode(node["state"], where, False)
            check_state(node["class"], state)
            return cls.from_state(state)
        if kind == "estimator":
            if not states:
                raise ValueError("an estimator is not a parameter value")
            return self._estimator(node, where)
        if kind == "list":
            return [self._decode(v, where, states) for v in node["items"]]
        if kind == "tuple":
            return tuple(self._decode(v, where, states) for v in node["items"])
        if kind == "dict":
            return {k: self._decode(v, where, states) for k, v in node["items"].items()}
        if kind == "dtype":
            return np.dtype(node["value"])
        if kind == "dtype_type":
            return np.dtype(node["value"]).type
        raise ValueError(f"unknown value kind {kind!r}")  # pragma: no cover - checked before

    def _estimator(self, node, where):
        """A nested fitted estimator, built as :func:`_build_model` builds a model (the class
        from the whitelist, its fitted attributes against their declaration, its parameters
        through the estimator's own checks)."""
        cls = _saved_class(node["class"])
        unknown = sorted(
            set(node["fitted"]) - fitted_attribute_names(cls) - legacy_fitted_names(cls)
        )
        if unknown:
            raise ValueError(f"{_short(unknown[0])} is not a fitted attribute of {cls.__name__}")
        params = {
            name: self._decode(v, f"{where} parameter {name!r}", False)
            for name, v in node["params"].items()
        }
        fitted = {
            name: self._decode(v, f"{where}.{name}", True) for name, v in node["fitted"].items()
        }
        fitted = upgrade_fitted(cls, fitted)
        check_fitted(cls, fitted)
        model = check_params(cls, _computable_here(upgrade_params(cls, params), where))
        for name, value in fitted.items():
            setattr(model, name, value)
        return model


def _kernel(config):
    """A built-in kernel from its config; the kernel's constructor checks the values."""
    if not isinstance(config, dict):
        raise ValueError(f"kernel config must be a dict, got a {type(config).__name__}")
    name = config.get("kernel")
    if not isinstance(name, str) or name not in KERNELS:
        raise ValueError(f"kernel config names an unknown kernel {_short(name)}")
    accepted = set(inspect.signature(KERNELS[name]).parameters)
    unknown = sorted(set(config) - accepted - {"kernel"}, key=str)
    if unknown:
        raise ValueError(f"the {name} kernel has no parameter {_short(unknown[0])}")
    return kernel_from_config(config)


def _sparse_matrix(node, arrays):
    """A CSR / CSC matrix from its three arrays; the index arrays are checked in full (indices
    out of range would make scipy's compiled kernels read out of bounds)."""
    cls = {
        ("csr", False): sp.csr_matrix,
        ("csc", False): sp.csc_matrix,
        ("csr", True): sp.csr_array,
        ("csc", True): sp.csc_array,
    }[(node["format"], bool(node["array"]))]
    indices, indptr = arrays[node["indices"]], arrays[node["indptr"]]
    for name, a in (("indices", indices), ("indptr", indptr)):
        if a.dtype.kind != "i":
            raise ValueError(f"sparse {name} have dtype {a.dtype}, expected integers")
    m = cls((arrays[node["data"]], indices, indptr), shape=tuple(node["shape"]))
    m.check_format(full_check=True)
    return m


def _state_class(name: str):
    """A registered state class by its qualified name, when it declares its state.

    Only a name declared in :data:`fastkpca._model_schema.STATE_SCHEMAS` is looked up, and only
    its own module is imported (to register the class): a file cannot make fastkpca import any
    other module (``fastkpca.__main__`` would run the command line).
    """
    if name in STATE_SCHEMAS and name not in STATE_CLASSES:
        # a declared name is "fastkpca.<module>.<Class>": import that module
        importlib.import_module(name.rsplit(".", 1)[0])
    if name not in STATE_SCHEMAS or name not in STATE_CLASSES:
        raise ValueError(
            f"the model file holds an object of unknown class {_short(name)} (not a "
            "registered fastkpca state class)"
        )
    return STATE_CLASSES[name]


def _registered_class(name, module=None):
    """The class registered in :data:`fastkpca.decomposition.SAVEABLE` under ``name``, looked up
    only in (and defined in) its registered module; another ``module`` gives None.  ImportError
    when the registered module is missing."""
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


def fitted_attribute_names(cls) -> frozenset[str]:
    """The fitted attributes a model file of ``cls`` may hold
    (:data:`fastkpca._model_schema.FITTED_SCHEMAS`), never a private name, one not ending in
    ``_``, a member of the class or a constructor parameter: a file cannot set a method."""
    schema = FITTED_SCHEMAS.get(cls.__name__)
    if schema is None:
        raise ValueError(
            f"{cls.__name__} has no list of fitted attributes in fastkpca._model_schema."
            "FITTED_SCHEMAS; model files cannot store it"
        )
    params = set(cls._get_param_names()) if hasattr(cls, "_get_param_names") else set()
    return frozenset(
        n
        for n in schema.attributes
        if n.endswith("_") and not n.startswith("_") and not hasattr(cls, n) and n not in params
    )


def _fitted_attributes(model) -> dict:
    return {k: v for k, v in vars(model).items() if k.endswith("_") and not k.startswith("__")}


def save_model(model, path, *, data=None) -> None:
    """Write a (fitted) fastkpca estimator to ``path`` (format: the module docstring).

    The model passes :func:`load`'s checks before anything is written, and the file is renamed
    into place (:func:`atomic_output`).  ``data`` optionally describes the training file
    (``columns``, ``label_column``, ``format``, ``libsvm_index_base``), kept for
    ``load_with_info``.  A Generator / RandomState ``random_state`` is saved as None.
    """
    cls = type(model)
    if hasattr(model, "_placed"):  # fitted on a device: the file holds host arrays
        model = model._placed(HOST)
    if not _is_saveable(cls):
        if any(_is_saveable(base) for base in cls.__mro__[1:]):
            raise ValueError(f"{cls.__name__} is not a fastkpca estimator class; cannot save it")
        raise ValueError(f"can only save fastkpca estimators, got {cls.__name__}")
    enc = _Encoder()
    params = {}
    values = {}
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, np.random.Generator | np.random.RandomState):
            value = None  # the generator's state is not part of the fitted model
        values[name] = value
        params[name] = enc.encode(value, f"parameter {name!r}")
    allowed = fitted_attribute_names(cls)
    unknown = sorted(set(_fitted_attributes(model)) - allowed)
    if unknown:
        raise ValueError(
            f"{cls.__name__} has fitted attribute(s) {', '.join(unknown)} that model files do "
            "not list (fastkpca._model_schema.FITTED_SCHEMAS); cannot save it"
        )
    fitted = {
        name: enc.encode(value, f"fitted attribute {name!r}")
        for name, value in _fitted_attributes(model).items()
    }
    try:
        check_fitted(cls, _fitted_attributes(model))
        check_params(cls, values)
    except ValueError as exc:
        raise ValueError(f"cannot save this {cls.__name__}: {exc}") from None
    kernel = getattr(model, "kernel_", None)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "fastkpca_version": __version__,
        "numpy_version": np.__version__,
        "estimator": cls.__name__,
        "module": cls.__module__,
        "params": params,
        "kernel": _plain_config(kernel.to_config())
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


def _plain_config(config: dict) -> dict:
    """A kernel config for the metadata: strict JSON has no infinity (Matern's nu = inf)."""
    return {
        k: repr(v) if isinstance(v, float) and not math.isfinite(v) else v
        for k, v in config.items()
    }


#: What the metadata's ``"data"`` entry may hold about the training file.
_DATA_KEYS = ("columns", "label_column", "format", "libsvm_index_base")


def _encode_data_info(data: dict) -> dict:
    """The description of the training file kept in the metadata (plain JSON values only)."""
    out = {}
    for key in _DATA_KEYS:
        value = data.get(key)
        if isinstance(value, tuple | list | np.ndarray):
            value = [v if isinstance(v, int | str) else str(v) for v in list(value)]
        elif isinstance(value, np.integer):
            value = int(value)
        if value is not None:
            out[key] = value
    _check_data_info(out)
    return out


def _check_data_info(data) -> None:
    """The ``"data"`` entry: ``columns`` a list of names (strings) or positions (ints >= 0),
    ``label_column`` a name or a position, ``format`` a reader's name, ``libsvm_index_base``
    0 or 1 (the first feature index of a LIBSVM file)."""
    if not isinstance(data, dict):
        raise ValueError(f"'data' must be an object, got {_json_type(data)}")
    for key, value in data.items():
        if key == "columns":
            ok = isinstance(value, list) and all(_is_name_or_position(v) for v in value)
        elif key == "label_column":
            ok = _is_name_or_position(value)
        elif key == "format":
            ok = isinstance(value, str) and len(value) <= MAX_STRING
        elif key == "libsvm_index_base":
            ok = type(value) is int and value in (0, 1)
        else:
            raise ValueError(f"'data' has an unknown key {_short(key)}")
        if not ok:
            raise ValueError(f"'data' key {key!r} has an invalid value ({_json_type(value)})")


def _is_name_or_position(value) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_STRING
    return type(value) is int and 0 <= value <= 2**40


@contextlib.contextmanager
def atomic_output(path) -> Iterator[Path]:
    """A temporary path beside ``path`` that replaces ``path`` when the block succeeds; on any
    ``BaseException`` it is removed and ``path`` left as it was.  A symbolic link's target is
    replaced; the new file gets the replaced file's mode, or 0666 less the umask."""
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder not found: {target.parent}")
    tmp = None
    try:
        while tmp is None:
            candidate = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
            try:
                # os.open applies the umask to 0o666, as open() does for a new file
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue
            tmp = candidate
            os.close(fd)
        yield tmp
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        raise


def _kind(value) -> str:
    """A short description of a fitted value for the metadata and ``fastkpca info``."""
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


# --- reading: the archive -----------------------------------------------------------------------


def _damaged(path, detail) -> ValueError:
    return ValueError(f"{path}: damaged or truncated fastkpca model file ({detail})")


#: The zip end-of-central-directory record, the zip64 locator and the zip64 end record (APPNOTE
#: 4.3.14-4.3.16): only the directory's size is read from them.
_END = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_END = struct.Struct("<4sQ2H2L4Q")


def _directory_bytes(f, file_bytes: int) -> int | None:
    """The size of the zip directory as the archive's end record declares it (None: no end
    record, so not a zip archive).  ``zipfile`` reads and parses that many bytes."""
    tail_len = min(file_bytes, _END.size + 0xFFFF)  # the record and its comment
    f.seek(file_bytes - tail_len)
    tail = f.read(tail_len)
    pos = len(tail) - _END.size
    if pos < 0 or tail[pos : pos + 4] != b"PK\x05\x06":
        pos = tail.rfind(b"PK\x05\x06")  # the record is followed by a comment
        if pos < 0 or pos + _END.size > len(tail):
            return None
    _, _, _, _, count, size, offset, _ = _END.unpack_from(tail, pos)
    if count != 0xFFFF and size != 0xFFFFFFFF and offset != 0xFFFFFFFF:
        return size
    # zip64: the sizes are in the zip64 end record; without one, zipfile uses these
    loc = pos - _ZIP64_LOCATOR.size
    if loc < 0:
        return size
    signature, _, end64, _ = _ZIP64_LOCATOR.unpack_from(tail, loc)
    if signature != b"PK\x06\x07" or end64 + _ZIP64_END.size > file_bytes:
        return size
    f.seek(end64)
    record = f.read(_ZIP64_END.size)
    if record[:4] != b"PK\x06\x06":
        return size
    return _ZIP64_END.unpack(record)[8]


def _open_archive(f, path, file_bytes: int) -> zipfile.ZipFile:
    """The zip archive in the open file ``f``, its directory size checked before it is parsed."""
    size = _directory_bytes(f, file_bytes)
    if size is not None and size > MAX_MEMBERS * _DIRECTORY_BYTES_PER_MEMBER:
        raise ValueError(
            f"{path}: refusing a model file whose zip directory is {size} bytes (model files "
            f"have at most {MAX_MEMBERS} members)"
        )
    f.seek(0)
    try:
        return zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        f.seek(0)
        head = f.read(6)
        if head == b"\x93NUMPY":
            raise ValueError(f"{path} is not a fastkpca model file (a plain .npy array)") from None
        if head.startswith(b"PK"):
            raise _damaged(path, exc) from None
        raise ValueError(f"{path} is not a fastkpca model file (not an .npz archive)") from None


def _metadata_member(zf: zipfile.ZipFile, path) -> zipfile.ZipInfo:
    info = next((i for i in zf.infolist() if i.filename == f"{_META_KEY}.npy"), None)
    if info is None:
        raise ValueError(f"{path} is not a fastkpca model file (no {_META_KEY} entry)")
    return info


def _check_members(zf: zipfile.ZipFile, file_bytes: int) -> dict[str, zipfile.ZipInfo]:
    """name -> member, once every member passed the checks that need only the directory."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ValueError(f"{len(infos)} members, more than a model file has ({MAX_MEMBERS})")
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = _short(info.filename)
        if not _MEMBER_NAME.fullmatch(info.filename):
            raise ValueError(f"member {name} is not a plain array name (a folder, a path?)")
        if info.filename in members:
            raise ValueError(f"member {name} appears twice")
        if info.flag_bits & 0x1:
            raise ValueError(f"member {name} is encrypted")
        if info.compress_type not in _COMPRESSIONS:
            raise ValueError(
                f"member {name} uses compression method {info.compress_type} (model files are "
                "stored or deflated)"
            )
        if info.compress_size > file_bytes:
            raise ValueError(f"member {name} declares {info.compress_size} compressed bytes")
        members[info.filename] = info
    return members


def _npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, header bytes) of an archive member from its .npy header alone.

    Only the header is decompressed, and its length is checked before it is read.
    """
    fmt = np.lib.format
    with zf.open(info) as f:
        prefix = f.read(8)
        if len(prefix) < 8 or prefix[:6] != b"\x93NUMPY":
            raise ValueError(f"member {info.filename} is not a .npy array")
        version = (prefix[6], prefix[7])
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"member {info.filename}: unknown .npy version {version}")
        length_format = "<H" if version == (1, 0) else "<I"
        length = f.read(struct.calcsize(length_format))
        if len(length) < struct.calcsize(length_format):
            raise ValueError(f"member {info.filename} is truncated")
        (header_bytes,) = struct.unpack(length_format, length)
        if header_bytes > MAX_NPY_HEADER:
            raise ValueError(
                f"member {info.filename} has a .npy header of {header_bytes} bytes (more than "
                f"{MAX_NPY_HEADER})"
            )
        header = f.read(header_bytes)
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, _, dtype = read(io.BytesIO(length + header), max_header_size=MAX_NPY_HEADER)
    return shape, dtype, len(prefix) + len(length) + header_bytes


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


# --- reading: the metadata ----------------------------------------------------------------------


def _short(value) -> str:
    """``repr`` of a name from a file, shortened."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


#: Top-level keys of the metadata: key -> (JSON types allowed, required).
_META_FIELDS: dict[str, tuple[tuple, bool]] = {
    "format": ((str,), True),
    "format_version": ((int,), True),
    "fastkpca_version": ((str,), False),
    "numpy_version": ((str,), False),
    "estimator": ((str,), True),
    "module": ((str, type(None)), False),
    "params": ((dict,), True),
    "kernel": ((dict, type(None)), False),
    "fitted": ((dict,), True),
    "fitted_kinds": ((dict,), False),
    "arrays": ((dict,), True),
    "data": ((dict,), False),
}

#: The fields of each kind of value tree node: field -> check of its value.
_NODE_FIELDS: dict[str, dict[str, str]] = {
    "array": {"key": "key", "object": "?bool"},
    "scalar": {"key": "key0"},
    "float": {"value": "nonfinite"},
    "sparse": {
        "format": "sparse_format",
        "shape": "shape2",
        "array": "bool",
        "data": "key1",
        "indices": "key1",
        "indptr": "key1",
    },
    "kernel": {"config": "node"},
    "state": {"class": "name", "state": "node"},
    "estimator": {"class": "name", "params": "node_dict", "fitted": "node_dict"},
    "list": {"items": "nodes"},
    "tuple": {"items": "nodes"},
    "dict": {"items": "node_dict"},
    "dtype": {"value": "dtype"},
    "dtype_type": {"value": "dtype"},
}


class _TreeChecker:
    """Checks the value trees of the metadata; records which parameter or attribute uses each
    array key (``owner``) and the dimensions some uses need (``ndim``)."""

    def __init__(self, table: dict):
        self.table = table
        self.owner: dict[str, str] = {}
        self.ndim: list[tuple[str, int, str]] = []
        self.root = ""

    def check_tree(self, node, root: str) -> None:
        self.root = root
        self.check(node, root)

    def check(self, node, where: str, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise ValueError(f"{where} is nested more than {MAX_DEPTH} levels deep")
        if node is None or isinstance(node, bool | int | float):
            return
        if isinstance(node, str):
            self.string(node, where)
            return
        if not isinstance(node, dict):
            raise ValueError(f"{where} is {_json_type(node)}, not a value")
        kind = node.get("kind")
        fields = _NODE_FIELDS.get(kind) if isinstance(kind, str) else None
        if fields is None:
            raise ValueError(f"{where} has an unknown value kind {_short(kind)}")
        required = {k for k, v in fields.items() if not v.startswith("?")}
        extra = sorted(set(node) - set(fields) - {"kind"}, key=str)
        if extra:
            raise ValueError(f"{where}: a {kind} value has an unknown field {_short(extra[0])}")
        missing = sorted(required - set(node))
        if missing:
            raise ValueError(f"{where}: a {kind} value lacks its field {missing[0]!r}")
        for name, rule in fields.items():
            if name in node:
                self._field(node[name], rule.lstrip("?"), f"{where}.{name}", depth)

    @staticmethod
    def string(text, where) -> None:
        if len(text) > MAX_STRING:
            raise ValueError(
                f"{where} is a string of {len(text)} characters (at most {MAX_STRING})"
            )

    def _key(self, value, where, ndim=None) -> None:
        if not isinstance(value, str) or value not in self.table:
            raise ValueError(f"{where} names {_short(value)}, which is not in the array table")
        if value in self.owner:
            raise ValueError(f"{where} names array {value}, which {self.owner[value]} uses")
        self.owner[value] = self.root
        if ndim is not None:
            self.ndim.append((value, ndim, where))

    def _field(self, value, rule, where, depth) -> None:
        if rule == "node":
            self.check(value, where, depth + 1)
        elif rule == "nodes":
            if not isinstance(value, list):
                raise ValueError(f"{where} is {_json_type(value)}, expected a list")
            for i, item in enumerate(value):
                self.check(item, f"{where}[{i}]", depth + 1)
        elif rule == "node_dict":
            if not isinstance(value, dict):
                raise ValueError(f"{where} is {_json_type(value)}, expected an object")
            for k, item in value.items():
                self.string(k, f"{where} key")
                self.check(item, f"{where}[{_short(k)}]", depth + 1)
        elif rule in ("key", "key0", "key1"):
            self._key(value, where, {"key": None, "key0": 0, "key1": 1}[rule])
        elif rule == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{where} is {_json_type(value)}, expected a boolean")
        elif rule == "nonfinite":
            if value not in ("nan", "inf", "-inf"):
                raise ValueError(f"{where} is {_short(value)}, expected 'nan', 'inf' or '-inf'")
        elif rule == "sparse_format":
            if value not in ("csr", "csc"):
                raise ValueError(f"{where} is {_short(value)}, expected 'csr' or 'csc'")
        elif rule == "shape2":
            if not (
                isinstance(value, list)
                and len(value) == 2
                and all(type(v) is int and 0 <= v <= 2**40 for v in value)
            ):
                raise ValueError(f"{where} is not a shape of two sizes")
        elif rule == "name":
            if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][\w.]{0,199}", value):
                raise ValueError(f"{where} is {_short(value)}, not a class name")
        elif rule == "dtype":
            self._dtype(value, where)

    @staticmethod
    def _dtype(value, where) -> None:
        try:
            ok = isinstance(value, str) and len(value) <= 16 and np.dtype(value).kind in "biufc"
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"{where} is {_short(value)}, not a numeric dtype")


def _declared_array(info) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of an entry of the metadata's ``arrays`` table, validated."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "sha256"}:
        raise ValueError("is not an object of dtype, shape and sha256")
    if not isinstance(info["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}", info["sha256"]):
        raise ValueError("has no SHA-256 digest")
    shape = info["shape"]
    try:
        dtype = np.dtype(info["dtype"]) if isinstance(info["dtype"], str) else None
    except TypeError:
        dtype = None
    if (
        dtype is None
        or len(info["dtype"]) > 16
        or dtype.kind not in _ARRAY_KINDS
        or not isinstance(shape, list)
        or len(shape) > 8
        or not all(type(d) is int and 0 <= d <= 2**40 for d in shape)
    ):
        raise ValueError(f"declares an invalid array ({_short(info['dtype'])}, {_short(shape)})")
    return dtype, tuple(shape)


def _check_metadata(meta: dict) -> dict[str, str]:
    """Check the metadata's keys, their types and its value trees (raises ValueError naming
    the key, parameter or attribute); returns the owner of each array (``"fitted attribute
    'components_'"``).  ``format`` and ``format_version`` are checked before."""
    for key, value in meta.items():
        if key not in _META_FIELDS:
            raise ValueError(f"unknown key {_short(key)}")
        types, _ = _META_FIELDS[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"{key!r} is {_json_type(value)}")
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise ValueError(f"{key!r} is a string of {len(value)} characters")
    for key, (_, required) in _META_FIELDS.items():
        if required and key not in meta:
            raise ValueError(f"the key {key!r} is missing")
    table = meta["arrays"]
    for key in table:
        if not _ARRAY_KEY.fullmatch(key):
            raise ValueError(f"array table key {_short(key)} is not an array name")
    trees = _TreeChecker(table)
    for group in ("params", "fitted"):
        for name, node in meta[group].items():
            what = "parameter" if group == "params" else "fitted attribute"
            trees.string(name, f"{what} name")
            trees.check_tree(node, f"{what} {_short(name)}")
    for key, info in table.items():
        if key not in trees.owner:
            raise ValueError(f"array {key} of the array table is not used by any value")
        try:
            _declared_array(info)
        except ValueError as exc:
            raise ValueError(f"{trees.owner[key]}: array {key} {exc}") from None
    for key, ndim, where in trees.ndim:
        if len(table[key]["shape"]) != ndim:
            raise ValueError(f"{where} names array {key}, which is not {ndim}-dimensional")
    for name, value in (meta.get("kernel") or {}).items():
        trees.string(name, "'kernel' key")
        if not isinstance(value, str | int | float | type(None)):
            raise ValueError(f"'kernel' key {_short(name)} is {_json_type(value)}")
        if isinstance(value, str):
            trees.string(value, f"'kernel' {_short(name)}")
    kinds = meta.get("fitted_kinds", {})
    for name, kind in kinds.items():
        if not isinstance(kind, str) or len(kind) > MAX_STRING:
            raise ValueError(f"'fitted_kinds' {_short(name)} is {_json_type(kind)}")
    if "data" in meta:
        _check_data_info(meta["data"])
    return trees.owner


def _read_verified(path):
    """Open a model file, check archive, metadata, sizes and checksums (steps 1-3 of the module
    docstring); return (metadata, arrays by key)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a fastkpca model file (not a regular file)")
    with open(path, "rb") as f:
        file_bytes = os.fstat(f.fileno()).st_size
        zf = _open_archive(f, path, file_bytes)
        with zf:
            try:
                return _read_archive(zf, path, file_bytes)
            except (zipfile.BadZipFile, EOFError, OSError, KeyError, zlib.error) as exc:
                raise _damaged(path, f"{type(exc).__name__}: {exc}") from None
            except ValueError as exc:
                if str(exc).startswith(str(path)):
                    raise
                raise _damaged(path, exc) from None


def _read_archive(zf, path, file_bytes):
    meta_member = _metadata_member(zf, path)
    members = _check_members(zf, file_bytes)
    limit = MAX_EXPANSION * file_bytes + EXPANSION_SLACK
    try:
        text = _read_string(
            zf, meta_member, max_bytes=min(MAX_METADATA_BYTES, limit), what="metadata"
        )
    except ValueError as exc:
        if "not a string" in str(exc) and meta_member.file_size < 4096:
            raise ValueError(f"{path} is not a fastkpca model file ({exc})") from None
        raise
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _damaged(path, f"unreadable metadata: {type(exc).__name__}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"{path} is not a fastkpca model file (format {_short(found)})")
    version = meta.get("format_version")
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        written = meta.get("fastkpca_version")
        written = _short(written)[1:-1] if isinstance(written, str) else "?"
        raise ValueError(
            f"{path}: unknown model file format version {_short(version)} (this "
            f"fastkpca {__version__} reads versions 1 to {FORMAT_VERSION}; the file was "
            f"written by fastkpca {written})"
        )
    checksum_member = members.get(f"{_CHECKSUM_KEY}.npy")
    if checksum_member is None:
        raise _damaged(path, "no metadata checksum")
    checksum = _read_string(zf, checksum_member, max_bytes=1024, what="checksum")
    if checksum != hashlib.sha256(text.encode()).hexdigest():
        raise _damaged(path, "metadata checksum mismatch")
    try:
        owners = _check_metadata(meta)
    except ValueError as exc:
        raise ValueError(f"{path}: malformed model metadata: {exc}") from None
    table = meta["arrays"]
    expected = {f"{_META_KEY}.npy", f"{_CHECKSUM_KEY}.npy"}
    declared = meta_member.file_size + checksum_member.file_size
    for key, info in table.items():
        member = members.get(f"{key}.npy")
        if member is None:
            raise _damaged(path, f"array {key} is missing")
        dtype, shape = _declared_array(info)
        _check_member(zf, member, dtype=dtype, shape=shape, what=f"array {key} ({owners[key]})")
        expected.add(member.filename)
        declared += member.file_size
    extra = sorted(set(members) - expected)
    if extra:
        raise _damaged(path, f"unexpected member(s) {', '.join(map(_short, extra[:5]))}")
    if declared > limit:
        raise ValueError(
            f"{path}: refusing a model file whose arrays expand to {declared} bytes "
            f"from {file_bytes} bytes on disk (more than {MAX_EXPANSION}-fold; "
            "fastkpca writes arrays uncompressed)"
        )
    arrays = {}
    for key, info in table.items():
        a = _read_member(zf, members[f"{key}.npy"])
        if _array_digest(a) != info["sha256"]:
            raise _damaged(path, f"checksum mismatch in array {key} ({owners[key]})")
        arrays[key] = a
    return meta, arrays


# --- loading ------------------------------------------------------------------------------------


def _build_model(meta: dict, arrays: dict, path):
    """The estimator a verified file describes, once it passed step 4 of the module docstring."""
    cls = _saved_class(meta["estimator"], meta.get("module"))
    allowed = fitted_attribute_names(cls)
    unknown = sorted(set(meta["fitted"]) - allowed - legacy_fitted_names(cls))
    if unknown:
        raise ValueError(
            f"{path}: the model file sets {', '.join(map(_short, unknown[:5]))}, not a fitted "
            f"attribute of {cls.__name__} (allowed: {', '.join(sorted(allowed))})"
        )
    dec = _Decoder(arrays)
    try:
        params = {
            name: dec.decode(node, f"parameter {name!r}", states=False)
            for name, node in meta["params"].items()
        }
        fitted = {
            name: dec.decode(node, f"fitted attribute {name!r}")
            for name, node in meta["fitted"].items()
        }
        fitted = upgrade_fitted(cls, fitted)  # a file of an earlier version: the current form
        check_fitted(cls, fitted)
        params = _computable_here(upgrade_params(cls, params), path)
        model = check_params(cls, params)
    except ValueError as exc:
        raise ValueError(f"{path}: invalid {cls.__name__} model: {exc}") from None
    for name, value in fitted.items():
        setattr(model, name, value)
    return model


def _computable_here(params: dict, where) -> dict:
    """The parameters with a ``device`` this machine cannot compute on replaced by None (with a
    warning): a model fitted on a GPU loads, and computes, on a machine without one (its arrays
    are host arrays in the file either way).  ``where`` names the file or the nested model."""
    device = params.get("device")
    if device is None:
        return params
    try:
        check_device(device)
    except ValueError:
        return params  # an invalid value: check_params names it
    if device_available(device):
        return params
    warnings.warn(
        f"{where}: the model was saved with device={device!r}, which this machine does not "
        "have; it computes where the data live (device=None)",
        UserWarning,
        stacklevel=4,
    )
    return {**params, "device": None}


def load(path):
    """Load a model saved by ``model.save(path)`` / :func:`save_model`; the file is untrusted
    (what is checked: the module docstring).

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Not a valid fastkpca model file of a known format, class and fitted state; the message
        names the file and what is wrong.
    """
    return load_with_info(path)[0]


def load_with_info(path):
    """``(model, metadata)`` of a model file: :func:`load`'s model and the verified metadata.

    The metadata's ``"data"`` entry (when the file has one) describes the training file: its
    feature ``columns`` (names), its ``label_column``, its ``format`` and, for LIBSVM, its
    ``libsvm_index_base``.
    """
    meta, arrays = _read_verified(path)
    return _build_model(meta, arrays, path), meta


#: Alias of :func:`load`.
load_model = load


def model_info(path) -> dict:
    """The verified metadata of a model file, for ``fastkpca info``.

    The file passes every check :func:`load` makes (so what is shown is a model that loads);
    ``fitted_kinds`` is recomputed from the loaded attributes, and ``file_bytes``,
    ``array_bytes`` and ``eigenvalues`` (when the model has them) are added.
    """
    meta, arrays = _read_verified(path)
    model = _build_model(meta, arrays, path)
    fitted = _fitted_attributes(model)
    meta = dict(meta)
    meta["fitted_kinds"] = {name: _kind(value) for name, value in fitted.items()}
    meta["file_bytes"] = Path(path).stat().st_size
    meta["array_bytes"] = int(sum(a.nbytes for a in arrays.values()))
    eig = fitted.get("eigenvalues_")
    if isinstance(eig, np.ndarray) and eig.ndim == 1:
        meta["eigenvalues"] = eig.tolist()
    return meta


def is_model_file(path) -> bool:
    """Whether ``path`` is a fastkpca model file; False for anything else, never an error.

    Reads the zip directory and the metadata member alone (at most :data:`MAX_METADATA_BYTES`):
    True when it is a JSON object of format :data:`FORMAT_NAME`, of any version.  Arrays are
    not verified (:func:`load` does that).
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            file_bytes = os.fstat(f.fileno()).st_size
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return False
            with _open_archive(f, path, file_bytes) as zf:
                member = _metadata_member(zf, path)
                if member.flag_bits & 0x1 or member.compress_type not in _COMPRESSIONS:
                    return False
                text = _read_string(zf, member, max_bytes=MAX_METADATA_BYTES, what="metadata")
        meta = json.loads(text)
    except Exception:  # the answer for a file that is not a readable model is False
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT_NAME
