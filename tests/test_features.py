"""Random feature maps: unbiasedness, 1/sqrt(m) error decay, dtype, sparse input, state, errors."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from fastkpca._state import STATE_CLASSES, state_class_name
from fastkpca.execution import CHUNK_ROWS, n_workers
from fastkpca.execution.feature_ops import hadamard
from fastkpca.features import (
    FEATURES,
    draw_feature_map,
    fwht,
    init_feature_map,
    resolve_n_random_features,
)
from fastkpca.kernels import RBF, Laplacian, Linear, Matern, Polynomial
from fastkpca.transformers import (
    FastfoodFeatures,
    OrthogonalRandomFeatures,
    RandomFourierFeatures,
    TensorSketchFeatures,
)

D_IN = 10


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(0)
    return rng.standard_normal((120, D_IN)) * 0.3


# (features, kernel): every map with every kernel it accepts.
CASES = [
    ("rff", RBF(0.5)),
    ("rff", Laplacian(0.2)),
    ("rff", Matern(0.5, 1.5)),
    ("orf", RBF(0.5)),
    ("orf", Matern(0.5, 2.5)),
    ("qmc", RBF(0.5)),
    ("qmc", Laplacian(0.2)),
    ("qmc", Matern(0.5, 1.5)),
    ("fastfood", RBF(0.5)),
    ("fastfood", Matern(0.5, 1.5)),
    ("tensorsketch", Polynomial(3, 0.3, 1.0)),
]


def mean_abs_error(features, kernel, X, m, seeds):
    K = kernel(X)
    errs = []
    for s in seeds:
        Z = draw_feature_map(features, kernel, m, X.shape[1], np.random.default_rng(s))(X)
        errs.append(np.abs(Z @ Z.T - K).mean())
    return float(np.mean(errs))


MONTE_CARLO = [c for c in CASES if c[0] in ("rff", "orf", "fastfood")]


@pytest.mark.parametrize("features,kernel", MONTE_CARLO, ids=lambda c: str(c))
def test_error_decays_like_inverse_sqrt_m(features, kernel, X):
    # Each entry of Z Z^T is a mean of m / 2 cos / sin pair terms, so the mean absolute error
    # falls like 1/sqrt(m): a 64x increase of m should divide it by ~8.  The fitted log-log
    # slope must be -0.5 +- 0.12 (5 seeds each; the spread of the slope over seeds was measured
    # below 0.05).
    ms = np.array([64, 256, 1024, 4096])
    errs = np.array([mean_abs_error(features, kernel, X, m, range(5)) for m in ms])
    slope = np.polyfit(np.log(ms), np.log(errs), 1)[0]
    assert -0.62 < slope < -0.38, (errs, slope)
    assert np.all(np.diff(errs) < 0)


@pytest.mark.parametrize("kernel", [RBF(0.5), Laplacian(0.5), Matern(0.5, 1.5)], ids=str)
def test_qmc_error_decays_faster_than_monte_carlo_on_narrow_rows(kernel):
    # Scrambled Sobol points (Yang et al. 2014): on rows of 2 columns the mean kernel error
    # falls much faster than 1 / sqrt(m) (measured log-log slopes, 5 seeds: rbf -0.97, matern
    # -0.77, laplacian -0.64, its heavy-tailed Cauchy frequencies the slowest) and is below
    # rff's at every m from 256 (by 1.4-24x).
    Xn = np.random.default_rng(1).standard_normal((120, 2))
    ms = np.array([64, 256, 1024, 4096])
    qmc = np.array([mean_abs_error("qmc", kernel, Xn, m, range(5)) for m in ms])
    rff = np.array([mean_abs_error("rff", kernel, Xn, m, range(5)) for m in ms])
    slope = np.polyfit(np.log(ms), np.log(qmc), 1)[0]
    assert slope < -0.58, (qmc, slope)
    assert np.all(qmc[1:] < rff[1:] / 1.2), (qmc, rff)


def test_qmc_maps_of_one_seed_are_nested():
    # A seed's Sobol sequence is drawn from its start: a larger map extends a smaller one (the
    # sizes of RandomFeatureKPCA(tol=) then share their frequencies).
    small = draw_feature_map("qmc", RBF(0.5), 512, 3, np.random.default_rng(4))
    large = draw_feature_map("qmc", RBF(0.5), 2000, 3, np.random.default_rng(4))
    np.testing.assert_array_equal(large.frequencies[:, :256], small.frequencies)
    assert np.all(np.isfinite(large.frequencies))


def test_auto_draws_qmc_on_narrow_rows():
    from fastkpca import RandomFeatureKPCA

    rng = np.random.default_rng(0)
    for d, kind in ((3, "qmc"), (8, "qmc"), (9, "orf")):
        model = RandomFeatureKPCA(2, n_random_features=64, random_state=0)
        assert model.fit(rng.standard_normal((50, d))).feature_map_.kind == kind


def test_tensorsketch_error_shrinks_with_m(X):
    # TensorSketch's variance is a/m plus hash-collision terms of order b/m^2 (Pham & Pagh 2013,
    # Lemma 2, with (3^p - 1) factors), so at small m the error falls faster than 1/sqrt(m) and
    # approaches that rate as m grows: require a strict decrease, at least the 1/sqrt(m) rate
    # overall (64 -> 4096 divides by >= 8), and a mean error below 0.01 at m = 4096.
    features, kernel = CASES[-1]
    ms = [64, 256, 1024, 4096]
    errs = np.array([mean_abs_error(features, kernel, X, m, range(5)) for m in ms])
    assert np.all(np.diff(errs) < 0), errs
    assert errs[-1] <= errs[0] / 8, errs
    assert errs[-1] < 0.01, errs


@pytest.mark.parametrize("features,kernel", CASES, ids=lambda c: str(c))
def test_unbiased(features, kernel, X):
    # E[z(x).z(y)] = k(x, y): averaging the estimate over S independent maps shrinks the error
    # like 1/sqrt(S) only if there is no bias.  With S = 200 draws of m = 32, the average must
    # be at least 5x closer to K than a single draw (sqrt(200) ~ 14 without bias).
    Xs = X[:40]
    K = kernel(Xs)
    est = np.zeros_like(K)
    S = 200
    for s in range(S):
        Z = draw_feature_map(features, kernel, 32, D_IN, np.random.default_rng(1000 + s))(Xs)
        est += Z @ Z.T
    est /= S
    single = mean_abs_error(features, kernel, Xs, 32, range(10))
    assert np.abs(est - K).mean() < single / 5


@pytest.mark.parametrize("kernel", [RBF(0.5), Matern(0.5, 1.5)], ids=str)
def test_orf_no_worse_than_rff(kernel, X):
    # Yu et al. (2016), Theorem 1: orthogonal frequencies never increase the kernel estimate's
    # variance for the Gaussian; in practice they reduce it.  Over 10 seeds at m = 2 d and 8 d
    # (whole orthogonal blocks), orf's mean error must not exceed rff's.
    for m in (2 * D_IN, 8 * D_IN):
        e_rff = mean_abs_error("rff", kernel, X, m, range(10))
        e_orf = mean_abs_error("orf", kernel, X, m, range(10))
        assert e_orf <= e_rff, (m, e_orf, e_rff)


@pytest.mark.parametrize("D", [1, 2, 4, 8, 16, 64, 128, 1024])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_fwht_equals_hadamard(D, dtype, rtol):
    rng = np.random.default_rng(D)
    A = rng.standard_normal((7, D)).astype(dtype)
    expected = A.astype(np.float64) @ hadamard(D)
    out = fwht(A.copy())
    assert out.dtype == dtype
    # Entries of A @ H are sums of D terms of size ~1: error ~ eps * sqrt(D) * log D.
    np.testing.assert_allclose(out, expected, rtol=0, atol=rtol * np.sqrt(D) * 10)


def test_fwht_rejects_bad_width():
    with pytest.raises(ValueError, match="power-of-2"):
        fwht(np.zeros((2, 6)))


def test_fastfood_frequencies_have_gaussian_row_norms():
    # V = S H G Pi H B / sqrt(D) with S set so that every row has a chi(D)-distributed norm
    # times sqrt(2 gamma): applying the projections to the identity recovers the frequencies,
    # whose squared norms (restricted to the d input coordinates) average 2 gamma d.
    gamma, d = 0.5, 16
    fmap = draw_feature_map("fastfood", RBF(gamma), 4096, d, np.random.default_rng(0))
    W = fmap.projections(np.eye(d))  # (d, n_frequencies): column j = frequency j
    sq = (W**2).sum(axis=0)
    # 2048 frequencies: relative standard error of the mean of chi^2(d) / d is sqrt(2/d/2048).
    assert abs(sq.mean() / (2 * gamma * d) - 1) < 4 * np.sqrt(2 / d / 2048)


@pytest.mark.parametrize("features,kernel", CASES, ids=lambda c: str(c))
def test_float32_stays_float32(features, kernel, X):
    fmap = draw_feature_map(features, kernel, 64, D_IN, np.random.default_rng(0))
    Z64 = fmap(X)
    Z32 = fmap(X.astype(np.float32))
    assert Z64.dtype == np.float64 and Z32.dtype == np.float32
    # Same map; features are O(1 / sqrt(m)) and phases O(10), so float32 round-off of the phase
    # (~1e-6) bounds the difference.
    np.testing.assert_allclose(Z32, Z64, atol=2e-5)


@pytest.mark.parametrize("features,kernel", CASES, ids=lambda c: str(c))
def test_sparse_input_equals_dense(features, kernel):
    Xs = sp.random(50, D_IN, density=0.3, format="csr", random_state=0)
    fmap = draw_feature_map(features, kernel, 64, D_IN, np.random.default_rng(0))
    # The Fourier maps compute in float32 (fastkpca.features module notes), the sparse product
    # X W in float64 and the dense one in float32: the features (~0.18 = 1 / sqrt(32)) then
    # differ by float32 rounding of the phases (|phase| < ~10, so ~1e-6); tensorsketch keeps
    # float64 throughout.
    tol = 1e-12 if features == "tensorsketch" else 2e-6
    np.testing.assert_allclose(fmap(Xs), fmap(Xs.toarray()), rtol=tol, atol=tol)


@pytest.mark.parametrize("features,kernel", CASES, ids=lambda c: str(c))
def test_state_round_trip_and_determinism(features, kernel, X):
    fmap = draw_feature_map(features, kernel, 50, D_IN, np.random.default_rng(3))
    name = state_class_name(fmap)
    assert name is not None
    state = fmap.to_state()
    for v in state.values():  # plain values only: arrays, numbers, strings
        assert isinstance(v, np.ndarray | int | float | str)
    again = STATE_CLASSES[name].from_state(state)
    np.testing.assert_array_equal(again(X), fmap(X))
    same_seed = draw_feature_map(features, kernel, 50, D_IN, np.random.default_rng(3))
    np.testing.assert_array_equal(same_seed(X), fmap(X))
    other_seed = draw_feature_map(features, kernel, 50, D_IN, np.random.default_rng(4))
    assert not np.allclose(other_seed(X), fmap(X))


def test_output_widths():
    rng = np.random.default_rng(0)
    # Fourier maps output cos / sin pairs: m rounded up to even; TensorSketch gives exactly m.
    assert draw_feature_map("rff", RBF(1.0), 7, 3, rng).n_output_features == 8
    assert draw_feature_map("orf", RBF(1.0), 100, 3, rng).n_output_features == 100
    ff = draw_feature_map("fastfood", RBF(1.0), 101, 5, rng)
    assert ff.n_output_features == 102 and ff(np.ones((2, 5))).shape == (2, 102)
    assert draw_feature_map("tensorsketch", Polynomial(2), 7, 3, rng).n_output_features == 7
    assert resolve_n_random_features(None) == 1000


def test_rff_pairs_have_unit_norm():
    # |z(x)|^2 = (1/D) sum_j (cos^2 + sin^2) = 1 = k(x, x) exactly, whatever the draw.
    fmap = draw_feature_map("rff", RBF(1.0), 64, 4, np.random.default_rng(0))
    Z = fmap(np.random.default_rng(1).standard_normal((5, 4)))
    # Computed in float32: cos^2 + sin^2 = 1 to float32 rounding, summed over 32 pairs.
    np.testing.assert_allclose((Z**2).sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize(
    "features,kernel,match",
    [
        ("rff", Polynomial(2), "shift-invariant"),
        ("rff", Linear(), "shift-invariant"),
        ("orf", Laplacian(1.0), "rotation-invariant"),
        ("fastfood", Laplacian(1.0), "rotation-invariant"),
        ("fastfood", Polynomial(2), "shift-invariant"),
        ("tensorsketch", RBF(1.0), "polynomial"),
        ("nope", RBF(1.0), "unknown features"),
    ],
)
def test_refuses_wrong_kernels(features, kernel, match):
    with pytest.raises(ValueError, match=match):
        draw_feature_map(features, kernel, 10, 3, np.random.default_rng(0))


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_random_features"):
        draw_feature_map("rff", RBF(1.0), 0, 3, rng)
    with pytest.raises(ValueError, match="n_input_features"):
        draw_feature_map("rff", RBF(1.0), 4, 0, rng)
    with pytest.raises(ValueError, match="Kernel"):
        draw_feature_map("rff", "rbf", 4, 3, rng)
    fmap = draw_feature_map("rff", RBF(1.0), 4, 3, rng)
    with pytest.raises(ValueError, match="expects 3"):
        fmap(np.ones((2, 4)))


def test_init_feature_map_matches_manual_draw(X):
    est = RandomFourierFeatures(n_components=30, gamma=0.7, random_state=5)
    fmap, _ = init_feature_map(est, X, count="n_components")
    # The documented sequence: one integer for the kernel, then the map, from one generator.
    rng = np.random.default_rng(5)
    rng.integers(2**31)
    manual = draw_feature_map("rff", RBF(0.7), 30, D_IN, rng)
    np.testing.assert_array_equal(fmap(X), manual(X))


@pytest.mark.parametrize(
    "cls,kernel",
    [
        (RandomFourierFeatures, "rbf"),
        (RandomFourierFeatures, "laplacian"),
        (OrthogonalRandomFeatures, "rbf"),
        (FastfoodFeatures, "matern"),
        (TensorSketchFeatures, "polynomial"),
    ],
)
def test_transformers(cls, kernel, X):
    t = cls(n_components=400, kernel=kernel, gamma=0.5, random_state=0)
    Z = t.fit_transform(X)
    assert Z.shape == (120, 400)
    assert t.transform(X.astype(np.float32)).dtype == np.float32
    assert t.get_feature_names_out().shape == (400,)
    # The transformer uses the map drawn by fit: its Gram approximates the kernel.  The error
    # scales like k(x, x) / sqrt(m) = 1/20 for the unit-diagonal kernels, larger for the
    # polynomial one whose diagonal is ~2-3 here: allow 0.1 x max(1, mean |K|).
    K = t.kernel_(X)
    assert np.abs(Z @ Z.T - K).mean() < 0.1 * max(1.0, np.abs(K).mean())
    assert t.feature_map_.kind == cls.features


def test_transformer_rejects_wrong_kernel(X):
    with pytest.raises(ValueError, match="shift-invariant"):
        RandomFourierFeatures(kernel="polynomial").fit(X)
    with pytest.raises(ValueError, match="polynomial"):
        TensorSketchFeatures(kernel="rbf").fit(X)


def test_features_tuple():
    assert FEATURES == ("rff", "orf", "qmc", "fastfood", "tensorsketch")


def _expected_failed_checks(estimator):
    """scikit-learn's subset- and sample-order-invariance checks set ``n_components=1`` (two
    Fourier features) and compare a row alone, or in another place of the batch, to 1e-7; the
    Fourier features are computed in float32 (:data:`fastkpca.features.FOURIER_DTYPE`), and at
    so few features the phases of a row round differently with its place in the BLAS blocks
    (measured 1.9e-7; the same at ``n_components`` 1 to 8, not at 32).  Not strict: some runs
    pass."""
    if isinstance(estimator, TensorSketchFeatures):
        return {}
    why = "float32 features: a row's rounding depends on its batch at 2 features"
    return {
        "check_methods_subset_invariance": why,
        "check_methods_sample_order_invariance": why,
    }


@pytest.mark.parametrize("cls", [RandomFourierFeatures, OrthogonalRandomFeatures, FastfoodFeatures])
def test_a_rows_features_do_not_depend_on_its_batch_beyond_float32(cls):
    """What the two checks above test, at float32's resolution: a row's features alone, or in
    another place of the batch, agree to 1e-6 (a few float32 roundings of phases of order 1)."""
    X = np.random.default_rng(3).standard_normal((40, 5))
    t = cls(n_components=1, random_state=0).fit(X)
    Z = t.transform(X)
    order = np.random.default_rng(4).permutation(40)
    np.testing.assert_allclose(t.transform(X[order]), Z[order], rtol=0, atol=1e-6)
    np.testing.assert_allclose(t.transform(X[5:6]), Z[5:6], rtol=0, atol=1e-6)
    np.testing.assert_allclose(t.transform(X[:13]), Z[:13], rtol=0, atol=1e-6)


@parametrize_with_checks(
    [
        RandomFourierFeatures(n_components=32, random_state=0),
        OrthogonalRandomFeatures(n_components=32, random_state=0),
        FastfoodFeatures(n_components=32, random_state=0),
        TensorSketchFeatures(n_components=32, random_state=0),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_blas_threads_restored_after_concurrent_calls():
    # The Fourier maps hold BLAS to one thread while their own threads run; calls from several
    # user threads at once (a threaded Dask scheduler) must leave the thread counts as found.
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_info

    before = sorted((i["filepath"], i["num_threads"]) for i in threadpool_info())
    fmap = draw_feature_map("fastfood", RBF(0.1), 512, 50, np.random.default_rng(0))
    X = np.random.default_rng(0).standard_normal((3000, 50))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fmap(X), range(8)))
    after = sorted((i["filepath"], i["num_threads"]) for i in threadpool_info())
    assert [(p, t) for p, t in after if p in dict(before)] == before
    for r in results:
        np.testing.assert_array_equal(r, results[0])


# --- chunked reductions over the features -----------------------------------------------------
#: One map of every kind (and sparse input for rff), for the chunked feature paths.
EVERY_MAP_KIND = [
    ("rff", RBF(0.5), False),
    ("rff", RBF(0.5), True),
    ("orf", RBF(0.5), False),
    ("fastfood", RBF(0.5), False),
    ("tensorsketch", Polynomial(degree=2, gamma=0.5, coef0=1.0), False),
]


def _rows_and_map(features, kernel, sparse, n, seed):
    """n rows (CSR with ~70 % zeros if sparse) and a 64-feature map of that kind."""
    X = np.random.default_rng(seed).standard_normal((n, D_IN)) * 0.3
    if sparse:
        X[np.abs(X) < 0.3] = 0.0
        X = sp.csr_matrix(X)
    return X, draw_feature_map(features, kernel, 64, D_IN, np.random.default_rng(0))


@pytest.mark.parametrize("features, kernel, sparse", EVERY_MAP_KIND)
def test_reduce_feature_chunks_sees_every_row_once(features, kernel, sparse):
    # Per-thread totals of the chunks fed (row count, column sums, Gram) add up to those of the
    # features computed by feature_blocks: every row exactly once, whatever the blocking.  The
    # Fourier maps compute the chunks' features in float32 (feature_blocks too), so the totals
    # agree to float32 rounding summed over ~1000 rows (measured 1e-6).
    from fastkpca.features import feature_blocks, reduce_feature_chunks

    X, fmap = _rows_and_map(features, kernel, sparse, 1100, seed=3)
    blocks = [(s, X[s : s + 400]) for s in range(0, 1100, 400)]
    Z = np.vstack([Zb for _, Zb in feature_blocks(blocks, fmap)]).astype(np.float64)

    def new():
        return {"n": 0, "sum": np.zeros(64), "gram": np.zeros((64, 64))}

    def add(acc, chunk):
        assert chunk.shape[0] <= CHUNK_ROWS
        acc["n"] += chunk.shape[0]
        acc["sum"] += chunk.sum(axis=0, dtype=np.float64)
        acc["gram"] += chunk.T.astype(np.float64) @ chunk

    parts = reduce_feature_chunks(blocks, fmap, new, add)
    assert 1 <= len(parts) <= n_workers()
    assert sum(p["n"] for p in parts) == 1100
    np.testing.assert_allclose(sum(p["sum"] for p in parts), Z.sum(axis=0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(sum(p["gram"] for p in parts), Z.T @ Z, rtol=1e-5, atol=1e-4)
