"""RandomFeatureKPCA(solver="randomized"): Tropp et al.'s one-pass fixed-rank PSD approximation
of the feature covariance, against solver="exact" (same seed, hence the same features)."""

import numpy as np
import pytest
from conftest import rel_err
from sklearn.datasets import load_digits

from fastkpca.datasets import make_random_noisy
from fastkpca.decomposition import RandomFeatureKPCA
from fastkpca.kernels import RBF
from fastkpca.metrics import relative_rank_k_error, subspace_distance


@pytest.fixture(scope="module")
def digits():
    return load_digits().data[:600] / 16.0


def test_sketch_covering_all_features_is_exact(digits):
    # q = 2 k + oversamples >= m: the test matrix spans R^m, so the Nystrom approximation is
    # the covariance itself (Tropp et al., rank <= q) and the solver is exact up to the float32
    # block products (~eps32 sqrt(rows) of the shifted moments) and the stability shift
    # (sqrt(m) eps32 ||Y||): measured 2e-7.
    kw = dict(n_components=4, gamma=0.05, n_random_features=40, random_state=1)
    ex = RandomFeatureKPCA(**kw).fit(digits)
    rnd = RandomFeatureKPCA(solver="randomized", oversamples=40, **kw).fit(digits)
    np.testing.assert_allclose(rnd.eigenvalues_, ex.eigenvalues_, rtol=1e-5)
    assert rel_err(ex.transform(digits), rnd.transform(digits)) < 1e-4
    # The sketch's mean comes from float32 sums of the shifted chunk features (over
    # CHUNK_ROWS = 512 rows in the sketch's product, ~32 eps32 of their spread), the exact
    # solver's from float64 sums; the total variance n k(0) - n |mean|^2 amplifies that by
    # n |mean|^2 / tr(HKH) ~ 1.7: measured 1.5e-8 (6e-10 with 256-row chunks).
    assert rnd.total_variance_ == pytest.approx(ex.total_variance_, rel=5e-8)


def test_close_to_exact_on_data():
    """RandomNoisy, n = 4000, d = 50, signal dimension 10, m = 600, k = 5, default q = 20.

    The Nystrom eigenvalues never exceed the exact solver's (the approximation is dominated by
    the covariance).  Half the test matrix is the first block's leading axes
    (:func:`~fastkpca.statistics.covariance_sketch.informed_test_matrix`), which here (a
    spectrum with a clear top) contain the top axes: measured over 3 seeds, eigenvalues and
    held-out error equal to the exact solver's to 1e-9, axes within 2e-7.  The slow spectra
    where it matters are in tests/test_covariance_sketch.py.  Bounds with margin for round-off.
    """
    X = make_random_noisy(4600, 50, signal_dim=10, random_state=0)
    X_train, X_eval = X[:4000], X[4000:]
    gamma = 1.0 / 100
    for seed in range(2):  # (3 seeds measured; 2 keep the test short)
        kw = dict(n_components=5, gamma=gamma, n_random_features=600, random_state=seed)
        ex = RandomFeatureKPCA(solver="exact", **kw).fit(X_train)
        rnd = RandomFeatureKPCA(solver="randomized", **kw).fit(X_train)
        assert np.all(rnd.eigenvalues_ <= ex.eigenvalues_ * (1 + 1e-6))
        assert np.all(rnd.eigenvalues_ >= (1 - 1e-5) * ex.eigenvalues_)
        errs = [relative_rank_k_error(X_eval, m.transform(X_eval), RBF(gamma)) for m in (ex, rnd)]
        assert errs[1] < (1 + 1e-5) * errs[0]
        assert subspace_distance(rnd.components_.T, ex.components_.T) < 1e-5
        # The kernel's total variance does not come from the solver (up to the float32 sums of
        # the sketch's mean, see above).
        assert rnd.total_variance_ == pytest.approx(ex.total_variance_, rel=1e-8)
        np.testing.assert_allclose(
            rnd.explained_variance_ratio_, rnd.eigenvalues_ / rnd.total_variance_, rtol=1e-12
        )


def test_one_pass_blocks_and_streams_equal_the_array(digits):
    # One pass: a one-shot generator works.  The sketches of the blocks merge by the pairwise
    # update; only the summation order and the chunk-dependent float32 rounding of the features
    # differ (measured 1e-7).
    kw = dict(
        n_components=3, gamma=0.05, n_random_features=128, solver="randomized", random_state=4
    )
    a = RandomFeatureKPCA(**kw).fit(digits)
    blocks = [digits[:37], digits[37:300], digits[300:301], digits[301:]]
    for source in (blocks, (b for b in blocks)):
        b = RandomFeatureKPCA(**kw).fit(source)
        np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-5)
        assert rel_err(a.transform(digits), b.transform(digits)) < 1e-5
        assert b.n_samples_seen_ == len(digits)


def test_dask_equals_array(digits):
    da = pytest.importorskip("dask.array")
    kw = dict(
        n_components=3, gamma=0.05, n_random_features=128, solver="randomized", random_state=4
    )
    a = RandomFeatureKPCA(**kw).fit(digits)
    b = RandomFeatureKPCA(**kw).fit(da.from_array(digits, chunks=(150, -1)))
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-5)  # as above
    assert rel_err(a.transform(digits), b.transform(digits)) < 1e-5


