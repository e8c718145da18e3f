"""Dask arrays: fit by a tree reduction of per-block statistics, transform lazily.

``fit`` of :class:`~fastkpca.RandomFeatureKPCA`, :class:`~fastkpca.NystromKPCA` and
:class:`~fastkpca.StreamingKPCA` accepts a ``dask.array.Array`` (rows in chunks, on one machine or
on a ``distributed`` cluster).  Each of these one-pass estimators is written as

    init (kernel and random draws, from the first rows) -> statistics of a set of row blocks
    -> an associative merge of two statistics -> finalize (a small eigenproblem)

and the in-memory fit is the same pipeline with a single set of blocks (all of them).  On a dask
array, :class:`DaskRowBlocks` computes the statistics of every chunk on the workers and merges
them pairwise up a tree (``split_every`` at a time, as ``dask.array.reduction`` does), so only the
small statistics travel and the result is the in-memory one up to the order of floating-point
sums:

=========================== ============================================ ======================
estimator                   statistic of a chunk                         merge
=========================== ============================================ ======================
``RandomFeatureKPCA``       count, feature sum, shifted feature Gram     sums (exact)
(``solver="exact"``)        ``sum (z - c)(z - c)^T`` (c from the first
                            rows, shared by every chunk)
``RandomFeatureKPCA``       CountSketch ``S Z`` hashed by global row     sums (exact); the
(``solver="countsketch"``)  index, ``S 1``, feature sum; then the        Rayleigh-Ritz pass is
                            Rayleigh-Ritz scatter of ``Z V``             a second reduction
``NystromKPCA``             count, mean, centered scatter of             Chan et al.'s pairwise
                            ``k(L, x)``                                  update (exact)
``StreamingKPCA``           Frequent Directions sketch of the features,  FD merge (the bound
                            feature sum, count                           holds for the union)
=========================== ============================================ ======================

So ``RandomFeatureKPCA`` and ``NystromKPCA`` fitted on a dask array equal the in-memory fit with
the same seed (to round-off), and ``StreamingKPCA`` stays within the Frequent Directions bound
(its sketch depends on how the rows are grouped before merging; with ``sketch_size >=
n_output_features`` nothing is shrunk and it is exact too).

Random draws are made on the client exactly as the in-memory fit makes them: the kernel's
``gamma`` heuristics and the feature map from the first 8192 rows (``X[:8192]``, computed once),
uniform Nystrom landmarks by index (``uniform_indices(n, c, rng)`` then ``X[idx].compute()``, the
rows the in-memory fit picks).  ``landmarks="kmeans"`` and ``"rls"`` need the data in memory:
they run on a uniform subsample of at most :data:`LANDMARK_SUBSAMPLE` rows (all rows, and so the
in-memory result, when the array is no larger).

``transform`` of a dask array returns a lazy dask array (``map_blocks`` over the row chunks, the
fitted model shipped once as one graph key).  :class:`~fastkpca.ExactKPCA` computes a dask array
whose n x n Gram fits comfortably in memory (:func:`check_exact_fits`) and refuses larger ones
with a message that names the scalable methods.

A worker lost mid-fit costs only its chunks' statistics: the scheduler recomputes them elsewhere
(``distributed``'s ``allowed_failures``), and since every statistic is a pure function of its
chunk the result is unchanged.

This module imports dask; :mod:`fastkpca` imports it only when a dask array is passed in
(:func:`fastkpca._utils.is_dask_array` tells one from its type without importing dask).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import dask
import dask.array as da
import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._utils import DEFAULT_BLOCK_ROWS, check_block, is_dask_array

__all__ = [
    "DaskRowBlocks",
    "tree_reduce",
    "resolve_kernel",
    "select_landmarks",
    "transform",
    "check_exact_fits",
    "read_npy",
    "LANDMARK_SUBSAMPLE",
    "EXACT_MEMORY_FRACTION",
    "DEFAULT_SPLIT_EVERY",
]

#: Statistics merged per task on the way up the tree (dask's own reductions default to 8 too;
#: each merge holds ``split_every`` statistics, e.g. m x m Grams, at once).
DEFAULT_SPLIT_EVERY = 8

#: ``landmarks="kmeans"`` / ``"rls"`` on a dask array run on a uniform subsample of this many rows
#: (k-means and the ridge-leverage recursion need random access to the rows).
LANDMARK_SUBSAMPLE = 100_000

#: ExactKPCA computes a dask array only if its n x n Gram (X's dtype) takes at most this fraction
#: of the memory available: the fit holds the Gram, X, and the eigensolver's workspace.
EXACT_MEMORY_FRACTION = 0.25


# ------------------------------------------------------------------------------------------------
# row blocks of a dask array
# ------------------------------------------------------------------------------------------------
def _is_plain(value) -> bool:
    return isinstance(value, int | float | str | bool | type(None))


def _merge_all(merge, *parts):
    """Merge ``parts`` left to right (one task of the tree)."""
    out = parts[0]
    for part in parts[1:]:
        out = merge(out, part)
    return out


def tree_reduce(parts: list, merge: Callable, *, split_every: int = DEFAULT_SPLIT_EVERY):
    """One delayed value merging a list of delayed statistics, ``split_every`` per task.

    ``merge(a, b)`` must be associative (up to round-off) and must not modify its arguments:
    a statistic may be held by the scheduler for a retry, or shared by the threaded scheduler.
    """
    if not parts:
        raise ValueError("nothing to reduce: the array has no row blocks")
    if split_every < 2:
        raise ValueError(f"split_every must be at least 2, got {split_every}")
    merge_all = dask.delayed(_merge_all, pure=True)
    while len(parts) > 1:
        groups = [parts[i : i + split_every] for i in range(0, len(parts), split_every)]
        parts = [merge_all(merge, *group) if len(group) > 1 else group[0] for group in groups]
    return parts[0]


def _chunk_stats(block, offset, n_features, accept_sparse, stats, *args):
    """Statistics of one chunk (on a worker): validate it, then ``stats([(offset, block)])``."""
    stop = offset + block.shape[0]
    block = check_block(
        block,
        n_features=n_features,
        accept_sparse=accept_sparse,
        name=f"X (rows {offset} to {stop - 1})",
    )
    return stats(iter([(offset, block)]), *args)


class DaskRowBlocks:
    """A 2-D dask array seen as row blocks: its first rows, rows by index, chunk reductions.

    The array is rechunked to one chunk across the columns (rows stay as they are chunked) and
    non-float data is cast to float64, as ``validate_data`` does for in-memory input.

    Parameters
    ----------
    X : dask.array.Array, shape (n_samples, n_features)
    accept_sparse : bool
        Whether chunks may be scipy.sparse matrices.
    split_every : int
        Fan-in of the merge tree.

    Notes
    -----
    :meth:`reduce` has the signature of the in-memory passes
    (``reduce(stats, merge, *args) -> statistic``), so an estimator's fit runs the same code on
    both: in memory ``stats`` sees all blocks at once; here it sees one chunk per task and the
    results are merged by :func:`tree_reduce`.
    """

    def __init__(self, X, *, accept_sparse=False, split_every=DEFAULT_SPLIT_EVERY):
        if not is_dask_array(X):
            raise ValueError(f"expected a dask array, got {type(X).__name__}")
        if X.ndim != 2:
            raise ValueError(
                f"Expected a 2-D dask array (n_samples, n_features), got "
                f"{X.ndim}-D with shape {X.shape}"
            )
        if any(np.isnan(s) for s in X.shape):
            raise ValueError(
                "the dask array has unknown chunk sizes (NaN in its shape); call "
                "X.compute_chunk_sizes() first, or build it with known lengths "
                "(e.g. dask.dataframe's to_dask_array(lengths=True))"
            )
        n, d = (int(s) for s in X.shape)
        if n < 1:
            raise ValueError(
                f"Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required."
            )
        if d < 1:
            raise ValueError(
                f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
            )
        if X.dtype.kind not in "fiub":
            raise ValueError(f"X: expected numeric data, got dtype {X.dtype}")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        self.X = X
        self.n_samples, self.n_features = n, d
        self.dtype = X.dtype
        self.accept_sparse = accept_sparse
        self.split_every = split_every

    @property
    def offsets(self) -> list[int]:
        """Global index of each row chunk's first row."""
        return [int(s) for s in np.cumsum((0,) + self.X.chunks[0][:-1])]

    def head(self, n_rows: int = DEFAULT_BLOCK_ROWS):
        """The first ``n_rows`` rows, computed and validated (what the in-memory fit's first block
        is, so kernel heuristics and feature draws match)."""
        block = self.X[:n_rows].compute()
        return check_block(
            block,
            n_features=self.n_features,
            accept_sparse=self.accept_sparse,
            name="X (first rows)",
        )

    def take(self, indices):
        """Rows ``X[indices]`` (sorted indices), computed and validated."""
        idx = np.asarray(indices, dtype=np.int64)
        rows = self.X[idx].compute()
        return check_block(
            rows,
            n_features=self.n_features,
            accept_sparse=self.accept_sparse,
            name="X (sampled rows)",
        )

    def compute(self):
        """The whole array in memory (validated)."""
        return check_block(
            self.X.compute(), n_features=self.n_features, accept_sparse=self.accept_sparse, name="X"
        )

    def reduce_delayed(self, stats: Callable, merge: Callable, *args):
        """Delayed merged statistic; see :meth:`reduce`."""
        args_d = [a if _is_plain(a) else dask.delayed(a, pure=True) for a in args]
        blocks = self.X.to_delayed().ravel()
        parts = [
            dask.delayed(_chunk_stats, pure=True)(
                block, offset, self.n_features, self.accept_sparse, stats, *args_d
            )
            for block, offset in zip(blocks, self.offsets, strict=True)
        ]
        return tree_reduce(parts, merge, split_every=self.split_every)

    def reduce(self, stats: Callable, merge: Callable, *args):
        """``stats`` of every row chunk, merged up a tree, computed.

        Parameters
        ----------
        stats : callable
            ``stats(blocks, *args)`` with ``blocks`` an iterator of ``(start, block)`` pairs
            (``start`` the global index of the block's first row); returns a statistic.
            Runs on the workers, once per chunk.
        merge : callable
            ``merge(a, b)``: associative, not modifying a or b.
        *args
            Passed to ``stats``; arrays and objects become one graph key each, so they are sent
            to a worker once, not once per chunk.
        """
        return self.reduce_delayed(stats, merge, *args).compute()


