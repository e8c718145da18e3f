"""The fastkpca command: end to end in subprocesses, the rest in-process through ``main``."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastkpca import cli
from fastkpca.cli import main
from fastkpca.cli.transform import _NpyWriter
from fastkpca.decomposition import available_methods, estimator_class


def run_cli(*args, cwd=None):
    """``python -m fastkpca ARGS`` in a fresh interpreter (stdin/stderr are not terminals)."""
    return subprocess.run(
        [sys.executable, "-m", "fastkpca", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A small labelled data set as CSV (label last, repr floats: exact) and as .npy."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 4))
    y = rng.integers(0, 3, size=120)
    folder = tmp_path_factory.mktemp("data")
    csv = folder / "train.csv"
    with open(csv, "w") as f:
        f.write("a,b,c,d,label\n")
        for row, label in zip(X, y, strict=True):
            f.write(",".join(repr(float(v)) for v in row) + f",{label}\n")
    npy = folder / "train.npy"
    np.save(npy, X)
    return X, y, csv, npy


def _available(method):
    try:
        return estimator_class(method)
    except ValueError:
        pytest.skip(f"method {method} is not available yet")


# --- end to end in a subprocess -------------------------------------------------------------------


def test_fit_transform_match_python_api(data, tmp_path):
    from fastkpca import ExactKPCA

    X, _, csv, _ = data
    model = tmp_path / "m.npz"
    r = run_cli(
        "fit",
        csv,
        "--method",
        "exact",
        "-k",
        3,
        "--gamma",
        0.3,
        "--seed",
        0,
        "--label-column",
        "label",
        "-o",
        model,
    )
    assert r.returncode == 0, r.stderr
    assert "fitted ExactKPCA (3 components" in r.stdout and "120 rows x 4 features" in r.stdout
    # no progress bar when stderr is not a terminal: at most the plain lines a piped run prints
    # every few seconds (a loaded machine may take that long)
    assert all(line.endswith("s elapsed") for line in r.stderr.splitlines())
    assert "\r" not in r.stderr
    r = run_cli("transform", model, csv, "--label-column", "-1", "-o", tmp_path / "t.npy")
    assert r.returncode == 0, r.stderr
    r = run_cli("transform", model, csv, "--label-column", "-1", "-o", tmp_path / "t.csv")
    assert r.returncode == 0, r.stderr
    T_cli = np.load(tmp_path / "t.npy")
    T_api = ExactKPCA(n_components=3, gamma=0.3, random_state=0).fit(X).transform(X)
    # the same computation on the same floats (the CSV holds repr floats); the tolerance only
    # leaves room for BLAS thread scheduling between two processes
    np.testing.assert_allclose(T_cli, T_api, rtol=1e-12, atol=1e-14)
    T_csv = np.loadtxt(tmp_path / "t.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(T_csv, T_cli)  # %.17g round-trips float64 exactly


def test_errors_are_one_line(tmp_path):
    r = run_cli("fit", tmp_path / "nope.csv", "-o", tmp_path / "m.npz")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"fastkpca: error: data file not found: {tmp_path / 'nope.csv'}"
    ]
    r = run_cli("fit", tmp_path / "nope.csv", "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr and "FileNotFoundError" in r.stderr
    r = run_cli("fit")  # usage errors: argparse's message, exit status 2
    assert r.returncode == 2 and "fastkpca fit: error:" in r.stderr.replace("usage: ", "")


def test_demo_subprocess(tmp_path):
    r = run_cli(
        "demo", "--n-samples", 150, "--methods", "exact", "-k", 3, "--output", tmp_path / "demo.png"
    )
    assert r.returncode == 0, r.stderr
    assert "ExactKPCA" in r.stdout and "rank-k err" in r.stdout
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_console_script_and_help():
    script = Path(sys.executable).parent / "fastkpca"
    if not script.exists():
        pytest.skip("the fastkpca console script is not installed in this environment")
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0
    for command in ("fit", "transform", "evaluate", "info", "bench", "demo"):
        assert command in r.stdout


# --- in-process -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,options,params",
    [
        ("random-features", ["--n-random-features", "64"], {"n_random_features": 64}),
        (
            "rf",
            ["--n-random-features", "64", "--features", "orf"],
            {"n_random_features": 64, "features": "orf"},
        ),
        (
            "streaming",
            ["--n-random-features", "64", "--sketch-size", "16"],
            {"n_random_features": 64, "sketch_size": 16},
        ),
    ],
)
def test_streamed_fit_matches_api(data, tmp_path, capsys, method, options, params):
    """One-pass methods fit on the file's row blocks: the same model as fit on the array."""
    X, _, _, npy = data
    cls = _available(method)
    rc = main(
        [
            "fit",
            str(npy),
            "-m",
            method,
            "-k",
            "3",
            "--gamma",
            "0.3",
            "--seed",
            "4",
            "--block-rows",
            "8192",
            *options,
            "-o",
            str(tmp_path / "m.npz"),
        ]
    )
    assert rc == 0
    assert "(streamed)" in capsys.readouterr().out
    from fastkpca import load

    expected = cls(n_components=3, gamma=0.3, random_state=4, **params).fit(X)
    np.testing.assert_allclose(
        load(tmp_path / "m.npz").transform(X), expected.transform(X), rtol=1e-10, atol=1e-12
    )


