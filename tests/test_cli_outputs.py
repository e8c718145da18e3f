"""The command line never overwrites a file it did not write, and a terminated write leaves
nothing behind.

A file that must not change is checked by name, size and SHA-256 (:func:`fingerprint`).
"""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fastkpca.cli import main
from fastkpca.persistence import is_model_file


def fingerprint(path: Path) -> tuple[str, int, str]:
    """(name, size, SHA-256) of a file."""
    data = path.read_bytes()
    return path.name, len(data), hashlib.sha256(data).hexdigest()


def temporary_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fastkpca: error: "), err
    return lines[0]


@pytest.fixture
def train(tmp_path):
    """A small CSV training file (header a,b,c)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    path = tmp_path / "train.csv"
    path.write_text("a,b,c\n" + "".join(",".join(repr(float(v)) for v in r) + "\n" for r in X))
    return path


FIT = ["-m", "exact", "-k", "2", "--gamma", "0.5"]


# --- fit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["test.csv", "other.npz"])
def test_fit_refuses_to_overwrite_a_file_that_is_not_a_model(train, tmp_path, capsys, victim):
    """``fit train.csv -o test.csv`` (or another tool's .npz) is refused and the file kept."""
    target = tmp_path / victim
    if victim.endswith(".npz"):
        np.savez(target, weights=np.arange(5.0))  # an .npz archive, but not a fastkpca model
    else:
        target.write_text("x,y\n1,2\n")
    before = fingerprint(target)
    assert main(["fit", str(train), *FIT, "-o", str(target)]) == 1
    line = one_line_error(capsys)
    assert str(target) in line and "not a fastkpca model" in line and "--force" in line
    assert fingerprint(target) == before
    assert temporary_files(tmp_path) == []


def test_fit_without_output_keeps_a_foreign_model_npz(train, tmp_path, capsys, monkeypatch):
    """The default ``./model.npz`` follows the same rule: a file that is not a model stays."""
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "model.npz"
    foreign.write_bytes(b"not a model, but someone's file")
    before = fingerprint(foreign)
    assert main(["fit", str(train), *FIT]) == 1
    line = one_line_error(capsys)
    assert "model.npz" in line and "default output" in line
    assert fingerprint(foreign) == before


def test_fit_replaces_a_fastkpca_model_and_says_so(train, tmp_path, capsys):
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), *FIT, "-o", str(model)]) == 0
    assert capsys.readouterr().err == ""  # a new file: nothing to say
    first = fingerprint(model)
    assert (
        main(["fit", str(train), "-m", "exact", "-k", "1", "--gamma", "0.5", "-o", str(model)]) == 0
    )
    err = capsys.readouterr().err
    assert err.strip() == f"fastkpca: replacing the fastkpca model {model}"
    assert fingerprint(model) != first and is_model_file(model)


def test_fit_force_replaces_any_file_and_says_so(train, tmp_path, capsys):
    target = tmp_path / "test.csv"
    target.write_text("x,y\n1,2\n")
    assert main(["fit", str(train), *FIT, "-o", str(target), "--force"]) == 0
    assert capsys.readouterr().err.strip() == f"fastkpca: replacing {target} (--force)"
    assert is_model_file(target)


def test_force_never_replaces_an_input_a_folder_or_a_pipe(train, tmp_path, capsys):
    before = fingerprint(train)
    assert main(["fit", str(train), *FIT, "-o", str(train), "--force"]) == 1
    assert "is the data file" in one_line_error(capsys)
    assert fingerprint(train) == before
    folder = tmp_path / "out"
    folder.mkdir()
    assert main(["fit", str(train), *FIT, "-o", str(folder), "--force"]) == 1
    assert "is a folder" in one_line_error(capsys)
    pipe = tmp_path / "pipe.npz"
    os.mkfifo(pipe)
    assert main(["fit", str(train), *FIT, "-o", str(pipe), "--force"]) == 1
    assert "not a regular file" in one_line_error(capsys)
    assert pipe.is_fifo()


# --- transform and demo -------------------------------------------------------------------------


def test_transform_refuses_an_existing_output_without_force(train, tmp_path, capsys):
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), *FIT, "-o", str(model)]) == 0
    out = tmp_path / "results.csv"
    out.write_text("someone's results\n")
    before = fingerprint(out)
    capsys.readouterr()
    assert main(["transform", str(model), str(train), "-o", str(out)]) == 1
    line = one_line_error(capsys)
    assert str(out) in line and "--force" in line
    assert fingerprint(out) == before
    assert main(["transform", str(model), str(train), "-o", str(out), "--force"]) == 0
    assert capsys.readouterr().err.strip() == f"fastkpca: replacing {out} (--force)"
    assert out.read_text().startswith("exactkpca0,exactkpca1\n")  # get_feature_names_out()


