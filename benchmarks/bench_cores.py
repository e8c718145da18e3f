"""How the one-pass fits scale with cores: each fit confined to k cores, against scikit-learn.

The goal fits of ``bench_goals.py`` on RandomNoisy (``make_random_noisy``, d = 100, float64; rbf
with gamma = 1 / (2 d); m = c = 1000, k = 10):

``rf``            ``RandomFeatureKPCA(n_random_features=m)`` (default solver)
``nystrom``       ``NystromKPCA(n_landmarks=c)`` (default solver)
``streaming``     ``StreamingKPCA(n_random_features=m, sketch_size=20)``
``exact_mf``      ``ExactKPCA(eigen_solver="matrix_free")`` on the first ``--exact-n`` rows
``sklearn_rbf``   ``make_pipeline(RBFSampler(n_components=m), PCA(k))``
``sklearn_nys``   ``make_pipeline(Nystroem(n_components=c), PCA(k))``

each in a fresh process started under ``taskset -c`` (the first k of the CPUs this process may
use; ``os.sched_setaffinity`` in the child where ``taskset`` is missing) for every core count k
of ``--cores`` (default 1, 2, 4, ..., all usable), with ``n_jobs=None``: the fits find their k
cores themselves (:func:`fastkpca.execution.usable_cores`), and scikit-learn's BLAS its own.
``--n-jobs J ...`` adds fastkpca runs on all usable cores with ``n_jobs=J`` instead (e.g.
``--n-jobs 1 2``: one thread against two on an unconfined 2-core machine).

The machine's own ceiling, measured in the same run beside the fits (``--no-ceiling`` skips
it), for every core count k:

``work``       k independent processes, one per core (``taskset -c``), each doing the same number
               of the fits' per-chunk steps (a float32 256 x d x m/2 product, then cos and sin
               into a 256 x m chunk): their throughput over one process's is the speed-up the
               machine itself allows k cores on this work (``ceiling_speedup``);
``bandwidth``  the same k processes each streaming through a copy of the fit's input bytes
               (n x d float64, read and written): GB/s all together;
``gemm``       one process on the k cores, BLAS on all of them: a float32 2048^3 product, GFLOP/s.

Every fit confined to k cores is then reported as a share of that ceiling: its speed-up over one
core divided by ``ceiling_speedup`` (1.0: it scales as well as independent processes do; the
rest is lost inside the fit, not to the machine).

Reported per method and core count: the best of ``--repeats`` wall times (rounds run every
configuration once in turn, so that a busy period of a shared machine hits them alike) with the
CPU time of that run (all threads) and the load average before it, peak resident memory of the
process and above the loaded data, the speed-up over one core, and fastkpca's time over
scikit-learn's pipeline of the same family at the same core count.  Needs
numpy, scipy, scikit-learn, threadpoolctl and tqdm only (no dask).

Usage::

    python benchmarks/bench_cores.py                       # 10^6 rows, exact at 20000
    python benchmarks/bench_cores.py --quick               # 5 x 10^4 rows, exact at 2000
    python benchmarks/bench_cores.py --cores 1 2 --n-jobs 1 2 --n-samples 200000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import machine_info, peak_rss_mb, results_dir, rss_mb, save_json  # noqa: E402

FASTKPCA = ("rf", "nystrom", "streaming", "exact_mf")
SKLEARN = ("sklearn_rbf", "sklearn_nys")
#: fastkpca method -> the scikit-learn pipeline of its family (the time ratio's denominator)
BASELINE = {"rf": "sklearn_rbf", "streaming": "sklearn_rbf", "nystrom": "sklearn_nys"}


# ------------------------------------------------------------------------------------------------
# data (cached in the temporary folder: every child loads the same rows)
# ------------------------------------------------------------------------------------------------
def data_path(n, d):
    return os.path.join(tempfile.gettempdir(), f"fastkpca-bench-cores-{n}x{d}.npy")


def ensure_data(n, d):
    path = data_path(n, d)
    if not os.path.exists(path):
        from fastkpca.datasets import make_random_noisy

        X = make_random_noisy(n, d, random_state=0, dtype="float64")
        tmp = path[: -len(".npy")] + f".{os.getpid()}.part.npy"
        import numpy as np

        np.save(tmp, X)
        os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------------------
# the child: one fit, measured
# ------------------------------------------------------------------------------------------------
def _fit(method, X, spec):
    m, c, k, gamma = spec["m"], spec["c"], spec["k"], spec["gamma"]
    jobs = {} if spec.get("n_jobs") is None else {"n_jobs": spec["n_jobs"]}
    if method == "rf":
        from fastkpca import RandomFeatureKPCA

        return RandomFeatureKPCA(k, gamma=gamma, n_random_features=m, random_state=0, **jobs).fit(X)
    if method == "nystrom":
        from fastkpca import NystromKPCA

        return NystromKPCA(k, gamma=gamma, n_landmarks=c, random_state=0, **jobs).fit(X)
    if method == "streaming":
        from fastkpca import StreamingKPCA

        return StreamingKPCA(
            k, gamma=gamma, n_random_features=m, sketch_size=20, random_state=0, **jobs
        ).fit(X)
    if method == "exact_mf":
        from fastkpca import ExactKPCA

        return ExactKPCA(k, gamma=gamma, eigen_solver="matrix_free", random_state=0, **jobs).fit(
            X[: spec["exact_n"]]
        )
    from sklearn.decomposition import PCA
    from sklearn.pipeline import make_pipeline

    if method == "sklearn_rbf":
        from sklearn.kernel_approximation import RBFSampler

        first = RBFSampler(gamma=gamma, n_components=m, random_state=0)
    else:
        from sklearn.kernel_approximation import Nystroem

        first = Nystroem(gamma=gamma, n_components=c, random_state=0)
    return make_pipeline(first, PCA(k, random_state=0)).fit(X)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(spec_json: str) -> None:
    """Run one fit and print its measurement as one JSON line (the parent reads the last)."""
    spec = json.loads(spec_json)
    if spec.get("cpus") and spec.get("set_affinity"):
        os.sched_setaffinity(0, spec["cpus"])  # before numpy starts its BLAS threads
    import numpy as np
    import sklearn.decomposition  # noqa: F401  (imports before the clock, as bench_goals)
    import sklearn.kernel_approximation  # noqa: F401
    import sklearn.pipeline  # noqa: F401
    from threadpoolctl import threadpool_info

    # the estimators' modules load lazily: import them before the clock, as scikit-learn's
    from fastkpca.decomposition import (  # noqa: F401
        ExactKPCA,
        NystromKPCA,
        RandomFeatureKPCA,
        StreamingKPCA,
    )
    from fastkpca.execution import usable_cores

    X = np.array(np.load(spec["path"], mmap_mode="r")[: spec["n"]])
    base = rss_mb()
    reset_ok = _reset_peak()
    cpu0 = os.times()
    t0 = time.perf_counter()
    _fit(spec["method"], X, spec)
    seconds = time.perf_counter() - t0
    cpu1 = os.times()
    peak = peak_rss_mb()
    blas = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    print(
        json.dumps(
            {
                "ok": True,
                "seconds": seconds,
                # CPU time of all the process's threads during the fit: next to the wall time,
                # it shows how busy the cores were, and it is less sensitive than the wall time
                # to other processes on a shared machine
                "cpu_seconds": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                "peak_mb": peak,
                "extra_peak_mb": max(0.0, peak - base),
                "reset_ok": reset_ok,
                "usable_cores": usable_cores(),
                "blas_threads": blas,
            }
        )
    )


def run_child(spec: dict, timeout: float) -> dict:
    """The fit of ``spec`` in a fresh interpreter under ``taskset -c`` (its measurement)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    cpus = spec.get("cpus")
    if cpus and shutil.which("taskset"):
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
    elif cpus:
        spec = dict(spec, set_affinity=True)
        cmd[-1] = json.dumps(spec)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"no result within {timeout} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------------------
