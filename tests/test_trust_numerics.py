"""Numbers users read are true, on every CPU and whatever else runs.

Rounding-level eigenvalues are exactly 0 relative to the kernel's scale; eigensolvers that fail
fall back or say why (a ValueError, never an ArpackError or LinAlgError); a kernel matrix that is
numerically the identity or constant is answered correctly and warned about; bad seeds and sizes
that cannot fit are refused up front; a transform does not depend on other threads.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.linalg as la

import fastkpca as fk
from fastkpca import solvers
from fastkpca._centering import center_gram_inplace
from fastkpca.execution import linalg, one_blas_thread
from fastkpca.kernels import DegenerateKernelWarning
from fastkpca.solvers import ROUNDING_FACTOR, eigh_topk, postprocess_eigen

EPS = np.finfo(np.float64).eps
METHODS = ["dense", "lanczos", "randomized", "orthogonal"]
ESTIMATORS = [
    "ExactKPCA",
    "NystromKPCA",
    "RandomFeatureKPCA",
    "StreamingKPCA",
    "ReducedSetKPCA",
    "SparsifiedKPCA",
]


def _centered_identity(n):
    """The centered Gram of rows far apart next to the bandwidth (K = I): H with rounding."""
    K = np.eye(n)
    center_gram_inplace(K)
    return K


# --- 1. rounding-level eigenvalues are 0 relative to the kernel's scale ---------------------
def test_threshold_is_relative_to_the_scale_not_the_largest():
    vecs = np.eye(3)
    # All of them rounding next to a kernel of trace 20 (20 identical rows: the largest,
    # 1.3e-15, is itself rounding): a ratio to the largest would keep it.
    vals, _ = postprocess_eigen(np.array([1.3e-15, 1e-16, -2e-16]), vecs, scale=20.0)
    np.testing.assert_array_equal(vals, 0.0)  # 0 by construction, not computed
    # The same values next to a kernel of trace 1e-4 are above its rounding: kept.
    vals, _ = postprocess_eigen(np.array([1.3e-15, 1e-16, -2e-16]), vecs, scale=1e-4)
    assert vals[0] == 1.3e-15 and vals[1] == 1e-16 and vals[2] == 0.0
    # The threshold is 16 eps scale, at the working precision asked for.
    assert solvers.rounding_threshold(1.0) == ROUNDING_FACTOR * EPS
    assert solvers.rounding_threshold(1.0, eps=1e-7) == ROUNDING_FACTOR * 1e-7


@pytest.mark.parametrize("method", METHODS)
def test_zero_centered_gram_with_rounding_gives_zeros(method):
    # 30 identical rows whose kernel values carry one-ulp rounding (what a GEMM-based distance
    # gives on one CPU and not on another): the centered Gram is rounding, its eigenvalues
    # must be exactly 0 with the kernel's scale (tr K = 30), on every solver.
    n = 30
    noise = np.random.default_rng(0).integers(-1, 2, size=(n, n)) * EPS
    K = np.ones((n, n)) - np.abs(noise + noise.T) / 2
    np.fill_diagonal(K, 1.0)
    scale = float(np.trace(K))
    center_gram_inplace(K)
    vals, vecs = eigh_topk(K, 3, method=method, rng=0, scale=scale)
    np.testing.assert_array_equal(vals, 0.0)
    assert vecs.shape == (n, 3) and np.all(np.isfinite(vecs))


# --- 2. a kernel matrix that is numerically the identity ------------------------------------
@pytest.mark.parametrize("overwrite", [False, True])
def test_dense_solver_falls_back_when_lapack_returns_fewer_pairs(overwrite):
    # LAPACK syevr (inverse iteration on an index range) returns no eigenpair on the centering
    # matrix (eigenvalue 1, n - 1 times); the fallback must give the true pairs, and with
    # overwrite=True rebuild the destroyed triangle first.
    A = _centered_identity(200)
    reference = A.copy()
    vals, vecs = eigh_topk(A, 2, method="dense", overwrite=overwrite, scale=200.0)
    # eigenvalue 1 of H = I - 11^T / n: rounding of the centering, ~1e-15, amplified by 1
    np.testing.assert_allclose(vals, 1.0, rtol=1e-12)
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(reference @ vecs, vecs * vals, atol=1e-12)


def _unscaled():
    return np.random.default_rng(0).standard_normal((200, 5)) * 100


#: (estimator, parameters, rtol of the eigenvalues against 1): 1e-8, the iterative solvers'
#: relative residual tolerance (an eigenvalue error is at most its residual; the dense paths
#: are exact to the centering's rounding, ~1e-15), and for the randomized Nystrom solver's
#: float32 kernel rows (entries within FLOAT32_BLOCK_ATOL = 1e-5 of the float64 ones; measured
#: 1.7e-6 on the eigenvalues) 1e-4.
#: None: the method's answer is not the exact Gram's (k-means centres stand for clusters of
#: isolated points, each counted with its cluster's weight): shape and warning only.
IDENTITY_CASES = [("ExactKPCA", {"eigen_solver": s}, 1e-8) for s in METHODS + ["auto"]] + [
    ("ExactKPCA", {"eigen_solver": "matrix_free"}, 1e-8),
    ("NystromKPCA", {}, 1e-8),
    ("NystromKPCA", {"n_landmarks": 50, "solver": "exact"}, 1e-8),
    ("NystromKPCA", {"n_landmarks": 50, "solver": "randomized"}, 1e-4),
    ("ReducedSetKPCA", {}, 1e-8),
    ("ReducedSetKPCA", {"density": "kmeans", "n_centers": 40, "eigen_solver": "lanczos"}, None),
    ("SparsifiedKPCA", {"sample_prob": 1.0}, 1e-8),
    ("SparsifiedKPCA", {"sample_prob": 1.0, "eigen_solver": "orthogonal"}, 1e-8),
]


@pytest.mark.parametrize("name,params,rtol", IDENTITY_CASES)
def test_identity_kernel_gives_true_eigenvalues_and_warns(name, params, rtol):
    # Columns of scale 100 with gamma = 1 / 5: every off-diagonal rbf value is exp(-2e4) = 0,
    # K = I exactly, and the centered Gram has eigenvalue 1 (n - 1 times): a valid answer, with
    # exactly n_components columns, and a warning naming gamma.  (50 landmarks: the Nystrom
    # Gram is 1 on their diagonal, its centered eigenvalue 1 too.)
    X = _unscaled()
    model = getattr(fk, name)(n_components=2, random_state=0, **params)
    with pytest.warns(DegenerateKernelWarning, match="gamma=0.2 .* identity.*gamma='scale'"):
        T = model.fit_transform(X)
    assert model.n_components_ == 2 and T.shape == (200, 2) == model.transform(X).shape
    assert np.all(np.isfinite(T)) and np.all(np.isfinite(model.eigenvalues_))
    if rtol is not None:
        np.testing.assert_allclose(model.eigenvalues_, 1.0, rtol=rtol)


@pytest.mark.parametrize("name", ["RandomFeatureKPCA", "StreamingKPCA"])
def test_identity_kernel_random_features_warn(name):
    # Random features estimate the identity's eigenvalues (1) with Monte Carlo error; the mean
    # embedding they estimate is that of an identity kernel within its standard error.
    model = getattr(fk, name)(n_components=2, n_random_features=400, random_state=0)
    with pytest.warns(DegenerateKernelWarning, match="identity.*gamma"):
        T = model.fit_transform(_unscaled())
    assert T.shape == (200, 2) and np.all(np.isfinite(T))


@pytest.mark.parametrize(
    "name,params",
    [(name, {}) for name in ESTIMATORS]
    + [("ExactKPCA", {"eigen_solver": s}) for s in METHODS + ["matrix_free"]]
    + [
        ("NystromKPCA", {"n_landmarks": 50, "solver": "randomized"}),
        ("RandomFeatureKPCA", {"solver": "countsketch"}),
        ("ReducedSetKPCA", {"eigen_solver": "lanczos"}),
        ("SparsifiedKPCA", {"eigen_solver": "orthogonal", "quantize": True}),
    ],
)
def test_constant_data_gives_zero_model_and_warns(name, params):
    X = np.full((200, 5), 3.0)
    model = getattr(fk, name)(n_components=1, random_state=0, **params)
    with pytest.warns(DegenerateKernelWarning, match="constant.*gamma"):
        T = model.fit_transform(X)
    np.testing.assert_array_equal(model.eigenvalues_, 0.0)  # 0 by construction
    assert T.shape == (200, 1)


def test_kernel_pca_identity_kernel():
    # the drop-in: the same dense fallback (scikit-learn's own solver returns garbage here)
    model = fk.KernelPCA(n_components=2, kernel="rbf")
    T = model.fit_transform(_unscaled())
    assert T.shape == (200, 2)
    np.testing.assert_allclose(model.eigenvalues_, 1.0, rtol=1e-9)


def test_structured_data_does_not_warn(recwarn):
    X = np.random.default_rng(0).standard_normal((200, 5))
    for name in ESTIMATORS:
        getattr(fk, name)(n_components=2, random_state=0).fit(X)
    assert not [w for w in recwarn if issubclass(w.category, DegenerateKernelWarning)]


# --- 3. no ArpackError, LinAlgError or numpy error reaches a user ---------------------------
@pytest.mark.parametrize("name", ["RandomFeatureKPCA", "StreamingKPCA"])
def test_huge_gamma_random_features_valueerror(name):
    X = np.random.default_rng(0).standard_normal((200, 5))
    with pytest.raises(ValueError, match=r"gamma=1e\+300 is too large"):
        getattr(fk, name)(n_components=2, gamma=1e300, random_state=0).fit(X)


@pytest.mark.parametrize("name", ["ExactKPCA", "NystromKPCA", "ReducedSetKPCA", "SparsifiedKPCA"])
def test_huge_gamma_kernel_methods_warn(name):
    X = np.random.default_rng(0).standard_normal((200, 5))
    model = getattr(fk, name)(n_components=2, gamma=1e300, random_state=0)
    with pytest.warns(DegenerateKernelWarning, match=r"gamma=1e\+300"):
        model.fit(X)
    np.testing.assert_allclose(model.eigenvalues_, 1.0, rtol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_nonfinite_matrix_is_a_valueerror(method):
    A = np.eye(50)
    A[3, 4] = A[4, 3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        eigh_topk(A, 2, method=method, rng=0)


def test_arpack_failure_falls_back(monkeypatch):
    # Any ARPACK error but -9 (A = 0): the block Krylov solver, which needs no Arnoldi
    # factorization, gives the pairs (here as exact as the dense solver's, to 1e-8).
    from scipy.sparse.linalg import ArpackError

    def broken(*args, **kwargs):
        raise ArpackError(-9999)

    monkeypatch.setattr(linalg, "eigsh", broken)
    B = np.random.default_rng(0).standard_normal((100, 8))
    A = B @ B.T
    vals, vecs = eigh_topk(A, 3, method="lanczos", rng=0)
    np.testing.assert_allclose(vals, la.eigvalsh(A)[::-1][:3], rtol=1e-8)


# --- 4. bad seeds ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 1.5, "abc", True])
@pytest.mark.parametrize("name", ESTIMATORS + ["KernelPCA"])
def test_invalid_random_state_is_a_valueerror(name, seed):
    X = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(ValueError, match="random_state must be None, a non-negative int"):
        getattr(fk, name)(n_components=2, random_state=seed).fit(X)


def test_invalid_seed_of_the_building_blocks():
    with pytest.raises(ValueError, match="rng must be"):
        eigh_topk(np.eye(5), 1, rng=-3)
    X = np.random.default_rng(0).standard_normal((30, 3))
    model = fk.ExactKPCA(2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="random_state must be"):
        fk.compress_expansion(model, rounding=0.5, random_state=-1)


# --- 5. sizes that cannot fit are refused up front ---------------------------------------------
@pytest.fixture
def little_memory(monkeypatch):
    monkeypatch.setenv("FASTKPCA_MEMORY", "100K")


@pytest.mark.parametrize(
    "make,match",
    [
        (
            lambda: fk.RandomFeatureKPCA(2, n_random_features=10**9),
            "n_random_features=1000000000: a",
        ),
        (
            lambda: fk.RandomFeatureKPCA(2, n_random_features=10**9, solver="exact"),
            r"n_random_features=1000000000: the 1000000000 x 1000000000 feature covariance",
        ),
        (
            lambda: fk.RandomFeatureKPCA(
                2, n_random_features=100, solver="countsketch", n_buckets=10**6
            ),
            "n_buckets=1000000 and n_random_features=100",
        ),
        (
            lambda: fk.RandomFeatureKPCA(
                2, n_random_features=20, fit_inverse_transform=True, n_inverse_samples=300
            ),
            "n_inverse_samples=300",
        ),
        (
            lambda: fk.StreamingKPCA(2, n_random_features=10**9),
            "n_random_features=1000000000: 500000000 random",
        ),
        (lambda: fk.NystromKPCA(2, n_landmarks=250), "n_landmarks=250: the 250 x 250"),
        (
            lambda: fk.NystromKPCA(2, n_landmarks=35, landmarks="rpcholesky"),
            "landmarks='rpcholesky': its 300 x 35 factor",
        ),
        (lambda: fk.ReducedSetKPCA(2, density="kmeans", n_centers=250), "n_centers=250"),
        (lambda: fk.SparsifiedKPCA(2, sample_prob=1.0), "sample_prob=1.0: the sampled Gram"),
        (lambda: fk.ExactKPCA(2, eigen_solver="dense"), "ExactKPCA's 300 x 300 Gram matrix"),
    ],
)
def test_sizes_that_cannot_fit_are_refused_up_front(little_memory, make, match):
    X = np.random.default_rng(0).standard_normal((300, 4))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match) as err:
        make().set_params(random_state=0).fit(X)
    assert "needs" in str(err.value) and "of memory available here" in str(err.value)
    assert time.perf_counter() - start < 2.0  # refused, not attempted


def test_projection_dim_that_cannot_fit(monkeypatch):
    X = np.random.default_rng(0).standard_normal((100, 4))
    model = fk.ExactKPCA(2, random_state=0).fit(X)
    monkeypatch.setenv("FASTKPCA_MEMORY", "100K")
    with pytest.raises(ValueError, match="projection_dim=100000: the 4 x 100000"):
        fk.compress_expansion(model, projection_dim=10**5, random_state=0)


# --- 6. a transform does not depend on other threads ------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        # (StreamingKPCA transforms by the same feature_projection)
        lambda: fk.RandomFeatureKPCA(5, n_random_features=1000, random_state=0),
        lambda: fk.NystromKPCA(5, n_landmarks=300, random_state=0),
        lambda: fk.ExactKPCA(5, random_state=0),
        lambda: fk.ReducedSetKPCA(5, density="kmeans", n_centers=200, random_state=0),
    ],
)
def test_concurrent_transforms_equal_the_single_threaded_one(make):
    # Four threads transform the same rows at once.  A BLAS thread limit is process-wide: a
    # product that one transform ran outside the limit another one held summed in another
    # order (2e-7 relative for the float32 feature products, measured).  Every product of a
    # transform now runs at one BLAS thread, so the result is the single-threaded one.  The
    # tolerance is far below float32 rounding (6e-8: any reordering of the float32 products
    # fails it) and far above float64's (1e-16): deterministic paths give equal arrays.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1500, 20))
    model = make().fit(X[:600])
    reference = model.transform(X)
    barrier = threading.Barrier(4)

    def run(_):
        barrier.wait()
        return [model.transform(X) for _ in range(2)]

    with ThreadPoolExecutor(4) as pool:
        results = [T for batch in pool.map(run, range(4)) for T in batch]
    scale = float(np.max(np.abs(reference)))
    for T in results:
        np.testing.assert_allclose(T, reference, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize(
    "make",
    [
        lambda: fk.RandomFeatureKPCA(5, n_random_features=1000, random_state=0),
        lambda: fk.NystromKPCA(5, n_landmarks=300, random_state=0),
        lambda: fk.ExactKPCA(5, random_state=0),
    ],
)
def test_transform_ignores_another_threads_blas_limit(make):
    # The deterministic form of the race above: another thread holds the process-wide BLAS
    # limit (as a concurrent transform's feature chunks do) for the whole transform.  Before,
    # the projection ran at one BLAS thread here and at all of them for the reference: 2.6e-7
    # apart.  Tolerance as above.
    X = np.random.default_rng(0).standard_normal((3000, 20))
    model = make().fit(X[:600])
    reference = model.transform(X)
    entered, release = threading.Event(), threading.Event()

    def hold():
        with one_blas_thread():
            entered.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait()
    try:
        T = model.transform(X)
    finally:
        release.set()
        holder.join()
    scale = float(np.max(np.abs(reference)))
    np.testing.assert_allclose(T, reference, rtol=0, atol=1e-12 * scale)
