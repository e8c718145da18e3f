"""Eigensolvers, centering, ExactKPCA and KernelPCA on device arrays (CPU torch; CUDA where marked)
equal their numpy paths.

Tolerances: float64 eigenvalues and eigenvectors agree to 1e-8 relative, up to column signs: the
solvers stop at relative residuals of 1e-8 (``TOLERANCES``), and both paths iterate from the same
start block (drawn on the host generator), so they differ by the products' summation order
(~1e-15) amplified by the inverse eigengap (< 1e3 on these spectra).  Dense and Krylov results
of the same matrix agree to the residual tolerance over the gap.  float32 Grams: 2e-4 (float32's
6e-8 rounding of n = 300 entries per product times the eigengap).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

from fastkpca import ExactKPCA, KernelPCA  # noqa: E402
from fastkpca._centering import (  # noqa: E402
    center_gram_inplace,
    center_gram_out_of_sample,
    centered_operator,
    gram_row_stats,
)
from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.decomposition.exact import (  # noqa: E402
    device_exact_kpca,
    device_matrix_free_kpca,
    exact_kpca,
)
from fastkpca.execution.arrays import Placement  # noqa: E402
from fastkpca.execution.kernel_ops import CenteredGramOperator  # noqa: E402
from fastkpca.execution.linalg import DENSE_RULE  # noqa: E402
from fastkpca.kernels import RBF, make_kernel  # noqa: E402
from fastkpca.solvers import auto_method, eigh_topk  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """CPU torch on one thread: its OpenMP workers spin when the cores are shared (a 300 x 300
    eigh took seconds instead of 15 ms on a loaded two-core machine); results do not depend on
    it beyond rounding."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


@pytest.fixture(scope="module")
def gram(data):
    X, _ = data
    K = RBF(0.05)(X)
    n = K.shape[0]
    H = np.eye(n) - 1.0 / n
    return X, K, H @ K @ H


# --- solvers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["dense", "randomized", "orthogonal", "lanczos", "auto"])
def test_solvers_on_a_torch_matrix_equal_numpy(method, gram):
    _, _, Kc = gram
    host_vals, host_vecs = eigh_topk(Kc, 5, method=method, rng=0)
    vals, vecs = eigh_topk(torch.from_numpy(Kc), 5, method=method, rng=0)
    assert isinstance(vals, torch.Tensor) and isinstance(vecs, torch.Tensor)
    assert vals.dtype == vecs.dtype == torch.float64
    np.testing.assert_allclose(vals.numpy(), host_vals, rtol=1e-8)
    assert rel_err(host_vecs, vecs.numpy()) < 1e-8
    # deterministic signs: each column's entry of largest magnitude is positive
    V = vecs.numpy()
    assert np.all(V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])] > 0)


@pytest.mark.parametrize("method", ["randomized", "orthogonal", "lanczos", "auto"])
def test_solvers_on_the_centered_gram_operator_equal_numpy(method, gram):
    X, K, _ = gram
    host_vals, host_vecs = eigh_topk(centered_operator(K), 5, method="randomized", rng=0)
    op = CenteredGramOperator(torch.from_numpy(X), RBF(0.05))
    vals, vecs, n_iter = eigh_topk(op, 5, method=method, rng=0, return_n_iter=True)
    assert isinstance(vecs, torch.Tensor)
    assert n_iter == op.n_passes - (method == "orthogonal")  # orthogonal: one more for Ritz
    np.testing.assert_allclose(vals.numpy(), host_vals, rtol=1e-8)
    assert rel_err(host_vecs, vecs.numpy()) < 1e-8
    # the first pass gave the Gram's row means for free
    np.testing.assert_allclose(op.row_means.numpy(), K.mean(axis=1), rtol=1e-12)


def test_float32_matrix_uses_float32_tolerances(gram):
    _, _, Kc = gram
    host_vals, _ = eigh_topk(Kc, 5, rng=0)
    vals, _ = eigh_topk(torch.from_numpy(Kc.astype(np.float32)), 5, method="randomized", rng=0)
    np.testing.assert_allclose(vals.numpy(), host_vals, rtol=2e-4)


def test_zero_matrix_gives_exact_zeros():
    vals, vecs = eigh_topk(torch.zeros((50, 50), dtype=torch.float64), 3, method="randomized")
    np.testing.assert_array_equal(vals.numpy(), 0.0)
    np.testing.assert_allclose(vecs.T.numpy() @ vecs.numpy(), np.eye(3), atol=1e-12)


