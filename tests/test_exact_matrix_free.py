"""The matrix-free exact path: the Gram recomputed strip by strip in every pass, never stored."""

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import KernelPCA
from sklearn.exceptions import ConvergenceWarning

from fastkpca import ExactKPCA
from fastkpca._centering import center_gram_inplace
from fastkpca.decomposition import exact
from fastkpca.decomposition.exact import exact_kpca, matrix_free_kpca
from fastkpca.execution import budget, using_n_jobs
from fastkpca.execution.arrays import Placement
from fastkpca.execution.kernel_ops import CenteredGramOperator
from fastkpca.kernels import make_kernel
from fastkpca.solvers import eigh_topk
from tests.conftest import rel_err

# CPU torch on one thread (the namespace tests): see conftest.one_torch_thread
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    # three clusters: a clear spectral gap after the leading components
    centers = rng.standard_normal((3, 6)) * 3
    X = np.vstack([c + rng.standard_normal((100, 6)) for c in centers])
    Xn = np.vstack([c + rng.standard_normal((20, 6)) for c in centers])
    return X, Xn


KERNEL_SPECS = [
    dict(spec="rbf", gamma=0.15),
    dict(spec="laplacian", gamma=0.1),
    dict(spec="polynomial", gamma=0.1, degree=3, coef0=1.0),
]


def _centered(K):
    n = K.shape[0]
    H = np.eye(n) - 1.0 / n
    return H @ K @ H


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("rows", [64, 1000])  # 64: 5 strips, the last one partial
@pytest.mark.parametrize("spec", KERNEL_SPECS, ids=lambda s: s["spec"])
def test_operator_equals_the_centered_stored_gram(data, spec, rows, n_threads):
    X, _ = data
    kernel = make_kernel(**spec)
    K = kernel(X)
    V = np.random.default_rng(1).standard_normal((X.shape[0], 7))
    op = CenteredGramOperator(X, kernel, dtype="float64", rows=rows)
    with using_n_jobs(n_threads):
        HKHV = op @ V
        HKHv = op @ V[:, 0]
    # The same float64 sums in another order (and for rbf the exponent from one augmented GEMM
    # instead of ||x||^2 + ||y||^2 - 2 x.y): round-off of order n * eps relative.
    reference = _centered(K) @ V
    np.testing.assert_allclose(HKHV, reference, atol=1e-11 * np.abs(reference).max())
    np.testing.assert_allclose(op.row_means, K.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(HKHv, reference[:, 0], atol=1e-11 * np.abs(reference).max())
    assert op.n_passes == 2


def test_operator_accepts_sparse_rows(data):
    X, _ = data
    Xs = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    kernel = make_kernel("rbf", gamma=0.15)
    V = np.random.default_rng(1).standard_normal((X.shape[0], 3))
    reference = _centered(kernel(Xs)) @ V
    got = CenteredGramOperator(Xs, kernel, dtype="float64", rows=64) @ V
    np.testing.assert_allclose(got, reference, atol=1e-11 * np.abs(reference).max())


def test_operator_statistics_equal_centering_in_place(data):
    X, _ = data
    kernel = make_kernel("rbf", gamma=0.15)
    K = kernel(X)
    stats = center_gram_inplace(K)
    op = CenteredGramOperator(X, kernel, rows=64)
    V = np.random.default_rng(2).standard_normal((X.shape[0], 5))
    np.testing.assert_allclose(op @ V, K @ V, atol=1e-11 * np.abs(K @ V).max())
    np.testing.assert_allclose(op.row_means, stats.col_means, rtol=1e-12)


@pytest.mark.parametrize("spec", KERNEL_SPECS, ids=lambda s: s["spec"])
def test_equals_dense_exact(data, spec):
    X, _ = data
    kernel = make_kernel(**spec)
    k = 5
    vals, vecs, stats, _ = exact_kpca(X, kernel, k, eigen_solver="dense")
    mvals, mvecs, mstats, n_pass = matrix_free_kpca(X, kernel, k, rng=0, rows=64)
    # Stopping rule: Ritz residuals ||H K H v - theta v|| <= 1e-8 lambda_1.  Eigenvalues then
    # err by at most the residual (relative to lambda_1; the true error is its square over the
    # gap), eigenvectors by the residual over the relative gap (>= 1e-2 here): 1e-6 holds with
    # margin.
    np.testing.assert_allclose(mvals, vals, rtol=1e-8 * vals[0] / vals[-1])
    assert rel_err(vecs, mvecs) < 1e-6
    np.testing.assert_allclose(mstats.col_means, stats.col_means, rtol=1e-12)
    assert mstats.total_mean == pytest.approx(stats.total_mean, rel=1e-12)
    assert 1 <= n_pass <= 20


def test_estimator_matches_kernel_pca(data):
    X, Xn = data
    k = 4
    ref = KernelPCA(k, kernel="rbf", gamma=0.15, eigen_solver="dense").fit(X)
    model = ExactKPCA(k, kernel="rbf", gamma=0.15, eigen_solver="matrix_free", random_state=0)
    T = model.fit_transform(X)
    # the 1e-6 agreement of test_equals_dense_exact, scaled to the projections
    assert rel_err(ref.transform(X), T) < 1e-6
    assert rel_err(ref.transform(Xn), model.transform(Xn)) < 1e-6
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    dense = ExactKPCA(k, kernel="rbf", gamma=0.15, eigen_solver="dense").fit(X)
    assert model.total_variance_ == pytest.approx(dense.total_variance_, rel=1e-12)
    np.testing.assert_allclose(model.gram_col_means_, dense.gram_col_means_, rtol=1e-12)


def test_float32_rows_computed_in_float64(data):
    X, Xn = data
    X32 = X.astype(np.float32)
    ref = ExactKPCA(3, gamma=0.15, eigen_solver="dense").fit(X32.astype(np.float64))
    model = ExactKPCA(3, gamma=0.15, eigen_solver="matrix_free", random_state=0).fit(X32)
    T = model.transform(Xn.astype(np.float32))
    assert T.dtype == np.float32
    # float64 tiles of the float32 values: the float64 answer, up to the float32 output cast
    assert rel_err(ref.transform(Xn), T) < 1e-6
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-8)


