"""Kernel objects: Gram blocks, diagonals and spectral samplers.

Every kernel follows scikit-learn's parametrisation (``sklearn.metrics.pairwise``) so that
results compare one to one with ``KernelPCA``:

========== ====================================================== =================
name       k(x, y)                                                spectral density
========== ====================================================== =================
rbf        exp(-gamma ||x - y||_2^2)                              N(0, 2 gamma I)
laplacian  exp(-gamma ||x - y||_1)                                Cauchy(0, gamma)^d
matern     Matern(nu) with length scale l = 1 / sqrt(2 gamma)     Student-t, 2 nu dof
polynomial (gamma <x, y> + coef0)^degree                          (not shift-invariant)
linear     <x, y>
cosine     <x, y> / (||x|| ||y||)
sigmoid    tanh(gamma <x, y> + coef0)                             (not PSD in general)
========== ====================================================== =================

Matern(gamma, nu) equals ``sklearn.gaussian_process.kernels.Matern(length_scale=l, nu=nu)`` and
tends to RBF(gamma) as nu -> inf.  Each kernel's math (:meth:`Kernel._prepare`,
:meth:`Kernel._block`, :meth:`Kernel.diag`) is written once over the rows' namespace; the
blocking is :mod:`fastkpca.execution.kernel_ops`'s.  Squared distances are accumulated in
float64 about the columns' mean (``|x|^2 + |y|^2 - 2 x.y`` cancels for nearby points far from
the origin).
"""

from __future__ import annotations

import copy
import math
import numbers
import threading
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import scipy.sparse as sp
from scipy.special import chdtri, ndtri

from ._utils import as_generator
from .execution import kernel_ops
from .execution.arrays import get_namespace, is_array, row_range
from .execution.budget import chunk_rows as chunk_rows
from .execution.budget import kernel_chunk_rows as kernel_chunk_rows
from .execution.elementwise import (
    as_float64,
    astype_name,
    bessel_kv,
    check_finite,
    clip_,
    divide_rows,
    exp_,
    float_name,
    l1_distances,
    matmul,
    max_finite,
    ones_rows,
    row_center,
    row_l1_norms,
    row_max_abs,
    row_sq_norms,
    shift_rows,
    store,
    tanh_,
    transpose,
    with_columns,
)

__all__ = [
    "Kernel",
    "RBF",
    "Laplacian",
    "Matern",
    "Polynomial",
    "Linear",
    "Cosine",
    "Sigmoid",
    "make_kernel",
    "resolve_gamma",
    "entry_variance",
    "KERNELS",
    "DegenerateKernelWarning",
    "warn_if_degenerate",
    "may_be_degenerate",
    "first_rows_gram",
    "scaled_gram",
    "DEGENERATE_CHECK_ROWS",
]

#: Bound on ``|K32 - K64|`` of an rbf block computed in float32 (``Kernel.blocks(dtype=float32)``):
#: the exponent's rounding (:meth:`RBF._block`) times the kernel value, plus float32's own
#: rounding of the value.  It holds for any rows when the landmarks' spread ``gamma |y -
#: centre|^2`` is at most :data:`FLOAT32_MAX_SPREAD` (wider landmarks get float64 blocks,
#: rounded); tested in tests/test_kernels_float32.py.
FLOAT32_BLOCK_ATOL = 1e-5

#: Largest ``gamma |y - centre|^2`` of the columns' rows (the landmarks) for which rbf blocks are
#: computed in float32 (see :class:`_Radial` for why only the columns' spread matters).
FLOAT32_MAX_SPREAD = 10.0

#: ``max(|x - c|^2, gamma |x - c|^2)`` above which a float32 rbf block takes the float64 path:
#: below it the rows' float32 coordinates are finite and, with the columns within
#: FLOAT32_MAX_SPREAD, every term of the float32 GEMM stays far below float32's 3.4e38.
_MAX_SQ_NORM32 = 1e30


def result_dtype(X, Y=None):
    """float32 if every input is float32 (numpy's or a device library's), else float64."""
    return np.float32 if kernel_ops.result_dtype(X, Y) == "float32" else np.float64


def squared_euclidean(X, Y, X_sq=None, Y_sq=None):
    """Squared Euclidean distances between rows of X and Y (dense or sparse, any namespace),
    computed in float64 and clipped at 0; ``X_sq``, ``Y_sq`` are the rows' squared norms when
    known.  ValueError when a squared norm overflows float64 (the distances would be nan)."""
    Xd, Yd = as_float64(X), as_float64(Y)
    X_sq = row_sq_norms(Xd) if X_sq is None else X_sq
    Y_sq = row_sq_norms(Yd) if Y_sq is None else Y_sq
    max_finite(X_sq)
    max_finite(Y_sq)
    D = matmul(Xd, transpose(Yd))
    D *= -2.0
    D += X_sq[:, None]
    D += Y_sq[None, :]
    return clip_(D, low=0.0)


def manhattan(X, Y):
    """L1 distances between rows of X and Y in float64 (dense or sparse, any namespace)."""
    return l1_distances(as_float64(X), as_float64(Y))


