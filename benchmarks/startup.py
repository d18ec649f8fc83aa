"""Start-up time of the command line (issue 14): `hgplan --version` and `hgplan validate` on every shipped example
fleet, each run N times as a fresh process; prints the medians against the targets (0.3 s, 0.5 s).

    python benchmarks/startup.py [--runs 11]

Exit 1 when a median misses its target. Run it on an idle machine: a busy one measures the other work.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGETS_S = {"--version": 0.3, "validate": 0.5}


def _median_s(args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hgplan.cli", *args], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args()
    from hgplan.io import catalog

    fleets = sorted(catalog().cluster_texts)
    cases = [("--version", ["--version"])] + [("validate", ["validate", name]) for name in fleets]
    missed = 0
    print(f"{'command':<34} {'median s':>9} {'target s':>9}")
    for kind, argv in cases:
        median = _median_s(argv, args.runs)
        ok = median <= TARGETS_S[kind]
        missed += not ok
        print(f"hgplan {' '.join(argv):<27} {median:>9.3f} {TARGETS_S[kind]:>9.1f}{'' if ok else '  MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
