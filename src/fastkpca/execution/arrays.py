"""Array namespaces and devices: which library holds the rows, where they live, and moving arrays
between the host and a device.

scikit-learn's array-API convention: the namespace and device are read once from the input,
computations call ``xp.`` functions on that device, and conversion to numpy happens only at the
edges.  A :class:`Placement` is that pair, decided once per fit (:func:`placement_for`): host
data (:func:`is_host_array`) with ``device=None`` stays on the host (numpy and the threaded
paths); arrays of another namespace (:func:`is_namespace_array`) run where they live, and so
does host data with a ``device``, sent there block by block.  Any other device is one
``ValueError`` (:func:`check_device`).  Random draws are made on the host and moved
(:meth:`Placement.asarray`), so every namespace gets the same model up to rounding.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._state import state_class_name

__all__ = [
    "check_device",
    "device_available",
    "Placement",
    "HOST",
    "placement_for",
    "placement_of",
    "get_namespace",
    "data_placement",
    "is_host_array",
    "is_namespace_array",
    "is_dask_array",
    "is_array",
    "float_dtype",
    "detached",
    "row_range",
    "take_rows",
    "to_host",
    "output_like",
]

#: What ``device=`` may name, for the error that refuses anything else.
SUPPORTED_DEVICES = (
    "'cpu', 'cuda' or 'cuda:<index>' (PyTorch), 'numpy' or 'host' (the host's numpy paths), a "
    "torch.device of type cpu or cuda, or None (compute where the data live)"
)

#: PyTorch device types fastkpca computes on.
_TORCH_TYPES = ("cpu", "cuda")

#: Device types PyTorch knows (``torch.device`` parses them) that fastkpca does not compute on.
_OTHER_TORCH_TYPES = (
    "meta",
    "mps",
    "xpu",
    "hpu",
    "ipu",
    "mtia",
    "maia",
    "xla",
    "lazy",
    "vulkan",
    "hip",
    "ve",
    "fpga",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "privateuseone",
)

#: Why a device type PyTorch knows is refused (the rest: "PyTorch's X backend is not supported").
_REFUSED = {
    "meta": "a meta tensor holds no values to compute with",
    "mps": "Apple's MPS backend has no float64, which the accumulations and eigensolvers need",
}

#: The libraries whose arrays are namespace arrays (told from the type's module, never imported).
_NAMESPACE_LIBRARIES = ("torch", "cupy", "array_api_strict", "jax", "jaxlib")

_TORCH_EXTRA = 'pip install "fastkpca[torch]"'


def _compat():
    """array-api-compat, or a ValueError saying how to install it."""
    try:
        return importlib.import_module("array_api_compat")
    except ImportError as exc:
        raise ValueError(
            "computing on PyTorch tensors or CuPy arrays needs array-api-compat, which is not "
            f"installed: {_TORCH_EXTRA}"
        ) from exc


def _torch_namespace():
    _compat()
    return importlib.import_module("array_api_compat.torch")


def _is_sparse(X) -> bool:
    """A scipy.sparse matrix or array, told by its type's module (so that reading where data
    live does not import scipy: the command line's parser checks ``--device`` with it)."""
    return type(X).__module__.startswith("scipy.sparse")


def is_dask_array(X) -> bool:
    """True for a ``dask.array.Array``, told from its type's module so dask is never imported."""
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "dask")


def is_namespace_array(X) -> bool:
    """True for an array of an array namespace other than numpy's: a PyTorch tensor, a CuPy
    array, an ``array_api_strict`` array (any object with ``__array_namespace__`` that is not a
    numpy or Dask array)."""
    kind = type(X)
    if kind.__module__.partition(".")[0] in _NAMESPACE_LIBRARIES:
        return hasattr(X, "shape") and hasattr(X, "dtype") and hasattr(X, "ndim")
    return (
        hasattr(kind, "__array_namespace__")
        and not isinstance(X, np.ndarray | np.generic)
        and not is_dask_array(X)
    )


def is_host_array(X) -> bool:
    """True for host data, what the numpy paths read: numpy arrays, memory maps and scalars,
    scipy.sparse matrices, pandas frames, lists and Python numbers (and Dask arrays of those);
    False for arrays of another namespace (:func:`is_namespace_array`)."""
    return not is_namespace_array(X)


def is_array(value) -> bool:
    """A dense array of any placement (numpy or another namespace's); not a sparse matrix, a
    scalar, a list."""
    return isinstance(value, np.ndarray) or is_namespace_array(value)


