"""The one data path: every kind of input gives the same rows, blocks, samples and reductions."""

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca.source import (
    ArraySource,
    BlockSource,
    ReservoirSampler,
    as_source,
    is_block_iterable,
    is_dask_array,
    uniform_indices,
)


@pytest.fixture
def X():
    return np.random.default_rng(0).standard_normal((1000, 7))


def blocks_of(X, size):
    return [X[i : i + size] for i in range(0, X.shape[0], size)]


def _sum_and_count(blocks):
    total, n, starts = 0.0, 0, []
    for start, block in blocks:
        starts.append(start)
        total = total + np.asarray(block.sum(axis=0)).ravel()
        n += block.shape[0]
    return total, n, starts


def _merge(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def sources(X):
    """The same rows as every kind of input the estimators accept."""
    da = pytest.importorskip("dask.array")
    return {
        "array": as_source(X),
        "memmap-like (float32 view)": as_source(X.astype(np.float32)),
        "list of blocks": as_source(blocks_of(X, 130)),
        "generator": as_source(b for b in blocks_of(X, 77)),
        "dask": as_source(da.from_array(X, chunks=(300, 7))),
    }


def test_kinds_are_recognised(X):
    import dask.array as da

    assert isinstance(as_source(X), ArraySource)
    assert isinstance(as_source(sp.csr_matrix(X), accept_sparse=True), ArraySource)
    assert isinstance(as_source(blocks_of(X, 100)), BlockSource)
    assert isinstance(as_source(iter(blocks_of(X, 100))), BlockSource)
    assert is_dask_array(da.from_array(X)) and not is_dask_array(X)
    assert is_block_iterable([X[:3], X[3:]]) and not is_block_iterable(X)
    assert not is_block_iterable("abc") and not is_block_iterable([])
    src = as_source(X)
    assert as_source(src) is src


def test_same_rows_from_every_kind_of_input(X):
    for name, src in sources(X).items():
        dtype = np.float32 if "float32" in name else np.float64
        rtol = 1e-6 if dtype == np.float32 else 0
        assert src.n_features == 7 and src.dtype == dtype, name
        # the first rows, across block boundaries
        np.testing.assert_allclose(src.head(400), X[:400], rtol=rtol, err_msg=name)
        # a full pass: the statistic of all blocks, with global row offsets
        total, n, starts = src.reduce(_sum_and_count, _merge)
        assert n == 1000 and starts[0] == 0, name
        np.testing.assert_allclose(total, X.sum(axis=0), rtol=1e-5 if rtol else 1e-12, err_msg=name)
        assert src.n_samples == 1000, name


def test_reiterable_and_one_shot(X):
    lst = as_source(blocks_of(X, 100))
    assert lst.reiterable
    first = [start for start, _ in lst.blocks()]
    again = [start for start, _ in lst.blocks()]
    assert first == again == list(range(0, 1000, 100))
    gen = as_source(b for b in blocks_of(X, 100))
    assert not gen.reiterable
    np.testing.assert_array_equal(gen.head(250), X[:250])  # read ahead, kept for the pass
    assert sum(b.shape[0] for _, b in gen.blocks()) == 1000
    with pytest.raises(ValueError, match="one-shot iterator"):
        next(gen.blocks())
    with pytest.raises(ValueError, match="one-shot iterator.*more than once"):
        as_source(iter(blocks_of(X, 100))).require_passes(2, "this method")


def test_array_blocks_sizes(X):
    src = as_source(X)
    assert [b.shape[0] for _, b in src.blocks(300)] == [300, 300, 300, 100]
    ((start, whole),) = list(src.blocks(None))
    assert start == 0 and whole is src.array  # a view, nothing copied


def test_uniform_sample_is_the_same_from_every_input(X):
    ref = X[uniform_indices(1000, 25, np.random.default_rng(3))]
    for name, src in sources(X).items():
        got = src.sample_rows(25, np.random.default_rng(3))
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=name)