def test_nonfinite_device_matrix_is_a_value_error():
    A = torch.eye(30, dtype=torch.float64)
    A[3, 3] = float("nan")
    for method in ("dense", "randomized"):
        with pytest.raises(ValueError, match="NaN or infinite"):
            eigh_topk(A, 2, method=method, rng=0)


def test_device_auto_rule_is_one_table():
    import array_api_compat.torch as xp

    gpu = Placement(xp=xp, device=torch.device("cuda"), host=False, name="torch:cuda")
    assert auto_method(DENSE_RULE["device"]["max_n"], 1, dense=True, placement=gpu) == "dense"
    assert auto_method(20000, 10, dense=True, placement=gpu) == "randomized"
    assert auto_method(20000, 5000, dense=True, placement=gpu) == "dense"
    assert auto_method(500, 3, dense=False, placement=gpu) == "randomized"


# --- centering ------------------------------------------------------------------------------------
def test_centering_on_tensors_equals_numpy(gram, data):
    X, K, Kc = gram
    _, X_new = data
    stats_host = gram_row_stats(K)
    Kt = torch.from_numpy(K.copy())
    stats = center_gram_inplace(Kt)
    assert isinstance(stats.col_means, torch.Tensor)
    np.testing.assert_allclose(stats.col_means.numpy(), stats_host.col_means, rtol=1e-13)
    assert stats.total_mean == pytest.approx(stats_host.total_mean, rel=1e-13)
    np.testing.assert_allclose(Kt.numpy(), Kc, atol=1e-13)
    row_stats = gram_row_stats(torch.from_numpy(K))
    np.testing.assert_allclose(row_stats.col_means.numpy(), stats_host.col_means, rtol=1e-13)
    K_new = RBF(0.05)(X_new, X)
    host = center_gram_out_of_sample(K_new.copy(), stats_host)
    dev = center_gram_out_of_sample(torch.from_numpy(K_new.copy()), stats)
    np.testing.assert_allclose(dev.numpy(), host, atol=1e-13)
    w = np.random.default_rng(0).uniform(size=K.shape[0])
    host_w = center_gram_inplace(K.copy(), w)
    dev_w = center_gram_inplace(torch.from_numpy(K.copy()), torch.from_numpy(w))
    np.testing.assert_allclose(dev_w.col_means.numpy(), host_w.col_means, rtol=1e-13)


# --- exact KPCA -----------------------------------------------------------------------------------
@pytest.mark.parametrize("eigen_solver", ["auto", "dense", "randomized", "matrix_free"])
def test_device_exact_kpca_equals_host(eigen_solver, data):
    X, _ = data
    kernel = RBF(0.05)
    host_vals, host_vecs, host_stats, _ = exact_kpca(
        X, kernel, 5, eigen_solver=eigen_solver, rng=np.random.default_rng(0)
    )
    vals, vecs, stats, n_iter = device_exact_kpca(
        torch.from_numpy(X), kernel, 5, eigen_solver=eigen_solver, rng=np.random.default_rng(0)
    )
    assert n_iter >= 1
    np.testing.assert_allclose(vals.numpy(), host_vals, rtol=1e-8)
    assert rel_err(host_vecs, vecs.numpy()) < 1e-8
    np.testing.assert_allclose(stats.col_means.numpy(), host_stats.col_means, rtol=1e-12)


def test_matrix_free_float32_tiles_are_close(data):
    X, _ = data
    kernel = RBF(0.05)
    vals, vecs, _, _ = device_matrix_free_kpca(torch.from_numpy(X), kernel, 4, rng=0)
    vals32, vecs32, _, _ = device_matrix_free_kpca(
        torch.from_numpy(X), kernel, 4, rng=0, tile_dtype="float32", tol=1e-6
    )
    # float32 tiles: each product rounded ~1e-7 relative, amplified by the eigengap
    np.testing.assert_allclose(vals32.numpy(), vals.numpy(), rtol=1e-5)
    assert rel_err(vecs.numpy(), vecs32.numpy()) < 1e-4


@pytest.mark.parametrize(
    "kernel",
    ["rbf", "laplacian", "matern", "polynomial", "linear", "cosine", "sigmoid"],
)
def test_exact_kpca_on_tensors_every_kernel(kernel, data):
    X, X_new = data
    params = {"kernel": kernel, "gamma": 0.05, "random_state": 0}
    if kernel == "sigmoid":
        params["coef0"] = 0.0
    host = ExactKPCA(3, **params).fit(X)
    dev = ExactKPCA(3, **params).fit(torch.from_numpy(X))
    assert isinstance(dev.X_fit_, torch.Tensor)
    np.testing.assert_allclose(
        dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=1e-8, atol=1e-12 * host.eigenvalues_[0]
    )
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float64
    assert rel_err(host.transform(X_new), Z.numpy()) < 1e-8
    assert dev.total_variance_ == pytest.approx(host.total_variance_, rel=1e-10)


