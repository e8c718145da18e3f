"""AutoKPCA's growth: landmarks grown by a factor read from the estimated error, and a floor of
the estimate above ``1 + tol`` ends the growth with the most accurate fit (not the cap)."""

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
    tol = 0.03
    model = AutoKPCA(K, tol=tol, random_state=0).fit(_blob(1500))
    fits = _nystrom_fits(model)
    assert len(fits) >= 2, "the case must grow at least once"
    for before, after in zip(fits, fits[1:], strict=False):
        # (err - 1) / tol within [1.5, 2], rounded up (sizes are integers, so exact)
        factor = min(2.0, max(auto.MIN_GROWTH_FACTOR, (before["error"] - 1.0) / tol))
        expected = min(auto.MAX_LANDMARKS, math.ceil(before["size"] * factor))
        assert after["size"] == expected
    # an excess near tol grows by less than a doubling
    assert any(b["size"] < 2 * a["size"] for a, b in zip(fits, fits[1:], strict=False))


def test_floor_above_tol_keeps_the_best_fit_with_a_warning(small, monkeypatch):
    # No floor counts as the probe's own (PLATEAU_MAX_EXCESS = 0) and tol is out of reach: the
    # growth must stop where the estimate stops falling, not at the cap of 8192 landmarks.
    monkeypatch.setattr(auto, "PLATEAU_MAX_EXCESS", 0.0)
    with pytest.warns(RuntimeWarning, match="stopped falling"):
        model = AutoKPCA(K, tol=1e-6, random_state=0).fit(_blob(1500))
    fits = _nystrom_fits(model)
    assert fits[-1]["size"] < 1500
    chosen = [e for e in model.report_ if e["status"] == "chosen"]
    assert len(chosen) == 1
    # the fit kept is the most accurate one tried, and it is the estimator returned
    assert chosen[0]["error"] == min(e["error"] for e in fits)
    assert chosen[0]["size"] == model.estimator_.n_landmarks_
    assert chosen[0]["error"] > 1 + 1e-6
