"""Approximate KPCA slides (Sriperumbudur & Sterge): reconstruction error R against m = n^gamma.

"Approximate kernel PCA: computational vs statistical trade-off", slides "Reconstruction Error"
and "Result": random-feature KPCA (RF-KPCA, linear PCA on m random Fourier frequencies, i.e. 2m
cos / sin features) has the reconstruction error R of empirical KPCA, "no statistical loss",
once m = n^gamma with gamma >= 2 theta, where l = n^theta components are kept; the rates assume
eigenvalues lambda_i ~ i^-alpha, alpha > 1/2.  With l fixed, n^(2 theta) = l^2: the claim is
that about l^2 frequencies suffice, whatever n.

Measured here (``fastkpca.metrics.reconstruction_error``, the slides' R in L2(P), estimated on
held-out rows with a standard error):

- data: pendigits (all 10992 rows, features z-scored), cpu_act (8192 rows, z-scored) and, with
  ``--datasets mnist``, mnist (the first 20000 + 10000 rows of its two files, z-scored); a fixed
  held-out set (2000 rows, 1000 with ``--quick``) and training sets of n rows drawn from the rest;
- kernel: Gaussian, gamma = 1 / n_features (the scale of z-scored data);
- exact KPCA (``ExactKPCA``, top 20 components) at each n, and RF-KPCA (``RandomFeatureKPCA``
  with ``features="rff"``, the slides' random Fourier features, m frequencies = 2m features) for
  m = round(n^gamma), gamma in 0.25 ... 1 (2m capped at 4096), several feature seeds;
- R for l = 5, 10, 20 leading components, and the ratio R_RF / R_exact at the same n;
- the eigenvalue decay alpha: a least-squares fit of log lambda_i against log i (i = 2 ... 40)
  on exact KPCA's covariance eigenvalues at the largest n.

Nothing here is a timing measurement: the figures are errors.  ``fit_seconds`` in the JSON is
the in-process wall time of one fit, recorded for orientation only (the run need not hold the
benchmark lock, and the committed full run did not).

Usage::

    .venv/bin/python benchmarks/rfkpca_slides.py --quick  # ~1.5 min
    .venv/bin/python benchmarks/rfkpca_slides.py          # ~2-5 min (2 cores, shared)
    .venv/bin/python benchmarks/rfkpca_slides.py --datasets mnist  # n up to 16000, ~6 min

Results: ``benchmarks/results/rfkpca_slides[_quick].json`` (``rfkpca_slides_mnist.json`` for
``--datasets mnist``) and ``rfkpca_slides_<data>[_quick].png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "2")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, results_dir, save_json  # noqa: E402

from fastkpca import ExactKPCA, RandomFeatureKPCA  # noqa: E402
from fastkpca.datasets import load  # noqa: E402
from fastkpca.metrics import reconstruction_error  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(results_dir())
ELLS = (5, 10, 20)
MAX_OUTPUT_FEATURES = 4096


FULL_SIZES = {
    "pendigits": (1000, 2000, 4000, 8000),
    "cpu_act": (1000, 2000, 4000),
    "mnist": (2000, 4000, 8000, 16000),
}


def _data(name, seed=0):
    X, _ = load(name, max_rows=20000 if name == "mnist" else None)
    X = np.asarray(X, dtype=np.float64)
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    return X[np.random.default_rng(seed).permutation(len(X))]


def _r(model, held, ell):
    out = reconstruction_error(model, held, ell, batch_size=500, random_state=0)
    return out["estimate"], out["stderr"]


def decay_exponent(eigenvalues, lo=2, hi=40):
    """alpha in lambda_i ~ C i^-alpha, least squares on log-log over i = lo..hi (1-based)."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    i = np.arange(1, lam.size + 1)
    sel = (i >= lo) & (i <= hi) & (lam > 0)
    slope = np.polyfit(np.log(i[sel]), np.log(lam[sel]), 1)[0]
    return float(-slope)


