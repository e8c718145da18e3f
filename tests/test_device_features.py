"""Random feature maps, their statistics and RandomFeatureKPCA on PyTorch tensors equal numpy.

CPU tensors here (CUDA where marked ``gpu``).  The features are float32 on every placement;
host and device compute them with other libraries' cos / sin and other chunkings (each chunk
shifted by its own mean), so they agree to float32 rounding of the phases: ``eps32 |phase|``
with phases of a few radians after the shift, ~1e-6 of the features' size 1 / sqrt(D); 1e-5
relative leaves a 10x margin.  float64 statistics of the same features agree to 1e-10 (only the
order of the float64 sums differs); of float32 features to the float32 product rounding,
``eps32 sqrt(rows)`` ~ 1e-6 relative (1e-5 asserted).  Models: as
``tests/test_estimators_namespaces.py``, 2e-4 for anything that computes float32 features.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

import fastkpca.execution.feature_ops as elementwise  # noqa: E402
from fastkpca import RandomFeatureKPCA  # noqa: E402
from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.execution.arrays import to_host  # noqa: E402
from fastkpca.features import (  # noqa: E402
    draw_feature_map,
    feature_blocks,
    feature_projection,
    fwht,
)
from fastkpca.kernels import RBF, Matern, Polynomial  # noqa: E402
from fastkpca.solvers import eigh_topk  # noqa: E402
from fastkpca.statistics.covariance_sketch import ScatterSketch, test_matrix  # noqa: E402
from fastkpca.statistics.feature_countsketch import feature_countsketch  # noqa: E402
from fastkpca.statistics.feature_moments import (  # noqa: E402
    FeatureMoments,
    feature_moments,
    feature_scatter_sketch,
    rf_kpca_exact,
)
from fastkpca.transformers import (  # noqa: E402
    FastfoodFeatures,
    OrthogonalRandomFeatures,
    RandomFourierFeatures,
    TensorSketchFeatures,
)

FEATURE_RTOL = 1e-5
MODEL_RTOL = 2e-4

MAPS = {
    "rff": RBF(0.05),
    "orf": RBF(0.05),
    "fastfood": Matern(0.05, nu=1.5),
    "tensorsketch": Polynomial(degree=3, gamma=0.1, coef0=1.0),
}


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(500, 13, signal_dim=4, zeta=10, random_state=2)
    return X[:400], X[400:]


def _map(kind, d=13, m=96):
    return draw_feature_map(kind, MAPS[kind], m, d, np.random.default_rng(3))


def _rel(A, B):
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    return float(np.max(np.abs(A - B)) / np.max(np.abs(A)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", sorted(MAPS))
def test_feature_map_on_tensors_equals_numpy(kind, dtype, data):
    X = data[0].astype(dtype)
    fmap = _map(kind)
    Z = fmap(torch.from_numpy(X))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.from_numpy(X).dtype
    assert _rel(fmap(X), Z.numpy()) < FEATURE_RTOL


@pytest.mark.parametrize("kind", ["rff", "orf", "fastfood"])
def test_fourier_phases_of_offset_rows_stay_accurate(kind, data):
    """Rows 1e4 from the origin: the float32 phase would be ~1e4 radians (known to ~1e-3); the
    chunk shift and the float64 offset phase keep the device features at float32 rounding."""
    X = data[0] + 1e4
    fmap = _map(kind)
    exact = fmap(X)
    assert _rel(exact, fmap(torch.from_numpy(X)).numpy()) < FEATURE_RTOL


def test_feature_blocks_on_tensors_use_device_chunks(data, monkeypatch):
    X = data[0]
    fmap = _map("orf")
    monkeypatch.setattr(elementwise, "row_chunk_rows", lambda X, width, itemsize=4: 150)
    blocks = list(feature_blocks([(0, torch.from_numpy(X))], fmap))
    assert [start for start, _ in blocks] == [0, 150, 300]
    assert all(Z.dtype == torch.float32 for _, Z in blocks)
    Z_host = np.vstack([Z for _, Z in feature_blocks([(0, X)], fmap)])
    assert _rel(Z_host, torch.cat([Z for _, Z in blocks]).numpy()) < FEATURE_RTOL


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fwht_of_tensors_equals_fwht(dtype):
    A = np.random.default_rng(0).standard_normal((7, 64)).astype(dtype)
    expected = fwht(A.copy())
    got = fwht(torch.from_numpy(A))
    # sums of 64 +-1-weighted entries: float32 rounding ~ 64 eps32 of the largest entry
    assert _rel(expected, got.numpy()) < (1e-5 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("kind", sorted(MAPS))
def test_feature_projection_on_tensors(kind, data):
    X, X_new = data
    fmap = _map(kind)
    Z = fmap(X)
    mean = Z.mean(axis=0)
    comps = np.linalg.qr(np.random.default_rng(1).standard_normal((Z.shape[1], 4)))[0].T
    host = feature_projection(X_new, fmap, mean, comps)
    dev = feature_projection(torch.from_numpy(X_new), fmap, mean, comps)
    assert isinstance(dev, torch.Tensor) and dev.dtype == torch.float64
    assert _rel(host, dev.numpy()) < FEATURE_RTOL


def _moments_pair(X, fmap, shift_from=None):
    Z_first = next(feature_blocks([(0, X[:100])], fmap))[1]
    shift = Z_first.mean(axis=0, dtype=np.float64)
    host = feature_moments([(0, X)], fmap, shift)
    dev = feature_moments([(0, torch.from_numpy(X))], fmap, torch.from_numpy(shift))
    return host, dev


def test_feature_moments_on_tensors_equal_numpy(data):
    X = data[0]
    fmap = _map("rff")
    host, dev = _moments_pair(X, fmap)
    assert isinstance(dev.gram, torch.Tensor) and dev.gram.dtype == torch.float64
    assert dev.n == host.n and dev.eps == host.eps
    assert _rel(host.covariance(), dev.covariance().numpy()) < FEATURE_RTOL
    assert _rel(host.mean, dev.mean.numpy()) < FEATURE_RTOL
    np.testing.assert_allclose(dev.rounding_scale(), host.rounding_scale(), rtol=FEATURE_RTOL)


def test_feature_moments_of_float64_rows_are_exact_sums(data):
    """float64 features (tensorsketch of float64 rows): the device totals equal the host's
    up to the order of float64 sums."""
    X = data[0]
    fmap = _map("tensorsketch")
    host, dev = _moments_pair(X, fmap)
    assert _rel(host.covariance(), dev.covariance().numpy()) < 1e-10


def test_feature_moments_merge_moves_to_the_receiver(data):
    X = data[0]
    fmap = _map("rff")
    shift = np.asarray(fmap(X[:50], dtype=np.float32).mean(axis=0), np.float64)
    whole = feature_moments([(0, X)], fmap, shift)
    host_half = feature_moments([(0, X[:200])], fmap, shift)
    dev_half = feature_moments([(200, torch.from_numpy(X[200:]))], fmap, torch.from_numpy(shift))
    on_device = dev_half.merge(host_half)
    on_host = host_half.merge(dev_half)
    assert isinstance(on_device.gram, torch.Tensor)
    assert isinstance(on_host.gram, np.ndarray)
    for merged in (on_device, on_host):
        assert merged.n == 400
        assert _rel(whole.covariance(), to_host(merged.covariance())) < FEATURE_RTOL
    with pytest.raises(ValueError, match="different shifts"):
        host_half.merge(FeatureMoments(fmap.n_output_features, shift + 1.0).update(fmap(X[:5])))


def test_device_eigh_on_the_device_equals_the_host_solver(data):
    """The GPU path (the namespace's full ``eigh`` of the covariance,
    :func:`fastkpca.execution.linalg.dense_topk`) on ``array_api_strict``: the host solver's
    eigenpairs."""
    xps = pytest.importorskip("array_api_strict")
    X = data[0]
    fmap = _map("orf")
    host, dev = _moments_pair(X, fmap)
    vals, comps = rf_kpca_exact(host, 5, rng=0)
    scale, eps = dev.rounding_scale()
    cov = xps.asarray(to_host(dev.covariance()))
    d_vals, d_vecs = eigh_topk(cov, 5, method="dense", scale=scale, eps=eps)
    np.testing.assert_allclose(np.asarray(d_vals), vals, rtol=FEATURE_RTOL)
    assert rel_err(comps.T, np.asarray(d_vecs)) < 1e-3  # vectors: eigengap-amplified rounding


def test_scatter_sketch_on_tensors_equals_numpy(data):
    X = data[0]
    fmap = _map("rff")
    T = test_matrix(fmap.n_output_features, 15, np.random.default_rng(0))
    shift = np.asarray(fmap(X[:50], dtype=np.float32).mean(axis=0), np.float64)
    host = feature_scatter_sketch([(0, X)], fmap, T, shift)
    dev = feature_scatter_sketch([(0, torch.from_numpy(X))], fmap, T, shift)
    assert isinstance(dev.Y, torch.Tensor) and dev.n == host.n
    assert _rel(host.Y, dev.Y.numpy()) < FEATURE_RTOL
    assert _rel(host.mean, dev.mean.numpy()) < FEATURE_RTOL
    halves = feature_scatter_sketch([(0, torch.from_numpy(X[:150]))], fmap, T, shift).merge(
        feature_scatter_sketch([(150, X[150:])], fmap, T, shift), T
    )
    assert isinstance(halves.Y, torch.Tensor) and halves.n == 400
    assert _rel(host.Y, halves.Y.numpy()) < FEATURE_RTOL
    assert ScatterSketch.empty(3, 2).merge(ScatterSketch.empty(3, 2), np.eye(3, 2)).n == 0


def test_countsketch_statistic_on_tensors_equals_numpy(data):
    X = data[0]
    fmap = _map("rff")
    host = feature_countsketch([(0, X[:250]), (250, X[250:])], fmap, 40, 7)
    dev = feature_countsketch(
        [(0, torch.from_numpy(X[:250])), (250, torch.from_numpy(X[250:]))], fmap, 40, 7
    )
    assert isinstance(dev.SZ, torch.Tensor) and dev.n == host.n
    assert _rel(host.SZ, dev.SZ.numpy()) < FEATURE_RTOL
    np.testing.assert_array_equal(host.S1, dev.S1)  # the same hash: exact integers
    merged = host.merge(dev)
    assert isinstance(merged.SZ, torch.Tensor)
    assert _rel(2 * host.SZ, merged.SZ.numpy()) < FEATURE_RTOL


ESTIMATOR_CASES = {
    "exact_orf": dict(solver="exact"),
    "exact_rff_float32": dict(solver="exact", features="rff"),
    "exact_fastfood": dict(solver="exact", features="fastfood"),
    "exact_tensorsketch": dict(solver="exact", kernel="polynomial", gamma=0.1),
    "randomized": dict(solver="randomized"),
    "countsketch_1": dict(solver="countsketch", n_buckets=60, n_passes=1),
    "countsketch_2": dict(solver="countsketch", n_buckets=60),
}


@pytest.mark.parametrize("case", sorted(ESTIMATOR_CASES))
def test_random_feature_kpca_on_tensors_equals_numpy(case, data):
    X, X_new = data
    dtype = np.float32 if case.endswith("float32") else np.float64
    X, X_new = X.astype(dtype), X_new.astype(dtype)
    kw = {"gamma": 0.05, **ESTIMATOR_CASES[case]}
    host = RandomFeatureKPCA(4, n_features=128, random_state=0, **kw).fit(X)
    dev = RandomFeatureKPCA(4, n_features=128, random_state=0, **kw).fit(torch.from_numpy(X))
    assert dev.solver_ == host.solver_
    for name in ("mean_", "components_", "eigenvalues_"):
        assert isinstance(getattr(dev, name), torch.Tensor), name
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.from_numpy(X_new).dtype
    assert rel_err(host.transform(X_new), Z.numpy()) < MODEL_RTOL
    np.testing.assert_allclose(dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=MODEL_RTOL)
    np.testing.assert_allclose(dev.total_variance_, host.total_variance_, rtol=MODEL_RTOL)


def test_random_feature_kpca_tol_on_tensors(data):
    X, X_new = data
    kw = dict(gamma=0.05, tol=0.5, random_state=0)
    host = RandomFeatureKPCA(3, **kw).fit(X)
    dev = RandomFeatureKPCA(3, **kw).fit(torch.from_numpy(X))
    assert dev.n_features_ == host.n_features_
    assert isinstance(dev.components_, torch.Tensor)
    assert rel_err(host.transform(X_new), dev.transform(torch.from_numpy(X_new)).numpy()) < (
        MODEL_RTOL
    )


@pytest.mark.parametrize(
    "cls", [RandomFourierFeatures, OrthogonalRandomFeatures, FastfoodFeatures, TensorSketchFeatures]
)
def test_feature_transformers_on_tensors(cls, data):
    X, X_new = data
    kw = {"gamma": 0.1} if cls is TensorSketchFeatures else {"gamma": 0.05}
    host = cls(64, random_state=0, **kw).fit(X)
    dev = cls(64, random_state=0, **kw).fit(torch.from_numpy(X))
    Z = dev.transform(torch.from_numpy(X_new.astype(np.float32)))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.float32
    assert _rel(host.transform(X_new.astype(np.float32)), Z.numpy()) < FEATURE_RTOL


def test_model_saved_from_tensors_transforms_host_rows(data, tmp_path):
    import fastkpca

    X, X_new = data
    dev = RandomFeatureKPCA(4, n_features=128, gamma=0.05, random_state=0).fit(torch.from_numpy(X))
    dev.save(tmp_path / "rf.npz")
    loaded = fastkpca.load(tmp_path / "rf.npz")
    # host features of the same map against the device's: float32 feature rounding
    assert rel_err(dev.transform(torch.from_numpy(X_new)).numpy(), loaded.transform(X_new)) < (
        MODEL_RTOL
    )


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sorted(MAPS))
def test_cuda_features_equal_cpu_tensors(kind, data):
    X = torch.from_numpy(data[0])
    fmap = _map(kind)
    assert _rel(fmap(X).numpy(), fmap(X.cuda()).cpu().numpy()) < FEATURE_RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("solver", ["exact", "randomized", "countsketch"])
def test_cuda_random_feature_kpca_equals_cpu_tensors(solver, data):
    X, X_new = (torch.from_numpy(a) for a in data)
    kw = dict(n_features=128, gamma=0.05, solver=solver, n_buckets=60, random_state=0)
    cpu = RandomFeatureKPCA(4, **kw).fit(X)
    gpu = RandomFeatureKPCA(4, **kw).fit(X.cuda())
    assert gpu.components_.device.type == "cuda"
    Z = gpu.transform(X_new.cuda())
    assert Z.device.type == "cuda"
    assert rel_err(cpu.transform(X_new).numpy(), Z.cpu().numpy()) < MODEL_RTOL
