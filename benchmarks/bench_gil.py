"""Where the worker threads of a fit spend their time: working, waiting for the interpreter lock,
or waiting for work, sampled by py-spy.

Each fit (``rf``: ``RandomFeatureKPCA``, ``nystrom``: ``NystromKPCA``, ``streaming``:
``StreamingKPCA(sketch_size=20)``; RandomNoisy rows, d = 100, m = c = 1000, k = 10, every core
the process may use) runs ``--repeats`` times in a child process, which this script records
three times with ``py-spy record --threads -f raw`` at ``--rate`` samples a second:

- with ``--idle``: every thread at every sample, running or not.  The main thread's samples
  inside the fit count the ticks (the fits' wall time);
- without it: the threads running on a CPU at that sample;
- with ``--gil``: the thread holding the interpreter lock.

A worker thread's samples are split by their innermost frame: waiting for work (the pool's
queue, a condition or a join) or inside the fit's work.  Inside the work, a sample seen with
``--idle`` but not as running is a thread off the CPU in the middle of its work: with the data
in memory and the products on one BLAS thread, that is a thread waiting for the interpreter
lock (the figure ``waiting in the work``).  ``GIL held`` is the share of the ticks at which
some thread of the fit held the lock: what the Python steps of all threads cost together,
which can never run side by side.  The three recordings are separate runs, so each share is
normalised by its own run's ticks; expect a few percent of noise.

py-spy is a development tool, not a dependency of fastkpca: ``pip install py-spy``.  Usage::

    .venv/bin/python benchmarks/bench_gil.py                       # rf, nystrom, streaming
    .venv/bin/python benchmarks/bench_gil.py --fits streaming --n-samples 100000
    .venv/bin/python benchmarks/bench_gil.py --quick               # 30,000 rows, one fit each

Writes ``benchmarks/results/bench_gil.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import machine_info, results_dir, save_json  # noqa: E402

FITS = ("rf", "nystrom", "streaming")
#: Innermost frames of a worker thread that is waiting for work (between two tasks).
WAITING_FOR_WORK = ("wait (threading.py", "get (queue.py", "_worker (concurrent", "join (")
MARK = "_measured_fit"
#: The name of fastkpca's pool threads (``fastkpca_0``, ...): every other thread is the main one.
WORKER = "fastkpca_"


def _estimator(fit: str):
    import fastkpca

    common = dict(gamma=0.01, random_state=0)
    if fit == "rf":
        return fastkpca.RandomFeatureKPCA(10, n_random_features=1000, **common)
    if fit == "nystrom":
        return fastkpca.NystromKPCA(10, n_landmarks=1000, **common)
    return fastkpca.StreamingKPCA(10, n_random_features=1000, sketch_size=20, **common)


def _measured_fit(fit: str, X) -> float:
    start = time.perf_counter()
    _estimator(fit).fit(X)
    return time.perf_counter() - start


def child(fit: str, n_samples: int, repeats: int) -> None:
    """The recorded process: data, a warm-up fit, then the measured fits."""
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(n_samples, 100, random_state=0, dtype="float64")
    _estimator(fit).fit(X[:2000])
    seconds = [_measured_fit(fit, X) for _ in range(repeats)]
    print(json.dumps({"seconds": seconds}), flush=True)


def _record(py_spy: str, fit: str, args, mode: str) -> tuple[list, dict]:
    """``(samples, child output)`` of one recording: samples as (thread, frames) pairs."""
    flags = {"idle": ["--idle"], "running": [], "gil": ["--gil"]}[mode]
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw.txt")
        cmd = [py_spy, "record", "--threads", "-r", str(args.rate), "-f", "raw", "-o", raw]
        cmd += flags + ["--", sys.executable, os.path.abspath(__file__), "--child", fit]
        cmd += ["--n-samples", str(args.n_samples), "--repeats", str(args.repeats)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        samples = []
        with open(raw) as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                frames = stack.split(";")
                samples += [(frames[0], frames[1:])] * int(count)
    output = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return samples, json.loads(output[-1])


def _classify(samples) -> dict:
    """Counts: ticks (main thread in a measured fit), worker samples waiting for work and in
    the work, and the innermost frames of the latter."""
    main = [frames for thread, frames in samples if WORKER not in thread]
    ticks = sum(1 for frames in main if any(MARK in f for f in frames))
    in_work = collections.Counter()
    waiting = 0
    for thread, frames in samples:
        if WORKER not in thread:
            if any(MARK in f for f in frames):
                in_work[_innermost(frames)] += 1
            continue
        if not frames or any(w in frames[-1] for w in WAITING_FOR_WORK):
            waiting += 1
        else:
            in_work[_innermost(frames)] += 1
    return {"ticks": ticks, "waiting_for_work": waiting, "in_work": in_work}


def _innermost(frames: list) -> str:
    """The innermost fastkpca frame (else the innermost frame), without the line number."""
    own = [f for f in frames if "fastkpca/" in f]
    frame = (own or frames or ["?"])[-1]
    return frame.split(":")[0] + ")" if ":" in frame else frame


def measure_fit(py_spy: str, fit: str, args) -> dict:
    runs = {mode: _record(py_spy, fit, args, mode) for mode in ("idle", "running", "gil")}
    idle, running = _classify(runs["idle"][0]), _classify(runs["running"][0])
    gil_samples = runs["gil"][0]
    ticks_idle = max(1, idle["ticks"])
    # ticks of the other runs: the main thread is not sampled when idle there, so scale by
    # their fits' wall time against the --idle run's
    wall = {mode: sum(out["seconds"]) for mode, (_, out) in runs.items()}
    ticks_running = ticks_idle * wall["running"] / wall["idle"]
    ticks_gil = ticks_idle * wall["gil"] / wall["idle"]
    gil = _classify(gil_samples)
    gil_in_fit = sum(gil["in_work"].values())
    threads = len({t.split(":")[-1] for t, _ in runs["idle"][0] if WORKER in t})
    work_all = sum(idle["in_work"].values()) / ticks_idle
    work_running = sum(running["in_work"].values()) / ticks_running
    stalled = collections.Counter(
        {
            frame: idle["in_work"][frame] / ticks_idle
            - running["in_work"].get(frame, 0) / ticks_running
            for frame in idle["in_work"]
        }
    )
    out = {
        "fit_seconds": min(runs["idle"][1]["seconds"]),
        "pool_threads": threads,
        "gil_held_share": gil_in_fit / ticks_gil,
        "threads_in_work": work_all,
        "threads_running_in_work": work_running,
        "threads_waiting_in_work": max(0.0, work_all - work_running),
        "threads_waiting_for_work": idle["waiting_for_work"] / ticks_idle,
        "top_waiting_frames": [
            (frame, round(share, 3)) for frame, share in stalled.most_common(8) if share > 0.005
        ],
        "top_gil_frames": [
            (frame, round(n / ticks_gil, 3)) for frame, n in gil["in_work"].most_common(8)
        ],
    }
    print(
        f"{fit}: {out['fit_seconds']:.2f} s a fit; of the main and {threads} pool threads' time "
        f"(thread-ticks per tick): in the work {work_all:.2f}, running there "
        f"{work_running:.2f}, waiting there {out['threads_waiting_in_work']:.2f}, waiting "
        f"for work {out['threads_waiting_for_work']:.2f}; the interpreter lock held "
        f"{out['gil_held_share']:.0%} of the time",
        flush=True,
    )
    for frame, share in out["top_waiting_frames"]:
        print(f"    waiting in {frame}: {share:.3f}")
    for frame, share in out["top_gil_frames"][:5]:
        print(f"    holding the lock in {frame}: {share:.3f}")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fits", nargs="+", default=list(FITS), choices=FITS)
    p.add_argument("--n-samples", type=int, default=300_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rate", type=int, default=250, help="samples a second")
    p.add_argument("--quick", action="store_true", help="30,000 rows, one fit a recording")
    p.add_argument("--py-spy", default=None, help="the py-spy executable (default: on PATH)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.n_samples, args.repeats = min(args.n_samples, 30_000), 1
    if args.child:
        child(args.child, args.n_samples, args.repeats)
        return
    py_spy = args.py_spy or shutil.which("py-spy")
    if py_spy is None:
        sys.exit("bench_gil.py needs py-spy (pip install py-spy), or --py-spy PATH")
    out = {"machine": machine_info(), "load_average": os.getloadavg(), "args": vars(args)}
    out["fits"] = {fit: measure_fit(py_spy, fit, args) for fit in args.fits}
    path = args.out or os.path.join(results_dir(), "bench_gil.json")
    save_json(out, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
