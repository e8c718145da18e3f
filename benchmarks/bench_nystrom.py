"""NystromKPCA against scikit-learn's ``make_pipeline(Nystroem(c), PCA(k))`` on RandomNoisy data.

Each fit and each transform runs in its own fresh process (``_harness.measure``); the data are
generated in the process's setup, so ``extra_peak_mb`` is the memory the method itself needed.
Transforms are timed on ``--n-transform`` rows with models fitted (untimed, in the setup) on the
first min(n, 10^5) rows: a transform's cost does not depend on the training size.
Both methods use c uniformly sampled landmarks, the RBF kernel with gamma = 1 / n_features, and
the same data; the figures to quote are the ratios (this machine is shared and noisy).

Goals (issue 5): fit time <= 1/2 of scikit-learn's, extra peak memory <= 1/10 of it.
scikit-learn holds the n x c feature matrix and a centred copy (16 GB at n = 10^6, c = 1000):
run the full size under the machine-wide lock so no other large job overlaps::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_nystrom.py
    .venv/bin/python benchmarks/bench_nystrom.py --n-samples 100000   # small run
    .venv/bin/python benchmarks/bench_nystrom.py --quick              # seconds (fastkpca bench)

Writes ``benchmarks/results/bench_nystrom.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, save_json  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def make_data(n_samples, n_features, dtype):
    from fastkpca.datasets import make_random_noisy

    return make_random_noisy(n_samples, n_features, random_state=0, dtype=np.dtype(dtype))


def _ours(c, k):
    from fastkpca import NystromKPCA

    return NystromKPCA(k, n_landmarks=c, random_state=0)


def _sklearn(c, k):
    from sklearn.decomposition import PCA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    return make_pipeline(Nystroem(n_components=c, random_state=0), PCA(k, random_state=0))


def _summary(model, which, n):
    """Top eigenvalues of the centred n x n (Nystrom) Gram, on the same scale for both."""
    if which == "ours":
        return [float(v) for v in model.eigenvalues_]
    return [float(v) for v in model[-1].explained_variance_ * (n - 1)]


# --- work functions (module level: the child process re-imports them) ---------------------------
def setup_fit(n_samples, n_features, dtype):
    return make_data(n_samples, n_features, dtype)


def work_fit(X, which, c, k):
    model = (_ours if which == "ours" else _sklearn)(c, k)
    model.fit(X)
    return {"eigenvalues": _summary(model, which, X.shape[0])}


def setup_transform(n_samples, n_features, dtype, which, c, k, n_transform, n_train):
    # A transform costs the same whatever n the model was fitted on (c landmarks, k axes), so
    # the model is fitted on the first n_train rows only, which keeps this setup short.
    X = make_data(n_samples, n_features, dtype)
    model = (_ours if which == "ours" else _sklearn)(c, k).fit(X[:n_train])
    Xt = np.array(X[:n_transform], copy=True)
    del X
    return model, Xt


def work_transform(data):
    model, Xt = data
    T = model.transform(Xt)
    return {"shape": list(T.shape), "dtype": str(T.dtype)}


def setup_profile(n_samples, n_features, dtype, c):
    X = make_data(n_samples, n_features, dtype)
    idx = np.sort(np.random.default_rng(0).choice(X.shape[0], c, replace=False))
    return X, X[idx]


def work_profile(data):
    """Split one fit's covariance pass into kernel blocks and the SYRK / merge that follows."""
    from fastkpca.kernels import RBF
    from fastkpca.statistics.kernel_moments import KernelMoments

    X, L = data
    kernel = RBF(1.0 / X.shape[1])
    t_kernel = t_moments = 0.0
    moments = KernelMoments.empty(L.shape[0])
    t0 = time.perf_counter()
    for _, _, K in kernel.blocks(X, L):
        t1 = time.perf_counter()
        moments.update(K)
        t2 = time.perf_counter()
        t_kernel += t1 - t0
        t_moments += t2 - t1
        t0 = time.perf_counter()
    return {"kernel_blocks_s": t_kernel, "moments_syrk_s": t_moments}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (20000 rows, 200 landmarks, 5000 transformed): seconds",
    )
    p.add_argument("--n-samples", type=int, default=None, help="default 10^6 (quick: 20000)")
    p.add_argument("--n-features", type=int, default=100)
    p.add_argument("--n-landmarks", type=int, default=None, help="default 1000 (quick: 200)")
    p.add_argument("--n-components", type=int, default=10)
    p.add_argument("--n-transform", type=int, default=None, help="default 100000 (quick: 5000)")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--skip-sklearn", action="store_true")
    p.add_argument("--profile", action="store_true", help="also time kernel blocks vs SYRK")
    p.add_argument(
        "--out", default=None, help="default benchmarks/results/bench_nystrom[_quick].json"
    )
    args = p.parse_args(argv)
    args.n_samples = args.n_samples or (20_000 if args.quick else 1_000_000)
    args.n_landmarks = args.n_landmarks or (200 if args.quick else 1000)
    args.n_transform = args.n_transform or (5_000 if args.quick else 100_000)
    args.out = args.out or os.path.join(
        RESULTS, "bench_nystrom_quick.json" if args.quick else "bench_nystrom.json"
    )

    n, d, c, k = args.n_samples, args.n_features, args.n_landmarks, args.n_components
    n_t = min(args.n_transform, n)
    base = dict(n_samples=n, n_features=d, dtype=args.dtype)
    config = {**vars(args), "out": os.path.relpath(args.out, os.path.dirname(RESULTS) + "/..")}
    results = {
        "config": {
            **config,
            "gamma": 1.0 / d,
            "kernel": "rbf",
            "data": "make_random_noisy(random_state=0)",
        },
        "machine": machine_info(),
        "runs": {},
    }
    methods = ["ours"] + ([] if args.skip_sklearn else ["sklearn"])
    for which in methods:
        fit = measure(
            setup_fit, work_fit, setup_kwargs=base, work_kwargs=dict(which=which, c=c, k=k)
        )
        print(
            f"{which:8s} fit       {fit.get('seconds', float('nan')):9.2f} s  "
            f"extra peak {fit.get('extra_peak_mb', float('nan')):9.1f} MB  "
            f"{fit.get('error', '')}",
            flush=True,
        )
        tr = measure(
            setup_transform,
            work_transform,
            setup_kwargs=dict(
                **base, which=which, c=c, k=k, n_transform=n_t, n_train=min(n, 100_000)
            ),
        )
        print(
            f"{which:8s} transform {tr.get('seconds', float('nan')):9.2f} s  "
            f"extra peak {tr.get('extra_peak_mb', float('nan')):9.1f} MB  "
            f"({n_t} rows) {tr.get('error', '')}",
            flush=True,
        )
        results["runs"][which] = {"fit": fit, "transform": tr}
    if args.profile:
        prof = measure(setup_profile, work_profile, setup_kwargs=dict(**base, c=c))
        results["profile_ours_covariance_pass"] = prof
        print("profile", prof.get("result", prof.get("error")), flush=True)
    if "sklearn" in results["runs"]:
        ours, sk = results["runs"]["ours"], results["runs"]["sklearn"]
        ratios = {}
        for phase in ("fit", "transform"):
            if ours[phase].get("ok") and sk[phase].get("ok"):
                ratios[f"{phase}_time"] = ours[phase]["seconds"] / sk[phase]["seconds"]
                ratios[f"{phase}_extra_memory"] = ours[phase]["extra_peak_mb"] / max(
                    sk[phase]["extra_peak_mb"], 1e-9
                )
        if ours["fit"].get("ok") and sk["fit"].get("ok"):
            a = np.array(ours["fit"]["result"]["eigenvalues"])
            b = np.array(sk["fit"]["result"]["eigenvalues"])
            ratios["top_eigenvalue_sum"] = float(a.sum() / b.sum())
        results["ratios_ours_over_sklearn"] = ratios
        results["goals"] = {
            "fit_time_at_most_half": ratios.get("fit_time", np.inf) <= 0.5,
            "fit_extra_memory_at_most_tenth": ratios.get("fit_extra_memory", np.inf) <= 0.1,
        }
        print("ratios (ours / sklearn):", {key: round(v, 4) for key, v in ratios.items()})
        print("goals:", results["goals"])
    save_json(results, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