class _Context:
    """What a kernel's blocks need of their columns' rows, computed once (:meth:`Kernel._prepare`)
    in the block dtype ``dtype`` (``"float32"`` or ``"float64"``); :meth:`columns` restricts it
    to a range of the columns, :meth:`cached` computes a part on first use (once, whatever the
    threads asking)."""

    #: The axis along which each prepared array runs over the columns.
    COLUMN_AXES = {"Y": 0, "Yt": 1, "B": 1}

    def __init__(self, dtype: str, **parts):
        self.dtype = dtype
        self.__dict__.update(parts)
        self._cache: dict = {}
        self._lock = threading.Lock()

    def columns(self, start: int, stop: int | None = None) -> _Context:
        """This context for the columns ``[start, stop)`` (views)."""
        view = copy.copy(self)
        view._cache, view._lock = {}, threading.Lock()
        for name, axis in self.COLUMN_AXES.items():
            value = getattr(self, name, None)
            if value is not None:
                setattr(view, name, value[start:stop, ...] if axis == 0 else value[:, start:stop])
        return view

    def cached(self, name: str, make: Callable):
        with self._lock:
            if name not in self._cache:
                self._cache[name] = make()
            return self._cache[name]


def _check_positive(name, value, *, allow_zero=False):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


class Kernel:
    """Base class: a positive-definite kernel evaluated in row blocks.

    A kernel defines :meth:`_block` (one block ``k(X, Y)``, with what :meth:`_prepare` computed
    once of Y) and :meth:`diag`; shift-invariant kernels also :meth:`sample_frequencies`.  This
    module's kernels use namespace calls (:attr:`namespace_math`) and run on every placement; a
    user's kernel may take numpy rows and return float64 blocks, run on host copies.
    """

    name: str = "kernel"
    shift_invariant: bool = False
    #: Whether every value is >= 0 (then small row sums mean small entries: see
    #: :func:`warn_if_degenerate`).
    nonnegative: bool = False

    #: Whether :meth:`_prepare`, :meth:`_block` and :meth:`diag` are written over the array
    #: namespace (any placement, blocks in the requested dtype, written into ``out``).  False (a
    #: user's kernel, a Matern of general nu): they take numpy rows and give float64 blocks,
    #: and the execution layer computes device rows' blocks on host copies and moves them.
    namespace_math = False

    #: Whether the execution layer may call :meth:`_block` from several threads at once: True
    #: for the kernels of this module (numpy / scipy ufuncs only), False by default (e.g. user
    #: callables, which run in the calling thread).
    parallel_safe = False

    # --- public API ---------------------------------------------------------------------------
    def __call__(self, X, Y=None, *, out=None, working_memory_mb=None):
        """Gram matrix ``K[i, j] = k(X[i], Y[j])`` (Y defaults to X) on X's placement.

        The result has X's floating dtype (float32 stays float32, computed in float64); ``out``
        may be a preallocated array of shape ``(len(X), len(Y))`` to write into.  See
        :func:`fastkpca.execution.kernel_ops.gram`.
        """
        return kernel_ops.gram(self, X, Y, out=out, working_memory_mb=working_memory_mb)

    def blocks(self, X, Y=None, *, working_memory_mb=None, dtype=None) -> Iterator[tuple]:
        """Yield ``(start, stop, K[start:stop])`` row blocks of the Gram matrix, in float64.

        ``dtype=np.float32`` yields float32 blocks instead: the rbf kernel then computes them in
        float32 (entries within :data:`FLOAT32_BLOCK_ATOL` of the float64 ones), the other
        kernels in float64, rounded (:func:`fastkpca.execution.kernel_ops.kernel_blocks`).
        """
        return kernel_ops.kernel_blocks(
            self, X, Y, dtype=dtype, working_memory_mb=working_memory_mb
        )

    def fold_rows(self, X, Y, step: Callable, init: Callable, *, dtype=None) -> list:
        """Fold ``step(state, start, stop, K)`` over row blocks of ``K = k(X, Y)``: small chunks
        in threads on the host (one state ``init()`` per share), large tiles on a device
        (:func:`fastkpca.execution.kernel_ops.fold_kernel_rows`).  ``dtype`` as for
        :meth:`blocks`; returns the shares' states in row order.
        """
        return kernel_ops.fold_kernel_rows(self, X, Y, step, init, dtype=dtype)

    def diag(self, X):
        """The diagonal ``k(x_i, x_i)`` as a vector of X's floating dtype, on X's placement."""
        raise NotImplementedError

    def check_rows(self, X) -> None:
        """Raise ValueError, naming the cause, when the kernel's values on the rows X cannot be
        computed in float64 (checked by :func:`make_kernel` on the rows a fit resolves its
        kernel on, before any fit work); nothing to check for most kernels."""

    def sample_frequencies(
        self, n_frequencies: int, dim: int, rng: np.random.Generator, uniforms=None
    ) -> np.ndarray:
        """Draw ``n_frequencies`` frequencies in R^dim from the kernel's spectral density.

        Returns a float64 array of shape ``(n_frequencies, dim)``; by Bochner's theorem
        ``k(x - y) = E_w[cos(w . (x - y))]`` for w drawn from it; with ``uniforms`` (n_frequencies
        points of ``(0, 1)^(dim + 1)``) the density's quantiles there instead (``features="qmc"``).
        """
        raise ValueError(
            f"the {self.name!r} kernel is not shift-invariant, so it has no spectral density to "
            "sample random Fourier features from; use kernel='rbf', 'laplacian' or 'matern'"
        )

    def get_params(self, deep: bool = True) -> dict:
        """The kernel's numeric parameters (JSON-serialisable), by constructor argument name.

        ``deep`` is scikit-learn's (a kernel holds no estimators): with it, ``sklearn.base.
        clone`` copies an estimator whose ``kernel`` is a Kernel object, as ``GridSearchCV``
        and ``cross_val_score`` do.
        """
        return {}

    def set_params(self, **params) -> Kernel:
        """Set parameters by name (scikit-learn's nested ``kernel__gamma=...``), checked as
        the constructor checks them; ValueError for a name the kernel does not have.  A fitted
        estimator keeps its own copy of the kernel (``kernel_``), which this does not change."""
        current = self.get_params()
        unknown = sorted(set(params) - set(current))
        if unknown:
            raise ValueError(
                f"invalid parameter(s) {unknown} for {type(self).__name__}; valid: "
                f"{sorted(current)}"
            )
        checked = type(self)(**{**current, **params})  # the constructor's checks
        self.__dict__.update(checked.__dict__)
        return self

    def to_config(self) -> dict:
        """A JSON-serialisable description; ``make_kernel(**config)`` rebuilds the kernel."""
        return {"kernel": self.name, **self.get_params()}

    # --- the math (see the class notes) -------------------------------------------------------
    _exact_diag_one = False

    def _prepare(self, Y, dtype="float64"):
        """What every block ``k(., Y)`` needs of Y, computed once (None: nothing)."""
        return None

    def _block(self, X, Y, ctx, out=None):  # pragma: no cover - abstract
        """The block ``k(X, Y)``: ``ctx`` is :meth:`_prepare` of Y; a kernel with namespace math
        returns it in ``ctx.dtype`` (or writes it into ``out``, a host array of the block's
        shape, and returns ``out``)."""
        raise NotImplementedError

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.get_params().items()))))


