"""Feature-space centering against the explicit H K H and scikit-learn's KernelCenterer."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.preprocessing import KernelCenterer

from fastkpca._centering import (
    center_gram_inplace,
    center_gram_out_of_sample,
    centered_operator,
    gram_row_stats,
)
from fastkpca.kernels import RBF


@pytest.fixture
def grams():
    rng = np.random.default_rng(0)
    X, Xn = rng.standard_normal((80, 4)), rng.standard_normal((15, 4))
    k = RBF(0.3)
    return k(X), k(Xn, X)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_row_stats_leave_the_gram(grams, dtype):
    K = grams[0].astype(dtype)
    before = K.copy()
    stats = gram_row_stats(K, block=7)
    np.testing.assert_array_equal(K, before)  # read only: nothing computed, nothing to compare
    ref = center_gram_inplace(K.copy())
    # both accumulate the same float64 row sums, block by block: round-off only
    np.testing.assert_allclose(stats.col_means, ref.col_means, rtol=1e-13)
    assert stats.total_mean == pytest.approx(ref.total_mean, rel=1e-13)


def explicit(K, w):
    n = K.shape[0]
    P = np.eye(n) - np.outer(w, np.ones(n))  # I - w 1^T
    return P.T @ K @ P


def test_inplace_matches_sklearn(grams):
    K, Kn = grams
    ref = KernelCenterer().fit(K)
    Kc = K.copy()
    stats = center_gram_inplace(Kc)
    np.testing.assert_allclose(Kc, ref.transform(K), atol=1e-13)
    np.testing.assert_allclose(
        center_gram_out_of_sample(Kn.copy(), stats), ref.transform(Kn), atol=1e-13
    )


def test_weighted_matches_explicit(grams):
    K, Kn = grams
    w = np.random.default_rng(1).uniform(0.1, 2, K.shape[0])
    wn = w / w.sum()
    Kc = K.copy()
    stats = center_gram_inplace(Kc, weights=w)
    np.testing.assert_allclose(Kc, explicit(K, wn), atol=1e-13)
    np.testing.assert_allclose(Kc @ wn, 0, atol=1e-13)
    # out of sample: k~(x, x_j) = k(x, x_j) - (k(x, .) w) - (K w)_j + w^T K w
    ref = Kn - (Kn @ wn)[:, None] - (K @ wn)[None, :] + wn @ K @ wn
    np.testing.assert_allclose(
        center_gram_out_of_sample(Kn.copy(), stats, weights=w), ref, atol=1e-13
    )


def test_uniform_weights_equal_unweighted(grams):
    K, _ = grams
    A, B = K.copy(), K.copy()
    center_gram_inplace(A)
    center_gram_inplace(B, weights=np.ones(K.shape[0]))
    np.testing.assert_allclose(A, B, atol=1e-14)


def test_float32_stays_float32_in_place(grams):
    K, _ = grams
    K32 = K.astype(np.float32)
    ptr = K32.__array_interface__["data"][0]
    center_gram_inplace(K32)
    assert K32.dtype == np.float32 and K32.__array_interface__["data"][0] == ptr
    np.testing.assert_allclose(K32, KernelCenterer().fit_transform(K), atol=1e-6)


@pytest.mark.parametrize("form", ["dense", "sparse", "float32"])
@pytest.mark.parametrize("weighted", [False, True])
def test_operator_matches_explicit(grams, form, weighted):
    K, _ = grams
    n = K.shape[0]
    w = np.random.default_rng(2).uniform(0.1, 1, n) if weighted else None
    wn = np.full(n, 1 / n) if w is None else w / w.sum()
    A = {"dense": K, "sparse": sp.csr_matrix(K), "float32": K.astype(np.float32)}[form]
    op = centered_operator(A, weights=w)
    V = np.random.default_rng(3).standard_normal((n, 3))
    tol = 1e-5 if form == "float32" else 1e-12
    np.testing.assert_allclose(op.matmat(V), explicit(K, wn) @ V, atol=tol)
    np.testing.assert_allclose(op.matvec(V[:, 0]), explicit(K, wn) @ V[:, 0], atol=tol)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 30), seed=st.integers(0, 10_000), weighted=st.booleans())
def test_centered_rows_are_orthogonal_to_weights(n, seed, weighted):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    K = RBF(0.5)(X)
    w = rng.uniform(0.01, 1, n) if weighted else np.ones(n)
    wn = w / w.sum()
    Kc = K.copy()
    center_gram_inplace(Kc, weights=w if weighted else None)
    np.testing.assert_allclose(Kc @ wn, 0, atol=1e-12)
    np.testing.assert_allclose(Kc, Kc.T, atol=1e-12)
    # centering is a congruence with a projector: PSD stays PSD
    assert np.linalg.eigvalsh(Kc).min() > -1e-10


def test_bad_weights(grams):
    K, _ = grams
    with pytest.raises(ValueError, match="weights"):
        center_gram_inplace(K.copy(), weights=np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        center_gram_inplace(K.copy(), weights=-np.ones(K.shape[0]))
