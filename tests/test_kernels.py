"""Kernels against scikit-learn's pairwise kernels, properties, precision, spectral samplers."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.gaussian_process.kernels import Matern as SkMatern
from sklearn.metrics.pairwise import (
    cosine_similarity,
    laplacian_kernel,
    linear_kernel,
    polynomial_kernel,
    rbf_kernel,
)

from fastkpca import kernels as fk
from fastkpca.kernels import make_kernel, resolve_gamma


@pytest.fixture
def XY():
    rng = np.random.default_rng(1)
    return rng.standard_normal((60, 7)), rng.standard_normal((45, 7))


REFERENCES = [
    (fk.RBF(0.3), lambda X, Y: rbf_kernel(X, Y, gamma=0.3)),
    (fk.Laplacian(0.2), lambda X, Y: laplacian_kernel(X, Y, gamma=0.2)),
    (
        fk.Polynomial(3, 0.1, 1.0),
        lambda X, Y: polynomial_kernel(X, Y, degree=3, gamma=0.1, coef0=1.0),
    ),
    (fk.Linear(), linear_kernel),
    (fk.Cosine(), cosine_similarity),
] + [
    (fk.Matern(0.25, nu), lambda X, Y, nu=nu: SkMatern(length_scale=1 / np.sqrt(0.5), nu=nu)(X, Y))
    for nu in (0.5, 1.5, 2.5, 0.8, 3.7, np.inf)
]


@pytest.mark.parametrize("kernel,reference", REFERENCES, ids=lambda v: repr(v)[:30])
def test_matches_sklearn(kernel, reference, XY):
    X, Y = XY
    # float64 round-off only: 1e-10 absolute on values in [0, ~100]
    np.testing.assert_allclose(kernel(X, Y), reference(X, Y), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(kernel(X), reference(X, X), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(kernel.diag(X), np.diag(reference(X, X)), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kernel,reference", REFERENCES, ids=lambda v: repr(v)[:30])
def test_chunking_does_not_change_result(kernel, reference, XY):
    X, Y = XY
    small = kernel(X, Y, working_memory_mb=0.001)  # one row per chunk
    np.testing.assert_allclose(small, kernel(X, Y), rtol=1e-12, atol=1e-14)
    blocks = np.vstack([b for _, _, b in kernel.blocks(X, Y, working_memory_mb=0.01)])
    np.testing.assert_allclose(blocks, kernel(X, Y), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kernel,reference", REFERENCES, ids=lambda v: repr(v)[:30])
def test_float32_in_float32_out(kernel, reference, XY):
    X, Y = XY
    K32 = kernel(X.astype(np.float32), Y.astype(np.float32))
    assert K32.dtype == np.float32
    assert kernel.diag(X.astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(
        K32,
        reference(X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_float32_distances_do_not_cancel():
    # Points far from the origin and close to each other: |x|^2 + |y|^2 - 2 x.y cancels
    # catastrophically in float32 (|x|^2 ~ 1e8 has 7 digits), so a float32 computation gives
    # garbage distances; accumulating in float64 keeps them to float32 representation error.
    rng = np.random.default_rng(0)
    base = 1000.0 * np.ones((1, 10))
    X = (base + 0.01 * rng.standard_normal((50, 10))).astype(np.float32)
    ref = rbf_kernel(X.astype(np.float64), gamma=100.0)
    K = fk.RBF(100.0)(X)
    assert K.dtype == np.float32
    # float32 naive: distance errors ~ 1e8 * 6e-8 = 6 -> exp(-100*6) ~ 0, i.e. error ~ 1
    naive = np.exp(
        -100.0 * np.maximum((X * X).sum(1)[:, None] + (X * X).sum(1)[None] - 2 * X @ X.T, 0)
    )
    assert np.max(np.abs(naive - ref)) > 0.1
    np.testing.assert_allclose(K, ref, atol=1e-5)


def test_sparse_input_matches_dense(XY):
    X, Y = XY
    X[np.abs(X) < 1] = 0
    for kernel in (
        fk.RBF(0.3),
        fk.Polynomial(2, 0.5, 1.0),
        fk.Linear(),
        fk.Cosine(),
        fk.Laplacian(0.1),
    ):
        np.testing.assert_allclose(
            kernel(sp.csr_matrix(X), Y), kernel(X, Y), rtol=1e-10, atol=1e-12
        )


@settings(max_examples=30, deadline=None)
@given(
    X=arrays(
        np.float64,
        st.tuples(st.integers(1, 25), st.integers(1, 5)),
        elements=st.floats(-5, 5, allow_nan=False, width=64),
    ),
    name=st.sampled_from(["rbf", "laplacian", "matern", "polynomial", "linear", "cosine"]),
    gamma=st.floats(0.01, 3.0),
)
def test_gram_properties(X, name, gamma):
    kernel = make_kernel(name, gamma=gamma, degree=2, nu=1.5)
    K = kernel(X)
    np.testing.assert_allclose(K, K.T, rtol=0, atol=1e-12 * max(1.0, np.abs(K).max()))
    np.testing.assert_allclose(np.diag(K), kernel.diag(X), rtol=1e-9, atol=1e-12)
    # PSD: eigenvalues of a valid kernel's Gram are >= 0 up to round-off of the entries
    eig = np.linalg.eigvalsh(K)
    assert eig.min() >= -1e-9 * max(1.0, np.abs(eig).max()) * len(X)


@pytest.mark.parametrize(
    "kernel",
    [fk.RBF(0.5), fk.Laplacian(0.4), fk.Matern(0.5, 1.5), fk.Matern(0.5, 0.5), fk.Matern(0.5, 2.5)],
    ids=repr,
)
def test_spectral_sampler_reproduces_kernel(kernel):
    # Bochner: k(x - y) = E_w cos(w . (x - y)); Monte Carlo with N draws has standard error
    # <= 1 / sqrt(2N) per entry, so 5 standard errors is a safe bound.
    rng = np.random.default_rng(3)
    N, d = 200_000, 3
    W = kernel.sample_frequencies(N, d, rng)
    assert W.shape == (N, d)
    deltas = rng.standard_normal((20, d))
    est = np.cos(deltas @ W.T).mean(axis=1)
    exact = kernel(deltas, np.zeros((1, d)))[:, 0]
    assert np.max(np.abs(est - exact)) < 5 / np.sqrt(2 * N)


@pytest.mark.parametrize("name", ["polynomial", "linear", "cosine"])
def test_sampler_refuses_non_shift_invariant(name):
    with pytest.raises(ValueError, match="not shift-invariant"):
        make_kernel(name, gamma=1.0).sample_frequencies(10, 2, np.random.default_rng(0))


def test_gamma_specs():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4)) * 3
    assert resolve_gamma(None, X) == 0.25
    assert resolve_gamma("scale", X) == pytest.approx(1 / (4 * X.var()))
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)[np.triu_indices(300, 1)]
    assert resolve_gamma("median", X) == pytest.approx(1 / np.median(d2))
    assert resolve_gamma(0.7) == 0.7
    assert make_kernel("rbf", gamma="scale", X=X).gamma == pytest.approx(1 / (4 * X.var()))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(spec="gaussian"), "unknown kernel"),
        (dict(spec="rbf", gamma=-1.0), "gamma must be > 0"),
        (dict(spec="rbf", gamma="auto", X=np.ones((3, 2))), "gamma must be"),
        (dict(spec="rbf", gamma=float("nan")), "gamma must be a finite"),
        (dict(spec="polynomial", gamma=1.0, degree=0), "degree"),
        (dict(spec="matern", gamma=1.0, nu=-1.0), "nu must be > 0"),
        (dict(spec="rbf", gamma="scale"), "needs the data"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_kernel(**kwargs)


def test_config_round_trip():
    for kernel in (fk.RBF(0.3), fk.Matern(0.2, 2.5), fk.Polynomial(2, 0.5, 0.0), fk.Cosine()):
        assert fk.kernel_from_config(kernel.to_config()) == kernel


@pytest.mark.parametrize("sparse", [False, True])
def test_cosine_of_tiny_rows_is_exact(sparse):
    # Rows whose squares are subnormal or zero (8e-162, 6e-243): the cosine normalizes them
    # without squaring them first, so the Gram and its diagonal stay those of unit rows.
    X = np.array([[8.0485723e-162, 0.0], [1.0, 0.0], [5.8e-243, 5.8e-243], [0.0, 0.0]])
    A = sp.csr_matrix(X) if sparse else X
    K = fk.Cosine()(A)
    s = np.sqrt(0.5)
    expected = np.array([[1, 1, s, 0], [1, 1, s, 0], [s, s, 1, 0], [0, 0, 0, 0]])
    np.testing.assert_allclose(K, expected, rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(fk.Cosine().diag(A), [1.0, 1.0, 1.0, 0.0])


# --- scikit-learn's clone and nested parameters --------------------------------------------------
@pytest.mark.parametrize(
    "kernel",
    [fk.RBF(0.3), fk.Laplacian(0.2), fk.Matern(0.25, 2.5), fk.Polynomial(2, 0.1, 0.5), fk.Linear()]
    + [fk.Cosine(), fk.Sigmoid(0.01, 0.5)],
)
def test_estimator_with_a_kernel_object_clones(kernel):
    # GridSearchCV and cross_val_score clone the estimator: its kernel object is copied with
    # the same parameters (clone had raised TypeError on the kernel's get_params).
    from sklearn.base import clone

    from fastkpca import NystromKPCA

    copied = clone(NystromKPCA(2, kernel=kernel, n_landmarks=10)).kernel
    assert copied == kernel and copied is not kernel


def test_nested_kernel_parameters_leave_a_fitted_model_be():
    from fastkpca import NystromKPCA

    X = np.random.default_rng(0).standard_normal((200, 4))
    model = NystromKPCA(2, kernel=fk.RBF(0.1), n_landmarks=20, random_state=0).fit(X)
    before = model.transform(X[:5])
    model.set_params(kernel__gamma=0.5)  # as GridSearchCV's {"kernel__gamma": [...]}
    assert model.kernel == fk.RBF(0.5)
    assert model.kernel_ == fk.RBF(0.1)  # the fitted model's own copy
    np.testing.assert_allclose(model.transform(X[:5]), before, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="invalid parameter"):
        model.set_params(kernel__sigma=1.0)
    with pytest.raises(ValueError, match="gamma"):
        fk.RBF(0.1).set_params(gamma=-1.0)
