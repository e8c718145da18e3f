"""AutoKPCA: its choices on cases built to favour each method, their true errors, its refusals,
its report, model files and the scikit-learn API."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import fastkpca
from fastkpca import AutoKPCA, ExactKPCA
from fastkpca.decomposition import auto
from fastkpca.metrics import relative_rank_k_error
from fastkpca.statistics.probe import probe_memory_bytes

TOL = 0.05
#: Fewer components than the 6 clusters of :func:`_clusters`: the rank-k tail holds cluster
#: directions, not only the within-cluster noise (a relative error over a tail of pure noise
#: needs many more landmarks or features, and longer tests).
K = 3


@pytest.fixture
def small(monkeypatch):
    """Exact KPCA only up to 400 rows and a probe of 400 rows: the cases stay small (fast)
    while n is above both, as for the large data sets the rules are written for."""
    monkeypatch.setattr(auto, "EXACT_MAX_ROWS", 400)
    monkeypatch.setattr(auto, "PROBE_ROWS", 400)
    monkeypatch.setattr(auto, "MIN_PROBE_ROWS", 400)


def _clusters(n, d=8, seed=0):
    """Rows around 6 centres: a kernel spectrum that decays fast (few landmarks suffice)."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.standard_normal((6, d))
    return centres[rng.integers(0, 6, n)] + 0.5 * rng.standard_normal((n, d))


def _true_error(model, X):
    """The relative rank-k error against exact KPCA on X's own centered Gram."""
    return relative_rank_k_error(X, model.transform(X), model.kernel_)


def _chosen(model):
    chosen = [e for e in model.report_ if e["status"] == "chosen"]
    assert len(chosen) == 1
    return chosen[0]


def test_tiny_n_is_exact():
    X = _clusters(200)
    model = AutoKPCA(K, random_state=0).fit(X)
    assert model.method_ == "exact"
    assert isinstance(model.estimator_, ExactKPCA)
    # exact KPCA is the optimum: error 1 up to the rounding of a 200 x 200 float64 Gram
    assert _true_error(model, X) == pytest.approx(1.0, abs=1e-6)


def test_multi_pass_dense_is_nystrom_within_tolerance(small):
    X = _clusters(1200)
    model = AutoKPCA(K, tol=TOL, random_state=0).fit(X)
    assert model.method_ == "nystrom"
    entry = _chosen(model)
    assert entry["size"] == model.estimator_.n_landmarks_ < X.shape[0]
    # the estimate (on the probe) is at most 1 + tol; the truth on all rows within 1 + 2 tol
    assert entry["error"] <= 1 + TOL
    assert _true_error(model, X) <= 1 + 2 * TOL


def test_one_pass_stream_is_random_features(small):
    # a smooth blob (clusters need far more random features than landmarks for the same error)
    X = np.random.default_rng(1).standard_normal((1200, 4)) * [3.0, 2.0, 1.0, 0.5]
    blocks = (X[i : i + 300] for i in range(0, X.shape[0], 300))  # a one-shot generator
    model = AutoKPCA(K, gamma=0.1, tol=TOL, random_state=0).fit(blocks)
    assert model.method_ in ("random-features", "streaming")
    assert model.report_[0]["data"]["passes"] == "one"
    assert model.estimator_.n_samples_seen_ == X.shape[0]
    assert _true_error(model, X) <= 1 + 2 * TOL


def test_sparse_wide_takes_the_input_sparsity_path(small):
    rng = np.random.default_rng(2)
    d, n = 2000, 900
    # 4 sparse prototypes of 30 nonzeros each, rows = a prototype with noise on its support
    support = [rng.choice(d, 30, replace=False) for _ in range(4)]
    rows, cols, vals = [], [], []
    for i in range(n):
        s = support[i % 4]
        rows += [i] * s.size
        cols += list(s)
        vals += list(1.0 + 0.1 * rng.standard_normal(s.size))
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, d))
    model = AutoKPCA(2, gamma=0.05, tol=0.1, random_state=0).fit(X)
    assert model.method_ == "random-features"
    params = _chosen(model)["params"]
    assert params.get("input_sketch") == "auto" or params.get("solver") == "countsketch"
    assert "sparse" in _chosen(model)["reason"]
    assert _true_error(model, X) <= 1 + 2 * 0.1


