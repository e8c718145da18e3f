"""Kernel objects: chunked Gram blocks, diagonals and spectral samplers.

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

The Matern length scale is chosen so that Matern(gamma, nu -> inf) tends to RBF(gamma), and
Matern(gamma, nu) equals ``sklearn.gaussian_process.kernels.Matern(length_scale=l, nu=nu)``.

Gram blocks are computed in row chunks whose size comes from a memory budget
(:data:`WORKING_MEMORY_MB`).  float32 input gives float32 output, but squared distances are
accumulated in float64: ``|x|^2 + |y|^2 - 2 x.y`` cancels catastrophically in float32 for
nearby points (the same reason ``sklearn.metrics.pairwise.euclidean_distances`` upcasts).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
from scipy import special

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
    "KERNELS",
]

#: Memory budget (in MiB) for one Gram row chunk and its float64 temporaries.
WORKING_MEMORY_MB = 256

#: Bound on ``|K32 - K64|`` of an rbf block computed in float32 (``Kernel.blocks(dtype=float32)``)
#: for rows with ``gamma |x - centre|^2 <= 10``: the exponent's rounding (above) times the
#: kernel value, plus float32's own rounding of the value; tested in tests/test_kernels.py.
FLOAT32_BLOCK_ATOL = 1e-5


def chunk_rows(
    n_cols: int,
    *,
    itemsize: int = 8,
    n_temporaries: int = 3,
    working_memory_mb: float | None = None,
) -> int:
    """Number of rows of an ``(rows, n_cols)`` block that fits the working-memory budget."""
    budget = (working_memory_mb or WORKING_MEMORY_MB) * 2**20
    per_row = max(1, n_cols) * itemsize * n_temporaries
    return int(max(1, budget // per_row))


def _as_float64(X):
    if sp.issparse(X):
        return X.astype(np.float64)
    return np.asarray(X, dtype=np.float64)


def _row_sq_norms(X) -> np.ndarray:
    """Squared Euclidean row norms in float64 (dense or sparse)."""
    if sp.issparse(X):
        X = X.tocsr()
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def _dot(A, B):
    """A @ B.T for dense or sparse operands, returned dense."""
    out = A @ B.T
    if sp.issparse(out):
        out = out.toarray()
    return np.asarray(out)


def squared_euclidean(X, Y, X_sq=None, Y_sq=None) -> np.ndarray:
    """Squared Euclidean distances between rows of X and Y, computed in float64, clipped at 0."""
    Xd, Yd = _as_float64(X), _as_float64(Y)
    X_sq = _row_sq_norms(Xd) if X_sq is None else X_sq
    Y_sq = _row_sq_norms(Yd) if Y_sq is None else Y_sq
    if not (np.all(np.isfinite(X_sq)) and np.all(np.isfinite(Y_sq))):
        # ||x||^2 beyond 1.8e308 (entries above ~1e154): x.y overflows too, and the distances
        # would come out inf - inf = nan, i.e. a silent all-zero or nan Gram.
        raise ValueError(
            "X has values too large for the kernel: squared distances overflow float64"
        )
    D = _dot(Xd, Yd)
    D *= -2.0
    D += X_sq[:, None]
    D += Y_sq[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def _check_finite_block(K) -> np.ndarray:
    """Raise a ValueError if a Gram block has inf or nan (overflow of the kernel's arithmetic)."""
    if not np.all(np.isfinite(K)):
        raise ValueError(
            "X has values too large for the kernel: kernel values overflow float64 "
            "(scale the data or lower gamma)"
        )
    return K


def manhattan(X, Y) -> np.ndarray:
    """L1 distances between rows of X and Y in float64, chunked over the feature axis."""
    if sp.issparse(X) or sp.issparse(Y):
        from sklearn.metrics.pairwise import manhattan_distances

        return manhattan_distances(_as_float64(X), _as_float64(Y))
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    D = np.zeros((X.shape[0], Y.shape[0]))
    for j in range(X.shape[1]):
        D += np.abs(X[:, j, None] - Y[None, :, j])
    return D


class Kernel:
    """Base class: a positive-definite kernel evaluated in row chunks.

    Subclasses implement :meth:`_block` (the Gram block of two small row sets, in float64) and
    :meth:`diag`; shift-invariant kernels also implement :meth:`sample_frequencies`.
    """

    name: str = "kernel"
    shift_invariant: bool = False

    # --- public API ---------------------------------------------------------------------------
    def __call__(self, X, Y=None, *, out=None, working_memory_mb=None) -> np.ndarray:
        """Gram matrix ``K[i, j] = k(X[i], Y[j])`` (Y defaults to X), filled row chunk by chunk.

        The result has X's floating dtype (float32 stays float32); ``out`` may be a preallocated
        array of shape ``(len(X), len(Y))`` to write into.
        """
        Y_is_X = Y is None
        Y = X if Y is None else Y
        dtype = result_dtype(X, Y)
        n, m = X.shape[0], Y.shape[0]
        if out is None:
            out = np.empty((n, m), dtype=dtype)
        elif out.shape != (n, m):
            raise ValueError(f"out has shape {out.shape}, expected {(n, m)}")
        ctx = self._prepare(Y)
        for start, stop in self.iter_chunks(n, m, working_memory_mb=working_memory_mb):
            out[start:stop] = _check_finite_block(self._block(X[start:stop], Y, ctx))
        if Y_is_X and self._exact_diag_one:
            np.fill_diagonal(out, 1.0)
        return out

    def blocks(
        self, X, Y=None, *, working_memory_mb=None, dtype=None
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(start, stop, K[start:stop])`` row blocks of the Gram matrix, in float64.

        ``dtype=np.float32`` yields float32 blocks instead (whatever X's dtype), for callers
        whose own error dwarfs float32 rounding: the rbf kernel then computes them in float32
        (:meth:`RBF._block32`, about twice as fast; entries within :data:`FLOAT32_BLOCK_ATOL`
        of the float64 ones for data of moderate ``gamma * spread``), the other kernels in
        float64, rounded.
        """
        Y = X if Y is None else Y
        low = dtype is not None and np.dtype(dtype) == np.float32
        ctx = self._prepare32(Y) if low else self._prepare(Y)
        block = self._block32 if low else self._block
        for start, stop in self.iter_chunks(
            X.shape[0], Y.shape[0], working_memory_mb=working_memory_mb
        ):
            yield start, stop, _check_finite_block(block(X[start:stop], Y, ctx))

    @staticmethod
    def iter_chunks(n_rows, n_cols, *, working_memory_mb=None):
        step = chunk_rows(n_cols, working_memory_mb=working_memory_mb)
        for start in range(0, n_rows, step):
            yield start, min(n_rows, start + step)

    def diag(self, X) -> np.ndarray:
        """The diagonal ``k(x_i, x_i)`` as a vector of X's floating dtype."""
        raise NotImplementedError

    def sample_frequencies(self, n_features: int, dim: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n_features`` frequencies in R^dim from the kernel's spectral density.

        Returns a float64 array of shape ``(n_features, dim)``; by Bochner's theorem
        ``k(x - y) = E_w[cos(w . (x - y))]`` for w drawn from it.
        """
        raise ValueError(
            f"the {self.name!r} kernel is not shift-invariant, so it has no spectral density to "
            "sample random Fourier features from; use kernel='rbf', 'laplacian' or 'matern'"
        )

    def get_params(self) -> dict:
        """The kernel's numeric parameters (JSON-serialisable)."""
        return {}

    def to_config(self) -> dict:
        """A JSON-serialisable description; ``make_kernel(**config)`` rebuilds the kernel."""
        return {"kernel": self.name, **self.get_params()}

    # --- internals ----------------------------------------------------------------------------
    _exact_diag_one = False

    def _prepare(self, Y):
        return None

    def _block(self, Xc, Y, ctx) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _prepare32(self, Y):
        return self._prepare(Y)

    def _block32(self, Xc, Y, ctx) -> np.ndarray:
        return self._block(Xc, Y, ctx).astype(np.float32)

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_params() == other.get_params()

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.get_params().items()))))


