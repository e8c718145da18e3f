"""Eigensolvers against scipy.linalg.eigh on matrices, operators, sparse and float32 inputs."""

import warnings

import numpy as np
import pytest
import scipy.linalg as la
import scipy.sparse as sp
from scipy.sparse.linalg import aslinearoperator

from fastkpca.metrics import subspace_distance
from fastkpca.solvers import eigh_topk, flip_signs, postprocess_eigen

METHODS = ["dense", "lanczos", "randomized", "orthogonal"]
# dense / lanczos converge to machine precision; the block iterations stop on a residual /
# subspace-change tolerance of 1e-8, which bounds eigenvalue errors by ~tol^2 * lambda_1 and
# eigenvector angles by ~tol / gap.
TOL = {"dense": 1e-10, "lanczos": 1e-9, "randomized": 1e-6, "orthogonal": 1e-6}


@pytest.fixture(scope="module")
def psd():
    rng = np.random.default_rng(0)
    n = 300
    Q, _ = la.qr(rng.standard_normal((n, n)))
    vals = np.concatenate([[50, 40, 30, 20, 10], 5 * 0.9 ** np.arange(n - 5)])
    return (Q * vals) @ Q.T, vals, Q


@pytest.mark.parametrize("method", METHODS)
def test_matches_eigh(psd, method):
    A, vals, Q = psd
    k = 5
    w, V = eigh_topk(A, k, method=method, rng=0)
    np.testing.assert_allclose(w, vals[:k], rtol=TOL[method])
    assert subspace_distance(V, Q[:, :k]) < 10 * TOL[method]
    np.testing.assert_allclose(V.T @ V, np.eye(k), atol=1e-10)
    assert np.all(np.diff(w) <= 0)


@pytest.mark.parametrize("method", ["lanczos", "randomized", "orthogonal"])
@pytest.mark.parametrize("form", ["operator", "sparse", "float32"])
def test_operator_sparse_float32(psd, method, form):
    A, vals, Q = psd
    k = 4
    B = {
        "operator": aslinearoperator(A),
        "sparse": sp.csr_matrix(A),
        "float32": A.astype(np.float32),
    }[form]
    w, V = eigh_topk(B, k, method=method, rng=1)
    tol = 1e-5 if form == "float32" else TOL[method]
    np.testing.assert_allclose(w, vals[:k], rtol=tol)
    assert V.dtype == np.float64


def test_dense_refuses_operator(psd):
    with pytest.raises(ValueError, match="explicit array"):
        eigh_topk(aslinearoperator(psd[0]), 3, method="dense")


@pytest.mark.parametrize("method", METHODS)
def test_deterministic_and_signs(psd, method):
    A, _, _ = psd
    w1, V1 = eigh_topk(A, 3, method=method, rng=7)
    w2, V2 = eigh_topk(A, 3, method=method, rng=7)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(V1, V2)
    idx = np.argmax(np.abs(V1), axis=0)
    assert np.all(V1[idx, np.arange(3)] > 0)


def test_dense_overwrite_saves_copy(psd):
    A = psd[0].copy()
    eigh_topk(A, 3, method="dense", overwrite=True)  # may destroy A; must not raise


def test_postprocess_clips_and_sorts():
    vals = np.array([1e-20, 3.0, -1e-14, 2.0])
    vecs = -np.eye(4)
    # the scale is the uncentered Gram's trace (here 5): 1e-20 is below its rounding, 16 eps 5
    w, V = postprocess_eigen(vals, vecs, scale=5.0)
    np.testing.assert_array_equal(w, [3.0, 2.0, 0.0, 0.0])
    assert np.all(V.max(axis=0) == 1.0)
    assert np.all(flip_signs(np.array([[1.0], [-2.0]])) == [[-1.0], [2.0]])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(k=0), "must be in"),
        (dict(k=301), "must be in"),
        (dict(k=3, method="qr"), "unknown"),
    ],
)
def test_bad_arguments(psd, kwargs, match):
    with pytest.raises(ValueError, match=match):
        eigh_topk(psd[0], **kwargs)


