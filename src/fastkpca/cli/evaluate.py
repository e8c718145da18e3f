"""``fastkpca evaluate``: a model's errors on a data file, estimated and against exact KPCA."""

from __future__ import annotations

import json

import numpy as np

from .. import metrics
from .._utils import plain
from ..decomposition.exact import ExactKPCA
from ..metrics import estimate_error
from ..persistence import load_with_info
from ._common import CLIError
from ._data import _on_arrays, _open_for_model, _subsample, _use_jobs


def evaluate_model(model, X, *, random_state=0) -> dict:
    """Errors of ``model`` on X against exact KPCA of X (same kernel, same k): two columns.

    ``model`` is the fitted model's error; ``exact`` is exact KPCA's own (the best any rank-k
    method can do on X: 1.0 for the relative rank-k error).  Eigenvalues compared per row, as
    ``fastkpca.metrics.estimate_error`` compares them: the model's ``eigenvalues_ / n_train``
    against the exact ``lambda / n`` of X's centered Gram (left out for a model that does not
    tell its eigenvalues and training size).
    """

    kernel = model.kernel_
    with _on_arrays(model):
        T = np.asarray(model.transform(X), dtype=np.float64)
    k = T.shape[1]
    ref = ExactKPCA(n_components=k, kernel=kernel, random_state=random_state)
    R = np.asarray(ref.fit_transform(X), dtype=np.float64)
    rows = {}
    for name, fn in (
        ("relative_rank_k_error", metrics.relative_rank_k_error),
        ("gram_spectral_error", metrics.gram_spectral_error),
        ("gram_frobenius_error", metrics.gram_frobenius_error),
    ):
        rows[name] = {"model": fn(X, T, kernel), "exact": fn(X, R, kernel)}
    rows["embedding_error"] = {"model": metrics.embedding_error(T, R), "exact": 0.0}
    try:
        per_row = metrics.eigenvalues_per_row(model)
    except ValueError:  # no eigenvalues_ or training size: no eigenvalue error to give
        return rows
    rows["eigenvalue_error"] = {
        "model": metrics.eigenvalue_error(per_row, ref.eigenvalues_ / X.shape[0]),
        "exact": 0.0,
    }
    return rows


_METRIC_NOTES = {
    "relative_rank_k_error": "||HGH - TT'||_F / ||HGH - (HGH)_k||_F (1 = optimal)",
    "gram_spectral_error": "||HGH - TT'||_2 / n",
    "gram_frobenius_error": "||HGH - TT'||_F / n^2",
    "embedding_error": "vs exact KPCA, Procrustes-aligned",
    "eigenvalue_error": "eigenvalues per row (lambda / n) vs exact ones of these rows",
}


def _rows_text(m: int, n: int) -> str:
    """Which rows a figure was computed on: all n of DATA, or a uniform subsample of m."""
    return f"all {n} rows" if m == n else f"a uniform random subsample of {m} of the {n} rows"


#: ``"method"`` of each entry of an evaluation: how the figure was computed.
EXACT_ALL_ROWS = "exact_all_rows"  # exact, on every row of DATA
EXACT_SUBSAMPLE = "exact_subsample"  # exact on the evaluated rows, a uniform subsample of DATA
PROBE_ESTIMATE = "probe_estimate"  # estimated from a probe of the evaluated rows (with stderr)


def _describe_estimate(est: dict, n_rows: int) -> dict:
    """``estimate_error``'s result with each entry saying how it was computed.

    ``estimate_error`` computes the Gram of the rows it is given exactly when they are at most
    ``n_probe`` (its ``"method": "exact"``), else estimates from a probe (``"probe"``).  Here the
    rows are DATA's, all or a uniform subsample: each entry's ``"method"`` becomes one of
    :data:`EXACT_ALL_ROWS`, :data:`EXACT_SUBSAMPLE`, :data:`PROBE_ESTIMATE`, and a
    ``"computation"`` says it in words.
    """
    out = dict(est)
    m, p = int(est["n_samples"]), int(est["n_probe"])
    rows = _rows_text(m, n_rows)
    for name in (
        "relative_rank_k_error",
        "excess_error",
        "eigenvalue_error",
        "eigenvalues_per_row",
    ):
        entry = est.get(name)
        if not isinstance(entry, dict):
            continue
        entry = dict(entry)
        if entry.get("method") == "probe":
            entry["method"] = PROBE_ESTIMATE
            entry["computation"] = (
                f"estimated from a uniform probe of {p} of the {m} evaluated rows ({rows} of "
                "DATA), without exact KPCA; stderr and a 95% interval"
            )
        else:
            entry["method"] = EXACT_ALL_ROWS if m == n_rows else EXACT_SUBSAMPLE
            entry["computation"] = f"exact, on the Gram of {rows} of DATA"
        if name in ("eigenvalue_error", "eigenvalues_per_row"):
            entry["computation"] += (
                "; eigenvalues per row (lambda / n) of these rows against the model's, whose "
                "stderr counts the sampling of the rows"
                if m < n_rows
                else "; eigenvalues per row (lambda / n) of these rows against the model's"
            )
        out[name] = entry
    certificates = est.get("certificates")
    if isinstance(certificates, dict):
        how = {
            "nystrom_residual_trace": f"exact, over {rows} of DATA",
            "fd_eigenvalue_bounds": "from the model's Frequent Directions sketch (no rows)",
            "feature_gram_error": "on a uniform probe of the evaluated rows (its n_probe)",
        }
        out["certificates"] = {
            name: {**value, "computation": how[name]}
            if isinstance(value, dict) and name in how
            else value
            for name, value in certificates.items()
        }
    return out