def result_dtype(X, Y=None):
    """float32 if every input is float32, else float64."""
    dts = [getattr(X, "dtype", np.float64)]
    if Y is not None:
        dts.append(getattr(Y, "dtype", np.float64))
    return np.float32 if all(np.dtype(d) == np.float32 for d in dts) else np.float64


def _check_positive(name, value, *, allow_zero=False):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


class _Radial(Kernel):
    """Kernels that are a function of the squared Euclidean distance."""

    shift_invariant = True
    _exact_diag_one = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)

    def get_params(self):
        return {"gamma": self.gamma}

    def _prepare(self, Y):
        return _row_sq_norms(Y)

    def _block(self, Xc, Y, Y_sq):
        return self._profile(squared_euclidean(Xc, Y, Y_sq=Y_sq))

    def diag(self, X):
        return np.ones(X.shape[0], dtype=result_dtype(X))


class RBF(_Radial):
    """Gaussian kernel ``exp(-gamma ||x - y||^2)``; gamma = 1 / (2 sigma^2)."""

    name = "rbf"

    def _profile(self, D2):
        D2 *= -self.gamma
        return np.exp(D2, out=D2)

    def _prepare32(self, Y):
        if sp.issparse(Y):
            return None, None, None, self._prepare(Y)
        Yd = np.asarray(Y, dtype=np.float64)
        center = Yd.mean(axis=0)
        Yc = (Yd - center).astype(np.float32)
        return center, Yc, np.einsum("ij,ij->i", Yc, Yc), self._prepare(Y)

    def _block32(self, Xc, Y, ctx):
        """The block in float32: distances of rows centered at Y's mean, then ``exp``.

        Distances are shift-invariant, so both sides are centered at the mean of Y (in float64,
        then rounded): ``|x|^2 + |y|^2 - 2 x.y`` then cancels only relative to the rows' spread
        about that centre, not their offset, and the float32 GEMM's rounding in ``gamma D`` is
        about ``4 eps32 gamma max(|x - centre|^2, |y - centre|^2)`` absolute (``2e-7`` per unit
        of ``gamma |x - centre|^2``).  float32 GEMM and ``exp`` are about twice as fast as
        float64 (``exp`` has a SIMD path in both).
        """
        center, Yc, y_sq, prepared = ctx
        if center is None or sp.issparse(Xc):
            return self._block(Xc, Y, prepared).astype(np.float32)
        Xs = (np.asarray(Xc, dtype=np.float64) - center).astype(np.float32)
        D = Xs @ Yc.T
        D *= -2.0
        D += np.einsum("ij,ij->i", Xs, Xs)[:, None]
        D += y_sq[None, :]
        np.maximum(D, 0.0, out=D)
        D *= np.float32(-self.gamma)
        return np.exp(D, out=D)

    def sample_frequencies(self, n_features, dim, rng):
        # Spectral density of exp(-gamma r^2) is N(0, 2 gamma I) (Rahimi & Recht 2007).
        return rng.standard_normal((n_features, dim)) * np.sqrt(2.0 * self.gamma)