# ------------------------------------------------------------------------------------------------
# kernel and landmarks on the client, drawn as the in-memory fit draws them
# ------------------------------------------------------------------------------------------------
class _RowsByIndex:
    """What :func:`fastkpca.kernels.resolve_gamma` reads of X for ``gamma=None`` / ``"median"``:
    the shape, and rows by index (gathered from the workers)."""

    def __init__(self, data: DaskRowBlocks):
        self._data = data
        self.shape = (data.n_samples, data.n_features)
        self.dtype = data.dtype

    def __getitem__(self, indices):
        return self._data.take(indices)


def resolve_kernel(estimator, data: DaskRowBlocks, rng=None):
    """Set ``estimator.kernel_`` from its kernel spec on the rows of a dask array.

    The dask counterpart of ``BaseKPCA._resolve_kernel(X, rng)``: it draws the same integer from
    ``rng``, so the median heuristic samples the same rows, and ``gamma="scale"`` takes the
    variance of all entries with a dask reduction instead of ``np.var`` of the array.
    """
    from .kernels import make_kernel

    seed = None if rng is None else int(rng.integers(2**31))
    gamma = estimator.gamma
    if isinstance(gamma, str) and gamma == "scale" and isinstance(estimator.kernel, str):
        var = float(data.X.astype(np.float64).var().compute())
        gamma = 1.0 / (data.n_features * var) if var > 0 else 1.0  # as resolve_gamma("scale")
    estimator.kernel_ = make_kernel(
        estimator.kernel,
        gamma=gamma,
        degree=estimator.degree,
        coef0=estimator.coef0,
        nu=estimator.nu,
        X=_RowsByIndex(data),
        rng=seed,
    )
    return estimator.kernel_


