"""Kernel tiles on a device: Gram blocks, folds over kernel rows, Gram-matrix products.

The device half of the execution layer's kernel operations (Falkon's ``mm`` / ``mmv`` shape):
the same three operations :class:`fastkpca.kernels.Kernel` runs on the host in small threaded
chunks, here in large tiles sized from the device's free memory, in the arrays' namespace:

:func:`kernel_tiles`
    ``(start, stop, K[start:stop])`` row tiles of ``k(X, Y)``.
:func:`fold_kernel_rows`
    ``step(state, start, stop, K)`` over the row tiles, one state (a device has one stream of
    work; the tiles are large enough to fill it).
:func:`kernel_matmat`
    ``k(X, Y) @ V`` tile by tile; :class:`CenteredGramOperator` is ``(H K H) V`` for the
    matrix-free exact solvers, one pass over recomputed tiles per product.

The kernel's own math on a tile is :meth:`Kernel.tile` (the kernels of
:mod:`fastkpca.kernels` define it with ``xp`` calls: for the radial kernels the exponent comes
from ONE augmented GEMM, ``[x, |x|^2, 1] . [2 gamma y, -gamma, -gamma |y|^2]``, then an in-place
``exp``); a kernel without it (a user's) is computed on the host and its tile moved, which is
correct but slow, and said so in :attr:`Kernel.device_native`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .arrays import Placement, placement_of, to_host

__all__ = [
    "DEVICE_MEMORY_FRACTION",
    "tile_rows",
    "kernel_tile",
    "kernel_tiles",
    "fold_kernel_rows",
    "kernel_matmat",
    "CenteredGramOperator",
]

#: A tile and its temporaries may take this fraction of the device's free memory.
DEVICE_MEMORY_FRACTION = 0.25

#: Tile rows on a device without a free-memory query (CPU tensors): about 64 MiB per tile.
DEFAULT_TILE_BYTES = 64 * 2**20

#: Bounds on a tile's rows: below, the GEMMs are too thin to fill a GPU; above, nothing is gained.
MIN_TILE_ROWS, MAX_TILE_ROWS = 256, 1 << 17


def tile_rows(placement: Placement, n_cols: int, itemsize: int, n_temporaries: int = 2) -> int:
    """Rows of an ``(rows, n_cols)`` tile (with ``n_temporaries`` arrays of its size) that fit
    :data:`DEVICE_MEMORY_FRACTION` of the device's free memory."""
    free = placement.free_memory_bytes()
    budget = DEFAULT_TILE_BYTES * n_temporaries if free is None else DEVICE_MEMORY_FRACTION * free
    rows = int(budget // (max(1, n_cols) * itemsize * max(1, n_temporaries)))
    return max(MIN_TILE_ROWS, min(MAX_TILE_ROWS, rows))


def _dtype_name(a) -> str:
    return str(a.dtype).rsplit(".", 1)[-1]


def kernel_tile(kernel, X, Y, ctx=None, *, dtype=None):
    """``k(X, Y)`` for device arrays X, Y, in ``dtype`` (a dtype name: ``"float32"`` or
    ``"float64"``; default X's).  ``ctx`` is ``kernel.prepare_tile(Y, dtype)`` when computed
    once for many tiles."""
    placement = placement_of(X)
    dtype = dtype or _dtype_name(X)
    tile = getattr(kernel, "tile", None)
    if tile is not None and getattr(kernel, "device_native", False):
        if ctx is None:
            ctx = kernel.prepare_tile(Y, dtype)
        return tile(X, ctx)
    # A kernel without device math (a user's callable): the host's block, moved.
    K = kernel(to_host(X), to_host(Y))
    return placement.asarray(np.asarray(K), dtype=np.dtype(dtype))


def kernel_tiles(kernel, X, Y=None, *, dtype=None, rows=None) -> Iterator:
    """Yield ``(start, stop, K[start:stop])`` row tiles of ``k(X, Y)`` on X's device."""
    Y = X if Y is None else Y
    placement = placement_of(X)
    dtype = dtype or _dtype_name(X)
    itemsize = 4 if dtype == "float32" else 8
    rows = rows or tile_rows(placement, Y.shape[0], itemsize)
    ctx = kernel.prepare_tile(Y, dtype) if getattr(kernel, "device_native", False) else None
    for start in range(0, X.shape[0], rows):
        stop = min(X.shape[0], start + rows)
        yield start, stop, kernel_tile(kernel, X[start:stop], Y, ctx, dtype=dtype)


def fold_kernel_rows(
    kernel, X, Y, step: Callable, init: Callable, *, dtype=None, rows=None
) -> list:
    """``step(state, start, stop, K)`` over the row tiles of ``k(X, Y)``; returns ``[state]``
    (the host's :meth:`Kernel.fold_rows` returns one state per thread share)."""
    state = init()
    for start, stop, K in kernel_tiles(kernel, X, Y, dtype=dtype, rows=rows):
        step(state, start, stop, K)
    return [state]


def kernel_matmat(kernel, X, Y, V, *, dtype=None, rows=None):
    """``k(X, Y) @ V`` tile by tile, in V's dtype (the tiles in ``dtype``, default X's)."""
    xp = placement_of(X).xp
    out = xp.empty((X.shape[0], V.shape[1]), dtype=V.dtype, device=placement_of(V).device)
    tile_dtype = dtype or _dtype_name(X)
    Vt = V if _dtype_name(V) == tile_dtype else xp.astype(V, getattr(xp, tile_dtype))
    for start, stop, K in kernel_tiles(kernel, X, Y, dtype=tile_dtype, rows=rows):
        prod = K @ Vt
        out[start:stop, ...] = (
            prod if _dtype_name(prod) == _dtype_name(V) else xp.astype(prod, V.dtype)
        )
    return out


class CenteredGramOperator:
    """``V -> (H K H) V`` for the n x n Gram ``K = k(X, X)`` of device rows, never stored.

    ``H K H V = K Vc - 1 (mean_rows(K Vc))`` with ``Vc = V - 1 mean(V)`` (H V centers the columns
    of V; H of the product centers its columns again): one pass over the Gram's row tiles per
    product, each tile recomputed (its exponent from one GEMM, :meth:`Kernel.tile`).  The dtype of
    the tiles is ``dtype`` (float64 by default; float32 halves the time, with the tile's rounding
    ~1e-7 relative in each product).
    """

    def __init__(self, X, kernel, *, dtype=None, rows=None):
        self.X = X
        self.kernel = kernel
        self.n = int(X.shape[0])
        self.shape = (self.n, self.n)
        self.dtype = dtype or _dtype_name(X)
        self.rows = rows
        self.n_passes = 0

    def matmat(self, V):
        xp = placement_of(V).xp
        Vc = V - xp.mean(V, axis=0, keepdims=True)
        KV = kernel_matmat(self.kernel, self.X, self.X, Vc, dtype=self.dtype, rows=self.rows)
        self.n_passes += 1
        return KV - xp.mean(KV, axis=0, keepdims=True)

    def diag_sum(self) -> float:
        """``sum_i k(x_i, x_i)`` (the trace of the uncentered Gram)."""
        return (
            float(to_host(self.kernel.diag_xp(self.X)).sum())
            if hasattr(self.kernel, "diag_xp")
            else float(np.sum(self.kernel.diag(to_host(self.X))))
        )
