"""Musco & Woodruff 2017 (input-sparsity kernel PCA): ``solver="countsketch"`` on sparse Adult.

What is measured (``RandomFeatureKPCA(features="rff", solver="countsketch")``, Gaussian kernel,
gamma from the median heuristic on Adult, m = 2000 random features, k = 10 components):

1. Time against nnz(X), rows: row subsets of LIBSVM a9a (``../shared/data/a9a``, train and
   test files, 48842 x 123 binary CSR, ~14 non-zeros a row) of growing size n, the rows tiled
   (repeated) beyond 48842 to reach 195368.  Each fit in its own process
   (``_harness.measure``), best of ``--repeats``.  Timed alongside: ``matmul`` (``X @ W``,
   W the d x m/2 Gaussian frequencies: the only step whose cost depends on nnz(X), O(nnz(X) m)
   on CSR, and the step the paper replaces by a fast Gaussian multiplication), ``features``
   (the feature map over the same row blocks as the fit, discarded: ``X @ W`` plus the dense
   O(n m) cos / sin), the two-pass and one-pass countsketch solvers, the exact solver
   (m x m covariance, O(n m^2)) and, up to ``--exact-max-n`` rows, exact kernel PCA.
2. Time against nnz(X), density: a fixed n, the Adult rows with extra unit entries at random
   positions (synthetic densification: d stays 123, nnz grows up to n d), plus the densest
   case as a dense ndarray.
3. Accuracy against the exact solution on row subsets small enough for the n x n Gram:
   the paper's kernel PCA guarantee (its eq. (2), centered): with Q an orthonormal basis of
   the n x k training embedding, ``(tr G - tr(Q^T G Q)) / (tr G - sum_{i<=k} lambda_i)``
   (1.0 = the best rank-k subspace; (2) asks for <= 1 + eps), the relative rank-k Gram error
   ``||G - T T^T||_F / ||G - G_k||_F`` (as :func:`fastkpca.metrics.relative_rank_k_error`),
   and the relative l2 error of the top-k eigenvalues against exact kernel PCA and against the
   exact solver on the same features (same seed).  Also a sweep of the CountSketch size t
   (``n_buckets``) at the largest accuracy n, several seeds.

Usage::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/countsketch_paper.py
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/countsketch_paper.py --quick

(full: ~10 min on the project's 2-core machines; ``--quick``: under 2 min).

Results: ``benchmarks/results/countsketch_paper[_quick].json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

RESULTS = results_dir()
N_COMPONENTS = 10
N_FEATURES = 2000
PERM_SEED = 0


# ------------------------------------------------------------------------------------------------
# data (module level: the spawned children re-import these)
# ------------------------------------------------------------------------------------------------
def adult_rows(n, density=None, dense=False):
    """n rows of Adult (a9a train + test, 48842 x 123, in a fixed random order), optionally
    densified.

    Beyond 48842 rows the data are tiled (copies of the same rows): for timing only, the
    accuracy runs stay below.  ``density``: target fraction of non-zeros; extra entries equal
    to 1 are added at uniformly random positions (seeded), so the original non-zeros are kept
    and d stays 123.
    """
    from fastkpca.datasets import load

    X, _ = load("adult", subset="all")
    X = X[np.random.default_rng(PERM_SEED).permutation(X.shape[0])].tocsr()
    if n > X.shape[0]:
        X = sp.vstack([X] * -(-n // X.shape[0]), format="csr")
    X = X[:n]
    if density is not None:
        d0 = X.nnz / (X.shape[0] * X.shape[1])
        if density >= 1.0:
            X = sp.csr_matrix(np.ones(X.shape))
        elif density > d0:
            # P(entry non-zero) = 1 - (1 - d0)(1 - p) = density
            p = 1.0 - (1.0 - density) / (1.0 - d0)
            B = sp.random(*X.shape, density=p, format="csr", random_state=1)
            X = (X + B).tocsr()
            X.data[:] = 1.0
    if dense:
        X = X.toarray()
    return X


def setup_child(n, density=None, dense=False, gamma=1.0):
    """Load the rows and warm up imports / first calls on 64 rows (not timed)."""
    from fastkpca.decomposition import RandomFeatureKPCA

    X = adult_rows(n, density, dense)
    RandomFeatureKPCA(4, gamma=gamma, n_random_features=64, features="rff", random_state=0).fit(
        X[:64]
    )
    return X


def work_matmul(X, gamma, m):
    W = np.random.default_rng(0).standard_normal((X.shape[1], m // 2)) * np.sqrt(2 * gamma)
    P = X @ W
    return {"shape": list(P.shape)}


def work_features(X, gamma, m):
    """The random features of all rows in the fit's row blocks, discarded (one pass's cost)."""
    from fastkpca._utils import DEFAULT_BLOCK_ROWS
    from fastkpca.features import draw_feature_map, feature_blocks
    from fastkpca.kernels import make_kernel

    fmap = draw_feature_map(
        "rff", make_kernel("rbf", gamma=gamma), m, X.shape[1], np.random.default_rng(0)
    )
    blocks = ((s, X[s : s + DEFAULT_BLOCK_ROWS]) for s in range(0, X.shape[0], DEFAULT_BLOCK_ROWS))
    total = 0.0
    for _, Z in feature_blocks(blocks, fmap):
        total += float(Z[0, 0])
    return {"checksum": total}


def make_model(method, gamma, m, seed=0, n_buckets=None):
    from fastkpca.decomposition import ExactKPCA, RandomFeatureKPCA

    if method == "exact_kpca":
        return ExactKPCA(N_COMPONENTS, gamma=gamma)
    common = dict(gamma=gamma, n_random_features=m, features="rff", random_state=seed)
    if method == "rf_exact":
        return RandomFeatureKPCA(N_COMPONENTS, solver="exact", **common)
    passes = {"countsketch_2pass": 2, "countsketch_1pass": 1}[method]
    return RandomFeatureKPCA(
        N_COMPONENTS, solver="countsketch", n_passes=passes, n_buckets=n_buckets, **common
    )


def work_fit(X, method, gamma, m):
    model = make_model(method, gamma, m).fit(X)
    return {"eigenvalues": [float(v) for v in model.eigenvalues_]}


def work_sketch_solve(X, gamma, m):
    """The n-independent step of ``solver="countsketch"``: the top q = k + 10 right singular
    vectors of a t x m sketch (t = 2000, the default), as the fit computes them."""
    from fastkpca.statistics.feature_countsketch import _sketch_subspace

    rng = np.random.default_rng(0)
    t = 2000
    SZ = rng.standard_normal((t, m))
    vals, _ = _sketch_subspace(SZ, rng.standard_normal(t), np.zeros(m), N_COMPONENTS + 10, rng)
    return {"top": float(vals[0])}


def setup_sketch(n, gamma, m, t=2000):
    """The centered-sketch inputs of an Adult fit (n rows, t buckets), built untimed."""
    from fastkpca._utils import DEFAULT_BLOCK_ROWS
    from fastkpca.features import draw_feature_map
    from fastkpca.kernels import make_kernel
    from fastkpca.statistics.feature_countsketch import feature_countsketch

    X = adult_rows(n)
    fmap = draw_feature_map(
        "rff", make_kernel("rbf", gamma=gamma), m, X.shape[1], np.random.default_rng(0)
    )
    blocks = [(s, X[s : s + DEFAULT_BLOCK_ROWS]) for s in range(0, X.shape[0], DEFAULT_BLOCK_ROWS)]
    sk = feature_countsketch(blocks, fmap, t, 0)
    return sk.SZ, sk.S1, sk.mean


def work_sketch_svd(data):
    """The n-independent step of ``solver="countsketch"``: the top q = k + 10 right singular
    vectors of the centered t x m sketch of Adult's features, as the fit computes them."""
    from fastkpca.statistics.feature_countsketch import _sketch_subspace

    SZ, S1, mean = data
    vals, _ = _sketch_subspace(SZ, S1, mean, N_COMPONENTS + 10, np.random.default_rng(0))
    return {"top": float(vals[0])}


