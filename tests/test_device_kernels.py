"""Kernels on device arrays (CPU torch here; CUDA where marked) equal their host blocks.

Every kernel's ``__call__``, ``blocks``, ``fold_rows`` and ``diag`` accept tensors and compute on
their device through :mod:`fastkpca.execution.kernel_ops` (the kernel's one ``_prepare`` /
``_block`` / ``diag``, written over the array namespace).
Tolerances: float64 tiles agree with the host's float64 blocks to 1e-13 relative to the largest
entry (the same float64 products summed in another order: the centered augmented GEMM of the
radial kernels against the host's ``|x|^2 + |y|^2 - 2 x.y``, a few hundred eps of the
exponent's terms, times ``exp``'s derivative <= 1); float32 tiles agree with the host's float32
blocks to :data:`~fastkpca.kernels.FLOAT32_BLOCK_ATOL` (rbf: both are float32 GEMMs within that
bound of the float64 value; the other kernels: both are the float64 value rounded, 6e-8 relative).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fastkpca.execution import elementwise, kernel_ops  # noqa: E402
from fastkpca.kernels import FLOAT32_BLOCK_ATOL, Matern, make_kernel  # noqa: E402

KERNELS = {
    "rbf": {},
    "laplacian": {},
    "matern-0.5": {"nu": 0.5},
    "matern-1.5": {"nu": 1.5},
    "matern-2.5": {"nu": 2.5},
    "matern-inf": {"nu": np.inf},
    "polynomial": {"degree": 3, "coef0": 1.0},
    "linear": {},
    "cosine": {},
    "sigmoid": {"coef0": 0.5},
}


def _kernel(name):
    spec = name.split("-")[0]
    return make_kernel(spec, gamma=0.1, X=np.zeros((2, 5)), **KERNELS[name])


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """CPU torch on one thread: its OpenMP workers spin when the cores are shared (a 300 x 300
    eigh took seconds instead of 15 ms on a loaded two-core machine); results do not depend on
    it beyond rounding."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((230, 5)) + 2.0  # off-centre: the tiles centre the columns
    Y = rng.standard_normal((70, 5)) + 2.0
    return X, Y


def _close(A, B, tol):
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    return float(np.max(np.abs(A - B)) / max(np.max(np.abs(A)), 1e-300)) <= tol


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_call_on_tensors_equals_host(name, rows):
    X, Y = rows
    kernel = _kernel(name)
    assert kernel.namespace_math
    K = kernel(torch.from_numpy(X), torch.from_numpy(Y))
    assert isinstance(K, torch.Tensor) and K.dtype == torch.float64
    assert _close(kernel(X, Y), K.numpy(), 1e-13)
    # the square Gram: exact ones on the diagonal where the host has them
    G = kernel(torch.from_numpy(X)).numpy()
    assert _close(kernel(X), G, 1e-13)
    if kernel._exact_diag_one:
        np.testing.assert_array_equal(np.diag(G), 1.0)
    # float32 rows give a float32 Gram, as on the host
    K32 = kernel(torch.from_numpy(X.astype(np.float32)), torch.from_numpy(Y.astype(np.float32)))
    assert K32.dtype == torch.float32


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", [None, np.float32])
def test_blocks_and_fold_rows_on_tensors_equal_host(name, dtype, rows):
    X, Y = rows
    kernel = _kernel(name)
    host = np.vstack([K for _, _, K in kernel.blocks(X, Y, dtype=dtype)])
    parts = list(kernel.blocks(torch.from_numpy(X), torch.from_numpy(Y), dtype=dtype))
    assert all(isinstance(K, torch.Tensor) for _, _, K in parts)
    device = torch.cat([K for _, _, K in parts]).numpy()
    assert device.dtype == (np.float32 if dtype is np.float32 else np.float64)
    tol = 1e-13 if dtype is None else FLOAT32_BLOCK_ATOL
    assert np.max(np.abs(host.astype(np.float64) - device)) <= tol * max(1.0, np.abs(host).max())

    V = np.random.default_rng(0).standard_normal((Y.shape[0], 3))
    Vt = torch.from_numpy(V)

    def step(state, start, stop, K):
        state.append((start, K @ (Vt if K.dtype == torch.float64 else Vt.float())))

    states = kernel.fold_rows(torch.from_numpy(X), torch.from_numpy(Y), step, list, dtype=dtype)
    KV = torch.cat([p for state in states for _, p in sorted(state, key=lambda s: s[0])])
    assert _close(host.astype(np.float64) @ V, KV.numpy(), 1e-12 if dtype is None else 1e-5)


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_diag_on_tensors_equals_host(name, dtype, rows):
    X, _ = rows
    kernel = _kernel(name)
    d = kernel.diag(torch.from_numpy(X.astype(dtype)))
    assert isinstance(d, torch.Tensor)
    assert d.dtype == (torch.float32 if dtype == np.float32 else torch.float64)
    np.testing.assert_allclose(
        d.numpy(), kernel.diag(X.astype(dtype)), rtol=1e-6 * (dtype == np.float32) + 1e-13
    )


def test_host_columns_meet_device_rows(rows):
    """A host model's rows (columns of the Gram) are moved to the device of the rows asked."""
    X, Y = rows
    kernel = _kernel("rbf")
    K = kernel(torch.from_numpy(X), Y)
    assert isinstance(K, torch.Tensor)
    assert _close(kernel(X, Y), K.numpy(), 1e-13)


