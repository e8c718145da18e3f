"""
Streaming from files with partial_fit
=====================================

:class:`fastkpca.StreamingKPCA` (random features + Frequent Directions) looks at each
row once and holds a fixed-size sketch, whatever the number of rows. ``partial_fit``
feeds it one batch at a time, like :class:`sklearn.decomposition.IncrementalPCA`; here
the batches are data files read block by block with :func:`fastkpca.io.open_data`, so no
file is ever held whole.
"""

# %%
# Some files
# ----------
# Five ``.npy`` files of 20,000 rows each stand for data that arrives over time
# (``open_data`` reads CSV/TSV, Parquet and LIBSVM files the same way).
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from fastkpca import StreamingKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.io import open_data

folder = Path(tempfile.mkdtemp())
X_all = make_random_noisy(100_000, 50, random_state=0)
paths = []
for i in range(5):
    paths.append(folder / f"part-{i}.npy")
    np.save(paths[-1], X_all[i * 20_000 : (i + 1) * 20_000])

# %%
# One batch at a time
# -------------------
# The kernel width must be fixed before the first batch (``gamma="median"`` would look
# only at the first batch); 1 / (2 d) suits these standardised-scale rows.
model = StreamingKPCA(
    n_components=5, gamma=1 / 100, n_random_features=500, sketch_size=20, random_state=0
)
history = []
for path in paths:
    for block in open_data(path, block_rows=8192):  # row blocks, never the whole file
        model.partial_fit(block)
    history.append(
        (
            model.n_samples_seen_,
            model.eigenvalues_.copy(),
            model.eigenvalue_bounds_.copy(),
        )
    )
    print(
        f"{path.name}: {model.n_samples_seen_:,} rows seen, "
        f"lambda_1 = {model.eigenvalues_[0]:.1f}"
    )

shutil.rmtree(folder)  # the files are no longer needed

# %%
# The same model from one ``fit`` over all the rows: with the same seed, the features
# are the same and so are the eigenvalues, up to rounding.
whole = StreamingKPCA(
    n_components=5, gamma=1 / 100, n_random_features=500, sketch_size=20, random_state=0
).fit(X_all)
print("partial_fit:", model.eigenvalues_.round(1))
print("fit:        ", whole.eigenvalues_.round(1))

# %%
# The sketch's eigenvalue bounds
# ------------------------------
# ``eigenvalue_bounds_`` brackets each eigenvalue of the features' covariance rigorously
# (the Frequent Directions guarantee). The eigenvalues grow with the rows seen (they are
# those of the n x n Gram).
seen = np.array([h[0] for h in history])
fig, ax = plt.subplots(figsize=(6, 3.6))
for j in range(3):
    values = np.array([h[1][j] for h in history])
    low = np.array([h[2][0, j] for h in history])
    high = np.array([h[2][1, j] for h in history])
    ax.fill_between(seen, low, high, alpha=0.25, color=f"C{j}")
    ax.plot(seen, values, "o-", color=f"C{j}", label=f"eigenvalue {j + 1}")
ax.set_xlabel("rows seen")
ax.set_ylabel("eigenvalue (with bounds)")
ax.legend()
fig.tight_layout()
plt.show()
