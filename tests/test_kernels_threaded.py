"""Kernel rows computed in small chunks on all cores (``Kernel.blocks``, ``Kernel.fold_rows``)
and the fused one-pass sketch of NystromKPCA, against float64 and unthreaded references."""

import numpy as np
import pytest
import scipy.sparse as sp

from fastkpca import kernels as fk
from fastkpca.decomposition.nystrom import FLOAT32_KERNEL_RMS
from fastkpca.execution import n_workers
from fastkpca.statistics.covariance_sketch import scatter_sketch
from fastkpca.statistics.kernel_moments import kernel_sketch


class SerialRBF(fk.RBF):
    """The rbf kernel run in the calling thread, in memory-budget blocks (no chunk threads)."""

    parallel_safe = False


def _stack(kernel, X, Y, dtype=None, working_memory_mb=None):
    return np.vstack(
        [K for _, _, K in kernel.blocks(X, Y, dtype=dtype, working_memory_mb=working_memory_mb)]
    )


def _reference(X, Y, gamma):
    """exp(-gamma |x - y|^2) from explicit float64 differences (no |x|^2 + |y|^2 - 2 x.y)."""
    D = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-gamma * D)


def test_chunks_span_shares_and_rows_exactly_once():
    # 300 float32 columns give 873-row chunks: 2000 rows are 3 chunks, shared by the cores.
    rng = np.random.default_rng(0)
    X, L = rng.standard_normal((2000, 5)), rng.standard_normal((300, 5))
    assert fk.kernel_chunk_rows(300, 4) == 2**20 // 1200
    seen = np.zeros(2000, dtype=int)

    def step(state, start, stop, K):
        state.append((start, stop))
        seen[start:stop] += 1
        assert K.shape == (stop - start, 300) and K.dtype == np.float32

    states = fk.RBF(0.3).fold_rows(X, L, step, list, dtype=np.float32)
    assert np.all(seen == 1)
    assert len(states) == min(n_workers(), 3)
    firsts = [state[0][0] for state in states]
    assert firsts == sorted(firsts) and firsts[0] == 0  # the shares' states in row order


@pytest.mark.parametrize("dtype", [None, np.float32])
def test_threaded_blocks_match_the_unthreaded_ones(dtype):
    # Same formulas, other row splits: only the GEMM's blocking can round differently, one
    # unit in the last place of the exponent (x a kernel value <= 1): 1e-13 in float64,
    # a few float32 ulps (6e-8 each) in float32.
    rng = np.random.default_rng(1)
    X, L = rng.standard_normal((1500, 8)), rng.standard_normal((400, 8))
    threaded = _stack(fk.RBF(0.2), X, L, dtype=dtype, working_memory_mb=2)
    serial = _stack(SerialRBF(0.2), X, L, dtype=dtype, working_memory_mb=2)
    assert threaded.dtype == serial.dtype == (np.float32 if dtype else np.float64)
    atol = 5e-7 if dtype else 1e-13
    np.testing.assert_allclose(threaded, serial, rtol=0, atol=atol)
    np.testing.assert_allclose(threaded, _reference(X, L, 0.2), rtol=0, atol=atol)


@pytest.mark.parametrize("kernel", [fk.Laplacian(0.3), fk.Matern(0.3, 2.5), fk.Cosine()])
def test_other_kernels_threaded_against_serial_blocks(kernel):
    # The float64 formulas per chunk of rows: entries depend on their own row only, so other
    # splits round alike up to the GEMM's blocking (float64 ulps).
    rng = np.random.default_rng(2)
    X, L = rng.standard_normal((1200, 6)), rng.standard_normal((350, 6))
    K = _stack(kernel, X, L)
    serial = type(kernel).__new__(type(kernel))
    serial.__dict__.update(kernel.__dict__)
    serial.parallel_safe = False
    np.testing.assert_allclose(K, _stack(serial, X, L), rtol=0, atol=1e-12)


