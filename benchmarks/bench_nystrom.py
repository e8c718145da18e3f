"""NystromKPCA against scikit-learn's ``make_pipeline(Nystroem(c), PCA(k))`` on RandomNoisy data.

Each fit and each transform runs in its own fresh process (``_harness.measure``); the data are
generated in the process's setup, so ``extra_peak_mb`` is the memory the method itself needed.
Fits are timed together with the transform of ``--n-probe`` held-out rows (c (d + k) flops a row,
negligible next to the fit), from which the parent computes the relative rank-k error
``||G - T T^T||_F / ||G - G_k||_F`` on those rows (G their centered Gram; 1.0 is optimal).
Transforms are timed on ``--n-transform`` rows with models fitted (untimed, in the setup) on the
first min(n, 10^5) rows: a transform's cost does not depend on the training size.
Both methods use c uniformly sampled landmarks, the RBF kernel with gamma = 1 / n_features, and
the same data; the figures to quote are the ratios (this machine is shared and noisy).

fastkpca runs three ways: the default (``solver="auto"``), ``solver="exact"`` (the c x c scatter)
and ``solver="randomized"`` (the one-pass sketch).  The *floor* is the time to compute the
n x c kernel rows once, block by block (float64 blocks, and the float32 blocks ``auto`` may use),
the least any Nystrom fit must spend.

Goals (issue 12): default fit <= 0.15x scikit-learn's, extra peak memory <= 0.05x, relative
rank-k error within 2 % of scikit-learn's.  scikit-learn holds the n x c feature matrix and a
centred copy (16 GB at n = 10^6, c = 1000): run large sizes under the machine-wide lock::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_nystrom.py --n-samples 200000
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_nystrom.py --quick
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/bench_nystrom.py --near-n

``--near-n`` instead compares NystromKPCA with ExactKPCA when c is close to n, on a USPS-like
set (7438 MNIST training rows downsampled to 16 x 16 = 256 features, scaled to [-1, 1]; USPS
itself is not in ``../shared/data``) at c = n/4, n/2, 4769 and n: the default (which takes the
exact path when it is cheaper) and ``solver="randomized"`` (always the Nystrom approximation).

Writes ``benchmarks/results/bench_nystrom[_quick|_near_n].json``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

RESULTS = results_dir()


def make_data(n_samples, n_features, dtype, n_probe=0):
    """RandomNoisy rows; the last ``n_probe`` are held out (returned separately when > 0)."""
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(n_samples + n_probe, n_features, random_state=0, dtype=np.dtype(dtype))
    return (X[:n_samples], np.array(X[n_samples:])) if n_probe else X


def usps_like(n_samples=7438, n_probe=2000):
    """USPS-shaped stand-in: MNIST training rows downsampled to 16 x 16, scaled to [-1, 1]."""
    from scipy import ndimage

    from fastkpca import datasets

    X, _ = datasets.load("mnist", subset="train", max_rows=n_samples + n_probe)
    images = ndimage.zoom(X.reshape(-1, 28, 28), (1, 16 / 28, 16 / 28), order=1)
    Z = images.reshape(len(X), 256)
    Z = 2 * Z / max(float(Z.max()), 1.0) - 1
    return np.ascontiguousarray(Z[:n_samples]), np.ascontiguousarray(Z[n_samples:])


#: The fits compared: (label, estimator factory).
def _make(which, c, k, gamma=None):
    if which == "sklearn":
        from sklearn.decomposition import PCA
        from sklearn.kernel_approximation import Nystroem
        from sklearn.pipeline import make_pipeline

        return make_pipeline(
            Nystroem(gamma=gamma, n_components=c, random_state=0), PCA(k, random_state=0)
        )
    if which == "exact_kpca":
        from fastkpca import ExactKPCA

        return ExactKPCA(k, gamma=gamma, random_state=0)
    from fastkpca import NystromKPCA

    solver = {"ours": "auto", "ours_exact": "exact", "ours_randomized": "randomized"}[which]
    return NystromKPCA(k, gamma=gamma, n_landmarks=c, solver=solver, random_state=0)


def _summary(model, which, n):
    """Top eigenvalues of the centred n x n (Nystrom) Gram, on the same scale for all."""
    if which == "sklearn":
        return [float(v) for v in model[-1].explained_variance_ * (n - 1)]
    return [float(v) for v in model.eigenvalues_]


# --- work functions (module level: the child process re-imports them) ---------------------------
def _import_methods():
    """Import every module a timed call needs, in the untimed setup: imports are neither the
    method's time nor its memory (scipy, scikit-learn and fastkpca take ~1.5 s and ~140 MB)."""
    import sklearn.decomposition  # noqa: F401
    import sklearn.kernel_approximation  # noqa: F401
    import sklearn.pipeline  # noqa: F401

    import fastkpca.decomposition.exact  # noqa: F401
    import fastkpca.decomposition.nystrom  # noqa: F401


