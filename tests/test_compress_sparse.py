"""compress_expansion of a model fitted on scipy.sparse rows (ExactKPCA keeps them as CSR)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fastkpca
from fastkpca.decomposition.compress import centered_expansion, kernel_expansion

EPS = np.finfo(np.float64).eps


@pytest.fixture(scope="module")
def sparse_model():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((120, 8))
    X[np.abs(X) < 0.8] = 0.0
    Xs = sp.csr_matrix(X)
    model = fastkpca.ExactKPCA(3, gamma=0.2, random_state=0).fit(Xs)
    assert sp.issparse(model.X_fit_)
    return model, X, Xs


def test_expansion_keeps_sparse_points(sparse_model):
    model, _, _ = sparse_model
    expansion = kernel_expansion(model)
    assert sp.issparse(expansion.points) and expansion.points.shape == (120, 8)
    dense = centered_expansion(
        model.X_fit_.toarray(),
        model._scaled_alphas,
        model.gram_col_means_,
        model.gram_total_mean_,
        model.kernel_,
    )
    np.testing.assert_array_equal(expansion.coef, dense.coef)


@pytest.mark.parametrize("sparse_input", [False, True])
def test_exact_expansion_of_a_sparse_fit(sparse_model, sparse_input):
    model, X, Xs = sparse_model
    compressed = fastkpca.compress_expansion(model)  # no rounding, no projection: exact
    assert compressed.points_.shape == (120, 8) and isinstance(compressed.points_, np.ndarray)
    rows = Xs if sparse_input else X
    T = model.transform(rows)
    # the same expansion with the centering folded into the coefficients: sums of 120 kernel
    # values (<= 1) times coefficients, reassociated (120 eps each, 10x margin)
    scale = np.abs(compressed.coef_).sum(axis=0).max() + np.abs(T).max()
    np.testing.assert_allclose(compressed.transform(rows), T, rtol=0, atol=1200 * EPS * scale)


def test_rounding_and_projection_of_a_sparse_fit(sparse_model):
    model, X, Xs = sparse_model
    compressed = fastkpca.compress_expansion(model, rounding=0.5, projection_dim=4, random_state=0)
    assert compressed.points_.shape[1] == 4 and compressed.n_terms_ < 120
    out = compressed.transform(Xs)
    assert out.shape == (120, 3) and np.all(np.isfinite(out))
    np.testing.assert_allclose(out, compressed.transform(X), rtol=1e-12, atol=1e-12)
    kept = fastkpca.compress_expansion(model, rounding=0.5, random_state=0)
    assert isinstance(kept.points_, np.ndarray) and kept.points_.shape[1] == 8
    assert kept.n_terms_ == compressed.n_terms_  # the same coins for the same seed


def test_saved_and_loaded(sparse_model, tmp_path):
    model, X, _ = sparse_model
    compressed = fastkpca.compress_expansion(model, rounding=0.7, random_state=1)
    compressed.save(tmp_path / "c.npz")
    loaded = fastkpca.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(loaded.transform(X), compressed.transform(X))
