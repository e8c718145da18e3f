"""Best-of-3 in-process fit times of the one-pass estimators, to compare two checkouts.

The data path's "no speed regression" check (issue 10): run the same command against the code
of two revisions, alternating, on the same machine, and compare the seconds it prints::

    git worktree add ../before <rev>
    PYTHONPATH=../before/src .venv/bin/python benchmarks/bench_fit_times.py --label before
    .venv/bin/python benchmarks/bench_fit_times.py --label after
    .venv/bin/python benchmarks/bench_fit_times.py --quick        # seconds (fastkpca bench)

RandomNoisy rows (float32, d = 100), k = 10, gamma = 0.01, m = c = ``--m``.  In-process timing:
no child processes, so the imports and the data are shared and only the fits are timed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="n = 20000, m = 200")
    p.add_argument("--n-samples", type=int, default=200_000)
    p.add_argument("--m", type=int, default=500, help="random features = landmarks")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="", help="printed with the times")
    args = p.parse_args(argv)
    if args.quick:
        args.n_samples, args.m = 20_000, 200
    from fastkpca import NystromKPCA, RandomFeatureKPCA, StreamingKPCA
    from fastkpca.datasets import make_random_noisy

    X = make_random_noisy(args.n_samples, 100, random_state=0).astype(np.float32)
    m = args.m
    cases = {
        "rf_exact": lambda: RandomFeatureKPCA(10, n_random_features=m, gamma=0.01, random_state=0),
        "rf_countsketch": lambda: RandomFeatureKPCA(
            10, n_random_features=m, gamma=0.01, solver="countsketch", random_state=0
        ),
        "streaming_ell20": lambda: StreamingKPCA(
            10, n_random_features=m, sketch_size=20, gamma=0.01, random_state=0
        ),
        "nystrom": lambda: NystromKPCA(10, n_landmarks=m, gamma=0.01, random_state=0),
    }
    times = {}
    for name, make in cases.items():
        best = np.inf
        for _ in range(args.repeats):
            start = time.perf_counter()
            make().fit(X)
            best = min(best, time.perf_counter() - start)
        times[name] = round(best, 3)
    print(args.label, args.n_samples, m, times, flush=True)


if __name__ == "__main__":
    main()
