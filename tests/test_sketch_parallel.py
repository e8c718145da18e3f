"""Frequent Directions at BLAS speed: shrink batches and parallel sketches keep FD's guarantees.

The batch (rows added between two shrinks) and the split of the rows between the
``sketch_count`` sketches merged at the end change the sketch, never its guarantee
``0 <= A^T A - B^T B``, ``||A^T A - B^T B||_2 <= ||A - A_k||_F^2 / (ell + 1 - k)``: these tests
check it on data against an SVD of the whole matrix, and that results do not depend on the
blocking or on the number of threads.
"""

import numpy as np
import pytest

from fastkpca import RandomFeatureKPCA, StreamingKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.execution import using_n_jobs
from fastkpca.sketch import FrequentDirections, default_batch_size
from fastkpca.statistics.feature_sketch import (
    MAX_SKETCHES,
    SPLIT_ROWS,
    FeatureSketch,
    sketch_count,
)

# Round-off slack, as in test_sketch.py: float64 Grams of the buffers give absolute errors of
# order eps ||A||_F^2 per shrink; 1e-10 ||A||_F^2 is far above that, far below the bounds.
ROUND = 1e-10


def _stream(rng, n=5000, m=40, r=6):
    """Low rank plus noise, with a norm trend: a stream whose halves differ."""
    A = rng.standard_normal((n, r)) @ rng.standard_normal((r, m))
    A += 0.3 * rng.standard_normal((n, m))
    return A * np.linspace(0.5, 2.0, n)[:, None]


def _tails(A):
    s2 = np.linalg.svd(A, compute_uv=False) ** 2
    return np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])


def _fd_error(A, B, ell):
    """||A^T A - B^T B||_2 after checking 0 <= A^T A - B^T B <= tail_k / (ell + 1 - k)."""
    D = A.T @ A - B.T @ B
    w = np.linalg.eigvalsh((D + D.T) / 2)
    fro2 = float(np.sum(A * A))
    assert w[0] >= -ROUND * fro2, "B^T B must never exceed A^T A"
    tail = _tails(A)
    for k in range(ell):
        assert w[-1] <= tail[k] / (ell + 1 - k) + ROUND * fro2
    return w[-1]


def _gram(fd):
    R = fd.rows()
    return R.T @ R


@pytest.mark.parametrize("batch", [1, 3, 6, 30, 200])
def test_fd_bound_holds_for_any_batch(rng, batch):
    A = _stream(rng, n=1500)
    ell = 6
    fd = FrequentDirections(ell, batch_size=batch).update(A)
    assert fd._buffer.shape == (ell + min(batch, A.shape[1]), A.shape[1])
    _fd_error(A, fd.sketch(), ell)
    # the buffer too (what StreamingKPCA reads): its loss alone is below total_shrinkage
    err = np.linalg.eigvalsh(A.T @ A - _gram(fd))[-1]
    assert err <= fd.total_shrinkage * (1 + 1e-9) + ROUND * np.sum(A * A)


def test_default_batch_and_state(rng):
    fd = FrequentDirections(20, 100)
    assert fd.batch_size == default_batch_size(20) == 40 and fd._buffer.shape == (60, 100)
    fd.update(rng.standard_normal((250, 100)))
    back = FrequentDirections.from_state(fd.to_state())
    assert back.batch_size == 40 and back._buffer.shape == fd._buffer.shape
    np.testing.assert_allclose(back.rows(), fd.rows(), rtol=0, atol=0)  # a copy, same path
    # a state written before batch_size existed had a 2 ell buffer
    paper = FrequentDirections(20, 100, batch_size=20).update(rng.standard_normal((250, 100)))
    old = {k: v for k, v in paper.to_state().items() if k != "batch_size"}
    assert FrequentDirections.from_state(old).batch_size == 20
    with pytest.raises(ValueError, match="buffer"):  # 50 buffered rows do not fit 2 ell
        FrequentDirections.from_state({k: v for k, v in fd.to_state().items() if k != "batch_size"})
    with pytest.raises(ValueError, match="batch_size"):
        FrequentDirections(5, batch_size=0)


def test_fd_refuses_non_finite_rows_from_internal_updates(rng):
    fd = FrequentDirections(4, 6)
    bad = rng.standard_normal((10, 6))
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fd._extend(bad)