# the model records the CSV's column names; transforming a bare array here is on purpose
@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
def test_nystrom_with_landmark_file_streams(data, tmp_path, capsys):
    X, _, csv, _ = data
    cls = _available("nystrom")
    np.save(tmp_path / "land.npy", X[::5])
    rc = main(
        [
            "fit",
            str(csv),
            "-m",
            "nystrom",
            "--landmarks",
            str(tmp_path / "land.npy"),
            "-k",
            "3",
            "--gamma",
            "0.3",
            "--label-column",
            "label",
            "-o",
            str(tmp_path / "ny.npz"),
        ]
    )
    assert rc == 0 and "(streamed)" in capsys.readouterr().out
    from fastkpca import load

    expected = cls(n_components=3, landmarks=X[::5], gamma=0.3, random_state=0).fit(X)
    np.testing.assert_allclose(
        load(tmp_path / "ny.npz").transform(X), expected.transform(X), rtol=1e-10, atol=1e-12
    )
    rc = main(
        [
            "fit",
            str(csv),
            "-m",
            "nystrom",
            "--landmarks",
            "kmeans",
            "--n-landmarks",
            "20",
            "-k",
            "3",
            "--label-column",
            "label",
            "-o",
            str(tmp_path / "ny2.npz"),
        ]
    )
    assert rc == 0 and "(in memory)" in capsys.readouterr().out


def test_param_and_float32(data, tmp_path, capsys):
    X, _, _, npy = data
    rc = main(
        [
            "fit",
            str(npy),
            "-m",
            "exact",
            "-k",
            "2",
            "--param",
            "eigen_solver=lanczos",
            "--dtype",
            "float32",
            "-o",
            str(tmp_path / "m.npz"),
        ]
    )
    assert rc == 0
    from fastkpca import load

    model = load(tmp_path / "m.npz")
    assert model.eigen_solver == "lanczos" and model.X_fit_.dtype == np.float32
    rc = main(
        [
            "transform",
            str(tmp_path / "m.npz"),
            str(npy),
            "--dtype",
            "float32",
            "-o",
            str(tmp_path / "t.npy"),
        ]
    )
    assert rc == 0 and np.load(tmp_path / "t.npy").dtype == np.float32


