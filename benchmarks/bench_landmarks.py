"""Nystrom landmark methods on real data: uniform, kmeans, rls, rpcholesky (and plain RPCholesky).

For each data set (a uniform random subset of n rows, seed 0) and each number of landmarks c,
every method is run with several seeds and scored three ways:

- ``trace_ratio``: ``tr(K - C W^+ C^T) / sum_{i > c} lambda_i(K)``, the trace-norm error of the
  Nystrom approximation over the best rank-c trace-norm error (1 = optimal), on the *uncentered*
  RBF Gram K as the RPCholesky papers report it (Chen, Epperly, Tropp & Webber 2024; Epperly,
  Tropp & Webber 2024).  The numerator uses the pseudo-inverse NystromKPCA uses (eigenvalues of W
  below ``EIGENVALUE_FLOOR`` times the largest dropped); the denominator comes from all n
  eigenvalues of K (``scipy.linalg.eigvalsh``).  Also ``trace_rel`` = numerator / tr(K).
- ``embedding_error``: ``fastkpca.metrics.embedding_error`` (Procrustes) of
  ``NystromKPCA(k).fit(X).transform(X)`` against ``ExactKPCA(k)`` on the same kernel (centered,
  as KPCA is).
- ``fit_seconds``: ``NystromKPCA(n_components=k, n_landmarks=c, landmarks=method).fit(X)`` wall
  time for seed 0, each fit in its own fresh process (``_harness.measure``; X is read from a
  temporary .npy in the setup).  ``rpcholesky_plain`` is one-pivot-at-a-time RPCholesky
  (``rpcholesky_indices(accelerated=False)``) followed by a fit on those landmarks: the same
  distribution of landmarks as ``rpcholesky``, to show what the accelerated block form saves.

The RPCholesky certificate (the residual trace ``rpcholesky_indices`` returns) is compared with
the explicit ``tr(K - C W^+ C^T)`` of its pivots (``certificate`` in the JSON).

Data (``../shared/data`` through ``fastkpca.datasets.load``): pendigits (16 features, as
published), cpu_act (21 features, standardized), adult (a9a training file, 123 binary features,
densified), kddcup (41 features, standardized: network connections, most of them near-duplicates
of a few attack types -- clustered data with a fast-decaying spectrum), and on request mnist
(training images / 255; ``--datasets mnist``, slow: k-means on 784 features).  RBF kernel,
gamma = factor x the median heuristic on the subset (seed 0; factor 1 by default, 10 for a narrow
bandwidth: no timings then, so no lock needed), k = 10 components.  Commands (timings: run
under the machine-wide lock)::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_landmarks.py
    .venv/bin/python benchmarks/bench_landmarks.py --gamma-factors 10 \
        --out benchmarks/results/bench_landmarks_narrow.json
    .venv/bin/python benchmarks/bench_landmarks.py --no-timing   # quality figures only
    .venv/bin/python benchmarks/bench_landmarks.py --quick     # n = 1500, 2 data sets, ~1 min

Writes ``benchmarks/results/bench_landmarks[_quick].json`` and a ``.png`` next to it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

RESULTS = results_dir()
METHODS = ("uniform", "kmeans", "rls", "rpcholesky", "rpcholesky_plain")
N_COMPONENTS = 10


def prepare(name, n_samples, data_home=None):
    """A uniform random subset (seed 0) of ``n_samples`` rows of a real data set, dense float64."""
    from fastkpca.datasets import load

    subset = "train" if name in ("mnist", "adult") else "all"
    X, _ = load(name, data_home, subset=subset)
    idx = np.sort(np.random.default_rng(0).choice(X.shape[0], min(n_samples, X.shape[0]), False))
    X = X[idx]
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
    if name in ("cpu_act", "kddcup"):  # features on very different scales (counts, rates, ...)
        X = (X - X.mean(axis=0)) / np.maximum(X.std(axis=0), 1e-12)
    if name == "mnist":
        X = X / 255.0
    return np.ascontiguousarray(X, dtype=np.float64)


# --- work functions (module level: the child process re-imports them) --------------------------
def setup_load(path):
    # Imports a fit would otherwise pay on first use (not part of any method's cost).
    import sklearn.cluster  # noqa: F401

    import fastkpca._landmarks  # noqa: F401
    import fastkpca.decomposition.nystrom  # noqa: F401

    return np.load(path)


def fit_model(X, method, c, gamma, seed):
    from fastkpca import NystromKPCA
    from fastkpca._landmarks import rpcholesky_indices
    from fastkpca.kernels import RBF

    if method == "rpcholesky_plain":
        rng = np.random.default_rng(seed)
        idx = rpcholesky_indices(X, c, RBF(gamma), rng, accelerated=False).indices
        model = NystromKPCA(N_COMPONENTS, landmarks=X[idx], gamma=gamma)
    else:
        model = NystromKPCA(
            N_COMPONENTS, n_landmarks=c, landmarks=method, gamma=gamma, random_state=seed
        )
    return model.fit(X)


def work_fit(X, method, c, gamma, seed):
    return fit_model(X, method, c, gamma, seed)


# --- scores ------------------------------------------------------------------------------------
def nystrom_trace_error(X, landmarks, kernel) -> float:
    """``tr(K - C W^+ C^T)`` in row blocks (W^+ with NystromKPCA's eigenvalue floor)."""
    from fastkpca.decomposition.nystrom import nystrom_normalization

    L = np.asarray(landmarks, dtype=np.float64)
    values, vectors = nystrom_normalization(kernel(L))
    B = vectors / np.sqrt(values)
    explained = 0.0
    for _, _, C in kernel.blocks(X, L):
        explained += float(np.sum((C @ B) ** 2))
    return float(np.sum(kernel.diag(X))) - explained


def run_dataset(name, gamma_factor, args, tmpdir):
    import scipy.linalg as la

    from fastkpca import ExactKPCA
    from fastkpca._landmarks import rpcholesky_indices
    from fastkpca.kernels import RBF, resolve_gamma
    from fastkpca.metrics import embedding_error

    t0 = time.perf_counter()
    X = prepare(name, args.n_samples, args.data_home)
    n = X.shape[0]
    gamma = gamma_factor * float(resolve_gamma("median", X, rng=0))
    kernel = RBF(gamma)
    path = os.path.join(tmpdir, f"{name}.npy")
    np.save(path, X)
    # Fit times are measured at the median-heuristic bandwidth only (the cost of every method
    # hardly depends on gamma); plain RPCholesky is there for its time (same law as rpcholesky).
    timed = gamma_factor == 1 and not args.no_timing
    methods = METHODS if gamma_factor == 1 else tuple(m for m in METHODS if m != "rpcholesky_plain")

    # Exact references: all eigenvalues of the uncentered K, and the top-k KPCA embedding.
    K = kernel(X)
    eig = np.sort(la.eigvalsh(K, check_finite=False))[::-1]
    trace = float(np.trace(K))
    del K
    tail = {c: float(np.sum(np.maximum(eig[c:], 0.0))) for c in args.landmarks}
    reference = ExactKPCA(N_COMPONENTS, gamma=gamma).fit(X).transform(X)
    print(
        f"{name}: n={n} d={X.shape[1]} gamma={gamma:.4g} ({gamma_factor} x median) "
        f"refs {time.perf_counter() - t0:.1f} s"
    )

    rows = []
    for c in args.landmarks:
        for method in methods:
            ratios, rels, errors = [], [], []
            timing = {"fit_seconds": None, "extra_peak_mb": None}
            for seed in range(args.seeds):
                if seed == 0 and timed:
                    out = measure(
                        setup_load,
                        work_fit,
                        setup_kwargs={"path": path},
                        work_kwargs={"method": method, "c": c, "gamma": gamma, "seed": seed},
                    )
                    if not out["ok"]:
                        raise RuntimeError(f"{name} {method} c={c}: {out['error']}")
                    model = out["result"]
                    timing = {"fit_seconds": out["seconds"], "extra_peak_mb": out["extra_peak_mb"]}
                else:
                    model = fit_model(X, method, c, gamma, seed)
                err = nystrom_trace_error(X, model.landmarks_, kernel)
                ratios.append(err / tail[c])
                rels.append(err / trace)
                errors.append(embedding_error(model.transform(X), reference))
            row = {
                "dataset": name,
                "c": c,
                "method": method,
                "trace_ratio": ratios,
                "trace_ratio_mean": float(np.mean(ratios)),
                "trace_rel_mean": float(np.mean(rels)),
                "embedding_error": errors,
                "embedding_error_mean": float(np.mean(errors)),
                **timing,
            }
            rows.append(row)
            print(
                f"  c={c:4d} {method:17s} ratio {row['trace_ratio_mean']:7.3f} "
                f"(rel {row['trace_rel_mean']:.2e})  emb {row['embedding_error_mean']:.2e}"
                + (f"  fit {timing['fit_seconds']:.2f} s" if timed else ""),
                flush=True,
            )
    # The certificate against the explicit error, for one run per c (seed 0).
    certificates = []
    for c in args.landmarks:
        res = rpcholesky_indices(X, c, kernel, np.random.default_rng(0))
        explicit = nystrom_trace_error(X, X[res.indices], kernel)
        certificates.append(
            {"c": c, "certificate": res.residual_trace, "explicit": explicit, "trace": trace}
        )
    return {
        "dataset": name,
        "gamma_factor": gamma_factor,
        "n_samples": n,
        "n_features": X.shape[1],
        "gamma": gamma,
        "trace": trace,
        "best_rank_c_tail": {str(c): tail[c] for c in args.landmarks},
        "rows": rows,
        "certificate": certificates,
        "seconds": time.perf_counter() - t0,
    }


def plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the plot extra is optional
        return None
    sets = results["datasets"]
    fig, axes = plt.subplots(2, len(sets), figsize=(4 * len(sets), 7), squeeze=False)
    for j, ds in enumerate(sets):
        for method in METHODS:
            rows = [r for r in ds["rows"] if r["method"] == method]
            if not rows:
                continue
            cs = [r["c"] for r in rows]
            axes[0, j].plot(cs, [r["trace_ratio_mean"] for r in rows], "o-", label=method)
            axes[1, j].plot(cs, [r["embedding_error_mean"] for r in rows], "o-", label=method)
        axes[0, j].set_title(
            f"{ds['dataset']} (n={ds['n_samples']}, {ds['gamma_factor']:g} x median gamma)",
            fontsize=9,
        )
        for i, label in enumerate(
            ["trace error / best rank-c", f"embedding error (k={N_COMPONENTS})"]
        ):
            axes[i, j].set_xscale("log")
            axes[i, j].set_yscale("log")
            axes[i, j].set_xlabel("landmarks c")
            axes[i, j].set_ylabel(label)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 1500, 2 data sets, 2 seeds")
    parser.add_argument("--n-samples", type=int, default=None, help="default 3000 (quick 1500)")
    parser.add_argument("--seeds", type=int, default=None, help="default 3 (quick 2)")
    parser.add_argument("--datasets", nargs="*", default=None)
    parser.add_argument("--landmarks", type=int, nargs="*", default=None, help="values of c")
    parser.add_argument(
        "--gamma-factors",
        type=float,
        nargs="*",
        default=None,
        help="gamma = factor x the median heuristic (fit times only for factor 1); default 1",
    )
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="fit in this process, no fit times (quality only; no lock needed)",
    )
    parser.add_argument("--data-home", default=None, help="default: fastkpca.datasets' default")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.n_samples = args.n_samples or (1500 if args.quick else 3000)
    args.seeds = args.seeds or (2 if args.quick else 3)
    args.datasets = args.datasets or (
        ["pendigits", "cpu_act"] if args.quick else ["pendigits", "cpu_act", "adult", "kddcup"]
    )
    args.gamma_factors = args.gamma_factors or [1.0]
    args.landmarks = args.landmarks or ([25, 100] if args.quick else [50, 100, 200, 400])
    out = args.out or os.path.join(
        RESULTS, "bench_landmarks_quick.json" if args.quick else "bench_landmarks.json"
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        sets = [
            run_dataset(name, factor, args, tmpdir)
            for factor in args.gamma_factors
            for name in args.datasets
        ]
    results = {
        "benchmark": "bench_landmarks",
        "command": " ".join(["benchmarks/bench_landmarks.py", *(argv or sys.argv[1:])]),
        "n_components": N_COMPONENTS,
        "seeds": args.seeds,
        "landmarks": args.landmarks,
        "kernel": "rbf, gamma = factor x the median heuristic (seed 0)",
        "gamma_factors": args.gamma_factors,
        "timed": not args.no_timing,
        "machine": machine_info(),
        "datasets": sets,
        "seconds": time.perf_counter() - t0,
    }
    save_json(results, out)
    png = plot(results, os.path.splitext(out)[0] + ".png")
    print(f"wrote {out}" + (f" and {png}" if png else "") + f" ({results['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
