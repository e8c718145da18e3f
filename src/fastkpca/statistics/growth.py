"""Model sizes chosen by tolerance: grow a model until its estimated error is small enough.

``NystromKPCA(n_landmarks="auto", tol=...)``, ``RandomFeatureKPCA(n_features="auto", tol=...)``
and ``StreamingKPCA(tol=...)`` fit at doubling sizes ``s0, 2 s0, 4 s0, ...`` (up to a cap) and
stop at the first size whose estimated relative rank-k error ``||Kc - T T^T||_F / ||Kc -
(Kc)_k||_F`` is at most ``1 + tol`` (:func:`grow_until`).  Doubling makes the whole search cost
at most ``sum_j (s / 2^j)^a <= 2`` fits at the final size s for a fit cost growing like ``s^a``,
a >= 1 (4/3 for the ``n s^2`` of the covariance passes), and less where work is reused:

* random Fourier features (``rff``, ``orf``) are drawn in blocks of frequencies, so the map of
  size 2m is the map of size m plus m new columns, and the m x m block of the feature moments
  stays valid (:class:`GrowingFourierMoments`): a doubling pass only computes the new columns'
  products with all columns, so the feature-Gram GEMMs of the whole search add up to those of
  one fit at the final size (the features of the old columns are recomputed on each pass, an
  O(n d m) trig cost, not their O(n m^2) products);
* the other estimators refit at each size: Nystrom's uniform landmark sets are nested (a larger
  set is a superset drawn from the same uniform keys, :func:`fastkpca.source.uniform_indices`)
  but the kernel-row moments are recomputed; Frequent Directions sketches of m features cannot
  be extended by columns, so ``StreamingKPCA`` re-sketches.

The error is estimated on a uniform probe of :data:`PROBE_ROWS` training rows
(``source.sample_rows``, the only rows held in memory) as :func:`fastkpca.metrics.estimate_error`
does for ``n <= n_probe`` (:class:`ProbeError`, which computes the probe's Gram and eigenvalues
once for all sizes): the exact relative error of the model on the probe's own centered Gram.
Its rank-k optimum is the probe's own KPCA, fitted to those very rows, so the probe error is
biased *up* against the error on all n rows (measured on pendigits, n = 3000-4000, every
method: probe 1.010-1.036 where the truth is 1.004-1.029; ``benchmarks/bench_tolerance.py``),
which makes the plain estimate a conservative stopping rule: no margin is added to it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from .._utils import DEFAULT_TOL, check_auto_size, check_tol
from ..execution.arrays import is_host_array, placement_of, to_host
from ..features import FeatureMap, FourierFeatureMap

__all__ = [
    "DEFAULT_TOL",
    "PROBE_ROWS",
    "check_tol",
    "doubling_sizes",
    "ProbeError",
    "grow_until",
    "adopt_fitted",
    "check_auto_size",
    "GrowingFourierMoments",
]

#: Training rows the error is estimated on (an exact p x p computation: ~1 s at p = 2000).
PROBE_ROWS = 2000


def adopt_fitted(target, fitted):
    """Copy the fitted attributes of ``fitted`` (a clone of ``target`` fitted at one size) onto
    ``target``; ``n_features_in_`` stays ``target``'s own.  Returns ``target``."""
    for name, value in vars(fitted).items():
        if name.endswith("_") and not name.startswith("_") and name != "n_features_in_":
            setattr(target, name, value)
    # the model changed: its cached copies on other placements (BaseKPCA._placed) too
    vars(target).pop("_placed_models", None)
    return target


def doubling_sizes(start: int, cap: int) -> list[int]:
    """``start, 2 start, 4 start, ...`` below ``cap``, then ``cap`` itself (``cap >= 1``)."""
    start = max(1, min(int(start), int(cap)))
    sizes = []
    size = start
    while size < cap:
        sizes.append(size)
        size *= 2
    sizes.append(int(cap))
    return sizes


