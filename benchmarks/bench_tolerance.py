"""Size chosen by tolerance: true error and cost of ``tol=0.05`` fits against fixed sizes.

For each data set (pendigits, cpu_act; the first n rows, standardized) and each of
``NystromKPCA(n_landmarks="auto", tol=0.05)``, ``RandomFeatureKPCA(n_random_features="auto",
tol=0.05)`` and ``StreamingKPCA(tol=0.05)`` the script measures, each fit in its own process
(``_harness.measure``):

- the tol fit: the chosen size, the sizes tried with their probe estimates, the fit time;
- a fit at the chosen size given by hand (what a user who knew the size would pay);
- a fit at the default size (``n_landmarks`` / ``n_random_features`` None);

and for every fitted model the true relative rank-k error ``||Kc - T T^T||_F / ||Kc -
(Kc)_k||_F`` from one explicit centered n x n Gram per data set (the truth of
``fastkpca.metrics.relative_rank_k_error``).  The acceptance check is true error <= 1 + tol
= 1.05 for every tol fit.

    .venv/bin/python benchmarks/bench_tolerance.py            # n = 5000
    .venv/bin/python benchmarks/bench_tolerance.py --quick    # n = 3000

Writes ``benchmarks/results/bench_tolerance[_quick].json``.  The machine is shared: compare the
times within one run only.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

RESULTS = results_dir()
DATA_HOME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
K = 10
TOL = 0.05
SIZE_PARAM = {
    "NystromKPCA": "n_landmarks",
    "RandomFeatureKPCA": "n_random_features",
    "StreamingKPCA": "n_random_features",
}


def load_data(name, n):
    """The first n rows as float64, standardized (columns with zero spread left at 0)."""
    from fastkpca.datasets import load

    X, _ = load(name, data_home=os.environ.get("FASTKPCA_DATA", DATA_HOME))
    X = np.asarray(X[:n], dtype=np.float64)
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def fit(X, *, cls_name, params):
    """The timed work: fit, then hand back the embedding and the chosen sizes."""
    import fastkpca

    model = getattr(fastkpca, cls_name)(**params).fit(X)
    out = {
        "T": model.transform(X),
        "size_history": getattr(model, "size_history_", None),
        "n_landmarks_": getattr(model, "n_landmarks_", None),
        "n_output_features_": getattr(model, "n_output_features_", None),
    }
    sketch = getattr(model, "sketch_", None)
    if sketch is not None:
        out["sketch_size"] = int(sketch.sketch_size)
    return out


class Truth:
    """The centered Gram of X and its top-k eigenvalues: ``relative_rank_k_error`` of any T."""

    def __init__(self, X, kernel):
        from fastkpca.solvers import eigh_topk

        G = np.asarray(kernel(X), dtype=np.float64)
        G -= G.mean(axis=0)
        G -= G.mean(axis=1)[:, None]
        self.G = G
        fro2 = float(np.einsum("ij,ij->", G, G))
        vals, _ = eigh_topk(G.copy(), K, method="lanczos", rng=0)
        self.den2 = fro2 - float(np.sum(vals**2))

    def error(self, T):
        D = self.G - T @ T.T
        return float(np.sqrt(np.einsum("ij,ij->", D, D) / self.den2))


def size_of(result, cls_name):
    if cls_name == "NystromKPCA":
        return result["n_landmarks_"]
    return result["n_output_features_"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 3000")
    parser.add_argument("--datasets", nargs="*", default=["pendigits", "cpu_act"])
    args = parser.parse_args(argv)
    n = 3000 if args.quick else 5000

    from fastkpca.kernels import RBF

    rows = []
    for name in args.datasets:
        X = load_data(name, n)
        truth = Truth(X, RBF(1.0 / X.shape[1]))  # gamma=None: 1 / n_features, as every fit
        for cls_name, size_param in SIZE_PARAM.items():
            base = {"n_components": K, "random_state": 0}
            tol_params = {**base, "tol": TOL}
            if cls_name != "StreamingKPCA":
                tol_params[size_param] = "auto"
            runs = {
                "tol": measure(
                    load_data,
                    fit,
                    setup_kwargs={"name": name, "n": n},
                    work_kwargs={"cls_name": cls_name, "params": tol_params},
                )
            }
            if not runs["tol"]["ok"]:
                print(name, cls_name, "tol fit failed:", runs["tol"].get("error"))
                continue
            chosen = size_of(runs["tol"]["result"], cls_name)
            fixed = {**base, size_param: chosen}
            if cls_name == "StreamingKPCA":
                fixed["sketch_size"] = runs["tol"]["result"]["sketch_size"]
            for label, params in (("fixed_same_size", fixed), ("default_size", base)):
                runs[label] = measure(
                    load_data,
                    fit,
                    setup_kwargs={"name": name, "n": n},
                    work_kwargs={"cls_name": cls_name, "params": params},
                )
            row = {"data": name, "n": n, "method": cls_name, "tol": TOL}
            for label, run in runs.items():
                if not run["ok"]:
                    row[label] = {"error": run.get("error")}
                    continue
                res = run["result"]
                row[label] = {
                    "size": size_of(res, cls_name),
                    "sketch_size": res.get("sketch_size"),
                    "true_error": truth.error(res["T"]),
                    "seconds": run["seconds"],
                    "extra_peak_mb": run.get("extra_peak_mb"),
                }
                if res["size_history"] is not None:
                    row[label]["size_history"] = [list(h) for h in res["size_history"]]
            row["ok"] = row["tol"]["true_error"] <= 1 + TOL
            row["time_ratio_vs_fixed"] = row["tol"]["seconds"] / row["fixed_same_size"]["seconds"]
            rows.append(row)
            t, f, d = row["tol"], row["fixed_same_size"], row["default_size"]
            print(
                f"{name:10s} {cls_name:18s} size {t['size']:6d} true {t['true_error']:.4f} "
                f"({t['seconds']:.1f} s) | fixed {f['true_error']:.4f} ({f['seconds']:.1f} s) | "
                f"default size {d['size']} {d['true_error']:.4f} ({d['seconds']:.1f} s) "
                f"| history {t.get('size_history')}",
                flush=True,
            )
        del truth
    out = {
        "benchmark": "bench_tolerance",
        "quick": args.quick,
        "k": K,
        "tol": TOL,
        "machine": machine_info(),
        "all_within_1_plus_tol": all(r["ok"] for r in rows),
        "rows": rows,
    }
    path = os.path.join(RESULTS, f"bench_tolerance{'_quick' if args.quick else ''}.json")
    save_json(out, path)
    print("wrote", os.path.relpath(path))


if __name__ == "__main__":
    main()
