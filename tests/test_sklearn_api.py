"""scikit-learn transformer API on every estimator: feature names / set_output, inverse_transform,
explained_variance_ratio_, float n_components, sparse and precomputed input, aliases, lazy
submodules."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fastkpca import (
    ExactKPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
    compress_expansion,
)
from fastkpca.decomposition._base import mean_embedding_probe
from fastkpca.kernels import RBF

ALL = [ExactKPCA, NystromKPCA, RandomFeatureKPCA, StreamingKPCA, ReducedSetKPCA, SparsifiedKPCA]
GAMMA = 0.25


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).standard_normal((200, 4))


@pytest.fixture(scope="module")
def X_test():
    return np.random.default_rng(1).standard_normal((50, 4))


def centered_trace(X, gamma):
    """tr(H K H) from the full n x n Gram (the reference)."""
    K = RBF(gamma)(X)
    n = K.shape[0]
    return float(np.trace(K) - K.sum() / n)


# --- feature names / set_output ----------------------------------------------------------------
@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_set_output_pandas(cls, X):
    pd = pytest.importorskip("pandas")
    model = cls(3, gamma=GAMMA, random_state=0).set_output(transform="pandas")
    out = model.fit_transform(X)
    names = [f"{cls.__name__.lower()}{i}" for i in range(3)]
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == names
    new = model.transform(X[:5])
    assert isinstance(new, pd.DataFrame) and list(new.columns) == names
    # The frame holds the same numbers as the plain transform (one code path, so 0 difference
    # up to the conversion, which copies).
    plain = cls(3, gamma=GAMMA, random_state=0).fit(X).transform(X[:5])
    np.testing.assert_allclose(new.to_numpy(), plain, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_feature_names_in_pipeline(cls, X):
    pipe = make_pipeline(StandardScaler(), cls(2, gamma=GAMMA, random_state=0)).fit(X)
    lower = cls.__name__.lower()
    assert list(pipe.get_feature_names_out()) == [f"{lower}0", f"{lower}1"]


# --- inverse_transform -------------------------------------------------------------------------
EXACT_LIMIT = [
    (ExactKPCA, {}),
    (NystromKPCA, {"n_landmarks": 200}),  # all points as landmarks: exact KPCA
    (SparsifiedKPCA, {"sample_prob": 1.0}),  # every entry kept: exact KPCA
    (ReducedSetKPCA, {"density": "uniform", "n_centers": 200}),  # every point a centre
]


@pytest.mark.parametrize("cls, params", EXACT_LIMIT, ids=lambda p: getattr(p, "__name__", ""))
@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_inverse_transform_matches_sklearn_in_exact_limit(cls, params, alpha, X, X_test):
    sk = KernelPCA(4, kernel="rbf", gamma=GAMMA, fit_inverse_transform=True, alpha=alpha).fit(X)
    model = cls(4, gamma=GAMMA, fit_inverse_transform=True, alpha=alpha, random_state=0, **params)
    model.fit(X)
    ours = model.inverse_transform(model.transform(X_test))
    ref = sk.inverse_transform(sk.transform(X_test))
    # Same regression on the same (sign-flipped) projections; the rbf kernel on projections is
    # sign-invariant.  Round-off of two eigensolvers and a 200 x 200 ridge solve with
    # condition number <= (n + alpha) / alpha ~ 2e3: measured 5e-14, allowed 1e-9.
    np.testing.assert_allclose(ours, ref, atol=1e-9 * np.abs(ref).max())


def _reconstruction_error(model, X_test):
    R = model.inverse_transform(model.transform(X_test))
    return np.linalg.norm(R - X_test) / np.linalg.norm(X_test)


def test_inverse_error_falls_with_model_size(X, X_test):
    sk = KernelPCA(3, kernel="rbf", gamma=GAMMA, fit_inverse_transform=True).fit(X)
    floor = _reconstruction_error(sk, X_test)
    sizes = [10, 40, 200]
    nys = [
        _reconstruction_error(
            NystromKPCA(
                3, gamma=GAMMA, n_landmarks=c, fit_inverse_transform=True, random_state=0
            ).fit(X),
            X_test,
        )
        for c in sizes
    ]
    rf = [
        _reconstruction_error(
            RandomFeatureKPCA(
                3,
                gamma=GAMMA,
                n_random_features=2000,
                n_inverse_samples=s,
                fit_inverse_transform=True,
                random_state=0,
            ).fit(X),
            X_test,
        )
        for s in sizes
    ]
    rs = [
        _reconstruction_error(
            ReducedSetKPCA(3, gamma=GAMMA, ell=ell, fit_inverse_transform=True).fit(X), X_test
        )
        for ell in (1.0, 8.0)
    ]
    # Measured: nystrom 0.87 / 0.71 / 0.64, random features 0.87 / 0.72 / 0.64, reduced set
    # 0.81 / 0.64 (40 / 199 centres); KernelPCA on all rows 0.64.  Each step must gain at
    # least 0.05, and the largest models come within 2% of KernelPCA's own error.
    assert np.all(np.diff(nys) < -0.05), nys
    assert np.all(np.diff(rf) < -0.05), rf
    assert rs[1] < rs[0] - 0.05, rs
    assert nys[-1] == pytest.approx(floor, rel=0.02)
    assert rf[-1] == pytest.approx(floor, rel=0.02)
    assert rs[-1] == pytest.approx(floor, rel=0.02)


def test_streaming_inverse_transform_equals_random_features(X, X_test):
    # With sketch_size >= n_random_features StreamingKPCA is RandomFeatureKPCA; the anchors are
    # with the same rule and seed, so the pre-images agree up to round-off (1e-13 with float64
    # features; the float32 features of fastkpca.features and RandomFeatureKPCA's float32 block
    # products give ~1e-7 of the pre-images' scale ~0.2, measured 7e-8).
    kw = dict(gamma=GAMMA, n_random_features=100, fit_inverse_transform=True, random_state=0)
    rf = RandomFeatureKPCA(3, n_inverse_samples=50, **kw).fit(X)
    st = StreamingKPCA(3, sketch_size=100, n_inverse_samples=50, **kw).fit(X)
    T = rf.transform(X_test)
    np.testing.assert_allclose(st.inverse_transform(T), rf.inverse_transform(T), rtol=0, atol=1e-6)
    assert st.X_transformed_fit_.shape == (50, 3)


def test_inverse_transform_errors(X):
    model = NystromKPCA(3, gamma=GAMMA, random_state=0).fit(X)
    with pytest.raises(NotFittedError, match="fit_inverse_transform=True"):
        model.inverse_transform(np.zeros((2, 3)))
    model.set_params(fit_inverse_transform=True).fit(X)
    with pytest.raises(ValueError, match="3 components"):
        model.inverse_transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="alpha"):
        NystromKPCA(3, fit_inverse_transform=True, alpha=-1.0).fit(X)
    with pytest.raises(ValueError, match="n_inverse_samples"):
        RandomFeatureKPCA(3, fit_inverse_transform=True, n_inverse_samples=0).fit(X)
    blocks = (X[i : i + 50] for i in range(0, X.shape[0], 50))
    with pytest.raises(ValueError, match="one-shot"):
        StreamingKPCA(3, fit_inverse_transform=True).fit(blocks)
    # A refit without the map drops the old one.
    model.set_params(fit_inverse_transform=False).fit(X)
    assert not hasattr(model, "dual_coef_inverse_")


# --- explained_variance_ratio_ -----------------------------------------------------------------
EXACT_TRACE = [
    (ExactKPCA, {}),
    (NystromKPCA, {"n_landmarks": 200}),
    (ReducedSetKPCA, {}),  # n <= 1000: the mean-embedding probe uses every row
    (SparsifiedKPCA, {"sample_prob": 1.0}),
]


@pytest.mark.parametrize("cls, params", EXACT_TRACE, ids=lambda p: getattr(p, "__name__", ""))
def test_total_variance_exact(cls, params, X):
    model = cls(5, gamma=GAMMA, random_state=0, **params).fit(X)
    # Exact in these limits: float64 sums of 4e4 entries in another order, rtol 1e-10.
    assert model.total_variance_ == pytest.approx(centered_trace(X, GAMMA), rel=1e-10)
    assert model.total_variance_error_ == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(
        model.explained_variance_ratio_, model.eigenvalues_ / model.total_variance_, rtol=1e-12
    )


def test_explained_variance_ratio_matches_sklearn(X):
    sk = KernelPCA(kernel="rbf", gamma=GAMMA).fit(X)  # all nonzero components
    ref = sk.eigenvalues_ / sk.eigenvalues_.sum()
    ours = ExactKPCA(8, gamma=GAMMA).fit(X).explained_variance_ratio_
    # The sum of all eigenvalues is the trace: two computations of it, rtol 1e-9.
    np.testing.assert_allclose(ours, ref[:8], rtol=1e-9)


APPROX_TRACE = [
    (NystromKPCA, {"n_landmarks": 50}),
    (RandomFeatureKPCA, {"n_random_features": 400, "features": "rff"}),
    (SparsifiedKPCA, {"sample_prob": 0.3}),
]


@pytest.mark.parametrize("cls, params", APPROX_TRACE, ids=lambda p: getattr(p, "__name__", ""))
def test_total_variance_estimate_within_stated_error(cls, params, X):
    exact = centered_trace(X, GAMMA)
    z = []
    for seed in range(20):
        model = cls(3, gamma=GAMMA, random_state=seed, **params).fit(X)
        assert model.total_variance_error_ > 0
        z.append((model.total_variance_ - exact) / model.total_variance_error_)
    z = np.array(z)
    # The stated error is one standard error of an unbiased estimate: over 20 seeds every
    # z-score stays within 4.5 (the probability of one |N(0,1)| > 4.5 in 20 draws is 1e-4),
    # and the mean square of z is not far above 1 (an error understated by 2x would give ~4;
    # conservative errors, e.g. sparsified sampling with few large entries, give < 1).
    assert np.all(np.abs(z) < 4.5), z
    assert np.mean(z**2) < 2.5, z


def test_streaming_total_variance_equals_random_features(X):
    # Same features and the same mean: the same estimate and error (round-off of the sums).
    kw = dict(gamma=GAMMA, n_random_features=100, random_state=0)
    rf = RandomFeatureKPCA(3, **kw).fit(X)
    st = StreamingKPCA(3, sketch_size=100, **kw).fit(X)
    assert st.total_variance_ == pytest.approx(rf.total_variance_, rel=1e-10)
    assert st.total_variance_error_ == pytest.approx(rf.total_variance_error_, rel=1e-8)


def test_mean_embedding_probe(X):
    K = RBF(GAMMA)(X)
    exact = K.mean()
    est, se = mean_embedding_probe(X, RBF(GAMMA), n_probe=1000, rng=0)
    assert est == pytest.approx(exact, rel=1e-12) and se == 0.0
    est, se = mean_embedding_probe(X, RBF(GAMMA), n_probe=50, rng=0)
    assert se > 0 and abs(est - exact) < 4 * se


def test_ratio_unavailable_is_an_attribute_error(X):
    model = StreamingKPCA(2, kernel="polynomial", n_random_features=64, random_state=0).fit(X)
    assert not hasattr(model, "explained_variance_ratio_")


# --- float n_components ------------------------------------------------------------------------
@pytest.mark.parametrize("fraction", [0.5, 0.8])
def test_float_n_components_exact(fraction, X):
    sk = KernelPCA(kernel="rbf", gamma=GAMMA).fit(X)
    cum = np.cumsum(sk.eigenvalues_) / sk.eigenvalues_.sum()
    expected = int(np.searchsorted(cum, fraction) + 1)
    model = ExactKPCA(fraction, gamma=GAMMA).fit(X)
    assert model.n_components_ == expected
    assert model.transform(X[:3]).shape == (3, expected)
    assert model.eigenvectors_.shape == (X.shape[0], expected)
    ratio = np.cumsum(model.explained_variance_ratio_)
    assert ratio[-1] >= fraction and (expected == 1 or ratio[-2] < fraction)


@pytest.mark.parametrize(
    "cls, params",
    [
        (NystromKPCA, {"n_landmarks": 100}),
        (RandomFeatureKPCA, {"n_random_features": 300}),
        (ReducedSetKPCA, {}),
        (SparsifiedKPCA, {"sample_prob": 1.0}),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_float_n_components_approximate(cls, params, X, X_test):
    model = cls(0.8, gamma=GAMMA, random_state=0, **params).fit(X)
    k = model.n_components_
    ratio = np.cumsum(model.explained_variance_ratio_)
    assert ratio.size == k and ratio[-1] >= 0.8 and ratio[-2] < 0.8
    assert model.transform(X_test).shape == (X_test.shape[0], k)
    # The truncated model is the integer-k model (same seed, same solver up to the number of
    # components asked for: dense / full eigensolvers, so agreement to round-off).
    ref = cls(k, gamma=GAMMA, random_state=0, **params).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-6)


def test_float_n_components_refused_where_not_offered(X):
    with pytest.raises(ValueError, match="solver='exact'"):
        RandomFeatureKPCA(0.5, solver="countsketch").fit(X)
    with pytest.raises(ValueError, match="n_components"):
        ExactKPCA(1.5).fit(X)


# --- sparse input ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cls, params",
    [(ExactKPCA, {}), (SparsifiedKPCA, {"sample_prob": 0.5})],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_sparse_matches_dense(cls, params):
    Xs = sp.random(150, 30, density=0.2, random_state=0, format="csr")
    a = cls(4, gamma=0.1, random_state=0, **params).fit(Xs)
    b = cls(4, gamma=0.1, random_state=0, **params).fit(Xs.toarray())
    # Same algorithm, distances through a sparse instead of a dense product: measured 3e-14.
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=1e-9)
    np.testing.assert_allclose(a.transform(Xs[:20]), b.transform(Xs[:20].toarray()), atol=1e-9)
    assert a.total_variance_ == pytest.approx(b.total_variance_, rel=1e-10)


# --- precomputed -------------------------------------------------------------------------------
def test_precomputed_matches_sklearn(X, X_test):
    K = RBF(GAMMA)(X)
    K_new = RBF(GAMMA)(X_test, X)
    sk = KernelPCA(4, kernel="precomputed").fit(K)
    model = ExactKPCA(4, kernel="precomputed").fit(K)
    # Exact KPCA on the same Gram; columns agree up to sign (round-off measured 2e-15).
    np.testing.assert_allclose(model.eigenvalues_, sk.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(
        np.abs(model.transform(K_new)), np.abs(sk.transform(K_new)), atol=1e-9
    )
    np.testing.assert_allclose(
        np.abs(model.fit_transform(K)), np.abs(sk.fit_transform(K)), atol=1e-9
    )
    assert model.total_variance_ == pytest.approx(centered_trace(X, GAMMA), rel=1e-10)
    with pytest.raises(ValueError, match="precomputed"):
        compress_expansion(model, rounding=0.5)
    with pytest.raises(ValueError, match="square"):
        ExactKPCA(2, kernel="precomputed").fit(K[:, :50])
    with pytest.raises(ValueError, match="precomputed"):
        ExactKPCA(2, kernel="precomputed", fit_inverse_transform=True).fit(K)


@pytest.mark.parametrize(
    "cls",
    [NystromKPCA, RandomFeatureKPCA, StreamingKPCA, ReducedSetKPCA, SparsifiedKPCA],
    ids=lambda c: c.__name__,
)
def test_precomputed_refused(cls, X):
    with pytest.raises(ValueError, match="precomputed"):
        cls(2, kernel="precomputed").fit(RBF(GAMMA)(X))


# --- aliases -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cls", [ExactKPCA, SparsifiedKPCA, ReducedSetKPCA], ids=lambda c: c.__name__
)
def test_arpack_is_lanczos(cls, X):
    a = cls(3, gamma=GAMMA, eigen_solver="arpack", random_state=0).fit(X)
    b = cls(3, gamma=GAMMA, eigen_solver="lanczos", random_state=0).fit(X)
    # The same solver with the same seed: rtol 1e-12 leaves room for BLAS threading only.
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=1e-12)
    with pytest.raises(ValueError, match="eigen_solver"):
        cls(3, eigen_solver="lobpcg").fit(X)


def test_poly_alias(X):
    from fastkpca.kernels import make_kernel

    try:
        make_kernel("poly", gamma=1.0)
    except ValueError:
        pytest.skip("kernel='poly' is added to make_kernel on another branch")
    a = ExactKPCA(3, kernel="poly", gamma=0.5).fit(X)
    b = ExactKPCA(3, kernel="polynomial", gamma=0.5).fit(X)
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=1e-10)


# --- lazy submodules ---------------------------------------------------------------------------
def test_submodules_are_lazy_attributes():
    code = (
        "import sys, fastkpca\n"
        "for name in ('metrics', 'datasets', 'kernels', 'features', 'sketch', 'solvers', "
        "'source', 'statistics', 'io', 'persistence'):\n"
        "    mod = getattr(fastkpca, name)\n"
        "    assert mod.__name__ == 'fastkpca.' + name, mod\n"
        "assert callable(fastkpca.metrics.gram_spectral_error)\n"
        "assert 'dask' not in sys.modules, 'dask imported'\n"
        "try:\n"
        "    fastkpca.nonexistent\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_float_n_components_streaming(X, X_test):
    """StreamingKPCA keeps the fewest of its sketch's top eigenpairs that reach the fraction of
    the estimated trace; the result is the integer-k model with the same sketch."""
    model = StreamingKPCA(
        0.6, gamma=GAMMA, n_random_features=300, sketch_size=40, random_state=0
    ).fit(X)
    k = model.n_components_
    ratio = np.cumsum(model.explained_variance_ratio_)
    assert ratio.size == k and ratio[-1] >= 0.6 and (k == 1 or ratio[-2] < 0.6)
    assert model.eigenvalue_bounds_.shape == (2, k)
    assert model.transform(X_test).shape == (X_test.shape[0], k)
    ref = StreamingKPCA(k, gamma=GAMMA, n_random_features=300, sketch_size=40, random_state=0).fit(
        X
    )
    # the same sketch and eigenproblem, k of its eigenpairs: agreement to round-off
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-9)
    np.testing.assert_allclose(model.transform(X_test), ref.transform(X_test), atol=1e-9)
