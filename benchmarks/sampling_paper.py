"""Sampling paper (Achlioptas, McSherry & Schoelkopf 2001): measured errors against its bounds.

"Sampling techniques for kernel methods" (NIPS 2001), on real data (Gaussian kernel, gamma =
1 / (d var(X)), features z-scored; mnist pixels scaled to [0, 1]):

1. Section 3, Gram sampling (keep w.p. p = 1/s, scale by s), 1-bit quantization (+-b, b =
   max |K_ij|) and both, built by ``fastkpca.decomposition.sparsified.sparsify_gram`` (which keeps
   the diagonal exactly): the measured ``||E||_2 = ||K^ - K||_2`` against Theorem 1 (Furedi-
   Komlos, ``4 sigma sqrt(n)``, ``noise_norm_bound``), the lower bound ``||E||_F / sqrt(n)``
   (paper, after Theorem 1) and fastkpca's own estimate ``SparsifiedGram.noise_norm()``; the
   theorem's condition ``max |E_ij| <= sigma sqrt(n) / ln^3 n`` and the smallest n at which it
   could hold for that s.
2. Section 3, Theorems 2-3 (Davis-Kahan): the top-l eigenvectors F^ of K^ against those of K,
   ``||F^^T F_perp||_2`` (sin of the largest principal angle) against ``||E|| / (lambda^_l -
   lambda_{l+1})`` (Theorem 2 with t = lambda^_l, b = lambda^_l - lambda_{l+1}), and the a-priori
   version with the Furedi-Komlos value in place of ||E||; whether Theorem 3's gap condition
   ``lambda_l - lambda_{l+1} > 2 ||E||`` holds; eigenvalue errors against Weyl's ``||E||``.  The
   paper's K is the uncentered Gram; so is this one.
3. Section 4, randomized rounding of a kernel expansion ``f(x) = sum_i a_i k(x, x_i)`` (a a unit
   eigenvector of K; ``fastkpca.decomposition.compress.round_coefficients``): the error
   ``|f~(x) - f(x)|`` at held-out x over 20 draws against Hoeffding's bound (paper eq. (1)) at
   95 %: ``c sqrt(m_r ln(2 / 0.05) / 2) / s`` (c = 1, the range of the Gaussian kernel; m_r the
   number of rounded coefficients), and the number of kept terms against ``s sum |a_i|``.
4. Section 5, Theorem 6 (mnist only): +-1 random projections to q dimensions; the largest
   relative distortion of squared distances over all pairs of 1000 points, against the eps the
   theorem guarantees at that q (beta = 1; none when q < 6 (4 + 2 beta) ln n).

Usage::

    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/sampling_paper.py --quick  # ~1 min
    flock /tmp/fastkpca-bench.lock .venv/bin/python benchmarks/sampling_paper.py          # ~8 min

Results: ``benchmarks/results/sampling_paper[_quick].json``, ``sampling_paper_<data>[_quick].png``
and ``sampling_paper_projection[_quick].png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "2")

import numpy as np  # noqa: E402
import scipy.linalg as la  # noqa: E402
from scipy.optimize import brentq  # noqa: E402
from scipy.sparse.linalg import eigsh  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, results_dir, save_json  # noqa: E402

from fastkpca.datasets import load  # noqa: E402
from fastkpca.decomposition.compress import round_coefficients, sign_projection  # noqa: E402
from fastkpca.decomposition.sparsified import noise_norm_bound, sparsify_gram  # noqa: E402
from fastkpca.kernels import make_kernel  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(results_dir())
ELLS = (1, 5, 10)
MODES = {"sample": False, "quantize": True, "both": True}
DELTA = 0.05


def _data(name, n, n_test, seed=0):
    X, _ = load(name, max_rows=10000 if name == "mnist" else None)
    X = np.asarray(X, dtype=np.float64)
    if name == "mnist":
        X = X / 255.0
    else:
        sd = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    idx = np.random.default_rng(seed).permutation(len(X))
    n = min(n, len(X) - n_test)
    return X[idx[:n]], X[idx[n : n + n_test]]


def fk_condition_min_n(s, quantize, both):
    """Smallest n with ``max |E_ij| <= sigma sqrt(n) / ln^3 n`` (Theorem 1's size condition).

    In units of b: sampling has max |E_ij| = max(s - 1, 1), sigma = sqrt(s - 1); quantization
    max 2, sigma 1; both max s + 1, sigma sqrt(s).
    """
    if both:
        top, sigma = s + 1.0, np.sqrt(s)
    elif quantize:
        top, sigma = 2.0, 1.0
    else:
        if s <= 1:
            return None
        top, sigma = max(s - 1.0, 1.0), np.sqrt(s - 1.0)

    def gap(log_n):
        return sigma * np.exp(log_n / 2) / log_n**3 - top

    # sqrt(n) / ln^3 n decreases up to ln n = 6 and increases after: the root is beyond that
    return float(np.exp(brentq(gap, 6.0, 400.0)))


def _sin_theta(F, Fh):
    smin = la.svdvals(Fh.T @ F).min()
    return float(np.sqrt(max(0.0, 1.0 - smin**2)))


def gram_part(X, kernel, probs, reps, log):
    n = len(X)
    K = np.asarray(kernel(X), dtype=np.float64)
    lam, V = la.eigh(K, subset_by_index=[n - max(ELLS) - 1, n - 1])
    lam, V = lam[::-1], V[:, ::-1]
    b = float(np.max(np.abs(K)))
    rows = []
    for mode, quantize in MODES.items():
        for p in probs:
            # quantization alone keeps every entry; sampling with p = 1 is K itself
            if (mode == "quantize") != (p >= 1.0):
                continue
            s = 1.0 / p
            for rep in range(reps):
                G = sparsify_gram(X, kernel, p, quantize=quantize, rng=1000 * rep + 7)
                Kh = (G.upper + G.upper.T).toarray() * G.scale
                Kh[np.diag_indices(n)] += G.diag
                E = Kh - K
                norm_e = float(abs(eigsh(E, k=1, which="LM", return_eigenvectors=False)[0]))
                lamh, Vh = eigsh(Kh, k=max(ELLS) + 1, which="LA")
                order = np.argsort(lamh)[::-1]
                lamh, Vh = lamh[order], Vh[:, order]
                fk = noise_norm_bound(n, p, b, quantize)
                sigma = fk / (4.0 * np.sqrt(n))
                row = {
                    "mode": mode,
                    "p": p,
                    "rep": rep,
                    "norm_E": norm_e,
                    "fk_bound": float(fk),
                    "frobenius_lower": float(np.linalg.norm(E) / np.sqrt(n)),
                    "noise_norm_estimate": float(G.noise_norm()),
                    "max_abs_E": float(np.max(np.abs(E))),
                    "fk_condition_rhs": float(sigma * np.sqrt(n) / np.log(n) ** 3),
                    "fk_condition_min_n": fk_condition_min_n(s, quantize, mode == "both"),
                    "eig": {},
                }
                for ell in ELLS:
                    sin_t = _sin_theta(V[:, :ell], Vh[:, :ell])
                    gap_h = lamh[ell - 1] - lam[ell]
                    gap = lam[ell - 1] - lam[ell]
                    row["eig"][str(ell)] = {
                        "sin_theta": sin_t,
                        "dk_bound": float(norm_e / gap_h) if gap_h > 0 else float("inf"),
                        "dk_bound_a_priori": float(fk / (gap - fk)) if gap > fk else float("inf"),
                        "theorem3_gap_holds": bool(gap > 2 * norm_e),
                        "gap": float(gap),
                        "eigenvalue_error": float(np.max(np.abs(lamh[:ell] - lam[:ell]))),
                    }
                rows.append(row)
            e5 = row["eig"]["5"]
            est = row["noise_norm_estimate"]
            log(
                f"  {mode} p={p}: ||E||={norm_e:.3g} FK={fk:.3g} est={est:.3g}"
                f" sin5={e5['sin_theta']:.3g} DK5={e5['dk_bound']:.3g}"
            )
    return {"n": n, "b": b, "eigenvalues": lam.tolist(), "rows": rows}, K, lam, V


def rounding_part(X, Xt, kernel, V, fractions, draws, rng):
    kx = np.asarray(kernel(Xt, X), dtype=np.float64)
    rows = []
    for comp in (0, 4):
        a = V[:, comp]
        f = kx @ a
        for r in fractions:
            errs, kept = [], []
            for _ in range(draws):
                keep, coef, s, probs = round_coefficients(a[:, None], r, rng)
                errs.append(kx[:, keep] @ coef[:, 0] - f)
                kept.append(keep.size)
            errs = np.abs(np.asarray(errs))
            rounded = probs < 1.0
            m_r = int(np.count_nonzero(rounded))
            scale = np.sqrt(np.log(2.0 / DELTA) / 2.0)
            bound = scale * np.sqrt(m_r) / s if s else 0.0
            sharp = scale * np.sqrt((kx[:, rounded] ** 2).sum(axis=1)) / s if s else 0.0 * f
            rows.append(
                {
                    "component": comp + 1,
                    "fraction": r,
                    "s": s,
                    "mean_kept": float(np.mean(kept)),
                    "kept_bound_s_l1": float(s * np.abs(a).sum()) if s else float(len(a)),
                    "m_rounded": m_r,
                    "err_q95": float(np.quantile(errs, 0.95)),
                    "err_max": float(errs.max()),
                    "hoeffding_bound": float(bound),
                    "frac_over_bound": float(np.mean(errs > bound)),
                    "frac_over_sharp": float(np.mean(errs > sharp[None, :])),
                    "median_abs_f": float(np.median(np.abs(f))),
                    "rms_f": float(np.sqrt(np.mean(f**2))),
                }
            )
    return rows


def projection_part(X, qs, beta=1.0, rng=None):
    n = len(X)
    sq = np.sum(X * X, axis=1)
    D = sq[:, None] + sq[None, :] - 2 * X @ X.T
    iu = np.triu_indices(n, 1)
    D = D[iu]
    ok = D > 1e-9
    rows = []
    for q in qs:
        P = sign_projection(X.shape[1], q, rng)
        Y = X @ P
        sy = np.sum(Y * Y, axis=1)
        Dy = (sy[:, None] + sy[None, :] - 2 * Y @ Y.T)[iu]
        eps = float(np.max(np.abs(Dy[ok] / D[ok] - 1.0)))

        def need(e, q=q):
            return (4 + 2 * beta) * np.log(n) / (e**2 / 2 - e**3 / 3) - q

        guaranteed = float(brentq(need, 1e-6, 1.0)) if need(1.0) < 0 else None
        rows.append({"q": q, "measured_eps": eps, "theorem6_eps": guaranteed})
    return {"n": n, "beta": beta, "rows": rows}


def plot(name, res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    ax = axes[0]
    colors = {"sample": "C0", "quantize": "C1", "both": "C2"}
    for mode, c in colors.items():
        rows = [r for r in res["gram"]["rows"] if r["mode"] == mode]
        ps = sorted({r["p"] for r in rows})

        def mean(key, rows=rows, ps=ps):
            return [np.mean([r[key] for r in rows if r["p"] == p]) for p in ps]

        ax.loglog(
            ps,
            mean("norm_E"),
            "o-" if len(ps) > 1 else "o",
            color=c,
            label=f"{mode}: measured ||E||_2",
        )
        ax.loglog(
            ps, mean("fk_bound"), "--", color=c, label=f"{mode}: Furedi-Komlos 4 sigma sqrt(n)"
        )
        ax.loglog(ps, mean("frobenius_lower"), ":", color=c, lw=1)
    ax.set_xlabel("sample probability p = 1/s")
    ax.set_ylabel("||K^ - K||_2")
    ax.set_title(f"{name} (n={res['gram']['n']}): Theorem 1 (dotted: ||E||_F / sqrt n)")
    ax.legend(fontsize=6)
    ax = axes[1]
    for mode, c in colors.items():
        rows = [r for r in res["gram"]["rows"] if r["mode"] == mode]
        ps = sorted({r["p"] for r in rows})
        for ell, mk in (("1", "s"), ("5", "o")):
            st = [np.mean([r["eig"][ell]["sin_theta"] for r in rows if r["p"] == p]) for p in ps]
            dk = [np.mean([r["eig"][ell]["dk_bound"] for r in rows if r["p"] == p]) for p in ps]
            ax.loglog(ps, st, mk + "-", color=c, label=f"{mode} l={ell}: sin theta")
            ax.loglog(ps, np.clip(dk, 1e-4, 1e3), mk + "--", color=c, lw=1, mfc="none")
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xlabel("sample probability p = 1/s")
    ax.set_ylabel("||F^T F_perp||_2 (dashed: Davis-Kahan bound)")
    ax.set_title("Theorem 2: top-l eigenvectors")
    ax.legend(fontsize=6)
    ax = axes[2]
    for comp, c in ((1, "C3"), (5, "C4")):
        rows = [r for r in res["rounding"] if r["component"] == comp]
        fr = [r["fraction"] for r in rows]
        ax.loglog(fr, [r["err_q95"] for r in rows], "o-", color=c, label=f"f_{comp}: 95 % error")
        ax.loglog(fr, [r["hoeffding_bound"] for r in rows], "--", color=c, label="Hoeffding (1)")
        ax.loglog(fr, [r["rms_f"] for r in rows], ":", color=c, lw=1, label="rms |f(x)|")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("expected fraction of expansion terms kept")
    ax.set_ylabel("|f~(x) - f(x)| at held-out x")
    ax.set_title("Section 4: randomized rounding")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_projection(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    qs = [r["q"] for r in res["rows"]]
    ax.loglog(qs, [r["measured_eps"] for r in res["rows"]], "o-", label="measured max distortion")
    g = [(r["q"], r["theorem6_eps"]) for r in res["rows"] if r["theorem6_eps"] is not None]
    if g:
        ax.loglog(*zip(*g, strict=True), "s--", label="Theorem 6 eps (beta = 1)")
    ax.set_xlabel("projection dimension q")
    ax.set_ylabel("max |D~ / D - 1| over pairs")
    ax.set_title(f"mnist, n = {res['n']}: +-1 projections")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about 1 min")
    args = parser.parse_args(argv)
    if args.quick:
        sets = {"pendigits": 600, "cpu_act": 600}
        probs, reps, draws = (1.0, 0.3, 0.1, 0.03), 1, 10
        fractions, qs = (0.3, 0.1, 0.03), (32, 128, 512)
    else:
        sets = {"pendigits": 2000, "cpu_act": 2000, "german": 800, "mnist": 2000}
        probs, reps, draws = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01), 2, 20
        fractions, qs = (0.5, 0.2, 0.1, 0.05, 0.02), (16, 32, 64, 128, 256, 512)
    suffix = "_quick" if args.quick else ""
    t0 = time.perf_counter()
    result = {"benchmark": "sampling_paper", "quick": args.quick, "machine": machine_info()}
    result["datasets"] = {}
    rng = np.random.default_rng(0)
    for name, n in sets.items():
        X, Xt = _data(name, n, 200 if name == "german" else 500)
        kernel = make_kernel("rbf", gamma="scale", X=X)
        print(f"{name}: n={len(X)} gamma={kernel.gamma:.3g}", flush=True)
        gram, K, lam, V = gram_part(X, kernel, probs, reps, lambda s: print(s, flush=True))
        res = {"gram": gram, "kernel_gamma": float(kernel.gamma)}
        res["rounding"] = rounding_part(X, Xt, kernel, V, fractions, draws, rng)
        for r in res["rounding"]:
            print(
                f"  round f{r['component']} r={r['fraction']}: q95={r['err_q95']:.3g} "
                f"bound={r['hoeffding_bound']:.3g} over={r['frac_over_bound']:.3f}"
            )
        result["datasets"][name] = res
        plot(name, res, RESULTS / f"sampling_paper_{name}{suffix}.png")
        del K
    Xm, _ = _data("mnist", 1000, 10)
    result["projection"] = projection_part(Xm, qs, rng=rng)
    print(result["projection"])
    plot_projection(result["projection"], RESULTS / f"sampling_paper_projection{suffix}.png")
    result["seconds"] = time.perf_counter() - t0
    save_json(result, RESULTS / f"sampling_paper{suffix}.json")
    print(f"done in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