def _float_of(X) -> str:
    """The float dtype name of X's results: float32 for float32 X, float64 otherwise."""
    return float_name(getattr(X, "dtype", np.float64))


class _UnitDiagonal(Kernel):
    """Shift-invariant kernels of one scale gamma with ``k(x, x) = 1``: rbf, matern, laplacian."""

    parallel_safe = True
    namespace_math = True
    shift_invariant = True
    nonnegative = True
    _exact_diag_one = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)

    def get_params(self, deep=True):
        return {"gamma": self.gamma}

    def diag(self, X):
        return ones_rows(X, _float_of(X))


class _Radial(_UnitDiagonal):
    """Kernels that are a function of the squared Euclidean distance: ``f(-s |x - y|^2)``.

    A block's exponent comes from ONE GEMM of augmented rows centered at the columns' mean c::

        [x - c, 1, -s |x - c|^2] . [2 s (y - c); -s |y - c|^2; 1]

    with the squared norms in float64; a float64 exponent is clamped at 0, then f is applied in
    place.  Sparse rows are not centered.  float32 rbf blocks: the GEMM's rounding times the
    value is bounded by the columns' spread alone (:data:`FLOAT32_MAX_SPREAD`,
    :data:`FLOAT32_BLOCK_ATOL`); wider columns, sparse rows and rows that would overflow take
    the float64 GEMM, rounded.
    """

    #: Whether float32 blocks are computed by a float32 GEMM (rbf) rather than rounded from
    #: float64 ones.
    _float32_blocks = False

    def _exponent_scale(self) -> float:
        """s of the exponent ``-s |x - y|^2`` the profile takes."""
        return self.gamma

    def _factor(self, Yc, y_sq, dtype: str):
        """The right factor ``[2 s (y - c); -s |y - c|^2; 1]`` ((d + 2) x m) in ``dtype``."""
        s = self._exponent_scale()
        return transpose(with_columns((2.0 * s) * Yc, -s * y_sq, 1.0, dtype=dtype), copy=True)

    def _prepare(self, Y, dtype="float64"):
        dtype = float_name(dtype)
        Y64 = as_float64(Y)
        center = row_center(Y64)
        Yc, centered = shift_rows(Y64, center)
        y_sq = row_sq_norms(Yc)
        spread = max_finite(y_sq) * self.gamma
        low = (
            dtype == "float32"
            and self._float32_blocks
            and centered
            and spread <= FLOAT32_MAX_SPREAD
        )
        B = self._factor(Yc, y_sq, "float32" if low else "float64")
        return _Context(dtype, Y=Y64, B=B, center=center if centered else None, low=low)

    def _block(self, X, Y, ctx, out=None):
        Xs, centered = shift_rows(as_float64(X), ctx.center)
        x_sq = row_sq_norms(Xs)
        top = max_finite(x_sq)
        if ctx.center is not None and not centered:  # sparse rows: the uncentered factor
            B = ctx.cached(
                "uncentered", lambda: self._factor(ctx.Y, row_sq_norms(ctx.Y), "float64")
            )
        elif ctx.low and not top * max(1.0, self.gamma) <= _MAX_SQ_NORM32:
            # Rows far enough to overflow a float32 GEMM: float64, rounded.
            B = ctx.cached("float64", lambda: self._factor_float64(ctx))
        else:
            B = ctx.B
        s = self._exponent_scale()
        low = float_name(B.dtype) == "float32"
        E = matmul(with_columns(Xs, 1.0, -s * x_sq, dtype=float_name(B.dtype)), B, out=out)
        if not low:
            # No clamp of a float32 GEMM's exponent: a rounding-positive one is within the
            # bound of FLOAT32_BLOCK_ATOL.
            E = clip_(E, high=0.0)
        return store(self._profile(E), out, ctx.dtype)

    def _factor_float64(self, ctx):
        Yc = ctx.Y - ctx.center
        return self._factor(Yc, row_sq_norms(Yc), "float64")

    def _profile(self, E):
        """The kernel of the clamped exponent ``E = -s |x - y|^2`` (overwriting E)."""
        return exp_(E)