def test_take_and_in_memory(X):
    import dask.array as da

    idx = np.array([3, 10, 999])
    for src in (as_source(X), as_source(da.from_array(X, chunks=(300, 7)))):
        np.testing.assert_array_equal(src.take(idx), X[idx])
        np.testing.assert_array_equal(src.in_memory(), X)
    sub = as_source(da.from_array(X, chunks=(300, 7))).in_memory(
        max_rows=100, rng=np.random.default_rng(0)
    )
    np.testing.assert_array_equal(sub, X[uniform_indices(1000, 100, np.random.default_rng(0))])
    with pytest.raises(ValueError, match="needs the data in memory"):
        as_source(blocks_of(X, 100)).in_memory(purpose="this method")
    with pytest.raises(ValueError, match="by index"):
        as_source(blocks_of(X, 100)).take(idx)


def test_map_rows_in_memory_and_lazily(X):
    import dask.array as da

    def double_first_two(rows, factor):
        return factor * rows[:, :2]

    ref = 2 * X[:, :2]
    np.testing.assert_array_equal(
        as_source(X).map_rows(double_first_two, 2.0, n_outputs=2, dtype=np.float64), ref
    )
    lazy = as_source(da.from_array(X, chunks=(300, 7))).map_rows(
        double_first_two, 2.0, n_outputs=2, dtype=np.float64
    )
    assert lazy.chunks[0] == (300, 300, 300, 100)
    np.testing.assert_array_equal(lazy.compute(), ref)


@pytest.mark.parametrize("where", ["array", "blocks", "dask"])
def test_validation_names_the_problem(X, where):
    import dask.array as da

    bad = X.copy()
    bad[412, 3] = np.nan

    def make(A):
        if where == "array":
            return A
        if where == "blocks":
            return blocks_of(A, 100)
        return da.from_array(A, chunks=(300, 7))

    src_or_error = None
    with pytest.raises(ValueError, match="NaN") as info:
        src_or_error = as_source(make(bad))
        src_or_error.reduce(_sum_and_count, _merge)
    if where == "blocks":
        assert "block 4" in str(info.value)
    if where == "dask":
        assert "rows 300 to 599" in str(info.value)
    wrong = [X[:100], X[100:200, :5]]
    with pytest.raises(ValueError, match=r"block 1\) has 5 features.*expecting 7"):
        list(as_source(wrong).blocks())


def test_bad_inputs():
    with pytest.raises(ValueError, match="empty iterable"):
        as_source(iter([]))
    with pytest.raises(ValueError, match="first row block of X is empty"):
        as_source([np.empty((0, 3)), np.ones((2, 3))])
    with pytest.raises(ValueError, match="sparse input is not supported"):
        as_source([sp.csr_matrix(np.eye(3))])
    with pytest.raises(ValueError, match="numeric"):
        as_source([np.array([["a", "b"]])])
    ints = as_source([np.arange(6).reshape(3, 2)])
    assert ints.dtype == np.float64


def test_passes_must_agree():
    class Shrinking:
        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            return iter([np.ones((10 // self.passes, 2))])

    src = as_source(Shrinking())
    list(src.blocks())
    with pytest.raises(ValueError, match="same rows every time"):
        list(src.blocks())


def test_estimator_input_attributes(X):
    import dask.array as da
    from sklearn.base import BaseEstimator

    est = BaseEstimator()
    as_source(blocks_of(X, 100), estimator=est)
    assert est.n_features_in_ == 7
    as_source(da.from_array(X[:, :4]), estimator=est)
    assert est.n_features_in_ == 4
    with pytest.raises(ValueError, match="X has 7 features, but BaseEstimator is expecting 4"):
        as_source(da.from_array(X), estimator=est, reset=False)


def test_reservoir_matches_uniform_indices_on_any_blocking(X):
    for size in (1, 33, 1000):
        res = ReservoirSampler(40, np.random.default_rng(5))
        for block in blocks_of(X, size):
            res.update(block)
        np.testing.assert_array_equal(
            res.indices, uniform_indices(1000, 40, np.random.default_rng(5))
        )
