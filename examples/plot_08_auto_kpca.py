"""
Letting fastkpca choose: AutoKPCA
=================================

:class:`fastkpca.AutoKPCA` takes the accuracy you need instead of a method and a
size: ``tol`` bounds the :term:`relative rank-k error` (1.0 is exact KPCA's best
rank-k approximation of the centered Gram; ``tol=0.05`` asks for at most 1.05). It
estimates the kernel's spectrum on a :term:`probe` of rows, picks the method (exact
KPCA, Nystrom, random features or streaming) and grows its size until the estimated
error is within ``1 + tol``, then reports what it considered. The
:doc:`rules <../auto>` page says how it chooses.
"""

# %%
# One fit
# -------
# 50,000 rows of the streaming KPCA paper's synthetic data (:term:`RandomNoisy`), and
# 2000 more rows that the model never sees, to check it afterwards.
import matplotlib.pyplot as plt
from fastkpca import AutoKPCA
from fastkpca.datasets import make_random_noisy
from fastkpca.metrics import estimate_error

X_all = make_random_noisy(52_000, 50, random_state=0)
X, X_new = X_all[:50_000], X_all[50_000:]

auto = AutoKPCA(n_components=10, tol=0.05, random_state=0).fit(X)
print("method:", auto.method_, "| estimator:", type(auto.estimator_).__name__)
for entry in auto.report_:
    print(f"{entry['method']:16s} {entry['status']:8s} size {entry['size']}")
    print(f"    {entry['reason']}")

# %%
# ``report_`` has one entry per candidate: the first describes the data and the probe,
# the others each method and size tried, the one chosen marked ``"chosen"`` with its
# estimated error and that estimate's standard error. ``transform`` is the chosen
# estimator's. On the held-out rows, :func:`fastkpca.metrics.estimate_error` (exact
# KPCA of those 2000 rows as the reference) confirms the error:
chosen = [entry for entry in auto.report_ if entry["status"] == "chosen"][0]
check = estimate_error(auto.estimator_, X_new, random_state=0)["relative_rank_k_error"]
print(f"estimated while fitting: {chosen['error']:.3f} +- {chosen['error_stderr']:.3f}")
print(f"on the held-out rows:    {check['estimate']:.3f}")
Z = auto.transform(X_new)
print("embedding:", Z.shape)

# %%
# The tolerance sets the size
# ---------------------------
# A smaller ``tol`` asks for a larger model: here more Nystrom landmarks.
tols = [0.2, 0.1, 0.05, 0.02, 0.01]
sizes, errors = [], []
for tol in tols:
    model = AutoKPCA(n_components=10, tol=tol, random_state=0).fit(X)
    entry = [e for e in model.report_ if e["status"] == "chosen"][0]
    sizes.append(entry["size"])
    errors.append(entry["error"])
    print(f"tol = {tol:<5}: {model.method_}, {entry['size_name']} = {entry['size']}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
ax1.plot(tols, sizes, "o-")
ax1.set_xscale("log")
ax1.set_xlabel("tol")
ax1.set_ylabel("size chosen (landmarks)")
ax2.plot(tols, errors, "o-", label="estimated error of the fit chosen")
ax2.plot(tols, [1 + t for t in tols], "k--", label="1 + tol (the target)")
ax2.set_xscale("log")
ax2.set_xlabel("tol")
ax2.set_ylabel("relative rank-10 error")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
# Rows that can be read only once
# -------------------------------
# Given a generator of row blocks (a stream: a file read once, a queue), AutoKPCA
# considers only the :term:`one pass` methods, and chooses random features here.
blocks = (X[i : i + 5000] for i in range(0, len(X), 5000))
streamed = AutoKPCA(n_components=10, tol=0.05, random_state=0).fit(blocks)
print("one pass:", streamed.method_)
