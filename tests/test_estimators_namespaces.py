"""Every estimator on every array namespace equals its numpy path (the ``namespace`` fixture:
numpy, PyTorch's CPU, ``array_api_strict``; CUDA under the ``gpu`` marker).

The contract: arrays of a namespace in, that namespace's arrays out, of the same float dtype and
on the same device; fitted arrays there; the same ``random_state`` gives the same model as numpy
(random draws come from the host generator), up to rounding; a model fitted there saves to a
model file that loads (and transforms numpy rows) on the host; ``device=`` sends host data to a
device and gives host output.  Tolerances: float64 paths agree to 1e-8 relative (different
summation orders of the same float64 products, amplified by at most the inverse eigengap of these
well-separated spectra); float32 input, and the float32 features / kernel rows that the float64
paths also use, agree to 2e-4 relative (float32's 6e-8 rounding, times the feature count's sqrt
and the eigengap).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rel_err

import fastkpca
from fastkpca import (
    ExactKPCA,
    KernelPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
    compress_expansion,
)
from fastkpca.datasets import make_random_noisy

#: name -> factory of an estimator whose model depends on nothing but its random_state.
ESTIMATORS = {
    "exact": lambda **kw: ExactKPCA(4, gamma=0.05, random_state=0, **kw),
    "exact_matrix_free": lambda **kw: ExactKPCA(
        4, gamma=0.05, eigen_solver="matrix_free", random_state=0, **kw
    ),
    "kernel_pca": lambda **kw: KernelPCA(4, kernel="rbf", gamma=0.05, random_state=0, **kw),
    "nystrom": lambda **kw: NystromKPCA(4, n_landmarks=60, gamma=0.05, random_state=0, **kw),
    "nystrom_randomized": lambda **kw: NystromKPCA(
        4, n_landmarks=60, gamma=0.05, solver="randomized", random_state=0, **kw
    ),
    "rf_exact": lambda **kw: RandomFeatureKPCA(
        4, n_random_features=128, gamma=0.05, solver="exact", random_state=0, **kw
    ),
    "rf_randomized": lambda **kw: RandomFeatureKPCA(
        4, n_random_features=128, gamma=0.05, solver="randomized", random_state=0, **kw
    ),
    "streaming": lambda **kw: StreamingKPCA(
        4, n_random_features=128, sketch_size=16, gamma=0.05, random_state=0, **kw
    ),
    "reduced_set": lambda **kw: ReducedSetKPCA(4, gamma=0.05, random_state=0, **kw),
    "sparsified": lambda **kw: SparsifiedKPCA(4, gamma=0.05, random_state=0, **kw),
}
NAMES = sorted(ESTIMATORS)

RTOL = {np.float64: 1e-8, np.float32: 2e-4}
#: Models whose float64 fit computes float32 features or kernel rows (as on the host).
FLOAT32_INSIDE = {"rf_exact", "rf_randomized", "streaming", "nystrom", "nystrom_randomized"}


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


def _tol(name, dtype):
    return RTOL[np.float32] if dtype == np.float32 or name in FLOAT32_INSIDE else RTOL[dtype]


def _public_arrays(model) -> dict:
    """The public fitted arrays (dense: sparse matrices stay on the host)."""
    return {
        k: v
        for k, v in vars(model).items()
        if k.endswith("_")
        and not k.startswith("_")
        and hasattr(v, "shape")
        and hasattr(v, "dtype")
        and not hasattr(v, "tocsr")
    }


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", NAMES)
def test_fit_and_transform_equal_numpy(name, dtype, data, namespace):
    X, X_new = (a.astype(dtype) for a in data)
    host = ESTIMATORS[name]().fit(X)
    model = ESTIMATORS[name]().fit(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    assert namespace.from_ns(Z).dtype == dtype
    tol = _tol(name, dtype)
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < tol
    np.testing.assert_allclose(
        namespace.from_ns(model.eigenvalues_),
        host.eigenvalues_,
        rtol=tol,
        atol=tol * float(np.max(host.eigenvalues_)),
    )


@pytest.mark.parametrize("name", NAMES)
def test_fitted_arrays_live_in_the_namespace(name, data, namespace):
    X, _ = data
    model = ESTIMATORS[name]().fit(namespace.to_ns(X))
    arrays = _public_arrays(model)
    assert arrays
    for key, value in arrays.items():
        assert namespace.is_native(value), key


@pytest.mark.parametrize("name", NAMES)
def test_model_fitted_in_a_namespace_saves_and_loads_on_the_host(name, data, tmp_path, namespace):
    X, X_new = data
    model = ESTIMATORS[name]().fit(namespace.to_ns(X))
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = fastkpca.load(path)
    Z = loaded.transform(X_new)
    assert isinstance(Z, np.ndarray)
    # The loaded model computes on the host: float64 paths agree to round-off, float32 features
    # and kernel rows to float32's rounding (the same tolerance as the fit comparison).
    tol = 1e-10 if name not in FLOAT32_INSIDE else RTOL[np.float32]
    expected = namespace.from_ns(model.transform(namespace.to_ns(X_new)))
    assert rel_err(expected, Z) < tol


def test_host_model_transforms_rows_of_a_namespace_there(data, namespace):
    X, X_new = data
    host = NystromKPCA(4, n_landmarks=60, gamma=0.05, random_state=0).fit(X)
    Z = host.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < 1e-10


def test_compressed_model_on_rows_of_a_namespace(data, namespace):
    X, X_new = data
    model = NystromKPCA(4, n_landmarks=60, gamma=0.05, random_state=0).fit(X)
    fast = compress_expansion(model, rounding=0.5, random_state=0)
    Z = fast.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    assert rel_err(fast.transform(X_new), namespace.from_ns(Z)) < 1e-10


def test_partial_fit_with_blocks_of_a_namespace(data, namespace):
    X, _ = data
    host = StreamingKPCA(4, n_random_features=128, sketch_size=16, gamma=0.05, random_state=0)
    model = StreamingKPCA(4, n_random_features=128, sketch_size=16, gamma=0.05, random_state=0)
    for start in range(0, 300, 100):
        host.partial_fit(X[start : start + 100])
        model.partial_fit(namespace.to_ns(X[start : start + 100]))
    assert namespace.is_native(model.eigenvalues_)
    np.testing.assert_allclose(
        namespace.from_ns(model.eigenvalues_), host.eigenvalues_, rtol=RTOL[np.float32]
    )


# --- device=: host rows sent to a PyTorch device ------------------------------------------------
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_device_parameter_sends_host_rows_and_returns_host_output(name, device, data):
    pytest.importorskip("torch")
    X, X_new = data
    host = ESTIMATORS[name]().fit(X)
    model = ESTIMATORS[name](device=device).fit(X)
    Z = model.transform(X_new)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float64
    assert rel_err(host.transform(X_new), Z) < _tol(name, np.float64)


def test_device_that_is_not_here_is_a_value_error(data):
    torch = pytest.importorskip("torch")
    X, _ = data
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="CUDA"):
        ExactKPCA(2, device="cuda").fit(X)