def test_report_content(small):
    X = _clusters(1200)
    model = AutoKPCA(K, random_state=0).fit(X)
    report = model.report_
    json.dumps(report)  # plain values only
    probe = report[0]
    assert probe["method"] == "probe" and probe["size"] == 400
    assert probe["data"] == {
        "n_samples": 1200,
        "n_features": 8,
        "sparse": False,
        "density": 1.0,
        "passes": "several",
        "random_access": True,
        "dtype": "float64",
    }
    fitted = [e for e in report[1:] if e["fit_seconds"] is not None]
    assert fitted and all(e["error_stderr"] >= 0 and e["memory_bytes"] > 0 for e in fitted)
    assert all(e["status"] in ("chosen", "tried", "rejected") for e in report[1:])
    sizes = [e["size"] for e in fitted if e["method"] == "nystrom"]
    assert sizes == sorted(sizes) and sizes[-1] == _chosen(model)["size"]


def test_memory_budget_too_small_is_refused(small):
    X = _clusters(1200)
    with pytest.raises(ValueError, match="no method fits the budgets") as info:
        AutoKPCA(K, memory_budget="20KB", random_state=0).fit(X)
    assert "memory budget" in str(info.value)
    assert not hasattr(AutoKPCA(), "method_")


def test_memory_budget_excludes_the_exact_path():
    """300 rows need an exact Gram of 720 kB (950 kB with the eigensolver's workspace); with a
    600 kB budget the exact path is refused and an approximation within it is chosen."""
    X = _clusters(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a probe of 100 rows: a coarse one
        model = AutoKPCA(K, memory_budget=600 * 1024, random_state=0).fit(X)
    assert model.method_ != "exact"
    rejected = [e for e in model.report_ if e["method"] == "exact"]
    assert rejected[0]["status"] == "rejected" and "memory budget" in rejected[0]["why"]
    assert all(e["memory_bytes"] <= 600 * 1024 for e in model.report_[1:] if e["fit_seconds"])


def test_impossible_time_budget_is_refused(small):
    X = _clusters(1200)
    with pytest.raises(ValueError, match="time"):
        AutoKPCA(K, time_budget=1e-9, random_state=0).fit(X)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"tol": 0}, "tol"),
        ({"tol": None}, "tol"),
        ({"memory_budget": "lots"}, "memory_budget"),
        ({"memory_budget": -5}, "memory_budget"),
        ({"time_budget": 0}, "time_budget"),
        ({"n_components": 0.5}, "n_components"),
        ({"kernel": "precomputed"}, "precomputed"),
    ],
)
def test_bad_parameters_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        AutoKPCA(**params).fit(_clusters(50))


def test_parse_memory():
    assert auto.parse_memory("2GB") == 2 * 2**30
    assert auto.parse_memory("512M") == 512 * 2**20
    assert auto.parse_memory(1000) == 1000
    assert auto.parse_memory(None) is None


def test_model_file_round_trip(tmp_path, small):
    X = _clusters(1200)
    model = AutoKPCA(K, random_state=0).fit(X)
    path = tmp_path / "auto.npz"
    model.save(path)
    loaded = fastkpca.load(path)
    assert type(loaded) is AutoKPCA and loaded.method_ == model.method_
    assert type(loaded.estimator_) is type(model.estimator_)
    assert loaded.report_ == model.report_
    # the same arrays and the same transform code: equal up to float64 rounding of the kernel
    np.testing.assert_allclose(loaded.transform(X[:50]), model.transform(X[:50]), atol=1e-10)


def test_inconsistent_model_is_not_saved(tmp_path):
    model = AutoKPCA(K, random_state=0).fit(_clusters(200))
    model.method_ = "nystrom"  # but the estimator is an ExactKPCA
    with pytest.raises(ValueError, match="estimator_"):
        model.save(tmp_path / "bad.npz")


def test_sklearn_api():
    X = _clusters(200).astype(np.float32)
    model = AutoKPCA(3, tol=0.1, memory_budget="1G", time_budget=60, random_state=0)
    params = model.get_params()
    assert params["tol"] == 0.1 and params["memory_budget"] == "1G" and params["time_budget"] == 60
    twin = clone(model)
    assert twin.get_params() == params and not hasattr(twin, "estimator_")
    Y = model.fit_transform(X)
    assert Y.shape == (200, 3) and Y.dtype == np.float32  # float32 stays float32
    assert model.n_components_ == 3 and model.eigenvalues_.shape == (3,)
    assert list(model.get_feature_names_out()) == ["autokpca0", "autokpca1", "autokpca2"]
    pd = pytest.importorskip("pandas")
    frame = model.set_output(transform="pandas").transform(X[:4])
    assert isinstance(frame, pd.DataFrame) and list(frame.columns)[0] == "autokpca0"


