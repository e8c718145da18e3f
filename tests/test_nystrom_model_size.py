"""NystromKPCA keeps what ``transform`` needs: a c x k projection, not the c x c whitening.

``transform(X) = k(X, landmarks_) @ projection_ - mean_ @ components_.T`` with ``projection_ =
N^T components_^T``; the whitening N (``normalization_``) is recomputed from the landmarks on
demand.  Model files of earlier releases, which hold ``normalization_``, still load.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import fastkpca
from fastkpca import NystromKPCA
from fastkpca._model_schema import upgrade_fitted
from fastkpca.persistence import model_info

DATA = Path(__file__).parent / "data"
EPS = np.finfo(np.float64).eps


def _X(n, d, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


def test_model_file_holds_no_landmark_square(tmp_path):
    # 5000 x 10, k = 3, default landmarks (c = 1000): a file that held the 1000 x 1000
    # whitening would be 8.1 MB, 20x the data; the largest array is the landmarks (c x d) and
    # the projection is c x k.
    X = _X(5000, 10)
    model = NystromKPCA(3, random_state=0).fit(X)
    c = model.n_landmarks_
    assert c == 1000 and model.projection_.shape == (c, 3)
    sizes = {k: v.size for k, v in vars(model).items() if isinstance(v, np.ndarray)}
    assert max(sizes.values()) < c * c / 10, sizes
    path = tmp_path / "m.npz"
    model.save(path)
    info = model_info(path)
    assert "normalization_" not in info["fitted_kinds"]
    # landmarks, projection, weights, mean, components: float64 arrays of c (d + k + 2 + k)
    # numbers, plus the metadata (a few kB)
    arrays = 8 * c * (10 + 3 + 2 + 3)
    assert info["file_bytes"] < arrays + 64_000 < X.nbytes
    np.testing.assert_array_equal(fastkpca.load(path).transform(X[:50]), model.transform(X[:50]))


@pytest.mark.parametrize(
    "params",
    [
        {"solver": "exact"},
        {"solver": "randomized", "sketch_size": 30},
        {"covariance": "landmarks", "landmarks": "kmeans"},
        {"n_components": 0.6, "solver": "exact"},  # truncated to a fraction of the variance
    ],
)
def test_transform_is_the_whitened_projection(params):
    X = _X(800, 5)
    kw = {"n_components": 4, "n_landmarks": 120, "gamma": 0.2, "random_state": 1, **params}
    model = NystromKPCA(**kw).fit(X)
    k = model.n_components_
    assert model.projection_.shape == (model.n_landmarks_, k)
    N = model.normalization_  # recomputed from the landmarks
    r = model.components_.shape[1]
    assert N.shape == (r, model.n_landmarks_)
    K = model.kernel_(X[:100], model.landmarks_)
    expected = (K @ N.T - model.mean_) @ model.components_.T
    # the same float64 products, associated differently: a length-c dot product rounds by at
    # most c eps |a| |b|; a kernel row has |k| <= sqrt(c) (rbf values <= 1), the components
    # have orthonormal rows, so each entry is within c eps sqrt(c) ||N||_2 (10x for the sums)
    bound = 10 * model.n_landmarks_ * EPS * np.linalg.norm(N, 2) * np.sqrt(model.n_landmarks_)
    np.testing.assert_allclose(model.transform(X[:100]), expected, rtol=0, atol=bound)
    # the whitening: N W N^T = I_r on the pivots
    W = model.kernel_(model.landmarks_)
    np.testing.assert_allclose(N @ W @ N.T, np.eye(r), atol=1e3 * EPS * np.linalg.norm(N, 2) ** 2)


def test_exact_kpca_path_keeps_the_dual_coefficients_once():
    X = _X(60, 3)
    model = NystromKPCA(3, gamma=0.5, random_state=0).fit(X)
    assert model.solver_ == "exact_kpca"
    assert model.projection_.shape == (60, 3)
    np.testing.assert_array_equal(model.normalization_, model.projection_.T)


def test_normalization_needs_a_fitted_model():
    model = NystromKPCA()
    assert not hasattr(model, "normalization_")
    with pytest.raises(NotFittedError):
        model.normalization_  # noqa: B018


@pytest.mark.parametrize(
    "name", ["nystrom_normalization_v0.npz", "nystrom_normalization_v0_exact_path.npz"]
)
def test_model_files_with_normalization_still_load(name):
    # Files written by the release before projection_ (fit on rng(0)'s 40 x 3 rows, gamma 0.5).
    path = DATA / name
    with np.load(path, allow_pickle=False) as f:
        stored = {key: f[key] for key in f.files}
    meta = json.loads(str(stored["__fastkpca__"][()]))
    key = meta["fitted"]["normalization_"]["key"]
    N = stored[key]
    model = fastkpca.load(path)
    assert "normalization_" not in vars(model)
    C = model.components_
    np.testing.assert_allclose(model.projection_, N.T @ C.T, rtol=0, atol=0)
    X = _X(40, 3)
    expected = (model.kernel_(X, model.landmarks_) @ N.T - model.mean_) @ C.T
    # the same products in another association (see test_transform_is_the_whitened_projection)
    bound = 10 * N.shape[1] * EPS * np.linalg.norm(N, 2) * np.sqrt(N.shape[1])
    np.testing.assert_allclose(model.transform(X), expected, rtol=0, atol=bound)


def test_upgrade_checks_the_earlier_declaration():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = NystromKPCA(2, n_landmarks=10, solver="exact", random_state=0).fit(_X(30, 3))
    old = {k: v for k, v in vars(model).items() if k.endswith("_") and k != "projection_"}
    old["normalization_"] = model.normalization_
    upgraded = upgrade_fitted(NystromKPCA, old)
    assert "normalization_" not in upgraded
    np.testing.assert_allclose(upgraded["projection_"], model.projection_, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="normalization_"):
        upgrade_fitted(NystromKPCA, {**old, "normalization_": old["normalization_"][:, :3]})
    with pytest.raises(ValueError, match="both present"):
        upgrade_fitted(NystromKPCA, {**old, "projection_": model.projection_})
    current = {k: v for k, v in vars(model).items() if k.endswith("_")}
    assert upgrade_fitted(NystromKPCA, current).keys() == current.keys()
