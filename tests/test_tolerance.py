"""Sizes chosen by tolerance: NystromKPCA / RandomFeatureKPCA / StreamingKPCA with ``tol``."""

from __future__ import annotations

import numpy as np
import pytest

from fastkpca import NystromKPCA, RandomFeatureKPCA, StreamingKPCA
from fastkpca.decomposition import nystrom, random_features, streaming
from fastkpca.features import draw_feature_map
from fastkpca.kernels import RBF
from fastkpca.metrics import relative_rank_k_error
from fastkpca.source import as_source
from fastkpca.statistics.feature_moments import feature_moments
from fastkpca.statistics.growth import (
    DEFAULT_TOL,
    GrowingFourierMoments,
    doubling_sizes,
)

K = 5


@pytest.fixture(scope="module")
def digits():
    """800 standardized pendigits rows (the embedded sample)."""
    from importlib.resources import files

    with files("fastkpca.data").joinpath("pendigits_sample.npz").open("rb") as f:
        X = np.load(f)["X"][:800].astype(np.float64)
    return (X - X.mean(axis=0)) / X.std(axis=0)


@pytest.fixture
def small_probe(monkeypatch):
    """A 400-row probe, so the 800-row fits estimate on a true subsample (not all rows)."""
    for module in (nystrom, random_features, streaming):
        monkeypatch.setattr(module, "PROBE_ROWS", 400)


def _tol_models(tol):
    return [
        NystromKPCA(K, n_landmarks="auto", tol=tol, random_state=0),
        RandomFeatureKPCA(K, n_features="auto", tol=tol, random_state=0),
        StreamingKPCA(K, tol=tol, random_state=0),
    ]


def _chosen_size(model):
    return model.n_landmarks_ if isinstance(model, NystromKPCA) else model.n_features_


