"""Random feature maps ``z`` with ``E[z(x) . z(y)] = k(x, y)``, and scikit-learn transformers.

Four maps, each drawn once from a kernel and a ``numpy.random.Generator``:

================ ========================================= ====================================
name             kernels                                   cost per row (d inputs, m outputs)
================ ========================================= ====================================
``rff``          shift-invariant (rbf, laplacian, matern)  O(d m): ``X @ W``, then cos / sin
``orf``          isotropic (rbf, matern)                   O(d m), lower variance than ``rff``
``fastfood``     isotropic (rbf, matern)                   O(m log d) time, O(m) memory
``tensorsketch`` polynomial                                O(p (d + m log m))
================ ========================================= ====================================

Random Fourier features (Rahimi & Recht 2007; slide "RFF" of Sriperumbudur & Sterge, file
``001`` of the papers): by Bochner's theorem ``k(x - y) = E_w[cos(w . (x - y))]`` for w drawn
from the kernel's spectral density (:meth:`fastkpca.kernels.Kernel.sample_frequencies`), so with
D frequencies

    z(x) = [cos(W x), sin(W x)] / sqrt(D)        (m = 2 D output columns)

gives ``z(x) . z(y) = (1/D) sum_j cos(w_j . (x - y))``, an unbiased estimate of ``k(x, y)``.  The
cos / sin pair is used instead of scikit-learn's ``sqrt(2) cos(w . x + b)`` with a random phase b:
``2 cos(w.x + b) cos(w.y + b) = cos(w.(x - y)) + cos(w.(x + y) + 2 b)`` carries the extra phase
noise term ``cos(w.(x + y) + 2 b)``, which the pair does not, so for the same number of output
columns the pair has lower variance for smooth kernels such as the Gaussian (Sutherland &
Schneider, "On the error of random Fourier features", UAI 2015, section 2): per entry, for the
Gaussian, ``(1 - k^2)^2 / m`` against ``(1 + k^4 / 2 - k^2) / m``.

Caveat measured for kernel PCA: the double centering ``H K H`` removes most of the phase noise
when the bandwidth is wide next to the data (that term is then nearly additive in x and y), while
the pair spends two columns per frequency.  On digits and pendigits with the usual bandwidths the
*centered* Gram error of pairs is then up to ~10% larger than the random-phase one at equal m,
and the relative rank-k KPCA error 0-3% larger (e.g. 1.152 vs 1.124 on pendigits, m = 500); for
narrow bandwidths the two are equal.  ``orf`` (orthogonal frequencies, also cos / sin pairs)
beats both by 5-15% on the same problems.

All maps are small objects holding their random parameters (registered for model files without
pickle); ``__call__`` keeps float32 input in float32 and accepts CSR input where noted.

Precision: the Fourier maps (``rff``, ``orf``, ``fastfood``) compute in float32 for any input
    Random features are Monte-Carlo estimates whose error, ~1/sqrt(m) (3e-2 for m = 1000), dwarfs
    float32's 6e-8 rounding of a cosine, while numpy's float64 ``cos`` / ``sin`` have no SIMD path
    (measured 15x slower than float32 on the 2-core development machine, n = 10^6, m = 1000) and
    a float32 ``X @ W`` runs at 3x the speed of a float64 one.  So ``feature_blocks`` (what every
    fit reads) gets float32 features, which the statistics accumulate in float64; ``__call__``
    and the transforms still return float64 for float64 input.  The one place where float32
    would lose more than its 6e-8 is the phase ``w . x`` of rows far from the origin (data
    offset by 1e4: the phase is ~1e4 radians, known in float32 only to ~1e-3).  There each row
    chunk is shifted by its own mean c (rounded to float32, subtracted in the input's precision
    before the cast), so the float32 phases ``theta = w . (x - c)`` stay small, and the offset
    phase ``phi = w . c``, computed in float64 and reduced modulo 2 pi, is added back by the
    rotation ``cos(theta + phi) = cos theta cos phi - sin theta sin phi`` (and the same for
    sin): the features are those of the formula above, to float32 rounding, whatever the offset
    and whatever the chunking.  Chunks whose offset phases are all below one radian skip the
    shift (the float32 phase error is then already ~1e-7).  No user switch: no realistic m brings
    the Monte-Carlo error near float32's rounding, and the statistics keep float64 accumulations
    (``tests/test_features_precision.py`` measures the held-out accuracy of float32 and float64
    features).
    The tensorsketch map keeps the input's precision (its FFTs are not the bottleneck).
"""

from __future__ import annotations

import threading

import numpy as np
import scipy.fft
import scipy.sparse as sp

from ._state import register_state_class
from ._utils import DEFAULT_BLOCK_ROWS, check_int, require_memory_parts
from .decomposition._base import BaseKPCA
from .execution import (
    CHUNK_ROWS,
    SHARE_ROWS,
    map_row_chunks,
    n_workers,
    one_blas_thread,
    worker_index,
)
from .execution.arrays import is_host_array, placement_of
from .kernels import RBF, Kernel, Matern, Polynomial, chunk_rows

__all__ = [
    "FEATURES",
    "DEFAULT_N_FEATURES",
    "FeatureMap",
    "FourierFeatureMap",
    "FastfoodFeatureMap",
    "TensorSketchFeatureMap",
    "draw_feature_map",
    "resolve_n_features",
    "init_feature_map",
    "check_feature_spec",
    "fwht",
    "feature_blocks",
    "reduce_feature_chunks",
    "feature_projection",
    "RandomFourierFeatures",
    "OrthogonalRandomFeatures",
    "FastfoodFeatures",
    "TensorSketchFeatures",
]

#: The feature-map kinds accepted by ``features=`` everywhere.
FEATURES = ("rff", "orf", "fastfood", "tensorsketch")
#: ``features="auto"`` keeps ``orf`` up to this input width even with fewer frequencies than
#: columns (its d x d Haar draw then costs < ~0.05 s); see :func:`resolve_features`.
AUTO_ORF_MAX_WIDTH = 512

#: ``n_features=None`` means this many output columns.  It does not depend on n: random features
#: approximate the kernel better the more there are whatever n is, and a streaming fit cannot know
#: n in advance (so a cap on n would make a blocked fit differ from an in-memory one).
DEFAULT_N_FEATURES = 1000

#: Rows per chunk inside the Fourier maps: a 256 x 1024 float32 chunk is 1 MiB, so the
#: projection, the Hadamard transforms and cos / sin of one chunk all run in the L2 cache
#: (:data:`fastkpca.execution.CHUNK_ROWS`, the chunks of the execution layer's threads).
_CHUNK_ROWS = CHUNK_ROWS


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def _float_dtype(X):
    return np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64


def _as_dense_float(X, dtype):
    if sp.issparse(X):
        return X.toarray().astype(dtype, copy=False)
    return np.asarray(X, dtype=dtype)


#: The precision of the Fourier maps' computations, whatever the input (see the module notes).
FOURIER_DTYPE = np.float32


#: A chunk's offset phases ``|w . c|`` above this many radians are removed before the float32
#: projection (see the module notes); below, float32 phases are accurate to ~1e-7 already.
_MAX_OFFSET_PHASE = 1.0


def _dense_rows(X):
    """Dense float32 or float64 rows (float32 kept, anything else as float64)."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    return X if X.dtype == np.float32 else np.asarray(X, dtype=np.float64)


def _chunk_center(rows) -> np.ndarray:
    """A chunk's mean, rounded to float32 (float64 array): float32 and float64 copies of the
    same rows subtract exactly the same point."""
    return rows.mean(axis=0, dtype=np.float64).astype(np.float32).astype(np.float64)


def _shifted_f32(rows, center):
    """``rows - center`` in the rows' precision, cast to float32; None if that overflows
    float32 (entries beyond ~3e38: the caller then forms float64 phases)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if center is None:
            out = rows.astype(FOURIER_DTYPE, copy=False)
        else:
            out = (rows - center.astype(rows.dtype)).astype(FOURIER_DTYPE, copy=False)
    if out.dtype != rows.dtype and not np.isfinite(out).all():
        return None
    return out


