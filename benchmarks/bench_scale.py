"""Scale: rows per second and peak memory in memory, from disk and on a Dask LocalCluster.

``StreamingKPCA`` (random features + Frequent Directions) and ``RandomFeatureKPCA`` (exact PCA of
the random features) on two data sets:

- ``kddcup``: the real 494020 x 41 KDD Cup 1999 set (``fastkpca.datasets.load("kddcup")``),
  columns standardised, float32;
- ``synthetic``: 10^7 x 100 RandomNoisy rows (the streaming paper's ``A = S D U + F / zeta``,
  s = 50, zeta = 10), float32, generated block by block into a 4 GB ``.npy`` file in a temporary
  folder (deleted afterwards).

Modes, each fit in its own fresh process (``_harness.measure``):

``memory``
    the whole array loaded in the process (not timed), ``fit(X)``;
``disk``
    ``fit(fastkpca.io.open_data(path))``: 8192-row blocks read from the ``.npy`` file, never
    the whole array;
``cluster-1``, ``cluster-2``
    a ``distributed.LocalCluster`` with 1 or 2 worker processes (1 thread each) started in the
    process's setup (not timed); ``fit(fastkpca.dask.read_npy(path))``: the workers read their
    own row chunks from the file, compute per-chunk statistics and merge them up a tree.  Peak
    memory is reported for the client process and for each worker.

And scikit-learn where it can run at all:

``sklearn-memory``
    ``make_pipeline(RBFSampler(m), PCA(k))`` on the in-memory array: it holds the n x m feature
    matrix (and PCA a centred copy), 2 x 5 GB at n = 10^7, m = 128: run on kddcup only;
``sklearn-incremental``
    ``IncrementalPCA(k)`` fed ``RBFSampler(m)`` features of 8192-row blocks read from the file
    (the streaming baseline scikit-learn offers), on the first ``--sklearn-max-rows`` rows
    (10^6: its rate per row does not depend on n, and all 10^7 rows would take 8 minutes).

Sizes are chosen so the whole run takes minutes on a 2-core machine: m = 128 random features,
k = 10 components, sketch size ell = 10 (k = 5 for StreamingKPCA; its buffer holds 2 ell = 20
rows, the paper's ell = 20).  Frequent Directions costs one
small eigendecomposition per ell rows, so StreamingKPCA is the slower of the two per row;
RandomFeatureKPCA's O(m^2) covariance update per row is cheap at this m.  Every process runs
with 1 BLAS thread (``--threads``): on a busy 2-core machine OpenBLAS's idle threads spin and
made the Frequent Directions loop 10x slower; the LocalCluster workers use 1 thread each (dask's
default), so ``cluster-2`` uses the same 2 cores as two threads would.

``rows_per_s`` is n / fit seconds; ``peak_mb`` the process's peak resident memory (imports
included) and ``extra_peak_mb`` the part above the memory after setup (the loaded array, for
``memory``, is not counted there).  Results: ``benchmarks/results/bench_scale[_quick].json`` and
``bench_scale[_quick].png``.  Run the full size under the machine-wide lock::

    df -h /tmp                                        # 4.1 GB free needed for the 10^7 rows
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_scale.py
    .venv/bin/python benchmarks/bench_scale.py --quick   # 10^5 synthetic rows, ~1 minute
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, peak_rss_mb, results_dir, save_json  # noqa: E402

RESULTS = results_dir()
BLOCK_ROWS = 8192
CHUNK_ROWS = 2**17  # dask chunks: 52 MB of float32 x 100


def chunk_rows(n):
    """Rows per dask chunk: CHUNK_ROWS, but at least 16 chunks for small data (so both workers
    get work)."""
    return int(min(CHUNK_ROWS, max(BLOCK_ROWS, -(-n // 16))))


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def write_random_noisy(path, n, d, *, signal_dim=50, zeta=10.0, seed=0, block=2**17):
    """RandomNoisy rows (``A = S D U + F / zeta``, as ``fastkpca.datasets.make_random_noisy``)
    written block by block to a float32 ``.npy`` file, so the array is never in memory."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((d, signal_dim)))
    DU = (1.0 - np.arange(signal_dim) / d)[:, None] * U.T
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f,
            {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                "fortran_order": False,
                "shape": (n, d),
            },
        )
        for start in range(0, n, block):
            rows = min(block, n - start)
            A = rng.standard_normal((rows, signal_dim)) @ DU
            A += rng.standard_normal((rows, d)) / zeta
            f.write(A.astype(np.float32).tobytes())


