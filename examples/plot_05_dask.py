"""
Fitting on a Dask array
=======================

:class:`fastkpca.RandomFeatureKPCA`, :class:`fastkpca.NystromKPCA` and
:class:`fastkpca.StreamingKPCA` fit ``dask.array`` input: each chunk of rows is reduced
to a small statistic where it lives (a worker of a cluster), the statistics are merged
up a tree, and only they travel. With the same seed, the model equals the in-memory one
up to rounding. ``transform`` returns a lazy dask array chunked like the input.

This example uses dask's threaded scheduler in this process; with a
``distributed.Client`` (a ``LocalCluster`` or a real cluster, see the Dask page) the
same code runs on the workers.
"""

# %%
import time

import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from fastkpca import RandomFeatureKPCA
from fastkpca.datasets import make_random_noisy

X = make_random_noisy(100_000, 50, random_state=0)
X_dask = da.from_array(X, chunks=(20_000, -1))  # 5 chunks of rows
print(X_dask)

params = dict(
    n_components=10,
    gamma=1 / 100,
    n_random_features=500,
    solver="exact",
    random_state=0,
)
start = time.perf_counter()
on_dask = RandomFeatureKPCA(**params).fit(X_dask)
print(f"fit on the dask array: {time.perf_counter() - start:.1f} s")
in_memory = RandomFeatureKPCA(**params).fit(X)

difference = (
    np.abs(on_dask.eigenvalues_ - in_memory.eigenvalues_) / in_memory.eigenvalues_
)
print("eigenvalues:", on_dask.eigenvalues_[:4].round(2))
print(f"largest relative difference from the in-memory fit: {difference.max():.1e}")

# %%
# A lazy transform
# ----------------
T = on_dask.transform(X_dask)
print(type(T).__name__, T.shape, T.chunks[0])
first = T[:2000].compute()

fig, ax = plt.subplots(figsize=(5, 4))
ax.scatter(first[:, 0], first[:, 1], s=3, alpha=0.5)
ax.set_xlabel("component 1")
ax.set_ylabel("component 2")
ax.set_title("first 2000 rows, computed from the lazy transform", fontsize=10)
fig.tight_layout()
plt.show()
