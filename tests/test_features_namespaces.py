"""Feature maps and Frequent Directions over array namespaces: numpy, PyTorch CPU tensors and
``array_api_strict`` (the reference namespace) give the numpy results.

Every map's ``__call__`` and ``feature_projection``, and a Frequent Directions sketch fed,
merged and read, are written once over the rows' namespace; only the row chunks (512 rows on
the host's threads, larger ones elsewhere) and the element-wise primitives of
:mod:`fastkpca.execution.elementwise` differ.  Tolerances: float64 results 1e-10 relative
(the order of float64 sums); features computed in float32 (the Fourier maps, any float32
input) 1e-5 relative: other chunkings shift other chunks by their own means and other libraries
round cos / sin differently, ~1e-6 of the features' size 1 / sqrt(D).
"""

from __future__ import annotations

import numpy as np
import pytest

from fastkpca.datasets import make_random_noisy
from fastkpca.execution.arrays import to_host
from fastkpca.features import draw_feature_map, feature_projection
from fastkpca.kernels import RBF, Matern, Polynomial
from fastkpca.sketch import FrequentDirections

torch = pytest.importorskip("torch")
xps = pytest.importorskip("array_api_strict")

FLOAT64_RTOL = 1e-10
FLOAT32_RTOL = 1e-5

KERNELS = {
    "rff": RBF(0.05),
    "orf": RBF(0.05),
    "qmc": Matern(0.05, nu=1.5),
    "fastfood": Matern(0.05, nu=1.5),
    "tensorsketch": Polynomial(degree=3, gamma=0.1, coef0=1.0),
}

#: namespace name -> (numpy array -> array of that namespace, its array type)
NAMESPACES = {
    "torch": (torch.from_numpy, torch.Tensor),
    "array_api_strict": (xps.asarray, type(xps.asarray([1.0]))),
}


def _rel(expected, got) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    got = np.asarray(to_host(got), dtype=np.float64)
    return float(np.max(np.abs(expected - got)) / np.max(np.abs(expected)))


@pytest.fixture(scope="module")
def rows():
    return make_random_noisy(700, 13, signal_dim=4, zeta=10, random_state=5)


def _map(kind, **kw):
    return draw_feature_map(kind, KERNELS[kind], 96, 13, np.random.default_rng(3), **kw)


def _tolerance(fmap, dtype) -> float:
    float64 = fmap.feature_dtype(dtype) == np.float64 and dtype == np.float64
    return FLOAT64_RTOL if float64 else FLOAT32_RTOL


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", [*sorted(KERNELS), "rff_input_sketch", "rff_offset"])
def test_feature_map_over_namespaces_equals_numpy(kind, dtype, namespace, rows):
    convert, array_type = NAMESPACES[namespace]
    if kind == "rff_input_sketch":
        fmap = _map("rff", input_sketch=6)
    else:
        fmap = _map(kind.removesuffix("_offset"))
    X = (rows + 1e4 if kind == "rff_offset" else rows).astype(dtype)
    expected = fmap(X)
    Z = fmap(convert(X))
    assert isinstance(Z, array_type) and Z.shape == expected.shape
    assert str(Z.dtype).rsplit(".", 1)[-1] == np.dtype(dtype).name
    assert _rel(expected, Z) < _tolerance(fmap, dtype)


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
@pytest.mark.parametrize("kind", sorted(KERNELS))
def test_feature_projection_over_namespaces_equals_numpy(kind, namespace, rows):
    convert, array_type = NAMESPACES[namespace]
    fmap = _map(kind)
    Z = fmap(rows)
    mean = Z.mean(axis=0)
    comps = np.linalg.qr(np.random.default_rng(1).standard_normal((Z.shape[1], 4)))[0].T
    expected = feature_projection(rows, fmap, mean, comps)
    got = feature_projection(convert(rows), fmap, convert(mean), convert(comps))
    assert isinstance(got, array_type)
    assert _rel(expected, got) < _tolerance(fmap, np.float64)


def _gram(B):
    """``B^T B``: what a sketch means (its rows' signs are the small eigensolver's choice)."""
    B = np.asarray(to_host(B), dtype=np.float64)
    return B.T @ B


def _fed(A, convert, pieces, ell=6):
    """A sketch of the rows of A fed in ``pieces`` blocks of A's namespace (``convert``)."""
    sketch = FrequentDirections(ell)
    for part in np.array_split(np.arange(A.shape[0]), pieces):
        sketch._extend(convert(A[part]))
    return sketch


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_frequent_directions_over_namespaces_equals_numpy(dtype, namespace, rows):
    convert, array_type = NAMESPACES[namespace]
    A = np.hstack([rows, rows**2]).astype(dtype)  # 26 columns: shrinks with a real loss
    host = FrequentDirections(6).update(A[:400]).update(A[400:])
    other = FrequentDirections(6).update(A[:150])
    merged_host = host.merge(other)

    sketch = _fed(A, convert, 5)
    assert isinstance(sketch._buffer, array_type)
    assert sketch.n_rows_seen == host.n_rows_seen
    scale = host.squared_norm
    # float64 sketches of the same rows at the same shrink points: float64 rounding
    assert _rel(_gram(host.rows()), _gram(sketch.rows())) < FLOAT64_RTOL
    assert _rel(_gram(host.sketch()), _gram(sketch.sketch())) < FLOAT64_RTOL
    np.testing.assert_allclose(sketch.total_shrinkage, host.total_shrinkage, rtol=FLOAT64_RTOL)
    np.testing.assert_allclose(sketch.squared_norm, scale, rtol=FLOAT64_RTOL)
    np.testing.assert_allclose(sketch.missing_energy, host.missing_energy, rtol=1e-8)

    merged = sketch.merge(_fed(A[:150], convert, 2))
    assert isinstance(merged._buffer, array_type) and merged.n_rows_seen == 850
    assert _rel(_gram(merged_host.rows()), _gram(merged.rows())) < FLOAT64_RTOL
    np.testing.assert_allclose(
        merged.total_shrinkage, merged_host.total_shrinkage, rtol=FLOAT64_RTOL
    )
    # the FD guarantee on the buffered rows B: 0 <= x^T (A^T A - B^T B) x <= total_shrinkage
    B = np.asarray(to_host(sketch.rows()), dtype=np.float64)
    A64 = A.astype(np.float64)
    loss = np.linalg.eigvalsh(A64.T @ A64 - B.T @ B)
    assert loss.min() > -1e-9 * scale and loss.max() <= sketch.total_shrinkage * (1 + 1e-9)

    # update() validates the rows (fastkpca.source.check_block) and gives the same sketch
    updated = FrequentDirections(6).update(convert(A[:400])).update(convert(A[400:]))
    assert _rel(_gram(host.rows()), _gram(updated.rows())) < FLOAT64_RTOL