def _gaussian(n: int, dim: int, rng: np.random.Generator, uniforms) -> np.ndarray:
    """Standard normal draws, or the normal quantiles of the first dim coordinates of uniforms."""
    return rng.standard_normal((n, dim)) if uniforms is None else ndtri(uniforms[:, :dim])


class RBF(_Radial):
    """Gaussian kernel ``exp(-gamma ||x - y||^2)``; gamma = 1 / (2 sigma^2)."""

    name = "rbf"
    _float32_blocks = True

    def sample_frequencies(self, n_frequencies, dim, rng, uniforms=None):
        # Spectral density of exp(-gamma r^2) is N(0, 2 gamma I) (Rahimi & Recht 2007).
        return _gaussian(n_frequencies, dim, rng, uniforms) * np.sqrt(2.0 * self.gamma)


class Laplacian(_UnitDiagonal):
    """Laplacian kernel ``exp(-gamma ||x - y||_1)``.

    The L1 distance, as ``sklearn.metrics.pairwise.laplacian_kernel``: float64 distances
    (:func:`fastkpca.execution.elementwise.l1_distances`), scaled and exponentiated in place;
    float32 blocks are rounded from them.
    """

    name = "laplacian"

    def _prepare(self, Y, dtype="float64"):
        Y64 = as_float64(Y)
        max_finite(row_l1_norms(Y64))
        return _Context(float_name(dtype), Y=Y64)

    def _block(self, X, Y, ctx, out=None):
        X64 = as_float64(X)
        max_finite(row_l1_norms(X64))
        D = l1_distances(X64, ctx.Y)
        D *= -self.gamma
        return store(exp_(D), out, ctx.dtype)

    def sample_frequencies(self, n_frequencies, dim, rng, uniforms=None):
        # exp(-gamma |t|) is the characteristic function of Cauchy(0, gamma); the L1 kernel is a
        # product over coordinates, so each coordinate is drawn independently.
        if uniforms is not None:
            return np.tan(np.pi * (uniforms[:, :dim] - 0.5)) * self.gamma
        return rng.standard_cauchy((n_frequencies, dim)) * self.gamma


class Matern(_Radial):
    """Matern kernel with smoothness ``nu`` and length scale ``l = 1 / sqrt(2 gamma)``.

    ``k(r) = 2^(1-nu) / Gamma(nu) * (sqrt(2 nu) r / l)^nu * K_nu(sqrt(2 nu) r / l)``, in closed
    form for nu = 0.5, 1.5, 2.5 and through scipy's ``kv`` otherwise
    (:func:`fastkpca.execution.elementwise.bessel_kv`, host only: a general nu has no namespace
    math, and its blocks of device rows are computed on host copies); nu = inf is RBF.
    """

    name = "matern"

    def __init__(self, gamma: float = 1.0, nu: float = 1.5):
        super().__init__(gamma)
        infinite = isinstance(nu, numbers.Real) and not isinstance(nu, bool) and nu == np.inf
        self.nu = float(nu) if infinite else _check_positive("nu", nu)

    def get_params(self, deep=True):
        return {"gamma": self.gamma, "nu": self.nu}

    @property
    def length_scale(self) -> float:
        return 1.0 / math.sqrt(2.0 * self.gamma)

    @property  # type: ignore[override]
    def namespace_math(self) -> bool:  # type: ignore[override]
        """Closed forms (nu = 0.5, 1.5, 2.5, inf) are namespace math; a general nu needs
        scipy's ``kv``."""
        return bool(np.isinf(self.nu) or self.nu in (0.5, 1.5, 2.5))

    def _exponent_scale(self) -> float:
        return self.gamma if np.isinf(self.nu) else 1.0  # the GEMM gives -|x - y|^2

    def _profile(self, E):
        nu = self.nu
        if np.isinf(nu):
            return exp_(E)
        xp = get_namespace(E)
        r = xp.sqrt(-E) / self.length_scale
        if nu == 0.5:
            r *= -1.0
            return exp_(r)
        if nu == 1.5:
            t = math.sqrt(3.0) * r
            return (1.0 + t) * exp_(-t)
        if nu == 2.5:
            t = math.sqrt(5.0) * r
            return (1.0 + t + t * t / 3.0) * exp_(-t)
        t = math.sqrt(2.0 * nu) * r
        # K_nu diverges at 0; the limit of the product is 1
        t = xp.where(t == 0.0, float(np.finfo(np.float64).eps), t)
        return (2.0 ** (1.0 - nu) / math.gamma(nu)) * t**nu * bessel_kv(nu, t)

    def sample_frequencies(self, n_frequencies, dim, rng, uniforms=None):
        # The Matern spectral density is a multivariate Student-t with 2 nu degrees of freedom
        # and scale 1 / l: w = z / l * sqrt(2 nu / u), z ~ N(0, I), u ~ chi^2(2 nu).
        if np.isinf(self.nu):
            return _gaussian(n_frequencies, dim, rng, uniforms) * np.sqrt(2.0 * self.gamma)
        if uniforms is not None:  # u at the last coordinate: chi^2's quantile, chdtri(v, 1 - p)
            z, u = ndtri(uniforms[:, :dim]), chdtri(2.0 * self.nu, 1.0 - uniforms[:, dim:])
        else:
            z = rng.standard_normal((n_frequencies, dim))
            u = rng.chisquare(2.0 * self.nu, size=(n_frequencies, 1))
        return z * np.sqrt(2.0 * self.nu / u) / self.length_scale


