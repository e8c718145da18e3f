"""float32 computation of the Fourier feature maps: the features against float64 formulas
(also for data far from the origin), and KPCA accuracy of float32 against float64 features."""

import numpy as np
import pytest

import fastkpca._feature_map as feature_map_module
from fastkpca.datasets import make_random_noisy
from fastkpca.decomposition import ExactKPCA, RandomFeatureKPCA
from fastkpca.features import draw_feature_map, feature_blocks
from fastkpca.kernels import RBF, Polynomial
from fastkpca.metrics import relative_rank_k_error

D_IN = 8


def _reference(fmap, X):
    """The map's formula in float64: [cos(P), sin(P)] / sqrt(D) with P the float64 phases."""
    if fmap.kind == "fastfood":
        P = fmap.projections(np.asarray(X, dtype=np.float64))
    else:
        P = np.asarray(X, dtype=np.float64) @ fmap.frequencies
    return np.hstack([np.cos(P), np.sin(P)]) / np.sqrt(P.shape[1])


@pytest.mark.parametrize("kind", ["rff", "orf", "fastfood"])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_float32_features_match_float64_formula(kind, offset):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((700, D_IN)) + offset
    fmap = draw_feature_map(kind, RBF(0.5), 256, D_IN, np.random.default_rng(1))
    Z = fmap(X)
    assert Z.dtype == np.float64
    # Phases w . (x - c) are O(5) after the per-chunk shift, so float32 gives them ~1e-6
    # absolute and the features (scale 1 / sqrt(128) ~ 0.09) ~1e-7; the offset phase w . c is
    # float64 (error 1e4 eps64 ~ 1e-12).  2e-6 leaves a margin whatever the offset.
    np.testing.assert_allclose(Z, _reference(fmap, X), rtol=0, atol=2e-6)


def test_offset_phases_need_the_shift():
    """Documents why the chunks are shifted: plain float32 phases of rows offset by 1e4 are
    ~1e4 radians and lose ~1e-3 of absolute precision."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, D_IN)) + 1e4
    fmap = draw_feature_map("rff", RBF(0.5), 256, D_IN, np.random.default_rng(3))
    P32 = X.astype(np.float32) @ fmap.frequencies.astype(np.float32)
    naive = np.hstack([np.cos(P32), np.sin(P32)]) / np.sqrt(P32.shape[1])
    ref = _reference(fmap, X)
    assert np.abs(naive - ref).max() > 1e-4
    assert np.abs(fmap(X) - ref).max() < 2e-6


@pytest.mark.parametrize("kind", ["rff", "fastfood"])
def test_chunking_does_not_change_the_features(kind):
    """Each chunk is shifted by its own mean; the features must not depend on it beyond
    float32 rounding (a model fitted on blocks and transformed on other blocks)."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((600, D_IN)) * 3 + 50.0
    fmap = draw_feature_map(kind, RBF(0.5), 128, D_IN, np.random.default_rng(5))
    whole = fmap(X)
    parts = np.vstack([fmap(X[a:b]) for a, b in [(0, 1), (1, 37), (37, 600)]])
    np.testing.assert_allclose(parts, whole, rtol=0, atol=2e-6)  # as in the test above


def test_float32_and_float64_input_give_the_same_features():
    rng = np.random.default_rng(6)
    X = (rng.standard_normal((200, D_IN)) + 300.0).astype(np.float32)
    fmap = draw_feature_map("orf", RBF(0.5), 64, D_IN, np.random.default_rng(7))
    Z32, Z64 = fmap(X), fmap(X.astype(np.float64))
    assert Z32.dtype == np.float32 and Z64.dtype == np.float64
    # Same rows (float32 values), same chunk centers (float32-rounded means): equal up to
    # float32 rounding of the shifted rows and of the features.
    np.testing.assert_allclose(Z32, Z64, rtol=0, atol=2e-6)


