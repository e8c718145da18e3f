"""Every estimator on PyTorch tensors equals its numpy path (CPU torch here; CUDA where marked).

The device contract: tensors in, the same array type, device and dtype out; fitted arrays on the
device; the same ``random_state`` gives the same model as numpy (random draws come from the host
generator), up to rounding; a model fitted on tensors saves to a model file that loads (and
transforms numpy rows) on the host; ``device=`` sends host data to the device and gives host
output.  Tolerances: float64 paths agree to 1e-8 relative (different summation orders of the same
float64 products, amplified by at most the inverse eigengap of these well-separated spectra);
float32 input and the float32 features / kernel rows that the float64 paths also use agree to
2e-4 relative (float32's 6e-8 rounding, times the feature count's sqrt and the eigengap).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

from fastkpca import (  # noqa: E402
    ExactKPCA,
    KernelPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
    compress_expansion,
)
from fastkpca.datasets import make_random_noisy  # noqa: E402

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
        4, n_features=128, gamma=0.05, solver="exact", random_state=0, **kw
    ),
    "rf_randomized": lambda **kw: RandomFeatureKPCA(
        4, n_features=128, gamma=0.05, solver="randomized", random_state=0, **kw
    ),
    "streaming": lambda **kw: StreamingKPCA(
        4, n_features=128, sketch_size=16, gamma=0.05, random_state=0, **kw
    ),
    "reduced_set": lambda **kw: ReducedSetKPCA(4, gamma=0.05, random_state=0, **kw),
    "sparsified": lambda **kw: SparsifiedKPCA(4, gamma=0.05, random_state=0, **kw),
}

RTOL = {np.float64: 1e-8, np.float32: 2e-4}
#: Models whose float64 fit computes float32 features or kernel rows (as on the host).
FLOAT32_INSIDE = {"rf_exact", "rf_randomized", "streaming", "nystrom", "nystrom_randomized"}


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


def _tol(name, dtype):
    return RTOL[np.float32] if dtype == np.float32 or name in FLOAT32_INSIDE else RTOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_torch_fit_and_transform_equal_numpy(name, dtype, data):
    X, X_new = (a.astype(dtype) for a in data)
    host = ESTIMATORS[name]().fit(X)
    dev = ESTIMATORS[name]().fit(torch.from_numpy(X))
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor)
    assert Z.dtype == (torch.float32 if dtype == np.float32 else torch.float64)
    assert Z.device.type == "cpu"
    tol = _tol(name, dtype)
    assert rel_err(host.transform(X_new), Z.numpy()) < tol
    np.testing.assert_allclose(
        np.asarray(
            dev.eigenvalues_.cpu() if hasattr(dev.eigenvalues_, "cpu") else dev.eigenvalues_
        ),
        host.eigenvalues_,
        rtol=tol,
        atol=tol * float(np.max(host.eigenvalues_)),
    )


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fitted_arrays_live_on_the_device(name, data):
    X, _ = data
    dev = ESTIMATORS[name]().fit(torch.from_numpy(X))
    arrays = {
        k: v
        for k, v in vars(dev).items()
        if k.endswith("_")
        and not k.startswith("_")
        and hasattr(v, "shape")
        and hasattr(v, "dtype")
        and not hasattr(v, "tocsr")
    }
    assert arrays
    for key, value in arrays.items():
        assert isinstance(value, torch.Tensor), key


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_device_parameter_sends_host_rows_and_returns_host_output(name, data):
    X, X_new = data
    host = ESTIMATORS[name]().fit(X)
    dev = ESTIMATORS[name](device="cpu").fit(X)
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float64
    assert rel_err(host.transform(X_new), Z) < _tol(name, np.float64)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_model_fitted_on_tensors_saves_and_loads_on_the_host(name, data, tmp_path):
    import fastkpca

    X, X_new = data
    dev = ESTIMATORS[name]().fit(torch.from_numpy(X))
    path = tmp_path / "model.npz"
    dev.save(path)
    loaded = fastkpca.load(path)
    Z = loaded.transform(X_new)
    assert isinstance(Z, np.ndarray)
    # The loaded model computes on the host: float64 paths agree to round-off, float32 features
    # and kernel rows to float32's rounding (the same tolerance as the fit comparison).
    tol = 1e-10 if name not in FLOAT32_INSIDE else RTOL[np.float32]
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), Z) < tol


def test_host_model_transforms_tensors_on_their_device(data):
    X, X_new = data
    host = NystromKPCA(4, n_landmarks=60, gamma=0.05, random_state=0).fit(X)
    Z = host.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor)
    assert rel_err(host.transform(X_new), Z.numpy()) < 1e-10


def test_compressed_model_on_tensors(data):
    X, X_new = data
    model = NystromKPCA(4, n_landmarks=60, gamma=0.05, random_state=0).fit(X)
    fast = compress_expansion(model, rounding=0.5, random_state=0)
    Z = fast.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor)
    assert rel_err(fast.transform(X_new), Z.numpy()) < 1e-10


def test_partial_fit_with_tensor_blocks(data):
    X, _ = data
    host = StreamingKPCA(4, n_features=128, sketch_size=16, gamma=0.05, random_state=0)
    dev = StreamingKPCA(4, n_features=128, sketch_size=16, gamma=0.05, random_state=0)
    for start in range(0, 300, 100):
        host.partial_fit(X[start : start + 100])
        dev.partial_fit(torch.from_numpy(X[start : start + 100]))
    np.testing.assert_allclose(
        dev.eigenvalues_.cpu().numpy(), host.eigenvalues_, rtol=RTOL[np.float32]
    )


def test_device_that_is_not_here_is_a_value_error(data):
    X, _ = data
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="CUDA"):
        ExactKPCA(2, device="cuda").fit(X)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_cuda_equals_cpu_torch(name, data):
    X, X_new = data
    cpu = ESTIMATORS[name]().fit(torch.from_numpy(X))
    gpu = ESTIMATORS[name]().fit(torch.from_numpy(X).cuda())
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda"
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < _tol(
        name, np.float64
    )
