"""fastkpca on a GPU against hand-written PyTorch loops and scikit-learn's array-API Nystroem.

Every case runs fastkpca's estimator and a short reference loop written below, on the same card in
the same run: one warm-up call each, then the best of ``--repeats`` (3) timed calls, each timed
between two ``torch.cuda.synchronize()``.  Data: RandomNoisy (``make_random_noisy``: d = 100,
signal dimension 50, zeta = 10), generated on the host with a fixed seed and copied to the device
before the clock; rbf with gamma = 1 / (2 d); k = 10.

Cases (sizes at full scale; ``--quick`` divides them so the file runs in seconds on a CPU):

``rf``
    ``RandomFeatureKPCA(n_random_features=1000)`` on n = 10^6 float64 rows on the device, against
    :func:`ref_random_features`: float32 features in 131072-row chunks, float64 m x m statistics,
    ``torch.linalg.eigh``.
``nystrom``
    ``NystromKPCA(n_landmarks=1000)``, against :func:`ref_nystrom` (the same loop over float32
    kernel rows) and scikit-learn's ``Nystroem`` + ``PCA`` with ``array_api_dispatch`` on the
    device tensors.
``exact``
    ``ExactKPCA(10)`` on n = 10^5 float64 rows, against :func:`ref_exact`: restarted block Krylov
    (block 20, depth 6) over Gram tiles recomputed in every pass.
``exact_large``
    ``ExactKPCA(10)`` on n = 10^6 float64 rows (``--exact-large-n``), minutes: one timed fit
    after a warm-up fit of 10^4 rows, then the Ritz residuals ``||H K H v - lambda v|| /
    lambda_1`` from one more Gram pass.  Only with ``--only exact_large`` (not in the default
    run).
``gram_pass``
    One centered-Gram pass ``(H K H) V``, n = 10^6 (``--gram-n``), 20 columns, float64 and float32:
    fastkpca's matrix-free operator against :func:`ref_gram_pass` (the exponent from ONE
    augmented GEMM, then an in-place ``exp``).
``kernel_pca``
    The ``KernelPCA`` drop-in, n = 20000, against the dense ``torch.linalg.eigh`` of the Gram and
    against :func:`ref_exact` (block Krylov).
``streaming``
    ``StreamingKPCA(n_random_features=1000, sketch_size=20)`` on n = 10^6, against
    :func:`ref_frequent_directions` (Frequent Directions of float32 features in batches of 1000
    rows, shrinks by ``torch.linalg.eigh`` of the small Gram).
``stacked_eigh``
    The small eigendecompositions of one round of Frequent Directions shrinks (32 symmetric
    60 x 60 float64 matrices, the Grams of ``sketch_size=20`` buffers): numpy on one thread,
    fastkpca's host :func:`~fastkpca.execution.feature_ops.stacked_eigh` (the worker threads),
    ``torch.linalg.eigh`` on the device, and CuPy's batched ``eigh`` where CuPy is installed
    (what a device fit uses, :func:`~fastkpca.execution.feature_ops.stacked_eigh_placement`).
    Milliseconds per round, best of 20.
``host_to_device``
    Host numpy rows (10^7 x 100 float32; ``--host-n``) with ``device="cuda"``:
    ``RandomFeatureKPCA`` against the time of copying the same rows to the device.

Accuracy: each model's relative rank-k error on 2000 held-out rows
(:func:`fastkpca.metrics.relative_rank_k_error`, on the host), next to the reference's.

Usage::

    python benchmarks/bench_gpu.py                     # every case, on the first CUDA device
    python benchmarks/bench_gpu.py --only rf nystrom   # some cases
    python benchmarks/bench_gpu.py --quick --device cpu  # small sizes, PyTorch on the CPU

Results: ``--out`` (default ``benchmarks/results/bench_gpu.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import results_dir  # noqa: E402

RESULTS = results_dir()
CHUNK_ROWS = 131072


# ------------------------------------------------------------------------------------------------
# reference loops: short, hand-written PyTorch, the yardstick of each case
# ------------------------------------------------------------------------------------------------
def _augmented(X, gamma):
    """``[x, |x|^2, 1]`` and ``[2 gamma y, -gamma, -gamma |y|^2]``: their product is
    ``-gamma |x - y|^2`` in one GEMM."""
    import torch

    sq = (X * X).sum(1, keepdim=True)
    left = torch.cat([X, sq, torch.ones_like(sq)], 1)
    right = torch.cat([2 * gamma * X, -gamma * torch.ones_like(sq), -gamma * sq], 1)
    return left, right


def ref_rbf_tile(A_left, B_right):
    """``exp(-gamma |x - y|^2)`` of a tile from the augmented factors, exponent clamped at 0."""
    E = A_left @ B_right.T
    return E.clamp_(max=0.0).exp_()


def ref_random_features(X, m, gamma, k, seed=0):
    """Random-feature KPCA: float32 cos / sin features, float64 statistics, ``eigh``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    D = m // 2
    W = (torch.randn(X.shape[1], D, generator=g, dtype=torch.float64) * math.sqrt(2 * gamma)).to(
        X.device, torch.float32
    )
    n = X.shape[0]
    s = torch.zeros(m, dtype=torch.float64, device=X.device)
    G = torch.zeros(m, m, dtype=torch.float64, device=X.device)
    scale = 1.0 / math.sqrt(D)
    for start in range(0, n, CHUNK_ROWS):
        P = X[start : start + CHUNK_ROWS].to(torch.float32) @ W
        Z = torch.cat([P.cos(), P.sin()], 1).mul_(scale)
        s += Z.sum(0, dtype=torch.float64)
        G += (Z.T @ Z).double()
    C = G - torch.outer(s, s) / n
    w, V = torch.linalg.eigh(C)
    comps = V[:, -k:].flip(1).T
    mean = s / n

    def transform(Y):
        P = Y.to(torch.float32) @ W
        Z = torch.cat([P.cos(), P.sin()], 1).mul_(scale).double()
        return (Z - mean) @ comps.T

    return w.flip(0)[:k], transform