WORK = {"matmul": work_matmul, "features": work_features, "sketch_solve": work_sketch_solve}
FIT_METHODS = ("countsketch_2pass", "countsketch_1pass", "rf_exact", "exact_kpca")


def timed(method, n, gamma, m, repeats, density=None, dense=False):
    """Best-of-``repeats`` seconds of one method, each run in a fresh process."""
    setup_kw = dict(n=n, density=density, dense=dense, gamma=gamma)
    if method in WORK:
        work, work_kw = WORK[method], dict(gamma=gamma, m=m)
    else:
        work, work_kw = work_fit, dict(method=method, gamma=gamma, m=m)
    runs = []
    for _ in range(repeats):
        out = measure(setup_child, work, setup_kwargs=setup_kw, work_kwargs=work_kw)
        if not out["ok"]:
            raise RuntimeError(f"{method} n={n}: {out['error']}\n{out.get('traceback', '')}")
        runs.append(out)
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "seconds": best["seconds"],
        "all_seconds": [r["seconds"] for r in runs],
        "extra_peak_mb": best["extra_peak_mb"],
    }


# ------------------------------------------------------------------------------------------------
# accuracy (in this process: nothing here is timed)
# ------------------------------------------------------------------------------------------------
def centered_gram(X, gamma):
    from fastkpca.kernels import make_kernel

    G = make_kernel("rbf", gamma=gamma)(X)
    r = G.mean(axis=1)
    G -= r[:, None]
    G -= r[None, :]
    G += r.mean()
    return G


