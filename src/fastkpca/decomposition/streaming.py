"""StreamingKPCA (SKPCA): random features fed into Frequent Directions.

Ghashami, Perry & Phillips (2016), Algorithm 1: each row x is mapped to its random features
``z(x)`` (m columns, :mod:`fastkpca.features`) and the feature rows are sketched by Frequent
Directions (:class:`fastkpca.sketch.FrequentDirections`) into an ell x m matrix B with
``B^T B ~ Z^T Z``; the right singular vectors W of B are the approximate kernel principal axes in
feature space.  Memory is O(d m) for the feature map plus O(ell m) for the sketch plus one row
block, independent of n; time O(n m (d + ell)).

Centering (which the paper leaves out: its G is uncentered).  KPCA needs the eigenpairs of the
centered feature covariance ``Zc^T Zc = Z^T Z - s s^T / n`` (s the feature sum, kept exactly in
float64).  We take those of ``B^T B - s s^T / n``: this operator maps into the span of the rows of
``[B; s^T]`` (at most ell + 1 dimensions) and vanishes on its orthogonal complement, so with Q an
orthonormal basis of that span its non-zero eigenpairs are exactly those of the small
``Q^T (B^T B - s s^T / n) Q`` (:func:`skpca_eigen`).  The error is only FD's:
``||Zc^T Zc - (B^T B - s s^T / n)||_2 = ||Z^T Z - B^T B||_2 <= ||Z - Z_k||_F^2 / (ell + 1 - k)``,
and when ``sketch_size >= n_output_features`` nothing is shrunk, so the model equals
``RandomFeatureKPCA`` (exact PCA of the same features) up to round-off.  The rows are sketched
uncentered, so the feature mean takes up (about) one of the ell directions; in exchange the
sketch does not depend on a data-dependent shift, which keeps ``partial_fit`` independent of the
blocking and makes sketches of different streams mergeable.

On a dask array (:mod:`fastkpca.dask`) each chunk is sketched on a worker by the same
:func:`sketch_rows` and the sketches are merged up a tree (:func:`merge_sketch_stats`): the
Frequent Directions bound holds for the merged sketch, and with ``sketch_size >=
n_output_features`` the model is again exact.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as la
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import DEFAULT_BLOCK_ROWS, check_block, check_int, is_block_source, is_dask_array
from ..features import FEATURES, init_feature_map
from ..sketch import FrequentDirections
from ..solvers import postprocess_eigen
from ._base import DEFAULT_N_COMPONENTS, BaseKPCA
from .random_features import _feature_blocks

__all__ = [
    "StreamingKPCA",
    "skpca_eigen",
    "sketch_rows",
    "merge_sketch_stats",
    "DEFAULT_SKETCH_SIZE",
]

#: ``sketch_size=None`` means ``max(DEFAULT_SKETCH_SIZE, 2 * n_components)`` rows: the largest
#: ell of the paper's experiments, and ell >= 2k makes the FD bound ``tail_k / (ell + 1 - k)``
#: at most ``tail_k / k``.
DEFAULT_SKETCH_SIZE = 50


def skpca_eigen(
    B: np.ndarray,
    feature_sum: np.ndarray,
    n_samples: int,
    n_components: int,
    shrinkage: float = 0.0,
    loss=None,
    missing_energy: float | None = None,
    return_bounds: bool = False,
):
    """Top eigenpairs of the centered feature covariance estimated from a FD sketch.

    With ``Zc^T Zc = B^T B - s s^T / n + E`` (exact: the centering term is known exactly, and
    ``E = Z^T Z - B^T B`` is the sketch's loss, ``0 <= E <= delta I``, ``trace E = F``), Weyl's
    inequalities bound every true eigenvalue::

        mu_i <= lambda_i(Zc^T Zc) <= mu_i + min(delta, F),    mu_i = lambda_i(B^T B - s s^T / n)

    (clipped at 0; the ``mu_i`` are the uncompensated, paper's estimates).  The estimate is
    ``lambda_i(B^T B - s s^T / n + E_est)`` clipped to those bounds, with ``E_est = V^T H V +
    rho (I - V^T V)`` the sketch's tracked loss (:meth:`fastkpca.sketch.FrequentDirections.
    loss_model`): exact in directions that stayed in the sketch, elsewhere the geometric mean
    of the average loss and ``delta`` (every direction's loss is at most ``delta``; the
    estimated operator is also ``rho`` on the complement of the sketch's span, so ``rho`` can
    be reported where the sketch has nothing larger).  The former estimate, ``delta`` added
    on B's whole row span (compensative FD, Desai et al. 2016), is the upper bound whenever
    the top directions did not stay in the sketch: 3x the truth on RandomNoisy, ell = 10.

    Parameters
    ----------
    B : ndarray (r, m), float64
        Frequent Directions sketch (or buffer) of the (uncentered) feature rows.
    feature_sum : ndarray (m,), float64
        s, the exact sum of the feature rows.
    n_samples : int
        n >= 1.
    n_components : int
        k <= min(r + 1, m).
    shrinkage : float
        delta, the total Frequent Directions shrinkage (0 when nothing was shrunk: then the
        result is the exact eigenpairs of ``B^T B - s s^T / n`` and the bounds coincide).
    loss : (V, H, rho) or None
        The loss estimate of :meth:`~fastkpca.sketch.FrequentDirections.loss_model` (rows of V
        in the row span of B); None: no compensation (the lower bounds).
    missing_energy : float or None
        F, the exact ``trace E``; None: not used in the upper bound.
    return_bounds : bool
        Also return the ``(2, k)`` lower / upper bounds.

    Returns
    -------
    eigenvalues : (k,) float64, descending, >= 0
        Estimates of the top eigenvalues of ``Zc Zc^T``, the centered approximate n x n Gram
        (the scale of ``KernelPCA.eigenvalues_``), within the bounds.
    components : (k, m) float64
        Orthonormal principal axes in feature space (eigenvectors of the estimated operator),
        signs fixed by :func:`fastkpca.solvers.postprocess_eigen` on the m-dimensional axes.
    bounds : (2, k) float64, only with ``return_bounds``
        Lower and upper bounds on the true eigenvalues (rigorous, up to round-off).

    Notes
    -----
    With Q an orthonormal basis of the row span of ``[B; s^T]``, ``B^T B - s s^T / n`` and
    ``V^T H V`` vanish on the complement of span(Q), where the estimated operator is ``rho I``;
    so its eigenpairs are those of the small ``Q^T (...) Q`` (size <= r + 1), at O(r^2 m) cost,
    together with ``rho`` (multiplicity ``m - dim Q``).  Negative values are clipped to 0.
    """
    m = B.shape[1]
    k = n_components
    B = B[np.any(B != 0.0, axis=1)]  # zero rows (fewer rows seen than ell) span nothing
    R = np.vstack([B, feature_sum[None, :]])
    Q, _ = la.qr(R.T, mode="economic", check_finite=False)
    BQ = B @ Q
    sQ = feature_sum @ Q
    M = BQ.T @ BQ - np.outer(sQ, sQ) / n_samples
    M = (M + M.T) / 2
    rest = m - Q.shape[1]  # dimension of the complement of span(Q)
    k = min(k, Q.shape[1])  # as many eigenvalues as axes (rank-deficient rows give fewer)

    def top(values, fill):
        values = np.concatenate([values, np.full(min(rest, k), fill)])
        return np.maximum(np.sort(values)[::-1][:k], 0.0)

    lower = top(la.eigvalsh(M, check_finite=False), 0.0)
    slack = float(shrinkage)
    if missing_energy is not None:
        slack = min(slack, max(float(missing_energy), 0.0))
    upper = lower + slack
    rho = 0.0
    if loss is not None and slack > 0:
        V, H, rho = loss
        VQ = V @ Q
        M = M + VQ.T @ H @ VQ + rho * (np.eye(Q.shape[1]) - VQ.T @ VQ)
        M = (M + M.T) / 2
    w, U = la.eigh(M, check_finite=False)
    vals, vecs = postprocess_eigen(w, Q @ U)
    estimate = np.clip(top(vals, rho), lower, upper)
    out = (estimate, vecs[:, :k].T)
    return out + (np.vstack([lower, upper]),) if return_bounds else out


def sketch_rows(X, fmap, sketch: FrequentDirections, feature_sum: np.ndarray) -> int:
    """Feed the random features of a row block to a sketch and a float64 feature sum.

    ``sketch`` and ``feature_sum`` are updated in place; returns the number of rows.  The one
    per-block step of SKPCA (Ghashami et al. 2016, Algorithm 1), for ``partial_fit`` and for
    each chunk of a dask array.
    """
    for _, Z in _feature_blocks([(0, X)], fmap):
        sketch.update(Z)
        feature_sum += Z.sum(axis=0, dtype=np.float64)
    return X.shape[0]


def _sketch_stats(blocks, fmap, sketch_size: int):
    """``(sketch, feature sum, rows)`` of ``(start, block)`` row blocks (one dask chunk)."""
    m = fmap.n_output_features
    sketch, feature_sum, n = FrequentDirections(sketch_size, m), np.zeros(m), 0
    for _, X in blocks:
        n += sketch_rows(X, fmap, sketch, feature_sum)
    return sketch, feature_sum, n


def merge_sketch_stats(a, b):
    """Merge two ``(sketch, feature sum, rows)`` statistics (new objects; inputs unchanged)."""
    return a[0].merge(b[0]), a[1] + b[1], a[2] + b[2]


class StreamingKPCA(BaseKPCA):
    """Streaming kernel PCA: random features sketched by Frequent Directions (SKPCA).

    Ghashami, Perry & Phillips (2016), Algorithm 1, with exact feature-space centering (see the
    module docstring).  ``fit`` is a loop of ``partial_fit`` over row blocks (like
    ``sklearn.decomposition.IncrementalPCA``) and accepts an array, a CSR matrix or an iterable
    of row blocks; memory is O(d m + ell m) plus one block, whatever n.  Frequent Directions
    shrinks after fixed row counts, so ``partial_fit`` over any blocking gives the same sketch
    as ``fit`` up to the round-off of computing features on blocks of other shapes (a
    data-dependent ``gamma`` is resolved on the first block, which then must be the same).

    ``transform(X) = (z(X) - mean_) @ components_.T`` approximates
    ``sklearn.decomposition.KernelPCA(...).transform(X)`` (same scale, deterministic column
    signs).  With ``sketch_size >= n_output_features_`` it equals ``RandomFeatureKPCA`` with the
    same ``n_features``, ``features`` and ``random_state`` up to round-off.

    Parameters
    ----------
    n_components : int or None
        Number of components; None gives min(10, n_samples_seen, sketch rows).
    kernel : str or Kernel
        ``"rbf"``, ``"laplacian"``, ``"matern"`` (``rff``; ``orf`` and ``fastfood`` take rbf and
        matern) or ``"polynomial"`` (``tensorsketch``); others raise ValueError.
    gamma : float, None, "scale" or "median"
        Kernel coefficient; None is 1 / n_features_in as in ``KernelPCA``.  The string forms are
        resolved on the first row block (at most 8192 rows) the model sees.
    degree, coef0 : polynomial kernel parameters.  nu : Matern smoothness.
    n_features : int or None
        Number m of random features (None: 1000, as ``RandomFeatureKPCA``); the Fourier maps
        round an odd m up to even.
    sketch_size : int or None
        ell, the rows Frequent Directions keeps after each shrink (None:
        ``max(50, 2 n_components)``).  The buffer holds ``2 ell`` rows (``2 ell m`` float64):
        feature rows are appended until it is full, then one SVD shrinks it back to ell rows.
        The paper's ell (Ghashami, Perry & Phillips 2016, Algorithm 1) is the buffer: an
        ell-row sketch shrunk to ell / 2 when full.  So ``sketch_size=ell`` here takes the
        memory of the paper's 2 ell (and keeps one more row).  ``ell >= n_output_features_``
        never shrinks (the model is then exact; the buffer is capped at
        ``2 n_output_features_`` rows).
    features : {"auto", "rff", "orf", "fastfood", "tensorsketch"}
        The feature map, see :mod:`fastkpca.features`.  ``auto`` (default): ``orf`` for rbf and
        matern, ``rff`` for laplacian, ``tensorsketch`` for polynomial
        (:func:`fastkpca.features.resolve_features`).
    random_state : int, Generator or None
        Draws the features.  Models to be merged need the same (fixed) seed.

    Attributes
    ----------
    eigenvalues_ : (n_components,) estimated top eigenvalues of the centered training Gram
        (of the features): the sketch plus its tracked loss, within ``eigenvalue_bounds_``
        (:func:`skpca_eigen`; exact when nothing was shrunk).  Measured max relative error
        over the top 5 (``benchmarks/bench_fd_eigenvalues.py``: flat, RandomNoisy, decaying,
        cpu_act; ell = 5 to 100): < 2 % where the leading directions stay in the sketch
        (``total_shrinkage`` well below lambda_k; 10 of the 20 cases), 0.09 to 0.86 where
        they churn through it (the bounds are then wide: the sketch has lost most of those
        directions), against 0.12 to 10.4 for the former estimate (``total_shrinkage`` added
        on the whole sketch span, which is then the upper bound).
    eigenvalue_bounds_ : (2, n_components) lower and upper bounds on the exact eigenvalues
        of the same features' centered covariance (RandomFeatureKPCA's): the uncompensated
        sketch's eigenvalues and those plus ``min(total_shrinkage, missing energy)``.
    components_ : (n_components, n_output_features_) principal axes in feature space.
    mean_ : (n_output_features_,) the mean of the training features.
    feature_sum_ : (n_output_features_,) float64 sum of the training features.
    sketch_ : :class:`fastkpca.sketch.FrequentDirections` of the feature rows.
    feature_map_ : the drawn :class:`fastkpca.features.FeatureMap`.
    kernel_ : the resolved Kernel.
    n_output_features_ : int, m.
    n_samples_seen_ : int.
    n_components_, n_features_in_.

    References
    ----------
    M. Ghashami, D. J. Perry, J. M. Phillips, "Streaming kernel principal component analysis",
    AISTATS 2016.
    """

    _accepts_sparse = True

    def __init__(
        self,
        n_components=None,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        nu=1.5,
        n_features=None,
        sketch_size=None,
        features="auto",
        random_state=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.nu = nu
        self.n_features = n_features
        self.sketch_size = sketch_size
        self.features = features
        self.random_state = random_state

    # --- parameters -----------------------------------------------------------------------
    def _check_params(self):
        if self.features != "auto" and self.features not in FEATURES:
            raise ValueError(f"features must be 'auto' or one of {FEATURES}, got {self.features!r}")
        check_int("sketch_size", self.sketch_size, low=1, allow_none=True)
        if self.n_components is not None:
            check_int("n_components", self.n_components, low=1)

    def _sketch_rows(self) -> int:
        if self.sketch_size is not None:
            return int(self.sketch_size)
        return max(DEFAULT_SKETCH_SIZE, 2 * (self.n_components or DEFAULT_N_COMPONENTS))

    # --- fitting --------------------------------------------------------------------------
    def _reset(self):
        for name in (
            "feature_map_",
            "sketch_",
            "feature_sum_",
            "n_samples_seen_",
            "kernel_",
            "components_",
            "eigenvalues_",
            "eigenvalue_bounds_",
            "mean_",
            "n_components_",
            "n_output_features_",
            "n_features_in_",
        ):
            if hasattr(self, name):
                delattr(self, name)

    def fit(self, X, y=None):
        """Fit on an array / CSR matrix (n_samples, n_features) or an iterable of row blocks.

        Equivalent to ``partial_fit`` over the row blocks (blocks of 8192 rows for an array),
        starting from scratch.  A ``dask.array.Array`` is sketched chunk by chunk on the workers
        and the sketches merged (see :mod:`fastkpca.dask`).
        """
        self._reset()
        if is_dask_array(X):
            return self._fit_dask(X)
        if is_block_source(X):
            n_blocks = 0
            for i, block in enumerate(X):
                block = check_block(
                    block,
                    n_features=getattr(self, "n_features_in_", None),
                    accept_sparse=True,
                    name=f"X (block {i})",
                )
                if i == 0:
                    if block.shape[0] == 0:
                        raise ValueError("the first row block of X is empty")
                    self.n_features_in_ = block.shape[1]
                self._update(block)
                n_blocks += 1
            if n_blocks == 0:
                raise ValueError("X is an empty iterable of row blocks")
        else:
            X = self._validate_fit_data(X)
            for start in range(0, X.shape[0], DEFAULT_BLOCK_ROWS):
                self._update(X[start : start + DEFAULT_BLOCK_ROWS])
        self._finalize()
        return self

    def partial_fit(self, X, y=None):
        """Add a block of rows (array or CSR) to the model; returns self.

        The first call resolves the kernel (``gamma`` strings on this block) and draws the
        features; later blocks must have the same width.
        """
        first = not hasattr(self, "sketch_")
        X = validate_data(
            self,
            X,
            reset=first,
            dtype=[np.float64, np.float32],
            accept_sparse="csr",
            ensure_min_samples=1,
        )
        seen = 0 if first else self.n_samples_seen_
        if isinstance(self.n_components, int) and seen + X.shape[0] < self.n_components:
            # Checked before sketching, so a refused block leaves the model unchanged (the
            # IncrementalPCA rule: the first batch must hold at least n_components rows).
            raise ValueError(
                f"n_components={self.n_components} is larger than the number of "
                f"samples seen ({seen + X.shape[0]}); pass a larger first block"
            )
        self._update(X)
        self._finalize()
        return self

    def _init(self, X_first):
        """Resolve the kernel and draw the features from the first rows; empty sketch."""
        self._check_params()
        fmap, _ = init_feature_map(self, X_first)
        m = fmap.n_output_features
        self.feature_map_ = fmap
        self.n_output_features_ = m
        self.sketch_ = FrequentDirections(self._sketch_rows(), m)
        self.feature_sum_ = np.zeros(m)
        self.n_samples_seen_ = 0

    def _update(self, X):
        """Sketch the features of one validated row block (the first block sets the model up)."""
        if not hasattr(self, "sketch_"):
            self._init(X)
        self.n_samples_seen_ += sketch_rows(X, self.feature_map_, self.sketch_, self.feature_sum_)

    def _fit_dask(self, X):
        """Init from the first 8192 rows, sketch each chunk on a worker, merge up a tree."""
        from ..dask import DaskRowBlocks

        data = DaskRowBlocks(X, accept_sparse=True)
        self.n_features_in_ = data.n_features
        self._init(data.head())
        self.sketch_, self.feature_sum_, self.n_samples_seen_ = data.reduce(
            _sketch_stats, merge_sketch_stats, self.feature_map_, self._sketch_rows()
        )
        self._finalize()
        return self

    def _finalize(self):
        """Eigenpairs, eigenvalue bounds, mean from the sketch (cheap: O(ell^2 m)).

        The buffer (up to 2 ell rows) is used as it is rather than shrunk once more: it holds
        strictly more of the stream, and its loss is at most ``total_shrinkage`` per direction.
        """
        B = self.sketch_.rows()
        n = self.n_samples_seen_
        k = self._resolve_n_components(
            min(n, self.sketch_.sketch_size, B.shape[1]),
            what="min(n_samples_seen, sketch_size, n_features)",
        )
        sketch = self.sketch_
        self.eigenvalues_, self.components_, self.eigenvalue_bounds_ = skpca_eigen(
            B,
            self.feature_sum_,
            n,
            k,
            shrinkage=sketch.total_shrinkage,
            loss=sketch.loss_model(),
            missing_energy=sketch.missing_energy,
            return_bounds=True,
        )
        self.mean_ = self.feature_sum_ / n

    # --- merging --------------------------------------------------------------------------
    def merge(self, other: StreamingKPCA) -> StreamingKPCA:
        """A new model fitted on the rows of both models (neither is modified).

        Needs the same parameters and the same drawn features (a fixed ``random_state``, and a
        kernel resolved to the same value); the Frequent Directions sketches are merged
        (:meth:`fastkpca.sketch.FrequentDirections.merge`, the bound holds for the union, the
        exact energies and the loss estimates add) and the feature sums added.  This is the
        reduction a tree merge over data blocks uses.
        """
        if not isinstance(other, StreamingKPCA):
            raise ValueError(f"can only merge with a StreamingKPCA, got {type(other).__name__}")
        check_is_fitted(self)
        check_is_fitted(other)
        mine, theirs = self.get_params(), other.get_params()
        diff = sorted(k for k in mine if not _same_param(mine[k], theirs[k]))
        if diff:
            raise ValueError(f"cannot merge StreamingKPCA models with different parameters: {diff}")
        if self.n_features_in_ != other.n_features_in_:
            raise ValueError(
                f"cannot merge models fitted on {self.n_features_in_} and "
                f"{other.n_features_in_} input features"
            )
        if self.kernel_ != other.kernel_ or not _same_feature_map(
            self.feature_map_, other.feature_map_
        ):
            raise ValueError(
                "cannot merge StreamingKPCA models with different random features: "
                "fit both with the same integer random_state (and a numeric gamma "
                "or gamma=None, so the kernel does not depend on the data)"
            )
        out = clone(self)
        out.n_features_in_ = self.n_features_in_
        out.kernel_ = self.kernel_
        out.feature_map_ = self.feature_map_
        out.n_output_features_ = self.n_output_features_
        out.sketch_ = self.sketch_.merge(other.sketch_)
        out.feature_sum_ = self.feature_sum_ + other.feature_sum_
        out.n_samples_seen_ = self.n_samples_seen_ + other.n_samples_seen_
        out._finalize()
        return out

    # --- transform ------------------------------------------------------------------------
    def transform(self, X):
        """Project X on the principal axes: ``(z(X) - mean_) @ components_.T``, in row blocks.

        A dask array gives a lazy dask array (:func:`fastkpca.dask.transform`).
        """
        if is_dask_array(X):
            from ..dask import transform

            return transform(self, X)
        X = self._validate_transform_data(X)
        dtype = self._output_dtype(X)
        comps = self.components_.T.astype(dtype)
        mean_proj = (self.mean_ @ self.components_.T).astype(dtype)
        out = np.empty((X.shape[0], self.n_components_), dtype=dtype)
        for start, Z in _feature_blocks([(0, X)], self.feature_map_):
            np.matmul(Z, comps, out=out[start : start + Z.shape[0]])
        out -= mean_proj
        return out


def _same_param(a, b) -> bool:
    if isinstance(a, np.random.Generator) or isinstance(b, np.random.Generator):
        return a is b
    try:
        return bool(a == b)
    except Exception:  # e.g. objects without a boolean comparison
        return a is b


def _same_feature_map(a, b) -> bool:
    """Same class and the same drawn parameters (compared through their state)."""
    if type(a) is not type(b):
        return False
    sa, sb = a.to_state(), b.to_state()
    if sa.keys() != sb.keys():
        return False
    return all(np.array_equal(np.asarray(sa[k]), np.asarray(sb[k])) for k in sa)