def test_exact_fit_transform_and_float32_on_tensors(data):
    X, X_new = data
    host = ExactKPCA(4, gamma=0.05, random_state=0)
    dev = ExactKPCA(4, gamma=0.05, random_state=0)
    Z_host = host.fit_transform(X)
    Z = dev.fit_transform(torch.from_numpy(X))
    assert isinstance(Z, torch.Tensor)
    assert rel_err(Z_host, Z.numpy()) < 1e-8
    X32 = X.astype(np.float32)
    dev32 = ExactKPCA(4, gamma=0.05, random_state=0).fit(torch.from_numpy(X32))
    Z32 = dev32.transform(torch.from_numpy(X_new.astype(np.float32)))
    assert Z32.dtype == torch.float32
    host32 = ExactKPCA(4, gamma=0.05, random_state=0).fit(X32)
    assert rel_err(host32.transform(X_new.astype(np.float32)), Z32.numpy()) < 2e-4


def test_exact_fraction_of_variance_on_tensors(data):
    X, _ = data
    host = ExactKPCA(0.9, gamma=0.05, random_state=0).fit(X)
    dev = ExactKPCA(0.9, gamma=0.05, random_state=0).fit(torch.from_numpy(X))
    assert dev.n_components_ == host.n_components_
    np.testing.assert_allclose(dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=1e-8)


def test_exact_device_model_transforms_host_rows(data):
    X, X_new = data
    dev = ExactKPCA(4, gamma=0.05, random_state=0).fit(torch.from_numpy(X))
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), Z) < 1e-12


def test_exact_on_device_refuses_what_is_host_only(data):
    X, _ = data
    with pytest.raises(ValueError, match="fit_inverse_transform"):
        ExactKPCA(2, gamma=0.05, fit_inverse_transform=True).fit(torch.from_numpy(X))
    with pytest.raises(ValueError, match="precomputed"):
        ExactKPCA(2, kernel="precomputed").fit(torch.from_numpy(RBF(0.05)(X)))


def test_gamma_heuristics_on_tensors_equal_host(data):
    X, X_new = data
    for gamma in ("scale", "median", None):
        host = ExactKPCA(3, gamma=gamma, random_state=0).fit(X)
        dev = ExactKPCA(3, gamma=gamma, random_state=0).fit(torch.from_numpy(X))
        assert dev.kernel_.gamma == pytest.approx(host.kernel_.gamma, rel=1e-12)


# --- KernelPCA ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kernel, eigen_solver",
    [("rbf", "auto"), ("rbf", "arpack"), ("poly", "dense"), ("cosine", "randomized")],
)
def test_kernel_pca_on_tensors_equals_numpy(kernel, eigen_solver, data):
    X, X_new = data
    params = {"kernel": kernel, "gamma": 0.05, "eigen_solver": eigen_solver, "random_state": 0}
    host = KernelPCA(5, **params).fit(X)
    dev = KernelPCA(5, **params).fit(torch.from_numpy(X))
    for name in ("eigenvalues_", "eigenvectors_", "X_fit_", "gram_col_means_"):
        assert isinstance(getattr(dev, name), torch.Tensor), name
    np.testing.assert_allclose(dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=1e-8)
    assert rel_err(host.eigenvectors_, dev.eigenvectors_.numpy()) < 1e-8
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor)
    assert rel_err(host.transform(X_new), Z.numpy()) < 1e-8
    assert rel_err(host.fit_transform(X), dev.fit_transform(torch.from_numpy(X)).numpy()) < 1e-8


def test_kernel_pca_all_components_and_device_parameter(data):
    X, X_new = data
    Xs = X[:80]
    host = KernelPCA(gamma=0.05).fit(Xs)  # n_components=None: every nonzero component
    dev = KernelPCA(gamma=0.05).fit(torch.from_numpy(Xs))
    assert dev.eigenvalues_.shape == host.eigenvalues_.shape
    np.testing.assert_allclose(
        dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=1e-8, atol=1e-10 * host.eigenvalues_[0]
    )
    on_cpu = KernelPCA(4, gamma=0.05, device="cpu").fit(X)
    assert isinstance(on_cpu.eigenvectors_, np.ndarray)  # fitted arrays follow the data
    Z = on_cpu.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(KernelPCA(4, gamma=0.05).fit(X).transform(X_new), Z) < 1e-8


