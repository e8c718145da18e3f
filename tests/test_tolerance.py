"""Sizes chosen by tolerance: NystromKPCA / RandomFeatureKPCA / StreamingKPCA with ``tol``."""

from __future__ import annotations

import numpy as np
import pytest

from fastkpca import NystromKPCA, RandomFeatureKPCA, StreamingKPCA
from fastkpca.features import draw_feature_map
from fastkpca.kernels import RBF
from fastkpca.metrics import relative_rank_k_error
from fastkpca.source import as_source
from fastkpca.statistics import growth
from fastkpca.statistics.feature_moments import feature_moments
from fastkpca.statistics.growth import (
    DEFAULT_TOL,
    GrowingFourierMoments,
    doubling_sizes,
    grow_until,
    next_in,
)
from fastkpca.statistics.probe import ErrorEstimate, ErrorProbe
from tests.conftest import least_traced_peak

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
    monkeypatch.setattr(growth, "PROBE_ROWS", 400)


def _tol_models(tol):
    return [
        NystromKPCA(K, n_landmarks="auto", tol=tol, random_state=0),
        RandomFeatureKPCA(K, n_random_features="auto", tol=tol, random_state=0),
        StreamingKPCA(K, tol=tol, random_state=0),
    ]


def _chosen_size(model):
    return model.n_landmarks_ if isinstance(model, NystromKPCA) else model.n_random_features_