# the ceiling: independent processes doing the fit's per-chunk work, bandwidth, a threaded GEMM
# ------------------------------------------------------------------------------------------------
def ceiling_child(spec_json: str) -> None:
    """One process of the ceiling (``spec["kind"]``: ``work``, ``bandwidth`` or ``gemm``);
    prints its seconds (and what it measured) as one JSON line."""
    spec = json.loads(spec_json)
    import numpy as np

    rng = np.random.default_rng(0)
    kind = spec["kind"]
    if kind == "work":
        d, half = spec["d"], spec["m"] // 2
        X = rng.standard_normal((256, d)).astype(np.float32)
        W = rng.standard_normal((d, half)).astype(np.float32)
        P = np.empty((256, half), np.float32)
        Z = np.empty((256, 2 * half), np.float32)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, user_api="blas"):  # as the fits' chunk threads
            t0 = time.perf_counter()
            for _ in range(spec["chunks"]):
                np.matmul(X, W, out=P)
                np.cos(P, out=Z[:, :half])
                np.sin(P, out=Z[:, half:])
            seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds}))
    elif kind == "bandwidth":
        src = np.ones(spec["bytes"] // 8)
        dst = np.empty_like(src)
        t0 = time.perf_counter()
        for _ in range(spec["passes"]):
            np.copyto(dst, src)
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "bytes_moved": 2 * src.nbytes * spec["passes"]}))
    else:
        n = 2048
        A = rng.standard_normal((n, n)).astype(np.float32)
        B = rng.standard_normal((n, n)).astype(np.float32)
        A @ B  # BLAS threads started
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            A @ B
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"seconds": best, "gflops": 2 * n**3 / best / 1e9}))


