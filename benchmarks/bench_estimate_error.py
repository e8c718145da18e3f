"""Calibration of ``fastkpca.metrics.estimate_error`` against the exact errors on real data.

For each data set (pendigits, cpu_act, mnist; the first n rows, n = 6000 by default) and each
approximate method at two model sizes, the script fits the model, computes

- the truth: ``relative_rank_k_error`` (``||Kc - T T^T||_F / ||Kc - (Kc)_k||_F``, with the
  top-k eigenvalues of ``Kc`` from ``ExactKPCA``) and ``eigenvalue_error`` against
  ``ExactKPCA.eigenvalues_``, from one explicit n x n centered Gram per data set;
- the estimate: ``estimate_error(model, X, n_probe=..., random_state=0)``;

and reports whether the estimate of ``err - 1`` is within a factor 2 of the truth or within
0.01 of it (the acceptance criterion), whether the stated 95 % interval covers the truth, and
whether the one-sided bound that sizes by ``tol`` use (estimate + 2 stderr) is above it.
ExactKPCA itself is a sanity row (truth 1.0 and 0.0), not counted in the fraction.

    .venv/bin/python benchmarks/bench_estimate_error.py            # n = 6000, ~20 min here
    .venv/bin/python benchmarks/bench_estimate_error.py --quick    # n = 2500, n_probe = 1000
    .venv/bin/python benchmarks/bench_estimate_error.py --n-samples 20000 --datasets mnist \
        --methods NystromKPCA,RandomFeatureKPCA,StreamingKPCA,ReducedSetKPCA --tag mnist20000
    .venv/bin/python benchmarks/bench_estimate_error.py --probes 16   # the probe's calibration

``--probes N``: on the sets of ``bench_auto.py --quick`` (their first 20,000 rows, gamma = 1 /
d), N independent error probes (:class:`fastkpca.statistics.probe.ErrorProbe`) of AutoKPCA's
size (8 sqrt(n)) and of the estimators' (2000) for Nystrom and random-feature models from poor
to exact KPCA's limit, against the exact error on all rows: the estimate's bias near the
optimum, the root mean square of ``(estimate - truth) / stderr``, and how often the bound
``estimate + 2 stderr`` is below the truth (2.3 % for a normal estimate); writes
``bench_estimate_error_probes.json``.

Writes ``benchmarks/results/bench_estimate_error[_quick].json``.  Wall times are measured in
this process on a shared machine: indicative only (the estimate against the exact truth).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, results_dir, save_json  # noqa: E402

RESULTS = results_dir()
DATA_HOME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
K = 10


def load_data(name, n):
    """The first n rows, preprocessed as float64: standardized, or / 255 for mnist."""
    from fastkpca.datasets import load

    X, _ = load(name, data_home=os.environ.get("FASTKPCA_DATA", DATA_HOME))
    X = X[:n]
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    if name == "mnist":
        return X / 255.0, "scale"
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0), None


def models(gamma, quick):
    """(method, size label, estimator) for every approximate method at two sizes."""
    from fastkpca import (
        NystromKPCA,
        RandomFeatureKPCA,
        ReducedSetKPCA,
        SparsifiedKPCA,
        StreamingKPCA,
    )

    kw = {"gamma": gamma, "random_state": 0}
    out = []
    for c in (100, 400):
        out.append(("NystromKPCA", f"n_landmarks={c}", NystromKPCA(K, n_landmarks=c, **kw)))
    for m in (200, 1000):
        out.append(
            (
                "RandomFeatureKPCA",
                f"n_random_features={m}",
                RandomFeatureKPCA(K, n_random_features=m, **kw),
            )
        )
    for ell in (20, 60):
        out.append(
            (
                "StreamingKPCA",
                f"n_random_features=1000,sketch_size={ell}",
                StreamingKPCA(K, n_random_features=1000, sketch_size=ell, **kw),
            )
        )
    for c in (100, 400):
        out.append(
            (
                "ReducedSetKPCA",
                f"kmeans,n_centers={c}",
                ReducedSetKPCA(K, density="kmeans", n_centers=c, **kw),
            )
        )
    for s in (0.05, 0.2):
        out.append(("SparsifiedKPCA", f"sample_prob={s}", SparsifiedKPCA(K, sample_prob=s, **kw)))
    return out


def truth(G, fro2, lam, T):
    """``relative_rank_k_error - 1`` from the explicit centered Gram G (as the metric does)."""
    n = G.shape[0]
    num2 = 0.0
    step = 1000
    for s in range(0, n, step):
        D = G[s : s + step] - T[s : s + step] @ T.T
        num2 += float(np.einsum("ij,ij->", D, D))
    den2 = fro2 - float(np.sum(lam**2))
    return float(np.sqrt(num2 / den2)) - 1.0


def within(est, true):
    return bool(abs(est - true) <= 0.01 or (true > 0 and 0.5 * true <= est <= 2.0 * true))


def run_dataset(name, n, n_probe, quick, methods=None):
    from fastkpca import ExactKPCA
    from fastkpca.metrics import eigenvalue_error, estimate_error, relative_rank_k_error

    X, gamma = load_data(name, n)
    t0 = time.perf_counter()
    exact = ExactKPCA(K, gamma=gamma, random_state=0).fit(X)
    t_exact = time.perf_counter() - t0
    kernel = exact.kernel_
    G = np.asarray(kernel(X), dtype=np.float64)
    G -= G.mean(axis=0)
    G -= G.mean(axis=1)[:, None]
    fro2 = float(np.einsum("ij,ij->", G, G))
    lam = exact.eigenvalues_
    rows = []
    cases = models(gamma, quick) + [("ExactKPCA", "exact", exact)]
    if methods:
        cases = [c for c in cases if c[0] in methods or c[0] == "ExactKPCA"]
    for method, size, model in cases:
        t0 = time.perf_counter()
        if model is not exact:
            model.fit(X)
        t_fit = time.perf_counter() - t0
        T = np.asarray(model.transform(X), dtype=np.float64)
        true_excess = truth(G, fro2, lam, T)
        true_eig = eigenvalue_error(model.eigenvalues_, lam)
        t0 = time.perf_counter()
        est = estimate_error(model, X, n_probe=n_probe, random_state=0)
        t_est = time.perf_counter() - t0
        ex = est["excess_error"]
        eg = est["eigenvalue_error"]
        lo, hi = ex["interval"]
        row = {
            "dataset": name,
            "n": n,
            "method": method,
            "size": size,
            "true_excess": true_excess,
            "est_excess": ex["estimate"],
            "est_excess_stderr": ex["stderr"],
            "est_excess_interval": list(ex["interval"]),
            "within_criterion": within(ex["estimate"], true_excess),
            "interval_covers": bool(lo - 1e-9 <= true_excess <= hi + 1e-9),
            "est_excess_bound": ex["bound"],
            "bound_covers": bool(true_excess <= ex["bound"] + 1e-9),
            "true_eigenvalue_error": true_eig,
            "est_eigenvalue_error": eg["estimate"],
            "est_eigenvalue_error_stderr": eg["stderr"],
            "eigenvalue_within": within(eg["estimate"], true_eig),
            "fit_seconds": t_fit,
            "estimate_seconds": t_est,
        }
        rows.append(row)
        print(
            f"{name:9s} {method:17s} {size:30s} err-1 true {true_excess:9.4g} "
            f"est {ex['estimate']:9.4g} +- {ex['stderr']:8.2g} "
            f"{'ok ' if row['within_criterion'] else 'BAD'} | eig true {true_eig:8.3g} "
            f"est {eg['estimate']:8.3g} | est {t_est:5.1f} s",
            flush=True,
        )
    if quick:
        # The truth above uses the same formula as relative_rank_k_error: check it once.
        T = np.asarray(cases[0][2].transform(X), dtype=np.float64)
        ref = relative_rank_k_error(X, T, kernel) - 1.0
        assert abs(ref - rows[0]["true_excess"]) <= 1e-6 * max(1.0, abs(ref)), (ref, rows[0])
    return rows, {"dataset": name, "n": n, "exact_fit_seconds": t_exact}


#: ``--probes``: the sets and rows of ``bench_auto.py --quick`` (its preprocessing and gamma =
#: 1 / d), the probe sizes AutoKPCA draws there (8 sqrt(n)) and the estimators' 2000, and the
#: models: Nystrom (uniform, pivoted) and random Fourier features at several sizes.
PROBE_SETS = ("mnist", "random_noisy", "kddcup", "pendigits", "cpu_act", "adult")
PROBE_SET_ROWS = 20_000
PROBE_MODELS = [("nystrom", c) for c in (32, 64, 128, 256, 512, 1024, 2048)]
PROBE_MODELS += [("rpcholesky", c) for c in (64, 128, 256)]
PROBE_MODELS += [("rff", m) for m in (256, 1024, 4096)]


def probe_calibration(name, n_probes):
    """Bias and coverage of the error probe: ``n_probes`` independent probes of each size
    against the exact relative rank-k error of each model on all rows (one explicit Gram)."""
    import bench_auto

    from fastkpca import NystromKPCA, RandomFeatureKPCA
    from fastkpca._centering import center_gram_inplace
    from fastkpca.kernels import RBF
    from fastkpca.solvers import eigh_topk
    from fastkpca.statistics.probe import CONFIDENCE_Z, ErrorProbe

    X = bench_auto.load_data(name, PROBE_SET_ROWS)
    n = X.shape[0]
    kernel = RBF(1.0 / X.shape[1])
    G = np.asarray(kernel(X.toarray() if hasattr(X, "toarray") else X), dtype=np.float64)
    center_gram_inplace(G)
    fro2 = float(np.einsum("ij,ij->", G, G))
    vals, _ = eigh_topk(G.copy(), K, method="lanczos", rng=0, overwrite=True)
    tail2 = fro2 - float(np.sum(vals**2))
    models, truths = {}, {}
    for kind, size in PROBE_MODELS:
        if kind == "rff":
            model = RandomFeatureKPCA(K, kernel=kernel, n_random_features=size, features="rff")
        else:
            landmarks = "rpcholesky" if kind == "rpcholesky" else "uniform"
            model = NystromKPCA(K, kernel=kernel, n_landmarks=size, landmarks=landmarks)
        label = f"{kind} {size}"
        models[label] = model.set_params(random_state=0).fit(X)
        T = np.asarray(models[label].transform(X), dtype=np.float64)
        T = T - T.mean(axis=0)
        num2 = fro2 - 2.0 * float(np.sum(T * (G @ T))) + float(np.sum((T.T @ T) ** 2))
        truths[label] = float(np.sqrt(max(num2, 0.0) / tail2))
    del G
    out = {"name": name, "n": n, "truth": truths, "probes": {}}
    for p in sorted({min(bench_auto_probe_size(n), n // 2), min(2000, n // 2)}):
        estimates = {label: [] for label in models}
        for seed in range(n_probes):
            rng = np.random.default_rng(1000 + seed)
            probe = ErrorProbe(X[rng.choice(n, p, replace=False)], kernel, rng, n_rows=n)
            for label, model in models.items():
                estimates[label].append(list(probe.error(model)))
        z = np.concatenate(
            [
                (np.array(e)[:, 0] - truths[label]) / np.array(e)[:, 1]
                for label, e in estimates.items()
            ]
        )
        near = [label for label in models if truths[label] <= 1.05]
        bias = [np.mean(np.array(estimates[label])[:, 0]) - truths[label] for label in near]
        out["probes"][str(p)] = {
            "estimates": estimates,
            "bias_near_optimum": [float(min(bias)), float(max(bias))],
            "rms_z": float(np.sqrt(np.mean(z**2))),
            "bound_below_truth": float(np.mean(z < -CONFIDENCE_Z)),
        }
        print(
            f"{name:13s} n {n:6d} p {p:5d}: bias (truth <= 1.05) {min(bias):+.4f} to "
            f"{max(bias):+.4f}, rms z {out['probes'][str(p)]['rms_z']:.2f}, bound below the "
            f"truth {out['probes'][str(p)]['bound_below_truth']:.1%}",
            flush=True,
        )
    return out


def bench_auto_probe_size(n):
    """AutoKPCA's probe rows for n rows (:func:`fastkpca.decomposition.auto.probe_size`)."""
    from fastkpca.decomposition.auto import probe_size

    return probe_size(n)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 2500, n_probe = 1000")
    parser.add_argument("--n-samples", type=int, default=None)
    parser.add_argument("--n-probe", type=int, default=None)
    parser.add_argument("--datasets", default="pendigits,cpu_act,mnist")
    parser.add_argument("--methods", default="", help="comma-separated class names (all if empty)")
    parser.add_argument("--tag", default="", help="results file bench_estimate_error_TAG.json")
    parser.add_argument(
        "--probes",
        type=int,
        default=0,
        help="instead: bias and coverage of the error probe over this many probes per size",
    )
    args = parser.parse_args(argv)
    if args.probes:
        sets = [probe_calibration(name, args.probes) for name in PROBE_SETS]
        out = {"benchmark": "bench_estimate_error --probes", "sets": sets}
        out["machine"] = machine_info()
        save_json(out, os.path.join(RESULTS, "bench_estimate_error_probes.json"))
        return out
    n = args.n_samples or (2500 if args.quick else 6000)
    n_probe = args.n_probe or (1000 if args.quick else 2000)
    rows, info = [], []
    for name in args.datasets.split(","):
        r, i = run_dataset(name, n, n_probe, args.quick, [m for m in args.methods.split(",") if m])
        rows += r
        info.append(i)
    counted = [r for r in rows if r["method"] != "ExactKPCA"]
    frac = float(np.mean([r["within_criterion"] for r in counted]))
    cover = float(np.mean([r["interval_covers"] for r in counted]))
    bound = float(np.mean([r["bound_covers"] for r in counted]))
    frac_eig = float(np.mean([r["eigenvalue_within"] for r in counted]))
    print(
        f"\n{len(counted)} cases: err-1 estimate within factor 2 or 0.01 in {frac:.1%}; "
        f"95% interval covers the truth in {cover:.1%}; eigenvalue_error within in {frac_eig:.1%}"
    )
    out = {
        "benchmark": "bench_estimate_error",
        "quick": args.quick,
        "n_samples": n,
        "n_probe": n_probe,
        "n_components": K,
        "fraction_within_criterion": frac,
        "fraction_interval_covers": cover,
        "fraction_bound_covers": bound,
        "fraction_eigenvalue_within": frac_eig,
        "datasets": info,
        "rows": rows,
        "machine": machine_info(),
    }
    suffix = ("_quick" if args.quick else "") + (f"_{args.tag}" if args.tag else "")
    save_json(out, os.path.join(RESULTS, f"bench_estimate_error{suffix}.json"))
    return out


if __name__ == "__main__":
    main()