def test_kernel_pca_float32_on_tensors(data):
    X, X_new = (a.astype(np.float32) for a in data)
    host = KernelPCA(4, gamma=0.05).fit(X)
    dev = KernelPCA(4, gamma=0.05).fit(torch.from_numpy(X))
    assert dev.eigenvectors_.dtype == torch.float32
    Z = dev.transform(torch.from_numpy(X_new))
    assert Z.dtype == torch.float32
    assert rel_err(host.transform(X_new), Z.numpy()) < 2e-4


@pytest.mark.parametrize("cls", [KernelPCA, ExactKPCA])
def test_host_model_transforms_tensors(cls, data):
    X, X_new = data
    model = cls(4, gamma=0.05, random_state=0).fit(X)
    Z = model.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float64
    assert rel_err(model.transform(X_new), Z.numpy()) < 1e-12
    assert model.transform(torch.from_numpy(X_new.astype(np.float32))).dtype == torch.float32


# --- CUDA -----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("eigen_solver", ["dense", "randomized", "matrix_free"])
def test_cuda_exact_kpca_equals_cpu_torch(eigen_solver, data):
    X, X_new = data
    cpu = ExactKPCA(4, gamma=0.05, eigen_solver=eigen_solver, random_state=0)
    gpu = ExactKPCA(4, gamma=0.05, eigen_solver=eigen_solver, random_state=0)
    cpu.fit(torch.from_numpy(X))
    gpu.fit(torch.from_numpy(X).cuda())
    assert gpu.eigenvectors_.device.type == "cuda"
    np.testing.assert_allclose(gpu.eigenvalues_.cpu().numpy(), cpu.eigenvalues_.numpy(), rtol=1e-8)
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda"
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < 1e-8


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["dense", "randomized", "orthogonal"])
def test_cuda_solvers_equal_cpu_torch(method, gram):
    _, _, Kc = gram
    vals, vecs = eigh_topk(torch.from_numpy(Kc), 5, method=method, rng=0)
    gvals, gvecs = eigh_topk(torch.from_numpy(Kc).cuda(), 5, method=method, rng=0)
    assert gvecs.device.type == "cuda"
    np.testing.assert_allclose(gvals.cpu().numpy(), vals.numpy(), rtol=1e-8)
    assert rel_err(vecs.numpy(), gvecs.cpu().numpy()) < 1e-8


@pytest.mark.gpu
def test_cuda_kernel_pca_and_matrix_free_memory_from_free_memory(data):
    X, X_new = data
    gpu = KernelPCA(4, gamma=0.05, device="cuda").fit(X)
    assert gpu.eigenvectors_.device.type == "cuda"
    Z = gpu.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(KernelPCA(4, gamma=0.05).fit(X).transform(X_new), Z) < 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converges: no ConvergenceWarning
        vals, _, _, _ = device_matrix_free_kpca(
            torch.from_numpy(X).cuda(), make_kernel("rbf", gamma=0.05), 4, rng=0
        )
    assert vals.device.type == "cuda"


def test_float32_rows_give_the_float32_tile_option_of_the_estimator(data, monkeypatch):
    """ExactKPCA on float32 rows, matrix-free on a device, computes float32 tiles (the option
    whose error the docs state) and stays within float32's tolerance of the float64 fit."""
    import fastkpca.decomposition.exact as exact

    X, X_new = data
    seen = []
    original = exact.device_matrix_free_kpca

    def spy(*args, **kwargs):
        seen.append(kwargs.get("tile_dtype"))
        return original(*args, **kwargs)

    monkeypatch.setattr(exact, "device_matrix_free_kpca", spy)
    params = dict(gamma=0.05, eigen_solver="matrix_free", random_state=0)
    f64 = ExactKPCA(4, **params).fit(torch.from_numpy(X))
    f32 = ExactKPCA(4, **params).fit(torch.from_numpy(X.astype(np.float32)))
    assert seen == ["float64", "float32"]
    # float32 tiles with float32's stopping tolerance (1e-5): measured 1e-8 on the eigenvalues
    # and 1.6e-5 on the embedding at n = 5000; 1e-4 leaves room for other spectra.
    np.testing.assert_allclose(f32.eigenvalues_.numpy(), f64.eigenvalues_.numpy(), rtol=1e-4)
    Z32 = f32.transform(torch.from_numpy(X_new.astype(np.float32)))
    assert Z32.dtype == torch.float32
    assert rel_err(f64.transform(torch.from_numpy(X_new)).numpy(), Z32.numpy()) < 1e-3