def test_matern_of_general_nu_falls_back_to_host_blocks(rows):
    X, Y = rows
    kernel = Matern(gamma=0.1, nu=0.7)
    assert not kernel.namespace_math
    K = kernel(torch.from_numpy(X), torch.from_numpy(Y))
    assert isinstance(K, torch.Tensor)
    assert _close(kernel(X, Y), K.numpy(), 1e-13)


def test_rbf_float32_tiles_are_float32_gemms_within_the_bound(rows):
    """float32 rbf tiles come from a float32 GEMM (not float64 rounded), within the bound."""
    X, Y = rows
    kernel = _kernel("rbf")
    Yt = torch.from_numpy(Y)
    ctx = kernel._prepare(Yt, "float32")
    assert ctx.low and ctx.B.dtype == torch.float32
    T = kernel._block(torch.from_numpy(X), Yt, ctx)
    assert T.dtype == torch.float32
    assert np.max(np.abs(T.numpy() - kernel(X, Y))) <= FLOAT32_BLOCK_ATOL


@pytest.mark.parametrize("name", ["rbf", "matern-1.5", "linear", "polynomial", "cosine"])
def test_overflowing_rows_are_a_value_error(name):
    """Rows whose squared norms overflow float64 raise, as the host's blocks do (not a silent
    nan Gram)."""
    X = np.array([[1e200, 0.0], [-1e200, 0.0], [0.0, 0.0]])
    kernel = _kernel(name)
    with pytest.raises(ValueError, match="too large"):
        kernel(X)
    with pytest.raises(ValueError, match="too large"):
        kernel(torch.from_numpy(X))


def test_tile_helpers():
    A = torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=torch.float64)
    B = elementwise.clip_(A.clone(), high=0.0)
    np.testing.assert_array_equal(B.numpy(), [[0.0, -1.0], [0.0, 0.0]])
    np.testing.assert_allclose(elementwise.exp_(B).numpy(), np.exp([[0.0, -1.0], [0.0, 0.0]]))
    F = elementwise.fill_diagonal_(torch.zeros((2, 3), dtype=torch.float64), 1.0)
    np.testing.assert_array_equal(F.numpy(), np.eye(2, 3))
    X, Y = torch.rand(4, 3, dtype=torch.float64), torch.rand(5, 3, dtype=torch.float64)
    D = elementwise.l1_distances(X, Y).numpy()
    np.testing.assert_allclose(D, np.abs(X.numpy()[:, None] - Y.numpy()[None]).sum(-1), rtol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("dtype", [None, np.float32])
def test_cuda_tiles_equal_cpu_tiles(name, dtype, rows):
    X, Y = rows
    kernel = _kernel(name)
    cpu = torch.cat(
        [K for _, _, K in kernel.blocks(torch.from_numpy(X), torch.from_numpy(Y), dtype=dtype)]
    )
    parts = list(kernel.blocks(torch.from_numpy(X).cuda(), torch.from_numpy(Y).cuda(), dtype=dtype))
    assert all(K.device.type == "cuda" for _, _, K in parts)
    gpu = torch.cat([K for _, _, K in parts]).cpu()
    # float32: the two float32 GEMMs may sum in another order (TF32 is off for float32 matmul by
    # default in torch); each is within FLOAT32_BLOCK_ATOL of the float64 value.
    tol = 1e-12 if dtype is None else 2 * FLOAT32_BLOCK_ATOL
    assert np.max(np.abs(cpu.double().numpy() - gpu.double().numpy())) <= tol


@pytest.mark.parametrize("name", ["rbf", "laplacian", "matern-2.5", "cosine", "polynomial"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_symmetric_matmat_over_many_tiles_equals_the_gram_product(name, dtype, rows):
    """The upper-triangle product (tiles of 37 rows: the last one partial) is ``K @ V``."""
    X, _ = rows
    kernel = _kernel(name)
    V = np.random.default_rng(1).standard_normal((X.shape[0], 4))
    Xt, Vt = torch.from_numpy(X), torch.from_numpy(V)
    KV = kernel_ops.symmetric_kernel_matmat(kernel, Xt, Vt, dtype=dtype, rows=37)
    assert KV.dtype == torch.float64
    full = kernel_ops.kernel_matmat(kernel, Xt, Xt, Vt, dtype=dtype, rows=37)
    # float32 tiles: 6e-8 rounding of each entry, summed over 230 columns
    tol = 1e-13 if dtype == "float64" else 1e-5
    assert _close(kernel(X) @ V, KV.numpy(), tol)
    assert _close(kernel(X) @ V, full.numpy(), tol)


def test_centered_gram_operator_over_many_tiles(rows):
    X, _ = rows
    kernel = _kernel("rbf")
    K = kernel(X)
    n = K.shape[0]
    H = np.eye(n) - 1.0 / n
    V = np.random.default_rng(2).standard_normal((n, 3))
    op = kernel_ops.CenteredGramOperator(torch.from_numpy(X), kernel, rows=50)
    assert _close(H @ K @ H @ V, op.matmat(torch.from_numpy(V)).numpy(), 1e-13)
    np.testing.assert_allclose(op.row_means.numpy(), K.mean(axis=1), rtol=1e-13)
    assert op.n_passes == 1
    assert op.diag_sum() == pytest.approx(n)