def write_kddcup(path, data_home=None, max_rows=None):
    from fastkpca.datasets import load

    X, _ = load("kddcup", data_home=data_home, max_rows=max_rows)
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    std[std == 0] = 1.0
    np.save(path, ((X - X.mean(axis=0)) / std).astype(np.float32))
    return X.shape


# ------------------------------------------------------------------------------------------------
# what each measured process does (module level: the harness re-imports them)
# ------------------------------------------------------------------------------------------------
def _limit_threads(threads):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(int(threads))


def _estimator(method, m, k, ell, seed=0):
    from fastkpca import RandomFeatureKPCA, StreamingKPCA

    if method == "streaming":
        return StreamingKPCA(
            n_components=min(k, ell // 2), n_random_features=m, sketch_size=ell, random_state=seed
        )
    return RandomFeatureKPCA(n_components=k, n_random_features=m, random_state=seed)


def _summary(model):
    return {
        "eigenvalues": [float(v) for v in model.eigenvalues_[:5]],
        "n_samples_seen": int(model.n_samples_seen_),
        "state_floats": _state_floats(model),
    }


def _state_floats(model):
    """Floats the fitted model keeps beyond the feature map: StreamingKPCA's real Frequent
    Directions buffer (2 ell rows of m), its ell x ell tracked loss and the feature sum;
    RandomFeatureKPCA's m x m covariance (or what it keeps) is not counted here."""
    sketch = getattr(model, "sketch_", None)
    if sketch is None:
        return None
    ell = sketch._buffer.shape[0] // 2
    return int(sketch._buffer.size + ell * ell + model.feature_sum_.size)


def _import_all():
    """Import what the fits use, so that import time is not counted as fit time."""
    import sklearn.decomposition  # noqa: F401
    import sklearn.kernel_approximation  # noqa: F401
    import sklearn.pipeline  # noqa: F401

    import fastkpca.decomposition.random_features  # noqa: F401
    import fastkpca.decomposition.streaming  # noqa: F401
    import fastkpca.source.files  # noqa: F401


def setup_memory(path, threads):
    global _LIMIT
    _LIMIT = _limit_threads(threads)
    _import_all()
    return np.load(path)


def setup_none(path, threads):
    global _LIMIT
    _LIMIT = _limit_threads(threads)
    _import_all()
    return path


def work_memory(X, method, m, k, ell):
    return _summary(_estimator(method, m, k, ell).fit(X))


def work_disk(path, method, m, k, ell):
    from fastkpca.source.files import open_data

    reader = open_data(path, dtype=np.float32, block_rows=BLOCK_ROWS)
    return _summary(_estimator(method, m, k, ell).fit(reader))


def _worker_reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _worker_peak_mb():
    return peak_rss_mb()


def setup_cluster(path, threads, n_workers):
    global _LIMIT, _CLUSTER
    _LIMIT = _limit_threads(threads)
    from distributed import Client, LocalCluster

    import fastkpca.dask  # noqa: F401

    _import_all()
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=40,
        memory_limit=0,
    )
    client = Client(cluster)
    client.run(lambda: __import__("fastkpca.decomposition.streaming"))  # warm the imports
    client.run(_worker_reset_peak)
    _CLUSTER = (cluster, client)  # the default scheduler from now on
    return path


