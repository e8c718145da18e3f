"""Kernel blocks in float32 (``Kernel.blocks(dtype=np.float32)``) against the float64 blocks."""

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca import kernels as fk
from fastkpca.decomposition.nystrom import FLOAT32_KERNEL_RMS


def _stack(kernel, X, Y, dtype=None):
    return np.vstack([K for _, _, K in kernel.blocks(X, Y, dtype=dtype, working_memory_mb=1)])


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_rbf_float32_blocks_are_within_the_documented_error(offset):
    # gamma |x - centre|^2 ranges up to ~10 here (d = 50, gamma = 1 / 10): the regime the bound
    # FLOAT32_BLOCK_ATOL is stated for.  Rows offset by 1000 (|x|^2 ~ 5e7) would lose everything
    # to cancellation in an uncentered float32 |x|^2 + |y|^2 - 2 x.y; centering at the
    # landmarks' mean keeps the same accuracy.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((700, 50)) * 0.45 + offset
    L = X[:300]
    kernel = fk.RBF(0.1)
    K64 = _stack(kernel, X, L)
    K32 = _stack(kernel, X, L, dtype=np.float32)
    assert K32.dtype == np.float32 and K64.dtype == np.float64
    err = K32.astype(np.float64) - K64
    assert np.max(np.abs(err)) <= fk.FLOAT32_BLOCK_ATOL
    # NystromKPCA's float32 rule assumes an rms error of at most FLOAT32_KERNEL_RMS
    assert np.sqrt(np.mean(err**2)) <= FLOAT32_KERNEL_RMS


def test_other_kernels_and_sparse_rows_round_the_float64_blocks():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((90, 6))
    L = X[:20]
    # float64 values rounded to float32 (half an ulp, 6e-8 relative), computed in chunks of
    # other sizes than the float64 blocks' (another GEMM blocking: float64 ulps).
    for kernel in (fk.Laplacian(0.3), fk.Polynomial(2, 0.2, 1.0), fk.Matern(0.3, 1.5)):
        K64 = _stack(kernel, X, L)
        K32 = _stack(kernel, X, L, dtype=np.float32)
        assert K32.dtype == np.float32
        np.testing.assert_allclose(K32, K64, rtol=7e-8, atol=0)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0.0))
    K64 = _stack(fk.RBF(0.2), Xs, L)
    K32 = _stack(fk.RBF(0.2), Xs, L, dtype=np.float32)
    assert K32.dtype == np.float32
    np.testing.assert_allclose(K32, K64, rtol=7e-8, atol=0)
