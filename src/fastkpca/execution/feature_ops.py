"""Row chunks and element-wise steps of the random feature maps and sketches, on every backend.

The feature maps (:mod:`fastkpca.features`, :mod:`fastkpca._input_sketch`) and Frequent
Directions (:mod:`fastkpca.sketch`) are written once over the rows' array namespace.  What
differs between the host and a device is here, each with one signature:

- where the row chunks run (:func:`map_rows`, :func:`for_row_chunks`): on the host, chunks of
  :data:`~fastkpca.execution.CHUNK_ROWS` rows (in the L2 cache) on the worker threads with BLAS
  held to one thread (:func:`~fastkpca.execution.map_row_chunks`), written into the output or
  a per-thread buffer (:class:`ChunkBuffers`); on a device, chunks sized from its free memory
  (:func:`row_chunk_rows`), one after another, each a new array;
- ``[cos, sin]`` of float32 phases (:func:`cos_sin`): numpy's float32 ufuncs written in place
  with ``out=`` (numpy's float64 ``cos`` has no SIMD path), with the offset phases added by a
  rotation; a device's whole-array ``cos`` / ``sin``;
- the Walsh-Hadamard transform (:func:`fwht`): two GEMMs into preallocated arrays on the host,
  batched products on a device;
- the FFTs of TensorSketch (:func:`rfft`, :func:`irfft`): scipy's on the host (4x numpy's in
  float32), the namespace's elsewhere;
- products with a sparse matrix of few non-zeros (:func:`sparse_product`): scipy's O(nnz)
  product on the host, one GEMM with a dense copy on a device;
- sums of squares (:func:`sum_of_squares`, :func:`row_sums_of_squares`): numpy's ``dot`` /
  ``einsum`` without a temporary on the host;
- float64 sums of products over many rows (:func:`sum_over_row_shares`: ``Z^T Z``,
  ``A^T (A Q)``): on the host one product per fixed share of rows on the worker threads, BLAS
  on one thread; on a device one product;
- the CountSketch of a block of rows (:func:`bucket_sums`): scipy's sparse product on the host,
  PyTorch's ``index_add_`` or a one-hot product elsewhere;
- the Frequent Directions sketches' shrinks (:mod:`fastkpca.sketch`), batched over sketches
  that go in lockstep: how many sketches one worker takes in lockstep (:func:`lockstep_width`:
  on the host a share of them per worker thread, on a device all of them), the new rows' block
  of their buffers' Grams on the host (:func:`sketch_grams`: a batched product and numpy's
  SYRK per sketch on the host, one batched product and one transfer from a device), their
  small eigendecompositions (:func:`stacked_eigh`: numpy's LAPACK over the stack, shared out to
  the worker threads where the caller is not one) and the rows' energies
  (:func:`stack_sums_of_squares`).
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.fft
import scipy.sparse as sp

from .arrays import HOST, Placement, placement_of, to_host
from .budget import FEATURE_DEVICE_TEMPORARIES, LOCKSTEP_CHUNK_BYTES, tile_rows
from .memory import require_memory
from .threads import SHARE_ROWS, map_row_chunks, n_workers, sum_over_shares

__all__ = [
    "ChunkBuffers",
    "block_rows",
    "bucket_sums",
    "cos_sin",
    "for_row_chunks",
    "fwht",
    "hadamard",
    "irfft",
    "lockstep_chunk_rows",
    "lockstep_width",
    "map_rows",
    "rfft",
    "row_chunk_rows",
    "row_sums_of_squares",
    "sketch_grams",
    "sparse_product",
    "stack_sums_of_squares",
    "stacked_eigh",
    "stacked_eigh_placement",
    "sum_of_squares",
    "sum_over_row_shares",
]


# ------------------------------------------------------------------------------------------------
# row chunks
# ------------------------------------------------------------------------------------------------
def row_chunk_rows(X, width: int, itemsize: int = 4) -> int:
    """Rows of a device chunk of ``width`` output columns for the rows X: the chunk and
    :data:`~fastkpca.execution.budget.FEATURE_DEVICE_TEMPORARIES` arrays of its size within the
    device's free-memory budget (:func:`~fastkpca.execution.tiles.tile_rows`), at most 131072
    rows.  (The host's chunks are :data:`~fastkpca.execution.CHUNK_ROWS` rows.)"""
    return tile_rows(placement_of(X), width, itemsize, n_temporaries=FEATURE_DEVICE_TEMPORARIES)


def block_rows(X, host_rows: int, width: int, itemsize: int) -> int:
    """Rows per block of work on X: ``host_rows`` (the caller's size for the host's threads and
    memory) for host rows, a chunk sized from the device's free memory
    (:func:`row_chunk_rows`) for device rows."""
    if placement_of(X).host:
        return host_rows
    return row_chunk_rows(X, width, itemsize)


def for_row_chunks(X, width: int, fn: Callable[[int, int], Any], *, balanced=False) -> None:
    """Call ``fn(start, stop)`` over the row chunks of X (results of ``width`` columns).

    Host rows: :func:`~fastkpca.execution.map_row_chunks` (``balanced`` passed on), chunks of
    :data:`~fastkpca.execution.CHUNK_ROWS` rows on the worker threads, BLAS held to one thread.
    Device rows: chunks of :func:`row_chunk_rows` rows, in order, in this thread.
    """
    n = X.shape[0]
    if placement_of(X).host:
        map_row_chunks(n, fn, balanced=balanced)
        return
    step = row_chunk_rows(X, width)
    for start in range(0, n, step):
        fn(start, min(n, start + step))


def map_rows(X, width: int, dtype, chunk: Callable, *, out=None):
    """``[chunk(X[a:b], out[a:b]) ...]`` over the row chunks of X: an ``(n, width)`` array of
    ``dtype`` (a numpy float type).

    ``chunk(rows, out)`` returns the results of ``rows``; given ``out`` (an array of the
    chunk's shape, possibly of another float dtype), it writes them there and returns it.  On
    the host the chunks run on the worker threads (:func:`for_row_chunks`) and write straight
    into the result (``out`` when given); on a device each returns a new array and the chunks
    are concatenated (and written into ``out`` when given).
    """
    placement = placement_of(X)
    n = X.shape[0]
    if placement.host:
        if out is None:
            out = np.empty((n, width), dtype=dtype)
        map_row_chunks(n, lambda start, stop: chunk(X[start:stop], out[start:stop]))
        return out
    xp = placement.xp
    target = placement.dtype(dtype)
    step = row_chunk_rows(X, width)
    parts = [chunk(X[start : min(n, start + step), ...], None) for start in range(0, n, step)]
    if not parts:
        Z = xp.zeros((0, width), dtype=target, device=placement.device)
    else:
        Z = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
    Z = Z if Z.dtype == target else xp.astype(Z, target)
    if out is not None:
        out[...] = Z
        return out
    return Z


#: Sketches one host worker thread takes in lockstep at most (:func:`lockstep_width`): each
#: round of a lockstep costs about 30 numpy calls whatever the number of sketches, so 8 sketches
#: of ``batch_size`` 40 spread them over 320 rows; more would only grow the working set (their
#: buffers and feature chunks, 8 MiB at m = 1000) beyond the L2 cache.
MAX_LOCKSTEP = 8


def lockstep_width(X, n_sketches: int) -> int:
    """How many of ``n_sketches`` sketches in one state, taking rows of X, one worker takes in
    lockstep (:func:`fastkpca.sketch.extend_in_lockstep`: their shrinks batched).

    On the host an even share per worker thread (:func:`~fastkpca.execution.n_workers`), at
    most :data:`MAX_LOCKSTEP`, so that every thread batches the shrinks of its own sketches; on
    a device all of them, in the calling thread: one batched product and one transfer per round
    for all the sketches, their small eigendecompositions shared out to the host's threads
    (:func:`stacked_eigh`).  Which sketches go together never changes what any of them computes:
    the batched steps are the same per-sketch operations."""
    n_sketches = max(1, int(n_sketches))
    if not placement_of(X).host:
        return n_sketches
    per_worker = -(-n_sketches // max(1, n_workers()))
    return max(1, min(MAX_LOCKSTEP, per_worker))


def lockstep_chunk_rows(X, n_sketches: int, width: int, itemsize: int, host_rows: int) -> int:
    """Rows per sketch of one feature chunk of sketches in lockstep (an ``(n_sketches, rows,
    width)`` array): ``host_rows`` on the host (in cache, per worker thread); on a device the
    chunk that fits :data:`~fastkpca.execution.budget.LOCKSTEP_CHUNK_BYTES` and the device's
    free memory (:func:`row_chunk_rows`), at least one row."""
    if placement_of(X).host:
        return host_rows
    per_sketch = LOCKSTEP_CHUNK_BYTES // max(1, n_sketches * width * itemsize)
    device = row_chunk_rows(X, width * max(1, n_sketches), itemsize)
    return max(1, min(per_sketch, device))


def sketch_grams(C, n_kept: int, extra=None, *, on=None):
    """The new rows' block of the Grams of stacked Frequent Directions buffers.

    ``C`` is ``(J, r, m)``, float64, of any namespace: J buffers whose first ``n_kept`` rows are
    a shrunk sketch B (orthogonal rows, whose Gram ``B B^T`` is diagonal and known to the
    caller) and whose other rows N are new.  Returns the float64 ``(J, r - n_kept, r)`` array
    ``N [B; N]^T`` (its ``[..., n_kept:]`` block ``N N^T`` exact in its lower triangle at least)
    and ``extra`` (a ``(J,)`` array of C's namespace, e.g. the rows' energies), or None, both on
    the placement ``on`` (:func:`stacked_eigh_placement`; default: the host).

    On the host ``N B^T`` is one batched product and ``N N^T`` numpy's SYRK of each sketch (half
    the multiply-adds of a product); on a device one batched product, kept there or moved to the
    host with ``extra`` in one transfer.
    """
    placement = placement_of(C)
    k = int(n_kept)
    if placement.host:
        J, r, _ = C.shape
        N = C[:, k:, :]
        out = np.empty((J, r - k, r))
        np.matmul(N, C[:, :k, :].transpose(0, 2, 1), out=out[:, :, :k])
        for j in range(J):
            out[j, :, k:] = N[j] @ N[j].T  # numpy's SYRK (a @ a.T of one array)
        return out, (None if extra is None else np.asarray(extra, dtype=np.float64))
    xp = placement.xp
    N = C[:, k:, ...]
    block = N @ xp.permute_dims(C, (0, 2, 1))
    if on is not None and not on.host:
        return block, (None if extra is None else xp.astype(extra, xp.float64))
    J, b, r = block.shape
    if extra is None:
        return np.asarray(to_host(block), dtype=np.float64), None
    values = np.asarray(
        to_host(xp.concat([xp.reshape(block, (-1,)), xp.astype(extra, xp.float64)])),
        dtype=np.float64,
    )
    return values[: J * b * r].reshape(J, b, r), values[J * b * r :]


def stacked_eigh_placement(placement: Placement) -> Placement:
    """Where the small eigendecompositions of sketches whose buffers are on ``placement`` run
    (:func:`stacked_eigh`), and with them the rest of each shrink's small steps: a CUDA device
    where CuPy is installed (cuSOLVER's batched Jacobi solver, which PyTorch's ``eigh`` does not
    use for matrices over 32 rows), else the host (numpy's LAPACK on the worker threads).  On a
    GPU without CuPy the shrinks' Grams make a round trip to the host each round."""
    if placement.is_cuda and _cupy() is not None:
        return placement
    return HOST


@functools.cache
def _cupy():
    """The ``cupy`` module, or None where it is not installed (an optional accelerator of the
    Frequent Directions shrinks on a CUDA device; imported once, on the first device fit)."""
    try:
        return importlib.import_module("cupy")
    except Exception:  # noqa: BLE001 (not installed, or no CUDA runtime it can load)
        return None


def stacked_eigh(G):
    """Eigenpairs of a stack of small symmetric matrices ``(J, r, r)`` (lower triangles read),
    eigenvalues descending: ``(values (J, r), vectors (J, r, r))``, vectors in columns, on G's
    placement (the host, or a CUDA device where :func:`stacked_eigh_placement` keeps them).

    On the host numpy's LAPACK (``syevd``, which releases the interpreter lock) over the stack;
    called outside a worker thread (a device fit's batched shrink), a stack of several is shared
    out to the worker threads (:func:`~fastkpca.execution.map_row_chunks`), each matrix's
    eigendecomposition the same whatever the share.  One matrix (a sketch's own shrink) is
    decomposed right here: the thread count is not worth reading for it.  On a CUDA device,
    CuPy's batched ``eigh`` on the same memory (DLPack, on PyTorch's current stream); on other
    namespaces their own ``linalg.eigh``."""
    placement = placement_of(G)
    if not placement.host:
        return _device_stacked_eigh(G, placement)
    J = G.shape[0]
    if J == 1:
        w, v = np.linalg.eigh(G)
        return w[:, ::-1], v[:, :, ::-1]
    vals = np.empty(G.shape[:2])
    vecs = np.empty(G.shape)

    def part(start: int, stop: int) -> None:
        w, v = np.linalg.eigh(G[start:stop])
        vals[start:stop] = w[:, ::-1]
        vecs[start:stop] = v[:, :, ::-1]

    map_row_chunks(J, part, chunk_rows=max(1, -(-J // max(1, n_workers()))))
    return vals, vecs


def _device_stacked_eigh(G, placement: Placement):
    """:func:`stacked_eigh` off the host: CuPy's batched solver on a CUDA device
    (:func:`stacked_eigh_placement`), the namespace's own ``eigh`` elsewhere."""
    xp = placement.xp
    if placement.is_cuda and _cupy() is not None:
        cupy = _cupy()
        torch = importlib.import_module("torch")
        stream = torch.cuda.current_stream(G.device)
        with cupy.cuda.Device(G.device.index), cupy.cuda.ExternalStream(stream.cuda_stream):
            w, v = cupy.linalg.eigh(cupy.from_dlpack(G.contiguous()))
            w, v = torch.from_dlpack(w), torch.from_dlpack(v)
    else:
        # a non-finite row is refused by the caller when it reads its state back (nothing is
        # read back here); the namespace's LAPACK would stop at it first, with its own error
        w, v = xp.linalg.eigh(xp.where(xp.isfinite(G), G, 0.0))
    return xp.flip(w, axis=-1), xp.flip(v, axis=-1)


def stack_sums_of_squares(A):
    """``sum_ik A_jik^2`` for every j of a float64 ``(J, t, m)`` stack: a ``(J,)`` array of A's
    namespace (numpy's ``einsum`` on the host, without a temporary)."""
    placement = placement_of(A)
    if placement.host:
        return np.einsum("jik,jik->j", A, A)
    xp = placement.xp
    return xp.sum(xp.reshape(A * A, (A.shape[0], -1)), axis=1)


class ChunkBuffers:
    """Work arrays for one pass over the row chunks of X (:func:`for_row_chunks`, :func:`map_rows`).

    On the host each worker thread gets its own ``(CHUNK_ROWS, width)`` array per name, reused
    from chunk to chunk (in cache, allocated once per pass); on a device :meth:`get` gives None
    (a chunk's result is a new array there, sized for the chunk).
    """

    def __init__(self, X):
        self._reuse = placement_of(X).host
        self._local = threading.local()

    def get(self, name: str, n_rows: int, width: int, dtype):
        """Rows ``[:n_rows]`` of this thread's ``(>= n_rows, width)`` array ``name`` of ``dtype``,
        or None on a device."""
        if not self._reuse:
            return None
        arrays = self._local.__dict__
        buffer = arrays.get(name)
        if (
            buffer is None
            or buffer.shape[0] < n_rows
            or buffer.shape[1] != width
            or buffer.dtype != np.dtype(dtype)
        ):
            buffer = arrays[name] = np.empty((n_rows, width), dtype=dtype)
        return buffer[:n_rows]


# ------------------------------------------------------------------------------------------------
# element-wise steps
# ------------------------------------------------------------------------------------------------
def cos_sin(P, offset, scale: float, out=None):
    """``[cos(P + offset), sin(P + offset)] * scale`` of float phases P (n, D), which it may
    overwrite, and float64 offset phases (D,) or None; written into ``out`` ((n, 2 D), possibly
    of another float dtype) and returned when given, a new array of P's dtype otherwise.

    The offset phases are reduced modulo 2 pi in float64 first (they may be large; P's phases
    are small).  On the host the computation is in P's precision with numpy's ufuncs in place,
    the offset added by the rotation ``cos(t + phi) = cos t cos phi - sin t sin phi`` (and
    ``sin(t + phi) = sin t cos phi + cos t sin phi``) with ``cos phi``, ``sin phi`` computed in
    float64; on a device the reduced offset is added to P and ``cos`` / ``sin`` taken once.
    """
    placement = placement_of(P)
    if not placement.host:
        return _cos_sin_xp(P, offset, scale, out, placement)
    n, D = P.shape
    scale = P.dtype.type(scale)  # the scale rounded to P's precision, as the products use it
    if out is None:
        out = np.empty((n, 2 * D), dtype=P.dtype)
    buf = out if out.dtype == P.dtype else np.empty(out.shape, dtype=P.dtype)
    if offset is None:
        np.sin(P, out=buf[:, D:])
        np.cos(P, out=buf[:, :D])
        buf *= scale
    else:
        phi = np.remainder(offset, 2 * np.pi)
        cphi = (np.cos(phi) * float(scale)).astype(P.dtype)
        sphi = (np.sin(phi) * float(scale)).astype(P.dtype)
        cos_t = np.cos(P)
        sin_t = np.sin(P, out=P)
        np.multiply(cos_t, cphi, out=buf[:, :D])
        buf[:, :D] -= sin_t * sphi
        np.multiply(sin_t, cphi, out=buf[:, D:])
        cos_t *= sphi
        buf[:, D:] += cos_t
    if buf is not out:
        out[...] = buf
    return out


def _cos_sin_xp(P, offset, scale, out, placement):
    """:func:`cos_sin` on a device: whole-array operations (torch: written into one array)."""
    xp = placement.xp
    if offset is not None:
        P = P + xp.astype(offset % (2 * np.pi), P.dtype)
    if placement.is_torch and not P.requires_grad:
        import torch

        n, D = P.shape
        Z = torch.empty((n, 2 * D), dtype=P.dtype, device=P.device)
        torch.cos(P, out=Z[:, :D])
        torch.sin(P, out=Z[:, D:])
        Z.mul_(scale)
    else:
        Z = xp.concat([xp.cos(P), xp.sin(P)], axis=1) * scale
    if out is not None:
        out[...] = Z
        return out
    return Z


def sum_of_squares(A):
    """``sum A_ij^2`` of a float64 array: a float on the host (numpy's own loop, not a threaded
    BLAS ``dot``, whose idle threads would spin-wait after it), a 0-d array of A's namespace on
    a device (read when the caller moves it)."""
    placement = placement_of(A)
    if placement.host:
        return float(np.einsum("ij,ij->", A, A))
    return placement.xp.sum(A * A)


def sum_over_row_shares(X, part: Callable):
    """``sum part(X[a:b])`` over row shares of X, as a float64 array of X's namespace: the
    products of the statistics over many rows (``Z^T Z``, ``A^T (A Q)``, ``Y^T Y``).

    ``part(rows)`` returns the product of a slice of rows, in their precision.  On the host the
    shares are :data:`~fastkpca.execution.SHARE_ROWS` rows, fixed by the row count alone, spread
    over the worker threads with BLAS on one thread and added in float64
    (:func:`~fastkpca.execution.sum_over_shares`: on these thin products one-threaded products
    on shares beat one multi-threaded BLAS call, whose idle threads' spin-waits cost up to 5x on
    a loaded machine); on a device ``part(X)`` once, its product large already, cast to
    float64.
    """
    placement = placement_of(X)
    if placement.host:
        return sum_over_shares(
            X.shape[0], lambda start, stop: part(X[start:stop]), share_rows=SHARE_ROWS
        )
    xp = placement.xp
    return xp.astype(part(X), xp.float64)


def bucket_sums(S: sp.csr_matrix, Z):
    """``S @ Z`` in Z's dtype and namespace, for a host CSR matrix S (t x b) with one non-zero,
    +-1, per column: a CountSketch of the b rows of Z into t buckets.

    On the host scipy's sparse product (O(b m), S cast to Z's dtype: each bucket sums ~b / t
    rows, so float32 rows lose nothing before the caller's float64 total); with PyTorch the
    signed rows are added into their buckets by ``index_add_`` (O(b m)); elsewhere the one-hot
    product of a dense copy of S (O(t b m): the array API has no scatter-add).
    """
    placement = placement_of(Z)
    if placement.host:
        return S.astype(Z.dtype) @ Z
    xp = placement.xp
    t = S.shape[0]
    if placement.is_torch:
        columns = S.tocsc()  # one entry per column, in row order
        columns.sort_indices()
        buckets = placement.asarray(columns.indices.astype(np.int64))
        signs = placement.asarray(columns.data, Z.dtype)
        out = xp.zeros((t, Z.shape[1]), dtype=Z.dtype, device=placement.device)
        out.index_add_(0, buckets, Z * signs[:, None])
        return out
    return placement.asarray(S.toarray(), Z.dtype) @ Z


def row_sums_of_squares(A, dtype=None):
    """``sum_k A_...k^2`` over the last axis of A (the squared norm of every row of a matrix,
    or of a stack of them), in ``dtype`` (default A's), an array of A's namespace; on the host
    by ``einsum`` (no temporary of A's size)."""
    placement = placement_of(A)
    if placement.host:
        return np.einsum("...k,...k->...", A, A, dtype=dtype)
    xp = placement.xp
    if dtype is not None:
        A = xp.astype(A, placement.dtype(dtype))
    return xp.sum(A * A, axis=-1)


# ------------------------------------------------------------------------------------------------
# the Walsh-Hadamard transform
# ------------------------------------------------------------------------------------------------
def hadamard(n: int) -> np.ndarray:
    """The unnormalised n x n Sylvester-Hadamard matrix (n a power of 2), entries +-1."""
    H = np.ones((1, 1))
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H


_HADAMARD_CACHE: dict = {}


def _hadamard_on(n: int, like):
    """:func:`hadamard` in the dtype and on the placement of ``like``, built once."""
    placement = placement_of(like)
    key = (n, like.dtype, placement.name)
    if key not in _HADAMARD_CACHE:
        dtype = np.float32 if like.dtype == placement.xp.float32 else np.float64
        _HADAMARD_CACHE[key] = placement.asarray(hadamard(n).astype(dtype), dtype)
    return _HADAMARD_CACHE[key]


def _kron_split(D: int) -> tuple[int, int]:
    """``D = a * b`` with a, b powers of 2 as equal as possible (b >= a)."""
    lg = D.bit_length() - 1
    b = 1 << ((lg + 1) // 2)
    return D // b, b


def fwht(A, *, work=None):
    """Unnormalised fast Walsh-Hadamard transform of every row of A, ``A @ H_D``.

    A is a ``(n, D)`` float array, D a power of 2.  Sylvester's construction gives
    ``H_D = H_a (x) H_b`` with ``a b = D``, so with each row viewed as an a x b matrix R the
    transform is ``H_a R H_b``: two GEMMs with small Hadamard matrices (``a, b ~ sqrt(D)``, 32 for
    D = 1024).  That is ``2 (a + b)`` flops per entry instead of the butterflies' ``log2 D``
    additions, but run as BLAS kernels it is faster in numpy than ``log2 D`` strided butterfly
    passes (each a Python-level operation over the whole array), and far cheaper than the
    ``2 D`` flops of a dense ``A @ H_D``.

    On the host A (C-contiguous) is overwritten with the result, which is returned; ``work`` is
    an optional ``(n * D,)`` scratch array of A's dtype.  On a device a new array is returned
    (two batched products).
    """
    n, D = A.shape
    if D & (D - 1):
        raise ValueError(f"fwht needs a power-of-2 width, got {D}")
    a, b = _kron_split(D)
    placement = placement_of(A)
    if not placement.host:
        xp = placement.xp
        R = xp.reshape(A, (n, a, b)) @ _hadamard_on(b, A)
        if a > 1:
            R = _hadamard_on(a, A) @ R
        return xp.reshape(R, (n, D))
    if not A.flags.c_contiguous:
        raise ValueError("fwht needs a C-contiguous array")
    if work is None or work.size < n * D:
        work = np.empty(n * D, dtype=A.dtype)
    T = work[: n * D].reshape(n * a, b)
    np.matmul(A.reshape(n * a, b), _hadamard_on(b, A), out=T)  # R H_b
    if a == 1:
        A.reshape(n, b)[...] = T
        return A
    # (n, a, b) -> (a, n, b) so that H_a multiplies one (a, n b) matrix in a single GEMM.
    At = A.reshape(a, n, b)
    np.copyto(At, T.reshape(n, a, b).transpose(1, 0, 2))
    np.matmul(_hadamard_on(a, A), At.reshape(a, n * b), out=T.reshape(a, n * b))
    np.copyto(A.reshape(n, a, b), T.reshape(a, n, b).transpose(1, 0, 2))
    return A


# ------------------------------------------------------------------------------------------------
# FFTs and sparse products
# ------------------------------------------------------------------------------------------------
def rfft(A):
    """The real FFT of every row of A, in A's precision (complex64 for float32)."""
    placement = placement_of(A)
    if placement.host:
        return scipy.fft.rfft(A, axis=1)
    return placement.xp.fft.rfft(A, axis=1)


def irfft(F, n: int):
    """The inverse of :func:`rfft`: rows of n real values."""
    placement = placement_of(F)
    if placement.host:
        return scipy.fft.irfft(F, n=n, axis=1)
    return placement.xp.fft.irfft(F, n=n, axis=1)


def sparse_product(X, S: sp.csr_matrix, cache: dict, *, what: str = "", hint: str = ""):
    """``X @ S``, dense, for rows X (dense of any namespace, or CSR) and a host CSR matrix S
    with few non-zeros a row, in S's dtype.

    On the host scipy's sparse product, O(nnz(X) + n S.shape[1]) whatever X's density: as
    ``(S^T X^T)^T`` for dense X (a sparse-times-dense product, no densified S).  On a device
    a dense copy of S, moved once and kept in ``cache`` (one per placement and dtype), and one
    GEMM; the copy is refused up front where it cannot fit (``what`` names it, ``hint`` says
    what to do instead).
    """
    if sp.issparse(X):
        return np.asarray((X.tocsr().astype(S.dtype, copy=False) @ S).toarray(), dtype=S.dtype)
    placement = placement_of(X)
    if placement.host:
        return np.ascontiguousarray((S.T @ X.T).T, dtype=S.dtype)
    key = (placement.name, S.dtype.str, id(S))
    dense = cache.get(key)
    if dense is None:
        d, t = S.shape
        require_memory(
            1.5 * S.dtype.itemsize * d * t,
            what or f"a dense {d} x {t} copy of a sparse matrix on the device",
            hint=hint,
        )
        dense = cache[key] = placement.asarray(S.toarray(), S.dtype)
    return X @ dense