class _Dot(Kernel):
    """Kernels of the inner product ``<x, y>``: one float64 GEMM, then the kernel's map in place
    (float32 blocks rounded from it).  Rows whose squared norm overflows float64 are refused
    (ValueError): their inner products could overflow too."""

    parallel_safe = True
    namespace_math = True

    def _rows(self, X64):
        """The rows the inner products are taken of (cosine: unit rows)."""
        max_finite(row_sq_norms(X64))
        return X64

    def _prepare(self, Y, dtype="float64"):
        return _Context(float_name(dtype), Yt=transpose(self._rows(as_float64(Y))))

    def _block(self, X, Y, ctx, out=None):
        K = matmul(self._rows(as_float64(X)), ctx.Yt, out=out)
        return store(self._map(K), out, ctx.dtype)

    def diag(self, X):
        return astype_name(self._map_diag(row_sq_norms(as_float64(X))), _float_of(X))

    def _map(self, K):
        """The kernel of the inner products K (overwriting K)."""
        return K

    def _map_diag(self, sq):
        return sq


class Polynomial(_Dot):
    """Polynomial kernel ``(gamma <x, y> + coef0)^degree``."""

    name = "polynomial"
    degree: int
    gamma: float
    coef0: float

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0):
        if not isinstance(degree, numbers.Integral) or isinstance(degree, bool) or degree < 1:
            raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
        self.degree = int(degree)
        self.gamma = _check_positive("gamma", gamma)
        self.coef0 = _check_positive("coef0", coef0, allow_zero=True)

    def get_params(self, deep=True):
        return {"degree": self.degree, "gamma": self.gamma, "coef0": self.coef0}

    def _map(self, K):
        K *= self.gamma
        K += self.coef0
        with np.errstate(over="ignore", invalid="ignore"):  # checked: check_finite
            K **= self.degree
        try:
            return check_finite(K)
        except ValueError:
            raise ValueError(self._overflow_message()) from None

    def _map_diag(self, sq):
        return (self.gamma * sq + self.coef0) ** self.degree

    def check_rows(self, X) -> None:
        """ValueError when the kernel's values on the rows X overflow float64: with ``coef0 >=
        0`` no value exceeds the largest diagonal one (Cauchy-Schwarz), whose logarithm tells."""
        if X.shape[0] == 0:
            return
        top = max_finite(row_sq_norms(as_float64(X)))  # ValueError: a squared norm overflows
        base = self.gamma * top + self.coef0
        if base > 0.0 and self.degree * math.log(base) > _LOG_FLOAT64_MAX:
            raise ValueError(self._overflow_message(self.degree * math.log10(base)))

    def _overflow_message(self, log10_top: float | None = None) -> str:
        reach = (
            ""
            if log10_top is None or not math.isfinite(log10_top)
            else f"; the largest, (gamma |x|^2 + coef0)^degree, is about 1e{log10_top:.0f}"
        )
        return (
            "X has values too large for the polynomial kernel: kernel values overflow float64 "
            f"at degree={self.degree} (gamma={self.gamma:.6g}, coef0={self.coef0:.6g}{reach}); "
            "scale the data or lower degree or gamma"
        )


class Linear(_Dot):
    """Linear kernel ``<x, y>``."""

    name = "linear"


class Cosine(_Dot):
    """Cosine similarity ``<x, y> / (||x|| ||y||)`` (zero rows give 0, as scikit-learn)."""

    name = "cosine"

    def _rows(self, X64):
        """The rows scaled to unit norm (zero rows stay zero): each row first divided by its
        largest entry, so that no square underflows (a row of 8e-162 squares to a subnormal
        6.4e-323, 1 % off).  Rows whose squared norm overflows are refused, as by every kernel
        of inner products (ValueError)."""
        max_finite(row_sq_norms(X64))
        xp = get_namespace(X64)
        top = row_max_abs(X64)
        X = divide_rows(X64, xp.where(top == 0.0, 1.0, top))
        norms = xp.sqrt(row_sq_norms(X))
        return divide_rows(X, xp.where(norms == 0.0, 1.0, norms))

    def diag(self, X):
        return astype_name(row_max_abs(X) > 0, _float_of(X))