def test_info(data, tmp_path, capsys):
    X, _, _, npy = data
    argv = ["fit", str(npy), "-m", "exact", "-k", "2", "--gamma", "0.5"]
    assert main([*argv, "-o", str(tmp_path / "m.npz")]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "m.npz")]) == 0
    out = capsys.readouterr().out
    assert "estimator:       ExactKPCA" in out and "gamma=0.5" in out
    assert "X_fit_" in out and "array float64 (120, 4)" in out
    assert main(["info", "--json", str(tmp_path / "m.npz")]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["estimator"] == "ExactKPCA" and len(meta["eigenvalues"]) == 2


def test_evaluate_exact_model_on_its_training_data(data, tmp_path, capsys):
    X, _, csv, _ = data
    model = str(tmp_path / "m.npz")
    assert (
        main(["fit", str(csv), "-k", "3", "--gamma", "0.3", "--label-column", "label", "-o", model])
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", model, str(csv), "--label-column", "label", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_evaluated"] == 120 and res["n_components"] == 3
    m = res["metrics"]
    # exact KPCA evaluated against itself on the same rows: optimal up to round-off
    assert m["relative_rank_k_error"]["model"] == pytest.approx(1.0, abs=1e-6)
    assert m["relative_rank_k_error"]["exact"] == pytest.approx(1.0, abs=1e-6)
    assert m["embedding_error"]["model"] < 1e-8
    assert m["eigenvalue_error"]["model"] < 1e-8
    assert m["gram_spectral_error"]["model"] == pytest.approx(
        m["gram_spectral_error"]["exact"], rel=1e-6
    )
    # a random subsample, as a table
    assert (
        main(["evaluate", model, str(csv), "--label-column", "label", "--max-samples", "50"]) == 0
    )
    out = capsys.readouterr().out
    assert "on 50 of 120 rows" in out
    for name in (
        "relative_rank_k_error",
        "gram_spectral_error",
        "gram_frobenius_error",
        "embedding_error",
        "eigenvalue_error",
    ):
        assert name in out


def test_user_errors(data, tmp_path, capsys, monkeypatch):
    X, _, csv, npy = data
    model = str(tmp_path / "m.npz")
    assert main(["fit", str(npy), "-k", "2", "-o", model]) == 0
    capsys.readouterr()

    def error_of(argv):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("fastkpca: error: ") and err.count("\n") == 1
        return err

    assert "--sketch-size does not apply to --method auto (AutoKPCA)" in error_of(
        ["fit", str(npy), "--sketch-size", "5"]
    )
    assert "has no parameter 'bogus'" in error_of(["fit", str(npy), "--param", "bogus=1"])
    assert "use --label-column" in error_of(
        ["transform", model, str(csv), "-o", str(tmp_path / "t.npy")]
    )
    assert "write .npy, .csv, .tsv (optionally .csv.gz / .tsv.gz) or .parquet" in error_of(
        ["transform", model, str(npy), "-o", str(tmp_path / "t.xlsx")]
    )
    assert "n_components=500 is larger" in error_of(["fit", str(npy), "-m", "exact", "-k", "500"])
    assert "not a fastkpca model file" in error_of(["info", str(npy)])
    # a method whose module has not landed yet: one line, not a traceback
    import fastkpca.decomposition as dec

    monkeypatch.setitem(dec.METHODS, "future", "FutureKPCA")
    monkeypatch.setitem(dec._LAZY, "FutureKPCA", "future_method")
    assert "method 'future' (FutureKPCA) is not available" in error_of(
        ["fit", str(npy), "-m", "future"]
    )


# --- bench ----------------------------------------------------------------------------------------


@pytest.fixture
def bench_dir(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "_harness.py").write_text("")
    (folder / "hello.py").write_text(
        '"""Say hello."""\nimport sys\nprint("hello", *sys.argv[1:])\n'
    )
    (folder / "broken.py").write_text('"""Fail."""\nraise SystemExit(3)\n')
    return folder


def test_bench_runs_scripts(bench_dir, capfd):
    assert main(["bench", "--dir", str(bench_dir), "--list"]) == 0
    out = capfd.readouterr().out
    assert "hello" in out and "Say hello." in out and "broken" in out and "_harness" not in out
    assert main(["bench", "hello", "--dir", str(bench_dir), "--", "--n", "5"]) == 0
    out = capfd.readouterr().out
    assert "hello --n 5" in out and "== hello: ok" in out
    assert main(["bench", "broken", "--dir", str(bench_dir)]) == 1
    captured = capfd.readouterr()
    assert "failed (exit 3)" in captured.out and "benchmark(s) failed: broken" in captured.err
    assert main(["bench", "nope", "--dir", str(bench_dir)]) == 1
    assert "unknown benchmark nope" in capfd.readouterr().err


def test_bench_without_checkout(monkeypatch, capsys):
    monkeypatch.setattr(cli.bench, "_find_benchmarks", lambda directory=None: None)
    for argv in (["bench"], ["bench", "--list"]):
        assert main(argv) == 1
        assert (
            "not installed with the package: run it from a source checkout"
            in capsys.readouterr().err
        )
    with pytest.raises(SystemExit) as exc:  # "--" passes arguments to benchmark scripts only
        main(["fit", "x.npy", "--", "y"])
    assert exc.value.code == 2


# --- demo -----------------------------------------------------------------------------------------


def test_run_demo_tiny(tmp_path):
    from fastkpca._demo import run_demo

    methods = ["exact"] + [m for m in ("nystrom", "reduced-set") if m in available_methods()]
    out_file = tmp_path / "table.txt"
    with open(out_file, "w") as f:
        rows = run_demo(
            output=tmp_path / "d.png", n_samples=200, n_components=3, methods=methods, file=f
        )
    assert [r["method"] for r in rows] == methods
    exact = rows[0]
    assert not exact.get("error")
    # exact KPCA is the reference: optimal rank-k error and zero embedding error (round-off)
    assert exact["rank_k_error"] == pytest.approx(1.0, abs=1e-6)
    assert exact["embedding_error"] < 1e-10
    for r in rows:
        assert not r.get("error"), r
        # Eckart-Young: no rank-k embedding beats the best rank-k approximation
        assert r["rank_k_error"] >= 1.0 - 1e-9
        assert r["fit_s"] > 0 and r["transform_s"] > 0 and r["peak_mib"] > 0
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = out_file.read_text()
    assert "200 x 16" in table and "peak MiB" in table


def test_demo_reports_failures(tmp_path, capsys, monkeypatch):
    from fastkpca import _demo

    original = _demo.method_settings
    monkeypatch.setattr(
        _demo,
        "method_settings",
        lambda n: {**original(n), "exact": {"eigen_solver": "no-such-solver"}},
    )
    assert main(["demo", "--n-samples", "60", "--methods", "exact", "--no-plot", "-k", "2"]) == 1
    captured = capsys.readouterr()
    assert "failed: ValueError" in captured.out
    assert "demo: method(s) failed: exact" in captured.err


def test_module_entry_point_exists():
    assert (Path(cli.__file__).parents[1] / "__main__.py").is_file()


def test_npy_writer_streams_unknown_length(tmp_path):
    writer = _NpyWriter(tmp_path / "o.npy")
    blocks = [np.arange(6.0).reshape(3, 2), np.ones((1000, 2)), np.zeros((2, 2))]
    for b in blocks:
        writer.write(b)
    writer.close()
    out = np.load(tmp_path / "o.npy")
    np.testing.assert_array_equal(out, np.concatenate(blocks))
    mm = np.load(tmp_path / "o.npy", mmap_mode="r")  # a standard .npy: memory-maps too
    assert mm.shape == (1005, 2)


def test_libsvm_files_of_different_widths(tmp_path, capsys):
    """A LIBSVM test file whose rows stop short of the last features still fits the model."""
    from sklearn.datasets import dump_svmlight_file

    from fastkpca import ExactKPCA

    rng = np.random.default_rng(1)
    X = rng.random((60, 9))
    X[X < 0.5] = 0
    X[:, -1] = np.where(np.arange(60) % 7 == 0, 1.0, 0.0)
    y = rng.choice([-1, 1], size=60)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=False)
    X_test = X[:10].copy()
    X_test[:, 5:] = 0  # the widest row of this file reaches feature 5 only
    dump_svmlight_file(X_test, y[:10], str(tmp_path / "test.svm"), zero_based=False)
    assert (
        main(
            [
                "fit",
                str(tmp_path / "train.svm"),
                "-k",
                "2",
                "--gamma",
                "0.5",
                "-o",
                str(tmp_path / "m.npz"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "transform",
                str(tmp_path / "m.npz"),
                str(tmp_path / "test.svm"),
                "-o",
                str(tmp_path / "t.npy"),
            ]
        )
        == 0
    )
    expected = ExactKPCA(n_components=2, gamma=0.5, random_state=0).fit(X).transform(X_test)
    np.testing.assert_allclose(np.load(tmp_path / "t.npy"), expected, rtol=1e-10, atol=1e-12)


def test_method_registry():
    import ast
    import importlib.util

    import fastkpca._demo
    from fastkpca.decomposition import METHODS

    assert cli.METHODS is METHODS
    assert estimator_class("exact").__name__ == "ExactKPCA"
    assert "rf" not in available_methods()  # aliases are left out
    with pytest.raises(ValueError, match="unknown method 'pca'; choose one of exact, nystrom"):
        estimator_class("pca")
    # the demo finds methods in the registry, not through the command line (no import cycle)
    imported = set()
    for node in ast.walk(ast.parse(Path(fastkpca._demo.__file__).read_text())):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), "fastkpca")
            imported.update([base] + [f"{base}.{alias.name}" for alias in node.names])
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert "fastkpca.decomposition" in imported and "fastkpca.cli" not in imported


