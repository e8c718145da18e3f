"""AutoKPCA against every method's fastest fit that meets the same tolerance, found with hindsight.

For each data set (pendigits, cpu_act, adult (a9a, sparse), mnist, kddcup, RandomNoisy) and each
``tol`` in (0.05, 0.01) the script measures, each fit in its own process (``_harness.measure``):

- ``AutoKPCA(10, tol=tol)``: its time, peak memory, the method and size it chose;
- ``NystromKPCA(10, n_landmarks="auto", tol=tol)`` and ``RandomFeatureKPCA(10,
  n_random_features="auto", tol=tol)``: the size each chose and its time;
- a grid per method (exact where its Gram fits; Nystrom with uniform and with randomly pivoted
  Cholesky landmarks at 32, 64, ... landmarks; random features and random features + Frequent
  Directions at 128, 256, ... features), walked up each method's sizes until the true error
  meets the smallest tol;

and, for every fitted model, the true relative rank-k error ``||Kc - T T^T||_F / ||Kc -
(Kc)_k||_F`` with the exact centered Gram of the evaluation rows: all n rows when n <=
EXACT_EVAL_ROWS (the error itself, exactly: Kc of all rows, its top-k eigenvalues by Lanczos),
else a uniform subsample of EVAL_ROWS rows (exact KPCA on that probe, T centered on it; the
models are fitted on all rows; this reference sits below the all-rows optimum by the probe's
own fit, so a set evaluated this way has a floor above 1, measured by exact KPCA's own fit when
it is in the grid).  Times are of ``fit`` alone (the projection of the evaluation rows
follows, untimed), the best of up to REPEATS runs in a process whose imports were warmed by a
fit on WARMUP_ROWS rows.  The
hindsight-best of a tol is the fastest grid fit whose true error is at most ``1 + tol``.
Goals (issue 31): the true error of AutoKPCA and of both estimators' sizes by tol <= 1 + tol in
every case; AutoKPCA's time <= max(1.5x the hindsight-best, the hindsight-best + 0.3 s) in at
least 10 of the 12 cases; its peak memory within the default budget (80 % of the memory
available).

    .venv/bin/python benchmarks/bench_auto.py            # full sizes (RandomNoisy 10^6 rows)
    .venv/bin/python benchmarks/bench_auto.py --quick    # at most QUICK_ROWS rows per set
    .venv/bin/python benchmarks/bench_auto.py --quick --sets pendigits cpu_act
    .venv/bin/python benchmarks/bench_auto.py --quick --remeasure-auto  # AutoKPCA and each
        # hindsight-best fit timed again (new processes), the rest of the results file kept

Writes ``benchmarks/results/bench_auto[_quick].json``.  The machine is shared and noisy: compare
times within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine_info, measure, results_dir, save_json  # noqa: E402

DATA_HOME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
K = 10
TOLS = (0.05, 0.01)
SETS = ("pendigits", "cpu_act", "adult", "mnist", "kddcup", "random_noisy")
#: Rows of each set in the full run (None: all) and in ``--quick``.
FULL_ROWS = {"random_noisy": 1_000_000}
QUICK_ROWS = 20_000
#: The true error on all rows up to this many (their n x n Gram: 3.2 GB at 20,000) ...
EXACT_EVAL_ROWS = 20_000
#: ... and above, on a uniform subsample of this many rows (exact KPCA on that probe).
EVAL_ROWS = 8000
#: Rows of the warm-up fit in each measuring process (imports, thread pools, BLAS).
WARMUP_ROWS = 300
#: Each fit's time is the best of REPEATS runs in its process, fewer once the runs add up to
#: REPEAT_BELOW_SECONDS (sub-second fits on a shared machine vary by tens of percent).
REPEATS = 3
REPEAT_BELOW_SECONDS = 5.0
#: Exact KPCA is in the grid up to this many rows (its Gram: 8 n^2 bytes).
EXACT_GRID_ROWS = 12_000
LANDMARK_GRID = (32, 64, 128, 256, 512, 1024, 2048, 4096)
FEATURE_GRID = (128, 256, 512, 1024, 2048, 4096, 8192)
#: The time goal: AutoKPCA within max(TIME_FACTOR x, + TIME_SLACK_SECONDS) of the hindsight-best.
TIME_FACTOR = 1.5
TIME_SLACK_SECONDS = 0.3
#: A method's walk up its sizes ends at a fit slower than this many times AutoKPCA's slowest
#: (larger sizes are slower still: none of them can be within 1.5x of AutoKPCA's time).
GRID_TIME_FACTOR = 2.0


def load_data(name, n):
    """The first n rows (float64, dense ones standardized), and the kernel's gamma = 1 / d."""
    if name == "random_noisy":
        from fastkpca.datasets import make_random_noisy

        X = make_random_noisy(n or 1_000_000, 100, random_state=0)
    else:
        from fastkpca.datasets import load

        X, _ = load(name, data_home=os.environ.get("FASTKPCA_DATA", DATA_HOME), max_rows=n)
        X = X[:n] if n else X
    if hasattr(X, "toarray"):
        return X.tocsr().astype(np.float64)
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    return np.ascontiguousarray((X - X.mean(axis=0)) / np.where(std > 0, std, 1.0))


