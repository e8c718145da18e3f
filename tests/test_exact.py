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
