"""The eigensolvers and their linear-algebra primitives on every array namespace against numpy.

``eigh_topk`` is written once over the array namespace, on the primitives of
:mod:`fastkpca.execution.linalg`; numpy, PyTorch CPU tensors and ``array_api_strict`` arrays
(the reference namespace, which takes the device's code paths) must give numpy's eigenpairs, and
so must CUDA tensors (``gpu`` marker).

Tolerances: float64 eigenvalues agree to 1e-10 relative (the dense solves to rounding; the
iterative methods stop at residuals of 1e-8, which leave eigenvalue errors of ~1e-16, and
every namespace starts from the same host draws); eigenvectors agree to 1e-6 in subspace
distance (residual / relative gap, the gaps here >= 0.1) with the same deterministic signs.
float32 matrices: 1e-5 on eigenvalues (float32 products, ~1e-7, over the gaps).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as la
from scipy.sparse.linalg import aslinearoperator
from threadpoolctl import threadpool_info, threadpool_limits

from fastkpca.execution import budget, linalg
from fastkpca.execution.arrays import HOST, Placement, placement_of, to_host
from fastkpca.metrics import subspace_distance
from fastkpca.solvers import NonFiniteError, eigh_topk, postprocess_eigen
from fastkpca.statistics import feature_sketch
from tests.conftest import least_traced_peak, spectrum_matrix

METHODS = ["auto", "dense", "lanczos", "randomized", "orthogonal"]
NAMESPACES = ["numpy", "torch", "array_api_strict", pytest.param("cuda", marks=pytest.mark.gpu)]


def _as(namespace, a):
    """The numpy array ``a`` as an array of ``namespace`` (``cuda``: a CUDA tensor)."""
    if namespace == "numpy":
        return a
    if namespace in ("torch", "cuda"):
        torch = pytest.importorskip("torch")
        pytest.importorskip("array_api_compat")
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.cuda() if namespace == "cuda" else t
    xps = pytest.importorskip("array_api_strict")
    return xps.asarray(a)


def _np(a):
    return np.asarray(to_host(a))


@pytest.fixture(scope="module")
def psd():
    """A 200 x 200 PSD matrix with a gapped top and a geometric tail, and its eigenpairs."""
    vals = np.concatenate([[40.0, 30.0, 20.0, 12.0, 8.0], 4.0 * 0.9 ** np.arange(195)])
    A, Q = spectrum_matrix(vals, seed=3)
    return A, vals, Q


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_eigh_topk_on_every_namespace_equals_numpy(psd, namespace, method, dtype):
    A, vals, Q = psd
    k = 5
    ref_vals, ref_vecs = eigh_topk(A.astype(dtype), k, method=method, rng=0)
    w, V, n_iter = eigh_topk(
        _as(namespace, A.astype(dtype)), k, method=method, rng=0, return_n_iter=True
    )
    assert type(V) is type(_as(namespace, A)) and placement_of(V) == placement_of(_as(namespace, A))
    assert tuple(w.shape) == (k,) and tuple(V.shape) == (A.shape[0], k) and n_iter >= 1
    w, V = _np(w), _np(V)
    assert w.dtype == V.dtype == np.float64
    rtol = 1e-10 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(w, ref_vals, rtol=rtol)
    np.testing.assert_allclose(w, vals[:k], rtol=rtol)
    assert subspace_distance(V, ref_vecs) < (1e-6 if dtype == np.float64 else 1e-3)
    # float32 LAPACK (the dense solve of a float32 matrix in host memory) is orthonormal to ~1e-7
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-10 if dtype == np.float64 else 1e-6)
    # the same deterministic signs as numpy's: each column's largest entry positive
    assert np.all(V[np.argmax(np.abs(V), axis=0), np.arange(k)] > 0)
    if dtype == np.float64:
        np.testing.assert_allclose(V, ref_vecs, atol=1e-6)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("method", ["lanczos", "randomized", "orthogonal"])
def test_k_near_n_and_zero_matrix_on_every_namespace(namespace, method):
    G = np.random.default_rng(0).standard_normal((6, 6))
    A = G @ G.T
    ref = la.eigh(A, eigvals_only=True)[::-1]
    w, V = eigh_topk(_as(namespace, A), 5, method=method, rng=0)
    np.testing.assert_allclose(_np(w), ref[:5], rtol=1e-12)
    w, V = eigh_topk(_as(namespace, np.zeros((40, 40))), 3, method=method, rng=0)
    np.testing.assert_array_equal(_np(w), 0.0)
    np.testing.assert_allclose(_np(V).T @ _np(V), np.eye(3), atol=1e-12)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("method", ["dense", "randomized", "orthogonal", "lanczos"])
def test_nonfinite_matrix_is_a_value_error_on_every_namespace(namespace, method):
    A = np.eye(30)
    A[3, 3] = np.nan
    with pytest.raises(NonFiniteError, match="NaN or infinite"):
        eigh_topk(_as(namespace, A), 2, method=method, rng=0)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_postprocess_on_every_namespace_equals_numpy(namespace):
    vals = np.array([1e-20, 3.0, -1e-14, 2.0])
    vecs = np.random.default_rng(1).standard_normal((6, 4))
    ref_w, ref_V = postprocess_eigen(vals, vecs.copy(), scale=5.0)
    w, V = postprocess_eigen(_as(namespace, vals), _as(namespace, vecs.copy()), scale=5.0)
    np.testing.assert_array_equal(_np(w), ref_w)
    np.testing.assert_array_equal(_np(V), ref_V)
    np.testing.assert_array_equal(ref_w, [3.0, 2.0, 0.0, 0.0])


# --- the primitives -------------------------------------------------------------------------------
@pytest.mark.parametrize("namespace", NAMESPACES)
def test_small_eigh_qr_and_start_block(namespace):
    rng = np.random.default_rng(0)
    B = rng.standard_normal((12, 12))
    H = B + B.T
    theta, Y = linalg.eigh(_as(namespace, H))
    ref = la.eigh(H, eigvals_only=True)[::-1]
    np.testing.assert_allclose(_np(theta), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H @ _np(Y), _np(Y) * _np(theta), atol=1e-10)
    Z = rng.standard_normal((50, 4))
    Q = _np(linalg.qr(_as(namespace, Z)))
    np.testing.assert_allclose(Q.T @ Q, np.eye(4), atol=1e-12)
    assert subspace_distance(Q, Z) < 1e-12
    # the same host draws, so the same start block, on every namespace
    placement = placement_of(_as(namespace, Z))
    start = linalg.start_block(50, 4, np.random.default_rng(5), placement)
    host = linalg.start_block(50, 4, np.random.default_rng(5), HOST)
    assert subspace_distance(_np(start), host) < 1e-12


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_orth_against_drops_directions_in_the_span(namespace):
    rng = np.random.default_rng(0)
    V, _ = la.qr(rng.standard_normal((60, 5)), mode="economic")
    new = rng.standard_normal((60, 2))
    Z = np.concatenate([V @ rng.standard_normal((5, 3)), new], axis=1)  # 3 columns in span(V)
    Z_before = Z.copy()
    Zx = _as(namespace, Z)
    Q = _np(linalg.orth_against(_as(namespace, V), Zx, 1e-10))
    assert Q.shape == (60, 2)
    np.testing.assert_allclose(V.T @ Q, 0.0, atol=1e-12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(2), atol=1e-12)
    assert subspace_distance(Q, new - V @ (V.T @ new)) < 1e-10
    np.testing.assert_array_equal(_np(Zx), Z_before)  # Z is not modified


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("overwrite", [False, True])
def test_dense_topk_and_its_cluster_fallback(psd, namespace, overwrite):
    A, vals, _ = psd
    w, V = linalg.dense_topk(_as(namespace, A.copy()), 3, overwrite=overwrite)
    np.testing.assert_allclose(_np(w), vals[:3][::-1], rtol=1e-12)  # ascending
    # K = I (a cluster of n equal eigenvalues): syevr's inverse iteration may fail; the whole
    # spectrum (syev) then gives k orthonormal eigenvectors
    w, V = linalg.dense_topk(_as(namespace, np.eye(50)), 4, overwrite=overwrite)
    np.testing.assert_allclose(_np(w), 1.0, rtol=1e-14)
    np.testing.assert_allclose(_np(V).T @ _np(V), np.eye(4), atol=1e-12)
    with pytest.raises(ValueError, match="explicit array"):
        linalg.dense_topk(aslinearoperator(A), 3)


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matmat_is_float64_and_checked(namespace, dtype):
    rng = np.random.default_rng(0)
    n = budget.MATMAT_BLOCK_ROWS + 37  # more than one row block on the host
    A = rng.standard_normal((n, n)).astype(dtype)
    V = rng.standard_normal((n, 3))
    out = linalg.matmat(_as(namespace, A), _as(namespace, V))
    assert _np(out).dtype == np.float64
    # a float32 A is multiplied in float32 (V rounded to float32)
    ref = A.astype(np.float64) @ (
        V.astype(np.float32).astype(np.float64) if dtype == np.float32 else V
    )
    np.testing.assert_allclose(
        _np(out), ref, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-3
    )
    A[5, 7] = np.inf
    with pytest.raises(NonFiniteError):
        linalg.matmat(_as(namespace, A), _as(namespace, V))


def test_lanczos_is_block_krylov_off_the_host():
    pytest.importorskip("array_api_strict")
    calls = []

    def krylov(tol, warn):
        calls.append((tol, warn))
        return "values", "vectors", 7

    A = _as("array_api_strict", np.eye(20))
    assert linalg.lanczos(A, 3, np.random.default_rng(0), 1e-10, None, krylov=krylov) == (
        "values",
        "vectors",
        7,
    )
    assert calls == [(None, True)]  # the block solver's own tolerance; ARPACK never ran


def test_the_dense_or_krylov_rule_is_one_table():
    rule = linalg.DENSE_RULE
    torch = pytest.importorskip("torch")
    xp = pytest.importorskip("array_api_compat.torch")
    gpu = Placement(xp=xp, device=torch.device("cuda"), host=False, name="torch:cuda")
    cpu = placement_of(torch.zeros(1))
    for placement, row in ((HOST, "host"), (cpu, "host"), (gpu, "device")):
        max_n = rule[row]["max_n"]
        assert linalg.prefer_dense(max_n, 1, explicit=True, placement=placement)
        assert not linalg.prefer_dense(max_n + 5, 1, explicit=True, placement=placement)
        assert linalg.prefer_dense(20000, 4000, explicit=True, placement=placement)
        assert not linalg.prefer_dense(100, 3, explicit=False, placement=placement)
    arpack = rule["host_arpack"]["max_n"]
    assert linalg.prefer_dense(arpack, 1, explicit=True, iterative="lanczos")
    assert not linalg.prefer_dense(arpack + 5, 1, explicit=True, iterative="lanczos")
    # the host's rule, as ExactKPCA has always taken it: dense up to 1000 rows or k >= n // 5
    assert linalg.prefer_dense(1003, 200, explicit=True)
    assert not linalg.prefer_dense(1003, 199, explicit=True)


def test_krylov_basis_within_its_budget(monkeypatch):
    assert linalg.krylov_basis_columns(1000, 20, 10, HOST) == budget.KRYLOV_MAX_BLOCKS * 20
    monkeypatch.setattr(budget, "KRYLOV_MEMORY_MB", 1)  # 2^20 / (16 * 1000) = 65 columns
    assert linalg.krylov_basis_columns(1000, 20, 10, HOST) == 65
    assert linalg.krylov_basis_columns(10**6, 20, 10, HOST) == 10 + 2 * 20  # never below
    assert linalg.krylov_basis_columns(30, 20, 10, HOST) == 30  # never above n


def _blas_threads() -> set:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_serial_dense_steps_take_blas_threads_only_when_large(monkeypatch):
    # After a threaded BLAS call OpenBLAS's idle threads busy-wait on the cores the next map's
    # threads need (NystromKPCA lost 0.1 s of 0.7 on two cores to the whitening's inverse at
    # c = 1000): below THREADED_BLAS_MIN_FLOPS a serial step holds BLAS to one thread.
    threshold = budget.THREADED_BLAS_MIN_FLOPS
    seen = []
    dtrtri = linalg.lapack.dtrtri
    monkeypatch.setattr(
        linalg.lapack, "dtrtri", lambda *a, **k: (seen.append(_blas_threads()), dtrtri(*a, **k))[1]
    )
    with threadpool_limits(limits=2, user_api="blas"):
        with linalg.small_steps(HOST, threshold / 2):
            assert _blas_threads() == {1}
        with linalg.small_steps(HOST, threshold):
            assert _blas_threads() == {2}
        assert _blas_threads() == {2}
        A, _ = spectrum_matrix(np.linspace(1.0, 2.0, 600))
        N, _ = linalg.whitening(A, 1e-12)
        assert seen == [{1}]  # 600^3 / 3 flops: its triangular inverse on one thread
        monkeypatch.setattr(budget, "THREADED_BLAS_MIN_FLOPS", 1e6)
        linalg.whitening(A, 1e-12)
        assert seen == [{1}, {2}]
    np.testing.assert_allclose(N @ A @ N.T, np.eye(600), atol=1e-10)


@pytest.mark.parametrize("rank", [500, 200])
def test_host_whitening_holds_three_c_by_c_arrays(rank):
    """The pivoted Cholesky's copy of A, then Z and N: the factor is zeroed and inverted in
    place (each further c x c array, a first touch of fresh memory, cost 14-20 ms apiece in
    some NystromKPCA fits at c = 1000; there were five)."""
    B = np.random.default_rng(0).random((500, rank))
    A = B @ B.T + (np.eye(500) if rank == 500 else 0.0)
    N, Z = linalg.whitening(A, 1e-10 * float(np.max(np.diag(A))))
    assert N.shape == Z.shape == (rank, 500)
    np.testing.assert_allclose(N @ A @ N.T, np.eye(rank), atol=1e-6)
    np.testing.assert_allclose(Z, N @ A, atol=1e-8 * np.abs(Z).max())
    assert least_traced_peak(lambda: linalg.whitening(A, 1e-10)) < 3.2 * A.nbytes


def test_a_sketchs_small_eigenproblem_takes_one_blas_thread(monkeypatch):
    # StreamingKPCA's last step after its pass (O(ell^2 m)) waited up to 0.12 s on two cores
    # for BLAS threads that another library's idle threads kept busy.
    seen = []
    qr = feature_sketch.qr
    monkeypatch.setattr(feature_sketch, "qr", lambda A: (seen.append(_blas_threads()), qr(A))[1])
    B = np.random.default_rng(0).standard_normal((20, 200))
    s = B.sum(axis=0)
    with threadpool_limits(limits=2, user_api="blas"):
        vals, _ = feature_sketch.skpca_eigen(B, s, 20, 5)
        assert _blas_threads() == {2}
    assert seen == [{1}]
    exact = np.linalg.eigvalsh(B.T @ B - np.outer(s, s) / 20)[::-1][:5]
    np.testing.assert_allclose(vals, exact, rtol=1e-10)
