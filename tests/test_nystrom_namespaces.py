"""NystromKPCA and its statistics over array namespaces: numpy, PyTorch CPU tensors,
``array_api_strict`` (the reference namespace) and CUDA (marked ``gpu``) give the numpy model.

The fit is written once over the rows' namespace: the same landmarks (indices from the host
generator), the same kernel rows folded into float64 statistics, the same c x c problems; only
the row chunks (threads over small chunks on the host, large tiles elsewhere) and the whitening
(pivoted Cholesky in host memory, ``eigh`` on a GPU) differ.  Tolerances: float64 paths 1e-10
relative (float64 sums in another order, ~1e-16 per operation, amplified by the whitening's
||N|| (~1e2 here) and the inverse eigengaps of these well-separated spectra: measured 1e-13);
float32 inputs and the randomized solver's float32 kernel rows 2e-4 (float32's 6e-8 rounding of
the rows and the transform's output, times the same amplifications).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rel_err

import fastkpca
from fastkpca import NystromKPCA
from fastkpca._landmarks import rls_indices, rpcholesky_indices
from fastkpca.datasets import make_random_noisy
from fastkpca.execution import budget
from fastkpca.execution.arrays import Placement, placement_of, to_host
from fastkpca.execution.elementwise import put_
from fastkpca.execution.linalg import lower_solver, whitening
from fastkpca.kernels import RBF
from fastkpca.statistics import kernel_moments as kernel_moments_module
from fastkpca.statistics.covariance_sketch import test_matrix as make_test_matrix
from fastkpca.statistics.kernel_moments import (
    kernel_moments,
    kernel_sketch,
    landmark_gram,
    nystrom_whitening,
    weighted_landmark_moments,
)

TOL64, TOL32 = 1e-10, 2e-4

FIT_PARAMS = [
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
]


def _ids(params):
    return "-".join(f"{k}={v}" for k, v in params.items()) or "default"


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


def _model(**kw):
    params = dict(n_components=4, n_landmarks=60, gamma=0.05, random_state=0)
    params.update(kw)
    return NystromKPCA(**params)


def _assert_same_model(host, model, X_new, namespace, tol):
    """Same transform (type, dtype, values), eigenvalues, variances; fitted arrays of the
    namespace."""
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z)
    assert namespace.from_ns(Z).dtype == X_new.dtype
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < tol
    top = float(np.max(host.eigenvalues_))
    eigenvalues = namespace.from_ns(model.eigenvalues_)
    np.testing.assert_allclose(eigenvalues, host.eigenvalues_, rtol=tol, atol=tol * top)
    assert model.solver_ == host.solver_ and model.n_landmarks_ == host.n_landmarks_
    assert model.kernel_row_dtype_ == host.kernel_row_dtype_
    if hasattr(host, "total_variance_"):
        assert model.total_variance_ == pytest.approx(host.total_variance_, rel=tol)
        np.testing.assert_allclose(
            model.explained_variance_ratio_, host.explained_variance_ratio_, rtol=tol, atol=tol
        )
    for name in ("landmarks_", "landmark_weights_", "projection_", "mean_", "components_"):
        assert namespace.is_native(getattr(model, name)), name


# --- the estimator ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("params", FIT_PARAMS, ids=_ids)
def test_fit_equals_numpy(params, dtype, data, namespace):
    X, X_new = (a.astype(dtype) for a in data)
    host = _model(**params).fit(X)
    model = _model(**params).fit(namespace.to_ns(X))
    tol = TOL32 if dtype == np.float32 or host.solver_ == "randomized" else TOL64
    _assert_same_model(host, model, X_new, namespace, tol)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint8", "bool", "float16"])
def test_every_real_dtype_gives_the_float64_model(dtype, data, namespace):
    """Integer, boolean and half-precision rows are the float64 model of the same values."""
    if namespace.name == "array_api_strict" and dtype == "float16":
        pytest.skip("array_api_strict has no float16")
    X, X_new = data
    values = (X > 0.3) if dtype == "bool" else np.rint(4 * X + (12 if dtype == "uint8" else 0))
    values = values.astype(dtype)
    model = _model().fit(namespace.to_ns(values))
    reference = _model().fit(values.astype(np.float64))
    assert namespace.is_native(model.projection_)
    assert namespace.from_ns(model.projection_).dtype == np.float64
    assert rel_err(reference.transform(X_new), namespace.from_ns(model.transform(X_new))) < TOL64


def test_given_landmark_rows(data, namespace):
    X, X_new = data
    host = _model(landmarks=X[:30]).fit(X)
    model = _model(landmarks=X[:30]).fit(namespace.to_ns(X))
    _assert_same_model(host, model, X_new, namespace, TOL64)


def test_blocks_of_the_namespace(data, namespace):
    """A list of the namespace's blocks (reservoir sampling, then the moments) is the array's
    model."""
    X, X_new = data
    host = _model().fit(X)
    model = _model().fit([namespace.to_ns(X[i : i + 100]) for i in range(0, 300, 100)])
    _assert_same_model(host, model, X_new, namespace, TOL64)


def test_randomized_float32_kernel_rows(namespace):
    # A well-conditioned landmark Gram (narrow kernel): the randomized solver's rows in float32.
    X = make_random_noisy(1200, 8, signal_dim=4, zeta=10, random_state=2)
    params = dict(n_components=4, n_landmarks=100, gamma=0.5, random_state=0)
    host = NystromKPCA(solver="randomized", **params).fit(X[:1000])
    model = NystromKPCA(solver="randomized", **params).fit(namespace.to_ns(X[:1000]))
    assert host.kernel_row_dtype_ == "float32"
    _assert_same_model(host, model, X[1000:], namespace, TOL32)


def test_exact_kpca_shortcut(data, namespace):
    X, X_new = data
    host = _model(n_landmarks=300).fit(X)
    model = _model(n_landmarks=300).fit(namespace.to_ns(X))
    assert model.solver_ == "exact_kpca"
    _assert_same_model(host, model, X_new, namespace, TOL64)
    assert model.total_variance_error_ == 0.0
    assert namespace.is_native(model.normalization_)


def test_size_by_tolerance(data, namespace):
    X, X_new = data
    host = _model(n_landmarks="auto", tol=0.05).fit(X)
    model = _model(n_landmarks="auto", tol=0.05).fit(namespace.to_ns(X))
    assert [c for c, _ in model.size_history_] == [c for c, _ in host.size_history_]
    _assert_same_model(host, model, X_new, namespace, TOL64)


def test_normalization_and_inverse_transform(data, namespace):
    X, X_new = data
    host = _model(fit_inverse_transform=True).fit(X)
    model = _model(fit_inverse_transform=True).fit(namespace.to_ns(X))
    N = model.normalization_
    assert namespace.is_native(N)
    # W's rounding (1e-16) amplified by the triangular inverse (||N||^2 ~ 1e4 here); a GPU's
    # N (from eigh) is the host's rotated: compare N^T N
    N_host, N = host.normalization_, namespace.from_ns(N)
    assert rel_err(N_host.T @ N_host, N.T @ N) < 1e-10
    Z = host.transform(X_new)  # the same model, signs included, so the same pre-images
    assert rel_err(host.inverse_transform(Z), namespace.from_ns(model.inverse_transform(Z))) < TOL64


def test_host_rows_transformed_by_a_namespace_model(data, namespace):
    X, X_new = data
    model = _model().fit(namespace.to_ns(X))
    Z = model.transform(X_new.astype(np.float32))
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float32
    assert rel_err(namespace.from_ns(model.transform(namespace.to_ns(X_new))), Z) < TOL32


def test_randomized_model_saves_and_loads_on_the_host(data, tmp_path, namespace):
    X, X_new = data
    model = _model(solver="randomized").fit(namespace.to_ns(X))
    model.save(tmp_path / "model.npz")
    loaded = fastkpca.load(tmp_path / "model.npz")
    Z = namespace.from_ns(model.transform(namespace.to_ns(X_new)))
    assert rel_err(Z, loaded.transform(X_new)) < 1e-12


def test_device_parameter_on_a_stream_of_blocks(data):
    torch = pytest.importorskip("torch")
    X, X_new = data
    blocks = [X[i : i + 100] for i in range(0, 300, 100)]
    host = _model().fit(blocks)
    model = _model(device="cpu").fit(blocks)
    assert isinstance(model.projection_, np.ndarray)  # fitted arrays follow the data given to fit
    assert isinstance(model._computed_attributes()["projection_"], torch.Tensor)
    Z = model.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < TOL64


# --- the statistics -----------------------------------------------------------------------------
def test_landmark_gram_and_whitening(data, namespace):
    X, _ = data
    L = X[:50]
    W = landmark_gram(RBF(0.05), namespace.to_ns(L))
    assert namespace.is_native(W)
    W_np = namespace.from_ns(W)
    assert W_np.dtype == np.float64
    assert np.all(np.diag(W_np) == 1.0)  # set exactly, as the host's Gram
    W_host = landmark_gram(RBF(0.05), L)
    np.testing.assert_allclose(W_np, W_host, rtol=0, atol=1e-14)
    N, Z = nystrom_whitening(namespace.to_ns(W_host))
    N_host, Z_host = nystrom_whitening(W_host)
    assert namespace.is_native(N) and namespace.is_native(Z)
    N, Z = namespace.from_ns(N), namespace.from_ns(Z)
    np.testing.assert_allclose(N @ W_host @ N.T, np.eye(N.shape[0]), atol=1e-9)
    np.testing.assert_allclose(Z, N @ W_host, atol=1e-12)
    assert rel_err(N_host.T @ N_host, N.T @ N) < 1e-9
    # the host's LAPACK on every placement (a device's Gram goes there and back): the same factor
    np.testing.assert_allclose(N, N_host, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(Z, Z_host, rtol=1e-14, atol=1e-14)


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Arrays in host memory taken down the GPU paths (the whitening by ``eigh`` on the device
    instead of the host's LAPACK), which tests without a GPU otherwise miss."""
    monkeypatch.setattr(Placement, "in_host_memory", property(lambda self: self.host))


