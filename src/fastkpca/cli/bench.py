"""``fastkpca bench``: run the repository's benchmark scripts into a results folder."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ..persistence import atomic_output
from ._common import CLIError


def _find_benchmarks(directory=None) -> Path | None:
    """The repository's ``benchmarks/`` folder (it is not part of the installed package)."""
    if directory:
        if not Path(directory).is_dir():
            raise CLIError(f"benchmarks folder not found: {directory}")
        return Path(directory)
    candidates = [Path.cwd() / "benchmarks"]
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        candidates.append(root / "benchmarks")
    for path in candidates:
        if path.is_dir() and any(path.glob("*.py")):
            return path
    return None


def _benchmark_scripts(folder: Path) -> dict:
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")}


def _first_doc_line(path: Path) -> str:

    try:
        doc = ast.get_docstring(ast.parse(path.read_text()))
    except (SyntaxError, UnicodeDecodeError):
        return ""
    return doc.strip().splitlines()[0] if doc else ""


def _has_quick_mode(path: Path) -> bool:
    """Whether a benchmark script takes ``--quick`` (small sizes, seconds instead of minutes)."""
    try:
        return '"--quick"' in path.read_text()
    except (OSError, UnicodeDecodeError):
        return False


def _run_script(cmd, **kwargs) -> int:
    """Run a benchmark script; when this command is interrupted or terminated, the script is
    asked to stop (SIGTERM, so that it cleans up) before the interruption goes on."""
    with subprocess.Popen(cmd, **kwargs) as proc:
        try:
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


#: The environment variable the benchmark scripts read for their results folder (their harness,
#: ``benchmarks/_harness.py``, defines the same name); ``bench --out`` sets it.
BENCH_RESULTS_ENV = "FASTKPCA_BENCH_RESULTS"

#: The record, in a results folder, of the files ``fastkpca bench`` wrote there: the files it may
#: replace on a later run.
BENCH_MANIFEST = "fastkpca-bench.json"
_BENCH_FORMAT = "fastkpca-bench-results"


def _folder_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (relative POSIX path -> (size, mtime in ns)); {} if none."""
    out: dict[str, tuple[int, int]] = {}
    if not folder.is_dir():
        return out
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            out[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _bench_manifest(folder: Path) -> dict | None:
    """The files ``fastkpca bench`` recorded as its own in ``folder`` (name -> script), or None
    when the folder has no readable record."""
    path = folder / BENCH_MANIFEST
    try:
        if not path.is_file() or path.stat().st_size > 2**24:  # a record is a few KiB
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _BENCH_FORMAT:
        return None
    files = data.get("files")
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else None


def _write_bench_manifest(folder: Path, files: dict) -> None:

    text = json.dumps({"format": _BENCH_FORMAT, "files": dict(sorted(files.items()))}, indent=2)
    with atomic_output(folder / BENCH_MANIFEST) as tmp:
        Path(tmp).write_text(text + "\n")


def _claim_bench_folder(out: Path, *, force: bool) -> dict:
    """Check that the benchmarks may write into ``out``; the files recorded as ``bench``'s own.

    The rule of ``fit -o``: a folder that does not exist yet is free, and so is one holding only
    files an earlier ``fastkpca bench`` wrote (its record, :data:`BENCH_MANIFEST`, lists them);
    any other file in it could be replaced by a script's results, so such a folder is refused
    unless ``--force``.  The package's own folder is always refused.
    """
    package = Path(__file__).resolve().parent
    resolved = out.resolve()
    if resolved == package or package in resolved.parents:
        raise CLIError(f"--out {out} is inside the fastkpca package; choose another folder")
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a folder")
    record = _bench_manifest(out)
    owned = record or {}
    ours = set(owned) | ({BENCH_MANIFEST} if record is not None else set())
    foreign = sorted(set(_folder_files(out)) - ours)
    if foreign and not force:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise CLIError(
            f"--out {out} holds files fastkpca bench did not write ({shown}): the benchmarks "
            "could replace them; choose another folder with --out, or give --force"
        )
    if foreign:
        print(f"fastkpca: writing into {out}, which holds other files (--force)", file=sys.stderr)
    return owned


def run(args):
    folder = _find_benchmarks(args.dir)
    if folder is None:
        raise CLIError(
            "fastkpca bench runs the scripts in the repository's benchmarks/ folder, "
            "which is not installed with the package: run it from a source checkout "
            "of fastkpca (or pass --dir PATH)"
        )
    scripts = _benchmark_scripts(folder)
    if not scripts:
        raise CLIError(f"no benchmark scripts in {folder}")
    if args.list:
        for name, path in scripts.items():
            quick = "" if _has_quick_mode(path) else " (no --quick mode)"
            print(f"{name:<28}{_first_doc_line(path)}{quick}")
        return 0
    names = [n[:-3] if n.endswith(".py") else n for n in args.names] or list(scripts)
    unknown = [n for n in names if n not in scripts]
    if unknown:
        raise CLIError(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(scripts)}")
    out = Path(os.path.abspath(args.out))
    owned = _claim_bench_folder(out, force=args.force)
    extra = list(args.script_args)
    if args.quick:
        extra = ["--quick", *extra]
    env = dict(os.environ)
    env[BENCH_RESULTS_ENV] = str(out)
    src = folder.parent / "src"
    if (src / "fastkpca").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    failed = []
    skipped = []
    for name in names:
        if args.quick and not _has_quick_mode(scripts[name]):
            # never fall back to a full-size run (some take hours) when a quick one was asked for
            print(f"== {name}: skipped (the script has no --quick mode)", flush=True)
            skipped.append(name)
            continue
        cmd = [sys.executable, str(scripts[name]), *extra]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        before = _folder_files(out)
        try:
            rc = _run_script(cmd, cwd=folder.parent, env=env)
        finally:
            # what the script wrote (even when it failed or was interrupted) is bench's own
            written = {p for p, st in _folder_files(out).items() if before.get(p) != st}
            written.discard(BENCH_MANIFEST)
            if written:
                owned.update(dict.fromkeys(written, name))
                _write_bench_manifest(out, owned)
        print(
            f"== {name}: {'ok' if rc == 0 else f'failed (exit {rc})'} in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        if rc != 0:
            failed.append(name)
    if owned:
        print(f"results in {out}", flush=True)
    if failed:
        raise CLIError(f"benchmark(s) failed: {', '.join(failed)}")
    if skipped and len(skipped) == len(names):
        raise CLIError(f"no benchmark run: {', '.join(skipped)} have no --quick mode")
    return 0
