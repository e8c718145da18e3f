"""Every kernel and the centering functions on numpy, PyTorch (CPU; CUDA under the ``gpu``
marker) and ``array_api_strict``.

The kernels' math is written once over the array namespace
(:mod:`fastkpca.kernels`, :mod:`fastkpca.execution.kernel_ops`): the same ``_prepare`` /
``_block`` / ``diag`` run in threaded chunks on numpy rows and in tiles on the others.  Each
result is compared with the numpy one, and its type, namespace and dtype follow the input.

Tolerances: float64 blocks agree to 1e-12 relative to the largest entry (the same float64
formulas; only the GEMMs' blocking and summation order differ, a few hundred eps of the
exponent's terms); float32 rbf blocks come from float32 GEMMs on both sides, each within
:data:`~fastkpca.kernels.FLOAT32_BLOCK_ATOL` of the float64 value; the other float32 blocks and
the Gram matrices of float32 rows are float64 values rounded (6e-8 relative, 1e-6 allowed).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca import _centering as centering
from fastkpca.execution import elementwise, kernel_ops, using_n_jobs
from fastkpca.execution.arrays import to_host
from fastkpca.kernels import FLOAT32_BLOCK_ATOL, RBF, Kernel, Matern, make_kernel
from fastkpca.solvers import eigh_topk

KERNELS = {
    "rbf": {},
    "laplacian": {},
    "matern-0.5": {"nu": 0.5},
    "matern-1.5": {"nu": 1.5},
    "matern-2.5": {"nu": 2.5},
    "matern-0.7": {"nu": 0.7},
    "matern-inf": {"nu": np.inf},
    "polynomial": {"degree": 3, "coef0": 1.0},
    "linear": {},
    "cosine": {},
    "sigmoid": {"coef0": 0.5},
}

NAMESPACES = ["torch", "array_api_strict", pytest.param("cuda", marks=pytest.mark.gpu)]


def _kernel(name):
    return make_kernel(name.split("-")[0], gamma=0.1, X=np.zeros((2, 5)), **KERNELS[name])


def _converter(namespace):
    """A function moving numpy arrays to ``namespace`` (skips the test when it is missing)."""
    if namespace in ("torch", "cuda"):
        torch = pytest.importorskip("torch")
        if namespace == "cuda":
            return lambda a: torch.from_numpy(np.asarray(a)).cuda()
        return torch.from_numpy
    xp = pytest.importorskip(namespace)
    return xp.asarray


def _namespace_name(a) -> str:
    """The namespace of an array, ``"cuda"`` for a CUDA tensor."""
    if isinstance(a, np.ndarray):
        return "numpy"
    if getattr(getattr(a, "device", None), "type", None) == "cuda":
        return "cuda"
    return type(a).__module__.split(".")[0]


def _dtype_name(a) -> str:
    return str(a.dtype).rsplit(".", 1)[-1]


def _numpy(a) -> np.ndarray:
    return np.asarray(to_host(a), dtype=np.float64)


def _close(A, B, rtol):
    A, B = _numpy(A), _numpy(B)
    assert A.shape == B.shape
    assert np.max(np.abs(A - B), initial=0.0) <= rtol * max(np.max(np.abs(B), initial=0.0), 1.0)


# CPU torch on one thread: its OpenMP workers spin when the cores are shared (conftest)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((230, 5)) + 2.0  # off-centre: the radial blocks centre the columns
    Y = rng.standard_normal((70, 5)) + 2.0
    return X, Y


@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gram_and_diag_follow_the_input(namespace, name, dtype, rows):
    X, Y = (a.astype(dtype) for a in rows)
    to = _converter(namespace)
    kernel = _kernel(name)
    rtol = 1e-12 if dtype == "float64" else 1e-6
    for args, reference in (((to(X), to(Y)), kernel(X, Y)), ((to(X),), kernel(X))):
        K = kernel(*args)
        assert _namespace_name(K) == namespace and _dtype_name(K) == dtype
        assert reference.dtype == np.dtype(dtype)
        _close(K, reference, rtol)
    if kernel._exact_diag_one:
        np.testing.assert_array_equal(np.diag(_numpy(kernel(to(X)))), 1.0)
    d = kernel.diag(to(X))
    assert _namespace_name(d) == namespace and _dtype_name(d) == dtype
    _close(d, kernel.diag(X), rtol)


@pytest.mark.parametrize("namespace", ["numpy", *NAMESPACES])
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", [None, np.float32])
def test_blocks_and_fold_rows_follow_the_input(namespace, name, dtype, rows):
    X, Y = rows
    to = np.asarray if namespace == "numpy" else _converter(namespace)
    kernel = _kernel(name)
    block_dtype = "float32" if dtype is np.float32 else "float64"
    reference = kernel(X, Y)
    parts = list(kernel.blocks(to(X), to(Y), dtype=dtype))
    assert [(s, e) for s, e, _ in parts][0][0] == 0 and parts[-1][1] == X.shape[0]
    for _, _, K in parts:
        assert _namespace_name(K) == namespace and _dtype_name(K) == block_dtype
    K = np.vstack([_numpy(K) for _, _, K in parts])
    atol = 1e-12 if dtype is None else (FLOAT32_BLOCK_ATOL if name == "rbf" else 1e-6)
    assert np.max(np.abs(K - reference)) <= atol * max(1.0, np.abs(reference).max())

    V = np.random.default_rng(0).standard_normal((Y.shape[0], 3))
    Vb = to(V.astype(block_dtype))

    def step(state, start, stop, K):
        assert _namespace_name(K) == namespace and _dtype_name(K) == block_dtype
        state.append((start, _numpy(K @ Vb)))

    states = kernel.fold_rows(to(X), to(Y), step, list, dtype=dtype)
    KV = np.vstack([p for state in states for _, p in sorted(state, key=lambda s: s[0])])
    _close(KV, reference @ V, 1e-12 if dtype is None else 1e-5)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_float32_rbf_blocks_are_float32_gemms_on_every_namespace(namespace, rows):
    X, Y = rows
    to = _converter(namespace)
    kernel = RBF(0.1)
    host = np.vstack([K for _, _, K in kernel.blocks(X, Y, dtype=np.float32)])
    assert kernel._prepare(Y, "float32").low  # the columns are within FLOAT32_MAX_SPREAD
    ctx = kernel._prepare(to(Y), "float32")
    assert ctx.low and _dtype_name(ctx.B) == "float32"
    T = kernel._block(to(X), to(Y), ctx)
    assert _dtype_name(T) == "float32"
    assert np.max(np.abs(_numpy(T) - kernel(X, Y))) <= FLOAT32_BLOCK_ATOL
    assert np.max(np.abs(_numpy(T) - host)) <= 2 * FLOAT32_BLOCK_ATOL


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("namespace", ["numpy", *NAMESPACES])
@pytest.mark.parametrize("name", ["rbf", "matern-1.5", "linear", "polynomial", "cosine"])
def test_overflowing_rows_are_a_value_error(namespace, name):
    """Rows whose squared norms overflow float64 raise (not a silent nan Gram)."""
    to = np.asarray if namespace == "numpy" else _converter(namespace)
    X = np.array([[1e200, 0.0], [-1e200, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="too large"):
        _kernel(name)(to(X))


def test_host_columns_meet_device_rows(rows):
    """A host model's rows (the Gram's columns) are moved to the rows' device."""
    X, Y = rows
    to = _converter("torch")
    K = RBF(0.1)(to(X), Y)
    assert _namespace_name(K) == "torch"
    _close(K, RBF(0.1)(X, Y), 1e-12)


