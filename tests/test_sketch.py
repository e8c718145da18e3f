"""Frequent Directions and CountSketch: guarantees, exact limits, blocking, merging, state."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from fastkpca._state import STATE_CLASSES, state_class_name
from fastkpca.execution.arrays import to_host
from fastkpca.sketch import CountSketch, FrequentDirections, fd_shrink

# Round-off slack for the FD inequalities: the sketch is computed in float64 from the 2 ell x 2 ell
# Gram of the buffer, so B^T B carries absolute errors of order eps * ||A||_F^2 (summed over the
# shrinks); 1e-10 * ||A||_F^2 is several orders above that and far below any bound tested.
ROUND = 1e-10


# --------------------------------------------------------------------------------------------
# streams
# --------------------------------------------------------------------------------------------
def low_rank_noise(rng, n=1200, m=40, r=8):
    return rng.standard_normal((n, r)) @ rng.standard_normal((r, m)) + 0.05 * rng.standard_normal(
        (n, m)
    )


def sorted_by_norm(rng, descending=False):
    A = low_rank_noise(rng) * rng.exponential(size=(1200, 1))
    order = np.argsort(np.linalg.norm(A, axis=1))
    return A[order[::-1] if descending else order]


def repeated_directions(rng, n=1000, m=30):
    # A few directions, each repeated in long runs: FD must not forget a direction that stops
    # appearing (the classic adversarial stream for naive incremental PCA).
    dirs = rng.standard_normal((4, m))
    runs = np.repeat(np.arange(4), n // 4)
    return dirs[runs] * (1 + 0.01 * rng.standard_normal((n, 1)))


def low_rank_plus_spikes(rng, n=1500, m=35):
    A = rng.standard_normal((n, 3)) @ rng.standard_normal((3, m))
    spikes = rng.choice(n, size=12, replace=False)
    A[spikes] = 40 * rng.standard_normal((12, m))  # rare huge rows in fresh directions
    return A


STREAMS = {
    "low_rank_noise": low_rank_noise,
    "sorted_ascending": lambda rng: sorted_by_norm(rng, descending=False),
    "sorted_descending": lambda rng: sorted_by_norm(rng, descending=True),
    "repeated_directions": repeated_directions,
    "low_rank_plus_spikes": low_rank_plus_spikes,
    "gaussian": lambda rng: rng.standard_normal((900, 25)),
}


def tails(A):
    """||A - A_k||_F^2 for k = 0, 1, ..."""
    s2 = np.linalg.svd(A, compute_uv=False) ** 2
    return np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])


def check_fd_bound(A, B, ell, ks):
    """0 <= A^T A - B^T B and ||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell - k)."""
    D = A.T @ A - B.T @ B
    w = np.linalg.eigvalsh((D + D.T) / 2)
    fro2 = np.sum(A * A)
    assert w[0] >= -ROUND * fro2, "B^T B must never exceed A^T A"
    err = w[-1]
    tail = tails(A)
    for k in ks:
        # The stated bound, and the sharper ell + 1 - k of the (ell+1)-th-value shrink.
        assert err <= tail[k] / (ell - k) + ROUND * fro2
        assert err <= tail[k] / (ell + 1 - k) + ROUND * fro2
    return err


# --------------------------------------------------------------------------------------------
# Frequent Directions
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(STREAMS))
@pytest.mark.parametrize("ell", [4, 10])
def test_fd_bound_on_streams(name, ell):
    A = STREAMS[name](np.random.default_rng(1))
    fd = FrequentDirections(ell).update(A)
    B = fd.sketch()
    assert B.shape == (ell, A.shape[1]) and B.dtype == np.float64
    assert fd.n_rows_seen == A.shape[0]
    check_fd_bound(A, B, ell, ks=range(ell))


def test_fd_total_shrinkage_bounds_the_error(rng):
    ell = 6
    # 2 ell + 9 ell rows: the last shrink leaves exactly ell rows, so sketch() adds nothing.
    A = low_rank_noise(rng, n=11 * ell, m=20)
    fd = FrequentDirections(ell).update(A)
    B = fd.sketch()
    err = np.linalg.norm(A.T @ A - B.T @ B, 2)
    assert fd.total_shrinkage > 0
    assert err <= fd.total_shrinkage * (1 + 1e-9)
    assert fd.total_shrinkage <= tails(A)[2] / (ell + 1 - 2) * (1 + 1e-9)


def test_fd_sketch_does_not_change_state(rng):
    A = low_rank_noise(rng, n=130, m=20)
    fd = FrequentDirections(8).update(A[:70])
    fd.sketch()  # the buffer holds > ell rows here: sketch() shrinks a copy
    fd.update(A[70:])
    ref = FrequentDirections(8).update(A)
    np.testing.assert_array_equal(fd.sketch(), ref.sketch())


@pytest.mark.parametrize("rank, ell, m", [(5, 5, 30), (5, 12, 30), (30, 30, 30), (20, 64, 20)])
def test_fd_exact_when_ell_at_least_rank(rng, rank, ell, m):
    A = rng.standard_normal((500, rank)) @ rng.standard_normal((rank, m))
    fd = FrequentDirections(ell).update(A)
    B = fd.sketch()
    assert B.shape == (min(ell, m), m)
    # Exact up to round-off: relative to ||A^T A||, float64 with a few hundred rotations.
    np.testing.assert_allclose(B.T @ B, A.T @ A, atol=1e-10 * np.abs(A.T @ A).max())
    assert fd.total_shrinkage <= 1e-10 * np.sum(A * A)


def test_fd_ell_above_columns_caps_memory(rng):
    fd = FrequentDirections(10_000).update(rng.standard_normal((50, 7)))
    assert fd._buffer.shape == (14, 7)
    assert fd.sketch().shape == (7, 7)


@pytest.mark.parametrize("sizes", [[1] * 40, [3, 17, 1, 50, 9], [100], [2 * 7, 7, 7, 72]])
def test_fd_blocking_invariance(rng, sizes):
    A = rng.standard_normal((100, 15))
    ref = FrequentDirections(7).update(A)
    fd = FrequentDirections(7)
    start = 0
    for s in sizes:
        fd.update(A[start : start + s])
        start += s
    fd.update(A[start:])
    # Shrinks happen at the same row counts whatever the blocking: bitwise equal.
    np.testing.assert_array_equal(fd.sketch(), ref.sketch())
    assert fd.total_shrinkage == ref.total_shrinkage


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 90), max_size=8), ell=st.integers(1, 9))
def test_fd_blocking_invariance_property(cuts, ell):
    A = np.random.default_rng(3).standard_normal((90, 12))
    edges = [0, *sorted(cuts), 90]
    fd = FrequentDirections(ell)
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        fd.update(A[a:b])
    np.testing.assert_array_equal(fd.sketch(), FrequentDirections(ell).update(A).sketch())


def test_fd_sparse_and_float32_rows(rng):
    A = sp.random(300, 40, density=0.1, format="csr", random_state=2, dtype=np.float64)
    dense = FrequentDirections(6).update(A.toarray()).sketch()
    np.testing.assert_array_equal(FrequentDirections(6).update(A).sketch(), dense)
    A32 = rng.standard_normal((200, 10)).astype(np.float32)
    B = FrequentDirections(4).update(A32).sketch()
    assert B.dtype == np.float64
    check_fd_bound(A32.astype(np.float64), B, 4, ks=range(4))


def test_fd_merge_two(rng):
    A = low_rank_plus_spikes(rng)
    a = FrequentDirections(8).update(A[:700])
    b = FrequentDirections(8).update(A[700:])
    before = a.sketch().copy()
    merged = a.merge(b)
    np.testing.assert_array_equal(a.sketch(), before)  # inputs untouched
    assert merged is not a and merged.n_rows_seen == A.shape[0]
    check_fd_bound(A, merged.sketch(), 8, ks=range(8))


@pytest.mark.parametrize("name", ["low_rank_noise", "repeated_directions", "sorted_descending"])
def test_fd_merge_tree(name):
    A = STREAMS[name](np.random.default_rng(4))
    ell = 6
    parts = [FrequentDirections(ell).update(P) for P in np.array_split(A, 8)]
    while len(parts) > 1:  # pairwise tree reduction, as a Dask tree-reduce would do it
        parts = [parts[i].merge(parts[i + 1]) for i in range(0, len(parts), 2)]
    merged = parts[0]
    assert merged.n_rows_seen == A.shape[0]
    check_fd_bound(A, merged.sketch(), ell, ks=range(ell))
    # The a-posteriori bound adds up over the tree too.
    err = np.linalg.norm(A.T @ A - merged.sketch().T @ merged.sketch(), 2)
    extra = fd_shrink(merged._buffer[: merged._filled], ell)[1] if merged._filled > ell else 0.0
    assert err <= merged.total_shrinkage + extra + ROUND * np.sum(A * A)


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(1, 80), min_size=3, max_size=3), ell=st.integers(2, 8))
def test_fd_merge_associative_up_to_bound(sizes, ell):
    rng = np.random.default_rng(5)
    parts = [low_rank_noise(rng, n=s, m=12, r=4) for s in sizes]
    A = np.vstack(parts)
    a, b, c = (FrequentDirections(ell).update(P) for P in parts)
    left = a.merge(b).merge(c).sketch()
    right = a.merge(b.merge(c)).sketch()
    bound = tails(A)[0] / ell
    for B in (left, right):
        check_fd_bound(A, B, ell, ks=[0])
    # Both lie between A^T A - bound I and A^T A, so they differ by at most the bound.
    assert np.linalg.norm(left.T @ left - right.T @ right, 2) <= bound * (1 + 1e-9)


def test_fd_merge_exact_regime_equals_single_pass(rng):
    A = rng.standard_normal((300, 9))
    merged = FrequentDirections(9).update(A[:120]).merge(FrequentDirections(9).update(A[120:]))
    B = merged.sketch()
    np.testing.assert_allclose(B.T @ B, A.T @ A, atol=1e-10 * np.abs(A.T @ A).max())


def test_fd_merge_errors(rng):
    a = FrequentDirections(4).update(rng.standard_normal((10, 5)))
    with pytest.raises(ValueError, match="different sizes"):
        a.merge(FrequentDirections(5).update(rng.standard_normal((10, 5))))
    with pytest.raises(ValueError, match="columns"):
        a.merge(FrequentDirections(4).update(rng.standard_normal((10, 6))))
    with pytest.raises(ValueError, match="FrequentDirections"):
        a.merge(np.eye(5))
    # Merging with an empty sketch gives the same sketch.
    np.testing.assert_array_equal(a.merge(FrequentDirections(4)).sketch(), a.sketch())


def test_fd_bad_input(rng):
    with pytest.raises(ValueError, match="sketch_size"):
        FrequentDirections(0)
    with pytest.raises(ValueError, match="n_columns"):
        FrequentDirections(3, n_columns=-1)
    fd = FrequentDirections(3, n_columns=4)
    with pytest.raises(ValueError, match="5 features"):
        fd.update(np.ones((2, 5)))
    with pytest.raises(ValueError, match="NaN"):
        fd.update(np.array([[1.0, np.nan, 0, 0]]))
    with pytest.raises(ValueError, match="infinity"):
        fd.update(np.array([[1.0, np.inf, 0, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        fd.update(np.ones(4))
    with pytest.raises(ValueError, match="no rows"):
        FrequentDirections(3).sketch()
    assert FrequentDirections(3, n_columns=4).sketch().shape == (3, 4)


def test_fd_state_round_trip(rng):
    A = rng.standard_normal((150, 12))
    fd = FrequentDirections(5).update(A[:77])
    state = fd.to_state()
    assert state_class_name(fd) in STATE_CLASSES
    assert all(isinstance(v, int | float | np.ndarray | type(None)) for v in state.values())
    restored = FrequentDirections.from_state(state)
    np.testing.assert_array_equal(restored.sketch(), fd.sketch())
    # A restored sketch continues the stream exactly as the original.
    restored.update(A[77:])
    ref = FrequentDirections(5).update(A)
    np.testing.assert_array_equal(restored.sketch(), ref.sketch())
    assert restored.n_rows_seen == 150 and restored.total_shrinkage == ref.total_shrinkage
    empty = FrequentDirections.from_state(FrequentDirections(3).to_state())
    assert empty.n_columns is None
    bad = dict(state, buffer=np.ones((20, 12)))
    with pytest.raises(ValueError, match="buffer"):
        FrequentDirections.from_state(bad)


def test_fd_shrink_facts(rng):
    """The two inequalities the FD bound rests on, for one shrink."""
    C = rng.standard_normal((12, 30))
    ell = 6
    B, delta = fd_shrink(C, ell)
    s = np.linalg.svd(C, compute_uv=False)
    assert delta == pytest.approx(s[ell] ** 2, rel=1e-10)
    w = np.linalg.eigvalsh(C.T @ C - B.T @ B)
    assert w[0] >= -1e-10 * s[0] ** 2 and w[-1] <= delta * (1 + 1e-10)
    assert np.sum(C * C) - np.sum(B * B) >= (ell + 1) * delta * (1 - 1e-10)
    np.testing.assert_allclose(
        np.linalg.svd(B, compute_uv=False) ** 2,
        s[:ell] ** 2 - delta,
        rtol=1e-9,
        atol=1e-9 * s[0] ** 2,
    )


# --------------------------------------------------------------------------------------------
# CountSketch
# --------------------------------------------------------------------------------------------
def test_countsketch_unbiased_over_seeds(rng):
    A = rng.standard_normal((40, 4)) * np.array([3.0, 1.0, 0.5, 0.1])
    G = A.T @ A
    n_seeds = 3000
    samples = np.empty((n_seeds, 4, 4))
    for seed in range(n_seeds):
        SA = CountSketch(8, 4, random_state=seed).update(A).sketch()
        samples[seed] = SA.T @ SA
    mean = samples.mean(axis=0)
    sem = samples.std(axis=0) / np.sqrt(n_seeds)
    # E[(SA)^T SA] = A^T A: the Monte Carlo mean is within 4.5 standard errors everywhere (a
    # fixed-seed check; a biased sketch, e.g. signs not independent, misses by many sems).
    assert np.all(np.abs(mean - G) <= 4.5 * sem + 1e-12)
    assert np.abs(mean - G).max() / np.abs(G).max() < 0.02
    # The diagonal is exact in expectation; single draws still vary.
    assert samples[:, 0, 0].std() > 0.05 * G[0, 0]


def test_countsketch_blocking_and_order_independence(rng):
    A = rng.standard_normal((500, 9))
    ref = CountSketch(30, 9, random_state=7).update(A)
    cs = CountSketch(30, 9, random_state=7)
    edges = [0, 1, 13, 200, 201, 377, 500]
    blocks = list(zip(edges[:-1], edges[1:], strict=True))
    for a, b in blocks[::-1]:  # blocks in reverse order, with their global start
        cs.update(A[a:b], start=a)
    np.testing.assert_allclose(cs.sketch(), ref.sketch(), atol=1e-12)
    np.testing.assert_array_equal(cs.bucket_signs_sum(), ref.bucket_signs_sum())
    # Default start = rows seen so far: in-order blocks need no start.
    cs2 = CountSketch(30, 9, random_state=7)
    for a, b in blocks:
        cs2.update(A[a:b])
    np.testing.assert_allclose(cs2.sketch(), ref.sketch(), atol=1e-12)
    assert cs2.n_rows_seen == 500


def test_countsketch_matches_explicit_matrix_and_centering(rng):
    A = rng.standard_normal((120, 6))
    cs = CountSketch(10, 6, random_state=3).update(A)
    S = cs.sketching_matrix(0, 120).toarray()
    assert np.all(np.abs(S).sum(axis=0) == 1)  # one +-1 per column
    np.testing.assert_allclose(cs.sketch(), S @ A, atol=1e-12)
    np.testing.assert_allclose(cs.bucket_signs_sum(), S @ np.ones(120))
    mu = A.mean(axis=0)
    np.testing.assert_allclose(
        cs.sketch() - np.outer(cs.bucket_signs_sum(), mu), S @ (A - mu), atol=1e-12
    )


def test_countsketch_sparse_and_float32(rng):
    A = sp.random(200, 30, density=0.05, format="csr", random_state=1)
    dense = CountSketch(16, 30, random_state=0).update(A.toarray()).sketch()
    np.testing.assert_allclose(
        CountSketch(16, 30, random_state=0).update(A).sketch(), dense, atol=1e-12
    )
    A32 = rng.standard_normal((50, 3)).astype(np.float32)
    out = CountSketch(5, 3, random_state=0).update(A32).sketch()
    assert out.dtype == np.float64


def test_countsketch_hash_quality():
    cs = CountSketch(50, 1, random_state=11)
    buckets, signs = cs.hash_rows(np.arange(200_000))
    counts = np.bincount(buckets, minlength=50)
    expected = 200_000 / 50
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 49 + 6 * np.sqrt(2 * 49)  # chi^2(49): mean 49, sd ~ 9.9
    assert abs(signs.mean()) < 4 / np.sqrt(200_000)
    # Signs of consecutive indices are (close to) uncorrelated.
    assert abs(np.mean(signs[1:] * signs[:-1])) < 4 / np.sqrt(200_000)
    with pytest.raises(ValueError, match="non-negative"):
        cs.hash_rows([-1])


def test_countsketch_merge_and_seed(rng):
    A = rng.standard_normal((300, 5))
    a = CountSketch(20, 5, random_state=2).update(A[:100])
    b = CountSketch(20, 5, random_state=2).update(A[100:], start=100)
    merged = a.merge(b)
    ref = CountSketch(20, 5, random_state=2).update(A)
    np.testing.assert_allclose(merged.sketch(), ref.sketch(), atol=1e-12)
    np.testing.assert_allclose(merged.bucket_signs_sum(), ref.bucket_signs_sum())
    assert merged.n_rows_seen == 300 and a.n_rows_seen == 100
    with pytest.raises(ValueError, match="hash"):
        a.merge(CountSketch(20, 5, random_state=3))
    with pytest.raises(ValueError, match="shapes"):
        a.merge(CountSketch(21, 5, random_state=2))
    # Same seed, same sketch; different seed, different sketch.
    np.testing.assert_array_equal(
        CountSketch(20, 5, random_state=2).update(A).sketch(), ref.sketch()
    )
    assert not np.allclose(CountSketch(20, 5, random_state=9).update(A).sketch(), ref.sketch())


def test_countsketch_state_and_errors(rng):
    A = rng.standard_normal((60, 4))
    cs = CountSketch(7, 4, random_state=5).update(A[:30])
    assert state_class_name(cs) in STATE_CLASSES
    restored = CountSketch.from_state(cs.to_state())
    restored.update(A[30:])
    np.testing.assert_allclose(
        restored.sketch(), CountSketch(7, 4, random_state=5).update(A).sketch(), atol=1e-12
    )
    with pytest.raises(ValueError, match="n_buckets"):
        CountSketch(0, 4)
    with pytest.raises(ValueError, match="5 features"):
        cs.update(np.ones((2, 5)))
    with pytest.raises(ValueError, match="NaN"):
        cs.update(np.full((1, 4), np.nan))
    with pytest.raises(ValueError, match="start"):
        cs.update(np.ones((1, 4)), start=-3)
    with pytest.raises(ValueError, match="coefficients"):
        CountSketch.from_state(dict(cs.to_state(), sign_coefs=[1, 2]))


# --------------------------------------------------------------------------------------------
# FD: exact total loss (squared_norm / missing_energy) and the tracked loss estimate
# --------------------------------------------------------------------------------------------
def exact_loss(A, fd):
    R = fd.rows()
    return A.T @ A - R.T @ R


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_fd_missing_energy_is_exact_trace_of_loss(name):
    A = STREAMS[name](np.random.default_rng(4))
    fd = FrequentDirections(5).update(A)
    # squared_norm is a float64 sum of the same squares as np.sum(A * A), in another order:
    # relative round-off ~ n eps.
    np.testing.assert_allclose(fd.squared_norm, np.sum(A * A), rtol=1e-12)
    E = exact_loss(A, fd)
    # A stream of rank <= ell loses nothing but round-off (missing_energy may then be 0)
    assert fd.missing_energy > 0 or np.linalg.matrix_rank(A) <= 5
    np.testing.assert_allclose(
        fd.missing_energy, np.trace(E), rtol=1e-9, atol=ROUND * np.sum(A * A)
    )
    # The losses over an orthonormal basis sum to it; no direction loses more than delta.
    assert np.linalg.eigvalsh(E).max() <= fd.total_shrinkage + ROUND * np.sum(A * A)


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_fd_loss_model_within_known_range(name):
    A = STREAMS[name](np.random.default_rng(5))
    fd = FrequentDirections(6).update(A)
    V, H, rho = fd.loss_model()
    delta = fd.total_shrinkage
    np.testing.assert_allclose(V @ V.T, np.eye(V.shape[0]), atol=1e-10)
    # Rows of V lie in the row span of the buffer.
    R = fd.rows()
    np.testing.assert_allclose(V @ np.linalg.pinv(R) @ R, V, atol=1e-8)
    w = np.linalg.eigvalsh(H)
    assert w.min() >= -1e-9 * delta and w.max() <= delta * (1 + 1e-9)
    assert 0.0 <= rho <= delta


def test_fd_loss_model_exact_on_persistent_directions(rng):
    # A strongly decaying spectrum: the top 3 directions stay in the sketch throughout, so
    # their tracked loss is the sum of all deltas, which is their exact loss.
    m = 40
    basis, _ = np.linalg.qr(rng.standard_normal((m, m)))
    scales = np.r_[30.0, 20.0, 10.0, np.full(m - 3, 0.5)]
    A = (rng.standard_normal((3000, m)) * scales) @ basis.T
    fd = FrequentDirections(8).update(A)
    V, H, _ = fd.loss_model()
    E = exact_loss(A, fd)
    top = V[:3]  # the largest rows after the last shrink: the persistent directions
    # The sketch's axes wobble around the fixed ones by O(noise / signal); the part of a
    # direction's history outside the old span is estimated, not tracked, which costs
    # O(angle^2): measured 4.5e-5 relative, asserted 2e-4.
    np.testing.assert_allclose(np.diag(top @ E @ top.T), np.diag(H)[:3], rtol=2e-4)
    np.testing.assert_allclose(np.diag(H)[:3], fd.total_shrinkage, rtol=2e-4)


def test_fd_loss_tracking_blocking_invariant(rng):
    A = rng.standard_normal((200, 15))
    ref = FrequentDirections(4).update(A)
    fd = FrequentDirections(4)
    for start in range(0, 200, 13):
        fd.update(A[start : start + 13])
    # Same shrinks at the same row counts, from the same buffers; only the float64 sum of
    # squares (which sets the untracked part) is added in another order: round-off only.
    np.testing.assert_allclose(fd.loss_model()[1], ref.loss_model()[1], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fd.squared_norm, ref.squared_norm, rtol=1e-13)


@pytest.mark.parametrize("name", ["low_rank_noise", "sorted_descending", "gaussian"])
def test_fd_merge_adds_exact_energy_and_keeps_loss_range(name):
    A = STREAMS[name](np.random.default_rng(6))
    parts = [FrequentDirections(5).update(P) for P in np.array_split(A, 6)]
    while len(parts) > 1:
        parts = [parts[i].merge(parts[i + 1]) for i in range(0, len(parts) - 1, 2)] + (
            [parts[-1]] if len(parts) % 2 else []
        )
    fd = parts[0]
    np.testing.assert_allclose(fd.squared_norm, np.sum(A * A), rtol=1e-12)
    E = exact_loss(A, fd)
    np.testing.assert_allclose(
        fd.missing_energy, np.trace(E), rtol=1e-9, atol=ROUND * np.sum(A * A)
    )
    assert np.linalg.eigvalsh(E).max() <= fd.total_shrinkage + ROUND * np.sum(A * A)
    V, H, rho = fd.loss_model()
    w = np.linalg.eigvalsh(H)
    assert w.min() >= -1e-9 * fd.total_shrinkage
    assert w.max() <= fd.total_shrinkage * (1 + 1e-9) and 0 <= rho <= fd.total_shrinkage


def test_fd_merge_of_shrunk_and_fresh_sketch_keeps_tracked_rows_first(rng):
    A = rng.standard_normal((60, 10))
    a = FrequentDirections(4).update(A[:50])  # shrunk: tracked rows
    b = FrequentDirections(4).update(A[50:51])  # 1 exact row, room for it
    merged = b.merge(a)
    assert (
        a._filled + 1 < a._buffer.shape[0]
        and merged._n_kept == 4
        and merged._filled == a._filled + 1
    )
    np.testing.assert_array_equal(merged.rows()[: a._filled], a.rows())
    np.testing.assert_array_equal(merged.loss_model()[1], a.loss_model()[1])
    assert merged.total_shrinkage == a.total_shrinkage


def test_fd_state_keeps_loss_and_reads_old_states(rng):
    A = rng.standard_normal((150, 12))
    fd = FrequentDirections(5).update(A[:77])
    restored = FrequentDirections.from_state(fd.to_state())
    assert restored.squared_norm == fd.squared_norm
    np.testing.assert_array_equal(restored.loss_model()[1], fd.loss_model()[1])
    restored.update(A[77:])
    ref = FrequentDirections(5).update(A)
    # Same shrinks; the exact energy is summed over other slices (the resumed stream starts a
    # new one), which moves the untracked loss by round-off only.
    H, H_ref = restored.loss_model()[1], ref.loss_model()[1]
    np.testing.assert_allclose(H, H_ref, rtol=0, atol=1e-12 * np.abs(H_ref).max())
    # A state saved before the loss was tracked still loads: the energy is unknown, so the
    # missing energy is infinite, the bound is the FD bound and rho is total_shrinkage (the
    # former compensated estimate).
    old = {k: v for k, v in fd.to_state().items() if k not in ("squared_norm", "loss")}
    legacy = FrequentDirections.from_state(old)
    assert legacy.missing_energy == np.inf
    _, H, rho = legacy.loss_model()
    assert H.size == 0 and rho == pytest.approx(fd.total_shrinkage, rel=1e-12)
    with pytest.raises(ValueError, match="loss matrix"):
        FrequentDirections.from_state(dict(fd.to_state(), loss=np.ones((3, 3))))


# --------------------------------------------------------------------------------------------
# over array namespaces (numpy, PyTorch CPU, array_api_strict; CUDA under ``gpu``)
# --------------------------------------------------------------------------------------------
# The sketch is written once over the rows' namespace: the same rows at the same shrink points,
# the same small eigendecompositions (on the host, from the buffer's Gram computed where the
# rows are).  Of the same float64 rows the sketches agree up to the order of float64 sums,
# amplified by the shrinks' eigendecompositions (relative gaps of the test spectra ~1e-2):
# 1e-9 relative asserted.
SKETCH_RTOL = 1e-9


@pytest.fixture(scope="module")
def decaying():
    rng = np.random.default_rng(5)
    # a decaying spectrum, 60 columns: sketches of 6 rows shrink every 12 rows
    return rng.standard_normal((500, 60)) * (0.9 ** np.arange(60))


def _host(a):
    return np.asarray(to_host(a), dtype=np.float64)


def _rel(A, B):
    A, B = _host(A), _host(B)
    return float(np.max(np.abs(A - B)) / np.max(np.abs(A)))


def _sketch_gram(B):
    """``B^T B``: what a sketch means (its rows' signs, and their rotation within directions of
    equal weight, are the small eigensolver's choice)."""
    B = _host(B)
    return B.T @ B


def _fed(sketch, X, pieces):
    for chunk in np.array_split(np.arange(X.shape[0]), pieces):
        sketch._extend(X[chunk[0] : chunk[-1] + 1, ...])
    return sketch


def test_fd_over_namespaces_equals_numpy(decaying, namespace):
    host = _fed(FrequentDirections(6), decaying, 7)
    other = _fed(FrequentDirections(6), namespace.to_ns(decaying), 7)
    assert namespace.is_native(other._buffer) and namespace.is_native(other.rows())
    assert other.n_rows_seen == host.n_rows_seen
    assert _rel(_sketch_gram(host.rows()), _sketch_gram(other.rows())) < SKETCH_RTOL
    assert _rel(_sketch_gram(host.sketch()), _sketch_gram(other.sketch())) < SKETCH_RTOL
    np.testing.assert_allclose(other.total_shrinkage, host.total_shrinkage, rtol=SKETCH_RTOL)
    np.testing.assert_allclose(other.squared_norm, host.squared_norm, rtol=1e-12)
    np.testing.assert_allclose(other.missing_energy, host.missing_energy, rtol=SKETCH_RTOL)
    (V, H, rho), (Vo, Ho, rho_o) = host.loss_model(), other.loss_model()
    assert isinstance(Vo, np.ndarray)  # small (ell x m): read on the host
    assert _rel(V.T @ H @ V, Vo.T @ Ho @ Vo) < SKETCH_RTOL
    assert abs(rho - rho_o) <= SKETCH_RTOL * abs(rho)
    # the FD guarantee: 0 <= x^T (A^T A - B^T B) x <= total_shrinkage
    B = _host(other.rows())
    loss = np.linalg.eigvalsh(decaying.T @ decaying - B.T @ B)
    assert loss.min() > -1e-9 * host.squared_norm
    assert loss.max() <= other.total_shrinkage * (1 + 1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fd_update_keeps_the_rows_namespace(decaying, namespace, dtype):
    """``update`` validates the rows where they are (``fastkpca.source.check_block``): the
    buffer, float64, stays in their namespace, and the sketch is numpy's."""
    A = decaying.astype(dtype)
    host = FrequentDirections(6).update(A[:300]).update(A[300:])
    other = FrequentDirections(6).update(namespace.to_ns(A[:300])).update(namespace.to_ns(A[300:]))
    assert namespace.is_native(other._buffer) and "float64" in str(other._buffer.dtype)
    assert _rel(_sketch_gram(host.rows()), _sketch_gram(other.rows())) < SKETCH_RTOL
    bad = decaying[:20].copy()
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FrequentDirections(6).update(namespace.to_ns(bad))
    with pytest.raises(ValueError, match="features"):
        other.update(namespace.to_ns(decaying[:5, :10]))


def test_fd_merge_moves_to_the_receiver(decaying, namespace):
    a_host = _fed(FrequentDirections(6), decaying[:300], 3)
    b_host = _fed(FrequentDirections(6), decaying[300:], 2)
    a_other = _fed(FrequentDirections(6), namespace.to_ns(decaying[:300]), 3)
    b_other = _fed(FrequentDirections(6), namespace.to_ns(decaying[300:]), 2)
    expected = a_host.merge(b_host)
    for a, b, native in [
        (a_other, b_host, namespace.is_native),
        (a_host, b_other, lambda x: isinstance(x, np.ndarray)),
    ]:
        merged = a.merge(b)
        assert native(merged._buffer)
        assert merged.n_rows_seen == 500
        assert _rel(_sketch_gram(expected.rows()), _sketch_gram(merged.rows())) < SKETCH_RTOL
        np.testing.assert_allclose(merged.total_shrinkage, expected.total_shrinkage, rtol=1e-9)
    assert namespace.is_native(a_other._buffer)  # the inputs are not modified
    # an empty sketch takes the other's placement
    assert namespace.is_native(FrequentDirections(6).merge(b_other)._buffer)


def test_fd_copies_pickles_and_saves_on_the_host(decaying, namespace):
    other = _fed(FrequentDirections(6), namespace.to_ns(decaying), 4)
    state = other.to_state()
    assert isinstance(state["buffer"], np.ndarray)
    restored = FrequentDirections.from_state(state)
    assert _rel(other.rows(), restored.rows()) < 1e-15
    again = pickle.loads(pickle.dumps(other))
    assert namespace.is_native(again._buffer) and again._placement == other._placement
    copy = other.copy()
    copy._extend(namespace.to_ns(decaying[:40]))
    assert other.n_rows_seen == 500 and copy.n_rows_seen == 540


def test_fd_non_finite_rows_are_refused(decaying, namespace):
    bad = decaying[:40].copy()
    bad[17, 3] = np.nan
    sketch = FrequentDirections(6)
    with pytest.raises(ValueError, match="NaN"):
        sketch._extend(namespace.to_ns(bad))  # refused at the shrink that reads its energy
    fresh = FrequentDirections(6)
    fresh._extend(namespace.to_ns(bad[12:20]))  # no shrink yet: refused when the energy is read
    with pytest.raises(ValueError, match="NaN"):
        _ = fresh.squared_norm