def test_demo_replaces_its_own_plot_only(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    argv = ["demo", "--n-samples", "60", "--methods", "exact", "-k", "2"]
    plot = tmp_path / "demo.png"
    assert main([*argv, "-o", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    assert main([*argv, "-o", str(plot)]) == 0  # its own earlier plot: replaced
    assert capsys.readouterr().err.strip() == f"fastkpca: replacing the fastkpca demo plot {plot}"
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + b"someone's picture")
    before = fingerprint(photo)
    assert main([*argv, "-o", str(photo)]) == 1
    assert "not a fastkpca demo plot" in one_line_error(capsys)
    assert fingerprint(photo) == before


# --- termination mid-write ----------------------------------------------------------------------

# Runs the command with a hook that stops it while its output is being written (its temporary
# file exists and holds data) and says so on stdout; the test then sends the signal.
_DRIVER = textwrap.dedent(
    """
    import contextlib, signal, sys, time
    import fastkpca.cli as cli
    import fastkpca.cli.transform
    import fastkpca.persistence as persistence

    # the command keeps a signal its parent ignores ignored (nohup): the test's own run may be
    # under nohup, the command under test is not
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)

    if sys.argv[1] == "model":
        # fit: the model file is complete in its temporary file, not yet renamed
        atomic_output = persistence.atomic_output

        @contextlib.contextmanager
        def slow_output(path):
            with atomic_output(path) as tmp:
                yield tmp
                print("writing", tmp, flush=True)
                time.sleep(120)

        persistence.atomic_output = slow_output
    else:
        # transform: the first block of projections is written, the writer still open
        write = cli.transform._NpyWriter.write

        def slow_write(self, block):
            write(self, block)
            self.f.flush()
            print("writing", self.path, flush=True)
            time.sleep(120)

        cli.transform._NpyWriter.write = slow_write
    sys.exit(cli.main(sys.argv[2:]))
    """
)


def _terminate_mid_write(tmp_path, stage, argv, signum):
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(driver), stage, *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("writing "), proc.stderr.read()
        partial = Path(line.split(" ", 1)[1].strip())
        assert partial.name.endswith(".tmp") and partial.stat().st_size > 0
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, partial


@pytest.mark.parametrize(
    "signum",
    [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)],
    ids=["SIGTERM", "SIGHUP"],
)
def test_terminated_fit_leaves_no_temporary_file(train, tmp_path, signum):
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), *FIT, "-o", str(model)]) == 0
    before = fingerprint(model)
    argv = ["fit", train, "-m", "exact", "-k", "1", "--gamma", "0.5", "-o", model]
    rc, err, partial = _terminate_mid_write(tmp_path, "model", argv, signum)
    assert rc == 128 + signum, err
    assert f"terminated by {signal.Signals(signum).name}" in err
    assert not partial.exists() and temporary_files(tmp_path) == []
    assert fingerprint(model) == before  # the old model, whole


def test_terminated_transform_leaves_no_temporary_file(train, tmp_path):
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), *FIT, "-o", str(model)]) == 0
    out = tmp_path / "t.npy"
    argv = ["transform", model, train, "--block-rows", "10", "-o", out]
    rc, err, partial = _terminate_mid_write(tmp_path, "projections", argv, signal.SIGTERM)
    assert rc == 143, err
    assert not partial.exists() and temporary_files(tmp_path) == []
    assert not out.exists()


def test_an_output_into_a_missing_folder_names_that_folder(tmp_path, capsys):
    """``-o link.npz``, a link to a file in a folder that does not exist (a dangling link), or a
    name in a missing folder: refused before the fit, naming the folder (not "."), and nothing
    is created."""
    train = tmp_path / "x.npy"
    np.save(train, np.random.default_rng(0).standard_normal((50, 2)))
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "missing" / "dir" / "m.npz")
    for out, folder in ((link, tmp_path / "missing" / "dir"), (tmp_path / "no" / "m.npz", None)):
        assert main(["fit", str(train), *FIT, "-o", str(out)]) == 1
        line = one_line_error(capsys)
        folder = folder or out.parent
        assert f"folder {folder} does not exist" in line and "folder not found: ." not in line
    assert main(["fit", str(train), *FIT, "-o", str(link)]) == 1
    assert "is a link to" in one_line_error(capsys)
    assert not (tmp_path / "missing").exists() and not (tmp_path / "no").exists()
    # a dangling link into an existing folder is free: its target is written, the link kept
    target = tmp_path / "real.npz"
    link2 = tmp_path / "link2.npz"
    link2.symlink_to(target)
    assert main(["fit", str(train), *FIT, "-o", str(link2)]) == 0
    assert target.is_file() and link2.is_symlink()


def test_the_library_names_the_missing_folder_of_a_link(tmp_path):
    from fastkpca.persistence import atomic_output

    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "missing" / "m.npz")
    with pytest.raises(FileNotFoundError, match=f"folder not found: {tmp_path / 'missing'}"):
        with atomic_output(link):
            pass


def test_transform_to_parquet_keeps_the_rule(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    train = tmp_path / "x.npy"
    np.save(train, np.random.default_rng(0).standard_normal((50, 2)))
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), *FIT, "-o", str(model)]) == 0
    out = tmp_path / "t.parquet"
    out.write_bytes(b"someone's table")
    assert main(["transform", str(model), str(train), "-o", str(out)]) == 1
    assert "--force" in one_line_error(capsys) and out.read_bytes() == b"someone's table"
    assert main(["transform", str(model), str(train), "-o", str(out), "--force"]) == 0