@pytest.mark.parametrize("method", ["lanczos", "randomized", "orthogonal"])
@pytest.mark.parametrize("as_operator", [False, True])
def test_k_near_n_falls_back_to_dense(method, as_operator):
    # ARPACK cannot take k >= n - 1; the iterative methods then form the matrix (n products)
    # and solve it densely, so the result is scipy's to rounding (1e-12 on a 5 x 5 matrix).
    rng = np.random.default_rng(0)
    G = rng.standard_normal((5, 5))
    A = G @ G.T
    ref = la.eigh(A, eigvals_only=True)[::-1]
    op = aslinearoperator(A) if as_operator else A
    for k in (4, 5):
        vals, vecs = eigh_topk(op, k, method=method, rng=0)
        np.testing.assert_allclose(vals, ref[:k], rtol=1e-12)
        np.testing.assert_allclose(A @ vecs, vecs * vals, atol=1e-10)


@pytest.mark.parametrize("method", ["auto", "dense", "lanczos", "randomized", "orthogonal"])
def test_zero_matrix_gives_zero_eigenvalues(method):
    # A zero operator (the centered Gram of identical rows): ARPACK used to fail with error -9.
    vals, vecs = eigh_topk(
        aslinearoperator(np.zeros((50, 50))) if method != "dense" else np.zeros((50, 50)),
        3,
        method=method,
        rng=0,
    )
    np.testing.assert_array_equal(vals, np.zeros(3))
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("method", ["lanczos", "randomized", "orthogonal"])
def test_convergence_warning_when_stopped_early(psd, method):
    from sklearn.exceptions import ConvergenceWarning

    # One iteration cannot resolve a flat spectrum (relative gaps 1e-3) to tol.
    _, _, Q = psd
    flat = (Q * (1.0 - 1e-3 * np.arange(Q.shape[0]))) @ Q.T
    with pytest.warns(ConvergenceWarning, match="before converging"):
        vals, _ = eigh_topk(flat, 5, method=method, rng=0, max_iter=1)
    assert vals.shape == (5,) and np.all(np.isfinite(vals))
    A = psd[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        vals, _ = eigh_topk(A, 5, method=method, rng=0)
    # Converged: the default tolerances give the top eigenvalues to 1e-8 relative (the
    # randomized / orthogonal residual tol; lanczos is tighter).
    ref = la.eigh(A, eigvals_only=True)[::-1][:5]
    np.testing.assert_allclose(vals, ref, rtol=1e-8)


def test_randomized_warns_when_stalled_above_tol(psd):
    from sklearn.exceptions import ConvergenceWarning

    # float32 products carry ~1e-7 relative error, so a 1e-12 residual is out of reach: the
    # iteration stops on the stall (not at max_iter), and says so.
    A = psd[0].astype(np.float32)
    with pytest.warns(ConvergenceWarning, match="without progress at residual"):
        vals, _, n_iter = eigh_topk(
            A, 5, method="randomized", rng=0, tol=1e-12, max_iter=200, return_n_iter=True
        )
    assert n_iter < 200
    # still the float32 answer: ~1e-7 relative, 1e-5 leaves room for the projected round-off
    np.testing.assert_allclose(vals, psd[1][:5], rtol=1e-5)


def test_one_blas_thread_is_shared_between_threads_and_restored():
    # The limit holds in every thread that enters it, also a worker thread after the main
    # thread has used it (threadpoolctl >= 3.6 ignores changes from a thread that is not the
    # "controlling" one: such a limit was void in dask worker threads), stays while another
    # thread still holds it, and the original is back when the last one leaves.
    import threading
    import time

    from threadpoolctl import threadpool_info

    from fastkpca.execution import one_blas_thread

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    original = blas_threads()
    if not original or max(original) == 1:
        pytest.skip("BLAS runs one thread here: nothing to limit")
    seen = {}

    def hold(name, seconds):
        with one_blas_thread():
            time.sleep(seconds)
            seen[name] = blas_threads()

    with one_blas_thread():
        seen["main"] = blas_threads()
    first = threading.Thread(target=hold, args=("first", 0.05))
    second = threading.Thread(target=hold, args=("second", 0.3))
    first.start()
    time.sleep(0.01)
    second.start()  # still inside its limit when the first leaves
    first.join()
    second.join()
    assert seen["main"] == seen["first"] == seen["second"] == [1] * len(original)
    assert blas_threads() == original