def setup_fit(n_samples, n_features, dtype, n_probe):
    _import_methods()
    return make_data(n_samples, n_features, dtype, n_probe)


def setup_near_n(n_probe):
    _import_methods()
    return usps_like(n_probe=n_probe)


def work_fit(data, which, c, k, gamma=None):
    X, P = data
    model = _make(which, c, k, gamma).fit(X)
    return {
        "eigenvalues": _summary(model, which, X.shape[0]),
        "probe_transform": np.asarray(model.transform(P), dtype=np.float64),
        "solver": getattr(model, "solver_", None),
        "n_landmarks": getattr(model, "n_landmarks_", None),
    }


def setup_transform(n_samples, n_features, dtype, which, c, k, n_transform, n_train):
    # A transform costs the same whatever n the model was fitted on (c landmarks, k axes), so
    # the model is fitted on the first n_train rows only, which keeps this setup short.
    _import_methods()
    X = make_data(n_samples, n_features, dtype)
    model = _make(which, c, k).fit(X[:n_train])
    Xt = np.array(X[:n_transform], copy=True)
    del X
    return model, Xt


def work_transform(data):
    model, Xt = data
    T = model.transform(Xt)
    return {"shape": list(T.shape), "dtype": str(T.dtype)}


def setup_floor(n_samples, n_features, dtype, c):
    _import_methods()
    X = make_data(n_samples, n_features, dtype)
    idx = np.sort(np.random.default_rng(0).choice(X.shape[0], c, replace=False))
    return X, np.asarray(X[idx], dtype=np.float64)


def work_floor(data, block_dtype):
    """The kernel rows k(L, x) of every row once, in the fit's blocks, and nothing else."""
    from fastkpca.decomposition.nystrom import SKETCH_BLOCK_MB
    from fastkpca.kernels import RBF

    X, L = data
    kernel = RBF(1.0 / X.shape[1])
    total = 0.0
    for _, _, K in kernel.blocks(
        X, L, dtype=np.dtype(block_dtype), working_memory_mb=SKETCH_BLOCK_MB
    ):
        total += float(K[0, 0])
    return {"checksum": total}


class ProbeError:
    """Relative rank-k error of probe projections: ``||G - T T^T||_F / ||G - G_k||_F``."""

    def __init__(self, P, gamma, k):
        from fastkpca._centering import center_gram_inplace
        from fastkpca.kernels import RBF

        self.G = RBF(gamma)(np.asarray(P, dtype=np.float64))
        center_gram_inplace(self.G)
        top = np.linalg.eigvalsh(self.G)[::-1][:k]
        self.den = np.sqrt(max(np.sum(self.G**2) - np.sum(top**2), 1e-300))

    def __call__(self, T):
        T = np.asarray(T, dtype=np.float64)
        return float(np.linalg.norm(self.G - T @ T.T) / self.den)


