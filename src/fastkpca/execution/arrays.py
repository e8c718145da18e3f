"""Array namespaces and devices: which library holds the rows, where they live, and moving arrays
between the host and a device.

scikit-learn's array-API convention: the namespace and device are read once from the input
(``array_api_compat.array_namespace``), computations call ``xp.`` functions and create arrays on
that device, and conversion to numpy happens only at the edges (model files, the command line).
A :class:`Placement` is that pair, decided once per fit (:func:`placement_for`):

* numpy arrays (and scipy.sparse matrices, memory maps, files, Dask arrays: anything on the host)
  with ``device=None`` stay on the host, where the threaded numpy paths of
  :mod:`fastkpca.execution.threads` run;
* PyTorch tensors and CuPy arrays run where they live (``xp`` is array-api-compat's wrapper of
  their library), and so does host data with ``device="cuda"`` (or any torch device), sent there
  block by block.

Random draws never come from a device generator: they are drawn on the host from
``random_state`` and moved (:meth:`Placement.asarray`), so numpy, CPU torch and CUDA give the same
model up to rounding.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "check_device",
    "Placement",
    "HOST",
    "placement_for",
    "placement_of",
    "is_host_array",
    "to_host",
]


def _compat():
    return importlib.import_module("array_api_compat")


def is_host_array(X) -> bool:
    """True for anything the numpy paths read directly: numpy arrays and memory maps, scipy.sparse
    matrices, pandas frames, lists; False for PyTorch tensors and CuPy arrays (and other
    array-API arrays that are not numpy's)."""
    module = type(X).__module__
    return not module.startswith(("torch", "cupy", "jax", "array_api_strict"))


@dataclass(frozen=True)
class Placement:
    """Where a fit's arrays live and which namespace computes on them.

    Attributes
    ----------
    xp : module
        The array namespace (numpy on the host, ``array_api_compat.torch`` or
        ``array_api_compat.cupy`` on a device).
    device : object
        The namespace's device (``"cpu"`` for numpy, a ``torch.device``, a CuPy device).
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
        """Whether the arrays live in host memory (numpy, or PyTorch CPU tensors), where the
        host's LAPACK is the faster way to solve small dense problems; False on a GPU."""
        return self.host or (self.is_torch and getattr(self.device, "type", None) == "cpu")

    def __deepcopy__(self, memo):
        return self  # immutable; its namespace is a module, which cannot be copied

    def __reduce__(self):
        # Pickled (a model in joblib, a Dask task) by name and device, not by its module.
        return (_restore_placement, (self.name, str(self.device)))

    def asarray(self, a, dtype=None):
        """``a`` (a host array, a scalar or an array of this namespace) on this device."""
        if self.host:
            a = to_host(a)
            return np.asarray(a, dtype=dtype)
        xp = self.xp
        dtype = self.dtype(dtype) if dtype is not None else None
        if is_host_array(a):
            a = np.asarray(a)
            if dtype is None and a.dtype.kind == "f":
                dtype = self.dtype(a.dtype)
            if self.is_torch:
                import torch

                t = torch.from_numpy(np.ascontiguousarray(a))
                return t.to(device=self.device, dtype=dtype)
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
            import torch

            torch.cuda.synchronize(self.device)

    def free_memory_bytes(self) -> int | None:
        """Free memory of the device, or None on the host (see
        :func:`fastkpca.execution.available_memory_bytes`)."""
        if self.is_cuda:
            import torch

            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free)
        return None


#: The host: numpy arrays (numpy is its own namespace; array-api-compat is needed only for the
#: device namespaces, with the ``torch`` extra).
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
        xp = importlib.import_module("array_api_compat.cupy")
        return Placement(xp=xp, device=cupy.cuda.Device(index), host=False, name=name)
    raise ValueError(f"cannot restore the placement {name!r}")


def placement_of(X) -> Placement:
    """The placement of an array: the host for numpy-like data, else its namespace and device."""
    if X is None or is_host_array(X):
        return HOST
    compat = _compat()
    xp = compat.array_namespace(X)
    device = compat.device(X)
    if compat.is_torch_array(X):
        name = f"torch:{device}"
    elif compat.is_cupy_array(X):
        name = f"cupy:{device}"
    else:
        name = f"{xp.__name__}:{device}"
    return Placement(xp=xp, device=device, host=False, name=name)


def placement_for(X, device=None) -> Placement:
    """Where a fit on X computes: X's own device, or ``device`` for host data.

    Parameters
    ----------
    X : array-like, tensor, iterable of blocks, dask array, ...
        The input (only its type is read; an iterable of blocks is placed by ``device``).
    device : None, str or torch.device
        None: where X lives (host data stays on the host).  ``"cuda"``, ``"cuda:1"``, ``"cpu"``
        or a ``torch.device``: host data is sent there block by block (PyTorch); a tensor on
        another device is moved.  ``"numpy"`` / ``"host"``: the host numpy paths, whatever X is
        (a tensor is copied to the host; the output still follows the input).

    Returns
    -------
    Placement
    """
    if isinstance(device, str) and device.lower() in ("numpy", "host"):
        return placement_of(None)
    if device is None:
        return placement_of(X)
    try:
        import torch
    except ImportError as exc:
        raise ValueError(
            f"device={device!r} needs PyTorch, which is not installed; install "
            "fastkpca[torch] or leave device=None to compute where the data lives"
        ) from exc
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a device PyTorch knows: {exc}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: PyTorch sees no CUDA device on this machine")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    xp = importlib.import_module("array_api_compat.torch")
    return Placement(xp=xp, device=dev, host=False, name=f"torch:{dev}")


def check_device(device):
    """``device`` checked for its form (ValueError naming it otherwise): None, ``"numpy"`` /
    ``"host"``, a device string PyTorch parses (``"cpu"``, ``"cuda"``, ``"cuda:1"``) or a
    ``torch.device``.  Whether the device exists here is checked when a call uses it."""
    if device is None:
        return None
    if isinstance(device, str):
        if device.lower() in ("numpy", "host"):
            return device
        try:
            import torch
        except ImportError:
            if device.split(":")[0] in ("cpu", "cuda", "mps", "xpu"):
                return device
            raise ValueError(f"device={device!r} is not a device name") from None
        try:
            torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device={device!r} is not a device PyTorch knows: {exc}") from None
        return device
    if type(device).__module__.startswith("torch") and type(device).__name__ == "device":
        return device
    raise ValueError(
        f"device must be None, a device name such as 'cuda' or a torch.device, got {device!r}"
    )


def device_available(device) -> bool:
    """Whether a call with this ``device`` can run here (its library and hardware present)."""
    try:
        placement_for(None, device)
    except ValueError:
        return False
    return True


def to_host(a):
    """A numpy array (or the object itself when it is not a device array)."""
    if a is None or is_host_array(a):
        return a
    compat = _compat()
    if compat.is_torch_array(a):
        return a.detach().cpu().numpy()
    if compat.is_cupy_array(a):
        return a.get()
    return np.asarray(a)


def output_like(a, X):
    """``a`` (an array of any placement) as the type, device and float dtype of the input X:
    what ``transform`` returns."""
    target = placement_of(X)
    dtype = getattr(X, "dtype", None)
    if target.host:
        out = to_host(a)
        if dtype is not None and np.dtype(dtype) == np.float32:
            return np.asarray(out, dtype=np.float32)
        return out
    return target.asarray(a if not target.is_torch else a, dtype=dtype)
