"""fastkpca.KernelPCA against sklearn.decomposition.KernelPCA: a drop-in, behaviour by behaviour."""

import functools

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_circles
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Perceptron
from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from fastkpca import KernelPCA
from fastkpca.kernels import RBF, Polynomial, Sigmoid, make_kernel
from tests.conftest import rel_err

# CPU torch on one thread (the namespace tests): see conftest.one_torch_thread
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def histogram(x, y):
    """A callable kernel (histogram intersection), evaluated pair by pair as in scikit-learn."""
    return np.minimum(x, y).sum()


def scaled_linear(x, y, scale=1.0):
    return scale * np.dot(x, y)


# (fastkpca kwargs, scikit-learn kwargs): the same kernel under both spellings
KERNELS = {
    "linear": dict(kernel="linear"),
    "rbf": dict(kernel="rbf", gamma=0.05),
    "poly": dict(kernel="poly", gamma=0.1, degree=3, coef0=1),
    "cosine": dict(kernel="cosine"),
    # small gamma, coef0 = 0: tanh stays in its near-linear range, so this Gram is PSD
    "sigmoid": dict(kernel="sigmoid", gamma=0.002, coef0=0.0),
    "callable": dict(kernel=histogram),
}
SOLVERS = ("dense", "arpack", "randomized", "auto")

# Tolerances on max |difference| / max |reference| after column-sign alignment.
# float64: dense and arpack (tol=0: ARPACK to machine precision) agree with LAPACK to round-off
# (1e-14 measured); block Krylov stops at a Ritz residual of 1e-8 * lambda_1, which bounds the
# eigenvector error by 1e-8 * lambda_1 / gap (1e-8 measured here).  float32: the Gram itself is
# rounded to 6e-8 relative, and eigenvectors move by that over the relative gap (5e-5 measured
# for the histogram kernel, whose 5th gap is the smallest).
TOL = {
    np.float64: {"dense": 1e-10, "arpack": 1e-10, "randomized": 1e-6, "auto": 1e-6},
    np.float32: {"dense": 5e-4, "arpack": 5e-4, "randomized": 5e-4, "auto": 5e-4},
}


@functools.cache
def _data():
    # three clusters: a clear spectral gap after the leading components
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 6)) * 3
    X = np.vstack([c + rng.standard_normal((100, 6)) for c in centers])
    Xn = np.vstack([c + rng.standard_normal((20, 6)) for c in centers])
    return X, Xn


@pytest.fixture
def data():
    X, Xn = _data()
    return X.copy(), Xn.copy()


@functools.cache
def _reference(name):
    """scikit-learn's dense KernelPCA: training and new-point projections, eigenvalues, gamma_."""
    X, Xn = _data()
    ref = SkKernelPCA(5, eigen_solver="dense", **KERNELS[name]).fit(X)
    return ref.transform(X), ref.transform(Xn), ref.eigenvalues_, ref.gamma_


# float64: every kernel and solver; float32: the kernels with distinct code paths (a fastkpca
# kernel in float32, a pairwise callable) through every solver's low-precision branch.
CASES = [(name, solver, np.float64) for name in KERNELS for solver in SOLVERS] + [
    (name, solver, np.float32) for name in ("rbf", "poly", "callable") for solver in SOLVERS
]


@pytest.mark.parametrize("name, solver, dtype", CASES)
def test_matches_sklearn(data, name, solver, dtype):
    X, Xn = data
    T_ref, Tn_ref, vals_ref, gamma_ref = _reference(name)
    model = KernelPCA(5, eigen_solver=solver, random_state=0, **KERNELS[name])
    T = model.fit_transform(X.astype(dtype))
    Tn = model.transform(Xn.astype(dtype))
    tol = TOL[dtype][solver]
    assert T.dtype == Tn.dtype == model.eigenvalues_.dtype == model.eigenvectors_.dtype == dtype
    assert rel_err(T_ref, T) < tol
    assert rel_err(Tn_ref, Tn) < tol
    # eigenvalues: quadratic in the eigenvector error, so far inside tol
    np.testing.assert_allclose(model.eigenvalues_, vals_ref, rtol=tol)
    assert model.gamma_ == gamma_ref