def test_feature_blocks_dtype():
    X = np.random.default_rng(8).standard_normal((50, D_IN))
    fourier = draw_feature_map("rff", RBF(0.5), 32, D_IN, np.random.default_rng(0))
    tensor = draw_feature_map("tensorsketch", Polynomial(2), 32, D_IN, np.random.default_rng(0))
    ((_, Zf),) = feature_blocks([(0, X)], fourier)
    ((_, Zt),) = feature_blocks([(0, X)], tensor)
    assert Zf.dtype == np.float32  # what the fits accumulate (in float64)
    assert Zt.dtype == np.float64  # tensorsketch keeps the input's precision


# ------------------------------------------------------------------------------------------------
# KPCA accuracy: float32 against float64 features, several seeds
# ------------------------------------------------------------------------------------------------
def _fit_errors(monkeypatch, dtype, X, X_eval, gamma, seeds, solver):
    monkeypatch.setattr(feature_map_module, "FOURIER_DTYPE", dtype)
    errors, eigenvalues = [], []
    for seed in seeds:
        model = RandomFeatureKPCA(
            5, gamma=gamma, n_random_features=200, solver=solver, random_state=seed
        ).fit(X)
        errors.append(relative_rank_k_error(X_eval, model.transform(X_eval), RBF(gamma)))
        eigenvalues.append(model.eigenvalues_)
    return np.array(errors), np.array(eigenvalues)


@pytest.mark.parametrize("solver,offset", [("exact", 0.0), ("exact", 1e4), ("randomized", 0.0)])
def test_kpca_accuracy_float32_equals_float64_features(monkeypatch, solver, offset):
    """Held-out relative rank-k error and eigenvalues of float32-feature fits equal those of
    float64-feature fits (same seeds, same frequencies) far within the seed-to-seed spread."""
    X = make_random_noisy(1000, 20, signal_dim=5, random_state=0) + offset
    X_train, X_eval = X[:800], X[800:]
    gamma = 1.0 / 20
    seeds = range(4)
    err32, vals32 = _fit_errors(monkeypatch, np.float32, X_train, X_eval, gamma, seeds, solver)
    err64, vals64 = _fit_errors(monkeypatch, np.float64, X_train, X_eval, gamma, seeds, solver)
    ref = ExactKPCA(5, gamma=gamma).fit(X_train).eigenvalues_
    spread = err64.std()
    # Measured: seed-to-seed spread of the error ~1e-2, float32 - float64 differences ~1e-6
    # (rounding of 6e-8 in each feature, averaged over 200 features and 800 rows).  Allow 1%
    # of the spread: float32 is then invisible next to the Monte-Carlo error.
    assert spread > 1e-3
    assert np.max(np.abs(err32 - err64)) < 0.01 * spread
    # Eigenvalues: their Monte-Carlo error against ExactKPCA is percents; float32 moves them
    # by ~1e-6 relative (float32 block products around the feature shift).
    mc = np.abs(vals64 - ref) / ref
    assert np.max(np.abs(vals32 - vals64) / vals64) < 0.01 * mc.mean()


def test_report_float32_vs_float64_figures(monkeypatch, capsys):
    """Not an assertion of new bounds: prints the figures quoted in the report (pytest -s)."""
    X = make_random_noisy(1000, 20, signal_dim=5, random_state=0)
    gamma = 1.0 / 20
    e32, v32 = _fit_errors(monkeypatch, np.float32, X[:800], X[800:], gamma, range(4), "exact")
    e64, v64 = _fit_errors(monkeypatch, np.float64, X[:800], X[800:], gamma, range(4), "exact")
    with capsys.disabled():
        print(
            f"\nerr64 {np.round(e64, 5)} spread {e64.std():.2e}; max |err32 - err64| "
            f"{np.abs(e32 - e64).max():.2e}; max rel eigenvalue diff "
            f"{(np.abs(v32 - v64) / v64).max():.2e}"
        )
    assert np.abs(e32 - e64).max() < 0.01 * e64.std()