def test_whitening_by_eigh_on_a_gpu(as_on_a_gpu, data, namespace, monkeypatch):
    """On a GPU, above ``HOST_WHITENING_MAX`` landmarks, N comes from ``eigh(W)``: ``N W N^T =
    I``, ``Z = N W``, ``N^T N = W^{-1}`` (the host's pivoted Cholesky N up to a rotation), the
    same rank as the host's where landmarks repeat."""
    if namespace.name == "numpy":
        pytest.skip("numpy arrays are the host's: the pivoted Cholesky")
    monkeypatch.setattr(budget, "HOST_WHITENING_MAX", 10)
    X, _ = data
    W = landmark_gram(RBF(0.05), X[:50])
    N, Z = nystrom_whitening(namespace.to_ns(W))
    N, Z = namespace.from_ns(N), namespace.from_ns(Z)
    N_host, _ = nystrom_whitening(W)
    np.testing.assert_allclose(N @ W @ N.T, np.eye(50), atol=1e-9)
    np.testing.assert_allclose(Z, N @ W, atol=1e-12)
    assert rel_err(N_host.T @ N_host, N.T @ N) < 1e-9
    repeated = landmark_gram(RBF(0.05), np.vstack([X[:30], X[:10]]))
    N_rep, _ = nystrom_whitening(namespace.to_ns(repeated))
    assert N_rep.shape[0] == nystrom_whitening(repeated)[0].shape[0] == 30


