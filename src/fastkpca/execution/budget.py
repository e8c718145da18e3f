"""Memory budgets and block sizes: every one of them, in one place.

A number here decides how large a piece of work is (rows per chunk, tile or block; the memory a
step may take), never what it computes: results depend on the data and ``random_state`` alone
(the chunk grids that fix the order of float sums are functions of the row count, not of the
machine).  Falkon keeps its block-size options together in the same way (``falkon.options``).

The host runs threads over cache-sized chunks (:mod:`fastkpca.execution.threads`); a device runs
large tiles sized from its free memory (:mod:`fastkpca.execution.kernel_ops`).  The modules
that use a number import it from here.
"""

from __future__ import annotations

import math

# --- the process's memory ---------------------------------------------------------------------

# --- host threads and chunks ------------------------------------------------------------------

# --- device tiles -----------------------------------------------------------------------------
#: A tile and its temporaries may take this fraction of the device's free memory.
DEVICE_MEMORY_FRACTION = 0.25

#: Tile rows on a device without a free-memory query (CPU tensors, ``array_api_strict``): about
#: 64 MiB per tile.
DEFAULT_TILE_BYTES = 64 * 2**20

#: Bounds on a tile's rows: below, the GEMMs are too thin to fill a GPU; above, nothing is gained.
MIN_TILE_ROWS, MAX_TILE_ROWS = 256, 1 << 17