def test_elementwise_primitives_in_place():
    torch = pytest.importorskip("torch")
    for A in (np.array([[0.5, -1.0], [2.0, 0.0]]), torch.tensor([[0.5, -1.0], [2.0, 0.0]])):
        B = elementwise.clip_(A, high=0.0)
        assert B is A  # in place
        np.testing.assert_array_equal(_numpy(B), [[0.0, -1.0], [0.0, 0.0]])
        np.testing.assert_allclose(_numpy(elementwise.exp_(B)), np.exp([[0.0, -1.0], [0, 0]]))
        F = elementwise.fill_diagonal_(A * 0.0, 1.0)
        np.testing.assert_array_equal(_numpy(F), np.eye(2))
    X, Y = np.random.default_rng(0).random((4, 3)), np.random.default_rng(1).random((5, 3))
    expected = np.abs(X[:, None] - Y[None]).sum(-1)
    for to in (np.asarray, torch.from_numpy, _converter("array_api_strict")):
        np.testing.assert_allclose(_numpy(elementwise.l1_distances(to(X), to(Y))), expected)


def test_sparse_rows_take_the_uncentered_gemm(rows):
    X, Y = rows
    Xs = sp.csr_matrix(np.where(np.abs(X - 2.0) > 1.0, X, 0.0))
    for kernel in (RBF(0.1), Matern(0.1, 2.5), make_kernel("laplacian", gamma=0.1)):
        dense = kernel(Xs.toarray(), Y)
        _close(kernel(Xs, Y), dense, 1e-12)
        _close(kernel(Xs, sp.csr_matrix(Y)), dense, 1e-12)


