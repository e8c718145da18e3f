"""Random Fourier features in input-sparsity time: a CountSketch of the inputs, then Gaussians.

Musco & Woodruff (NIPS 2017, section 3.2.2), after Kapralov, Potluru & Woodruff's "fake
Gaussian" (ICML 2016): ``W = S^T G`` with S a t x d CountSketch and G t x D frequencies drawn
from the kernel's spectral density in R^t, so ``X W = (X S^T) G`` costs O(nnz(X) + n t D) and no
d x D matrix is formed.

Given S, ``z`` is exactly the random Fourier map of ``k_S(x, y) = k(Sx, Sy)``.  CountSketch keeps
``E ||S v||^2 = ||v||^2`` with variance ``2 (||v||^4 - ||v||_4^4) / t``, so for rbf the added
variance is at most ``D / t`` times the features' own Monte-Carlo variance ``(1 - k^2)^2 / (2 D)``
at every distance; hence the default t = D (:func:`resolve_sketch_size`).  The sketch's error is
one draw shared by all entries (a Johnson-Lindenstrauss-type distortion), not independent noise;
``tests/test_input_sketch.py`` checks these moments.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from ._feature_map import FourierMap, float_type
from ._state import register_state_class
from ._utils import require_memory_parts
from .execution.feature_ops import sparse_product
from .kernels import RBF, Kernel, Matern

__all__ = [
    "InputCountSketch",
    "SketchedFourierFeatureMap",
    "check_input_sketch",
    "check_sketch_kernel",
    "draw_sketched_fourier",
    "resolve_sketch_size",
]


def check_input_sketch(input_sketch) -> None:
    """ValueError naming ``input_sketch`` unless it is None, ``"auto"`` or a positive integer."""
    if input_sketch is None or (isinstance(input_sketch, str) and input_sketch == "auto"):
        return
    if (
        not isinstance(input_sketch, numbers.Integral)
        or isinstance(input_sketch, bool)
        or input_sketch < 1
    ):
        raise ValueError(
            "input_sketch must be None, 'auto' or a positive integer (the CountSketch width t "
            f"of the inputs), got {input_sketch!r}"
        )


def resolve_sketch_size(input_sketch, n_frequencies: int, n_input_features: int) -> int | None:
    """The CountSketch width t, or None for no sketch (the exact ``X W``).

    ``"auto"``: t = D, the number of frequencies (``ceil(n_random_features / 2)``), at which the
    sketch's added variance of every kernel entry is at most the features' own (module notes),
    when that is below the input width d; for t >= d the sketch would cost as much as ``X W``
    (d D flops a dense row), so there is none.  An integer is used as given.
    """
    check_input_sketch(input_sketch)
    if input_sketch is None:
        return None
    if isinstance(input_sketch, str):
        return n_frequencies if n_frequencies < n_input_features else None
    return int(input_sketch)


class InputCountSketch:
    """The CountSketch ``x -> S x`` from R^d to R^t: bucket ``hashes[j]`` and sign ``signs[j]``
    of each input coordinate j (Clarkson & Woodruff 2013; the S of Kapralov et al. 2016).
    :meth:`apply` is one product with a one-nonzero-a-row d x t matrix
    (:func:`~fastkpca.execution.feature_ops.sparse_product`), O(nnz(X)) for CSR; dense device
    rows use a GEMM with a dense copy of S^T."""

    def __init__(self, hashes: np.ndarray, signs: np.ndarray, n_buckets: int):
        self.hashes = np.asarray(hashes, dtype=np.int64)
        self.signs = np.asarray(signs, dtype=np.float64)
        self.n_buckets = int(n_buckets)
        self._matrices: dict[str, sp.csr_matrix] = {}
        self._dense: dict = {}

    @property
    def n_input_features(self) -> int:
        return int(self.hashes.shape[0])

    def matrix(self, dtype) -> sp.csr_matrix:
        """``S^T`` as a (d, t) CSR matrix of ``dtype`` (built once per dtype)."""
        key = np.dtype(dtype).str
        if key not in self._matrices:
            d = self.n_input_features
            self._matrices[key] = sp.csr_matrix(
                (self.signs.astype(dtype), self.hashes, np.arange(d + 1)),
                shape=(d, self.n_buckets),
            )
        return self._matrices[key]

    def apply(self, X):
        """``X S^T``, dense (n, t), float32 for float32 X, float64 otherwise, in X's namespace."""
        d, t = self.n_input_features, self.n_buckets
        return sparse_product(
            X,
            self.matrix(float_type(X)),
            self._dense,
            what=f"input_sketch={t}: the dense {d} x {t} CountSketch of the inputs on the device",
            hint="use input_sketch=None on a device, or sketch host rows",
        )

    def __getstate__(self) -> dict:
        state = dict(vars(self))
        state["_dense"] = {}  # device copies
        return state


