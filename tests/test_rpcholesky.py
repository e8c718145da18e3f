"""Randomly pivoted Cholesky landmarks (plain and accelerated) and NystromKPCA with them."""

import itertools

import numpy as np
import pytest
import scipy.linalg as la
import scipy.sparse as sp
from scipy import stats
from threadpoolctl import threadpool_limits

from fastkpca import _landmarks as lm
from fastkpca.datasets import load_demo
from fastkpca.decomposition.exact import ExactKPCA
from fastkpca.decomposition.nystrom import NystromKPCA
from fastkpca.kernels import RBF, Linear, Polynomial
from fastkpca.metrics import embedding_error

#: Relative round-off allowed between two float64 computations of the same Nystrom quantity:
#: a c x c pseudo-inverse (c <= 100, cond(W) <= 1e8 here) loses ~8 digits at worst.
RTOL64 = 1e-7


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # Small matrices on a shared, loaded machine: threaded BLAS spin-waits make them far slower.
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def digits():
    # The pendigits sample shipped with fastkpca (3498 x 16, values 0-100), first 1200 rows.
    X, _ = load_demo()
    return X[:1200]


def digits_kernel(X):
    return RBF(1.0 / (X.shape[1] * X.var()))  # gamma="scale"


def explicit_nystrom(K, S):
    """``C W^+ C^T`` of the pivots S, from the full Gram (reference only)."""
    C = K[:, S]
    return C @ la.pinvh(K[np.ix_(S, S)]) @ C.T


# --- the certificate and the factor ------------------------------------------------------------
@pytest.mark.parametrize("accelerated", [True, False])
def test_residual_trace_equals_the_explicit_nystrom_error(digits, accelerated):
    X = digits[:500]
    kernel = digits_kernel(X)
    K = kernel(X)
    res = lm.rpcholesky_indices(X, 60, kernel, np.random.default_rng(0), accelerated=accelerated)
    assert res.indices.shape == (60,) and np.unique(res.indices).size == 60
    Kt = explicit_nystrom(K, res.indices)
    assert res.residual_trace == pytest.approx(np.trace(K - Kt), rel=RTOL64)
    assert res.trace == pytest.approx(np.trace(K), rel=1e-12)
    np.testing.assert_allclose(res.residual_diag, np.diag(K - Kt), atol=RTOL64 * res.trace / 500)
    # F F^T is that Nystrom approximation (entries of K are <= 1)
    np.testing.assert_allclose(res.factor @ res.factor.T, Kt, atol=1e-9)
    assert np.all(res.residual_diag >= 0) and np.all(res.residual_diag[res.indices] == 0)


def test_rank_r_kernel_is_recovered_exactly():
    # Polynomial kernel of degree 2 on 3 features: rank C(3 + 2, 2) = 10.  Asking for 30 pivots
    # gives 10 (the residual vanishes) and F F^T = K up to round-off.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 3))
    kernel = Polynomial(degree=2, gamma=0.5, coef0=1.0)
    K = kernel(X)
    for accelerated in (True, False):
        res = lm.rpcholesky_indices(X, 30, kernel, rng, accelerated=accelerated)
        assert res.indices.size == 10
        # residual entries below RESIDUAL_FLOOR * K_ii are zeroed; the rest is round-off of a
        # rank-10 Cholesky (|K| ~ 50): 1e-9 relative
        assert res.residual_trace <= 1e-9 * res.trace
        np.testing.assert_allclose(res.factor @ res.factor.T, K, atol=1e-9 * np.abs(K).max())


def test_c_equals_n_gives_exact_kpca():
    # 60 well-separated points: K is well conditioned, every point becomes a pivot and Nystrom
    # with all points is exact KPCA (DESIGN: exact limit).  1e-8: eigh of a 60 x 60 matrix with
    # cond(W) ~ 10 versus ExactKPCA's eigh of the centred Gram.
    X = np.random.default_rng(2).standard_normal((60, 4))
    model = NystromKPCA(5, n_landmarks=60, landmarks="rpcholesky", gamma=1.0, random_state=0)
    model.fit(X)
    assert model.n_landmarks_ == 60
    ref = ExactKPCA(5, gamma=1.0).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    assert embedding_error(model.transform(X), ref.transform(X), align="sign") < 1e-8


