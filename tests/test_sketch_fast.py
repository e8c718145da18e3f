"""The fast shrink of FrequentDirections against exact references.

``buffer_gram`` (the buffer's Gram from its orthogonal sketch rows) and ``_stream_shrink``
(the lean shrink of a sketch's own buffer) against ``C @ C.T`` and the general ``_shrink``;
and a whole stream against the definition of Frequent Directions (``fd_shrink`` whenever the
buffer is full).
"""

import numpy as np
import pytest

from fastkpca.sketch import (
    FrequentDirections,
    _shrink,
    _stream_shrink,
    buffer_gram,
    fd_shrink,
)

# float64 products and eigendecompositions of matrices of norm ||G||: backward errors are a few
# eps * ||G|| times a small dimension factor; 1e-12 relative is ~50x above that.
TOL = 1e-12


def sketch_and_rows(rng, ell=6, b=9, m=40, n_before=200):
    """A buffer [B; N]: B the sketch of a decaying stream (orthogonal rows), N new rows."""
    A = rng.standard_normal((n_before, m)) * np.geomspace(3.0, 0.1, m)
    B = FrequentDirections(ell, m, batch_size=b).update(A).sketch()
    N = rng.standard_normal((b, m)) * np.geomspace(3.0, 0.1, m)
    return np.vstack([B, N])


def test_buffer_gram_lower_triangle_is_the_gram(rng):
    ell = 6
    C = sketch_and_rows(rng, ell=ell)
    row_sq = np.einsum("ij,ij->i", C[:ell], C[:ell])
    G = buffer_gram(C, ell, row_sq, out=np.full((C.shape[0],) * 2, np.nan))
    exact = C @ C.T
    lower = np.tril_indices(C.shape[0])
    scale = np.abs(exact).max()
    np.testing.assert_allclose(G[lower], exact[lower], rtol=0, atol=TOL * scale)
    # the sketch rows' block is diagonal (B B^T's off-diagonal is round-off of the shrink)
    assert np.abs(G[:ell, :ell] - np.diag(row_sq)).max() == 0.0


def test_stream_shrink_equals_general_shrink(rng):
    ell, b, m = 6, 9, 40
    A = rng.standard_normal((ell + 20 * b, m)) * np.geomspace(3.0, 0.1, m)
    fd = FrequentDirections(ell, m, batch_size=b).update(A)  # just shrunk: ell rows left
    assert fd._n_kept == ell and fd._filled == ell
    N = rng.standard_normal((b, m)) * np.geomspace(3.0, 0.1, m)
    C = np.vstack([fd.rows(), N])
    row_sq = np.einsum("ij,ij->i", C[:ell], C[:ell])
    args = (fd._loss, fd.squared_norm + np.sum(N * N), fd.total_shrinkage)
    gram = np.empty((ell + b, ell + b))
    B, delta, H, B_sq = _stream_shrink(C, ell, row_sq, *args, gram)
    B_ref, delta_ref, H_ref = _shrink(C, ell, [(0, ell + b, *args)])
    assert B.shape == (ell, m) and delta > 0
    scale = np.sum(C * C)
    # the squared row norms it returns (lambda_i - delta) are those of its rows
    np.testing.assert_allclose(B_sq, np.einsum("ij,ij->i", B, B), rtol=0, atol=TOL * scale)
    np.testing.assert_allclose(delta, delta_ref, rtol=0, atol=TOL * scale)
    np.testing.assert_allclose(B.T @ B, B_ref.T @ B_ref, rtol=0, atol=TOL * scale)
    # H is in the directions of B's rows, whose signs are the eigensolvers' choice
    # (rows: eigenvector round-off eps ||G|| / gap times ||C||; the gaps of this decaying
    # spectrum are >= 1e-3 ||G||, so 1e-9 ||C|| is ample)
    signs = np.sign(np.sum(B * B_ref, axis=1))
    np.testing.assert_allclose(B * signs[:, None], B_ref, rtol=0, atol=1e-9 * np.sqrt(scale))
    np.testing.assert_allclose(H * np.outer(signs, signs), H_ref, rtol=0, atol=TOL * scale)


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