def _spy(monkeypatch):
    calls = []
    original = exact.matrix_free_kpca

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(exact, "matrix_free_kpca", spy)
    return calls


def test_auto_takes_matrix_free_when_the_gram_does_not_fit(data, monkeypatch):
    X, Xn = data
    calls = _spy(monkeypatch)
    ref = ExactKPCA(4, gamma=0.15, random_state=0).fit(X)
    assert calls == []  # the Gram fits: stored
    monkeypatch.setenv("FASTKPCA_MEMORY", "100000")  # < 300^2 * 8 bytes
    model = ExactKPCA(4, gamma=0.15, random_state=0).fit(X)
    assert calls == [X.shape]
    assert rel_err(ref.transform(Xn), model.transform(Xn)) < 1e-6
    # an explicit stored-Gram solver is refused, pointing to matrix_free
    with pytest.raises(ValueError, match="eigen_solver='matrix_free'"):
        ExactKPCA(4, gamma=0.15, eigen_solver="dense").fit(X)
    # beyond MATRIX_FREE_AUTO_MAX_N auto refuses rather than start hours of passes
    monkeypatch.setattr(budget, "MATRIX_FREE_AUTO_MAX_N", 200)
    with pytest.raises(ValueError, match="NystromKPCA"):
        ExactKPCA(4, gamma=0.15).fit(X)
    assert len(calls) == 1


def test_holds_no_gram(monkeypatch):
    n = 3000
    X = np.random.default_rng(0).standard_normal((n, 5))
    monkeypatch.setattr(budget, "KERNEL_STRIP_BYTES", 2**20)  # strips of 64 rows
    tracemalloc.start()
    ExactKPCA(5, eigen_solver="matrix_free", random_state=0).fit(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # O(n (k + b)): the Krylov basis and its image (at most 6 blocks of 45 vectors each, 2 x 6.5
    # MB), the operator's n x b blocks (the centered block, an accumulator per thread, the
    # product: about 1.1 MB each) and a strip per thread; the Gram would be 72 MB.
    assert peak < 0.35 * n * n * 8, peak / 2**20


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(kernel="precomputed"), "with kernel='precomputed' the Gram is the input"),
        (dict(n_components=0.9), "a float n_components"),
    ],
)
def test_refused(params, match):
    X = np.random.default_rng(0).standard_normal((30, 3))
    with pytest.raises(ValueError, match=match):
        ExactKPCA(eigen_solver="matrix_free", **params).fit(X @ X.T)


def test_warns_when_not_converged(data):
    X, _ = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = ExactKPCA(4, gamma=0.15, eigen_solver="matrix_free", max_iter=1).fit(X)
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught)
    assert model.n_iter_ == 1


