"""The fast shrink of FrequentDirections against exact references.

``sketch_grams`` (the new rows' block of the buffers' Grams, from their orthogonal sketch rows)
and ``_shrink_factors`` (the streamed shrinks of several buffers at once) against ``C @ C.T``
and the general ``_shrink``, also with a sketch row too short to define a direction; sketches
in lockstep against the same sketches one by one; and a whole stream against the definition of
Frequent Directions (``fd_shrink`` whenever the buffer is full).
"""

import numpy as np
import pytest

from fastkpca.execution import feature_ops, using_n_jobs
from fastkpca.execution.feature_ops import (
    lockstep_chunk_rows,
    lockstep_width,
    sketch_grams,
    stack_sums_of_squares,
    stacked_eigh,
)
from fastkpca.sketch import (
    FrequentDirections,
    _shrink,
    _shrink_factors,
    extend_in_lockstep,
    fd_shrink,
)
from fastkpca.statistics.feature_sketch import FeatureSketch

# float64 products and eigendecompositions of matrices of norm ||G||: backward errors are a few
# eps * ||G|| times a small dimension factor; 1e-12 relative is ~50x above that.
TOL = 1e-12


def sketch_and_rows(rng, ell=6, b=9, m=40, n_before=200):
    """A buffer [B; N]: B the sketch of a decaying stream (orthogonal rows), N new rows."""
    A = rng.standard_normal((n_before, m)) * np.geomspace(3.0, 0.1, m)
    B = FrequentDirections(ell, m, batch_size=b).update(A).sketch()
    N = rng.standard_normal((b, m)) * np.geomspace(3.0, 0.1, m)
    return np.vstack([B, N])


def test_sketch_grams_lower_triangle_is_the_gram(rng):
    ell = 6
    C = np.stack([sketch_and_rows(rng, ell=ell) for _ in range(3)])
    block, extra = sketch_grams(C, ell, np.arange(3.0))
    np.testing.assert_array_equal(extra, [0.0, 1.0, 2.0])
    for j in range(3):
        exact = C[j] @ C[j].T
        scale = np.abs(exact).max()
        lower = np.tril_indices(C.shape[1] - ell, k=ell, m=C.shape[1])
        np.testing.assert_allclose(block[j][lower], exact[ell:][lower], rtol=0, atol=TOL * scale)


def test_stacked_eigh_is_numpy_descending(rng):
    A = rng.standard_normal((5, 7, 30))
    G = A @ A.transpose(0, 2, 1)
    for jobs in (1, 2):
        with using_n_jobs(jobs):
            vals, vecs = stacked_eigh(G)
        for j in range(5):
            w, v = np.linalg.eigh(G[j])
            np.testing.assert_array_equal(vals[j], w[::-1])
            np.testing.assert_array_equal(vecs[j], v[:, ::-1])


def _shrunk_sketch(rng, ell, b, m, short=False):
    A = rng.standard_normal((ell + 20 * b, m)) * np.geomspace(3.0, 0.1, m)
    fd = FrequentDirections(ell, m, batch_size=b).update(A)  # just shrunk: ell rows left
    assert fd._n_kept == ell and fd._filled == ell
    if short:  # a sketch row far too short to define a direction
        fd._buffer[ell - 1] *= 1e-9
        fd._row_sq = None
    return fd


