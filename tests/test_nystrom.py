"""NystromKPCA: exact limit, scikit-learn's Nystroem + PCA, landmark methods, streams, contract."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.decomposition import PCA, KernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.kernel_approximation import Nystroem
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from fastkpca import ExactKPCA, NystromKPCA
from fastkpca import kernels as fk
from fastkpca._centering import center_gram_inplace
from fastkpca.metrics import relative_rank_k_error
from fastkpca.statistics.kernel_moments import KernelMoments
from tests.conftest import rel_err


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # The test matrices are small (<= 1000 x 1000): on a shared, loaded machine multi-threaded
    # BLAS spin-waits and makes them 100x slower, so these tests run BLAS single-threaded.
    with threadpool_limits(1):
        yield


@parametrize_with_checks(
    [
        NystromKPCA(n_landmarks=20, random_state=0),
        NystromKPCA(landmarks="rls", n_landmarks=10, random_state=0),
        NystromKPCA(landmarks="kmeans", n_landmarks=8, random_state=0),
        NystromKPCA(covariance="landmarks", random_state=0),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def clusters():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 6)) * 3
    X = np.vstack([c + rng.standard_normal((90, 6)) for c in centers])
    Xn = np.vstack([c + rng.standard_normal((15, 6)) for c in centers])
    return X, Xn


KERNELS = {
    "rbf": dict(kernel="rbf", gamma=0.1),
    "laplacian": dict(kernel="laplacian", gamma=0.1),
    "matern": dict(kernel="matern", gamma=0.1, nu=1.5),
    "polynomial": dict(kernel="polynomial", gamma=0.1, degree=2, coef0=1.0),
    "linear": dict(kernel="linear"),
    "cosine": dict(kernel="cosine"),
}


# --- exact limit ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["all_uniform", "array"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_all_points_as_landmarks_is_exact_kpca(clusters, name, how):
    # With L = X, C W^{-1} C^T = K exactly; the only differences are the eigenvalue floor of W
    # (directions below 1e-10 ||W||, i.e. < 1e-8 of the 4th eigenvalue here) and round-off, so
    # the contract's 1e-6 relative holds with orders of magnitude to spare.
    X, Xn = clusters
    k = 4
    exact = ExactKPCA(k, eigen_solver="dense", **KERNELS[name]).fit(X)
    landmarks = dict(n_landmarks=len(X)) if how == "all_uniform" else dict(landmarks=X)
    model = NystromKPCA(k, random_state=0, **landmarks, **KERNELS[name]).fit(X)
    assert model.n_landmarks_ == len(X) and model.n_samples_seen_ == len(X)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=1e-6)
    assert rel_err(exact.transform(X), model.transform(X)) < 1e-6
    assert rel_err(exact.transform(Xn), model.transform(Xn)) < 1e-6


def test_exact_limit_matches_sklearn_kernel_pca(clusters):
    X, Xn = clusters
    ref = KernelPCA(5, kernel="rbf", gamma=0.1, eigen_solver="dense").fit(X)
    model = NystromKPCA(5, gamma=0.1, landmarks=X).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    assert rel_err(ref.transform(Xn), model.transform(Xn)) < 1e-6


def test_same_landmarks_as_sklearn_nystroem_pca_gives_the_same_transform(clusters):
    # Nystroem + PCA is the same estimator; given Nystroem's landmarks we must agree to
    # round-off.  W is well conditioned here (smallest eigenvalue ~1e-2 of the largest), so
    # neither eigenvalue floor (sklearn's 1e-12 absolute, ours 1e-10 relative) is active.
    X, Xn = clusters
    ny = Nystroem(gamma=0.1, n_components=40, random_state=3)
    pipe = make_pipeline(ny, PCA(4, svd_solver="full")).fit(X)
    model = NystromKPCA(4, gamma=0.1, landmarks=X[ny.component_indices_]).fit(X)
    assert rel_err(pipe.transform(Xn), model.transform(Xn)) < 1e-8
    np.testing.assert_allclose(
        model.eigenvalues_, pipe[-1].explained_variance_ * (len(X) - 1), rtol=1e-8
    )


# --- accuracy -----------------------------------------------------------------------------------
class RankKError:
    """relative_rank_k_error with HGH and its tail computed once for many embeddings."""

    def __init__(self, X, kernel, k):
        self.G = kernel(X)
        center_gram_inplace(self.G)
        top = np.linalg.eigvalsh(self.G)[::-1][:k]
        self.den = np.sqrt(np.sum(self.G**2) - np.sum(top**2))

    def __call__(self, T):
        return float(np.linalg.norm(self.G - T @ T.T) / self.den)


@pytest.fixture(scope="module")
def mixture():
    rng = np.random.default_rng(0)
    d = 8
    centers = rng.standard_normal((6, d)) * 2.5
    return np.vstack(
        [c + rng.standard_normal((160, d)) * rng.uniform(0.3, 1.2, d) for c in centers]
    )


def test_accuracy_at_least_sklearn_nystroem_pca(mixture):
    X = mixture
    gamma, k, c, seeds = 0.05, 5, 40, range(6)
    err = RankKError(X, fk.RBF(gamma), k)
    # the fast helper is the library metric
    T0 = NystromKPCA(k, gamma=gamma, n_landmarks=c, random_state=0).fit(X).transform(X)
    assert err(T0) == pytest.approx(relative_rank_k_error(X, T0, fk.RBF(gamma)), rel=1e-9)

    sk = np.mean(
        [
            err(
                make_pipeline(
                    Nystroem(gamma=gamma, n_components=c, random_state=s), PCA(k)
                ).fit_transform(X)
            )
            for s in seeds
        ]
    )
    ours = {
        m: np.mean(
            [
                err(
                    NystromKPCA(k, gamma=gamma, n_landmarks=c, landmarks=m, random_state=s)
                    .fit(X)
                    .transform(X)
                )
                for s in seeds
            ]
        )
        for m in ("uniform", "kmeans", "rls")
    }
    # Measured (6 seeds): sklearn 1.118, uniform 1.081, kmeans 1.001, rls 1.079.  Uniform landmarks
    # are the same estimator as sklearn's in distribution, so it may not lose by more than the
    # seed-to-seed spread of a 6-seed mean (~3%); the adaptive landmarks must not lose at all.
    assert ours["uniform"] <= 1.03 * sk
    assert ours["kmeans"] <= sk and ours["rls"] <= sk
    assert ours["kmeans"] < 1.01  # k-means centres: within 1% of the optimal rank-k error


def test_error_shrinks_as_landmarks_grow(mixture):
    X = mixture
    err = RankKError(X, fk.RBF(0.05), 5)
    means = [
        np.mean(
            [
                err(NystromKPCA(5, gamma=0.05, n_landmarks=c, random_state=s).fit(X).transform(X))
                for s in range(4)
            ]
        )
        for c in (15, 60, 240)
    ]
    assert means[0] > means[1] > means[2] and means[2] < 1.005


def rare_cluster_data(seed=0):
    """A wide blob of 1000 points plus five tiny far clusters of 10 points each.

    With gamma = 0.5 every tiny cluster is an isolated near-constant block with eigenvalue ~10,
    above all but the blob's three leading eigenvalues (68, 63, 54, then ~10 x 4, then 5.7 ...):
    the top 7 eigenvectors include four that live on 50 of the 1050 points.
    """
    rng = np.random.default_rng(seed)
    blob = rng.standard_normal((1000, 2)) * 0.3
    angles = np.arange(5) * 2 * np.pi / 5
    tiny = [
        5 * np.array([np.cos(a), np.sin(a)]) + 0.05 * rng.standard_normal((10, 2)) for a in angles
    ]
    X = np.vstack([blob] + tiny)
    return X[rng.permutation(len(X))]


def test_rls_and_kmeans_find_rare_structure_uniform_misses():
    X = rare_cluster_data()
    err = RankKError(X, fk.RBF(0.5), 7)
    errors = {
        m: [
            err(
                NystromKPCA(7, gamma=0.5, n_landmarks=50, landmarks=m, random_state=s)
                .fit(X)
                .transform(X)
            )
            for s in range(4)
        ]
        for m in ("uniform", "kmeans", "rls")
    }
    # Uniform puts ~2.4 of 50 landmarks on the rare points and misses clusters (measured
    # errors 1.5-2.2); every k-means / rls fit covers all five (measured 1.00000-1.00001).
    assert np.mean(errors["uniform"]) > 1.4
    assert max(errors["kmeans"]) < 1.01 and max(errors["rls"]) < 1.01


# --- density-weighted Nystrom (Zhang & Kwok) --------------------------------------------------
def test_landmark_covariance_is_zhang_kwok_density_weighted_eigenproblem(clusters):
    # Reference: the weighted eigenproblem on the landmarks, P^{1/2} (I - 1 p^T) W (I - p 1^T)
    # P^{1/2} v = mu v (Zhang & Kwok's S^{1/2} W S^{1/2} with S = n P, centered with the same
    # weights), eigenvalues n mu, and the Nystrom extension of its eigenvectors to new points.
    X, Xn = clusters
    model = NystromKPCA(
        4, gamma=0.3, n_landmarks=25, landmarks="kmeans", covariance="landmarks", random_state=0
    ).fit(X)
    L, p, n = model.landmarks_, model.landmark_weights_, len(X)
    assert np.all(p > 0) and p.sum() == pytest.approx(1.0) and len(np.unique(p)) > 1
    W = fk.RBF(0.3)(L)
    H = np.eye(len(p)) - np.outer(np.ones(len(p)), p)
    A = np.sqrt(p)[:, None] * (H @ W @ H.T) * np.sqrt(p)[None, :]
    mu, V = np.linalg.eigh(A)
    mu, V = mu[::-1][:4], V[:, ::-1][:, :4]
    np.testing.assert_allclose(model.eigenvalues_, n * mu, rtol=1e-9)
    Kn = fk.RBF(0.3)(Xn, L)
    Kn_centered = Kn - (Kn @ p)[:, None] - (p @ W)[None, :] + p @ W @ p
    T_ref = Kn_centered @ (np.sqrt(p)[:, None] * V) / np.sqrt(mu)
    assert rel_err(T_ref, model.transform(Xn)) < 1e-9


def test_landmark_weights_cancel_with_the_data_covariance(clusters):
    # C D (D W D)^{-1} D C^T = C W^{-1} C^T: k-means landmarks with the data covariance are
    # exactly the same model as the same centres given as an (unweighted) array.
    X, Xn = clusters
    km = NystromKPCA(4, gamma=0.3, n_landmarks=25, landmarks="kmeans", random_state=0).fit(X)
    plain = NystromKPCA(4, gamma=0.3, landmarks=km.landmarks_).fit(X)
    np.testing.assert_allclose(km.transform(Xn), plain.transform(Xn), rtol=1e-12, atol=1e-12)


def test_landmark_covariance_with_all_points_and_uniform_weights_is_exact(clusters):
    X, Xn = clusters
    exact = ExactKPCA(4, gamma=0.1).fit(X)
    model = NystromKPCA(4, gamma=0.1, n_landmarks=len(X), covariance="landmarks").fit(X)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, rtol=1e-6)
    assert rel_err(exact.transform(Xn), model.transform(Xn)) < 1e-6


# --- streams of row blocks --------------------------------------------------------------------
def blocks_of(X, size):
    return [X[i : i + size] for i in range(0, len(X), size)]


class Reader:
    """A re-iterable block source (each iteration restarts), like a file reader."""

    def __init__(self, X, size):
        self.X, self.size, self.passes = X, size, 0

    def __iter__(self):
        self.passes += 1
        return iter(blocks_of(self.X, self.size))


def test_stream_uniform_equals_array_fit(clusters):
    # Reservoir sampling draws the same keys in the same row order as the array's uniform
    # sample, so the stream gives the array's landmarks and (to summation-order round-off) model.
    X, Xn = clusters
    ref = NystromKPCA(4, n_landmarks=30, random_state=7).fit(X)
    reader = Reader(X, 41)
    model = NystromKPCA(4, n_landmarks=30, random_state=7).fit(reader)
    assert reader.passes == 2
    np.testing.assert_array_equal(model.landmarks_, ref.landmarks_)
    assert model.n_samples_seen_ == len(X) and model.n_features_in_ == X.shape[1]
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(model.transform(Xn), ref.transform(Xn), rtol=1e-8, atol=1e-10)
    listed = NystromKPCA(4, n_landmarks=30, random_state=7).fit(blocks_of(X, 50))
    np.testing.assert_allclose(listed.transform(Xn), ref.transform(Xn), rtol=1e-8, atol=1e-10)


def test_stream_one_pass_cases(clusters):
    X, Xn = clusters
    L = X[::9]
    ref = NystromKPCA(4, landmarks=L).fit(X)
    one_shot = (b for b in blocks_of(X, 33))
    model = NystromKPCA(4, landmarks=L).fit(one_shot)
    np.testing.assert_allclose(model.transform(Xn), ref.transform(Xn), rtol=1e-8, atol=1e-10)
    # covariance="landmarks" needs only the reservoir pass
    ref = NystromKPCA(4, n_landmarks=30, covariance="landmarks", random_state=1).fit(X)
    model = NystromKPCA(4, n_landmarks=30, covariance="landmarks", random_state=1).fit(
        b for b in blocks_of(X, 33)
    )
    np.testing.assert_allclose(model.transform(Xn), ref.transform(Xn), rtol=1e-8, atol=1e-10)


def test_stream_errors(clusters):
    X, _ = clusters
    with pytest.raises(ValueError, match="one-shot iterator"):
        NystromKPCA(n_landmarks=10).fit(b for b in blocks_of(X, 50))
    for method in ("kmeans", "rls"):
        with pytest.raises(ValueError, match="needs the data in memory"):
            NystromKPCA(landmarks=method).fit(blocks_of(X, 50))

    class Shrinking(Reader):
        def __iter__(self):
            self.passes += 1
            return iter(blocks_of(self.X[: len(self.X) // self.passes], self.size))

    with pytest.raises(ValueError, match="same rows every time"):
        NystromKPCA(n_landmarks=10).fit(Shrinking(X, 50))
    bad = blocks_of(X, 50)
    bad[2] = bad[2][:, :3]
    with pytest.raises(ValueError, match="features"):
        NystromKPCA(n_landmarks=10).fit(bad)
    nan = [b.copy() for b in blocks_of(X, 50)]
    nan[1][0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        NystromKPCA(n_landmarks=10).fit(nan)
    with pytest.raises(ValueError, match="no rows"):
        NystromKPCA(landmarks=X[:5]).fit(iter([]))


def test_dask_array_fit_equals_in_memory_fit(clusters):
    # The same draws on the client and an exact (Chan) merge of per-chunk moments: the dask fit
    # is the in-memory fit up to summation order (1e-8 here, the dask contract is 1e-6).
    da = pytest.importorskip("dask.array")
    import dask

    X, Xn = clusters
    Xd = da.from_array(X, chunks=(37, -1))
    with dask.config.set(scheduler="synchronous"):
        for kw in (
            dict(n_landmarks=30),
            dict(landmarks=X[::7]),
            dict(n_landmarks=30, landmarks="rls", gamma="median"),
        ):
            ref = NystromKPCA(4, random_state=5, **kw).fit(X)
            model = NystromKPCA(4, random_state=5, **kw).fit(Xd)
            np.testing.assert_array_equal(model.landmarks_, ref.landmarks_)
            np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
            lazy = model.transform(da.from_array(Xn, chunks=(10, -1)))
            assert type(lazy).__module__.startswith("dask")
            np.testing.assert_allclose(lazy.compute(), ref.transform(Xn), rtol=1e-8, atol=1e-10)


# --- dtypes, sparse input, determinism, memory ------------------------------------------------
def test_float32_in_float32_out_close_to_float64(clusters):
    # Kernel blocks and all accumulation are float64 for float32 input too; the only float32
    # effect is the data's own rounding (relative 6e-8), so 1e-5 is generous.
    X, Xn = clusters
    m64 = NystromKPCA(4, n_landmarks=50, landmarks="rls", random_state=0).fit(X)
    m32 = NystromKPCA(4, n_landmarks=50, landmarks="rls", random_state=0).fit(X.astype(np.float32))
    assert m32.landmarks_.dtype == np.float32
    T32 = m32.transform(Xn.astype(np.float32))
    assert T32.dtype == np.float32 and m32.transform(Xn).dtype == np.float64
    assert rel_err(m64.transform(Xn), T32) < 1e-5


@pytest.mark.parametrize("landmarks", ["uniform", "kmeans", "rls"])
def test_sparse_input_equals_dense(clusters, landmarks):
    X, Xn = clusters
    Xs = X.copy()
    Xs[np.abs(Xs) < 1.0] = 0.0
    dense = NystromKPCA(3, n_landmarks=20, landmarks=landmarks, random_state=0).fit(Xs)
    sparse = NystromKPCA(3, n_landmarks=20, landmarks=landmarks, random_state=0).fit(
        sp.csr_matrix(Xs)
    )
    np.testing.assert_allclose(sparse.landmarks_, dense.landmarks_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        sparse.transform(sp.csr_matrix(Xn)), dense.transform(Xn), rtol=1e-9, atol=1e-9
    )


@pytest.fixture(scope="module")
def wide_libsvm(tmp_path_factory):
    """A 300-row LIBSVM file of a few kilobytes whose largest feature index is 10**6: 8 MB per
    row when dense.  Its values sit in the first 8 columns (and one at the last index)."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    X = np.round(rng.standard_normal((300, 8)), 2)
    X[np.abs(X) < 0.5] = 0.0
    wide = sp.hstack([sp.csr_matrix(X), sp.csr_matrix((300, 10**6 - 8))], format="csr")
    wide[0, 10**6 - 1] = 1.0
    path = tmp_path_factory.mktemp("libsvm") / "wide.svm"
    dump_svmlight_file(wide, np.zeros(300), str(path))
    dense = np.hstack([X, np.zeros((300, 1))])
    dense[0, -1] = 1.0
    return path, dense