def test_inverse_transform_is_the_inner_models():
    X = _clusters(200)
    model = AutoKPCA(K, fit_inverse_transform=True, random_state=0).fit(X)
    back = model.inverse_transform(model.transform(X[:5]))
    np.testing.assert_allclose(back, model.estimator_.inverse_transform(model.transform(X[:5])))


def test_failed_fit_leaves_the_model(small):
    X = _clusters(1200)
    model = AutoKPCA(K, random_state=0).fit(X)
    before = (model.method_, model.estimator_)
    model.set_params(memory_budget="1KB")
    with warnings.catch_warnings(), pytest.raises(ValueError):
        model.fit(X)
    assert (model.method_, model.estimator_) == before


def test_dask_array_input(small):
    da = pytest.importorskip("dask.array")
    X = _clusters(1200)
    model = AutoKPCA(K, random_state=0).fit(da.from_array(X, chunks=(300, -1)))
    assert model.method_ == "nystrom"
    T = model.transform(da.from_array(X[:40], chunks=(20, -1)))
    assert isinstance(T, da.Array)
    # the same rows in memory: the same model up to the order of float64 sums over chunks
    np.testing.assert_allclose(T.compute(), model.transform(X[:40]), atol=1e-8)


def test_torch_tensor_input():
    torch = pytest.importorskip("torch")
    X = _clusters(200)
    model = AutoKPCA(K, random_state=0).fit(torch.from_numpy(X))
    T = model.transform(torch.from_numpy(X[:10]))
    assert isinstance(T, torch.Tensor) and T.dtype == torch.float64
    reference = AutoKPCA(K, random_state=0).fit(X).transform(X[:10])
    # the same model computed by torch and by numpy: equal up to float64 rounding of the Gram
    # and its eigenvectors (amplified by the eigengap, here ~1e2)
    np.testing.assert_allclose(np.abs(T.numpy()), np.abs(reference), atol=1e-8)


@pytest.mark.gpu
def test_cuda_tensors_and_device_parameter(small):
    # CUDA rows and device="cuda": the choice and the model of the host fit, up to the rounding
    # of float64 products summed in another order (amplified by the eigengap, here ~1e2).
    torch = pytest.importorskip("torch")
    X = _clusters(1200)
    host = AutoKPCA(K, random_state=0).fit(X)
    on_cuda = AutoKPCA(K, random_state=0).fit(torch.from_numpy(X).cuda())
    T = on_cuda.transform(torch.from_numpy(X[:40]).cuda())
    assert T.device.type == "cuda"

    def chosen(model):
        (entry,) = [e for e in model.report_[1:] if e["status"] == "chosen"]
        return entry["method"], entry["size"]

    assert chosen(on_cuda) == chosen(host)
    np.testing.assert_allclose(np.abs(T.cpu().numpy()), np.abs(host.transform(X[:40])), atol=1e-7)
    sent = AutoKPCA(K, device="cuda", random_state=0).fit(X)
    assert isinstance(sent.transform(X[:40]), np.ndarray)
    assert sent.method_ == host.method_


def test_probe_of_tensor_rows_gives_the_host_estimates(small, monkeypatch):
    # The probe's Gram is computed where the rows are (a GPU's rows on the GPU): CPU tensors
    # give the host's choices and estimates, up to float64 rounding of the Gram (amplified by
    # the eigengap, here ~1e2).
    torch = pytest.importorskip("torch")
    from fastkpca.statistics.probe import ErrorProbe

    X = _clusters(1200)
    host = AutoKPCA(K, random_state=0).fit(X)
    seen = []
    compute = ErrorProbe._compute_gram

    def spy(self, kernel):
        seen.append(type(self._rows))
        return compute(self, kernel)

    monkeypatch.setattr(ErrorProbe, "_compute_gram", spy)
    on_device = AutoKPCA(K, random_state=0).fit(torch.from_numpy(X))
    assert seen and all(t is torch.Tensor for t in seen)

    def fits(model):
        return [(e["method"], e["size"], e["error"], e["error_stderr"]) for e in model.report_[1:]]

    assert [f[:2] for f in fits(on_device)] == [f[:2] for f in fits(host)]
    for got, want in zip(fits(on_device), fits(host), strict=True):
        np.testing.assert_allclose(got[2:], want[2:], rtol=1e-9)