def test_signs_match_sklearn(data):
    # Both flip each eigenvector so that its largest-magnitude entry is positive.
    X, Xn = data
    ref = SkKernelPCA(5, kernel="rbf", gamma=0.05, eigen_solver="dense").fit(X)
    model = KernelPCA(5, kernel="rbf", gamma=0.05, eigen_solver="dense").fit(X)
    # float64 round-off only (see TOL): no sign alignment here
    np.testing.assert_allclose(model.transform(Xn), ref.transform(Xn), atol=1e-10)
    np.testing.assert_allclose(model.eigenvectors_, ref.eigenvectors_, atol=1e-10)


def test_transform_of_training_data_equals_fit_transform(data):
    X, _ = data
    model = KernelPCA(4, kernel="rbf", gamma=0.05, eigen_solver="dense")
    # two float64 paths (eigenvectors * sqrt(lambda) against the projection): round-off only
    np.testing.assert_allclose(model.fit_transform(X), model.transform(X), atol=1e-10)


def test_same_seed_same_result(data):
    X, _ = data
    a = KernelPCA(4, kernel="rbf", eigen_solver="randomized", random_state=3).fit_transform(X)
    b = KernelPCA(4, kernel="rbf", eigen_solver="randomized", random_state=3).fit_transform(X)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("solver", ["dense", "arpack", "randomized"])
def test_precomputed_matches_sklearn(data, solver):
    X, Xn = data
    K, Kn = rbf_kernel(X, X, gamma=0.05), rbf_kernel(Xn, X, gamma=0.05)
    ref = SkKernelPCA(5, kernel="precomputed", eigen_solver="dense").fit(K)
    K_given = K.copy()
    model = KernelPCA(5, kernel="precomputed", eigen_solver=solver, random_state=0)
    T = model.fit_transform(K_given)
    np.testing.assert_array_equal(K_given, K)  # copy_X=True: the given Gram is left alone
    tol = TOL[np.float64][solver]
    assert rel_err(ref.transform(K), T) < tol
    assert rel_err(ref.transform(Kn), model.transform(Kn)) < tol
    assert model.kernel_ is None


def test_precomputed_copy_false_centers_in_place(data):
    # scikit-learn's documented copy_X=False: X_fit_ is the given array (here: the Gram,
    # centered in place, which is what scikit-learn stores as X_fit_).
    X, _ = data
    K = rbf_kernel(X, X, gamma=0.05)
    model = KernelPCA(3, kernel="precomputed", copy_X=False).fit(K)
    assert model.X_fit_ is K
    np.testing.assert_allclose(K.mean(axis=0), 0.0, atol=1e-12)  # centered: round-off only


def test_precomputed_non_symmetric_is_centered_then_symmetrized():
    K = np.array([[1.0, 2.0], [3.0, 40.0]])
    Kc = np.array([[9.0, -9.0], [-9.0, 9.0]])  # K centered as KernelCenterer does
    a = KernelPCA(1, kernel="precomputed").fit(K)
    b = KernelPCA(1, kernel="precomputed").fit(Kc)
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=1e-14)
    np.testing.assert_allclose(a.eigenvectors_, b.eigenvectors_, rtol=1e-14)


NOT_PSD = np.array(
    [
        [4.48, -1.0, 8.07, 2.33, 2.33, 2.33, -5.76, -12.78],
        [-1.0, -6.48, 4.5, -1.24, -1.24, -1.24, -0.81, 7.49],
        [8.07, 4.5, 15.48, 2.09, 2.09, 2.09, -11.1, -23.23],
        [2.33, -1.24, 2.09, 4.0, -3.65, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, 4.0, -3.65, 1.02, -0.9],
        [2.33, -1.24, 2.09, -3.65, -3.65, 4.0, 1.02, -0.9],
        [-5.76, -0.81, -11.1, 1.02, 1.02, 1.02, 4.86, 9.75],
        [-12.78, 7.49, -23.23, -0.9, -0.9, -0.9, 9.75, 21.46],
    ]
)  # centered, eigenvalues about 52.7, 7.65, 7.65, 5.0, 0, 0, -6.1, -15.1