def work_cluster(path, method, m, k, ell, chunk_rows):
    from fastkpca.dask import read_npy

    cluster, client = _CLUSTER
    t0 = time.perf_counter()
    model = _estimator(method, m, k, ell).fit(read_npy(path, chunk_rows=chunk_rows))
    out = _summary(model)
    out["fit_seconds"] = time.perf_counter() - t0
    out["worker_peak_mb"] = sorted(client.run(_worker_peak_mb).values())
    # shut the cluster down here, not at interpreter exit (its nannies would try to restart
    # workers whose parent is gone); the fit's time is fit_seconds above
    client.close()
    cluster.close()
    return out


def work_sklearn_memory(X, m, k):
    from sklearn.decomposition import PCA
    from sklearn.kernel_approximation import RBFSampler
    from sklearn.pipeline import make_pipeline

    pipe = make_pipeline(
        RBFSampler(gamma=1.0 / X.shape[1], n_components=m, random_state=0),
        PCA(n_components=k, random_state=0),
    ).fit(X)
    return {"eigenvalues": [float(v) for v in pipe[-1].explained_variance_[:5] * X.shape[0]]}


def work_sklearn_incremental(path, m, k, max_rows):
    from sklearn.decomposition import IncrementalPCA
    from sklearn.kernel_approximation import RBFSampler

    from fastkpca.source.files import open_data

    reader = open_data(path, dtype=np.float32, block_rows=BLOCK_ROWS)
    rbf = RBFSampler(gamma=1.0 / reader.n_features, n_components=m, random_state=0)
    rbf.fit(np.zeros((1, reader.n_features), dtype=np.float32))
    ipca = IncrementalPCA(n_components=k)
    n = 0
    for block in reader:
        ipca.partial_fit(rbf.transform(block))
        n += block.shape[0]
        if n >= max_rows:
            break
    return {"eigenvalues": [float(v) for v in ipca.explained_variance_[:5] * n], "n_rows": n}


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------
def run_dataset(name, path, n, d, args, records):
    m, k, ell, threads = args.n_features, args.n_components, args.sketch_size, args.threads
    fit_kwargs = {"m": m, "k": k, "ell": ell}
    runs = []
    for method in ("streaming", "rf"):
        for mode in args.modes:
            if mode == "memory":
                runs.append(
                    (
                        method,
                        mode,
                        setup_memory,
                        work_memory,
                        {"path": path, "threads": threads},
                        {"method": method, **fit_kwargs},
                    )
                )
            elif mode == "disk":
                runs.append(
                    (
                        method,
                        mode,
                        setup_none,
                        work_disk,
                        {"path": path, "threads": threads},
                        {"method": method, **fit_kwargs},
                    )
                )
            elif mode.startswith("cluster-"):
                runs.append(
                    (
                        method,
                        mode,
                        setup_cluster,
                        work_cluster,
                        {"path": path, "threads": threads, "n_workers": int(mode[8:])},
                        {"method": method, "chunk_rows": chunk_rows(n), **fit_kwargs},
                    )
                )
    if not args.no_sklearn:
        sk_memory_gb = 2 * n * m * 8 / 2**30  # float64 features + PCA's centred copy
        if sk_memory_gb <= args.sklearn_max_gb:
            runs.append(
                (
                    "sklearn RBFSampler+PCA",
                    "memory",
                    setup_memory,
                    work_sklearn_memory,
                    {"path": path, "threads": threads},
                    {"m": m, "k": k},
                )
            )
        else:
            records.append(
                {
                    "dataset": name,
                    "n_rows": n,
                    "method": "sklearn RBFSampler+PCA",
                    "mode": "memory",
                    "ok": False,
                    "error": f"not run: needs ~{sk_memory_gb:.0f} GB (n x m float64 "
                    "features and PCA's centred copy)",
                }
            )
        runs.append(
            (
                "sklearn IncrementalPCA(RBFSampler)",
                "disk",
                setup_none,
                work_sklearn_incremental,
                {"path": path, "threads": threads},
                {"m": m, "k": k, "max_rows": args.sklearn_max_rows},
            )
        )
    for method, mode, setup, work, skw, wkw in runs:
        t0 = time.perf_counter()
        res = measure(setup, work, setup_kwargs=skw, work_kwargs=wkw, timeout=args.timeout)
        rec = {
            "dataset": name,
            "n_rows": n,
            "n_features_in": d,
            "method": method,
            "mode": mode,
            "ok": res.get("ok", False),
        }
        if rec["ok"]:
            result = dict(res["result"])
            seconds = result.pop("fit_seconds", res["seconds"])
            rec["n_rows"] = result.pop("n_rows", n)  # a prefix, for a slow baseline
            rec.update(
                seconds=seconds,
                rows_per_s=rec["n_rows"] / seconds,
                peak_mb=res["peak_mb"],
                extra_peak_mb=res["extra_peak_mb"],
                reset_ok=res["reset_ok"],
                **result,
            )
        else:
            rec["error"] = res.get("error")
        records.append(rec)
        extra = ""
        if rec.get("worker_peak_mb"):
            extra = " workers " + ", ".join(f"{w:.0f}" for w in rec["worker_peak_mb"]) + " MB"
        status = (
            f"{rec['rows_per_s']:>12,.0f} rows/s  peak {rec['peak_mb']:7.0f} MB "
            f"(+{rec['extra_peak_mb']:.0f}){extra}"
            if rec["ok"]
            else rec["error"]
        )
        print(
            f"{name:>10} {method:<36}{mode:<10}{status}   [{time.perf_counter() - t0:.0f} s]",
            flush=True,
        )


