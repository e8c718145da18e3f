"""Random feature maps ``z`` with ``E[z(x) . z(y)] = k(x, y)``.

Five maps, each drawn once from a kernel and a ``numpy.random.Generator``:

================ ========================================= ====================================
name             kernels                                   cost per row (d inputs, m outputs)
================ ========================================= ====================================
``rff``          shift-invariant (rbf, laplacian, matern)  O(d m): ``X @ W``, then cos / sin
``orf``          isotropic (rbf, matern)                   O(d m), lower variance than ``rff``
``qmc``          shift-invariant (rbf, laplacian, matern)  O(d m), far lower error for small d
``fastfood``     isotropic (rbf, matern)                   O(m log d) time, O(m) memory
``tensorsketch`` polynomial                                O(p (d + m log m))
================ ========================================= ====================================

Random Fourier features (Rahimi & Recht 2007): ``z(x) = [cos(W x), sin(W x)] / sqrt(D)`` for D
frequencies from the kernel's spectral density (Bochner), lower variance than scikit-learn's
random phases (Sutherland & Schneider, UAI 2015, section 2).  The Fourier maps compute in
float32, each chunk shifted by its mean (:class:`fastkpca._feature_map.FourierMap`);
``__call__`` returns float64 for float64 input.  TensorSketch keeps the input's precision.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import scipy.sparse as sp

from . import _input_sketch
from ._feature_map import FOURIER_DTYPE, FeatureMap, FourierMap, dense_rows, float_type
from ._state import register_state_class
from ._utils import DEFAULT_BLOCK_ROWS, check_auto_size, check_int, require_memory_parts
from .execution import CHUNK_ROWS, SHARE_ROWS, n_workers, one_blas_thread, worker_index
from .execution.arrays import placement_of, row_range
from .execution.budget import FEATURE_BLOCK_MB
from .execution.feature_ops import (
    ChunkBuffers,
    block_rows,
    cos_sin,
    fwht,
    irfft,
    map_rows,
    rfft,
    sparse_product,
)
from .kernels import RBF, Kernel, Matern, Polynomial

__all__ = [
    "FEATURES",
    "DEFAULT_N_RANDOM_FEATURES",
    "FOURIER_DTYPE",
    "FeatureMap",
    "FourierFeatureMap",
    "FastfoodFeatureMap",
    "TensorSketchFeatureMap",
    "draw_feature_map",
    "resolve_n_random_features",
    "resolve_features",
    "init_feature_map",
    "check_feature_spec",
    "fwht",
    "column_sums",
    "feature_blocks",
    "reduce_feature_chunks",
    "feature_projection",
]

#: The feature-map kinds accepted by ``features=`` everywhere.
FEATURES = ("rff", "orf", "qmc", "fastfood", "tensorsketch")
#: ``features="auto"`` keeps ``orf`` up to this input width even with fewer frequencies than
#: columns; see :func:`resolve_features`.
AUTO_ORF_MAX_WIDTH = 512
#: ... and ``qmc`` up to this one (its error bound grows like (log m)^d; benchmarks/NOTES.md).
AUTO_QMC_MAX_WIDTH = 8

#: ``n_random_features=None`` means this many output columns.  It does not depend on n: random
#: features approximate the kernel better the more there are whatever n is, and a streaming fit
#: cannot know n in advance (so a cap on n would make a blocked fit differ from an in-memory one).
DEFAULT_N_RANDOM_FEATURES = 1000


def _isotropic_radii(kernel: Kernel, n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Norms of n frequencies in R^dim drawn from an isotropic kernel's spectral density: times
    orthogonal directions (``orf``, ``fastfood``) they have the Gaussian / Student-t marginals
    (Yu et al. 2016, section 3).  Drawn in row chunks."""
    if not isinstance(kernel, RBF | Matern):
        raise ValueError(
            f"the {kernel.name!r} kernel has no rotation-invariant spectral density, which the "
            "orthogonal ('orf') and 'fastfood' feature maps need; use kernel='rbf' or 'matern', "
            "or features='rff' (which handles 'laplacian')"
        )
    out = np.empty(n)
    step = max(1, 2**20 // max(dim, 1))
    for start in range(0, n, step):
        stop = min(n, start + step)
        out[start:stop] = np.linalg.norm(kernel.sample_frequencies(stop - start, dim, rng), axis=1)
    return out


def _haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A d x d orthogonal matrix drawn uniformly (Haar): QR of a Gaussian with R's signs fixed."""
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    signs = np.sign(np.diag(R))
    signs[signs == 0] = 1.0
    return Q * signs


# --- feature maps ---------------------------------------------------------------------------------
# Each map's ``_chunk`` is written once over the rows' array namespace; the execution layer runs
# the chunks (``execution.feature_ops.map_rows``: on the host 512-row chunks on the
# worker threads, written in place; on a device large chunks sized from its free memory).  The
# random parameters are the host's, converted once per placement and kept on the map
# (:meth:`FeatureMap._placed`), so every placement computes the features of the same map.


def column_sums(Z):
    """Column sums of a feature chunk, as float64.  For float32: partial sums of 16 rows in
    float32 (rounding ~16 eps32 of the rows' spread), their sum in float64 (cheaper than a
    float64 sum of the chunk)."""
    xp = placement_of(Z).xp
    b, m = Z.shape
    if Z.dtype == xp.float64 or b % 16:
        return xp.sum(Z, axis=0, dtype=xp.float64)
    return xp.sum(xp.sum(xp.reshape(Z, (16, b // 16, m)), axis=0), axis=0, dtype=xp.float64)


@register_state_class
class FourierFeatureMap(FourierMap):
    """``z(x) = [cos(x W), sin(x W)] / sqrt(D)`` for a frequency matrix W of shape (d, D).

    Used by ``rff`` (i.i.d. frequencies) and ``orf`` (orthogonal frequencies); m = 2 D.  Accepts
    CSR input (``X @ W`` costs nnz(X) D; the cos / sin that follow cost n D whatever the
    sparsity, so this is not the input-sparsity time of Musco & Woodruff's section 3).
    """

    accepts_sparse = True

    def __init__(self, frequencies: np.ndarray, kind: str = "rff"):
        self.frequencies = np.ascontiguousarray(frequencies, dtype=np.float64)
        self.kind = kind
        self.n_input_features, self.n_frequencies = self.frequencies.shape
        self.n_output_features = 2 * self.n_frequencies
        #: The largest norm of a frequency (a bound on the phases, :data:`MAX_PHASE32`).
        self.frequency_norm = float(
            np.sqrt(np.max(np.einsum("ij,ij->j", self.frequencies, self.frequencies), initial=0))
        )

    def _weights(self, like, dtype):
        """W in ``dtype`` on the placement of ``like`` (cast once: ``X @ W`` runs as SGEMM in
        float32, as RBFSampler casts its weights to X.dtype)."""
        return self._placed(like, "W", lambda: self.frequencies, dtype)

    def _project(self, A, dtype):
        return A @ self._weights(A, dtype)

    def _chunk(self, rows, out=None):
        """The float32 features of a chunk (module notes); CSR rows are not shifted (that would
        densify them): their phases ``X W`` (nnz(X) D flops) are formed in the rows' precision,
        float64 ones reduced modulo 2 pi, then cast."""
        if not sp.issparse(rows):
            return self._fourier_chunk(rows, out)
        wdtype = float_type(rows)
        P = rows @ self._weights(rows, wdtype)
        P = np.asarray(P.toarray() if sp.issparse(P) else P, dtype=wdtype)
        if wdtype == np.float64:
            P = np.remainder(P, 2 * np.pi)
        P = P.astype(FOURIER_DTYPE, copy=False)
        return cos_sin(P, None, 1.0 / np.sqrt(self.n_frequencies), out)

    def to_state(self) -> dict:
        return {"frequencies": self.frequencies, "kind": self.kind}

    @classmethod
    def from_state(cls, state: dict) -> FourierFeatureMap:
        return cls(np.asarray(state["frequencies"]), kind=str(state["kind"]))


@register_state_class
class FastfoodFeatureMap(FourierMap):
    """Fastfood (Le, Sarlos & Smola 2013): ``W x`` with ``W = S H G Pi H B`` blocks, then cos / sin.

    The input is zero-padded to D = 2^ceil(log2 d); each block of D frequencies is ``V = S H G Pi
    H B / sqrt(D)`` (B random signs, H Walsh-Hadamard by :func:`fwht`, Pi a permutation, G
    Gaussian), with ``S_ii = r_i / (sqrt(D) ||G||_F)`` for radii r from the kernel's spectral
    density (the paper's eq. (10)).  The first ``n_frequencies`` rows are used; output as
    ``rff``; memory O(D n_blocks).
    """

    kind = "fastfood"

    def __init__(
        self,
        n_input_features: int,
        n_frequencies: int,
        signs: np.ndarray,
        permutations: np.ndarray,
        gaussians: np.ndarray,
        scales: np.ndarray,
    ):
        self.n_input_features = int(n_input_features)
        self.n_frequencies = int(n_frequencies)
        self.signs = np.asarray(signs, dtype=np.float64)
        self.permutations = np.asarray(permutations, dtype=np.int64)
        self.gaussians = np.asarray(gaussians, dtype=np.float64)
        self.scales = np.asarray(scales, dtype=np.float64)
        self.n_blocks, self.padded_dim = self.signs.shape
        self.n_output_features = 2 * self.n_frequencies
        # A bound on |phase| / ||x|| (MAX_PHASE32): the rows' norms (the radii,
        # S_ii sqrt(D) ||G_b||), and the unnormalized transforms' intermediates (H G Pi H B x is
        # at most D max|G| ||x|| in size).
        D = self.padded_dim
        g_norms = np.linalg.norm(self.gaussians, axis=1, keepdims=True)
        radii = self.scales * np.sqrt(D) * g_norms
        self.frequency_norm = float(
            max(np.max(radii, initial=0.0), D * np.max(np.abs(self.gaussians), initial=0.0))
        )

    def _project(self, A, dtype):
        """``V a`` for the rows a of A (1-D or 2-D, in ``dtype``), in ``dtype``."""
        placement = placement_of(A)
        xp = placement.xp
        rows = xp.reshape(A, (-1, self.n_input_features))
        B = self._placed(A, "signs", lambda: self.signs, dtype)
        G = self._placed(A, "gaussians", lambda: self.gaussians, dtype)
        S = self._placed(A, "scales", lambda: self.scales, dtype)
        perms = self._placed(A, "permutations", lambda: self.permutations, np.int64)
        d, D, nf = self.n_input_features, self.padded_dim, self.n_frequencies
        n = rows.shape[0]
        parts = []
        for b in range(self.n_blocks):
            lo, hi = b * D, min(nf, (b + 1) * D)
            Y = xp.zeros((n, D), dtype=rows.dtype, device=placement.device)
            Y[:, :d] = rows * B[b, :d]  # B x, zero-padded to D
            Y = fwht(Y)  # H B x
            Y = xp.take(Y, perms[b, :], axis=1)  # Pi H B x
            Y *= G[b, :]  # G Pi H B x
            Y = fwht(Y)  # H G Pi H B x
            parts.append(Y[:, : hi - lo] * S[b, : hi - lo])
        P = parts[0] if len(parts) == 1 else xp.concat(parts, axis=1)
        return P[0, :] if A.ndim == 1 else P

    def _chunk(self, rows, out=None):
        return self._fourier_chunk(dense_rows(rows), out)

    def projections(self, X):
        """``V x`` for every row of X (no center): shape ``(n, n_frequencies)``, X's float
        dtype."""
        X = self._rows(X)
        dtype = float_type(X)

        def chunk(rows, out):
            return self._result(self._project(dense_rows(rows, dtype), dtype), out)

        return map_rows(X, self.n_frequencies, dtype, chunk)

    def to_state(self) -> dict:
        return {
            "n_input_features": self.n_input_features,
            "n_frequencies": self.n_frequencies,
            "signs": self.signs,
            "permutations": self.permutations,
            "gaussians": self.gaussians,
            "scales": self.scales,
        }

    @classmethod
    def from_state(cls, state: dict) -> FastfoodFeatureMap:
        return cls(
            int(state["n_input_features"]),
            int(state["n_frequencies"]),
            state["signs"],
            state["permutations"],
            state["gaussians"],
            state["scales"],
        )


@register_state_class
class TensorSketchFeatureMap(FeatureMap):
    """TensorSketch (Pham & Pagh 2013) for the polynomial kernel ``(gamma <x, y> + coef0)^p``.

    With ``x' = [sqrt(gamma) x, sqrt(coef0)]``, ``z(x) = IFFT(prod_i FFT(C_i x'))`` over p
    independent CountSketches, ``E[z(x) . z(y)] = <x', y'>^p`` (Lemma 2).  O(p (nnz(x) + m log
    m)) per row; accepts CSR; computed in the input's precision.
    """

    kind = "tensorsketch"
    accepts_sparse = True

    def __init__(
        self,
        n_input_features: int,
        n_output_features: int,
        degree: int,
        gamma: float,
        coef0: float,
        buckets: np.ndarray,
        signs: np.ndarray,
    ):
        self.n_input_features = int(n_input_features)
        self.n_output_features = int(n_output_features)
        self.degree = int(degree)
        self.gamma = float(gamma)
        self.coef0 = float(coef0)
        self.buckets = np.asarray(buckets, dtype=np.int64)  # (degree, d + 1)
        self.signs = np.asarray(signs, dtype=np.float64)  # (degree, d + 1)
        self._sketch_mats: dict = {}

    def _count_sketch(self, i, dtype):
        """C_i restricted to the d input coordinates, as a CSR (d, m) matrix, and its last row."""
        key = (i, np.dtype(dtype).str)
        if key not in self._sketch_mats:
            d, m = self.n_input_features, self.n_output_features
            vals = (self.signs[i, :d] * np.sqrt(self.gamma)).astype(dtype)
            C = sp.csr_matrix((vals, (np.arange(d), self.buckets[i, :d])), shape=(d, m))
            last = np.zeros(m, dtype=dtype)
            last[self.buckets[i, d]] = self.signs[i, d] * np.sqrt(self.coef0)
            self._sketch_mats[key] = (C, last)
        return self._sketch_mats[key]

    def _chunk(self, rows, out=None):
        """``IFFT(prod_i FFT(C_i x'))`` in the rows' precision."""
        dtype = float_type(rows)
        cache = self.__dict__.setdefault("_dense_sketches", {})
        prod = None
        for i in range(self.degree):
            C, last = self._count_sketch(i, dtype)
            cx = sparse_product(rows, C, cache)
            cx += self._placed(cx, f"last{i}", lambda last=last: last, dtype)
            f = rfft(cx)
            prod = f if prod is None else prod * f
        Z = irfft(prod, self.n_output_features)
        xp = placement_of(Z).xp
        return self._result(xp.astype(Z, placement_of(Z).dtype(dtype), copy=False), out)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_dense_sketches", None)
        return state

    def to_state(self) -> dict:
        return {
            "n_input_features": self.n_input_features,
            "n_output_features": self.n_output_features,
            "degree": self.degree,
            "gamma": self.gamma,
            "coef0": self.coef0,
            "buckets": self.buckets,
            "signs": self.signs,
        }

    @classmethod
    def from_state(cls, state: dict) -> TensorSketchFeatureMap:
        return cls(
            int(state["n_input_features"]),
            int(state["n_output_features"]),
            int(state["degree"]),
            float(state["gamma"]),
            float(state["coef0"]),
            state["buckets"],
            state["signs"],
        )


# --- features of row blocks -----------------------------------------------------------------------
def _feature_block_rows(m: int, itemsize: int) -> int:
    """Rows per host feature block: DEFAULT_BLOCK_ROWS, or :data:`~fastkpca.execution.SHARE_ROWS`
    per worker thread above 8 threads, within ~2 block copies of
    :data:`~fastkpca.execution.budget.FEATURE_BLOCK_MB`; whole shares (or
    :data:`~fastkpca.execution.CHUNK_ROWS` chunks), so only the grouping of sums changes."""
    wanted = max(DEFAULT_BLOCK_ROWS, SHARE_ROWS * n_workers())
    budget = max(1, int(FEATURE_BLOCK_MB * 2**20 // (max(1, m) * itemsize * 2)))
    rows = min(wanted, budget)
    unit = SHARE_ROWS if rows >= SHARE_ROWS else CHUNK_ROWS
    return max(1, rows - rows % unit if rows >= unit else rows)


def feature_blocks(blocks, fmap: FeatureMap):
    """Yield ``(start, Z_block)`` feature blocks from ``(start, X_block)``, in the map's computing
    dtype (:meth:`FeatureMap.feature_dtype`) and X's namespace and device, split to stay within
    the memory budget (on a device: its free memory)."""
    m = fmap.n_output_features
    for start, Xb in blocks:
        dtype = fmap.feature_dtype(float_type(Xb))
        itemsize = np.dtype(dtype).itemsize
        step = block_rows(Xb, _feature_block_rows(m, itemsize), m, itemsize)
        if sp.issparse(Xb):
            Xb = Xb.tocsr()
        n = Xb.shape[0]
        for s in range(0, n, step):
            yield start + s, fmap(Xb[s : min(n, s + step), ...], dtype=dtype)


def reduce_feature_chunks(blocks, fmap: FeatureMap, new_accumulator, add, *, balanced=False):
    """Feed the features of ``(start, X_block)`` row blocks to per-share accumulators (of
    :func:`~fastkpca.execution.map_row_chunks`, ``balanced`` for small ones): ``add(accumulator,
    Z)`` for every chunk Z (overwritable) in the thread that computed it; returns the
    ``new_accumulator()`` objects in share order, to be added."""
    accumulators: dict[int, object] = {}

    def feed(Z):
        index = worker_index()
        accumulator = accumulators.get(index)
        if accumulator is None:
            accumulator = accumulators[index] = new_accumulator()
        add(accumulator, Z)

    for _, Xb in blocks:
        fmap.feed_chunks(Xb, feed, balanced=balanced)
    return [accumulators[i] for i in sorted(accumulators)]


def feature_projection(X, fmap: FeatureMap, mean, components):
    """``(z(X) - mean) @ components.T``, in X's float dtype, namespace and device.

    The transform of RandomFeatureKPCA and StreamingKPCA: the mean is removed before projecting
    (float32 rounding stays relative to the centered features) and what rounding drops of it is
    projected in float64.  Chunk by chunk, BLAS on one thread.
    """
    X = fmap._rows(X)
    placement = placement_of(X)
    xp = placement.xp
    dtype = float_type(X)
    feature_dtype = placement.dtype(fmap.feature_dtype(dtype))
    m, k = fmap.n_output_features, components.shape[0]
    mean64 = placement.asarray(mean, np.float64)
    comps64 = placement.asarray(components, np.float64)
    mean_z = xp.astype(mean64, feature_dtype)
    # (m, k) in the features' dtype, copied row by row (C order: numpy's GEMM then takes the
    # kernel, and the order of its sums, of a plain product)
    comps = xp.reshape(
        xp.astype(xp.permute_dims(comps64, (1, 0)), feature_dtype), (m, k), copy=True
    )
    with one_blas_thread():
        mean_proj = (mean64 - xp.astype(mean_z, xp.float64)) @ xp.permute_dims(comps64, (1, 0))
    buffers = ChunkBuffers(X)

    def chunk(rows, out):
        Z = fmap._chunk(rows, buffers.get("features", rows.shape[0], m, feature_dtype))
        Z -= mean_z
        return fmap._result(Z @ comps, out)

    out = map_rows(X, k, dtype, chunk)
    out -= xp.astype(mean_proj, out.dtype)
    return out


# --- drawing --------------------------------------------------------------------------------------
def _require_shift_invariant(kernel: Kernel, features: str):
    if not kernel.shift_invariant:
        raise ValueError(
            f"features={features!r} are random Fourier features, which need a shift-invariant "
            f"kernel ('rbf', 'laplacian' or 'matern'); the {kernel.name!r} kernel is not. "
            "For the polynomial kernel use features='tensorsketch'"
        )


def _draw_rff(kernel, n_freq, d, rng):
    return FourierFeatureMap(kernel.sample_frequencies(n_freq, d, rng).T, kind="rff")


def _draw_orf(kernel, n_freq, d, rng):
    """Orthogonal random features (Yu et al., NIPS 2016, eq. (2)): ``W = S Q / sigma``.

    Blocks of d rows of a Haar-random orthogonal Q, each row rescaled by a radius from the
    kernel's isotropic spectral density (rbf, Matern): variance no larger than rff's (Theorem
    1).  The Laplacian's density is not rotation invariant: ValueError.
    """
    n_blocks = -(-n_freq // d)
    with one_blas_thread():  # d x d QRs: on a loaded machine idle BLAS threads cost 100x
        Q = np.vstack([_haar_orthogonal(d, rng) for _ in range(n_blocks)])[:n_freq]
    radii = _isotropic_radii(kernel, n_freq, d, rng)
    return FourierFeatureMap((Q * radii[:, None]).T, kind="orf")


def _draw_qmc(kernel, n_freq, d, rng):
    """Quasi-Monte Carlo features (Yang, Sindhwani, Avron & Mahoney, ICML 2014, section 3): the
    spectral density's quantiles at a scrambled (unbiased) Sobol sequence in d + 1 dimensions,
    error nearly ``1 / m`` for small d; a seed's larger maps extend its smaller ones."""
    from scipy.stats import qmc  # slow to import (benchmarks/NOTES.md): only where it is used

    points = qmc.Sobol(d + 1, scramble=True, seed=rng).random_base2((n_freq - 1).bit_length())
    points = np.clip(points[:n_freq], 2.0**-40, 1.0 - 2.0**-40)  # no infinite quantile
    return FourierFeatureMap(kernel.sample_frequencies(n_freq, d, rng, points).T, kind="qmc")


def _draw_fastfood(kernel, n_freq, d, rng):
    _isotropic_radii(kernel, 0, 1, rng)  # raises for kernels without an isotropic density
    D = 1 << max(0, (d - 1).bit_length())
    n_blocks = -(-n_freq // D)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_blocks, D))
    perms = np.stack([rng.permutation(D) for _ in range(n_blocks)])
    gauss = rng.standard_normal((n_blocks, D))
    # Radii of D-dimensional frequencies: the padded input lives in R^D and the first d
    # coordinates of an isotropic D-dimensional frequency have the d-dimensional marginal.
    radii = _isotropic_radii(kernel, n_blocks * D, D, rng).reshape(n_blocks, D)
    scales = radii / (np.sqrt(D) * np.linalg.norm(gauss, axis=1, keepdims=True))
    return FastfoodFeatureMap(d, n_freq, signs, perms, gauss, scales)


def _draw_tensorsketch(kernel, m, d, rng):
    if not isinstance(kernel, Polynomial):
        raise ValueError(
            f"features='tensorsketch' approximates the polynomial kernel only; got the "
            f"{kernel.name!r} kernel (use kernel='polynomial', or features='rff' for "
            "shift-invariant kernels)"
        )
    p = kernel.degree
    require_memory_parts(  # one bucket (int64) and one sign (float64) per degree and column
        [(16 * p * (d + 1), f"degree={p}: the {p} x {d + 1} TensorSketch hashes and signs")],
        hint="lower the polynomial degree",
    )
    buckets = rng.integers(0, m, size=(p, d + 1))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(p, d + 1))
    return TensorSketchFeatureMap(d, m, p, kernel.gamma, kernel.coef0, buckets, signs)


def resolve_n_random_features(value, name: str = "n_random_features") -> int:
    """The requested number of random features (the parameter ``name``), or
    :data:`DEFAULT_N_RANDOM_FEATURES` for None."""
    if value is None:
        return DEFAULT_N_RANDOM_FEATURES
    return check_int(name, value, low=1)


def resolve_features(
    features: str,
    kernel: Kernel,
    n_input_features: int | None = None,
    n_random_features: int | None = None,
) -> str:
    """The feature-map kind for ``features="auto"`` (or a named kind, validated): ``qmc`` for
    shift-invariant kernels on at most :data:`AUTO_QMC_MAX_WIDTH` input columns, else ``orf`` for
    rbf and matern, ``rff`` for laplacian, ``tensorsketch`` for polynomial; ``rff`` also where
    the input is wider than the frequencies and :data:`AUTO_ORF_MAX_WIDTH` (``orf``'s d x d
    blocks cost O(d^3))."""
    if features == "auto":
        narrow = n_input_features is not None and n_input_features <= AUTO_QMC_MAX_WIDTH
        if narrow and kernel.shift_invariant:
            return "qmc"
        if kernel.name in ("rbf", "matern"):
            wide = (
                n_input_features is not None
                and n_random_features is not None
                and n_input_features > max(-(-n_random_features // 2), AUTO_ORF_MAX_WIDTH)
            )
            return "rff" if wide else "orf"
        if kernel.name == "polynomial":
            return "tensorsketch"
        return "rff"  # laplacian; rff refuses non-shift-invariant kernels with a clear error
    if features not in FEATURES:
        raise ValueError(f"unknown features {features!r}; choose 'auto' or one of {FEATURES}")
    return features


def draw_feature_map(
    features: str,
    kernel: Kernel,
    n_random_features: int,
    n_input_features: int,
    rng: np.random.Generator,
    *,
    input_sketch=None,
    name: str = "n_random_features",
) -> FeatureMap:
    """Draw a random feature map for ``kernel`` on inputs of width ``n_input_features``.

    Parameters
    ----------
    features : {"auto", "rff", "orf", "qmc", "fastfood", "tensorsketch"}
        ``auto``: see :func:`resolve_features`.
    kernel : Kernel
        Shift-invariant for ``rff`` and ``qmc`` (rbf, laplacian, matern), isotropic for ``orf`` and
        ``fastfood`` (rbf, matern), polynomial for ``tensorsketch``; others raise ValueError.
    n_random_features : int
        The number m of output columns asked for; the Fourier maps output cos / sin pairs of
        ``ceil(m / 2)`` frequencies (m rounded up to even).
    n_input_features : int
        d, the width of the rows.
    rng : numpy.random.Generator
        The only source of randomness.
    input_sketch : None, "auto" or int
        With ``features="rff"`` and an isotropic kernel: CountSketch the inputs to width t first
        (Musco & Woodruff 2017, section 3.2.2; :mod:`fastkpca._input_sketch`).
    name : str, default "n_random_features"
        The caller's name for m, which error messages cite.

    Returns
    -------
    FeatureMap
        With ``E[z(x) . z(y)] = k(x, y)`` (with ``input_sketch``: ``k(Sx, Sy)`` given S).
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel must be a fastkpca.kernels.Kernel, got {kernel!r}")
    m = check_int(name, n_random_features, low=1)
    d = check_int("n_input_features", n_input_features, low=1)
    resolved = resolve_features(features, kernel, d, m)
    if input_sketch is not None:
        sketched = _draw_input_sketched(features, resolved, kernel, m, d, rng, input_sketch)
        if sketched is not None:
            return sketched
    features = resolved
    if features == "tensorsketch":
        return _draw_tensorsketch(kernel, m, d, rng)
    _require_shift_invariant(kernel, features)
    n_freq = -(-m // 2)
    require_memory_parts(
        [
            (
                frequency_bytes(features, n_freq, d),
                f"{name}={m}: {n_freq} random frequencies of width {d} ({features!r}, "
                "float64, with a float32 copy and the draw's temporaries)",
            )
        ],
        hint=f"lower {name}",
    )
    if features == "rff":
        fmap = _draw_rff(kernel, n_freq, d, rng)
    elif features == "orf":
        fmap = _draw_orf(kernel, n_freq, d, rng)
    elif features == "qmc":
        fmap = _draw_qmc(kernel, n_freq, d, rng)
    else:
        fmap = _draw_fastfood(kernel, n_freq, d, rng)
    _check_frequency_range(fmap, kernel)
    return fmap


def _draw_input_sketched(asked, features, kernel, m, d, rng, input_sketch):
    """The map of ``input_sketch`` (:mod:`fastkpca._input_sketch`), or None where its width
    is not below d (``"auto"``: the exact rff map is then as cheap)."""
    _input_sketch.check_input_sketch(input_sketch)
    if features != "rff":
        raise ValueError(
            f"input_sketch={input_sketch!r} needs features='rff' (i.i.d. frequencies, drawn in "
            f"the sketched space), got features={asked!r}"
        )
    _input_sketch.check_sketch_kernel(kernel)
    n_freq = -(-m // 2)
    t = _input_sketch.resolve_sketch_size(input_sketch, n_freq, d)
    if t is None:
        return None
    fmap = _input_sketch.draw_sketched_fourier(kernel, n_freq, d, t, rng)
    _check_frequency_range(fmap, kernel)
    return fmap


def frequency_bytes(features: str, n_frequencies: int, d: int) -> int:
    """Memory of drawing and holding ``n_frequencies`` frequencies of width d: for ``rff`` the
    float64 draw, its scaled copy and the contiguous transposed one (3 x 8 bytes an entry) plus
    the float32 copy of the projections (4); ``orf`` also stacks its whole d x d Haar blocks
    (two float64 copies); ``fastfood`` keeps O(D) numbers per block of D = 2^ceil(log2 d)."""
    if features == "fastfood":
        D = 1 << max(0, (d - 1).bit_length())
        return 8 * 6 * D * -(-n_frequencies // D)
    if features == "orf":  # whole d x d Haar blocks, even for fewer than d frequencies
        return 16 * -(-n_frequencies // d) * d * d + 28 * n_frequencies * d
    return 28 * n_frequencies * d


def _check_frequency_range(fmap, kernel) -> None:
    """ValueError naming gamma when the drawn frequencies exceed float32's range (the features
    are float32; at such a gamma the kernel matrix of any data is numerically the identity)."""
    size = fmap.frequency_norm
    limit = float(np.finfo(FOURIER_DTYPE).max)
    if np.isfinite(size) and size <= limit:
        return
    gamma = getattr(kernel, "gamma", None)
    named = f"gamma={gamma:.3g}" if isinstance(gamma, float) else "the kernel's bandwidth"
    raise ValueError(
        f"{named} is too large for random Fourier features: the {kernel.name} kernel's "
        f"random frequencies reach {size:.3g}, beyond the float32 range ({limit:.3g}) in which "
        "the features are computed, and the phases w . x of any data would be rounding noise "
        "(at this gamma the kernel matrix of any data is numerically the identity); lower "
        "gamma, e.g. gamma='scale'"
    )


def check_feature_spec(estimator, count: str = "n_random_features") -> None:
    """Refuse, before any data, feature-map parameters that no data could make valid
    (ValueError naming the parameter): the number of features, the parameter named ``count``
    (a positive integer or None; or ``"auto"`` for the estimators sized by a ``tol``) and a map
    that cannot serve the kernel, found by the draw's own checks on the smallest map (two
    features of one input column, with a generator of its own: the estimator's random stream
    is not touched)."""
    value = getattr(estimator, count)
    auto = hasattr(estimator, "tol") and check_auto_size(count, value, estimator.tol)
    if not auto:
        resolve_n_random_features(value, count)
    kernel = estimator._check_kernel_spec()
    input_sketch = getattr(estimator, "input_sketch", None)
    _input_sketch.check_input_sketch(input_sketch)
    if kernel is not None:
        draw_feature_map(
            estimator.features, kernel, 2, 1, np.random.default_rng(0), input_sketch=input_sketch
        )


def init_feature_map(estimator, X_first, *, n_input_features=None, count="n_random_features"):
    """Resolve an estimator's kernel and draw its feature map from the first data block.

    The one place where ``RandomFeatureKPCA``, ``StreamingKPCA`` and the transformers turn their
    parameters into a map (one ``random_state``, the same features); a data-dependent ``gamma``
    is resolved on the first :data:`fastkpca._utils.DEFAULT_BLOCK_ROWS` rows.

    Parameters
    ----------
    estimator : object
        Has ``_make_rng()``, ``_resolve_kernel(X, rng)``, ``features`` and ``n_random_features``.
    X_first : array or CSR matrix
        The training data, or its first row block (already validated).
    n_input_features : int, optional
        Defaults to ``X_first.shape[1]``.
    count : str, default "n_random_features"
        The estimator's parameter holding the number of features.

    Returns
    -------
    fmap : FeatureMap
    rng : numpy.random.Generator
        The generator after drawing.
    """
    rng = estimator._make_rng()
    kernel = estimator._resolve_kernel(row_range(X_first, 0, DEFAULT_BLOCK_ROWS), rng)
    d = X_first.shape[1] if n_input_features is None else n_input_features
    fmap = draw_feature_map(
        estimator.features,
        kernel,
        resolve_n_random_features(getattr(estimator, count), count),
        d,
        rng,
        input_sketch=getattr(estimator, "input_sketch", None),
        name=count,
    )
    return fmap, rng


# --- the scikit-learn transformers, moved to fastkpca.transformers --------------------------------
#: Names this module held before they moved (name -> their module now).
_MOVED = {
    "RandomFourierFeatures": "fastkpca.transformers",
    "OrthogonalRandomFeatures": "fastkpca.transformers",
    "FastfoodFeatures": "fastkpca.transformers",
    "TensorSketchFeatures": "fastkpca.transformers",
}


def __getattr__(name):
    # The transformers are estimators, which a building block does not import: they live in
    # fastkpca.transformers (also fastkpca.RandomFourierFeatures, ...); the old names still
    # work, imported on first use, with a FutureWarning.
    if name in _MOVED:
        warnings.warn(
            f"fastkpca.features.{name} moved to {_MOVED[name]}: import it from there or from "
            f"fastkpca (fastkpca.{name}); the name here will be removed in a future version",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
