"""Kernel objects: chunked Gram blocks, diagonals and spectral samplers.

Every kernel follows scikit-learn's parametrisation (``sklearn.metrics.pairwise``) so that
results compare one to one with ``KernelPCA``:

========== ====================================================== =================
name       k(x, y)                                                spectral density
========== ====================================================== =================
rbf        exp(-gamma ||x - y||_2^2)                              N(0, 2 gamma I)
laplacian  exp(-gamma ||x - y||_1)                                Cauchy(0, gamma)^d
matern     Matern(nu) with length scale l = 1 / sqrt(2 gamma)     Student-t, 2 nu dof
polynomial (gamma <x, y> + coef0)^degree                          (not shift-invariant)
linear     <x, y>
cosine     <x, y> / (||x|| ||y||)
sigmoid    tanh(gamma <x, y> + coef0)                             (not PSD in general)
========== ====================================================== =================

The Matern length scale is chosen so that Matern(gamma, nu -> inf) tends to RBF(gamma), and
Matern(gamma, nu) equals ``sklearn.gaussian_process.kernels.Matern(length_scale=l, nu=nu)``.

Gram blocks are computed in row chunks whose size comes from a memory budget
(:data:`WORKING_MEMORY_MB`); :meth:`Kernel.blocks` and :meth:`Kernel.fold_rows` fill them on all
cores, in chunks of about 1 MiB that stay in cache (numpy's ``exp`` runs on one core).
float32 input gives float32 output, but squared distances are accumulated in float64: ``|x|^2 +
|y|^2 - 2 x.y`` cancels catastrophically in float32 for nearby points (the same reason
``sklearn.metrics.pairwise.euclidean_distances`` upcasts).

Device arrays (PyTorch tensors, CuPy arrays) are computed on their device: ``__call__``,
``blocks``, ``fold_rows`` and ``diag`` hand them to :mod:`fastkpca.execution.tiles`, which calls
each kernel's :meth:`Kernel.prepare_tile` / :meth:`Kernel.tile` / :meth:`Kernel.diag_xp` (written
with the arrays' namespace) on large tiles; host arrays take the threaded numpy path above,
unchanged.  float32 tiles where the host uses float32 blocks (``dtype=np.float32``: rbf from a
float32 GEMM, the others rounded from float64), float64 otherwise.
"""

from __future__ import annotations

import copy
import numbers
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy import special

from ._utils import as_generator
from .execution import map_row_chunks, tiles, worker_index
from .execution.arrays import is_host_array, placement_of, to_host

__all__ = [
    "Kernel",
    "RBF",
    "Laplacian",
    "Matern",
    "Polynomial",
    "Linear",
    "Cosine",
    "Sigmoid",
    "make_kernel",
    "resolve_gamma",
    "KERNELS",
    "DegenerateKernelWarning",
    "warn_if_degenerate",
]

#: Memory budget (in MiB) for one Gram row chunk and its float64 temporaries.
WORKING_MEMORY_MB = 256

#: Bound on ``|K32 - K64|`` of an rbf block computed in float32 (``Kernel.blocks(dtype=float32)``):
#: the exponent's rounding (:meth:`RBF._block32`) times the kernel value, plus float32's own
#: rounding of the value.  It holds for any rows when the landmarks' spread ``gamma |y -
#: centre|^2`` is at most :data:`FLOAT32_MAX_SPREAD` (wider landmarks get float64 blocks,
#: rounded); tested in tests/test_kernels_float32.py.
FLOAT32_BLOCK_ATOL = 1e-5

#: Largest ``gamma |y - centre|^2`` of the columns' rows (the landmarks) for which rbf blocks are
#: computed in float32 (see :meth:`RBF._block32` for why only the columns' spread matters).
FLOAT32_MAX_SPREAD = 10.0

#: Bytes of one row chunk of the threaded kernel rows (:meth:`Kernel.fold_rows`): about 1 MiB,
#: so that a chunk stays in cache from its GEMM through ``exp`` to the caller's products.
KERNEL_CHUNK_BYTES = 2**20

#: The fewest rows per chunk (thinner GEMMs lose efficiency; c > 8192 columns then exceed 1 MiB).
KERNEL_CHUNK_MIN_ROWS = 32