@pytest.mark.parametrize(
    "params", [{}, {"solver": "randomized"}, {"landmarks": "rpcholesky"}], ids=_ids
)
def test_gpu_paths_give_the_host_model(as_on_a_gpu, params, data, namespace):
    if namespace.name == "numpy":
        pytest.skip("numpy arrays are the host's")
    X, X_new = data
    host = _model(**params).fit(X)
    model = _model(**params).fit(namespace.to_ns(X))
    tol = TOL32 if host.solver_ == "randomized" else 1e-9
    _assert_same_model(host, model, X_new, namespace, tol)
    N_host, N = host.normalization_, namespace.from_ns(model.normalization_)
    assert rel_err(N_host.T @ N_host, N.T @ N) < tol


def test_kernel_moments(data, namespace):
    X, _ = data
    L = X[:40]
    host = kernel_moments([X[:120], X[120:]], L, RBF(0.05))
    moments = kernel_moments(
        [namespace.to_ns(X[:120]), namespace.to_ns(X[120:])], namespace.to_ns(L), RBF(0.05)
    )
    assert moments.count == host.count == 300
    assert namespace.is_native(moments.scatter)
    scatter = namespace.from_ns(moments.scatter)
    assert scatter.dtype == np.float64
    np.testing.assert_allclose(namespace.from_ns(moments.mean), host.mean, rtol=1e-12)
    scale = float(np.max(np.abs(host.scatter)))
    np.testing.assert_allclose(scatter, host.scatter, rtol=0, atol=1e-12 * scale)

    W = landmark_gram(RBF(0.05), L)
    weights = np.linspace(1.0, 2.0, 40) / np.linspace(1.0, 2.0, 40).sum()
    a = weighted_landmark_moments(W, weights, 300)
    b = weighted_landmark_moments(namespace.to_ns(W), weights, 300)
    assert namespace.is_native(b.scatter)
    np.testing.assert_allclose(namespace.from_ns(b.scatter), a.scatter, rtol=0, atol=1e-12 * scale)


