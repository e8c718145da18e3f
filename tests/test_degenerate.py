"""Degenerate data: every estimator gives a valid model or one ValueError naming the problem."""

import numpy as np
import pytest

import fastkpca as fk
from fastkpca.features import resolve_features
from fastkpca.kernels import RBF

ESTIMATORS = [
    "ExactKPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "StreamingKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
]

_BASE = np.random.default_rng(0).standard_normal((20, 3))

# Data whose centered Gram is 0 in float64: a single row, identical rows (constant columns or
# one row repeated), and entries ~1e-300 whose squared distances underflow to 0 (rbf Gram = 1).
ZERO_GRAM = {
    "one_row": _BASE[:1],
    "constant": np.full((20, 3), 2.5),
    "duplicate": np.tile(_BASE[:1], (20, 1)),
    "tiny": _BASE * 1e-300,
}


def _make(name, **kwargs):
    return getattr(fk, name)(random_state=0, **kwargs)


@pytest.mark.parametrize("case", list(ZERO_GRAM))
@pytest.mark.parametrize("name", ESTIMATORS)
def test_zero_centered_gram_gives_zero_model(name, case):
    X = ZERO_GRAM[case]
    est = _make(name).fit(X)
    # The centered Gram is exactly 0, so every reported eigenvalue must be exactly 0 (not
    # round-off such as 1e-14, nor sampling noise), and the embedding is 0 up to the rounding of
    # centering kernel rows of size 1 (1e-14 absolute).
    np.testing.assert_array_equal(est.eigenvalues_, np.zeros_like(est.eigenvalues_))
    assert 1 <= est.eigenvalues_.size <= X.shape[0]
    Z = est.transform(X)
    assert Z.shape == (X.shape[0], est.eigenvalues_.size)
    np.testing.assert_allclose(Z, 0.0, atol=1e-14)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_two_rows_match_exact(name):
    # Two distinct rows: one nonzero centered eigenvalue, (1 - k(x1, x2)) / 2 * 2 = 1 - k12 for
    # the 2 x 2 centered rbf Gram; the second is 0.  Exact-Gram methods reproduce it to
    # rounding; random features (1000 features) to their Monte Carlo error (~5%);
    # SparsifiedKPCA keeps the single pair with probability 0.1 and so estimates it by 1 or
    # 10 k12 - ...: only finiteness and the zero is asserted there.
    X = _BASE[:2]
    est = _make(name).fit(X)
    gamma = 1.0 / X.shape[1]
    k12 = np.exp(-gamma * np.sum((X[0] - X[1]) ** 2))
    vals = est.eigenvalues_
    assert vals.shape == (2,)
    assert vals[1] == 0.0
    Z = est.transform(X)
    assert np.all(np.isfinite(Z))
    if name in ("RandomFeatureKPCA", "StreamingKPCA"):
        np.testing.assert_allclose(vals[0], 1 - k12, rtol=0.05)
    elif name != "SparsifiedKPCA":
        np.testing.assert_allclose(vals[0], 1 - k12, rtol=1e-10)


@pytest.mark.parametrize("name", ["ExactKPCA", "NystromKPCA", "ReducedSetKPCA", "SparsifiedKPCA"])
def test_huge_values_raise(name):
    # Entries ~1e300: ||x||^2 overflows float64, so no kernel value can be computed.
    with pytest.raises(ValueError, match="too large for the kernel: squared distances overflow"):
        _make(name).fit(_BASE * 1e300)


@pytest.mark.parametrize("name", ["RandomFeatureKPCA", "StreamingKPCA"])
def test_huge_values_random_features_finite(name):
    # Fourier features only need w . x (finite): cos of it is a valid, if noise-like, feature;
    # the true rbf Gram of rows so far apart is the identity, whose centered eigenvalues are
    # (n - 1) ones and one 0: 1000 features estimate them to ~30 % (Monte Carlo error).
    X = _BASE * 1e300
    est = _make(name).fit(X)
    assert np.all(np.isfinite(est.eigenvalues_))
    np.testing.assert_allclose(est.eigenvalues_, 1.0, rtol=0.4)
    assert np.all(np.isfinite(est.transform(X)))


def test_kernel_overflow_message():
    with pytest.raises(ValueError, match="squared distances overflow float64"):
        RBF(1.0)(np.array([[1e200, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="kernel values overflow"):
        fk.kernels.Polynomial(degree=3)(np.array([[1e120], [1e120]]))


def test_sparsified_constant_data_no_sampling_noise():
    # Before: the sampled constant Gram had eigenvalues ~26 and 18 after centering.
    est = fk.SparsifiedKPCA(n_components=3, sample_prob=0.1, random_state=0)
    est.fit(np.full((200, 4), 1.5))
    np.testing.assert_array_equal(est.eigenvalues_, np.zeros(3))
    np.testing.assert_allclose(est.gram_col_means_, 1.0, rtol=0, atol=0)
    assert est.noise_norm_ == 0.0


def test_random_feature_kpca_one_row_and_k_equal_n():
    # The case that failed with ARPACK error -9 (zero m x m covariance).
    est = fk.RandomFeatureKPCA(n_components=1, random_state=0).fit(_BASE[:1])
    np.testing.assert_array_equal(est.eigenvalues_, [0.0])


@pytest.mark.parametrize(
    "d,m,expected",
    [
        (1, 64, "qmc"),
        (8, 4096, "qmc"),
        (9, 64, "orf"),
        (12, 64, "orf"),
        (64, 50, "orf"),
        (512, 64, "orf"),
        (513, 64, "rff"),
        (1000, 2000, "orf"),
        (1001, 2000, "rff"),
        (4000, 1000, "rff"),
    ],
)
def test_auto_features_rule(d, m, expected):
    # qmc up to 8 input columns; then orf while d <= max(ceil(m / 2), 512); rff for wider
    # input, where orf's d x d Haar block costs O(d^3) for fewer than d frequencies (see
    # resolve_features).
    assert resolve_features("auto", RBF(1.0), d, m) == expected
    assert resolve_features("auto", RBF(1.0)) == "orf"  # width unknown: the accurate map
    laplacian = "qmc" if d <= 8 else "rff"
    assert resolve_features("auto", fk.kernels.Laplacian(1.0), d, m) == laplacian
    assert resolve_features("auto", fk.kernels.Polynomial(), d, m) == "tensorsketch"


def test_auto_features_wide_input_draws_rff():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10, 600))
    est = fk.RandomFeatureKPCA(n_components=2, n_random_features=100, random_state=0).fit(X)
    assert est.feature_map_.kind == "rff"
