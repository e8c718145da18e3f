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

# --- statistics ---------------------------------------------------------------------------------

# --- estimators -------------------------------------------------------------------------------

# --- data sources -----------------------------------------------------------------------------
