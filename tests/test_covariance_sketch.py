"""The one-pass scatter sketch and Tropp et al.'s fixed-rank PSD reconstruction, against
scipy.linalg.eigh of the explicitly formed centered scatter."""

import numpy as np
import pytest
import scipy.linalg as la
from threadpoolctl import threadpool_info

from fastkpca.statistics import covariance_sketch as cs
from fastkpca.statistics.covariance_sketch import (
    ScatterSketch,
    fixed_rank_psd,
    merged,
    scatter_sketch,
)


def _low_rank_rows(n, p, rank, rng, offset=0.0, noise=0.0):
    X = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, p)) * np.linspace(2, 0.5, p)
    return X + offset + noise * rng.standard_normal((n, p))


def _scatter(X):
    Xc = X - X.mean(axis=0)
    return Xc.T @ Xc


def _top(S, k):
    vals, vecs = la.eigh(S)
    return vals[::-1][:k], vecs[:, ::-1][:, :k]


def test_test_matrix_orthonormal_and_seeded():
    T = cs.test_matrix(50, 12, 0)
    assert T.shape == (50, 12)
    np.testing.assert_allclose(T.T @ T, np.eye(12), atol=1e-12)
    np.testing.assert_array_equal(T, cs.test_matrix(50, 12, 0))  # same seed, same draw


@pytest.mark.parametrize("q", [0, 51])
def test_test_matrix_bad_width(q):
    with pytest.raises(ValueError, match="sketch width"):
        cs.test_matrix(50, q, 0)


def test_sketch_is_scatter_times_test_matrix():
    rng = np.random.default_rng(0)
    X = _low_rank_rows(300, 40, 40, rng, offset=3.0)
    T = cs.test_matrix(40, 10, rng)
    sk = scatter_sketch(X, T)
    assert sk.n == 300
    np.testing.assert_allclose(sk.mean, X.mean(axis=0), rtol=1e-12)
    # float64 products: errors of a few eps times the scatter's scale.
    S = _scatter(X)
    np.testing.assert_allclose(sk.Y, S @ T, atol=1e-10 * np.abs(S).max())


def test_exact_when_rank_at_most_width():
    """rank(S) <= q: the Nystrom approximation is S itself, so the eigenpairs are exact."""
    rng = np.random.default_rng(1)
    X = _low_rank_rows(500, 60, 8, rng, offset=5.0)  # centered rank 8
    T = cs.test_matrix(60, 12, rng)
    vals, vecs = fixed_rank_psd(scatter_sketch(X, T).Y, T, 8)
    ref_vals, ref_vecs = _top(_scatter(X), 8)
    # Relative to the largest eigenvalue: the core matrix's condition number (~1e4 here)
    # amplifies float64 rounding to ~1e-11.
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-9, atol=1e-9 * ref_vals[0])
    np.testing.assert_allclose(np.abs(vecs.T @ ref_vecs), np.eye(8), atol=1e-8)
    assert np.all(np.diff(vals) <= 0)
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(8), atol=1e-12)


def test_full_rank_approximation_dominated_and_close():
    """S of full rank with a decaying spectrum: eigenvalues never exceed the exact ones (the
    Nystrom approximation is below S in the PSD order) and approach them as q grows."""
    rng = np.random.default_rng(2)
    X = _low_rank_rows(2000, 80, 10, rng, noise=0.05)
    S = _scatter(X)
    ref, _ = _top(S, 5)
    errors = []
    for q in (10, 20, 40):
        T = cs.test_matrix(80, q, np.random.default_rng(q))
        vals, _ = fixed_rank_psd(scatter_sketch(X, T).Y, T, 5)
        assert np.all(vals <= ref * (1 + 1e-10))
        errors.append(np.max((ref - vals) / ref))
    # Tail / top eigenvalue ratio is ~1e-4 here; at q = 2 r the top 5 are within 1e-3.
    assert errors[1] < 1e-3 and errors[2] < errors[0]