# --- the sampling distribution -----------------------------------------------------------------
@pytest.mark.parametrize("accelerated", [True, False])
def test_first_pivot_is_drawn_proportional_to_the_diagonal(accelerated):
    # Linear kernel on rows of norms 1..6: P(first pivot = i) = ||x_i||^2 / sum ||x||^2.
    # Chi-square goodness of fit over 3000 fixed seeds; p > 1e-3 fails a correct sampler once in
    # a thousand seed sets (deterministic, the seeds are fixed).
    X = np.diag(np.arange(1.0, 7.0))
    prob = np.arange(1.0, 7.0) ** 2 / np.sum(np.arange(1.0, 7.0) ** 2)
    counts = np.zeros(6)
    for seed in range(3000):
        res = lm.rpcholesky_indices(
            X, 1, Linear(), np.random.default_rng(seed), accelerated=accelerated, block_size=4
        )
        counts[res.indices[0]] += 1
    assert stats.chisquare(counts, 3000 * prob).pvalue > 1e-3


@pytest.mark.parametrize(("accelerated", "block_size"), [(False, 1), (True, 6)])
def test_pivot_pairs_follow_the_rpcholesky_distribution(accelerated, block_size):
    # Exact law of the first two pivots: P(a, b) = d_a / tr K * r_b(a) / tr(residual after a),
    # r(a) = diag(K - K[:, a] K[a, :] / K_aa).  With block_size=6 both pivots usually come from
    # one block, so this checks that rejection sampling inside a block is exact (Epperly, Tropp &
    # Webber 2024, Thm 2.1).  Chi-square over 3000 fixed seeds, as above.
    rng = np.random.default_rng(5)
    X = rng.standard_normal((4, 3)) + np.array([1.0, 0.0, 0.0])
    kernel = Polynomial(degree=2, gamma=0.5, coef0=1.0)
    K = kernel(X)
    pairs = list(itertools.permutations(range(4), 2))
    law = []
    for a, b in pairs:
        r = np.diag(K) - K[:, a] ** 2 / K[a, a]
        law.append(K[a, a] / np.trace(K) * r[b] / r.sum())
    counts = dict.fromkeys(pairs, 0)
    runs = 3000
    for seed in range(runs):
        res = lm.rpcholesky_indices(
            X,
            2,
            kernel,
            np.random.default_rng(seed),
            accelerated=accelerated,
            block_size=block_size,
        )
        counts[tuple(int(i) for i in res.indices)] += 1
    observed = np.array([counts[p] for p in pairs])
    assert stats.chisquare(observed, runs * np.array(law)).pvalue > 1e-3


def test_accelerated_and_plain_give_the_same_quality(digits):
    # Same distribution of pivots, so the same mean trace error.  Over 20 seeds the relative
    # standard deviation of one run's error is ~4% here (measured), so each mean is within ~1%
    # of its expectation; 5% allows 3.5 standard errors of the difference.
    X = digits
    kernel = digits_kernel(X)
    errors = {True: [], False: []}
    for accelerated in (True, False):
        for seed in range(20):
            res = lm.rpcholesky_indices(
                X, 40, kernel, np.random.default_rng(seed), accelerated=accelerated
            )
            errors[accelerated].append(res.relative_residual)
    assert np.mean(errors[True]) == pytest.approx(np.mean(errors[False]), rel=0.05)


