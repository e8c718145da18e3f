"""
How good is a model? estimate_error and tol
===========================================

An approximate KPCA model is only as useful as its error is known.
:func:`fastkpca.metrics.estimate_error` estimates a fitted model's relative rank-k error
(1.0 is exact KPCA's best rank-k approximation of the centered Gram) from a probe of
rows, with a standard error, without exact KPCA on all the rows. ``tol`` uses the same
estimate to choose a model's size:
``RandomFeatureKPCA(n_random_features="auto", tol=0.05)`` doubles the number of features
until the estimated error is at most 1.05.
"""

# %%
# Estimate against the exact value
# --------------------------------
# 4000 rows, small enough for exact KPCA (:func:`fastkpca.metrics.relative_rank_k_error`
# forms the 4000 x 4000 Gram), so the estimate can be checked.
import matplotlib.pyplot as plt
import numpy as np
from fastkpca import RandomFeatureKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.metrics import estimate_error, relative_rank_k_error

X = make_random_noisy(4000, 20, signal_dim=10, random_state=0)
params = dict(n_components=5, gamma=1 / 40, random_state=0)

sizes = [64, 128, 256, 512, 1024]
estimates, stderrs, exact = [], [], []
for m in sizes:
    model = RandomFeatureKPCA(n_random_features=m, **params).fit(X)
    est = estimate_error(model, X, n_probe=1000, random_state=0)[
        "relative_rank_k_error"
    ]
    estimates.append(est["estimate"])
    stderrs.append(est["stderr"])
    exact.append(relative_rank_k_error(X, model.transform(X), model.kernel_))
    print(
        f"m = {m:4d}: estimated {est['estimate']:.4f} +- {est['stderr']:.4f}, "
        f"exact {exact[-1]:.4f}"
    )

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.errorbar(
    sizes,
    estimates,
    yerr=2 * np.array(stderrs),
    fmt="o-",
    capsize=3,
    label="estimate_error (+- 2 standard errors)",
)
ax.plot(sizes, exact, "k^--", label="exact, from the full Gram")
ax.axhline(1.02, color="C3", lw=1, ls=":", label="1 + tol, tol = 0.02")
ax.set_xscale("log", base=2)
ax.set_xlabel("random features m")
ax.set_ylabel("relative rank-5 error")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# Let tol choose the size
# -----------------------
# With ``tol=0.02`` it starts at 256 features and doubles until the estimated error
# is at most 1.02; the sizes tried and their estimated errors are in ``size_history_``.
auto = RandomFeatureKPCA(n_random_features="auto", tol=0.02, **params).fit(X)
for m, error in auto.size_history_:
    print(f"tried m = {m}: estimated error {error:.3f}")
print("chosen: n_random_features_ =", auto.n_random_features_)
