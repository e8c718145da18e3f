"""AutoKPCA's growth: landmarks grown by a factor read from the estimated error, a tol finer
than the probe resolves ends the growth (not the cap), and the cross-fitted estimate against
the exact error on all rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastkpca import AutoKPCA
from fastkpca.decomposition import auto

K = 3


@pytest.fixture
def small(monkeypatch):
    """A 400-row probe and exact KPCA only up to 400 rows: small, fast cases above both."""
    monkeypatch.setattr(auto, "EXACT_MAX_ROWS", 400)
    monkeypatch.setattr(auto, "PROBE_ROWS", 400)
    monkeypatch.setattr(auto, "MIN_PROBE_ROWS", 400)


def _blob(n, d=6, seed=0):
    """A smooth anisotropic blob: an rbf spectrum with a long tail (growth takes several fits)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.linspace(2.0, 0.5, d)


def _nystrom_fits(model):
    return [e for e in model.report_ if e["method"] == "nystrom" and e["error"] is not None]


def test_growth_factor_follows_the_estimate(small):
    tol = 0.02
    model = AutoKPCA(8, tol=tol, random_state=1).fit(_blob(1500, d=16))
    fits = _nystrom_fits(model)
    assert len(fits) >= 2, "the case must grow at least once"
    for before, after in zip(fits, fits[1:], strict=False):
        # (err - 1) / tol within [1.5, 2], rounded up (sizes are integers, so exact)
        factor = min(2.0, max(auto.MIN_GROWTH_FACTOR, (before["error"] - 1.0) / tol))
        expected = min(auto.MAX_LANDMARKS, math.ceil(before["size"] * factor))
        assert after["size"] == expected
    # an excess near tol grows by less than a doubling
    assert any(b["size"] < 2 * a["size"] for a, b in zip(fits, fits[1:], strict=False))


def test_tol_finer_than_the_probe_resolves_stops_with_a_warning(small):
    # tol = 1e-6 is out of any probe's reach: the growth must stop where the estimate stops
    # falling within its noise of 1 (RESOLUTION_STDERRS), not at the cap of 8192 landmarks.
    with pytest.warns(RuntimeWarning, match="finer than the probe resolves"):
        model = AutoKPCA(K, tol=1e-6, random_state=0).fit(_blob(1500))
    fits = _nystrom_fits(model)
    assert fits[-1]["size"] < 1500
    chosen = [e for e in model.report_ if e["status"] == "chosen"]
    assert len(chosen) == 1
    last, before = fits[-1], fits[-2]
    assert chosen[0] is not None and chosen[0]["size"] == last["size"]
    assert chosen[0]["size"] == model.estimator_.n_landmarks_
    # the stop's two conditions, as the report states them
    assert before["error"] - last["error"] < max(before["error_stderr"], last["error_stderr"])
    assert last["error"] <= 1 + auto.RESOLUTION_STDERRS * last["error_stderr"]
    assert last["error"] > 1 + 1e-6


@pytest.mark.parametrize("seed", [0, 1])
def test_cross_fitted_estimate_tracks_the_error_on_all_rows(seed):
    # Nystrom fits on 4000 rows, from a poor fit to exact KPCA's limit: the probe's estimate
    # (1000 rows, cross-fitted on its halves) against the exact relative rank-k error on all
    # rows (estimate_error's exact branch: the 4000 x 4000 Gram).  Measured on these cases
    # (seeds 0-2): at most 0.014 from the truth where it is at most 1.1 (0.02 allowed), at
    # most 0.019 above it anywhere, never below 1 + half the true excess; at the limit
    # (1000 landmarks, exact KPCA's error on all rows) within 0.006 of 1 (0.01 allowed), and
    # below the in-sample ratio it replaces (the halves against their own optimum: 1.010-1.015
    # there) by at least 0.008.
    from fastkpca import NystromKPCA
    from fastkpca.kernels import RBF
    from fastkpca.metrics import estimate_error

    X = _blob(4000, seed=seed)
    kernel = RBF(1.0 / X.shape[1])
    rng = np.random.default_rng(seed)
    probe = auto.SpectrumProbe(X[rng.choice(4000, 1000, replace=False)], kernel, K, rng)
    for c in (16, 32, 64, 1000):
        model = NystromKPCA(K, kernel=kernel, n_landmarks=c, random_state=seed).fit(X)
        truth = estimate_error(model, X, n_probe=4000)["relative_rank_k_error"]["estimate"]
        estimate, stderr = probe.error(model)
        assert stderr > 0
        if truth <= 1.1:
            assert abs(estimate - truth) <= 0.02, (c, estimate, truth)
        assert 1 + 0.5 * (truth - 1) - 0.01 <= estimate <= truth + 0.02, (c, estimate, truth)
        if c == 1000:
            assert truth <= 1.001
            assert abs(estimate - 1.0) <= 0.01
            # the in-sample ratio: each half's own optimum as the reference, uncorrected
            T = np.asarray(model.transform(probe.X))
            num = sum(h.residual_rows(T[h.rows]).sum() for h in probe.halves)
            in_sample = math.sqrt(num / sum(h.own.sum() for h in probe.halves))
            assert in_sample - estimate >= 0.005


