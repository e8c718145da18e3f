"""AutoKPCA: the kernel PCA method and its size chosen from the data and the budgets.

Cheap looks before any full fit (the rules: ``docs/auto.md``):

1. what the rows are (:func:`profile_source`); few enough for exact KPCA
   (:data:`EXACT_MAX_ROWS`) with a Gram within the memory budget: fitted exactly at once;
2. the error probe (:class:`fastkpca.statistics.probe.ErrorProbe`) on :func:`probe_size`
   uniform rows (twice as many where tol asks it, :meth:`_Run.first_probe`;
   :func:`probe_rows_within` the budget), whose first half also gives the errors
   of Nystrom approximations at doubling sizes (:func:`nystrom_errors`): the predicted size and
   landmark method;
3. the candidates in order (:func:`candidate_methods`), each refused up front when its memory
   or predicted time at the predicted size exceeds what the budgets leave;
4. growth (:func:`fastkpca.statistics.growth.grow_until`) of the first candidate until the
   bound ``estimate + z stderr`` of its relative rank-k error is at most ``1 + tol``; when the
   budget stops it first, the next candidate is tried.

No candidate within the budgets is a ``ValueError`` naming each and why; candidates short of
``tol`` leave the most accurate one, with a ``RuntimeWarning``.  ``report_`` holds it all.
"""

from __future__ import annotations

import math
import numbers
import time
import warnings

import numpy as np
import scipy.sparse as sp
import sklearn
from sklearn.utils.validation import check_is_fitted

from .._landmarks import rpcholesky_of_gram
from .._utils import plain
from ..execution import available_memory_bytes, format_bytes, one_blas_thread, progress_bar
from ..execution.arrays import to_host
from ..execution.memory import MEMORY_FRACTION, parse_bytes
from ..source import uniform_indices
from ..statistics.growth import LARGEST, PLATEAU, RESOLUTION, check_tol, doubling_sizes, grow_until
from ..statistics.probe import (
    CONFIDENCE_Z,
    MAX_PROBE_ROWS,
    PROBE_ROWS,
    ErrorProbe,
    probe_memory_bytes,
)
from . import estimator_class
from . import nystrom as nystrom_module
from ._base import DEFAULT_N_COMPONENTS, BaseKPCA
from .random_features import RandomFeatureKPCA

__all__ = [
    "AutoKPCA",
    "DataProfile",
    "candidate_methods",
    "nystrom_errors",
    "parse_memory",
    "probe_size",
    "profile_source",
]

#: The probe has at least this many rows (all of them below).
MIN_PROBE_ROWS = 500

#: Exact KPCA is a candidate up to this many rows (if its Gram fits the memory budget): below,
#: a Gram of at most 72 MB takes a second or two and has no approximation error at all.
EXACT_MAX_ROWS = 3000

#: ... and above, whenever the probe predicts at least this fraction of n landmarks (exact KPCA
#: then costs about as much as the Nystrom fit: NystromKPCA's own exact path, class Notes).
EXACT_LANDMARK_FRACTION = 1 / 3

#: Sparse rows at least this wide with at most :data:`SPARSE_MAX_DENSITY` nonzeros are the
#: input-sparsity case: dense landmarks (c x d) would cost more than the rows themselves.
WIDE_FEATURES = 1000
SPARSE_MAX_DENSITY = 0.05

#: RPCholesky's selection runs at about two thirds of the flop rate of a uniform Nystrom fit,
#: so the cost model counts its flops this many times (benchmarks/NOTES.md).
RPCHOLESKY_SELECTION_COST = 1.5

#: ... but only where uniform landmarks need more than this many on the probe (the smallest
#: size it tries: nothing to save below).
CHEAP_LANDMARKS = 32

#: The probe's Nystrom sizes go up to this fraction of the rows they are fitted and judged on
#: (a half of the probe): beyond, the landmarks are most of those rows and the error says
#: nothing about a fit on all rows.
PROBE_MAX_LANDMARK_FRACTION = 0.25

#: Sparse probe rows are made dense when that copy takes at most this many bytes: the probe's
#: Gram is then a dense GEMM.
PROBE_DENSE_BYTES = 32 * 2**20

#: The predicted size is the first at which the probe's in-sample Nystrom error is at most
#: 1 + this fraction of tol: that error reads optimistic for a fit on all rows.
PREDICTION_MARGIN = 0.5

#: The sizes tried start here at the least (landmarks, features).
MIN_LANDMARKS = 32
MIN_FEATURES = 128

#: Largest sizes (the estimators' own caps for sizes chosen by tolerance).
MAX_LANDMARKS = 8192
MAX_FEATURES = 2**14

#: Cost model (flops), the one of ``NystromKPCA(solver="auto")``: a kernel value costs about
#: ``2 d + KERNEL_VALUE_FLOPS``; exact KPCA's centering and eigensolver ``EXACT_EIGEN_FLOPS``
#: per Gram entry.
KERNEL_VALUE_FLOPS = 30
EXACT_EIGEN_FLOPS = 300

#: Landmarks grow by at least this factor from one fit to the next (:meth:`_Run.next_size`).
MIN_GROWTH_FACTOR = 1.5

#: The least standard error of a probe of p rows times sqrt(p) measured on the benchmark sets
#: (benchmarks/NOTES.md): where ``tol`` asks for more rows than :func:`probe_size` even at this,
#: the first probe has twice as many (:meth:`_Run.first_probe`).
STDERR_SQRT_ROWS = 0.17

#: The probe takes at most this fraction of the memory budget (its rows are fewer when it
#: asks it, :func:`probe_rows_within`); the fits get the rest.
PROBE_MEMORY_SHARE = 0.4