class ProbeError:
    """The relative rank-k error of fitted models on fixed probe rows (exact on them).

    The value is that of :func:`fastkpca.metrics.estimate_error` with ``n_probe`` = the probe's
    size (its exact branch: ``||G - T T^T||_F / ||G - G_k||_F`` with G the probe's centered
    Gram and ``T = model.transform(probe)``; see the module notes for why it errs on the high
    side of the error on all rows), but G, ``||G||_F`` and G's top-k eigenvalues are computed
    once for all the sizes tried: each model then costs its transform of the probe plus
    ``O(p^2 k)`` (``||G - T T^T||^2 = ||G||^2 - 2 tr(T^T G T) + ||T^T T||^2``), not an
    ``O(p^3)`` eigendecomposition.

    Parameters
    ----------
    X_probe : array (p, d)
        The probe rows (a uniform sample of the training rows).
    """

    def __init__(self, X_probe):
        # Device rows are scored on the host (a host copy of the probe, at most PROBE_ROWS
        # rows; a device model transforms them through its host copy): the kernel's n_probe^2
        # Gram and the error arithmetic are the host's.
        X_probe = to_host(X_probe)
        self.X_probe = X_probe
        self._gram = None
        self._tail2: dict[int, float] = {}

    def __call__(self, model) -> float:
        from .._centering import center_gram_inplace
        from ..solvers import eigh_topk

        T = np.asarray(model.transform(self.X_probe), dtype=np.float64)
        k = T.shape[1]
        if self._gram is None:
            G = np.asarray(model.kernel_(self.X_probe), dtype=np.float64)
            self._scale = float(np.trace(G))  # the rounding threshold's scale (uncentered)
            center_gram_inplace(G)
            self._gram = G
            self._fro2 = float(np.einsum("ij,ij->", self._gram, self._gram))
        G = self._gram
        if k not in self._tail2:
            p = G.shape[0]
            method = "dense" if p <= 3000 and 5 * k >= p else "lanczos"
            vals, _ = eigh_topk(
                G.copy(), min(k, p), method=method, rng=0, overwrite=True, scale=self._scale
            )
            self._tail2[k] = max(self._fro2 - float(np.sum(vals**2)), 0.0)
        TtT = T.T @ T
        num2 = self._fro2 - 2.0 * float(np.sum(T * (G @ T))) + float(np.sum(TtT * TtT))
        den2 = self._tail2[k]
        if den2 <= 0.0:
            return 1.0 if num2 <= 1e-12 * self._fro2 else float("inf")
        return float(np.sqrt(max(num2, 0.0) / den2))


def grow_until(
    fit_at: Callable[[int], object],
    error: Callable[[object], float],
    sizes: list[int],
    tol: float,
    what: str = "size",
):
    """Fit at each of ``sizes`` until ``error(fit_at(size)) <= 1 + tol``.

    Parameters
    ----------
    fit_at : callable
        ``fit_at(size)`` fits the model at that size (reusing earlier work where it can) and
        returns it.
    error : callable
        The estimated relative rank-k error of what ``fit_at`` returned.
    sizes : list of int
        Increasing sizes; the last one is the cap.
    tol : float
        The allowed relative excess error.
    what : str
        The size's name, for the warning given when the cap does not reach ``tol``.

    Returns
    -------
    model : what the last ``fit_at`` returned
    history : list of (size, estimated error), one per size tried, in order
    """
    history: list[tuple[int, float]] = []
    model = None
    for size in sizes:
        model = fit_at(size)
        err = error(model)
        history.append((int(size), float(err)))
        if err <= 1.0 + tol:
            break
    else:
        warnings.warn(
            f"tol={tol}: the estimated relative rank-k error is still {history[-1][1]:.4f} at "
            f"the largest {what} tried ({history[-1][0]}); the model of that size is kept",
            RuntimeWarning,
            stacklevel=3,
        )
    return model, history