def warmed_data(name, n):
    """:func:`load_data`, then a fit of every estimator the script measures on its first
    WARMUP_ROWS rows (not timed): the timed fit then pays no first import or thread start."""
    import fastkpca

    X = load_data(name, n)
    head = X[:WARMUP_ROWS]
    gamma = 1.0 / X.shape[1]
    for cls_name, params in (
        ("ExactKPCA", {}),
        ("NystromKPCA", {"n_landmarks": 32}),
        ("NystromKPCA", {"n_landmarks": 32, "landmarks": "rpcholesky"}),
        ("RandomFeatureKPCA", {"n_random_features": 64}),
        ("StreamingKPCA", {"n_random_features": 64}),
        ("AutoKPCA", {}),
    ):
        getattr(fastkpca, cls_name)(K, gamma=gamma, random_state=0, **params).fit(head)
    return X


def fit(data, *, cls_name, params, eval_idx):
    """The measured work: the fit, timed alone; then the evaluation rows' embedding and what
    was chosen."""
    import fastkpca

    X = data
    times = []
    while len(times) < REPEATS and sum(times) < REPEAT_BELOW_SECONDS:
        start = time.perf_counter()
        model = getattr(fastkpca, cls_name)(**params).fit(X)
        times.append(time.perf_counter() - start)
    out = {"fit_seconds": min(times), "fit_runs": len(times)}
    out["embedding"] = np.asarray(model.transform(X[eval_idx]), dtype=np.float64)
    if cls_name == "AutoKPCA":
        chosen = [e for e in model.report_ if e["status"] == "chosen"][0]
        out.update(
            method=model.method_,
            size=chosen["size"],
            params=chosen["params"],
            estimate=chosen["error"],
            stderr=chosen["error_stderr"],
            report=model.report_,
        )
    elif params.get("tol") is not None:  # a size chosen by tol: what was chosen and tried
        out.update(
            method="nystrom" if cls_name == "NystromKPCA" else "random-features",
            size=int(getattr(model, "n_landmarks_", None) or model.n_random_features_),
            size_history=[[int(c), float(e)] for c, e in model.size_history_],
        )
    return out


def true_error(G_c, fro2, tail2, T, subsample):
    """``||Kc - T T^T||_F / ||Kc - (Kc)_k||_F`` from the evaluation rows' centered Gram (T
    centered on the evaluation rows when they are a subsample)."""
    if subsample:
        T = T - T.mean(axis=0)
    num2 = fro2 - 2.0 * float(np.sum(T * (G_c @ T))) + float(np.sum((T.T @ T) ** 2))
    return float(np.sqrt(max(num2, 0.0) / tail2))


def evaluation(X, gamma, seed=0):
    """The evaluation rows (all when n <= EXACT_EVAL_ROWS, else a uniform subsample), their
    centered Gram, ``||Gc||_F^2`` and the rank-K tail ``||Gc||_F^2 - sum_{i <= K} lambda_i^2``."""
    from fastkpca._centering import center_gram_inplace
    from fastkpca.kernels import RBF
    from fastkpca.solvers import eigh_topk

    n = X.shape[0]
    rng = np.random.default_rng(seed)
    subsample = n > EXACT_EVAL_ROWS
    idx = np.sort(rng.choice(n, EVAL_ROWS, replace=False)) if subsample else np.arange(n)
    G = np.asarray(RBF(gamma)(X[idx]), dtype=np.float64)
    center_gram_inplace(G)
    fro2 = float(np.einsum("ij,ij->", G, G))
    vals, _ = eigh_topk(G.copy(), K, method="lanczos", rng=0, overwrite=True)
    return idx, G, fro2, fro2 - float(np.sum(vals**2)), subsample