def select_landmarks(
    data: DaskRowBlocks, method: str, n_landmarks: int, kernel, rng, *, target_rank=None
):
    """Landmark rows and weights from a dask array, as ``fastkpca._landmarks.select_landmarks``.

    ``"uniform"`` draws the indices the in-memory selector draws (same ``rng`` calls) and gathers
    those rows; ``"kmeans"`` / ``"rls"`` run the in-memory selector on all rows when there are at
    most :data:`LANDMARK_SUBSAMPLE` (the in-memory result), else on a uniform subsample of that
    many rows.
    """
    from ._landmarks import select_landmarks as select_in_memory
    from ._landmarks import uniform_indices

    n = data.n_samples
    c = min(n_landmarks, n)
    if method == "uniform":
        return data.take(uniform_indices(n, c, rng)), np.full(c, 1.0 / c)
    if n <= LANDMARK_SUBSAMPLE:
        rows = data.compute()
    else:
        rows = data.take(uniform_indices(n, LANDMARK_SUBSAMPLE, rng))
    return select_in_memory(rows, method, c, kernel, rng, target_rank=target_rank)


# ------------------------------------------------------------------------------------------------
# transform
# ------------------------------------------------------------------------------------------------
def _transform_block(block, model, n_components, dtype):
    if block.shape[0] == 0:
        return np.empty((0, n_components), dtype=dtype)
    return model.transform(block)