def run_dataset(name, ns, gammas, n_held, seeds, log):
    X = _data(name)
    held, pool = X[:n_held], X[n_held:]
    gamma_k = 1.0 / X.shape[1]
    rows = []
    decay = None
    for n in ns:
        train = pool[:n]
        t0 = time.perf_counter()
        n_comp = 40 if n == max(ns) else max(ELLS)
        exact = ExactKPCA(n_comp, gamma=gamma_k).fit(train)
        t_exact = time.perf_counter() - t0
        if n == max(ns):
            lam = exact.eigenvalues_ / n
            decay = {"alpha": decay_exponent(lam), "eigenvalues": lam.tolist(), "n": n}
        r_exact = {ell: _r(exact, held, ell) for ell in ELLS}
        log(f"{name} n={n} exact {t_exact:.1f}s R10={r_exact[10][0]:.3g}+-{r_exact[10][1]:.1g}")
        rows.append(
            {
                "n": n,
                "method": "exact",
                "fit_seconds": t_exact,
                "R": {str(e): r_exact[e][0] for e in ELLS},
                "R_se": {str(e): r_exact[e][1] for e in ELLS},
            }
        )
        for g in gammas:
            m = int(round(n**g))
            if 2 * m > MAX_OUTPUT_FEATURES or m < max(ELLS) // 2:
                continue
            for seed in seeds:
                t0 = time.perf_counter()
                rf = RandomFeatureKPCA(
                    max(ELLS),
                    n_random_features=2 * m,
                    features="rff",
                    gamma=gamma_k,
                    random_state=seed,
                ).fit(train)
                t_rf = time.perf_counter() - t0
                r = {ell: _r(rf, held, ell) for ell in ELLS}
                rows.append(
                    {
                        "n": n,
                        "method": "rf",
                        "gamma": g,
                        "m": m,
                        "seed": seed,
                        "fit_seconds": t_rf,
                        "R": {str(e): r[e][0] for e in ELLS},
                        "R_se": {str(e): r[e][1] for e in ELLS},
                        "ratio": {str(e): r[e][0] / r_exact[e][0] for e in ELLS},
                    }
                )
            last = rows[-1]
            log(f"  gamma={g} m={m} {t_rf:.1f}s R10/exact={last['ratio']['10']:.3f}")
    return {"rows": rows, "decay": decay, "n_held": n_held, "kernel_gamma": gamma_k}


def summarize(res, ns, tols=(0.05, 0.10, 0.25)):
    """Per (n, l): the smallest m whose seed-mean R is within ``tol`` (relative) of exact's."""
    out = []
    for n in ns:
        rf = [r for r in res["rows"] if r["n"] == n and r["method"] == "rf"]
        for ell in ELLS:
            by_m = {}
            for r in rf:
                by_m.setdefault(r["m"], []).append(r["ratio"][str(ell)])
            row = {
                "n": n,
                "l": ell,
                "l_squared": ell**2,
                "slides_gamma_2theta": float(2 * np.log(ell) / np.log(n)),
                "ratio_by_m": {str(m): float(np.mean(v)) for m, v in sorted(by_m.items())},
            }
            for tol in tols:
                ok = [m for m in sorted(by_m) if np.mean(by_m[m]) <= 1 + tol]
                row[f"m_within_{tol}"] = ok[0] if ok else None
            # relative excess (R_RF - R_exact) / R_exact against m: its log-log slope, and the
            # constant c in excess ~ c l^2 / m (the slides' scale m ~ l^2, i.e. gamma = 2 theta)
            ms = np.array(sorted(by_m), dtype=float)
            excess = np.array([np.mean(by_m[m]) for m in sorted(by_m)]) - 1.0
            pos = excess > 0
            if pos.sum() >= 2:
                row["excess_slope"] = float(np.polyfit(np.log(ms[pos]), np.log(excess[pos]), 1)[0])
            row["c_l2"] = float(np.median(excess[pos] * ms[pos] / ell**2)) if pos.any() else None
            out.append(row)
    return out


