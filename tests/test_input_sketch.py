"""Input-sparsity-time random Fourier features (``input_sketch``): CountSketch, then Gaussians."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import fastkpca
from fastkpca._input_sketch import (
    InputCountSketch,
    SketchedFourierFeatureMap,
    draw_sketched_fourier,
    resolve_sketch_size,
)
from fastkpca._model_schema import check_state
from fastkpca.datasets import make_bag_of_words
from fastkpca.decomposition import RandomFeatureKPCA
from fastkpca.features import FourierFeatureMap, draw_feature_map
from fastkpca.kernels import RBF

STATE_NAME = "fastkpca._input_sketch.SketchedFourierFeatureMap"


def _bag_of_words(n, d, nnz, seed=0):
    """Unit-norm sparse word-count rows with 5 topics: a low-rank structure for KPCA to find."""
    return make_bag_of_words(n, d, nnz, n_topics=5, random_state=seed)


def _sketches(v, t, n_draws, seed):
    """``S v`` for n_draws independent CountSketches S (dense (n_draws, t)), by the module's
    own InputCountSketch."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_draws, t))
    for i in range(n_draws):
        sketch = InputCountSketch(
            rng.integers(0, t, v.size), 2.0 * rng.integers(0, 2, v.size) - 1, t
        )
        out[i] = sketch.apply(v[None, :])[0]
    return out


