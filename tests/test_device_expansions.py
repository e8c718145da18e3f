"""SparsifiedKPCA, ReducedSetKPCA and compress_expansion on PyTorch tensors (CPU here; CUDA where
marked ``gpu``): the same model as on numpy for the same ``random_state``, outputs and fitted
arrays on the input's device.

Tolerances: float64 agrees to 1e-8 relative.  Both paths make the same random draws on the host
generator and differ only in the rounding of the kernel values (a tile's GEMM against the host's
chunked distances, ~1e-15 relative) and of the device transform's folded centering; the
eigensolver, started from the same vector, amplifies that by at most the inverse relative
eigengap of these well separated spectra (measured: below 2e-14).  float32 rows give float32
kernel values (sparsified) and float32 outputs: 2e-4 relative, float32's 6e-8 rounding times the
same amplification and the sqrt of the number of terms summed (measured: below 4e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

import fastkpca  # noqa: E402
from fastkpca import ReducedSetKPCA, SparsifiedKPCA, compress_expansion  # noqa: E402
from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.decomposition.compress import CompressedKPCA  # noqa: E402
from fastkpca.decomposition.sparsified import sparsify_gram  # noqa: E402
from fastkpca.execution.arrays import placement_for  # noqa: E402
from fastkpca.kernels import RBF  # noqa: E402

RTOL = {np.float64: 1e-8, np.float32: 2e-4}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(260, 6, signal_dim=3, zeta=10, random_state=3)
    return X[:200], X[200:]


def _host(a):
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _assert_on_torch(model):
    """Every fitted array (public attribute ending in "_", not scipy.sparse) is a tensor."""
    arrays = {
        k: v
        for k, v in vars(model).items()
        if k.endswith("_") and not k.startswith("_") and hasattr(v, "shape")
        if not sp.issparse(v)
    }
    assert arrays
    for name, value in arrays.items():
        assert isinstance(value, torch.Tensor), name


def _assert_same_model(host, dev, X_new, tol):
    Z_host = host.transform(X_new)
    Z_dev = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z_dev, torch.Tensor) and Z_dev.device.type == "cpu"
    assert Z_dev.dtype == TORCH_DTYPE[X_new.dtype.type]
    assert rel_err(Z_host, Z_dev.numpy()) < tol
    ev = host.eigenvalues_
    np.testing.assert_allclose(_host(dev.eigenvalues_), ev, rtol=tol, atol=tol * ev.max())


SPARSIFIED = {
    "sampled_lanczos": dict(sample_prob=0.3),
    "quantized_orthogonal": dict(
        sample_prob=0.5, quantize=True, eigen_solver="orthogonal", tol=1e-4
    ),
    "all_entries_median_gamma": dict(sample_prob=1.0, gamma="median"),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", sorted(SPARSIFIED))
def test_sparsified_on_tensors_equals_numpy(case, dtype, data):
    """Same sampled pairs, signs and solver start vectors (host generator): same model."""
    X, X_new = (a.astype(dtype) for a in data)
    params = {"gamma": 0.1, **SPARSIFIED[case]}
    host = SparsifiedKPCA(3, random_state=0, **params).fit(X)
    dev = SparsifiedKPCA(3, random_state=0, **params).fit(torch.from_numpy(X))
    _assert_same_model(host, dev, X_new, RTOL[dtype])
    assert dev.kernel_ == host.kernel_  # the median heuristic read the same rows
    assert dev.n_kept_ == host.n_kept_  # the same pairs: integers from the same draws
    assert dev.noise_norm_ == pytest.approx(host.noise_norm_, rel=RTOL[dtype])
    assert dev.total_variance_ == pytest.approx(host.total_variance_, rel=RTOL[dtype])
    _assert_on_torch(dev)
    assert dev.X_fit_.dtype == TORCH_DTYPE[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparsify_gram_on_tensors_keeps_the_same_entries(dtype, data):
    """The kept pairs are the host's; their values are read off device tiles."""
    X = data[0].astype(dtype)
    kernel = RBF(gamma=0.1)
    host = sparsify_gram(X, kernel, 0.2, rng=7, pairwise=True)
    dev = sparsify_gram(torch.from_numpy(X), kernel, 0.2, rng=7)
    np.testing.assert_array_equal(dev.upper.indptr, host.upper.indptr)
    np.testing.assert_array_equal(dev.upper.indices, host.upper.indices)
    assert dev.upper.dtype == host.upper.dtype == dtype
    np.testing.assert_allclose(dev.upper.data, host.upper.data, rtol=RTOL[dtype])
    np.testing.assert_allclose(dev.diag, host.diag, rtol=RTOL[dtype])