def test_kernel_moments_above_the_fold_limit(namespace, monkeypatch):
    """Above FOLD_MAX_LANDMARKS the kernel rows come in budget blocks, each added to one
    scatter: the same moments."""
    X = make_random_noisy(300, 6, signal_dim=3, zeta=10, random_state=4)
    L = X[:40]
    folded = kernel_moments([X], L, RBF(0.05))
    monkeypatch.setattr(kernel_moments_module, "FOLD_MAX_LANDMARKS", 10)
    blocked = kernel_moments([namespace.to_ns(X)], namespace.to_ns(L), RBF(0.05))
    scale = float(np.max(np.abs(folded.scatter)))
    np.testing.assert_allclose(
        namespace.from_ns(blocked.scatter), folded.scatter, rtol=0, atol=1e-12 * scale
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_sketch(dtype, data, namespace):
    X, _ = data
    L = X[:40]
    kernel = RBF(0.05)
    T = make_test_matrix(40, 12, np.random.default_rng(0))
    shift = kernel(L).mean(axis=0)
    host = kernel_sketch([X[:200], X[200:]], L, kernel, T, shift, dtype)
    sketch = kernel_sketch(
        [namespace.to_ns(X[:200]), namespace.to_ns(X[200:])],
        namespace.to_ns(L),
        kernel,
        namespace.to_ns(T),
        shift,
        dtype,
    )
    assert sketch.n == host.n == 300 and sketch.eps == host.eps
    assert namespace.is_native(sketch.Y)
    Y = namespace.from_ns(sketch.Y)
    assert Y.dtype == np.float64
    # float32 rows: their rounding (6e-8) in sums of 300 products, relative to the sketch's scale
    tol = 1e-5 if dtype == np.float32 else 1e-12
    scale = float(np.max(np.abs(host.Y)))
    np.testing.assert_allclose(Y, host.Y, rtol=0, atol=tol * scale)
    np.testing.assert_allclose(namespace.from_ns(sketch.mean), host.mean, rtol=0, atol=tol)


@pytest.mark.parametrize("accelerated", [True, False])
@pytest.mark.parametrize("tol", [None, 0.05])
def test_rpcholesky(accelerated, tol, data, namespace):
    # The draws come from host copies of the residual diagonal: the same pivots, and a factor
    # equal up to float64 sums in another order (amplified by the pivots' inverse, ~1e2).
    X, _ = data
    args = dict(accelerated=accelerated, tol=tol)
    host = rpcholesky_indices(X, 40, RBF(0.05), np.random.default_rng(0), **args)
    result = rpcholesky_indices(namespace.to_ns(X), 40, RBF(0.05), np.random.default_rng(0), **args)
    np.testing.assert_array_equal(result.indices, host.indices)
    assert result.n_proposals == host.n_proposals
    assert namespace.is_native(result.factor) and namespace.is_native(result.residual_diag)
    np.testing.assert_allclose(namespace.from_ns(result.factor), host.factor, rtol=0, atol=1e-11)
    assert result.residual_trace == pytest.approx(host.residual_trace, rel=1e-9, abs=1e-11)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rls(dtype, data, namespace):
    X, _ = data
    X = X.astype(dtype)
    idx, inclusion = rls_indices(X, 40, RBF(0.05), np.random.default_rng(0), target_rank=4)
    idx_ns, inclusion_ns = rls_indices(
        namespace.to_ns(X), 40, RBF(0.05), np.random.default_rng(0), target_rank=4
    )
    np.testing.assert_array_equal(idx_ns, idx)
    np.testing.assert_allclose(inclusion_ns, inclusion, rtol=1e-9)


# --- CUDA (run on a GPU machine: pytest -m gpu) ---------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "params",
    [{}, {"solver": "randomized"}, {"landmarks": "rpcholesky"}, {"covariance": "landmarks"}],
    ids=_ids,
)
def test_cuda_equals_cpu_torch(params, dtype, data):
    torch = pytest.importorskip("torch")
    X, X_new = (a.astype(dtype) for a in data)
    cpu = _model(**params).fit(torch.from_numpy(X))
    gpu = _model(**params).fit(torch.from_numpy(X).cuda())
    for name in ("landmarks_", "projection_", "mean_", "components_", "eigenvalues_"):
        assert getattr(gpu, name).device.type == "cuda", name
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda" and Z.dtype == torch.from_numpy(X_new).dtype
    tol = TOL32 if dtype == np.float32 or cpu.solver_ == "randomized" else 1e-8
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < tol
    np.testing.assert_allclose(
        gpu.eigenvalues_.cpu().numpy(), cpu.eigenvalues_.numpy(), rtol=tol, atol=tol
    )