@pytest.mark.parametrize("landmarks", ["uniform", "rls", "rpcholesky"])
@pytest.mark.parametrize("solver", ["exact", "randomized"])
@pytest.mark.parametrize("stream", [True, False], ids=["file", "csr"])
def test_wide_sparse_rows_stay_sparse(wide_libsvm, landmarks, solver, stream):
    """Issue 32: a tiny LIBSVM file of width 10**6 made one fit allocate its landmarks dense (c x
    10**6 float64).  The landmarks stay CSR (only their kernel values are needed), the fit's
    peak memory stays far below one dense row, and the model is that of the dense columns that
    hold the values (the empty columns change no distance)."""
    from sklearn.datasets import load_svmlight_file

    from fastkpca.source.files import open_data

    path, dense = wide_libsvm
    if stream and landmarks != "uniform":
        pytest.skip("rls and rpcholesky need the rows in memory")
    X = open_data(path) if stream else load_svmlight_file(path, n_features=10**6)[0]
    params = dict(n_landmarks=50, landmarks=landmarks, solver=solver, gamma=0.1, random_state=0)
    tracemalloc.start()
    try:
        model = NystromKPCA(3, **params).fit(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sp.issparse(model.landmarks_) and model.landmarks_.shape == (50, 10**6)
    assert model.landmarks_.data.nbytes < 2**12
    # 50 dense landmarks would be 400 MB; what is O(width) here is the index pointer of the
    # kernel's transposed CSR factor (one integer per feature: 4-8 MB)
    assert peak < 16 * 2**20, peak
    reference = NystromKPCA(3, **params).fit(dense)
    rows = load_svmlight_file(path, n_features=10**6)[0]
    # the randomized solver's float32 kernel rows: float32's rounding (sparse rows take the
    # float64 GEMM, rounded; dense ones a float32 GEMM)
    tol = 1e-8 if reference.kernel_row_dtype_ == "float64" else 1e-5
    assert rel_err(reference.transform(dense), model.transform(rows)) < tol


def test_seed_determinism_and_signs(clusters):
    X, Xn = clusters
    a = NystromKPCA(4, n_landmarks=25, landmarks="rls", random_state=3).fit(X)
    b = NystromKPCA(4, n_landmarks=25, landmarks="rls", random_state=3).fit(X)
    c = NystromKPCA(4, n_landmarks=25, landmarks="rls", random_state=4).fit(X)
    np.testing.assert_array_equal(a.transform(Xn), b.transform(Xn))
    assert not np.array_equal(a.landmarks_, c.landmarks_)
    # deterministic signs: the largest-magnitude entry of each principal axis is positive
    idx = np.argmax(np.abs(a.components_), axis=1)
    assert np.all(a.components_[np.arange(4), idx] > 0)
    np.testing.assert_allclose(a.components_ @ a.components_.T, np.eye(4), atol=1e-10)


def test_defaults_and_rank_deficient_landmarks(clusters):
    X, Xn = clusters
    model = NystromKPCA().fit(X)
    assert model.n_landmarks_ == len(X) and model.n_components_ == 10
    # duplicated landmarks make W singular: the floor turns W^{-1/2} into the pseudo-inverse
    # square root, and the model equals the one on the distinct landmarks
    L = X[:20]
    dup = NystromKPCA(3, landmarks=np.vstack([L, L])).fit(X)
    once = NystromKPCA(3, landmarks=L).fit(X)
    np.testing.assert_allclose(dup.eigenvalues_, once.eigenvalues_, rtol=1e-8)
    assert rel_err(once.transform(Xn), dup.transform(Xn)) < 1e-7
    # more components than the rank of W: the extra eigenvalues and projections are 0
    lin = NystromKPCA(8, kernel="linear", n_landmarks=30, random_state=0).fit(X)
    assert np.all(lin.eigenvalues_[6:] == 0) and np.all(lin.transform(Xn)[:, 6:] == 0)


def test_memory_is_blocks_not_n_by_c(monkeypatch):
    # With a 1 MiB working-memory budget the kernel blocks are ~90 rows x 500 landmarks.  An
    # n x c float64 array would be 40000 * 500 * 8 = 160 MB; the c x c matrices (2 MB each, a
    # handful alive at once) and the budget-sized blocks must stay an order of magnitude below.
    monkeypatch.setattr("fastkpca.execution.budget.WORKING_MEMORY_MB", 1)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40000, 5))
    tracemalloc.start()
    model = NystromKPCA(5, n_landmarks=500, random_state=0).fit(X)
    model.transform(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 160e6 / 10


def test_kernel_expansion_protocol_for_compress(clusters):
    # compress_expansion reads the model as k(X, landmarks_) @ coef + offset; with every term
    # kept (rounding=1) the compressed transform is the model's own, to round-off.
    from fastkpca import compress_expansion
    from fastkpca.decomposition.compress import kernel_expansion

    X, Xn = clusters
    model = NystromKPCA(3, gamma=0.1, n_landmarks=40, random_state=0).fit(X)
    ex = kernel_expansion(model)
    assert ex.points.shape == (40, 6) and ex.coef.shape == (40, 3)
    np.testing.assert_allclose(
        ex.kernel(Xn, ex.points) @ ex.coef + ex.offset, model.transform(Xn), rtol=1e-10, atol=1e-12
    )
    compressed = compress_expansion(model, rounding=1.0, random_state=0)
    np.testing.assert_allclose(compressed.transform(Xn), model.transform(Xn), rtol=1e-8, atol=1e-10)
    with pytest.raises(NotFittedError):
        NystromKPCA().kernel_expansion()


# --- properties ---------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(3, 40),
    d=st.integers(1, 5),
    log_gamma=st.floats(-2, 1),
    seed=st.integers(0, 2**16),
)
def test_property_all_landmarks_match_exact_eigenvalues(n, d, log_gamma, seed):
    # Any small data set: all points as landmarks reproduce the exact centered-Gram spectrum
    # to 1e-8 of its largest eigenvalue (round-off of two eigendecompositions plus the 1e-10
    # eigenvalue floor of W).
    X = np.random.default_rng(seed).standard_normal((n, d))
    k = min(3, n)
    exact = ExactKPCA(k, gamma=10.0**log_gamma, eigen_solver="dense").fit(X)
    model = NystromKPCA(k, gamma=10.0**log_gamma, landmarks=X).fit(X)
    scale = max(exact.eigenvalues_[0], 1e-300)
    np.testing.assert_allclose(model.eigenvalues_, exact.eigenvalues_, atol=1e-8 * scale)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 59), max_size=6, unique=True), seed=st.integers(0, 2**16))