def _finite(offset) -> bool:
    return offset is None or bool(np.isfinite(offset).all())


def _reduced_f32(P64) -> np.ndarray:
    """float64 phases reduced modulo 2 pi, then cast to float32 (no precision lost)."""
    if not np.isfinite(P64).all():
        raise ValueError(
            "the phases w . x of the random Fourier features overflow float64: the data are too "
            "large for the kernel's frequencies (scale the data or lower gamma)"
        )
    return np.remainder(P64, 2 * np.pi).astype(FOURIER_DTYPE)


#: float32 phases ``w . x`` are formed only where ``||w|| ||x||`` (a bound on them) is below
#: this, far from float32's overflow at 3.4e38 (the fastfood transforms' intermediates are sums
#: of up to D such terms); beyond, float64 phases reduced modulo 2 pi are used instead.
_MAX_PHASE32 = 1e30


def _phases_fit_f32(rows32, frequency_norm: float) -> bool:
    """Whether every phase of these float32 rows stays below :data:`_MAX_PHASE32` in size, by
    Cauchy-Schwarz with the largest frequency norm (O(rows d), next to the O(rows d D) product)."""
    sq = np.einsum("ij,ij->i", rows32, rows32, dtype=np.float64)
    return bool(np.sqrt(np.max(sq, initial=0.0)) * frequency_norm <= _MAX_PHASE32)


def _write_features(P, offset, out, scale) -> None:
    """``out = [cos(P + offset), sin(P + offset)] * scale`` for float32 phases P (overwritten)
    and float64 offset phases (D,) or None, computed in float32 (module notes)."""
    D = P.shape[1]
    buf = out if out.dtype == FOURIER_DTYPE else np.empty(out.shape, dtype=FOURIER_DTYPE)
    if offset is None:
        _cos_sin(P, buf, scale)
    else:
        phi = np.remainder(offset, 2 * np.pi)
        cphi = (np.cos(phi) * float(scale)).astype(FOURIER_DTYPE)
        sphi = (np.sin(phi) * float(scale)).astype(FOURIER_DTYPE)
        cos_t = np.cos(P)
        sin_t = np.sin(P, out=P)
        np.multiply(cos_t, cphi, out=buf[:, :D])
        buf[:, :D] -= sin_t * sphi  # cos(t + phi) = cos t cos phi - sin t sin phi
        np.multiply(sin_t, cphi, out=buf[:, D:])
        cos_t *= sphi
        buf[:, D:] += cos_t  # sin(t + phi) = sin t cos phi + cos t sin phi
    if buf is not out:
        out[...] = buf


