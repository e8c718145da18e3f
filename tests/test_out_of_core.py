"""Out of core: fitting on file readers equals fitting on the array, in bounded memory; `bench`.

A reader (``fastkpca.io.open_data``) yields the file's rows in blocks of 8192, the block size the
estimators use on an in-memory array, so the one-pass methods see the same blocks either way and
agree to round-off (rtol 1e-10: only the order of float64 sums may differ, e.g. Nystrom's kernel
blocks are split by a memory budget in memory and by file block here).  The reference array is
the file read whole (``read_data``), so text round-off of the file does not enter.
"""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastkpca import load
from fastkpca.cli import main
from fastkpca.datasets import make_random_noisy
from fastkpca.decomposition.nystrom import NystromKPCA
from fastkpca.decomposition.random_features import RandomFeatureKPCA
from fastkpca.decomposition.streaming import StreamingKPCA
from fastkpca.io import open_data, read_data

RTOL = 1e-10
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data():
    # 20000 rows: three 8192-row blocks, the last one partial.
    return make_random_noisy(20000, 8, signal_dim=3, random_state=1)


def _write(X, path):
    fmt = path.suffix
    if fmt == ".npy":
        np.save(path, X)
    elif fmt == ".csv":
        np.savetxt(path, X, fmt="%.17g", delimiter=",")
    elif fmt == ".parquet":
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(
            pa.table({f"x{j}": X[:, j] for j in range(X.shape[1])}), path, row_group_size=5000
        )
    elif fmt == ".svm":
        from sklearn.datasets import dump_svmlight_file

        dump_svmlight_file(X, np.zeros(X.shape[0]), str(path))
    return path


@pytest.fixture(scope="module", params=[".npy", ".csv", ".parquet", ".svm"])
def data_file(request, data, tmp_path_factory):
    return _write(data, tmp_path_factory.mktemp("ooc") / f"x{request.param}")


def assert_same_model(a, b, X_new, rtol=RTOL):
    np.testing.assert_allclose(a.eigenvalues_, b.eigenvalues_, rtol=rtol)
    Ta, Tb = np.asarray(a.transform(X_new)), np.asarray(b.transform(X_new))
    assert np.max(np.abs(Ta - Tb)) <= rtol * np.max(np.abs(Tb))  # signs included
    assert a.n_samples_seen_ == b.n_samples_seen_


MODELS = {
    "streaming": lambda: StreamingKPCA(
        n_components=4, gamma=0.1, n_random_features=64, sketch_size=12, random_state=3
    ),
    "rf-exact": lambda: RandomFeatureKPCA(
        n_components=4, gamma=0.1, n_random_features=64, random_state=3
    ),
    # the second pass (Rayleigh-Ritz) reads the file again
    "rf-countsketch": lambda: RandomFeatureKPCA(
        n_components=4,
        gamma=0.1,
        n_random_features=64,
        solver="countsketch",
        n_buckets=200,
        random_state=3,
    ),
    # reservoir sampling, then the covariance: two passes over the file
    "nystrom-uniform": lambda: NystromKPCA(
        n_components=4, gamma=0.1, n_landmarks=80, random_state=3
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_fit_on_reader_equals_fit_on_array(data_file, name):
    reader = open_data(data_file)
    X, _ = read_data(data_file)
    X = X.toarray() if hasattr(X, "toarray") else X
    on_reader = MODELS[name]().fit(reader)
    on_array = MODELS[name]().fit(X)
    # LIBSVM files are read as CSR: random features then come from float64 sparse phases, the
    # array's from float32 dense ones (fastkpca.features), ~1e-8 apart.
    sparse_features = str(data_file).endswith(".svm") and name.startswith(("rf", "streaming"))
    assert_same_model(on_reader, on_array, X[:500], **({"rtol": 1e-6} if sparse_features else {}))


def test_nystrom_given_landmarks_on_reader(data, tmp_path):
    path = _write(data, tmp_path / "x.npy")
    L = data[::400]
    a = NystromKPCA(n_components=3, landmarks=L, gamma=0.1).fit(open_data(path))
    b = NystromKPCA(n_components=3, landmarks=L, gamma=0.1).fit(data)
    assert_same_model(a, b, data[:500])


def test_streaming_does_not_depend_on_the_block_size(data, tmp_path):
    # Frequent Directions shrinks after every ell rows whatever the blocking: same sketch.
    path = _write(data, tmp_path / "x.npy")
    a = MODELS["streaming"]().fit(open_data(path, block_rows=777))
    b = MODELS["streaming"]().fit(data)
    # float32 random features whose rounding depends on the row chunks (fastkpca.features).
    assert_same_model(a, b, data[:500], rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method, options, model",
    [
        ("streaming", ["--n-random-features", "64", "--sketch-size", "12"], "streaming"),
        (
            "random-features",
            ["--n-random-features", "64", "--solver", "countsketch", "--param", "n_buckets=200"],
            "rf-countsketch",
        ),
        ("nystrom", ["--n-landmarks", "80"], "nystrom-uniform"),
    ],
)
def test_cli_fit_streams_the_file(data, tmp_path, capsys, method, options, model):
    path = _write(data, tmp_path / "x.csv")
    out = tmp_path / "model.npz"
    assert (
        main(
            [
                "fit",
                str(path),
                "-m",
                method,
                "-k",
                "4",
                "--gamma",
                "0.1",
                "--seed",
                "3",
                *options,
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert "(streamed)" in capsys.readouterr().out
    X, _ = read_data(path)
    assert_same_model(load(out), MODELS[model]().fit(X), X[:500])


_PEAK_SCRIPT = textwrap.dedent("""
    import sys
    import fastkpca.cli.fit, fastkpca.decomposition.streaming  # imports: not the fit

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) / 1024 for l in f if l.startswith(key))

    base = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak mark (VmHWM)
        f.write("5")
    rc = fastkpca.cli.main(sys.argv[1:])
    print(rc, base, status("VmHWM:"))
""")


def _cli_peak_mb(args):
    """Run ``fastkpca ARGS`` in a fresh process; (exit status, RSS before, peak RSS) in MiB."""
    r = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, *args], capture_output=True, text=True, timeout=3600
    )
    assert r.returncode == 0, r.stderr
    rc, base, peak = r.stdout.split()[-3:]
    return int(rc), float(base), float(peak)


def _write_gaussian_npy(path, n, d, block=100_000):
    """An n x d float64 .npy of N(0, 1) rows, written block by block (never whole in memory)."""
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (n, d)}
        )
        for s in range(0, n, block):
            f.write(rng.standard_normal((min(block, n - s), d)).tobytes())
    return path


def _can_reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_reset_peak(),
    reason="peak RSS measured through /proc",
)
def test_cli_streamed_fit_memory_does_not_grow_with_the_file(tmp_path):
    # 300000 x 50 float64: a 114 MiB file.  The streamed fit holds one 8192-row block (3 MiB),
    # its features (8192 x 64, 4 MiB), the model and what the fit imports on the way (measured:
    # 15 MiB in all); reading the file whole, or through one memory map, adds its 114 MiB.
    path = _write_gaussian_npy(tmp_path / "x.npy", 300_000, 50)
    file_mb = path.stat().st_size / 2**20
    rc, base, peak = _cli_peak_mb(
        [
            "fit",
            str(path),
            "-m",
            "streaming",
            "-k",
            "3",
            "--n-random-features",
            "64",
            "--sketch-size",
            "8",
            "-q",
            "-o",
            str(tmp_path / "m.npz"),
        ]
    )
    assert rc == 0
    assert peak - base < min(40.0, file_mb / 3), (peak, base, file_mb)


