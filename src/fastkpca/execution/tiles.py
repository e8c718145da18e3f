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
from ONE augmented GEMM, ``[x - c, |x - c|^2, 1] . [2 gamma (y - c), -gamma, -gamma |y - c|^2]``
with c the columns' mean, then an in-place clamp at 0 and ``exp``); a kernel without it (a
user's, a Matern of general nu) is computed on the host and its tile moved, which is correct but
slow, and said so in :attr:`Kernel.device_native`.

What a tile costs on the plain path: for an ``r x m`` rbf tile of d-dimensional rows, one GEMM
of ``2 r m (d + 2)`` flops and two elementwise passes over the tile (the clamp and the exp, each
a read and a write of ``r m`` values, in place); a product ``K @ V`` with b vectors adds a GEMM
of ``2 r m b`` flops reading the tile once more.  For d + b of about 100 and more the GEMMs
dominate (compute-bound at ~50 flops per byte), and the elementwise passes are about a quarter
of the time in float64, more in float32 where the GEMMs run faster.  A fused kernel (exponent,
clamp and exp in the GEMM's epilogue, the tile consumed by the product with V in registers)
would save those passes and the tile's round trips through device memory: at best the quarter,
and the tile memory itself (larger tiles for the same memory).  Without a GPU to measure it
against the plain path, fastkpca keeps the plain path (two library calls per tile, no compiled
code of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from .arrays import Placement, placement_of, to_host

__all__ = [
    "DEVICE_MEMORY_FRACTION",
    "exp_",
    "clamp_max_",
    "fill_diagonal_",
    "l1_distances",
    "tile_rows",
    "kernel_tile",
    "kernel_tiles",
    "fold_kernel_rows",
    "kernel_matmat",
    "symmetric_kernel_matmat",
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


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def exp_(A):
    """``exp(A)``, in place for a torch tensor (``exp_``: no second tile in memory)."""
    if _is_torch(A):
        return A.exp_()
    return placement_of(A).xp.exp(A)


def clamp_max_(A, high: float):
    """``min(A, high)``, in place for a torch tensor."""
    if _is_torch(A):
        return A.clamp_(max=high)
    xp = placement_of(A).xp
    return xp.minimum(A, xp.asarray(high, dtype=A.dtype, device=placement_of(A).device))


def fill_diagonal_(A, value: float):
    """Set the diagonal of the leading square of A to ``value`` (in place where the library can)."""
    if _is_torch(A):
        k = min(A.shape[0], A.shape[1])
        A[:k, :k].fill_diagonal_(value)
        return A
    module = type(A).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        cupy.fill_diagonal(A, value)
        return A
    placement = placement_of(A)
    xp = placement.xp
    eye = xp.eye(A.shape[0], A.shape[1], dtype=A.dtype, device=placement.device)
    return A * (1 - eye) + value * eye


def l1_distances(X, Y):
    """``sum_j |X[i, j] - Y[l, j]|`` for device rows (float64 in, float64 out): torch's
    ``cdist(p=1)`` (no ``(rows, cols, d)`` temporary), elsewhere a sum over the columns."""
    if _is_torch(X):
        import torch

        return torch.cdist(X, Y, p=1.0)
    placement = placement_of(X)
    xp = placement.xp
    D = xp.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype, device=placement.device)
    for j in range(X.shape[1]):
        D += xp.abs(X[:, j : j + 1] - Y[:, j][None, :])
    return D


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


def symmetric_kernel_matmat(kernel, X, V, *, dtype=None, rows=None):
    """``k(X, X) @ V`` from the upper block triangle of the Gram only.

    Row tile ``[s, e)`` is evaluated against the columns ``X[s:]`` alone (the kernel's context
    sliced, :meth:`~fastkpca.kernels._TileContext.columns`) and applied twice: ``K[s:e, s:] @
    V[s:]`` to its own rows and, off its diagonal block, ``K[s:e, e:]^T @ V[s:e]`` to the rows
    below.  That halves the kernel evaluations (the tiles' GEMMs and elementwise passes) of
    :func:`kernel_matmat` for the same products with V, as the host's ``GramOperator`` does;
    the diagonal is exactly 1 where the kernel says so.  A kernel without device math takes the
    full tiles (:func:`kernel_matmat`).
    """
    if not getattr(kernel, "device_native", False):
        return kernel_matmat(kernel, X, X, V, dtype=dtype, rows=rows)
    placement = placement_of(X)
    xp = placement.xp
    n = X.shape[0]
    tile_dtype = dtype or _dtype_name(X)
    itemsize = 4 if tile_dtype == "float32" else 8
    rows = rows or tile_rows(placement, n, itemsize)
    Vt = V if _dtype_name(V) == tile_dtype else xp.astype(V, getattr(xp, tile_dtype))
    out = xp.zeros((n, V.shape[1]), dtype=Vt.dtype, device=placement.device)
    ctx = kernel.prepare_tile(X, tile_dtype)
    exact_one = getattr(kernel, "_exact_diag_one", False)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        K = kernel.tile(X[start:stop], ctx.columns(start))
        if exact_one:
            K = fill_diagonal_(K, 1.0)  # the leading square is the diagonal block
        out[start:stop, ...] += K @ Vt[start:]
        if stop < n:
            out[stop:, ...] += xp.permute_dims(K[:, stop - start :], (1, 0)) @ Vt[start:stop]
    return out if _dtype_name(out) == _dtype_name(V) else xp.astype(out, V.dtype)


class CenteredGramOperator:
    """``V -> (H K H) V`` for the n x n Gram ``K = k(X, X)`` of device rows, never stored.

    ``H K H V = K Vc - 1 (mean_rows(K Vc))`` with ``Vc = V - 1 mean(V)`` (H V centers the columns
    of V; H of the product centers its columns again): one pass over the Gram's row tiles per
    product over the upper block triangle (:func:`symmetric_kernel_matmat`), each tile
    recomputed (its exponent from one GEMM, :meth:`Kernel.tile`).  The dtype of
    the tiles is ``dtype`` (X's by default; float32 tiles run the GEMMs at float32 speed, with the
    tile's rounding ~1e-7 relative in each product).  The first product also gives the Gram's row
    means (one more column, ``1 / n``, in its block), kept in :attr:`row_means` (float64) for
    out-of-sample centering; :attr:`n_passes` counts the passes.  Memory: X, one tile and its
    temporaries (:func:`tile_rows`), and O(n b) for the products: nothing n x n.
    """

    def __init__(self, X, kernel, *, dtype=None, rows=None):
        self.X = X
        self.kernel = kernel
        self.placement = placement_of(X)
        self.n = int(X.shape[0])
        self.shape = (self.n, self.n)
        self.dtype = dtype or _dtype_name(X)
        self.rows = rows
        self.n_passes = 0
        self.row_means = None

    def matmat(self, V):
        placement = placement_of(V)
        xp = placement.xp
        Vc = V - xp.mean(V, axis=0, keepdims=True)
        first = self.row_means is None
        if first:
            ones = xp.full((self.n, 1), 1.0 / self.n, dtype=V.dtype, device=placement.device)
            Vc = xp.concat([Vc, ones], axis=1)
        KV = symmetric_kernel_matmat(self.kernel, self.X, Vc, dtype=self.dtype, rows=self.rows)
        self.n_passes += 1
        if first:
            self.row_means = KV[:, -1]
            KV = KV[:, :-1]
        return KV - xp.mean(KV, axis=0, keepdims=True)

    def diag_sum(self) -> float:
        """``sum_i k(x_i, x_i)`` (the trace of the uncentered Gram)."""
        return (
            float(to_host(self.kernel.diag_xp(self.X)).sum())
            if hasattr(self.kernel, "diag_xp")
            else float(np.sum(self.kernel.diag(to_host(self.X))))
        )