@register_state_class
class SketchedFourierFeatureMap(FourierMap):
    """Random Fourier features of CountSketched inputs: ``z(x) = [cos(Sx G), sin(Sx G)] / sqrt(D)``.

    Musco & Woodruff (2017), section 3.2.2, with Kapralov et al.'s (2016) fake Gaussian ``W =
    S^T G``: O(nnz(x) + t D) a row instead of O(nnz(x) D).  Given S they are exactly the
    ``rff`` features of ``k(Sx, Sy)`` (module notes), computed as every
    :class:`fastkpca._feature_map.FourierMap`; ``kind`` is ``"rff"``.  Accepts CSR input.

    Parameters
    ----------
    sketch : InputCountSketch
        S, from R^d to R^t.
    frequencies : (t, D) array
        G, the columns drawn from the kernel's spectral density in R^t.
    """

    kind = "rff"
    accepts_sparse = True

    def __init__(self, sketch: InputCountSketch, frequencies: np.ndarray):
        self.sketch = sketch
        self.frequencies = np.ascontiguousarray(frequencies, dtype=np.float64)
        self.n_input_features = sketch.n_input_features
        self.n_buckets = sketch.n_buckets
        self.n_frequencies = self.frequencies.shape[1]
        self.n_output_features = 2 * self.n_frequencies
        #: The largest norm of a column of G (a bound on the phases of the sketched rows).
        self.frequency_norm = float(
            np.sqrt(np.max(np.einsum("ij,ij->j", self.frequencies, self.frequencies), initial=0))
        )

    def _project(self, A, dtype):
        return A @ self._placed(A, "G", lambda: self.frequencies, dtype)

    def _chunk(self, rows, out=None):
        """``S x`` of the chunk (:meth:`InputCountSketch.apply`), then its float32 features."""
        return self._fourier_chunk(self.sketch.apply(rows), out)

    def __repr__(self):
        return (
            f"{type(self).__name__}(n_input_features={self.n_input_features}, "
            f"n_buckets={self.n_buckets}, n_output_features={self.n_output_features})"
        )

    def to_state(self) -> dict:
        return {
            "hashes": self.sketch.hashes,
            "signs": self.sketch.signs,
            "frequencies": self.frequencies,
        }

    @classmethod
    def from_state(cls, state: dict) -> SketchedFourierFeatureMap:
        frequencies = np.asarray(state["frequencies"], dtype=np.float64)
        sketch = InputCountSketch(state["hashes"], state["signs"], frequencies.shape[0])
        return cls(sketch, frequencies)


def sketched_fourier_bytes(n_frequencies: int, n_buckets: int, d: int) -> int:
    """Memory of the map: G in float64 with a float32 copy and the draw's temporary (20 bytes
    an entry), and per input coordinate a hash, a sign and S^T's CSR entry (~36 bytes)."""
    return 20 * n_buckets * n_frequencies + 36 * d


def check_sketch_kernel(kernel: Kernel) -> None:
    """ValueError naming ``input_sketch`` unless the kernel is isotropic (``rbf``, ``matern``):
    a function of ``||x - y||_2``, which CountSketch preserves in expectation.  The L1
    ``laplacian`` kernel's distance is not preserved (``E ||S v||_1 < ||v||_1`` when
    coordinates collide)."""
    if not isinstance(kernel, RBF | Matern):
        raise ValueError(
            f"input_sketch needs an isotropic kernel ('rbf' or 'matern'), whose value depends on "
            f"the Euclidean distance that CountSketch preserves; the {kernel.name!r} kernel is "
            "not (use input_sketch=None)"
        )


def draw_sketched_fourier(
    kernel: Kernel, n_frequencies: int, n_input_features: int, n_buckets: int, rng
) -> SketchedFourierFeatureMap:
    """Draw S (hashes, then signs) and G (t x D, from the kernel's density in R^t), in that
    order from ``rng``; isotropic kernels only (:func:`check_sketch_kernel`)."""
    check_sketch_kernel(kernel)
    d, t, D = int(n_input_features), int(n_buckets), int(n_frequencies)
    require_memory_parts(
        [
            (
                sketched_fourier_bytes(D, t, d),
                f"input_sketch={t}: the {t} x {D} sketched frequencies and the hashes of {d} "
                "input columns",
            )
        ],
        hint="lower input_sketch or n_random_features",
    )
    hashes = rng.integers(0, t, size=d)
    signs = 2.0 * rng.integers(0, 2, size=d) - 1.0
    frequencies = kernel.sample_frequencies(D, t, rng).T
    return SketchedFourierFeatureMap(InputCountSketch(hashes, signs, t), frequencies)
