"""
A million rows with Nystrom
===========================

Exact kernel PCA of a million rows would need a 10^6 x 10^6 Gram matrix (8 TB). Nystrom
KPCA keeps c landmark rows and never forms more than c x c and c x d matrices: the fit
is one pass over the data, its memory does not grow with n.

This example runs at 200,000 rows so that the gallery builds quickly; set ``n_samples``
to 1,000,000 to run the full size (a few seconds for the fit on two cores). The measured
figures at the full size, against scikit-learn's ``Nystroem`` + ``PCA``, are read from
the benchmark results below.
"""

# %%
# Fit
# ---
import json
import time
from pathlib import Path

import matplotlib.pyplot as plt
from fastkpca import NystromKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.metrics import relative_rank_k_error

n_samples = 200_000  # 1_000_000 for the benchmark's size
# the streaming KPCA paper's synthetic data, and 2000 more rows held out
X_all = make_random_noisy(n_samples + 2000, 100, random_state=0)
X, X_heldout = X_all[:n_samples], X_all[n_samples:]

start = time.perf_counter()
model = NystromKPCA(
    n_components=10, gamma=1 / 200, n_landmarks=1000, random_state=0
).fit(X)
fit_s = time.perf_counter() - start
print(f"{n_samples:,} x {X.shape[1]} rows, c = 1000 landmarks: fit in {fit_s:.1f} s")
print("solver:", model.solver_)
print("eigenvalues:", model.eigenvalues_[:5].round(1))

# %%
# How close to exact KPCA?
# ------------------------
# The benchmark's measure: project 2000 held-out rows and compare ``T T^T`` with their
# exact centered Gram, relative to the best rank-10 approximation (1.0 = as good as
# exact KPCA of those rows). 2000 rows make a 2000 x 2000 Gram, cheap to form.
error = relative_rank_k_error(X_heldout, model.transform(X_heldout), model.kernel_)
print(f"held-out relative rank-10 error: {error:.3f}")

# %%
# The full size, measured
# -----------------------
# ``python benchmarks/bench_goals.py`` fits the same model at 10^6 rows, each fit in its
# own process, next to scikit-learn's ``Nystroem(n_components=1000)`` + ``PCA(10)``.
results = next(
    (
        p
        for p in (Path("benchmarks/results"), Path("../benchmarks/results"))
        if p.is_dir()
    ),
    None,
)
if results is None:
    print("benchmarks/results not found: run this example from a source checkout")
else:
    goals = json.loads((results / "bench_goals.json").read_text())
    ours, theirs = goals["rows"]["nystrom_default"], goals["rows"]["sklearn_nystroem"]
    print(f"n = {goals['n_samples']:,}, d = {goals['n_features_in']}, c = {goals['c']}")
    for name, row in (
        ("fastkpca NystromKPCA", ours),
        ("scikit-learn Nystroem+PCA", theirs),
    ):
        print(
            f"{name:26s} fit {row['seconds']:5.1f} s, extra memory "
            f"{row['extra_peak_mb']:7.0f} MB, held-out error "
            f"{row['heldout_relative_rank_k_error']:.3f}"
        )

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    names = ["fastkpca", "scikit-learn"]
    ax1.bar(names, [ours["seconds"], theirs["seconds"]], color=["C0", "C7"])
    ax1.set_ylabel("fit time (s)")
    ax2.bar(names, [ours["extra_peak_mb"], theirs["extra_peak_mb"]], color=["C0", "C7"])
    ax2.set_ylabel("extra peak memory (MB)")
    ax2.set_yscale("log")
    fig.suptitle(f"Nystrom KPCA, {goals['n_samples']:,} rows (benchmarks/results)")
    fig.tight_layout()
    plt.show()