class Laplacian(Kernel):
    """Laplacian kernel ``exp(-gamma ||x - y||_1)``.

    The L1 distance, as ``sklearn.metrics.pairwise.laplacian_kernel``.
    """

    name = "laplacian"
    shift_invariant = True
    _exact_diag_one = True

    def __init__(self, gamma: float = 1.0):
        self.gamma = _check_positive("gamma", gamma)

    def get_params(self):
        return {"gamma": self.gamma}

    def _block(self, Xc, Y, ctx):
        D = manhattan(Xc, Y)
        D *= -self.gamma
        return np.exp(D, out=D)

    def diag(self, X):
        return np.ones(X.shape[0], dtype=result_dtype(X))

    def sample_frequencies(self, n_features, dim, rng):
        # exp(-gamma |t|) is the characteristic function of Cauchy(0, gamma); the L1 kernel is a
        # product over coordinates, so each coordinate is drawn independently.
        return rng.standard_cauchy((n_features, dim)) * self.gamma


class Matern(_Radial):
    """Matern kernel with smoothness ``nu`` and length scale ``l = 1 / sqrt(2 gamma)``.

    ``k(r) = 2^(1-nu) / Gamma(nu) * (sqrt(2 nu) r / l)^nu * K_nu(sqrt(2 nu) r / l)``, in closed
    form for nu = 0.5, 1.5, 2.5 and through ``scipy.special.kv`` otherwise; nu = inf is RBF.
    """

    name = "matern"

    def __init__(self, gamma: float = 1.0, nu: float = 1.5):
        super().__init__(gamma)
        self.nu = _check_positive("nu", nu) if not np.isinf(nu) else float(nu)

    def get_params(self):
        return {"gamma": self.gamma, "nu": self.nu}

    @property
    def length_scale(self):
        return 1.0 / np.sqrt(2.0 * self.gamma)

    def _profile(self, D2):
        nu = self.nu
        if np.isinf(nu):
            D2 *= -self.gamma
            return np.exp(D2, out=D2)
        r = np.sqrt(D2, out=D2) / self.length_scale
        if nu == 0.5:
            return np.exp(-r)
        if nu == 1.5:
            t = np.sqrt(3.0) * r
            return (1.0 + t) * np.exp(-t)
        if nu == 2.5:
            t = np.sqrt(5.0) * r
            return (1.0 + t + t * t / 3.0) * np.exp(-t)
        t = np.sqrt(2.0 * nu) * r
        t[t == 0.0] += np.finfo(float).eps  # K_nu diverges at 0; the limit of the product is 1
        K = (2.0 ** (1.0 - nu) / special.gamma(nu)) * t**nu * special.kv(nu, t)
        return K

    def sample_frequencies(self, n_features, dim, rng):
        # The Matern spectral density is a multivariate Student-t with 2 nu degrees of freedom
        # and scale 1 / l: w = z / l * sqrt(2 nu / u), z ~ N(0, I), u ~ chi^2(2 nu).
        if np.isinf(self.nu):
            return rng.standard_normal((n_features, dim)) * np.sqrt(2.0 * self.gamma)
        z = rng.standard_normal((n_features, dim))
        u = rng.chisquare(2.0 * self.nu, size=(n_features, 1))
        return z * np.sqrt(2.0 * self.nu / u) / self.length_scale