def _print(label, r, extra=""):
    print(
        f"{label:24s} {r.get('seconds', float('nan')):9.2f} s  "
        f"extra peak {r.get('extra_peak_mb', float('nan')):9.1f} MB  {extra}"
        f"{r.get('error', '')}",
        flush=True,
    )


def _fit_runs(results, methods, setup, setup_kwargs, error, **work_kwargs):
    for which in methods:
        fit = measure(
            setup, work_fit, setup_kwargs=setup_kwargs, work_kwargs=dict(which=which, **work_kwargs)
        )
        if fit.get("ok"):
            res = fit["result"]
            res["probe_error"] = error(res.pop("probe_transform"))
            extra = f"probe error {res['probe_error']:.5f}  solver {res['solver']}  "
        else:
            extra = ""
        _print(f"{which} fit", fit, extra)
        results[which] = fit
    return results


def main_near_n(args):
    """NystromKPCA vs ExactKPCA with c close to n on the USPS-like set."""
    X, P = usps_like(n_probe=args.n_probe)
    n, d, k = X.shape[0], X.shape[1], args.n_components
    gamma = 1.0 / d
    error = ProbeError(P, gamma, k)
    results = {
        "config": {
            "n_samples": n,
            "n_features": d,
            "n_components": k,
            "gamma": gamma,
            "data": "usps_like (MNIST 16 x 16)",
            "n_probe": args.n_probe,
        },
        "machine": machine_info(),
        "runs": {},
    }
    kw = dict(setup_kwargs=dict(n_probe=args.n_probe), error=error, k=k, gamma=gamma)
    print(f"n = {n}, d = {d}, k = {k}", flush=True)
    results["runs"]["exact_kpca"] = _fit_runs({}, ["exact_kpca"], setup_near_n, c=None, **kw)
    for c in (n // 4, n // 2, 4769, n):
        print(f"c = {c}", flush=True)
        results["runs"][f"c={c}"] = _fit_runs(
            {}, ["ours", "ours_randomized"], setup_near_n, c=c, **kw
        )
    exact_s = results["runs"]["exact_kpca"]["exact_kpca"].get("seconds", np.nan)
    results["ratios_over_exact_kpca"] = {
        f"{c}/{w}": r.get("seconds", np.nan) / exact_s
        for c, runs in results["runs"].items()
        if c != "exact_kpca"
        for w, r in runs.items()
    }
    print(
        "time / ExactKPCA:",
        {key: round(v, 3) for key, v in results["ratios_over_exact_kpca"].items()},
    )
    save_json(results, args.out)
    print("wrote", args.out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (20000 rows, 200 landmarks, 5000 transformed): seconds",
    )
    p.add_argument("--near-n", action="store_true", help="c close to n vs ExactKPCA (USPS-like)")
    p.add_argument("--n-samples", type=int, default=None, help="default 10^6 (quick: 20000)")
    p.add_argument("--n-features", type=int, default=100)
    p.add_argument("--n-landmarks", type=int, default=None, help="default 1000 (quick: 200)")
    p.add_argument("--n-components", type=int, default=10)
    p.add_argument("--n-transform", type=int, default=None, help="default 100000 (quick: 5000)")
    p.add_argument("--n-probe", type=int, default=2000, help="held-out rows for the error")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--skip-sklearn", action="store_true")
    p.add_argument("--skip-transform", action="store_true")
    p.add_argument(
        "--out", default=None, help="default benchmarks/results/bench_nystrom[_quick].json"
    )
    args = p.parse_args(argv)
    name = (
        "bench_nystrom_near_n"
        if args.near_n
        else ("bench_nystrom_quick" if args.quick else "bench_nystrom")
    )
    args.out = args.out or os.path.join(RESULTS, name + ".json")
    if args.near_n:
        return main_near_n(args)
    args.n_samples = args.n_samples or (20_000 if args.quick else 1_000_000)
    args.n_landmarks = args.n_landmarks or (200 if args.quick else 1000)
    args.n_transform = args.n_transform or (5_000 if args.quick else 100_000)

    n, d, c, k = args.n_samples, args.n_features, args.n_landmarks, args.n_components
    gamma = 1.0 / d
    n_t = min(args.n_transform, n)
    base = dict(n_samples=n, n_features=d, dtype=args.dtype)
    config = {**vars(args), "out": os.path.relpath(args.out, os.path.dirname(RESULTS) + "/..")}
    results = {
        "config": {
            **config,
            "gamma": gamma,
            "kernel": "rbf",
            "data": "make_random_noisy(random_state=0)",
        },
        "machine": machine_info(),
        "runs": {},
    }
    _, P = make_data(n, d, args.dtype, args.n_probe)
    error = ProbeError(P, gamma, k)
    methods = ["ours", "ours_exact", "ours_randomized"] + ([] if args.skip_sklearn else ["sklearn"])
    fits = _fit_runs(
        {}, methods, setup_fit, dict(**base, n_probe=args.n_probe), error, c=c, k=k, gamma=gamma
    )
    for which in methods:
        results["runs"][which] = {"fit": fits[which]}
        if args.skip_transform or which in ("ours_exact", "ours_randomized"):
            continue  # the three fastkpca fits share one transform
        tr = measure(
            setup_transform,
            work_transform,
            setup_kwargs=dict(
                **base, which=which, c=c, k=k, n_transform=n_t, n_train=min(n, 100_000)
            ),
        )
        _print(f"{which} transform ({n_t} rows)", tr)
        results["runs"][which]["transform"] = tr
    floors = {}
    for block_dtype in ("float64", "float32"):
        fl = measure(
            setup_floor,
            work_floor,
            setup_kwargs=dict(**base, c=c),
            work_kwargs=dict(block_dtype=block_dtype),
        )
        _print(f"floor ({block_dtype} rows)", fl)
        floors[block_dtype] = fl
    results["kernel_row_floor"] = floors
    ratios: dict = {}
    for which in methods:
        fit = results["runs"][which]["fit"]
        if not fit.get("ok"):
            continue
        for dt, fl in floors.items():
            if fl.get("ok"):
                ratios.setdefault("fit_over_floor", {})[f"{which}/{dt}"] = (
                    fit["seconds"] / fl["seconds"]
                )
    sk = results["runs"].get("sklearn", {})
    if sk.get("fit", {}).get("ok"):
        for which in ("ours", "ours_exact", "ours_randomized"):
            ours = results["runs"][which]
            for phase in ("fit", "transform"):
                if phase in ours and ours[phase].get("ok") and sk.get(phase, {}).get("ok"):
                    ratios[f"{which}/{phase}_time"] = ours[phase]["seconds"] / sk[phase]["seconds"]
                    ratios[f"{which}/{phase}_extra_memory"] = ours[phase]["extra_peak_mb"] / max(
                        sk[phase]["extra_peak_mb"], 1e-9
                    )
            if ours["fit"].get("ok"):
                ratios[f"{which}/probe_error"] = (
                    ours["fit"]["result"]["probe_error"] / sk["fit"]["result"]["probe_error"]
                )
        results["goals"] = {
            "fit_time_at_most_0.15": ratios.get("ours/fit_time", np.inf) <= 0.15,
            "fit_extra_memory_at_most_0.05": ratios.get("ours/fit_extra_memory", np.inf) <= 0.05,
            "probe_error_within_2_percent": ratios.get("ours/probe_error", np.inf) <= 1.02,
        }
    results["ratios_ours_over_sklearn"] = ratios
    print(
        "ratios:",
        {
            key: (round(v, 4) if isinstance(v, float) else {a: round(b, 3) for a, b in v.items()})
            for key, v in ratios.items()
        },
    )
    print("goals:", results.get("goals"))
    save_json(results, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