def test_float32_bound_holds_for_rows_far_from_the_landmarks():
    # The float32 exponent's rounding is bounded by the landmarks' spread (RBF._block32): rows
    # far from the centre (gamma |x - c|^2 up to ~2000) have tiny kernel values and tiny
    # errors, while the landmarks (gamma |y - c|^2 up to ~9, near FLOAT32_MAX_SPREAD) set the
    # bound.  Rows near the landmarks carry the largest errors.
    rng = np.random.default_rng(3)
    gamma = 0.1
    L = rng.standard_normal((300, 40)) * 1.1
    near = L[rng.integers(0, 300, 500)] + 0.05 * rng.standard_normal((500, 40))
    far = rng.standard_normal((200, 40)) * 20
    X = np.vstack([near, far])
    Lc = L - L.mean(axis=0)
    spread = gamma * np.max(np.sum(Lc**2, axis=1))
    assert 5 < spread <= fk.FLOAT32_MAX_SPREAD
    K32 = _stack(fk.RBF(gamma), X, L, dtype=np.float32)
    err = K32.astype(np.float64) - _reference(X, L, gamma)
    assert np.max(np.abs(err)) <= fk.FLOAT32_BLOCK_ATOL
    assert np.sqrt(np.mean(err**2)) <= FLOAT32_KERNEL_RMS


def test_wide_landmarks_and_huge_rows_take_the_float64_path():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 5))
    # Landmarks wider than FLOAT32_MAX_SPREAD: float64 blocks, rounded (half a float32 ulp;
    # below float32's normal range the rounding is absolute, 1.4e-45).
    L = rng.standard_normal((40, 5)) * 10
    K32 = _stack(fk.RBF(0.5), X, L, dtype=np.float32)
    np.testing.assert_allclose(K32, _reference(X, L, 0.5), rtol=6e-8, atol=1e-44)
    # Rows whose float32 GEMM would overflow (1e20 entries): the float64 path, exactly 0 here.
    Xh = X.copy()
    Xh[7] = 1e20
    K32 = _stack(fk.RBF(0.5), Xh, X[:30], dtype=np.float32)
    assert np.all(np.isfinite(K32)) and np.all(K32[7] == 0.0)
    # Coordinates beyond float32's range with a tiny gamma (gamma |x - c|^2 small, but the
    # float32 row would be inf): the float64 path, which gets them right.
    Xt = X.copy()
    Xt[3] = 1e40
    K32 = _stack(fk.RBF(1e-82), Xt, X[:30], dtype=np.float32)
    np.testing.assert_allclose(K32, _reference(Xt, X[:30], 1e-82), rtol=6e-8, atol=0)
    # ... and rows beyond float64's range the ValueError of the float64 kernel.
    Xh[7] = 1e200
    with pytest.raises(ValueError, match="too large"):
        _stack(fk.RBF(0.5), Xh, X[:30], dtype=np.float32)


def test_sparse_rows_in_threads():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1000, 6))
    Xs = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0.0))
    L = X[:300]
    K = _stack(fk.RBF(0.2), Xs, L)
    np.testing.assert_allclose(K, _reference(Xs.toarray(), L, 0.2), rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_sketch_matches_the_sketch_of_explicit_kernel_rows(dtype):
    # kernel_sketch computes the kernel rows and their sketch chunk by chunk in threads; the
    # reference sketches the explicit float64 kernel rows in one block.  float64: rounding of
    # sums over 2500 rows (1e-12 relative).  float32: the rows' float32 rounding (rms 2e-7 of
    # values <= 1) and float32 products about the shift, relative to Y's scale: 1e-4.
    rng = np.random.default_rng(6)
    X = rng.standard_normal((2500, 6))
    L = X[rng.choice(2500, 300, replace=False)]
    kernel = fk.RBF(0.15)
    T, _ = np.linalg.qr(rng.standard_normal((300, 12)))
    shift = kernel(L).mean(axis=0)
    blocks = [X[:1100], X[1100:]]
    fused = kernel_sketch(blocks, L, kernel, T, shift, dtype)
    reference = scatter_sketch(_reference(X, L, 0.15), T)
    assert fused.n == 2500
    rtol = 1e-4 if dtype == np.float32 else 1e-11
    scale = np.max(np.abs(reference.Y))
    np.testing.assert_allclose(fused.Y, reference.Y, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(fused.mean, reference.mean, rtol=0, atol=1e-6)
    assert fused.eps == float(np.finfo(dtype).eps)


def test_fused_sketch_threaded_against_serial():
    # The same sketch with the kernel rows computed in the calling thread (one share).
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 5))
    L = X[:250]
    T, _ = np.linalg.qr(rng.standard_normal((250, 10)))
    shift = fk.RBF(0.3)(L).mean(axis=0)
    a = kernel_sketch([X], L, fk.RBF(0.3), T, shift, np.float32)
    b = kernel_sketch([X], L, SerialRBF(0.3), T, shift, np.float32)
    scale = np.max(np.abs(b.Y))
    # float32 products summed in another order: ~1e-6 relative to Y's scale.
    np.testing.assert_allclose(a.Y, b.Y, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-6)