class Sigmoid(_Dot):
    """Sigmoid (hyperbolic tangent) kernel ``tanh(gamma <x, y> + coef0)``.

    As ``sklearn.metrics.pairwise.sigmoid_kernel``.  It is not positive semi-definite for every
    gamma and coef0, so its centered Gram can have negative eigenvalues.
    """

    name = "sigmoid"

    def __init__(self, gamma: float = 1.0, coef0: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)
        if not isinstance(coef0, numbers.Real) or isinstance(coef0, bool) or not np.isfinite(coef0):
            raise ValueError(f"coef0 must be a finite number, got {coef0!r}")
        self.coef0 = float(coef0)

    def get_params(self, deep=True):
        return {"gamma": self.gamma, "coef0": self.coef0}

    def _map(self, K):
        K *= self.gamma
        K += self.coef0
        return tanh_(K)

    def _map_diag(self, sq):
        return get_namespace(sq).tanh(self.gamma * sq + self.coef0)


KERNELS: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "laplacian": Laplacian,
    "matern": Matern,
    "polynomial": Polynomial,
    "linear": Linear,
    "cosine": Cosine,
    "sigmoid": Sigmoid,
}

#: Other spellings accepted by :func:`make_kernel` (scikit-learn's ``"poly"``).
KERNEL_ALIASES = {"poly": "polynomial"}

#: ``log(largest float64)``: a value whose logarithm exceeds it overflows.
_LOG_FLOAT64_MAX = math.log(np.finfo(np.float64).max)


def _plain_variance(X) -> float:
    """The variance of all entries of X in float64 by the usual sums (inf or nan when they
    overflow): numpy's ``var``; E[x^2] - E[x]^2 of sparse entries; the mean squared deviation
    over another namespace."""
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(X):
            Xs = X.tocsr()
            mean = np.asarray(Xs.mean()).item()
            return np.asarray(Xs.multiply(Xs).mean()).item() - mean * mean
        if not is_array(X) or isinstance(X, np.ndarray):
            return float(np.var(np.asarray(X, dtype=np.float64)))
        xp = get_namespace(X)
        X64 = as_float64(X)
        return float(xp.mean((X64 - xp.mean(X64)) ** 2))


def entry_variance(X) -> float:
    """The variance of all entries of X (dense of any namespace, or scipy.sparse), in float64:
    what ``gamma="scale"`` reads; where the sums overflow, ``s^2 var(X / s)`` about the largest
    magnitude s (inf then means the variance itself overflows)."""
    var = _plain_variance(X)
    if math.isfinite(var) or X.shape[0] == 0:
        return var
    if sp.issparse(X):
        top = float(abs(X).max()) if X.nnz else 0.0
    else:
        xp = get_namespace(X)
        top = float(xp.max(xp.abs(as_float64(X))))
    if not (math.isfinite(top) and top > 0.0):
        return var
    with np.errstate(over="ignore"):
        return _plain_variance(X / top) * top * top  # 0 stays 0: constant rows


def resolve_gamma(gamma, X=None, *, rng=None, n_subsample: int = 1000) -> float:
    """Turn a gamma spec into a number.

    ``None`` gives ``1 / n_features`` (the ``KernelPCA`` default); ``"scale"`` gives
    ``1 / (n_features * X.var())``; ``"median"`` gives ``1 / median squared distance`` over a
    random subsample of at most ``n_subsample`` rows (the median heuristic).
    """
    if gamma is None or isinstance(gamma, str):
        if X is None:
            raise ValueError(f"gamma={gamma!r} needs the data to be resolved")
        n, d = X.shape
        if gamma is None:
            return 1.0 / d
        if gamma == "scale":
            if hasattr(X, "entry_variance"):  # a row source whose rows are not in memory
                var = X.entry_variance()
            else:
                var = entry_variance(X)
            return _scale_gamma(var, d)
        if gamma == "median":
            rng = as_generator(rng, name="rng")
            idx = (
                rng.choice(n, size=min(n, n_subsample), replace=False)
                if n > n_subsample
                else np.arange(n)
            )
            S = X[np.sort(idx)]
            D2 = squared_euclidean(S, S)
            vals = D2[np.triu_indices(len(idx), k=1)]
            vals = vals[vals > 0]
            return 1.0 / float(np.median(vals)) if vals.size else 1.0
        raise ValueError(
            f"gamma must be a positive float, None, 'scale' or 'median', got {gamma!r}"
        )
    return _check_positive("gamma", gamma)


def _scale_gamma(var: float, d: int) -> float:
    """``gamma="scale"``: ``1 / (d var)`` (1 for constant entries), or ValueError when that is
    not a positive float64 because the variance overflows float64 or is too small."""
    overflow = ValueError(
        "gamma='scale' is 1 / (n_features * X.var()), but the data's variance overflows "
        "float64 (entries near its largest value, 1.8e308): scale the data, or give a "
        "numeric gamma"
    )
    if not math.isfinite(var):
        raise overflow
    if var <= 0:
        return 1.0
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        scale = d * var
        gamma = 1.0 / scale if math.isfinite(scale) else 1.0 / d / var
    if gamma == 0.0:
        raise overflow
    if not math.isfinite(gamma):
        raise ValueError(
            f"gamma='scale' is 1 / (n_features * X.var()), but the data's variance ({var:.3g}) "
            "is too small for it to be a float64: scale the data, or give a numeric gamma"
        )
    return gamma


