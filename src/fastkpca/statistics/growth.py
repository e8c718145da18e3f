"""Model sizes chosen by tolerance: one growth loop, stopped by the error probe.

Every estimator's ``tol`` fits at growing sizes and stops at the first whose one-sided bound
``estimate + z stderr`` of the relative rank-k error
(:class:`fastkpca.statistics.probe.ErrorProbe`) is at most ``1 + tol`` (:func:`grow_until`).
Sizes double (:func:`doubling_sizes`), so the search costs at most about two fits at the final
size; random Fourier features grow by blocks of frequencies, keeping the moments already
computed (:class:`GrowingFourierMoments`), and Nystrom's uniform landmark sets are nested.
Growth also ends where the probe cannot tell sizes apart (:data:`RESOLUTION_STDERRS`), where the
estimate stops falling (:data:`PLATEAU_STEPS`), at the largest size, or at a refused size:
:class:`Growth` says which, and :meth:`Growth.shortfall` how.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .._utils import DEFAULT_TOL, check_auto_size, check_tol
from ..execution.arrays import HOST, is_host_array, placement_of, row_range, to_host
from ..execution.budget import centering_rows
from ..execution.memory import MemoryLimitError
from ..features import FeatureMap, FourierFeatureMap, feature_blocks
from .feature_moments import FeatureMoments
from .probe import CONFIDENCE_Z, MAX_PROBE_ROWS, PROBE_ROWS, ErrorEstimate, ErrorProbe

__all__ = [
    "DEFAULT_TOL",
    "RESOLUTION_STDERRS",
    "PLATEAU_STEPS",
    "check_tol",
    "doubling_sizes",
    "Growth",
    "grow_until",
    "grow_estimator",
    "draw_probe",
    "adopt_fitted",
    "check_auto_size",
    "GrowingFourierMoments",
]

#: Growth stops (short of tol) where the estimate stopped falling (by less than its standard
#: error from one size to the next) within this many standard errors of 1: exact KPCA's own
#: estimate is there, and no larger size can be told apart from it by the probe.
RESOLUTION_STDERRS = 2.0

#: ... and, above that, after this many growth steps in a row in which it fell by less than its
#: standard error, keeping the most accurate fit rather than growing to the cap.
PLATEAU_STEPS = 2


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


def next_in(sizes: list[int]) -> Callable[[int, ErrorEstimate], int | None]:
    """``next_size`` for :func:`grow_until` walking a list of increasing sizes."""

    def next_size(size, estimate):
        later = [s for s in sizes if s > size]
        return later[0] if later else None

    return next_size


#: What ended a growth, for :meth:`Growth.shortfall`: "met" and "exact" reached tol.
MET, EXACT, RESOLUTION, PLATEAU, LARGEST, REFUSED = (
    "met",
    "exact",
    "resolution",
    "plateau",
    "largest",
    "refused",
)


@dataclass
class Growth:
    """The outcome of :func:`grow_until`.

    Attributes
    ----------
    model : the fitted model kept (None when the first size was refused)
    size : its size
    estimate : ErrorEstimate or None
        Its estimated error (``(1, 0)`` for exact KPCA).
    status : str
        ``"met"`` (bound at most ``1 + tol``), ``"exact"`` (exact KPCA), ``"resolution"`` (the
        estimate levels within its noise of 1), ``"plateau"`` (it stopped falling above tol),
        ``"largest"`` (short of tol at the largest size) or ``"refused"`` (a budget).
    history : list of (size, ErrorEstimate), the sizes fitted, in order.
    z : float
        The bound's quantile.
    refusal : str
        Why the size after the last one fitted was refused (a ``MemoryLimitError``), or "".
    """

    model: object = None
    size: int | None = None
    estimate: ErrorEstimate | None = None
    status: str = REFUSED
    history: list = field(default_factory=list)
    z: float = CONFIDENCE_Z
    refusal: str = ""

    @property
    def met(self) -> bool:
        """Whether the model kept reached tol (or is exact KPCA)."""
        return self.status in (MET, EXACT)

    def shortfall(self, tol: float, what: str = "size") -> str:
        """Why the model kept did not reach tol, in words ("" when it did)."""
        if self.met or self.estimate is None:
            return ""
        est, se = self.estimate
        bound = f"{est:.4f} + {self.z:g} x {se:.4f}"
        if self.status == RESOLUTION:
            return (
                f"tol={tol} is finer than the probe resolves: the estimated relative rank-k "
                f"error at {what} {self.size}, {est:.4f}, stopped falling within "
                f"{RESOLUTION_STDERRS:g} standard errors ({se:.4f}) of exact KPCA's; that fit "
                "is kept, and the true error may be larger than 1 + tol"
            )
        if self.status == PLATEAU:
            return (
                f"tol={tol}: the estimated relative rank-k error stopped falling at {bound} > "
                f"1 + tol ({PLATEAU_STEPS} sizes in a row within its standard error); the most "
                f"accurate fit ({what} {self.size}) is kept"
            )
        refused = f": the next was refused ({self.refusal})" if self.refusal else ""
        return (
            f"tol={tol}: the estimated relative rank-k error is still {bound} > 1 + tol at the "
            f"largest {what} tried ({self.size}){refused}; the most accurate fit is kept"
        )


def grow_until(
    fit_at: Callable[[int], object],
    error: Callable[[object], ErrorEstimate],
    first: int,
    next_size: Callable[[int, ErrorEstimate], int | None],
    tol: float,
    *,
    z: float = CONFIDENCE_Z,
    is_exact: Callable[[object], bool] | None = None,
    refine: Callable[[ErrorEstimate], bool] | None = None,
    on_fit: Callable[[int, object, ErrorEstimate], None] | None = None,
) -> Growth:
    """Fit at growing sizes until the error bound ``estimate + z stderr`` is at most ``1 + tol``.

    Parameters
    ----------
    fit_at : callable
        ``fit_at(size)`` fits the model at that size and returns it, or None to refuse the size
        (a budget): growth then ends.
    error : callable
        The estimated relative rank-k error of a fitted model, an
        :class:`~fastkpca.statistics.probe.ErrorEstimate`.
    first : int
        The first size.
    next_size : callable
        ``next_size(size, estimate)``: the next (larger) size, or None at the largest.
    tol : float
        The allowed relative excess error.
    z : float
        The bound's multiple of the standard error
        (:data:`~fastkpca.statistics.probe.CONFIDENCE_Z`).
    is_exact : callable, optional
        Whether a fitted model is exact KPCA (error 1: growth ends).  Default: ``solver_ ==
        "exact_kpca"``.
    refine : callable, optional
        Called at most once, when a standard error exceeds ``tol / z``: it may draw a larger
        probe and return True, and the estimate is taken again.
    on_fit : callable, optional
        ``on_fit(size, model, estimate)`` after each size.

    Returns
    -------
    Growth
        The first model that meets tol; else the last fitted when the probe cannot resolve tol,
        or the one with the lowest bound.
    """
    if is_exact is None:
        is_exact = _solved_exactly
    out = Growth(z=z)
    best: tuple | None = None
    previous: ErrorEstimate | None = None
    level_steps = 0
    refined = refine is None
    size: int | None = int(first)
    while size is not None:
        try:
            model = fit_at(size)
        except MemoryLimitError as refusal:  # a later size: growth ends, the best fit is kept
            if not out.history:
                raise
            model, out.refusal = None, str(refusal)
        if model is None:
            out.status = REFUSED
            break
        if is_exact(model):
            estimate = ErrorEstimate(1.0, 0.0)
        else:
            estimate = error(model)
            if not refined and math.isfinite(estimate.stderr) and z * estimate.stderr > tol:
                refined = True
                if refine(estimate):  # type: ignore[misc]
                    estimate = error(model)
        out.history.append((int(size), estimate))
        if on_fit is not None:
            on_fit(int(size), model, estimate)
        bound = estimate.upper(z) if math.isfinite(estimate.stderr) else estimate.estimate
        if best is None or bound < best[0]:
            best = (bound, model, int(size), estimate)
        if is_exact(model) or bound <= 1.0 + tol:
            return _kept(out, model, size, estimate, EXACT if is_exact(model) else MET)
        level = previous is not None and previous.estimate - estimate.estimate < max(
            previous.stderr, estimate.stderr
        )
        level_steps = level_steps + 1 if level else 0
        if level and estimate.estimate <= 1.0 + RESOLUTION_STDERRS * estimate.stderr:
            return _kept(out, model, size, estimate, RESOLUTION)
        if level_steps >= PLATEAU_STEPS:
            out.status = PLATEAU
            break
        previous = estimate
        following = next_size(int(size), estimate)
        if following is None or following <= size:
            out.status = LARGEST
            break
        size = following
    if best is not None:
        _, out.model, out.size, out.estimate = best
    return out


def draw_probe(source, rng, p: int | None = None, kernel=None) -> ErrorProbe:
    """An error probe of ``p`` (default :data:`~fastkpca.statistics.probe.PROBE_ROWS`) uniform
    rows of a source (all of them when it has fewer: the errors are then exact)."""
    rows = source.sample_rows(PROBE_ROWS if p is None else p, rng)
    return ErrorProbe(rows, kernel, rng, source.n_samples)


def grow_estimator(estimator, source, probe, fit_at, sizes: list[int], what: str) -> Growth:
    """An estimator's size chosen by its ``tol``: :func:`grow_until` over ``sizes`` with an error
    probe of the training rows (:func:`draw_probe`; drawn again once with twice its rows when
    its standard error is too large for tol), a ``RuntimeWarning`` when tol is not reached, the
    chosen fit's attributes adopted and ``size_history_`` (size, estimate) set.

    ``fit_at(size)`` returns a fitted copy of the estimator at that size (``tol=None``).
    """
    tol = check_tol(estimator.tol, auto=True)
    assert tol is not None  # auto: DEFAULT_TOL for None
    current = [probe]

    def refine(estimate) -> bool:
        p = min(MAX_PROBE_ROWS, 2 * current[0].size)
        if p <= current[0].size or current[0].exact:
            return False
        current[0] = draw_probe(source, current[0].rng, p, current[0].kernel)
        return True

    growth = grow_until(
        fit_at, lambda model: current[0].error(model), sizes[0], next_in(sizes), tol, refine=refine
    )
    if not growth.met:
        warnings.warn(growth.shortfall(tol, what), RuntimeWarning, stacklevel=4)
    adopt_fitted(estimator, growth.model)
    estimator.size_history_ = [(size, float(est.estimate)) for size, est in growth.history]
    return growth


def _kept(out: Growth, model, size, estimate, status) -> Growth:
    out.model, out.size, out.estimate, out.status = model, int(size), estimate, status
    return out


def _solved_exactly(model) -> bool:
    return getattr(model, "solver_", None) == "exact_kpca"


class GrowingFourierMoments:
    """Feature moments of a random Fourier map drawn in blocks of frequencies, extended in place.

    The map of all blocks ``FourierFeatureMap([W_1 ... W_J])`` has the raw features of block j,
    ``[cos X W_j, sin X W_j] / sqrt(D_j)``, rescaled by ``sqrt(D_j / D)`` and reordered, so its
    moments are the raw ones rescaled and permuted (:meth:`moments`), and a new block only needs
    the products of its columns with all columns (:meth:`extend`, one pass).  The raw moments
    are kept around a fixed shift, as in
    :class:`~fastkpca.statistics.feature_moments.FeatureMoments`.
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
        shift_new = to_host(new(row_range(X_first, 0, _SHIFT_ROWS))).mean(axis=0, dtype=np.float64)
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
        order, s = self._order_and_scale()
        out = FeatureMoments(0, self.shift[order] * s)  # its m x m totals written below
        out.m, out.n = order.shape[0], self.n
        out.sum = self.sum[order] * s
        # one new m x m array: the rows permuted (a copy), then its columns by blocks of rows
        out.gram = self.gram[order]
        step = centering_rows(HOST, order.shape[0])
        for a in range(0, order.shape[0], step):
            out.gram[a : a + step] = out.gram[a : a + step][:, order] * s
        out.gram *= s[:, None]
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
