"""``fastkpca evaluate`` says which computation produced each figure; library warnings reach
command-line users as one line each."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastkpca.cli import evaluate as cli
from fastkpca.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluate")
    X = np.random.default_rng(0).standard_normal((300, 4))
    data = folder / "x.npy"
    np.save(data, X)
    model = folder / "m.npz"
    assert main(["fit", str(data), "-m", "nystrom", "-k", "2", "--n-landmarks", "30",
                 "--gamma", "0.3", "-q", "-o", str(model)]) == 0  # fmt: skip
    return str(model), str(data)


def _evaluate(files, capsys, *options):
    model, data = files
    capsys.readouterr()
    assert main(["evaluate", model, data, "--json", "-q", *options]) == 0
    return json.loads(capsys.readouterr().out)


def _entries(result):
    est = result["estimate"]
    return {n: est[n] for n in ("relative_rank_k_error", "excess_error", "eigenvalue_error",
                                "eigenvalues_per_row")}  # fmt: skip


def test_no_exact_on_all_rows_says_exact_on_all_rows(files, capsys):
    # --no-exact skips exact KPCA, but on at most --n-probe rows the estimate is exact: it says
    # on which rows
    result = _evaluate(files, capsys, "--no-exact")
    assert result["n_evaluated"] == result["n_rows"] == 300
    assert result["rows"] == "all 300 rows"
    for name, entry in _entries(result).items():
        assert entry["method"] == cli.EXACT_ALL_ROWS, name
        assert "exact, on the Gram of all 300 rows of DATA" in entry["computation"], name
    assert result["metrics"] is None
    assert result["metrics_computation"] == "skipped (--no-exact)"


def test_subsample_says_so(files, capsys):
    result = _evaluate(files, capsys, "--max-samples", "120")
    assert result["n_evaluated"] == 120
    how = "a uniform random subsample of 120 of the 300 rows"
    assert result["rows"] == how
    # the estimate refers to the model's training rows, of which these are a sample: estimated,
    # with a nonzero uncertainty (formerly "exact" on the sample, a 95 % interval of width 0)
    for name, entry in _entries(result).items():
        assert entry["method"] == cli.PROBE_ESTIMATE, name
        assert how in entry["computation"], name
    err = result["estimate"]["relative_rank_k_error"]
    assert err["stderr"] > 0 and err["interval"][0] < err["estimate"] < err["interval"][1]
    for name, entry in result["metrics"].items():
        assert entry["method"] == cli.EXACT_SUBSAMPLE and how in entry["computation"], name
    assert result["metrics_computation"].startswith("exact KPCA (ExactKPCA")
    certificate = result["estimate"]["certificates"]["nystrom_residual_trace"]
    assert how in certificate["computation"]


def test_probe_estimate_says_its_probe_and_uncertainty(files, capsys):
    result = _evaluate(files, capsys, "--no-exact", "--n-probe", "100")
    err = result["estimate"]["relative_rank_k_error"]
    assert err["method"] == cli.PROBE_ESTIMATE
    assert "uniform probe of 100 of the 300 evaluated rows" in err["computation"]
    assert err["stderr"] > 0 and err["interval"][0] <= err["estimate"] <= err["interval"][1]


def test_text_output_says_how(files, capsys):
    model, data = files
    capsys.readouterr()
    assert main(["evaluate", model, data, "--no-exact", "-q"]) == 0
    out = capsys.readouterr().out
    assert "exact, on the Gram of all 300 rows of DATA" in out
    assert "exact KPCA of the rows: skipped (--no-exact)" in out
    assert main(["evaluate", model, data, "--n-probe", "100", "--max-samples", "200", "-q"]) == 0
    out = capsys.readouterr().out
    assert "95% interval" in out and "uniform probe of 100 of the 200 evaluated rows" in out
    assert "against exact KPCA (ExactKPCA, the model's kernel, 2 components) of a uniform" in out


def test_library_warnings_are_one_line(files, tmp_path, capsys):
    _, data = files
    argv = ["fit", data, "-m", "exact", "-k", "2", "--gamma", "1e4", "-q"]
    argv += ["-o", str(tmp_path / "e.npz")]
    assert main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    warnings = [line for line in err if "numerically the identity" in line]
    assert len(warnings) == 1 and warnings[0].startswith("fastkpca: warning: the rbf kernel")
    assert not any("Warning:" in line or ".py:" in line for line in err)


def test_documented_workflows_on_a_named_csv_do_not_warn(tmp_path, capfd):
    """``fit --estimate-error`` and ``evaluate`` on a CSV with a header: the model records the
    column names, and the command line hands it arrays as it was fitted on (no warning that X
    has no valid feature names, which scikit-learn gave before)."""
    import subprocess
    import sys

    X = np.random.default_rng(0).standard_normal((600, 3))
    path = tmp_path / "data.csv"
    np.savetxt(path, X, delimiter=",", header="a,b,c", comments="", fmt="%.10g")
    model = tmp_path / "m.npz"
    runs = [
        ["fit", str(path), "-m", "nystrom", "-k", "2", "--estimate-error", "-o", str(model)],
        ["evaluate", str(model), str(path), "--max-samples", "300"],
    ]
    for argv in runs:
        r = subprocess.run(
            [sys.executable, "-W", "always", "-m", "fastkpca", *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert "feature names" not in r.stderr, r.stderr
        assert ".py:" not in r.stderr and "Warning:" not in r.stderr, r.stderr
