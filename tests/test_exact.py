"""ExactKPCA against scikit-learn's KernelPCA: every kernel, every solver, train and new points."""

import tracemalloc

import numpy as np
import pytest
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.gaussian_process.kernels import Matern as SkMatern
from sklearn.metrics.pairwise import laplacian_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from fastkpca import ExactKPCA
from tests.conftest import rel_err

# CPU torch on one thread (the namespace tests): see conftest.one_torch_thread
pytestmark = pytest.mark.usefixtures("one_torch_thread")

# (our kernel spec, sklearn KernelPCA kwargs or a precomputed-kernel function)
KERNELS = {
    "rbf": (dict(kernel="rbf", gamma=0.15), dict(kernel="rbf", gamma=0.15)),
    "polynomial": (
        dict(kernel="polynomial", gamma=0.1, degree=3, coef0=1.0),
        dict(kernel="poly", gamma=0.1, degree=3, coef0=1.0),
    ),
    "linear": (dict(kernel="linear"), dict(kernel="linear")),
    "cosine": (dict(kernel="cosine"), dict(kernel="cosine")),
    "laplacian": (
        dict(kernel="laplacian", gamma=0.1),
        lambda X, Y: laplacian_kernel(X, Y, gamma=0.1),
    ),
    "matern": (
        dict(kernel="matern", gamma=0.1, nu=2.5),
        lambda X, Y: SkMatern(length_scale=1 / np.sqrt(0.2), nu=2.5)(X, Y),
    ),
}
# dense / lanczos converge to machine precision (1e-6 relative is the contract); the block
# iterations stop at a 1e-8 residual, far inside the 1e-3 contract.
TOL = {
    "dense": 1e-6,
    "lanczos": 1e-6,
    "randomized": 1e-3,
    "orthogonal": 1e-3,
    "matrix_free": 1e-3,
}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    # three clusters: a clear spectral gap after the leading components
    centers = rng.standard_normal((3, 6)) * 3
    X = np.vstack([c + rng.standard_normal((100, 6)) for c in centers])
    Xn = np.vstack([c + rng.standard_normal((20, 6)) for c in centers])
    return X, Xn


def sklearn_reference(name, X, Xn, k):
    _, ref = KERNELS[name]
    if callable(ref):
        kp = KernelPCA(k, kernel="precomputed", eigen_solver="dense").fit(ref(X, X))
        return kp.transform(ref(X, X)), kp.transform(ref(Xn, X)), kp.eigenvalues_
    kp = KernelPCA(k, eigen_solver="dense", **ref).fit(X)
    return kp.transform(X), kp.transform(Xn), kp.eigenvalues_


@pytest.mark.parametrize("solver", list(TOL))
@pytest.mark.parametrize("name", list(KERNELS))
def test_matches_kernel_pca(data, name, solver):
    X, Xn = data
    k = 4
    T_ref, Tn_ref, ev_ref = sklearn_reference(name, X, Xn, k)
    model = ExactKPCA(k, eigen_solver=solver, random_state=0, **KERNELS[name][0])
    T_fit = model.fit_transform(X)
    assert rel_err(T_ref, T_fit) < TOL[solver]
    assert rel_err(T_ref, model.transform(X)) < TOL[solver]
    assert rel_err(Tn_ref, model.transform(Xn)) < TOL[solver]
    np.testing.assert_allclose(model.eigenvalues_, ev_ref, rtol=TOL[solver])
    assert model.kernel_.name == name


def test_auto_gamma_and_default_components(data):
    X, _ = data
    model = ExactKPCA().fit(X)
    assert model.n_components_ == 10 and model.kernel_.gamma == pytest.approx(1 / 6)
    ref = KernelPCA(10, kernel="rbf").fit(X)  # sklearn's default gamma is 1 / n_features
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    assert ExactKPCA().fit(X[:4]).n_components_ == 4