@pytest.mark.slow
def test_cli_streaming_fit_of_a_2_4_gb_file_under_1_gb(tmp_path):
    # The figure: 3e6 x 100 float64 (2.4 GB) with --method streaming in < 1 GB peak.
    n, d = 3_000_000, 100
    if shutil.disk_usage(tmp_path).free < 3 * n * d * 8:
        pytest.skip("not enough free disk space for the 2.4 GB file")
    path = _write_gaussian_npy(tmp_path / "big.npy", n, d)
    try:
        rc, base, peak = _cli_peak_mb(
            [
                "fit",
                str(path),
                "-m",
                "streaming",
                "-k",
                "5",
                "--n-random-features",
                "128",
                "--sketch-size",
                "10",
                "-q",
                "-o",
                str(tmp_path / "m.npz"),
            ]
        )
    finally:
        path.unlink()
    assert rc == 0
    print(f"peak RSS {peak:.0f} MiB (before the fit {base:.0f} MiB)")
    assert peak < 1024


# ------------------------------------------------------------------------------------------------
# fastkpca bench --quick
# ------------------------------------------------------------------------------------------------
def test_bench_quick_passes_the_flag_and_skips_scripts_without_it(tmp_path, capfd):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "fast.py").write_text(
        '"""Has a quick mode."""\nimport argparse, sys\n'
        "p = argparse.ArgumentParser()\n"
        'p.add_argument("--quick", action="store_true")\n'
        'print("quick" if p.parse_args().quick else "full")\n'
    )
    (folder / "slow.py").write_text('"""No quick mode."""\nprint("ran full size")\n')
    assert main(["bench", "--quick", "--dir", str(folder)]) == 0
    out = capfd.readouterr().out
    assert "fast.py --quick" in out and "\nquick\n" in out
    assert "slow: skipped (the script has no --quick mode)" in out and "ran full size" not in out
    assert main(["bench", "fast", "--dir", str(folder)]) == 0
    assert "\nfull\n" in capfd.readouterr().out
    assert main(["bench", "slow", "--quick", "--dir", str(folder)]) == 1
    assert "no benchmark run" in capfd.readouterr().err


def test_every_benchmark_script_has_a_quick_mode():
    from fastkpca.cli.bench import _benchmark_scripts, _has_quick_mode

    scripts = _benchmark_scripts(REPO / "benchmarks")
    assert "bench_scale" in scripts
    missing = [name for name, path in scripts.items() if not _has_quick_mode(path)]
    assert not missing, f"benchmarks without --quick: {missing}"


def test_bench_scale_quick_smoke(tmp_path):
    # The scale benchmark's own code on 3000 rows (no cluster: that is test_dask's job).
    pytest.importorskip("dask")
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_scale.py"),
            "--quick",
            "--n-rows",
            "3000",
            "--modes",
            "memory",
            "disk",
            "--no-sklearn",
            "--out",
            str(tmp_path / "scale.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    result = json.loads((tmp_path / "scale.json").read_text())
    recs = {(r["method"], r["mode"]): r for r in result["records"]}
    assert all(r["ok"] for r in recs.values()) and len(recs) == 4
    # the same fit in memory and from disk: same eigenvalues
    np.testing.assert_allclose(
        recs["rf", "disk"]["eigenvalues"], recs["rf", "memory"]["eigenvalues"], rtol=1e-6
    )
