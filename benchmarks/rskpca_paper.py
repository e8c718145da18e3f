"""Reduced-set KPCA paper, section 6: ShDE + RSKPCA against subsampled KPCA and Nystrom.

Kingravi, Vela & Gray, "Reduced set KPCA", Figures 2-3 (german, pendigits): the shadow density
estimate with ell in [3, 5] against KPCA on a uniform subsample of the same size m, Nystrom
(uniform landmarks) and density-weighted Nystrom (k-means landmarks), all with m set by the
shadow method, rank r = 5, Gaussian kernel with the paper's sigma (german 30, pendigits 120;
gamma = 1 / (2 sigma^2)).  Measured, as in the paper:

- EMBEDDING ERROR: train on a random 80 %, embed the other 20 %; the reference is exact KPCA
  trained on all points, evaluated on the same 20 %; the approximate embedding O~ is aligned by
  least squares (``argmin_A ||O - O~ A||_F``) and the error is ``||O - O~ A||_F / ||O||_F``
  (``fastkpca.metrics.embedding_error(..., align="linear")``).
- EIGENVALUE ERROR: relative l2 error of the top-5 covariance eigenvalues (``eigenvalues_ / n``,
  so the 80 % and 100 % fits are comparable; the paper's "normalized" matrices).
- TRAIN / TEST SPEED-UP: exact KPCA's fit (transform) time on the same 80 % (20 %) divided by the
  method's, against two exact baselines timed in the same run: fastkpca's ``ExactKPCA`` (which
  uses a randomized block eigensolver above n = 1000) and scikit-learn's ``KernelPCA`` with the
  dense solver (a full eigendecomposition, closer to the paper's KPCA).  DATA RETAINED:
  m / n_train (what the model keeps for testing: the reduced set; the Nystrom models keep m
  landmarks too, see the notes below).
- 3-NN ACCURACY with 10-fold cross-validation (stratified, shuffled) of
  ``make_pipeline(method, KNeighborsClassifier(3))`` on all points: the embedding is refitted on
  each training fold (the paper's classification experiment, which it runs on usps and yale).
  Measured for exact KPCA and for shadow, subsampled KPCA, Nystrom and WNystrom at ell = 3, 4, 5
  (``--knn-ells``).
- The floor every method is measured against: exact KPCA trained on the same 80 % has a
  nonzero embedding / eigenvalue error against the 100 % reference (dashed lines in the plots).

Also in the same run: the other reduced-set densities of the paper's Figures 7-8 (``kmeans``,
``paring``, ``herding``) at the same m, the shadow estimate with the paper's centre choice
(``center="first"``), and scikit-learn's ``KernelPCA`` (exact) and ``Nystroem`` + ``PCA``.

Choices the paper leaves open, made here:
- pendigits: the paper uses 3500 points (n_t = 2800); here a fixed random 3500 of the 10992 rows
  of ``pendigits.tra`` + ``.tes`` (seed 0).  german: all 1000 rows.  Features as published
  (no scaling: the paper's sigma values are on that scale).
- ell = 3.0, 3.5, ..., 5.0 and 3 random splits per data set (the paper: steps of 0.1, 50 runs;
  ``--ell-step 0.1 --runs 50`` does that, in some hours).  m for the other methods is the
  shadow method's m on the same split (the paper: the mean m over runs).  For the k-NN folds
  (90 % of the data) the fixed-m methods get the shadow's mean m scaled by 0.9 / 0.8.
- Nystrom = ``fastkpca.NystromKPCA(landmarks="uniform")``, WNystrom =
  ``NystromKPCA(landmarks="kmeans")`` (k-means landmarks, covariance over all training rows);
  their transform needs only the landmarks, so their test cost is O(m) too (the paper's
  Nystrom keeps the data: test cost O(n)).
- Each (data set, method, ell) configuration runs in its own fresh process
  (``benchmarks/_harness.measure``), looping over the splits; fit and transform are timed
  inside with ``time.perf_counter`` (fit once, transform best of 3), BLAS single-threaded.

Usage (the run holds well under 1 GB, but timings are cleaner under the machine-wide lock)::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/rskpca_paper.py           # ~10 min
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/rskpca_paper.py --quick   # ~3 min

Results: ``benchmarks/results/rskpca_paper[_quick].json`` and
``rskpca_paper_<data>[_quick].png`` (Figures 2-3) and ``rskpca_paper_<data>_rsde[_quick].png``
(Figures 7-8 with embedding errors instead of usps / yale classification).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _set_threads(argv):
    """Fix BLAS threads before numpy is imported (children inherit the environment)."""
    threads = "1"
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            threads = argv[i + 1]
        elif a.startswith("--threads="):
            threads = a.split("=", 1)[1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)


if __name__ == "__main__":
    _set_threads(sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, measure, save_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

#: data set -> (sigma, number of points used); the paper's Table 1.
DATA = {"german": (30.0, None), "pendigits": (120.0, 3500)}
RANK = 5
TRAIN_FRACTION = 0.8
#: Methods whose 3-NN cross-validated accuracy is measured (at the ells of --knn-ells).
KNN_METHODS = ("shadow", "uniform", "nystrom", "wnystrom")

#: The comparison of Figures 2-3, then the other RSDEs of Figures 7-8, then scikit-learn.
METHODS = (
    "shadow",
    "uniform",
    "nystrom",
    "wnystrom",
    "shadow_first",
    "kmeans",
    "paring",
    "herding",
    "sk_nystroem",
)
LABELS = {
    "shadow": "ShDE+RSKPCA (centroid)",
    "shadow_first": "ShDE+RSKPCA (first point, paper)",
    "uniform": "subsampled KPCA",
    "nystrom": "Nystrom",
    "wnystrom": "WNystrom (k-means)",
    "kmeans": "RSKPCA k-means",
    "paring": "RSKPCA paring",
    "herding": "RSKPCA herding",
    "sk_nystroem": "sklearn Nystroem+PCA",
    "exact": "exact KPCA (fastkpca)",
    "sk_kernelpca": "sklearn KernelPCA",
}


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def load_data(name, data_home=None):
    """(X, y, gamma) with the paper's sigma; pendigits subsampled to the paper's 3500 points."""
    from fastkpca.datasets import load

    X, y = load(name, data_home=data_home)
    sigma, n_keep = DATA[name]
    if n_keep is not None and X.shape[0] > n_keep:
        keep = np.sort(np.random.default_rng(0).choice(X.shape[0], n_keep, replace=False))
        X, y = X[keep], y[keep]
    return X, y, 1.0 / (2.0 * sigma**2)


def splits(n, runs):
    """The random 80 / 20 splits, one seed per run (the same in every child)."""
    out = []
    for r in range(runs):
        perm = np.random.default_rng(1000 + r).permutation(n)
        cut = int(round(TRAIN_FRACTION * n))
        out.append((perm[:cut], perm[cut:]))  # unsorted: the shadow pass sees a random order
    return out


# ------------------------------------------------------------------------------------------------
# methods
# ------------------------------------------------------------------------------------------------
def make_model(method, gamma, ell=None, m=None, seed=0):
    from sklearn.decomposition import PCA, KernelPCA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    from fastkpca import ExactKPCA, NystromKPCA, ReducedSetKPCA

    if method == "exact":
        return ExactKPCA(RANK, gamma=gamma)
    if method == "sk_kernelpca":
        return KernelPCA(RANK, kernel="rbf", gamma=gamma, eigen_solver="dense")
    if method == "shadow":
        return ReducedSetKPCA(RANK, gamma=gamma, ell=ell, center="centroid")
    if method == "shadow_first":
        return ReducedSetKPCA(RANK, gamma=gamma, ell=ell, center="first")
    if method in ("uniform", "kmeans", "paring", "herding"):
        return ReducedSetKPCA(RANK, gamma=gamma, density=method, n_centers=m, random_state=seed)
    if method == "nystrom":
        return NystromKPCA(RANK, gamma=gamma, n_landmarks=m, landmarks="uniform", random_state=seed)
    if method == "wnystrom":
        return NystromKPCA(RANK, gamma=gamma, n_landmarks=m, landmarks="kmeans", random_state=seed)
    if method == "sk_nystroem":
        return make_pipeline(
            Nystroem(gamma=gamma, n_components=m, random_state=seed), PCA(RANK, random_state=seed)
        )
    raise ValueError(method)


def eigenvalues(method, model, n_train):
    """Top covariance eigenvalues (eigenvalues of the centered training Gram / n_train)."""
    if method == "sk_nystroem":
        return model[-1].explained_variance_ * (n_train - 1) / n_train
    return np.asarray(model.eigenvalues_) / n_train


def n_retained(method, model, n_train):
    """Rows the fitted model keeps for transform."""
    if method in ("exact", "sk_kernelpca"):
        return n_train
    if method == "sk_nystroem":
        return model[0].components_.shape[0]
    if method in ("nystrom", "wnystrom"):
        return model.landmarks_.shape[0]
    return model.n_centers_


def setup_child(name, data_home):
    """Not timed: load the data and warm up imports and first calls."""
    X, y, gamma = load_data(name, data_home)
    make_model("shadow", gamma, ell=3.0).fit(X[:64]).transform(X[:8])
    return X, y, gamma


def run_config(data, method, ell, ms, runs, knn):
    """Work of one child: every split for one (method, ell); timings inside, per split."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    X, y, gamma = data
    # warm-up (first-call initialisation of this method's code paths is not timed)
    m_warm = None if ms is None else min(20, ms[0])
    make_model(method, gamma, ell=ell, m=m_warm).fit(X[:100]).transform(X[:10])
    out = []
    for r, (train, test) in enumerate(splits(X.shape[0], runs)):
        m = None if ms is None else ms[r]
        model = make_model(method, gamma, ell=ell, m=m, seed=r)
        t0 = time.perf_counter()
        model.fit(X[train])
        fit_s = time.perf_counter() - t0
        test_s = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            emb = model.transform(X[test])
            test_s = min(test_s, time.perf_counter() - t0)
        out.append(
            {
                "fit_s": fit_s,
                "transform_s": test_s,
                "retained": n_retained(method, model, len(train)),
                "eigenvalues": eigenvalues(method, model, len(train)),
                "embedding": emb,
            }
        )
    if knn:
        # m for the folds (90 % of the data): the shadow method finds its own; the others use
        # the mean m of the shadow fits scaled to the fold size.
        m_cv = None if ms is None else int(round(np.mean(ms) * 0.9 / TRAIN_FRACTION))
        pipe = make_pipeline(
            make_model(method, gamma, ell=ell, m=m_cv, seed=0), KNeighborsClassifier(3)
        )
        cv = StratifiedKFold(10, shuffle=True, random_state=0)
        out[0]["knn_accuracy"] = float(np.mean(cross_val_score(pipe, X, y, cv=cv)))
    return out


