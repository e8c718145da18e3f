"""Set-up from a source checkout: ``make demo`` installs the core dependencies only, ``make test``
the test extra, and each does so from one ``.venv`` whichever ran first."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _dry_run(folder: Path, target: str) -> list[str]:
    """The pip commands ``make TARGET`` would run in ``folder`` (make -n: nothing is run)."""
    r = subprocess.run(
        ["make", "-n", target], cwd=folder, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if "pip install" in line]


def _run_stamps(folder: Path, target: str) -> None:
    """What ``make TARGET`` leaves behind, without installing: its stamp files."""
    r = subprocess.run(
        ["make", "-n", target], cwd=folder, capture_output=True, text=True, timeout=60
    )
    for line in r.stdout.splitlines():
        if line.startswith("touch "):
            for name in line.split()[1:]:
                (folder / name).touch()


def test_demo_and_test_install_what_each_needs_in_either_order(tmp_path):
    for order in (("demo", "test"), ("test", "demo")):
        folder = tmp_path / "-".join(order)
        folder.mkdir()
        shutil.copy(REPO / "Makefile", folder)
        shutil.copy(REPO / "pyproject.toml", folder)
        old = time.time() - 100  # pyproject.toml older than the stamps made below
        os.utime(folder / "pyproject.toml", (old, old))
        (folder / ".venv" / "bin").mkdir(parents=True)
        (folder / ".venv" / "bin" / "python").touch()
        first, second = order
        installs = {"demo": ["-e ."], "test": ["-e '.[test]'"]}
        pip = _dry_run(folder, first)
        assert [line.split("--quiet ")[-1] for line in pip] == installs[first], pip
        _run_stamps(folder, first)
        assert _dry_run(folder, first) == []  # done
        pip = _dry_run(folder, second)
        if second == "test":
            # the demo's set-up does not stand for the test extra
            assert [line.split("--quiet ")[-1] for line in pip] == installs["test"], pip
        else:
            assert pip == []  # the test extra includes the core dependencies


def test_demo_needs_only_the_core_dependencies():
    """The demo's modules import nothing beyond numpy, scipy, scikit-learn, threadpoolctl and
    tqdm (matplotlib only for the plot, which is skipped without it)."""
    code = (
        "import sys\n"
        "class Absent:\n"  # these packages are not installed, as in the demo's .venv
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'dask', 'pyarrow', 'matplotlib', 'pandas'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from fastkpca.cli import main\n"
        "rc = main(['demo', '--n-samples', '300', '-k', '2', '-o', sys.argv[1]])\n"
        "print('RC', rc)\n"
    )
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "demo.png"
        r = subprocess.run(
            [sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=600
        )
        assert "RC 0" in r.stdout, r.stderr[-2000:]
        assert "plot skipped: matplotlib is not installed" in r.stdout
        assert not out.exists()
