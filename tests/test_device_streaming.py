"""Frequent Directions and StreamingKPCA on PyTorch tensors equal numpy.

The device sketch keeps the host's algorithm: the same rows to the same sketches (runs of 1024
rows by index), the same shrink points, the same small eigendecompositions (on the host, from
the buffer's Gram computed on the device).  Of the same float64 rows the sketches then agree up
to the order of float64 sums, amplified by the shrinks' eigendecompositions (relative gaps of
the test spectra ~1e-2): 1e-9 relative asserted.  Of float32 features computed on each
placement (float32 rounding ~1e-7 of the features) the models agree to 2e-4, as in
``tests/test_estimators_namespaces.py``.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import rel_err  # noqa: E402

from fastkpca import RandomFeatureKPCA, StreamingKPCA  # noqa: E402
from fastkpca.datasets import make_random_noisy  # noqa: E402
from fastkpca.execution.arrays import to_host  # noqa: E402
from fastkpca.sketch import FrequentDirections  # noqa: E402
from fastkpca.statistics.feature_sketch import FeatureSketch  # noqa: E402

SKETCH_RTOL = 1e-9
MODEL_RTOL = 2e-4


@pytest.fixture(scope="module")
def data():
    X = make_random_noisy(2600, 8, signal_dim=4, zeta=10, random_state=4)
    return X[:2400], X[2400:]


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(5)
    # a decaying spectrum, 60 columns: sketches of 6 rows shrink every 12 rows
    return rng.standard_normal((500, 60)) * (0.9 ** np.arange(60))


def _rel(A, B):
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    return float(np.max(np.abs(A - B)) / np.max(np.abs(A)))


def _gram(B):
    """``B^T B``: what a sketch means (its rows' signs, and their rotation within directions of
    equal weight, are the small eigensolver's choice)."""
    B = np.asarray(B, np.float64)
    return B.T @ B


def _loss_operator(sketch):
    """The estimated loss ``V^T H V + rho (I - V^T V)`` (:meth:`FrequentDirections.loss_model`):
    independent of the signs of the sketch's directions."""
    V, H, rho = sketch.loss_model()
    V = np.asarray(V, np.float64)
    return V.T @ H @ V + rho * (np.eye(V.shape[1]) - V.T @ V)


def _feed(sketch, X, pieces):
    for chunk in np.array_split(np.arange(X.shape[0]), pieces):
        sketch._extend(X[chunk])
    return sketch


def test_frequent_directions_on_tensors_equals_numpy(rows):
    host = _feed(FrequentDirections(6), rows, 7)
    dev = _feed(FrequentDirections(6), torch.from_numpy(rows), 7)
    assert isinstance(dev._buffer, torch.Tensor)
    assert dev.n_rows_seen == host.n_rows_seen
    assert _rel(_gram(host.rows()), _gram(dev.rows().numpy())) < SKETCH_RTOL
    assert _rel(_gram(host.sketch()), _gram(dev.sketch().numpy())) < SKETCH_RTOL
    np.testing.assert_allclose(dev.total_shrinkage, host.total_shrinkage, rtol=SKETCH_RTOL)
    np.testing.assert_allclose(dev.squared_norm, host.squared_norm, rtol=1e-12)
    np.testing.assert_allclose(dev.missing_energy, host.missing_energy, rtol=SKETCH_RTOL)
    (V, H, rho), (Vd, Hd, rhod) = host.loss_model(), dev.loss_model()
    assert isinstance(Vd, np.ndarray)
    assert rel_err(V.T, Vd.T) < SKETCH_RTOL
    assert _rel(H, Hd) < SKETCH_RTOL and abs(rho - rhod) <= SKETCH_RTOL * abs(rho)
    # the FD guarantee on the device sketch: 0 <= x^T (A^T A - B^T B) x <= total_shrinkage
    B = dev.rows().numpy()
    loss = np.linalg.eigvalsh(rows.T @ rows - B.T @ B)
    assert loss.min() > -1e-9 * host.squared_norm
    assert loss.max() <= dev.total_shrinkage * (1 + 1e-9)


def test_frequent_directions_merge_moves_to_the_receiver(rows):
    a_host = _feed(FrequentDirections(6), rows[:300], 3)
    b_host = _feed(FrequentDirections(6), rows[300:], 2)
    a_dev = _feed(FrequentDirections(6), torch.from_numpy(rows[:300]), 3)
    b_dev = _feed(FrequentDirections(6), torch.from_numpy(rows[300:]), 2)
    expected = a_host.merge(b_host)
    for a, b, kind in [(a_dev, b_host, torch.Tensor), (a_host, b_dev, np.ndarray)]:
        merged = a.merge(b)
        assert isinstance(merged._buffer, kind)
        assert merged.n_rows_seen == 500
        assert _rel(_gram(expected.rows()), _gram(to_host(merged.rows()))) < SKETCH_RTOL
        np.testing.assert_allclose(merged.total_shrinkage, expected.total_shrinkage, rtol=1e-9)
    assert isinstance(a_dev._buffer, torch.Tensor)  # the inputs are not modified


def test_device_sketch_copies_pickles_and_saves_on_the_host(rows):
    dev = _feed(FrequentDirections(6), torch.from_numpy(rows), 4)
    state = dev.to_state()
    assert isinstance(state["buffer"], np.ndarray)
    restored = FrequentDirections.from_state(state)
    assert _rel(dev.rows().numpy(), restored.rows()) < 1e-15
    again = pickle.loads(pickle.dumps(dev))
    assert isinstance(again._buffer, torch.Tensor) and again._placement == dev._placement
    copy = dev.copy()
    copy._extend(torch.from_numpy(rows[:40]))
    assert dev.n_rows_seen == 500 and copy.n_rows_seen == 540


class Given:
    """A feature map whose features are the rows themselves (both placements): FeatureSketch
    fed float64 rows directly."""

    def __init__(self, m):
        self.n_output_features = m

    def _check_width(self, X):
        pass

    def _chunk(self, X, out=None):
        return X

    def row_writer(self, X):
        def write(start, stop, out):
            out[...] = X[start:stop]

        return write

    def feature_dtype(self, dtype):
        return np.float64


def test_feature_sketch_deals_the_same_rows_to_the_same_sketches(data):
    """FeatureSketch over float64 rows given as features directly (a tensor of the host's
    features): every part sketch equals the host's part, so the assignment is the host's."""
    X = data[0]
    model = StreamingKPCA(4, n_features=64, sketch_size=8, gamma=0.05, random_state=0).fit(X)
    Z = model.feature_map_(X)  # float64 features, fed identically to both
    host = FeatureSketch.empty(8, Z.shape[1])
    dev = FeatureSketch.empty(8, Z.shape[1])

    for start in range(0, 2400, 700):  # blocks that cut the 1024-row runs
        host.update_rows(Z[start : start + 700], Given(Z.shape[1]))
        dev.update_rows(torch.from_numpy(Z[start : start + 700]), Given(Z.shape[1]))
    assert dev.n == host.n == 2400
    used = [j for j, p in enumerate(host.parts) if p is not None]
    assert used == [j for j, p in enumerate(dev.parts) if p is not None] == [0, 1, 2]
    for j in used:
        assert host.parts[j].n_rows_seen == dev.parts[j].n_rows_seen
        assert _rel(_gram(host.parts[j].rows()), _gram(dev.parts[j].rows().numpy())) < (SKETCH_RTOL)
    assert _rel(host.feature_sum, dev.feature_sum.numpy()) < 1e-12


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sketches_in_lockstep_equal_the_host_parts(device, monkeypatch):
    """Whole cycles of device rows (a run of 1024 rows for each of the 32 sketches) are added
    with all sketches in lockstep (their shrinks batched), also over several blocks; the tail
    and a block that starts mid-cycle one sketch at a time.  Every part equals the host's:
    sketch, tracked loss, shrinkage and energy."""
    import fastkpca.statistics.feature_sketch as module

    rng = np.random.default_rng(6)
    m, ell = 48, 6
    Z = rng.standard_normal((2 * 32 * 1024 + 1500 + 3000, m)) * (0.92 ** np.arange(m))
    added = []
    real = module.extend_in_lockstep

    def spy(sketches, rows):
        added.append(rows.shape)
        return real(sketches, rows)

    monkeypatch.setattr(module, "extend_in_lockstep", spy)

    host = FeatureSketch.empty(ell, m)
    dev = FeatureSketch.empty(ell, m)
    assert len(host.parts) == 32
    # a block of one cycle (ending with rows buffered, their energy pending), one of a cycle
    # and a tail, one that starts mid-cycle
    cuts = (0, 32 * 1024, Z.shape[0] - 3000, Z.shape[0])
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        host.update_rows(Z[lo:hi], Given(m))
        dev.update_rows(torch.from_numpy(Z[lo:hi]).to(device), Given(m))
    assert sum(shape[0] * shape[1] for shape in added) == 2 * 32 * 1024  # the whole cycles
    for h, d in zip(host.parts, dev.parts, strict=True):
        assert h.n_rows_seen == d.n_rows_seen
        assert _rel(_gram(h.rows()), _gram(d.rows().cpu().numpy())) < SKETCH_RTOL
        assert h.total_shrinkage == pytest.approx(d.total_shrinkage, rel=SKETCH_RTOL)
        assert h.squared_norm == pytest.approx(d.squared_norm, rel=1e-12)
        assert _rel(_loss_operator(h), _loss_operator(d)) < 1e-7
    assert _rel(_gram(host.sketch.sketch()), _gram(dev.sketch.sketch().cpu().numpy())) < SKETCH_RTOL


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_streaming_kpca_on_tensors_equals_numpy(dtype, data):
    X, X_new = (a.astype(dtype) for a in data)
    kw = dict(n_features=96, sketch_size=10, gamma=0.05, random_state=0)
    host = StreamingKPCA(4, **kw).fit(X)
    dev = StreamingKPCA(4, **kw).fit(torch.from_numpy(X))
    for name in ("eigenvalues_", "components_", "eigenvalue_bounds_", "mean_", "feature_sum_"):
        assert isinstance(getattr(dev, name), torch.Tensor), name
    np.testing.assert_allclose(dev.eigenvalues_.numpy(), host.eigenvalues_, rtol=MODEL_RTOL)
    np.testing.assert_allclose(
        dev.eigenvalue_bounds_.numpy(), host.eigenvalue_bounds_, rtol=MODEL_RTOL
    )
    assert dev.sketch_.total_shrinkage > 0  # the sketches did shrink
    Z = dev.transform(torch.from_numpy(X_new))
    assert isinstance(Z, torch.Tensor) and Z.dtype == torch.from_numpy(X_new).dtype
    assert rel_err(host.transform(X_new), Z.numpy()) < MODEL_RTOL


def test_streaming_partial_fit_merge_and_exact_limit_on_tensors(data):
    X, X_new = data
    kw = dict(n_features=48, sketch_size=48, gamma=0.05, random_state=0)
    whole = StreamingKPCA(4, **kw).fit(torch.from_numpy(X))
    parts = StreamingKPCA(4, **kw)
    for start in range(0, 2400, 900):
        parts.partial_fit(torch.from_numpy(X[start : start + 900]))
    np.testing.assert_allclose(parts.eigenvalues_.numpy(), whole.eigenvalues_.numpy(), rtol=1e-6)
    a = StreamingKPCA(4, **kw).fit(torch.from_numpy(X[:1200]))
    b = StreamingKPCA(4, **kw).fit(X[1200:])  # a host model merges into the device one
    merged = a.merge(b)
    assert isinstance(merged.components_, torch.Tensor)
    np.testing.assert_allclose(merged.eigenvalues_.numpy(), whole.eigenvalues_.numpy(), rtol=1e-6)
    # sketch_size >= m: nothing shrinks, the model is exact PCA of the features
    assert whole.sketch_.total_shrinkage == 0.0
    exact = RandomFeatureKPCA(4, solver="exact", n_features=48, gamma=0.05, random_state=0).fit(
        torch.from_numpy(X)
    )
    np.testing.assert_allclose(whole.eigenvalues_.numpy(), exact.eigenvalues_.numpy(), rtol=1e-6)
    lower, upper = whole.eigenvalue_bounds_.numpy()
    np.testing.assert_allclose(lower, upper, rtol=1e-12)
    Z = whole.transform(torch.from_numpy(X_new))
    assert rel_err(exact.transform(torch.from_numpy(X_new)).numpy(), Z.numpy()) < 1e-5


def test_streaming_device_parameter_and_saved_model(data, tmp_path):
    import fastkpca

    X, X_new = data
    kw = dict(n_features=64, sketch_size=8, gamma=0.05, random_state=0)
    host = StreamingKPCA(4, **kw).fit(X)
    dev = StreamingKPCA(4, device="cpu", **kw).fit(X)
    assert isinstance(dev.components_, np.ndarray)  # fitted arrays follow the data given to fit
    Z = dev.transform(X_new)
    assert isinstance(Z, np.ndarray)
    assert rel_err(host.transform(X_new), Z) < MODEL_RTOL
    dev.save(tmp_path / "s.npz")
    loaded = fastkpca.load(tmp_path / "s.npz")
    np.testing.assert_allclose(loaded.eigenvalues_, dev.eigenvalues_, rtol=1e-12)
    loaded.partial_fit(X_new)  # a loaded device model continues on the host
    assert loaded.n_samples_seen_ == 2600


@pytest.mark.gpu
def test_cuda_streaming_equals_cpu_tensors(data):
    X, X_new = (torch.from_numpy(a) for a in data)
    kw = dict(n_features=96, sketch_size=10, gamma=0.05, random_state=0)
    cpu = StreamingKPCA(4, **kw).fit(X)
    gpu = StreamingKPCA(4, **kw).fit(X.cuda())
    assert gpu.sketch_._buffer.device.type == "cuda"
    np.testing.assert_allclose(
        gpu.eigenvalues_.cpu().numpy(), cpu.eigenvalues_.numpy(), rtol=MODEL_RTOL
    )
    Z = gpu.transform(X_new.cuda())
    assert rel_err(cpu.transform(X_new).numpy(), Z.cpu().numpy()) < MODEL_RTOL


def test_non_finite_device_rows_are_refused(rows):
    bad = rows[:40].copy()
    bad[17, 3] = np.nan
    sketch = FrequentDirections(6)
    with pytest.raises(ValueError, match="NaN"):
        sketch._extend(torch.from_numpy(bad))  # refused at the shrink that reads its energy
    fresh = FrequentDirections(6)
    fresh._extend(torch.from_numpy(bad[12:20]))  # no shrink yet: refused when the energy is read
    with pytest.raises(ValueError, match="NaN"):
        _ = fresh.squared_norm
