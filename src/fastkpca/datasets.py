"""Data sets: loaders for the papers' real data and the synthetic RandomNoisy set."""

from __future__ import annotations

import numpy as np

from ._utils import as_generator, check_int

__all__ = ["make_random_noisy"]


def make_random_noisy(n_samples, n_features, signal_dim=50, zeta=10.0, random_state=None,
                      dtype=np.float64):
    """The RandomNoisy set of the streaming KPCA paper: ``A = S D U + F / zeta``.

    Ghashami, Perry & Phillips (2016, section 5, after Liberty's Frequent Directions paper):
    S is n x s with i.i.d. N(0, 1) entries, D is diagonal with ``D_ii = 1 - (i - 1) / d``
    (linearly decreasing), U is s x d with orthonormal rows (a random rotation), F is n x d
    i.i.d. N(0, 1) noise and ``zeta`` sets the signal-to-noise ratio (the paper uses s = 50,
    zeta = 10).  Rows are generated in blocks, so only the output is held in memory.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features) and the requested dtype.
    """
    n = check_int("n_samples", n_samples, low=1)
    d = check_int("n_features", n_features, low=1)
    s = check_int("signal_dim", signal_dim, low=1, high=d)
    if not zeta > 0:
        raise ValueError(f"zeta must be > 0, got {zeta!r}")
    rng = as_generator(random_state)
    U, _ = np.linalg.qr(rng.standard_normal((d, s)))  # d x s, orthonormal columns
    DU = (1.0 - np.arange(s) / d)[:, None] * U.T  # D U, s x d
    X = np.empty((n, d), dtype=dtype)
    block = 65536
    for start in range(0, n, block):
        stop = min(n, start + block)
        S = rng.standard_normal((stop - start, s))
        X[start:stop] = S @ DU + rng.standard_normal((stop - start, d)) / zeta
    return X
