"""Streaming kernel PCA paper, section 3: SKPCA vs RNCA vs Nystrom on four data sets.

Ghashami, Perry & Phillips, "Streaming kernel principal component analysis" (AISTATS 2016),
Figures 1 (RandomNoisy), 2 (CPU), 3 (Adult) and 4 (Forest; kddcup stands in for it here): kernel
spectral error ``||G - G'||_2 / n``, kernel Frobenius error ``||G - G'||_F / n^2`` (uncentered G,
as the paper), TRAIN TIME, TEST TIME and SPACE against the SAMPLE SIZE m (random features for
SKPCA / RNCA, landmarks c for Nystrom) in {2^5, ..., 2^11} (kddcup: up to 2^10), with SKPCA's
sketch size ell in {2, 5, 10, 20, 30, 50}.

Data sets (``--datasets``; a run replaces only its data sets' rows in the JSON):

- ``randomnoisy``: ``fastkpca.datasets.make_random_noisy`` with the paper's n = 20000,
  d = 1000, s = 50, zeta = 10 (``A = S D U + F / zeta``, seed ``--seed``), used as generated.
- ``cpu``: cpu_act, 8192 x 21 (the paper's 7373 x 21), columns standardised.
- ``adult``: LIBSVM a9a's training file, 32561 x 123 binary (the paper's 33561 x 123), as is.
- ``kddcup``: KDD Cup 1999 (PMLB), 494020 x 41, columns standardised; it stands in for Forest
  (523910 x 54, not available offline).  Training uses a fixed-seed uniform subsample of
  50000 of the 493020 non-test rows (``--max-train``; quick: 5000), sample sizes up to 2^10:
  RNCA's ``n m^2`` covariance on all rows at m = 2048 alone would take minutes on this shared
  2-core machine.

What each method's G' is (the paper's definitions, section 1.2 and 2.1):

- SKPCA(ell): ``G' = Z W W^T Z^T`` with Z the m random Fourier features of the points and W
  the right singular vectors of the Frequent Directions sketch (``StreamingKPCA.sketch_``).
- RNCA: ``G' = Z Z^T`` (``RandomFeatureKPCA.feature_map_``).
- Nystrom: ``G' = C W^+ C^T`` over c uniform landmarks (``NystromKPCA``: ``k(X, L) W^{-1/2}``).
- scikit-learn baselines in the same run: ``RBFSampler`` + ``PCA`` (``G' = Z Z^T`` of its
  cos(w x + b) features) and ``Nystroem`` + ``PCA`` (``G' = C W^+ C^T``).

SPACE is the paper's formula with our buffer: SKPCA ``m d + 2 ell m + ell^2``, RNCA ``m^2 + m d``,
Nystrom ``c^2 + c d`` (floats).  Our Frequent Directions keeps ``2 ell`` rows and shrinks them to
``ell`` (plus an ell x ell tracked-loss matrix for the eigenvalue estimate), where the paper's
Algorithm 1 keeps ell rows and shrinks them to ell / 2: ``sketch_size=ell`` here is the paper's
2 ell in memory, and the paper's ``m d + m ell`` would undercount it by ``ell m``.
TRAIN TIME is a full ``fit`` (features, sketch / covariance, eigendecomposition with
n_components = min(10, ell)) in a fresh process (``benchmarks/_harness.measure``; its peak memory
above the loaded data is recorded too); TEST TIME is ``transform`` of the held-out test set
(800 rows for CPU, 1000 for the others, as in the paper), best of 5 after a warm-up call.

Choices the paper does not state, made here:
- Gaussian kernel ``exp(-gamma ||x - y||^2)`` with gamma from the median heuristic
  (1 / median squared distance over 1000 training rows), one number for all methods.  CPU
  and kddcup columns are standardised (training mean / std) first; Adult (binary) and
  RandomNoisy are used as they are.
- The errors are evaluated on one uniform (fixed-seed) subsample S of ``--n-eval`` training rows
  (default 3000; the paper evaluates on all n, but the n x n Gram of 31561 Adult rows would need
  8 GB): ``spectral_error = ||G_S - G'_S||_2 / |S|`` and ``frobenius_error = ||G_S - G'_S||_F /
  |S|^2`` on the |S| x |S| principal submatrices, computed exactly (G_S formed once per data
  set; checked against ``fastkpca.metrics.gram_spectral_error`` / ``gram_frobenius_error`` on
  the first configuration, ``metrics_check`` in the JSON).  ``frobenius_error_full_n`` rescales
  the Frobenius error to all n training rows: the mean squared entry of G - G' over S estimates
  the one over all pairs, so ``||G - G'||_F / n^2 ~= frobenius_error * |S| / n``.  The spectral
  error has no such rescaling: for an error of low rank the sample gives ``||G - G'||_2 / n``,
  for a noise-like error it overstates it (up to ``sqrt(n / |S|)``).
- BLAS runs single-threaded (``--threads``) for every method: the benchmark machine is shared,
  and oversubscribed BLAS threads make timings of small matrix products erratic.
- Configurations with ell >= m are skipped: the sketch is then exact and SKPCA equals RNCA.

Usage (the run holds a few hundred MB; take the machine-wide lock anyway)::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/skpca_paper.py --datasets cpu adult
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/skpca_paper.py --no-sklearn \
        --datasets randomnoisy                                        # ~9 min
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/skpca_paper.py --no-sklearn \
        --datasets kddcup                                             # ~6 min
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/skpca_paper.py --quick   # all four
    .venv/bin/python benchmarks/skpca_paper.py --summary   # Markdown tables from the JSON
    .venv/bin/python benchmarks/skpca_paper.py --replot    # redraw the PNGs from the JSON

(each data set's wall time is in the JSON: ``datasets.<name>.wall_s``; the quick run takes about
two minutes per data set).  The scikit-learn baselines (``RBFSampler`` / ``Nystroem`` + ``PCA``)
are left out of the committed RandomNoisy and kddcup runs (``--no-sklearn``) to save time.

Results: ``benchmarks/results/skpca_paper[_quick].json`` and ``skpca_paper_<data>[_quick].png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
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
import scipy.linalg as la  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(results_dir())

ELLS = (2, 5, 10, 20, 30, 50)
SAMPLE_SIZES = tuple(2**p for p in range(5, 12))
TEST_SIZES = {"cpu": 800, "adult": 1000, "randomnoisy": 1000, "kddcup": 1000}
DATASETS = tuple(TEST_SIZES)
#: Sample sizes per data set where they differ from SAMPLE_SIZES (see the module docstring).
FULL_SIZES = {"kddcup": tuple(2**p for p in range(5, 11))}
#: Training rows per data set where not all are used (``--max-train`` overrides).
FULL_MAX_TRAIN = {"kddcup": 50000}
#: The paper's RandomNoisy parameters (section 3): n, d, s, zeta.
RANDOM_NOISY = {"n_samples": 20000, "n_features": 1000, "signal_dim": 50, "zeta": 10.0}
STANDARDISE = ("cpu", "kddcup")
N_COMPONENTS = 10


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def load_dataset(name, data_home=None, seed=0):
    """The data matrix: dense, or CSR for "adult" (through fastkpca.datasets)."""
    from fastkpca.datasets import load, make_random_noisy

    if name == "cpu":
        X, _ = load("cpu_act", data_home=data_home)
    elif name == "adult":
        X, _ = load("adult", data_home=data_home, subset="train")
    elif name == "kddcup":
        X, _ = load("kddcup", data_home=data_home)
    elif name == "randomnoisy":
        X = make_random_noisy(**RANDOM_NOISY, random_state=seed)
    else:
        raise ValueError(f"unknown data set {name!r}")
    return X


def split(name, X, rng, max_train=None):
    """Random held-out test set of the paper's size; CPU and kddcup standardised on the
    training part (after the fixed-seed subsample of ``max_train`` training rows)."""
    n = X.shape[0]
    perm = rng.permutation(n)
    n_test = TEST_SIZES[name]
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    if max_train is not None:
        train = np.sort(rng.choice(train, size=min(max_train, len(train)), replace=False))
    X_train, X_test = X[train], X[test]
    if name in STANDARDISE:
        mu, sd = X_train.mean(axis=0), X_train.std(axis=0)
        sd[sd == 0] = 1.0
        X_train, X_test = (X_train - mu) / sd, (X_test - mu) / sd
    return X_train, X_test


def save_array(path, X):
    if sp.issparse(X):
        sp.save_npz(path, X.tocsr())
    else:
        np.save(path, X)


def load_array(path):
    path = str(path)
    return sp.load_npz(path).tocsr() if path.endswith(".npz") else np.load(path)


def setup_child(path, method, gamma):
    """Setup of each timed child (not timed): read the training data, then fit the same method
    once on 64 rows so that imports and first-call initialisation are not timed."""
    X = load_array(path)
    make_model(method, 8, gamma, 0).fit(X[:64])
    return X


# ------------------------------------------------------------------------------------------------
# methods
# ------------------------------------------------------------------------------------------------
def make_model(method, m, gamma, seed):
    """The estimator of one configuration.

    method: ("skpca", ell), "rnca", "nystrom", "sk_rff" or "sk_nys".
    """
    from sklearn.decomposition import PCA
    from sklearn.kernel_approximation import Nystroem, RBFSampler
    from sklearn.pipeline import make_pipeline

    from fastkpca.decomposition.nystrom import NystromKPCA
    from fastkpca.decomposition.random_features import RandomFeatureKPCA
    from fastkpca.decomposition.streaming import StreamingKPCA

    kind, ell = method if isinstance(method, tuple) else (method, None)
    if kind == "skpca":
        return StreamingKPCA(
            min(N_COMPONENTS, ell, m),
            gamma=gamma,
            n_random_features=m,
            sketch_size=ell,
            random_state=seed,
        )
    if kind == "rnca":
        return RandomFeatureKPCA(
            min(N_COMPONENTS, m), gamma=gamma, n_random_features=m, random_state=seed
        )
    if kind == "nystrom":
        return NystromKPCA(min(N_COMPONENTS, m), gamma=gamma, n_landmarks=m, random_state=seed)
    if kind == "sk_rff":
        return make_pipeline(
            RBFSampler(gamma=gamma, n_components=m, random_state=seed),
            PCA(min(N_COMPONENTS, m), random_state=seed),
        )
    if kind == "sk_nys":
        return make_pipeline(
            Nystroem(gamma=gamma, n_components=m, random_state=seed),
            PCA(min(N_COMPONENTS, m), random_state=seed),
        )
    raise ValueError(method)


def fit_model(X, method, m, gamma, seed):
    """Work of each timed child: fit one model; it is pickled back to the parent."""
    return make_model(method, m, gamma, seed).fit(X)


def uncentered_embedding(method, model, X):
    """T with ``T T^T = G'``, the paper's approximate (uncentered) Gram on the rows of X."""
    kind = method[0] if isinstance(method, tuple) else method
    if kind == "skpca":
        B = model.sketch_.sketch()
        _, s, Vt = la.svd(B, full_matrices=False)
        W = Vt[s > s[0] * 1e-12].T  # orthonormal basis of the sketch's row space
        return model.feature_map_(X) @ W
    if kind == "rnca":
        return model.feature_map_(X)
    if kind == "nystrom":
        K = model.kernel_(X, model.landmarks_)
        return np.asarray(K, dtype=np.float64) @ model.normalization_.T  # z = N k(L, x)
    if kind in ("sk_rff", "sk_nys"):
        return model[0].transform(X)
    raise ValueError(method)


def paper_errors(G, T, seed=0):
    """(spectral, Frobenius) error of ``G' = T T^T`` against the Gram G of the same rows.

    ``||G - G'||_2 / n`` and ``||G - G'||_F / n^2`` (section 3's normalisation, n = rows of G);
    the largest-magnitude eigenvalue of the symmetric difference by LAPACK up to 2000 rows and
    by ARPACK above (converged to machine precision, as ``fastkpca.metrics``).
    """
    from scipy.sparse.linalg import eigsh

    n = G.shape[0]
    D = G - T @ T.T
    frob = float(np.linalg.norm(D)) / n**2
    if n <= 2000:
        spec = float(np.max(np.abs(la.eigvalsh(D, check_finite=False))))
    else:
        v0 = np.random.default_rng(seed).uniform(-1, 1, n)
        spec = float(np.abs(eigsh(D, k=1, which="LM", v0=v0, return_eigenvectors=False)[0]))
    return spec / n, frob


def space(method, m, d):
    """SPACE (number of stored floats): the paper's formula with the real 2 ell row buffer."""
    kind, ell = method if isinstance(method, tuple) else (method, None)
    if kind == "skpca":
        return m * d + 2 * ell * m + ell * ell
    if kind in ("rnca", "sk_rff"):
        return m * m + m * d
    return m * m + m * d  # Nystrom: c^2 + c d


def label(method):
    if isinstance(method, tuple):
        return f"SKPCA l={method[1]}"
    return {
        "rnca": "RNCA (RandomFeatureKPCA)",
        "nystrom": "Nystrom (NystromKPCA)",
        "sk_rff": "sklearn RBFSampler+PCA",
        "sk_nys": "sklearn Nystroem+PCA",
    }[method]


# ------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------
def run_dataset(name, args):
    from fastkpca.kernels import RBF, resolve_gamma
    from fastkpca.metrics import gram_frobenius_error, gram_spectral_error

    t_start = time.perf_counter()
    # one generator per data set: a data set's split does not depend on which others run
    rng = np.random.default_rng([args.seed, DATASETS.index(name)])
    X = load_dataset(name, args.data_home, args.seed)
    n_all = X.shape[0]
    max_train = args.max_train or (None if args.quick else FULL_MAX_TRAIN.get(name))
    sizes = args.sizes or FULL_SIZES.get(name, SAMPLE_SIZES)
    X_train, X_test = split(name, X, rng, max_train)
    del X
    n, d = X_train.shape
    gamma = resolve_gamma("median", X_train, rng=0)
    kernel = RBF(gamma)
    eval_idx = np.sort(rng.choice(n, size=min(args.n_eval, n), replace=False))
    X_eval = X_train[eval_idx]
    # the (uncentered) Gram of the evaluation rows, formed once for all configurations
    G_eval = np.asarray(kernel(X_eval), dtype=np.float64)
    metrics_check = None
    print(
        f"[{name}] train {n} x {d}, test {X_test.shape[0]}, gamma = {gamma:.4g}, "
        f"error on {len(eval_idx)} training rows",
        flush=True,
    )

    methods = [("skpca", ell) for ell in args.ells] + ["rnca", "nystrom"]
    if not args.no_sklearn:
        methods += ["sk_rff", "sk_nys"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("train.npz" if sp.issparse(X_train) else "train.npy")
        save_array(path, X_train)
        for m in sizes:
            for method in methods:
                if isinstance(method, tuple) and method[1] >= m:
                    continue  # exact sketch: equals RNCA
                t0 = time.perf_counter()
                out = measure(
                    setup_child,
                    fit_model,
                    setup_kwargs={"path": path, "method": method, "gamma": gamma},
                    work_kwargs={"method": method, "m": m, "gamma": gamma, "seed": args.seed},
                )
                row = {
                    "data": name,
                    "method": label(method),
                    "sample_size": m,
                    "ell": method[1] if isinstance(method, tuple) else None,
                    "space": space(method, m, d),
                }
                if not out.get("ok"):
                    row["error"] = out.get("error")
                    print(f"  m={m:5d} {label(method):28s} FAILED: {row['error']}", flush=True)
                    rows.append(row)
                    continue
                model = out["result"]
                model.transform(X_test[:10])  # warm-up (first call after unpickling)
                test_times = []
                for _ in range(5):
                    t = time.perf_counter()
                    model.transform(X_test)
                    test_times.append(time.perf_counter() - t)
                T = uncentered_embedding(method, model, X_eval)
                spec, frob = paper_errors(G_eval, T, seed=args.seed)
                if metrics_check is None:
                    # the library's metrics (Gram recomputed in blocks) on the same pair
                    ref_spec = gram_spectral_error(X_eval, T, kernel, center=False)
                    ref_frob = gram_frobenius_error(X_eval, T, kernel, center=False)
                    metrics_check = {
                        "method": label(method),
                        "sample_size": m,
                        "spectral_rel_diff": abs(spec - ref_spec) / ref_spec,
                        "frobenius_rel_diff": abs(frob - ref_frob) / ref_frob,
                    }
                row.update(
                    {
                        "train_s": out["seconds"],
                        "train_extra_peak_mb": out["extra_peak_mb"],
                        "test_s": min(test_times),
                        "spectral_error": spec,
                        "frobenius_error": frob,
                        "frobenius_error_full_n": frob * len(eval_idx) / n,
                    }
                )
                if hasattr(model, "feature_map_"):  # "auto" picks orf, or rff for wide data
                    row["features"] = model.feature_map_.kind
                rows.append(row)
                print(
                    f"  m={m:5d} {label(method):28s} spec {row['spectral_error']:.3e} "
                    f"frob {row['frobenius_error']:.3e} train {row['train_s']:.3f}s "
                    f"test {row['test_s'] * 1e3:.2f}ms  ({time.perf_counter() - t0:.1f}s)",
                    flush=True,
                )
    info = {
        "n_rows": n_all,
        "n_train": n,
        "n_test": int(X_test.shape[0]),
        "n_features": d,
        "gamma": gamma,
        "n_eval": int(len(eval_idx)),
        "sample_sizes": list(sizes),
        "standardised": name in STANDARDISE,
        "metrics_check": metrics_check,
        "wall_s": time.perf_counter() - t_start,
    }
    if name == "randomnoisy":
        info["random_noisy"] = dict(RANDOM_NOISY, random_state=args.seed)
    return rows, info


def plot(name, rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = [r for r in rows if "error" not in r]
    labels = sorted(
        dict.fromkeys(r["method"] for r in rows),
        key=lambda lab: (
            not lab.startswith("SKPCA"),
            int(lab.split("=")[1]) if lab.startswith("SKPCA") else 0,
        ),
    )
    panels = [
        ("sample_size", "spectral_error", "kernel spectral error"),
        ("sample_size", "frobenius_error", "kernel Frobenius error"),
        ("sample_size", "train_s", "train time (s)"),
        ("sample_size", "test_s", "test time (s)"),
        ("space", "spectral_error", "kernel spectral error"),
        ("space", "frobenius_error", "kernel Frobenius error"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    cmap = plt.get_cmap("viridis")
    skpca = [lab for lab in labels if lab.startswith("SKPCA")]
    for ax, (xk, yk, ylabel) in zip(axes.ravel(), panels, strict=True):
        for lab in labels:
            pts = sorted((r[xk], r[yk]) for r in rows if r["method"] == lab)
            if not pts:
                continue
            if lab.startswith("SKPCA"):
                style = dict(
                    color=cmap(skpca.index(lab) / max(1, len(skpca) - 1) * 0.85),
                    marker="o",
                    ms=3,
                    lw=1.2,
                )
            else:
                style = {
                    "RNCA (RandomFeatureKPCA)": dict(color="red", marker="s"),
                    "Nystrom (NystromKPCA)": dict(color="black", marker="^"),
                    "sklearn RBFSampler+PCA": dict(color="red", ls="--", marker="x"),
                    "sklearn Nystroem+PCA": dict(color="gray", ls="--", marker="x"),
                }[lab]
                style.update(ms=4, lw=1.5)
            ax.plot(*zip(*pts, strict=True), label=lab, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        # minor-tick labels of log x axes spanning about a decade overlap: label the sizes
        ax.xaxis.set_minor_formatter(NullFormatter())
        if xk == "sample_size":
            sizes = sorted({r["sample_size"] for r in rows})
            ax.set_xticks(sizes, [str(m) for m in sizes])
        ax.set_xlabel("sample size (m or c)" if xk == "sample_size" else "space (floats)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{name}: SKPCA vs RNCA vs Nystrom (Ghashami, Perry & Phillips 2016, section 3)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(name, rows, budget_sizes=(128, 512)):
    """Markdown lines with the figures the paper's claims are judged on (docs/papers/skpca.md).

    At the largest sample size M: each method's errors, train and test time; SKPCA's spectral
    error at ell = min and max against m; the best error each method reaches within the
    space RNCA takes at m in ``budget_sizes`` (equal space).
    """
    rows = [r for r in rows if "error" not in r and r["data"] == name]
    sizes = sorted({r["sample_size"] for r in rows})
    M = sizes[-1]
    ells = sorted({r["ell"] for r in rows if r["ell"] is not None})
    at = {(r["method"], r["sample_size"]): r for r in rows}
    main = [label(("skpca", ell)) for ell in ells] + [label("rnca"), label("nystrom")]
    out = [
        f"#### {name}: at sample size {M}",
        "",
        "| method | spectral error | Frobenius error | train (s) | test (ms) | space (floats) |",
        "|---|---|---|---|---|---|",
    ]
    for lab in main + [label("sk_rff"), label("sk_nys")]:
        r = at.get((lab, M))
        if r is not None:
            out.append(
                f"| {lab} | {r['spectral_error']:.2e} | {r['frobenius_error']:.2e} | "
                f"{r['train_s']:.2f} | {r['test_s'] * 1e3:.1f} | {r['space']:.3g} |"
            )
    out += [
        "",
        f"#### {name}: spectral error against sample size",
        "",
        "| method | " + " | ".join(str(m) for m in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for lab in main:
        cells = [at.get((lab, m)) for m in sizes]
        out.append(
            f"| {lab} | "
            + " | ".join("-" if c is None else f"{c['spectral_error']:.2e}" for c in cells)
            + " |"
        )
    for budget_m in budget_sizes:
        ref = at.get((label("rnca"), budget_m))
        if ref is None:
            continue
        budget = ref["space"]
        out += [
            "",
            f"#### {name}: best error within RNCA's space at m = {budget_m} ({budget:.3g} floats)",
            "",
            "| method | spectral error (m) | Frobenius error (m) |",
            "|---|---|---|",
        ]
        for lab in main:
            fits = [r for r in rows if r["method"] == lab and r["space"] <= budget]
            if not fits:
                out.append(f"| {lab} | - | - |")
                continue
            bs = min(fits, key=lambda r: r["spectral_error"])
            bf = min(fits, key=lambda r: r["frobenius_error"])
            out.append(
                f"| {lab} | {bs['spectral_error']:.2e} ({bs['sample_size']}) | "
                f"{bf['frobenius_error']:.2e} ({bf['sample_size']}) |"
            )
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="small run: m in {32, 128, 512}, ell in {5, 20}, at most 5000 training rows",
    )
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument(
        "--n-eval",
        type=int,
        default=None,
        help="training rows the errors are evaluated on (default 3000; quick 1000)",
    )
    p.add_argument(
        "--max-train",
        type=int,
        default=None,
        help="subsample the training set (default: all, kddcup 50000; quick: 5000)",
    )
    p.add_argument("--no-sklearn", action="store_true", help="skip the scikit-learn baselines")
    p.add_argument("--threads", default="1", help="BLAS threads (default 1; see the docstring)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data-home", default=None, help="data folder (default: $FASTKPCA_DATA or ../shared/data)"
    )
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--note", default=None, help="a remark stored with each data set's results")
    p.add_argument("--replot", action="store_true", help="only redraw the PNGs from the saved JSON")
    p.add_argument(
        "--summary", action="store_true", help="only print Markdown tables from the saved JSON"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.ells = (32, 128, 512), (5, 20)
        args.n_eval = args.n_eval or 1000
        args.max_train = args.max_train or 5000
    else:
        args.sizes, args.ells = None, ELLS  # None: per data set (FULL_SIZES)
        args.n_eval = args.n_eval or 3000
    suffix = "_quick" if args.quick else ""
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.replot or args.summary:
        import json

        saved = json.loads((out_dir / f"skpca_paper{suffix}.json").read_text())
        for name in saved["datasets"]:
            if name not in args.datasets:
                continue
            rows = [r for r in saved["rows"] if r["data"] == name]
            if args.replot:
                plot(name, rows, out_dir / f"skpca_paper_{name}{suffix}.png")
            if args.summary:
                print("\n".join(summary(name, rows)) + "\n")
        return
    t0 = time.perf_counter()
    json_path = out_dir / f"skpca_paper{suffix}.json"
    command = " ".join(["benchmarks/skpca_paper.py", *(argv or sys.argv[1:])])
    for name in args.datasets:
        rows, info = run_dataset(name, args)
        info.update(
            command=command,
            machine=machine_info(),
            blas_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
            ells=list(args.ells),
            seed=args.seed,
        )
        if args.note:
            info["note"] = args.note
        plot(name, rows, out_dir / f"skpca_paper_{name}{suffix}.png")
        save_json(merge_results(json_path, name, info, rows), json_path)
    print(f"done in {time.perf_counter() - t0:.0f} s -> {json_path}")


def merge_results(path, name, info, rows):
    """The saved results with data set ``name``'s entry and rows replaced (others kept)."""
    import json

    results = {
        "benchmark": "skpca_paper",
        "paper": "Ghashami, Perry & Phillips, AISTATS 2016",
        "n_components": N_COMPONENTS,
        "datasets": {},
        "rows": [],
    }
    if Path(path).exists():
        saved = json.loads(Path(path).read_text())
        for key in ("datasets", "rows"):
            results[key] = saved.get(key, results[key])
        if "command" in saved:  # the former layout: one run-wide entry, copied per data set
            for key in ("command", "machine", "blas_threads", "ells", "seed", "sample_sizes"):
                for entry in results["datasets"].values():
                    entry.setdefault(key, saved.get(key))
    results["datasets"][name] = info
    results["rows"] = [r for r in results["rows"] if r["data"] != name] + rows
    return results


if __name__ == "__main__":
    main()