def test_tolerance_stops_at_the_first_sufficient_prefix(digits):
    X = digits
    kernel = digits_kernel(X)
    K = kernel(X)
    for accelerated in (True, False):
        res = lm.rpcholesky_indices(
            X, 1000, kernel, np.random.default_rng(3), accelerated=accelerated, tol=0.02
        )
        k = res.indices.size
        assert 1 < k < 1000 and res.relative_residual <= 0.02
        # one pivot fewer would not do (explicit error of the prefix)
        shorter = np.trace(K - explicit_nystrom(K, res.indices[: k - 1]))
        assert shorter > 0.02 * res.trace
    # F is grown past its first allocation: the factor is still the Nystrom factor
    assert res.factor.shape == (1200, k)
    np.testing.assert_allclose(
        res.factor @ res.factor.T, explicit_nystrom(K, res.indices), atol=1e-9
    )


class CountingRBF(RBF):
    """An RBF kernel that records the shape of every Gram block it evaluates."""

    def __init__(self, gamma):
        super().__init__(gamma)
        self.shapes = []

    def _block(self, Xc, Y, ctx, out=None):
        self.shapes.append((Xc.shape[0], Y.shape[0]))
        return super()._block(Xc, Y, ctx, out)


def test_kernel_evaluations_are_n_per_pivot():
    # (c + 1) n evaluations in the papers: n per column (the diagonal is free for RBF), plus
    # block_size^2 per round for the proposals' kernel.
    rng = np.random.default_rng(0)
    n, c, b = 4000, 60, 30
    X = rng.standard_normal((n, 4))
    kernel = CountingRBF(0.3)
    res = lm.rpcholesky_indices(X, c, kernel, np.random.default_rng(1), block_size=b)
    rounds = res.n_proposals // b
    evaluations = sum(p * q for p, q in kernel.shapes)
    assert evaluations == n * c + rounds * b * b
    assert evaluations <= 1.2 * n * c  # the proposals' kernels are small beside the columns
    assert max(p * q for p, q in kernel.shapes) < n * n / 10


def test_the_factor_does_not_depend_on_the_thread_count():
    # Each round's columns are appended chunk by chunk of rows in the worker threads; a row's
    # arithmetic depends on the row count alone, so 1 and 2 threads give the same pivots and
    # the same factor (compared to round-off, never for exact equality).
    from fastkpca.execution import using_n_jobs

    X = np.random.default_rng(0).standard_normal((5000, 6))
    results = []
    for n_jobs in (1, 2):
        with using_n_jobs(n_jobs):
            results.append(lm.rpcholesky_indices(X, 80, RBF(0.2), np.random.default_rng(3)))
    one, two = results
    np.testing.assert_array_equal(one.indices, two.indices)
    np.testing.assert_allclose(one.factor, two.factor, rtol=0, atol=1e-12)


# --- dtypes and input types --------------------------------------------------------------------
def test_float32_and_sparse_input(digits):
    X = digits[:400]
    kernel = digits_kernel(X)
    K = kernel(X)
    for Xin in (X.astype(np.float32), sp.csr_matrix(X)):
        res = lm.rpcholesky_indices(Xin, 30, kernel, np.random.default_rng(0))
        # the kernel columns are float64 whatever X's dtype: the certificate matches the
        # float64 reference to float32 input round-off (1e-7 relative per entry of X)
        explicit = np.trace(K - explicit_nystrom(K, res.indices))
        assert res.residual_trace == pytest.approx(explicit, rel=1e-4)
        L, w = lm.select_landmarks(Xin, "rpcholesky", 30, kernel, np.random.default_rng(0))
        assert isinstance(L, np.ndarray) and L.shape == (30, 16) and L.dtype == Xin.dtype
        np.testing.assert_allclose(w, np.full(30, 1 / 30))
    model = NystromKPCA(3, n_landmarks=50, landmarks="rpcholesky", random_state=0)
    assert model.fit_transform(X.astype(np.float32)).dtype == np.float32
    assert model.fit(sp.csr_matrix(X)).landmarks_.shape == (50, 16)


