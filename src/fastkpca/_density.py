"""Reduced-set density estimates: a few weighted centres standing in for the whole data set.

A reduced-set density estimate replaces the empirical measure ``(1/n) sum_i delta(x_i)`` by
``(1/n) sum_j w_j delta(c_j)`` over ``m << n`` centres, so the kernel density estimate stays
close to the data's (Kingravi, Vela & Gray, "Reduced set KPCA", eq. 9-10); reduced-set KPCA
works on their weighted m x m Gram (:mod:`fastkpca.decomposition.reduced_set`).  Every function
returns a :class:`ReducedSet` whose ``weights`` sum to n:

* ``shadow``: single-pass shadow sets of radius sigma / ell (Algorithm 2), O(m n d);
* ``kmeans``: k-means centroids weighted by cluster size (as Zhang & Kwok's density-weighted
  Nystrom), O(m n d) per iteration;
* ``paring``: m draws of the KDE's mixture components (Freedman & Kisilev 2010), O(m d);
* ``herding``: kernel herding over candidates (Chen, Welling & Smola 2010), O(n_cand (n + T) d);
* ``uniform``: m rows without replacement, weights n / m (the paper's baseline), O(m d).

Host algorithms on numpy rows, never n x n or n x m: ReducedSetKPCA gives them a host copy of
device rows, so a ``random_state`` gives the same centres on every device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._utils import check_float, check_int
from .execution import track_rows
from .kernels import RBF, Kernel, Laplacian, Matern, manhattan, squared_euclidean
from .source import as_source

__all__ = [
    "ReducedSet",
    "DENSITIES",
    "SHADOW_CENTERS",
    "kernel_bandwidth",
    "shadow_density",
    "kmeans_density",
    "paring_density",
    "herding_density",
    "uniform_density",
]

#: The reduced-set density estimates :class:`fastkpca.ReducedSetKPCA` offers.
DENSITIES = ("shadow", "kmeans", "paring", "herding", "uniform")

#: Which point represents a shadow set: its mean, or the paper's first point.
SHADOW_CENTERS = ("centroid", "first")

#: Rows of X per block in the shadow pass; the block-to-centre distance chunks hold at most
#: ``_SHADOW_BLOCK * _SHADOW_CENTER_CHUNK`` float64 values (32 MiB).
_SHADOW_BLOCK = 1024
_SHADOW_CENTER_CHUNK = 4096
#: Candidates per column chunk when herding evaluates the data's mean embedding on them.
_HERDING_CANDIDATE_CHUNK = 4096
#: Relative round-off of a squared distance computed from norms and a dot product (float64).
_ROUNDOFF = 8 * np.finfo(np.float64).eps


@dataclass
class ReducedSet:
    """Weighted centres of a reduced-set density estimate.

    Attributes
    ----------
    centers : ndarray of shape (m, n_features)
        The centres, in the dtype of the data.
    weights : ndarray of shape (m,), float64
        Positive weights summing to n_samples: how many data points each centre stands for.
    labels : ndarray of shape (n_samples,) or None
        The centre each data point was assigned to, for the densities that partition the data
        (``shadow``, ``kmeans``); None for the others.
    """

    centers: np.ndarray
    weights: np.ndarray
    labels: np.ndarray | None = None

    @property
    def n_centers(self) -> int:
        return int(self.centers.shape[0])


# --- shadow density estimate (Kingravi et al., Algorithm 2) ---------------------------------------
def kernel_bandwidth(kernel: Kernel) -> tuple[float, str]:
    """The bandwidth sigma of a radial kernel and the distance it is a function of.

    ``rbf``: ``exp(-||x - y||^2 / (2 sigma^2))``, so sigma = 1 / sqrt(2 gamma) (Euclidean);
    ``matern``: sigma = its length scale 1 / sqrt(2 gamma) (Euclidean; the same as rbf for
    nu -> inf); ``laplacian``: ``exp(-||x - y||_1 / sigma)``, so sigma = 1 / gamma (L1, the
    kernel's own distance).  The shadow of a point is then the ball of radius sigma / ell in that
    distance, inside which the kernel stays above ``exp(-1 / (2 ell^2))`` (rbf) or
    ``exp(-1 / ell)`` (laplacian) of its peak.

    Raises
    ------
    ValueError
        For kernels that are not radial with a bandwidth (polynomial, linear, cosine).
    """
    if isinstance(kernel, RBF | Matern):
        return 1.0 / np.sqrt(2.0 * kernel.gamma), "euclidean"
    if isinstance(kernel, Laplacian):
        return 1.0 / kernel.gamma, "manhattan"
    name = getattr(kernel, "name", type(kernel).__name__)
    raise ValueError(
        f"the shadow density needs a radial kernel with a bandwidth (rbf, laplacian, matern); "
        f"the {name!r} kernel has none. Use density='kmeans', 'herding' or 'uniform'"
    )


def _within(A, B, metric, threshold, A_sq=None, B_sq=None):
    """Boolean matrix: row i of A within the shadow radius of row j of B.

    Squared Euclidean distances come from ``|a|^2 + |b|^2 - 2 a.b``, which is only accurate to
    about ``eps (|a|^2 + |b|^2)``: a distance below that is indistinguishable from 0, so it
    counts as within (otherwise exact duplicates could fail to merge at a tiny radius).
    """
    if metric == "manhattan":
        return manhattan(A, B) <= threshold
    A_sq = np.einsum("ij,ij->i", A, A) if A_sq is None else A_sq
    B_sq = np.einsum("ij,ij->i", B, B) if B_sq is None else B_sq
    D = squared_euclidean(A, B, X_sq=A_sq, Y_sq=B_sq)
    D -= _ROUNDOFF * (A_sq[:, None] + B_sq[None, :])
    return D <= threshold


def _leader_pass(within: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 2 on a small point set given its boolean "within eps" matrix.

    Returns the positions that become centres and, for every point, the position of its centre:
    the first remaining point becomes a centre and takes every remaining point in its shadow.
    """
    r = within.shape[0]
    owner = np.full(r, -1, dtype=np.intp)
    leaders = []
    i = 0
    while i < r:
        members = within[i] & (owner < 0)
        owner[members] = i
        leaders.append(i)
        # the next centre is the next point no earlier centre has taken
        rest = np.flatnonzero(owner[i + 1 :] < 0)
        i = i + 1 + int(rest[0]) if rest.size else r
    return np.asarray(leaders, dtype=np.intp), owner


def shadow_density(
    X,
    radius: float,
    *,
    metric: str = "euclidean",
    center: str = "centroid",
    block_rows: int = _SHADOW_BLOCK,
) -> ReducedSet:
    """Shadow density estimate: one pass, centres eps = ``radius`` apart (Kingravi et al., Alg. 2).

    A point is taken by the *earliest* centre within ``radius`` of it, decided in data order one
    block at a time.  O(m n d) time, no n x n distances.

    Parameters
    ----------
    X : array of shape (n_samples, n_features), or an iterable of row blocks
        The data, visited once in order.
    radius : float
        The shadow radius eps (the paper's sigma / ell), > 0.
    metric : {"euclidean", "manhattan"}
        The distance the kernel is a function of (see :func:`kernel_bandwidth`).
    center : {"centroid", "first"}
        A shadow set's centre: the mean of its points, or (the paper) the point that opened it.
    block_rows : int
        Rows per block.

    Returns
    -------
    ReducedSet
        ``weights`` are the shadow-set sizes |S_j| (sum n), ``labels`` the set of each point.
    """
    radius = check_float("radius", radius, low=0.0, low_open=True)
    if metric not in ("euclidean", "manhattan"):
        raise ValueError(f"metric must be 'euclidean' or 'manhattan', got {metric!r}")
    if center not in SHADOW_CENTERS:
        raise ValueError(f"center must be one of {SHADOW_CENTERS}, got {center!r}")
    # squared distances for the Euclidean metric, so compare with radius^2
    threshold = radius * radius if metric == "euclidean" else radius

    # the centres found so far, in creation order, with their squared norms, set sizes and
    # coordinate sums (grown as new centres appear: O(m d) memory)
    source = as_source(X, accept_sparse=True)
    dtype, n_features = source.dtype, source.n_features
    C, C_sq = np.empty((0, n_features)), np.empty(0)
    counts, sums = np.zeros(0), np.zeros((0, n_features))
    labels: list[np.ndarray] = []
    m = 0
    for _, block in track_rows(source.blocks(block_rows), total=source.n_samples, desc="shadow"):
        # one block at a time: a CSR block is densified, so memory stays one block of rows
        Xb = block.toarray() if sp.issparse(block) else np.asarray(block, dtype=np.float64)
        b = Xb.shape[0]
        owner = np.full(b, -1, dtype=np.intp)
        # 1. the earliest existing centre within the radius (centre chunks in creation order)
        for s in range(0, m, _SHADOW_CENTER_CHUNK):
            todo = np.flatnonzero(owner < 0)
            if todo.size == 0:
                break
            hit = _within(
                Xb[todo],
                C[s : s + _SHADOW_CENTER_CHUNK],
                metric,
                threshold,
                B_sq=C_sq[s : s + _SHADOW_CENTER_CHUNK],
            )
            found = hit.any(axis=1)
            owner[todo[found]] = s + np.argmax(hit[found], axis=1)
        # 2. Algorithm 2 among the points of this block that no earlier centre took
        rest = np.flatnonzero(owner < 0)
        if rest.size:
            within = _within(Xb[rest], Xb[rest], metric, threshold)
            np.fill_diagonal(within, True)
            leaders, local_owner = _leader_pass(within)
            new_ids = np.full(rest.size, -1, dtype=np.intp)
            new_ids[leaders] = m + np.arange(leaders.size)
            owner[rest] = new_ids[local_owner]
            new_centers = Xb[rest[leaders]]
            C = np.concatenate([C, new_centers])
            C_sq = np.concatenate([C_sq, np.einsum("ij,ij->i", new_centers, new_centers)])
            counts = np.concatenate([counts, np.zeros(leaders.size)])
            if center == "centroid":
                sums = np.concatenate([sums, np.zeros((leaders.size, n_features))])
            m += leaders.size
        counts += np.bincount(owner, minlength=m)
        if center == "centroid":
            # per-centre coordinate sums of this block: a sparse one-hot product
            sums += sp.csr_matrix((np.ones(b), (owner, np.arange(b))), shape=(m, b)) @ Xb
        labels.append(owner)
    if m == 0:
        raise ValueError("shadow_density: X has no rows")
    if center == "centroid":
        C = sums / counts[:, None]
    return ReducedSet(
        centers=C.astype(dtype, copy=False), weights=counts, labels=np.concatenate(labels)
    )


# --- the densities that take the number of centres m ----------------------------------------------
def _dense_rows(X, idx) -> np.ndarray:
    """A dense copy of the rows ``X[idx]`` (X an array or a CSR matrix): centres are dense."""
    rows = X[idx]
    return rows.toarray() if sp.issparse(rows) else np.array(rows)


def _check_m(n_centers, n):
    return check_int("n_centers", n_centers, low=1, high=n)


def kmeans_density(
    X, n_centers: int, *, rng: np.random.Generator, minibatch_above: int = 50_000
) -> ReducedSet:
    """k-means centroids weighted by their cluster sizes (Zhang & Kwok 2010's density).

    scikit-learn's ``KMeans`` (one k-means++ start), or ``MiniBatchKMeans`` for more than
    ``minibatch_above`` rows.  Empty clusters are dropped, so there may be fewer than
    ``n_centers`` centres when X has fewer distinct points.
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    n = X.shape[0]
    m = _check_m(n_centers, n)
    seed = int(rng.integers(2**31 - 1))
    if n > minibatch_above:
        km = MiniBatchKMeans(n_clusters=m, batch_size=4096, n_init=1, random_state=seed)
    else:
        km = KMeans(n_clusters=m, n_init=1, random_state=seed)
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        # fewer distinct points than clusters: the empty clusters are dropped below
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = km.fit_predict(X)
    counts = np.bincount(labels, minlength=m).astype(np.float64)
    keep = counts > 0
    relabel = np.cumsum(keep) - 1
    return ReducedSet(
        centers=np.asarray(km.cluster_centers_[keep], dtype=X.dtype),
        weights=counts[keep],
        labels=relabel[labels],
    )


def uniform_density(X, n_centers: int, *, rng: np.random.Generator) -> ReducedSet:
    """``n_centers`` rows drawn uniformly without replacement, each with weight n / m.

    KPCA on this set is the paper's "subsampled KPCA" baseline (Kingravi et al., section 6).
    """
    n = X.shape[0]
    m = _check_m(n_centers, n)
    idx = np.sort(rng.choice(n, size=m, replace=False))
    return ReducedSet(centers=_dense_rows(X, idx), weights=np.full(m, n / m))


def paring_density(
    X,
    n_centers: int,
    kernel: Kernel | None = None,
    *,
    rng: np.random.Generator,
    bandwidth: float = 0.0,
) -> ReducedSet:
    """KDE paring: ``n_centers`` draws from the data's kernel density estimate.

    Freedman & Kisilev (SIAM J. Imaging Sci. 2010), as Kingravi et al. (section 6) describe it:
    m rows drawn uniformly *with* replacement, a row drawn c times weighted c n / m, an unbiased
    estimate of the data's KDE.  ``bandwidth > 0`` adds Gaussian noise of that standard
    deviation per coordinate (draws from the KDE as a density).

    Parameters
    ----------
    kernel : Kernel or None
        Unused; accepted so every density takes the same arguments.
    """
    n, d = X.shape
    m = _check_m(n_centers, n)
    bandwidth = check_float("bandwidth", bandwidth, low=0.0)
    idx = rng.integers(0, n, size=m)
    if bandwidth == 0.0:
        rows, counts = np.unique(idx, return_counts=True)
        return ReducedSet(centers=_dense_rows(X, rows), weights=counts * (n / m))
    noisy = _dense_rows(X, idx).astype(np.float64) + bandwidth * rng.standard_normal((m, d))
    return ReducedSet(centers=noisy.astype(X.dtype, copy=False), weights=np.full(m, n / m))


def herding_density(
    X,
    n_centers: int,
    kernel: Kernel,
    *,
    rng: np.random.Generator,
    n_candidates: int | None = None,
    max_steps: int | None = None,
) -> ReducedSet:
    """Kernel herding: greedy points whose mean embedding tracks the data's (Chen et al. 2010).

    Chen, Welling & Smola (UAI 2010, eq. 7): ``x_{T+1} = argmax_x mu_p(x) - 1 / (T + 1)
    sum_{t <= T} k(x, x_t)`` with ``mu_p(x) = (1/n) sum_i k(x, x_i)``, over ``n_candidates``
    uniform rows (default ``min(n, max(2000, 5 n_centers))``; ``mu_p`` exact, O(n_cand n d)),
    until ``n_centers`` distinct points or ``max_steps`` steps (default ``4 n_centers``).  A
    point chosen c times out of T gets weight c n / T.

    Returns
    -------
    ReducedSet
        At most ``n_centers`` centres.
    """
    n = X.shape[0]
    m = _check_m(n_centers, n)
    n_cand = (
        min(n, max(2000, 5 * m))
        if n_candidates is None
        else check_int("n_candidates", n_candidates, low=m, high=n)
    )
    T_max = 4 * m if max_steps is None else check_int("max_steps", max_steps, low=m)
    cand_idx = np.arange(n) if n_cand == n else np.sort(rng.choice(n, n_cand, replace=False))
    cand = _dense_rows(X, cand_idx).astype(np.float64)
    # mu_p on the candidates: row blocks of X against chunks of candidates
    mu = np.zeros(n_cand)
    for s in range(0, n_cand, _HERDING_CANDIDATE_CHUNK):
        chunk = cand[s : s + _HERDING_CANDIDATE_CHUNK]
        for _, _, Kb in kernel.blocks(X, chunk):
            mu[s : s + chunk.shape[0]] += Kb.sum(axis=0)
    mu /= n
    running = np.zeros(n_cand)  # sum_{t <= T} k(candidate, x_t)
    chosen = np.zeros(n_cand, dtype=np.int64)
    n_distinct = 0
    T = 0
    while n_distinct < m and T < T_max:
        j = int(np.argmax(mu - running / (T + 1)))
        if chosen[j] == 0:
            n_distinct += 1
        chosen[j] += 1
        T += 1
        running += kernel(cand, cand[j : j + 1])[:, 0]
    keep = np.flatnonzero(chosen)
    return ReducedSet(centers=_dense_rows(X, cand_idx[keep]), weights=chosen[keep] * (n / T))
