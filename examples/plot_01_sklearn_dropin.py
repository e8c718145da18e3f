"""
From scikit-learn's KernelPCA to fastkpca
=========================================

:class:`fastkpca.KernelPCA` has the signature, defaults and fitted attributes of
:class:`sklearn.decomposition.KernelPCA`; switching is the import. Its results are those
of exact KPCA: the same eigenvalues, and the same projections up to the sign of each
column. The approximate estimators (here :class:`fastkpca.NystromKPCA`) take the same
kernel parameters, so trying one is a one-line change too.
"""

# %%
# The same model, two imports
# ---------------------------
# 2000 rows of the pendigits sample shipped with fastkpca (16 pen coordinates of
# hand-written digits), an RBF kernel.
import time

import matplotlib.pyplot as plt
import numpy as np
from fastkpca import KernelPCA, NystromKPCA
from fastkpca.datasets import load_demo
from sklearn.decomposition import KernelPCA as SklearnKernelPCA

X, y = load_demo()
X, y = X[:2000], y[:2000]
params = dict(n_components=2, kernel="rbf", gamma=1e-4)

start = time.perf_counter()
theirs = SklearnKernelPCA(**params).fit(X)
sklearn_s = time.perf_counter() - start
start = time.perf_counter()
ours = KernelPCA(**params).fit(X)  # the only change: the import
fastkpca_s = time.perf_counter() - start

print("eigenvalues, scikit-learn:", theirs.eigenvalues_.round(1))
print("eigenvalues, fastkpca:    ", ours.eigenvalues_.round(1))
print(f"fit: scikit-learn {sklearn_s:.2f} s, fastkpca {fastkpca_s:.2f} s")

# %%
# Projections agree up to the sign of each column (the sign of an eigenvector is
# arbitrary; fastkpca makes the largest entry of each positive, so its signs are
# deterministic).
A, B = ours.transform(X), theirs.transform(X)
signs = np.sign(np.sum(A * B, axis=0))
print("largest difference after aligning signs:", f"{np.abs(A - B * signs).max():.1e}")
print("largest projection:", f"{np.abs(B).max():.1f}")

# %%
# An approximate model with the same kernel
# -----------------------------------------
# Nystrom with 200 landmarks holds a 200 x 200 matrix instead of the 2000 x 2000 Gram.
approx = NystromKPCA(**params, n_landmarks=200, random_state=0).fit(X)
C = approx.transform(X)
C = C * np.sign(np.sum(A * C, axis=0))

fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharex=True, sharey=True)
for ax, Z, title in zip(
    axes,
    (B * signs, A, C),
    ("scikit-learn KernelPCA", "fastkpca.KernelPCA", "fastkpca.NystromKPCA, c = 200"),
    strict=True,
):
    ax.scatter(Z[:, 0], Z[:, 1], c=y, cmap="tab10", s=4)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("component 1")
axes[0].set_ylabel("component 2")
fig.tight_layout()
plt.show()