# --- budgets --------------------------------------------------------------------------------------
def parse_memory(memory) -> int | None:
    """``memory_budget`` as bytes: None (the default budget), a number of bytes > 0, or a
    string with a K / M / G / T suffix (``"2GB"``, ``"512M"``, powers of 1024).  ValueError
    otherwise."""
    if memory is None:
        return None
    if isinstance(memory, str):
        parsed = parse_bytes(memory)
        if parsed is None or parsed <= 0:
            raise ValueError(
                "memory_budget must be a number of bytes or a size such as '2GB' or '512M', "
                f"got {memory!r}"
            )
        return parsed
    if isinstance(memory, bool) or not isinstance(memory, numbers.Real):
        raise ValueError(
            f"memory_budget must be None, a number of bytes or a string, got {memory!r}"
        )
    if not math.isfinite(float(memory)) or memory <= 0:
        raise ValueError(f"memory_budget must be a positive number of bytes, got {memory!r}")
    return int(float(memory))


def _check_time(seconds) -> float | None:
    """``time_budget`` as seconds: None (no limit) or a number > 0.  ValueError otherwise."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise ValueError(f"time_budget must be None or a number of seconds, got {seconds!r}")
    if not math.isfinite(float(seconds)) or seconds <= 0:
        raise ValueError(f"time_budget must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


# --- what the rows are ----------------------------------------------------------------------------
class DataProfile:
    """What is known of the training rows before any pass: n (None for a stream not yet read),
    d, whether sparse and how dense, whether several passes are possible, whether rows can be
    taken by index, the dtype's item size."""

    def __init__(self, n, d, sparse, density, multi_pass, random_access, itemsize):
        self.n = n
        self.d = d
        self.sparse = sparse
        self.density = density
        self.multi_pass = multi_pass
        self.random_access = random_access
        self.itemsize = itemsize

    @property
    def sparse_wide(self) -> bool:
        """Sparse rows of the input-sparsity case (see :data:`WIDE_FEATURES`)."""
        return self.sparse and self.d >= WIDE_FEATURES and self.density <= SPARSE_MAX_DENSITY

    def describe(self) -> dict:
        return {
            "n_samples": self.n,
            "n_features": self.d,
            "sparse": self.sparse,
            "density": float(self.density),
            "passes": "several" if self.multi_pass else "one",
            "random_access": self.random_access,
            "dtype": "float32" if self.itemsize == 4 else "float64",
        }


def profile_source(source) -> DataProfile:
    """The :class:`DataProfile` of a :class:`fastkpca.source.RowSource` (reads its first rows
    only: the density of sparse rows is that of the first block)."""
    head = source.head()
    if sp.issparse(head):
        density = head.nnz / max(1, head.shape[0] * head.shape[1])
    else:
        density = 1.0
    return DataProfile(
        n=source.n_samples,
        d=int(source.n_features),
        sparse=bool(source.sparse),
        density=float(density),
        multi_pass=bool(source.reiterable),
        random_access=bool(source.random_access) and source.n_samples is not None,
        itemsize=np.dtype(source.dtype).itemsize,
    )


# --- the probe of the spectrum --------------------------------------------------------------------
def nystrom_errors(probe: ErrorProbe, k: int, sizes, method: str, rng, stop: float = 0.0):
    """The relative rank-k error of Nystrom KPCA with c landmarks on the probe's first half,
    for each c of ``sizes`` in order until one is at most ``stop``: landmarks among the half's
    rows (``"uniform"``: a random order, prefixes nested; ``"rpcholesky"``: the pivots in order,
    any prefix the RPCholesky result with that many, Chen et al. 2024), the KPCA of their
    Nystrom features fitted on the half and judged on its rows (the probe's weighted loss,
    :mod:`fastkpca.statistics.probe`) against the half's own KPCA, its unweighted top-k, which
    the fits tend to as c nears the half's rows (against the weighted optimum they would level
    off above 1 where the diagonal weighs much: benchmarks/NOTES.md).  Fitted to the rows it is
    judged on, it reads optimistic for a fit on all rows: the growth that follows corrects it.
    """
    probe.reference(k)  # the parts for rank k
    half = probe.parts[0]
    vals, vecs = half.optimum(k, weighted=False)
    own = half.residual_rows(vecs * np.sqrt(np.maximum(vals, 0.0)))
    K = half.kernel_block()
    m = half.size
    errors = {}
    with one_blas_thread():  # small products: BLAS's threads would cost more than they save
        if method == "rpcholesky":
            order = rpcholesky_of_gram(K, min(max(sizes), m), rng)
        else:
            order = rng.permutation(m)
        for c in sizes:
            idx = order[: min(c, order.size)]
            w, V = np.linalg.eigh(K[np.ix_(idx, idx)])
            keep = w > 1e-10 * max(w[-1], 1e-300)
            F = K[:, idx] @ (V[:, keep] / np.sqrt(w[keep]))  # the half's Nystrom features
            Fc = F - F.mean(axis=0)
            # The KPCA of F F^T is the PCA of F: projections Fc U_k, U_k the top eigenvectors
            # of the c x c scatter (cheaper than an SVD of the m x c Fc).
            _, U = np.linalg.eigh(Fc.T @ Fc)
            T = Fc @ U[:, ::-1][:, : min(k, U.shape[1])]
            rows = half.residual_rows(T)
            errors[int(c)] = math.sqrt(rows.sum() / own.sum()) if own.sum() > 0 else 1.0
            if errors[int(c)] <= stop:
                break
    return errors


def probe_size(n) -> int:
    """Probe rows for n training rows: ``8 sqrt(n)`` within [MIN_PROBE_ROWS, PROBE_ROWS].

    The probe's Gram (p^2 kernel values) then costs as much as the kernel rows of a fit with
    64 landmarks: the probe stays a small part of the fit it chooses (its p^2 k eigenvectors
    too), and reaches the growth machinery's 2000 rows from n = 62500.
    """
    if n is None:
        return PROBE_ROWS
    return int(min(PROBE_ROWS, max(MIN_PROBE_ROWS, 8 * math.sqrt(n))))