@pytest.mark.parametrize("solver", SOLVERS)
def test_not_psd_kernel(solver):
    with pytest.raises(ValueError, match="significant negative eigenvalues"):
        KernelPCA(7, kernel="precomputed", eigen_solver=solver).fit(NOT_PSD)
    # The two largest eigenvalues are positive: every solver returns them (scikit-learn's
    # randomized solver selects by modulus and raises here instead).
    model = KernelPCA(2, kernel="precomputed", eigen_solver=solver, random_state=0).fit(NOT_PSD)
    top = np.linalg.eigvalsh(NOT_PSD)[::-1][:2]
    np.testing.assert_allclose(model.eigenvalues_, top, rtol=1e-9)


def test_n_components_none_keeps_the_nonzero_components():
    # Linear kernel on 3 features: the centered Gram has rank 3.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 3))
    for model in (KernelPCA(), SkKernelPCA()):
        assert model.fit_transform(X).shape == (40, 3)
    # with n_components given, zero eigenvalues stay unless remove_zero_eig
    model = KernelPCA(5).fit(X)
    assert model.eigenvalues_.shape == (5,)
    np.testing.assert_array_equal(model.eigenvalues_[3:], 0.0)
    assert not np.any(np.isnan(model.transform(X)))
    assert KernelPCA(5, remove_zero_eig=True).fit_transform(X).shape == (40, 3)
    # n_components above n_samples is capped, as in scikit-learn
    assert KernelPCA(100, kernel="rbf").fit(X).eigenvalues_.shape == (40,)


def test_tiny_eigenvalues_are_zeroed_as_sklearn():
    # The pathological data of scikit-learn's conditioning test: a tiny positive eigenvalue
    # below 1e-12 of the largest becomes exactly 0.
    X = [[5, 1], [5 + 1e-8, 1e-8], [5 + 1e-8, 0]]
    model = KernelPCA(kernel="linear", n_components=2).fit(X)
    ref = SkKernelPCA(kernel="linear", n_components=2).fit(X)
    assert model.eigenvalues_.min() == 0.0 == ref.eigenvalues_.min()


@pytest.mark.parametrize("name", ["linear", "rbf", "poly", "cosine", "sigmoid"])
def test_sparse_input(data, name):
    X, Xn = data
    dense = KernelPCA(4, eigen_solver="dense", **KERNELS[name]).fit(X)
    model = KernelPCA(4, eigen_solver="dense", **KERNELS[name]).fit(sp.csr_matrix(X))
    # the same Gram by a sparse product: float64 round-off only
    assert rel_err(dense.transform(Xn), model.transform(sp.csr_array(Xn))) < 1e-10
    assert rel_err(dense.transform(Xn), model.transform(Xn)) < 1e-10


def test_sparse_input_cannot_fit_inverse_transform(data):
    X, _ = data
    with pytest.raises(ValueError, match="sparse"):
        KernelPCA(2, kernel="rbf", fit_inverse_transform=True).fit(sp.csr_matrix(X))


@pytest.mark.parametrize("name", ["rbf", "poly", "linear"])
def test_inverse_transform_matches_sklearn(data, name):
    X, Xn = data
    kw = dict(
        n_components=5, fit_inverse_transform=True, alpha=0.1, eigen_solver="dense", **KERNELS[name]
    )
    ref = SkKernelPCA(**kw).fit(X)
    model = KernelPCA(**kw).fit(X)
    assert model.dual_coef_.shape == ref.dual_coef_.shape == X.shape
    # The ridge regression on the embedding is invariant to column signs.  Its system is
    # conditioned by alpha = 0.1 against the Gram of the embedding, up to ~1e11 for the cubic
    # kernel: the embeddings' round-off (1e-15) comes out 1e-9 relative (measured 4e-9).
    tol = 1e-7 * np.abs(ref.dual_coef_).max()
    np.testing.assert_allclose(model.dual_coef_, ref.dual_coef_, rtol=0, atol=tol)
    expected = ref.inverse_transform(ref.transform(Xn))
    np.testing.assert_allclose(
        model.inverse_transform(model.transform(Xn)),
        expected,
        rtol=0,
        atol=1e-7 * np.abs(expected).max(),
    )