class GrowingFourierMoments:
    """Feature moments of a random Fourier map drawn in blocks of frequencies, extended in place.

    Block j has frequencies ``W_j`` (d x D_j) and raw features ``z_j = [cos X W_j, sin X W_j] /
    sqrt(D_j)``.  The map of all blocks is ``FourierFeatureMap([W_1 ... W_J])`` with features
    ``[cos X W, sin X W] / sqrt(D)``, D = sum D_j: the raw features rescaled by ``sqrt(D_j / D)``
    and reordered (cosines first), so its moments are those of the raw features rescaled and
    permuted (:meth:`moments`), and adding a block only needs the products of the new raw
    columns with all columns (:meth:`extend`, one pass over the rows).  The raw moments are kept
    around a fixed shift (the mean of each block's features on the first rows), as
    :class:`~fastkpca.statistics.feature_moments.FeatureMoments` does and for the same reason.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self.frequencies: list[np.ndarray] = []
        self.n = 0
        self.shift = np.zeros(0)
        self.sum = np.zeros(0)
        self.gram = np.zeros((0, 0))

    def extend(self, source, frequencies: np.ndarray, X_first):
        """Add a block of frequencies (d x D_new) and one pass of ``source`` for its moments."""
        old = list(self.frequencies)
        new = FourierFeatureMap(frequencies, self.kind)
        m_old, m_new = self.sum.shape[0], new.n_output_features
        shift_new = to_host(new(X_first[:_SHIFT_ROWS])).mean(axis=0, dtype=np.float64)
        stat = source.reduce(_cross_moments, _CrossMoments.merge, old, new, self.shift, shift_new)
        if self.n and stat.n != self.n:
            raise ValueError(
                f"the data gave {stat.n} rows on this pass and {self.n} before; a re-iterable "
                "source must yield the same rows every time"
            )
        gram = np.empty((m_old + m_new, m_old + m_new))
        gram[:m_old, :m_old] = self.gram
        gram[m_old:, :] = stat.cross
        gram[:m_old, m_old:] = stat.cross[:, :m_old].T
        self.gram = gram
        self.sum = np.concatenate([self.sum, stat.sum])
        self.shift = np.concatenate([self.shift, shift_new])
        self.n = stat.n
        self.frequencies.append(np.asarray(frequencies, dtype=np.float64))
        return self

    def _order_and_scale(self):
        """Raw column of each column of the combined map, and the combined scale of each."""
        sizes = [W.shape[1] for W in self.frequencies]
        D = sum(sizes)
        cos, sin, scale = [], [], np.empty(2 * D)
        base = 0
        for Dj in sizes:
            cos.append(base + np.arange(Dj))
            sin.append(base + Dj + np.arange(Dj))
            scale[base : base + 2 * Dj] = np.sqrt(Dj / D)
            base += 2 * Dj
        order = np.concatenate(cos + sin)
        return order, scale[order]

    def feature_map(self) -> FourierFeatureMap:
        """The map of all blocks: ``FourierFeatureMap`` of the stacked frequencies."""
        return FourierFeatureMap(np.hstack(self.frequencies), self.kind)

    def moments(self):
        """:class:`~fastkpca.statistics.feature_moments.FeatureMoments` of :meth:`feature_map`."""
        from .feature_moments import FeatureMoments

        order, s = self._order_and_scale()
        out = FeatureMoments(order.shape[0], self.shift[order] * s)
        out.n = self.n
        out.sum = self.sum[order] * s
        out.gram = self.gram[np.ix_(order, order)] * np.outer(s, s)
        return out


#: Rows of the first block whose mean features are the shift of a new frequency block.
_SHIFT_ROWS = 1024


class _CrossMoments:
    """Count, sum of the new raw features and their shifted products with all raw features."""

    def __init__(self, m_new: int, m_all: int):
        self.n = 0
        self.sum = np.zeros(m_new)
        self.cross = np.zeros((m_new, m_all))

    def merge(self, other: _CrossMoments) -> _CrossMoments:
        out = _CrossMoments(*self.cross.shape)
        out.n = self.n + other.n
        out.sum = self.sum + other.sum
        out.cross = self.cross + other.cross
        return out


def _cross_moments(blocks, old, new, shift_old, shift_new) -> _CrossMoments:
    """:class:`_CrossMoments` over ``(start, block)`` row blocks (the ``source.reduce`` step).

    Each block's features are computed in the rows' precision and split in row chunks of the
    same memory budget as :func:`fastkpca.features.feature_blocks`; the products are summed in
    float64.
    """
    from ..features import feature_blocks

    m_old, m_new = shift_old.shape[0], new.n_output_features
    stat = _CrossMoments(m_new, m_old + m_new)
    maps = [FourierFeatureMap(W, new.kind) for W in old] + [new]
    shift = np.concatenate([shift_old, shift_new])
    combined = _StackedMap(maps)
    device_shift: dict = {}
    for _, Z in feature_blocks(blocks, combined):
        if not is_host_array(Z):
            # Device features: the same shifted products on the device, float64 totals there,
            # moved to the host once at the end (they are m_new x m small).
            xp = placement_of(Z).xp
            if Z.dtype not in device_shift:
                device_shift[Z.dtype] = placement_of(Z).asarray(shift, np.float64)
                stat.sum = placement_of(Z).asarray(stat.sum, np.float64)
                stat.cross = placement_of(Z).asarray(stat.cross, np.float64)
            Zn = Z[:, m_old:]
            stat.n += Z.shape[0]
            stat.sum += xp.sum(xp.astype(Zn, xp.float64), axis=0)
            Z -= xp.astype(device_shift[Z.dtype], Z.dtype)
            stat.cross += xp.astype(xp.permute_dims(Zn, (1, 0)) @ Z, xp.float64)
            continue
        Zn = Z[:, m_old:]
        stat.n += Z.shape[0]
        stat.sum += Zn.sum(axis=0, dtype=np.float64)
        Z -= shift.astype(Z.dtype)
        stat.cross += Zn.T @ Z
    stat.sum, stat.cross = to_host(stat.sum), to_host(stat.cross)
    return stat


class _StackedMap(FeatureMap):
    """The raw features of several Fourier maps side by side (only what ``feature_blocks``
    needs: the widths, ``accepts_sparse`` and the features of a chunk)."""

    accepts_sparse = True

    def __init__(self, maps):
        self.maps = maps
        self.n_input_features = maps[0].n_input_features
        self.n_output_features = sum(f.n_output_features for f in maps)

    def _chunk(self, rows, out=None):
        parts = [f._chunk(rows) for f in self.maps]
        return self._result(placement_of(rows).xp.concat(parts, axis=1), out)