def chunk_rows(
    n_cols: int,
    *,
    itemsize: int = 8,
    n_temporaries: int = 3,
    working_memory_mb: float | None = None,
) -> int:
    """Number of rows of an ``(rows, n_cols)`` block that fits the working-memory budget."""
    budget = (working_memory_mb or WORKING_MEMORY_MB) * 2**20
    per_row = max(1, n_cols) * itemsize * n_temporaries
    return int(max(1, budget // per_row))


def kernel_chunk_rows(n_cols: int, itemsize: int) -> int:
    """Rows per chunk of the threaded kernel rows: :data:`KERNEL_CHUNK_BYTES` of ``n_cols``
    values (256 rows of 1000 float32 values), at least :data:`KERNEL_CHUNK_MIN_ROWS`."""
    return max(KERNEL_CHUNK_MIN_ROWS, KERNEL_CHUNK_BYTES // (max(1, n_cols) * itemsize))


def _as_float64(X):
    if sp.issparse(X):
        return X.astype(np.float64)
    return np.asarray(X, dtype=np.float64)


def _row_sq_norms(X) -> np.ndarray:
    """Squared Euclidean row norms in float64 (dense or sparse)."""
    if sp.issparse(X):
        X = X.tocsr()
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def _dot(A, B):
    """A @ B.T for dense or sparse operands, returned dense."""
    out = A @ B.T
    if sp.issparse(out):
        out = out.toarray()
    return np.asarray(out)


def squared_euclidean(X, Y, X_sq=None, Y_sq=None) -> np.ndarray:
    """Squared Euclidean distances between rows of X and Y, computed in float64, clipped at 0."""
    Xd, Yd = _as_float64(X), _as_float64(Y)
    X_sq = _row_sq_norms(Xd) if X_sq is None else X_sq
    Y_sq = _row_sq_norms(Yd) if Y_sq is None else Y_sq
    if not (np.all(np.isfinite(X_sq)) and np.all(np.isfinite(Y_sq))):
        # ||x||^2 beyond 1.8e308 (entries above ~1e154): x.y overflows too, and the distances
        # would come out inf - inf = nan, i.e. a silent all-zero or nan Gram.
        raise ValueError(
            "X has values too large for the kernel: squared distances overflow float64"
        )
    D = _dot(Xd, Yd)
    D *= -2.0
    D += X_sq[:, None]
    D += Y_sq[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def _check_finite_block(K) -> np.ndarray:
    """Raise a ValueError if a Gram block has inf or nan (overflow of the kernel's arithmetic)."""
    if not np.all(np.isfinite(K)):
        raise ValueError(
            "X has values too large for the kernel: kernel values overflow float64 "
            "(scale the data or lower gamma)"
        )
    return K


def manhattan(X, Y) -> np.ndarray:
    """L1 distances between rows of X and Y in float64, chunked over the feature axis."""
    if sp.issparse(X) or sp.issparse(Y):
        from sklearn.metrics.pairwise import manhattan_distances

        return manhattan_distances(_as_float64(X), _as_float64(Y))
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    D = np.zeros((X.shape[0], Y.shape[0]))
    for j in range(X.shape[1]):
        D += np.abs(X[:, j, None] - Y[None, :, j])
    return D


class Kernel:
    """Base class: a positive-definite kernel evaluated in row chunks.

    Subclasses implement :meth:`_block` (the Gram block of two small row sets, in float64) and
    :meth:`diag`; shift-invariant kernels also implement :meth:`sample_frequencies`.
    """

    name: str = "kernel"
    shift_invariant: bool = False
    #: Whether every value is >= 0 (then small row sums mean small entries: see
    #: :func:`warn_if_degenerate`).
    nonnegative: bool = False

    # --- public API ---------------------------------------------------------------------------
    def __call__(self, X, Y=None, *, out=None, working_memory_mb=None) -> np.ndarray:
        """Gram matrix ``K[i, j] = k(X[i], Y[j])`` (Y defaults to X), filled row chunk by chunk.

        The result has X's floating dtype (float32 stays float32); ``out`` may be a preallocated
        array of shape ``(len(X), len(Y))`` to write into.
        """
        if _on_device(X, Y):
            return self._device_call(X, Y, out)
        Y_is_X = Y is None
        Y = X if Y is None else Y
        dtype = result_dtype(X, Y)
        n, m = X.shape[0], Y.shape[0]
        if out is None:
            out = np.empty((n, m), dtype=dtype)
        elif out.shape != (n, m):
            raise ValueError(f"out has shape {out.shape}, expected {(n, m)}")
        ctx = self._prepare(Y)
        for start, stop in self.iter_chunks(n, m, working_memory_mb=working_memory_mb):
            out[start:stop] = _check_finite_block(self._block(X[start:stop], Y, ctx))
        if Y_is_X and self._exact_diag_one:
            np.fill_diagonal(out, 1.0)
        return out

    def blocks(
        self, X, Y=None, *, working_memory_mb=None, dtype=None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(start, stop, K[start:stop])`` row blocks of the Gram matrix, in float64.

        ``dtype=np.float32`` yields float32 blocks instead (whatever X's dtype), for callers
        whose own error dwarfs float32 rounding: the rbf kernel then computes them in float32
        (:meth:`RBF._block32`, about twice as fast; entries within :data:`FLOAT32_BLOCK_ATOL`
        of the float64 ones), the other kernels in float64, rounded.  Each block is filled in
        small row chunks on all cores, as :meth:`fold_rows` computes them.
        """
        if _on_device(X, Y):
            X, Y = _same_placement(X, X if Y is None else Y)
            yield from tiles.kernel_tiles(self, X, Y, dtype=_tile_dtype(dtype) or "float64")
            return
        Y = X if Y is None else Y
        low = _is_float32(dtype)
        ctx = self._prepare32(Y) if low else self._prepare(Y)
        out_dtype = np.float32 if low else np.float64
        for start, stop in self.iter_chunks(
            X.shape[0], Y.shape[0], working_memory_mb=working_memory_mb
        ):
            out = np.empty((stop - start, Y.shape[0]), dtype=out_dtype)
            Xb = X[start:stop]
            if not self.parallel_safe:
                self._chunk(Xb, Y, ctx, low, out)
            else:

                def fill(s, e, out=out, Xb=Xb):
                    self._chunk(Xb[s:e], Y, ctx, low, out[s:e])

                map_row_chunks(
                    stop - start, fill, chunk_rows=kernel_chunk_rows(Y.shape[0], out.itemsize)
                )
            yield start, stop, out

    def fold_rows(self, X, Y, step: Callable, init: Callable, *, dtype=None) -> list:
        """Fold ``step(state, start, stop, K)`` over small row chunks of ``K = k(X, Y)`` in threads.

        The rows are split into chunks of :func:`kernel_chunk_rows` rows (about 1 MiB), and the
        chunks into one contiguous share per worker thread, each run with BLAS held to one
        thread (:func:`fastkpca.execution.map_row_chunks`).  A thread computes its chunks into
        one buffer of its own and hands each to ``step`` with the state ``init()`` made for its
        share, while the chunk is still in cache: numpy's ``exp`` and element-wise steps run on
        one core, so threads over chunks make every step parallel, and a chunk's GEMM and the
        caller's products on it never go through main memory.  ``K`` is overwritten by the next
        chunk after ``step`` returns (``step`` may modify it).  Kernels that are not
        :attr:`parallel_safe` run in the calling thread, in blocks of the memory budget.

        Parameters
        ----------
        X, Y : arrays (X may be sparse)
        step : callable ``step(state, start, stop, K)``, called from the worker threads; it may
            write to shared arrays only at its own rows ``start:stop``, and must not start
            threaded work of its own (the caller holds the BLAS limit's lock meanwhile)
        init : callable returning a new state
        dtype : None or np.float32, as for :meth:`blocks`

        Returns
        -------
        list of the shares' states in row order: merged in that order they give the same result
        run after run (the shares depend only on the row count and the number of threads,
        :func:`fastkpca.execution.n_workers`; the chunks, and so every ``step`` call, on the row
        count alone).  Device rows (PyTorch, CuPy) are folded over large tiles on their device
        instead (:func:`fastkpca.execution.tiles.fold_kernel_rows`): one state, K in ``dtype``
        (float64 by default).
        """
        if _on_device(X, Y):
            X, Y = _same_placement(X, Y)
            return tiles.fold_kernel_rows(
                self, X, Y, step, init, dtype=_tile_dtype(dtype) or "float64"
            )
        low = _is_float32(dtype)
        ctx = self._prepare32(Y) if low else self._prepare(Y)
        out_dtype = np.float32 if low else np.float64
        n, m = X.shape[0], Y.shape[0]
        if not self.parallel_safe:
            state = init()
            for start, stop in self.iter_chunks(n, m):
                K = np.empty((stop - start, m), dtype=out_dtype)
                self._chunk(X[start:stop], Y, ctx, low, K)
                step(state, start, stop, K)
                del K  # free this block before the next one is computed
            return [state]
        rows = kernel_chunk_rows(m, np.dtype(out_dtype).itemsize)
        states: dict[int, Any] = {}
        buffers: dict[int, np.ndarray] = {}

        def chunk(start, stop):
            worker = worker_index()  # worker i runs the i-th contiguous share of the rows
            if worker not in states:
                states[worker] = init()
                buffers[worker] = np.empty((rows, m), dtype=out_dtype)
            K = buffers[worker][: stop - start]
            self._chunk(X[start:stop], Y, ctx, low, K)
            step(states[worker], start, stop, K)

        map_row_chunks(n, chunk, chunk_rows=rows)
        return [states[i] for i in sorted(states)] or [init()]

    @staticmethod
    def iter_chunks(n_rows, n_cols, *, working_memory_mb=None):
        step = chunk_rows(n_cols, working_memory_mb=working_memory_mb)
        for start in range(0, n_rows, step):
            yield start, min(n_rows, start + step)

    def diag(self, X) -> np.ndarray:
        """The diagonal ``k(x_i, x_i)`` as a vector of X's floating dtype (device rows: on
        their device, :meth:`Kernel.diag_xp`)."""
        raise NotImplementedError

    # --- device tiles ---------------------------------------------------------------------------
    #: Whether :meth:`tile` computes on the device, in the arrays' namespace.  False (a user's
    #: kernel, a Matern of general nu): a device tile is the host block of host copies, moved
    #: (:func:`fastkpca.execution.tiles.kernel_tile`): correct, but slow.
    device_native = False

    def prepare_tile(self, Y, dtype):
        """What :meth:`tile` needs of the columns' rows Y (a device array), computed once for
        all row tiles; ``dtype`` (``"float32"`` or ``"float64"``) is the tiles' dtype."""
        return _TileContext(Y, _tile_dtype(dtype) or "float64")

    def tile(self, X, ctx):
        """``k(X, Y)`` for device rows X and the columns of ``ctx`` (:meth:`prepare_tile`): an
        array of X's namespace and device, in ``ctx.dtype``."""
        raise NotImplementedError

    def diag_xp(self, X):
        """:meth:`diag` of device rows, on their device, in X's floating dtype (a kernel without
        device math: its host diagonal, moved)."""
        placement = placement_of(X)
        return placement.asarray(self.diag(to_host(X)))

    def _device_call(self, X, Y, out):
        """:meth:`__call__` of device arrays: the tiles of X's floating dtype, in one array."""
        Y_is_X = Y is None
        X, Y = _same_placement(X, X if Y is None else Y)
        placement = placement_of(X)
        dtype = "float32" if result_dtype(X, Y) == np.float32 else "float64"
        shape = (X.shape[0], Y.shape[0])
        if out is None:
            out = placement.xp.empty(shape, dtype=placement.dtype(dtype), device=placement.device)
        elif tuple(out.shape) != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected {shape}")
        for start, stop, K in tiles.kernel_tiles(self, X, Y, dtype=dtype):
            out[start:stop, ...] = _check_finite_tile(K)
        if Y_is_X and self._exact_diag_one:
            out = tiles.fill_diagonal_(out, 1.0)
        return out

    def sample_frequencies(self, n_features: int, dim: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n_features`` frequencies in R^dim from the kernel's spectral density.

        Returns a float64 array of shape ``(n_features, dim)``; by Bochner's theorem
        ``k(x - y) = E_w[cos(w . (x - y))]`` for w drawn from it.
        """
        raise ValueError(
            f"the {self.name!r} kernel is not shift-invariant, so it has no spectral density to "
            "sample random Fourier features from; use kernel='rbf', 'laplacian' or 'matern'"
        )

    def get_params(self, deep: bool = True) -> dict:
        """The kernel's numeric parameters (JSON-serialisable), by constructor argument name.

        ``deep`` is scikit-learn's (a kernel holds no estimators): with it, ``sklearn.base.
        clone`` copies an estimator whose ``kernel`` is a Kernel object, as ``GridSearchCV``
        and ``cross_val_score`` do.
        """
        return {}

    def set_params(self, **params) -> Kernel:
        """Set parameters by name (scikit-learn's nested ``kernel__gamma=...``), checked as
        the constructor checks them; ValueError for a name the kernel does not have.  A fitted
        estimator keeps its own copy of the kernel (``kernel_``), which this does not change."""
        current = self.get_params()
        unknown = sorted(set(params) - set(current))
        if unknown:
            raise ValueError(
                f"invalid parameter(s) {unknown} for {type(self).__name__}; valid: "
                f"{sorted(current)}"
            )
        checked = type(self)(**{**current, **params})  # the constructor's checks
        self.__dict__.update(checked.__dict__)
        return self

    def to_config(self) -> dict:
        """A JSON-serialisable description; ``make_kernel(**config)`` rebuilds the kernel."""
        return {"kernel": self.name, **self.get_params()}

    #: Whether :meth:`Kernel.blocks` and :meth:`Kernel.fold_rows` may call ``_block`` from
    #: several threads at once: True for the kernels of this module (numpy / scipy ufuncs only),
    #: False by default (e.g. user callables, which run in the calling thread).
    parallel_safe = False

    # --- internals ----------------------------------------------------------------------------
    _exact_diag_one = False

    def _prepare(self, Y):
        return None

    def _block(self, Xc, Y, ctx) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _prepare32(self, Y):
        return self._prepare(Y)

    def _block32(self, Xc, Y, ctx, out) -> None:
        """Write the float32 block into ``out``: here the float64 block, rounded."""
        out[...] = _check_finite_block(self._block(Xc, Y, ctx))

    def _chunk(self, Xc, Y, ctx, low, out) -> None:
        """Write the block ``k(Xc, Y)`` into ``out``: float32 (``_block32``) or float64."""
        if low:
            self._block32(Xc, Y, ctx, out)
        else:
            out[...] = _check_finite_block(self._block(Xc, Y, ctx))

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.get_params().items()))))


def _is_float32(dtype) -> bool:
    return dtype is not None and _tile_dtype(dtype) == "float32"


def result_dtype(X, Y=None):
    """float32 if every input is float32 (numpy's or a device library's), else float64."""
    dts = [getattr(X, "dtype", np.float64)]
    if Y is not None:
        dts.append(getattr(Y, "dtype", np.float64))
    return np.float32 if all(_tile_dtype(d) == "float32" for d in dts) else np.float64


# --- device tiles: helpers ------------------------------------------------------------------------
def _tile_dtype(dtype) -> str | None:
    """``"float32"`` or ``"float64"`` for a numpy, torch or CuPy float dtype or its name (None
    stays None); anything not float32 is float64, as the host blocks."""
    if dtype is None:
        return None
    try:
        name = np.dtype(dtype).name
    except TypeError:  # a torch dtype (``torch.float32``)
        name = str(dtype).rsplit(".", 1)[-1]
    return "float32" if name == "float32" else "float64"


def _on_device(X, Y=None) -> bool:
    """Whether X or Y is a device array (then the kernel runs on the device's tiles)."""
    return not is_host_array(X) or (Y is not None and not is_host_array(Y))


def _same_placement(X, Y):
    """X and Y on one device: host rows (a model's, say) moved to the other's device."""
    if is_host_array(X):
        X = placement_of(Y).asarray(X.toarray() if sp.issparse(X) else np.asarray(X))
    elif is_host_array(Y):
        Y = placement_of(X).asarray(Y.toarray() if sp.issparse(Y) else np.asarray(Y))
    return X, Y


def _f64(X):
    """X in float64 (itself when it is)."""
    placement = placement_of(X)
    if _tile_dtype(X.dtype) == "float64":
        return X
    return placement.xp.astype(X, placement.xp.float64)


def _cast(K, dtype: str):
    """K in the tile dtype ``dtype`` (itself when it is)."""
    if _tile_dtype(K.dtype) == dtype:
        return K
    xp = placement_of(K).xp
    return xp.astype(K, getattr(xp, dtype))


def _float_like(X) -> str:
    return "float32" if _tile_dtype(X.dtype) == "float32" else "float64"


def _check_finite_rows(values) -> float:
    """The largest of per-row values (a squared norm, an L1 norm) of device rows; ValueError if
    one is not finite: the tile would be nan or overflow, as the host's blocks check.  One scalar
    read (a synchronisation) per tile."""
    if values.shape[0] == 0:
        return 0.0
    top = float(placement_of(values).xp.max(values))
    if not np.isfinite(top):
        raise ValueError(
            "X has values too large for the kernel: squared distances overflow float64"
        )
    return top


def _check_finite_tile(K):
    """K, or a ValueError when it has inf or nan (as :func:`_check_finite_block`)."""
    xp = placement_of(K).xp
    if K.shape[0] and not bool(xp.all(xp.isfinite(K))):
        raise ValueError(
            "X has values too large for the kernel: kernel values overflow float64 "
            "(scale the data or lower gamma)"
        )
    return K


def _transpose(A):
    return placement_of(A).xp.permute_dims(A, (1, 0))


class _TileContext:
    """The columns' rows of a kernel's device tiles and what is prepared from them once."""

    #: The axis along which each prepared array runs over the columns (see :meth:`columns`).
    COLUMN_AXES = {"Y": 0, "Y64": 0, "sq": 0, "B": 1, "B64": 1, "Yt": 1}

    def __init__(self, Y, dtype: str, **parts):
        self.Y = Y
        self.dtype = dtype
        self.placement = placement_of(Y)
        self.xp = self.placement.xp
        self.__dict__.update(parts)

    def columns(self, start: int) -> _TileContext:
        """This context for the columns ``Y[start:]`` (views; the symmetric Gram's tiles)."""
        view = copy.copy(self)
        for name, axis in self.COLUMN_AXES.items():
            value = getattr(self, name, None)
            if value is not None:
                setattr(view, name, value[start:] if axis == 0 else value[:, start:])
        return view


class _DotTiles:
    """Device tiles of the kernels of ``<x, y>``: one float64 GEMM, then the kernel's map
    (the host's blocks are float64 too; float32 tiles are rounded from them)."""

    device_native = True

    def prepare_tile(self, Y, dtype):
        Y64 = _f64(Y)
        placement = placement_of(Y)
        sq = placement.xp.sum(Y64 * Y64, axis=1)
        _check_finite_rows(sq)
        return _TileContext(Y, _tile_dtype(dtype) or "float64", Yt=_transpose(Y64), sq=sq)

    def tile(self, X, ctx):
        X64 = _f64(X)
        sq = ctx.xp.sum(X64 * X64, axis=1)
        _check_finite_rows(sq)  # |x| |y| finite: so is every x . y
        return _cast(self._map_dot(X64 @ ctx.Yt, sq, ctx), ctx.dtype)

    def diag_xp(self, X):
        X64 = _f64(X)
        placement = placement_of(X)
        sq = placement.xp.sum(X64 * X64, axis=1)
        return _cast(self._map_diag(sq), _float_like(X))


def _check_positive(name, value, *, allow_zero=False):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


class _Radial(Kernel):
    """Kernels that are a function of the squared Euclidean distance."""

    parallel_safe = True
    shift_invariant = True
    nonnegative = True
    _exact_diag_one = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)

    def get_params(self, deep=True):
        return {"gamma": self.gamma}

    def _prepare(self, Y):
        return _row_sq_norms(Y)

    def _block(self, Xc, Y, Y_sq):
        return self._profile(squared_euclidean(Xc, Y, Y_sq=Y_sq))

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        return np.ones(X.shape[0], dtype=result_dtype(X))

    # --- device tiles ---------------------------------------------------------------------------
    device_native = True

    #: Whether float32 tiles are computed in float32 (rbf: the argument of RBF._block32) rather
    #: than rounded from float64 ones (as the host's blocks).
    _float32_tiles = False

    def _exponent_scale(self) -> float:
        """s of the tile's GEMM ``-s |x - y|^2`` (the profile's argument)."""
        return self.gamma

    def prepare_tile(self, Y, dtype):
        """Y centered at its mean and the right factor ``B = [2 s (y - c); -s; -s |y - c|^2]``
        ((d + 2) x m) of the tiles' one GEMM; float32 for float32 rbf tiles when the columns'
        spread ``gamma |y - c|^2`` is at most :data:`FLOAT32_MAX_SPREAD` (as the host's
        :meth:`RBF._prepare32`), float64 otherwise."""
        dtype = _tile_dtype(dtype) or "float64"
        xp = placement_of(Y).xp
        Y64 = _f64(Y)
        center = xp.mean(Y64, axis=0)
        Yc = Y64 - center
        y_sq = xp.sum(Yc * Yc, axis=1)
        spread = _check_finite_rows(y_sq) * self.gamma
        low = dtype == "float32" and self._float32_tiles and spread <= FLOAT32_MAX_SPREAD
        B = self._right_factor(Yc, y_sq, "float32" if low else "float64")
        return _TileContext(Y, dtype, center=center, B=B, low=low, B64=None)

    def _right_factor(self, Yc, y_sq, dtype):
        xp = placement_of(Yc).xp
        s = self._exponent_scale()
        ones = xp.ones((1, Yc.shape[0]), dtype=xp.float64, device=placement_of(Yc).device)
        B = xp.concat([(2.0 * s) * _transpose(Yc), -s * ones, (-s * y_sq)[None, :]], axis=0)
        return xp.astype(B, getattr(xp, dtype))

    def tile(self, X, ctx):
        """The tile's exponent ``-s |x - y|^2`` from ONE GEMM, ``[x - c, |x - c|^2, 1] @ B``
        (both sides centered at the columns' mean c: the float32 accuracy argument of
        :meth:`RBF._block32`), clamped at 0 in place (rounding can make it positive), then the
        profile (rbf: ``exp`` in place).  Per tile: a GEMM of width d + 2 and one or two
        elementwise passes over the tile (see :mod:`fastkpca.execution.tiles`)."""
        xp = ctx.xp
        Xc = _f64(X) - ctx.center
        x_sq = xp.sum(Xc * Xc, axis=1)
        top = _check_finite_rows(x_sq)
        B = ctx.B
        if ctx.low and not top * max(1.0, self.gamma) <= _MAX_SQ_NORM32:
            # Rows far enough to overflow a float32 GEMM: float64, rounded (as the host).
            if ctx.B64 is None:
                Yc = _f64(ctx.Y) - ctx.center
                ctx.B64 = self._right_factor(Yc, xp.sum(Yc * Yc, axis=1), "float64")
            B = ctx.B64
        ones = xp.ones((X.shape[0], 1), dtype=xp.float64, device=ctx.placement.device)
        A = xp.concat([Xc, x_sq[:, None], ones], axis=1)
        if B.dtype != A.dtype:
            A = xp.astype(A, B.dtype)
        E = tiles.clamp_max_(A @ B, 0.0)
        return _cast(self._profile_tile(E), ctx.dtype)

    def _profile_tile(self, E):
        """The kernel of the clamped exponent ``E = -s |x - y|^2`` (overwriting E)."""
        return tiles.exp_(E)

    def diag_xp(self, X):
        placement = placement_of(X)
        return placement.xp.ones(
            X.shape[0], dtype=placement.dtype(_float_like(X)), device=placement.device
        )


#: ``max(|x - c|^2, gamma |x - c|^2)`` above which :meth:`RBF._block32` takes the float64 path:
#: below it the rows' float32 coordinates are finite and, with the columns within
#: FLOAT32_MAX_SPREAD, every term of the float32 GEMM stays far below float32's 3.4e38.
_MAX_SQ_NORM32 = 1e30


class RBF(_Radial):
    """Gaussian kernel ``exp(-gamma ||x - y||^2)``; gamma = 1 / (2 sigma^2)."""

    name = "rbf"
    _float32_tiles = True

    def _profile(self, D2):
        D2 *= -self.gamma
        return np.exp(D2, out=D2)

    def _prepare32(self, Y):
        """Y centered at its mean, as the float32 right factor of :meth:`_block32`'s GEMM.

        ``B = [2 gamma (Y - centre)^T; -gamma |y - centre|^2; 1]`` ((d + 2) x m), or None (then
        float64 blocks, rounded) for sparse Y or columns wider than :data:`FLOAT32_MAX_SPREAD`.
        """
        prepared = self._prepare(Y)
        if sp.issparse(Y):
            return None, None, prepared
        Yd = np.asarray(Y, dtype=np.float64)
        center = Yd.mean(axis=0)
        Yc = Yd - center
        y_sq = np.einsum("ij,ij->i", Yc, Yc) * self.gamma
        if not np.max(y_sq, initial=0.0) <= FLOAT32_MAX_SPREAD:  # (nan: also float64)
            return None, None, prepared
        d = Yd.shape[1]
        B = np.empty((d + 2, Yd.shape[0]), dtype=np.float32)
        B[:d] = (2.0 * self.gamma) * Yc.T
        B[d] = -y_sq
        B[d + 1] = 1.0
        return center, B, prepared

    def _block32(self, Xc, Y, ctx, out):
        """The block in float32 into ``out``: ``-gamma |x - y|^2`` from one GEMM, then ``exp``.

        Distances are shift-invariant, so both sides are centered at the mean of Y (in float64,
        then rounded), and ``[x - c, 1, -gamma |x - c|^2] @ B`` (B from :meth:`_prepare32`) is
        ``-gamma (|x - c|^2 + |y - c|^2 - 2 (x - c).(y - c))`` with the norms computed in float64
        and only the GEMM's accumulation in float32: its rounding is about ``eps32`` times the
        sum of the terms' magnitudes, ``gamma (|x - c| + |y - c|)^2 <= 2 gamma |x - y|^2 + 8 gamma
        |y - c|^2``, and scaled by the value ``exp(-gamma |x - y|^2)`` the first part stays
        below ``2 / e`` whatever x: the error of K is bounded by the columns' spread alone
        (:data:`FLOAT32_MAX_SPREAD`).  float32 GEMM and ``exp`` are about twice as fast as
        float64, and the chunk stays in cache through both (:meth:`Kernel.fold_rows`).
        """
        center, B, prepared = ctx
        if center is None or sp.issparse(Xc):
            return Kernel._block32(self, Xc, Y, prepared, out)
        Xs = np.asarray(Xc, dtype=np.float64) - center
        d = Xs.shape[1]
        x_sq = np.einsum("ij,ij->i", Xs, Xs)
        if not np.max(x_sq, initial=0.0) * max(1.0, self.gamma) <= _MAX_SQ_NORM32:
            # Rows far enough to overflow the float32 GEMM (or not finite): the float64 block,
            # which raises the ValueError of overflowing rows.
            return Kernel._block32(self, Xc, Y, prepared, out)
        A = np.empty((Xs.shape[0], d + 2), dtype=np.float32)
        A[:, :d] = Xs
        A[:, d] = 1.0
        np.multiply(x_sq, -self.gamma, out=A[:, d + 1], casting="same_kind")
        np.matmul(A, B, out=out)
        # No clamp of the exponent at 0 (the float64 path's ``max(D, 0)``): a rounding-positive
        # exponent is within the bound above, so K exceeds 1 by at most FLOAT32_BLOCK_ATOL, and
        # the clamp would cost 5 % of a Nystrom fit's pass.
        np.exp(out, out=out)

    def sample_frequencies(self, n_features, dim, rng):
        # Spectral density of exp(-gamma r^2) is N(0, 2 gamma I) (Rahimi & Recht 2007).
        return rng.standard_normal((n_features, dim)) * np.sqrt(2.0 * self.gamma)


class Laplacian(Kernel):
    """Laplacian kernel ``exp(-gamma ||x - y||_1)``.

    The L1 distance, as ``sklearn.metrics.pairwise.laplacian_kernel``.
    """

    parallel_safe = True
    name = "laplacian"
    shift_invariant = True
    nonnegative = True
    _exact_diag_one = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)

    def get_params(self, deep=True):
        return {"gamma": self.gamma}

    def _block(self, Xc, Y, ctx):
        D = manhattan(Xc, Y)
        D *= -self.gamma
        return np.exp(D, out=D)

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        return np.ones(X.shape[0], dtype=result_dtype(X))

    device_native = True

    def prepare_tile(self, Y, dtype):
        Y64 = _f64(Y)
        _check_finite_rows(placement_of(Y).xp.sum(placement_of(Y).xp.abs(Y64), axis=1))
        return _TileContext(Y, _tile_dtype(dtype) or "float64", Y64=Y64)

    def tile(self, X, ctx):
        """``exp(-gamma |x - y|_1)``: the L1 distances (torch's ``cdist(p=1)``), scaled and
        exponentiated in place; float64, rounded for float32 tiles (as the host)."""
        X64 = _f64(X)
        _check_finite_rows(ctx.xp.sum(ctx.xp.abs(X64), axis=1))
        D = tiles.l1_distances(X64, ctx.Y64)
        D *= -self.gamma
        return _cast(tiles.exp_(D), ctx.dtype)

    def diag_xp(self, X):
        placement = placement_of(X)
        return placement.xp.ones(
            X.shape[0], dtype=placement.dtype(_float_like(X)), device=placement.device
        )

    def sample_frequencies(self, n_features, dim, rng):
        # exp(-gamma |t|) is the characteristic function of Cauchy(0, gamma); the L1 kernel is a
        # product over coordinates, so each coordinate is drawn independently.
        return rng.standard_cauchy((n_features, dim)) * self.gamma


class Matern(_Radial):
    """Matern kernel with smoothness ``nu`` and length scale ``l = 1 / sqrt(2 gamma)``.

    ``k(r) = 2^(1-nu) / Gamma(nu) * (sqrt(2 nu) r / l)^nu * K_nu(sqrt(2 nu) r / l)``, in closed
    form for nu = 0.5, 1.5, 2.5 and through ``scipy.special.kv`` otherwise; nu = inf is RBF.
    """

    name = "matern"

    def __init__(self, gamma: float = 1.0, nu: float = 1.5):
        super().__init__(gamma)
        infinite = isinstance(nu, numbers.Real) and not isinstance(nu, bool) and nu == np.inf
        self.nu = float(nu) if infinite else _check_positive("nu", nu)

    def get_params(self, deep=True):
        return {"gamma": self.gamma, "nu": self.nu}

    @property
    def length_scale(self):
        return 1.0 / np.sqrt(2.0 * self.gamma)

    @property  # type: ignore[override]
    def device_native(self) -> bool:  # type: ignore[override]
        """Closed forms (nu = 0.5, 1.5, 2.5, inf) run on the device; a general nu needs
        ``scipy.special.kv``, so its tiles are host blocks, moved."""
        return bool(np.isinf(self.nu) or self.nu in (0.5, 1.5, 2.5))

    def _exponent_scale(self) -> float:
        return self.gamma if np.isinf(self.nu) else 1.0  # the GEMM gives -|x - y|^2

    def _profile_tile(self, E):
        if np.isinf(self.nu):
            return tiles.exp_(E)
        xp = placement_of(E).xp
        r = xp.sqrt(-E) / self.length_scale
        if self.nu == 0.5:
            return xp.exp(-r)
        t = (np.sqrt(3.0) if self.nu == 1.5 else np.sqrt(5.0)) * r
        poly = 1.0 + t if self.nu == 1.5 else 1.0 + t + t * t / 3.0
        return poly * xp.exp(-t)

    def _profile(self, D2):
        nu = self.nu
        if np.isinf(nu):
            D2 *= -self.gamma
            return np.exp(D2, out=D2)
        r = np.sqrt(D2, out=D2) / self.length_scale
        if nu == 0.5:
            return np.exp(-r)
        if nu == 1.5:
            t = np.sqrt(3.0) * r
            return (1.0 + t) * np.exp(-t)
        if nu == 2.5:
            t = np.sqrt(5.0) * r
            return (1.0 + t + t * t / 3.0) * np.exp(-t)
        t = np.sqrt(2.0 * nu) * r
        t[t == 0.0] += np.finfo(float).eps  # K_nu diverges at 0; the limit of the product is 1
        K = (2.0 ** (1.0 - nu) / special.gamma(nu)) * t**nu * special.kv(nu, t)
        return K

    def sample_frequencies(self, n_features, dim, rng):
        # The Matern spectral density is a multivariate Student-t with 2 nu degrees of freedom
        # and scale 1 / l: w = z / l * sqrt(2 nu / u), z ~ N(0, I), u ~ chi^2(2 nu).
        if np.isinf(self.nu):
            return rng.standard_normal((n_features, dim)) * np.sqrt(2.0 * self.gamma)
        z = rng.standard_normal((n_features, dim))
        u = rng.chisquare(2.0 * self.nu, size=(n_features, 1))
        return z * np.sqrt(2.0 * self.nu / u) / self.length_scale


class Polynomial(_DotTiles, Kernel):
    """Polynomial kernel ``(gamma <x, y> + coef0)^degree``."""

    parallel_safe = True
    name = "polynomial"

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0):
        if not isinstance(degree, numbers.Integral) or isinstance(degree, bool) or degree < 1:
            raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
        self.degree = int(degree)
        self.gamma = _check_positive("gamma", gamma)
        self.coef0 = _check_positive("coef0", coef0, allow_zero=True)

    def get_params(self, deep=True):
        return {"degree": self.degree, "gamma": self.gamma, "coef0": self.coef0}

    def _block(self, Xc, Y, ctx):
        K = _dot(_as_float64(Xc), _as_float64(Y))
        K *= self.gamma
        K += self.coef0
        with np.errstate(over="ignore", invalid="ignore"):  # checked: _check_finite_block
            return K**self.degree

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        return ((self.gamma * _row_sq_norms(X) + self.coef0) ** self.degree).astype(result_dtype(X))

    def _map_dot(self, K, x_sq, ctx):
        K *= self.gamma
        K += self.coef0
        return _check_finite_tile(K**self.degree)

    def _map_diag(self, sq):
        return (self.gamma * sq + self.coef0) ** self.degree


class Linear(_DotTiles, Kernel):
    """Linear kernel ``<x, y>``."""

    parallel_safe = True
    name = "linear"

    def _block(self, Xc, Y, ctx):
        return _dot(_as_float64(Xc), _as_float64(Y))

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        return _row_sq_norms(X).astype(result_dtype(X))

    def _map_dot(self, K, x_sq, ctx):
        return K

    def _map_diag(self, sq):
        return sq


class Cosine(_DotTiles, Kernel):
    """Cosine similarity ``<x, y> / (||x|| ||y||)`` (zero rows give 0, as scikit-learn)."""

    parallel_safe = True
    name = "cosine"

    @staticmethod
    def _unit_rows(X):
        """The rows scaled to unit norm, float64 (zero rows stay zero): each row first divided
        by its largest entry, so that no square underflows (a row of 8e-162 squares to a
        subnormal 6.4e-323, 1 % off).  Rows whose squared norm overflows are refused, as by
        every kernel of inner products (ValueError)."""
        X = _as_float64(X)
        _check_finite_rows(_row_sq_norms(X))
        if sp.issparse(X):
            X = X.tocsr(copy=True)
            top = np.asarray(abs(X).max(axis=1).todense(), dtype=np.float64).ravel()
            top[top == 0.0] = 1.0
            X.data /= np.repeat(top, np.diff(X.indptr))
            norms = np.sqrt(_row_sq_norms(X))
            norms[norms == 0.0] = 1.0
            X.data /= np.repeat(norms, np.diff(X.indptr))
            return X
        top = np.max(np.abs(X), axis=1, initial=0.0, keepdims=True)
        top[top == 0.0] = 1.0
        X = X / top
        norms = np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
        norms[norms == 0.0] = 1.0
        X /= norms
        return X

    def _prepare(self, Y):
        return self._unit_rows(Y)

    def _block(self, Xc, Y, unit_y):
        return _dot(self._unit_rows(Xc), unit_y)

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        nonzero = abs(X).max(axis=1) if sp.issparse(X) else np.abs(X).max(axis=1, initial=0.0)
        nonzero = nonzero.toarray().ravel() if sp.issparse(nonzero) else np.asarray(nonzero)
        return (nonzero > 0).astype(result_dtype(X))

    @staticmethod
    def _inv_norms_xp(sq):
        xp = placement_of(sq).xp
        norms = xp.sqrt(sq)
        return 1.0 / xp.where(norms == 0.0, xp.ones_like(norms), norms)

    def _map_dot(self, K, x_sq, ctx):
        K *= self._inv_norms_xp(x_sq)[:, None]
        K *= self._inv_norms_xp(ctx.sq)[None, :]
        return K

    def _map_diag(self, sq):
        xp = placement_of(sq).xp
        return xp.astype(sq > 0, xp.float64)


class Sigmoid(_DotTiles, Kernel):
    """Sigmoid (hyperbolic tangent) kernel ``tanh(gamma <x, y> + coef0)``.

    As ``sklearn.metrics.pairwise.sigmoid_kernel``.  It is not positive semi-definite for every
    gamma and coef0, so its centered Gram can have negative eigenvalues.
    """

    parallel_safe = True
    name = "sigmoid"

    def __init__(self, gamma: float = 1.0, coef0: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)
        if not isinstance(coef0, numbers.Real) or isinstance(coef0, bool) or not np.isfinite(coef0):
            raise ValueError(f"coef0 must be a finite number, got {coef0!r}")
        self.coef0 = float(coef0)

    def get_params(self, deep=True):
        return {"gamma": self.gamma, "coef0": self.coef0}

    def _block(self, Xc, Y, ctx):
        K = _dot(_as_float64(Xc), _as_float64(Y))
        K *= self.gamma
        K += self.coef0
        return np.tanh(K, out=K)

    def diag(self, X):
        if not is_host_array(X):
            return self.diag_xp(X)
        return np.tanh(self.gamma * _row_sq_norms(X) + self.coef0).astype(result_dtype(X))

    def _map_dot(self, K, x_sq, ctx):
        K *= self.gamma
        K += self.coef0
        return placement_of(K).xp.tanh(K)

    def _map_diag(self, sq):
        return placement_of(sq).xp.tanh(self.gamma * sq + self.coef0)


KERNELS: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "laplacian": Laplacian,
    "matern": Matern,
    "polynomial": Polynomial,
    "linear": Linear,
    "cosine": Cosine,
    "sigmoid": Sigmoid,
}

#: Other spellings accepted by :func:`make_kernel` (scikit-learn's ``"poly"``).
KERNEL_ALIASES = {"poly": "polynomial"}


def resolve_gamma(gamma, X=None, *, rng=None, n_subsample: int = 1000) -> float:
    """Turn a gamma spec into a number.

    ``None`` gives ``1 / n_features`` (the ``KernelPCA`` default); ``"scale"`` gives
    ``1 / (n_features * X.var())``; ``"median"`` gives ``1 / median squared distance`` over a
    random subsample of at most ``n_subsample`` rows (the median heuristic).
    """
    if gamma is None or isinstance(gamma, str):
        if X is None:
            raise ValueError(f"gamma={gamma!r} needs the data to be resolved")
        n, d = X.shape
        if gamma is None:
            return 1.0 / d
        if gamma == "scale":
            if hasattr(X, "entry_variance"):  # a row source whose rows are not in memory
                var = X.entry_variance()
            elif sp.issparse(X):
                Xs = X.tocsr()
                mean = np.asarray(Xs.mean()).item()
                var = np.asarray(Xs.multiply(Xs).mean()).item() - mean**2
            else:
                var = float(np.var(np.asarray(X, dtype=np.float64)))
            return 1.0 / (d * var) if var > 0 else 1.0
        if gamma == "median":
            rng = as_generator(rng, name="rng")
            idx = (
                rng.choice(n, size=min(n, n_subsample), replace=False)
                if n > n_subsample
                else np.arange(n)
            )
            S = X[np.sort(idx)]
            D2 = squared_euclidean(S, S)
            vals = D2[np.triu_indices(len(idx), k=1)]
            vals = vals[vals > 0]
            return 1.0 / float(np.median(vals)) if vals.size else 1.0
        raise ValueError(
            f"gamma must be a positive float, None, 'scale' or 'median', got {gamma!r}"
        )
    return _check_positive("gamma", gamma)


def make_kernel(spec="rbf", *, gamma=None, degree=3, coef0=1.0, nu=1.5, X=None, rng=None) -> Kernel:
    """Build a :class:`Kernel` from a name (or pass a Kernel through).

    Parameters
    ----------
    spec : str or Kernel
        One of ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"`` (or scikit-learn's
        ``"poly"``), ``"linear"``, ``"cosine"``, ``"sigmoid"``, or a Kernel object (a shallow
        copy of it is returned).
    gamma : float, None, "scale" or "median"
        Resolved with :func:`resolve_gamma` (``X`` is needed for the string forms and None).
    degree, coef0 : polynomial (and sigmoid: coef0) parameters.  nu : Matern smoothness.
    """
    if isinstance(spec, Kernel):
        return copy.copy(spec)  # a fitted model's own: set_params on the spec leaves it be
    if isinstance(spec, str):
        spec = KERNEL_ALIASES.get(spec, spec)
    if not isinstance(spec, str) or spec not in KERNELS:
        raise ValueError(
            f"unknown kernel {spec!r}; choose one of {sorted(KERNELS)} "
            "or pass a fastkpca.kernels.Kernel"
        )
    cls = KERNELS[spec]
    if cls in (Linear, Cosine):
        return cls()
    g = resolve_gamma(gamma, X, rng=rng)
    if cls is Polynomial:
        return Polynomial(degree=degree, gamma=g, coef0=coef0)
    if cls is Matern:
        return Matern(gamma=g, nu=nu)
    if cls is Sigmoid:
        return Sigmoid(gamma=g, coef0=coef0)
    if cls is Laplacian:
        return Laplacian(gamma=g)
    if cls is RBF:
        return RBF(gamma=g)
    raise ValueError(f"unknown kernel {spec!r}")  # pragma: no cover - KERNELS is covered above


def kernel_from_config(config: dict) -> Kernel:
    """Inverse of :meth:`Kernel.to_config`."""
    config = dict(config)
    name = config.pop("kernel", None)
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r} in kernel config")
    return KERNELS[name](**config)


class DegenerateKernelWarning(UserWarning):
    """The kernel matrix of the training rows is numerically the identity or constant: every
    embedding of such data is meaningless (usually a gamma far from the data's scale)."""


#: :func:`warn_if_degenerate`: the kernel matrix is "the identity" when the kernel values of
#: the rows with each other sum to at most this fraction of their values with themselves (on
#: average less than 1e-3 of a neighbour per row: the top centered eigenvalue then exceeds a
#: point's own k(x, x) by about that much, and every component is one isolated point) ...
IDENTITY_TOL = 1e-3
#: ... and "constant" when its centered trace ``tr(H K H)`` is at most this fraction of its trace:
#: about sqrt(eps) of float64, so that what distinguishes the rows is in the last half of the
#: digits of the kernel's values, where the rounding of every entry of K lives.
CONSTANT_TOL = 1e-8


def warn_if_degenerate(
    kernel, n_samples, diag_sum, mean_sq, mean_sq_error=0.0, *, constant=True
) -> None:
    """Warn (:class:`DegenerateKernelWarning`) when the training kernel matrix is numerically the
    identity or constant, from its trace and its mean: no extra pass over the data.

    With ``S = sum_i k(x_i, x_i)`` and ``T = sum_ij k(x_i, x_j) = n^2 ||mu||^2``: the identity
    when ``T - S <= IDENTITY_TOL S`` (only for kernels with values >= 0, where small row sums
    mean small entries; e.g. rbf with a gamma so large that every point is far from every other
    one), constant when ``tr(H K H) = S - T / n <= CONSTANT_TOL S`` (identical rows, or a gamma
    so small that every point is close to every other one).  Estimated means (random features,
    landmarks) count as degenerate within three of their standard errors.  Nothing is checked
    for fewer than two rows, an unknown trace or mean, or a mean whose three standard errors
    exceed half the trace (it cannot tell these cases apart).

    Parameters
    ----------
    kernel : Kernel
    n_samples : int
    diag_sum : float, ``S``
    mean_sq : float, ``||mu||^2 = T / n^2``
    mean_sq_error : float, one standard error of ``mean_sq`` (0: exact; nan: unknown, taken as 0)
    constant : bool
        Also check for a constant matrix (False: the identity only).
    """
    n = int(n_samples)
    if n < 2 or not (np.isfinite(diag_sum) and np.isfinite(mean_sq)) or diag_sum <= 0:
        return
    # Three standard errors of T; an estimate noisier than half the trace cannot tell the
    # identity (T = S) from half a neighbour per row, nor a constant matrix from much else.
    noise = 3.0 * n * n * float(mean_sq_error) if np.isfinite(mean_sq_error) else 0.0
    if noise > 0.5 * diag_sum:
        return
    total = n * n * float(mean_sq)
    gamma = getattr(kernel, "gamma", None)
    named = f" with gamma={gamma:.6g}" if isinstance(gamma, float) else ""
    advice = (
        "; try gamma='scale' (1 / (n_features * X.var())) or gamma='median', or scale the data"
        if gamma is not None
        else "; check the data and the kernel"
    )
    name = getattr(kernel, "name", type(kernel).__name__)
    if getattr(kernel, "nonnegative", False) and total - diag_sum <= (
        IDENTITY_TOL * diag_sum + noise
    ):
        warnings.warn(
            f"the {name} kernel matrix{named} of the {n} training rows is numerically the "
            f"identity (the rows' kernel values with each other sum to "
            f"{max(total - diag_sum, 0.0) / diag_sum:.2g} of their values with themselves): "
            "every point is far from every other one at this gamma, so the embedding is "
            f"meaningless{advice}",
            DegenerateKernelWarning,
            stacklevel=3,
        )
    elif constant and diag_sum - total / n <= CONSTANT_TOL * diag_sum + noise / n:
        warnings.warn(
            f"the {name} kernel matrix{named} of the {n} training rows is numerically constant "
            f"(its centered trace is {max(diag_sum - total / n, 0.0) / diag_sum:.2g} of its "
            "trace): all rows look alike to the kernel (identical rows, or a gamma far too "
            f"small for the data's scale), so the embedding is meaningless{advice}",
            DegenerateKernelWarning,
            stacklevel=3,
        )