def make_kernel(spec="rbf", *, gamma=None, degree=3, coef0=1.0, nu=1.5, X=None, rng=None) -> Kernel:
    """Build a :class:`Kernel` from a name (or pass a Kernel through).

    Parameters
    ----------
    spec : str or Kernel
        One of ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"`` (or scikit-learn's
        ``"poly"``), ``"linear"``, ``"cosine"``, ``"sigmoid"``, or a Kernel object (a shallow
        copy of it is returned).
    gamma : float, None, "scale" or "median"
        Resolved with :func:`resolve_gamma` (``X`` is needed for the string forms and None).
    degree, coef0 : polynomial (and sigmoid: coef0) parameters.  nu : Matern smoothness.
    X : rows, optional
        The rows the string forms of gamma are resolved on; the kernel's values on them are
        checked too (:meth:`Kernel.check_rows`: a polynomial kernel whose values overflow
        float64 is refused here, before any fit work).

    Raises
    ------
    ValueError
        An unknown kernel, a bad parameter, or values that cannot be computed on X.
    """
    kernel = _kernel_of_spec(spec, gamma, degree, coef0, nu, X, rng)
    if type(kernel).check_rows is not Kernel.check_rows:  # rows are read only to be checked
        rows = _rows_to_check(X)
        if rows is not None:
            kernel.check_rows(rows)
    return kernel


def _kernel_of_spec(spec, gamma, degree, coef0, nu, X, rng) -> Kernel:
    if isinstance(spec, Kernel):
        return copy.copy(spec)  # a fitted model's own: set_params on the spec leaves it be
    if isinstance(spec, str):
        spec = KERNEL_ALIASES.get(spec, spec)
    if not isinstance(spec, str) or spec not in KERNELS:
        raise ValueError(
            f"unknown kernel {spec!r}; choose one of {sorted(KERNELS)} "
            "or pass a fastkpca.kernels.Kernel"
        )
    cls = KERNELS[spec]
    if cls in (Linear, Cosine):
        return cls()
    g = resolve_gamma(gamma, X, rng=rng)
    if cls is Polynomial:
        return Polynomial(degree=degree, gamma=g, coef0=coef0)
    if cls is Matern:
        return Matern(gamma=g, nu=nu)
    if cls is Sigmoid:
        return Sigmoid(gamma=g, coef0=coef0)
    if cls is Laplacian:
        return Laplacian(gamma=g)
    if cls is RBF:
        return RBF(gamma=g)
    raise ValueError(f"unknown kernel {spec!r}")  # pragma: no cover - KERNELS is covered above


def _rows_to_check(X):
    """The rows :meth:`Kernel.check_rows` reads of what a kernel is resolved on: an array (of
    any namespace) or sparse matrix itself, a row source's (or device rows') first rows."""
    if X is None:
        return None
    if sp.issparse(X) or is_array(X):
        return X
    head = getattr(X, "head", None)
    return head() if callable(head) else None


def kernel_from_config(config: dict) -> Kernel:
    """Inverse of :meth:`Kernel.to_config`."""
    config = dict(config)
    name = config.pop("kernel", None)
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r} in kernel config")
    return KERNELS[name](**config)


class DegenerateKernelWarning(UserWarning):
    """The kernel matrix of the training rows is numerically the identity or constant: every
    embedding of such data is meaningless (usually a gamma far from the data's scale)."""


#: :func:`warn_if_degenerate`: the kernel matrix is "the identity" when the kernel values of
#: the rows with each other sum to at most this fraction of their values with themselves ...
IDENTITY_TOL = 1e-3
#: ... and "constant" when its centered trace ``tr(H K H)`` is at most this fraction of its trace:
#: about sqrt(eps) of float64, so that what distinguishes the rows is in the last half of the
#: digits of the kernel's values, where the rounding of every entry of K lives.
CONSTANT_TOL = 1e-8
#: Where a model knows the mean of the training kernel matrix only as an estimate, whether it is
#: degenerate is decided from the exact Gram of at most this many first training rows
#: (:func:`first_rows_gram`, only when :func:`may_be_degenerate`), scaled to the n rows.
DEGENERATE_CHECK_ROWS = 2000


def _degenerate_kind(kernel, n, diag_sum, mean_sq, noise, constant) -> str | None:
    """``"identity"``, ``"constant"`` or None for the trace ``S``, ``||mu||^2 = T / n^2`` and
    ``noise``, the uncertainty of ``T`` (0: exact)."""
    total = n * n * float(mean_sq)
    if getattr(kernel, "nonnegative", False) and total - diag_sum <= (
        IDENTITY_TOL * diag_sum + noise
    ):
        return "identity"
    if constant and diag_sum - total / n <= CONSTANT_TOL * diag_sum + noise / n:
        return "constant"
    return None


def _checkable(n, diag_sum, mean_sq) -> bool:
    return n >= 2 and bool(np.isfinite(diag_sum) and np.isfinite(mean_sq)) and diag_sum > 0