@pytest.mark.parametrize("kernel", ["laplacian", "polynomial", "matern"])
def test_other_kernels_on_tensors(kernel, data):
    """Device-native kernels and one without device math (Matern nu = 0.7: its host blocks are
    moved to the device) give the numpy model."""
    X, X_new = data
    params = dict(kernel=kernel, gamma=0.1, nu=0.7, degree=2, random_state=0)
    for cls in (SparsifiedKPCA, ReducedSetKPCA):
        extra = {"density": "kmeans", "n_centers": 40} if cls is ReducedSetKPCA else {}
        host = cls(3, **params, **extra).fit(X)
        dev = cls(3, **params, **extra).fit(torch.from_numpy(X))
        _assert_same_model(host, dev, X_new, RTOL[np.float64])


@pytest.mark.parametrize("name", ["sparsified", "reduced_set", "compressed"])
def test_kernel_passes_run_on_the_device(name, data, monkeypatch):
    """The passes over all rows (kept Gram entries, diagonal, mean-embedding probe, transform)
    compute device tiles: the kernel's blocks of host rows are never computed for a kernel with
    namespace math (only the m x m Gram of reduced-set centres is a host block: it is built on
    the host)."""
    X, X_new = data
    if name == "reduced_set":
        model = ReducedSetKPCA(3, gamma=0.1, density="kmeans", n_centers=40, random_state=0)
    else:
        model = SparsifiedKPCA(3, gamma=0.1, random_state=0)
    calls = []
    host_block = RBF._block

    def spy(self, Xc, Y, ctx, out=None):
        if isinstance(Xc, np.ndarray):
            calls.append(Xc.shape[0])
        return host_block(self, Xc, Y, ctx, out)

    monkeypatch.setattr(RBF, "_block", spy)
    model.fit(torch.from_numpy(X))
    if name == "compressed":
        model = compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
    # at most the rows of the centres' own Gram (40), never a pass over the 200 rows
    assert sum(calls) <= getattr(model, "n_centers_", 0)
    calls.clear()
    model.transform(torch.from_numpy(X_new))
    assert not calls


def test_sparsified_constant_rows_on_tensors():
    """Identical rows: the exact zero-variance answer, detected from device column ranges."""
    X = np.ones((30, 4))
    with pytest.warns(fastkpca.kernels.DegenerateKernelWarning):
        dev = SparsifiedKPCA(2, gamma=0.5, random_state=0).fit(torch.from_numpy(X))
    assert isinstance(dev.eigenvalues_, torch.Tensor)
    assert torch.all(dev.eigenvalues_ == 0)
    assert dev.n_kept_ == 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("density", ["shadow", "kmeans", "paring", "herding", "uniform"])
def test_reduced_set_on_tensors_equals_numpy(density, dtype, data):
    """Densities on a host copy with the host generator: the same centres and model."""
    X, X_new = (a.astype(dtype) for a in data)
    params = dict(gamma=0.1, density=density, n_centers=40, random_state=0)
    host = ReducedSetKPCA(3, **params).fit(X)
    dev = ReducedSetKPCA(3, **params).fit(torch.from_numpy(X))
    _assert_same_model(host, dev, X_new, RTOL[dtype])
    assert dev.n_centers_ == host.n_centers_
    np.testing.assert_allclose(_host(dev.centers_), host.centers_, rtol=1e-12)
    np.testing.assert_allclose(_host(dev.weights_), host.weights_, rtol=1e-12)
    # the diagonal and the mean-embedding probe ran on the device: the same rows, rounding apart
    assert dev.total_variance_ == pytest.approx(host.total_variance_, rel=RTOL[dtype])
    _assert_on_torch(dev)


def test_reduced_set_scale_gamma_on_tensors(data):
    X, X_new = data
    host = ReducedSetKPCA(3, gamma="scale", ell=3.0).fit(X)
    dev = ReducedSetKPCA(3, gamma="scale", ell=3.0).fit(torch.from_numpy(X))
    assert dev.kernel_.gamma == pytest.approx(host.kernel_.gamma, rel=1e-12)
    _assert_same_model(host, dev, X_new, RTOL[np.float64])