def test_countsketch_norm_mean_and_variance():
    """E ||S v||^2 = ||v||^2 and Var ||S v||^2 = 2 (||v||^4 - ||v||_4^4) / t, over 3000 draws of
    S; tolerances four standard errors of the sample mean and variance (estimated from the
    draws' own second and fourth central moments)."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal(60) * np.linspace(0.2, 2.0, 60)  # uneven: ||v||_4 matters
    t, R = 16, 3000
    sq = np.einsum("ij,ij->i", *(2 * [_sketches(v, t, R, seed=1)]))
    norm2, norm4 = v @ v, np.sum(v**4)
    var_theory = 2 * (norm2**2 - norm4) / t
    dev = sq - sq.mean()
    var, m4 = np.mean(dev**2), np.mean(dev**4)
    assert abs(sq.mean() - norm2) <= 4 * np.sqrt(var / R)
    assert abs(var - var_theory) <= 4 * np.sqrt((m4 - var**2) / R)


def test_fake_gaussian_product_moments():
    """Given S, ``(X S^T) G`` has Gaussian columns with covariance ``X S^T S X^T`` (mean 0,
    variance ||S x||^2 per row); over draws of S that averages to ``X X^T``, the covariance of
    the true Gaussian product ``X W``.  Tolerances: four standard errors (a Gaussian's sample
    covariance has standard error ``sqrt((s_ii s_jj + s_ij^2) / D)``; the average over R
    sketches adds the sketch's own spread, estimated from the draws)."""
    rng = np.random.default_rng(2)
    X = sp.random(3, 400, density=0.1, random_state=3, format="csr")
    kernel = RBF(0.5)  # frequencies sqrt(2 gamma) G = G, a standard Gaussian
    D, t, R = 20000, 32, 60
    covs = []
    for r in range(R):
        fmap = draw_sketched_fourier(kernel, D if r == 0 else 50, 400, t, rng)
        SX = fmap.sketch.apply(X)
        if r == 0:  # one sketch, many Gaussian columns: the conditional moments
            P = SX @ fmap.frequencies
            given_s = SX @ SX.T
            se = np.sqrt((np.outer(np.diag(given_s), np.diag(given_s)) + given_s**2) / D)
            assert np.all(np.abs(P.mean(axis=1)) <= 4 * np.sqrt(np.diag(given_s) / D))
            assert np.all(np.abs(P @ P.T / D - given_s) <= 4 * se)
        covs.append(SX @ SX.T)
    covs = np.array(covs)
    exact = (X @ X.T).toarray()
    se = covs.std(axis=0, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(covs.mean(axis=0) - exact) <= 4 * se + 1e-12)


def test_induced_rbf_kernel_deviation():
    """The rbf kernel of sketched rows, ``exp(-gamma ||S v||^2)``, deviates from
    ``exp(-gamma ||v||^2)`` by a relative std of ``u sqrt(2 (1 - rho) / t)`` to first order
    (u = gamma ||v||^2, rho = ||v||_4^4 / ||v||^4), with mean bias ``u^2 (1 - rho) / t``.
    Checked over 3000 sketches at u = 0.3, t = 256: tolerance 10% of the predicted std (the
    sample std's standard error is ~1.3%; the neglected second-order terms ~u sqrt(2 / t) = 3%)
    and four standard errors plus 20% of the bias for the mean."""
    rng = np.random.default_rng(4)
    v = rng.standard_normal(300)
    t, R = 256, 3000
    gamma = 0.3 / (v @ v)
    u, rho = 0.3, np.sum(v**4) / (v @ v) ** 2
    sq = np.einsum("ij,ij->i", *(2 * [_sketches(v, t, R, seed=5)]))
    ratio = np.exp(-gamma * (sq - v @ v))  # k_S / k
    std_theory = u * np.sqrt(2 * (1 - rho) / t)
    bias_theory = u**2 * (1 - rho) / t
    assert abs(ratio.std() / std_theory - 1) <= 0.10
    assert abs(ratio.mean() - 1 - bias_theory) <= 4 * ratio.std() / np.sqrt(R) + 0.2 * bias_theory


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_csr_and_dense_rows_give_the_same_features(dtype):
    """Both reach the same ``X S^T`` (sums of the same products in another order, ~1e-16
    relative) and then the same float32 phases; tolerance: float32 rounding of phases of size
    ~10 (6e-8 x 10) amplified 10x."""
    X = _bag_of_words(300, 3000, 40, seed=1).astype(dtype)
    fmap = draw_feature_map("rff", RBF(1.0), 300, 3000, np.random.default_rng(0), input_sketch=50)
    assert isinstance(fmap, SketchedFourierFeatureMap)
    Z_sparse, Z_dense = fmap(X), fmap(X.toarray())
    assert Z_sparse.dtype == dtype and Z_dense.dtype == dtype
    np.testing.assert_allclose(Z_sparse, Z_dense, rtol=0, atol=1e-5)


def test_wide_sparse_rows_run_in_memory_of_their_nonzeros():
    """10^6 input columns, 20 non-zeros a row: the sketched map holds O(d) hashes and signs
    and a t x D G, never a d x D frequency matrix (which would be 8 d D = 800 MB here); the
    whole fit stays below 100 MB of traced allocations."""
    d, n = 10**6, 200
    rng = np.random.default_rng(0)
    cols = rng.integers(0, d, (n, 20))
    X = sp.csr_matrix((np.ones(n * 20), (np.repeat(np.arange(n), 20), cols.ravel())), (n, d))
    tracemalloc.start()
    try:
        model = RandomFeatureKPCA(
            3, features="rff", input_sketch=64, n_random_features=200, gamma=0.1, random_state=0
        ).fit(X)
        Z = model.transform(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(model.feature_map_, SketchedFourierFeatureMap)
    assert Z.shape == (n, 3) and np.isfinite(Z).all()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def _relative_rank_k_error(X, T, kernel):
    """``||HGH - T T^T||_F / ||HGH - (HGH)_k||_F`` (as fastkpca.metrics.relative_rank_k_error;
    1 = exact KPCA's optimum), from a dense eigendecomposition of the small centered Gram."""
    G = kernel(X)
    G -= G.mean(axis=0)
    G -= G.mean(axis=1, keepdims=True)
    vals = np.linalg.eigvalsh(G)
    k = T.shape[1]
    return np.linalg.norm(G - T @ T.T) / np.sqrt(np.sum(vals[:-k] ** 2))


def test_end_to_end_against_exact_kpca_and_exact_features():
    """Relative rank-k error (1 = exact KPCA's optimum) on 300 bag-of-words rows, m = 300, k = 5:
    the default t (= 150 frequencies) adds at most the features' own variance to every kernel
    entry, so the Gram error is at most ~sqrt(2) x that of exact features; measured 1.6-1.7x on
    the excess over 1 (seeds 0-3: 0.067-0.071 -> 0.109-0.115); tolerance 2x the exact-features
    excess.  A narrow sketch (t = 16, relative kernel deviation ~u sqrt(2 / 16) ~ 0.5) must be
    worse (measured 1.58-1.68)."""
    X = _bag_of_words(300, 3000, 40)
    Xd = X.toarray()
    kernel = RBF(1.0)

    def error(input_sketch):
        model = RandomFeatureKPCA(
            5,
            features="rff",
            input_sketch=input_sketch,
            n_random_features=300,
            gamma=1.0,
            random_state=0,
        ).fit(X)
        return _relative_rank_k_error(Xd, model.transform(X), kernel)

    exact_features, auto, narrow = error(None), error("auto"), error(16)
    assert exact_features < 1.1
    assert auto - 1 <= 2 * (exact_features - 1)
    assert narrow > auto


def test_save_load_round_trip(tmp_path):
    """The model file holds the hashes, signs and G (no pickle) and loads a map that computes
    the same features; tolerance: the same arrays and code, float32 features (rounding only)."""
    X = _bag_of_words(200, 2000, 30)
    model = RandomFeatureKPCA(
        4, features="rff", input_sketch="auto", n_random_features=100, gamma=1.0, random_state=0
    ).fit(X)
    path = tmp_path / "model.fkpca"
    model.save(path)
    loaded = fastkpca.load(path)
    assert isinstance(loaded.feature_map_, SketchedFourierFeatureMap)
    assert loaded.input_sketch == "auto" and loaded.feature_map_.n_buckets == 50
    np.testing.assert_allclose(loaded.transform(X), model.transform(X), rtol=1e-6, atol=1e-6)


def test_damaged_state_is_refused():
    """A state whose hashes leave [0, t) or whose signs are not +-1 does not load."""
    fmap = draw_sketched_fourier(RBF(1.0), 8, 30, 4, np.random.default_rng(0))
    state = fmap.to_state()
    check_state(STATE_NAME, state)
    bad = dict(state, hashes=state["hashes"] + 4)
    with pytest.raises(ValueError, match="hashes"):
        check_state(STATE_NAME, bad)
    with pytest.raises(ValueError, match="signs"):
        check_state(STATE_NAME, dict(state, signs=state["signs"] * 2))


@pytest.mark.parametrize(
    "params, match",
    [
        ({"input_sketch": 0}, "input_sketch must be"),
        ({"input_sketch": "wide"}, "input_sketch must be"),
        ({"input_sketch": True}, "input_sketch must be"),
        ({"input_sketch": 8, "features": "orf"}, "input_sketch=8 needs features='rff'"),
        ({"input_sketch": 8, "features": "auto"}, "input_sketch=8 needs features='rff'"),
        ({"input_sketch": 8, "features": "rff", "kernel": "laplacian"}, "isotropic kernel"),
        ({"input_sketch": 8, "kernel": "polynomial"}, "input_sketch=8 needs features='rff'"),
    ],
)
def test_parameter_errors_name_input_sketch(params, match):
    X = np.random.default_rng(0).standard_normal((20, 5))
    with pytest.raises(ValueError, match=match):
        RandomFeatureKPCA(**params).fit(X)


def test_auto_width_rule():
    """``"auto"``: t = D (the frequencies) below the input width, else the exact rff map."""
    assert resolve_sketch_size("auto", 500, 10**5) == 500
    assert resolve_sketch_size("auto", 500, 300) is None
    assert resolve_sketch_size(None, 500, 10**5) is None
    assert resolve_sketch_size(64, 500, 10) == 64
    narrow = draw_feature_map(
        "rff", RBF(1.0), 100, 20, np.random.default_rng(0), input_sketch="auto"
    )
    assert isinstance(narrow, FourierFeatureMap)


def test_torch_rows_match_numpy_rows():
    """Dense PyTorch rows are sketched on their device by a GEMM with the dense S^T and give
    the numpy path's model; tolerance: float32 features (phases ~1, eps32 6e-8) through a
    300-row fit and projection, 1e-5."""
    torch = pytest.importorskip("torch")
    X = np.random.default_rng(0).standard_normal((300, 80))
    params = dict(
        features="rff", input_sketch=20, n_random_features=100, gamma=0.02, random_state=0
    )
    host = RandomFeatureKPCA(3, **params).fit(X)
    device = RandomFeatureKPCA(3, **params).fit(torch.from_numpy(X))
    T = device.transform(torch.from_numpy(X))
    assert isinstance(T, torch.Tensor)
    np.testing.assert_allclose(T.numpy(), host.transform(X), rtol=0, atol=1e-5)


def test_random_fourier_features_transformer_takes_input_sketch(tmp_path):
    """The transformer draws the same sketched map as the estimator's fit would, saves and loads
    it; maps other than rff refuse the parameter."""
    from fastkpca.transformers import OrthogonalRandomFeatures, RandomFourierFeatures

    X = _bag_of_words(100, 2000, 20)
    transformer = RandomFourierFeatures(200, input_sketch=32, gamma=1.0, random_state=0).fit(X)
    assert isinstance(transformer.feature_map_, SketchedFourierFeatureMap)
    assert transformer.feature_map_.n_buckets == 32
    Z = transformer.transform(X)
    assert Z.shape == (100, 200)
    path = tmp_path / "rff.fkpca"
    transformer.save(path)
    # the same arrays and code: float32 rounding only
    np.testing.assert_allclose(fastkpca.load(path).transform(X), Z, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="input_sketch=32 needs features='rff'"):
        OrthogonalRandomFeatures(200, input_sketch=32).fit(X)