@pytest.mark.parametrize("short", [False, True])
def test_shrink_factors_equal_general_shrink(rng, short):
    ell, b, m = 6, 9, 40
    sketches = [_shrunk_sketch(rng, ell, b, m, short=short and j == 1) for j in range(3)]
    N = rng.standard_normal((3, b, m)) * np.geomspace(3.0, 0.1, m)
    C = np.stack([np.vstack([fd.rows(), N[j]]) for j, fd in enumerate(sketches)])
    row_sq = np.einsum("jik,jik->ji", C[:, :ell], C[:, :ell])
    energy = np.array([fd.squared_norm + np.sum(N[j] * N[j]) for j, fd in enumerate(sketches)])
    shrinkage = np.array([fd.total_shrinkage for fd in sketches])
    loss = np.stack([fd._loss for fd in sketches])
    grams = np.zeros((3, ell + b, ell + b))
    grams[:, np.arange(ell), np.arange(ell)] = row_sq
    grams[:, ell:, :] = sketch_grams(C, ell)[0]
    W, delta, H, B_sq = _shrink_factors(grams, ell, row_sq, loss, energy, shrinkage, m)
    for j, fd in enumerate(sketches):
        B = W[j] @ C[j]
        args = (fd._loss, energy[j], fd.total_shrinkage)
        B_ref, delta_ref, H_ref = _shrink(C[j], ell, [(0, ell + b, *args)])
        assert B.shape == (ell, m) and delta[j] > 0
        scale = np.sum(C[j] * C[j])
        # the squared row norms it returns (lambda_i - delta) are those of its rows
        np.testing.assert_allclose(B_sq[j], np.einsum("ij,ij->i", B, B), rtol=0, atol=TOL * scale)
        np.testing.assert_allclose(delta[j], delta_ref, rtol=0, atol=TOL * scale)
        np.testing.assert_allclose(B.T @ B, B_ref.T @ B_ref, rtol=0, atol=TOL * scale)
        # H is in the directions of B's rows, whose signs are the eigensolvers' choice
        # (rows: eigenvector round-off eps ||G|| / gap times ||C||; the gaps of this decaying
        # spectrum are >= 1e-3 ||G||, so 1e-9 ||C|| is ample)
        signs = np.sign(np.sum(B * B_ref, axis=1))
        np.testing.assert_allclose(B * signs[:, None], B_ref, rtol=0, atol=1e-9 * np.sqrt(scale))
        np.testing.assert_allclose(H[j] * np.outer(signs, signs), H_ref, rtol=0, atol=TOL * scale)


def test_lockstep_equals_one_by_one(rng):
    """Sketches in lockstep (one stacked shrink per round) end exactly where the same sketches
    fed one by one do: the batched steps are the same per-sketch operations."""
    ell, b, m = 5, 8, 30
    A = rng.standard_normal((4, 333, m)) * np.geomspace(2.0, 0.05, m)
    alone = [FrequentDirections(ell, m, batch_size=b) for _ in range(4)]
    for j, fd in enumerate(alone):
        for start in range(0, 333, 50):
            fd.update(A[j, start : start + 50])
    together = [FrequentDirections(ell, m, batch_size=b) for _ in range(4)]
    extend_in_lockstep(together, (A[:, s : s + 50] for s in range(0, 333, 50)))
    for one, many in zip(alone, together, strict=True):
        assert one.n_rows_seen == many.n_rows_seen == 333
        scale = np.sum(one.rows() ** 2)
        R1, R2 = one.rows(), many.rows()
        np.testing.assert_allclose(R2.T @ R2, R1.T @ R1, rtol=0, atol=TOL * scale)
        assert many.total_shrinkage == pytest.approx(one.total_shrinkage, rel=1e-12)
        assert many.squared_norm == pytest.approx(one.squared_norm, rel=1e-12)
        np.testing.assert_allclose(many._loss, one._loss, rtol=0, atol=TOL * scale)