@pytest.mark.parametrize("name", ["sparsified", "reduced_set"])
def test_fit_transform_and_device_parameter(name, data):
    """fit_transform on tensors returns a tensor; ``device="cpu"`` sends host rows to torch and
    returns numpy rows: the same projections."""
    X, _ = data
    make = {
        "sparsified": lambda **kw: SparsifiedKPCA(3, gamma=0.1, random_state=0, **kw),
        "reduced_set": lambda **kw: ReducedSetKPCA(3, gamma=0.1, random_state=0, **kw),
    }[name]
    Z_host = make().fit_transform(X)
    Z_dev = make().fit_transform(torch.from_numpy(X))
    assert isinstance(Z_dev, torch.Tensor)
    assert rel_err(Z_host, Z_dev.numpy()) < RTOL[np.float64]
    model = make(device="cpu").fit(X)
    # computed on the device (the cached copy there); fitted arrays follow the numpy data
    _assert_on_torch(model._placed(placement_for(None, "cpu")))
    assert isinstance(model.eigenvalues_, np.ndarray)
    Z = model.transform(X)
    assert isinstance(Z, np.ndarray) and Z.dtype == np.float64
    assert rel_err(Z_host, Z) < RTOL[np.float64]


def test_sparse_host_model_transforms_tensors(data):
    """A model fitted on CSR rows keeps them sparse; its device transform densifies them."""
    X, X_new = data
    X_csr = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    host = SparsifiedKPCA(3, gamma=0.1, random_state=0).fit(X_csr)
    Z = host.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor)
    assert rel_err(host.transform(X_new), Z.numpy()) < 1e-10
    dense = SparsifiedKPCA(3, gamma=0.1, random_state=0, device="cpu").fit(X_csr)
    assert isinstance(dense.X_fit_, np.ndarray)  # fitted arrays follow the data given to fit
    assert rel_err(host.transform(X_new), dense.transform(X_new)) < RTOL[np.float64]


@pytest.mark.parametrize("name", ["sparsified", "reduced_set"])
def test_pre_image_map_of_a_tensor_fit(name, data):
    """``fit_inverse_transform`` on tensors: the map is learned (on host copies) and stored on
    the device, equal to the numpy fit's."""
    X = data[0][:120]
    cls = SparsifiedKPCA if name == "sparsified" else ReducedSetKPCA
    params = dict(gamma=0.1, random_state=0, fit_inverse_transform=True)
    host = cls(3, **params).fit(X)
    dev = cls(3, **params).fit(torch.from_numpy(X))
    assert isinstance(dev.dual_coef_inverse_, torch.Tensor)
    assert isinstance(dev.X_transformed_fit_, torch.Tensor)
    assert rel_err(host.X_transformed_fit_, _host(dev.X_transformed_fit_)) < RTOL[np.float64]
    # the ridge solve amplifies the projections' rounding by cond(K + alpha I) <= 1 + m / alpha
    assert rel_err(host.dual_coef_inverse_, _host(dev.dual_coef_inverse_)) < 1e-6
    Z = host.transform(X[:20])
    back = dev.inverse_transform(torch.from_numpy(Z))
    assert isinstance(back, torch.Tensor) and back.dtype == torch.float64
    assert rel_err(host.inverse_transform(Z), back.numpy()) < 1e-6
    back32 = dev.inverse_transform(torch.from_numpy(Z.astype(np.float32)))
    assert back32.dtype == torch.float32
    back_host = dev.inverse_transform(Z)  # host rows: the map's host copy, host output
    assert isinstance(back_host, np.ndarray)
    assert rel_err(host.inverse_transform(Z), back_host) < 1e-6
    with pytest.raises(ValueError, match="NaN"):
        dev.inverse_transform(torch.full((2, 3), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="components"):
        dev.inverse_transform(torch.zeros((2, 5), dtype=torch.float64))
    # a host model's map on tensors
    back_dev = host.inverse_transform(torch.from_numpy(Z))
    assert isinstance(back_dev, torch.Tensor)
    assert rel_err(host.inverse_transform(Z), back_dev.numpy()) < 1e-10


COMPRESSIONS = {
    "rounding": dict(rounding=0.5),
    "projection": dict(projection_dim=4),
    "both": dict(rounding=0.6, projection_dim=5),
}


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@pytest.mark.parametrize("name", ["sparsified", "reduced_set"])
def test_compress_expansion_of_a_tensor_model(name, compression, data):
    """The same coins and projection (host generator) as for the numpy model; the compressed
    model lives on the source model's device and transforms there."""
    X, X_new = data
    cls = SparsifiedKPCA if name == "sparsified" else ReducedSetKPCA
    host = cls(3, gamma=0.1, random_state=0).fit(X)
    dev = cls(3, gamma=0.1, random_state=0).fit(torch.from_numpy(X))
    kw = COMPRESSIONS[compression]
    fast_host = compress_expansion(host, random_state=5, **kw)
    fast_dev = compress_expansion(dev, random_state=5, **kw)
    assert fast_dev.n_terms_ == fast_host.n_terms_  # the same coins
    _assert_on_torch(fast_dev)
    Z = fast_dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float64
    assert rel_err(fast_host.transform(X_new), Z.numpy()) < RTOL[np.float64]
    # host rows given to the device model come back as host rows
    Z_np = fast_dev.transform(X_new)
    assert isinstance(Z_np, np.ndarray)
    assert rel_err(fast_host.transform(X_new), Z_np) < RTOL[np.float64]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_compressed_host_model_transforms_tensors(compression, dtype, data):
    """A host compressed model on tensors: the host's float32 / float64 arithmetic, on torch."""
    X, X_new = data
    model = ReducedSetKPCA(3, gamma=0.1, density="kmeans", n_centers=50, random_state=0).fit(X)
    fast = compress_expansion(model, random_state=1, **COMPRESSIONS[compression])
    X_new = X_new.astype(dtype)
    Z = fast.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == TORCH_DTYPE[dtype]
    # float64: products of the same float64 numbers in another order (rounding ~1e-15)
    assert rel_err(fast.transform(X_new), Z.numpy()) < (1e-10 if dtype == np.float64 else 2e-4)
    assert isinstance(fast.points_, np.ndarray)  # the host model is left as it was


@pytest.mark.parametrize("name", ["sparsified", "reduced_set", "compressed"])
def test_tensor_model_saves_and_loads_on_the_host(name, data, tmp_path):
    X, X_new = data
    if name == "reduced_set":
        dev = ReducedSetKPCA(3, gamma=0.1, random_state=0).fit(torch.from_numpy(X))
    else:
        dev = SparsifiedKPCA(3, gamma=0.1, random_state=0).fit(torch.from_numpy(X))
    if name == "compressed":
        dev = compress_expansion(dev, rounding=0.5, projection_dim=4, random_state=0)
    path = tmp_path / "model.npz"
    dev.save(path)
    loaded = fastkpca.load(path)
    assert type(loaded) is type(dev)
    assert isinstance(loaded.eigenvalues_, np.ndarray)
    Z = loaded.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), Z) < 1e-10
    if name == "compressed":
        assert isinstance(loaded, CompressedKPCA) and isinstance(loaded.projection_, np.ndarray)