@pytest.mark.gpu
def test_cuda_device_parameter_and_host_output(data):
    """``device="cuda"`` on numpy rows computes there; the fitted arrays follow the data (numpy),
    the model as computed stays on the GPU for ``transform``."""
    X, X_new = data
    host = _model(solver="randomized").fit(X)
    gpu = _model(solver="randomized", device="cuda").fit(X)
    assert isinstance(gpu.projection_, np.ndarray)
    assert gpu._computed_attributes()["projection_"].device.type == "cuda"
    Z = gpu.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < TOL32
    np.testing.assert_allclose(to_host(gpu.eigenvalues_), host.eigenvalues_, rtol=TOL32)


def test_gpu_randomized_float32_kernel_rows_give_the_host_model(as_on_a_gpu, namespace):
    """The randomized solver draws half its test matrix in the whitened coordinates, so a
    device's whitening must be the host's factor, not a rotation of it: with ``eigh``'s N the
    model moved by the solver's own error (4.5e-3 here; 0.022 on an H200)."""
    if namespace.name == "numpy":
        pytest.skip("numpy arrays are the host's")
    X = make_random_noisy(1200, 8, signal_dim=4, zeta=10, random_state=2)
    params = dict(n_components=4, n_landmarks=100, gamma=0.5, random_state=0)
    host = NystromKPCA(solver="randomized", **params).fit(X[:1000])
    model = NystromKPCA(solver="randomized", **params).fit(namespace.to_ns(X[:1000]))
    _assert_same_model(host, model, X[1000:], namespace, TOL32)


# --- the primitives the fit added to execution/ -------------------------------------------------
def test_whitening_primitive(namespace):
    """``linalg.whitening``: ``N A N^T = I_r``, ``Z = N A`` and ``A N^T N A = A`` (N^T N a
    generalised inverse: the Nystrom approximation of A itself is A) at A's rank."""
    rng = np.random.default_rng(0)
    B = rng.standard_normal((30, 12))
    A = B @ B.T  # rank 12
    N, Z = whitening(namespace.to_ns(A), 1e-10 * float(np.max(np.diag(A))))
    assert namespace.is_native(N) and namespace.is_native(Z)
    N, Z = namespace.from_ns(N), namespace.from_ns(Z)
    assert N.shape == (12, 30)
    np.testing.assert_allclose(N @ A @ N.T, np.eye(12), atol=1e-8)
    np.testing.assert_allclose(Z, N @ A, atol=1e-10)
    assert rel_err(A, A @ N.T @ N @ A) < 1e-8


def test_lower_solver_primitive(namespace):
    rng = np.random.default_rng(1)
    L = np.tril(rng.standard_normal((6, 6))) + 4 * np.eye(6)
    G = rng.standard_normal((40, 6))
    Gn = namespace.to_ns(G)
    out = lower_solver(L, placement_of(Gn))(Gn)
    assert namespace.is_native(out)
    np.testing.assert_allclose(namespace.from_ns(out), G @ np.linalg.inv(L).T, atol=1e-12)


def test_put_primitive(namespace):
    a = np.arange(12.0).reshape(6, 2)
    got = put_(namespace.to_ns(a.copy()), np.array([4, 1]), -1.0)
    a[[4, 1]] = -1.0
    assert namespace.is_native(got)
    np.testing.assert_array_equal(namespace.from_ns(got), a)
    v = put_(namespace.to_ns(np.ones(5)), np.array([], dtype=np.int64), 0.0)
    np.testing.assert_array_equal(namespace.from_ns(v), np.ones(5))
