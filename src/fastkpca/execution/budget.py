"""Memory budgets and block sizes: every one of them, in one place.

A number here decides how large a piece of work is (rows per chunk, tile or block; the memory a
step may take), never what it computes: results depend on the data and ``random_state`` alone
(the chunk grids that fix the order of float sums are functions of the row count, not of the
machine).  Falkon keeps its block-size options together in the same way (``falkon.options``).

The host runs threads over cache-sized chunks (:mod:`fastkpca.execution.threads`); a device runs
large tiles sized from its free memory (:mod:`fastkpca.execution.tiles`).  The modules that use a
number import it from here.
"""

from __future__ import annotations

# --- the process's memory ---------------------------------------------------------------------

# --- host threads and chunks ------------------------------------------------------------------

# --- device tiles -----------------------------------------------------------------------------

# --- kernels and centering --------------------------------------------------------------------

# --- eigensolvers ------------------------------------------------------------------------------

#: Rows per GEMM call of a product of a dense host matrix with a block of vectors
#: (:func:`fastkpca.execution.linalg.matmat`): OpenBLAS runs a tall 20000 x 20000 by 20 product a
#: third slower in one call than in 512-row pieces (30-35% for 10 to 30 columns, float32 and
#: float64, on two cores).
MATMAT_BLOCK_ROWS = 512

#: Largest Krylov basis of the ``randomized`` (block Krylov) solver, in blocks, before a thick
#: restart (:func:`fastkpca.execution.linalg.krylov_basis_columns`).
KRYLOV_MAX_BLOCKS = 6

#: Memory (MiB) that the Krylov basis V and its image A V may take together where the memory has
#: no free-memory query (the host); on a device, this fraction of its free memory.
KRYLOV_MEMORY_MB = 512
KRYLOV_FREE_FRACTION = 0.25

#: Rows and columns of the tiles in which an overwritten symmetric matrix is restored from its
#: other triangle before LAPACK's fallback solve (the reads stay in cache).
RESTORE_TILE = 256

# --- feature maps and sketches ----------------------------------------------------------------

# --- statistics ---------------------------------------------------------------------------------

# --- estimators -------------------------------------------------------------------------------

# --- data sources -----------------------------------------------------------------------------