class Polynomial(Kernel):
    """Polynomial kernel ``(gamma <x, y> + coef0)^degree``."""

    name = "polynomial"

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0):
        if not isinstance(degree, numbers.Integral) or isinstance(degree, bool) or degree < 1:
            raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
        self.degree = int(degree)
        self.gamma = _check_positive("gamma", gamma)
        self.coef0 = _check_positive("coef0", coef0, allow_zero=True)

    def get_params(self):
        return {"degree": self.degree, "gamma": self.gamma, "coef0": self.coef0}

    def _block(self, Xc, Y, ctx):
        K = _dot(_as_float64(Xc), _as_float64(Y))
        K *= self.gamma
        K += self.coef0
        return K**self.degree

    def diag(self, X):
        return ((self.gamma * _row_sq_norms(X) + self.coef0) ** self.degree).astype(result_dtype(X))


class Linear(Kernel):
    """Linear kernel ``<x, y>``."""

    name = "linear"

    def _block(self, Xc, Y, ctx):
        return _dot(_as_float64(Xc), _as_float64(Y))

    def diag(self, X):
        return _row_sq_norms(X).astype(result_dtype(X))


class Cosine(Kernel):
    """Cosine similarity ``<x, y> / (||x|| ||y||)`` (zero rows give 0, as scikit-learn)."""

    name = "cosine"

    @staticmethod
    def _inv_norms(X):
        norms = np.sqrt(_row_sq_norms(X))
        norms[norms == 0.0] = 1.0
        return 1.0 / norms

    def _prepare(self, Y):
        return self._inv_norms(Y)

    def _block(self, Xc, Y, inv_y):
        K = _dot(_as_float64(Xc), _as_float64(Y))
        K *= self._inv_norms(Xc)[:, None]
        K *= inv_y[None, :]
        return K

    def diag(self, X):
        return (_row_sq_norms(X) > 0).astype(result_dtype(X))


class Sigmoid(Kernel):
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

    def get_params(self):
        return {"gamma": self.gamma, "coef0": self.coef0}

    def _block(self, Xc, Y, ctx):
        K = _dot(_as_float64(Xc), _as_float64(Y))
        K *= self.gamma
        K += self.coef0
        return np.tanh(K, out=K)

    def diag(self, X):
        return np.tanh(self.gamma * _row_sq_norms(X) + self.coef0).astype(result_dtype(X))


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
            elif sp.issparse(X):
                Xs = X.tocsr()
                mean = np.asarray(Xs.mean()).item()
                var = np.asarray(Xs.multiply(Xs).mean()).item() - mean**2
            else:
                var = float(np.var(np.asarray(X, dtype=np.float64)))
            return 1.0 / (d * var) if var > 0 else 1.0
        if gamma == "median":
            rng = np.random.default_rng(rng)
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


def make_kernel(spec="rbf", *, gamma=None, degree=3, coef0=1.0, nu=1.5, X=None, rng=None) -> Kernel:
    """Build a :class:`Kernel` from a name (or pass a Kernel through).

    Parameters
    ----------
    spec : str or Kernel
        One of ``"rbf"``, ``"laplacian"``, ``"matern"``, ``"polynomial"`` (or scikit-learn's
        ``"poly"``), ``"linear"``, ``"cosine"``, ``"sigmoid"``, or a Kernel object (returned
        unchanged).
    gamma : float, None, "scale" or "median"
        Resolved with :func:`resolve_gamma` (``X`` is needed for the string forms and None).
    degree, coef0 : polynomial (and sigmoid: coef0) parameters.  nu : Matern smoothness.
    """
    if isinstance(spec, Kernel):
        return spec
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


def kernel_from_config(config: dict) -> Kernel:
    """Inverse of :meth:`Kernel.to_config`."""
    config = dict(config)
    name = config.pop("kernel", None)
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r} in kernel config")
    return KERNELS[name](**config)
