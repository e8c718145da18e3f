"""Kernel rows of sparse rows against 1000 landmarks kept dense or CSR, by width.

The crossover behind ``fastkpca.execution.budget.SPARSE_LANDMARKS_MIN_FEATURES``: narrow sparse
rows multiply a dense landmark factor faster (sparse x dense), wide ones a sparse one (sparse x
sparse, and no O(c d) dense landmarks).  Random CSR rows, best of ``--repeat`` runs each.

    python benchmarks/bench_sparse_landmarks.py [--rows 20000] [--repeat 3]
    python benchmarks/bench_sparse_landmarks.py --quick   # 2000 rows, 200 landmarks, once
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from fastkpca.execution.kernel_ops import kernel_matmat
from fastkpca.kernels import RBF

#: (features, non-zeros a row)
WIDTHS = [(123, 14), (1024, 30), (4096, 50), (16384, 80)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--landmarks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2000 rows, 200 landmarks, once")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.landmarks, args.repeat = 2000, 200, 1
    rng = np.random.default_rng(0)
    print(f"{'features':>9} {'dense s':>8} {'sparse s':>9} {'dense/sparse':>13}")
    for d, nnz in WIDTHS:
        X = sp.random(args.rows, d, density=nnz / d, random_state=0, format="csr")
        idx = np.sort(rng.choice(args.rows, args.landmarks, replace=False))
        V = rng.standard_normal((args.landmarks, 10))
        times = {}
        for name, L in (("dense", X[idx].toarray()), ("sparse", X[idx])):
            best = np.inf
            for _ in range(args.repeat):
                start = time.perf_counter()
                kernel_matmat(RBF(0.05), X, L, V)
                best = min(best, time.perf_counter() - start)
            times[name] = best
        ratio = times["dense"] / times["sparse"]
        print(f"{d:>9} {times['dense']:>8.2f} {times['sparse']:>9.2f} {ratio:>13.2f}")


if __name__ == "__main__":
    main()
