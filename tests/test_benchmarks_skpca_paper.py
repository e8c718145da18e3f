"""benchmarks/skpca_paper.py: its error helper against fastkpca.metrics, space count, merge."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fastkpca.decomposition.streaming import StreamingKPCA
from fastkpca.kernels import RBF
from fastkpca.metrics import gram_frobenius_error, gram_spectral_error

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling _harness
    try:
        spec = importlib.util.spec_from_file_location("skpca_paper", BENCHMARKS / "skpca_paper.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.mark.parametrize("n", [300, 2100])  # LAPACK path and ARPACK path
def test_paper_errors_match_metrics(bench, n):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 5))
    kernel = RBF(0.2)
    T = rng.standard_normal((n, 8)) * 0.1
    spec, frob = bench.paper_errors(np.asarray(kernel(X)), T)
    # same definition, different summation order / eigen-solver: float64 round-off, and
    # ARPACK converges to machine precision (tol=0) on the largest-magnitude eigenvalue
    assert spec == pytest.approx(gram_spectral_error(X, T, kernel, center=False), rel=1e-8)
    assert frob == pytest.approx(gram_frobenius_error(X, T, kernel, center=False), rel=1e-10)


def test_space_counts_the_real_frequent_directions_buffer(bench):
    X = np.random.default_rng(1).standard_normal((500, 7))
    m, ell = 64, 5
    model = StreamingKPCA(3, gamma=0.1, n_random_features=m, sketch_size=ell, random_state=0).fit(X)
    # the buffer after fit holds up to 2 ell rows of m features (the StreamingKPCA docstring)
    held = model.sketch_.rows().shape[0]
    assert held <= 2 * ell
    assert bench.space(("skpca", ell), m, 7) == m * 7 + 2 * ell * m + ell * ell
    assert bench.space("rnca", m, 7) == bench.space("nystrom", m, 7) == m * m + m * 7


def test_merge_results_replaces_only_one_data_set(bench, tmp_path):
    path = tmp_path / "r.json"
    rows_a = [{"data": "a", "x": 1}]
    path.write_text(json.dumps(bench.merge_results(path, "a", {"n": 1}, rows_a)))
    path.write_text(json.dumps(bench.merge_results(path, "b", {"n": 2}, [{"data": "b", "x": 2}])))
    merged = bench.merge_results(path, "a", {"n": 3}, [{"data": "a", "x": 3}])
    assert merged["datasets"] == {"a": {"n": 3}, "b": {"n": 2}}
    assert sorted(r["x"] for r in merged["rows"]) == [2, 3]