def test_merge_equals_whole():
    rng = np.random.default_rng(3)
    X = _low_rank_rows(700, 30, 30, rng, offset=10.0)
    T = cs.test_matrix(30, 8, rng)
    whole = scatter_sketch(X, T)
    parts = [scatter_sketch(X[a:b], T) for a, b in [(0, 1), (1, 250), (250, 260), (260, 700)]]
    # A tree of merges, in an order other than the rows': the pairwise update is exact.
    left = merged(parts[0], parts[2], T)
    right = parts[3].merge(parts[1], T)
    pooled = merged(right, left, T)
    assert pooled.n == 700
    np.testing.assert_allclose(pooled.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(pooled.Y, whole.Y, atol=1e-9 * np.abs(whole.Y).max())


def test_merge_empty_is_neutral_and_copies():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((50, 6))
    T = cs.test_matrix(6, 3, rng)
    sk = scatter_sketch(X, T)
    empty = ScatterSketch.empty(6, 3)
    for out in (sk.merge(empty, T), empty.merge(sk, T), merged(empty, sk, T)):
        assert out.n == 50
        np.testing.assert_array_equal(out.Y, sk.Y)
        assert out.Y is not sk.Y
    assert scatter_sketch(X[:0], T).n == 0


def test_shift_only_affects_rounding():
    rng = np.random.default_rng(5)
    X = _low_rank_rows(200, 20, 20, rng, offset=2.0)
    T = cs.test_matrix(20, 5, rng)
    a = scatter_sketch(X, T)
    b = scatter_sketch(X, T, shift=X[0])
    np.testing.assert_allclose(a.Y, b.Y, atol=1e-10 * np.abs(a.Y).max())
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)


def test_float32_rows_offset():
    """float32 rows far from the origin: with a shared shift the products see the spread only,
    so the eigenvalues keep float32's relative precision of the spread."""
    rng = np.random.default_rng(6)
    X64 = _low_rank_rows(4000, 50, 6, rng, offset=1e3, noise=1e-3)
    X = X64.astype(np.float32)
    T = cs.test_matrix(50, 16, rng)
    shift = X[:500].mean(axis=0, dtype=np.float64)
    sk = ScatterSketch.empty(50, 16)
    for start in range(0, 4000, 512):
        sk = sk.merge(scatter_sketch(X[start : start + 512], T, shift), T)
    vals, vecs = fixed_rank_psd(sk.Y, T, 6, eps=sk.eps)
    ref_vals, ref_vecs = _top(_scatter(X.astype(np.float64)), 6)
    # float32 products over 512-row blocks: relative errors ~ eps32 sqrt(512) ~ 3e-6 of the
    # spread; 1e-4 leaves margin for the condition of the core matrix.
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-4)
    np.testing.assert_allclose(np.abs(np.sum(vecs * ref_vecs, axis=0)), 1.0, atol=1e-4)
    # Without the shift float32 loses the spread to the offset (1e3 vs spread ~1): the
    # eigenvalues are off by far more.  (Documents why the shift exists.)
    raw = scatter_sketch(X, T, shift=np.zeros(50))
    raw_vals, _ = fixed_rank_psd(raw.Y, T, 6, eps=raw.eps)
    assert np.max(np.abs(raw_vals - ref_vals) / ref_vals) > 10 * np.max(
        np.abs(vals - ref_vals) / ref_vals
    )


def test_rank_deficient_float32_cholesky_retry():
    """A rank-3 S sketched in float32 with q = 10: the core matrix's zero eigenvalues come out
    slightly negative; the raised shift still gives the top eigenpairs."""
    rng = np.random.default_rng(7)
    X = _low_rank_rows(1000, 40, 3, rng).astype(np.float32)
    T = cs.test_matrix(40, 10, rng)
    sk = scatter_sketch(X, T)
    assert sk.eps == np.finfo(np.float32).eps
    vals, _ = fixed_rank_psd(sk.Y, T, 3, eps=sk.eps)
    ref, _ = _top(_scatter(X.astype(np.float64)), 3)
    np.testing.assert_allclose(vals, ref, rtol=1e-4)  # float32 products, as above
    # Claiming float64 precision makes the first Cholesky fail (the core matrix has
    # eigenvalues near -2e-3 here); the retry with the measured noise level still succeeds.
    vals, _ = fixed_rank_psd(sk.Y, T, 3)
    np.testing.assert_allclose(vals, ref, rtol=1e-4)


