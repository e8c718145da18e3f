"""Benchmark harness: each measured call runs in its own fresh process.

``measure(setup, work, ...)`` starts a new interpreter (multiprocessing "spawn"), runs
``setup(**setup_kwargs)`` (not measured: loading data), resets the process's peak-RSS mark, then
times ``work(data, **work_kwargs)`` and reports

- ``seconds``: wall time of ``work``,
- ``peak_mb``: peak resident memory of the whole process,
- ``extra_peak_mb``: peak resident memory during ``work`` above the resident memory after
  ``setup`` (the memory the method itself needed; the input data are not counted),
- ``result``: what ``work`` returned (must be picklable; keep it small).

The peak mark is reset by writing "5" to ``/proc/self/clear_refs`` (Linux >= 4.0); where that is
not allowed the figure falls back to ``ru_maxrss`` and ``reset_ok`` is False.

Functions passed in must be importable module-level functions (the child re-imports them).
Machines here are shared and noisy: quote ratios between methods measured in the same run.

Every script writes its results (JSON, plots) to :func:`results_dir`: the folder named by the
environment variable ``FASTKPCA_BENCH_RESULTS`` (``fastkpca bench --out DIR`` sets it for the
scripts it runs), else ``benchmarks/results/`` beside this file, as for a direct
``python benchmarks/NAME.py`` run.  A script's own ``--out`` / ``--output`` option, where it has
one, still names its main file.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import re
import resource
import time
import traceback

__all__ = [
    "RESULTS_ENV",
    "measure",
    "rss_mb",
    "peak_rss_mb",
    "results_dir",
    "save_json",
    "portable",
    "machine_info",
]

#: The environment variable naming the folder the scripts write their results to.
RESULTS_ENV = "FASTKPCA_BENCH_RESULTS"


def results_dir() -> str:
    """The folder results are written to: ``$FASTKPCA_BENCH_RESULTS``, else
    ``benchmarks/results/`` (absolute; created by :func:`save_json` when it is missing)."""
    folder = os.environ.get(RESULTS_ENV) or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results"
    )
    return os.path.abspath(folder)


def rss_mb() -> float:
    """Current resident set size of this process in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """Peak resident set size (VmHWM) of this process in MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _child(setup, work, setup_kwargs, work_kwargs, queue):
    try:
        data = setup(**setup_kwargs) if setup is not None else None
        base = rss_mb()
        reset_ok = _reset_peak()
        t0 = time.perf_counter()
        result = work(data, **work_kwargs)
        seconds = time.perf_counter() - t0
        peak = peak_rss_mb()
        queue.put(
            {
                "ok": True,
                "seconds": seconds,
                "peak_mb": peak,
                "base_mb": base,
                "extra_peak_mb": max(0.0, peak - base),
                "reset_ok": reset_ok,
                "result": result,
            }
        )
    except BaseException as exc:  # report everything, including MemoryError, to the parent
        queue.put(
            {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        )


def measure(setup, work, *, setup_kwargs=None, work_kwargs=None, timeout=3600.0) -> dict:
    """Run ``work(setup(**setup_kwargs), **work_kwargs)`` in a fresh process; see module doc."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(
        target=_child, args=(setup, work, setup_kwargs or {}, work_kwargs or {}, queue)
    )
    proc.start()
    try:
        out = queue.get(timeout=timeout)
    except Exception:
        proc.kill()
        out = {
            "ok": False,
            "error": f"no result within {timeout} s (or the process died: "
            f"exit code {proc.exitcode})",
        }
    proc.join(timeout=60)
    if proc.exitcode not in (0, None) and out.get("ok"):
        out["warning"] = f"child exited with code {proc.exitcode}"
    return out


def machine_info() -> dict:
    """A few facts about the machine the figures come from."""
    import numpy as np
    import scipy
    import sklearn

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "sklearn": sklearn.__version__,
        "machine": platform.machine(),
    }


#: An absolute file path inside a string (a command line, a note).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)*[\w.+-]+")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def portable(value):
    """``value`` with the absolute paths in its strings made machine-independent: paths inside
    this checkout relative to it, any other one ``<path>`` (results files are committed, and
    the folders of the machine that wrote them mean nothing elsewhere)."""
    if isinstance(value, str):

        def relative(match):
            path = match.group(0)
            if path == _REPO or path.startswith(_REPO + os.sep):
                return os.path.relpath(path, _REPO)
            return "<path>"

        return _ABSOLUTE_PATH.sub(relative, value)
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    return value


def save_json(obj, path) -> None:
    """Write results as indented JSON (creating the folder), their paths made
    :func:`portable`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(portable(obj), f, indent=2, default=float)