def test_lockstep_primitives_over_namespaces(rng, namespace):
    """The sketches' lockstep primitives on every namespace against numpy: the new rows' Gram
    block and the pending energies in one host result, the stacks' energies, and how many
    sketches go together (on the host a share per thread, at most ``MAX_LOCKSTEP``; elsewhere
    all of them)."""
    ell = 6
    C = np.stack([sketch_and_rows(rng, ell=ell) for _ in range(3)])
    energies = np.einsum("jik,jik->j", C, C)
    C_ns = namespace.to_ns(C)
    sums = stack_sums_of_squares(C_ns)
    assert namespace.is_native(sums)
    np.testing.assert_allclose(namespace.from_ns(sums), energies, rtol=1e-12)
    block, extra = sketch_grams(C_ns, ell, sums)
    assert isinstance(block, np.ndarray) and isinstance(extra, np.ndarray)
    ref, _ = sketch_grams(C, ell)
    lower = np.tril_indices(C.shape[1] - ell, k=ell, m=C.shape[1])
    for j in range(3):
        scale = np.abs(C[j] @ C[j].T).max()
        np.testing.assert_allclose(block[j][lower], ref[j][lower], rtol=0, atol=TOL * scale)
    np.testing.assert_allclose(extra, energies, rtol=1e-12)
    assert sketch_grams(C_ns, ell)[1] is None
    for jobs in (1, 2):
        with using_n_jobs(jobs):
            width = lockstep_width(C_ns, 32)
        if namespace.name == "numpy":
            assert width == min(feature_ops.MAX_LOCKSTEP, -(-32 // jobs))
            assert lockstep_chunk_rows(C_ns, width, 40, 4, 256) == 256
        else:
            assert width == 32
            assert lockstep_chunk_rows(C_ns, width, 40, 4, 256) >= 1


def _feature_sketch(Z, blocks):
    fs = FeatureSketch.empty(5, Z.shape[1])
    for start in range(0, Z.shape[0], blocks):
        fs.update(Z[start : start + blocks])
    return fs


def test_lockstep_grouping_changes_no_sketch(rng, monkeypatch):
    """Which sketches go in lockstep (one at a time, 3, 8, the threads' shares at 1 and 2
    threads) and how the rows come in blocks change no sketch beyond rounding: the model does
    not depend on the thread count."""
    m = 24
    Z = rng.standard_normal((40 * 1024 + 700, m)) * np.geomspace(2.0, 0.05, m)
    runs = []
    for jobs in (1, 2):
        with using_n_jobs(jobs):
            runs.append(_feature_sketch(Z, 5000))
    for width in (1, 3, 8):
        monkeypatch.setattr(feature_ops, "MAX_LOCKSTEP", width)
        with using_n_jobs(1):
            runs.append(_feature_sketch(Z, 9999 if width == 3 else 40 * 1024 + 700))
    ref = runs[0]
    for fs in runs[1:]:
        np.testing.assert_allclose(fs.feature_sum, ref.feature_sum, rtol=1e-12)
        for a, b in zip(ref.parts, fs.parts, strict=True):
            assert a.n_rows_seen == b.n_rows_seen and a._filled == b._filled
            scale = a.squared_norm
            Ra, Rb = a.rows(), b.rows()
            np.testing.assert_allclose(Rb.T @ Rb, Ra.T @ Ra, rtol=0, atol=TOL * scale)
            assert b.total_shrinkage == pytest.approx(a.total_shrinkage, rel=1e-10)
            assert b.squared_norm == pytest.approx(a.squared_norm, rel=1e-12)
            np.testing.assert_allclose(b._loss, a._loss, rtol=0, atol=TOL * scale)


@pytest.mark.parametrize("ell, b", [(5, 10), (8, 3), (4, 25)])
def test_stream_equals_definition(rng, ell, b):
    """The buffered sketch, its shrinkage and its exact loss equal those of the definition:
    a buffer of ell + b rows shrunk by ``fd_shrink`` whenever full."""
    m = 30
    A = rng.standard_normal((700, m)) * np.geomspace(2.0, 0.05, m)
    fd = FrequentDirections(ell, m, batch_size=b)
    for start in range(0, len(A), 37):
        fd.update(A[start : start + 37])
    buf, shrinkage = np.zeros((0, m)), 0.0
    for row in A:
        buf = np.vstack([buf, row])
        if len(buf) == ell + b:
            buf, delta = fd_shrink(buf, ell)
            shrinkage += delta
    scale = np.sum(A * A)
    R = fd.rows()
    assert R.shape == buf.shape
    np.testing.assert_allclose(fd.total_shrinkage, shrinkage, rtol=1e-9, atol=TOL * scale)
    np.testing.assert_allclose(R.T @ R, buf.T @ buf, rtol=0, atol=1e-10 * scale)
    # the exact total loss, and no direction loses more than the total shrinkage
    E = A.T @ A - R.T @ R
    np.testing.assert_allclose(fd.missing_energy, np.trace(E), rtol=1e-9, atol=1e-10 * scale)
    w = np.linalg.eigvalsh((E + E.T) / 2)
    assert w[0] >= -1e-10 * scale and w[-1] <= fd.total_shrinkage + 1e-10 * scale