def test_same_features_as_exact_solver(digits):
    # The test matrix is drawn after the features: both solvers share the map.
    kw = dict(n_components=2, n_random_features=64, random_state=9)
    ex = RandomFeatureKPCA(**kw).fit(digits)
    rnd = RandomFeatureKPCA(solver="randomized", **kw).fit(digits)
    np.testing.assert_array_equal(ex.feature_map_.frequencies, rnd.feature_map_.frequencies)
    # float32 sums of shifted rows over 512-row chunks (test above): measured 2.2e-9 at most,
    # on features of about 0.18 (eps32 of 0.18 is 2e-8).
    np.testing.assert_allclose(rnd.mean_, ex.mean_, rtol=1e-7, atol=5e-9)


def test_float32_input(digits):
    kw = dict(
        n_components=3, gamma=0.05, n_random_features=100, solver="randomized", random_state=0
    )
    a = RandomFeatureKPCA(**kw).fit(digits)
    b = RandomFeatureKPCA(**kw).fit(digits.astype(np.float32))
    assert b.transform(digits.astype(np.float32)).dtype == np.float32
    assert a.transform(digits).dtype == np.float64
    # Same float32 features computed from float32-rounded rows: ~1e-6 apart.
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-4)


def test_fraction_of_variance_needs_exact(digits):
    with pytest.raises(ValueError, match="solver='exact'"):
        RandomFeatureKPCA(0.9, solver="randomized").fit(digits)


def test_auto_solver_choice():
    # "auto" (the default) sketches when the exact covariance would cost >= 1e9 flops
    # (n m^2 / 2) and the sketch is at least twice cheaper (m >= 4 q, q = 2 k + oversamples);
    # a stream of unknown length counts as large; a float n_components needs every eigenvalue.
    X = make_random_noisy(6000, 20, signal_dim=5, random_state=0)
    kw = dict(n_components=3, gamma=0.05, random_state=0)
    small = RandomFeatureKPCA(n_random_features=200, **kw).fit(X[:500])  # 1e7 flops
    assert small.solver == "auto" and small.solver_ == "exact"
    big = RandomFeatureKPCA(n_random_features=1000, **kw).fit(X)  # 3e9 flops, q = 16 <= 250
    assert big.solver_ == "randomized"
    stream = RandomFeatureKPCA(n_random_features=200, **kw).fit(iter([X[:300], X[300:500]]))
    assert stream.solver_ == "randomized"  # n unknown up front; 200 >= 4 * 16
    narrow = RandomFeatureKPCA(n_random_features=40, **kw).fit(iter([X[:300], X[300:500]]))
    assert narrow.solver_ == "exact"  # 40 < 4 * 16
    fraction = RandomFeatureKPCA(n_components=0.5, gamma=0.05, n_random_features=1000).fit(X)
    assert fraction.solver_ == "exact"
    for name, model in [("exact", small), ("randomized", big)]:
        explicit = RandomFeatureKPCA(n_random_features=model.n_output_features_, solver=name, **kw)
        explicit.fit(X if model is big else X[:500])
        assert explicit.solver_ == name
        np.testing.assert_allclose(explicit.eigenvalues_, model.eigenvalues_, rtol=1e-6)


def test_fused_statistic_equals_the_sketch_of_formed_features(digits):
    # feature_scatter_sketch reduces each 512-row chunk's float32 features in the thread that
    # computed them; the same sketch from the features formed in memory (float64 products):
    # agreement to float32 rounding of the chunk products (measured 2e-7 relative).
    from fastkpca.features import feature_blocks
    from fastkpca.statistics.covariance_sketch import scatter_sketch, test_matrix
    from fastkpca.statistics.feature_moments import feature_scatter_sketch, feature_shift

    fmap = (
        RandomFeatureKPCA(n_random_features=64, gamma=0.05, random_state=3).fit(digits).feature_map_
    )
    T = test_matrix(64, 8, 0)
    blocks = [(s, digits[s : s + 250]) for s in range(0, 600, 250)]
    fused = feature_scatter_sketch(blocks, fmap, T, feature_shift(digits, fmap))
    Z = np.vstack([Zb for _, Zb in feature_blocks(blocks, fmap)]).astype(np.float64)
    reference = scatter_sketch(Z, T)
    assert fused.n == 600
    # The means differ by the float32 rounding of the shifted sums: a few eps32 times the
    # features' scale 1 / sqrt(32) (measured 2e-9).
    np.testing.assert_allclose(fused.mean, reference.mean, rtol=1e-6, atol=3e-8)
    assert rel_err(reference.Y, fused.Y) < 1e-5


def test_sketch_width_fills_the_gemm_panels():
    # q = 2 k + oversamples, raised so that q + 1 (with the column-sum column) is a multiple
    # of 8, never above m: the default k = 10 gives 31.
    for k, over, m, q in [
        (10, 10, 1000, 31),
        (4, 10, 1000, 23),
        (5, 0, 1000, 15),
        (10, 10, 20, 20),
    ]:
        got = RandomFeatureKPCA(oversamples=over)._sketch_width(k, m)
        assert got == q
        assert got == m or ((got + 1) % 8 == 0 and got >= 2 * k + over)