def run(args):

    if args.max_samples < 2:
        raise CLIError(f"--max-samples must be at least 2, got {args.max_samples}")
    model, meta = load_with_info(args.model)
    _use_jobs(args, model)
    reader = _open_for_model(args, model, meta)
    rng = np.random.default_rng(args.seed)
    X, n = _subsample(reader, args, args.max_samples, rng)
    k = getattr(model, "n_components_", None) or model.eigenvalues_.shape[0]
    if X.shape[0] <= k:
        raise CLIError(f"{X.shape[0]} rows are too few to evaluate {k} components")
    m = X.shape[0]
    estimate = _describe_estimate(plain(_estimate(model, X, args)), n)
    rows = None if args.no_exact else evaluate_model(model, X, random_state=args.seed)
    exact_how = f"exact KPCA (ExactKPCA, the model's kernel, {k} components) of {_rows_text(m, n)}"
    if rows is not None:
        method = EXACT_ALL_ROWS if m == n else EXACT_SUBSAMPLE
        for entry in rows.values():
            entry["method"] = method
            entry["computation"] = f"exact, against {exact_how}"
    if args.json:
        print(
            json.dumps(
                {
                    "model": args.model,
                    "data": args.data,
                    "n_rows": n,
                    "n_evaluated": m,
                    "rows": _rows_text(m, n),
                    "n_components": k,
                    "estimate": estimate,
                    "metrics": plain(rows),
                    "metrics_computation": "skipped (--no-exact)" if rows is None else exact_how,
                    "why_they_differ": None if rows is None else _why_they_differ(estimate) or None,
                },
                indent=2,
            )
        )
        return 0
    print(f"{type(model).__name__} ({k} components) on {m} of {n} rows of {args.data}")
    print(f"error estimate (fastkpca.metrics.estimate_error) on {_rows_text(m, n)}:")
    print(_estimate_lines(estimate))
    if rows is not None:
        print(f"against {exact_how}:")
        print(f"    {'metric':<24}{'model':>12}{'exact':>12}  meaning")
        for name, r in rows.items():
            print(f"    {name:<24}{r['model']:>12.4g}{r['exact']:>12.4g}  {_METRIC_NOTES[name]}")
        why = _why_they_differ(estimate)
        if why:
            print(why)
    else:
        print("exact KPCA of the rows: skipped (--no-exact)")
    return 0


def _why_they_differ(estimate: dict) -> str:
    """Why the estimate and the exact relative rank-k error printed for one model differ, when
    the estimate came from a probe (empty when it was computed exactly on the same rows)."""
    err = estimate["relative_rank_k_error"]
    if err["method"] != PROBE_ESTIMATE:
        return ""
    return (
        "the two relative rank-k errors differ: the estimate reads a probe of "
        f"{int(estimate['n_probe'])} rows and no exact KPCA (its interval is the probe's sampling "
        "uncertainty); the exact column is exact KPCA of the evaluated rows, the error itself"
    )


def _estimate(model, X, args) -> dict:
    """``fastkpca.metrics.estimate_error`` of the model on X (no exact KPCA of X)."""

    n_probe = max(int(args.n_probe), 1)
    with _on_arrays(model):
        return estimate_error(model, X, n_probe=min(n_probe, X.shape[0]), random_state=args.seed)


def _estimate_lines(est: dict) -> str:
    """The error estimate, for people (:func:`_describe_estimate`'s dict): each figure with its
    uncertainty where it has one, and how it was computed.

    The eigenvalue error compares eigenvalues per row (``lambda / n``), the model's (of its
    training rows) with those of the rows given, a sample of the training rows or all of them;
    it is left out for a model that does not tell its eigenvalues and training size.
    """
    err, eig = est["relative_rank_k_error"], est["eigenvalue_error"]
    lo, hi = err["interval"]
    if err["method"] == PROBE_ESTIMATE:
        value = f"{err['estimate']:.4f}   (95% interval {lo:.4f}-{hi:.4f}; 1 = exact KPCA)"
        note = (
            "    (may understate err - 1 for models better than a Nystrom model with 3/4 of the "
            "probe as landmarks)"
        )
    else:
        value = f"{err['estimate']:.4f}   (1 = exact KPCA)"
        note = ""
    lines = [f"  relative rank-k error  {value}", f"    {err['computation']}"]
    if note:
        lines.append(note)
    if eig is not None:
        lines.append(f"  eigenvalue error       {eig['estimate']:.4g}   (+- {eig['stderr']:.2g})")
        lines.append(f"    {eig['computation']}")
    return "\n".join(lines)