def ratios(records):
    """Speed-ups worth quoting, between runs of the same data set in this run."""
    out = {}
    by = {(r["dataset"], r["method"], r["mode"]): r for r in records if r.get("ok")}
    for (ds, method, mode), r in by.items():
        base = by.get((ds, method, "memory"))
        if base and mode != "memory" and not method.startswith("sklearn"):
            out[f"{ds} {method} {mode} / memory (rows/s)"] = r["rows_per_s"] / base["rows_per_s"]
        sk = by.get((ds, "sklearn IncrementalPCA(RBFSampler)", "disk"))
        if sk and mode == "disk" and not method.startswith("sklearn"):
            out[f"{ds} {method} disk / sklearn IncrementalPCA (rows/s)"] = (
                r["rows_per_s"] / sk["rows_per_s"]
            )
        mem = by.get((ds, method, "memory"))
        if mem and mode == "memory" and method == "rf":
            for other in ("disk", "cluster-1", "cluster-2"):
                o = by.get((ds, method, other))
                if o:
                    a, b = np.array(o["eigenvalues"]), np.array(mem["eigenvalues"])
                    out[f"{ds} rf eigenvalues {other} vs memory (max rel diff)"] = float(
                        np.max(np.abs(a - b) / np.abs(b))
                    )
    return out