def test_float32_stays_float32(data):
    X, Xn = data
    m64 = ExactKPCA(3, gamma=0.15, eigen_solver="dense").fit(X)
    for solver in TOL:
        m32 = ExactKPCA(3, gamma=0.15, eigen_solver=solver, random_state=0).fit(
            X.astype(np.float32)
        )
        T = m32.transform(Xn.astype(np.float32))
        assert T.dtype == np.float32
        assert m32.fit_transform(X.astype(np.float32)).dtype == np.float32
        # float32 Gram entries carry ~1e-7 relative error; the embedding moves by that over the
        # spectral gap, comfortably below 1e-3
        assert rel_err(m64.transform(Xn), T) < 1e-3
        np.testing.assert_allclose(m32.eigenvalues_, m64.eigenvalues_, rtol=1e-4)


@pytest.mark.parametrize("solver", list(TOL))
def test_same_seed_same_result(data, solver):
    X, Xn = data
    a = ExactKPCA(3, eigen_solver=solver, random_state=5).fit(X).transform(Xn)
    b = ExactKPCA(3, eigen_solver=solver, random_state=5).fit(X).transform(Xn)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("solver", ["dense", "randomized"])
def test_holds_one_gram(solver, monkeypatch):
    # The fit holds one n x n Gram (filled and centered in place), plus O(n k) and the
    # kernel's row-chunk temporaries (bounded by the working-memory budget).  scikit-learn's
    # KernelPCA holds several copies.
    monkeypatch.setattr("fastkpca.execution.budget.WORKING_MEMORY_MB", 2)
    n = 1500
    X = np.random.default_rng(0).standard_normal((n, 5))
    gram_bytes = n * n * 8
    tracemalloc.start()
    ExactKPCA(5, eigen_solver=solver, random_state=0).fit(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1.35 * gram_bytes, peak / gram_bytes


@pytest.mark.parametrize(
    "X,match",
    [
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "infinity"),
        (np.empty((0, 3)), "0 sample"),
    ],
)
def test_bad_fit_input(X, match):
    with pytest.raises(ValueError, match=match):
        ExactKPCA(1).fit(X)


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(n_components=50), "n_components=50 is larger"),
        (dict(n_components=0), "n_components must be a positive"),
        (dict(kernel="chi2"), "unknown kernel"),  # sigmoid is a kernel since KernelPCA
        (dict(gamma=-2.0), "gamma must be > 0"),
        (dict(eigen_solver="qr"), "eigen_solver must be one of"),
    ],
)
def test_bad_parameters(params, match):
    X = np.random.default_rng(0).standard_normal((20, 3))
    with pytest.raises(ValueError, match=match):
        ExactKPCA(**params).fit(X)


