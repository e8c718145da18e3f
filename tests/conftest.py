import gc
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FASTKPCA_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def least_traced_peak(call, repeats=3) -> int:
    """The least tracemalloc peak, in bytes, of ``repeats`` runs of ``call()``.

    tracemalloc counts every thread's allocations and whatever a garbage collection's finalizers
    allocate, so a thread an earlier test left running (dask's event loop, tqdm's monitor) can
    add to one run's peak; the least of a few runs is the call's own (an excess of the call
    itself shows in every run).
    """
    peaks = []
    for _ in range(repeats):
        gc.collect()
        tracemalloc.start()
        try:
            call()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return min(peaks)


def align_signs(A, B):
    """B with its columns' signs flipped to match A."""
    s = np.sign(np.sum(A * B, axis=0))
    s[s == 0] = 1
    return B * s


def rel_err(A, B):
    """max |A - B| / max |A| after aligning column signs."""
    A = np.asarray(A, dtype=np.float64)
    B = align_signs(A, np.asarray(B, dtype=np.float64))
    return float(np.max(np.abs(A - B)) / np.max(np.abs(A)))


def spectrum_matrix(vals, seed=0):
    """The symmetric matrix ``Q diag(vals) Q^T`` with a random orthogonal Q, and Q."""
    import scipy.linalg as la

    n = len(vals)
    Q, _ = la.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return (Q * vals) @ Q.T, Q


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: skipped with the reason where there is none (CI
    has none; they run on a GPU machine with ``-m gpu``)."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (PyTorch sees none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# --- array namespaces: one test over numpy, PyTorch's CPU, array_api_strict and CUDA -------------
class Namespace:
    """One array namespace a test runs on, and the conversions of test data to it and back.

    ``to_ns(X)`` turns a numpy array into this namespace's array (same dtype and values; on
    the namespace's default device), ``from_ns(Z)`` turns an array of this namespace (or numpy)
    back into numpy, and ``is_native(Z)`` says whether ``Z`` is this namespace's array.
    """

    def __init__(self, name: str):
        self.name = name
        if name in ("torch-cpu", "cuda"):
            self.torch = pytest.importorskip("torch")
            if name == "cuda" and not self.torch.cuda.is_available():
                pytest.skip("needs a CUDA device (PyTorch sees none here)")
        elif name == "array_api_strict":
            self.strict = pytest.importorskip("array_api_strict")

    def __repr__(self):
        return f"Namespace({self.name!r})"

    def to_ns(self, X):
        X = np.asarray(X)
        if self.name == "numpy":
            return X
        if self.name == "array_api_strict":
            return self.strict.asarray(X)
        t = self.torch.from_numpy(np.ascontiguousarray(X))
        return t.cuda() if self.name == "cuda" else t

    def from_ns(self, Z):
        if isinstance(Z, np.ndarray):
            return Z
        if self.name == "array_api_strict" or type(Z).__module__.startswith("array_api_strict"):
            return np.from_dlpack(Z)
        return Z.detach().cpu().numpy()

    def is_native(self, Z) -> bool:
        if self.name == "numpy":
            return isinstance(Z, np.ndarray)
        if self.name == "array_api_strict":
            return type(Z).__module__.startswith("array_api_strict")
        if not isinstance(Z, self.torch.Tensor):
            return False
        return Z.device.type == ("cuda" if self.name == "cuda" else "cpu")


@pytest.fixture(scope="module")
def one_torch_thread():
    """CPU torch on one thread while a module's tests run: its OpenMP workers spin when the
    cores are shared (a 300 x 300 eigh took seconds instead of 15 ms on a loaded two-core
    machine); results do not depend on it beyond rounding."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(
    params=[
        "numpy",
        "torch-cpu",
        "array_api_strict",
        pytest.param("cuda", marks=pytest.mark.gpu),
    ]
)
def namespace(request):
    """The namespace a test runs on (skipped where its library or device is missing)."""
    return Namespace(request.param)