# ------------------------------------------------------------------------------------------------
# the experiment
# ------------------------------------------------------------------------------------------------
def run_dataset(name, ells, runs, data_home, knn_ells, log):
    from fastkpca import ExactKPCA
    from fastkpca.metrics import eigenvalue_error, embedding_error

    X, y, gamma = load_data(name, data_home)
    n = X.shape[0]
    # the reference: exact KPCA on every point, its embedding of each split's test rows
    ref_model = ExactKPCA(RANK, gamma=gamma).fit(X)
    ref_eigs = ref_model.eigenvalues_ / n
    ref_emb = ref_model.transform(X)
    sp = splits(n, runs)
    kw = dict(setup_kwargs={"name": name, "data_home": data_home})

    def child(method, ell=None, ms=None, do_knn=False):
        res = measure(
            setup_child,
            run_config,
            work_kwargs={"method": method, "ell": ell, "ms": ms, "runs": runs, "knn": do_knn},
            **kw,
        )
        if not res.get("ok"):
            raise RuntimeError(
                f"{name} {method} ell={ell}: {res.get('error')}\n{res.get('traceback', '')}"
            )
        per_run = res["result"]
        summary = {
            "fit_s": [p["fit_s"] for p in per_run],
            "transform_s": [p["transform_s"] for p in per_run],
            "retained": [p["retained"] for p in per_run],
            "embedding_error": [
                embedding_error(p["embedding"], ref_emb[test], align="linear")
                for p, (_, test) in zip(per_run, sp, strict=True)
            ],
            "eigenvalue_error": [eigenvalue_error(p["eigenvalues"], ref_eigs) for p in per_run],
            "peak_mb": res["peak_mb"],
        }
        if "knn_accuracy" in per_run[0]:
            summary["knn_accuracy"] = per_run[0]["knn_accuracy"]
        return summary

    t0 = time.perf_counter()
    baselines = {
        "exact": child("exact", do_knn=bool(knn_ells)),
        "sk_kernelpca": child("sk_kernelpca"),
    }
    log(
        f"{name}: n = {n}, gamma = {gamma:.3g}; exact fit "
        f"{np.median(baselines['exact']['fit_s']):.3f} s, sklearn KernelPCA fit "
        f"{np.median(baselines['sk_kernelpca']['fit_s']):.3f} s"
    )
    exact_fit = np.array(baselines["exact"]["fit_s"])
    exact_test = np.array(baselines["exact"]["transform_s"])
    sk_fit = np.array(baselines["sk_kernelpca"]["fit_s"])
    sk_test = np.array(baselines["sk_kernelpca"]["transform_s"])
    by_ell = {}
    for ell in ells:
        rows = {}
        rows["shadow"] = child("shadow", ell, do_knn=ell in knn_ells)
        ms = [int(m) for m in rows["shadow"]["retained"]]
        for method in METHODS[1:]:
            rows[method] = child(
                method,
                ell,
                None if method == "shadow_first" else ms,
                do_knn=method in KNN_METHODS and ell in knn_ells,
            )
        for row in rows.values():
            row["train_speedup"] = list(exact_fit / np.array(row["fit_s"]))
            row["test_speedup"] = list(exact_test / np.array(row["transform_s"]))
            row["train_speedup_vs_sklearn"] = list(sk_fit / np.array(row["fit_s"]))
            row["test_speedup_vs_sklearn"] = list(sk_test / np.array(row["transform_s"]))
            row["data_retained"] = list(np.array(row["retained"]) / len(sp[0][0]))
        by_ell[str(ell)] = rows
        log(
            f"  ell = {ell}: m = {np.mean(ms):.0f} ({np.mean(ms) / len(sp[0][0]):.1%}); "
            + ", ".join(f"{k} {np.mean(v['embedding_error']):.4f}" for k, v in rows.items())
            + f"  [{time.perf_counter() - t0:.0f} s]"
        )
    return {
        "n": n,
        "n_train": len(sp[0][0]),
        "gamma": gamma,
        "sigma": DATA[name][0],
        "reference_eigenvalues": list(ref_eigs),
        "baselines": baselines,
        "by_ell": by_ell,
    }


