"""
Which method when
=================

Every fastkpca estimator approximates the same thing, the top eigenpairs of the centered
kernel Gram, with a different trade-off between time, memory and accuracy. This example
fits each on the same 3498 rows and measures time and the relative rank-k error against
exact KPCA (1.0 = exact). The :doc:`which method when <../which-method>` page gives the
guidance from the benchmarks at full size; in short:

- up to ~20,000 rows: exact KPCA (``ExactKPCA`` or the drop-in ``KernelPCA``);
- more rows, accuracy per model size first: ``NystromKPCA``;
- millions of rows, one pass, the fastest fit: ``RandomFeatureKPCA``;
- a stream read once, fixed memory, mergeable sketches: ``StreamingKPCA``;
- a small weighted model of the density: ``ReducedSetKPCA``; a clustered Gram:
  ``SparsifiedKPCA``.
"""

# %%
import time

import matplotlib.pyplot as plt
from fastkpca import (
    ExactKPCA,
    NystromKPCA,
    RandomFeatureKPCA,
    ReducedSetKPCA,
    SparsifiedKPCA,
    StreamingKPCA,
)
from fastkpca.datasets import load_demo
from fastkpca.metrics import relative_rank_k_error

X, y = load_demo()

kernel = dict(n_components=5, kernel="rbf", gamma=1 / (2 * 30.0**2))  # sigma = 30
models = {
    "ExactKPCA": ExactKPCA(**kernel),
    "NystromKPCA, c = 300": NystromKPCA(**kernel, n_landmarks=300, random_state=0),
    "RandomFeatureKPCA, m = 1000": RandomFeatureKPCA(
        **kernel, n_random_features=1000, random_state=0
    ),
    "StreamingKPCA, m = 1000, ell = 20": StreamingKPCA(
        **kernel, n_random_features=1000, sketch_size=20, random_state=0
    ),
    "ReducedSetKPCA (shadow)": ReducedSetKPCA(**kernel, random_state=0),
    "SparsifiedKPCA, p = 0.5": SparsifiedKPCA(
        **kernel, sample_prob=0.5, random_state=0
    ),
}

results = {}
for name, model in models.items():
    start = time.perf_counter()
    model.fit(X)
    seconds = time.perf_counter() - start
    error = relative_rank_k_error(X, model.transform(X), model.kernel_)
    results[name] = (seconds, error)
    print(f"{name:34s} {seconds:6.2f} s   relative rank-5 error {error:.3f}")

# %%
# At 3498 rows exact KPCA is fast and, by definition, the most accurate: the approximate
# methods pay off when n grows (their cost grows linearly in n, exact KPCA's
# quadratically in memory and faster in time).
fig, ax = plt.subplots(figsize=(6.5, 4))
for i, (name, (seconds, error)) in enumerate(results.items()):
    ax.scatter(seconds, error, s=40, color=f"C{i}", label=name)
ax.set_xscale("log")
ax.set_xlabel("fit time (s)")
ax.set_ylabel("relative rank-5 error (1 = exact)")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