@pytest.mark.parametrize("index", [0, 1, 2], ids=["nystrom", "random_features", "streaming"])
def test_tol_fit_meets_tolerance(digits, small_probe, index):
    tol = 0.1
    model = _tol_models(tol)[index].fit(digits)
    sizes = [size for size, _ in model.size_history_]
    estimates = [err for _, err in model.size_history_]
    # Doubling sizes (the last one may be the cap), stopped at the first whose bound
    # (estimate + 2 stderr) is within 1 + tol: its estimate is too.
    assert all(a < b <= 2 * a for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    assert estimates[-1] <= 1 + tol
    assert _chosen_size(model) == sizes[-1]
    # The truth on all 800 rows (exact Gram): within 1 + tol (the old rule, the probe's plain
    # ratio, promised 1 + 2 tol).
    true = relative_rank_k_error(digits, model.transform(digits), model.kernel_)
    assert 1.0 - 1e-9 <= true <= 1 + tol


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
    model = RandomFeatureKPCA(K, n_random_features="auto", tol=0.3, random_state=0).fit(digits)
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
        RandomFeatureKPCA(K, n_random_features=100, random_state=0),
        StreamingKPCA(K, n_random_features=100, random_state=0),
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
    with pytest.raises(ValueError, match="n_random_features='auto'"):
        RandomFeatureKPCA(K, n_random_features=500, tol=0.1).fit(digits)
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


def test_probe_of_all_rows_is_the_exact_error(digits):
    """A probe holding all N rows gives relative_rank_k_error itself, standard error 0, and
    estimate_error on a sample gives the same probe's estimate (one probe serves both)."""
    from fastkpca.metrics import estimate_error

    X = digits[:500]
    for size in (50, 200):
        model = NystromKPCA(K, n_landmarks=size, random_state=0).fit(X)
        probe = ErrorProbe(X, model.kernel_, np.random.default_rng(0), n_rows=500)
        got = probe.error(model)
        truth = relative_rank_k_error(X, model.transform(X), model.kernel_)
        assert got.stderr == 0.0 and got.estimate == pytest.approx(truth, rel=1e-9)
        rows = X[np.sort(np.random.default_rng(1).choice(500, 300, replace=False))]
        sample = ErrorProbe(rows, model.kernel_, np.random.default_rng(2), n_rows=500)
        out = estimate_error(model, rows, n_probe=300, random_state=2)["relative_rank_k_error"]
        assert out["method"] == "probe" and out["stderr"] > 0
        assert out["estimate"] == pytest.approx(sample.error(model).estimate, rel=1e-12)


def test_growth_stops_on_the_bound_not_the_estimate():
    """grow_until keeps growing while estimate + z stderr > 1 + tol, even with the estimate
    itself below 1 + tol."""
    estimates = {
        100: ErrorEstimate(1.08, 0.01),
        200: ErrorEstimate(1.04, 0.01),  # estimate within tol, bound 1.0565 is not
        400: ErrorEstimate(1.02, 0.01),  # bound 1.0365
    }
    out = grow_until(lambda size: size, estimates.__getitem__, 100, next_in([100, 200, 400]), 0.05)
    assert out.status == "met" and out.size == 400 and out.met
    assert [size for size, _ in out.history] == [100, 200, 400]
    # short of tol at the largest size: the most accurate fit is kept, and said so
    out = grow_until(lambda size: size, estimates.__getitem__, 100, next_in([100, 200]), 0.01)
    assert out.status == "largest" and out.size == 200 and not out.met
    assert "largest" in out.shortfall(0.01)


def test_refit_path_for_maps_that_cannot_be_extended(digits, small_probe):
    """fastfood (not extended in place) refits at each size; the rule and record are the same."""
    tol = 0.3
    model = RandomFeatureKPCA(
        K, n_random_features="auto", features="fastfood", tol=tol, random_state=0
    )
    model.fit(digits)
    assert model.feature_map_.kind == "fastfood"
    assert model.n_random_features_ == model.size_history_[-1][0]
    assert model.size_history_[-1][1] <= 1 + tol
    true = relative_rank_k_error(digits, model.transform(digits), model.kernel_)
    assert true <= 1 + tol


@pytest.mark.parametrize("name", ["ExactKPCA", "SparsifiedKPCA"])
def test_eigen_tol_and_old_model_files_with_tol(tmp_path, digits, name):
    """The eigensolvers' tolerance is ``eigen_tol`` (``tol`` is an error target only); a model
    file written when it was ``tol`` loads, its value as ``eigen_tol``."""
    import hashlib
    import json

    import fastkpca

    cls = getattr(fastkpca, name)
    assert "eigen_tol" in cls._get_param_names() and "tol" not in cls._get_param_names()
    with pytest.raises(ValueError, match="eigen_tol"):
        cls(K, eigen_tol=-1.0).fit(digits[:100])
    model = cls(K, eigen_tol=1e-6, random_state=0).fit(digits[:200])
    path = tmp_path / "m.npz"
    model.save(path)
    with np.load(path) as z:
        members = {key: z[key] for key in z.files}
    meta = json.loads(str(members["__fastkpca__"]))
    meta["params"]["tol"] = meta["params"].pop("eigen_tol")
    text = json.dumps(meta, sort_keys=True)
    members["__fastkpca__"] = np.array(text)
    members["__checksum__"] = np.array(hashlib.sha256(text.encode()).hexdigest())
    old = tmp_path / "old.npz"
    np.savez(old, **members)
    loaded = fastkpca.load(old)
    assert loaded.eigen_tol == 1e-6
    np.testing.assert_allclose(loaded.transform(digits[:5]), model.transform(digits[:5]))


@pytest.mark.parametrize(
    ("make", "memory", "kept"),
    [
        # 3 x 8 m^2 bytes of feature moments: m = 1024 fits in 80 % of 40 MB, 2048 does not
        (
            lambda: RandomFeatureKPCA(K, n_random_features="auto", tol=1e-4, random_state=0),
            40,
            1024,
        ),
        # 64 c^2 bytes of landmark arrays: c = 256 fits in 80 % of 8 MB, 512 does not
        (lambda: NystromKPCA(K, n_landmarks="auto", tol=1e-6, random_state=0), 8, 256),
    ],
)
def test_tol_growth_keeps_its_best_fit_before_a_size_memory_refuses(
    digits, small_probe, monkeypatch, make, memory, kept
):
    """A size the memory refuses ends the growth (the most accurate fit kept, a warning naming
    the refusal), where it used to fail the fit, or (random features) to go past the memory."""
    monkeypatch.setenv("FASTKPCA_MEMORY", f"{memory}M")
    with pytest.warns(RuntimeWarning, match="the next was refused .*memory available"):
        model = make().fit(digits)
    assert model.size_history_[-1][0] == kept
    assert model.transform(digits[:5]).shape == (5, K)
    monkeypatch.setenv("FASTKPCA_MEMORY", "100K")  # the first size refused: the fit fails
    with pytest.raises(ValueError, match="memory available"):
        make().fit(digits)


def test_grown_moments_and_their_covariance_take_one_new_m_by_m_array(monkeypatch):
    """GrowingFourierMoments.moments and FeatureMoments.covariance write one new m x m float64
    array each, in blocks of rows (one row at a time: nothing more), with the plain formulas'
    values: ``gram[order][:, order] * s s^T`` and ``(G + G^T) / 2 - n delta delta^T``."""
    from fastkpca.statistics import feature_moments as fm

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 4))
    grown = GrowingFourierMoments("rff")
    for m in (128, 128):
        grown.extend(as_source(X), draw_feature_map("rff", RBF(0.3), m, 4, rng).frequencies, X)
    order, s = grown._order_and_scale()
    gram = grown.gram[np.ix_(order, order)] * np.outer(s, s)
    unit = 8 * order.size**2
    for one_row in (False, True):
        if one_row:
            monkeypatch.setattr(growth, "centering_rows", lambda placement, n: 1)
            monkeypatch.setattr(fm, "centering_rows", lambda placement, n: 1)
        moments = grown.moments()
        C = moments.covariance()
        if one_row:  # no temporary beyond the new array
            assert least_traced_peak(grown.moments) < 1.2 * unit
            assert least_traced_peak(moments.covariance) < 1.2 * unit
        np.testing.assert_allclose(moments.gram, gram, rtol=1e-12, atol=0)
        delta = moments.sum / moments.n - moments.shift
        want = (gram + gram.T) / 2 - moments.n * np.outer(delta, delta)
        np.testing.assert_allclose(C, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_random_features_reach_one_percent_on_two_columns_with_qmc():
    """Two moons (2 columns): with orthogonal random features tol = 0.01 took 8192 columns (13 s
    on 5000 rows; 16,384 and still short of it on noisier moons); the default map on rows this
    narrow is quasi-Monte Carlo (``features="auto"`` draws ``qmc``), whose error falls nearly as
    1 / m: a few hundred columns reach it (benchmarks/bench_qmc_features.py)."""
    from sklearn.datasets import make_moons

    X = make_moons(1500, noise=0.05, random_state=0)[0]
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    model = RandomFeatureKPCA(K, gamma=0.5, n_random_features="auto", tol=0.01, random_state=0).fit(
        X
    )
    assert model.feature_map_.kind == "qmc"
    assert model.n_random_features_ <= 2048
    assert model.size_history_[-1][1] <= 1.01
    assert relative_rank_k_error(X, model.transform(X), model.kernel_) <= 1.01
