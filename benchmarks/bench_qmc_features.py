"""Quasi-Monte Carlo random features (``features="qmc"``) against ``orf`` and ``rff`` on rows of
few columns, and ``RandomFeatureKPCA(tol=)`` with the default map before and after it.

Sets (5000 rows each, standardized, rbf with gamma = 1 / d, k = 5): two moons (d = 2), a swiss
roll and an S curve (d = 3), Gaussian blobs (d = 8), and for contrast two sets where
``features="auto"`` keeps ``orf``: pendigits (d = 16) and cpu_act (d = 21) when the data are
available.  For each map and m in 256, 1024, 4096 the true relative rank-k error of
``RandomFeatureKPCA(n_random_features=m, features=...)`` on all rows (``||Kc - T T^T||_F /
||Kc - (Kc)_k||_F``, 1 is exact KPCA), the mean over three seeds.  Then ``RandomFeatureKPCA(
n_random_features="auto", tol=tol)`` for tol in 0.05 and 0.01 with ``features="auto"`` (``qmc``
on these narrow rows) and ``features="orf"`` (the former default): the size chosen, the true
error and the fit's time (each fit in its own process, ``_harness.measure``).

    .venv/bin/python benchmarks/bench_qmc_features.py           # results/bench_qmc_features.json
    .venv/bin/python benchmarks/bench_qmc_features.py --quick    # 2000 rows, m up to 1024
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

DATA_HOME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
K = 5
MAPS = ("rff", "orf", "qmc")
SEEDS = (0, 1, 2)


def load(name: str, n: int) -> np.ndarray:
    """n standardized rows of a set (synthetic ones drawn with seed 0)."""
    from sklearn import datasets

    if name == "moons":
        X = datasets.make_moons(n, noise=0.05, random_state=0)[0]
    elif name == "swiss_roll":
        X = datasets.make_swiss_roll(n, noise=0.1, random_state=0)[0]
    elif name == "s_curve":
        X = datasets.make_s_curve(n, noise=0.05, random_state=0)[0]
    elif name == "blobs":
        X = datasets.make_blobs(n, n_features=8, centers=6, random_state=0)[0]
    else:
        from fastkpca.datasets import load as load_set

        X, _ = load_set(name, data_home=os.environ.get("FASTKPCA_DATA", DATA_HOME), max_rows=n)
        X = np.asarray(X[:n].toarray() if hasattr(X, "toarray") else X[:n], dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def true_error(X, model) -> float:
    from fastkpca.metrics import relative_rank_k_error

    return float(relative_rank_k_error(X, model.transform(X), model.kernel_))


def fit_by_tol(X, *, tol, features):
    """The measured work: a size by tol (its true error is computed by the parent, untimed)."""
    from fastkpca import RandomFeatureKPCA

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = RandomFeatureKPCA(
            K,
            gamma=1.0 / X.shape[1],
            n_random_features="auto",
            tol=tol,
            features=features,
            random_state=0,
        ).fit(X)
    return {
        "model": model,
        "warned": [str(w.message)[:120] for w in caught if issubclass(w.category, RuntimeWarning)],
    }


def run_set(name: str, n: int, sizes, log) -> dict:
    from fastkpca import RandomFeatureKPCA

    try:
        X = load(name, n)
    except (FileNotFoundError, OSError, ValueError) as err:
        log(f"{name}: skipped ({err})")
        return {"name": name, "skipped": str(err)}
    d = X.shape[1]
    out: dict = {"name": name, "n": X.shape[0], "d": d, "errors": {}, "tol": {}}
    log(f"{name}: {X.shape[0]} x {d}")
    for kind in MAPS:
        row = {}
        for m in sizes:
            errors = [
                true_error(
                    X,
                    RandomFeatureKPCA(
                        K, gamma=1.0 / d, n_random_features=m, features=kind, random_state=s
                    ).fit(X),
                )
                for s in SEEDS
            ]
            row[str(m)] = float(np.mean(errors))
        out["errors"][kind] = row
        log(f"  {kind}: " + ", ".join(f"m={m} {e:.4f}" for m, e in row.items()))
    for tol in (0.05, 0.01):
        for features in ("auto", "orf"):
            got = measure(
                load,
                fit_by_tol,
                setup_kwargs={"name": name, "n": n},
                work_kwargs={"tol": tol, "features": features},
            )
            if not got.get("ok"):
                out["tol"][f"{tol}/{features}"] = {"error": got.get("error")}
                continue
            model = got["result"]["model"]
            entry = {
                "kind": model.feature_map_.kind,
                "n_random_features": int(model.n_random_features_),
                "true_error": true_error(X, model),
                "seconds": round(got["seconds"], 3),
                "warned": got["result"]["warned"],
            }
            out["tol"][f"{tol}/{features}"] = entry
            log(
                f"  tol={tol} features={features}: {entry['kind']} "
                f"{entry['n_random_features']} true {entry['true_error']:.4f} "
                f"in {entry['seconds']:.2f} s" + (" (warned)" if entry["warned"] else "")
            )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2000 rows, m up to 1024")
    parser.add_argument(
        "--sets",
        nargs="+",
        default=["moons", "swiss_roll", "s_curve", "blobs", "pendigits", "cpu_act"],
    )
    args = parser.parse_args(argv)
    n = 2000 if args.quick else 5000
    sizes = (256, 1024) if args.quick else (256, 1024, 4096)
    results = {"machine": machine_info(), "k": K, "n": n, "seeds": list(SEEDS), "sets": []}
    for name in args.sets:
        results["sets"].append(run_set(name, n, sizes, lambda text: print(text, flush=True)))
    path = os.path.join(results_dir(), f"bench_qmc_features{'_quick' if args.quick else ''}.json")
    save_json(results, path)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