def grid(name, method):
    """(estimator class, params for a size) of each grid method."""
    if method == "exact":
        return "ExactKPCA", [None]
    if method == "nystrom":
        return "NystromKPCA", LANDMARK_GRID
    if method == "nystrom-rpcholesky":
        return "NystromKPCA", LANDMARK_GRID
    return ("RandomFeatureKPCA" if method == "random-features" else "StreamingKPCA"), FEATURE_GRID


def grid_params(method, size, gamma, sparse_wide):
    params = {"n_components": K, "gamma": gamma, "random_state": 0}
    if method == "nystrom":
        params["n_landmarks"] = size
    elif method == "nystrom-rpcholesky":
        params.update(n_landmarks=size, landmarks="rpcholesky")
    elif method in ("random-features", "streaming"):
        params["n_random_features"] = size
        if sparse_wide:
            params["features"] = "rff"
        if method == "streaming":
            params["sketch_size"] = max(50, size // 8)
    return params


def run_set(name, n, tols, log, tol_fit_timeout=3600, previous=None):
    """One set's results; with ``previous`` (this set's results from an earlier run) only
    AutoKPCA and each tol's hindsight-best fit are timed again (``--remeasure-auto``), the
    estimators' sizes by tol and the rest of the grid kept."""
    X = load_data(name, n)
    n, d = X.shape
    gamma = 1.0 / d
    sparse = hasattr(X, "toarray")
    idx, G, fro2, tail2, subsample = evaluation(X, gamma)
    setup = {"name": name, "n": n}
    out = {
        "name": name,
        "n": n,
        "d": d,
        "sparse": sparse,
        "eval_rows": int(idx.size),
        "eval": "subsample" if subsample else "all rows",
    }
    log(f"{name}: {n} x {d}{' sparse' if sparse else ''}, gamma = 1/{d}")

    def timed(cls_name, params, timeout=3600):
        res = measure(
            warmed_data,
            fit,
            setup_kwargs={"name": setup["name"], "n": setup["n"]},
            work_kwargs={"cls_name": cls_name, "params": params, "eval_idx": idx},
            timeout=timeout,
        )
        if not res.get("ok"):
            return {"ok": False, "error": res.get("error")}
        result = res["result"]
        err = true_error(G, fro2, tail2, result.pop("embedding"), subsample)
        return {
            "ok": True,
            "seconds": result.pop("fit_seconds"),
            "wall_seconds": res["seconds"],
            "extra_peak_mb": res["extra_peak_mb"],
            "true_error": err,
            **result,
        }

    autos = {}
    for tol in tols:
        r = timed("AutoKPCA", {"n_components": K, "gamma": gamma, "tol": tol, "random_state": 0})
        autos[str(tol)] = r
        if r["ok"]:
            log(
                f"  auto tol={tol}: {r['method']} {r['size']} true {r['true_error']:.4f} "
                f"in {r['seconds']:.2f} s"
            )
        else:
            log(f"  auto tol={tol}: failed: {r['error']}")
    out["auto"] = autos
    if previous is not None:
        out["tol_fits"] = tol_fits = previous["tol_fits"]
        out["grid"] = fits = previous["grid"]
        for tol in tols:
            meeting = [f for f in fits if f["ok"] and f["true_error"] <= 1 + tol]
            if not meeting:
                continue
            best = min(meeting, key=lambda f: f["seconds"])
            cls_name, _ = grid(name, best["method"])
            size = None if best["method"] == "exact" else best["size"]
            params = grid_params(best["method"], size, gamma, sparse and d >= 1000)
            r = timed(cls_name, params)
            if r["ok"]:
                best.update(seconds=r["seconds"], extra_peak_mb=r["extra_peak_mb"], retimed=True)
                log(f"  {best['method']} {best['size']} again: {r['seconds']:.2f} s")
        out["remeasured"] = True
        out["cases"] = _cases(out, tols)
        return out
    #: the estimators' own sizes by tol, on the same rows
    tol_fits: dict = {}
    for tol in tols:
        for cls_name, size_param in (
            ("NystromKPCA", "n_landmarks"),
            ("RandomFeatureKPCA", "n_random_features"),
        ):
            params = {"n_components": K, "gamma": gamma, "tol": tol, "random_state": 0}
            params[size_param] = "auto"
            r = timed(cls_name, params, timeout=tol_fit_timeout)
            tol_fits[f"{cls_name} {tol}"] = r
            if r["ok"]:
                log(
                    f"  {cls_name}(tol={tol}): {r['size']} true {r['true_error']:.4f} in "
                    f"{r['seconds']:.2f} s"
                )
            else:
                log(f"  {cls_name}(tol={tol}): failed: {r['error']}")
    out["tol_fits"] = tol_fits
    slowest_auto = max((r["seconds"] for r in autos.values() if r["ok"]), default=60.0)
    fits = []
    methods = ["nystrom", "nystrom-rpcholesky", "random-features", "streaming"]
    if n <= EXACT_GRID_ROWS:
        methods.insert(0, "exact")
    for method in methods:
        cls_name, sizes = grid(name, method)
        for size in sizes:
            if size is not None and size > n:
                break
            params = grid_params(method, size, gamma, sparse and d >= 1000)
            r = timed(cls_name, params)
            r.update(method=method, size=size if size is not None else n)
            fits.append(r)
            if not r["ok"]:
                log(f"  {method} {size}: failed: {r['error']}")
                break
            log(f"  {method} {size}: true {r['true_error']:.4f} in {r['seconds']:.2f} s")
            if r["true_error"] <= 1 + min(tols) or r["seconds"] > GRID_TIME_FACTOR * slowest_auto:
                break
    out["grid"] = fits
    out["cases"] = _cases(out, tols)
    return out


def _cases(out, tols) -> list:
    """Per tol: AutoKPCA against the hindsight-best grid fit and the estimators' sizes by tol."""
    autos, tol_fits, fits = out["auto"], out["tol_fits"], out["grid"]
    cases = []
    for tol in tols:
        meeting = [f for f in fits if f["ok"] and f["true_error"] <= 1 + tol]
        best = min(meeting, key=lambda f: f["seconds"]) if meeting else None
        a = autos[str(tol)]
        case = {
            "tol": tol,
            "auto_ok": a["ok"],
            "auto_method": a.get("method"),
            "auto_size": a.get("size"),
            "auto_true_error": a.get("true_error"),
            "auto_seconds": a.get("seconds"),
            "auto_extra_peak_mb": a.get("extra_peak_mb"),
            "best_method": best and best["method"],
            "best_size": best and best["size"],
            "best_seconds": best and best["seconds"],
            "best_true_error": best and best["true_error"],
        }
        for cls_name, key in (("NystromKPCA", "nystrom_tol"), ("RandomFeatureKPCA", "rf_tol")):
            r = tol_fits[f"{cls_name} {tol}"]
            case[f"{key}_size"] = r.get("size")
            case[f"{key}_true_error"] = r.get("true_error")
            case[f"{key}_seconds"] = r.get("seconds")
            case[f"{key}_failure"] = r.get("error")
        if a["ok"]:
            case["error_goal_met"] = a["true_error"] <= 1 + tol
        case["estimators_error_goal_met"] = all(
            case[f"{key}_true_error"] is not None and case[f"{key}_true_error"] <= 1 + tol
            for key in ("nystrom_tol", "rf_tol")
        )
        if a["ok"] and best:
            case["time_ratio"] = a["seconds"] / best["seconds"]
            case["time_goal_met"] = a["seconds"] <= max(
                TIME_FACTOR * best["seconds"], best["seconds"] + TIME_SLACK_SECONDS
            )
        elif a["ok"]:
            # no grid fit meeting tol within GRID_TIME_FACTOR x AutoKPCA's time: none faster
            case["time_ratio"] = None
        cases.append(case)
    return cases


def _seconds(x):
    return "-" if x is None else f"{x:.2f}"


def _tol_fit(c, key) -> str:
    """``size: true error`` of an estimator's own size by tol, for the table."""
    if f"{key}_true_error" not in c and f"{key}_failure" not in c:
        return "not measured"  # a results file written before the estimators were measured
    if c.get(f"{key}_true_error") is None:
        failure = str(c.get(f"{key}_failure") or "")
        return "not done in the time allowed" if "no result within" in failure else "failed"
    return f"{c[f'{key}_size']}: {c[f'{key}_true_error']:.4f}"


def table(results) -> str:
    """The markdown table of docs/auto.md from a results file's contents."""
    lines = [
        "| data (n x d) | tol | AutoKPCA chose | true error | s | hindsight-best | its true "
        "error | s | time ratio | NystromKPCA(tol) | RandomFeatureKPCA(tol) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["sets"]:
        for c in s["cases"]:
            shape = f"{s['name']} ({s['n']} x {s['d']}{', sparse' if s['sparse'] else ''}"
            if s.get("eval") == "subsample":
                shape += f"; {s['eval_rows']}-row evaluation"
            shape += ")"
            if not c["auto_ok"]:
                lines.append(f"| {shape} | {c['tol']} | failed | | | | | | | | |")
                continue
            best = (
                f"{c['best_method']} {c['best_size']}"
                if c["best_method"]
                else "none within 2x its time"
            )
            ratio = "-" if c.get("time_ratio") is None else f"{c['time_ratio']:.2f}"
            best_error = "-" if c["best_true_error"] is None else f"{c['best_true_error']:.4f}"
            chosen = c["auto_method"]
            params = s["auto"].get(str(c["tol"]), {}).get("params") or {}
            if params.get("landmarks") == "rpcholesky":
                chosen = "nystrom-rpcholesky"  # named as in the grid
            lines.append(
                f"| {shape} | {c['tol']} | {chosen} {c['auto_size']} | "
                f"{c['auto_true_error']:.4f} | {_seconds(c['auto_seconds'])} | {best} | "
                f"{best_error} | {_seconds(c['best_seconds'])} | {ratio} | "
                f"{_tol_fit(c, 'nystrom_tol')} | {_tol_fit(c, 'rf_tol')} |"
            )
    return "\n".join(lines)


def summarize(results) -> dict:
    """The goals, counted over the cases: true error <= 1 + tol (AutoKPCA, and the estimators'
    own sizes by tol); AutoKPCA's time <= max(TIME_FACTOR x the hindsight-best, the
    hindsight-best + TIME_SLACK_SECONDS), over the cases that have one (no grid fit meeting tol
    within GRID_TIME_FACTOR x AutoKPCA's time: no reference, counted apart); peak memory within
    the budget."""
    cases = [c for s in results["sets"] for c in s["cases"]]
    timed = [c for c in cases if c.get("time_ratio") is not None]
    return {
        "cases": len(cases),
        "error_goal_met": sum(bool(c.get("error_goal_met")) for c in cases),
        "estimators_error_goal_met": sum(bool(c.get("estimators_error_goal_met")) for c in cases),
        "time_goal_met": sum(bool(c.get("time_goal_met")) for c in timed),
        "time_cases": len(timed),
        "no_hindsight_reference": sum(
            1 for c in cases if c["auto_ok"] and c.get("time_ratio") is None
        ),
        "memory_goal_met": sum(
            (c["auto_extra_peak_mb"] or 0) <= results["memory_budget_mb"]
            for c in cases
            if c["auto_ok"]
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"at most {QUICK_ROWS} rows a set")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--tols", nargs="+", type=float, default=list(TOLS))
    parser.add_argument("--output", default=None, help="the JSON file to write")
    parser.add_argument("--table", default=None, help="print the table of a results file")
    parser.add_argument(
        "--remeasure-auto",
        action="store_true",
        help="time AutoKPCA and each case's hindsight-best fit again, in new processes, for "
        "--sets in the results file (the rest kept): a second look at cases a busy machine "
        "slowed",
    )
    parser.add_argument(
        "--tol-fit-timeout",
        type=float,
        default=3600,
        help="seconds each estimator's size by tol may take (random features at 2^14 on 10^6 "
        "rows take hours)",
    )
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            print(table(json.load(f)))
        return
    from fastkpca.execution import available_memory_bytes

    budget_mb = 0.8 * available_memory_bytes() / 2**20
    path = args.output or os.path.join(
        results_dir(), f"bench_auto{'_quick' if args.quick else ''}.json"
    )
    if args.remeasure_auto:
        with open(path) as f:
            results = json.load(f)
        started = time.time()
        for i, previous in enumerate(results["sets"]):
            if previous["name"] in args.sets:
                results["sets"][i] = run_set(
                    previous["name"],
                    previous["n"],
                    results["tols"],
                    lambda text: print(f"[{time.time() - started:7.1f} s] {text}", flush=True),
                    previous=previous,
                )
                save_json(results, path)
        results["summary"] = summarize(results)
        save_json(results, path)
        print(f"summary: {results['summary']} -> {path}")
        return
    results = {
        "machine": machine_info(),
        "k": K,
        "tols": args.tols,
        "quick": args.quick,
        "memory_budget_mb": budget_mb,
        "sets": [],
    }
    started = time.time()

    def log(text):
        print(f"[{time.time() - started:7.1f} s] {text}", flush=True)

    for name in args.sets:
        n = min(QUICK_ROWS, FULL_ROWS.get(name, QUICK_ROWS)) if args.quick else FULL_ROWS.get(name)
        results["sets"].append(run_set(name, n, args.tols, log, args.tol_fit_timeout))
        save_json(results, path)  # after each set: a partial run keeps what it measured
    results["summary"] = summarize(results)
    save_json(results, path)
    log(f"summary: {results['summary']} -> {path}")


if __name__ == "__main__":
    main()