def exact_top(G, k):
    from fastkpca.solvers import eigh_topk

    vals, vecs = eigh_topk(G.copy(), k, method="lanczos", rng=0)
    return vals, vecs


def model_accuracy(model, X, G, lam, fro2):
    """Guarantee-(2) ratio, Gram-error ratio and eigenvalue errors of one fitted model."""
    from fastkpca.metrics import eigenvalue_error

    T = np.asarray(model.transform(X), dtype=np.float64)
    Q, _ = np.linalg.qr(T)
    trG = float(np.trace(G))
    proj = (trG - float(np.einsum("ij,ij->", Q, G @ Q))) / (trG - float(lam.sum()))
    D = G - T @ T.T
    gram = np.sqrt(float(np.einsum("ij,ij->", D, D)) / (fro2 - float(np.sum(lam**2))))
    return {
        "projection_ratio": float(proj),
        "gram_error_ratio": float(gram),
        "eigenvalue_error_vs_exact_kpca": eigenvalue_error(model.eigenvalues_, lam),
        "eigenvalues": [float(v) for v in model.eigenvalues_],
    }


def accuracy(n, gamma, m, buckets, seeds):
    X = adult_rows(n)
    G = centered_gram(X, gamma)
    lam, _ = exact_top(G, N_COMPONENTS)
    fro2 = float(np.einsum("ij,ij->", G, G))
    out = {
        "n": n,
        "nnz": int(X.nnz),
        "exact_eigenvalues": [float(v) for v in lam],
        # the optimum's share of the centered trace (how hard the rank-k problem is)
        "top_k_share_of_trace": float(lam.sum() / np.trace(G)),
        "methods": {},
        "bucket_sweep": [],
    }
    for method in ("rf_exact", "countsketch_2pass", "countsketch_1pass"):
        model = make_model(method, gamma, m).fit(X)
        out["methods"][method] = model_accuracy(model, X, G, lam, fro2)
        if method == "rf_exact":
            ref = model.eigenvalues_
        else:
            from fastkpca.metrics import eigenvalue_error

            out["methods"][method]["eigenvalue_error_vs_rf_exact"] = eigenvalue_error(
                model.eigenvalues_, ref
            )
    for t in buckets:
        for method in ("countsketch_2pass", "countsketch_1pass"):
            for seed in seeds:
                model = make_model(method, gamma, m, seed=seed, n_buckets=t).fit(X)
                row = model_accuracy(model, X, G, lam, fro2)
                row.pop("eigenvalues")
                out["bucket_sweep"].append(dict(row, n_buckets=t, method=method, seed=seed))
    return out