def may_be_degenerate(kernel, n_samples, diag_sum, mean_sq, mean_sq_error) -> bool:
    """Whether an estimated mean leaves the training kernel matrix possibly degenerate
    (:func:`warn_if_degenerate`'s rules within three standard errors, or an unknown error): then
    the exact statistics of the first rows (:func:`first_rows_gram`) decide."""
    n = int(n_samples)
    if not _checkable(n, diag_sum, mean_sq):
        return False
    if not np.isfinite(mean_sq_error):
        return True
    noise = 3.0 * n * n * float(mean_sq_error)
    return _degenerate_kind(kernel, n, diag_sum, mean_sq, noise, True) is not None


def first_rows_gram(kernel, rows) -> tuple[float, float]:
    """The mean diagonal value ``a`` and the mean off-diagonal value ``b`` of the exact Gram of
    the first :data:`DEGENERATE_CHECK_ROWS` of ``rows`` (any placement; computed in blocks).

    :func:`scaled_gram` turns them into ``S = n a`` and ``T = S + n (n - 1) b`` for n such rows,
    so for n at most that many rows :func:`warn_if_degenerate` decides as exact KPCA does.
    Raises ValueError when the kernel cannot be evaluated on the rows.
    """
    rows = row_range(rows, 0, DEGENERATE_CHECK_ROWS)
    h = int(rows.shape[0])
    d = as_float64(kernel.diag(rows))
    diag = float(get_namespace(d).sum(d))
    total = 0.0
    for _, _, K in kernel.blocks(rows, rows):
        total += float(get_namespace(K).sum(K))
    return diag / h, (total - diag) / (h * (h - 1)) if h > 1 else 0.0


def scaled_gram(n_samples, mean_diag, mean_offdiag) -> tuple[float, float]:
    """``(diag_sum, mean_sq)``, the trace and ``||mu||^2 = T / n^2``, of the Gram of
    ``n_samples`` rows whose kernel values average ``mean_diag`` on its diagonal and
    ``mean_offdiag`` off it (:func:`first_rows_gram`)."""
    n = int(n_samples)
    return n * mean_diag, (mean_diag + (n - 1) * mean_offdiag) / n


def warn_if_degenerate(
    kernel, n_samples, diag_sum, mean_sq, mean_sq_error=0.0, *, constant=True
) -> None:
    """Warn (:class:`DegenerateKernelWarning`) when the training kernel matrix is numerically the
    identity or constant, from its trace and its mean: no extra pass over the data.

    With ``S = sum_i k(x_i, x_i)`` and ``T = sum_ij k(x_i, x_j) = n^2 ||mu||^2``: the identity
    when ``T - S <= IDENTITY_TOL S`` (kernels with values >= 0 only), constant when ``tr(H K H)
    = S - T / n <= CONSTANT_TOL S``.  An estimated mean counts as degenerate within three of its
    standard errors.  Nothing is checked for fewer than two rows, an unknown trace or mean, or a
    mean whose three standard errors exceed half the trace.

    Parameters
    ----------
    kernel : Kernel
    n_samples : int
    diag_sum : float, ``S``
    mean_sq : float, ``||mu||^2 = T / n^2``
    mean_sq_error : float, one standard error of ``mean_sq`` (0: exact; nan: unknown, taken as 0)
    constant : bool
        Also check for a constant matrix (False: the identity only).
    """
    n = int(n_samples)
    if not _checkable(n, diag_sum, mean_sq):
        return
    # Three standard errors of T; an estimate noisier than half the trace cannot tell the
    # identity (T = S) from half a neighbour per row, nor a constant matrix from much else.
    noise = 3.0 * n * n * float(mean_sq_error) if np.isfinite(mean_sq_error) else 0.0
    if noise > 0.5 * diag_sum:
        return
    kind = _degenerate_kind(kernel, n, diag_sum, mean_sq, noise, constant)
    if kind is None:
        return
    total = n * n * float(mean_sq)
    gamma = getattr(kernel, "gamma", None)
    named = f" with gamma={gamma:.6g}" if isinstance(gamma, float) else ""
    advice = (
        "; try gamma='scale' (1 / (n_features * X.var())) or gamma='median', or scale the data"
        if gamma is not None
        else "; check the data and the kernel"
    )
    name = getattr(kernel, "name", type(kernel).__name__)
    if kind == "identity":
        warnings.warn(
            f"the {name} kernel matrix{named} of the {n} training rows is numerically the "
            f"identity (the rows' kernel values with each other sum to "
            f"{max(total - diag_sum, 0.0) / diag_sum:.2g} of their values with themselves): "
            "every point is far from every other one at this gamma, so the embedding is "
            f"meaningless{advice}",
            DegenerateKernelWarning,
            stacklevel=3,
        )
    else:
        warnings.warn(
            f"the {name} kernel matrix{named} of the {n} training rows is numerically constant "
            f"(its centered trace is {max(diag_sum - total / n, 0.0) / diag_sum:.2g} of its "
            "trace): all rows look alike to the kernel (identical rows, or a gamma far too "
            f"small for the data's scale), so the embedding is meaningless{advice}",
            DegenerateKernelWarning,
            stacklevel=3,
        )
