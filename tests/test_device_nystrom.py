"""NystromKPCA and its statistics on PyTorch tensors equal the numpy path (CPU torch; CUDA where
marked ``gpu``).

The device path draws the same landmarks (indices from the host generator), folds the same kernel
rows into float64 statistics and solves the same c x c problems, so the models agree up to the
rounding of sums taken in another order.  Tolerances: float64 paths 1e-8 relative (float64 sums in
another order, ~1e-16 per operation, amplified by the whitening's ||N|| (~1e2 here) and the
inverse eigengaps of these well-separated spectra: measured 1e-13); float32 inputs and the
randomized solver's float32 kernel rows 2e-4 (float32's 6e-8 rounding of the rows and the
transform's output, times the same amplifications).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

import fastkpca  # noqa: E402
from fastkpca import NystromKPCA  # noqa: E402
from fastkpca._landmarks import rls_indices, rpcholesky_indices  # noqa: E402
from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.kernels import RBF  # noqa: E402
from fastkpca.statistics.covariance_sketch import test_matrix as make_test_matrix  # noqa: E402
from fastkpca.statistics.kernel_moments import (  # noqa: E402
    kernel_moments,
    kernel_sketch,
    landmark_gram,
    nystrom_whitening,
    weighted_landmark_moments,
)

TOL64, TOL32 = 1e-8, 2e-4


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


def _host(a):
    return a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _model(**kw):
    params = dict(n_components=4, n_landmarks=60, gamma=0.05, random_state=0)
    params.update(kw)
    return NystromKPCA(**params)


def _assert_same_model(host, dev, X_new, tol):
    """Same transform (type, dtype, values), eigenvalues, variances; fitted arrays on torch."""
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.from_numpy(X_new).dtype
    assert rel_err(host.transform(X_new), Z.numpy()) < tol
    top = float(np.max(host.eigenvalues_))
    np.testing.assert_allclose(_host(dev.eigenvalues_), host.eigenvalues_, rtol=tol, atol=tol * top)
    assert dev.solver_ == host.solver_ and dev.n_landmarks_ == host.n_landmarks_
    assert dev.kernel_row_dtype_ == host.kernel_row_dtype_
    if hasattr(host, "total_variance_"):
        assert dev.total_variance_ == pytest.approx(host.total_variance_, rel=tol)
        np.testing.assert_allclose(
            dev.explained_variance_ratio_, host.explained_variance_ratio_, rtol=tol, atol=tol
        )
    for name in ("landmarks_", "landmark_weights_", "projection_", "mean_", "components_"):
        assert isinstance(getattr(dev, name), torch.Tensor), name


# --- the estimator ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"solver": "randomized"},
        {"landmarks": "kmeans"},
        {"landmarks": "rls"},
        {"landmarks": "rpcholesky"},
        {"landmarks": "rpcholesky", "solver": "randomized"},
        {"covariance": "landmarks"},
        {"landmarks": "kmeans", "covariance": "landmarks"},
        {"n_components": 0.5},
        {"kernel": "laplacian", "gamma": 0.2},
        {"kernel": "poly", "gamma": 0.1, "degree": 2},
    ],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default",
)
def test_tensor_fit_equals_numpy(params, dtype, data):
    X, X_new = (a.astype(dtype) for a in data)
    host = _model(**params).fit(X)
    dev = _model(**params).fit(torch.from_numpy(X))
    randomized = host.solver_ == "randomized"
    tol = TOL32 if dtype == np.float32 or randomized else TOL64
    _assert_same_model(host, dev, X_new, tol)


def test_given_landmark_rows(data):
    X, X_new = data
    host = _model(landmarks=X[:30]).fit(X)
    dev = _model(landmarks=X[:30]).fit(torch.from_numpy(X))
    _assert_same_model(host, dev, X_new, TOL64)


def test_randomized_float32_kernel_rows(data):
    # A well-conditioned landmark Gram (narrow kernel): the randomized solver's rows in float32.
    X = make_random_noisy(1200, 8, signal_dim=4, zeta=10, random_state=2)
    params = dict(n_components=4, n_landmarks=100, gamma=0.5, random_state=0)
    host = NystromKPCA(solver="randomized", **params).fit(X[:1000])
    dev = NystromKPCA(solver="randomized", **params).fit(torch.from_numpy(X[:1000]))
    assert host.kernel_row_dtype_ == "float32"
    _assert_same_model(host, dev, X[1000:], TOL32)


def test_exact_kpca_shortcut_on_tensors(data):
    X, X_new = data
    host = _model(n_landmarks=300).fit(X)
    dev = _model(n_landmarks=300).fit(torch.from_numpy(X))
    assert dev.solver_ == "exact_kpca"
    _assert_same_model(host, dev, X_new, TOL64)
    assert dev.total_variance_error_ == 0.0
    assert isinstance(dev.normalization_, torch.Tensor)


def test_size_by_tolerance_on_tensors(data):
    X, X_new = data
    host = _model(n_landmarks="auto", tol=0.05).fit(X)
    dev = _model(n_landmarks="auto", tol=0.05).fit(torch.from_numpy(X))
    assert [c for c, _ in dev.size_history_] == [c for c, _ in host.size_history_]
    _assert_same_model(host, dev, X_new, TOL64)


def test_normalization_and_inverse_transform_on_tensors(data):
    X, X_new = data
    host = _model(fit_inverse_transform=True).fit(X)
    dev = _model(fit_inverse_transform=True).fit(torch.from_numpy(X))
    N = dev.normalization_
    assert isinstance(N, torch.Tensor)
    # W's rounding (1e-16) amplified by the triangular inverse (||N||^2 ~ 1e4 here)
    assert rel_err(host.normalization_, N.numpy()) < 1e-10
    Z = host.transform(X_new)
    assert rel_err(host.inverse_transform(Z), dev.inverse_transform(Z)) < TOL64


def test_device_parameter_on_a_stream_of_blocks(data):
    X, X_new = data
    blocks = [X[i : i + 100] for i in range(0, 300, 100)]
    host = _model().fit(blocks)
    dev = _model(device="cpu").fit(blocks)
    assert isinstance(dev.projection_, np.ndarray)  # fitted arrays follow the data given to fit
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < TOL64


def test_host_rows_transformed_by_a_tensor_model(data):
    X, X_new = data
    dev = _model().fit(torch.from_numpy(X))
    Z = dev.transform(X_new.astype(np.float32))
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float32
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), Z) < TOL32


def test_randomized_model_saves_and_loads_on_the_host(data, tmp_path):
    X, X_new = data
    dev = _model(solver="randomized").fit(torch.from_numpy(X))
    dev.save(tmp_path / "model.npz")
    loaded = fastkpca.load(tmp_path / "model.npz")
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), loaded.transform(X_new)) < 1e-12


# --- the statistics -----------------------------------------------------------------------------
def test_landmark_gram_and_whitening_on_tensors(data):
    X, _ = data
    L = X[:50]
    W = landmark_gram(RBF(0.05), torch.from_numpy(L))
    assert isinstance(W, torch.Tensor) and W.dtype == torch.float64
    assert np.all(np.diag(W.numpy()) == 1.0)  # set exactly, as the host's Gram
    W_host = landmark_gram(RBF(0.05), L)
    np.testing.assert_allclose(W.numpy(), W_host, rtol=0, atol=1e-14)
    # The factorisation of a device W runs on its host copy: the same LAPACK calls.
    N, Z = nystrom_whitening(torch.from_numpy(W_host))
    N_host, Z_host = nystrom_whitening(W_host)
    assert isinstance(N, torch.Tensor) and isinstance(Z, torch.Tensor)
    np.testing.assert_allclose(N.numpy(), N_host, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(Z.numpy(), Z_host, rtol=1e-14, atol=1e-14)


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """CPU tensors taken down the GPU paths (the whitening by ``eigh`` and the test matrix's
    products on the device instead of the host's LAPACK), which CPU tests otherwise miss."""
    from fastkpca.execution.arrays import Placement

    monkeypatch.setattr(Placement, "in_host_memory", property(lambda self: self.host))


def test_whitening_by_eigh_on_a_gpu(as_on_a_gpu, data):
    """On a GPU N comes from ``eigh(W)``: ``N W N^T = I``, ``Z = N W``, ``N^T N = W^{-1}``
    (the host's pivoted Cholesky N up to a rotation), the same rank as the host's where
    landmarks repeat."""
    X, _ = data
    W = landmark_gram(RBF(0.05), X[:50])
    N, Z = nystrom_whitening(torch.from_numpy(W))
    N, Z = N.numpy(), Z.numpy()
    N_host, _ = nystrom_whitening(W)
    np.testing.assert_allclose(N @ W @ N.T, np.eye(50), atol=1e-9)
    np.testing.assert_allclose(Z, N @ W, atol=1e-12)
    assert rel_err(N_host.T @ N_host, N.T @ N) < 1e-9
    repeated = landmark_gram(RBF(0.05), np.vstack([X[:30], X[:10]]))
    N_rep, _ = nystrom_whitening(torch.from_numpy(repeated))
    assert N_rep.shape[0] == nystrom_whitening(repeated)[0].shape[0] == 30


@pytest.mark.parametrize(
    "params",
    [{}, {"solver": "randomized"}, {"landmarks": "rpcholesky"}],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default",
)
def test_gpu_paths_give_the_host_model(as_on_a_gpu, params, data):
    X, X_new = data
    host = _model(**params).fit(X)
    dev = _model(**params).fit(torch.from_numpy(X))
    tol = TOL32 if host.solver_ == "randomized" else TOL64
    _assert_same_model(host, dev, X_new, tol)
    assert (
        rel_err(
            host.normalization_.T @ host.normalization_,
            _host(dev.normalization_.T @ dev.normalization_),
        )
        < tol
    )


def test_kernel_moments_on_tensors(data):
    X, _ = data
    L = X[:40]
    host = kernel_moments([X[:120], X[120:]], L, RBF(0.05))
    dev = kernel_moments(
        [torch.from_numpy(X[:120]), torch.from_numpy(X[120:])], torch.from_numpy(L), RBF(0.05)
    )
    assert dev.count == host.count == 300
    assert isinstance(dev.scatter, torch.Tensor) and dev.scatter.dtype == torch.float64
    np.testing.assert_allclose(dev.mean.numpy(), host.mean, rtol=1e-12)
    scale = float(np.max(np.abs(host.scatter)))
    np.testing.assert_allclose(dev.scatter.numpy(), host.scatter, rtol=0, atol=1e-12 * scale)

    W = landmark_gram(RBF(0.05), L)
    weights = np.linspace(1.0, 2.0, 40) / np.linspace(1.0, 2.0, 40).sum()
    a = weighted_landmark_moments(W, weights, 300)
    b = weighted_landmark_moments(torch.from_numpy(W), weights, 300)
    np.testing.assert_allclose(b.scatter.numpy(), a.scatter, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_sketch_on_tensors(dtype, data):
    X, _ = data
    L = X[:40]
    kernel = RBF(0.05)
    T = make_test_matrix(40, 12, np.random.default_rng(0))
    shift = kernel(L).mean(axis=0)
    host = kernel_sketch([X[:200], X[200:]], L, kernel, T, shift, dtype)
    dev = kernel_sketch(
        [torch.from_numpy(X[:200]), torch.from_numpy(X[200:])],
        torch.from_numpy(L),
        kernel,
        torch.from_numpy(T),
        shift,
        dtype,
    )
    assert dev.n == host.n == 300 and dev.eps == host.eps
    assert isinstance(dev.Y, torch.Tensor) and dev.Y.dtype == torch.float64
    # float32 rows: their rounding (6e-8) in sums of 300 products, relative to the sketch's scale
    tol = 1e-5 if dtype == np.float32 else 1e-12
    scale = float(np.max(np.abs(host.Y)))
    np.testing.assert_allclose(dev.Y.numpy(), host.Y, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(dev.mean.numpy(), host.mean, rtol=0, atol=tol)


@pytest.mark.parametrize("accelerated", [True, False])
@pytest.mark.parametrize("tol", [None, 0.05])
def test_rpcholesky_on_tensors(accelerated, tol, data):
    # The draws come from host copies of the residual diagonal: the same pivots, and a factor
    # equal up to float64 sums in another order (amplified by the pivots' inverse, ~1e2).
    X, _ = data
    args = dict(accelerated=accelerated, tol=tol)
    host = rpcholesky_indices(X, 40, RBF(0.05), np.random.default_rng(0), **args)
    dev = rpcholesky_indices(torch.from_numpy(X), 40, RBF(0.05), np.random.default_rng(0), **args)
    np.testing.assert_array_equal(dev.indices, host.indices)
    assert dev.n_proposals == host.n_proposals
    assert isinstance(dev.factor, torch.Tensor) and isinstance(dev.residual_diag, torch.Tensor)
    np.testing.assert_allclose(dev.factor.numpy(), host.factor, rtol=0, atol=1e-11)
    assert dev.residual_trace == pytest.approx(host.residual_trace, rel=1e-9, abs=1e-11)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rls_on_tensors(dtype, data):
    X, _ = data
    X = X.astype(dtype)
    idx, inclusion = rls_indices(X, 40, RBF(0.05), np.random.default_rng(0), target_rank=4)
    idx_dev, inclusion_dev = rls_indices(
        torch.from_numpy(X), 40, RBF(0.05), np.random.default_rng(0), target_rank=4
    )
    np.testing.assert_array_equal(idx_dev, idx)
    np.testing.assert_allclose(inclusion_dev, inclusion, rtol=1e-9)


# --- CUDA (run on a GPU machine: pytest -m gpu) ---------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "params",
    [{}, {"solver": "randomized"}, {"landmarks": "rpcholesky"}, {"covariance": "landmarks"}],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default",
)
def test_cuda_equals_cpu_torch(params, dtype, data):
    X, X_new = (a.astype(dtype) for a in data)
    cpu = _model(**params).fit(torch.from_numpy(X))
    gpu = _model(**params).fit(torch.from_numpy(X).cuda())
    for name in ("landmarks_", "projection_", "mean_", "components_", "eigenvalues_"):
        assert getattr(gpu, name).device.type == "cuda", name
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda" and Z.dtype == torch.from_numpy(X_new).dtype
    tol = TOL32 if dtype == np.float32 or cpu.solver_ == "randomized" else TOL64
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < tol
    np.testing.assert_allclose(
        gpu.eigenvalues_.cpu().numpy(), cpu.eigenvalues_.numpy(), rtol=tol, atol=tol
    )


@pytest.mark.gpu
def test_cuda_device_parameter_and_host_output(data):
    X, X_new = data
    host = _model(solver="randomized").fit(X)
    gpu = _model(solver="randomized", device="cuda").fit(X)
    assert gpu.projection_.device.type == "cuda"
    Z = gpu.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < TOL32
