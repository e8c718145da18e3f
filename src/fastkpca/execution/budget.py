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

# --- data sources -----------------------------------------------------------------------------