def transform(estimator, X):
    """``estimator.transform`` over the row chunks of a dask array, lazily.

    Returns a dask array of shape ``(n_samples, n_components_)`` chunked by rows like X (float32
    for float32 X).  A copy of the fitted model is one key of the graph, so refitting the
    estimator later does not change the result, and each worker receives the model once.
    """
    check_is_fitted(estimator)
    data = DaskRowBlocks(X, accept_sparse=getattr(estimator, "_accepts_sparse", False))
    expected = estimator.n_features_in_
    if data.n_features != expected:
        raise ValueError(
            f"X has {data.n_features} features, but {type(estimator).__name__} is "
            f"expecting {expected} features as input."
        )
    k = int(estimator.n_components_)
    dtype = np.dtype(np.float32 if data.dtype == np.float32 else np.float64)
    model = dask.delayed(copy.deepcopy(estimator), pure=True)
    return da.map_blocks(
        _transform_block,
        data.X,
        model,
        k,
        dtype,
        dtype=dtype,
        chunks=(data.X.chunks[0], (k,)),
        meta=np.empty((0, 0), dtype=dtype),
    )


# ------------------------------------------------------------------------------------------------
# ExactKPCA: small arrays only
# ------------------------------------------------------------------------------------------------
def available_memory_bytes() -> int:
    """Memory available to a new allocation on this machine (``MemAvailable``), in bytes."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on this platform
        return 8 * 2**30


def check_exact_fits(X, *, fraction: float = EXACT_MEMORY_FRACTION, available=None) -> None:
    """Raise ValueError unless exact KPCA of the dask array X fits on this machine.

    Exact KPCA holds the n x n Gram in one process; it is accepted when the Gram takes at most
    ``fraction`` of the available memory (the rest is for X, the eigensolver's workspace and
    everything else running).
    """
    n = int(X.shape[0])
    itemsize = 4 if X.dtype == np.float32 else 8
    need = n * n * itemsize
    available = available_memory_bytes() if available is None else available
    if need > fraction * available:
        raise ValueError(
            f"ExactKPCA needs the {n} x {n} Gram matrix ({need / 2**30:.3g} GiB), more than "
            f"{fraction:.0%} of the {available / 2**30:.3g} GiB of memory available here; this "
            "dask array is too large for exact kernel PCA.  Use a scalable method that reduces "
            "the array block by block on the workers: RandomFeatureKPCA, StreamingKPCA or "
            "NystromKPCA."
        )


# ------------------------------------------------------------------------------------------------
# reading a .npy file as a dask array
# ------------------------------------------------------------------------------------------------
def _read_npy_rows(path, offset, dtype, n_columns, start, stop):
    """Rows ``start:stop`` of a C-ordered .npy file, read without a memory map."""
    with open(path, "rb") as f:
        f.seek(offset + start * n_columns * dtype.itemsize)
        out = np.fromfile(f, dtype=dtype, count=(stop - start) * n_columns)
    if out.size != (stop - start) * n_columns:
        raise ValueError(f"{path}: the file is truncated (rows {start} to {stop - 1})")
    return out.reshape(stop - start, n_columns)


def read_npy(path, *, chunk_rows: int = 100_000):
    """A 2-D ``.npy`` file as a dask array of row chunks, each read by the task that needs it.

    ``dask.array.from_array(numpy.load(path, mmap_mode="r"))`` would pickle the memory map, i.e.
    the whole file, into the graph when a distributed scheduler ships it to the workers; here each
    chunk is a task that opens the file and reads its rows (every worker must see the file at the
    same path: a local disk for a LocalCluster, shared storage on a cluster).
    """
    path = os.fspath(path)
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if arr.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D array, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{path}: a Fortran-ordered array cannot be read by rows")
    n, d = arr.shape
    dtype, offset = arr.dtype, int(arr.offset)
    del arr
    chunk_rows = max(1, int(chunk_rows))
    read = dask.delayed(_read_npy_rows, pure=True)
    blocks = [
        da.from_delayed(
            read(path, offset, dtype, d, s, min(s + chunk_rows, n)),
            shape=(min(s + chunk_rows, n) - s, d),
            dtype=dtype,
        )
        for s in range(0, n, chunk_rows)
    ]
    return da.concatenate(blocks, axis=0)