def column_sums(Z: np.ndarray) -> np.ndarray:
    """Column sums of a feature chunk, as float64.  For float32: partial sums of 16 rows in
    float32 (rounding ~16 eps32 of the rows' spread), their sum in float64; a float64 sum of
    the whole chunk cost 6x more (0.4 us a row at m = 1000)."""
    b = Z.shape[0]
    if Z.dtype == np.float64 or b % 16:
        return Z.sum(axis=0, dtype=np.float64)
    return Z.reshape(16, b // 16, Z.shape[1]).sum(axis=0).sum(axis=0, dtype=np.float64)


def _cos_sin(P, out, scale):
    """``out = [cos(P), sin(P)] * scale`` for a projection chunk P (overwritten)."""
    D = P.shape[1]
    np.sin(P, out=out[:, D:])
    np.cos(P, out=out[:, :D])
    out *= scale


def _isotropic_radii(kernel: Kernel, n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Norms of n frequencies in R^dim drawn from an isotropic kernel's spectral density.

    An isotropic density factors into a uniform direction times an independent radius, so
    orthogonal directions (``orf``, ``fastfood``) rescaled by these radii have exactly the
    marginal distribution of Gaussian / Student-t frequencies (Yu et al. 2016, section 3).
    Drawn in row chunks so that no n x dim array is held for large dim.
    """
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


def _hadamard(n: int) -> np.ndarray:
    """The unnormalised n x n Sylvester-Hadamard matrix (n a power of 2), entries +-1."""
    H = np.ones((1, 1))
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H


_HADAMARD_CACHE: dict[tuple[int, str], np.ndarray] = {}


def _hadamard_cached(n: int, dtype) -> np.ndarray:
    key = (n, np.dtype(dtype).str)
    if key not in _HADAMARD_CACHE:
        _HADAMARD_CACHE[key] = _hadamard(n).astype(dtype)
    return _HADAMARD_CACHE[key]


def _kron_split(D: int) -> tuple[int, int]:
    """``D = a * b`` with a, b powers of 2 as equal as possible (b >= a)."""
    lg = D.bit_length() - 1
    b = 1 << ((lg + 1) // 2)
    return D // b, b


def fwht(A: np.ndarray, *, work: np.ndarray | None = None) -> np.ndarray:
    """Unnormalised fast Walsh-Hadamard transform of every row of A, ``A @ H_D``, in place.

    A is a C-contiguous ``(n, D)`` float array, D a power of 2.  Sylvester's construction gives
    ``H_D = H_a (x) H_b`` with ``a b = D``, so with each row viewed as an a x b matrix R the
    transform is ``H_a R H_b``: two GEMMs with small Hadamard matrices (``a, b ~ sqrt(D)``, 32 for
    D = 1024) and two transposing copies.  That is ``2 (a + b)`` flops per entry instead of the
    butterflies' ``log2 D`` additions, but run as BLAS kernels and whole-array copies it is
    faster in numpy than ``log2 D`` strided butterfly passes (each a Python-level operation over
    the whole array), and far cheaper than the ``2 D`` flops of a dense ``A @ H_D``.

    Parameters
    ----------
    A : (n, D) float32 or float64, C-contiguous; overwritten with ``A @ H_D``.
    work : optional (n * D,) array of A's dtype used as scratch (avoids an allocation).
    """
    n, D = A.shape
    if D & (D - 1):
        raise ValueError(f"fwht needs a power-of-2 width, got {D}")
    if not A.flags.c_contiguous:
        raise ValueError("fwht needs a C-contiguous array")
    a, b = _kron_split(D)
    if work is None or work.size < n * D:
        work = np.empty(n * D, dtype=A.dtype)
    T = work[: n * D].reshape(n * a, b)
    np.matmul(A.reshape(n * a, b), _hadamard_cached(b, A.dtype), out=T)  # R H_b
    if a == 1:
        A.reshape(n, b)[...] = T
        return A
    # (n, a, b) -> (a, n, b) so that H_a multiplies one (a, n b) matrix in a single GEMM.
    At = A.reshape(a, n, b)
    np.copyto(At, T.reshape(n, a, b).transpose(1, 0, 2))
    np.matmul(_hadamard_cached(a, A.dtype), At.reshape(a, n * b), out=T.reshape(a, n * b))
    np.copyto(A.reshape(n, a, b), T.reshape(a, n, b).transpose(1, 0, 2))
    return A


# ------------------------------------------------------------------------------------------------
# the device path
# ------------------------------------------------------------------------------------------------
# On a device (PyTorch tensors, CuPy arrays: :mod:`fastkpca.execution.arrays`) every map computes
# its features with the arrays' namespace ``xp``, on row chunks of up to 131072 rows sized from
# the device's free memory (:func:`device_feature_rows`): one GEMM per chunk, then the cos / sin
# (or FFTs) as whole-array operations, and no host synchronisation.  The random parameters are
# the host's, moved once per placement and cached on the map (:meth:`FeatureMap._device`), so
# every placement computes the features of the same map.  The phase arithmetic of the host path
# (module notes) is kept: a chunk is shifted by its mean c, rounded to float32 and subtracted in
# the input's precision before the float32 cast, and the offset phases ``w . c``, computed in
# float64 and reduced modulo 2 pi, are added to the float32 phases before the cos / sin.  The
# shift is applied to every chunk (a branch on its size would need a synchronisation).  The
# float32 range checks of the host path are not made per chunk (a device cannot branch on
# them without synchronising): phases beyond float32's range give non-finite features, which
# the solvers refuse (ValueError) when they read the statistics, once, at the end of a fit.


def device_feature_rows(placement, m: int, itemsize: int = 4) -> int:
    """Rows of a device feature chunk: the (rows, m) features and two temporaries of their size
    within the device's free-memory budget (:func:`fastkpca.execution.budget.tile_rows`), at most
    131072 rows (0.5 GB of float32 features for m = 1000)."""
    from .execution.budget import tile_rows

    return tile_rows(placement, m, itemsize, n_temporaries=3)


def _xp_float_dtype(X, placement):
    """The namespace's float32 for float32 rows, its float64 otherwise."""
    xp = placement.xp
    return xp.float32 if X.dtype == xp.float32 else xp.float64


def _cos_sin_xp(P, scale: float, xp):
    """``[cos(P), sin(P)] * scale`` for float32 phases P (n, D), in one (n, 2 D) array."""
    if type(P).__module__.startswith("torch"):
        import torch

        n, D = P.shape
        out = torch.empty((n, 2 * D), dtype=P.dtype, device=P.device)
        torch.cos(P, out=out[:, :D])
        torch.sin(P, out=out[:, D:])
        return out.mul_(scale)
    return xp.concat([xp.cos(P), xp.sin(P)], axis=1) * scale


def _center_xp(X, placement):
    """A chunk's mean rounded to float32 (as :func:`_chunk_center`), as float64 (1, d)."""
    xp = placement.xp
    c = xp.mean(xp.astype(X, xp.float64, copy=False), axis=0, keepdims=True)
    return xp.astype(xp.astype(c, xp.float32), xp.float64)


def _shifted_f32_xp(X, center, placement):
    """``X - center`` in X's precision, cast to float32."""
    xp = placement.xp
    return xp.astype(X - xp.astype(center, X.dtype), xp.float32)


def _reduced_offset_xp(offset, placement):
    """float64 offset phases reduced modulo 2 pi, cast to float32."""
    xp = placement.xp
    return xp.astype(xp.remainder(offset, 2 * np.pi), xp.float32)


def fwht_xp(A, placement):
    """:func:`fwht` of the rows of a device array A (n, D), D a power of 2, as a new array:
    ``H_a R H_b`` for each row viewed as an a x b matrix R (Sylvester: ``H_D = H_a (x) H_b``),
    two batched GEMMs with the small +-1 Hadamard matrices (exact in float32)."""
    xp = placement.xp
    n, D = A.shape
    a, b = _kron_split(D)
    dtype = np.float32 if A.dtype == xp.float32 else np.float64
    R = xp.reshape(A, (n, a, b)) @ _hadamard_on(b, dtype, placement)
    if a > 1:
        R = _hadamard_on(a, dtype, placement) @ R
    return xp.reshape(R, (n, D))


_HADAMARD_DEVICE: dict = {}


def _hadamard_on(n: int, dtype, placement):
    """:func:`_hadamard_cached` moved to ``placement`` once."""
    key = (n, np.dtype(dtype).str, placement.name)
    if key not in _HADAMARD_DEVICE:
        _HADAMARD_DEVICE[key] = placement.asarray(_hadamard_cached(n, dtype), dtype)
    return _HADAMARD_DEVICE[key]


def device_features(fmap, X, placement=None):
    """The features of device rows X in the map's computing dtype (float32 for the Fourier maps,
    X's float dtype for ``tensorsketch``), chunk by chunk (:func:`device_feature_rows`)."""
    placement = placement_of(X) if placement is None else placement
    fmap._check_width(X)
    step = device_feature_rows(placement, fmap.n_output_features)
    if X.shape[0] <= step:
        return fmap._device_chunk(X, placement)
    xp = placement.xp
    return xp.concat(
        [fmap._device_chunk(X[s : s + step], placement) for s in range(0, X.shape[0], step)],
        axis=0,
    )


def _device_call(fmap, X, dtype=None):
    """``fmap(X)`` for device rows: the features in ``dtype`` (default X's float dtype)."""
    placement = placement_of(X)
    if X.dtype not in (placement.xp.float32, placement.xp.float64):
        X = placement.xp.astype(X, placement.xp.float64)
    Z = device_features(fmap, X, placement)
    target = placement.dtype(dtype) if dtype is not None else _xp_float_dtype(X, placement)
    return Z if Z.dtype == target else placement.xp.astype(Z, target)


# ------------------------------------------------------------------------------------------------
# feature maps
# ------------------------------------------------------------------------------------------------
class FeatureMap:
    """A drawn random feature map ``z: R^d -> R^m`` with ``E[z(x) . z(y)] = k(x, y)``.

    Attributes
    ----------
    kind : str
        One of :data:`FEATURES`.
    n_input_features : int
        d, the width of the rows it accepts.
    n_output_features : int
        m, the number of columns it produces.
    accepts_sparse : bool
        Whether ``__call__`` takes scipy.sparse CSR rows without densifying them.
    """

    kind: str = ""
    accepts_sparse: bool = False
    n_input_features: int
    n_output_features: int

    def __call__(self, X) -> np.ndarray:
        """The features of the rows of X, shape ``(n, n_output_features)``, in X's float dtype."""
        raise NotImplementedError

    def feature_dtype(self, input_dtype) -> type:
        """The dtype in which the map computes the features of rows of ``input_dtype``: what
        :func:`feature_blocks` asks for (float32 for the Fourier maps, see the module notes;
        the input's float dtype here)."""
        return np.float32 if input_dtype == np.float32 else np.float64

    def feed_chunks(self, X, feed) -> None:
        """Call ``feed(Z)`` with the features of every row chunk of X, on every core.

        Z is a ``(<= 256, m)`` array in the map's computing dtype (:meth:`feature_dtype`) that
        ``feed`` may overwrite; it runs in the workers of
        :func:`~fastkpca.execution.map_row_chunks`, with BLAS held to one thread
        (:func:`~fastkpca.execution.worker_index` tells them apart).  Each chunk's features are
        written (:meth:`row_writer`) into a per-thread buffer right before ``feed`` sees them:
        in cache, never all in memory (:func:`reduce_feature_chunks`).
        """
        write = self.row_writer(X)
        dtype = self.feature_dtype(np.float32 if X.dtype == np.float32 else np.float64)
        local = threading.local()

        def chunk(start, stop):
            if not hasattr(local, "buffer"):
                local.buffer = np.empty((_CHUNK_ROWS, self.n_output_features), dtype)
            Z = local.buffer[: stop - start]
            write(start, stop, Z)
            feed(Z)

        map_row_chunks(X.shape[0], chunk)

    def row_writer(self, X):
        """``write(start, stop, out)``: the features of rows ``start:stop`` of X into ``out``.

        ``out`` is a ``(stop - start, m)`` array of the map's computing dtype
        (:meth:`feature_dtype` of X's float dtype); ``write`` may run in several threads at
        once, each on its own rows, which is how a statistic that deals rows to per-thread
        state computes them in cache in the thread that uses them
        (:class:`~fastkpca.statistics.feature_sketch.FeatureSketch`).  Here by calling the map
        on the slice; the Fourier and Fastfood maps write it directly.
        """
        self._check_width(X)

        def write(start, stop, out):
            rows = X[start:stop]
            if sp.issparse(rows) and not self.accepts_sparse:
                rows = rows.toarray()
            out[...] = self(rows)

        return write

    def _device(self, placement) -> dict:
        """This map's parameters on ``placement`` (:meth:`_device_params`), moved once and
        cached per placement (the host arrays stay the map's state)."""
        cache = self.__dict__.setdefault("_device_cache", {})
        if placement.name not in cache:
            cache[placement.name] = self._device_params(placement)
        return cache[placement.name]

    def _device_params(self, placement) -> dict:
        raise NotImplementedError(f"{type(self).__name__} has no device path")

    def _device_chunk(self, X, placement):
        """The features of one chunk of device rows (float32 or float64 X), in the map's
        computing dtype (see the device-path notes below :func:`fwht`)."""
        raise NotImplementedError(f"{type(self).__name__} has no device path")

    def _check_width(self, X):
        if X.ndim != 2 or X.shape[1] != self.n_input_features:
            raise ValueError(
                f"X has {X.shape[1] if X.ndim == 2 else X.shape} features, but the "
                f"feature map expects {self.n_input_features}"
            )

    def __repr__(self):
        return (
            f"{type(self).__name__}(kind={self.kind!r}, n_input_features="
            f"{self.n_input_features}, n_output_features={self.n_output_features})"
        )


@register_state_class
class FourierFeatureMap(FeatureMap):
    """``z(x) = [cos(x W), sin(x W)] / sqrt(D)`` for a frequency matrix W of shape (d, D).

    Used by ``rff`` (i.i.d. frequencies) and ``orf`` (orthogonal frequencies); m = 2 D.  Accepts
    CSR input (``X @ W`` costs nnz(X) D; the cos / sin that follow cost n D whatever the
    sparsity, so this is not the input-sparsity time of Musco & Woodruff's section 3).
    """

    accepts_sparse = True

    def __init__(self, frequencies: np.ndarray, kind: str = "rff"):
        self.frequencies = np.ascontiguousarray(frequencies, dtype=np.float64)
        self.kind = kind
        self.n_input_features, n_freq = self.frequencies.shape
        self.n_output_features = 2 * n_freq
        self._w32 = None
        #: The largest norm of a frequency (a bound on the phases, :func:`_phases_fit_f32`).
        self.frequency_norm = float(
            np.sqrt(np.max(np.einsum("ij,ij->j", self.frequencies, self.frequencies), initial=0))
        )

    def feature_dtype(self, input_dtype) -> type:
        return FOURIER_DTYPE

    def _weights(self, dtype):
        if np.dtype(dtype) == np.float32:
            # Cast once (as RBFSampler casts its weights to X.dtype) so X @ W runs as SGEMM.
            if self._w32 is None:
                self._w32 = self.frequencies.astype(np.float32)
            return self._w32
        return self.frequencies

    def __call__(self, X, *, out=None, dtype=None) -> np.ndarray:
        """Features of the rows of X, computed in float32 (module notes), returned in ``dtype``
        (default: X's float dtype)."""
        if not is_host_array(X):
            return _device_call(self, X, dtype)
        dtype = np.dtype(_float_dtype(X) if dtype is None else dtype).type
        X = self._rows(X)
        if out is None:
            out = np.empty((X.shape[0], self.n_output_features), dtype=dtype)
        write = self._chunk_writer(X)
        map_row_chunks(X.shape[0], lambda start, stop: write(start, stop, out[start:stop]))
        return out

    def row_writer(self, X):
        """:meth:`FeatureMap.row_writer`: each chunk's float32 features written directly."""
        return self._chunk_writer(self._rows(X))

    def _rows(self, X):
        """X as CSR or as a float32 / float64 array, width checked."""
        if sp.issparse(X):
            X = X.tocsr()
        else:
            X = np.asarray(X)
            if X.dtype != np.float32:
                X = np.asarray(X, dtype=np.float64)
        self._check_width(X)
        return X

    def _chunk_writer(self, X):
        """``write(start, stop, out)``: the features of rows ``start:stop`` of X (from
        :meth:`_rows`) into ``out``, computed in float32 (module notes)."""
        scale = FOURIER_DTYPE(1.0 / np.sqrt(self.frequencies.shape[1]))
        if sp.issparse(X):
            # Sparse rows are not shifted (that would densify them): the phases ``X W`` (nnz(X) D
            # flops) are formed in X's precision and float64 ones reduced modulo 2 pi first.
            wdtype = np.float32 if X.dtype == np.float32 else np.float64
            W = self._weights(wdtype)

            def phases(start, stop):
                P = X[start:stop] @ W
                P = np.asarray(P.toarray() if sp.issparse(P) else P, dtype=wdtype)
                if wdtype == np.float64:
                    P = np.remainder(P, 2 * np.pi)
                return P.astype(FOURIER_DTYPE, copy=False), None

        else:
            W32 = self._weights(FOURIER_DTYPE)

            def phases(start, stop):
                rows = _dense_rows(X[start:stop])
                with np.errstate(over="ignore", invalid="ignore"):
                    center = _chunk_center(rows)
                    offset = center @ self.frequencies
                if np.max(np.abs(offset), initial=0.0) <= _MAX_OFFSET_PHASE:
                    center = offset = None
                shifted = _shifted_f32(rows, center) if _finite(offset) else None
                if shifted is None or not _phases_fit_f32(shifted, self.frequency_norm):
                    # beyond float32's range: float64 phases, reduced
                    return _reduced_f32(rows @ self.frequencies), None
                return shifted @ W32, offset

        def write(start, stop, out):
            P, offset = phases(start, stop)
            _write_features(P, offset, out, scale)

        return write

    def _device_params(self, placement) -> dict:
        return {
            "W64": placement.asarray(self.frequencies, np.float64),
            "W32": placement.asarray(self._weights(FOURIER_DTYPE), np.float32),
        }

    def _device_chunk(self, X, placement):
        """float32 phases of the shifted chunk plus its reduced float64 offset phases, then
        cos / sin (the device-path notes below :func:`fwht`)."""
        params = self._device(placement)
        center = _center_xp(X, placement)
        offset = _reduced_offset_xp(center @ params["W64"], placement)
        P = _shifted_f32_xp(X, center, placement) @ params["W32"]
        P += offset
        return _cos_sin_xp(P, 1.0 / np.sqrt(self.frequencies.shape[1]), placement.xp)

    def to_state(self) -> dict:
        return {"frequencies": self.frequencies, "kind": self.kind}

    @classmethod
    def from_state(cls, state: dict) -> FourierFeatureMap:
        return cls(np.asarray(state["frequencies"]), kind=str(state["kind"]))


@register_state_class
class FastfoodFeatureMap(FeatureMap):
    """Fastfood (Le, Sarlos & Smola 2013): ``W x`` with ``W = S H G Pi H B`` blocks, then cos / sin.

    The input is zero-padded to D = 2^ceil(log2 d).  Each of the ``n_blocks`` blocks of D
    frequencies is ``V = S H G Pi H B / sqrt(D)`` with B a random +-1 diagonal, H the Walsh-
    Hadamard matrix (applied by :func:`fwht`, O(D log D)), Pi a random permutation, G a Gaussian
    diagonal and S a diagonal that sets row i's norm to a radius drawn from the kernel's spectral
    density: every row of ``H G Pi H B`` has norm ``sqrt(D) ||G||_F``, so
    ``S_ii = r_i / (sqrt(D) ||G||_F)`` (the paper's eq. (10), with the radii of the kernel instead
    of chi(D) / sigma, which is the same thing for the Gaussian).  The first ``n_frequencies``
    rows of the stacked blocks are used.  The map then outputs ``[cos(V x), sin(V x)] /
    sqrt(n_frequencies)`` like ``rff``; memory is O(D n_blocks), not d x D.
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
        self._cast: dict = {}
        # A bound on |phase| / ||x|| (:func:`_phases_fit_f32`): the rows' norms (the radii,
        # S_ii sqrt(D) ||G_b||), and the unnormalized transforms' intermediates (H G Pi H B x is
        # at most D max|G| ||x|| in size).
        D = self.padded_dim
        g_norms = np.linalg.norm(self.gaussians, axis=1, keepdims=True)
        radii = self.scales * np.sqrt(D) * g_norms
        self.frequency_norm = float(
            max(np.max(radii, initial=0.0), D * np.max(np.abs(self.gaussians), initial=0.0))
        )

    def feature_dtype(self, input_dtype) -> type:
        return FOURIER_DTYPE

    def _params(self, dtype):
        key = np.dtype(dtype).str
        if key not in self._cast:
            self._cast[key] = tuple(
                a.astype(dtype) for a in (self.signs, self.gaussians, self.scales)
            )
        return self._cast[key]

    def _project_chunk(self, Xc, dtype, scratch) -> np.ndarray:
        """``V x`` for the rows of one dense chunk, into ``scratch["P"]``."""
        d, D, nf = self.n_input_features, self.padded_dim, self.n_frequencies
        B, G, S = self._params(dtype)
        r = Xc.shape[0]
        A, Y, P = scratch["A"][:r], scratch["Y"][:r], scratch["P"][:r]
        for b in range(self.n_blocks):
            lo, hi = b * D, min(nf, (b + 1) * D)
            A[:, d:] = 0.0
            np.multiply(Xc, B[b, :d], out=A[:, :d])  # B x, zero-padded to D
            fwht(A, work=scratch["work"])  # H B x
            np.take(A, self.permutations[b], axis=1, out=Y)  # Pi H B x
            Y *= G[b]  # G Pi H B x
            fwht(Y, work=scratch["work"])  # H G Pi H B x
            np.multiply(Y[:, : hi - lo], S[b, : hi - lo], out=P[:, lo:hi])
        return P

    def _scratch(self, dtype):
        D, step = self.padded_dim, _CHUNK_ROWS
        return {
            "A": np.empty((step, D), dtype=dtype),
            "Y": np.empty((step, D), dtype=dtype),
            "P": np.empty((step, self.n_frequencies), dtype=dtype),
            "work": np.empty(step * D, dtype=dtype),
        }

    def _run(self, X, chunk_out, *, fourier: bool):
        """Drive ``chunk_out(start, stop, P, offset)`` over row chunks, one scratch per thread.

        ``fourier``: float32 phases ``P = V (x - c)`` and the float64 offset phases ``V c`` (or
        None) of each chunk (module notes); else the plain ``V x`` in X's float dtype, offset
        None (:meth:`projections`).
        """
        dtype = FOURIER_DTYPE if fourier else _float_dtype(X)
        self._check_width(X)
        local = threading.local()

        def chunk(start, stop):
            if not fourier:
                if not hasattr(local, "scratch"):
                    local.scratch = self._scratch(dtype)
                Xc = _as_dense_float(X[start:stop], dtype)
                chunk_out(start, stop, self._project_chunk(Xc, dtype, local.scratch), None)
                return
            chunk_out(start, stop, *self._phases(X[start:stop], local))

        map_row_chunks(X.shape[0], chunk)

    def _phases(self, rows, local):
        """The float32 phases ``V (x - c)`` of a chunk of at most ``_CHUNK_ROWS`` rows and the
        float64 offset phases ``V c`` (or None), in the scratch arrays kept on ``local`` (a
        ``threading.local``, one set per thread)."""
        if not hasattr(local, "scratch"):
            local.scratch = self._scratch(FOURIER_DTYPE)
            local.scratch64 = self._scratch(np.float64)
        rows = _dense_rows(rows)
        with np.errstate(over="ignore", invalid="ignore"):
            center = _chunk_center(rows)
            offset = self._project_chunk(center[None, :], np.float64, local.scratch64)
        offset = offset[0].copy()
        if np.max(np.abs(offset), initial=0.0) <= _MAX_OFFSET_PHASE:
            center = offset = None
        Xc = _shifted_f32(rows, center) if _finite(offset) else None
        if Xc is None or not _phases_fit_f32(Xc, self.frequency_norm):
            # beyond float32's range: float64 phases, reduced
            P64 = self._project_chunk(np.asarray(rows, np.float64), np.float64, local.scratch64)
            return _reduced_f32(P64), None
        return self._project_chunk(Xc, FOURIER_DTYPE, local.scratch), offset

    def row_writer(self, X):
        """:meth:`FeatureMap.row_writer`: float32 features in chunks of per-thread scratch."""
        self._check_width(X)
        scale = FOURIER_DTYPE(1.0 / np.sqrt(self.n_frequencies))
        local = threading.local()

        def write(start, stop, out):
            for lo in range(start, stop, _CHUNK_ROWS):
                hi = min(stop, lo + _CHUNK_ROWS)
                P, offset = self._phases(X[lo:hi], local)
                _write_features(P, offset, out[lo - start : hi - start], scale)

        return write

    def projections(self, X) -> np.ndarray:
        """``V x`` for every row of X (no center): shape ``(n, n_frequencies)``, X's dtype."""
        P = np.empty((X.shape[0], self.n_frequencies), dtype=_float_dtype(X))

        def store(start, stop, Pc, _):
            P[start:stop] = Pc

        self._run(X, store, fourier=False)
        return P

    def __call__(self, X, *, out=None, dtype=None) -> np.ndarray:
        """Features of the rows of X, computed in float32 (module notes), returned in ``dtype``
        (default: X's float dtype)."""
        if not is_host_array(X):
            return _device_call(self, X, dtype)
        dtype = np.dtype(_float_dtype(X) if dtype is None else dtype).type
        nf = self.n_frequencies
        if out is None:
            out = np.empty((X.shape[0], 2 * nf), dtype=dtype)
        scale = FOURIER_DTYPE(1.0 / np.sqrt(nf))

        def store(start, stop, Pc, offset):
            _write_features(Pc, offset, out[start:stop], scale)

        self._run(X, store, fourier=True)
        return out

    def _device_params(self, placement) -> dict:
        params = {"perms": placement.asarray(self.permutations, np.int64)}
        for dtype in (np.float32, np.float64):
            params[np.dtype(dtype).str] = tuple(
                placement.asarray(a, dtype) for a in self._params(dtype)
            )
        return params

    def _device_project(self, Xc, placement):
        """``V x`` for the rows of a device chunk Xc (float32 or float64), in Xc's dtype."""
        xp = placement.xp
        params = self._device(placement)
        key = np.dtype(np.float32 if Xc.dtype == xp.float32 else np.float64).str
        B, G, S = params[key]
        d, D, nf = self.n_input_features, self.padded_dim, self.n_frequencies
        parts = []
        for b in range(self.n_blocks):
            lo, hi = b * D, min(nf, (b + 1) * D)
            A = xp.zeros((Xc.shape[0], D), dtype=Xc.dtype, device=placement.device)
            A[:, :d] = Xc * B[b, :d]  # B x, zero-padded to D
            A = fwht_xp(A, placement)  # H B x
            Y = xp.take(A, params["perms"][b], axis=1) * G[b]  # G Pi H B x
            Y = fwht_xp(Y, placement)  # H G Pi H B x
            parts.append(Y[:, : hi - lo] * S[b, : hi - lo])
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=1)

    def _device_chunk(self, X, placement):
        """float32 phases ``V (x - c)`` plus the reduced float64 offset phases ``V c``, then
        cos / sin (the device-path notes below :func:`fwht`)."""
        center = _center_xp(X, placement)
        offset = _reduced_offset_xp(self._device_project(center, placement), placement)
        P = self._device_project(_shifted_f32_xp(X, center, placement), placement)
        P += offset
        return _cos_sin_xp(P, 1.0 / np.sqrt(self.n_frequencies), placement.xp)

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

    With ``x' = [sqrt(gamma) x, sqrt(coef0)]`` the kernel is ``<x', y'>^p``.  p independent
    CountSketches ``C_i`` (bucket ``h_i(j)`` in [0, m), sign ``s_i(j)``) each map x' to R^m, and
    the sketch of the p-fold tensor power ``x' (x) ... (x) x'`` is their circular convolution,
    ``z(x) = IFFT(prod_i FFT(C_i x'))``; ``E[z(x) . z(y)] = <x', y'>^p`` (Pham & Pagh, Lemma 2).
    Cost O(p (nnz(x) + m log m)) per row; accepts CSR input.
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

    def _device_params(self, placement) -> dict:
        """Each CountSketch as a dense (d, m) matrix (``X C_i`` is then one GEMM) and its last
        row, in float32 and float64."""
        params = {}
        for dtype in (np.float32, np.float64):
            mats = []
            for i in range(self.degree):
                C, last = self._count_sketch(i, dtype)
                mats.append((placement.asarray(C.toarray(), dtype), placement.asarray(last, dtype)))
            params[np.dtype(dtype).str] = mats
        return params

    def _device_chunk(self, X, placement):
        """``IFFT(prod_i FFT(C_i x'))`` in X's precision, with the namespace's FFTs."""
        xp = placement.xp
        key = np.dtype(np.float32 if X.dtype == xp.float32 else np.float64).str
        prod = None
        for C, last in self._device(placement)[key]:
            f = xp.fft.rfft(X @ C + last, axis=1)
            prod = f if prod is None else prod * f
        return xp.fft.irfft(prod, n=self.n_output_features, axis=1)

    def __call__(self, X, *, out=None) -> np.ndarray:
        if not is_host_array(X):
            return _device_call(self, X)
        dtype = _float_dtype(X)
        if not sp.issparse(X):
            X = np.asarray(X, dtype=dtype)
        else:
            X = X.tocsr().astype(dtype, copy=False)
        self._check_width(X)
        m = self.n_output_features
        prod = None
        for i in range(self.degree):
            C, last = self._count_sketch(i, dtype)
            cx = X @ C
            cx = np.asarray(cx.toarray() if sp.issparse(cx) else cx, dtype=dtype)
            cx += last
            f = scipy.fft.rfft(cx, axis=1)
            prod = f if prod is None else np.multiply(prod, f, out=prod)
        res = scipy.fft.irfft(prod, n=m, axis=1).astype(dtype, copy=False)
        if out is not None:
            out[...] = res
            return out
        return res

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


# ------------------------------------------------------------------------------------------------
# features of row blocks
# ------------------------------------------------------------------------------------------------
#: Memory budget (MiB) for one block of features and its temporaries (8192 rows for m = 1000
#: in float64, 16384 in float32, capped at DEFAULT_BLOCK_ROWS).
FEATURE_BLOCK_MB = 128


#: Rows of a feature block per worker thread: the block's products (``Z^T Z``) are split into
#: shares of this many rows (:func:`fastkpca.execution.sum_over_shares`).
FEATURE_SHARE_ROWS = SHARE_ROWS


def _feature_block_rows(m: int, itemsize: int) -> int:
    """Rows per feature block: DEFAULT_BLOCK_ROWS, or :data:`FEATURE_SHARE_ROWS` per worker
    thread where there are more than 8, within ~2 block copies in the memory budget.

    Blocks of a few thousand rows keep SYRK / GEMM near peak speed; more only costs memory,
    except that a block's products are shared out to the threads a share of at least
    FEATURE_SHARE_ROWS rows each.  Rounded down to whole shares (to whole 256-row chunks below
    one share), so that the chunks the maps compute (each centered on its own mean, see the
    module notes) and the shares of the products start at the same rows whatever the block
    size: the block size changes the grouping of the float64 sums only.
    """
    wanted = max(DEFAULT_BLOCK_ROWS, FEATURE_SHARE_ROWS * n_workers())
    budget = chunk_rows(m, itemsize=itemsize, n_temporaries=2, working_memory_mb=FEATURE_BLOCK_MB)
    rows = min(wanted, budget)
    unit = FEATURE_SHARE_ROWS if rows >= FEATURE_SHARE_ROWS else _CHUNK_ROWS
    return max(1, rows - rows % unit if rows >= unit else rows)


def feature_blocks(blocks, fmap: FeatureMap):
    """Yield ``(start, Z_block)`` feature blocks from ``(start, X_block)``.

    The features come in the map's computing dtype (:meth:`FeatureMap.feature_dtype`: float32
    for the Fourier maps whatever X's dtype, X's float dtype for the others), which the
    statistics accumulate in float64.  Input blocks are split further so that a feature block
    stays within the memory budget.
    """
    for start, Xb in blocks:
        if not is_host_array(Xb):  # device rows: large chunks in the namespace
            placement = placement_of(Xb)
            if Xb.dtype not in (placement.xp.float32, placement.xp.float64):
                Xb = placement.xp.astype(Xb, placement.xp.float64)
            step = device_feature_rows(placement, fmap.n_output_features)
            for s in range(0, Xb.shape[0], step):
                yield start + s, fmap._device_chunk(Xb[s : s + step], placement)
            continue
        input_dtype = np.float32 if Xb.dtype == np.float32 else np.float64
        dtype = fmap.feature_dtype(input_dtype)
        step = _feature_block_rows(fmap.n_output_features, np.dtype(dtype).itemsize)
        if sp.issparse(Xb) and not fmap.accepts_sparse:
            Xb = Xb.tocsr()
        for s in range(0, Xb.shape[0], step):
            part = Xb[s : s + step]
            if sp.issparse(part) and not fmap.accepts_sparse:
                part = part.toarray()
            if dtype == input_dtype:
                yield start + s, fmap(part)
            else:  # only maps that override feature_dtype (and take dtype=) get here
                yield start + s, fmap(part, dtype=dtype)  # type: ignore[call-arg]


def reduce_feature_chunks(blocks, fmap: FeatureMap, new_accumulator, add) -> list:
    """Feed the features of ``(start, X_block)`` row blocks to per-thread accumulators.

    ``add(accumulator, Z)`` runs for every row chunk's features Z (float32 for the Fourier maps,
    at most 256 rows, overwritable; see :meth:`FeatureMap.feed_chunks`) in the thread that
    computed them, so a chunk is reduced while it is still in cache and no feature block is
    ever held; each worker thread has its own accumulator, made by ``new_accumulator()`` on
    first use.  Returns the accumulators (one per worker that ran, at most
    :func:`~fastkpca.execution.n_workers`), in worker order, for the caller to combine: what the
    statistics of one pass over the data (a ``RowSource.reduce`` statistic, one dask chunk) are
    built from.  Which rows an accumulator saw depends on the thread count; combined by
    addition, the accumulators differ between thread counts only by the order of the sums.
    """
    accumulators: dict[int, object] = {}

    def feed(Z):
        index = worker_index()
        accumulator = accumulators.get(index)
        if accumulator is None:
            accumulator = accumulators[index] = new_accumulator()
        add(accumulator, Z)

    for _, Xb in blocks:
        if sp.issparse(Xb) and not fmap.accepts_sparse:
            Xb = Xb.toarray()
        fmap.feed_chunks(Xb, feed)
    return [accumulators[i] for i in sorted(accumulators)]


def feature_projection(X, fmap: FeatureMap, mean: np.ndarray, components: np.ndarray):
    """``(z(X) - mean) @ components.T``, in X's float dtype.

    The transform of every model that lives in a random feature space (RandomFeatureKPCA,
    StreamingKPCA).  Each row chunk's features are written into a buffer of its worker thread
    and projected there while in cache (:func:`~fastkpca.execution.map_row_chunks`): z(X) is
    never held for more than a chunk of rows per core, and every product of the transform runs
    with BLAS held to one
    thread, so its result does not depend on what other threads do (a BLAS thread limit is
    process-wide: a GEMM run outside it by one thread while another holds it would sum in
    another order, ~1e-7 relative for these float32 products).
    """
    if not is_host_array(X):
        return _feature_projection_xp(X, fmap, mean, components)
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    n, k = X.shape[0], components.shape[0]
    out = np.empty((n, k), dtype=dtype)
    feature_dtype = np.dtype(fmap.feature_dtype(dtype))
    # In the features' dtype; the mean is removed from the features before projecting (float32
    # rounding then stays relative to the centered features), and the part of the mean that
    # rounding drops is projected in float64.
    mean_z = mean.astype(feature_dtype)
    comps = np.ascontiguousarray(components.T, dtype=feature_dtype)
    with one_blas_thread():
        mean_proj = (mean - mean_z.astype(np.float64)) @ components.T
    write = fmap.row_writer(X)
    local = threading.local()

    def chunk(start, stop):
        if not hasattr(local, "buffer"):
            local.buffer = np.empty((_CHUNK_ROWS, fmap.n_output_features), feature_dtype)
        Z = local.buffer[: stop - start]
        write(start, stop, Z)
        Z -= mean_z
        out[start:stop] = Z @ comps

    map_row_chunks(n, chunk)
    out -= mean_proj.astype(dtype)
    return out


def _feature_projection_xp(X, fmap: FeatureMap, mean, components):
    """:func:`feature_projection` of device rows: the same arithmetic (features in the map's
    computing dtype, their mean removed before the product, the part of the mean that rounding
    drops projected in float64) on large chunks (:func:`device_feature_rows`); ``mean`` and
    ``components`` may be host or device arrays (moved)."""
    placement = placement_of(X)
    xp = placement.xp
    if X.dtype not in (xp.float32, xp.float64):
        X = xp.astype(X, xp.float64)
    fmap._check_width(X)
    dtype = X.dtype
    input_dtype = np.float32 if dtype == xp.float32 else np.float64
    feature_dtype = placement.dtype(np.dtype(fmap.feature_dtype(input_dtype)))
    mean64 = placement.asarray(mean, np.float64)
    comps64 = xp.permute_dims(placement.asarray(components, np.float64), (1, 0))
    mean_z = xp.astype(mean64, feature_dtype)
    comps = xp.astype(comps64, feature_dtype)
    mean_proj = xp.astype((mean64 - xp.astype(mean_z, xp.float64)) @ comps64, dtype)
    step = device_feature_rows(placement, fmap.n_output_features)
    parts = []
    for s in range(0, X.shape[0], step):
        Z = fmap._device_chunk(X[s : s + step], placement)
        Z -= mean_z
        parts.append(xp.astype(Z @ comps, dtype) - mean_proj)
    if not parts:
        return xp.zeros((0, comps.shape[1]), dtype=dtype, device=placement.device)
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)


# ------------------------------------------------------------------------------------------------
# drawing
# ------------------------------------------------------------------------------------------------
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

    Blocks of d rows of a Haar-random orthogonal matrix Q, each row rescaled by a radius drawn
    from the kernel's spectral density (chi(d) sqrt(2 gamma) for rbf; the Student-t radius for
    Matern, whose density is also isotropic).  Rows within a block are exactly orthogonal, which
    makes the kernel estimate's variance no larger than rff's (their Theorem 1) and usually much
    smaller.  The L1 Laplacian's density (a product of Cauchys) is not rotation invariant, so
    ``orf`` refuses it with a ValueError rather than silently drawing something else.
    """
    n_blocks = -(-n_freq // d)
    with one_blas_thread():  # d x d QRs: on a loaded machine idle BLAS threads cost 100x
        Q = np.vstack([_haar_orthogonal(d, rng) for _ in range(n_blocks)])[:n_freq]
    radii = _isotropic_radii(kernel, n_freq, d, rng)
    return FourierFeatureMap((Q * radii[:, None]).T, kind="orf")


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


def resolve_n_features(n_features) -> int:
    """The requested number of features, or :data:`DEFAULT_N_FEATURES` for None."""
    if n_features is None:
        return DEFAULT_N_FEATURES
    return check_int("n_features", n_features, low=1)


def resolve_features(
    features: str,
    kernel: Kernel,
    n_input_features: int | None = None,
    n_features: int | None = None,
) -> str:
    """The feature-map kind for ``features="auto"`` (or a named kind, validated).

    ``auto`` picks the most accurate map the kernel admits: ``orf`` for rbf and matern (it beats
    scikit-learn's ``RBFSampler`` at the same number of features, where cos/sin ``rff`` is
    0-3 % behind it on the *centered* Gram of digits and pendigits: centering removes most of
    the random-phase noise that the pairs avoid), ``rff`` for laplacian (whose L1 spectral
    density is not rotation-invariant, so orthogonal directions do not apply) and
    ``tensorsketch`` for polynomial.  Other kernels have no random feature map here.

    Wide input is the exception: ``orf`` draws whole d x d Haar blocks, O(d^3) time and 8 d^2
    bytes even for fewer than d frequencies, so when the input has more columns than there are
    frequencies (``d > ceil(n_features / 2)``) and more than :data:`AUTO_ORF_MAX_WIDTH` (when
    ``n_input_features`` and ``n_features`` are given), ``auto`` picks ``rff`` (O(d m)).
    Measured draw + transform of 200 rows, m = 1000 (500 frequencies), rff / orf: d = 500:
    0.019 / 0.029 s; d = 750: 0.013 / 6.1 s; d = 1000: 0.026 / 1.0 s; d = 2000: 0.032 / 5.6 s
    (2 shared cores, noisy, but past d = 500 orf is 40-400x slower); below 512 columns the
    Haar block costs under ~0.05 s and orf's accuracy is kept.
    """
    if features == "auto":
        if kernel.name in ("rbf", "matern"):
            wide = (
                n_input_features is not None
                and n_features is not None
                and n_input_features > max(-(-n_features // 2), AUTO_ORF_MAX_WIDTH)
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
    n_features: int,
    n_input_features: int,
    rng: np.random.Generator,
    *,
    input_sketch=None,
) -> FeatureMap:
    """Draw a random feature map for ``kernel`` on inputs of width ``n_input_features``.

    Parameters
    ----------
    features : {"auto", "rff", "orf", "fastfood", "tensorsketch"}
        ``auto``: see :func:`resolve_features`.
    kernel : Kernel
        Shift-invariant for ``rff`` (rbf, laplacian, matern), isotropic for ``orf`` and
        ``fastfood`` (rbf, matern), polynomial for ``tensorsketch``; others raise ValueError.
    n_features : int
        The number m of output columns asked for.  ``tensorsketch`` gives exactly m; the Fourier
        maps draw ``ceil(m / 2)`` frequencies and output their cos / sin pairs, so
        ``n_output_features = 2 * ceil(m / 2)`` (m rounded up to even).
    n_input_features : int
        d, the width of the rows the map will be applied to.
    rng : numpy.random.Generator
        The only source of randomness; the same generator state gives the same map.
    input_sketch : None, "auto" or int
        With ``features="rff"`` and an isotropic kernel: CountSketch the inputs to this width t
        first, the features then cost O(nnz(x) + t m) a row instead of O(nnz(x) m) (Musco &
        Woodruff 2017, section 3.2.2; :mod:`fastkpca._input_sketch`, which states the kernel
        error this adds and the ``"auto"`` width).

    Returns
    -------
    FeatureMap
        With ``E[z(x) . z(y)] = k(x, y)`` (with ``input_sketch``: ``k(Sx, Sy)`` given S).
    """
    if not isinstance(kernel, Kernel):
        raise ValueError(f"kernel must be a fastkpca.kernels.Kernel, got {kernel!r}")
    m = check_int("n_features", n_features, low=1)
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
                f"n_features={m}: {n_freq} random frequencies of width {d} ({features!r}, "
                "float64, with a float32 copy and the draw's temporaries)",
            )
        ],
        hint="lower n_features",
    )
    if features == "rff":
        fmap = _draw_rff(kernel, n_freq, d, rng)
    elif features == "orf":
        fmap = _draw_orf(kernel, n_freq, d, rng)
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
    """ValueError naming gamma when the drawn frequencies exceed float32's range.

    The features are computed in float32 (module notes); frequencies beyond 3.4e38 do not even
    exist there, and the phases ``w . x`` of any data are then so large (float64 knows them to
    ``|w . x| eps``, far more than 2 pi) that cos / sin of them are rounding noise.  At such a
    gamma the kernel matrix of any data is numerically the identity anyway.
    """
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


def check_feature_spec(estimator) -> None:
    """Refuse, before any data, feature-map parameters that no data could make valid
    (ValueError naming the parameter): ``n_features`` (a positive integer or None; or
    ``"auto"`` for the estimators sized by a ``tol``) and a map that cannot serve the kernel,
    found by the draw's own checks on the smallest map (two features of one input column, with
    a generator of its own: the estimator's random stream is not touched)."""
    from .statistics.growth import check_auto_size  # growth imports this module

    auto = hasattr(estimator, "tol") and check_auto_size(
        "n_features", estimator.n_features, estimator.tol
    )
    if not auto:
        resolve_n_features(estimator.n_features)
    kernel = estimator._check_kernel_spec()
    input_sketch = getattr(estimator, "input_sketch", None)
    _input_sketch.check_input_sketch(input_sketch)
    if kernel is not None:
        draw_feature_map(
            estimator.features, kernel, 2, 1, np.random.default_rng(0), input_sketch=input_sketch
        )


def init_feature_map(estimator, X_first, *, n_input_features=None):
    """Resolve an estimator's kernel and draw its feature map from the first data block.

    The one place where ``RandomFeatureKPCA``, ``StreamingKPCA`` and the transformers below turn
    their parameters into a map, so that the same ``random_state`` gives the same features in
    all of them::

        rng = estimator._make_rng()
        kernel = estimator._resolve_kernel(X_first[:DEFAULT_BLOCK_ROWS], rng)
        fmap = draw_feature_map(estimator.features, kernel,
                                resolve_n_features(estimator.n_features), d, rng)

    Data-dependent ``gamma`` (None is 1 / d and needs no data; ``"scale"`` and ``"median"`` do)
    is resolved on at most the first :data:`fastkpca._utils.DEFAULT_BLOCK_ROWS` rows of
    ``X_first``, an in-memory array or the first block of a stream, so an array and the same
    rows streamed in blocks of that size give the same kernel.

    Parameters
    ----------
    estimator : object
        Has ``_make_rng()``, ``_resolve_kernel(X, rng)`` (as
        :class:`fastkpca.decomposition._base.BaseKPCA`), ``features`` and ``n_features``.
    X_first : array or CSR matrix
        The training data, or its first row block (already validated).
    n_input_features : int, optional
        Defaults to ``X_first.shape[1]``.

    Returns
    -------
    fmap : FeatureMap
    rng : numpy.random.Generator
        The generator after drawing (for any further randomness of the fit).
    """
    rng = estimator._make_rng()
    kernel = estimator._resolve_kernel(X_first[:DEFAULT_BLOCK_ROWS], rng)
    d = X_first.shape[1] if n_input_features is None else n_input_features
    fmap = draw_feature_map(
        estimator.features,
        kernel,
        resolve_n_features(estimator.n_features),
        d,
        rng,
        input_sketch=getattr(estimator, "input_sketch", None),
    )
    return fmap, rng


# ------------------------------------------------------------------------------------------------
# scikit-learn transformers
# ------------------------------------------------------------------------------------------------
class _RandomFeatures(BaseKPCA):
    """Base transformer: ``fit`` draws the map, ``transform`` applies it (float32 preserved)."""

    _accepts_sparse = True
    features = "rff"

    def _check_params(self):
        super()._check_params()
        check_feature_spec(self)

    def fit(self, X, y=None):
        """Draw the feature map for X's width (and gamma resolved on X's first rows)."""
        self._check_params()
        self.feature_map_, _ = init_feature_map(self, self._fit_source(X).head())
        self.n_output_features_ = self.feature_map_.n_output_features
        return self

    def _transform_rows(self, X):
        """The random features of X, shape ``(n_samples, n_output_features_)``."""
        if sp.issparse(X) and not self.feature_map_.accepts_sparse:
            X = X.toarray()
        return self.feature_map_(X)

    @property
    def _n_features_out(self):
        return self.n_output_features_


def _transformer_doc(summary, features, kernel_note):
    return f"""{summary}

    Parameters
    ----------
    n_features : int or None
        Number of output columns (None: {DEFAULT_N_FEATURES}){kernel_note}.
    input_sketch : None, "auto" or int, default None
        ``rff`` with the rbf or matern kernel only: CountSketch the inputs to t coordinates
        first, O(nnz(x) + t m) a row (Musco & Woodruff 2017, section 3.2.2; see
        ``RandomFeatureKPCA`` and :mod:`fastkpca._input_sketch`); others refuse it.
    kernel : str or Kernel
    gamma, degree, coef0, nu : kernel parameters as in every fastkpca estimator.
    random_state : int, Generator or None
    n_jobs : int or None, default None
        Threads of ``transform`` (scikit-learn's meaning: None or -1 every core the process may
        use, -2 all but one, a positive count that many); the features do not depend on it.
    verbose : int, default 0
        Kept for the shared estimator interface (these maps show no progress bar).
    device : None, str or torch.device, default None
        Where ``fit`` and ``transform`` compute: None where the data live (numpy on the host,
        a PyTorch tensor on its device); ``"cuda"`` (or any PyTorch device) sends host data
        there block by block.  Fitted arrays live where the fit ran; ``transform`` returns the
        input's array type, device and dtype.  Needs PyTorch for a device.

    Attributes
    ----------
    feature_map_ : FeatureMap (``features={features!r}``), drawn in ``fit``.
    kernel_ : the resolved Kernel.
    n_output_features_ : int
    """


class RandomFourierFeatures(_RandomFeatures):
    __doc__ = _transformer_doc(
        "Random Fourier features with cos / sin pairs (rbf, laplacian, matern kernels).",
        "rff",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "rff"

    def __init__(
        self,
        n_features=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        input_sketch=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device
        self.input_sketch = input_sketch


class OrthogonalRandomFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "Orthogonal random features (Yu et al. 2016) for the rbf and matern kernels.",
        "orf",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "orf"


class FastfoodFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "Fastfood random features (Le, Sarlos & Smola 2013) for the rbf and matern kernels.",
        "fastfood",
        "; rounded up to even (cos / sin pairs)",
    )
    features = "fastfood"


class TensorSketchFeatures(RandomFourierFeatures):
    __doc__ = _transformer_doc(
        "TensorSketch features (Pham & Pagh 2013) for the polynomial kernel.", "tensorsketch", ""
    )
    features = "tensorsketch"

    def __init__(
        self,
        n_features=None,
        *,
        kernel="polynomial",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        random_state=None,
        n_jobs=None,
        verbose=0,
        device=None,
    ):
        super().__init__(
            n_features,
            kernel=kernel,
            gamma=gamma,
            degree=degree,
            coef0=coef0,
            nu=nu,
            random_state=random_state,
            n_jobs=n_jobs,
            verbose=verbose,
            device=device,
        )


# The input-sparsity-time Fourier map (registered for model files on import); it builds on the
# maps above, so it is imported last.
from . import _input_sketch  # noqa: E402