def float_dtype(dtype) -> np.dtype:
    """The float dtype rows of ``dtype`` are computed in (numpy's, for any namespace's dtype):
    float32 stays float32; float64, integers, booleans, float16 and bfloat16 become float64, as
    scikit-learn's ``check_array(dtype=[float64, float32])`` converts numpy rows."""
    name = str(dtype).rsplit(".", 1)[-1]
    return np.dtype(np.float32) if name == "float32" else np.dtype(np.float64)


def detached(a):
    """A PyTorch tensor without its autograd graph (fastkpca computes no gradients); any other
    array as it is."""
    return a.detach() if getattr(a, "requires_grad", False) else a


def _refused_device(device, kind: str | None) -> ValueError:
    reason = _REFUSED.get(kind or "", "")
    if not reason and kind is not None:
        reason = f"PyTorch's {kind} backend is not supported"
    reason = f" ({reason})" if reason else ""
    return ValueError(
        f"device={device!r} is not a device fastkpca can compute on{reason}; use "
        f"{SUPPORTED_DEVICES}"
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a fit's arrays live and which namespace computes on them.

    Attributes
    ----------
    xp : module
        The array namespace (numpy on the host, ``array_api_compat.torch``,
        ``array_api_compat.cupy`` or ``array_api_strict`` elsewhere).
    device : object
        The namespace's device (``"cpu"`` for numpy, a ``torch.device``, a CuPy device, an
        ``array_api_strict.Device``).
    host : bool
        Whether this is numpy on the host, where the threaded numpy paths run.
    """

    xp: Any
    device: Any
    host: bool
    name: str = field(default="numpy", compare=False)

    @property
    def is_torch(self) -> bool:
        return self.name.startswith("torch")

    @property
    def is_cuda(self) -> bool:
        return self.is_torch and getattr(self.device, "type", None) == "cuda"

    @property
    def in_host_memory(self) -> bool:
        """Whether the arrays live in host memory (numpy, PyTorch CPU tensors,
        ``array_api_strict`` arrays), where the host's LAPACK is the faster way to solve small
        dense problems; False on a GPU."""
        if self.host or self.name.startswith("array_api_strict"):
            return True
        return self.is_torch and getattr(self.device, "type", None) == "cpu"

    def __deepcopy__(self, memo):
        return self  # immutable; its namespace is a module, which cannot be copied

    def __reduce__(self):
        # Pickled (a model in joblib, a Dask task) by name and device, not by its module.
        return (_restore_placement, (self.name, str(self.device)))

    def asarray(self, a, dtype=None):
        """``a`` (host data, a scalar, a scipy.sparse matrix, which is made dense, or an array of
        any namespace) as an array of this namespace on this device, detached from any autograd
        graph.  ``dtype`` (numpy's or the namespace's) casts; without it, host floats keep their
        precision and other values their dtype."""
        if _is_sparse(a):
            a = a.toarray()
        if self.host:
            return np.asarray(to_host(a), dtype=dtype)
        xp = self.xp
        dtype = self.dtype(dtype)
        if is_namespace_array(a):
            a = detached(a)
            if placement_of(a).xp is xp:
                a = a if _same_device(placement_of(a).device, self.device) else _moved(a, self)
                return a if dtype is None else xp.astype(a, dtype)
            a = to_host(a)  # another namespace's array: through the host
        a = np.asarray(a)
        if dtype is None and a.dtype in (np.float32, np.float64):
            dtype = self.dtype(a.dtype)
        if self.is_torch:
            torch = importlib.import_module("torch")
            return torch.from_numpy(np.ascontiguousarray(a)).to(device=self.device, dtype=dtype)
        return xp.asarray(a, dtype=dtype, device=self.device)

    def dtype(self, dtype):
        """The namespace's dtype for a numpy dtype (``np.float32`` -> ``xp.float32``)."""
        if dtype is None:
            return None
        if not isinstance(dtype, np.dtype | type) and not isinstance(dtype, str):
            return dtype  # already the namespace's
        kind = np.dtype(dtype)
        names = {
            np.dtype(np.float32): "float32",
            np.dtype(np.float64): "float64",
            np.dtype(np.int64): "int64",
            np.dtype(np.int32): "int32",
            np.dtype(np.bool_): "bool",
        }
        return getattr(self.xp, names[kind])

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on the host): for timings only."""
        if self.is_cuda:
            torch = importlib.import_module("torch")
            torch.cuda.synchronize(self.device)

    def free_memory_bytes(self) -> int | None:
        """Free memory of the device, or None on the host (see
        :func:`fastkpca.execution.available_memory_bytes`)."""
        if self.is_cuda:
            torch = importlib.import_module("torch")
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free)
        return None

    def carry(self, value):
        """A fitted attribute's value as this placement holds it: an array moved here
        (:meth:`asarray`); on the host, an object with registered state (a feature map, a
        sketch: ``to_state`` / ``from_state``) rebuilt from host copies of its state (on a
        device such objects move their own arrays when they are used); anything else as it
        is."""
        if is_array(value):
            return self.asarray(value)
        if self.host and state_class_name(value) is not None:
            return type(value).from_state(_tree_on_host(value.to_state()))
        return value


def _tree_on_host(node):
    if isinstance(node, dict):
        return {k: _tree_on_host(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return type(node)(_tree_on_host(v) for v in node)
    return to_host(node)


def _same_device(a, b) -> bool:
    return str(a) == str(b)


def _moved(a, placement: Placement):
    """A namespace array moved to another device of its own namespace."""
    return _compat().to_device(a, placement.device)


#: The host: numpy arrays (numpy is its own namespace; array-api-compat is needed only for the
#: other namespaces, with the ``torch`` extra).
HOST = Placement(xp=np, device="cpu", host=True, name="numpy")


def _restore_placement(name: str, device: str) -> Placement:
    """The placement a pickled :class:`Placement` names (see ``Placement.__reduce__``)."""
    if name == HOST.name:
        return HOST
    if name.startswith("torch"):
        return placement_for(None, device)
    if name.startswith("cupy"):
        cupy = importlib.import_module("cupy")
        index = int("".join(ch for ch in device if ch.isdigit()) or 0)
        _compat()
        xp = importlib.import_module("array_api_compat.cupy")
        return Placement(xp=xp, device=cupy.cuda.Device(index), host=False, name=name)
    if name.startswith("array_api_strict"):
        xp = importlib.import_module("array_api_strict")
        found = re.search(r"'([^']*)'", device)
        strict_device = xp.Device(found.group(1)) if found else xp.Device()
        return Placement(xp=xp, device=strict_device, host=False, name=name)
    raise ValueError(f"cannot restore the placement {name!r}")


def placement_of(X) -> Placement:
    """The placement of an array: the host for host data (:func:`is_host_array`), else its
    namespace and device; ValueError for an array on a device fastkpca cannot compute on (a
    ``meta`` or ``mps`` tensor)."""
    if X is None or not is_namespace_array(X):
        return HOST
    compat = _compat()
    xp = compat.array_namespace(X)
    device = compat.device(X)
    if compat.is_torch_array(X):
        if device.type not in _TORCH_TYPES:
            raise _refused_device(str(device), device.type)
        name = f"torch:{device}"
    elif compat.is_cupy_array(X):
        name = f"cupy:{device}"
    else:
        name = f"{xp.__name__}:{device}"
    return Placement(xp=xp, device=device, host=False, name=name)


def get_namespace(X):
    """The array namespace of X (``placement_of(X).xp``: numpy for host data), as
    scikit-learn's ``get_namespace``."""
    return placement_of(X).xp