class _HostOnlyRBF(Kernel):
    """A user's kernel: numpy blocks of float64 (no namespace math), not parallel-safe."""

    name = "host-rbf"

    def _block(self, Xc, Y, ctx):
        D = ((np.asarray(Xc)[:, None, :] - np.asarray(Y)[None, :, :]) ** 2).sum(axis=2)
        return np.exp(-0.1 * D)

    def diag(self, X):
        return np.ones(X.shape[0])


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_kernels_without_namespace_math_run_on_host_copies(namespace, rows):
    X, Y = rows
    to = _converter(namespace)
    for kernel in (_HostOnlyRBF(), Matern(0.1, 0.7)):
        assert not kernel.namespace_math
        K = kernel(to(X), to(Y))
        assert _namespace_name(K) == namespace
        _close(K, kernel(X, Y), 1e-12)
        parts = list(kernel.blocks(to(X), to(Y), dtype=np.float32))
        assert all(_dtype_name(K) == "float32" for _, _, K in parts)
        d = kernel_ops.kernel_diag(kernel, to(X))
        assert _namespace_name(d) == namespace
    _close(_HostOnlyRBF()(X, Y), RBF(0.1)(X, Y), 1e-12)


@pytest.mark.parametrize("namespace", ["numpy", *NAMESPACES])
@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern-2.5", "cosine", "polynomial"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_kernel_products_equal_the_gram_product(namespace, name, dtype, rows):
    """``k(X, X) @ V`` from the upper triangle (strips of 37 rows, the last one partial) and
    from full blocks; float32 strips: 6e-8 rounding of each entry, summed over 230 columns."""
    X, _ = rows
    to = np.asarray if namespace == "numpy" else _converter(namespace)
    kernel = _kernel(name)
    V = np.random.default_rng(1).standard_normal((X.shape[0], 4))
    reference = kernel(X) @ V
    tol = 1e-12 if dtype == "float64" else 1e-5
    KV = kernel_ops.symmetric_kernel_matmat(kernel, to(X), to(V), dtype=dtype, rows=37)
    assert _namespace_name(KV) == namespace and _dtype_name(KV) == "float64"
    _close(KV, reference, tol)
    full = kernel_ops.kernel_matmat(kernel, to(X), to(X), to(V), dtype=dtype, rows=37)
    _close(full, reference, tol)