def _split_sketch(Z, ell, block):
    stat = FeatureSketch.empty(ell, Z.shape[1])
    for s in range(0, Z.shape[0], block):
        stat.update(Z[s : s + block])
    return stat


def test_rows_are_dealt_by_index(rng):
    Z = _stream(rng, n=5000)
    stat = _split_sketch(Z, 8, 700)
    assert len(stat.parts) == sketch_count(8, 40) == MAX_SKETCHES
    owner = (np.arange(5000) // SPLIT_ROWS) % MAX_SKETCHES
    for j, part in enumerate(stat.parts):
        if not np.any(owner == j):
            assert part is None  # a sketch that gets no rows is never allocated
            continue
        assert part.n_rows_seen == np.sum(owner == j)
        # each part sketches exactly its rows: its exact energy is theirs
        np.testing.assert_allclose(part.squared_norm, np.sum(Z[owner == j] ** 2), rtol=1e-12)
    assert stat.sketch.n_rows_seen == stat.n == 5000
    np.testing.assert_allclose(stat.feature_sum, Z.sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize("ell", [4, 10])
def test_split_sketch_keeps_the_fd_bound_and_agrees_with_one_sketch(rng, ell):
    Z = _stream(rng)
    split = _split_sketch(Z, ell, 1000).sketch
    single = FrequentDirections(ell).update(Z)
    assert split.total_shrinkage > 0 and single.total_shrinkage > 0
    _fd_error(Z, split.sketch(), ell)
    _fd_error(Z, single.sketch(), ell)
    # Both losses lie in [0, tail_k / (ell + 1 - k)], so the two sketches' Grams differ by at
    # most that bound (the best k), whatever the split did.
    tail = _tails(Z)
    bound = min(tail[k] / (ell + 1 - k) for k in range(ell))
    diff = split.sketch().T @ split.sketch() - single.sketch().T @ single.sketch()
    assert np.linalg.norm(diff, 2) <= bound * (1 + 1e-9)
    # and the merge carries the exact energy and the tracked loss within [0, shrinkage]
    np.testing.assert_allclose(split.squared_norm, np.sum(Z * Z), rtol=1e-12)
    _, H, rho = split.loss_model()
    assert 0 <= rho <= split.total_shrinkage
    assert np.linalg.eigvalsh(H).max() <= split.total_shrinkage * (1 + 1e-9)


def test_split_independent_of_blocking_and_threads(rng):
    Z = _stream(rng, n=4500)
    a = _split_sketch(Z, 6, 8192).sketch
    b = _split_sketch(Z, 6, 333).sketch
    with using_n_jobs(1):  # no thread pool
        c = _split_sketch(Z, 6, 1000).sketch
    # The same rows reach each sketch at the same counts, so the shrinks are the same
    # computations (bitwise equal on one machine; compared with round-off room).
    for other in (b, c):
        assert other.n_rows_seen == a.n_rows_seen
        np.testing.assert_allclose(_gram(other), _gram(a), rtol=0, atol=1e-12 * np.sum(Z * Z))
        np.testing.assert_allclose(other.total_shrinkage, a.total_shrinkage, rtol=1e-12)


def test_streaming_partial_fit_equals_fit_across_parallel_sketches():
    X = make_random_noisy(3000, 20, signal_dim=5, random_state=0)
    params = dict(gamma=1 / 40, n_random_features=100, sketch_size=8, random_state=5)
    full = StreamingKPCA(3, **params).fit(X)
    part = StreamingKPCA(3, **params)
    for s in range(0, 3000, 700):
        part.partial_fit(X[s : s + 700])
    assert full.n_samples_seen_ == part.n_samples_seen_ == 3000
    used = [p for p in full._sketch_parts[0] if p is not None]
    assert len(used) == 3 and all(p.n_rows_seen for p in used)  # a sketch per 1024-row run
    # Same rows at the same counts in each sketch: only the round-off of computing features
    # on blocks of other shapes differs.  The Fourier features are computed in float32 around
    # each chunk's own mean (features.py), so blocks of other shapes round differently by
    # ~eps32 = 6e-8 relative per feature (measured 1.5e-9 of the largest Gram entry here).
    G1, G2 = _gram(part.sketch_), _gram(full.sketch_)
    assert np.max(np.abs(G1 - G2)) <= 1e-6 * np.max(np.abs(G2))
    np.testing.assert_allclose(part.eigenvalues_, full.eigenvalues_, rtol=1e-5)


def test_streaming_bounds_bracket_exact_solver_with_parallel_sketches():
    X = make_random_noisy(5000, 20, signal_dim=5, random_state=1)
    params = dict(gamma=1 / 40, n_random_features=150, features="rff", random_state=2)
    exact = RandomFeatureKPCA(5, solver="exact", **params).fit(X)
    model = StreamingKPCA(5, sketch_size=10, **params).fit(X)
    assert model.sketch_.total_shrinkage > 0
    lower, upper = model.eigenvalue_bounds_
    # Weyl's inequalities (skpca_eigen); slack: eigensolver round-off on the two paths.
    slack = 1e-9 * exact.eigenvalues_[0]
    assert np.all(lower <= exact.eigenvalues_ + slack)
    assert np.all(exact.eigenvalues_ <= upper + slack)
    assert np.all(lower <= model.eigenvalues_) and np.all(model.eigenvalues_ <= upper)


def test_loaded_model_continues_from_merged_sketch(tmp_path):
    from fastkpca.io import load_model, save_model

    X = make_random_noisy(4000, 20, signal_dim=5, random_state=0)
    params = dict(gamma=1 / 40, n_random_features=80, sketch_size=8, random_state=5)
    model = StreamingKPCA(3, **params).partial_fit(X[:2500])
    save_model(model, tmp_path / "m.npz")
    loaded = load_model(tmp_path / "m.npz").partial_fit(X[2500:])
    full = StreamingKPCA(3, **params).fit(X)
    assert loaded.n_samples_seen_ == 4000
    # another merge order: not the same sketch, the same guarantee on the features
    Z = full.feature_map_(X)
    for m in (loaded, full):
        _fd_error(Z, m.sketch_.sketch(), 8)


def _update_in_child(queue):
    stat = _split_sketch(_stream(np.random.default_rng(0), n=2500), 4, 2500)
    queue.put(stat.sketch.n_rows_seen)


def test_thread_pool_works_in_a_forked_child():
    # The pool exists in the parent; a forked child inherits the object but not its threads.
    import multiprocessing as mp

    _split_sketch(_stream(np.random.default_rng(0), n=2500), 4, 2500)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_update_in_child, args=(queue,))
    child.start()
    assert queue.get(timeout=120) == 2500
    child.join(timeout=60)
    assert child.exitcode == 0


@pytest.mark.parametrize("features", ["rff", "fastfood"])
def test_update_rows_sketches_the_features_computed_in_each_sketch_thread(rng, features):
    # FeatureSketch.update_rows(X, fmap) (each sketch computes the features of its own rows, in
    # its thread) deals the same rows to the same sketches as update(fmap(X)), whatever the
    # blocking; the features agree to float32 rounding (chunks cut at other rows), so the
    # sketches agree to that rounding amplified by the shrinks: relative 1e-5.
    from fastkpca.features import draw_feature_map
    from fastkpca.kernels import RBF

    X = rng.standard_normal((5000, 12))
    fmap = draw_feature_map(features, RBF(0.1), 80, 12, np.random.default_rng(1))
    Z = fmap(X).astype(np.float64)
    ref = FeatureSketch.empty(6, 80).update(Z)
    for block in (5000, 777):
        got = FeatureSketch.empty(6, 80)
        for start in range(0, 5000, block):
            got.update_rows(X[start : start + block], fmap)
        assert got.n == 5000
        for a, b in zip(got.parts, ref.parts, strict=True):
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert a.n_rows_seen == b.n_rows_seen
            np.testing.assert_allclose(a.squared_norm, b.squared_norm, rtol=1e-6)
        np.testing.assert_allclose(got.feature_sum, ref.feature_sum, rtol=0, atol=1e-4)
        gram, gram_ref = _gram(got.sketch), _gram(ref.sketch)
        assert np.abs(gram - gram_ref).max() <= 1e-5 * np.abs(gram_ref).max()