# --- CUDA (run on a machine with a GPU) --------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["sparsified", "reduced_set"])
def test_cuda_equals_cpu_torch(name, dtype, data):
    X, X_new = (a.astype(dtype) for a in data)
    cls = SparsifiedKPCA if name == "sparsified" else ReducedSetKPCA
    cpu = cls(3, gamma=0.1, random_state=0).fit(torch.from_numpy(X))
    gpu = cls(3, gamma=0.1, random_state=0).fit(torch.from_numpy(X).cuda())
    for key, value in vars(gpu).items():
        if isinstance(value, torch.Tensor):
            assert value.device.type == "cuda", key
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda" and Z.dtype == TORCH_DTYPE[dtype]
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < RTOL[dtype]
    fast = compress_expansion(gpu, rounding=0.5, projection_dim=4, random_state=0)
    assert fast.points_.device.type == "cuda"
    Zf = fast.transform(torch.from_numpy(X_new).cuda())
    fast_cpu = compress_expansion(cpu, rounding=0.5, projection_dim=4, random_state=0)
    Zf_cpu = fast_cpu.transform(torch.from_numpy(X_new))
    assert rel_err(Zf_cpu.numpy(), Zf.cpu().numpy()) < RTOL[dtype]


@pytest.mark.gpu
def test_cuda_device_parameter_and_host_model_on_cuda(data):
    X, X_new = data
    host = ReducedSetKPCA(3, gamma=0.1, density="kmeans", n_centers=40, random_state=0).fit(X)
    dev = ReducedSetKPCA(
        3, gamma=0.1, density="kmeans", n_centers=40, random_state=0, device="cuda"
    ).fit(X)
    assert dev.centers_.device.type == "cuda"
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < RTOL[np.float64]
    fast = compress_expansion(host, rounding=0.5, random_state=0)
    Zc = fast.transform(torch.from_numpy(X_new).cuda())
    assert Zc.device.type == "cuda"
    assert rel_err(fast.transform(X_new), Zc.cpu().numpy()) < 1e-10