def test_host_symmetric_product_does_not_depend_on_the_thread_count(rows):
    X, _ = rows
    V = np.random.default_rng(2).standard_normal((X.shape[0], 3))
    results = []
    for n_jobs in (1, 2, 3):
        with using_n_jobs(n_jobs):
            results.append(kernel_ops.symmetric_kernel_matmat(RBF(0.1), X, V, rows=20))
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("namespace", ["numpy", *NAMESPACES])
def test_centered_gram_operator(namespace, rows):
    X, _ = rows
    to = np.asarray if namespace == "numpy" else _converter(namespace)
    kernel = RBF(0.1)
    K = kernel(X)
    n = K.shape[0]
    H = np.eye(n) - 1.0 / n
    V = np.random.default_rng(2).standard_normal((n, 3))
    op = kernel_ops.CenteredGramOperator(to(X), kernel, rows=50)
    HKHV = op.matmat(to(V))
    assert _namespace_name(HKHV) == namespace
    _close(HKHV, H @ K @ H @ V, 1e-12)
    _close(op.row_means, K.mean(axis=1), 1e-12)
    assert op.n_passes == 1
    assert op.diag_sum() == pytest.approx(n)


def test_centered_gram_operator_in_the_host_solver(rows):
    """The host operator is a LinearOperator: block Krylov on it finds the stored Gram's
    eigenpairs (to the solver's tolerance)."""
    X, _ = rows
    kernel = RBF(0.1)
    K = kernel(X)
    centering.center_gram_inplace(K)
    dense_vals, dense_vecs = eigh_topk(K.copy(), 4, method="dense")
    op = kernel_ops.CenteredGramOperator(X, kernel)
    vals, vecs = eigh_topk(op, 4, method="randomized", rng=0, tol=1e-10)
    np.testing.assert_allclose(vals, dense_vals, rtol=1e-9)
    np.testing.assert_allclose(np.abs(vecs.T @ dense_vecs), np.eye(4), atol=1e-6)


# --- centering --------------------------------------------------------------------------------
@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_centering_follows_the_input(namespace, weighted, dtype, rows):
    X, Y = rows
    to = _converter(namespace)
    kernel = RBF(0.1)
    K = kernel(X).astype(dtype)
    K_new = kernel(Y, X).astype(dtype)
    w = np.random.default_rng(4).random(K.shape[0]) if weighted else None
    rtol = 1e-12 if dtype == "float64" else 1e-6

    wn = centering.normalize_weights(None if w is None else to(w), K.shape[0])
    if weighted:
        assert _namespace_name(wn) == namespace and _dtype_name(wn) == "float64"
        _close(wn, centering.normalize_weights(w, K.shape[0]), 1e-14)

    reference_stats = centering.gram_row_stats(K, w)
    stats = centering.gram_row_stats(to(K), None if w is None else to(w))
    assert _namespace_name(stats.col_means) == namespace
    assert _dtype_name(stats.col_means) == "float64"
    _close(stats.col_means, reference_stats.col_means, 1e-12)
    assert stats.total_mean == pytest.approx(reference_stats.total_mean, rel=1e-12)

    Kc, Kd = K.copy(), to(K.copy())
    centering.center_gram_inplace(Kc, w, block=40)
    in_place = centering.center_gram_inplace(Kd, None if w is None else to(w), block=40)
    assert _namespace_name(Kd) == namespace and _dtype_name(Kd) == dtype
    _close(Kd, Kc, rtol)
    _close(in_place.col_means, reference_stats.col_means, 1e-12)

    # out of sample: host statistics (a fitted model's) meet rows on the namespace
    reference = centering.center_gram_out_of_sample(K_new.copy(), reference_stats, w)
    out = centering.center_gram_out_of_sample(to(K_new.copy()), reference_stats, w)
    assert _namespace_name(out) == namespace and _dtype_name(out) == dtype
    _close(out, reference, rtol)


def test_normalize_weights_refuses_bad_weights():
    with pytest.raises(ValueError, match="shape"):
        centering.normalize_weights(np.ones(3), 4)
    with pytest.raises(ValueError, match="non-negative"):
        centering.normalize_weights(np.array([1.0, -1.0]), 2)
    assert centering.normalize_weights(None, 3) is None
    np.testing.assert_allclose(centering.normalize_weights([1, 3], 2), [0.25, 0.75])
