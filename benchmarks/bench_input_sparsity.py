"""Input-sparsity-time random features (``input_sketch``): fit time against nnz(X) and m.

``RandomFeatureKPCA(features="rff", solver="countsketch", input_sketch=t)`` (Musco & Woodruff
2017, section 3.2.2: a CountSketch of the inputs to t coordinates, then the dense t x D Gaussian
frequencies) against the exact-features path (``input_sketch=None``: ``X @ W``, O(nnz(X) D) on
CSR), Gaussian kernel, k = 10, two-pass countsketch solver (the features are computed twice).

1. Synthetic bag of words (unit-norm CSR rows, ~nnz words each, half from the row's topic among
   10): d = 10^5, n = 20000, m = 1000, nnz per row 25 / 50 / 100 / 200 (fixed m); m = 250 / 500 /
   1000 at 100 non-zeros (fixed nnz); d = 10^6 at 100 non-zeros, sketched only (the exact
   path would hold a 10^6 x 500 float64 frequency matrix and its copies, ~14 GB).  Timed
   alone: ``features`` (the map drawn, then applied to all rows in the fit's blocks, the
   features discarded: one pass's feature cost, with the draw of the d x D or t x D
   frequencies).
2. Accuracy: relative rank-k error (:func:`fastkpca.metrics.relative_rank_k_error`, 1 = exact
   KPCA) on 2000 rows, and ``||T T^T - T0 T0^T||_F / ||T0 T0^T||_F`` between the rank-k
   embedding Grams of each model and of the exact-features one (T0, same seed).  That
   distance is relative to the rank-k part only, small next to the Gram's residual for these
   high-rank kernels, so it can exceed 1 while the rank-k errors differ by a few percent.
3. Real data: a9a (Adult train, 32561 x 123, ~14 non-zeros a row) and 50000 rows of kddcup
   (dense, 41 columns), gamma from the median heuristic: narrow inputs, where t must be below
   d for the sketch to do anything.

Each fit runs in its own process (``_harness.measure``), best of ``--repeats`` (default 1: the
machine is shared).  ``--quick``: smaller n and fewer points.

Results: ``benchmarks/results/bench_input_sparsity[_quick].json``.
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

from fastkpca.features import frequency_bytes  # noqa: E402

K = 10


# ------------------------------------------------------------------------------------------------
# data (module level: the spawned children re-import these)
# ------------------------------------------------------------------------------------------------
def real_rows(name, n):
    from fastkpca.datasets import load

    X, _ = load(name, subset="train") if name == "adult" else load(name)
    X = X[np.random.default_rng(0).permutation(X.shape[0])[:n]]
    return X.tocsr() if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)


def setup(source, n, d=None, nnz=None):
    """The rows (not timed), and a warm-up fit on 64 of them."""
    from fastkpca.datasets import make_bag_of_words
    from fastkpca.decomposition import RandomFeatureKPCA

    X = make_bag_of_words(n, d, nnz, random_state=0) if source == "bow" else real_rows(source, n)
    RandomFeatureKPCA(4, n_random_features=64, features="rff", gamma="median", random_state=0).fit(
        X[:64]
    )
    return X


def _model(gamma, m, input_sketch):
    from fastkpca.decomposition import RandomFeatureKPCA

    return RandomFeatureKPCA(
        K,
        gamma=gamma,
        n_random_features=m,
        features="rff",
        solver="countsketch",
        input_sketch=input_sketch,
        random_state=0,
    )


def work_fit(X, gamma, m, input_sketch):
    model = _model(gamma, m, input_sketch).fit(X)
    return {
        "map": type(model.feature_map_).__name__,
        "n_buckets": getattr(model.feature_map_, "n_buckets", None),
        "gamma": float(model.kernel_.gamma),
    }


def work_features(X, gamma, m, input_sketch):
    """One pass's feature cost: the map over all rows in the fit's blocks, discarded."""
    from fastkpca._utils import DEFAULT_BLOCK_ROWS
    from fastkpca.features import draw_feature_map, feature_blocks
    from fastkpca.kernels import make_kernel

    kernel = make_kernel("rbf", gamma=gamma, X=X[:DEFAULT_BLOCK_ROWS], rng=np.random.default_rng(0))
    fmap = draw_feature_map(
        "rff", kernel, m, X.shape[1], np.random.default_rng(0), input_sketch=input_sketch
    )
    blocks = ((s, X[s : s + DEFAULT_BLOCK_ROWS]) for s in range(0, X.shape[0], DEFAULT_BLOCK_ROWS))
    total = 0.0
    for _, Z in feature_blocks(blocks, fmap):
        total += float(Z[0, 0])
    return {"checksum": total}


def work_accuracy(X, gamma, m, sketches):
    """Relative rank-k error of each setting against exact KPCA, and the distance of each
    model's rank-k embedding Gram to the exact-features model's."""
    from fastkpca.metrics import relative_rank_k_error

    Xd = X.toarray() if sp.issparse(X) else X
    out, grams = {}, {}
    for sketch in sketches:
        t0 = time.perf_counter()
        model = _model(gamma, m, sketch).fit(X)
        seconds = time.perf_counter() - t0
        T = model.transform(X)
        grams[str(sketch)] = T @ T.T
        out[str(sketch)] = {
            "fit_seconds": seconds,
            "relative_rank_k_error": relative_rank_k_error(Xd, T, model.kernel_),
            "n_buckets": getattr(model.feature_map_, "n_buckets", None),
        }
    ref = grams["None"]
    for key, G in grams.items():
        out[key]["gram_distance_to_exact_features"] = float(
            np.linalg.norm(G - ref) / np.linalg.norm(ref)
        )
    return out


def run(work, setup_kw, work_kw, repeats):
    runs = []
    for _ in range(repeats):
        res = measure(setup, work, setup_kwargs=setup_kw, work_kwargs=work_kw)
        if not res["ok"]:
            raise RuntimeError(f"{setup_kw} {work_kw}: {res['error']}\n{res.get('traceback')}")
        runs.append(res)
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "seconds": best["seconds"],
        "all_seconds": [r["seconds"] for r in runs],
        "extra_peak_mb": best["extra_peak_mb"],
        "result": best["result"],
    }


def timing_row(setup_kw, gamma, m, sketch, repeats):
    kw = dict(gamma=gamma, m=m, input_sketch=sketch)
    fit = run(work_fit, setup_kw, kw, repeats)
    feats = run(work_features, setup_kw, kw, repeats)
    row = {
        **{k: v for k, v in setup_kw.items()},
        "m": m,
        "input_sketch": sketch,
        "n_buckets": fit["result"]["n_buckets"],
        "fit_seconds": fit["seconds"],
        "fit_all_seconds": fit["all_seconds"],
        "fit_extra_peak_mb": fit["extra_peak_mb"],
        "features_seconds": feats["seconds"],
    }
    print(
        f"  {setup_kw} m={m} input_sketch={sketch!s:5}: fit {fit['seconds']:.2f} s, "
        f"features {feats['seconds']:.2f} s, +{fit['extra_peak_mb']:.0f} MB",
        flush=True,
    )
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    quick = args.quick
    n = 5000 if quick else 20000
    sketches = (None, "auto", 128)
    out = {"machine": machine_info(), "quick": quick, "k": K, "load_start": os.getloadavg()}
    t_start = time.time()

    print("fixed m = 1000, growing nnz per row (d = 10^5)", flush=True)
    out["vary_nnz"] = [
        timing_row(dict(source="bow", n=n, d=10**5, nnz=nnz), 1.0, 1000, s, args.repeats)
        for nnz in ((25, 200) if quick else (25, 50, 100, 200))
        for s in sketches
    ]
    print("fixed nnz = 100, growing m (d = 10^5)", flush=True)
    out["vary_m"] = [
        timing_row(dict(source="bow", n=n, d=10**5, nnz=100), 1.0, m, s, args.repeats)
        for m in ((250, 1000) if quick else (250, 500, 1000))
        for s in sketches
    ]
    print("d = 10^6, nnz = 100, m = 1000 (sketched only)", flush=True)
    out["wide"] = [
        timing_row(dict(source="bow", n=n, d=10**6, nnz=100), 1.0, 1000, s, args.repeats)
        for s in sketches[1:]
    ]
    # The exact path would draw and hold a 10^6 x 500 frequency matrix: what fit asks for.
    out["wide_exact_features_bytes"] = frequency_bytes("rff", 500, 10**6)
    print(f"  exact features would need {out['wide_exact_features_bytes'] / 2**30:.1f} GiB")
    print("real data (gamma from the median heuristic)", flush=True)
    out["real"] = [
        timing_row(dict(source=name, n=rows), "median", 1000, s, args.repeats)
        for name, rows, options in (
            ("adult", 32561, (None, 64, 32)),
            ("kddcup", 10000 if quick else 50000, (None, 32, 16)),
        )
        for s in options
    ]
    print("accuracy (2000 rows; exact KPCA on them)", flush=True)
    acc_n = 1000 if quick else 2000
    out["accuracy"] = []
    for setup_kw, gamma, opts in (
        (dict(source="bow", n=acc_n, d=10**5, nnz=100), 1.0, (None, "auto", 256, 128, 64)),
        (dict(source="adult", n=acc_n), "median", (None, 64, 32)),
        (dict(source="kddcup", n=acc_n), "median", (None, 32, 16)),
    ):
        res = run(work_accuracy, setup_kw, dict(gamma=gamma, m=1000, sketches=opts), 1)
        out["accuracy"].append({**setup_kw, "m": 1000, "results": res["result"]})
        for key, r in res["result"].items():
            print(
                f"  {setup_kw} input_sketch={key:5}: rel. rank-k error "
                f"{r['relative_rank_k_error']:.4f}, Gram distance to exact features "
                f"{r['gram_distance_to_exact_features']:.4f}",
                flush=True,
            )
    out["load_end"] = os.getloadavg()
    out["total_seconds"] = time.time() - t_start
    name = "bench_input_sparsity_quick.json" if quick else "bench_input_sparsity.json"
    save_json(out, os.path.join(results_dir(), name))
    print(f"wrote {name} ({out['total_seconds']:.0f} s)")


if __name__ == "__main__":
    main()
