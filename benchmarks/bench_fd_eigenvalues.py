"""StreamingKPCA's eigenvalues against the exact ones: bounds, the estimate, the former estimate.

For each data set and sketch size, the top-5 eigenvalues reported by ``StreamingKPCA`` are
compared with the exact eigenvalues of the centered covariance of the same random features
(what ``RandomFeatureKPCA`` with the same seed computes, here by ``eigvalsh`` of the m x m
matrix).  Reported per case, as relative errors ``|est / true - 1|`` (max and mean over the 5):

``lower``
    eig(R^T R - s s^T / n): the uncompensated sketch (the paper's SKPCA), the lower bound.
``old``
    eig(R^T R + delta P_R - s s^T / n): the former estimate (delta, the total shrinkage, added on
    the sketch's whole row span; compensative FD, Desai et al. 2016).
``new``
    ``eigenvalues_``: the tracked-loss estimate (:meth:`fastkpca.sketch.FrequentDirections.
    loss_model`), clipped to the bounds.
``upper``
    lower + min(delta, missing energy): the upper bound.
``width``
    max (upper - lower) / true.

Data: ``flat`` (isotropic Gaussian, d = 400, wide kernel gamma = 1e-4: slowly decaying spectrum),
``randomnoisy`` (the issue's case: RandomNoisy n = 6000, d = 100, 50-dim signal, median gamma:
a flat top of ~50 eigenvalues), ``decaying`` (RandomNoisy d = 20 with a 5-dim signal, gamma =
1/40: five large eigenvalues, then a drop), and ``cpu_act`` (standardised, median gamma: a real
set with a decaying spectrum).  Random Fourier features, m = 400 / 500, seed 0.

No timings (the estimate costs O(ell^2 m) once per fit, next to the O(n m ell) sketch)::

    .venv/bin/python benchmarks/bench_fd_eigenvalues.py            # ~2 min
    .venv/bin/python benchmarks/bench_fd_eigenvalues.py --quick    # fewer sizes, n = 3000

Writes ``benchmarks/results/bench_fd_eigenvalues[_quick].json``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, results_dir, save_json  # noqa: E402

K = 5


def datasets(quick: bool, data_home=None):
    """name -> (X, gamma, n_features)."""
    from fastkpca.datasets import load, make_random_noisy
    from fastkpca.kernels import resolve_gamma

    n = 3000 if quick else 6000
    out = {}
    out["flat"] = (np.random.default_rng(0).standard_normal((n, 400)), 1e-4, 400)
    X = make_random_noisy(n, 100, random_state=0)
    out["randomnoisy"] = (X, resolve_gamma("median", X, rng=0), 500)
    out["decaying"] = (make_random_noisy(n, 20, signal_dim=5, random_state=0), 1 / 40, 500)
    try:
        X, _ = load("cpu_act", data_home=data_home)
        X = X[:n] if quick else X
        sd = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        out["cpu_act"] = (X, resolve_gamma("median", X, rng=0), 500)
    except FileNotFoundError as exc:  # the real set is optional
        print(f"cpu_act skipped: {exc}")
    return out


def old_compensated(model, k):
    """Top eigenvalues of ``R^T R + delta P_R - s s^T / n`` (the former estimate)."""
    R = model.sketch_.rows()
    R = R[np.any(R != 0, axis=1)]
    s, n = model.feature_sum_, model.n_samples_seen_
    _, sv, Vt = np.linalg.svd(R, full_matrices=False)
    V = Vt[sv > sv[0] * 1e-10]
    op = R.T @ R + model.sketch_.total_shrinkage * V.T @ V - np.outer(s, s) / n
    return np.maximum(np.linalg.eigvalsh(op)[::-1][:k], 0)


def run_case(X, gamma, m, ell):
    from fastkpca.decomposition.streaming import StreamingKPCA

    model = StreamingKPCA(
        K, gamma=gamma, n_random_features=m, sketch_size=ell, features="rff", random_state=0
    ).fit(X)
    Z = model.feature_map_(X)
    Zc = Z - Z.mean(axis=0)
    truth = np.linalg.eigvalsh(Zc.T @ Zc)[::-1][:K]
    lower, upper = model.eigenvalue_bounds_
    ests = {
        "lower": lower,
        "old": old_compensated(model, K),
        "new": model.eigenvalues_,
        "upper": upper,
    }
    row = {
        "sketch_size": ell,
        "buffer_rows_per_sketch": int(model.sketch_._buffer.shape[0]),
        "true": truth.tolist(),
        "delta_over_lambda1": model.sketch_.total_shrinkage / truth[0],
        "width": float(np.max((upper - lower) / truth)),
        "bounds_hold": bool(
            np.all(lower <= truth * (1 + 1e-9)) and np.all(truth <= upper * (1 + 1e-9))
        ),
    }
    for name, est in ests.items():
        err = np.abs(est / truth - 1)
        row[name] = est.tolist()
        row[f"{name}_max_err"] = float(err.max())
        row[f"{name}_mean_err"] = float(err.mean())
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 3000, sketch sizes 10, 20, 50")
    parser.add_argument("--data-home", default=None)
    args = parser.parse_args()
    sizes = [10, 20, 50] if args.quick else [5, 10, 20, 50, 100]
    results = {"machine": machine_info(), "k": K, "quick": args.quick, "cases": {}}
    header = (
        f"{'data':12s} {'ell':>4s} {'delta/l1':>8s} | max rel. error: {'lower':>6s} "
        f"{'old':>6s} {'new':>6s} {'upper':>6s} | {'width':>6s} bounds"
    )
    print(header)
    for name, (X, gamma, m) in datasets(args.quick, args.data_home).items():
        rows = []
        for ell in sizes:
            r = run_case(X, gamma, m, ell)
            rows.append(r)
            print(
                f"{name:12s} {ell:4d} {r['delta_over_lambda1']:8.3f} | {'':15s} "
                f"{r['lower_max_err']:6.3f} {r['old_max_err']:6.3f} {r['new_max_err']:6.3f} "
                f"{r['upper_max_err']:6.3f} | {r['width']:6.3f} "
                f"{'hold' if r['bounds_hold'] else 'VIOLATED'}"
            )
        results["cases"][name] = {"n": X.shape[0], "d": X.shape[1], "m": m, "gamma": gamma}
        results["cases"][name]["rows"] = rows
    suffix = "_quick" if args.quick else ""
    path = os.path.join(results_dir(), f"bench_fd_eigenvalues{suffix}.json")
    save_json(results, path)
    print(f"wrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