def data_placement(X) -> Placement | None:
    """Where the data given to a call live, read from types alone (no row is read): an array's
    :func:`placement_of`; a list or tuple of row blocks, its first block's; an object that
    states it (a row source's ``origin``); the host for other host data (arrays, sparse
    matrices, frames, Dask arrays); None for what cannot tell without being read (iterators,
    file readers) or is not data."""
    if isinstance(X, list | tuple):
        return data_placement(X[0]) if X else None
    if is_namespace_array(X):
        return placement_of(X)
    origin = getattr(X, "origin", None)
    if isinstance(origin, Placement):
        return origin
    if isinstance(X, np.ndarray) or _is_sparse(X) or is_dask_array(X):
        return HOST
    if type(X).__module__.startswith("pandas."):
        return HOST
    return None


def placement_for(X, device=None) -> Placement:
    """Where a fit on X computes: X's own device, or ``device`` for host data.

    Parameters
    ----------
    X : array-like, tensor, iterable of blocks, dask array, ...
        The input (only its type is read).
    device : None, str or torch.device
        None: where X lives.  ``"cuda"``, ``"cuda:1"``, ``"cpu"`` or a ``torch.device``: host
        data is sent there block by block; a tensor on another device is moved.  ``"numpy"`` /
        ``"host"``: the host numpy paths (a tensor is copied; the output follows the input).

    Returns
    -------
    Placement

    Raises
    ------
    ValueError
        For a device fastkpca cannot compute on (:func:`check_device`), a missing CUDA device,
        or PyTorch or array-api-compat missing, before any work.
    """
    device = check_device(device)
    if device is None:
        return placement_of(X)
    if isinstance(device, str) and device.lower() in ("numpy", "host"):
        return HOST
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise ValueError(
            f"device={device!r} needs PyTorch, which is not installed: {_TORCH_EXTRA}, or leave "
            "device=None to compute where the data live"
        ) from exc
    dev = torch.device(device)
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device={device!r} is not available here: PyTorch sees no CUDA device on this "
                "machine; use device='cpu' or None"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= count:
            raise ValueError(
                f"device={device!r} is not available here: PyTorch sees {count} CUDA "
                f"device(s), cuda:0 to cuda:{count - 1}"
            )
    return Placement(xp=_torch_namespace(), device=dev, host=False, name=f"torch:{dev}")


