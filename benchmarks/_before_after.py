"""One benchmark script run on two checkouts in the same run: before and after a change.

Each round runs the script once per checkout, in alternating order (before, after; then after,
before; ...), so that a busy period of a shared machine hits both alike.  Each run is a fresh
interpreter with ``PYTHONPATH`` set to that checkout's ``src`` and its own results folder
(``FASTKPCA_BENCH_RESULTS``); the script is each checkout's own copy (``benchmarks/NAME``), and
its own harness runs every fit in a fresh process.  Per measured entry (a ``rows`` entry of
``bench_goals.py``, a ``table`` entry of ``bench_cores.py``) the best time over the rounds is kept
for each checkout, with the extra peak memory of that run; the table gives both and their
ratio (after / before).

Usage::

    python benchmarks/_before_after.py --before ../old --after . --rounds 2 \\
        bench_goals.py --quick
    python benchmarks/_before_after.py --before ../old --after . \\
        bench_cores.py --cores 1 2 --n-samples 200000 --exact-n 8000 --repeats 1
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import machine_info, results_dir, save_json  # noqa: E402


def _entries(result: dict) -> dict:
    """``name -> (seconds, extra_peak_mb)`` of one results file."""
    out = {}
    rows = result.get("rows")
    if isinstance(rows, dict):
        for name, row in rows.items():
            if isinstance(row, dict) and row.get("ok", True) and "seconds" in row:
                out[name] = (float(row["seconds"]), row.get("extra_peak_mb"))
    table = result.get("table")
    if isinstance(table, dict):
        for name, row in table.items():
            if isinstance(row, dict) and "seconds" in row:
                out[name] = (float(row["seconds"]), row.get("extra_peak_mb"))
    return out


def _run(checkout: str, script_args: list[str], folder: str) -> dict:
    script = os.path.join(checkout, "benchmarks", script_args[0])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.abspath(checkout), "src")
    env["FASTKPCA_BENCH_RESULTS"] = folder
    proc = subprocess.run(
        [sys.executable, script, *script_args[1:]],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"{script} failed in {checkout} (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    files = sorted(glob.glob(os.path.join(folder, "*.json")), key=os.path.getmtime)
    if not files:
        raise SystemExit(f"{script} wrote no results file in {folder}")
    with open(files[-1]) as f:
        return json.load(f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the checkout before the change (its root)")
    p.add_argument("--after", required=True, help="the checkout after the change (its root)")
    p.add_argument("--rounds", type=int, default=2, help="rounds (the best of each is kept)")
    p.add_argument("--quick", action="store_true", help="one round (the script's own --quick)")
    p.add_argument("-o", "--output", default=None, help="results file (JSON)")
    p.add_argument("script", nargs=argparse.REMAINDER, help="benchmark script and its arguments")
    args = p.parse_args(argv)
    if not args.script:
        p.error("name a benchmark script, e.g. bench_goals.py --quick")
    rounds = 1 if args.quick else args.rounds
    checkouts = {"before": args.before, "after": args.after}
    best: dict[str, dict] = {"before": {}, "after": {}}
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                folder = os.path.join(tmp, f"{which}-{r}")
                os.makedirs(folder)
                print(f"round {r + 1}/{rounds}: {which}", flush=True)
                for name, (seconds, peak) in _entries(
                    _run(checkouts[which], args.script, folder)
                ).items():
                    if name not in best[which] or seconds < best[which][name][0]:
                        best[which][name] = (seconds, peak)
    names = [n for n in best["after"] if n in best["before"]]
    table = {}
    header = ("entry", "before s", "after s", "ratio", "MB before", "after")
    print("\n{:<28}{:>10}{:>10}{:>8}{:>11}{:>8}".format(*header))
    for name in names:
        (b, bm), (a, am) = best["before"][name], best["after"][name]
        table[name] = {
            "before_seconds": b,
            "after_seconds": a,
            "ratio": a / b if b > 0 else None,
            "before_extra_peak_mb": bm,
            "after_extra_peak_mb": am,
        }
        bm_s = f"{bm:.0f}" if isinstance(bm, int | float) else "-"
        am_s = f"{am:.0f}" if isinstance(am, int | float) else "-"
        print(f"{name:<28}{b:>10.3f}{a:>10.3f}{a / b:>8.2f}{bm_s:>11}{am_s:>8}")
    out = args.output or os.path.join(
        results_dir(), f"before_after_{os.path.splitext(args.script[0])[0]}.json"
    )
    save_json(
        {
            "machine": machine_info(),
            "command": " ".join(["benchmarks/_before_after.py", *(argv or sys.argv[1:])]),
            "started": started,
            "rounds": rounds,
            "script": args.script,
            "table": table,
        },
        out,
    )
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
