"""
On a GPU (or PyTorch's CPU)
===========================

Every estimator accepts PyTorch tensors: the work runs on the tensor's device,
``transform`` returns a tensor of the same device and dtype, and the fitted arrays live
there. Random draws (landmarks, frequencies) come from the host generator of
``random_state``, so the model is the numpy model up to rounding, on any device.

This page is built on a machine without a GPU: the tensors are on PyTorch's CPU. With a
CUDA device, the same code runs there (``X.to("cuda")``, or ``device="cuda"`` for host
data). ``python benchmarks/bench_gpu.py`` times the full-size cases (10^6 rows) on a
GPU against a hand-written PyTorch loop.
"""

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from fastkpca import NystromKPCA, RandomFeatureKPCA
from fastkpca.datasets import make_random_noisy

device = "cuda" if torch.cuda.is_available() else "cpu"
X_host = make_random_noisy(50_000, 50, random_state=0)
X = torch.from_numpy(X_host).to(device)
print(f"{tuple(X.shape)} rows as a {X.dtype} tensor on {X.device}")

for cls, size in [
    (NystromKPCA, dict(n_landmarks=500)),
    (RandomFeatureKPCA, dict(n_random_features=500)),
]:
    params = dict(n_components=10, gamma=1 / 100, random_state=0, **size)
    start = time.perf_counter()
    on_device = cls(**params).fit(X)
    Z = on_device.transform(X[:2000])
    seconds = time.perf_counter() - start
    on_host = cls(**params).fit(X_host)
    Z_host = on_host.transform(X_host[:2000])
    # Column signs are fixed the same way on every device: compare directly.
    difference = np.abs(Z.cpu().numpy() - Z_host).max() / np.abs(Z_host).max()
    print(
        f"{cls.__name__}: {seconds:.2f} s on {device}; transform gives a "
        f"{type(Z).__name__} ({Z.dtype}, {Z.device}); largest difference from the "
        f"numpy model {difference:.1e} of the largest coordinate"
    )

# %%
# The same embedding from both
# ----------------------------
# float32 tensors stay float32 (the statistics are still accumulated in float64).
Z32 = on_device.transform(X[:2000].to(torch.float32))
print("float32 in:", Z32.dtype)

fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), sharex=True, sharey=True)
axes[0].scatter(Z_host[:, 0], Z_host[:, 1], s=3, alpha=0.5)
axes[0].set_title("numpy model", fontsize=10)
axes[1].scatter(Z.cpu()[:, 0], Z.cpu()[:, 1], s=3, alpha=0.5, color="C1")
axes[1].set_title(f"torch model ({device})", fontsize=10)
for ax in axes:
    ax.set_xlabel("component 1")
axes[0].set_ylabel("component 2")
fig.tight_layout()
plt.show()
