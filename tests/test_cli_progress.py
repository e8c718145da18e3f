"""Progress where it is read: a bar on a terminal, plain lines in pipes and logs (with the rate,
the time elapsed and, with a total, the time left), nothing and no error without an output."""

from __future__ import annotations

import io
import sys
import time

import numpy as np
import pytest

from fastkpca.cli import main
from fastkpca.decomposition import AutoKPCA, available_methods
from fastkpca.execution import progress
from fastkpca.execution.progress import Progress, heartbeat, note, track_rows, using_verbose


@pytest.fixture
def every_update(monkeypatch):
    """A progress line at every update (the interval is seconds otherwise)."""
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_lines_in_a_log_have_rate_elapsed_and_time_left(every_update):
    out = io.StringIO()
    with Progress("reading x.csv", total=1000, unit="B", enabled=True, file=out) as p:
        p.update(250, rows=10)
        p.update(250, rows=20)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("reading x.csv: 10 rows, 250 B of 1000 B (25%), ")
    assert "rows/s" in lines[0] and "elapsed" in lines[0] and "left" in lines[0]
    # the last line stays: what was done, in how long
    assert lines[-1].startswith("reading x.csv: done, 20 rows, 500 B of 1000 B (50%) in ")


def test_a_pass_ended_by_an_error_says_it_stopped():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with Progress("reading", total=10, enabled=True, file=out, interval=0.0) as p:
            p.update(4)
            raise KeyboardInterrupt
    assert out.getvalue().splitlines()[-1].startswith("reading: stopped after 4 of 10 rows")


def test_lines_without_a_total():
    out = io.StringIO()
    with Progress("fitting", enabled=True, file=out, interval=0.0) as p:
        p.update(5)
    assert out.getvalue().splitlines()[0].startswith("fitting: 5 rows, ")
    assert "left" not in out.getvalue()


def test_a_line_every_interval_not_every_update():
    out = io.StringIO()
    with Progress("fitting", total=10**6, enabled=True, file=out, interval=3600) as p:
        for _ in range(1000):
            p.update(10)
    assert out.getvalue() == ""  # and a pass shorter than the interval has no last line


def test_a_bar_on_a_terminal_that_stays():
    out = _Terminal()
    with Progress("reading", total=10, enabled=True, file=out) as p:
        p.update(10)
    assert "reading: 100%" in out.getvalue()
    assert out.getvalue().endswith("\n")  # left in place (leave=True), not erased


def test_silent_without_verbose_or_output(every_update, monkeypatch):
    out = io.StringIO()
    with Progress("x", total=3, file=out) as p:  # the running call is not verbose
        p.update(3)
    assert out.getvalue() == ""
    for stderr in (None, _closed()):
        monkeypatch.setattr(sys, "stderr", stderr)
        with Progress("x", total=3, enabled=True) as p:
            p.update(3)
        note("a line", enabled=True)
        with heartbeat("x", enabled=True, interval=0.01):
            time.sleep(0.05)


def _closed():
    stream = io.StringIO()
    stream.close()
    return stream


def test_heartbeat_says_the_time_elapsed_when_nothing_else_is_written():
    out = io.StringIO()
    with heartbeat("fitting AutoKPCA", enabled=True, file=out, interval=0.2):
        time.sleep(1.3)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("fitting AutoKPCA: ") for line in lines)
    assert lines[0].endswith("s elapsed")


def test_only_the_innermost_heartbeat_speaks():
    out = io.StringIO()
    with heartbeat("outer", enabled=True, file=out, interval=0.2):
        with heartbeat("inner", enabled=True, file=out, interval=0.2):
            time.sleep(1.3)
        time.sleep(1.3)
    lines = out.getvalue().splitlines()
    inner = [i for i, line in enumerate(lines) if line.startswith("inner: ")]
    outer = [i for i, line in enumerate(lines) if line.startswith("outer: ")]
    assert inner and outer and max(inner) < min(outer)


def test_library_progress_follows_verbose(every_update, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    blocks = [(0, np.zeros((3, 2))), (3, np.zeros((4, 2)))]
    assert list(track_rows(iter(blocks), total=7, desc="shadow")) == blocks
    assert out.getvalue() == ""
    with using_verbose(1):
        list(track_rows(iter(blocks), total=7, desc="shadow"))
    assert "shadow: done, 7 of 7 rows (100%)" in out.getvalue()


@pytest.mark.parametrize("stderr", ["none", "closed"])
def test_verbose_estimators_survive_without_stderr(monkeypatch, stderr):
    """A daemon or a notebook kernel may have no stderr: verbose=1 must not crash a fit."""
    X = np.random.default_rng(0).standard_normal((300, 4))
    classes = [*available_methods().values(), AutoKPCA]
    monkeypatch.setattr(sys, "stderr", None if stderr == "none" else _closed())
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    for cls in classes:
        if "verbose" not in cls().get_params():
            continue
        model = cls(n_components=2, random_state=0, verbose=1).fit(X)
        assert model.transform(X[:5]).shape == (5, 2), cls.__name__


def _csv(tmp_path, n=3000, d=4):
    X = np.random.default_rng(0).standard_normal((n, d))
    path = tmp_path / "data.csv"
    header = ",".join(f"f{j}" for j in range(d))
    np.savetxt(path, X, delimiter=",", header=header, comments="", fmt="%.10g")
    return path


def test_fit_and_transform_log_progress_when_piped(tmp_path, capsys, every_update):
    path = _csv(tmp_path)
    model = tmp_path / "m.npz"
    argv = ["fit", str(path), "-m", "nystrom", "--block-rows", "500", "-o", str(model)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    # a CSV's rows are counted against the file's size, with the time left
    assert f"fitting NystromKPCA on {path}: " in err and " KiB of " in err and "left" in err
    assert f"fitting NystromKPCA on {path}: done, 3,000 rows" in err
    assert main(["transform", str(model), str(path), "-o", str(tmp_path / "t.npy")]) == 0
    err = capsys.readouterr().err
    assert f"transforming {path}: done, 3,000 rows" in err
    assert main(["fit", str(path), "-m", "exact", "-o", str(tmp_path / "e.npz")]) == 0
    err = capsys.readouterr().err
    assert f"reading {path}: done, 3,000 rows" in err


def test_a_fit_in_memory_has_a_heartbeat(tmp_path, capsys, monkeypatch):
    path = _csv(tmp_path)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.05)
    cls = available_methods()["exact"]
    original = cls.fit

    def slow_fit(self, X, y=None):
        time.sleep(0.5)
        return original(self, X, y)

    monkeypatch.setattr(cls, "fit", slow_fit)
    assert main(["fit", str(path), "-m", "exact", "-o", str(tmp_path / "e.npz")]) == 0
    err = capsys.readouterr().err
    assert f"fitting ExactKPCA on {path}: " in err and " s elapsed" in err


def test_short_passes_write_nothing_to_a_log(tmp_path, capsys):
    path = _csv(tmp_path, n=200)
    assert main(["fit", str(path), "-m", "nystrom", "-o", str(tmp_path / "m.npz")]) == 0
    assert capsys.readouterr().err == ""


def test_quiet_has_no_progress(tmp_path, capsys, every_update):
    path = _csv(tmp_path)
    assert main(["fit", str(path), "-m", "nystrom", "-q", "-o", str(tmp_path / "m.npz")]) == 0
    assert capsys.readouterr().err == ""