def tile_rows(placement, n_cols: int, itemsize: int, n_temporaries: int = 2) -> int:
    """Rows of an ``(rows, n_cols)`` device tile (with ``n_temporaries`` arrays of its size) that
    fit :data:`DEVICE_MEMORY_FRACTION` of the free memory of ``placement``'s device
    (:data:`DEFAULT_TILE_BYTES` per array where the device cannot say), within
    [:data:`MIN_TILE_ROWS`, :data:`MAX_TILE_ROWS`]."""
    free = placement.free_memory_bytes()
    budget = DEFAULT_TILE_BYTES * n_temporaries if free is None else DEVICE_MEMORY_FRACTION * free
    rows = int(budget // (max(1, n_cols) * itemsize * max(1, n_temporaries)))
    return max(MIN_TILE_ROWS, min(MAX_TILE_ROWS, rows))


# --- kernels and centering --------------------------------------------------------------------
#: Memory budget (in MiB) for one Gram row block and its float64 temporaries (the blocks of
#: :meth:`fastkpca.kernels.Kernel.blocks`, the row blocks of the centering of a stored Gram).
WORKING_MEMORY_MB = 256

#: Bytes of one row chunk of the threaded kernel rows on the host (:meth:`Kernel.fold_rows
#: <fastkpca.kernels.Kernel.fold_rows>`, ``blocks``, ``__call__``): about 1 MiB, so that a chunk
#: stays in cache from its GEMM through ``exp`` to the caller's products.
KERNEL_CHUNK_BYTES = 2**20

#: The fewest rows per chunk (thinner GEMMs lose efficiency; c > 8192 columns then exceed 1 MiB).
KERNEL_CHUNK_MIN_ROWS = 32

#: Bytes of one row strip of the upper block triangle in the host's matrix-free Gram products
#: (:func:`fastkpca.execution.kernel_ops.symmetric_kernel_matmat`), per thread: large enough that
#: the strip's GEMMs (its kernel values and the two products with the block of vectors) run
#: near peak, small beside the n x b blocks.
KERNEL_STRIP_BYTES = 32 * 2**20

#: The fewest rows of such a strip (and of a host tile of the blocked products).
KERNEL_STRIP_MIN_ROWS = 64


def chunk_rows(
    n_cols: int,
    *,
    itemsize: int = 8,
    n_temporaries: int = 3,
    working_memory_mb: float | None = None,
) -> int:
    """Number of rows of an ``(rows, n_cols)`` block that fits the working-memory budget
    (``working_memory_mb``, default :data:`WORKING_MEMORY_MB`, read when called)."""
    budget = (working_memory_mb or WORKING_MEMORY_MB) * 2**20
    per_row = max(1, n_cols) * itemsize * n_temporaries
    return int(max(1, budget // per_row))


def kernel_chunk_rows(n_cols: int, itemsize: int) -> int:
    """Rows per chunk of the threaded kernel rows: :data:`KERNEL_CHUNK_BYTES` of ``n_cols``
    values (256 rows of 1000 float32 values), at least :data:`KERNEL_CHUNK_MIN_ROWS`."""
    return max(KERNEL_CHUNK_MIN_ROWS, KERNEL_CHUNK_BYTES // (max(1, n_cols) * itemsize))


def kernel_strip_rows(n_cols: int, itemsize: int) -> int:
    """Rows per strip of the host's matrix-free Gram products (:data:`KERNEL_STRIP_BYTES`)."""
    return max(KERNEL_STRIP_MIN_ROWS, KERNEL_STRIP_BYTES // (max(1, n_cols) * itemsize))


#: Working memory (MiB) of one row strip of a stored symmetric Gram and its float64 temporaries,
#: per thread (:func:`fastkpca.execution.kernel_ops.symmetric_gram`): below the allocator's mmap
#: threshold, and strips many enough for the threads to share them evenly.
GRAM_STRIP_MB = 32

#: Working memory (MiB) of one row block of the in-place centering of a stored Gram in host
#: memory (:func:`centering_rows`): blocks of a few MiB stay in cache between the two passes
#: over them, and below the allocator's mmap threshold.
CENTER_BLOCK_MB = 16


def gram_strip_rows(n: int, n_threads: int) -> int:
    """Rows of a host strip of the stored n x n Gram when ``n_threads`` threads fill strips at
    once: :data:`GRAM_STRIP_MB` each, within their share of :data:`WORKING_MEMORY_MB`."""
    memory = min(WORKING_MEMORY_MB / max(1, n_threads), GRAM_STRIP_MB)
    return chunk_rows(n, working_memory_mb=memory)


def centering_rows(placement, n: int) -> int:
    """Rows per block of the in-place centering of an n x n Gram on ``placement``: blocks of
    :data:`CENTER_BLOCK_MB` (within :data:`WORKING_MEMORY_MB`) in host memory, tiles sized from
    the free memory on a device (:func:`tile_rows`)."""
    if not placement.in_host_memory:
        return tile_rows(placement, n, 8)
    return min(
        chunk_rows(n, n_temporaries=2),
        chunk_rows(n, n_temporaries=2, working_memory_mb=CENTER_BLOCK_MB),
    )


# --- exact KPCA: the stored Gram or its matrix-free passes -------------------------------------
#: Rows not in memory yet (a dask array, a file): the n x n Gram in their dtype may take at most
#: this fraction of the memory available, beside the rows computed into memory and the
#: eigensolver's workspace (:func:`fastkpca.decomposition.exact.check_exact_fits`).
EXACT_MEMORY_FRACTION = 0.25

#: Rows already in memory: the fit's peak is one Gram plus the eigensolver's workspace (at most
#: 1.35 Gram, ``tests/test_exact.py``), so the Gram may take this fraction of what is available.
GRAM_FRACTION = 1 / 1.35

#: Largest n for which ``ExactKPCA(eigen_solver="auto")`` recomputes a Gram too large to store
#: in host memory (a pass costs about n^2 (d + 2 + 2 b) flops); beyond, ``auto`` refuses rather
#: than start hours of work.  A GPU has no such bound (:func:`matrix_free_auto_max_n`).
MATRIX_FREE_AUTO_MAX_N = 200_000


def matrix_free_auto_max_n(placement) -> int | None:
    """The largest n ``eigen_solver="auto"`` computes matrix-free on ``placement``:
    :data:`MATRIX_FREE_AUTO_MAX_N` in host memory (read when called), None (no bound) on a GPU,
    whose passes are fast enough for n = 10^6."""
    return MATRIX_FREE_AUTO_MAX_N if placement.in_host_memory else None


#: Row blocks of the upper triangle read at sampled pairs take at most this fraction of the rows
#: (:func:`fastkpca.execution.kernel_ops.kernel_at_pairs`): the lower halves of the diagonal
#: blocks, computed and not read, then add at most half of it to the triangle's work.
PAIR_BLOCK_FRACTION = 1 / 16


#: Entries of one block of the kernel at sampled pairs evaluated row group by row group (a group's
#: rows against the union of their kept columns): enough to share a block's fixed cost, few
#: enough that the entries computed and not kept stay cheap.
PAIR_GROUP_ENTRIES = 4096


def pair_block_rows(n: int) -> int:
    """Rows per row block of an n-row Gram's upper triangle read at sampled pairs on the host:
    :data:`PAIR_BLOCK_FRACTION` of the rows, at least :data:`KERNEL_STRIP_MIN_ROWS`, within the
    working-memory budget (:func:`chunk_rows`)."""
    rows = max(KERNEL_STRIP_MIN_ROWS, math.ceil(n * PAIR_BLOCK_FRACTION))
    return max(1, min(chunk_rows(n), rows))


# --- eigensolvers ------------------------------------------------------------------------------

#: Rows per GEMM call of a product of a dense host matrix with a block of vectors
#: (:func:`fastkpca.execution.linalg.matmat`): OpenBLAS runs a tall product faster in pieces.
MATMAT_BLOCK_ROWS = 512

#: Largest Krylov basis of the ``randomized`` (block Krylov) solver, in blocks, before a thick
#: restart (:func:`fastkpca.execution.linalg.krylov_basis_columns`).
KRYLOV_MAX_BLOCKS = 6
#: Nystrom's whitening of a c x c landmark Gram on a device is the host's pivoted Cholesky up to
#: this c (:func:`~fastkpca.execution.linalg.whitening`): the same factor, hence the same model
#: as the host's, for moving the Gram there and back and a host ``dpstrf`` (c^3 / 3 flops);
#: above it, the device's ``eigh``.
HOST_WHITENING_MAX = 4096
#: Flops from which a serial dense step between threaded maps uses BLAS's threads (after such a
#: call they busy-wait, up to 2^28 cycles or ~0.1 s, on the cores the next map needs).
THREADED_BLAS_MIN_FLOPS = 1e9

#: Memory (MiB) that the Krylov basis V and its image A V may take together where the memory has
#: no free-memory query (the host); on a device, this fraction of its free memory.
KRYLOV_MEMORY_MB = 512
KRYLOV_FREE_FRACTION = 0.25

#: Rows and columns of the tiles in which an overwritten symmetric matrix is restored from its
#: other triangle before LAPACK's fallback solve (the reads stay in cache).
RESTORE_TILE = 256

# --- feature maps and sketches ----------------------------------------------------------------

#: Memory (MiB) for one block of random features and its temporaries on the host
#: (:func:`fastkpca.features.feature_blocks`): 8192 rows for m = 1000 in float64, 16384 in
#: float32, capped at the block rows the threads want.
FEATURE_BLOCK_MB = 128

#: A device chunk of features is sized from the device's free memory for the (rows, m) features
#: and this many arrays of their size in all (phases, cos / sin and the result).
FEATURE_DEVICE_TEMPORARIES = 3

#: Memory (MiB) the Frequent Directions sketches of one ``FeatureSketch`` may take: beyond it
#: fewer sketches are dealt rows (:func:`fastkpca.statistics.feature_sketch.sketch_count`, a
#: function of ``sketch_size`` and the number of features only, never of the machine).
SKETCHES_MEMORY_MB = 256

#: Device feature chunks of a ``FeatureSketch`` are raised to a whole cycle (a run of rows for
#: every sketch, so that the sketches go in lockstep) where the cycle's float32 features take
#: at most this many bytes.
LOCKSTEP_CHUNK_BYTES = 256 * 2**20

# --- statistics ---------------------------------------------------------------------------------

# --- estimators -------------------------------------------------------------------------------

#: Sparse rows chosen as Nystrom landmarks stay a CSR matrix when they have more features than
#: this (a dense row of a LIBSVM file can be huge); narrower ones are made dense, so that the
#: kernel rows are sparse x dense products, faster at those widths.
SPARSE_LANDMARKS_MIN_FEATURES = 4096

# --- data sources -----------------------------------------------------------------------------