def plot(records, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not available: no plot")
        return
    datasets = sorted({r["dataset"] for r in records})
    fig, axes = plt.subplots(2, len(datasets), figsize=(6.5 * len(datasets), 7), squeeze=False)
    for j, ds in enumerate(datasets):
        rows = [r for r in records if r["dataset"] == ds and r.get("ok")]
        labels = [f"{r['method'].replace('sklearn ', 'sk ')}\n{r['mode']}" for r in rows]
        colors = [
            "tab:blue"
            if r["method"] == "streaming"
            else "tab:orange"
            if r["method"] == "rf"
            else "tab:gray"
            for r in rows
        ]
        x = np.arange(len(rows))
        axes[0, j].bar(x, [r["rows_per_s"] for r in rows], color=colors)
        axes[0, j].set_yscale("log")
        axes[0, j].set_ylabel("rows / s (fit)")
        axes[0, j].set_title(f"{ds}: {rows[0]['n_rows']:,} rows" if rows else ds)
        peaks = [max([r["peak_mb"]] + list(r.get("worker_peak_mb", []))) for r in rows]
        axes[1, j].bar(x, peaks, color=colors)
        axes[1, j].set_ylabel("peak memory, MB (largest process)")
        for ax in axes[:, j]:
            ax.set_xticks(x)
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot -> {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="10^5 synthetic rows, no kddcup, modes memory/disk/cluster-2 (~1 min)",
    )
    p.add_argument("--datasets", nargs="+", default=None, choices=["kddcup", "synthetic"])
    p.add_argument(
        "--n-rows", type=int, default=None, help="synthetic rows (default 10^7; quick 10^5)"
    )
    p.add_argument("--n-features", type=int, default=128, help="random features m")
    p.add_argument("--n-components", type=int, default=10)
    p.add_argument("--sketch-size", type=int, default=10, help="StreamingKPCA's ell")
    p.add_argument(
        "--modes", nargs="+", default=None, choices=["memory", "disk", "cluster-1", "cluster-2"]
    )
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument(
        "--sklearn-max-gb",
        type=float,
        default=6.0,
        help="skip RBFSampler+PCA in memory above this estimated need",
    )
    p.add_argument(
        "--sklearn-max-rows",
        type=int,
        default=1_000_000,
        help="IncrementalPCA reads at most this many rows (its rate is per row; "
        "at ~20000 rows/s all 10^7 would take 8 minutes)",
    )
    p.add_argument("--threads", default="1", help="BLAS threads per process (default 1)")
    p.add_argument(
        "--tmp",
        default=None,
        help="folder for the .npy files (default: a new temporary folder, deleted afterwards)",
    )
    p.add_argument("--data-home", default=None, help="data sets folder (FASTKPCA_DATA)")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    datasets = args.datasets or (["synthetic"] if args.quick else ["kddcup", "synthetic"])
    n_rows = args.n_rows or (100_000 if args.quick else 10_000_000)
    args.modes = args.modes or (
        ["memory", "disk", "cluster-2"]
        if args.quick
        else ["memory", "disk", "cluster-1", "cluster-2"]
    )
    suffix = "_quick" if args.quick else ""
    out = args.out or os.path.join(RESULTS, f"bench_scale{suffix}.json")

    tmp = args.tmp or tempfile.mkdtemp(prefix="fastkpca-bench-scale-")
    os.makedirs(tmp, exist_ok=True)
    records = []
    t_start = time.perf_counter()
    try:
        for name in datasets:
            path = os.path.join(tmp, f"{name}.npy")
            t0 = time.perf_counter()
            if name == "kddcup":
                n, d = write_kddcup(path, args.data_home)
            else:
                n, d = n_rows, 100
                need = n * d * 4 * 1.05
                free = shutil.disk_usage(tmp).free
                if need > free:
                    raise SystemExit(
                        f"{tmp}: {need / 2**30:.1f} GB needed for the synthetic "
                        f"file, {free / 2**30:.1f} GB free"
                    )
                write_random_noisy(path, n, d)
            size_mb = os.path.getsize(path) / 2**20
            print(
                f"{name}: {n:,} x {d} float32 -> {path} ({size_mb:,.0f} MB) in "
                f"{time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            run_dataset(name, path, n, d, args, records)
            os.remove(path)
    finally:
        if args.tmp is None:
            shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "bench_scale",
        "quick": args.quick,
        "machine": machine_info(),
        "params": {
            "n_features": args.n_features,
            "n_components": args.n_components,
            "sketch_size": args.sketch_size,
            "block_rows": BLOCK_ROWS,
            "chunk_rows_max": CHUNK_ROWS,
            "threads": args.threads,
            "dtype": "float32",
        },
        "total_seconds": time.perf_counter() - t_start,
        "records": records,
        "ratios": ratios(records),
    }
    save_json(result, out)
    print(f"results -> {out}")
    for key, value in result["ratios"].items():
        print(f"  {key}: {value:.3g}")
    plot(records, out[:-5] + ".png")


if __name__ == "__main__":
    main()