@pytest.mark.parametrize("index", [0, 1, 2], ids=["nystrom", "random_features", "streaming"])
def test_tol_fit_meets_tolerance(digits, small_probe, index):
    tol = 0.1
    model = _tol_models(tol)[index].fit(digits)
    sizes = [size for size, _ in model.size_history_]
    estimates = [err for _, err in model.size_history_]
    # Doubling sizes (the last one may be the cap), stopped at the first estimate within 1 + tol.
    assert all(a < b <= 2 * a for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    assert estimates[-1] <= 1 + tol
    assert all(e > 1 + tol for e in estimates[:-1])
    assert _chosen_size(model) == sizes[-1]
    # The truth on all 800 rows (exact Gram): within 1 + 2 tol.  The probe (400 rows) is a
    # random subsample, so its estimate may sit below the truth by its sampling noise; the
    # extra tol allows for that (measured here: the probe errs high, see bench_tolerance).
    true = relative_rank_k_error(digits, model.transform(digits), model.kernel_)
    assert 1.0 - 1e-9 <= true <= 1 + 2 * tol


def test_growing_fourier_moments_match_a_direct_fit():
    """Moments extended block by block equal those of the combined map computed in one pass
    (only the order of the sums differs, and the direct pass multiplies float32 feature blocks
    in float32 where the grown moments use float64 copies of the same features: ~1e-6 of the
    shifted second moment, measured 7e-5 relative on single small entries)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1500, 4))
    source = as_source(X)
    grown = GrowingFourierMoments("orf")
    for m in (32, 32, 64):
        grown.extend(source, draw_feature_map("orf", RBF(0.3), m, 4, rng).frequencies, X)
        got = grown.moments()
        ref = feature_moments(source.blocks(), grown.feature_map(), got.shift)
        scale = np.abs(ref.covariance()).max()
        np.testing.assert_allclose(got.covariance(), ref.covariance(), rtol=0, atol=1e-5 * scale)
        np.testing.assert_allclose(got.sum, ref.sum, rtol=0, atol=1e-6 * np.abs(ref.sum).max())
        assert got.n == ref.n == X.shape[0]
    assert grown.feature_map().n_output_features == 128


def test_random_features_grown_model_is_the_fixed_model_of_its_features(digits, small_probe):
    """The grown RF model equals exact PCA of its own (final) feature map, computed directly."""
    model = RandomFeatureKPCA(K, n_features="auto", tol=0.3, random_state=0).fit(digits)
    Z = model.feature_map_(digits)
    Zc = Z - Z.mean(axis=0)
    vals = np.linalg.eigvalsh(Zc.T @ Zc)[::-1][:K]
    np.testing.assert_allclose(model.eigenvalues_, vals, rtol=1e-9)


def test_auto_without_tol_uses_the_default_tol(digits, small_probe):
    model = NystromKPCA(K, n_landmarks="auto", random_state=0).fit(digits)
    assert model.size_history_[-1][1] <= 1 + DEFAULT_TOL


def test_tol_none_keeps_the_fixed_size(digits):
    for model in (
        NystromKPCA(K, n_landmarks=100, random_state=0),
        RandomFeatureKPCA(K, n_features=100, random_state=0),
        StreamingKPCA(K, n_features=100, random_state=0),
    ):
        model.fit(digits)
        assert not hasattr(model, "size_history_")
    assert model.n_output_features_ == 100


@pytest.mark.parametrize("tol", [0, -0.1, np.nan, np.inf, "0.1", True])
def test_bad_tol_raises(digits, tol):
    for model in _tol_models(tol):
        with pytest.raises(ValueError, match="tol"):
            model.fit(digits)


def test_contradictory_or_impossible_requests_raise(digits):
    with pytest.raises(ValueError, match="n_features='auto'"):
        RandomFeatureKPCA(K, n_features=500, tol=0.1).fit(digits)
    with pytest.raises(ValueError, match="'auto'"):
        NystromKPCA(K, n_landmarks="many").fit(digits)
    with pytest.raises(ValueError, match="given landmark"):
        NystromKPCA(K, n_landmarks="auto", landmarks=digits[:50]).fit(digits)
    blocks = (digits[i : i + 200] for i in range(0, 800, 200))
    with pytest.raises(ValueError, match="one-shot"):
        StreamingKPCA(K, tol=0.1).fit(blocks)
    with pytest.raises(ValueError, match="partial_fit"):
        StreamingKPCA(K, tol=0.1).partial_fit(digits)


def test_doubling_sizes():
    assert doubling_sizes(128, 1000) == [128, 256, 512, 1000]
    assert doubling_sizes(128, 512) == [128, 256, 512]
    assert doubling_sizes(300, 100) == [100]


def test_tol_on_a_reiterable_stream_matches_the_array(digits, small_probe):
    """A list of blocks gives the same sizes as the array (same probe rows, same draws)."""
    a = NystromKPCA(K, n_landmarks="auto", tol=0.1, random_state=0).fit(digits)
    b = NystromKPCA(K, n_landmarks="auto", tol=0.1, random_state=0).fit(
        [digits[i : i + 300] for i in range(0, 800, 300)]
    )
    assert [s for s, _ in a.size_history_] == [s for s, _ in b.size_history_]


def test_cli_tol(tmp_path, digits, small_probe, capsys):
    from fastkpca import load
    from fastkpca.cli import main

    data = tmp_path / "x.npy"
    np.save(data, digits)
    out = tmp_path / "m.npz"
    rc = main(
        ["fit", str(data), "--method", "nystrom", "-k", str(K), "--tol", "0.1", "-o", str(out)]
    )
    assert rc == 0
    model = load(out)
    assert model.tol == 0.1
    assert model.size_history_[-1][1] <= 1.1
    assert model.n_landmarks_ == model.size_history_[-1][0]


def test_probe_error_equals_estimate_error_on_the_probe(digits):
    """The cached probe evaluator gives estimate_error's exact value on the same rows
    (float64, two summation orders of the same Frobenius norms: 1e-8 relative on err - 1)."""
    from fastkpca.metrics import estimate_error
    from fastkpca.statistics.growth import ProbeError

    probe = ProbeError(digits[:500])
    for size in (50, 200):
        model = NystromKPCA(K, n_landmarks=size, random_state=0).fit(digits)
        ref = estimate_error(model, digits[:500], n_probe=500)["relative_rank_k_error"]["estimate"]
        assert abs(probe(model) - ref) <= 1e-8 * max(ref - 1.0, 1e-6) + 1e-12


def test_refit_path_for_maps_that_cannot_be_extended(digits, small_probe):
    """fastfood (not extended in place) refits at each size; the rule and record are the same."""
    tol = 0.3
    model = RandomFeatureKPCA(K, n_features="auto", features="fastfood", tol=tol, random_state=0)
    model.fit(digits)
    assert model.feature_map_.kind == "fastfood"
    assert model.n_features_ == model.size_history_[-1][0]
    assert model.size_history_[-1][1] <= 1 + tol
    true = relative_rank_k_error(digits, model.transform(digits), model.kernel_)
    assert true <= 1 + 2 * tol