def test_zero_scatter():
    T = cs.test_matrix(5, 2, 0)
    vals, vecs = fixed_rank_psd(scatter_sketch(np.ones((10, 5)), T).Y, T, 2)
    np.testing.assert_array_equal(vals, 0.0)
    assert vecs.shape == (5, 2)


def test_errors():
    T = cs.test_matrix(6, 3, 0)
    with pytest.raises(ValueError, match="do not match"):
        scatter_sketch(np.ones((4, 5)), T)
    with pytest.raises(ValueError, match="rank"):
        fixed_rank_psd(np.ones((6, 3)), T, 4)
    with pytest.raises(ValueError, match="rank"):
        fixed_rank_psd(np.ones((6, 3)), T, 0)
    with pytest.raises(ValueError, match="must match"):
        fixed_rank_psd(np.ones((6, 2)), T, 1)
    with pytest.raises(ValueError, match="NaN"):
        fixed_rank_psd(np.full((6, 3), np.nan), T, 1)
    sk = scatter_sketch(np.ones((4, 6)), T)
    with pytest.raises(ValueError, match="cannot merge"):
        sk.merge(ScatterSketch(2, np.zeros(5), np.ones((5, 3))), T)


# --- the informed test matrix ---------------------------------------------------------------
def test_informed_test_matrix_spans_the_sample_axes():
    # Rows of rank 4 (plus an offset, removed by the centering): the data half (q - q // 2 = 5
    # columns) must contain their 4 principal axes, so the sketch of their scatter is exact
    # (Tropp et al.: rank <= width), while the Gaussian half keeps T orthonormal and seeded.
    rng = np.random.default_rng(0)
    X = _low_rank_rows(500, 40, 4, rng, offset=3.0)
    T = cs.informed_test_matrix(X, 9, 1)
    assert T.shape == (40, 9)
    np.testing.assert_allclose(T.T @ T, np.eye(9), atol=1e-12)
    np.testing.assert_allclose(T, cs.informed_test_matrix(X, 9, 1))  # seeded
    _, axes = _top(_scatter(X), 4)
    # The axes' component outside range(T): zero up to round-off of the power iterations.
    assert np.linalg.norm(axes - T @ (T.T @ axes)) < 1e-8
    S = _scatter(X)
    vals, _ = fixed_rank_psd(S @ T, T, 4)
    np.testing.assert_allclose(vals, _top(S, 4)[0], rtol=1e-8)


def test_informed_test_matrix_runs_its_small_dense_steps_on_one_blas_thread(monkeypatch):
    # A threaded BLAS call leaves OpenBLAS's threads spin-waiting (about 0.1 s) on the cores the
    # pass after it needs: the Rayleigh-Ritz eigh (and its QRs) must see one BLAS thread.
    seen, eigh = [], cs.eigh

    def spy(H):
        seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
        return eigh(H)

    monkeypatch.setattr(cs, "eigh", spy)
    cs.informed_test_matrix(np.random.default_rng(0).standard_normal((3000, 60)), 20, 0)
    assert seen == [{1}]