def ref_nystrom(X, c, gamma, k, seed=0):
    """Nystrom KPCA: uniform landmarks, float32 kernel rows, float64 statistics."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n = X.shape[0]
    idx = torch.randperm(n, generator=g)[:c].sort().values.to(X.device)
    L = X[idx]
    Ll, Lr = _augmented(L, gamma)
    Wm = ref_rbf_tile(Ll, Lr)
    w, U = torch.linalg.eigh(Wm)
    keep = w > w.max() * 1e-12
    N = (U[:, keep] / w[keep].sqrt()) @ U[:, keep].T  # W^{-1/2}
    Lr32 = Lr.float()
    s = torch.zeros(c, dtype=torch.float64, device=X.device)
    G = torch.zeros(c, c, dtype=torch.float64, device=X.device)
    for start in range(0, n, CHUNK_ROWS):
        Xl, _ = _augmented(X[start : start + CHUNK_ROWS], gamma)
        K = ref_rbf_tile(Xl.float(), Lr32)
        s += K.sum(0, dtype=torch.float64)
        G += (K.T @ K).double()
    C = N @ (G - torch.outer(s, s) / n) @ N
    vals, V = torch.linalg.eigh((C + C.T) / 2)
    comps = V[:, -k:].flip(1)
    proj = N @ comps
    offset = (s / n) @ proj

    def transform(Y):
        Yl, _ = _augmented(Y, gamma)
        return ref_rbf_tile(Yl, Lr) @ proj - offset

    return vals.flip(0)[:k], transform


def ref_gram_pass(X, V, gamma, tile_rows=8192, dtype=None):
    """``(H K H) V`` in one pass over row tiles of K, each tile's exponent from one augmented
    GEMM and an in-place ``exp`` (dtype: the tiles' precision)."""
    import torch

    dtype = dtype or X.dtype
    left, right = _augmented(X, gamma)
    left, right = left.to(dtype), right.to(dtype)
    n = X.shape[0]
    Vc = V - V.mean(0, keepdim=True)  # K H V = K (V - 1 mean(V))
    Vd = Vc.to(dtype)
    out = torch.empty(n, V.shape[1], dtype=V.dtype, device=V.device)
    for start in range(0, n, tile_rows):
        K = ref_rbf_tile(left[start : start + tile_rows], right)
        out[start : start + tile_rows] = (K @ Vd).to(V.dtype)
    return out - out.mean(0, keepdim=True)  # H (K H V)


def ref_exact(X, k, gamma, block=20, depth=6, tol=1e-8, max_restarts=50, seed=0):
    """Top-k of the centered Gram by restarted block Krylov over recomputed Gram tiles."""
    import torch

    g = torch.Generator().manual_seed(seed)
    n = X.shape[0]
    Q = torch.linalg.qr(torch.randn(n, block, generator=g, dtype=X.dtype).to(X.device))[0]
    passes = 0
    for _ in range(max_restarts):
        basis = [Q]
        for _ in range(depth - 1):
            Y = ref_gram_pass(X, basis[-1], gamma)
            passes += 1
            for B in basis:  # block Gram-Schmidt, twice
                Y -= B @ (B.T @ Y)
            for B in basis:
                Y -= B @ (B.T @ Y)
            basis.append(torch.linalg.qr(Y)[0])
        Qk = torch.cat(basis, 1)
        AQ = ref_gram_pass(X, Qk, gamma)
        passes += 1
        w, S = torch.linalg.eigh(Qk.T @ AQ)
        w, S = w.flip(0), S.flip(1)
        vecs = Qk @ S[:, :block]
        resid = (AQ @ S[:, :k] - vecs[:, :k] * w[:k]).norm(dim=0) / w[0]
        if float(resid.max()) <= tol:
            return w[:k], vecs[:, :k], passes, float(resid.max())
        Q = vecs
    return w[:k], vecs[:, :k], passes, float(resid.max())


def ref_frequent_directions(X, m, ell, gamma, k, batch=1000, seed=0):
    """Streaming KPCA: float32 features of each batch appended to a 2 ell buffer, shrunk by the
    eigendecomposition of the buffer's small Gram (Ghashami et al. 2016, Algorithm 1)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    D = m // 2
    W = (torch.randn(X.shape[1], D, generator=g, dtype=torch.float64) * math.sqrt(2 * gamma)).to(
        X.device, torch.float32
    )
    scale = 1.0 / math.sqrt(D)
    B = torch.zeros(0, m, dtype=torch.float64, device=X.device)
    s = torch.zeros(m, dtype=torch.float64, device=X.device)
    n = X.shape[0]
    for start in range(0, n, batch):
        P = X[start : start + batch].to(torch.float32) @ W
        Z = torch.cat([P.cos(), P.sin()], 1).mul_(scale).double()
        s += Z.sum(0)
        B = torch.cat([B, Z], 0)
        if B.shape[0] >= 2 * ell:
            w, U = torch.linalg.eigh(B @ B.T)  # ascending
            w, U = w.flip(0), U.flip(1)
            delta = w[ell - 1].clamp(min=0)
            keep = (w[: ell - 1] - delta).clamp(min=0)
            Vt = (U[:, : ell - 1].T @ B) / w[: ell - 1].clamp(min=1e-300).sqrt()[:, None]
            B = Vt * keep.sqrt()[:, None]
    Q = torch.linalg.qr(torch.cat([B, s[None, :]], 0).T)[0]
    BQ, sQ = B @ Q, s @ Q
    M = BQ.T @ BQ - torch.outer(sQ, sQ) / n
    w, U = torch.linalg.eigh((M + M.T) / 2)
    return w.flip(0)[:k], (Q @ U.flip(1))[:, :k]


# ------------------------------------------------------------------------------------------------
# the harness
# ------------------------------------------------------------------------------------------------
def _best(fn, repeats, sync):
    fn()  # warm-up: kernels compiled, memory pools filled
    sync()
    times = []
    out = None
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times), times, out


def _held_out_error(Z_eval, X_eval, gamma):
    from fastkpca.kernels import RBF
    from fastkpca.metrics import relative_rank_k_error

    return float(relative_rank_k_error(X_eval, _host(Z_eval), RBF(gamma)))


def _host(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def run(args):
    import torch

    from fastkpca import (
        ExactKPCA,
        KernelPCA,
        NystromKPCA,
        RandomFeatureKPCA,
        StreamingKPCA,
    )
    from fastkpca.datasets import make_random_noisy

    dev = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    q = 100 if args.quick else 1
    d, k = 100, 10
    gamma = 1.0 / (2 * d)
    n_eval = 500 if args.quick else 2000
    results = {"cases": {}, "machine": _machine(dev), "args": vars(args)}

    def data(n, seed=0):
        X = make_random_noisy(n + n_eval, d, signal_dim=50, zeta=10, random_state=seed)
        return X[:n], X[n:]

    def record(name, entry):
        results["cases"][name] = entry
        print(name, json.dumps(entry, default=float))

    def attempt(name, fn):
        if args.only and name not in args.only:
            return
        try:
            record(name, fn())
        except Exception as exc:  # a case that fails is reported, the others still run
            record(name, {"error": f"{type(exc).__name__}: {exc}"})

    def case_rf():
        n, m = 10**6 // q, 1000 // (10 if args.quick else 1)
        X, X_eval = data(n)
        Xd = torch.from_numpy(X).to(dev)
        Xe = torch.from_numpy(X_eval).to(dev)
        t_ref, _, (w_ref, tr) = _best(
            lambda: ref_random_features(Xd, m, gamma, k), args.repeats, sync
        )
        est = RandomFeatureKPCA(k, n_random_features=m, gamma=gamma, random_state=0)
        t_fk, times, model = _best(lambda: est.fit(Xd), args.repeats, sync)
        return {
            "n": n,
            "m": m,
            "seconds": t_fk,
            "times": times,
            "reference_seconds": t_ref,
            "ratio_to_reference": t_fk / t_ref,
            "error": _held_out_error(model.transform(Xe), X_eval, gamma),
            "reference_error": _held_out_error(tr(Xe), X_eval, gamma),
        }

    def case_nystrom():
        n, c = 10**6 // q, 1000 // (10 if args.quick else 1)
        X, X_eval = data(n)
        Xd = torch.from_numpy(X).to(dev)
        Xe = torch.from_numpy(X_eval).to(dev)
        t_ref, _, (w_ref, tr) = _best(lambda: ref_nystrom(Xd, c, gamma, k), args.repeats, sync)
        est = NystromKPCA(k, n_landmarks=c, gamma=gamma, random_state=0)
        t_fk, times, model = _best(lambda: est.fit(Xd), args.repeats, sync)
        entry = {
            "n": n,
            "c": c,
            "seconds": t_fk,
            "times": times,
            "reference_seconds": t_ref,
            "ratio_to_reference": t_fk / t_ref,
            "error": _held_out_error(model.transform(Xe), X_eval, gamma),
            "reference_error": _held_out_error(tr(Xe), X_eval, gamma),
        }
        entry.update(_sklearn_nystroem(Xd, Xe, X_eval, c, gamma, k, args.repeats, sync))
        return entry

    def case_exact():
        n = 10**5 // (20 if args.quick else 1)
        X, X_eval = data(n)
        Xd = torch.from_numpy(X).to(dev)
        t_ref, _, (w_ref, _v, passes, resid) = _best(
            lambda: ref_exact(Xd, k, gamma), args.repeats, sync
        )
        est = ExactKPCA(k, gamma=gamma, random_state=0)
        t_fk, times, model = _best(lambda: est.fit(Xd), args.repeats, sync)
        w = _host(model.eigenvalues_)
        return {
            "n": n,
            "seconds": t_fk,
            "times": times,
            "reference_seconds": t_ref,
            "reference_passes": passes,
            "reference_residual": resid,
            "ratio_to_reference": t_fk / t_ref,
            "max_rel_eigenvalue_diff": float(np.max(np.abs(w - _host(w_ref)) / _host(w_ref))),
        }

    def case_exact_large():
        n = args.exact_large_n // q
        X, _ = data(n)
        Xd = torch.from_numpy(X).to(dev)
        ExactKPCA(k, gamma=gamma, random_state=0).fit(Xd[:10000])  # warm-up
        sync()
        t0 = time.perf_counter()
        model = ExactKPCA(k, gamma=gamma, random_state=0).fit(Xd)
        sync()
        seconds = time.perf_counter() - t0
        from fastkpca.execution.kernel_ops import CenteredGramOperator
        from fastkpca.kernels import RBF

        V = model.eigenvectors_
        w = model.eigenvalues_
        resid = (
            torch.linalg.vector_norm(
                CenteredGramOperator(Xd, RBF(gamma)).matmat(V) - V * w[None, :], dim=0
            )
            / w[0]
        )
        return {
            "n": n,
            "seconds": seconds,
            "n_iter": getattr(model, "n_iter_", None),
            "eigen_solver": getattr(model, "eigen_solver_", None),
            "max_residual": float(resid.max()),
            "eigenvalues": _host(w).tolist(),
        }

    def case_gram_pass():
        n = args.gram_n // q
        X, _ = data(n)
        Xd = torch.from_numpy(X).to(dev)
        g = torch.Generator().manual_seed(1)
        V = torch.randn(n, 20, generator=g, dtype=torch.float64).to(dev)
        out = {"n": n}
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            t, _, _ = _best(lambda dtype=dtype: ref_gram_pass(Xd, V, gamma, dtype=dtype), 1, sync)
            out[f"reference_seconds_{name}"] = t
        from fastkpca.execution.kernel_ops import CenteredGramOperator
        from fastkpca.kernels import RBF

        for name in ("float64", "float32"):
            op = CenteredGramOperator(Xd, RBF(gamma), dtype=name)
            op.matmat(V)  # the first product also computes the row means: warm-up
            t, _, _ = _best(lambda op=op: op.matmat(V), args.repeats, sync)
            out[f"seconds_{name}"] = t
            out[f"ratio_to_reference_{name}"] = t / out[f"reference_seconds_{name}"]
        return out

    def case_kernel_pca():
        n = 20000 // (10 if args.quick else 1)
        X, _ = data(n)
        Xd = torch.from_numpy(X).to(dev)
        est = KernelPCA(k, kernel="rbf", gamma=gamma)
        t_fk, times, _ = _best(lambda: est.fit(Xd), args.repeats, sync)

        def dense():
            left, right = _augmented(Xd, gamma)
            K = ref_rbf_tile(left, right)
            K -= K.mean(0, keepdim=True)
            K -= K.mean(1, keepdim=True)
            return torch.linalg.eigh(K)

        t_dense, _, _ = _best(dense, 1, sync)
        t_krylov, _, _ = _best(lambda: ref_exact(Xd, k, gamma), args.repeats, sync)
        return {
            "n": n,
            "seconds": t_fk,
            "times": times,
            "reference_dense_eigh_seconds": t_dense,
            "reference_block_krylov_seconds": t_krylov,
            "ratio_to_reference": t_fk / min(t_dense, t_krylov),
        }

    def case_streaming():
        n, m = 10**6 // q, 1000 // (10 if args.quick else 1)
        X, X_eval = data(n)
        Xd = torch.from_numpy(X).to(dev)
        t_ref, _, _ = _best(
            lambda: ref_frequent_directions(Xd, m, 20, gamma, k), args.repeats, sync
        )
        est = StreamingKPCA(k, n_random_features=m, sketch_size=20, gamma=gamma, random_state=0)
        t_fk, times, model = _best(lambda: est.fit(Xd), args.repeats, sync)
        Xe = torch.from_numpy(X_eval).to(dev)
        return {
            "n": n,
            "seconds": t_fk,
            "times": times,
            "reference_seconds": t_ref,
            "ratio_to_reference": t_fk / t_ref,
            "error": _held_out_error(model.transform(Xe), X_eval, gamma),
        }

    def case_stacked_eigh():
        from fastkpca.execution.feature_ops import stacked_eigh

        rng = np.random.default_rng(0)
        A = rng.standard_normal((32, 60, 1000))
        G = A @ A.transpose(0, 2, 1)
        Gd = torch.from_numpy(G).to(dev)
        host_sync = lambda: None  # noqa: E731
        out = {"shape": list(G.shape)}
        out["numpy_one_call_ms"] = _best(lambda: np.linalg.eigh(G), 20, host_sync)[0] * 1e3
        out["fastkpca_host_ms"] = _best(lambda: stacked_eigh(G), 20, host_sync)[0] * 1e3
        out["torch_device_ms"] = _best(lambda: torch.linalg.eigh(Gd), 20, sync)[0] * 1e3
        try:
            import cupy

            Gc = cupy.asarray(G)
            out["cupy_device_ms"] = _best(lambda: cupy.linalg.eigh(Gc), 20, sync)[0] * 1e3
        except ImportError:
            out["cupy_device_ms"] = None
        return out

    def case_host_to_device():
        n = args.host_n // (1000 if args.quick else 1)
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, d), dtype=np.float32)

        def copy():
            return torch.from_numpy(X).to(dev)

        t_copy, _, _ = _best(copy, args.repeats, sync)
        est = RandomFeatureKPCA(k, n_random_features=1000, gamma=gamma, random_state=0, device=dev)
        t_fk, times, _ = _best(lambda: est.fit(X), args.repeats, sync)
        return {
            "n": n,
            "seconds": t_fk,
            "times": times,
            "copy_seconds": t_copy,
            "ratio_to_copy": t_fk / t_copy,
        }

    attempt("rf", case_rf)
    attempt("nystrom", case_nystrom)
    attempt("exact", case_exact)
    if args.only and "exact_large" in args.only:
        attempt("exact_large", case_exact_large)
    attempt("gram_pass", case_gram_pass)
    attempt("kernel_pca", case_kernel_pca)
    attempt("streaming", case_streaming)
    attempt("stacked_eigh", case_stacked_eigh)
    attempt("host_to_device", case_host_to_device)
    return results


def _sklearn_nystroem(Xd, Xe, X_eval, c, gamma, k, repeats, sync):
    """scikit-learn's ``Nystroem`` + ``PCA`` with ``array_api_dispatch`` on the device tensors."""
    try:
        import sklearn
        from sklearn.decomposition import PCA
        from sklearn.kernel_approximation import Nystroem
        from sklearn.pipeline import make_pipeline

        def fit():
            with sklearn.config_context(array_api_dispatch=True):
                return make_pipeline(
                    Nystroem(gamma=gamma, n_components=c, random_state=0),
                    PCA(k, svd_solver="covariance_eigh"),
                ).fit(Xd)

        t, _, pipe = _best(fit, repeats, sync)
        with sklearn.config_context(array_api_dispatch=True):
            Z = pipe.transform(Xe)
        return {
            "sklearn_array_api_seconds": t,
            "sklearn_array_api_error": _held_out_error(Z, X_eval, gamma),
        }
    except Exception as exc:  # needs SCIPY_ARRAY_API=1 and array-api-compat
        return {"sklearn_array_api_error_message": f"{type(exc).__name__}: {exc}"}


def _machine(dev):
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(dev),
        "cpus": os.cpu_count(),
    }
    if dev.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(dev)
    return info


def main(argv=None):
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=None, help="cases to run (default: all)")
    p.add_argument("--gram-n", type=int, default=10**6)
    p.add_argument("--host-n", type=int, default=10**7)
    p.add_argument("--exact-large-n", type=int, default=10**6)
    p.add_argument("--out", default=os.path.join(RESULTS, "bench_gpu.json"))
    args = p.parse_args(argv)
    os.environ.setdefault("SCIPY_ARRAY_API", "1")
    results = run(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2, default=float)
    print("results:", args.out)


if __name__ == "__main__":
    main()