def test_property_moments_merge_in_any_split_equals_one_pass(cuts, seed):
    # Chan et al.'s pairwise merge is exact algebra: any partition of the rows into blocks,
    # merged left to right or as a tree, gives the one-pass mean and scatter up to round-off.
    K = np.random.default_rng(seed).random((60, 7))
    edges = [0, *sorted(cuts), 60]
    parts = [
        KernelMoments.empty(7).update(K[a:b].copy())
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]
    left = KernelMoments.empty(7)
    for part in parts:
        left.merge(KernelMoments(part.count, part.mean.copy(), part.scatter.copy()))
    while len(parts) > 1:  # tree reduction, as a Dask reduction would do it
        parts = [
            parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    Kc = K - K.mean(axis=0)
    for m in (left, parts[0]):
        assert m.count == 60
        np.testing.assert_allclose(m.mean, K.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(m.scatter, Kc.T @ Kc, rtol=1e-10, atol=1e-12)


# --- bad input --------------------------------------------------------------------------------
def test_bad_input(clusters):
    X, _ = clusters
    with pytest.raises(NotFittedError):
        NystromKPCA().transform(X)
    with pytest.raises(ValueError, match="n_components=30 is larger"):
        NystromKPCA(30, n_landmarks=20).fit(X)
    with pytest.raises(ValueError, match="unknown landmarks method 'random'"):
        NystromKPCA(landmarks="random").fit(X)
    with pytest.raises(ValueError, match="covariance"):
        NystromKPCA(covariance="full").fit(X)
    with pytest.raises(ValueError, match="n_landmarks"):
        NystromKPCA(n_landmarks=0).fit(X)
    with pytest.raises(ValueError, match="landmarks has 3 features"):
        NystromKPCA(landmarks=X[:5, :3]).fit(X)
    with pytest.raises(ValueError, match="landmarks"):
        NystromKPCA(landmarks=X[:0]).fit(X)
    with pytest.raises(ValueError, match="NaN"):
        NystromKPCA(landmarks=np.full((3, 6), np.nan)).fit(X)
    Xbad = X.copy()
    Xbad[3, 2] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        NystromKPCA().fit(Xbad)
    model = NystromKPCA(2, n_landmarks=10, random_state=0).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:, :4])