def test_informed_test_matrix_centers_the_rows_in_place_when_allowed():
    # overwrite_rows: the same test matrix to rounding (the Rayleigh-Ritz Gram is summed over
    # row shares either way), the rows left centered (their column means 0 to float32
    # rounding of values about 3); rows of another dtype are converted, never overwritten.
    rng = np.random.default_rng(2)
    X = _low_rank_rows(3000, 40, 4, rng, offset=3.0).astype(np.float32)
    rows = X.copy()
    T = cs.informed_test_matrix(X, 9, 1)
    T_in_place = cs.informed_test_matrix(rows, 9, 1, overwrite_rows=True)
    np.testing.assert_allclose(T_in_place, T, atol=1e-6)
    np.testing.assert_allclose(rows, X - X.mean(axis=0, dtype=np.float64), atol=1e-5)
    assert np.abs(rows.mean(axis=0, dtype=np.float64)).max() < 1e-5
    ints = np.arange(120).reshape(30, 4) % 7
    kept = ints.copy()
    cs.informed_test_matrix(ints, 2, 1, overwrite_rows=True)
    np.testing.assert_array_equal(ints, kept)


def test_informed_test_matrix_few_sample_rows_and_errors():
    # Fewer sample rows than data columns asked for: as many data columns as rows, the rest
    # Gaussian; still orthonormal.
    rng = np.random.default_rng(1)
    T = cs.informed_test_matrix(rng.standard_normal((3, 30)), 20, rng)
    np.testing.assert_allclose(T.T @ T, np.eye(20), atol=1e-12)
    with pytest.raises(ValueError, match="sketch width"):
        cs.informed_test_matrix(rng.standard_normal((10, 5)), 6, rng)


def test_informed_test_matrix_recovers_slow_spectra():
    """The reason for it: random features of RandomNoisy (n = 20000, d = 100, m = 1000, k = 10,
    q = 30; the sample is the first 8192 rows' features, as RandomFeatureKPCA uses).  Measured
    over 3 seeds: the Nystrom eigenvalues are 0.1-0.4% below the exact covariance's with the
    informed test matrix, 14-33% below with a Gaussian one.  Bounds with margin; both never
    exceed the exact ones (the approximation is dominated by the covariance)."""
    from fastkpca.datasets import make_random_noisy
    from fastkpca.decomposition import RandomFeatureKPCA
    from fastkpca.statistics.feature_moments import feature_moments, feature_shift, head_features

    X = make_random_noisy(20000, 100, random_state=0)
    model = RandomFeatureKPCA(
        10, gamma=1 / 200, n_random_features=1000, solver="exact", random_state=0
    )
    exact = model.fit(X).eigenvalues_
    fmap = model.feature_map_
    Z_first = head_features(X, fmap)
    S = feature_moments([(0, X)], fmap, feature_shift(X, fmap, Z_first)).covariance()
    ratios = {}
    for name, T in [
        ("gaussian", cs.test_matrix(1000, 30, 0)),
        ("informed", cs.informed_test_matrix(Z_first, 30, 0)),
    ]:
        vals, _ = fixed_rank_psd(S @ T, T, 10)
        ratios[name] = vals / exact
    assert np.all(ratios["informed"] <= 1 + 1e-6) and np.all(ratios["gaussian"] <= 1 + 1e-6)
    assert ratios["informed"].min() > 0.99
    assert ratios["gaussian"].max() < 0.9


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_sketch_chunk_gives_the_sketch_rows_and_the_column_sums(dtype):
    # totals += [R T, 1]^T R: rows 0..q-1 are (R T)^T R, the last the column sums of R, from
    # one product into the front of a larger buffer; float32 to its rounding over 40 rows.
    from fastkpca.statistics.covariance_sketch import add_sketch_chunk, with_sum_column

    rng = np.random.default_rng(0)
    R = rng.standard_normal((40, 25)).astype(dtype)
    T = cs.test_matrix(25, 7, 1)
    totals = np.ones((8, 25))  # added to
    buffer = np.full((64, 8), np.nan, dtype)
    add_sketch_chunk(totals, buffer, R, with_sum_column(T, dtype))
    R64 = R.astype(np.float64)
    expected = 1.0 + np.vstack([(R64 @ T).T @ R64, R64.sum(axis=0)])
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(totals, expected, rtol=0, atol=tol * np.abs(expected).max())
