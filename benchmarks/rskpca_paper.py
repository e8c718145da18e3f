"""Reduced-set KPCA paper, section 6: ShDE + RSKPCA against subsampled KPCA and Nystrom.

Kingravi, Vela & Gray, "Reduced set KPCA".  Two experiments, as in the paper.

1. EIGEN-EMBEDDING (Figures 2-3, german and pendigits): the shadow density estimate with ell in
   [3, 5] against KPCA on a uniform subsample of the same size m, Nystrom (uniform landmarks) and
   density-weighted Nystrom (WNystrom, Zhang & Kwok 2009), all with m set by the shadow method,
   rank r = 5, Gaussian kernel with the paper's sigma (german 30, pendigits 120;
   gamma = 1 / (2 sigma^2)).  Measured, as in the paper:

   - EMBEDDING ERROR: train on a random 80 %, embed the other 20 %; the reference is exact KPCA
     trained on all points, evaluated on the same 20 %; the approximate embedding O~ is aligned
     by least squares (``argmin_A ||O - O~ A||_F``) and the error is ``||O - O~ A||_F / ||O||_F``
     (``fastkpca.metrics.embedding_error(..., align="linear")``).
   - EIGENVALUE ERROR: relative l2 error of the top-5 covariance eigenvalues (``eigenvalues_ /
     n``, so the 80 % and 100 % fits are comparable; the paper's "normalized" matrices).
   - TRAIN / TEST SPEED-UP: exact KPCA's fit (transform) time on the same 80 % (20 %) divided by
     the method's, against two exact baselines timed in the same run: fastkpca's ``ExactKPCA``
     (a randomized block eigensolver above n = 1000) and scikit-learn's ``KernelPCA`` with the
     dense solver (a full eigendecomposition, closer to the paper's KPCA).  DATA RETAINED:
     m / n_train (what the model keeps for testing).
   - The floor every method is measured against: exact KPCA trained on the same 80 % has a
     nonzero embedding / eigenvalue error against the 100 % reference (dashed lines).

   Also in the same run: the other reduced-set densities of the paper's Figures 7-8
   (``kmeans``, ``paring``, ``herding``) at the same m, the shadow estimate with the paper's
   centre choice (``center="first"``), Nystrom with k-means landmarks but the data covariance
   (unweighted), and scikit-learn's ``KernelPCA`` (exact) and ``Nystroem`` + ``PCA``.

2. CLASSIFICATION (Figures 4-5, which the paper runs on usps and yale; here pendigits and
   mnist): a 3-NN classifier on the r-dimensional embedding, stratified shuffled 10-fold
   cross-validation; per fold the training time is ``fit_transform`` of the training fold (the
   embedding the classifier is trained on, as the paper counts it), the testing time
   ``transform`` of the test fold; speed-ups are exact KPCA's (``ExactKPCA``) times on the same
   fold divided by the method's; data retained is m / n_train.  The k-NN fit / predict times
   are stored apart (the same for every method).  Methods: exact KPCA, shadow, subsampled KPCA,
   Nystrom and WNystrom, the fixed-m methods at the shadow's mean m over the folds.

   - pendigits: sigma = 120, r = 5, the same 3500 random rows as experiment 1;
     ell = 3, 3.5, ..., 5.
   - mnist: r = 15 (the paper's usps value), a random 5000 of the 70000 rows (seed 0), pixels
     0-255 as published, sigma = 3 x the median pairwise distance (7815 on this subsample).  The
     paper chose sigma by cross-validation; the scan stored in the JSON (``sigma_scan``: exact
     KPCA + 3-NN, 5-fold, 3000 rows, sigma = 0.5 ... 3 x the median distance) shows accuracy
     flat within 0.3 points from 1 x upwards, and 3 x is where the shadow set is smallest.  At
     the median heuristic itself (1 x) the shadow keeps 91-98 % of the rows at ell = 3-5, so
     RSKPCA could not be faster than exact KPCA there.  ell = 3, 4, 5; WNystrom only up to
     ell = 4 (its k-means at ell = 5, m = 1819, took 53 s per fold).

Choices the paper leaves open, made here:
- pendigits: the paper uses 3500 points (n_t = 2800); here a fixed random 3500 of the 10992 rows
  of ``pendigits.tra`` + ``.tes`` (seed 0).  german: all 1000 rows.  Features as published
  (no scaling: the paper's sigma values are on that scale).
- ell = 3.0, 3.5, ..., 5.0 and 3 random splits per data set (the paper: steps of 0.1, 50 runs;
  ``--ell-step 0.1 --runs 50`` does that, in some hours).  m for the other methods is the
  shadow method's m on the same split (the paper: the mean m over runs).
- Nystrom = ``fastkpca.NystromKPCA(landmarks="uniform")``; WNystrom =
  ``NystromKPCA(landmarks="kmeans", covariance="landmarks")``: k-means centres and the
  eigenproblem of the cluster-size-weighted landmark measure, Zhang & Kwok's
  ``S^{1/2} W S^{1/2}`` (with the default ``covariance="data"`` the weights cancel and the model
  is plain Nystrom on k-means landmarks, the curve "Nystrom, k-means landmarks").  fastkpca's
  Nystrom transform needs only the landmarks, so its test cost is O(m) too (the paper's
  Nystrom keeps the data: test cost O(n)).
- Each (data set, method, ell) configuration runs in its own fresh process
  (``benchmarks/_harness.measure``), looping over the splits / folds; fit and transform are
  timed inside with ``time.perf_counter`` (transform best of 3), BLAS single-threaded.

Usage (the run holds well under 1 GB; timings are cleaner under the machine-wide lock)::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/rskpca_paper.py           # 23 min
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/rskpca_paper.py --quick   # 4 min

``--quick``: ell = 3 and 5 (classification: 4 and 5), 2 splits, 5 folds, a third of the
classification rows, no sigma scan.

Results: ``benchmarks/results/rskpca_paper[_quick].json``, ``rskpca_paper_<data>[_quick].png``
(Figures 2-3), ``rskpca_paper_<data>_rsde[_quick].png`` (Figures 7-8, with embedding errors
instead of usps / yale classification) and ``rskpca_paper_<data>_knn[_quick].png`` (Figures
4-5 on pendigits and mnist).
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
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(results_dir())

#: data set -> (sigma, number of points used); the paper's Table 1.
DATA = {"german": (30.0, None), "pendigits": (120.0, 3500)}
RANK = 5
TRAIN_FRACTION = 0.8

#: The comparison of Figures 2-3, then the other RSDEs of Figures 7-8, then scikit-learn.
METHODS = (
    "shadow",
    "uniform",
    "nystrom",
    "wnystrom",
    "kmeans_nystrom",
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
    "wnystrom": "WNystrom (Zhang & Kwok)",
    "kmeans_nystrom": "Nystrom, k-means landmarks (unweighted)",
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
def make_model(method, gamma, ell=None, m=None, seed=0, rank=RANK):
    """The estimator of ``method`` (a key of LABELS) with ``rank`` components."""
    from sklearn.decomposition import PCA, KernelPCA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    from fastkpca import ExactKPCA, NystromKPCA, ReducedSetKPCA

    if method == "exact":
        return ExactKPCA(rank, gamma=gamma)
    if method == "sk_kernelpca":
        return KernelPCA(rank, kernel="rbf", gamma=gamma, eigen_solver="dense")
    if method == "shadow":
        return ReducedSetKPCA(rank, gamma=gamma, ell=ell, center="centroid")
    if method == "shadow_first":
        return ReducedSetKPCA(rank, gamma=gamma, ell=ell, center="first")
    if method in ("uniform", "kmeans", "paring", "herding"):
        return ReducedSetKPCA(rank, gamma=gamma, density=method, n_centers=m, random_state=seed)
    if method == "nystrom":
        return NystromKPCA(rank, gamma=gamma, n_landmarks=m, landmarks="uniform", random_state=seed)
    if method == "wnystrom":
        # Zhang & Kwok's density-weighted Nystrom: k-means centres, and the eigenproblem of the
        # cluster-size-weighted landmark measure (with covariance="data" the weights cancel).
        return NystromKPCA(
            rank,
            gamma=gamma,
            n_landmarks=m,
            landmarks="kmeans",
            covariance="landmarks",
            random_state=seed,
        )
    if method == "kmeans_nystrom":
        return NystromKPCA(rank, gamma=gamma, n_landmarks=m, landmarks="kmeans", random_state=seed)
    if method == "sk_nystroem":
        return make_pipeline(
            Nystroem(gamma=gamma, n_components=m, random_state=seed), PCA(rank, random_state=seed)
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
    if method in ("nystrom", "wnystrom", "kmeans_nystrom"):
        return model.landmarks_.shape[0]
    return model.n_centers_


def setup_child(name, data_home):
    """Not timed: load the data and warm up imports and first calls."""
    X, y, gamma = load_data(name, data_home)
    make_model("shadow", gamma, ell=3.0).fit(X[:64]).transform(X[:8])
    return X, y, gamma


def run_config(data, method, ell, ms, runs):
    """Work of one child: every split for one (method, ell); timings inside, per split."""
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
    return out


# ------------------------------------------------------------------------------------------------
# the experiment
# ------------------------------------------------------------------------------------------------
def run_dataset(name, ells, runs, data_home, log):
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

    def child(method, ell=None, ms=None):
        res = measure(
            setup_child,
            run_config,
            work_kwargs={"method": method, "ell": ell, "ms": ms, "runs": runs},
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
        return summary

    t0 = time.perf_counter()
    baselines = {
        "exact": child("exact"),
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
        rows["shadow"] = child("shadow", ell)
        ms = [int(m) for m in rows["shadow"]["retained"]]
        for method in METHODS[1:]:
            rows[method] = child(method, ell, None if method == "shadow_first" else ms)
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
                for method, row in rows.items()
            }
        b = res["baselines"]
        table[name]["exact"] = {
            "embedding_error": float(np.mean(b["exact"]["embedding_error"])),
            "eigenvalue_error": float(np.mean(b["exact"]["eigenvalue_error"])),
            "fit_s": float(np.median(b["exact"]["fit_s"])),
            "transform_s": float(np.median(b["exact"]["transform_s"])),
            "sklearn_kernelpca_fit_s": float(np.median(b["sk_kernelpca"]["fit_s"])),
        }
    return table


# ------------------------------------------------------------------------------------------------
# the classification experiment (the paper's Figures 4-5, here on pendigits and mnist)
# ------------------------------------------------------------------------------------------------
#: data set -> (sigma or None for CLS_SIGMA_FACTOR x the median distance, rank r, rows used).
#: pendigits: the paper's sigma, r and 3500 points; mnist: r = 15 as the paper's usps (its
#: 256-pixel digit set), a random 5000 of the 70000 rows (exact KPCA and k-means with m in the
#: thousands on more rows do not fit the time budget of this 2-core machine).
CLS_DATA = {"pendigits": (120.0, 5, 3500), "mnist": (None, 15, 5000)}
#: mnist's sigma = this times the median pairwise distance (of 1000 random rows): the largest
#: factor of the cross-validation scan (``sigma_scan``), where exact KPCA's 3-NN accuracy is as
#: good as anywhere in the scan and the shadow set is smallest (see the module notes).
CLS_SIGMA_FACTOR = 3.0
SIGMA_SCAN_FACTORS = (0.5, 1.0, 1.5, 2.0, 3.0)
CLS_METHODS = ("shadow", "uniform", "nystrom", "wnystrom")
#: ells of the classification experiment (--quick: 4 and 5): mnist's k-means landmarks for the
#: WNystrom baseline cost minutes per ell at m in the thousands, so a coarser grid there.
CLS_ELLS = {"pendigits": (3.0, 3.5, 4.0, 4.5, 5.0), "mnist": (3.0, 4.0, 5.0)}
#: WNystrom is skipped above this ell: on mnist at ell = 5 (m = 1819 of 4500 rows) one k-means
#: landmark fit took 53 s on this machine (10 folds: 9 minutes), against 2.4 s for the shadow.
CLS_WNYSTROM_MAX_ELL = {"pendigits": 5.0, "mnist": 4.0}
#: The fold seed: the same 10 folds in every child.
CV_SEED = 0


def median_distance(X, rows=1000, seed=0):
    """Median Euclidean distance between ``rows`` random rows (the median heuristic's scale)."""
    from scipy.spatial.distance import pdist

    idx = np.random.default_rng(seed).choice(X.shape[0], min(rows, X.shape[0]), replace=False)
    return float(np.median(pdist(X[idx])))


def load_cls_data(name, n_rows, data_home=None):
    """(X, y, gamma, rank) of the classification experiment: ``n_rows`` random rows (seed 0)."""
    from fastkpca.datasets import load

    X, y = load(name, data_home=data_home)
    sigma, rank, _ = CLS_DATA[name]
    if X.shape[0] > n_rows:
        keep = np.sort(np.random.default_rng(0).choice(X.shape[0], n_rows, replace=False))
        X, y = X[keep], y[keep]
    if sigma is None:
        sigma = CLS_SIGMA_FACTOR * median_distance(X)
    return X, y, 1.0 / (2.0 * sigma**2), rank


def cv_folds(y, n_folds):
    """Stratified, shuffled folds (the same in every child)."""
    from sklearn.model_selection import StratifiedKFold

    cv = StratifiedKFold(n_folds, shuffle=True, random_state=CV_SEED)
    return list(cv.split(np.zeros((len(y), 1)), y))


def setup_cls_child(name, n_rows, data_home):
    """Not timed: load the data, warm up imports and first calls."""
    X, y, gamma, rank = load_cls_data(name, n_rows, data_home)
    make_model("uniform", gamma, m=2 * rank, rank=rank).fit(X[:64]).transform(X[:8])
    return X, y, gamma, rank


def run_cls_config(data, method, ell, m, n_folds):
    """Work of one child: 10-fold 3-NN classification on one method's embedding.

    Training time = ``fit_transform`` of the training fold (the embedding the k-NN classifier is
    trained on, as the paper counts it); testing time = ``transform`` of the test fold (best of
    3).  The k-NN fit / predict on the r-dimensional embeddings are timed apart: they cost the
    same for every method.
    """
    from sklearn.neighbors import KNeighborsClassifier

    X, y, gamma, rank = data
    warm = make_model(method, gamma, ell=ell, m=None if m is None else 2 * rank, rank=rank)
    try:  # warm-up, not timed; a shadow set of 300 rows may hold fewer than r centres
        warm.fit_transform(X[:300])
        warm.transform(X[:10])
    except ValueError:
        pass
    out = []
    for f, (train, test) in enumerate(cv_folds(y, n_folds)):
        model = make_model(method, gamma, ell=ell, m=m, seed=f, rank=rank)
        t0 = time.perf_counter()
        Z = model.fit_transform(X[train])
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        knn = KNeighborsClassifier(3).fit(Z, y[train])
        knn_fit_s = time.perf_counter() - t0
        test_s = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            Zt = model.transform(X[test])
            test_s = min(test_s, time.perf_counter() - t0)
        t0 = time.perf_counter()
        pred = knn.predict(Zt)
        knn_predict_s = time.perf_counter() - t0
        out.append(
            {
                "train_s": train_s,
                "test_s": test_s,
                "knn_fit_s": knn_fit_s,
                "knn_predict_s": knn_predict_s,
                "accuracy": float(np.mean(pred == y[test])),
                "retained": n_retained(method, model, len(train)),
                "n_train": len(train),
            }
        )
    return out


def sigma_scan(name, n_rows, data_home, n_scan=3000, n_folds=5):
    """The bandwidth scan behind mnist's sigma (not timed): for each factor of the median
    distance, exact KPCA + 3-NN 5-fold accuracy on ``n_scan`` of the rows and the fraction the
    shadow density keeps at ell = 3 and 5."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import make_pipeline

    X, y, _, rank = load_cls_data(name, n_rows, data_home)
    X, y = X[:n_scan], y[:n_scan]
    med = median_distance(X)
    rows = []
    for factor in SIGMA_SCAN_FACTORS:
        gamma = 1.0 / (2.0 * (factor * med) ** 2)
        pipe = make_pipeline(make_model("exact", gamma, rank=rank), KNeighborsClassifier(3))
        cv = StratifiedKFold(n_folds, shuffle=True, random_state=CV_SEED)
        acc = float(np.mean(cross_val_score(pipe, X, y, cv=cv)))
        kept = {
            str(ell): make_model("shadow", gamma, ell=ell, rank=rank).fit(X).n_centers_ / len(X)
            for ell in (3.0, 5.0)
        }
        rows.append({"factor": factor, "sigma": factor * med, "accuracy": acc, "retained": kept})
    return {"n": len(X), "folds": n_folds, "median_distance": med, "rows": rows}


def run_classification(name, ells, n_folds, n_rows, data_home, log):
    """One data set of the classification experiment: exact KPCA, then per ell the shadow
    density, then the fixed-m methods at the shadow's mean m over the folds (the paper's rule)."""
    X, y, gamma, rank = load_cls_data(name, n_rows, data_home)
    kw = dict(setup_kwargs={"name": name, "n_rows": n_rows, "data_home": data_home})

    def child(method, ell=None, m=None):
        res = measure(
            setup_cls_child,
            run_cls_config,
            work_kwargs={"method": method, "ell": ell, "m": m, "n_folds": n_folds},
            **kw,
        )
        if not res.get("ok"):
            raise RuntimeError(
                f"{name} {method} ell={ell}: {res.get('error')}\n{res.get('traceback', '')}"
            )
        per_fold = res["result"]
        row = {key: [p[key] for p in per_fold] for key in per_fold[0]}
        row["peak_mb"] = res["peak_mb"]
        return row

    t0 = time.perf_counter()
    exact = child("exact")
    log(
        f"{name} classification: n = {len(y)}, sigma = {np.sqrt(0.5 / gamma):.4g}, r = {rank}, "
        f"{n_folds} folds; exact KPCA accuracy {np.mean(exact['accuracy']):.4f}, train "
        f"{np.median(exact['train_s']):.3f} s, test {np.median(exact['test_s']):.4f} s"
    )
    by_ell = {}
    for ell in ells:
        rows = {"shadow": child("shadow", ell)}
        m = int(round(np.mean(rows["shadow"]["retained"])))
        for method in CLS_METHODS[1:]:
            if method == "wnystrom" and ell > CLS_WNYSTROM_MAX_ELL[name]:
                continue
            rows[method] = child(method, ell, m)
        for row in rows.values():
            row["train_speedup"] = list(np.array(exact["train_s"]) / np.array(row["train_s"]))
            row["test_speedup"] = list(np.array(exact["test_s"]) / np.array(row["test_s"]))
            row["data_retained"] = list(np.array(row["retained"]) / np.array(row["n_train"]))
        by_ell[str(ell)] = rows
        log(
            f"  ell = {ell}: m = {m} ({m / np.mean(exact['n_train']):.1%}); "
            + ", ".join(
                f"{k} acc {np.mean(v['accuracy']):.4f} x{np.mean(v['train_speedup']):.2f}"
                f"/x{np.mean(v['test_speedup']):.2f}"
                for k, v in rows.items()
            )
            + f"  [{time.perf_counter() - t0:.0f} s]"
        )
    return {
        "n": len(y),
        "n_features": X.shape[1],
        "rank": rank,
        "gamma": gamma,
        "sigma": float(np.sqrt(0.5 / gamma)),
        "folds": n_folds,
        "exact": exact,
        "by_ell": by_ell,
    }


def summarize_classification(result):
    """Means over the folds, per data set, ell and method."""
    keys = ("accuracy", "train_speedup", "test_speedup", "data_retained")
    table = {}
    for name, res in result["classification"].items():
        table[name] = {
            ell: {
                method: {key: float(np.mean(row[key])) for key in keys}
                for method, row in rows.items()
            }
            for ell, rows in res["by_ell"].items()
        }
        table[name]["exact"] = {
            "accuracy": float(np.mean(res["exact"]["accuracy"])),
            "train_s": float(np.median(res["exact"]["train_s"])),
            "test_s": float(np.median(res["exact"]["test_s"])),
        }
    return table


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------
def _curves(ax, by_ell, methods, key):
    """One curve per method: mean +- sd over splits / folds against ell."""
    for method in methods:
        pts = [(float(e), rows[method][key]) for e, rows in by_ell.items() if method in rows]
        if not pts:
            continue
        ax.errorbar(
            [p[0] for p in pts],
            [np.mean(p[1]) for p in pts],
            yerr=[np.std(p[1]) for p in pts],
            marker="o",
            ms=3,
            capsize=2,
            label=LABELS[method],
        )


def plot(result, suffix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("embedding_error", "eigen-embedding error"),
        ("eigenvalue_error", "eigenvalue error"),
        ("data_retained", "data retained (m / n_train)"),
        ("train_speedup", "train speed-up vs fastkpca ExactKPCA"),
        ("test_speedup", "test speed-up vs fastkpca ExactKPCA"),
        ("train_speedup_vs_sklearn", "train speed-up vs sklearn KernelPCA (dense)"),
        ("test_speedup_vs_sklearn", "test speed-up vs sklearn KernelPCA (dense)"),
    ]
    groups = {
        "": ("shadow", "uniform", "nystrom", "wnystrom", "kmeans_nystrom", "shadow_first"),
        "_rsde": ("shadow", "kmeans", "paring", "herding", "uniform"),
    }
    for name, res in result["datasets"].items():
        for tag, methods in groups.items():
            fig, axes = plt.subplots(2, 4, figsize=(18, 8))
            axes[1, 3].axis("off")
            for ax, (key, title) in zip(axes.ravel(), panels, strict=False):
                _curves(ax, res["by_ell"], methods, key)
                exact = res["baselines"]["exact"]
                if key in ("embedding_error", "eigenvalue_error"):
                    # the floor: exact KPCA trained on the same 80 %
                    ax.axhline(
                        np.mean(exact[key]),
                        color="k",
                        ls="--",
                        label=LABELS["exact"] + " (same training rows)",
                    )
                if key in ("embedding_error", "eigenvalue_error") or "speedup" in key:
                    ax.set_yscale("log")
                if "speedup" in key:
                    ax.axhline(1.0, color="grey", lw=0.8)
                ax.set_title(title, fontsize=10)
                ax.set_xlabel("ell")
            handles, labels = axes[0, 0].get_legend_handles_labels()
            axes[1, 3].legend(handles, labels, fontsize=9, loc="center")
            fig.suptitle(
                f"Reduced-set KPCA, {name} (n_t = {res['n_train']}, sigma = "
                f"{res['sigma']:g}, r = {RANK}; mean +- sd over {result['runs']} splits)"
            )
            fig.tight_layout()
            fig.savefig(RESULTS / f"rskpca_paper_{name}{tag}{suffix}.png", dpi=110)
            plt.close(fig)


def plot_classification(result, suffix):
    """Figures 4-5 of the paper: accuracy, speed-ups and data retained against ell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("accuracy", "3-NN accuracy (k-fold CV)"),
        ("train_speedup", "train speed-up vs exact KPCA (fit + embed train fold)"),
        ("test_speedup", "test speed-up vs exact KPCA (embed test fold)"),
        ("data_retained", "data retained (m / n_train)"),
    ]
    for name, res in result["classification"].items():
        fig, axes = plt.subplots(1, 4, figsize=(19, 4.6))
        for ax, (key, title) in zip(axes, panels, strict=True):
            _curves(ax, res["by_ell"], CLS_METHODS, key)
            if key == "accuracy":
                ax.axhline(
                    np.mean(res["exact"]["accuracy"]), color="k", ls="--", label="exact KPCA"
                )
            if "speedup" in key:
                ax.set_yscale("log")
                ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("ell")
        axes[0].legend(fontsize=8)
        fig.suptitle(
            f"Reduced-set KPCA, 3-NN classification on {name} (n = {res['n']}, sigma = "
            f"{res['sigma']:.4g}, r = {res['rank']}; mean +- sd over {res['folds']} folds)"
        )
        fig.tight_layout()
        fig.savefig(RESULTS / f"rskpca_paper_{name}_knn{suffix}.png", dpi=110)
        plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small and fast (4 minutes here)")
    parser.add_argument("--runs", type=int, default=None, help="random splits (default 3)")
    parser.add_argument("--ell-step", type=float, default=0.5)
    parser.add_argument("--datasets", nargs="*", default=list(DATA), choices=list(DATA))
    parser.add_argument("--cls-datasets", nargs="*", default=list(CLS_DATA), choices=list(CLS_DATA))
    parser.add_argument("--folds", type=int, default=None, help="CV folds (default 10)")
    parser.add_argument("--data-home", default=None)
    parser.add_argument("--threads", default="1", help="BLAS threads (set before numpy loads)")
    args = parser.parse_args(argv)

    quick = args.quick
    step = 2.0 if quick else args.ell_step
    ells = [round(e, 3) for e in np.arange(3.0, 5.0 + 1e-9, step)]
    runs = args.runs or (2 if quick else 3)
    folds = args.folds or (5 if quick else 10)
    suffix = "_quick" if quick else ""

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    result = {
        "paper": "Kingravi, Vela & Gray, Reduced set KPCA (section 6, Figures 2-5, 7-8)",
        "command": "benchmarks/rskpca_paper.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "rank": RANK,
        "ells": ells,
        "runs": runs,
        "labels": LABELS,
        "datasets": {},
        "classification": {},
    }
    for name in args.datasets:
        result["datasets"][name] = run_dataset(name, ells, runs, args.data_home, log)
    for name in args.cls_datasets:
        n_rows = CLS_DATA[name][2] // (3 if quick else 1)
        cls_ells = [4.0, 5.0] if quick else list(CLS_ELLS[name])
        result["classification"][name] = run_classification(
            name, cls_ells, folds, n_rows, args.data_home, log
        )
        if CLS_DATA[name][0] is None and not quick:
            scan = sigma_scan(name, n_rows, args.data_home)
            result["classification"][name]["sigma_scan"] = scan
            log(f"  {name} sigma scan: {scan['rows']}")
    result["summary"] = summarize(result)
    result["classification_summary"] = summarize_classification(result)
    result["total_seconds"] = time.perf_counter() - t0
    RESULTS.mkdir(parents=True, exist_ok=True)
    save_json(result, RESULTS / f"rskpca_paper{suffix}.json")
    plot(result, suffix)
    plot_classification(result, suffix)
    log(f"done in {result['total_seconds']:.0f} s -> {RESULTS}/rskpca_paper{suffix}.json")


if __name__ == "__main__":
    main()