def test_evaluate_and_fit_report_the_error_estimate(tmp_path, capsys):
    """The estimate of fastkpca.metrics.estimate_error, without and with exact KPCA beside it."""
    from fastkpca.datasets import make_random_noisy
    from fastkpca.metrics import relative_rank_k_error

    X = make_random_noisy(1500, 10, signal_dim=5, random_state=0)
    path = tmp_path / "x.npy"
    np.save(path, X)
    model = tmp_path / "m.npz"
    rc = main(
        [
            "fit",
            str(path),
            "-m",
            "nystrom",
            "-k",
            "4",
            "--param",
            "n_landmarks=40",
            "-q",
            "--estimate-error",
            "--n-probe",
            "600",
            "-o",
            str(model),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "error estimate on 1500 of 1500 rows" in out
    assert "relative rank-k error" in out and "eigenvalue error" in out
    assert (
        main(
            [
                "evaluate",
                str(model),
                str(path),
                "--max-samples",
                "1500",
                "--n-probe",
                "600",
                "--json",
                "-q",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    est = res["estimate"]["relative_rank_k_error"]
    truth = res["metrics"]["relative_rank_k_error"]["model"]
    # the calibration criterion: err - 1 within a factor 2 of the truth, or 0.01
    assert abs(est["estimate"] - truth) <= max(0.01, (truth - 1) / 2) or (
        0.5 <= (est["estimate"] - 1) / (truth - 1) <= 2
    )
    assert "probe of 600 rows" in res["why_they_differ"]
    fitted = __import__("fastkpca").load(model)
    assert truth == pytest.approx(relative_rank_k_error(X, fitted.transform(X), fitted.kernel_))
    # both figures for people: each says what it is, and a line says why they differ
    args = ["evaluate", str(model), str(path), "--max-samples", "1500", "--n-probe", "600", "-q"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "error estimate (fastkpca.metrics.estimate_error)" in out and "against exact KPCA" in out
    assert "the two relative rank-k errors differ: the estimate reads a probe of 600 rows" in out
    # only the estimate: no exact KPCA, so no exact table
    assert main(["evaluate", str(model), str(path), "--no-exact", "--n-probe", "600", "-q"]) == 0
    out = capsys.readouterr().out
    assert "relative rank-k error" in out and "against exact KPCA" not in out


# --- the default method, and what cannot fit refused before the data are read -------------------


def test_the_default_method_is_auto(tmp_path, capsys):
    X = np.random.default_rng(0).standard_normal((400, 3))
    np.save(tmp_path / "x.npy", X)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "-o", str(tmp_path / "m.npz")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fitted AutoKPCA (2 components") and "chosen" in out
    parser = cli.build_parser()
    assert parser.parse_args(["fit", "x.npy"]).method == "auto"


@pytest.fixture
def little_memory(monkeypatch):
    """A machine with 64 MiB available."""
    from fastkpca.cli import fit as fit_command
    from fastkpca.execution import memory

    for module in (memory, fit_command):
        monkeypatch.setattr(module, "available_memory_bytes", lambda: 64 * 2**20)


def _unreadable(monkeypatch, reader_class):
    def refuse(self):
        raise AssertionError("the file was read")

    monkeypatch.setattr(reader_class, "_blocks", refuse)


def test_exact_that_cannot_fit_is_refused_before_reading_a_npy(
    tmp_path, capsys, monkeypatch, little_memory
):
    from fastkpca.source.files import NpyReader

    np.save(tmp_path / "x.npy", np.zeros((6000, 2)))  # a 275 MiB Gram
    _unreadable(monkeypatch, NpyReader)
    argv = ["fit", str(tmp_path / "x.npy"), "-m", "exact", "--eigen-solver", "dense"]
    assert main([*argv, "-o", str(tmp_path / "m.npz")]) == 1
    err = capsys.readouterr().err
    assert "ExactKPCA's 6000 x 6000 Gram matrix" in err
    assert f"refused before reading {tmp_path / 'x.npy'}: 6,000 rows" in err
    assert "the file was read" not in err and not (tmp_path / "m.npz").exists()


def test_exact_that_cannot_fit_is_refused_before_reading_a_csv(
    tmp_path, capsys, monkeypatch, little_memory
):
    from fastkpca.source.files import TextReader

    path = tmp_path / "x.csv"
    rows = np.random.default_rng(0).standard_normal((40000, 2))
    np.savetxt(path, rows, delimiter=",", fmt="%.6f")
    _unreadable(monkeypatch, TextReader)
    argv = ["fit", str(path), "-m", "exact", "--eigen-solver", "dense", "-o", "m.npz"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Gram matrix" in err and f"refused before reading {path}: about " in err
    assert "estimated from its size" in err and "the file was read" not in err


def test_rows_that_cannot_fit_in_memory_are_refused_before_reading(
    tmp_path, capsys, monkeypatch, little_memory
):
    from fastkpca.source.files import NpyReader

    np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", shape=(200_000, 60))  # 92 MiB
    _unreadable(monkeypatch, NpyReader)
    assert main(["fit", str(tmp_path / "x.npy"), "-m", "reduced-set", "-o", "m.npz"]) == 1
    err = capsys.readouterr().err
    assert "rows as dense rows (200000 x 60 float64) needs" in err and "refused before" in err


def test_auto_streams_rows_that_would_not_fit_in_memory(tmp_path, capsys, monkeypatch):
    from fastkpca.cli import fit as fit_command

    X = np.random.default_rng(0).standard_normal((3000, 3))
    np.save(tmp_path / "x.npy", X)
    monkeypatch.setattr(fit_command, "available_memory_bytes", lambda: 100_000)
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "-o", str(tmp_path / "m.npz")]) == 0
    assert "(streamed)" in capsys.readouterr().out


# --- what the command writes, it reads; what it says of a model ---------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_transform_writes_the_models_output_names(tmp_path, capsys, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    from fastkpca import load
    from fastkpca.source.files import open_data

    X = np.random.default_rng(0).standard_normal((300, 3))
    np.save(tmp_path / "x.npy", X)
    model = tmp_path / "m.npz"
    argv = ["fit", str(tmp_path / "x.npy"), "-m", "nystrom", "-k", "2", "-o", str(model)]
    assert main(argv) == 0
    out = tmp_path / f"t{suffix}"
    assert main(["transform", str(model), str(tmp_path / "x.npy"), "-o", str(out)]) == 0
    fitted = load(model)
    reader = open_data(out)
    assert reader.column_names == ["nystromkpca0", "nystromkpca1"]
    assert list(fitted.get_feature_names_out()) == reader.column_names
    T, _ = reader.read()
    np.testing.assert_allclose(T, fitted.transform(X), rtol=1e-12, atol=1e-12)


def test_info_on_an_auto_model_says_what_it_chose(tmp_path, capsys):
    from fastkpca import load

    X = np.random.default_rng(0).standard_normal((2000, 3))
    np.save(tmp_path / "x.npy", X)
    model = tmp_path / "m.npz"
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "-q", "-o", str(model)]) == 0
    capsys.readouterr()
    assert main(["info", str(model)]) == 0
    out = capsys.readouterr().out
    fitted = load(model)
    inner = fitted.estimator_
    assert f"chosen method:   {fitted.method_} ({type(inner).__name__}" in out
    assert "eigenvalues:     " + " ".join(f"{v:.6g}" for v in inner.eigenvalues_) in out
    assert "n_components_:   2" in out
    assert main(["info", str(model), "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)["chosen"]
    assert chosen["method"] == fitted.method_ and len(chosen["eigenvalues"]) == 2


@pytest.mark.parametrize("estimate", [None, 7, 2500, 10**6])
def test_a_text_file_is_read_into_one_array_whatever_its_estimate(tmp_path, estimate):
    """Rows of unknown count fill one array allocated for the estimate and resized in place
    (grown when the estimate falls short, cut to the rows at the end)."""
    from argparse import Namespace

    from fastkpca.cli._data import _read_all
    from fastkpca.source.files import open_data

    X = np.random.default_rng(0).standard_normal((3000, 4))
    path = tmp_path / "x.csv"
    np.savetxt(path, X, delimiter=",", fmt="%.17g")
    reader = open_data(path, block_rows=256)
    reader.rows_estimate = lambda: estimate
    out = _read_all(reader, Namespace(quiet=True), dense=True)
    assert out.shape == (3000, 4) and out.flags.owndata
    np.testing.assert_array_equal(out, X)
