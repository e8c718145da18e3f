"""The base of the random feature maps, and the float32 Fourier features they share.

:class:`FeatureMap` is every map of :mod:`fastkpca.features` and :mod:`fastkpca._input_sketch`:
random parameters and one numerical method, ``_chunk(rows, out)``, over the rows' namespace,
run by :func:`fastkpca.execution.feature_ops.map_rows`.  :class:`FourierMap` adds the Fourier
arithmetic once (:meth:`FourierMap._fourier_chunk`).  This module sits below both map modules,
so :mod:`fastkpca._input_sketch` does not import :mod:`fastkpca.features`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .execution.arrays import placement_of
from .execution.feature_ops import ChunkBuffers, cos_sin, for_row_chunks, map_rows
from .execution.feature_ops import row_sums_of_squares as _row_sums_of_squares

__all__ = ["FOURIER_DTYPE", "FeatureMap", "FourierMap", "float_type", "dense_rows"]

#: The precision of the Fourier maps' computations, whatever the input (the precision notes of
#: :mod:`fastkpca.features`).
FOURIER_DTYPE = np.float32

#: A chunk's offset phases ``|w . c|`` above this many radians are removed before the float32
#: projection; below, float32 phases are accurate to ~1e-7 already.
MAX_OFFSET_PHASE = 1.0

#: float32 phases ``w . x`` are formed only where ``||w|| ||x||`` (a bound on them) is below
#: this, far from float32's overflow at 3.4e38 (the fastfood transforms' intermediates are sums
#: of up to D such terms); beyond, float64 phases reduced modulo 2 pi are used instead.
MAX_PHASE32 = 1e30


def float_type(X) -> type:
    """The numpy float type of X's computations: float32 for float32 rows, float64 otherwise
    (whatever X's namespace)."""
    dtype = getattr(X, "dtype", None)
    if dtype is None:
        return np.float64
    if isinstance(dtype, np.dtype):
        return np.float32 if dtype == np.float32 else np.float64
    return np.float32 if str(dtype).rsplit(".", 1)[-1] == "float32" else np.float64


def dense_rows(X, dtype=None):
    """X as a dense array of its namespace (CSR densified, lists read), of ``dtype`` (a numpy
    float type) or, by default, float32 for float32 rows and float64 for any others."""
    if sp.issparse(X):
        X = X.toarray()
    placement = placement_of(X)
    X = placement.asarray(X)
    dtype = float_type(X) if dtype is None else dtype
    target = placement.dtype(dtype)
    return X if X.dtype == target else placement.xp.astype(X, target)


class FeatureMap:
    """A drawn random feature map ``z: R^d -> R^m`` with ``E[z(x) . z(y)] = k(x, y)``.

    A map defines ``_chunk(rows, out=None)``: the features of a chunk of rows (dense rows of any
    namespace, or CSR, densified unless :attr:`accepts_sparse`) in its computing dtype
    (:meth:`feature_dtype`), written into ``out`` when given.  Everything else here runs that
    method over row chunks.

    Attributes
    ----------
    kind : str
        One of :data:`fastkpca.features.FEATURES`.
    n_input_features : int
        d, the width of the rows it accepts.
    n_output_features : int
        m, the number of columns it produces.
    accepts_sparse : bool
        Whether it takes scipy.sparse CSR rows without densifying them.
    """

    kind: str = ""
    accepts_sparse: bool = False
    n_input_features: int
    n_output_features: int

    def __call__(self, X, *, out=None, dtype=None):
        """The features of the rows of X, shape ``(n, n_output_features)``, in ``dtype``
        (default: X's float dtype), X's array namespace and device."""
        X = self._rows(X)
        dtype = float_type(X) if dtype is None else np.dtype(dtype).type
        return map_rows(X, self.n_output_features, dtype, self._chunk, out=out)

    def feature_dtype(self, input_dtype) -> type:
        """The dtype in which the map computes the features of rows of ``input_dtype`` (a numpy
        float type): what :func:`fastkpca.features.feature_blocks` gives.  The input's float
        dtype here; float32 for the Fourier maps."""
        return np.float32 if input_dtype == np.float32 else np.float64

    def _chunk(self, rows, out=None):
        raise NotImplementedError

    @staticmethod
    def _result(Z, out):
        """``Z``, or ``out`` with Z written into it when given (``_chunk``'s contract)."""
        if out is None:
            return Z
        out[...] = Z
        return out

    def _rows(self, X):
        """X as CSR or as dense float32 / float64 rows of its namespace, width checked (a map
        that does not compute on CSR rows densifies them a chunk at a time)."""
        X = X.tocsr() if sp.issparse(X) else dense_rows(X)
        self._check_width(X)
        return X

    def feed_chunks(self, X, feed, *, balanced=False) -> None:
        """Call ``feed(Z)`` with the features of every row chunk of X.

        Z is a ``(<= CHUNK_ROWS, m)`` array in the computing dtype that ``feed`` may overwrite.
        On the host it runs in the workers of :func:`~fastkpca.execution.map_row_chunks` (BLAS
        on one thread, :func:`~fastkpca.execution.worker_index` tells them apart), features in
        a per-thread buffer, in cache (``balanced``: :func:`~fastkpca.execution.map_row_chunks`'s);
        on a device the chunks are large and fed in order.
        """
        X = self._rows(X)
        dtype = self.feature_dtype(float_type(X))
        m = self.n_output_features
        buffers = ChunkBuffers(X)

        def chunk(start, stop):
            feed(self._chunk(X[start:stop, ...], buffers.get("features", stop - start, m, dtype)))

        for_row_chunks(X, m, chunk, balanced=balanced)

    def _placed(self, like, name: str, make, dtype):
        """The host array ``make()`` in ``dtype`` on the placement of ``like`` (numpy, a torch
        device, ...), converted once per placement and dtype and kept on the map (the host
        arrays stay its state: model files and pickles hold those only)."""
        placement = placement_of(like)
        cache = self.__dict__.setdefault("_placed_arrays", {})
        key = (placement.name, name, dtype)
        array = cache.get(key)
        if array is None:
            array = cache[key] = placement.asarray(make(), dtype)
        return array

    def __getstate__(self) -> dict:
        state = dict(vars(self))
        state.pop("_placed_arrays", None)  # converted copies (device tensors among them)
        return state

    def _check_width(self, X):
        if X.ndim != 2 or X.shape[1] != self.n_input_features:
            raise ValueError(
                f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, but the "
                f"feature map expects {self.n_input_features}"
            )

    def __repr__(self):
        return (
            f"{type(self).__name__}(kind={self.kind!r}, n_input_features="
            f"{self.n_input_features}, n_output_features={self.n_output_features})"
        )


class FourierMap(FeatureMap):
    """A map ``z(x) = [cos(V x), sin(V x)] / sqrt(n_frequencies)`` for a linear map V.

    Subclasses give V by ``_project(A, dtype)`` (``V a`` for the rows a of a 1-D or 2-D array,
    in ``dtype``), :attr:`n_frequencies` and :attr:`frequency_norm` (a bound on
    ``||V x|| / ||x||``, :data:`MAX_PHASE32`).
    """

    n_frequencies: int
    frequency_norm: float

    def feature_dtype(self, input_dtype) -> type:
        return FOURIER_DTYPE

    def _project(self, A, dtype):
        raise NotImplementedError

    def _fourier_chunk(self, rows, out=None):
        """The features of a chunk of dense rows, computed in :data:`FOURIER_DTYPE`.

        Rows are shifted by their mean c before the float32 cast and the float64 offset phases
        ``V c`` added back by :func:`~fastkpca.execution.feature_ops.cos_sin` (no shift when
        within :data:`MAX_OFFSET_PHASE`); where float32 phases could overflow
        (:data:`MAX_PHASE32`), float64 phases reduced modulo 2 pi are used.
        """
        xp = placement_of(rows).xp
        fdtype = FOURIER_DTYPE
        f32 = xp.float32 if fdtype is np.float32 else xp.float64
        with np.errstate(over="ignore", invalid="ignore"):
            center64 = xp.sum(rows, axis=0, dtype=xp.float64) / rows.shape[0]  # the mean
            center = xp.astype(xp.astype(center64, xp.float32), xp.float64)
            offset = self._project(center, np.float64)
            top = float(xp.max(xp.abs(offset)))
            if top <= MAX_OFFSET_PHASE:
                shifted = xp.astype(rows, f32, copy=False)
                offset = None
            else:
                shifted = xp.astype(rows - xp.astype(center, rows.dtype), f32, copy=False)
            sq = _row_sums_of_squares(shifted, np.float64)
            bound = math.sqrt(float(xp.max(sq))) * self.frequency_norm
        scale = 1.0 / math.sqrt(self.n_frequencies)
        if math.isfinite(top) and bound <= MAX_PHASE32:
            return cos_sin(self._project(shifted, fdtype), offset, scale, out)
        # beyond float32's range: float64 phases, reduced modulo 2 pi
        P64 = self._project(xp.astype(rows, xp.float64, copy=False), np.float64)
        if not bool(xp.all(xp.isfinite(P64))):
            raise ValueError(
                "the phases w . x of the random Fourier features overflow float64: the data are "
                "too large for the kernel's frequencies (scale the data or lower gamma)"
            )
        P = xp.astype(P64 % (2 * np.pi), f32)
        return cos_sin(P, None, scale, out)