def probe_rows_within(budget: int) -> int:
    """The most probe rows whose ``probe_memory_bytes`` are within PROBE_MEMORY_SHARE of budget."""
    room, low, high = PROBE_MEMORY_SHARE * budget, 0, 1  # bisection: the bytes grow with p
    while probe_memory_bytes(high) <= room:
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if probe_memory_bytes(mid) <= room else (low, mid)
    return low


def _probe_rows(source, profile: DataProfile, rng, p: int | None = None):
    """Uniform probe rows (``p``, default :func:`probe_size`, of them; sparse rows
    stay sparse unless a dense copy takes at most :data:`PROBE_DENSE_BYTES`), and for a stream
    read once (then uniform among its first rows) its first rows, on which the size is piloted
    (None for several passes)."""
    p = probe_size(profile.n) if p is None else p
    if profile.random_access or profile.multi_pass:
        if profile.sparse and profile.random_access:
            X = source.indexable()
            idx = uniform_indices(X.shape[0], p, rng)
            rows = sp.csr_matrix(X[idx])
            if rows.shape[0] * rows.shape[1] * 8 <= PROBE_DENSE_BYTES:
                return rows.toarray(), None
            return rows, None
        return source.sample_rows(p, rng), None  # where the rows are: the probe's Gram there
    head = to_host(source.head())
    idx = uniform_indices(head.shape[0], p, rng)
    return head[idx], head


# --- candidates -----------------------------------------------------------------------------------
def candidate_methods(profile: DataProfile, kernel) -> list[tuple[str, str]]:
    """The methods to try, in order, each with the rule that put it there (docs/auto.md).

    ``exact`` is always last when the rows can be taken by index: the fallback when the
    approximations cannot get there within the budgets (its own memory check then decides).
    """
    fourier = bool(getattr(kernel, "shift_invariant", False))
    features = fourier or kernel.name == "polynomial"
    n = profile.n
    out: list[tuple[str, str]] = []
    if profile.random_access and n is not None and n <= EXACT_MAX_ROWS:
        out.append(("exact", f"n = {n} <= {EXACT_MAX_ROWS}: the exact Gram is cheap"))
    if not profile.multi_pass:
        if features:
            out.append(("random-features", "one pass over a stream: random features"))
            out.append(("streaming", "one pass over a stream in less memory: Frequent Directions"))
        out.append(("nystrom", "one pass over a stream: landmarks from its first rows"))
        return out
    if profile.sparse_wide and fourier:
        out.append(
            (
                "random-features",
                f"sparse ({profile.density:.2g} nonzero) and wide (d = {profile.d}): random "
                "features at input-sparsity cost",
            )
        )
    out.append(("nystrom", "several passes possible: Nystrom, landmarks chosen by the probe"))
    if features and not profile.sparse_wide:
        out.append(("random-features", "fallback: random features"))
    if features:
        out.append(("streaming", "fallback in less memory: random features + Frequent Directions"))
    if profile.random_access and n is not None and n > EXACT_MAX_ROWS:
        out.append(("exact", "fallback: exact KPCA, if its Gram fits"))
    return out