def check_device(device):
    """``device`` checked for its form (ValueError naming it and what is supported otherwise):
    None, ``"numpy"`` / ``"host"``, ``"cpu"``, ``"cuda"``, ``"cuda:<index>"`` or a
    ``torch.device`` of type cpu or cuda.  Whether a CUDA device exists here is checked when a
    call uses it (:func:`placement_for`), so a model saved on a GPU machine loads anywhere."""
    if device is None:
        return None
    if isinstance(device, str):
        if device.lower() in ("numpy", "host"):
            return device
        kind, colon, index = device.partition(":")
        if kind in _TORCH_TYPES and (not colon or index.isdigit()):
            return device
        raise _refused_device(device, kind if kind in _OTHER_TORCH_TYPES else None)
    if type(device).__module__.startswith("torch") and type(device).__name__ == "device":
        if device.type in _TORCH_TYPES:
            return device
        raise _refused_device(device, device.type)
    raise ValueError(
        f"device must be a device name or a torch.device, got {device!r}; use {SUPPORTED_DEVICES}"
    )


def device_available(device) -> bool:
    """Whether a call with this ``device`` can run here (its library and hardware present)."""
    try:
        placement_for(None, device)
    except ValueError:
        return False
    return True


def row_range(X, start: int, stop: int):
    """Rows ``start:stop`` of X (a view), for any namespace: the stop clipped to the rows there
    are and the other axes kept by ``...``, as ``array_api_strict`` (the standard) requires."""
    n = int(X.shape[0])
    return X[min(int(start), n) : min(int(stop), n), ...]


def take_rows(X, indices):
    """The rows of X at ``indices`` (integers on the host), in X's placement: numpy and sparse
    rows by fancy indexing, another namespace's with ``xp.take`` (the array API's only integer
    indexing)."""
    if not is_namespace_array(X):
        return X[indices]
    placement = placement_of(X)
    index = placement.asarray(np.asarray(indices, dtype=np.int64))
    return placement.xp.take(X, index, axis=0)


def to_host(a):
    """A numpy array of a namespace array (detached from any autograd graph; bfloat16, which
    numpy lacks, as float64), or the object itself when it is host data."""
    if a is None or not is_namespace_array(a):
        return a
    module = type(a).__module__
    if module.startswith("torch"):
        a = a.detach()
        if str(a.dtype) == "torch.bfloat16":
            a = a.double()  # numpy has no bfloat16; float64 holds it exactly, as the edge uses
        return a.cpu().numpy()
    if module.startswith("cupy"):
        return a.get()
    try:
        return np.from_dlpack(a)
    except (TypeError, ValueError, RuntimeError, BufferError, AttributeError):
        return np.asarray(a)


def output_like(a, X):
    """``a`` (an array of any placement) as the type and device of the input X, in X's float
    dtype (:func:`float_dtype`: float32 stays float32, anything else float64): what
    ``transform`` returns.  A list of blocks gives its first block's type; a host result that
    is not a numpy array (a Dask array) is returned as it is."""
    target = data_placement(X) or HOST
    first = X[0] if isinstance(X, list | tuple) and X else X
    dtype = getattr(first, "dtype", None)
    dtype = None if dtype is None else float_dtype(dtype)
    if target.host:
        if not is_namespace_array(a) and not isinstance(a, np.ndarray):
            return a
        out = to_host(a)
        return out if dtype is None else out.astype(dtype, copy=False)
    return target.asarray(a, dtype=dtype)