def test_inverse_transform_errors(data):
    X, Xn = data
    with pytest.raises(NotFittedError):
        KernelPCA(2).fit(X).inverse_transform(np.zeros((3, 2)))
    model = KernelPCA(2, kernel="rbf", fit_inverse_transform=True).fit(X)
    with pytest.raises(ValueError, match="components"):
        model.inverse_transform(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="precomputed"):
        KernelPCA(2, kernel="precomputed", fit_inverse_transform=True).fit(X @ X.T)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(kernel="gaussian"), "kernel"),
        (dict(eigen_solver="lobpcg"), "eigen_solver"),
        (dict(n_components=0), "n_components"),
        (dict(n_components=2.5), "n_components"),
        (dict(gamma=-1.0), "gamma"),
        (dict(degree=-1), "degree"),
        (dict(alpha=-0.1), "alpha"),
        (dict(tol=-1e-3), "tol"),
        (dict(max_iter=0), "max_iter"),
        (dict(iterated_power=-1), "iterated_power"),
        (dict(iterated_power="full"), "iterated_power"),
        (dict(kernel_params=[1]), "kernel_params"),
        (dict(remove_zero_eig="yes"), "remove_zero_eig"),
        (dict(copy_X=None), "copy_X"),
        (dict(n_jobs=0), "n_jobs"),
    ],
)
def test_bad_parameters(data, params, match):
    X, _ = data
    with pytest.raises(ValueError, match=match):
        KernelPCA(**params).fit(X)


def test_bad_data(data):
    X, _ = data
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        KernelPCA(2).fit(bad)
    model = KernelPCA(2).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :3])
    with pytest.raises(ValueError, match="square"):
        KernelPCA(2, kernel="precomputed").fit(X)


def test_aliases_and_resolved_kernel(data):
    X, _ = data
    model = KernelPCA(2, kernel="poly", degree=2, coef0=0.5).fit(X)
    assert model.kernel_ == Polynomial(degree=2, gamma=1 / 6, coef0=0.5)
    assert model.gamma_ == 1 / 6  # gamma=None: 1 / n_features, as scikit-learn's gamma_
    assert KernelPCA(2, kernel="rbf").fit(X).kernel_ == RBF(1 / 6)
    assert make_kernel("poly", gamma=0.1) == make_kernel("polynomial", gamma=0.1)
    # eigen_solver="lanczos" is fastkpca's name for "arpack"
    a = KernelPCA(3, kernel="rbf", eigen_solver="arpack", random_state=0).fit(X)
    b = KernelPCA(3, kernel="rbf", eigen_solver="lanczos", random_state=0).fit(X)
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=1e-12)
    # a fastkpca Kernel object is used as is
    m = KernelPCA(3, kernel=RBF(0.05)).fit(X)
    np.testing.assert_allclose(
        m.eigenvalues_, KernelPCA(3, kernel="rbf", gamma=0.05).fit(X).eigenvalues_, rtol=1e-9
    )


@pytest.mark.parametrize(
    "params",
    [
        dict(kernel="rbf", gamma=0.0),  # constant Gram: every eigenvalue is 0
        dict(kernel="poly", gamma=0.1, coef0=-1.0, degree=3),  # negative coef0
        dict(kernel="poly", gamma=0.1, coef0=1.0, degree=2.0),  # float degree
        dict(kernel=scaled_linear, kernel_params={"scale": 2.0}),
    ],
    ids=["gamma0", "negative-coef0", "float-degree", "kernel-params"],
)
def test_parameters_outside_fastkpca_kernels(data, params):
    # scikit-learn accepts these; they go through its pairwise kernels.
    X, Xn = data
    ref = SkKernelPCA(3, eigen_solver="dense", **params).fit(X)
    model = KernelPCA(3, eigen_solver="dense", **params).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-9, atol=1e-12)
    if ref.eigenvalues_.max() > 0:
        assert rel_err(ref.transform(Xn), model.transform(Xn)) < 1e-9


