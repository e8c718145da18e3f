"""``fastkpca demo``: every available method on the embedded pendigits sample, side by side.

3498 pen-digit trajectories (16 coordinates in 0..100, digits 0-9) with the reduced-set paper's
Gaussian, sigma = 120 (Kingravi et al., section 6).  For each method: fit and transform wall
time, the peak of ``tracemalloc`` in a second fit (BLAS-internal memory is not traced), the
relative rank-k error and the embedding error against exact KPCA (:mod:`fastkpca.metrics`); a
table and a plot of the first two components coloured by digit.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from . import metrics
from .datasets import load_demo
from .decomposition import available_methods, estimator_class
from .persistence import atomic_output

__all__ = ["run_demo", "DEMO_SIGMA", "DEMO_PLOT_SOFTWARE", "method_settings"]

#: Gaussian bandwidth the reduced-set KPCA paper uses on pendigits.
DEMO_SIGMA = 120.0

#: The PNG "Software" text of the demo's plot, by which ``fastkpca demo`` knows its own earlier
#: plot (replaced without ``--force``) from any other file.
DEMO_PLOT_SOFTWARE = "fastkpca demo"


def method_settings(n_samples: int) -> dict:
    """Parameters per method for the demo (those an estimator does not take are dropped)."""
    m = max(10, min(300, n_samples // 4))
    return {
        "exact": {},
        "nystrom": {"n_landmarks": m},
        "random-features": {"n_random_features": 1000},
        "streaming": {"n_random_features": 1000, "sketch_size": 100},
        "reduced-set": {"n_centers": m},
        "sparsified": {},
    }


def _fit_and_measure(cls, params, X):
    model = cls(**params)
    t0 = time.perf_counter()
    model.fit(X)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    T = model.transform(X)
    transform_s = time.perf_counter() - t0
    tracemalloc.start()
    try:
        cls(**params).fit(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return model, np.asarray(T, dtype=np.float64), fit_s, transform_s, peak / 2**20


def run_demo(
    output="fastkpca-demo.png",
    *,
    n_samples=None,
    n_components=5,
    methods=None,
    random_state=0,
    file=None,
    device=None,
):
    """Fit every available method on the embedded pendigits sample; print a table, plot.

    Parameters
    ----------
    output : path or None
        PNG to write (one panel per method); None skips the plot.
    n_samples : int, optional
        Use a random subsample of this many rows (default: all 3498).
    n_components : int
        Components per method (the paper uses 5).
    methods : list of str, optional
        ``fastkpca fit --method`` names; default every method whose module imports.
    random_state : int
        Seed for the subsample and every method.
    file : text stream, optional
        Where the table goes (default stdout).
    device : None or str
        Every method's ``device`` (e.g. ``"cuda"``): the sample is sent there.

    Returns
    -------
    list of dict, one per method: method, estimator, fit_s, transform_s, peak_mib,
    rank_k_error, embedding_error, error (the message, for a method that failed).
    """
    out = file or sys.stdout
    X, y = load_demo()
    rng = np.random.default_rng(random_state)
    if n_samples is not None and n_samples < X.shape[0]:
        if n_samples <= n_components:
            raise ValueError(f"n_samples={n_samples} must exceed n_components={n_components}")
        idx = np.sort(rng.choice(X.shape[0], size=n_samples, replace=False))
        X, y = X[idx], y[idx]
    gamma = 1.0 / (2.0 * DEMO_SIGMA**2)
    if methods is None:
        classes = available_methods()
    else:
        classes = {m: estimator_class(m) for m in methods}
    if "exact" not in classes:
        classes = {"exact": estimator_class("exact"), **classes}
    settings = method_settings(X.shape[0])

    print(
        f"fastkpca demo: pendigits sample, {X.shape[0]} x {X.shape[1]}, RBF kernel "
        f"sigma = {DEMO_SIGMA:g} (gamma = {gamma:.3g}), k = {n_components}",
        file=out,
    )
    rows, embeddings = [], {}
    reference = None
    for method, cls in classes.items():
        accepted = cls().get_params()
        params = {k: v for k, v in settings.get(method, {}).items() if k in accepted}
        params.update(
            n_components=n_components, kernel="rbf", gamma=gamma, random_state=random_state
        )
        if device is not None and "device" in accepted:
            params["device"] = device
        row = {"method": method, "estimator": cls.__name__, "params": params}
        try:
            model, T, fit_s, transform_s, peak = _fit_and_measure(cls, params, X)
            if reference is None:
                reference = T  # exact comes first
            row.update(
                fit_s=fit_s,
                transform_s=transform_s,
                peak_mib=peak,
                rank_k_error=metrics.relative_rank_k_error(X, T, model.kernel_),
                embedding_error=metrics.embedding_error(T, reference),
            )
            embeddings[method] = T
        except Exception as exc:  # report the failure in the table, go on with the others
            row["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())
        rows.append(row)
        _print_row(row, out, header=len(rows) == 1)

    if output is not None and embeddings:
        written = _plot(embeddings, reference, y, output, n_components)
        print(
            f"plot: {written}"
            if written
            else "plot skipped: matplotlib is not installed (pip install 'fastkpca[plot]')",
            file=out,
        )
    print(
        "peak MiB: tracemalloc peak of a separate fit (Python + NumPy allocations, "
        "not BLAS internals); errors against exact KPCA on the same rows",
        file=out,
    )
    return rows


def _print_row(row, out, header):
    if header:
        print(
            f"{'method':<16}{'estimator':<20}{'fit s':>8}{'transform s':>13}"
            f"{'peak MiB':>10}{'rank-k err':>12}{'embed err':>11}",
            file=out,
        )
    if row.get("error"):
        print(f"{row['method']:<16}{row['estimator']:<20}  failed: {row['error']}", file=out)
        return
    print(
        f"{row['method']:<16}{row['estimator']:<20}{row['fit_s']:>8.3f}"
        f"{row['transform_s']:>13.3f}{row['peak_mib']:>10.1f}{row['rank_k_error']:>12.4f}"
        f"{row['embedding_error']:>11.2e}",
        file=out,
        flush=True,
    )


def _plot(embeddings, reference, y, output, n_components):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(embeddings)
    ncols = min(3, len(names))
    nrows = -(-len(names) // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(4.0 * ncols + 1.0, 3.8 * nrows + 0.6),
        squeeze=False,
        layout="constrained",
    )
    for ax, name in zip(axes.flat, names, strict=False):
        T = embeddings[name][:, :2].copy()
        if T.shape[1] < 2:
            T = np.column_stack([T, np.zeros(len(T))])
        # Column signs are arbitrary per method: match them to exact KPCA so panels compare.
        signs = np.sign(np.sum(T * reference[:, : T.shape[1]], axis=0))
        signs[signs == 0] = 1.0
        T *= signs
        sc = ax.scatter(T[:, 0], T[:, 1], c=y, cmap="tab10", vmin=-0.5, vmax=9.5, s=4, linewidths=0)
        ax.set_title(name)
        ax.set_xlabel("component 1")
        ax.set_ylabel("component 2")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.colorbar(sc, ax=axes.ravel().tolist(), ticks=range(10), label="digit", shrink=0.6)
    fig.suptitle(
        f"Kernel PCA of pendigits (RBF, sigma = {DEMO_SIGMA:g}), first 2 of "
        f"{n_components} components"
    )
    # written to a temporary file renamed at the end, so a failed or interrupted save leaves
    # an existing file as it was; the format follows the name, as savefig's own rule
    fmt = Path(output).suffix.lstrip(".").lower() or "png"
    metadata = {"Software": DEMO_PLOT_SOFTWARE} if fmt == "png" else None
    with atomic_output(output) as tmp:
        fig.savefig(tmp, dpi=110, format=fmt, metadata=metadata)
    plt.close(fig)
    return output