# ------------------------------------------------------------------------------------------------
# figure
# ------------------------------------------------------------------------------------------------
LABELS = {
    "matmul": "X @ W only (the nnz-dependent step)",
    "features": "features only (X @ W + cos/sin)",
    "countsketch_2pass": "countsketch, 2 passes (default)",
    "countsketch_1pass": "countsketch, 1 pass",
    "rf_exact": 'solver="exact" (m x m)',
    "exact_kpca": "ExactKPCA",
}


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    rows = res["rows"]
    for method in LABELS:
        pts = [(r["nnz"], r["times"][method]["seconds"]) for r in rows if method in r["times"]]
        if pts:
            ax.loglog(*zip(*pts, strict=True), "o-", label=LABELS[method])
    sizes = ", ".join(str(r["n"]) for r in rows)
    ax.set_xlabel(f"nnz(X) (Adult row subsets, n = {sizes})")
    ax.set_ylabel(f"fit seconds (best of {res['params']['repeats']}, own process)")
    ax.axhline(
        res["sketch_solve"]["seconds"],
        color="grey",
        ls="--",
        lw=1,
        label="SVD of the t x m sketch alone (independent of n)",
    )
    ax.set_title("time against nnz(X): growing n")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1]
    dens = res["density"]
    for method in ("matmul", "features", "countsketch_2pass", "countsketch_1pass"):
        pts = [(r["nnz"], r["times"][method]["seconds"]) for r in dens if method in r["times"]]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=LABELS[method])
    dense = res.get("dense_input")
    if dense:
        for method, marker in (("features", "s"), ("countsketch_2pass", "D")):
            ax.plot(
                dense["nnz"],
                dense["times"][method]["seconds"],
                marker,
                mfc="none",
                ms=9,
                label=f"{LABELS[method]}, dense ndarray",
            )
    ax.set_xlabel(f"nnz(X) (n = {dens[0]['n']} fixed, extra random unit entries)")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title("time against nnz(X): growing density")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)

    ax = axes[2]
    acc = res["accuracy"][-1]
    sweep = acc["bucket_sweep"]
    for method, marker in (("countsketch_2pass", "o-"), ("countsketch_1pass", "s--")):
        ts = sorted({r["n_buckets"] for r in sweep})
        med = [
            np.median(
                [
                    r["projection_ratio"]
                    for r in sweep
                    if r["n_buckets"] == t and r["method"] == method
                ]
            )
            for t in ts
        ]
        ax.semilogx(ts, med, marker, label=LABELS[method])
    ax.axhline(
        acc["methods"]["rf_exact"]["projection_ratio"],
        color="k",
        ls=":",
        label='solver="exact", same features',
    )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("CountSketch rows t (n_buckets)")
    ax.set_ylabel("projection error / optimum (paper eq. 2; 1 = exact KPCA)")
    ax.set_title(f"accuracy, Adult n = {acc['n']}, m = {res['params']['m']}, k = {N_COMPONENTS}")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small run (< 2 min)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--m", type=int, default=N_FEATURES)
    p.add_argument("--exact-max-n", type=int, default=None)
    args = p.parse_args(argv)

    from fastkpca.kernels import resolve_gamma

    quick = args.quick
    repeats = args.repeats or (1 if quick else 2)
    m = args.m
    if quick:
        sizes, density_n, densities = [2000, 8000], 4000, [None, 1.0]
        methods = ("matmul", "features", "countsketch_2pass", "rf_exact")
        acc_sizes, buckets, seeds = [1000], [50, 500, 2000], [0]
    else:
        sizes, density_n, densities = (
            [4000, 16000, 48842, 97684, 195368],
            48842,
            [None, 0.25, 0.5, 1.0],
        )
        methods = ("matmul", "features", "countsketch_2pass", "countsketch_1pass", "rf_exact")
        acc_sizes, buckets, seeds = (
            [2000, 4000, 8000],
            [50, 100, 200, 500, 1000, 2000, 4000],
            [0, 1],
        )
    exact_max_n = args.exact_max_n or (2000 if quick else 8000)

    X_all = adult_rows(48842)
    gamma = resolve_gamma("median", X_all, rng=np.random.default_rng(0))
    t0 = time.time()
    res = {
        "description": (
            "Musco & Woodruff 2017 on Adult (a9a train + test, tiled beyond 48842 rows): "
            "RandomFeatureKPCA(features='rff', "
            "solver='countsketch') time against nnz(X) and accuracy against exact KPCA"
        ),
        "params": {
            "m": m,
            "k": N_COMPONENTS,
            "gamma": gamma,
            "gamma_rule": "median heuristic",
            "repeats": repeats,
            "quick": quick,
            "n_buckets_default": "max(2000, 50 (k + 10))",
        },
        "machine": machine_info(),
        "load_average_start": os.getloadavg(),
        "rows": [],
        "density": [],
    }

    runs = [
        measure(setup_sketch, work_sketch_svd, setup_kwargs=dict(n=8000, gamma=gamma, m=m))
        for _ in range(repeats)
    ]
    res["sketch_solve"] = {
        "seconds": min(r["seconds"] for r in runs),
        "all_seconds": [r["seconds"] for r in runs],
        "what": "top-20 right singular vectors of the centered 2000 x m sketch of 8000 Adult rows",
    }
    print(f"sketch solve (t = 2000, m = {m}): {res['sketch_solve']['seconds']:.2f} s", flush=True)
    for n in sizes:
        X = adult_rows(n)
        row = {"n": n, "nnz": int(X.nnz), "times": {}}
        for method in methods + (("exact_kpca",) if n <= exact_max_n else ()):
            row["times"][method] = timed(method, n, gamma, m, repeats)
            print(
                f"rows n={n:6d} nnz={X.nnz:8d} {method:18s} "
                f"{row['times'][method]['seconds']:7.2f} s",
                flush=True,
            )
        res["rows"].append(row)

    for density in densities:
        X = adult_rows(density_n, density)
        row = {
            "n": density_n,
            "density": X.nnz / (X.shape[0] * X.shape[1]),
            "nnz": int(X.nnz),
            "times": {},
        }
        for method in methods[:-1]:
            row["times"][method] = timed(method, density_n, gamma, m, repeats, density=density)
            print(
                f"density {row['density']:.3f} nnz={X.nnz:8d} {method:18s} "
                f"{row['times'][method]['seconds']:7.2f} s",
                flush=True,
            )
        res["density"].append(row)
    if not quick:
        res["dense_input"] = {"n": density_n, "nnz": density_n * X.shape[1], "times": {}}
        for method in ("features", "countsketch_2pass"):
            res["dense_input"]["times"][method] = timed(
                method, density_n, gamma, m, repeats, density=1.0, dense=True
            )

    res["accuracy"] = []
    for n in acc_sizes:
        res["accuracy"].append(accuracy(n, gamma, m, buckets if n == acc_sizes[-1] else [], seeds))
        a = res["accuracy"][-1]["methods"]
        print(
            f"accuracy n={n}: "
            + ", ".join(
                f"{k} proj {v['projection_ratio']:.4f} "
                f"eig {v['eigenvalue_error_vs_exact_kpca']:.4f}"
                for k, v in a.items()
            ),
            flush=True,
        )
    res["load_average_end"] = os.getloadavg()
    res["total_seconds"] = time.time() - t0

    suffix = "_quick" if quick else ""
    save_json(res, os.path.join(RESULTS, f"countsketch_paper{suffix}.json"))
    plot(res, os.path.join(RESULTS, f"countsketch_paper_adult{suffix}.png"))
    print(f"done in {res['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