def plot(name, res, ns, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(ns)))
    for ax, ell in zip(axes[:2], (5, 10), strict=True):
        for c, n in zip(colors, ns, strict=True):
            rf = [r for r in res["rows"] if r["n"] == n and r["method"] == "rf"]
            ex = [r for r in res["rows"] if r["n"] == n and r["method"] == "exact"][0]
            ms = sorted({r["m"] for r in rf})
            mean = [np.mean([r["R"][str(ell)] for r in rf if r["m"] == m]) for m in ms]
            ax.loglog(ms, mean, "o-", color=c, label=f"RF-KPCA n={n}")
            ax.axhline(ex["R"][str(ell)], color=c, ls="--", lw=1)
        ax.axvline(ell**2, color="red", ls=":", label="m = l^2 (slides: gamma = 2 theta)")
        ax.set_xlabel("m (random Fourier frequencies; 2m features)")
        ax.set_ylabel(f"R (held-out), l = {ell}")
        ax.set_title(f"{name}: R vs m, l = {ell} (dashed: exact KPCA)")
        ax.legend(fontsize=7)
    ax = axes[2]
    for c, n in zip(colors, ns, strict=True):
        rf = [r for r in res["rows"] if r["n"] == n and r["method"] == "rf"]
        gs = sorted({r["gamma"] for r in rf})
        ratio = [np.mean([r["ratio"]["10"] for r in rf if r["gamma"] == g]) for g in gs]
        ax.semilogy(gs, ratio, "o-", color=c, label=f"n={n}")
        ax.axvline(2 * np.log(10) / np.log(n), color=c, ls=":", lw=1)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xlabel("gamma (m = n^gamma)")
    ax.set_ylabel("R_RF / R_exact, l = 10")
    ax.set_title("ratio to exact (dotted: slides' gamma = 2 theta)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about 1.5 min")
    parser.add_argument(
        "--datasets",
        default="pendigits,cpu_act",
        help="comma-separated, from " + ", ".join(FULL_SIZES) + " (full run only)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        sets = {"pendigits": (500, 1000, 2000)}
        gammas = (0.5, 0.625, 0.75, 0.875, 1.0)
        n_held, seeds = 1000, (0, 1)
    else:
        names = args.datasets.split(",")
        unknown = sorted(set(names) - set(FULL_SIZES))
        if unknown:
            parser.error(f"unknown data sets {unknown}")
        sets = {name: FULL_SIZES[name] for name in names}
        gammas = (0.375, 0.5, 0.625, 0.75, 0.875, 1.0)
        n_held, seeds = 2000, (0, 1)
    suffix = "_quick" if args.quick else ""
    tag = "" if args.quick or args.datasets == "pendigits,cpu_act" else "_" + "_".join(sets)
    t0 = time.perf_counter()
    result = {
        "benchmark": "rfkpca_slides",
        "quick": args.quick,
        "machine": machine_info(),
        "ells": ELLS,
        "datasets": {},
    }
    for name, ns in sets.items():
        res = run_dataset(name, ns, gammas, n_held, seeds, lambda s: print(s, flush=True))
        res["summary"] = summarize(res, ns)
        result["datasets"][name] = res
        plot(name, res, ns, RESULTS / f"rfkpca_slides_{name}{suffix}.png")
        print(f"{name}: alpha = {res['decay']['alpha']:.2f}")
        for s in res["summary"]:
            print(f"  n={s['n']} l={s['l']} (l^2 = {s['l_squared']}): {s['ratio_by_m']}")
    result["seconds"] = time.perf_counter() - t0
    save_json(result, RESULTS / f"rfkpca_slides{tag}{suffix}.json")
    print(f"done in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