def _ceiling_processes(spec: dict, cpus: list[int], timeout: float) -> list[dict]:
    """``spec``'s ceiling child in one process per CPU of ``cpus``, all at once (or in one
    process on all of them for ``gemm``); their measurements."""
    base = [sys.executable, os.path.abspath(__file__), "--ceiling-child", json.dumps(spec)]
    groups = [cpus] if spec["kind"] == "gemm" else [[c] for c in cpus]
    taskset = shutil.which("taskset")
    procs = [
        subprocess.Popen(
            (["taskset", "-c", ",".join(map(str, g))] if taskset else []) + base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for g in groups
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"ceiling child failed: {stderr.strip()[-300:]}")
        out.append(json.loads(lines[-1]))
    return out


def measure_ceiling(args, cpus: list[int], table: dict) -> None:
    """One round of the ceiling into ``table``: ``k -> {work_seconds, bandwidth_gb_s,
    gemm_gflops}`` for every core count k of ``--cores``, the best over the rounds kept."""
    work = {"kind": "work", "d": args.n_features_in, "m": args.m, "chunks": args.ceiling_chunks}
    stream = {"kind": "bandwidth", "bytes": 8 * args.n_samples * args.n_features_in, "passes": 3}
    for k in args.cores:
        group = cpus[:k]
        # the slowest process sets the throughput: k processes' work in that time
        w = max(r["seconds"] for r in _ceiling_processes(work, group, args.timeout))
        runs = _ceiling_processes(stream, group, args.timeout)
        gb_s = sum(r["bytes_moved"] for r in runs) / max(r["seconds"] for r in runs) / 1e9
        g = _ceiling_processes({"kind": "gemm"}, group, args.timeout)[0]["gflops"]
        row = table.setdefault(k, {"work_seconds": math.inf, "bandwidth_gb_s": 0.0})
        row["work_seconds"] = min(row["work_seconds"], w)
        row["bandwidth_gb_s"] = max(row["bandwidth_gb_s"], gb_s)
        row["gemm_gflops"] = max(row.get("gemm_gflops", 0.0), g)
        print(f"ceiling @{k}: work {w:.2f} s, {gb_s:.1f} GB/s, gemm {g:.0f} GFLOP/s", flush=True)


def ceiling_speedups(table: dict) -> None:
    """``ceiling_speedup`` of every core count k: k processes' throughput over one's (where 1
    is among the core counts)."""
    if 1 in table:
        for k, row in table.items():
            row["ceiling_speedup"] = k * table[1]["work_seconds"] / row["work_seconds"]


# ------------------------------------------------------------------------------------------------
def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no confinement possible
        return list(range(os.cpu_count() or 1))


def default_cores(n_cpus: int) -> list[int]:
    """1, 2, 4, ... and all usable cores."""
    out, k = [], 1
    while k < n_cpus:
        out.append(k)
        k *= 2
    return out + [n_cpus]


def configurations(args, cpus):
    """(label, method, cores or None, n_jobs) for every run of one round."""
    out = []
    for k in args.cores:
        for method in args.methods:
            out.append((f"{method}@{k}", method, k, None))
    for jobs in args.n_jobs or []:
        for method in args.methods:
            if method in FASTKPCA:
                out.append((f"{method}@jobs={jobs}", method, None, jobs))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="5 x 10^4 rows, exact at 2000, 1 round")
    p.add_argument("--n-samples", type=int, default=1_000_000)
    p.add_argument("--n-features-in", type=int, default=100)
    p.add_argument("--m", type=int, default=1000, help="random features")
    p.add_argument("--c", type=int, default=1000, help="Nystrom landmarks")
    p.add_argument("--k", type=int, default=10, help="components")
    p.add_argument("--exact-n", type=int, default=20000, help="rows of the matrix-free fit")
    p.add_argument("--cores", type=int, nargs="+", help="core counts (default 1, 2, 4, ..., all)")
    p.add_argument("--n-jobs", type=int, nargs="+", help="also fastkpca with these n_jobs")
    p.add_argument("--methods", nargs="+", default=[*FASTKPCA, *SKLEARN])
    p.add_argument("--repeats", type=int, default=3, help="rounds (the best is kept)")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per fit")
    p.add_argument("--out", default=None, help="results folder (default benchmarks/results/)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the machine's ceiling")
    p.add_argument(
        "--ceiling-chunks", type=int, default=2000, help="per-chunk steps of each ceiling process"
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--ceiling-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.ceiling_child:
        return ceiling_child(args.ceiling_child)
    if args.quick:
        args.n_samples, args.exact_n, args.repeats = 50_000, 2000, 1
    unknown = sorted(set(args.methods) - set(FASTKPCA) - set(SKLEARN))
    if unknown:
        p.error(f"unknown methods {unknown}; choose among {[*FASTKPCA, *SKLEARN]}")
    cpus = _usable_cpus()
    args.cores = sorted(set(args.cores or default_cores(len(cpus))))
    if args.cores[-1] > len(cpus) or args.cores[0] < 1:
        p.error(f"--cores must be between 1 and the {len(cpus)} usable CPUs")
    d = args.n_features_in
    gamma = 1.0 / (2 * d)
    path = ensure_data(args.n_samples, d)
    base_spec = {
        "path": path,
        "n": args.n_samples,
        "m": args.m,
        "c": args.c,
        "k": args.k,
        "gamma": gamma,
        "exact_n": min(args.exact_n, args.n_samples),
    }
    runs: dict[str, dict] = {}
    ceiling: dict[int, dict] = {}
    for rep in range(args.repeats):
        if not args.no_ceiling:  # in every round, beside the fits: the same load on both
            measure_ceiling(args, cpus, ceiling)
        for label, method, k, jobs in configurations(args, cpus):
            spec = dict(base_spec, method=method, n_jobs=jobs, cpus=cpus[:k] if k else None)
            load = os.getloadavg()[0]
            print(f"round {rep + 1}: {label} (load {load:.1f}) ...", flush=True)
            res = run_child(spec, args.timeout)
            if not res.get("ok"):
                print(f"  failed: {res.get('error')}", flush=True)
                runs.setdefault(label, {"ok": False, "error": res.get("error")})
                continue
            print(f"  {res['seconds']:.2f} s, peak {res['peak_mb']:.0f} MB", flush=True)
            row = runs.get(label)
            rounds = (row or {}).get("rounds", []) + [
                {"seconds": res["seconds"], "load_average_before": load}
            ]
            if row is None or not row.get("ok") or res["seconds"] < row["seconds"]:
                runs[label] = dict(res, method=method, cores=k, n_jobs=jobs)
            runs[label]["rounds"] = rounds

    ceiling_speedups(ceiling)
    table: dict[str, dict] = {}
    for label, row in runs.items():
        if not row.get("ok"):
            continue
        method, k = row["method"], row["cores"]
        entry = {
            "seconds": row["seconds"],
            "cpu_seconds": row.get("cpu_seconds"),
            "extra_peak_mb": row["extra_peak_mb"],
        }
        one = runs.get(f"{method}@1", {})
        if k and one.get("ok"):
            entry["speedup_over_1_core"] = one["seconds"] / row["seconds"]
            if "ceiling_speedup" in ceiling.get(k, {}):
                entry["share_of_ceiling"] = (
                    entry["speedup_over_1_core"] / ceiling[k]["ceiling_speedup"]
                )
        base = runs.get(f"{BASELINE.get(method, '')}@{k}", {}) if k else {}
        if base.get("ok"):
            entry["baseline"] = BASELINE[method]
            entry["time_ratio"] = row["seconds"] / base["seconds"]
        table[label] = entry

    out = {
        "machine": dict(machine_info(), usable_cpus=len(cpus)),
        "command": " ".join(["benchmarks/bench_cores.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "n_samples": args.n_samples,
        "n_features_in": d,
        "m": args.m,
        "c": args.c,
        "k": args.k,
        "gamma": gamma,
        "exact_n": base_spec["exact_n"],
        "cores": args.cores,
        "n_jobs": args.n_jobs,
        "repeats": args.repeats,
        "confinement": "taskset" if shutil.which("taskset") else "sched_setaffinity",
        "runs": runs,
        "ceiling": {str(k): row for k, row in ceiling.items()},
        "table": table,
    }
    folder = args.out or results_dir()
    name = "bench_cores_quick.json" if args.quick else "bench_cores.json"
    save_json(out, os.path.join(folder, name))
    nan = float("nan")
    if ceiling:
        print(f"\n{'cores':>5s} {'ceiling':>8s} {'GB/s':>7s} {'GEMM GFLOP/s':>13s}")
        for k, c in ceiling.items():
            print(
                f"{k:5d} {c.get('ceiling_speedup', nan):8.2f} {c['bandwidth_gb_s']:7.1f} "
                f"{c['gemm_gflops']:13.0f}"
            )
    header = ("fit", "s", "cpu s", "speed-up", "of ceiling", "x sklearn", "MB")
    print("\n{:24s} {:>8s} {:>8s} {:>9s} {:>11s} {:>10s} {:>7s}".format(*header))
    for label, e in table.items():
        print(
            f"{label:24s} {e['seconds']:8.2f} {e.get('cpu_seconds') or nan:8.2f} "
            f"{e.get('speedup_over_1_core', nan):9.2f} {e.get('share_of_ceiling', nan):11.2f} "
            f"{e.get('time_ratio', nan):10.3f} {e['extra_peak_mb']:7.0f}"
        )
    print(f"saved {os.path.join(folder, name)}")
    return out


if __name__ == "__main__":
    main()