def test_sigmoid_kernel_matches_sklearn(data):
    X, Xn = data
    kernel = Sigmoid(gamma=0.01, coef0=-0.5)
    ref = sigmoid_kernel(Xn, X, gamma=0.01, coef0=-0.5)
    np.testing.assert_allclose(kernel(Xn, X), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(kernel.diag(X), np.diag(sigmoid_kernel(X, gamma=0.01, coef0=-0.5)))
    K32 = kernel(Xn.astype(np.float32), X.astype(np.float32))
    assert K32.dtype == np.float32
    np.testing.assert_allclose(K32, ref, atol=1e-5)  # float32 inputs: rounded to 6e-8
    assert make_kernel("sigmoid", gamma=0.01, coef0=-0.5) == kernel


def test_iterated_power_caps_the_passes(data):
    X, _ = data
    for q in (0, 1, 3):
        model = KernelPCA(4, kernel="rbf", eigen_solver="randomized", iterated_power=q).fit(X)
        assert model.n_iter_ <= q + 2
    model = KernelPCA(4, kernel="rbf", eigen_solver="randomized", max_iter=2).fit(X)
    assert model.n_iter_ <= 2


def test_auto_solver_choice(data):
    X, _ = data
    # n = 300 > 200 and n_components < 10: scikit-learn takes ARPACK, we take block Krylov
    assert KernelPCA(5, kernel="rbf").fit(X).n_iter_ > 1
    # n_components >= 10 (or n <= 200): dense, as scikit-learn
    assert KernelPCA(12, kernel="rbf").fit(X).n_iter_ == 1
    assert KernelPCA(5, kernel="rbf").fit(X[:150]).n_iter_ == 1


def test_n_jobs(data):
    X, Xn = data
    a = KernelPCA(4, kernel="rbf", eigen_solver="dense", n_jobs=1).fit(X).transform(Xn)
    b = KernelPCA(4, kernel="rbf", eigen_solver="dense", n_jobs=-1).fit(X).transform(Xn)
    # row blocks of a different size: float64 round-off only
    np.testing.assert_allclose(a, b, atol=1e-10)


def test_copy_x(data):
    X, _ = data
    Xc = X.copy()
    model = KernelPCA(2, kernel="rbf", copy_X=False).fit(Xc)
    assert model.X_fit_ is Xc
    model = KernelPCA(2, kernel="rbf").fit(Xc)
    assert model.X_fit_ is not Xc
    Xc[:] = 0.0  # mutating the input does not change the fitted model
    np.testing.assert_array_equal(model.X_fit_, X)


def test_feature_names_and_pandas_output(data):
    X, _ = data
    model = KernelPCA(2, kernel="rbf").fit(X)
    assert list(model.get_feature_names_out()) == ["kernelpca0", "kernelpca1"]
    pd = pytest.importorskip("pandas")
    out = KernelPCA(2, eigen_solver="arpack").set_output(transform="pandas").fit_transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["kernelpca0", "kernelpca1"]


def test_grid_search_pipeline():
    X, y = make_circles(n_samples=400, factor=0.3, noise=0.05, random_state=0)
    pipe = Pipeline([("kpca", KernelPCA(2, kernel="rbf")), ("clf", Perceptron(max_iter=5))])
    search = GridSearchCV(pipe, {"kpca__gamma": 2.0 ** np.arange(-2, 2)}, cv=3).fit(X, y)
    assert search.best_score_ == 1.0  # the circles are linearly separable after KPCA


def test_grid_search_pipeline_precomputed():
    # the pairwise tag makes cross-validation cut the Gram by rows and columns
    X, y = make_circles(n_samples=400, factor=0.3, noise=0.05, random_state=0)
    pipe = Pipeline([("kpca", KernelPCA(2, kernel="precomputed")), ("clf", Perceptron())])
    search = GridSearchCV(pipe, {"clf__max_iter": [2, 4]}, cv=3).fit(rbf_kernel(X, gamma=2.0), y)
    assert search.best_score_ == 1.0


@parametrize_with_checks(
    [
        KernelPCA(),
        KernelPCA(
            2, kernel="rbf", eigen_solver="arpack", fit_inverse_transform=True, random_state=0
        ),
        KernelPCA(3, kernel="sigmoid", eigen_solver="randomized", random_state=0),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_save_and_load(data, tmp_path):
    import fastkpca

    X, Xn = data
    for model, Z in (
        (KernelPCA(3, kernel="rbf", fit_inverse_transform=True).fit(X), Xn),
        (KernelPCA(3, kernel="precomputed").fit(X @ X.T), Xn @ X.T),
    ):
        model.save(tmp_path / "m.npz")
        loaded = fastkpca.load(tmp_path / "m.npz")
        np.testing.assert_array_equal(loaded.transform(Z), model.transform(Z))
    with pytest.raises(ValueError, match="kernel"):
        KernelPCA(2, kernel=histogram).fit(X[:20]).save(tmp_path / "c.npz")


# --- every namespace: numpy, PyTorch's CPU, array_api_strict (CUDA under gpu) -------------------
# One fit path on every namespace, from the same host start block: a float64 fit differs from
# numpy's by the order of the products' sums (~1e-15) times the inverse eigengap: 1e-10 (ARPACK
# runs on numpy only: "arpack" is block Krylov elsewhere, to its 1e-8 residual: 1e-6).


@pytest.mark.parametrize(
    "name, solver",
    [("rbf", "auto"), ("rbf", "arpack"), ("poly", "dense"), ("cosine", "randomized")],
)
def test_on_every_namespace_equals_numpy(namespace, name, solver, data):
    X, Xn = data
    params = dict(eigen_solver=solver, random_state=0, **KERNELS[name])
    host = KernelPCA(5, **params).fit(X)
    model = KernelPCA(5, **params).fit(namespace.to_ns(X))
    for attribute in ("eigenvalues_", "eigenvectors_", "X_fit_", "gram_col_means_"):
        assert namespace.is_native(getattr(model, attribute)), attribute
    tol = 1e-6 if solver == "arpack" and namespace.name != "numpy" else 1e-10
    np.testing.assert_allclose(namespace.from_ns(model.eigenvalues_), host.eigenvalues_, rtol=tol)
    assert rel_err(host.eigenvectors_, namespace.from_ns(model.eigenvectors_)) < tol
    Z = model.transform(namespace.to_ns(Xn))
    assert namespace.is_native(Z)
    assert rel_err(host.transform(Xn), namespace.from_ns(Z)) < tol
    T = model.fit_transform(namespace.to_ns(X))
    assert namespace.is_native(T)
    assert rel_err(host.fit_transform(X), namespace.from_ns(T)) < tol


def test_all_components_on_every_namespace(namespace, data):
    X, _ = data
    Xs = X[:80]
    host = KernelPCA(kernel="rbf", gamma=0.05, random_state=0).fit(Xs)  # every nonzero one
    model = KernelPCA(kernel="rbf", gamma=0.05, random_state=0).fit(namespace.to_ns(Xs))
    assert tuple(model.eigenvalues_.shape) == host.eigenvalues_.shape
    np.testing.assert_allclose(
        namespace.from_ns(model.eigenvalues_),
        host.eigenvalues_,
        rtol=1e-10,
        atol=1e-10 * host.eigenvalues_[0],
    )


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_device_parameter_keeps_fitted_arrays_with_the_data(device, data):
    """numpy rows fitted on a PyTorch device: numpy fitted arrays and projections, numpy's
    model (1e-10 on the CPU; 1e-8 on CUDA, whose GEMMs sum in another order)."""
    pytest.importorskip("torch")
    X, Xn = data
    params = dict(kernel="rbf", gamma=0.05, random_state=0)
    model = KernelPCA(4, device=device, **params).fit(X)
    assert isinstance(model.eigenvectors_, np.ndarray)  # fitted arrays follow the data
    Z = model.transform(Xn)
    assert isinstance(Z, np.ndarray)
    tol = 1e-10 if device == "cpu" else 1e-8
    assert rel_err(KernelPCA(4, **params).fit(X).transform(Xn), Z) < tol


def test_float32_on_every_namespace(namespace, data):
    X, Xn = (a.astype(np.float32) for a in data)
    host = KernelPCA(4, kernel="rbf", gamma=0.05, random_state=0).fit(X)
    model = KernelPCA(4, kernel="rbf", gamma=0.05, random_state=0).fit(namespace.to_ns(X))
    assert namespace.from_ns(model.eigenvectors_).dtype == np.float32
    Z = model.transform(namespace.to_ns(Xn))
    assert namespace.from_ns(Z).dtype == np.float32
    assert rel_err(host.transform(Xn), namespace.from_ns(Z)) < 2e-4


@pytest.mark.parametrize("estimator", ["KernelPCA", "ExactKPCA"])
def test_numpy_model_transforms_rows_of_every_namespace(namespace, estimator, data):
    from fastkpca import ExactKPCA

    cls = KernelPCA if estimator == "KernelPCA" else ExactKPCA
    X, Xn = data
    model = cls(4, kernel="rbf", gamma=0.05, random_state=0).fit(X)
    Z = model.transform(namespace.to_ns(Xn))
    assert namespace.is_native(Z) and namespace.from_ns(Z).dtype == np.float64
    assert rel_err(model.transform(Xn), namespace.from_ns(Z)) < 1e-12
    Z32 = model.transform(namespace.to_ns(Xn.astype(np.float32)))
    assert namespace.from_ns(Z32).dtype == np.float32


def test_precomputed_and_pre_images_on_every_namespace(namespace, data):
    X, Xn = data
    K, Kn = rbf_kernel(X, X, gamma=0.05), rbf_kernel(Xn, X, gamma=0.05)
    host = KernelPCA(5, kernel="precomputed", random_state=0).fit(K)
    model = KernelPCA(5, kernel="precomputed", random_state=0).fit(namespace.to_ns(K))
    Z = model.transform(namespace.to_ns(Kn))
    assert namespace.is_native(Z)
    assert rel_err(host.transform(Kn), namespace.from_ns(Z)) < 1e-10
    kw = dict(n_components=5, fit_inverse_transform=True, alpha=0.1, eigen_solver="dense")
    host = KernelPCA(**kw, **KERNELS["rbf"]).fit(X)
    model = KernelPCA(**kw, **KERNELS["rbf"]).fit(namespace.to_ns(X))
    assert namespace.is_native(model.dual_coef_)
    back = model.inverse_transform(model.transform(namespace.to_ns(Xn)))
    assert namespace.is_native(back)
    expected = host.inverse_transform(host.transform(Xn))
    assert rel_err(expected, namespace.from_ns(back)) < 1e-8


@pytest.mark.gpu
def test_cuda_matrix_free_sized_from_free_memory(data):
    """ExactKPCA's matrix-free passes on CUDA rows (strips sized from the free memory)
    converge and equal numpy's model."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from fastkpca import ExactKPCA

    torch = pytest.importorskip("torch")
    X, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # converges
        model = ExactKPCA(4, gamma=0.05, eigen_solver="matrix_free", random_state=0)
        model.fit(torch.from_numpy(X).cuda())
    assert model.eigenvalues_.device.type == "cuda"
    host = ExactKPCA(4, gamma=0.05, eigen_solver="matrix_free", random_state=0).fit(X)
    np.testing.assert_allclose(model.eigenvalues_.cpu().numpy(), host.eigenvalues_, rtol=1e-8)