@pytest.mark.parametrize("case", ["clusters", "noisy"])
def test_standard_error_matches_the_spread_over_probes(case):
    # One fit, twelve probes of 500 rows: the standard error the probe states against the
    # standard deviation of its estimates.  Measured (seeds 0-11): stated / actual 1.20
    # (clusters) and 1.03 (noisy); the bootstrap over rows alone, which holds the halves'
    # fitted references fixed, gave 0.54 and 0.51.  With 12 probes the sample standard
    # deviation is itself uncertain by about 20 %: [0.75, 2] allowed.
    from test_auto import _clusters

    from fastkpca import NystromKPCA
    from fastkpca.datasets import make_random_noisy
    from fastkpca.kernels import RBF

    if case == "clusters":
        X, gamma, k = _clusters(8000, d=8), 0.05, 3
    else:
        X, gamma, k = make_random_noisy(8000, 20, signal_dim=10, random_state=0), 1 / 40, 10
    model = NystromKPCA(k, n_landmarks=32, gamma=gamma, random_state=0).fit(X)
    estimates, stderrs = [], []
    for seed in range(12):
        rng = np.random.default_rng(seed)
        rows = X[np.sort(rng.choice(len(X), 500, replace=False))]
        probe = auto.SpectrumProbe(rows, RBF(gamma), k, np.random.default_rng(seed + 100))
        estimate, stderr = probe.error(model)
        estimates.append(estimate)
        stderrs.append(stderr)
    ratio = math.sqrt(np.mean(np.square(stderrs))) / np.std(estimates, ddof=1)
    assert 0.75 <= ratio <= 2.0, ratio


def test_plateau_above_tol_keeps_the_most_accurate_fit(small, monkeypatch):
    # With the resolution stop off (RESOLUTION_STDERRS = 0) and tol out of reach, growth must
    # end where the estimate stops falling for PLATEAU_STEPS sizes, not at the cap.
    monkeypatch.setattr(auto, "RESOLUTION_STDERRS", 0.0)
    with pytest.warns(RuntimeWarning, match="stopped falling"):
        model = AutoKPCA(K, tol=1e-6, random_state=0).fit(_blob(1500))
    fits = _nystrom_fits(model)
    assert fits[-1]["size"] < 1500
    assert len(fits) >= auto.PLATEAU_STEPS + 1
    # the last PLATEAU_STEPS steps fell by less than their standard error
    last = fits[-(auto.PLATEAU_STEPS + 1) :]
    for before, after in zip(last, last[1:], strict=False):
        assert before["error"] - after["error"] < max(before["error_stderr"], after["error_stderr"])
    chosen = [e for e in model.report_ if e["status"] == "chosen"]
    assert len(chosen) == 1
    assert chosen[0]["error"] == min(e["error"] for e in fits)
    assert chosen[0]["size"] == model.estimator_.n_landmarks_


def test_a_noisy_estimate_above_tol_is_said(small):
    # Far-apart repeated rows (a few tight clusters and outliers copied many times) make the
    # probe's estimate noisy: an estimate below 1 + tol whose standard error exceeds tol is not
    # taken as met, growth goes on until the estimate levels off, and a warning says the probe
    # cannot resolve tol (the report keeps the standard error).
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((6, 5)) * 6.0
    rows = np.repeat(centers, [700, 400, 200, 60, 20, 5], axis=0)
    rows = rows + 0.01 * rng.standard_normal(rows.shape)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = AutoKPCA(K, tol=0.01, random_state=0).fit(rows)
    fits = [e for e in model.report_ if e["error"] is not None]
    chosen = [e for e in fits if e["status"] == "chosen"][0]
    said = [str(w.message) for w in caught if "resolve" in str(w.message)]
    # measured: 0.923 +- 0.29 at 50 and 75 landmarks (an estimate below 1, as on kddcup); the
    # fit kept has a true error of 1.016
    assert fits[0]["error"] <= 1.01 and fits[0]["error_stderr"] > 0.01
    assert "standard error above tol" in fits[0]["why"]
    assert chosen is fits[-1] and len(fits) >= 2
    assert chosen["error_stderr"] > 0.01
    assert len(said) == 1 and f"{chosen['error_stderr']:.4f}" in said[0]


def test_a_noisy_estimate_draws_a_larger_probe_once(small, monkeypatch):
    # The same far-apart repeated rows, four times as many: the first estimate's standard error
    # exceeds tol, so the probe is drawn again with twice its rows (once), and the estimates
    # from there on are the larger probe's, with a smaller standard error.
    monkeypatch.setattr(auto, "MAX_PROBE_ROWS", 800)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((6, 5)) * 6.0
    rows = np.repeat(centers, [2800, 1600, 800, 240, 80, 20], axis=0)
    rows = rows + 0.01 * rng.standard_normal(rows.shape)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model = AutoKPCA(K, tol=0.01, random_state=0).fit(rows)
    probes = [e for e in model.report_ if e["method"] == "probe"]
    assert [e["size"] for e in probes] == [400, 800]
    first_stderr = float(probes[1]["reason"].split("(")[1].split(")")[0])
    assert first_stderr > 0.01
    fits = [e for e in model.report_ if e["error"] is not None]
    assert all(e["error_stderr"] < first_stderr for e in fits)
    assert model.report_.index(probes[1]) < model.report_.index(fits[0])


@pytest.mark.parametrize("allowance, fits", [(0.5, 2), (1.0, 1)])
def test_the_one_standard_error_allowance_is_capped(small, monkeypatch, allowance, fits):
    # An estimate of 1.0178 +- 0.0079 at tol = 0.01 (kddcup's, for a true 1.0248) is within
    # one standard error of 1 + tol but above 1 + tol / 2 + tol: with the cap (0.5 tol) growth
    # goes on; without it (1.0) the fit is kept.
    estimates = iter([(1.0178, 0.0079), (1.004, 0.004)])
    monkeypatch.setattr(auto.SpectrumProbe, "error", lambda self, model: next(estimates))
    monkeypatch.setattr(auto, "STDERR_ALLOWANCE", allowance)
    model = AutoKPCA(K, tol=0.01, random_state=0).fit(_blob(1500))
    assert len(_nystrom_fits(model)) == fits