# --- every namespace: numpy, PyTorch's CPU, array_api_strict (CUDA under gpu) -------------------
@pytest.mark.parametrize("method", ["randomized", "orthogonal", "lanczos", "auto"])
def test_solvers_on_the_operator_of_every_namespace(namespace, method, data):
    """Every solver on the centered Gram operator of the rows' namespace finds numpy's eigenpairs
    (1e-8: the solvers stop at a residual of 1e-8; "lanczos" is ARPACK on numpy, block Krylov
    elsewhere); it counts the passes, and the first one gave the Gram's row means."""
    X, _ = data
    kernel = make_kernel("rbf", gamma=0.15)
    host_vals, host_vecs = eigh_topk(CenteredGramOperator(X, kernel), 5, method=method, rng=0)
    op = CenteredGramOperator(namespace.to_ns(X), kernel)
    vals, vecs, n_iter = eigh_topk(op, 5, method=method, rng=0, return_n_iter=True)
    assert namespace.is_native(vecs)
    if method != "lanczos":
        assert n_iter == op.n_passes - (method == "orthogonal")  # orthogonal: one more for Ritz
    # ARPACK (numpy) and block Krylov (elsewhere): two solvers, each to its residual tolerance
    tol = 1e-6 if method == "lanczos" and namespace.name != "numpy" else 1e-8
    np.testing.assert_allclose(namespace.from_ns(vals), host_vals, rtol=tol)
    assert rel_err(host_vecs, namespace.from_ns(vecs)) < tol
    np.testing.assert_allclose(namespace.from_ns(op.row_means), kernel(X).mean(axis=1), rtol=1e-12)


def test_float32_strips_are_close_on_every_namespace(namespace, data):
    """Strips in float32 (CenteredGramOperator's option, GEMMs at float32 speed) give the float64
    strips' eigenpairs to float32's rounding over the eigengap."""
    X, _ = data
    kernel = make_kernel("rbf", gamma=0.15)
    rows = namespace.to_ns(X)
    vals, vecs = eigh_topk(CenteredGramOperator(rows, kernel), 4, method="randomized", rng=0)
    op32 = CenteredGramOperator(rows, kernel, dtype="float32")
    vals32, vecs32 = eigh_topk(op32, 4, method="randomized", rng=0, tol=1e-6)
    np.testing.assert_allclose(namespace.from_ns(vals32), namespace.from_ns(vals), rtol=1e-5)
    assert rel_err(namespace.from_ns(vecs), namespace.from_ns(vecs32)) < 1e-4


def test_float32_rows_computed_in_float64_on_every_namespace(namespace, data):
    """One rule everywhere: the matrix-free strips are float64 whatever the rows' dtype, so
    float32 rows give the float64 model of their values (up to the output's cast)."""
    X, Xn = (a.astype(np.float32) for a in data)
    params = dict(gamma=0.15, eigen_solver="matrix_free", random_state=0)
    ref = ExactKPCA(3, **params).fit(X.astype(np.float64))
    model = ExactKPCA(3, **params).fit(namespace.to_ns(X))
    Z = namespace.from_ns(model.transform(namespace.to_ns(Xn)))
    assert Z.dtype == np.float32
    assert rel_err(ref.transform(Xn.astype(np.float64)), Z) < 1e-6
    np.testing.assert_allclose(namespace.from_ns(model.eigenvalues_), ref.eigenvalues_, rtol=1e-10)


def test_auto_goes_matrix_free_where_the_fit_runs(namespace, data, monkeypatch):
    """The stored Gram is checked against the memory where the fit runs (a device's free memory,
    the process's elsewhere): too little, and ``auto`` recomputes it in each pass."""
    X, Xn = data
    calls = _spy(monkeypatch)
    ref = ExactKPCA(4, gamma=0.15, random_state=0).fit(X)
    monkeypatch.setenv("FASTKPCA_MEMORY", "100000")  # < 300^2 * 8 bytes
    # a device's own free memory decides there: as little, yet room for strips of rows
    monkeypatch.setattr(
        Placement, "free_memory_bytes", lambda self: 500_000 if self.is_cuda else None
    )
    model = ExactKPCA(4, gamma=0.15, random_state=0).fit(namespace.to_ns(X))
    assert calls == [X.shape]
    assert namespace.is_native(model.eigenvectors_)
    assert (
        rel_err(ref.transform(Xn), namespace.from_ns(model.transform(namespace.to_ns(Xn)))) < 1e-6
    )
    with pytest.raises(ValueError, match="eigen_solver='matrix_free'"):
        ExactKPCA(4, gamma=0.15, eigen_solver="dense").fit(namespace.to_ns(X))