def test_transform_checks(data):
    X, _ = data
    with pytest.raises(NotFittedError):
        ExactKPCA(2).transform(X)
    model = ExactKPCA(2).fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but ExactKPCA is expecting 6"):
        model.transform(X[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        model.transform(np.full((2, 6), np.nan))


@parametrize_with_checks(
    [
        ExactKPCA(n_components=2, random_state=0),
        ExactKPCA(n_components=2, eigen_solver="randomized", random_state=0),
        ExactKPCA(n_components=2, eigen_solver="matrix_free", random_state=0),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


# --- every namespace: numpy, PyTorch's CPU, array_api_strict (CUDA under gpu) -------------------
# One fit path: the same Gram, centering and solver calls on every namespace, from the same host
# start block, so a float64 fit differs from numpy's only by the order of the products' sums
# (~1e-15) times the inverse eigengap (< 1e3 on these spectra): 1e-10.  float32: 2e-4 (float32's
# 6e-8 rounding of the n = 300 entries of each product, times the eigengap).


@pytest.fixture(scope="module")
def noisy():
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(400, 8, signal_dim=4, zeta=10, random_state=1)
    return X[:300], X[300:]


def _assert_native(namespace, model, Z):
    assert namespace.is_native(Z)
    for name in ("eigenvalues_", "eigenvectors_", "X_fit_", "gram_col_means_"):
        assert namespace.is_native(getattr(model, name)), name


@pytest.mark.parametrize("eigen_solver", ["auto", "dense", "lanczos", "randomized", "matrix_free"])
def test_every_solver_on_every_namespace_equals_numpy(namespace, eigen_solver, noisy):
    X, X_new = noisy
    params = dict(gamma=0.05, eigen_solver=eigen_solver, random_state=0)
    host = ExactKPCA(5, **params).fit(X)
    model = ExactKPCA(5, **params).fit(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    _assert_native(namespace, model, Z)
    # ARPACK runs on numpy only; elsewhere "lanczos" is block Krylov (execution.linalg.lanczos),
    # another solver: both stop at a residual of 1e-8 or below, 1e-6 over the eigengap
    tol = 1e-6 if eigen_solver == "lanczos" and namespace.name != "numpy" else 1e-10
    np.testing.assert_allclose(namespace.from_ns(model.eigenvalues_), host.eigenvalues_, rtol=tol)
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < tol
    assert rel_err(host.eigenvectors_, namespace.from_ns(model.eigenvectors_)) < tol
    np.testing.assert_allclose(
        namespace.from_ns(model.gram_col_means_), host.gram_col_means_, rtol=1e-12
    )
    assert model.total_variance_ == pytest.approx(host.total_variance_, rel=1e-12)
    assert model.n_iter_ >= 1
    T = model.fit_transform(namespace.to_ns(X))
    assert namespace.is_native(T)
    assert rel_err(host.fit_transform(X), namespace.from_ns(T)) < tol


@pytest.mark.parametrize(
    "kernel", ["rbf", "laplacian", "matern", "polynomial", "linear", "cosine", "sigmoid"]
)
def test_every_kernel_on_every_namespace(namespace, kernel, noisy):
    X, X_new = noisy
    params = {"kernel": kernel, "gamma": 0.05, "random_state": 0}
    if kernel == "sigmoid":
        params["coef0"] = 0.0
    host = ExactKPCA(3, **params).fit(X)
    model = ExactKPCA(3, **params).fit(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    _assert_native(namespace, model, Z)
    np.testing.assert_allclose(
        namespace.from_ns(model.eigenvalues_),
        host.eigenvalues_,
        rtol=1e-10,
        atol=1e-12 * host.eigenvalues_[0],
    )
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < 1e-10
    assert model.total_variance_ == pytest.approx(host.total_variance_, rel=1e-10)


#: The real dtypes every namespace fits, as the numpy model of their float64 (float32) values.
DTYPES = ["float64", "float32", "int64", "int32", "uint8", "bool"]


def _values(dtype, X):
    if dtype == "bool":
        return X > 0.3
    if dtype in ("int64", "int32", "uint8"):
        return np.rint(3 * X + (12 if dtype == "uint8" else 0)).astype(dtype)
    return X.astype(dtype)


@pytest.mark.parametrize("estimator", ["ExactKPCA", "KernelPCA"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_real_dtype_on_every_namespace(namespace, estimator, dtype, noisy):
    """Integer and bool rows give the float64 model, float32 rows the float32 one, as numpy
    rows do; float64 (and the integers, exact in float64) to 1e-10 of numpy's model."""
    from fastkpca import KernelPCA as FastKernelPCA

    cls = ExactKPCA if estimator == "ExactKPCA" else FastKernelPCA
    X, X_new = (_values(dtype, a) for a in noisy)
    float_type = np.float32 if dtype == "float32" else np.float64
    host = cls(4, kernel="rbf", gamma=0.05, random_state=0).fit(X.astype(float_type))
    model = cls(4, kernel="rbf", gamma=0.05, random_state=0).fit(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z) and namespace.is_native(model.eigenvectors_)
    got = namespace.from_ns(Z)
    assert got.dtype == float_type
    tol = 2e-4 if dtype == "float32" else 1e-10
    assert rel_err(host.transform(X_new.astype(float_type)), got) < tol


def test_fraction_of_variance_on_every_namespace(namespace, noisy):
    X, _ = noisy
    host = ExactKPCA(0.9, gamma=0.05, random_state=0).fit(X)
    model = ExactKPCA(0.9, gamma=0.05, random_state=0).fit(namespace.to_ns(X))
    assert model.n_components_ == host.n_components_
    np.testing.assert_allclose(namespace.from_ns(model.eigenvalues_), host.eigenvalues_, rtol=1e-10)


def test_float32_on_every_namespace(namespace, noisy):
    X, X_new = (a.astype(np.float32) for a in noisy)
    host = ExactKPCA(4, gamma=0.05, random_state=0).fit(X)
    model = ExactKPCA(4, gamma=0.05, random_state=0)
    T = model.fit_transform(namespace.to_ns(X))
    Z = model.transform(namespace.to_ns(X_new))
    assert namespace.is_native(Z) and namespace.from_ns(Z).dtype == np.float32
    assert namespace.from_ns(T).dtype == np.float32
    assert rel_err(host.transform(X_new), namespace.from_ns(Z)) < 2e-4
    assert rel_err(host.fit_transform(X), namespace.from_ns(T)) < 2e-4


def test_model_of_a_namespace_transforms_numpy_rows(namespace, noisy):
    X, X_new = noisy
    model = ExactKPCA(4, gamma=0.05, random_state=0).fit(namespace.to_ns(X))
    Z = model.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(namespace.from_ns(model.transform(namespace.to_ns(X_new))), Z) < 1e-12


def test_precomputed_and_pre_images_on_every_namespace(namespace, noisy):
    """What used to be host-only: a precomputed Gram and the pre-image map fit on any namespace,
    as numpy does."""
    from fastkpca.kernels import RBF

    X, X_new = noisy
    K, K_new = RBF(0.05)(X), RBF(0.05)(X_new, X)
    host = ExactKPCA(4, kernel="precomputed", random_state=0).fit(K)
    model = ExactKPCA(4, kernel="precomputed", random_state=0).fit(namespace.to_ns(K))
    Z = model.transform(namespace.to_ns(K_new))
    assert namespace.is_native(Z)
    assert rel_err(host.transform(K_new), namespace.from_ns(Z)) < 1e-10
    params = dict(gamma=0.05, fit_inverse_transform=True, random_state=0)
    host = ExactKPCA(3, **params).fit(X)
    model = ExactKPCA(3, **params).fit(namespace.to_ns(X))
    back = model.inverse_transform(model.transform(namespace.to_ns(X_new)))
    assert namespace.is_native(back)
    reference = host.inverse_transform(host.transform(X_new))
    assert rel_err(reference, namespace.from_ns(back)) < 1e-8


def test_gamma_heuristics_on_every_namespace(namespace, noisy):
    X, _ = noisy
    for gamma in ("scale", "median", None):
        host = ExactKPCA(3, gamma=gamma, random_state=0).fit(X)
        model = ExactKPCA(3, gamma=gamma, random_state=0).fit(namespace.to_ns(X))
        assert model.kernel_.gamma == pytest.approx(host.kernel_.gamma, rel=1e-12)


@pytest.mark.parametrize("name", ["rbf", "laplacian", "polynomial", "cosine"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_symmetric_gram_on_every_namespace(namespace, name, dtype, noisy):
    """The stored Gram (execution.kernel_ops.symmetric_gram): the kernel's Gram from its upper
    block triangle, exactly symmetric, in the rows' dtype, on the rows' namespace."""
    from fastkpca.execution.kernel_ops import symmetric_gram
    from fastkpca.kernels import make_kernel

    X = noisy[0].astype(dtype)
    kernel = make_kernel(name, gamma=0.05)
    reference = kernel(X)
    for rows in (None, 37):
        K = namespace.from_ns(symmetric_gram(kernel, namespace.to_ns(X), rows=rows))
        assert K.dtype == dtype
        assert np.array_equal(K, K.T)  # mirrored, not recomputed
        rtol = 1e-6 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(K, reference, rtol=rtol, atol=rtol * np.abs(reference).max())
        if name in ("rbf", "laplacian"):
            np.testing.assert_array_equal(np.diag(K), 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("eigen_solver", ["dense", "randomized", "matrix_free"])
def test_cuda_exact_kpca_equals_cpu_torch(eigen_solver, noisy):
    torch = pytest.importorskip("torch")
    X, X_new = noisy
    cpu = ExactKPCA(4, gamma=0.05, eigen_solver=eigen_solver, random_state=0)
    gpu = ExactKPCA(4, gamma=0.05, eigen_solver=eigen_solver, random_state=0)
    cpu.fit(torch.from_numpy(X))
    gpu.fit(torch.from_numpy(X).cuda())
    assert gpu.eigenvectors_.device.type == "cuda"
    np.testing.assert_allclose(gpu.eigenvalues_.cpu().numpy(), cpu.eigenvalues_.numpy(), rtol=1e-8)
    Z = gpu.transform(torch.from_numpy(X_new).cuda())
    assert Z.device.type == "cuda"
    assert rel_err(cpu.transform(torch.from_numpy(X_new)).numpy(), Z.cpu().numpy()) < 1e-8


# --- kernel="precomputed": only a symmetric, positive semi-definite Gram -------------------------
def _asymmetric(K, relative):
    """K plus an antisymmetric perturbation of ``relative`` times max |K|."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal(K.shape)
    return K + relative * np.abs(K).max() * (A - A.T) / np.abs(A - A.T).max()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_precomputed_gram_must_be_symmetric(namespace, dtype, noisy):
    from fastkpca.decomposition.exact import SYMMETRY_TOLERANCE
    from fastkpca.kernels import RBF

    X, _ = noisy
    K = RBF(0.05)(X)
    tolerance = SYMMETRY_TOLERANCE[np.dtype(dtype).name]
    # a random n x n matrix: dense and Lanczos disagreed, fit_transform != transform
    bad = np.random.default_rng(0).standard_normal((50, 50)).astype(dtype)
    for solver in ("dense", "lanczos"):
        with pytest.raises(ValueError, match="symmetric Gram"):
            ExactKPCA(3, kernel="precomputed", eigen_solver=solver).fit(namespace.to_ns(bad))
    with pytest.raises(ValueError, match="symmetric Gram"):
        ExactKPCA(3, kernel="precomputed").fit(
            namespace.to_ns(_asymmetric(K, 10 * tolerance).astype(dtype))
        )
    # asymmetry at the rounding of a Gram computed in two orders is accepted
    near = _asymmetric(K, tolerance / 10).astype(dtype)
    model = ExactKPCA(3, kernel="precomputed", eigen_solver="dense").fit(namespace.to_ns(near))
    T = namespace.from_ns(model.fit_transform(namespace.to_ns(near)))
    assert rel_err(T, namespace.from_ns(model.transform(namespace.to_ns(near)))) < 1e-3


def test_precomputed_gram_that_is_not_psd_is_refused(namespace, noisy):
    from fastkpca.kernels import RBF

    X, _ = noisy
    K = RBF(0.05)(X)
    for k in (1, 3):
        for solver in ("dense", "randomized", "lanczos"):
            with pytest.raises(ValueError, match="not positive semi-definite"):
                ExactKPCA(k, kernel="precomputed", eigen_solver=solver, random_state=0).fit(
                    namespace.to_ns(-K)
                )
    with pytest.raises(ValueError, match="not positive semi-definite"):
        ExactKPCA(2, kernel="precomputed").fit(namespace.to_ns(-np.abs(K)))
    # ... where scikit-learn and fastkpca's KernelPCA raise too
    from fastkpca import KernelPCA as FastKernelPCA

    for cls in (KernelPCA, FastKernelPCA):
        with pytest.raises(ValueError, match="negative"):
            cls(kernel="precomputed").fit(-K)
    # a zero centered Gram (identical points) is no error: zero eigenvalues, zero projections
    from fastkpca.kernels import DegenerateKernelWarning

    ones = np.ones((20, 20))
    with pytest.warns(DegenerateKernelWarning):
        model = ExactKPCA(2, kernel="precomputed").fit(namespace.to_ns(ones))
    np.testing.assert_array_equal(namespace.from_ns(model.eigenvalues_), 0.0)