def test_bad_parameters_raise():
    X = np.random.default_rng(0).standard_normal((20, 2))
    rng = np.random.default_rng(0)
    for kwargs, match in [
        (dict(n_landmarks=0), "n_landmarks"),
        (dict(n_landmarks=2.5), "n_landmarks"),
        (dict(block_size=0), "block_size"),
        (dict(tol=0.0), "tol"),
        (dict(tol=1.0), "tol"),
    ]:
        args = dict(n_landmarks=5) | kwargs
        with pytest.raises(ValueError, match=match):
            lm.rpcholesky_indices(X, args.pop("n_landmarks"), RBF(1.0), rng, **args)
    with pytest.raises(ValueError, match="diagonal is zero"):
        lm.rpcholesky_indices(np.zeros((5, 2)), 2, Linear(), rng)
    with pytest.raises(ValueError, match="no rows"):
        lm.rpcholesky_indices(np.zeros((0, 2)), 2, Linear(), rng)


# --- NystromKPCA -------------------------------------------------------------------------------
def test_nystrom_rpcholesky_against_exact_kpca(digits):
    X = digits
    ref = ExactKPCA(5, gamma="scale").fit(X)
    model = NystromKPCA(5, n_landmarks=150, landmarks="rpcholesky", gamma="scale", random_state=0)
    model.fit(X)
    assert model.n_landmarks_ == 150
    np.testing.assert_allclose(model.landmark_weights_, np.full(150, 1 / 150))
    # Nystrom under-estimates: 0 <= lambda_i(HKH) - lambda_i(H K~ H), and those gaps sum to at
    # most tr(H (K - K~) H) <= tr(K - K~), the RPCholesky certificate.  Recompute it for the
    # model's landmarks (the landmarks are the pivots, as rows).
    K = model.kernel_(X)
    L = model.landmarks_
    idx = np.array([np.flatnonzero(np.all(X == row, axis=1))[0] for row in L])
    certificate = np.trace(K - explicit_nystrom(K, idx))
    gaps = ref.eigenvalues_ - model.eigenvalues_
    assert np.all(gaps >= -1e-9 * ref.eigenvalues_[0]) and gaps.sum() <= certificate
    # 150 of 1200 points: the top-5 embedding within 2% (measured 0.4%)
    assert embedding_error(model.transform(X), ref.transform(X)) < 0.02


def test_nystrom_rpcholesky_on_a_dask_array(digits):
    da = pytest.importorskip("dask.array")
    import dask

    X = digits
    params = dict(n_components=4, n_landmarks=80, landmarks="rpcholesky", gamma=0.001)
    with dask.config.set(scheduler="sync"):
        ours = NystromKPCA(random_state=1, **params).fit(da.from_array(X, chunks=(300, 16)))
        emb = ours.transform(da.from_array(X, chunks=(300, 16))).compute()
    ref = NystromKPCA(random_state=1, **params).fit(X)
    # at most LANDMARK_SUBSAMPLE rows: the in-memory selector runs on all of them with the same
    # draws; the moments are reduced over chunks, so agreement is to round-off (test_dask's 1e-6)
    np.testing.assert_allclose(ours.landmarks_, ref.landmarks_)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    assert embedding_error(emb, ref.transform(X), align="sign") < 1e-6


def test_nystrom_rpcholesky_on_a_low_rank_kernel_is_exact():
    # Linear kernel on 3 features: rank 3, so 3 landmarks of the 50 asked for, and the Nystrom
    # approximation is K itself: exact KPCA (zeros beyond the rank).  1e-9: round-off of a
    # rank-3 Cholesky and two small eigh.
    X = np.random.default_rng(0).standard_normal((300, 3))
    model = NystromKPCA(5, kernel="linear", n_landmarks=50, landmarks="rpcholesky", random_state=0)
    model.fit(X)
    ref = ExactKPCA(5, kernel="linear").fit(X)
    assert model.n_landmarks_ == 3
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, atol=1e-9 * 300)
    assert embedding_error(model.transform(X)[:, :3], ref.transform(X)[:, :3]) < 1e-9