@pytest.mark.parametrize("layout", ["array", "blocks"])
def test_non_finite_rows_are_refused_whatever_the_layout(layout):
    # Inner fits skip the finite-value scan only for in-memory rows AutoKPCA checked whole;
    # rows read in blocks are checked as they are read.
    X = np.random.default_rng(0).standard_normal((6000, 5))
    X[4500, 2] = np.nan
    data = X if layout == "array" else [X[:3000], X[3000:]]
    with pytest.raises(ValueError, match="NaN"):
        AutoKPCA(3, random_state=0).fit(data)


def test_the_probe_counts_in_the_memory_budget():
    """Issue 32: AutoKPCA(memory_budget=8 MiB) peaked at 62.5 MiB, its probe not counted.  The probe
    now takes its rows within the budget (PROBE_MEMORY_SHARE), the fits the rest: the peak of
    the fit, above the rows, stays within 8 MiB (tracemalloc counts numpy's buffers).  (Rows
    on which only random features reach tol would not: their fits' feature blocks are sized by
    the execution layer, not by AutoKPCA's budget.)"""
    import tracemalloc

    X = _clusters(30000)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model = AutoKPCA(5, memory_budget="8MiB", random_state=0).fit(X)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    probe = model.report_[0]
    assert probe["method"] == "probe" and probe["memory_bytes"] <= auto.PROBE_MEMORY_SHARE * 2**23
    assert peak <= 8 * 2**20, peak / 2**20


@pytest.mark.parametrize("budget", [0, 10**6, 2**23, 10**9, 17_854_676_992, 10**12])
def test_probe_rows_within_is_the_largest_probe_in_the_budget(budget):
    """The most rows whose probe memory is within PROBE_MEMORY_SHARE of the budget.  It once
    searched down from ``sqrt(room / bytes(1))``, which the linear term of bytes(1) makes far too
    small: 2,620 rows on an 18 GB budget (room for 20,587), so a grown probe (4,000 rows) was cut
    to a size that moved with the machine's free memory, and AutoKPCA's model with it."""
    room = auto.PROBE_MEMORY_SHARE * budget
    p = auto.probe_rows_within(budget)
    assert p >= 0 and probe_memory_bytes(p) <= room < probe_memory_bytes(p + 1)
    if budget >= 10**9:  # a grown probe is not cut
        assert p >= auto.MAX_PROBE_ROWS


@pytest.mark.parametrize(
    "k, rows, match",
    [(1, 1, "n_components=1 must be less than the number of rows \\(1\\)"), (650, 600, "650")],
)
def test_too_few_rows_for_the_components(k, rows, match):
    # Formerly scipy's "Requested eigenvalue indices" (one row) and "needs more than 500 rows"
    # (550 components of 600 rows, which exact KPCA can fit: it now does).
    X = _clusters(600)
    with pytest.raises(ValueError, match=match):
        AutoKPCA(n_components=k).fit(X[:rows])
    assert AutoKPCA(n_components=550).fit(X).method_ == "exact"


def test_exact_kpca_chosen_for_a_fine_tol_does_not_warn():
    # Exact KPCA has error 1 by construction: no probe, no "the true error may be larger".
    X = _clusters(600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = AutoKPCA(K, tol=0.001, random_state=0).fit(X)
    assert model.method_ == "exact"
    assert _chosen(model)["error"] == 1.0 and _chosen(model)["error_stderr"] == 0.0


def test_verbose_shows_candidates_estimates_and_growth(small, monkeypatch):
    # verbose=True: a progress bar (fastkpca.execution.progress) whose text follows the probe,
    # each candidate's fits and their estimates.
    from fastkpca.execution import progress

    shown = []

    class Bar:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def set_postfix_str(self, text, refresh=True):
            shown.append(text)

        def update(self, n=1):
            pass

    real = progress.progress_bar

    def bar(*args, **kwargs):
        return (
            Bar()
            if progress.verbosity() > 0 and kwargs.get("desc") == "AutoKPCA"
            else real(*args, **kwargs)
        )

    monkeypatch.setattr(auto, "progress_bar", bar)
    AutoKPCA(K, verbose=True, random_state=0).fit(_clusters(1200))
    assert shown[0].startswith("probe of 400 rows")
    assert any(t.startswith("nystrom") and "error" in t and "+-" in t for t in shown)
    shown.clear()
    AutoKPCA(K, random_state=0).fit(_clusters(1200))
    assert shown == []