def summarize(result):
    """Means over the splits, per data set, ell and method (what the plots show)."""
    table = {}
    for name, res in result["datasets"].items():
        table[name] = {}
        for ell, rows in res["by_ell"].items():
            table[name][ell] = {
                method: {
                    key: float(np.mean(row[key]))
                    for key in (
                        "embedding_error",
                        "eigenvalue_error",
                        "train_speedup",
                        "test_speedup",
                        "train_speedup_vs_sklearn",
                        "test_speedup_vs_sklearn",
                        "data_retained",
                    )
                }
                | ({"knn_accuracy": row["knn_accuracy"]} if "knn_accuracy" in row else {})
                for method, row in rows.items()
            }
        b = res["baselines"]
        table[name]["exact"] = {
            "embedding_error": float(np.mean(b["exact"]["embedding_error"])),
            "eigenvalue_error": float(np.mean(b["exact"]["eigenvalue_error"])),
            "fit_s": float(np.median(b["exact"]["fit_s"])),
            "transform_s": float(np.median(b["exact"]["transform_s"])),
            "knn_accuracy": b["exact"].get("knn_accuracy"),
            "sklearn_kernelpca_fit_s": float(np.median(b["sk_kernelpca"]["fit_s"])),
        }
    return table


def plot(result, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("embedding_error", "eigen-embedding error"),
        ("eigenvalue_error", "eigenvalue error"),
        ("data_retained", "data retained (m / n_train)"),
        ("knn_accuracy", "3-NN accuracy (10-fold CV)"),
        ("train_speedup", "train speed-up vs fastkpca ExactKPCA"),
        ("test_speedup", "test speed-up vs fastkpca ExactKPCA"),
        ("train_speedup_vs_sklearn", "train speed-up vs sklearn KernelPCA"),
        ("test_speedup_vs_sklearn", "test speed-up vs sklearn KernelPCA"),
    ]
    groups = {
        "": ("shadow", "uniform", "nystrom", "wnystrom", "shadow_first"),
        "_rsde": ("shadow", "kmeans", "paring", "herding", "uniform"),
    }
    for name, res in result["datasets"].items():
        for tag, methods in groups.items():
            fig, axes = plt.subplots(2, 4, figsize=(18, 8))
            for ax, (key, title) in zip(axes.ravel(), panels, strict=True):
                for method in methods:
                    pts = [
                        (float(e), rows[method][key])
                        for e, rows in res["by_ell"].items()
                        if key in rows[method]
                    ]
                    if not pts:
                        continue
                    x = [p[0] for p in pts]
                    vals = [np.mean(p[1]) for p in pts]
                    err = [np.std(p[1]) if np.ndim(p[1]) else 0.0 for p in pts]
                    ax.errorbar(
                        x, vals, yerr=err, marker="o", ms=3, capsize=2, label=LABELS[method]
                    )
                exact = res["baselines"]["exact"]
                if (
                    key in ("embedding_error", "eigenvalue_error", "knn_accuracy")
                    and exact.get(key) is not None
                ):
                    # the floor: exact KPCA trained on the same 80 % (or, for k-NN, each fold)
                    ax.axhline(
                        np.mean(exact[key]),
                        color="k",
                        ls="--",
                        label=LABELS["exact"] + " (same training rows)",
                    )
                if key in ("embedding_error", "eigenvalue_error") or "speedup" in key:
                    ax.set_yscale("log")
                ax.set_title(title, fontsize=10)
                ax.set_xlabel("ell")
            axes[0, 0].legend(fontsize=7)
            if axes[0, 3].get_legend_handles_labels()[0]:
                axes[0, 3].legend(fontsize=7)
            fig.suptitle(
                f"Reduced-set KPCA, {name} (n_t = {res['n_train']}, sigma = "
                f"{res['sigma']:g}, r = {RANK}; mean +- sd over splits)"
            )
            fig.tight_layout()
            fig.savefig(RESULTS / f"rskpca_paper_{name}{tag}{suffix}.png", dpi=110)
            plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="ell in {3, 4, 5}, 2 splits, no k-NN (about 2 minutes)"
    )
    parser.add_argument("--runs", type=int, default=None, help="random splits (default 3)")
    parser.add_argument(
        "--knn-ells",
        type=float,
        nargs="*",
        default=[3.0, 4.0, 5.0],
        help="ells at which the 3-NN accuracy is measured (none: skip)",
    )
    parser.add_argument("--ell-step", type=float, default=0.5)
    parser.add_argument("--datasets", nargs="+", default=list(DATA), choices=list(DATA))
    parser.add_argument("--no-knn", action="store_true", help="skip the 3-NN cross-validation")
    parser.add_argument("--data-home", default=None)
    parser.add_argument("--threads", default="1", help="BLAS threads (set before numpy loads)")
    args = parser.parse_args(argv)

    quick = args.quick
    step = 1.0 if quick else args.ell_step
    ells = [round(e, 3) for e in np.arange(3.0, 5.0 + 1e-9, step)]
    runs = args.runs or (2 if quick else 3)
    knn_ells = [] if (args.no_knn or quick) else [e for e in ells if e in args.knn_ells]
    suffix = "_quick" if quick else ""

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    result = {
        "paper": "Kingravi, Vela & Gray, Reduced set KPCA (section 6, Figures 2-3, 7-8)",
        "command": "benchmarks/rskpca_paper.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "rank": RANK,
        "ells": ells,
        "runs": runs,
        "labels": LABELS,
        "datasets": {},
    }
    for name in args.datasets:
        result["datasets"][name] = run_dataset(name, ells, runs, args.data_home, knn_ells, log)
    result["summary"] = summarize(result)
    result["total_seconds"] = time.perf_counter() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    save_json(result, RESULTS / f"rskpca_paper{suffix}.json")
    plot(result, suffix)
    log(f"done in {result['total_seconds']:.0f} s -> {RESULTS}/rskpca_paper{suffix}.json")


if __name__ == "__main__":
    main()
