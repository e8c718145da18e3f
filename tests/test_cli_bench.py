"""``fastkpca bench`` writes into a folder the user names, never over files it did not write."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from fastkpca import cli
from fastkpca.cli import _common, bench, main

REPO = Path(__file__).resolve().parents[1]

#: A benchmark script that writes its result where the harness says (``$FASTKPCA_BENCH_RESULTS``).
_SCRIPT = '''"""Write a result."""
import json, os, sys
folder = os.environ["FASTKPCA_BENCH_RESULTS"]
os.makedirs(folder, exist_ok=True)
quick = "--quick" in sys.argv
with open(os.path.join(folder, "writer_quick.json" if quick else "writer.json"), "w") as f:
    json.dump({"args": sys.argv[1:]}, f)
'''


@pytest.fixture
def bench_dir(tmp_path, monkeypatch):
    folder = tmp_path / "checkout" / "benchmarks"
    folder.mkdir(parents=True)
    (folder / "_harness.py").write_text("")
    (folder / "writer.py").write_text(_SCRIPT)
    (folder / "silent.py").write_text('"""Write nothing."""\nprint("quiet")\n')
    (folder / "broken.py").write_text(
        '"""Fail after writing."""\n' + _SCRIPT + "raise SystemExit(3)\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def test_default_folder_is_in_the_current_directory(bench_dir, capfd):
    assert main(["bench", "writer", "--dir", str(bench_dir), "--quick"]) == 0
    out = Path.cwd() / _common.DEFAULT_BENCH_OUT
    assert json.loads((out / "writer_quick.json").read_text())["args"] == ["--quick"]
    record = json.loads((out / bench.BENCH_MANIFEST).read_text())
    assert record["files"] == {"writer_quick.json": "writer"}
    assert f"results in {out}" in capfd.readouterr().out
    # nothing in the benchmarks' own folder
    assert sorted(p.name for p in bench_dir.iterdir()) == [
        "_harness.py",
        "broken.py",
        "silent.py",
        "writer.py",
    ]


def test_rerun_replaces_its_own_files(bench_dir, tmp_path):
    out = tmp_path / "results"
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out)]) == 0
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out)]) == 0
    assert json.loads((out / bench.BENCH_MANIFEST).read_text())["files"] == {
        "writer.json": "writer"
    }


def test_a_script_that_writes_nothing_creates_nothing(bench_dir, tmp_path):
    out = tmp_path / "results"
    assert main(["bench", "silent", "--dir", str(bench_dir), "--out", str(out)]) == 0
    assert not out.exists()


def test_files_of_a_failed_script_are_recorded(bench_dir, tmp_path, capfd):
    out = tmp_path / "results"
    assert main(["bench", "broken", "--dir", str(bench_dir), "--out", str(out)]) == 1
    assert "benchmark(s) failed: broken" in capfd.readouterr().err
    assert json.loads((out / bench.BENCH_MANIFEST).read_text())["files"] == {
        "writer.json": "broken"
    }


def test_foreign_files_are_refused_without_force(bench_dir, tmp_path, capfd):
    out = tmp_path / "results"
    out.mkdir()
    mine = out / "writer.json"
    mine.write_text("the user's own file")
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out)]) == 1
    err = capfd.readouterr().err
    assert "holds files fastkpca bench did not write (writer.json)" in err and "--force" in err
    assert mine.read_text() == "the user's own file"  # untouched, nothing run
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out), "--force"]) == 0
    assert "(--force)" in capfd.readouterr().err
    assert json.loads(mine.read_text())["args"] == []


def test_a_damaged_record_owns_nothing(bench_dir, tmp_path, capfd):
    out = tmp_path / "results"
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out)]) == 0
    (out / bench.BENCH_MANIFEST).write_text("not json")
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(out)]) == 1
    assert bench.BENCH_MANIFEST in capfd.readouterr().err


def test_out_must_be_a_folder_outside_the_package(bench_dir, tmp_path, capfd):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(a_file)]) == 1
    assert "is not a folder" in capfd.readouterr().err
    package = Path(cli.__file__).resolve().parent
    assert main(["bench", "writer", "--dir", str(bench_dir), "--out", str(package / "r")]) == 1
    assert "inside the fastkpca package" in capfd.readouterr().err


# --- the repository's scripts -----------------------------------------------------------------


def _harness():
    spec = importlib.util.spec_from_file_location("_bench_harness", REPO / "benchmarks/_harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_harness_reads_the_folder_bench_passes(monkeypatch, tmp_path):
    harness = _harness()
    assert harness.RESULTS_ENV == bench.BENCH_RESULTS_ENV
    monkeypatch.delenv(harness.RESULTS_ENV, raising=False)
    assert Path(harness.results_dir()) == REPO / "benchmarks" / "results"
    monkeypatch.setenv(harness.RESULTS_ENV, str(tmp_path))
    assert Path(harness.results_dir()) == tmp_path


def test_every_script_writes_through_the_harness():
    # No script builds the path of benchmarks/results itself: each takes the harness's folder,
    # so that `fastkpca bench --out DIR` redirects everything it writes.
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        if path.name == "_harness.py":
            continue
        text = path.read_text()
        assert not re.search(r"""["']results["']\)|/ ["']results["']""", text), path.name
        if "save_json" in text or "savefig" in text:
            assert "results_dir()" in text, path.name


def test_results_folder_is_ignored_by_git():
    assert f"/{_common.DEFAULT_BENCH_OUT}/" in (REPO / ".gitignore").read_text().split()
    assert os.sep not in _common.DEFAULT_BENCH_OUT