# --- the estimator --------------------------------------------------------------------------------
class AutoKPCA(BaseKPCA):
    """Kernel PCA with the method and its size chosen from the data and the budgets.

    Looks at the rows, probes the kernel's spectrum on a uniform sample of rows (``8 sqrt(n)``, 500
    to 2000), picks the method (exact KPCA, Nystrom, random features, or random features with
    Frequent Directions) and grows its size until the relative rank-k error estimated on the probe
    is at most ``1 + tol``, within the memory and time budgets; ``report_`` says what was
    considered, tried and chosen, and why.  See the module notes and ``docs/auto.md`` for the rules.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives 10 (capped by the data).
    kernel, gamma, degree, coef0, nu
        Kernel spec, as for every fastkpca estimator.  The kernel is resolved once, on the
        rows (the first rows of a stream), and the same resolved kernel is given to the
        method chosen.
    tol : float, default 0.05
        The allowed relative excess of the rank-k error over exact KPCA's optimum: the error probe's
        estimate (:class:`fastkpca.statistics.probe.ErrorProbe`) plus 2 standard errors (calibrated:
        docs/auto.md) is at most ``1 + tol``; exact KPCA meets any tol.  When the probe cannot
        resolve tol (its estimate levels off above that), the most accurate fit is kept with a
        ``RuntimeWarning``.
    memory_budget : int, str or None
        Memory budget of the fit in bytes (or ``"2GB"``, ``"512M"``); None: 80 % of what is
        available (:func:`fastkpca.execution.available_memory_bytes`).  A method whose arrays
        at the size needed exceed it is not tried.
    time_budget : float or None
        Time budget of the fit in seconds; None: no limit.  A method whose fit is predicted
        (flops over a measured rate) to end past it is not tried, and growth stops there.
    device, n_jobs, verbose, random_state
        Forwarded to the method chosen (see any fastkpca estimator).
    fit_inverse_transform : bool, default False
        Forwarded: the method chosen learns its pre-image map.
    alpha : float, default 1.0
        Ridge parameter of the pre-image map.

    Attributes
    ----------
    method_ : str
        The method chosen, a ``fastkpca fit --method`` name (``"exact"``, ``"nystrom"``,
        ``"random-features"``, ``"streaming"``).
    estimator_ : the fitted estimator of that method; ``transform`` is its transform.
    report_ : list of dict
        One entry per candidate, in the order considered, with plain values:
        ``method``, ``size`` (rows for exact, landmarks, output features) and ``size_name``,
        ``params`` (the estimator's parameters that were chosen), ``reason`` (the rule that
        made it a candidate), ``error``, ``error_stderr`` and ``error_bound`` (the relative
        rank-k error estimated on the probe, its standard error and the bound ``error + 2
        error_stderr`` that tol is compared with; None when not fitted; 1 and 0 for exact KPCA),
        ``fit_seconds``, ``memory_bytes`` (needed at that size, by the cost model),
        ``predicted_seconds``, ``status`` (``"chosen"``, ``"tried"`` for a size or method
        given up, ``"rejected"`` when not fitted) and ``why``.
        The first entry (``method = "probe"``) describes the data and the probe.
    n_features_in_ : int
    eigenvalues_, n_components_, kernel_, explained_variance_ratio_, ... :
        The chosen estimator's fitted attributes, delegated.

    See Also
    --------
    ExactKPCA : the exact method, and the reference of the error estimate.
    NystromKPCA, RandomFeatureKPCA, StreamingKPCA : the approximate methods it chooses among.
    fastkpca.metrics.estimate_error : the same kind of error estimate for any fitted model.

    Examples
    --------
    >>> from fastkpca import AutoKPCA
    >>> from fastkpca.datasets import load_demo
    >>> X, _ = load_demo()
    >>> auto = AutoKPCA(n_components=5, gamma="median", tol=0.1, random_state=0)
    >>> auto = auto.fit(X[:1000])
    >>> auto.method_ in ("exact", "nystrom", "random-features", "streaming")
    True
    >>> chosen = [entry for entry in auto.report_ if entry["status"] == "chosen"]
    >>> len(chosen), chosen[0]["method"] == auto.method_
    (1, True)
    >>> auto.transform(X[1000:1003]).shape
    (3, 5)
    """

    _accepts_sparse = True

    def __init__(
        self,
        n_components=DEFAULT_N_COMPONENTS,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        tol=0.05,
        memory_budget=None,
        time_budget=None,
        random_state=None,
        fit_inverse_transform=False,
        alpha=1.0,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.tol = tol
        self.memory_budget = memory_budget
        self.time_budget = time_budget
        self.device = device
        self.random_state = random_state
        self.fit_inverse_transform = fit_inverse_transform
        self.alpha = alpha
        self.n_jobs = n_jobs
        self.verbose = verbose

    # --- delegation -------------------------------------------------------------------------
    def __getattr__(self, name):
        # Fitted attributes of the chosen estimator (eigenvalues_, kernel_, ...), read through.
        if name.endswith("_") and not name.startswith("_"):
            inner = self.__dict__.get("estimator_")
            if inner is not None:
                return getattr(inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- parameter checks -------------------------------------------------------------------
    def _check_params(self):
        """The shared checks, then ``tol``, ``memory_budget`` and ``time_budget`` (ValueError
        naming each)."""
        super()._check_params()
        if self.n_components is not None and not (
            isinstance(self.n_components, numbers.Integral)
            and not isinstance(self.n_components, bool)
        ):
            raise ValueError(
                f"AutoKPCA needs an integer n_components (the rank k of its error), got "
                f"{self.n_components!r}"
            )
        if self.tol is None:
            raise ValueError("tol must be a positive number (the allowed relative excess error)")
        check_tol(self.tol, auto=False)
        parse_memory(self.memory_budget)
        _check_time(self.time_budget)
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError("AutoKPCA cannot use kernel='precomputed'; use ExactKPCA")

    # --- fit ----------------------------------------------------------------------------------
    def fit(self, X, y=None):
        """Choose the method and its size, and fit it on X (array, CSR matrix, iterable of row
        blocks, dask array, tensor).  ValueError when no method fits the budgets."""
        self._check_params()
        started = time.perf_counter()
        tol = float(self.tol)
        budget = parse_memory(self.memory_budget)
        if budget is None:
            budget = int(MEMORY_FRACTION * available_memory_bytes())
        deadline = _check_time(self.time_budget)
        rng = self._make_rng()
        seed = int(rng.integers(2**31))
        probe_rng = np.random.default_rng(int(rng.integers(2**63)))
        source = self._fit_source(X)
        profile = profile_source(source)
        k = int(self.n_components or DEFAULT_N_COMPONENTS)
        if profile.n is not None and k >= profile.n:
            raise ValueError(
                f"n_components={k} must be less than the number of rows ({profile.n}): a "
                "rank-k error needs more rows than components"
            )
        # The kernel, resolved once: on all rows where they can be taken by index, else on the
        # first rows; the methods tried all get this very kernel.
        kernel = self._resolve_kernel(
            source if profile.random_access else to_host(source.head()), rng
        )
        run = _Run(self, X if profile.multi_pass else source, profile, tol, budget, kernel, k)
        run.deadline, run.started, run.seed = deadline, started, seed
        run.source, run.probe_rng = source, probe_rng
        with progress_bar(desc="AutoKPCA", unit="fit") as bar:
            run.bar = bar
            model = run.choose()
        # The kernel is the estimator's (the same object): read through, not kept twice.
        del self.kernel_
        self.estimator_ = model
        self.method_ = run.chosen_method
        self.report_ = run.report
        return self

    # --- transform ----------------------------------------------------------------------------
    def transform(self, X):
        """Project X with the chosen estimator (its ``transform``)."""
        check_is_fitted(self)
        return self.estimator_.transform(X)

    def inverse_transform(self, X):
        """Pre-images by the chosen estimator's ``inverse_transform``
        (``fit_inverse_transform=True``)."""
        check_is_fitted(self)
        return self.estimator_.inverse_transform(X)

    @property
    def _n_features_out(self):
        return self.estimator_.n_components_


class _Run:
    """One AutoKPCA fit: the candidates, their growth and the report."""

    def __init__(self, auto, X, profile, tol, budget, kernel, k):
        self.auto = auto
        self.X = X
        self.profile = profile
        self.tol = tol
        self.budget = budget
        self.kernel = kernel
        self.k = k
        self.deadline: float | None = None
        self.started = time.perf_counter()
        self.seed = 0
        self.source = None  # the data's source and the probe's generator, to draw the probe
        self.probe_rng = np.random.default_rng(0)
        self.bar = None
        self.probe: ErrorProbe | None = None  # drawn by draw_probe (exact KPCA needs none)
        self.pilot_rows = None
        self.report: list[dict] = []
        self.chosen_method: str | None = None
        d = profile.d if not profile.sparse else max(1.0, profile.d * profile.density)
        self.d_eff = float(d)
        self.rate = 1e9  # flops per second: from the probe's Gram, then from each fit
        self.probe_sizes: dict[str, dict[int, float]] = {}
        self._probe_grown = False

    # --- clock, memory and progress ------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - self.elapsed()

    @property
    def drawn(self) -> ErrorProbe:
        """The error probe (drawn)."""
        assert self.probe is not None
        return self.probe

    def fit_budget(self) -> int:
        """The memory budget left to a fit beside the probe it is judged by."""
        held = 0 if self.probe is None else probe_memory_bytes(self.probe.size)
        return max(self.budget - held, 0)

    def say(self, text: str) -> None:
        """A progress step (``verbose``): the bar's text, and one more step done."""
        if self.bar is not None:
            self.bar.set_postfix_str(text)
            self.bar.update(1)

    # --- the probe --------------------------------------------------------------------------------
    def draw_probe(self, p: int | None = None, reason: str | None = None) -> bool:
        """Draw the error probe (``p`` rows, default :func:`probe_size`, fewer when the memory
        budget asks it) and describe it in the report; False when the budget allows no probe
        that can estimate a rank-k error."""
        start = time.perf_counter()
        wanted = probe_size(self.profile.n) if p is None else p
        wanted = max(wanted, 4 * self.k + 4)  # two halves of more than 2 k + 1 rows
        if self.profile.n is not None:
            wanted = min(wanted, self.profile.n)
        p = min(wanted, probe_rows_within(self.budget))
        if p <= 2 * self.k + 1 or (self.probe is not None and p <= self.probe.size):
            return False
        rows, pilot = _probe_rows(self.source, self.profile, self.probe_rng, p)
        self.probe = ErrorProbe(rows, self.kernel, self.probe_rng, self.profile.n)
        self.probe.reference(self.k)
        if self.pilot_rows is None:
            self.pilot_rows = pilot
        seconds = time.perf_counter() - start
        flops = self.probe.size**2 * (2 * self.d_eff + KERNEL_VALUE_FLOPS)
        self.rate = flops / max(seconds, 1e-4)
        self.probe_sizes = {}  # size predictions from this probe
        self.describe_probe(reason, seconds)
        self.say(f"probe of {self.probe.size} rows")
        return True

    def first_probe(self) -> tuple[int | None, str | None]:
        """The first probe's rows and why: :func:`probe_size`, or at once the probe that
        :meth:`grow_probe` would draw (twice as many rows, and no growth after it) when tol asks
        for a standard error that even favourable data reach only with more than probe_size
        rows: ``(z STDERR_SQRT_ROWS / tol)^2`` (:data:`STDERR_SQRT_ROWS`)."""
        n = self.profile.n
        if not (self.profile.random_access and self.profile.multi_pass) or n is None:
            return None, None
        base = probe_size(n)
        need = (CONFIDENCE_Z * STDERR_SQRT_ROWS / self.tol) ** 2
        p = min(MAX_PROBE_ROWS, 2 * base)
        if need <= base or p > n // 2:
            return None, None
        self._probe_grown = True
        return p, (
            f"tol={self.tol} asks for a standard error of at most tol / {CONFIDENCE_Z:g}, which "
            f"no measured data reach below {need:.0f} probe rows: the probe drawn at once with "
            f"{p} rows (twice {base}), as growth would draw it"
        )

    def grow_probe(self, estimate) -> bool:
        """Draw the probe again with twice its rows (once, at most
        :data:`~fastkpca.statistics.probe.MAX_PROBE_ROWS`, from rows taken by index): the
        estimates from here on, the one that asked included, are the larger probe's."""
        n = self.profile.n
        if self._probe_grown or not self.profile.random_access or n is None:
            return False
        self._probe_grown = True
        p = min(MAX_PROBE_ROWS, 2 * self.drawn.size)
        if p > n // 2:
            return False
        return self.draw_probe(
            p,
            f"the estimate's standard error ({estimate.stderr:.4f}) was too large for tol: the "
            f"probe drawn again with {p} rows",
        )

    def describe_probe(self, reason=None, seconds=None) -> None:
        size = None if self.probe is None else self.probe.size
        entry = {
            "method": "probe",
            "size": size,
            "size_name": "rows",
            "params": {
                "kernel": self.kernel.to_config() if hasattr(self.kernel, "to_config") else None
            },
            "reason": reason or "what the data are, and the spectrum on a uniform sample of rows",
            "data": self.profile.describe(),
            "error": None,
            "error_stderr": None,
            "error_bound": None,
            "fit_seconds": round(self.elapsed() if seconds is None else seconds, 4),
            "memory_bytes": 0 if size is None else probe_memory_bytes(size),
            "predicted_seconds": None,
            "status": "done",
            "why": "" if size is not None else "no probe: exact KPCA fits the budgets",
        }
        self.report.append(plain(entry))

    # --- the cost model -------------------------------------------------------------------------
    def flops(self, method: str, size: int, params: dict) -> float:
        n = self.profile.n or 10 * PROBE_ROWS
        d = self.d_eff
        per_value = 2 * d + KERNEL_VALUE_FLOPS
        if method == "exact":
            return n * n * (per_value / 2 + EXACT_EIGEN_FLOPS)
        if method == "nystrom":
            c = size
            if self.nystrom_solver(c) == "randomized":
                # float32 kernel rows (rbf: about twice as fast) and the q-column sketch
                q = nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA
                work = n * c * (per_value / 2 + q) + 2 * c**3 / 3
            else:
                work = n * c * (per_value + c / 2) + 2 * c**3 / 3
            if params.get("landmarks") == "rpcholesky":
                work += RPCHOLESKY_SELECTION_COST * (n * c * per_value + n * c * c)
            return work
        m = size
        if method == "random-features":
            if params.get("input_sketch") == "auto":
                per_value = 2 * m / 2 + KERNEL_VALUE_FLOPS
            if params.get("solver") == "countsketch":
                return n * m * per_value / 2 + n * m * 4
            return n * m * per_value / 2 + n * m * m / 2
        ell = params.get("sketch_size", 50)
        return n * m * per_value / 2 + 4 * n * m * ell

    def nystrom_solver(self, c: int) -> str:
        """The solver ``NystromKPCA(solver="auto")`` runs at c landmarks (its rule): the
        one-pass sketch where the scatter's SYRK would cost at least RANDOMIZED_MIN_FLOPS and
        c is at least 4 sketch columns, else the exact scatter."""
        n = self.profile.n
        q = nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA
        if n is not None and n * c * c / 2 < nystrom_module.RANDOMIZED_MIN_FLOPS:
            return "exact"
        return "randomized" if c >= 4 * q else "exact"

    def cheapest_landmarks(self, c: int, cap: int, params: dict) -> int:
        """c, or more landmarks where they cost less: the size at which ``NystromKPCA``
        switches to its sketch (float32 rows, no SYRK) when the cost model prices it below c
        landmarks on the exact scatter (``benchmarks/NOTES.md``)."""
        switch = 4 * (nystrom_module.SKETCH_FACTOR * self.k + nystrom_module.SKETCH_EXTRA)
        if c < switch <= cap and self.flops("nystrom", switch, params) <= self.flops(
            "nystrom", c, params
        ):
            return switch
        return c

    def memory(self, method: str, size: int, params: dict) -> int:
        n = self.profile.n
        d = self.profile.d
        if method == "exact":
            n = int(n or 0)
            return int(n * n * self.profile.itemsize * 1.35 + 8 * n * self.k)
        if method == "nystrom":
            c = size
            need = 64 * c * c + 8 * c * d
            if params.get("landmarks") == "rpcholesky":
                need += 8 * int(n or 0) * c
            return int(need)
        m = size
        width = m // 2 if params.get("input_sketch") == "auto" else d
        frequencies = 8 * width * (m // 2)
        if method == "random-features":
            if params.get("solver") == "countsketch":
                t = max(2000, 50 * (self.k + 10))
                return int(frequencies + 8 * (2 * t * m + 2 * min(t, m) ** 2))
            return int(frequencies + 24 * m * m)
        ell = params.get("sketch_size", 50)
        return int(frequencies + 2 * 8 * 8 * ell * m)

    # --- the choice -----------------------------------------------------------------------------
    def choose(self):
        candidates = candidate_methods(self.profile, self.kernel)
        n = self.profile.n
        failures = []
        exact_first = (
            candidates[0][0] == "exact" and self.memory("exact", int(n or 0), {}) <= self.budget
        )
        if exact_first:
            # Few rows and a Gram within the budget: exact KPCA at once, no probe (its error
            # is 1 by construction).
            self.describe_probe()
            model, why = self.try_method(*candidates.pop(0))
            if model is not None:
                self.chosen_method = "exact"
                return model
            failures.append(f"exact: {why}")
        if not self.draw_probe(*self.first_probe()):
            raise ValueError(
                "AutoKPCA: no method fits the budgets (memory_budget "
                f"{format_bytes(self.budget)}, tol={self.tol}): the memory budget leaves no room "
                f"for an error probe of more than {2 * self.k + 1} rows (n_components={self.k}); "
                "raise memory_budget or lower "
                "n_components" + ("" if not failures else "; " + "; ".join(failures))
            )
        names = [m for m, _ in candidates]
        if (
            "nystrom" in names
            and "exact" in names[names.index("nystrom") :]
            and self.profile.random_access
            and self.profile.multi_pass
        ):
            c = self.predicted_size(self.landmark_method())
            if c >= EXACT_LANDMARK_FRACTION * n:
                candidates.remove(candidates[names.index("exact")])
                reason = (
                    f"the probe predicts {c} landmarks, at least n / 3: exact KPCA costs about "
                    "as much and has no error"
                )
                candidates.insert(0, ("exact", reason))
        best = None
        for method, reason in candidates:
            model, why = self.try_method(method, reason)
            if model is not None:
                self.chosen_method = method
                return model
            failures.append(f"{method}: {why}")
            if self._best is not None and (best is None or self._best[0] < best[0]):
                best = self._best
        if best is not None:
            # Nothing met tol within the budgets: the most accurate fit is kept, and said so.
            bound, model, method, entry = best
            warnings.warn(
                f"tol={self.tol}: no method reached it within the budgets; the most accurate "
                f"fit ({method}, relative rank-k error bound {bound:.4f}) is kept",
                RuntimeWarning,
                stacklevel=5,
            )
            entry["status"] = "chosen"
            entry["why"] = f"error bound {bound:.4f} > 1 + tol, the best within the budgets"
            self.chosen_method = method
            return model
        raise ValueError(
            "AutoKPCA: no method fits the budgets (memory_budget "
            f"{format_bytes(self.budget)}"
            + ("" if self.deadline is None else f", time_budget {self.deadline:g} s")
            + f", tol={self.tol}): "
            + "; ".join(failures)
        )

    def try_method(self, method, reason):
        """Fit ``method`` at growing sizes (:func:`~fastkpca.statistics.growth.grow_until`);
        (model, "") when it reaches tol or as close as the probe can tell, else (None, why)."""
        self._best = None
        params = self.base_params(method)
        sizes = self.sizes(method, params)
        if not sizes:
            why = self.reject(method, None, params, reason, "no size fits the memory budget")
            return None, why
        entries: dict[int, dict] = {}
        refused: list[str] = []
        last: dict = {}

        def fit_at(size):
            need = self.memory(method, size, params)
            predicted = self.flops(method, size, params) / self.rate
            budget = self.fit_budget()
            if need > budget:
                why = f"needs {format_bytes(need)} > memory budget {format_bytes(budget)}"
                if self.probe is not None:
                    why += " (beside the probe's)"
            elif predicted > self.left():
                why = (
                    f"predicted {predicted:.3g} s > {max(self.left(), 0):.3g} s left of the "
                    "time budget"
                )
            else:
                self.say(f"{method} {size}: fitting")
                model, seconds = self.fit_at(method, size, params)
                self.rate = max(self.flops(method, size, params) / max(seconds, 1e-4), 1.0)
                last.update(seconds=seconds, need=need, predicted=predicted)
                return model
            refused.append(self.reject(method, size, params, reason, why))
            return None

        def on_fit(size, model, estimate):
            entries[size] = self.entry(
                method,
                size,
                params,
                reason,
                *estimate,
                last["seconds"],
                last["need"],
                last["predicted"],
            )
            self.say(f"{method} {size}: error {estimate.estimate:.4f} +- {estimate.stderr:.4f}")

        growth = grow_until(
            fit_at,
            lambda model: self.drawn.error(model),
            sizes[0],
            lambda size, estimate: self.next_size(method, size, sizes, estimate, params),
            self.tol,
            is_exact=lambda model: (
                method == "exact" or getattr(model, "solver_", None) == "exact_kpca"
            ),
            refine=self.grow_probe if self.profile.multi_pass else None,
            on_fit=on_fit,
        )
        for size, entry in entries.items():
            if size != growth.size or not (growth.met or growth.status in _KEPT):
                entry["why"] = self.grown_past(entry, size, sizes, growth)
        if growth.model is None:
            return None, refused[-1] if refused else "no size could be fitted"
        chosen = entries[growth.size]
        if growth.met or growth.status in _KEPT or not self.profile.multi_pass:
            chosen["status"] = "chosen"
            chosen["why"] = self.kept_why(growth, method)
            return growth.model, ""
        self._best = (growth.estimate.upper(), growth.model, method, chosen)
        why = (
            refused[-1]
            if growth.status not in (LARGEST, PLATEAU) and refused
            else (f"reached {growth.estimate.upper():.4f} at the largest size ({growth.size})")
        )
        return None, why

    def kept_why(self, growth, method) -> str:
        """The chosen fit's ``why`` (and, short of tol, its warning)."""
        est, se = growth.estimate
        if growth.status == "exact":
            return "exact KPCA: the optimum itself (error 1 on all rows)"
        if growth.met:
            return f"error bound {est:.4f} + {CONFIDENCE_Z:g} x {se:.4f} <= 1 + tol"
        if growth.status in _KEPT:
            text = growth.shortfall(self.tol, _SIZE_NAMES.get(method, "n_random_features"))
        else:
            text = (
                f"tol={self.tol}: the one-pass fit ({method}, size {growth.size}) has an error "
                f"bound of {growth.estimate.upper():.4f} on the first rows; a one-pass stream "
                "allows no larger refit, and it is kept"
            )
        warnings.warn(text, RuntimeWarning, stacklevel=6)
        return text

    def grown_past(self, entry, size, sizes, growth) -> str:
        """The ``why`` of a size fitted and not kept."""
        later = [s for s, _ in growth.history if s > size]
        bound = entry["error"] + CONFIDENCE_Z * entry["error_stderr"]
        if later:
            return f"error bound {bound:.4f} > 1 + tol: grow to {later[0]}"
        return f"error bound {bound:.4f} > 1 + tol at the largest size"

    def next_size(self, method, size, sizes, estimate, params) -> int | None:
        """The size after ``size``: the next of ``sizes``, except for Nystrom landmarks, grown
        by ``(bound - 1) / tol`` within [:data:`MIN_GROWTH_FACTOR`, 2] (the excess error falls
        about as 1 / c) and priced with the landmark method being grown (``params``: not chosen
        again from a probe drawn anew meanwhile)."""
        later = [s for s in sizes if s > size]
        if not later:
            return None
        if method != "nystrom" or not self.profile.multi_pass:
            return later[0]
        factor = min(2.0, max(MIN_GROWTH_FACTOR, (estimate.upper() - 1.0) / self.tol))
        grown = int(min(sizes[-1], max(size + 1, math.ceil(size * factor))))
        return self.cheapest_landmarks(grown, sizes[-1], params)

    def reject(self, method, size, params, reason, why) -> str:
        entry = self.entry(
            method,
            size,
            params,
            reason,
            None,
            None,
            None,
            None if size is None else self.memory(method, size, params),
            None if size is None else self.flops(method, size, params) / self.rate,
        )
        entry["status"] = "rejected"
        entry["why"] = why
        self.say(f"{method}: {why}")
        return why

    def entry(self, method, size, params, reason, err, stderr, seconds, need, predicted):
        entry = {
            "method": method,
            "size": None if size is None else int(size),
            "size_name": _SIZE_NAMES.get(method, "n_random_features"),
            "params": plain(dict(params)),
            "reason": reason,
            "error": None if err is None else float(err),
            "error_stderr": None if stderr is None else float(stderr),
            "error_bound": None if err is None else float(err + CONFIDENCE_Z * stderr),
            "fit_seconds": None if seconds is None else round(float(seconds), 4),
            "memory_bytes": None if need is None else int(need),
            "predicted_seconds": None if predicted is None else float(f"{predicted:.4g}"),
            "status": "tried",
            "why": "",
        }
        self.report.append(entry)
        return entry

    # --- per method ---------------------------------------------------------------------------
    def base_params(self, method) -> dict:
        params: dict = {}
        if method == "nystrom":
            params["landmarks"] = self.landmark_method()
        elif method == "random-features":
            if self.profile.sparse_wide:
                params.update(self.input_sparsity_params())
            elif self.profile.d > 512 and self.kernel.name != "polynomial":
                params["features"] = "rff"  # orf's d x d blocks cost O(d^3) on wide rows
        elif method == "streaming":
            params["sketch_size"] = max(50, 2 * self.k + 10)
        return params

    def input_sparsity_params(self) -> dict:
        """The random-feature parameters for sparse, wide rows: the input sketch of the
        Gaussian frequencies (``input_sketch="auto"``: features in O(nnz(x) + t m) a row) for
        rbf and matern kernels, else the CountSketch solver (Musco & Woodruff)."""
        if "input_sketch" in RandomFeatureKPCA._get_param_names() and self.kernel.name in (
            "rbf",
            "matern",
        ):
            return {"features": "rff", "input_sketch": "auto"}
        return {"features": "rff", "solver": "countsketch"}

    def landmark_method(self) -> str:
        """``"rpcholesky"`` when, on the probe, it reaches tol at a size whose fit the cost model
        prices below the uniform landmarks' fit at theirs (and the rows can be taken by index),
        else ``"uniform"``.  Pivoted landmarks need fewer of them on data with far-apart
        clusters or outliers, but their selection costs more (:data:`RPCHOLESKY_SELECTION_COST`)."""
        if not (self.profile.random_access and self.profile.multi_pass):
            return "uniform"
        uniform = self.predicted_size("uniform")
        if uniform <= CHEAP_LANDMARKS:
            return "uniform"
        pivoted = self.predicted_size("rpcholesky")
        n = self.profile.n
        cap = MAX_LANDMARKS if n is None else min(MAX_LANDMARKS, n)
        plain = {"landmarks": "uniform"}
        uniform = self.cheapest_landmarks(min(uniform, cap), cap, plain)
        if self.flops("nystrom", min(pivoted, cap), {"landmarks": "rpcholesky"}) < self.flops(
            "nystrom", uniform, plain
        ):
            return "rpcholesky"
        return "uniform"

    def probe_landmark_sizes(self) -> list[int]:
        half = self.drawn.parts[0].size
        top = max(MIN_LANDMARKS, int(PROBE_MAX_LANDMARK_FRACTION * half))
        start = max(MIN_LANDMARKS, 1 << math.ceil(math.log2(2 * self.k)))
        return [s for s in doubling_sizes(start, top) if s <= top]

    def predicted_size(self, landmarks: str) -> int:
        """The smallest probe size whose Nystrom error on the probe is at most ``1 +
        PREDICTION_MARGIN tol`` (the doubling above the probe's largest when none is)."""
        target = 1.0 + PREDICTION_MARGIN * self.tol
        if landmarks not in self.probe_sizes:
            self.probe_sizes[landmarks] = nystrom_errors(
                self.drawn,
                self.k,
                self.probe_landmark_sizes(),
                landmarks,
                self.probe_rng,
                stop=target,
            )
        errors = self.probe_sizes[landmarks]
        for c in sorted(errors):
            if errors[c] <= target:
                return c
        return 2 * max(errors)

    def sizes(self, method, params) -> list[int]:
        n = self.profile.n
        if method == "exact":
            return [int(n)] if n else []
        if method == "nystrom":
            start = self.predicted_size(params["landmarks"])
            cap = MAX_LANDMARKS if n is None else min(MAX_LANDMARKS, n)
            if not self.profile.multi_pass:
                # landmarks from the first rows, one size (see fit_at)
                return [min(start, self.drawn.size)]
            return doubling_sizes(self.cheapest_landmarks(min(start, cap), cap, params), cap)
        start = max(MIN_FEATURES, 1 << math.ceil(math.log2(4 * self.k)))
        if not self.profile.multi_pass:
            return [self.pilot_features(method, params, start)]
        start = max(start, self.feature_start())
        return doubling_sizes(start, max(start, MAX_FEATURES))

    def feature_start(self) -> int:
        """Random features need more columns than Nystrom landmarks for the same error
        (no data-adapted basis): start at twice the landmarks the probe predicts."""
        if self.profile.sparse_wide:
            return 256
        return 2 * self.predicted_size("uniform")

    def pilot_features(self, method, params, start) -> int:
        """A one-pass stream: the size by growth on the probe rows alone (fits of the probe,
        cheap), then one fit of the stream at that size."""
        size = start
        for size in doubling_sizes(start, MAX_FEATURES):
            if self.memory(method, size, params) > self.fit_budget():
                break
            pilot = RandomFeatureKPCA(
                self.k,
                kernel=self.kernel,
                n_random_features=size,
                random_state=self.seed,
                features=params.get("features", "auto"),
            ).fit(self.pilot_rows)
            if self.drawn.error(pilot).upper() <= 1.0 + self.tol:
                break
        return size

    def fit_at(self, method, size, params):
        cls = estimator_class(method)
        auto = self.auto
        common = {
            "n_components": self.k,
            "kernel": self.kernel,
            "random_state": self.seed,
            "fit_inverse_transform": auto.fit_inverse_transform,
            "alpha": auto.alpha,
            "n_jobs": auto.n_jobs,
            "verbose": auto.verbose,
            "device": auto.device,
        }
        if method == "nystrom":
            own = dict(params, n_landmarks=int(size))
            if not self.profile.multi_pass:
                # one pass: given landmarks, uniform among the first rows
                rows = self.drawn.X[: int(size)]
                own = {"landmarks": rows.toarray() if sp.issparse(rows) else np.asarray(rows)}
        elif method == "exact":
            own = {}
        else:
            own = dict(params, n_random_features=int(size))
        model = cls(**common, **own)
        start = time.perf_counter()
        # In-memory rows were checked whole (finite values included) by AutoKPCA's validation:
        # each fit skips that scan; rows of memory maps, blocks or files are checked as read.
        checked = type(self.X) is np.ndarray or sp.issparse(self.X)
        with sklearn.config_context(assume_finite=checked or None):
            model.fit(self.X)
        seconds = time.perf_counter() - start
        if not hasattr(model, "n_features_in_"):  # fitted on the source itself (a stream)
            model.n_features_in_ = self.auto.n_features_in_
        return model, seconds


#: Growth outcomes short of tol whose fit is kept (with a warning): the probe cannot tell a
#: larger size apart, or the estimate stopped falling.
_KEPT = (RESOLUTION, PLATEAU)

_SIZE_NAMES = {"exact": "rows", "nystrom": "n_landmarks"}
